#!/bin/bash
# blockctl against a real blockd: create/list/show/resize/snapshot/clone/
# rollback/delete, persistence across a restart, bad inputs answered with
# clear errors (bad names and sizes, unknown methods, malformed JSON, a
# 100 MB line) while the daemon keeps serving, and exit codes 0/1/2.
. "$(dirname "$0")/lib.sh"
need python3 cmp dd

# run_rc CMD…: run, capturing stdout/stderr in $OUT/$ERR and the status in $RC
run_rc() {
    RC=0
    "$@" >"$TMP/out" 2>"$TMP/err" || RC=$?
    OUT=$(cat "$TMP/out")
    ERR=$(cat "$TMP/err")
}
expect_rc() { # expect_rc WANT what…
    local want=$1
    shift
    [ "$RC" = "$want" ] || fail "$*: exit status $RC, want $want (stderr: $ERR)"
}
json_get() { # json_get EXPR < json
    python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"
}

mkdir -p "$TMP/srv" # a pool outside the state directory: where the operator allows
blockd_start --allow-dir "$TMP/srv"

# ---- create, list, show ----
run_rc blockctl volume create demo/vm1 --size 64M
expect_rc 0 "volume create"
[ "$OUT" = "$(printf 'created\tdemo/vm1')" ] || fail "volume create printed '$OUT'"
run_rc blockctl volume create demo/thick1 --size 1M --blocksize 4K --sync always --thick --readonly
expect_rc 0 "volume create --thick"

run_rc blockctl volume list
expect_rc 0 "volume list"
# (No pipeline here: under pipefail a reader that stops early can fail it.)
[[ ${OUT%%$'\n'*} =~ ^NAME\ +SIZE\ +USED\ +BLOCKSIZE\ +SYNC\ +READONLY ]] ||
    fail "volume list header: $OUT"
grep -Eq '^demo/vm1 +64\.0 MiB .* 16K +STANDARD +OFF +sparse' <<<"$OUT" ||
    fail "volume list row for demo/vm1: $OUT"
grep -Eq '^demo/thick1 +1\.0 MiB .* 4K +ALWAYS +ON +thick' <<<"$OUT" ||
    fail "volume list row for demo/thick1: $OUT"

run_rc blockctl --json volume list
expect_rc 0 "--json volume list"
n=$(echo "$OUT" | json_get 'len([r for r in d if r["type"] == "VOLUME"])')
[ "$n" = 2 ] || fail "--json volume list has $n volumes"

run_rc blockctl --json volume show demo/vm1
expect_rc 0 "volume show"
size=$(echo "$OUT" | json_get 'd["volsize"]["parsed"]')
[ "$size" = $((64 << 20)) ] || fail "volsize $size after create"
VOLPATH=$(echo "$OUT" | json_get 'd["path"]')
[ -f "$VOLPATH" ] || fail "volume file $VOLPATH missing"
run_rc blockctl volume show demo/vm1
expect_rc 0 "volume show (human)"
grep -Eq '^volsize +64\.0 MiB \(67108864 bytes\)' <<<"$OUT" || fail "volume show: $OUT"

# ---- resize ----
run_rc blockctl volume resize demo/vm1 --size 128M
expect_rc 0 "volume resize"
size=$(blockctl --json volume show demo/vm1 | json_get 'd["volsize"]["parsed"]')
[ "$size" = $((128 << 20)) ] || fail "volsize $size after resize"
[ "$(stat -c %s "$VOLPATH")" = $((128 << 20)) ] || fail "file size after resize"

# ---- snapshot, clone, rollback ----
dd if=/dev/urandom of="$TMP/data1" bs=64K count=16 status=none
dd if="$TMP/data1" of="$VOLPATH" bs=64K seek=3 conv=notrunc status=none
run_rc blockctl volume snapshot demo/vm1@s1
expect_rc 0 "volume snapshot"
dd if=/dev/urandom of="$VOLPATH" bs=64K seek=3 count=16 conv=notrunc status=none
run_rc blockctl snapshot list demo/vm1
expect_rc 0 "snapshot list"
grep -Eq '^demo/vm1@s1 +demo/vm1' <<<"$OUT" || fail "snapshot list: $OUT"

run_rc blockctl volume clone demo/vm1@s1 demo/vm1c
expect_rc 0 "volume clone"
CLONEPATH=$(blockctl --json volume show demo/vm1c | json_get 'd["path"]')
dd if="$CLONEPATH" of="$TMP/clone1" bs=64K skip=3 count=16 status=none
cmp -s "$TMP/data1" "$TMP/clone1" || fail "clone content differs from the snapshot"
origin=$(blockctl --json volume show demo/vm1c | json_get 'd["origin"]["value"]')
[ "$origin" = "demo/vm1@s1" ] || fail "clone origin '$origin'"

run_rc blockctl volume rollback demo/vm1@s1
expect_rc 0 "volume rollback"
dd if="$VOLPATH" of="$TMP/rolled" bs=64K skip=3 count=16 status=none
cmp -s "$TMP/data1" "$TMP/rolled" || fail "rollback did not restore the snapshot contents"

# ---- refusals (exit 1, message on stderr) ----
run_rc blockctl volume delete demo/vm1
expect_rc 1 "delete a volume with snapshots"
[ -n "$ERR" ] && grep -q '^blockctl: ' <<<"$ERR" || fail "no error message: '$ERR'"
run_rc blockctl snapshot delete demo/vm1@s1
expect_rc 1 "delete a snapshot with clones"

# ---- restart: everything persisted ----
blockd_stop
# lib.sh waits for "blockd ready" in the log: start the new daemon on a fresh log
mv "$BLOCKD_LOG" "$TMP/blockd-first.log"
blockd_start --allow-dir "$TMP/srv"
run_rc blockctl --json volume list
expect_rc 0 "volume list after restart"
for v in demo/vm1 demo/vm1c demo/thick1; do
    echo "$OUT" | json_get "[r['name'] for r in d]" | grep -q "'$v'" || fail "$v lost on restart"
done
size=$(blockctl --json volume show demo/vm1 | json_get 'd["volsize"]["parsed"]')
[ "$size" = $((128 << 20)) ] || fail "volsize $size after restart"
sync=$(blockctl --json volume show demo/thick1 | json_get 'd["sync"]["value"]')
[ "$sync" = ALWAYS ] || fail "sync $sync after restart"
run_rc blockctl snapshot list demo/vm1
grep -q 'demo/vm1@s1' <<<"$OUT" || fail "snapshot lost on restart"
dd if="$VOLPATH" of="$TMP/after" bs=64K skip=3 count=16 status=none
cmp -s "$TMP/data1" "$TMP/after" || fail "volume contents changed across restart"

# ---- bad inputs: clear errors, daemon keeps serving ----
for bad in 'demo/../x' 'demo//x' '/abs' 'demo/x y' 'nopool/x' "demo/$(printf 'a%.0s' $(seq 300))"; do
    run_rc blockctl volume create "$bad" --size 1M
    expect_rc 1 "volume create '$bad'"
    grep -q 'pool.dataset.create.name' <<<"$ERR" || fail "error for '$bad' names no field: $ERR"
done
run_rc blockctl volume create demo/odd --size 1000
expect_rc 1 "volsize not a multiple of the block size"
grep -q '^blockctl: pool.dataset.create.volsize: ' <<<"$ERR" || fail "volsize error: $ERR"
run_rc blockctl volume create demo/bs --size 1M --blocksize 3K
expect_rc 1 "bad blocksize"
run_rc blockctl volume create demo/x --size 12Q
expect_rc 2 "bad size suffix"
grep -q "invalid size '12Q'" <<<"$ERR" || fail "size error: $ERR"
run_rc blockctl volume create demo/x
expect_rc 2 "missing --size"
run_rc blockctl volume create demo/x --size 1M --sync sometimes
expect_rc 2 "bad --sync"
run_rc blockctl volume frobnicate
expect_rc 2 "unknown subcommand"
run_rc blockctl --bogus volume list
expect_rc 2 "unknown global option"
run_rc blockctl volume show demo/nope
expect_rc 1 "show a missing volume"
grep -q 'demo/nope does not exist' <<<"$ERR" || fail "missing volume error: $ERR"
run_rc blockctl volume snapshot demo/vm1
expect_rc 2 "snapshot name without @"
run_rc blockctl call no.such.method
expect_rc 1 "unknown method"
grep -q 'Method not found: no.such.method' <<<"$ERR" || fail "unknown method error: $ERR"
run_rc blockctl call pool.dataset.create '{"name":"demo/y","type":"VOLUME","volsize":"1G"}'
expect_rc 1 "volsize as a string"
grep -q 'pool.dataset.create.volsize' <<<"$ERR" || fail "type error: $ERR"
run_rc blockctl call pool.dataset.create '{"name":"demo/y","type":"VOLUME","volsize":1048576,"bogus":1}'
expect_rc 1 "unknown key"
grep -q 'Extra inputs are not permitted' <<<"$ERR" || fail "extra key error: $ERR"
run_rc blockctl call pool.dataset.query '[[["name","like","x"]]]'
expect_rc 1 "bad filter"
grep -q 'Invalid operation: like' <<<"$ERR" || fail "bad filter error: $ERR"
run_rc blockctl call core.ping '[not json'
expect_rc 2 "call with bad JSON params"
run_rc blockctl call pool.dataset.query '[[["name","=","demo/vm1"]],{"select":["name","volsize.parsed"]}]'
expect_rc 0 "query with select"
echo "$OUT" | json_get 'd[0]["volsize"]["parsed"]' | grep -qx $((128 << 20)) || fail "select: $OUT"

# Raw socket: malformed JSON, a 100 MB line, then normal calls on the same
# connection, and a second connection served meanwhile.
python3 - "$SOCK" <<'EOF' || fail "raw socket checks"
import json, socket, sys

path = sys.argv[1]
s = socket.socket(socket.AF_UNIX)
s.connect(path)
f = s.makefile("rb")

def reply():
    line = f.readline()
    assert line.endswith(b"\n"), "connection closed"
    return json.loads(line)

s.sendall(b'{"jsonrpc":"2.0","id":1,"method":\n')
r = reply()
assert r["error"]["code"] == -32700, r
s.sendall(b'{"jsonrpc":"2.0","id":2,"method":"core.ping"}\n')
assert reply()["result"] == "pong"

# 100 MB on one line, sent in pieces while a second client is served
chunk = b"x" * (1 << 20)
s.sendall(b'{"jsonrpc":"2.0","id":3,"method":"core.ping","params":["')
for i in range(100):
    s.sendall(chunk)
    if i == 50:
        t = socket.socket(socket.AF_UNIX)
        t.connect(path)
        t.sendall(b'{"jsonrpc":"2.0","id":9,"method":"core.ping"}\n')
        assert json.loads(t.makefile("rb").readline())["result"] == "pong"
        t.close()
s.sendall(b'"]}\n{"jsonrpc":"2.0","id":4,"method":"core.ping"}\n')
r = reply()
assert r["error"]["code"] == -32600, r
assert r["error"]["message"] == "request too large (max 16 MiB)", r
r = reply()
assert r["id"] == 4 and r["result"] == "pong", r

# unknown method and an invalid request, still on this connection
s.sendall(b'{"jsonrpc":"2.0","id":5,"method":"no.such"}\n{"id":6,"method":"core.ping"}\n')
r = reply()
assert r["error"]["code"] == -32601 and "no.such" in r["error"]["message"], r
r = reply()
assert r["error"]["code"] == -32600 and r["id"] == 6, r
s.close()
EOF
blockd_alive || fail "blockd died on bad input"
run_rc blockctl call core.ping
expect_rc 0 "ping after bad input"
[ "$OUT" = '"pong"' ] || fail "ping printed $OUT"
grep -q 'request line over' "$BLOCKD_LOG" || fail "the daemon did not log the long line"
grep -q 'unix:pid=' "$BLOCKD_LOG" || fail "log lines do not name the peer"

# ---- delete ----
run_rc blockctl volume delete demo/vm1c
expect_rc 0 "delete the clone"
run_rc blockctl snapshot delete demo/vm1@s1
expect_rc 0 "delete the snapshot"
run_rc blockctl volume snapshot demo/vm1@s2
expect_rc 0 "second snapshot"
run_rc blockctl volume delete demo/vm1 --recursive
expect_rc 0 "recursive delete"
[ ! -e "$VOLPATH" ] || fail "volume file left behind"
run_rc blockctl volume delete demo/thick1
expect_rc 0 "delete thick1"
run_rc blockctl --json volume list
[ "$(echo "$OUT" | json_get 'len(d)')" = 0 ] || fail "volumes left: $OUT"

# ---- pools ----
run_rc blockctl pool create p2 --path "$TMP/srv/p2dir"
expect_rc 0 "pool create"
run_rc blockctl pool list
grep -Eq "^p2 +$TMP/srv/p2dir" <<<"$OUT" || fail "pool list: $OUT"
run_rc blockctl volume create p2/v --size 1M
expect_rc 0 "volume in the new pool"
run_rc blockctl pool create 'bad/name'
expect_rc 1 "bad pool name"

blockd_stop
pass
