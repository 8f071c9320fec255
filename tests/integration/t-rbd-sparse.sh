#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Block status on RBD volumes: NBD base:allocation and SCSI GET
# LBA STATUS come from rbd_diff_iterate2 (object map / fast-diff), so a
# sparse RBD volume shows its holes and copies of it stay sparse:
#  1. a fresh 64 MiB volume with 1 MiB written at 8 MiB: `nbdinfo --map`
#     shows a hole before it, data there, a hole after;
#  2. nbdcopy and qemu-img convert of the export to a file stay sparse
#     (only about what was written is allocated) and hold the same bytes;
#  3. GET LBA STATUS over iSCSI: LBA 0 starts a deallocated run that ends
#     at 8 MiB, and LBA 16384 (8 MiB) is mapped;
#  4. usedbydataset / usedbysnapshots (cached between queries, dsrbd.c) follow
#     writes through the open export, a snapshot and its deletion.
. "$(dirname "$0")/lib.sh"
need nbdinfo nbdcopy qemu-img qemu-io python3
ceph_start
blockd_start
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"
blockctl volume create ceph/v --size 64M >/dev/null || fail "volume create"
blockctl share nbd create ceph/v --name v >/dev/null || fail "share nbd create"
blockctl share iscsi create ceph/v >/dev/null || fail "share iscsi create"
BASE=$(blockctl call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
U=nbd://127.0.0.1:$NBD_PORT/v
M=$((1024 * 1024))

qemu-io -f raw "$U" -c "write -P 0x5e 8M 1M" -c flush >/dev/null || fail "write"
# 1. the map
nbdinfo --map --json "$U" >"$TMP/map.json" || fail "nbdinfo --map"
python3 - "$TMP/map.json" "$M" <<'PY' || fail "nbdinfo --map: $(nbdinfo --map "$U")"
import json, sys
m, M = json.load(open(sys.argv[1])), int(sys.argv[2])
def state(off):  # base:allocation type bits of the extent holding off (1: hole, 2: zero)
    for e in m:
        if e["offset"] <= off < e["offset"] + e["length"]:
            return e["type"]
    raise SystemExit("no extent at %d" % off)
assert state(0) & 1, "0 is not a hole"
assert state(8 * M - 1) & 1, "the byte before the data is not a hole"
assert not state(8 * M) & 1 and not state(9 * M - 1) & 1, "the written MiB is not data"
assert state(16 * M) & 1 and state(64 * M - 1) & 1, "the end is not a hole"
data = sum(e["length"] for e in m if not e["type"] & 1)
assert data <= 4 * M, "%d bytes reported as data for 1 MiB written" % data
PY
# 2. sparse copies
nbdcopy "$U" "$TMP/copy.raw" || fail "nbdcopy"
qemu-img convert -f raw -O raw "$U" "$TMP/conv.raw" || fail "qemu-img convert"
for f in copy.raw conv.raw; do
    [ "$(stat -c %s "$TMP/$f")" = $((64 * M)) ] || fail "$f has the wrong size"
    used=$(($(stat -c %b "$TMP/$f") * 512))
    [ "$used" -le $((4 * M)) ] || fail "$f is not sparse: $used bytes allocated for 1 MiB written"
    qemu-img compare -f raw -F raw "$U" "$TMP/$f" >/dev/null || fail "$f differs from the volume"
done
# 3. GET LBA STATUS
python3 - "$ISCSI_PORT" "$BASE:ceph:v" <<'PY' || fail "GET LBA STATUS"
import struct, sys, iscsiraw as R
s = R.Session(int(sys.argv[1]), sys.argv[2])
s.clear_unit_attention()
def status(lba):
    cdb = struct.pack(">BBQIBB", 0x9E, 0x12, lba, 24, 0, 0)
    st, sense, d = s.cmd(cdb, data_in_len=24)
    assert st == 0, "GET LBA STATUS: %d %s" % (st, sense.hex())
    start, n, prov = struct.unpack(">QIB", d[8:21])
    return start, n, prov & 0x0F
start, n, prov = status(0)
assert (start, prov) == (0, 1), "LBA 0: start %d, provisioning status %d" % (start, prov)
assert n == 16384, "the deallocated run from LBA 0 has %d blocks, want 16384 (8 MiB)" % n
start, n, prov = status(16384)
assert (start, prov) == (16384, 0), "LBA 16384: start %d, provisioning status %d" % (start, prov)
assert 2048 <= n <= 8192, "the mapped run at 8 MiB has %d blocks" % n
PY
# 4. usage figures stay right across the cache
usage() { # usedbydataset and usedbysnapshots of ceph/v, in MiB (whole 4 MiB objects)
    blockctl call pool.dataset.query '[[["id","=","ceph/v"]]]' | python3 -c '
import json, sys
r = json.load(sys.stdin)[0]
assert r["used"]["parsed"] == r["usedbydataset"]["parsed"] + r["usedbysnapshots"]["parsed"]
print(r["usedbydataset"]["parsed"] >> 20, r["usedbysnapshots"]["parsed"] >> 20)'
}
[ "$(usage)" = "4 0" ] || fail "usage after 1 MiB written: $(usage)"
[ "$(usage)" = "4 0" ] || fail "usage, asked again: $(usage)"
qemu-io -f raw "$U" -c "write -P 0x5f 20M 1M" -c flush >/dev/null || fail "second write"
[ "$(usage)" = "8 0" ] || fail "usage after a write to a second object: $(usage)"
blockctl volume snapshot ceph/v@s1 >/dev/null || fail "snapshot"
qemu-io -f raw "$U" -c "write -P 0x60 40M 1M" -c flush >/dev/null || fail "third write"
[ "$(usage)" = "12 8" ] || fail "usage after a snapshot and a write: $(usage)"
blockctl call zfs.snapshot.delete '"ceph/v@s1"' >/dev/null || fail "snapshot delete"
[ "$(usage)" = "12 0" ] || fail "usage after the snapshot's deletion: $(usage)"
blockd_stop
pass
