#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# SCSI COMPARE AND WRITE on an RBD LUN is librbd's
# compare-and-write: one atomic RADOS operation on the OSD (compare extent +
# write), so it stays atomic across gateways and other librbd clients of
# the image (VMware ATS), not just within one blockd. Raw iSCSI commands
# (tests/integration/iscsiraw.py) check:
#  1. a match writes (GOOD, the new data reads back);
#  2. a miscompare answers MISCOMPARE 0E/1D/00 with the byte offset of the
#     first difference in INFORMATION (in the first and in a later block)
#     and writes nothing;
#  3. librbd's own compare-and-write counter (its perf counters on blockd's
#     admin socket) counts the ones that wrote (the read-compare-write
#     fallback would count none);
#  4. a CAW across a 4 MiB object boundary (not atomic in RADOS) still
#     works, through blockd's locked read-compare-write;
#  5. the write of another librbd client (rbd CLI: takes the exclusive lock
#     away; python3-rbd) is seen by the next CAW: the stale compare data miscompares.
. "$(dirname "$0")/lib.sh"
need python3 /usr/bin/python3 ceph
ceph_start
blockd_start --ceph-admin-socket "$CEPH_DIR/run/\$name.\$pid.asok"
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"
blockctl volume create ceph/v --size 64M >/dev/null || fail "volume create"
blockctl share iscsi create ceph/v >/dev/null || fail "share iscsi create"
BASE=$(blockctl call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
ASOK=$(ls "$CEPH_DIR"/run/client.admin."$BLOCKD_PID".asok 2>/dev/null || true)
[ -S "$ASOK" ] || fail "no admin socket of blockd's librados client in $CEPH_DIR/run: $(ls "$CEPH_DIR/run")"

cat >"$TMP/caw.py" <<'PY'
import json, subprocess, sys, iscsiraw as R
port, iqn, asok, phase = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]

def counters():
    d = json.loads(subprocess.check_output(["ceph", "--admin-daemon", asok, "perf", "dump"]))
    rbd = [v for k, v in d.items() if k.startswith("librbd-")]
    assert len(rbd) == 1, "librbd counters: %s" % [k for k in d if k.startswith("librbd")]
    return rbd[0]

s = R.Session(port, iqn)
s.clear_unit_attention()

def caw(lba, n, cmp, new):
    return s.cmd(R.compare_and_write(lba, n), cmp + new)

def read(lba, n):
    st, sense, data = s.cmd(R.read16(lba, n), data_in_len=512 * n)
    assert st == 0, "READ: %d %s" % (st, sense.hex())
    return data

def write(lba, data):
    st, sense, _ = s.cmd(R.write16(lba, len(data) // 512), data)
    assert st == 0, "WRITE: %d %s" % (st, sense.hex())

def miscompare(st, sense, _data, where):
    assert st == 2 and R.sense_key(sense) == 0x0E and R.asc_ascq(sense) == (0x1D, 0), \
        "%s: status %d sense %s" % (where, st, sense.hex())
    return R.sense_info(sense)

A, B, C = b"\xa1" * 1024, b"\xb2" * 1024, b"\xc3" * 1024
if phase == "local":
    # 1-3: one-block and two-block CAWs inside an object
    write(100, A)
    before = counters()
    st, sense, _ = caw(100, 1, A[:512], B[:512])
    assert st == 0, "matching CAW: %d %s" % (st, sense.hex())
    assert read(100, 2) == B[:512] + A[512:], "CAW did not write"
    bad = bytearray(B[:512]); bad[37] ^= 1
    info = miscompare(*caw(100, 1, bytes(bad), C[:512]), "one-block miscompare")
    assert info == 37, "INFORMATION %r, want 37" % info
    bad = bytearray(B[:512] + A[512:]); bad[512 + 5] ^= 0xff
    info = miscompare(*caw(100, 2, bytes(bad), C), "two-block miscompare")
    assert info == 517, "INFORMATION %r, want 517" % info
    assert read(100, 2) == B[:512] + A[512:], "a miscompare wrote"
    st, sense, _ = caw(100, 2, B[:512] + A[512:], C)
    assert st == 0, "two-block CAW: %d %s" % (st, sense.hex())
    assert read(100, 2) == C
    after = counters()
    cmp = after["cmp"] - before["cmp"]
    # librbd counts the compare-and-writes that wrote (2 of the 4)
    assert cmp == 2, "librbd counted %d compare-and-writes for 2 matching CAWs" % cmp
    # 4: across the object boundary at 4 MiB (LBA 8192)
    write(8191, A)
    st, sense, _ = caw(8191, 2, A, B)
    assert st == 0, "CAW across the object boundary: %d %s" % (st, sense.hex())
    assert read(8191, 2) == B
    bad = bytearray(B); bad[700] ^= 1
    info = miscompare(*caw(8191, 2, bytes(bad), C), "boundary miscompare")
    assert info == 700, "INFORMATION %r, want 700" % info
    assert read(8191, 2) == B
    print("ok")
elif phase == "other":
    # 5: the rbd CLI wrote 0xd4 over LBA 100-101 meanwhile
    info = miscompare(*caw(100, 2, C, A), "CAW with stale compare data")
    assert info == 0, "INFORMATION %r, want 0" % info
    st, sense, _ = caw(100, 2, b"\xd4" * 1024, A)
    assert st == 0, "CAW after the other client's write: %d %s" % (st, sense.hex())
    assert read(100, 2) == A
    print("ok")
PY
IQN=$BASE:ceph:v
out=$(timeout 120 python3 "$TMP/caw.py" "$ISCSI_PORT" "$IQN" "$ASOK" local 2>&1) || fail "$out"
[ "$out" = ok ] || fail "$out"
# another librbd client writes the same blocks: rbd takes the exclusive
# lock from blockd (cooperative), blockd takes it back on its next write
timeout 60 /usr/bin/python3 - "$CEPH_CONF" "$CEPH_POOL" <<'PY' || fail "the other librbd client's write failed"
import rados, rbd, sys
with rados.Rados(conffile=sys.argv[1]) as c, c.open_ioctx(sys.argv[2]) as io, rbd.Image(io, "v") as im:
    im.write(b"\xd4" * 1024, 100 * 512)
    im.flush()
PY
out=$(timeout 120 python3 "$TMP/caw.py" "$ISCSI_PORT" "$IQN" "$ASOK" other 2>&1) || fail "$out"
[ "$out" = ok ] || fail "$out"
blockd_alive || fail "blockd died"
blockd_stop
pass
