#!/bin/bash
# Idle sockets from a handful of addresses cannot lock real clients out.
# 48 idle TCP connections, 16 from each of 127.0.0.2/.3/.4 (loopback has
# all of 127/8), fill the WebSocket API's pending room (64 - 64/4 = 48),
# the NBD one and the iSCSI one (--max-pending 48); a real client (an API
# key login and a query, nbdinfo, iscsi-inq) still gets in and works,
# because a full room evicts the oldest pending connection of the busiest
# address instead of refusing the newcomer (logged, naming both). Then the
# flood reconnects every socket the server closes (churn), and the real
# clients still get in, again and again.
. "$(dirname "$0")/lib.sh"
need python3 nbdinfo iscsi-inq timeout
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT" --handshake-timeout 120 --max-pending 48
blockctl volume create demo/l --size 16M >/dev/null || fail "volume create"
blockctl share nbd create demo/l --name l >/dev/null || fail "nbd share"
blockctl share iscsi create demo/l >/dev/null || fail "iscsi share"
BASE=$(jget "$(blockctl call iscsi.global.config)" 'j["basename"]')
KEY=$(jget "$(blockctl call api_key.create '{"name":"lockout"}')" 'j["key"]')

cat >"$TMP/flood.py" <<'PY'
# flood.py PORT PER_ADDR CHURN ADDR...: hold PER_ADDR idle connections from
# each ADDR; print how many are open once that stays so for 1 s (reopening
# what the server closes meanwhile: an earlier flood's sockets may still be
# counted; at most 30 s). With CHURN=1, go on reopening every socket the
# server closes until stdin closes, then print the reopen count.
import resource, select, socket, sys, threading, time
port, per, churn, addrs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
def opened(src):
    s = socket.socket(); s.bind((src, 0)); s.connect(("127.0.0.1", port)); return s
socks = {opened(a): a for a in addrs for i in range(per)}
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
def closed(s):
    try:
        while True:
            d = s.recv(4096, socket.MSG_DONTWAIT)   # an NBD greeting may come first
            if not d:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True
reopened = 0
def reopen_closed(timeout):
    global reopened
    r, _, _ = select.select(list(socks), [], [], timeout)
    n = 0
    for s in r:
        if closed(s):
            a = socks.pop(s); s.close()
            socks[opened(a)] = a
            n += 1
    reopened += n
    return n
t0 = time.time()
while time.time() - t0 < 30:
    if reopen_closed(1.0) == 0:
        break
print(sum(1 for s in socks if not closed(s)), flush=True)
reopened = 0
while churn and not stop.is_set():
    reopen_closed(0.2)
stop.wait()
print(reopened, flush=True)
PY

ws_login() { # a real API client: log in with the key and list datasets
    timeout 60 /usr/bin/python3 - "ws://127.0.0.1:$WS_PORT/api/current" "$KEY" <<'PY'
import json, sys, websocket
ws = websocket.create_connection(sys.argv[1], timeout=30)
def call(i, m, p):
    ws.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": m, "params": p}))
    return json.loads(ws.recv())
assert call(1, "auth.login_with_api_key", [sys.argv[2]])["result"] is True
assert isinstance(call(2, "pool.dataset.query", [])["result"], list)
PY
}

client() { # client PROTO: one real client of PROTO gets in and works
    case $1 in
    ws) ws_login ;;
    nbd) timeout 60 nbdinfo "nbd://127.0.0.1:$NBD_PORT/l" >/dev/null ;;
    iscsi) timeout 60 iscsi-inq "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:demo:l/0" >/dev/null ;;
    esac
}

flood() { # flood NAME PORT CHURN: start it, check the room is full
    coproc FLOOD { exec /usr/bin/python3 "$TMP/flood.py" "$2" 16 "$3" 127.0.0.2 127.0.0.3 127.0.0.4; }
    flood_pid=$FLOOD_PID # bash unsets FLOOD_PID once the coprocess has ended
    BG_PIDS+=("$flood_pid")
    read -r -t 60 kept <&"${FLOOD[0]}" || fail "$1 flood client did not report"
    [ "$kept" -eq 48 ] || fail "$1: $kept of 48 idle connections open (the room is 48)"
}
flood_end() { # flood_end: stop it; $reopened: its reopen count
    exec {FLOOD[1]}>&-
    read -r -t 60 reopened <&"${FLOOD[0]}" || reopened=0
    wait "$flood_pid" 2>/dev/null || true
}

for proto in ws nbd iscsi; do
    case $proto in
    ws) port=$WS_PORT name=api-ws ;;
    nbd) port=$NBD_PORT name=nbd ;;
    iscsi) port=$ISCSI_PORT name=iscsi ;;
    esac
    # --- the room full of idle sockets: a real client gets in ---
    flood $proto "$port" 0
    client $proto || fail "$proto client locked out by 48 idle sockets from 3 addresses"
    grep -q "127.0.0.[234]:[0-9]*: $name: pending connection evicted to admit .*127.0.0.1:[0-9]*: 48 connections still in their handshake is the limit" \
        "$BLOCKD_LOG" || fail "no log line naming the evicted $proto peer and the newcomer"
    flood_end
    # --- churn: the flood reopens what the server closes ---
    flood $proto "$port" 1
    for i in 1 2 3 4 5; do
        client $proto || fail "$proto client locked out during reconnect churn (try $i)"
        sleep 1
    done
    flood_end
    [ "$reopened" -ge 5 ] || fail "$proto: the flood reopened only $reopened sockets: no churn"
done
blockd_alive || fail "blockd died"
blockd_stop
pass
