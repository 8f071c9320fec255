#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# SIGTERM with writes in flight: blockd stops reading requests, finishes the
# ones it started and sends their replies before closing, then exits 0.
# Four raw-socket NBD clients keep 256 KiB writes (each with its own
# pattern) in flight on a sync=always volume and record every reply; the
# test sends SIGTERM mid-stream, then reads the volume file: every write
# whose data reached the disk must have had its reply delivered, and every
# acknowledged write must be on disk. Repeated 6 times; then 4 times with
# an iSCSI initiator (raw-socket WRITE(10)s, 48 in flight).
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

# --- the same over iSCSI: pipelined 8 KiB WRITE(10)s with immediate data ---
jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}
blockd_start
blockctl volume create demo/i --size 512M --sync always >/dev/null || fail "volume create (iSCSI)"
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"drain\",\"groups\":[{\"portal\":$portal}]}")" 'j["id"]')
e=$(jget "$(blockctl call iscsi.extent.create '{"name":"drain","disk":"zvol/demo/i","blocksize":512}')" 'j["id"]')
blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null
IVOL=$(find "$STATE/pools/demo" -name i -type f | head -1)
[ -f "$IVOL" ] || fail "cannot find the iSCSI volume file"

cat >"$TMP/iwriter.py" <<'PY'
# iwriter.py PORT ITER OUT: WRITE(10)s until the target goes away; OUT gets
# the ITTs answered with GOOD status.
import socket, struct, sys, threading
PORT, IT, OUT = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SLOTS, LEN, QD = 65536, 8192, 48

def recvn(s, n):
    b = bytearray()
    while len(b) < n:
        d = s.recv(n - len(b))
        if not d:
            raise EOFError
        b += d
    return bytes(b)

def recv_pdu(s):
    bhs = recvn(s, 48)
    dsl = int.from_bytes(bhs[5:8], "big")
    return bhs, recvn(s, dsl + (4 - dsl % 4) % 4) if dsl else b""

s = socket.create_connection(("127.0.0.1", PORT))
keys = (b"InitiatorName=iqn.2026-01.test:drain\0SessionType=Normal\0"
        b"TargetName=iqn.2026-11.org.blockd:drain\0HeaderDigest=None\0DataDigest=None\0"
        b"ImmediateData=Yes\0InitialR2T=Yes\0MaxRecvDataSegmentLength=262144\0")
b = bytearray(48); b[0], b[1] = 0x43, 0x87
b[5:8] = len(keys).to_bytes(3, "big"); b[8:14] = b"\x40\0\0\0\0\3"
struct.pack_into(">I", b, 24, 1)
s.sendall(bytes(b) + keys + bytes((4 - len(keys) % 4) % 4))
bhs, data = recv_pdu(s)
assert bhs[0] & 0x3F == 0x23 and bhs[36] == 0, "login failed: %r" % data
stat_sn = struct.unpack(">I", bhs[24:28])[0]
acked, errors = set(), []
window = threading.Semaphore(QD)
state = {"exp_stat_sn": stat_sn + 1, "dead": False}

def reader():
    try:
        while True:
            bhs, data = recv_pdu(s)
            op = bhs[0] & 0x3F
            state["exp_stat_sn"] = struct.unpack(">I", bhs[24:28])[0] + 1
            if op == 0x21:
                itt = struct.unpack(">I", bhs[16:20])[0]
                if bhs[3] == 0 and bhs[2] == 0:
                    acked.add(itt)
                elif bhs[3] == 2 and len(data) > 4 and data[4] & 0x0F == 6:
                    pass                                # UNIT ATTENTION: not written
                else:
                    errors.append((itt, bhs[2], bhs[3]))
                window.release()
    except (EOFError, OSError):
        pass
    state["dead"] = True
    for _ in range(QD):
        window.release()

t = threading.Thread(target=reader); t.start()
print("writing", flush=True)
cmd_sn = 1
try:
    for slot in range(SLOTS):
        window.acquire()
        if state["dead"]:
            break
        b = bytearray(48)
        b[0], b[1] = 0x01, 0xA1                      # SCSI command; F, W, simple
        b[5:8] = LEN.to_bytes(3, "big")
        struct.pack_into(">IIII", b, 16, slot, LEN, cmd_sn, state["exp_stat_sn"])
        b[32:48] = struct.pack(">BBIBHB", 0x2A, 0, slot * (LEN // 512), 0, LEN // 512, 0) + bytes(6)
        s.sendall(bytes(b) + struct.pack(">QQ", IT, slot) * (LEN // 16))
        cmd_sn += 1
except OSError:
    pass
t.join(90)
open(OUT, "w").write(" ".join(map(str, sorted(acked))))
if errors:
    print("error responses:", errors[:5], file=sys.stderr); sys.exit(1)
PY

ibad=0
for it in 1 2 3 4; do
    [ "$it" = 1 ] || blockd_start
    coproc IW { exec python3 "$TMP/iwriter.py" "$ISCSI_PORT" "$it" "$TMP/iacked.$it"; }
    wpid=$IW_PID
    BG_PIDS+=("$wpid")
    read -r -t 30 line <&"${IW[0]}" || fail "iSCSI writer did not start"
    sleep "0.$((RANDOM % 5 + 3))"
    kill -TERM "$BLOCKD_PID"
    rc=0
    wait "$BLOCKD_PID" || rc=$?
    BLOCKD_PID=
    [ "$rc" = 0 ] || fail "iSCSI run $it: blockd exited with status $rc on SIGTERM"
    wait "$wpid" || fail "iSCSI run $it: the writer saw an error response"
    python3 - "$IVOL" "$it" "$TMP/iacked.$it" <<'PY' || ibad=$((ibad + 1))
import struct, sys
path, IT, acked = sys.argv[1], int(sys.argv[2]), set(map(int, open(sys.argv[3]).read().split()))
SLOTS, LEN = 65536, 8192
on_disk = set()
with open(path, "rb") as f:
    for slot in range(SLOTS):
        f.seek(slot * LEN)
        d = f.read(LEN)
        want = struct.pack(">QQ", IT, slot) * (LEN // 16)
        if any(d[o:o + 512] == want[o:o + 512] for o in range(0, LEN, 512)):
            on_disk.add(slot)
unacked, lost = sorted(on_disk - acked), sorted(acked - on_disk)
print("iSCSI run %d: %d writes on disk, %d acknowledged, %d on disk without a response, "
      "%d acknowledged but not on disk" % (IT, len(on_disk), len(acked), len(unacked), len(lost)))
assert acked, "no write was acknowledged before SIGTERM"
assert not lost, "acknowledged writes missing on disk: %s" % lost[:10]
assert not unacked, "writes on disk without a response: %s" % unacked[:10]
PY
done
[ "$ibad" = 0 ] || fail "$ibad of 4 iSCSI runs had writes on disk without their response"
grep -q "blockd stopped" "$BLOCKD_LOG" || fail "no clean stop"
pass
