#!/bin/bash
# The target pings idle initiators with NOP-In (ITT 0xffffffff, a real TTT)
# and drops a connection whose initiator does not answer; one that answers
# with a NOP-Out echoing the TTT stays logged in. Short intervals come from
# BLOCKD_ISCSI_NOP="INTERVAL,TIMEOUT".
. "$(dirname "$0")/lib.sh"
need python3 timeout

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

BLOCKD_ISCSI_NOP=1,2 blockd_start
blockctl call pool.dataset.create '{"name":"demo/nop","type":"VOLUME","volsize":16777216}' >/dev/null
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"nop\",\"groups\":[{\"portal\":$portal}]}")" 'j["id"]')
e=$(jget "$(blockctl call iscsi.extent.create '{"name":"nop","disk":"zvol/demo/nop"}')" 'j["id"]')
blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null

timeout 60 python3 - "$ISCSI_PORT" <<'PY' || fail "NOP-In client"
import socket, struct, sys, time
PORT = int(sys.argv[1])

def login(isid):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    t = (b"InitiatorName=iqn.2026-01.test:nop\0SessionType=Normal\0"
         b"TargetName=iqn.2026-11.org.blockd:nop\0")
    b = bytearray(48)
    b[0], b[1] = 0x43, 0x87
    b[5:8] = len(t).to_bytes(3, "big")
    b[8:14] = b"\x40\0\0\0" + isid
    struct.pack_into(">I", b, 24, 1)
    s.sendall(bytes(b) + t + bytes((4 - len(t) % 4) % 4))
    bhs, _ = recv_pdu(s)
    assert bhs[0] & 0x3F == 0x23 and bhs[36] == 0, "login failed"
    return s

def recv_exact(s, n):
    b = b""
    while len(b) < n:
        x = s.recv(n - len(b))
        if not x:
            raise EOFError
        b += x
    return b

def recv_pdu(s):
    bhs = recv_exact(s, 48)
    dsl = int.from_bytes(bhs[5:8], "big")
    data = recv_exact(s, dsl + (4 - dsl % 4) % 4) if dsl else b""
    return bhs, data

good = login(b"\0\1")
silent = login(b"\0\2")
answered = 0
deadline = time.time() + 8
while time.time() < deadline:
    bhs, _ = recv_pdu(good)
    if bhs[0] & 0x3F != 0x20:
        print("FAIL: unexpected opcode", hex(bhs[0])); sys.exit(1)
    itt, ttt = struct.unpack(">II", bhs[16:24])
    if itt != 0xFFFFFFFF or ttt == 0xFFFFFFFF:
        print("FAIL: a target ping must have ITT 0xffffffff and a TTT"); sys.exit(1)
    r = bytearray(48)
    r[0], r[1] = 0x40, 0x80            # immediate NOP-Out, the answer
    struct.pack_into(">II", r, 16, 0xFFFFFFFF, ttt)
    good.sendall(bytes(r))
    answered += 1
if answered < 2:
    print("FAIL: only", answered, "pings in 8 s"); sys.exit(1)
# the silent session got pings too, never answered: it must be closed
silent.settimeout(1)
closed = False
try:
    while True:
        if not silent.recv(4096):
            closed = True
            break
except (socket.timeout, ConnectionResetError):
    closed = not isinstance(sys.exc_info()[1], socket.timeout)
if not closed:
    print("FAIL: the unanswering session is still open"); sys.exit(1)
# the answering one still works: a NOP-Out ping gets its NOP-In
p = bytearray(48)
p[0], p[1] = 0x00, 0x80
struct.pack_into(">III", p, 16, 7, 0xFFFFFFFF, 1)
good.sendall(bytes(p))
while True:
    bhs, _ = recv_pdu(good)
    if struct.unpack(">I", bhs[16:20])[0] == 7:
        break
print("ok:", answered, "pings answered; the silent session was dropped")
PY
grep -q "no answer to NOP-In" "$BLOCKD_LOG" || fail "dropped session not logged"
blockd_alive || fail "blockd died"
blockd_stop
pass
