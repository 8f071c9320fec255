#!/bin/bash
# Bad input over raw sockets: malformed, truncated, oversized and
# out-of-order PDUs and bogus login keys. Each must get a Reject, a login
# failure status or a closed connection, while another session (opened
# first, with CRC32C header and data digests) keeps working and the daemon
# keeps running.
. "$(dirname "$0")/lib.sh"
need python3 iscsi-inq timeout

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

blockd_start
blockctl call pool.dataset.create '{"name":"demo/bad","type":"VOLUME","volsize":16777216}' >/dev/null
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"bad\",\"groups\":[{\"portal\":$portal}]}")" 'j["id"]')
e=$(jget "$(blockctl call iscsi.extent.create '{"name":"bad","disk":"zvol/demo/bad"}')" 'j["id"]')
blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null

timeout 120 python3 - "$ISCSI_PORT" <<'PY' || fail "bad-input client"
import socket, struct, sys, time

PORT = int(sys.argv[1])
IQN = "iqn.2026-11.org.blockd:bad"

# ---- CRC32C (Castagnoli), for digests ----
T = []
for i in range(256):
    c = i
    for _ in range(8):
        c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    T.append(c)
def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = T[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF
assert crc32c(bytes(32)) == 0x8A9136AA

def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)

class Conn:
    def __init__(self):
        self.s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
        self.hd = self.dd = False
        self.cmdsn = 1
        self.itt = 0x100
        # A distinct ISID per connection: the same InitiatorName + ISID
        # would reinstate (close) the earlier session, as RFC 7143 says.
        Conn.n = getattr(Conn, "n", 0) + 1
        self.isid = b"\x40\x00\x00\x00" + Conn.n.to_bytes(2, "big")
    def send_raw(self, b):
        self.s.sendall(b)
    def pdu(self, bhs, data=b"", bad_hd=False, bad_dd=False):
        bhs = bytearray(bhs)
        bhs[5:8] = len(data).to_bytes(3, "big")
        out = bytes(bhs)
        if self.hd:
            c = crc32c(bytes(bhs)) ^ (1 if bad_hd else 0)
            out += struct.pack("<I", c)
        if data:
            pad = bytes((4 - len(data) % 4) % 4)
            out += data + pad
            if self.dd:
                out += struct.pack("<I", crc32c(data + pad) ^ (1 if bad_dd else 0))
        return out
    def recv_exact(self, n):
        b = b""
        while len(b) < n:
            x = self.s.recv(n - len(b))
            if not x:
                raise EOFError("closed")
            b += x
        return b
    def recv_pdu(self):
        bhs = self.recv_exact(48)
        if self.hd:
            hd = struct.unpack("<I", self.recv_exact(4))[0]
            if hd != crc32c(bhs):
                fail("bad header digest from target")
        dsl = int.from_bytes(bhs[5:8], "big")
        data = b""
        if dsl:
            data = self.recv_exact(dsl + (4 - dsl % 4) % 4)
            if self.dd:
                dd = struct.unpack("<I", self.recv_exact(4))[0]
                if dd != crc32c(data):
                    fail("bad data digest from target")
            data = data[:dsl]
        return bhs, data
    def closed(self, wait=3.0):
        """True if the target closes the connection (after any replies)."""
        self.s.settimeout(wait)
        try:
            while True:
                if not self.s.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

def login_bhs(flags, itt=0x10, cmdsn=1, vmax=0, vmin=0, isid=b"\x40\x00\x00\x00\x00\x01"):
    b = bytearray(48)
    b[0] = 0x43
    b[1] = flags
    b[2] = vmax
    b[3] = vmin
    b[8:14] = isid
    struct.pack_into(">I", b, 16, itt)
    struct.pack_into(">I", b, 24, cmdsn)
    return b

def text(**kw):
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in kw.items())

def keys(data):
    return dict(p.split("=", 1) for p in data.decode().split("\0") if p)

def login(c, extra=b"", flags=0x87, digests=False, **kw):
    t = text(InitiatorName="iqn.2026-01.test:bad", SessionType="Normal", TargetName=IQN, **kw)
    if digests:
        t += text(HeaderDigest="CRC32C", DataDigest="CRC32C")
    c.send_raw(c.pdu(login_bhs(flags, isid=c.isid), t + extra))
    bhs, data = c.recv_pdu()
    if bhs[0] & 0x3F != 0x23:
        fail(f"expected a Login Response, got opcode {bhs[0]:#x}")
    return bhs, keys(data) if data else {}

def status(bhs):
    return bhs[36] << 8 | bhs[37]

def nop(c, ping=b"hello", itt=None):
    b = bytearray(48)
    b[0] = 0x00
    b[1] = 0x80
    c.itt += 1
    struct.pack_into(">I", b, 16, itt if itt is not None else c.itt)
    struct.pack_into(">I", b, 20, 0xFFFFFFFF)
    struct.pack_into(">I", b, 24, c.cmdsn)
    c.cmdsn += 1
    return c.pdu(b, ping)

def expect_nop_in(c, ping=b"hello"):
    bhs, data = c.recv_pdu()
    if bhs[0] & 0x3F != 0x20 or data != ping:
        fail(f"expected NOP-In echoing {ping!r}, got opcode {bhs[0]:#x} data {data!r}")

def expect_reject(c, reason):
    bhs, data = c.recv_pdu()
    if bhs[0] & 0x3F != 0x3F:
        fail(f"expected a Reject, got opcode {bhs[0]:#x}")
    if bhs[2] != reason:
        fail(f"Reject reason {bhs[2]:#x}, expected {reason:#x}")
    return data

# ---- session A: a good session with CRC32C digests; used throughout ----
A = Conn()
bhs, k = login(A, digests=True)
if status(bhs) != 0 or not bhs[1] & 0x80 or (bhs[1] & 3) != 3:
    fail(f"good login failed: status {status(bhs):#x} flags {bhs[1]:#x}")
if k.get("HeaderDigest") != "CRC32C" or k.get("DataDigest") != "CRC32C":
    fail(f"digests not negotiated: {k}")
if "TargetPortalGroupTag" not in k:
    fail(f"no TargetPortalGroupTag in the first login response: {k}")
A.hd = A.dd = True
A.cmdsn = struct.unpack(">I", bhs[28:32])[0]
A.send_raw(nop(A, b"ping-1"))
expect_nop_in(A, b"ping-1")
print("ok: session with CRC32C header+data digests, NOP ping echoed")

def still_alive(what):
    A.send_raw(nop(A, b"alive"))
    expect_nop_in(A, b"alive")
    print(f"ok: {what}; the other session still works")

# ---- bogus login keys ----
c = Conn()
bhs, k = login(c, extra=text(Bogus="1", MaxBurstLength="abc", ImmediateData="maybe",
                             MaxRecvDataSegmentLength="100", **{"X-com.example.key": "v"}))
if status(bhs) != 0:
    fail(f"login with bogus keys failed: {status(bhs):#x}")
for key, want in (("Bogus", "NotUnderstood"), ("MaxBurstLength", "Reject"),
                  ("ImmediateData", "Reject"), ("MaxRecvDataSegmentLength", "Reject"),
                  ("X-com.example.key", "NotUnderstood")):
    if k.get(key) != want:
        fail(f"{key}: answered {k.get(key)!r}, expected {want}: {k}")
c.s.close()
still_alive("bogus keys answered NotUnderstood/Reject")

def login_fails(expected, why, **kw):
    c = Conn()
    flags = kw.pop("flags", 0x87)
    bhsfn = kw.pop("bhs", None)
    raw = kw.pop("raw", None)
    if raw is not None:
        c.send_raw(c.pdu(bhsfn or login_bhs(flags), raw))
        bhs, _ = c.recv_pdu()
    else:
        bhs, _ = login(c, flags=flags, **kw)
    if status(bhs) != expected:
        fail(f"{why}: status {status(bhs):#06x}, expected {expected:#06x}")
    if not c.closed():
        fail(f"{why}: connection left open after a failed login")
    still_alive(f"{why} -> status {expected:#06x}")

login_fails(0x0207, "no InitiatorName", raw=text(SessionType="Normal", TargetName=IQN))
login_fails(0x0203, "unknown target",
            raw=text(InitiatorName="iqn.2026-01.test:bad", TargetName=IQN + "-nope"))
login_fails(0x0207, "no TargetName", raw=text(InitiatorName="iqn.2026-01.test:bad"))
login_fails(0x0209, "bad SessionType",
            raw=text(InitiatorName="iqn.2026-01.test:bad", SessionType="Weird", TargetName=IQN))
login_fails(0x0200, "malformed text", raw=b"InitiatorName\0")
login_fails(0x0200, "T and C both set", flags=0xC7)
login_fails(0x0200, "next stage 2", flags=0x86)
login_fails(0x0205, "unsupported version",
            bhs=login_bhs(0x87, vmax=5, vmin=5),
            raw=text(InitiatorName="iqn.2026-01.test:bad", TargetName=IQN))
login_fails(0x0200, "key offered twice",
            raw=text(InitiatorName="iqn.2026-01.test:bad", TargetName=IQN,
                     MaxBurstLength="65536") + b"MaxBurstLength=65536\0")
login_fails(0x020A, "TSIH of no session",
            bhs=(lambda b: (b.__setitem__(slice(14, 16), b"\x77\x77"), b)[1])(login_bhs(0x87)),
            raw=text(InitiatorName="iqn.2026-01.test:bad", TargetName=IQN))

# ---- a non-login PDU before login: closed ----
c = Conn()
c.send_raw(nop(c))
if not c.closed():
    fail("NOP-Out before login did not close the connection")
still_alive("PDU before login closed the connection")

# ---- truncated PDU, then hang up ----
c = Conn()
c.send_raw(login_bhs(0x87)[:30])
c.s.close()
still_alive("truncated PDU")

# ---- helpers for full feature phase on a plain session ----
def session():
    c = Conn()
    bhs, k = login(c)
    if status(bhs) != 0:
        fail("login failed")
    c.cmdsn = struct.unpack(">I", bhs[28:32])[0]
    return c

# oversized DataSegmentLength: Reject (or close) and the connection ends
c = session()
b = bytearray(nop(c, b""))
b[5:8] = (16 * 1024 * 1024 - 1).to_bytes(3, "big")
c.send_raw(bytes(b[:48]))
try:
    expect_reject(c, 0x04)
except EOFError:
    pass
if not c.closed():
    fail("oversized PDU left the connection open")
still_alive("DataSegmentLength 16M rejected and connection closed")

# unknown opcode: Reject "command not supported", session goes on
c = session()
b = bytearray(48)
b[0] = 0x1F
c.send_raw(c.pdu(b))
expect_reject(c, 0x05)
c.send_raw(nop(c, b"after"))
expect_nop_in(c, b"after")
# SNACK at ErrorRecoveryLevel 0: Reject
b = bytearray(48)
b[0] = 0x10
c.send_raw(c.pdu(b))
expect_reject(c, 0x05)
# Login Request in full feature phase: Reject (protocol error)
c.send_raw(c.pdu(login_bhs(0x87), text(InitiatorName="x")))
expect_reject(c, 0x04)
# Data-Out for a task that does not exist: ignored
b = bytearray(48)
b[0] = 0x05
b[1] = 0x80
struct.pack_into(">I", b, 16, 0xABCDEF)
c.send_raw(c.pdu(b, b"x" * 512))
# a command far outside the CmdSN window: silently ignored
b = bytearray(48)
b[0] = 0x01
b[1] = 0x80
struct.pack_into(">I", b, 16, 0x777)
struct.pack_into(">I", b, 24, c.cmdsn + 100000)
c.send_raw(c.pdu(b))
# NOP-Out without the I bit and with the reserved ITT: protocol error
b = bytearray(48)
b[0] = 0x00
b[1] = 0x80
struct.pack_into(">I", b, 16, 0xFFFFFFFF)
struct.pack_into(">I", b, 20, 0xFFFFFFFF)
c.send_raw(c.pdu(b))
expect_reject(c, 0x04)
# a SCSI command with immediate data but no W bit: Reject
b = bytearray(48)
b[0] = 0x01
b[1] = 0xC0
struct.pack_into(">I", b, 16, 0x778)
struct.pack_into(">I", b, 20, 512)
struct.pack_into(">I", b, 24, c.cmdsn)
c.cmdsn += 1
b[32] = 0x28
c.send_raw(c.pdu(b, b"\0" * 512))
expect_reject(c, 0x04)
# ... and the session still answers in order
c.send_raw(nop(c, b"still"))
expect_nop_in(c, b"still")
c.s.close()
still_alive("unknown opcode, SNACK, Login in FFP, stray Data-Out, CmdSN out of window")

# bad header digest: the connection is dropped
c = Conn()
bhs, k = login(c, digests=True)
c.hd = c.dd = True
c.cmdsn = struct.unpack(">I", bhs[28:32])[0]
b = bytearray(48)
b[0] = 0x40
b[1] = 0x80
struct.pack_into(">I", b, 16, 5)
struct.pack_into(">I", b, 20, 0xFFFFFFFF)
c.send_raw(c.pdu(b, b"", bad_hd=True))
if not c.closed():
    fail("bad header digest left the connection open")
still_alive("bad header digest closed the connection")

# bad data digest: Reject (data digest error), then closed
c = Conn()
bhs, k = login(c, digests=True)
c.hd = c.dd = True
c.cmdsn = struct.unpack(">I", bhs[28:32])[0]
b = bytearray(nop(c, b"digest"))
c.send_raw(c.pdu(bytes(b[:48]), b"digest", bad_dd=True))
expect_reject(c, 0x02)
if not c.closed():
    fail("bad data digest left the connection open")
still_alive("bad data digest rejected")

# logout of session A
b = bytearray(48)
b[0] = 0x06
b[1] = 0x80
struct.pack_into(">I", b, 16, 0x999)
struct.pack_into(">I", b, 24, A.cmdsn)
A.send_raw(A.pdu(b))
bhs, _ = A.recv_pdu()
if bhs[0] & 0x3F != 0x26 or bhs[2] != 0:
    fail(f"logout response: opcode {bhs[0]:#x} response {bhs[2]}")
if not A.closed():
    fail("connection open after logout")
print("ok: logout")
PY
timeout 20 iscsi-inq "iscsi://127.0.0.1:$ISCSI_PORT/iqn.2026-11.org.blockd:bad/0" >/dev/null ||
    fail "a normal initiator cannot log in after the bad input"
blockd_alive || fail "blockd died"
blockd_stop
pass
