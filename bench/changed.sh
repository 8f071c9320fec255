#!/usr/bin/env bash
# Changed blocks (docs/changed-blocks.md): on an ext4 and an XFS pool (loop
# images in a temporary directory: needs root) and an RBD pool (a throwaway
# Ceph cluster, scripts/ceph-cluster.sh, its memstore sized for the volume,
# its snapshots and the replica; RBD=0 leaves it out), a SIZE volume filled with
# data, snapshot s1, 1% of it changed in scattered 64 KiB writes, snapshot
# s2. Prints, per pool:
#   map       nbdinfo --map=qemu:dirty-bitmap:s1 of s2's export (ms, ms/GiB)
#   full      nbdcopy of s2 to a file (s)
#   incr      the map plus only the dirty ranges copied over NBD onto a copy
#             of s1 (s), and full/incr
#   repl      replication.run_onetime of the volume to another volume of the
#             same pool: the full run after s1 and the incremental one after
#             s2 (s and bytes copied each, from the job's last progress), and
#             full/incremental for both (on XFS the full run is a reflink of
#             the file: 0 bytes copied, the time is what compares)
# and, on ext4, the change log's cost: 4 KiB random-write IOPS (fio,
# ioengine=nbd) with the log and without it (BLOCKD_CHANGE_LOG=0), the
# daemon restarted between, interleaved REPEAT times in the same run.
# Appends a line per figure to OUT.
#   flock /tmp/blockd-bench.lock bash bench/changed.sh
# Knobs: BUILD (./build), SIZE (4G), RBD (1; 0: no RBD pool),
# CEPH_STORE (memstore, or bluestore on a block file under the test's
# directory on disk: slower, but holds a SIZE volume), RBD_SIZE (1G on
# memstore, SIZE on bluestore),
# ONLY (the pools to measure: "e x r"),
# RUNTIME (s per fio run, 15), REPEAT (3),
# OUT (bench/results/changed.md).
set -u
cd "$(dirname "$0")/.."
export BUILD=${BUILD:-$PWD/build}
SIZE=${SIZE:-4G}
RUNTIME=${RUNTIME:-15}
REPEAT=${REPEAT:-3}
OUT=${OUT:-$PWD/bench/results/changed.md}
REV=$(git rev-parse --short HEAD)
BLOCKD_TEST_TMP=${BLOCKD_TEST_TMP:-/var/tmp}
export BLOCKD_TEST_TMP
. tests/integration/lib.sh
need fio nbdcopy nbdinfo mkfs.xfs mkfs.ext4 /usr/bin/python3
[ "$(id -u)" = 0 ] || fail "needs root to loop-mount the images"
BYTES=$(numfmt --from=iec "$SIZE")
if [ "${CEPH_STORE:-memstore}" = bluestore ]; then
    RBD_SIZE=${RBD_SIZE:-$SIZE}
else
    RBD_SIZE=${RBD_SIZE:-1G}
fi
RBD_BYTES=$(numfmt --from=iec "$RBD_SIZE")

for fs in xfs ext4; do
    # the volume, s1, s2, and the replica with its two snapshots
    mount_fs $fs $((BYTES * 6 + (1 << 30)))
done

record() { # text
    echo "$*"
    echo "- $(date -u '+%Y-%m-%d %H:%M') $REV load $(cut -d' ' -f1-3 /proc/loadavg) SIZE=$SIZE RBD_SIZE=$RBD_SIZE ${CEPH_STORE:-memstore}: $*" >>"$OUT"
}
now() { date +%s.%N; }
U() { echo "nbd://127.0.0.1:$NBD_PORT/$1"; }

# the loop-mounted filesystems are the operator's to give (docs/security.md)
ALLOW=(--allow-dir "$TMP/xfs" --allow-dir "$TMP/ext4")
blockd_start "${ALLOW[@]}"
export BLOCKCTL_BIN SOCK NBD_PORT
blockctl call pool.create "{\"name\":\"x\",\"path\":\"$TMP/xfs/pool\"}" >/dev/null || fail "pool x"
blockctl call pool.create "{\"name\":\"e\",\"path\":\"$TMP/ext4/pool\"}" >/dev/null || fail "pool e"
POOLS="e x"
if [ "${RBD:-1}" = 1 ]; then
    # in RAM (memstore): the volume and the replica, each with the RADOS
    # clones its snapshot keeps of every object written after it (whole
    # 4 MiB objects: scattered writes to 1% of the volume clone about half
    # of them). memstore's OSD holds about four times what it stores, so
    # the RBD volume is RBD_SIZE (1G), not SIZE: a 4 GiB one is killed for
    # want of memory on a 24 GiB machine. Figures per GiB compare.
    export CEPH_MEM_BYTES=${CEPH_MEM_BYTES:-$((RBD_BYTES * 4 + (2 << 30)))}
    export CEPH_BLOCK_BYTES=${CEPH_BLOCK_BYTES:-$((RBD_BYTES * 4 + (4 << 30)))}
    ceph_start
    blockctl call pool.create "{\"name\":\"r\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" \
        >/dev/null || fail "pool r"
    POOLS="$POOLS r"
fi
NAMES='{"e": "ext4", "x": "xfs", "r": "rbd"}'
export NAMES

# changes POOL: 1% of the volume in 64 KiB writes at random aligned offsets
changes() {
    /usr/bin/python3 - "$(U "$1-live")" "$2" <<'PY'
import random, sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1]); size = int(sys.argv[2])
rnd = random.Random(1)
for _ in range(size // 100 // 65536):
    h.pwrite(rnd.randbytes(65536), rnd.randrange(size // 65536) * 65536)
h.flush(); h.shutdown()
PY
}

# incremental POOL: the dirty ranges of s2 (from s1) onto $TMP/incr.raw,
# 16 reads in flight (as nbdcopy keeps its requests in flight)
incremental() {
    /usr/bin/python3 - "$(U "$1-s2")" "$TMP/incr.raw" <<'PY'
import os, sys, nbd
h = nbd.NBD(); h.add_meta_context("qemu:dirty-bitmap:s1"); h.connect_uri(sys.argv[1])
size, off, dirty = h.get_size(), 0, []
while off < size:
    ents = []
    h.block_status(min(size - off, 1 << 30), off, lambda c, o, e, err: ents.extend(e) or 0)
    for n, f in zip(ents[::2], ents[1::2]):
        if f & 1:
            dirty += [(p, min(4 << 20, off + n - p)) for p in range(off, off + n, 4 << 20)]
        off += n
fd = os.open(sys.argv[2], os.O_WRONLY)
def done(p, buf, err):
    os.pwrite(fd, buf.to_bytearray(), p)
    return 1
inflight = 0
for p, n in dirty:
    while h.aio_in_flight() >= 16:
        h.poll(-1)
    buf = nbd.Buffer(n)
    h.aio_pread(buf, p, completion=lambda err, p=p, buf=buf: done(p, buf, err))
while h.aio_in_flight() > 0:
    h.poll(-1)
os.close(fd)
PY
}

# replicate SRC DST: replication.run_onetime of SRC's snapshots to DST as a
# job; prints "SECONDS BYTES_COPIED" from the job's last progress
replicate() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import json, os, subprocess, sys, time
def call(method, *params):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"], "call", method,
                        json.dumps(list(params))], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)
t0 = time.time()
jid = call("replication.run_onetime", {
    "direction": "PUSH", "transport": "LOCAL", "source_datasets": [sys.argv[1]],
    "target_dataset": sys.argv[2], "recursive": False, "retention_policy": "NONE",
    "name_regex": "s[0-9]+"})
if not isinstance(jid, int):
    jid = max(j["id"] for j in call("core.get_jobs", [["method", "=", "replication.run_onetime"]]))
while True:
    job = call("core.get_jobs", [["id", "=", jid]], {"get": True})
    if job["state"] in ("SUCCESS", "FAILED", "ABORTED"):
        break
    time.sleep(0.05)
assert job["state"] == "SUCCESS", job
words = job["progress"]["description"].split()
print("%.2f %s" % (time.time() - t0, words[words.index("bytes") - 1]))
PY
}

# ONLY=r (or "e x", ...): just those pools (the change log's cost needs e)
POOLS=${ONLY:-$POOLS}
for p in $POOLS; do
    size=$SIZE bytes=$BYTES
    [ $p != r ] || size=$RBD_SIZE bytes=$RBD_BYTES
    blockctl volume create $p/v --size "$size" >/dev/null || fail "volume $p/v"
    blockctl share nbd create $p/v --name $p-live >/dev/null
    fio --name=fill --ioengine=nbd --uri="$(U $p-live)" --rw=write --bs=1M --iodepth=8 \
        --size="$bytes" >/dev/null 2>&1 || fail "fill $p"
    blockctl volume snapshot $p/v@s1 >/dev/null || fail "s1"
    read -r rf_s rf_b <<<"$(replicate $p/v $p/r)"
    [ -n "$rf_b" ] || fail "full replication on $p: no result"
    changes $p "$bytes" || fail "changes on $p"
    blockctl volume snapshot $p/v@s2 >/dev/null || fail "s2"
    read -r ri_s ri_b <<<"$(replicate $p/v $p/r)"
    [ -n "$ri_b" ] || fail "incremental replication on $p: no result"
    record "$(python3 -c '
import json, os, sys
p, fs, fb, i_s, ib = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
print("%s: replication full %.2f s (%d bytes copied), incremental %.2f s (%d bytes copied): "
      "%.1fx less time, %.1fx fewer bytes" % (json.loads(os.environ["NAMES"])[p], fs, fb, i_s, ib,
      fs / max(i_s, 1e-3), fb / max(ib, 1)))' "$p" "$rf_s" "$rf_b" "$ri_s" "$ri_b")"
    blockctl call pool.dataset.delete "[\"$p/r\", {\"recursive\": true}]" >/dev/null ||
        fail "delete the replica $p/r"
    blockctl share nbd create $p/v@s1 --name $p-s1 --readonly >/dev/null
    blockctl share nbd create $p/v@s2 --name $p-s2 --readonly >/dev/null
    t0=$(now); nbdinfo --map=qemu:dirty-bitmap:s1 "$(U $p-s2)" >/dev/null || fail "map"; t1=$(now)
    map_ms=$(python3 -c "print('%.0f' % (($t1 - $t0) * 1000))")
    nbdcopy "$(U $p-s1)" "$TMP/incr.raw" || fail "copy s1"
    sync
    t0=$(now); nbdcopy "$(U $p-s2)" "$TMP/full.raw" || fail "full"; t1=$(now)
    incremental $p || fail "incremental"
    t2=$(now)
    cmp -s "$TMP/incr.raw" "$TMP/full.raw" || fail "the incremental copy differs from the full one"
    python3 - "$p" "$map_ms" "$t0" "$t1" "$t2" "$bytes" >"$TMP/line" <<'PY'
import json, os, sys
p, ms, t0, t1, t2, size = sys.argv[1], float(sys.argv[2]), *map(float, sys.argv[3:6]), int(sys.argv[6])
g = size / (1 << 30)
print("%s (%.0f GiB): map %.0f ms (%.1f ms/GiB), full nbdcopy %.2f s, incremental %.2f s (%.1fx)"
      % (json.loads(os.environ["NAMES"])[p], g, ms, ms / g, t1 - t0, t2 - t1, (t1 - t0) / (t2 - t1)))
PY
    record "$(cat "$TMP/line")"
    rm -f "$TMP/incr.raw" "$TMP/full.raw"
done

# the change log's cost on ext4: IOPS with and without it, interleaved
fio_iops() {
    fio --name=w --ioengine=nbd --uri="$(U e-live)" --rw=randwrite --bs=4k --iodepth=16 \
        --size="$BYTES" --runtime="$RUNTIME" --time_based --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; t=sys.stdin.read(); print("%.0f" % json.loads(t[t.index("{"):])["jobs"][0]["write"]["iops"])'
}
restart() { # BLOCKD_CHANGE_LOG value
    kill -TERM "$BLOCKD_PID"; wait "$BLOCKD_PID" || true; BLOCKD_PID=
    BLOCKD_CHANGE_LOG=$1 blockd_start "${ALLOW[@]}"
}
[[ " $POOLS " == *" e "* ]] || exit 0
on=() off=()
for _ in $(seq "$REPEAT"); do
    restart 1; on+=("$(fio_iops)")
    restart 0; off+=("$(fio_iops)")
done
record "$(python3 -c '
import statistics, sys
on, off = [float(x) for x in sys.argv[1].split()], [float(x) for x in sys.argv[2].split()]
a, b = statistics.median(on), statistics.median(off)
print("ext4 4K random writes: %.0f IOPS with the change log, %.0f without (median of %d each: %s / %s): %+.1f%%"
      % (a, b, len(on), sys.argv[1], sys.argv[2], (a - b) / b * 100))' "${on[*]}" "${off[*]}")"
