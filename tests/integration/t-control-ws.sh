#!/bin/bash
# The JSON-RPC API over WebSocket (blockd --api-listen), driven by a client
# in another language (Python, python3-websocket): refused before login and
# with a wrong key; logs in with an API key from api_key.create; runs the
# 8-call TrueNAS share creation sequence (then finds the target with
# iscsi-ls and reads its LUN with iscsi-inq) and core.bulk (a job: id,
# collection_update events, core.job_wait, per-call errors); oversized
# messages and bad HTTP requests are refused; failed logins are
# rate-limited per address and logged; API keys survive a restart and a
# deleted key no longer logs in.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 iscsi-ls iscsi-inq curl sqlite3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
# The unauthenticated client that sends a 16 MiB message (pure-Python
# masking) may need more than the default 10 s handshake deadline on a
# loaded machine.
blockd_start --api-listen "127.0.0.1:$WS_PORT" --handshake-timeout 60
URL="ws://127.0.0.1:$WS_PORT/api/current"

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

key_json=$(blockctl call api_key.create '{"name":"ci"}')
KEY=$(jget "$key_json" 'j["key"]')
KEY_ID=$(jget "$key_json" 'j["id"]')
case "$KEY" in "$KEY_ID"-*) ;; *) fail "key does not start with its id: $KEY" ;; esac
# never shown again
blockctl call api_key.query | grep -q "$KEY" && fail "api_key.query returns the key"
blockctl call api_key.query | grep -qi keyhash && fail "api_key.query returns the hash"
sqlite3 "$STATE/blockd.db" "SELECT keyhash FROM api_key" | grep -q "${KEY#*-}" &&
    fail "the key is stored in clear"
[ "$(sqlite3 "$STATE/blockd.db" "SELECT keyhash FROM api_key")" = \
    "$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)" ] || fail "stored hash is not SHA-256(key)"

blockctl call pool.dataset.create '{"name":"demo/ws1","type":"VOLUME","volsize":16777216}' >/dev/null

cat >"$TMP/client.py" <<'PY'
import json, sys, time, websocket

url, key, iscsi_port, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

class Client:
    def __init__(self, url):
        self.ws = websocket.create_connection(url, timeout=20)
        self.next = 0
        self.events = []
    def call(self, method, params=None):
        self.next += 1
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.next, "method": method,
                                 "params": params if params is not None else []}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("method") == "collection_update":
                self.events.append(r["params"])
                continue
            assert r.get("id") == self.next, r
            return r
    def ok(self, method, params=None):
        r = self.call(method, params)
        assert "result" in r, (method, params, r)
        return r["result"]

def expect_refused(c, method, params=None):
    r = c.call(method, params)
    e = r.get("error")
    assert e and e["code"] == -32001 and e["data"]["error"] == 207, r
    assert "Not authenticated" in e["message"] and e["data"]["errname"] == "ENOTAUTHENTICATED", r

if mode == "main":
    c = Client(url)
    # before login: ping answers, nothing else does
    assert c.ok("core.ping") == "pong"
    expect_refused(c, "pool.dataset.query")
    expect_refused(c, "iscsi.target.query")
    expect_refused(c, "api_key.create", [{"name": "sneaky"}])
    # wrong key: false, still refused
    assert c.ok("auth.login_with_api_key", ["1-" + "x" * 64]) is False
    expect_refused(c, "iscsi.target.query")
    # right key
    assert c.ok("auth.login_with_api_key", [key]) is True
    me = c.ok("auth.me")
    assert me["pw_name"] == "root" and me["api_key"]["name"] == "ci", me

    # The 8 calls a TrueNAS client (truenas_incus_ctl share iscsi create) makes.
    vol, prefix = "demo/ws1", "ci"
    name = prefix + ":" + vol.replace("/", ":")
    t0 = time.monotonic()
    assert c.ok("iscsi.target.query", [[["alias", "in", [vol]]], {"extra": {"retrieve_locked_info": False}}]) == []
    portals = c.ok("iscsi.portal.query", [[["listen", "=", [{"ip": "127.0.0.1", "port": 3260}]]], {}])
    portal = portals[0]["id"] if portals else c.ok("iscsi.portal.create", [{"listen": [{"ip": "127.0.0.1"}]}])["id"]
    inits = c.ok("iscsi.initiator.query", [[["comment", "=", "ci-all"]]])
    initiator = inits[0]["id"] if inits else c.ok("iscsi.initiator.create", [{"comment": "ci-all"}])["id"]
    target = c.ok("iscsi.target.create", [{"name": name, "alias": vol,
                                           "groups": [{"portal": portal, "initiator": initiator}]}])
    assert c.ok("iscsi.extent.query", [[["disk", "in", ["zvol/" + vol]]]]) == []
    extent = c.ok("iscsi.extent.create", [{"name": name.replace(":", "-"), "disk": "zvol/" + vol, "ro": False}])
    tes = c.ok("iscsi.targetextent.query")
    assert not [t for t in tes if t["target"] == target["id"]], tes
    te = c.ok("iscsi.targetextent.create", [{"target": target["id"], "lunid": 0, "extent": extent["id"]}])
    assert te["lunid"] == 0, te
    print("share created over WebSocket in %.1f ms" % ((time.monotonic() - t0) * 1000))
    print("TARGET", target["name"])

    # Validation errors keep the TrueNAS shape
    r = c.call("iscsi.target.create", [{"name": name}])
    assert r["error"]["code"] in (-32602, -32001), r

    # core.bulk is a job: the id at once, events, then core.job_wait
    sub = c.ok("core.subscribe", ["core.get_jobs"])
    jid = c.ok("core.bulk", ["iscsi.target.query", [[[["id", "=", target["id"]]]],
                                                     [[["id", "=", 999999]]],
                                                     [[["id", "~~", 1]]]], "three queries"])
    assert isinstance(jid, int), jid
    wait_id = c.ok("core.job_wait", [jid])
    assert isinstance(wait_id, int) and wait_id != jid, wait_id
    deadline = time.time() + 10
    job = None
    while time.time() < deadline:
        job = c.ok("core.get_jobs", [[["id", "=", jid]], {"get": True}])
        if job["state"] != "RUNNING":
            break
        time.sleep(0.05)
    assert job["state"] == "SUCCESS", job
    res = job["result"]
    assert len(res) == 3, res
    assert res[0]["error"] is None and res[0]["result"][0]["name"] == name, res[0]
    assert res[1]["error"] is None and res[1]["result"] == [], res[1]
    assert res[2]["error"] and res[2]["result"] is None, res[2]
    # The event is sent just after the state changes (not under the job
    # table's lock, as in TrueNAS): it may come after get_jobs showed it.
    deadline = time.time() + 10
    while True:
        c.ok("core.ping")  # reads the events that arrived meanwhile
        mine = [e for e in c.events if e["collection"] == "core.get_jobs" and e["id"] == jid]
        done = any(e["msg"] == "changed" and e["fields"]["state"] == "SUCCESS" for e in mine)
        if done or time.time() > deadline:
            break
        time.sleep(0.05)
    assert mine and mine[0]["msg"] == "added", c.events
    assert done, mine
    c.ok("core.unsubscribe", [sub])
    # With legacy_jobs off, a job method answers with its result.
    c.ok("core.set_options", [{"legacy_jobs": False}])
    res = c.ok("core.bulk", ["core.ping", [[], [1]]])
    assert res[0]["result"] == "pong" and res[1]["error"], res
    assert c.ok("core.job_wait", [jid])[0]["result"][0]["id"] == target["id"]
    # services
    svcs = {s["service"]: s for s in c.ok("service.query")}
    assert svcs["iscsitarget"]["state"] == "RUNNING" and svcs["nbd"]["state"] == "RUNNING", svcs
    assert c.ok("service.started", ["iscsitarget"]) is True
    assert c.ok("service.reload", ["iscsitarget", {}]) is True

    # ping/pong at the WebSocket level
    c.ws.ping("hello")
    assert c.ok("core.ping") == "pong"
    # logout ends the login
    assert c.ok("auth.logout") is True
    expect_refused(c, "iscsi.target.query")
    c.ws.close()

    # An oversized message gets an error and the connection is closed (1009).
    c = Client(url)
    c.ws.send("[" + " " * (16 * 1024 * 1024 + 10) + "]")
    got = []
    try:
        while True:
            m = c.ws.recv()
            if not m:
                break
            got.append(json.loads(m))
    except Exception:
        pass
    assert got and got[0]["error"]["code"] == -32600 and "too large" in got[0]["error"]["message"], got
    print("OK main")

elif mode == "ratelimit":
    c = Client(url)
    for i in range(5):
        assert c.ok("auth.login_with_api_key", ["nope-%d" % i]) is False
    r = c.call("auth.login_with_api_key", [key])
    assert r.get("error") and r["error"]["data"]["error"] == 16 and "Rate Limit" in r["error"]["message"], r
    print("OK ratelimit")

elif mode == "login":
    c = Client(url)
    print("LOGIN", c.ok("auth.login_with_api_key", [key]))
PY

PY=/usr/bin/python3
out=$($PY "$TMP/client.py" "$URL" "$KEY" "$ISCSI_PORT" main 2>&1) || fail "WebSocket client: $out"
grep -q "OK main" <<<"$out" || fail "client did not finish: $out"
echo "$out" | grep "share created"
target=$(echo "$out" | sed -n 's/^TARGET //p')

# The share is live for a real initiator.
BASE=iqn.2026-11.org.blockd
iscsi-ls "iscsi://127.0.0.1:$ISCSI_PORT" 2>&1 | grep -q "Target:$BASE:$target" ||
    fail "target $target not discoverable: $(iscsi-ls "iscsi://127.0.0.1:$ISCSI_PORT" 2>&1)"
timeout 20 iscsi-inq "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:$target/0" >/dev/null 2>&1 ||
    fail "LUN 0 of $target does not answer INQUIRY"

# Plain HTTP and unknown paths are refused.
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$WS_PORT/api/current")
[ "$code" = 400 ] || fail "plain GET answered $code, wanted 400"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
    -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' \
    "http://127.0.0.1:$WS_PORT/other")
[ "$code" = 404 ] || fail "unknown path answered $code, wanted 404"
/usr/bin/python3 -c "import websocket; websocket.create_connection('ws://127.0.0.1:$WS_PORT/websocket').close()" ||
    fail "/websocket is not served"

# Failed logins: 5 then refused even with the right key, and logged with the address.
out=$($PY "$TMP/client.py" "$URL" "$KEY" "$ISCSI_PORT" ratelimit 2>&1) || fail "rate limit: $out"
grep -q "ws:127.0.0.1:.*login with an invalid API key refused" "$BLOCKD_LOG" || fail "failed login not logged"
grep -q "blocked for 30 s" "$BLOCKD_LOG" || fail "blocking not logged"
# the Unix socket needs no login
blockctl call iscsi.target.query '[]' >/dev/null || fail "unix socket asks for a login"

# Restart: the key still works (after the block expires we would log in; a
# restart also clears the in-memory limiter).
blockd_stop
blockd_start --api-listen "127.0.0.1:$WS_PORT"
out=$($PY "$TMP/client.py" "$URL" "$KEY" "$ISCSI_PORT" login 2>&1) || fail "login after restart: $out"
[ "$(echo "$out" | sed -n 's/^LOGIN //p')" = True ] || fail "key lost on restart: $out"
blockctl call iscsi.target.query "[[[\"name\",\"=\",\"$target\"]]]" | grep -q "$target" ||
    fail "target lost on restart"
# A deleted key no longer logs in.
blockctl call api_key.delete "[$KEY_ID]" >/dev/null
out=$($PY "$TMP/client.py" "$URL" "$KEY" "$ISCSI_PORT" login 2>&1) || fail "login after delete: $out"
[ "$(echo "$out" | sed -n 's/^LOGIN //p')" = False ] || fail "deleted key still logs in: $out"
blockd_stop
pass
