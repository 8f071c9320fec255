#!/bin/bash
# The WebSocket API over TLS (--api-tls-cert/--api-tls-key, GnuTLS) with a
# certtool-made self-signed certificate: a Python client verifying that
# certificate logs in with an API key and calls methods over wss://; a
# plain ws:// client on the TLS port gets nowhere; a bad key file stops
# the daemon from starting.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 certtool
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

cat >"$TMP/cert.cfg" <<CFG
cn = "localhost"
dns_name = "localhost"
ip_address = "127.0.0.1"
expiration_days = 2
tls_www_server
encryption_key
signing_key
ca
cert_signing_key
CFG
certtool --generate-privkey --key-type=ecdsa --outfile "$TMP/key.pem" 2>/dev/null ||
    fail "certtool could not make a key"
certtool --generate-self-signed --load-privkey "$TMP/key.pem" --template "$TMP/cert.cfg" \
    --outfile "$TMP/cert.pem" 2>/dev/null || fail "certtool could not make a certificate"

# A missing key refuses to start (and says why).
WS_PORT=$(free_port)
if "$BLOCKD_BIN" --state-dir "$TMP/bad" --nbd-listen 127.0.0.1:0 --iscsi-listen 127.0.0.1:0 \
    --api-listen "127.0.0.1:$WS_PORT" --api-tls-cert "$TMP/cert.pem" \
    --api-tls-key "$TMP/missing.pem" >"$TMP/bad.log" 2>&1; then
    fail "blockd started with a missing TLS key"
fi
grep -q "cannot load TLS certificate" "$TMP/bad.log" || fail "no reason given: $(cat "$TMP/bad.log")"

blockd_start --api-listen "127.0.0.1:$WS_PORT" --api-tls-cert "$TMP/cert.pem" \
    --api-tls-key "$TMP/key.pem"
grep -q "wss://127.0.0.1:$WS_PORT/api/current" "$BLOCKD_LOG" || fail "not announced as wss"
KEY=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])' \
    <<<"$(blockctl call api_key.create '{"name":"tls"}')")

out=$(/usr/bin/python3 - "$WS_PORT" "$KEY" "$TMP/cert.pem" <<'PY' 2>&1
import json, ssl, sys, websocket
port, key, cert = sys.argv[1], sys.argv[2], sys.argv[3]
ws = websocket.create_connection("wss://127.0.0.1:%s/api/current" % port, timeout=20,
                                 sslopt={"ca_certs": cert, "cert_reqs": ssl.CERT_REQUIRED,
                                         "check_hostname": False})
n = 0
def call(m, p=None):
    global n
    n += 1
    ws.send(json.dumps({"jsonrpc": "2.0", "id": n, "method": m, "params": p or []}))
    return json.loads(ws.recv())
assert call("core.ping")["result"] == "pong"
r = call("iscsi.target.query")
assert r["error"]["data"]["error"] == 207 and r["error"]["data"]["errname"] == "ENOTAUTHENTICATED", r
assert call("auth.login_with_api_key", [key])["result"] is True
assert call("iscsi.target.query")["result"] == []
r = call("pool.dataset.create", [{"name": "demo/tlsvol", "type": "VOLUME", "volsize": 4194304}])
assert r["result"]["name"] == "demo/tlsvol", r
big = "x" * 200000  # several TLS records in one message
r = call("core.bulk", ["core.ping", [[] for _ in range(50)], big])
assert isinstance(r["result"], int), r
print("OK tls")
# Plain WebSocket on the TLS port fails.
try:
    websocket.create_connection("ws://127.0.0.1:%s/api/current" % port, timeout=5)
    print("plain ws accepted")
except Exception:
    print("plain refused")
PY
) || fail "TLS client: $out"
grep -q "OK tls" <<<"$out" || fail "TLS client: $out"
grep -q "plain refused" <<<"$out" || fail "plain ws:// worked on the TLS port: $out"
blockd_stop
pass
