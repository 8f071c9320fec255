#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Persistent reservations shared by two blockd daemons serving the same RBD
# image: A on 127.0.0.2 and B on 127.0.0.3, separate state dirs,
# one throwaway Ceph cluster, the same target and LUN on both.
#   - SPC-2 RESERVE(6) through A is enforced by B, and released by a logout;
#   - REGISTER (ALL_TG_PT) + RESERVE (Write Exclusive) through A: a write from
#     another initiator through B gets RESERVATION CONFLICT at once; PR IN
#     through B shows A's keys and reservation; the holder releases through B;
#   - 16 REGISTERs at once, half through each daemon: none is lost;
#   - kill -9 A: the reservation still holds through B, and B can still
#     change it;
#   - APTPL: with no daemon left serving the LU (a power loss of the group),
#     registrations without APTPL are gone and those with APTPL stay;
#   - iscsi-test-cu's reservation suites with one URL through each daemon.
# Both are members of gateway group "test": the share made through A's API
# reaches B through the group's configuration store.
. "$(dirname "$0")/lib.sh"
need iscsi-test-cu python3 timeout
PR_TOOL=$BUILD/tests/tools/pr_tool
[ -x "$PR_TOOL" ] || fail "missing $PR_TOOL (libiscsi-dev not found at build time?)"
ceph_start

PORT=$(free_port)
NBD_A=$(free_port)
NBD_B=$(free_port)
IQN=iqn.2026-11.org.blockd:gw
URL_A="iscsi://127.0.0.2:$PORT/$IQN/0"
URL_B="iscsi://127.0.0.3:$PORT/$IQN/0"
INI=iqn.2026-11.org.blockd.test
PID_A=
PID_B=

# start_member NAME ADDR NBD_PORT: member NAME of gateway group "test"
# (a → id 1, b → id 2: each its own relative target port id) on state dir
# $TMP/NAME; waits until it serves the LU, unless NOWAIT=1.
start_member() {
    local name=$1 addr=$2 nbd=$3 log=$TMP/$1.log before=0 id=1
    [ "$name" = b ] && id=2
    [ -f "$log" ] && before=$(wc -l <"$log")
    "$BLOCKD_BIN" --state-dir "$TMP/$name" --log-level info --nbd-listen "$addr:$nbd" \
        --iscsi-listen "$addr:$PORT" --gateway-group test --gateway-id "$id" \
        --gateway-name "$name" --gateway-ceph-conf "$CEPH_CONF" --gateway-pool "$CEPH_POOL" --allow-dir "$(dirname "$CEPH_CONF")" \
        >>"$log" 2>&1 &
    local pid=$!
    BG_PIDS+=("$pid")
    eval "PID_${name^^}=$pid"
    for _ in $(seq 1 300); do
        tail -n +"$((before + 1))" "$log" | grep -q "blockd ready" && break
        kill -0 "$pid" 2>/dev/null || fail "$name exited during start-up: $(tail -5 "$log")"
        sleep 0.05
    done
    tail -n +"$((before + 1))" "$log" | grep -q "blockd ready" || fail "$name did not start"
    [ "${NOWAIT:-}" = 1 ] && return 0
    # The RBD pool connects in the background: wait until the LU is served.
    for _ in $(seq 1 100); do
        tail -n +"$((before + 1))" "$log" | grep -q "reservations shared through" && break
        sleep 0.1
    done
    tail -n +"$((before + 1))" "$log" | grep -q "reservations shared through" ||
        fail "$name: the LU did not come up with shared reservations: $(tail -5 "$log")"
}

stop_member() { # SIGTERM, exit 0
    local pid=$1 rc=0
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    [ "$rc" = 0 ] || fail "a member exited with $rc on SIGTERM"
}

ctl() { # ctl NAME args...: blockctl on member NAME
    local name=$1
    shift
    "$BLOCKCTL_BIN" --socket "$TMP/$name/blockd.sock" "$@"
}

# pr URL INITIATOR ISID OP...: prints the tool's lines.
pr() {
    local url=$1 ini=$2 isid=$3
    shift 3
    PR_TOOL_ISID=$isid timeout 60 "$PR_TOOL" "$url" "$INI:$ini" "$@" || fail "pr_tool $* failed"
}

# expect WANT URL INITIATOR ISID OP...: the last line of output is WANT.
expect() {
    local want=$1 got i
    shift
    # A unit attention (sense key 6: e.g. 2A/06 when a member's death or
    # return moves the optimized path) means the command did not run: an
    # initiator sends it again, and so does this (at most 3 times).
    for i in 1 2 3; do
        got=$(pr "$@" | tail -n 1)
        [[ "$got" == "CHECK 6/"* && "$want" != "CHECK 6/"* ]] || break
    done
    [ "$got" = "$want" ] || fail "$(printf '%s ' "$@"): got '$got', want '$want'"
}

# ---- the share, made through A's API; B gets it from the group ----
NOWAIT=1 start_member a 127.0.0.2 "$NBD_A"
ctl a call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" >/dev/null ||
    fail "pool.create on A"
ctl a call pool.dataset.create '{"name":"ceph/gw","type":"VOLUME","volsize":67108864}' >/dev/null ||
    fail "dataset create on A"
target=$(ctl a call iscsi.target.create '{"name":"gw","groups":[]}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
extent=$(ctl a call iscsi.extent.create '{"name":"gw","disk":"zvol/ceph/gw","blocksize":512}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
ctl a call iscsi.targetextent.create "{\"target\":$target,\"extent\":$extent,\"lunid\":0}" >/dev/null
for _ in $(seq 1 100); do
    grep -q "reservations shared through" "$TMP/a.log" && break
    sleep 0.1
done
grep -q "reservations shared through" "$TMP/a.log" || fail "A does not serve the LU"

# B is a member of the same group with the same RBD pool: the group's
# configuration store gives it the target, the extent (adopting the
# volume) and the LUN, with the group's identity (serial and NAA from the
# image) and its own relative target port id (--gateway-id 2).
NOWAIT=1 start_member b 127.0.0.3 "$NBD_B"
ctl b call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" >/dev/null ||
    fail "pool.create on B"
for _ in $(seq 1 100); do
    grep -q "reservations shared through" "$TMP/b.log" && break
    sleep 0.1
done
grep -q "reservations shared through" "$TMP/b.log" ||
    fail "B did not get the share from the group: $(tail -5 "$TMP/b.log")"
grep -q "0 other daemons serving it" "$TMP/a.log" || fail "A should be the first to serve the LU"
grep -q "1 other daemon serving it" "$TMP/b.log" || fail "B should see A serving the LU"

# ---- SPC-2 RESERVE / RELEASE across members ----
rm -f "$TMP/r1" "$TMP/r2"
pr "$URL_A" spc2 9 reserve6 "signal:$TMP/r1" "wait:$TMP/r2" release6 >"$TMP/spc2.out" &
holder=$!
for _ in $(seq 1 300); do [ -f "$TMP/r1" ] && break; sleep 0.1; done
[ -f "$TMP/r1" ] || fail "RESERVE(6) through A did not happen"
expect CONFLICT "$URL_B" other 2 write:0
expect CONFLICT "$URL_B" other 2 reserve6
expect CONFLICT "$URL_B" other 2 read:1 # SPC-2: reads too
touch "$TMP/r2"
wait "$holder" || fail "the RESERVE(6) holder failed"
[ "$(sed -n 1p "$TMP/spc2.out")" = GOOD ] || fail "RESERVE(6) through A: $(cat "$TMP/spc2.out")"
[ "$(tail -n 1 "$TMP/spc2.out")" = GOOD ] || fail "RELEASE(6) through A: $(cat "$TMP/spc2.out")"
expect GOOD "$URL_B" other 2 write:0
# A logout (nexus loss) through A releases it for B too (an asynchronous
# update: give it a moment).
expect GOOD "$URL_A" spc2 9 reserve6
ok=
for _ in $(seq 1 50); do
    [ "$(pr "$URL_B" other 2 write:0 | tail -n 1)" = GOOD ] && ok=1 && break
    sleep 0.1
done
[ -n "$ok" ] || fail "B still enforces an SPC-2 reservation whose holder logged out of A"

# ---- persistent reservation made through A, enforced by B ----
expect GOOD "$URL_A" holder 1 register:0xa1:all
expect GOOD "$URL_A" holder 1 reserve:0xa1:1
expect CONFLICT "$URL_B" other 2 write:0
expect GOOD "$URL_B" other 2 read:0
expect CONFLICT "$URL_A" other 2 write:0
expect "keys gen=1 a1" "$URL_B" other 2 readkeys
expect "res gen=1 key=a1 type=1" "$URL_B" other 2 readres
# The holder's registration covers every target port (ALL_TG_PT): through B
# it is the holder too; another ISID of the same initiator is not.
expect GOOD "$URL_B" holder 1 write:0
expect CONFLICT "$URL_B" holder 3 write:0
expect GOOD "$URL_B" holder 1 release:0xa1:1
expect "res gen=1 none" "$URL_A" other 2 readres
expect GOOD "$URL_A" other 2 write:0
expect GOOD "$URL_B" other 2 write:0
# A registration without ALL_TG_PT is one target port's: through B the
# same initiator port is another I_T nexus.
expect GOOD "$URL_A" porta 4 register:0xb1
expect CONFLICT "$URL_B" porta 4 reserve:0xb1:1
expect GOOD "$URL_A" porta 4 reserve:0xb1:3
expect CONFLICT "$URL_B" porta 4 read:0
expect GOOD "$URL_A" porta 4 read:0
expect GOOD "$URL_A" porta 4 release:0xb1:3
expect GOOD "$URL_A" porta 4 unregister:0xb1

# ---- concurrent REGISTERs through both members: none lost ----
pids=()
for i in $(seq 1 8); do
    pr "$URL_A" "ca$i" $((100 + i)) "register:0xc$i" >"$TMP/ca$i.out" &
    pids+=($!)
    pr "$URL_B" "cb$i" $((200 + i)) "register:0xd$i" >"$TMP/cb$i.out" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a concurrent REGISTER failed"; done
for i in $(seq 1 8); do
    [ "$(cat "$TMP/ca$i.out")" = GOOD ] || fail "REGISTER ca$i: $(cat "$TMP/ca$i.out")"
    [ "$(cat "$TMP/cb$i.out")" = GOOD ] || fail "REGISTER cb$i: $(cat "$TMP/cb$i.out")"
done
for url in "$URL_A" "$URL_B"; do
    keys=$(pr "$url" other 2 readkeys)
    for i in $(seq 1 8); do
        for k in a1 "c$i" "d$i"; do
            grep -qw "$k" <<<"$keys" || fail "key $k lost ($url: $keys)"
        done
    done
    [ "$(wc -w <<<"$keys")" = 19 ] || fail "expected 17 keys, got: $keys"
done
races=$(cat "$TMP/a.log" "$TMP/b.log" | grep -c "lost a race" || true)
echo "concurrent REGISTERs: 16 of 16 kept ($races compare-and-swap retries)"

# ---- kill -9 A: the reservation holds through B ----
expect GOOD "$URL_A" holder 1 reserve:0xa1:1
kill -KILL "$PID_A"
t_kill=$(date +%s)
wait "$PID_A" 2>/dev/null || true
expect CONFLICT "$URL_B" other 2 write:0
expect "res gen=19 key=a1 type=1" "$URL_B" other 2 readres
# B can still change the state (its notify waits for A's watch to time out).
t0=$(date +%s)
expect GOOD "$URL_B" late 5 register:0xe1
t1=$(date +%s)
echo "PR OUT through B right after A died: $((t1 - t0)) s"
expect CONFLICT "$URL_B" late 5 write:0

# ---- APTPL: the group loses power when no member serves the LU ----
# Without APTPL: stop B too; once A's watch is gone (the OSD drops it
# RBD_PR_WATCH_TIMEOUT_S = 10 s after the kill) nobody serves the LU, and
# the next daemon to serve it starts without the registrations.
stop_member "$PID_B"
now=$(date +%s)
[ $((t_kill + 12 - now)) -le 0 ] || sleep $((t_kill + 12 - now))
start_member b 127.0.0.3 "$NBD_B"
tail -n 30 "$TMP/b.log" | grep -q "0 other daemons serving it" || fail "B should be alone now"
tail -n 30 "$TMP/b.log" | grep -q "registrations without APTPL cleared" ||
    fail "B did not clear the registrations at the group's power on"
pr "$URL_B" other 2 readkeys | grep -Eq '^keys gen=[0-9]+$' ||
    fail "registrations without APTPL survived a power loss of the group: $(pr "$URL_B" other 2 readkeys)"
expect "res gen=20 none" "$URL_B" other 2 readres
# With APTPL (the last REGISTER's bit applies to every registration).
expect GOOD "$URL_B" aptpl 6 register:0xf1:aptpl
expect GOOD "$URL_B" aptpl 6 reserve:0xf1:1
stop_member "$PID_B"
start_member b 127.0.0.3 "$NBD_B"
tail -n 30 "$TMP/b.log" | grep -q "0 other daemons serving it" || fail "B should be alone"
expect "keys gen=21 f1" "$URL_B" other 2 readkeys
expect "res gen=21 key=f1 type=1" "$URL_B" other 2 readres
expect CONFLICT "$URL_B" other 2 write:0
expect GOOD "$URL_B" aptpl 6 release:0xf1:1
expect GOOD "$URL_B" aptpl 6 unregister:0xf1
start_member a 127.0.0.2 "$NBD_A"
# Let the group settle before iscsi-test-cu: A's rejoin changes the ALUA
# view (2A/06 ASYMMETRIC ACCESS STATE CHANGED on the nexuses of that
# moment), which the suites would take for a failure. Both members see
# each other ONLINE, then two membership rounds.
for _ in $(seq 1 100); do
    n=$(ctl b call gateway.query '[[["state","=","ONLINE"]]]' |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
    m=$(ctl a call gateway.query '[[["state","=","ONLINE"]]]' |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
    [ "$n" = 2 ] && [ "$m" = 2 ] && break
    sleep 0.1
done
[ "$n" = 2 ] && [ "$m" = 2 ] || fail "A and B do not see each other ONLINE after A's restart"
sleep 2

# ---- iscsi-test-cu's reservation suites, one URL per member ----
OUT=$TMP/iscsi-test-cu.txt
rc=0
# GW_PR_CU_TESTS=ALL runs every test (minutes longer; not in make check).
timeout 1200 iscsi-test-cu --dataloss --allow-sanitize -i "$INI:cu1" -I "$INI:cu2" \
    -t "${GW_PR_CU_TESTS:-ALL.Prin*,ALL.Prout*,ALL.Reserve6*,ALL.MultipathIO*}" "$URL_A" "$URL_B" \
    >"$OUT" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "iscsi-test-cu exited with $rc: $(tail -5 "$OUT")"
summary=$(grep -A8 "Run Summary" "$OUT" | grep -E "tests|asserts" || true)
failed=$(awk '/^ *tests/ {print $5}' <<<"$summary")
echo "iscsi-test-cu (A+B): $(tr -s ' ' <<<"$summary" | tr '\n' ';')"
[ "$failed" = 0 ] || fail "iscsi-test-cu reported failures: $(grep -B2 FAILED "$OUT" | head -20)"
kill -0 "$PID_A" && kill -0 "$PID_B" || fail "a member died during iscsi-test-cu"

stop_member "$PID_A"
stop_member "$PID_B"
pass
