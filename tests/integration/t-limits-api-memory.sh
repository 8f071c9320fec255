#!/bin/bash
# One API call cannot make the daemon grow without bound:
# the JSON a call builds is counted against --api-call-memory, and past it
# the call answers ENOMEM naming the limit, with a log line naming the
# peer, while the daemon goes on serving.
#   - 300 volumes; with the default budget (256M) an unfiltered
#     pool.dataset.query (every property of every row) answers them all;
#   - restarted with --api-call-memory 1M, the same query fails with a
#     JSON-RPC error (-32001, ENOMEM, naming --api-call-memory) over the
#     Unix socket and over WebSocket; the daemon logs the peer; a filtered
#     query, core.ping and a new volume still work;
#   - a core.bulk job whose calls together build more than the budget fails
#     with ENOMEM (the job counts like a call), and a small one succeeds.
. "$(dirname "$0")/lib.sh"
need python3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
N=300
blockctl call core.bulk "$(python3 -c '
import json
print(json.dumps(["pool.dataset.create", [[{"name": "demo/m%d" % i, "type": "VOLUME", "volsize": 1 << 20}] for i in range('$N')]]))')" >"$TMP/bulk.json" || fail "core.bulk create"
rows=$(blockctl call pool.dataset.query | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))') ||
    fail "unfiltered pool.dataset.query with the default budget"
[ "$rows" -gt "$N" ] || fail "pool.dataset.query answered $rows rows, expected > $N"
bytes=$(blockctl call pool.dataset.query | wc -c)
echo "default budget: $rows rows, $bytes bytes of response"
KEY=$(jget "$(blockctl call api_key.create '{"name":"mem"}')" 'j["key"]')

blockd_stop
blockd_start --api-listen "127.0.0.1:$WS_PORT" --api-call-memory 1M

# Unix socket (blockctl): the error, not a partial result.
if out=$(blockctl call pool.dataset.query 2>&1); then
    fail "unfiltered pool.dataset.query succeeded with --api-call-memory 1M (${#out} bytes)"
fi
case "$out" in
*"needs more memory than one API call may use (1048576 bytes; blockd --api-call-memory)"*) ;;
*) fail "pool.dataset.query over the budget: unexpected answer: ${out:0:300}" ;;
esac
grep -q "api: unix:pid=[0-9]*.*: pool.dataset.query: refused: .*per-call memory limit of 1048576 bytes" \
    "$BLOCKD_LOG" || fail "no log line naming the peer of the refused call"

# The daemon goes on: a filtered query, a ping, a new volume.
one=$(blockctl call pool.dataset.query '[[["name","=","demo/m7"]]]' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["name"])') || fail "filtered query"
[ "$one" = demo/m7 ] || fail "filtered query answered '$one'"
blockctl call core.ping >/dev/null || fail "core.ping after the refused call"
blockctl volume create demo/after --size 1M >/dev/null || fail "volume create after the refused call"

# WebSocket with an API key: the same JSON-RPC error shape.
cat >"$TMP/ws.py" <<'PY'
import json, sys, time, websocket
ws = websocket.create_connection("ws://127.0.0.1:%s/api/current" % sys.argv[1], timeout=60)
def call(i, method, params):
    ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}))
    while True:
        m = json.loads(ws.recv())
        if m.get("id") == i:
            return m
r = call(1, "auth.login_with_api_key", [sys.argv[2]])
assert r.get("result") is True, r
r = call(2, "pool.dataset.query", [])
e = r.get("error")
assert e and "result" not in r, "no error: %s" % str(r)[:200]
assert e["code"] == -32001 and e["data"]["error"] == 12 and e["data"]["errname"] == "ENOMEM", e
assert "api-call-memory" in e["message"], e
r = call(3, "pool.dataset.query", [[["name", "=", "demo/m8"]]])
assert r["result"][0]["name"] == "demo/m8", r
# A core.bulk job whose calls together hold more than the budget: its
# results stay in the job, so the job counts them.
r = call(4, "core.bulk", ["pool.dataset.query", [[] for _ in range(3)]])
jid = r["result"]
deadline = time.time() + 60
while time.time() < deadline:
    job = call(5, "core.get_jobs", [[["id", "=", jid]], {"get": True}])["result"]
    if job["state"] not in ("WAITING", "RUNNING"):
        break
    time.sleep(0.1)
assert job["state"] == "FAILED" and "ENOMEM" in job["error"] and "api-call-memory" in job["error"], \
    "bulk job: %s" % str(job)[:300]
# The same with legacy_jobs off: the job runs inside the call.
assert "error" not in call(6, "core.set_options", [{"legacy_jobs": False}])
r = call(7, "core.bulk", ["pool.dataset.query", [[] for _ in range(3)]])
assert "ENOMEM" in json.dumps(r.get("error")), "bulk in the call: %s" % str(r)[:300]
r = call(8, "core.bulk", ["core.ping", [[] for _ in range(20)]])
assert len(r["result"]) == 20 and all(x["result"] == "pong" for x in r["result"]), r
print("ws ok")
PY
out=$(/usr/bin/python3 "$TMP/ws.py" "$WS_PORT" "$KEY" 2>&1) || fail "WebSocket checks: $out"
grep -q "api: ws:127.0.0.1:[0-9]*.*: pool.dataset.query: refused" "$BLOCKD_LOG" ||
    fail "no log line naming the WebSocket peer"
grep -q "api: job [0-9]* (core.bulk): refused" "$BLOCKD_LOG" || fail "no log line for the refused job"
blockd_alive || fail "daemon died"
pass "unfiltered query of $rows rows: ok with 256M, ENOMEM with 1M (Unix socket, WebSocket, core.bulk); daemon kept serving"
