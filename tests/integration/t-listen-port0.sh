#!/bin/bash
# Listening on port 0 (the kernel picks a free port): each listener's log
# line names the address actually bound, not ":0", and a client that
# connects to the logged address is served:
#  - "nbd: listening on 127.0.0.1:P": nbdinfo reads the export's size on P;
#  - "iscsi: listening on 127.0.0.1:P (portal group tag 1)": iscsi-ls
#    discovers the target on P and iscsi-inq reads its LUN;
#  - "api: WebSocket JSON-RPC on ws://127.0.0.1:P/api/current": a Python
#    WebSocket client logs in with an API key and calls core.ping on P.
. "$(dirname "$0")/lib.sh"
need nbdinfo iscsi-ls iscsi-inq /usr/bin/python3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

NBD_PORT=0 ISCSI_PORT=0 blockd_start --api-listen 127.0.0.1:0
grep -Eq "listening on 127\.0\.0\.1:0( |$)|JSON-RPC on ws://127\.0\.0\.1:0/" "$BLOCKD_LOG" &&
    fail "a listener logged port 0: $(grep -E '127\.0\.0\.1:0( |$|/)' "$BLOCKD_LOG")"
# logged_port REGEX: the port of the last log line matching REGEX (with
# the port as its first group).
logged_port() { sed -nE "s#.*$1.*#\\1#p" "$BLOCKD_LOG" | tail -n 1; }
nbd=$(logged_port 'nbd: listening on 127\.0\.0\.1:([0-9]+)$')
iscsi=$(logged_port 'iscsi: listening on 127\.0\.0\.1:([0-9]+) \(portal group tag')
ws=$(logged_port 'api: WebSocket JSON-RPC on ws://127\.0\.0\.1:([0-9]+)/api/current')
for p in "$nbd" "$iscsi" "$ws"; do
    [ -n "$p" ] && [ "$p" -gt 0 ] || fail "a listener's port is not in the log: nbd '$nbd' iscsi '$iscsi' ws '$ws'"
done
echo "logged ports: nbd $nbd, iscsi $iscsi, ws $ws"

blockctl volume create demo/p0 --size 16M >/dev/null || fail "volume create"
blockctl share nbd create demo/p0 --name p0 >/dev/null || fail "share nbd create"
blockctl share iscsi create demo/p0 >/dev/null || fail "share iscsi create"

size=$(nbdinfo --size "nbd://127.0.0.1:$nbd/p0") || fail "nbdinfo on the logged NBD port $nbd"
[ "$size" = 16777216 ] || fail "NBD size on port $nbd: $size"

targets=$(iscsi-ls "iscsi://127.0.0.1:$iscsi" 2>&1) || fail "iscsi-ls on the logged port $iscsi: $targets"
target=$(sed -n 's/^Target:\([^ ]*demo:p0\) .*/\1/p' <<<"$targets")
[ -n "$target" ] || fail "target demo:p0 not discovered on port $iscsi: $targets"
timeout 30 iscsi-inq "iscsi://127.0.0.1:$iscsi/$target/0" >"$TMP/inq" 2>&1 ||
    fail "iscsi-inq on port $iscsi: $(cat "$TMP/inq")"

KEY=$(blockctl call api_key.create '{"name":"port0"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])') || fail "api_key.create"
URL="ws://127.0.0.1:$ws/api/current" KEY=$KEY /usr/bin/python3 - <<'PY' || fail "WebSocket client on the logged port $ws"
import os
from wsclient import Client
c = Client()
assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
assert c.ok("core.ping") == "pong"
PY

blockd_stop
pass "NBD, iSCSI and WebSocket listeners on port 0 log the bound ports ($nbd, $iscsi, $ws) and serve there"
