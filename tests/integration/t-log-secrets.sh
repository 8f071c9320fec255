#!/usr/bin/env bash
# No secret ever reaches the log, even at --log-level debug: an API key
# (created, used to log in over WebSocket, a wrong one tried), an NBD TLS
# PSK (the key file's hex key; a session with it and one with a wrong
# key), CHAP secrets (one-way and mutual, set through the iSCSI auth API,
# right and wrong logins) and the API calls that carried them.
. "$(dirname "$0")/lib.sh"
need python3 nbdinfo iscsi-inq timeout
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket missing (make deps)"
jget() { python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }
WS_PORT=$(free_port)
BLOCKD_LOG_LEVEL=debug blockd_start --api-listen "127.0.0.1:$WS_PORT"

# --- API key
key=$(jget "$(blockctl call api_key.create '{"name":"ci"}')" 'j["key"]')
[ -n "$key" ] || fail "no API key"
cat >"$TMP/ws.py" <<'PY'
import json, sys, websocket
ws = websocket.create_connection(sys.argv[1], timeout=20)
def call(i, method, params):
    ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}))
    return json.loads(ws.recv())
assert call(1, "auth.login_with_api_key", ["1-" + "f" * 64]).get("result") is False
assert call(2, "auth.login_with_api_key", [sys.argv[2]]).get("result") is True
assert "result" in call(3, "pool.dataset.query", [])
PY
/usr/bin/python3 "$TMP/ws.py" "ws://127.0.0.1:$WS_PORT/api/current" "$key" || fail "WebSocket login"

# --- NBD TLS PSK
psk=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
wrong=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "alice:$psk" >"$STATE/keys.psk"
echo "alice:$wrong" >"$STATE/wrong.psk"
blockctl volume create demo/sec --size 16M >/dev/null || fail "volume create"
blockctl share nbd create demo/sec --name sec --tls require >/dev/null || fail "share create"
blockctl call nbd.global.update "[{\"tls_psk_file\": \"$STATE/keys.psk\"}]" >/dev/null ||
    fail "nbd.global.update tls_psk_file"
nbdinfo "nbds://alice@127.0.0.1:$NBD_PORT/sec?tls-psk-file=$STATE/keys.psk" >/dev/null 2>&1 ||
    fail "PSK session refused"
nbdinfo "nbds://alice@127.0.0.1:$NBD_PORT/sec?tls-psk-file=$STATE/wrong.psk" >/dev/null 2>&1 &&
    fail "wrong PSK accepted"

# --- CHAP (one-way and mutual), through the iSCSI auth API
BASE=iqn.2026-11.org.blockd
P=127.0.0.1:$ISCSI_PORT
blockctl call pool.dataset.create '{"name":"demo/c1","type":"VOLUME","volsize":16777216}' >/dev/null
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
all=$(jget "$(blockctl call iscsi.initiator.create '{}')" 'j["id"]')
blockctl call iscsi.auth.create '{"tag":1,"user":"chapuser","secret":"Chap0Secret0Xyz"}' >/dev/null
blockctl call iscsi.auth.create \
    '{"tag":2,"user":"muser","secret":"Mutual0Secret0Q","peeruser":"tgtuser","peersecret":"Target0Secret0W"}' >/dev/null
t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"chap\",\"groups\":[{\"portal\":$portal,\"initiator\":$all,\"authmethod\":\"CHAP\",\"auth\":1}]}")" 'j["id"]')
e=$(jget "$(blockctl call iscsi.extent.create '{"name":"e1","disk":"zvol/demo/c1"}')" 'j["id"]')
blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null
timeout 20 iscsi-inq "iscsi://chapuser%Wrong0Secret0Zz@$P/$BASE:chap/0" >/dev/null 2>&1 &&
    fail "wrong CHAP secret accepted"
timeout 20 iscsi-inq "iscsi://chapuser%Chap0Secret0Xyz@$P/$BASE:chap/0" >/dev/null ||
    fail "CHAP login refused"
blockctl call iscsi.auth.query >/dev/null

# The log was written at debug level: it has the calls, not their secrets.
grep -q "api_key.create\|iscsi.auth.create" "$BLOCKD_LOG" || fail "debug log does not show the API calls"
for s in "$key" "${key#*-}" "$psk" "$wrong" Chap0Secret0Xyz Mutual0Secret0Q Target0Secret0W Wrong0Secret0Zz \
    "$(printf %s "$psk" | tr a-f A-F)"; do
    grep -qiF -- "$s" "$BLOCKD_LOG" && fail "a secret is in the log: $(grep -iF -- "$s" "$BLOCKD_LOG" | head -2)"
done
pass "API key, PSK and CHAP secrets kept out of a debug log"
