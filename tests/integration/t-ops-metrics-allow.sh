#!/bin/bash
# /metrics without an API key from an allowed network (--metrics-allow:
# "readable with an API key or from an allowed address"):
#  - with --metrics-allow 127.0.0.0/8,::1 a scrape from 127.0.0.1 without a
#    key gets the metrics (200); the API over WebSocket still needs a login;
#  - with metrics_allow = 10.0.0.0/8,192.0.2.0/24 in the config file, the
#    same scrape gets 401 and a log line naming the peer; with the key it
#    still works;
#  - a malformed list (a host address with a prefix, garbage, /33) stops
#    blockd at start-up with a message naming the flag.
. "$(dirname "$0")/lib.sh"
need curl python3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
M="http://127.0.0.1:$WS_PORT/metrics"
blockd_start --api-listen "127.0.0.1:$WS_PORT" --metrics-allow 127.0.0.0/8,::1
code=$(curl -s -o "$TMP/m1" -w '%{http_code}' "$M")
[ "$code" = 200 ] || fail "/metrics from 127.0.0.1 in --metrics-allow: HTTP $code"
grep -q '^process_resident_memory_bytes ' "$TMP/m1" || fail "no metrics in the allowed scrape"
# The allow list is for /metrics only: API calls still need a login.
out=$(/usr/bin/python3 - "$WS_PORT" <<'PY'
import json, sys, websocket
ws = websocket.create_connection("ws://127.0.0.1:%s/api/current" % sys.argv[1], timeout=10)
ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "pool.query", "params": []}))
print(json.loads(ws.recv()))
PY
) || fail "WebSocket client: $out"
case "$out" in *"Not authenticated"*) ;; *) fail "pool.query without login from an allowed address: $out" ;; esac
KEY=$(blockctl call api_key.create '{"name":"prom"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
blockd_stop

cat >"$TMP/blockd.conf" <<CONF
metrics_allow = 10.0.0.0/8,192.0.2.0/24
CONF
blockd_start --config "$TMP/blockd.conf" --api-listen "127.0.0.1:$WS_PORT"
code=$(curl -s -o /dev/null -w '%{http_code}' "$M")
[ "$code" = 401 ] || fail "/metrics from 127.0.0.1 outside metrics_allow: HTTP $code"
grep -q "metrics: ws:127.0.0.1:[0-9]*: /metrics without an API key refused (not in --metrics-allow)" \
    "$BLOCKD_LOG" || fail "no log line naming the refused peer"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "$M")
[ "$code" = 200 ] || fail "/metrics with the key outside metrics_allow: HTTP $code"
blockd_stop

for bad in 10.1.2.3/8 nonsense 127.0.0.1/33 "10.0.0.0/8,"; do
    if "$BLOCKD_BIN" --state-dir "$STATE" --metrics-allow "$bad" >"$TMP/bad.out" 2>&1; then
        fail "blockd started with --metrics-allow '$bad'"
    fi
    grep -q -- "--metrics-allow" "$TMP/bad.out" || fail "no message for --metrics-allow '$bad': $(cat "$TMP/bad.out")"
done
pass "/metrics: 200 without a key from an allowed network, 401 from others (flag and config key); bad lists refused"
