#!/usr/bin/env bash
# Hostile NBD input from a raw-socket client — truncated handshakes, bad
# magic, oversized and unknown options, unknown commands and flags, writes
# running past the end, oversized payloads, a deep pipeline, thousands of
# connections opened and dropped — while a well-behaved libnbd client keeps
# reading and checking data. Violations close only the offending connection
# (with a log line naming the peer); the daemon keeps serving.
. "$(dirname "$0")/lib.sh"
need python3 nbdcopy
/usr/bin/python3 -c 'import nbd' 2>/dev/null || fail "python3-libnbd (module nbd) is not installed"
blockd_start

blockctl volume create demo/b --size 32M >/dev/null || fail "volume create"
blockctl share nbd create demo/b --name b >/dev/null || fail "share"
head -c $((32 << 20)) /dev/urandom >"$TMP/ref.img"
nbdcopy "$TMP/ref.img" "nbd://127.0.0.1:$NBD_PORT/b" || fail "fill"

/usr/bin/python3 - "$NBD_PORT" "$TMP/ref.img" <<'PY' || fail "bad-input script failed"
import os, socket, struct, sys, threading, time
import nbd

PORT = int(sys.argv[1]); REF = open(sys.argv[2], "rb").read(); SIZE = len(REF)
stop = threading.Event(); good = {"reads": 0, "errors": []}

def good_client():
    h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%d/b" % PORT)
    i = 0
    while not stop.is_set():
        off = (i * 1048573 * 7) % (SIZE - 65536) // 512 * 512
        try:
            if h.pread(65536, off) != REF[off:off + 65536]:
                good["errors"].append("bad data at %d" % off)
        except Exception as e:
            good["errors"].append(repr(e)); return
        good["reads"] += 1; i += 1
    h.shutdown()

t = threading.Thread(target=good_client); t.start()

def conn():
    s = socket.create_connection(("127.0.0.1", PORT)); s.settimeout(10); return s

def recvn(s, n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d: raise EOFError("closed after %d of %d bytes" % (len(b), n))
        b += d
    return b

def closed(s):
    try:
        while True:
            d = s.recv(65536)
            if not d: return True
    except (ConnectionResetError, BrokenPipeError): return True
    except socket.timeout: return False

def hello(s, flags=3):
    h = recvn(s, 18); assert h[:16] == b"NBDMAGICIHAVEOPT", h
    s.sendall(struct.pack(">I", flags))

def opt(s, o, data=b"", length=None):
    s.sendall(b"IHAVEOPT" + struct.pack(">II", o, len(data) if length is None else length) + data)

def opt_replies(s):
    out = []
    while True:
        magic, o, t, n = struct.unpack(">QIII", recvn(s, 20))
        assert magic == 0x3e889045565a9, hex(magic)
        out.append((t, recvn(s, n)))
        if t not in (2, 3, 4): return out

def go(s, name=b"b"):
    opt(s, 8); assert opt_replies(s)[-1][0] == 1          # structured replies
    opt(s, 7, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
    r = opt_replies(s); assert r[-1][0] == 1, r
    return struct.unpack(">Q", r[0][1][2:10])[0]

def req(s, typ, off, ln, flags=0, cookie=1, payload=b"", magic=0x25609513):
    s.sendall(struct.pack(">IHHQQI", magic, flags, typ, cookie, off, ln) + payload)

def simple_reply(s):
    magic, err, cookie = struct.unpack(">IIQ", recvn(s, 16)); assert magic == 0x67446698, hex(magic)
    return err, cookie

# 1. truncated handshakes
for cut in (0, 2, 4 + 5, 4 + 16 + 3):
    s = conn(); recvn(s, 18)
    blob = struct.pack(">I", 3) + b"IHAVEOPT" + struct.pack(">II", 7, 30) + b"abc"
    s.sendall(blob[:cut]); s.close()
# 2. unknown client flags, no fixed newstyle, bad option magic → closed
for flags in (0x80, 0):
    s = conn(); hello(s, flags); assert closed(s), "flags %x" % flags
s = conn(); hello(s); s.sendall(b"IHAVEOPX" + struct.pack(">II", 3, 0)); assert closed(s)
# 3. oversized options: 1 MiB → ERR_TOO_BIG and the session goes on; 2 GiB → closed
s = conn(); hello(s)
opt(s, 6, length=1 << 20); s.sendall(b"\0" * (1 << 20))
assert opt_replies(s)[-1][0] == 0x80000009
opt(s, 3); assert opt_replies(s)[-1][0] == 1
opt(s, 7, length=0x7fffffff); assert closed(s)
# 4. unknown options, malformed INFO, unknown export
s = conn(); hello(s)
for o in (0, 4, 11, 12, 99, 0x7fffffff):
    opt(s, o, b"xyz"); assert opt_replies(s)[-1][0] == 0x80000001, o
opt(s, 6, b"\0\0\0\x10ab"); assert opt_replies(s)[-1][0] == 0x80000003
opt(s, 7, struct.pack(">I", 4) + b"nope" + struct.pack(">H", 0)); assert opt_replies(s)[-1][0] == 0x80000006
opt(s, 10, b"\0" * 8); assert opt_replies(s)[-1][0] in (0x80000003,)  # SET_META before STRUCTURED
size = go(s); assert size == SIZE
# 5. transmission: unknown command, unknown flag, write past the end (payload
#    consumed, ENOSPC), read past the end, then a good read still works
req(s, 99, 0, 512, cookie=11); assert simple_reply(s) == (22, 11)
req(s, 2 + 0x100, 0, 0, cookie=12); assert simple_reply(s) == (22, 12)
req(s, 1, SIZE - 512, 4096, cookie=13, payload=b"w" * 4096); assert simple_reply(s) == (28, 13)
req(s, 1, 0, 512, flags=1 << 7, cookie=14, payload=b"w" * 512); assert simple_reply(s) == (22, 14)
req(s, 0, SIZE - 512, 4096, cookie=15)
hdr = recvn(s, 20); magic, fl, typ, cookie, ln = struct.unpack(">IHHQI", hdr)
assert typ == 32769 or typ == 32770, typ; body = recvn(s, ln); assert struct.unpack(">I", body[:4])[0] == 22
req(s, 0, 4096, 4096, cookie=16)
hdr = recvn(s, 20); magic, fl, typ, cookie, ln = struct.unpack(">IHHQI", hdr)
assert typ == 1 and cookie == 16; body = recvn(s, ln); assert body[8:] == REF[4096:8192]
# 6. a deep pipeline (more than max in flight) is answered completely
n = 2000
s.sendall(b"".join(struct.pack(">IHHQQI", 0x25609513, 0, 0, 1000 + i, (i * 4096) % SIZE, 4096) for i in range(n)))
seen = set()
for _ in range(n):
    magic, fl, typ, cookie, ln = struct.unpack(">IHHQI", recvn(s, 20)); body = recvn(s, ln)
    i = cookie - 1000; off = (i * 4096) % SIZE
    assert body[8:] == REF[off:off + 4096]; seen.add(cookie)
assert len(seen) == n
# 6b. a client that pipelines without reading replies: the server stops
#     parsing at its backlog limit and resumes as replies are read
n = 30000
blob = b"".join(struct.pack(">IHHQQI", 0x25609513, 0, 99, 50000 + i, 0, 512) for i in range(n))
sender = threading.Thread(target=s.sendall, args=(blob,)); sender.start()
time.sleep(1.0)
for i in range(n):
    err, cookie = simple_reply(s); assert (err, cookie) == (22, 50000 + i), (err, cookie, i)
sender.join()
# 7. bad request magic, then a write too large to skip → closed
req(s, 0, 0, 512, magic=0x12345678); assert closed(s)
s = conn(); hello(s); go(s)
req(s, 1, 0, 0xffffffff, cookie=5); s.sendall(b"x" * 100000)
assert closed(s)
# 8. thousands of connections opened and dropped, at several stages
socks = []
for i in range(3000):
    try:
        s = socket.create_connection(("127.0.0.1", PORT))
    except OSError:
        continue
    if i % 3 == 1: s.sendall(struct.pack(">I", 3))
    if i % 3 == 2: s.sendall(struct.pack(">I", 3) + b"IHAVEOPT")
    socks.append(s)
    if len(socks) >= 200:
        for x in socks: x.close()
        socks = []
for x in socks: x.close()

time.sleep(0.5)
stop.set(); t.join()
assert not good["errors"], good["errors"][:3]
assert good["reads"] > 50, good
# and new clients still get in
s = conn(); hello(s); go(s); req(s, 0, 0, 512, cookie=9)
magic, fl, typ, cookie, ln = struct.unpack(">IHHQI", recvn(s, 20)); assert recvn(s, ln)[8:] == REF[:512]
print("bad input ok: good client made %d reads" % good["reads"])
PY
blockd_alive || fail "blockd died"
grep -q "127.0.0.1:[0-9]*: nbd: bad request magic" "$BLOCKD_LOG" || fail "no log line naming the peer"
grep -q "too large to skip" "$BLOCKD_LOG" || fail "no log line for the oversized write"
blockd_stop
pass
