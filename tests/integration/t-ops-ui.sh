#!/bin/bash
# The status page (GET /ui on the API listener) in headless Chromium,
# driven over the DevTools protocol (python3-websocket):
#  - the page is served (text/html, no-store) and asks for an API key;
#  - a wrong key is refused on the page; the right one logs in over the
#    WebSocket JSON-RPC (auth.login_with_api_key);
#  - the pool, a volume with its NBD and iSCSI shares appear; a volume
#    created through the API afterwards appears within a few seconds;
#  - while qemu-io writes over NBD, the volume's IOPS in the table become
#    non-zero (rates computed by the page from core.metrics);
#  - a screenshot is saved in the test's output dir (ui.png; the dir is kept
#    when BLOCKD_KEEP_OUTPUT is set, or on failure).
. "$(dirname "$0")/lib.sh"
need chromium curl qemu-io python3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
KEY=$(blockctl call api_key.create '{"name":"ui"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
blockctl volume create demo/u1 --size 64M >/dev/null
blockctl share nbd create demo/u1 --name u1 >/dev/null
blockctl share iscsi create demo/u1 >/dev/null

hdr=$(curl -s -D - -o "$TMP/ui.html" "http://127.0.0.1:$WS_PORT/ui")
grep -qi '^content-type: text/html' <<<"$hdr" || fail "/ui is not HTML: $hdr"
grep -q 'auth.login_with_api_key' "$TMP/ui.html" || fail "/ui is not the status page"

CDP_PORT=$(free_port)
mkdir -p "$TMP/chrome"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --disable-dev-shm-usage --user-data-dir="$TMP/chrome" --window-size=1200,900 \
    --remote-debugging-address=127.0.0.1 --remote-debugging-port="$CDP_PORT" about:blank \
    >"$TMP/chromium.log" 2>&1 &
CHROME=$!
BG_PIDS+=($CHROME)

OUT=${BLOCKD_TEST_OUTPUT:-$TMP}
cat >"$TMP/drive.py" <<'PY'
import json, os, subprocess, sys, time, urllib.request, websocket

cdp_port, ui, key, out, sock, blockctl, nbd_port = sys.argv[1:8]

def die(msg):
    print("FAIL-DRIVER: " + msg, file=sys.stderr)
    sys.exit(1)

deadline = time.time() + 60
target = None
while time.time() < deadline and not target:
    try:
        tabs = json.load(urllib.request.urlopen("http://127.0.0.1:%s/json/list" % cdp_port, timeout=5))
        target = next((t for t in tabs if t.get("type") == "page"), None)
    except OSError:
        time.sleep(0.3)
if not target:
    die("chromium's DevTools endpoint did not come up")
ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
n = 0
def cdp(method, **params):
    global n
    n += 1
    ws.send(json.dumps({"id": n, "method": method, "params": params}))
    while True:
        m = json.loads(ws.recv())
        if m.get("id") == n:
            if "error" in m:
                die("%s: %s" % (method, m["error"]))
            return m.get("result", {})

def js(expr):
    r = cdp("Runtime.evaluate", expression=expr, returnByValue=True)
    return r.get("result", {}).get("value")

def wait_for(expr, what, secs=30):
    end = time.time() + secs
    while time.time() < end:
        if js(expr):
            return
        time.sleep(0.3)
    die("timed out waiting for %s; page text: %s" % (what, js("document.body.innerText")))

cdp("Page.enable")
cdp("Page.navigate", url=ui)
wait_for("document.getElementById('form') !== null", "the login form")
# A wrong key is refused.
js("document.getElementById('key').value='1-nope'; document.getElementById('form').requestSubmit(); 1")
wait_for("document.getElementById('loginerr').textContent.includes('invalid')", "the refusal")
# The right key logs in.
js("document.getElementById('key').value=%s; document.getElementById('form').requestSubmit(); 1" % json.dumps(key))
wait_for("!document.getElementById('app').hidden", "login")
vol_text = "document.getElementById('volumes').innerText"
wait_for(vol_text + ".includes('demo/u1')", "volume demo/u1")
wait_for(vol_text + ".includes('nbd:u1') && " + vol_text + ".includes('iscsi:iqn.2026-11.org.blockd:demo:u1')", "u1's shares")
wait_for("document.getElementById('pools').innerText.includes('demo')", "pool demo")
# A volume created through the API appears.
if "demo/u2" in js(vol_text):
    die("demo/u2 is listed before it exists")
subprocess.run([blockctl, "--socket", sock, "volume", "create", "demo/u2", "--size", "32M"],
               check=True, stdout=subprocess.DEVNULL)
wait_for(vol_text + ".includes('demo/u2')", "volume demo/u2 after its creation", 15)
rows = js("Array.from(document.querySelectorAll('#volumes tbody tr')).map(r => r.cells[0].textContent)")
if sorted(rows) != ["demo/u1", "demo/u2"]:
    die("volume rows: %s" % rows)
# I/O shows in the table's IOPS column (rates from core.metrics).
qio = subprocess.Popen(["qemu-io", "-f", "raw"] +
                       sum([["-c", "write -P 7 %d 64k" % (i * 65536)] for i in range(64)], []) +
                       ["-c", "sleep 3000"] +
                       sum([["-c", "write -P 8 %d 64k" % (i * 65536)] for i in range(64)], []) +
                       ["-c", "sleep 3000", "nbd://127.0.0.1:%s/u1" % nbd_port],
                       stdout=subprocess.DEVNULL)
iops = ("Array.from(document.querySelectorAll('#volumes tbody tr'))"
        ".filter(r => r.cells[0].textContent === 'demo/u1')"
        ".map(r => parseFloat(r.cells[3].textContent))[0] > 0")
wait_for(iops + " || document.getElementById('sessions').innerText.includes('nbd') && " + iops,
         "non-zero IOPS for demo/u1", 20)
wait_for("document.getElementById('sessions').innerText.includes('127.0.0.1')", "the NBD session", 10)
time.sleep(1.5)
state = js("document.getElementById('state').textContent")
if not state.startswith("logged in"):
    die("page state: " + state)
shot = cdp("Page.captureScreenshot", format="png")
import base64
with open(os.path.join(out, "ui.png"), "wb") as f:
    f.write(base64.b64decode(shot["data"]))
qio.wait(timeout=30)
# Close the browser cleanly: its helper processes exit with it, and none
# keeps writing into the profile dir while the test removes it.
try:
    cdp("Browser.close")
except Exception:
    pass
print("page ok")
PY
/usr/bin/python3 "$TMP/drive.py" "$CDP_PORT" "http://127.0.0.1:$WS_PORT/ui" "$KEY" "$OUT" "$SOCK" \
    "$BLOCKCTL_BIN" "$NBD_PORT" || fail "the status page test failed (see above)"
for i in $(seq 1 100); do kill -0 "$CHROME" 2>/dev/null || break; sleep 0.1; done
wait "$CHROME" 2>/dev/null || true
[ -s "$OUT/ui.png" ] || fail "no screenshot"
grep -q "login with an invalid API key refused" "$BLOCKD_LOG" || fail "the page's wrong key was not logged"
echo "screenshot: $OUT/ui.png"
pass "logged in, saw demo/u2 appear and demo/u1's I/O"
