#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Portals and the listening port, live. With --iscsi-listen 127.0.0.1:P the
# portal rows and iscsi.global.listen_port say P; the TrueNAS client's
# portal lookup-or-create (truenas_incus_ctl LookupPortalIdOrCreate: query
# [["listen","=",[{ip,port}]]], create {listen:[{ip}]} when missing) finds
# its portal on the second run instead of failing with "already belongs";
# a second portal on 127.0.0.2 listens at once and serves logins
# (iscsi-ls, iscsi-inq, qemu-img) while a qemu-io session on the first
# portal keeps doing I/O; deleting it refuses new connections there; a
# listen_port change moves every listener live; SendTargets answers each
# target's portal addresses; an address in use is refused with a clear
# error and nothing changes; wildcard (0.0.0.0) and IPv6 (::1) portals.
# The established session is the same session (tsih, connected_at) from
# start to end.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 iscsi-ls iscsi-inq qemu-img qemu-io timeout
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

# expect_error METHOD PARAMS TEXT...: the call fails mentioning every TEXT.
expect_error() {
    local out rc=0 m=$1 p=$2
    shift 2
    out=$(blockctl call "$m" "$p" 2>&1) || rc=$?
    [ "$rc" = 1 ] || fail "$m $p: exit $rc, wanted 1 (output: $out)"
    for t in "$@"; do
        case "$out" in
        *"$t"*) ;;
        *) fail "$m $p: error does not mention '$t': $out" ;;
        esac
    done
}

# conn HOST PORT: "open" or "refused".
conn() {
    python3 - "$1" "$2" <<'PY'
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("open")
except ConnectionRefusedError:
    print("refused")
PY
}

# discover URL: "TargetName Portal" lines of a SendTargets discovery (and
# iscsi-ls's complaint, if any, for the failure message).
discover() {
    timeout 60 iscsi-ls -i "$INI" "$1" 2>&1 || echo "(iscsi-ls $1 failed: exit $?)"
}

INI=iqn.2026-01.test:portals
BASE=iqn.2026-11.org.blockd
WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
P=$ISCSI_PORT
KEY=$(jget "$(blockctl call api_key.create '{"name":"portals"}')" 'j["key"]')

# ---- the configured port is the port served ----
[ "$(jget "$(blockctl call iscsi.global.config)" 'j["listen_port"]')" = "$P" ] ||
    fail "listen_port is not the --iscsi-listen port $P: $(blockctl call iscsi.global.config)"
grep -q "sets iscsi.global.listen_port to $P" "$BLOCKD_LOG" || fail "no log line for listen_port"

# ---- the TrueNAS client's lookup-or-create, twice, over WebSocket ----
cat >"$TMP/lookup.py" <<'PY'
import json, sys, websocket
url, key, ip, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ws = websocket.create_connection(url, timeout=20)
n = 0
def call(method, params):
    global n
    n += 1
    ws.send(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}))
    while True:
        r = json.loads(ws.recv())
        if r.get("id") == n:
            return r
def ok(method, params):
    r = call(method, params)
    assert "result" in r, (method, params, r)
    return r["result"]
assert ok("auth.login_with_api_key", [key]) is True
# LookupPortalByObject: [["listen", "=", [{"ip": IP, "port": PORT}]]], {}
found = ok("iscsi.portal.query", [[["listen", "=", [{"ip": ip, "port": port}]]], {}])
if found:
    print("found", found[0]["id"])
else:
    # LookupPortalIdOrCreate drops "port" before creating
    row = ok("iscsi.portal.create", [{"listen": [{"ip": ip}]}])
    assert row["listen"] == [{"ip": ip, "port": port}], row
    print("created", row["id"])
PY
URL="ws://127.0.0.1:$WS_PORT/api/current"
first=$(/usr/bin/python3 "$TMP/lookup.py" "$URL" "$KEY" 127.0.0.1 "$P" 2>&1) ||
    fail "portal lookup/create failed: $first"
case "$first" in created*) ;; *) fail "first lookup should create the portal: $first" ;; esac
A=${first#created }
second=$(/usr/bin/python3 "$TMP/lookup.py" "$URL" "$KEY" 127.0.0.1 "$P" 2>&1) ||
    fail "the second lookup did not find the portal it created: $second"
[ "$second" = "found $A" ] || fail "second lookup: $second (wanted found $A)"
row=$(blockctl call iscsi.portal.get_instance "$A")
[ "$(jget "$row" 'j["listen"]')" = "[{'ip': '127.0.0.1', 'port': $P}]" ] || fail "portal row: $row"

# ---- targets: one on portal A, one on portal B (127.0.0.2), one on both ----
mkvol() {
    blockctl call pool.dataset.create "{\"name\":\"demo/$1\",\"type\":\"VOLUME\",\"volsize\":16777216}" >/dev/null
    local e
    e=$(jget "$(blockctl call iscsi.extent.create "{\"name\":\"$1\",\"disk\":\"zvol/demo/$1\"}")" 'j["id"]')
    blockctl call iscsi.targetextent.create "{\"target\":$2,\"extent\":$e,\"lunid\":0}" >/dev/null
}
target() { # NAME GROUPS-JSON
    jget "$(blockctl call iscsi.target.create "{\"name\":\"$1\",\"groups\":$2}")" 'j["id"]'
}
t1=$(target pt-one "[{\"portal\":$A}]")
mkvol pone "$t1"

# the first session: qemu-io on portal A, kept open through everything below
mkfifo "$TMP/q1"
qemu-io -f raw "iscsi://127.0.0.1:$P/$BASE:pt-one/0" <"$TMP/q1" >"$TMP/q1.out" 2>&1 &
QPID=$!
BG_PIDS+=("$QPID")
exec 7>"$TMP/q1"
q1() { echo "$1" >&7; }
q1 "write -P 0x11 0 1M"
sess=""
for i in $(seq 1 300); do
    sess=$(blockctl call iscsi.global.sessions "[[[\"target\",\"=\",\"$BASE:pt-one\"]]]")
    [ "$(jget "$sess" 'len(j)')" = 1 ] && break
    sleep 0.1
done
[ "$(jget "$sess" 'len(j)')" = 1 ] || fail "no qemu-io session on portal A: $sess $(cat "$TMP/q1.out")"
SESS_ID=$(jget "$sess" 'str(j[0]["tsih"]) + "/" + str(j[0]["connected_at"])')
same_session() {
    local s
    s=$(blockctl call iscsi.global.sessions "[[[\"target\",\"=\",\"$BASE:pt-one\"]]]")
    [ "$(jget "$s" 'len(j)')" = 1 ] &&
        [ "$(jget "$s" 'str(j[0]["tsih"]) + "/" + str(j[0]["connected_at"])')" = "$SESS_ID" ] ||
        fail "$1: the session on portal A changed: $s"
}

[ "$(conn 127.0.0.2 "$P")" = refused ] || fail "127.0.0.2:$P is open before portal B exists"
B=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.2"}],"comment":"B"}')" 'j["id"]')
grep -q "iscsi: listening on 127.0.0.2:$P (portal group tag 2)" "$BLOCKD_LOG" ||
    fail "no log line for the bind of portal B"
t2=$(target pt-two "[{\"portal\":$B}]")
mkvol ptwo "$t2"
t3=$(target pt-both "[{\"portal\":$A},{\"portal\":$B}]")
mkvol pboth "$t3"

# SendTargets answers each target's portal addresses (and only the
# targets on the portal asked)
ls_a=$(discover "iscsi://127.0.0.1:$P")
grep -q "Target:$BASE:pt-one Portal:127.0.0.1:$P,1" <<<"$ls_a" || fail "pt-one on A: $ls_a"
grep -q "$BASE:pt-two" <<<"$ls_a" && fail "pt-two (portal B only) listed on A: $ls_a"
grep -q "Target:$BASE:pt-both Portal:127.0.0.1:$P,1" <<<"$ls_a" || fail "pt-both on A: $ls_a"
grep -q "Target:$BASE:pt-both Portal:127.0.0.2:$P,2" <<<"$ls_a" ||
    fail "pt-both's portal B address missing from SendTargets: $ls_a"
ls_b=$(discover "iscsi://127.0.0.2:$P")
grep -q "Target:$BASE:pt-two Portal:127.0.0.2:$P,2" <<<"$ls_b" || fail "pt-two on B: $ls_b"
grep -q "$BASE:pt-one" <<<"$ls_b" && fail "pt-one (portal A only) listed on B: $ls_b"

# log in through portal B while the session on A does I/O
q1 "read -P 0x11 0 1M"
inq=$(timeout 60 iscsi-inq -i "$INI" "iscsi://127.0.0.2:$P/$BASE:pt-two/0" 2>&1) ||
    fail "iscsi-inq through portal B: $inq"
grep -qi "blockd" <<<"$inq" || fail "iscsi-inq through portal B: $inq"
printf 'portal-b' >"$TMP/pattern"
qemu-img convert -n -O raw "$TMP/pattern" "iscsi://127.0.0.2:$P/$BASE:pt-two/0" ||
    fail "qemu-img could not write through portal B"
info=$(qemu-img info "iscsi://127.0.0.2:$P/$BASE:pt-two/0" 2>&1) || fail "qemu-img info: $info"
grep -q "16 MiB" <<<"$info" || fail "qemu-img info through portal B: $info"
same_session "portal B created"

# ---- delete portal B: refused there at once, A untouched ----
blockctl call iscsi.portal.delete "$B" >/dev/null
[ "$(conn 127.0.0.2 "$P")" = refused ] || fail "127.0.0.2:$P still accepts after portal B was deleted"
grep -q "iscsi: stopped listening on 127.0.0.2:$P" "$BLOCKD_LOG" || fail "no log line for the unbind"
q1 "write -P 0x22 1M 1M"
q1 "read -P 0x22 1M 1M"
same_session "portal B deleted"

# ---- an address in use is refused, and nothing changes ----
BUSY_PORT=$(free_port)
python3 - "$P" "$BUSY_PORT" "$TMP/busy.ready" <<'PY' &
import socket, sys, time
socks = []
for host, port in (("127.0.0.3", int(sys.argv[1])), ("127.0.0.1", int(sys.argv[2]))):
    s = socket.socket()
    s.bind((host, port))
    s.listen(1)
    socks.append(s)
open(sys.argv[3], "w").close()
time.sleep(600)
PY
BUSY_PID=$!
BG_PIDS+=("$BUSY_PID")
for i in $(seq 1 100); do [ -f "$TMP/busy.ready" ] && break; sleep 0.1; done
before=$(blockctl call iscsi.portal.query)
expect_error iscsi.portal.create '{"listen":[{"ip":"127.0.0.3"}]}' \
    "iscsi.portal.create.listen.0.ip" "Cannot listen on 127.0.0.3:$P" "already in use"
expect_error iscsi.portal.update "[$A, {\"listen\":[{\"ip\":\"127.0.0.1\"},{\"ip\":\"127.0.0.3\"}]}]" \
    "Cannot listen on 127.0.0.3:$P"
expect_error iscsi.portal.create '{"listen":[{"ip":"192.0.2.77"}]}' "not an IP address of this system"
[ "$(blockctl call iscsi.portal.query)" = "$before" ] || fail "a refused portal change changed portals"
expect_error iscsi.global.update "{\"listen_port\":$BUSY_PORT}" \
    "iscsi.global.update.listen_port" "Cannot listen on 127.0.0.1:$BUSY_PORT" "already in use"
[ "$(jget "$(blockctl call iscsi.global.config)" 'j["listen_port"]')" = "$P" ] ||
    fail "a refused listen_port change was stored"
discover "iscsi://127.0.0.1:$P" | grep -q "$BASE:pt-one" || fail "portal A stopped serving"
kill $BUSY_PID 2>/dev/null
wait $BUSY_PID 2>/dev/null || true

# ---- listen_port moves every listener live ----
Q=$(free_port)
blockctl call iscsi.global.update "{\"listen_port\":$Q}" >/dev/null
[ "$(jget "$(blockctl call iscsi.portal.get_instance "$A")" 'j["listen"][0]["port"]')" = "$Q" ] ||
    fail "the portal row does not show the new port"
[ "$(conn 127.0.0.1 "$P")" = refused ] || fail "the old port $P still accepts"
discover "iscsi://127.0.0.1:$Q" | grep -q "Target:$BASE:pt-one Portal:127.0.0.1:$Q,1" ||
    fail "listen_port change did not move portal A to $Q"
q1 "read -P 0x11 0 1M"
q1 "read -P 0x22 1M 1M"
same_session "listen_port changed"

# ---- wildcard and IPv6 portals ----
W=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"0.0.0.0"}]}')" 'j["id"]')
wtag=$(jget "$(blockctl call iscsi.portal.get_instance "$W")" 'j["tag"]')
tw=$(target pt-wild "[{\"portal\":$W}]")
mkvol pwild "$tw"
# 127.0.0.4 has no portal of its own: the wildcard one answers, naming the
# address the initiator reached; 127.0.0.1 stays portal A's
ls_w=$(discover "iscsi://127.0.0.4:$Q")
grep -q "Target:$BASE:pt-wild Portal:127.0.0.4:$Q,$wtag" <<<"$ls_w" || fail "wildcard: $ls_w"
discover "iscsi://127.0.0.1:$Q" | grep -q "pt-wild" && fail "127.0.0.1 served by the wildcard portal"
if [ "$(conn ::1 "$Q")" != refused ] && [ "$(conn ::1 "$Q")" != open ]; then
    echo "no IPv6 loopback: IPv6 portal case skipped"
else
    V=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"::1"}]}')" 'j["id"]')
    vtag=$(jget "$(blockctl call iscsi.portal.get_instance "$V")" 'j["tag"]')
    grep -q "iscsi: listening on \[::1\]:$Q" "$BLOCKD_LOG" || fail "no bracketed IPv6 bind log"
    tv=$(target pt-six "[{\"portal\":$V}]")
    mkvol psix "$tv"
    ls_v=$(discover "iscsi://[::1]:$Q")
    grep -q "Target:$BASE:pt-six Portal:\[::1\]:$Q,$vtag" <<<"$ls_v" || fail "IPv6 portal: $ls_v"
    blockctl call iscsi.portal.delete "$V" >/dev/null
    [ "$(conn ::1 "$Q")" = refused ] || fail "[::1]:$Q still accepts after its portal was deleted"
fi
blockctl call iscsi.portal.delete "$W" >/dev/null
[ "$(conn 127.0.0.4 "$Q")" = refused ] || fail "the wildcard still accepts after its deletion"

# ---- the first session did all its I/O on one connection ----
q1 "read -P 0x11 0 1M"
same_session "end"
q1 "quit"
exec 7>&-
wait $QPID || fail "qemu-io failed: $(cat "$TMP/q1.out")"
out=$(cat "$TMP/q1.out")
grep -qi "fail\|error" <<<"$out" && fail "qemu-io reported an error: $out"
[ "$(grep -c "read 1048576/1048576 bytes" <<<"$out")" = 5 ] || fail "qemu-io reads: $out"

# ---- a restart: --iscsi-listen's port is listen_port again ----
blockd_stop
blockd_start --api-listen "127.0.0.1:$WS_PORT"
[ "$(jget "$(blockctl call iscsi.global.config)" 'j["listen_port"]')" = "$P" ] ||
    fail "listen_port after restart is not $P"
discover "iscsi://127.0.0.1:$P" | grep -q "Target:$BASE:pt-one Portal:127.0.0.1:$P,1" ||
    fail "portal A not served at $P after restart"
pass
