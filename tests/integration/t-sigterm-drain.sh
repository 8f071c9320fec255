#!/bin/bash
# SIGTERM with writes in flight: blockd stops reading requests, finishes the
# ones it started and sends their replies before closing, then exits 0.
# Four raw-socket NBD clients keep 256 KiB writes (each with its own
# pattern) in flight on a sync=always volume and record every reply; the
# test sends SIGTERM mid-stream, then reads the volume file: every write
# whose data reached the disk must have had its reply delivered, and every
# acknowledged write must be on disk. Repeated 6 times.
. "$(dirname "$0")/lib.sh"
need python3

blockd_start
blockctl volume create demo/s --size 1G --sync always >/dev/null || fail "volume create"
blockctl share nbd create demo/s --name s >/dev/null || fail "share"
VOLFILE=$(find "$STATE/pools/demo" -name s -type f | head -1)
[ -f "$VOLFILE" ] || fail "cannot find the volume file"

cat >"$TMP/writer.py" <<'PY'
# writer.py PORT ITER OUT: write until the server goes away; OUT gets the
# cookies whose replies arrived (errors are reported and fail).
import os, socket, struct, sys, threading, time
PORT, IT, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
CONNS, SLOTS, LEN = 4, 1024, 256 << 10

def recvn(s, n):
    b = bytearray()
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return bytes(b)

def pattern(slot):
    return struct.pack(">QQ", IT, slot) * (LEN // 16)

def handshake():
    s = socket.create_connection(("127.0.0.1", PORT))
    assert recvn(s, 18)[:16] == b"NBDMAGICIHAVEOPT"
    s.sendall(struct.pack(">I", 3))
    s.sendall(struct.pack(">QII", 0x49484156454F5054, 7, 7) + struct.pack(">I", 1) + b"s" +
              struct.pack(">H", 0))
    while True:
        _, _, rtype, rlen = struct.unpack(">QIII", recvn(s, 20)); recvn(s, rlen)
        if rtype == 1:
            return s

acked, errors, lock = set(), [], threading.Lock()
started = threading.Barrier(CONNS + 1)

def conn(c):
    s = handshake()
    done = threading.Event()
    def reader():
        try:
            while True:
                magic, err, cookie = struct.unpack(">IIQ", recvn(s, 16))
                with lock:
                    if magic != 0x67446698 or err:
                        errors.append((cookie, err))
                    else:
                        acked.add(cookie)
        except (EOFError, ConnectionResetError, OSError):
            pass
        done.set()
    t = threading.Thread(target=reader); t.start()
    started.wait()
    try:
        for j in range(SLOTS):
            slot = c * SLOTS + j
            s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 1, slot, slot * LEN, LEN) +
                      pattern(slot))
            if done.is_set():
                break
    except OSError:
        pass
    t.join(60)

th = [threading.Thread(target=conn, args=(c,)) for c in range(CONNS)]
for t in th: t.start()
started.wait()
print("writing", flush=True)
for t in th: t.join(90)
with open(OUT, "w") as f:
    f.write(" ".join(map(str, sorted(acked))))
if errors:
    print("error replies:", errors[:5]); sys.exit(1)
PY

bad_runs=0
for it in 1 2 3 4 5 6; do
    [ "$it" = 1 ] || blockd_start
    coproc W { exec python3 "$TMP/writer.py" "$NBD_PORT" "$it" "$TMP/acked.$it"; }
    wpid=$W_PID
    BG_PIDS+=("$wpid")
    read -r -t 30 line <&"${W[0]}" || fail "writer did not start"
    sleep "0.$((RANDOM % 5 + 3))"
    kill -TERM "$BLOCKD_PID"
    rc=0
    wait "$BLOCKD_PID" || rc=$?
    BLOCKD_PID=
    [ "$rc" = 0 ] || fail "run $it: blockd exited with status $rc on SIGTERM"
    wait "$wpid" || fail "run $it: the writer saw an error reply"
    python3 - "$VOLFILE" "$it" "$TMP/acked.$it" <<'PY' || bad_runs=$((bad_runs + 1))
import struct, sys
path, IT, acked = sys.argv[1], int(sys.argv[2]), set(map(int, open(sys.argv[3]).read().split()))
CONNS, SLOTS, LEN = 4, 1024, 256 << 10
on_disk, torn = set(), set()
with open(path, "rb") as f:
    for slot in range(CONNS * SLOTS):
        f.seek(slot * LEN)
        d = f.read(LEN)
        want = struct.pack(">QQ", IT, slot) * (LEN // 16)
        blocks = [d[o:o + 4096] == want[o:o + 4096] for o in range(0, LEN, 4096)]
        if any(blocks):
            on_disk.add(slot)
            if not all(blocks):
                torn.add(slot)
unacked = sorted(on_disk - acked)
lost = sorted(acked - on_disk)
print("run %d: %d writes on disk, %d acknowledged, %d on disk without a reply, "
      "%d acknowledged but not on disk" % (IT, len(on_disk), len(acked), len(unacked), len(lost)))
assert acked, "no write was acknowledged before SIGTERM"
assert not lost and not (torn & acked), "acknowledged writes missing on disk: %s" % lost[:10]
assert not unacked, "writes on disk without a reply: %s" % unacked[:10]
PY
done
[ "$bad_runs" = 0 ] || fail "$bad_runs of 6 runs had writes on disk without their reply"
grep -q "blockd stopped" "$BLOCKD_LOG" || fail "no clean stop"
pass
