"""Changed-blocks checks shared by t-changed-blocks*.sh, with real clients
only: libnbd (writes, reads, the qemu:dirty-bitmap map), nbdcopy and
qemu-img for the backup round trip, blockctl for the API.

    python3 changedlib.py 1|2 POOL GRANULE MODE TMPDIR
MODE "content": a pool without reflink (ext4, tmpfs): phase 1 is answered
from the volume's change log (a range written back with its old data is
reported: it was written), phase 2, after the daemon was killed, by
comparing contents (that range is not reported, and every reported granule
holds a changed byte). MODE "extents": the pool reports what was written
(reflink file pools, RBD). Either way each reported granule was touched by
a write, trim or zeroing.
Phase 1: pattern, s1, changes, s2, the checks, then round 2's writes; the
caller kills the daemon (-9) and restarts it; phase 2: s3 and the checks.
Environment: BLOCKCTL_BIN, SOCK, NBD_PORT.
"""
import json
import os
import random
import subprocess
import sys

import nbd

MiB = 1 << 20
SIZE = 32 * MiB
DATA_END = 24 * MiB  # the pattern's end: 24-32 MiB stays a hole


def ctl(*args, ok=True):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError("blockctl %s: %s" % (" ".join(args), p.stderr))
    return p


def call(method, obj, ok=True):
    p = ctl("call", method, json.dumps(obj), ok=ok)
    return json.loads(p.stdout) if p.returncode == 0 else p


def uri(name):
    return "nbd://127.0.0.1:%s/%s" % (os.environ["NBD_PORT"], name)


def connect(name, *contexts):
    h = nbd.NBD()
    for c in contexts:
        h.add_meta_context(c)
    h.connect_uri(uri(name))
    return h


def export(dataset, name):
    ctl("share", "nbd", "create", dataset, "--name", name, *(["--readonly"] if "@" in dataset else []))


def read_all(name):
    h = connect(name)
    data = b"".join(h.pread(MiB, o) for o in range(0, h.get_size(), MiB))
    h.shutdown()
    return data


def changes_round1(h, rnd):
    """Scattered changes; returns the ranges touched."""
    touched = []

    def w(off, n):
        h.pwrite(rnd.randbytes(n), off)
        touched.append((off, n))
    w(1 * MiB + 4096, 4096)
    old = h.pread(65536, 3 * MiB)  # written back with its old content
    h.pwrite(old, 3 * MiB)
    touched.append((3 * MiB, 65536))
    h.trim(131072, 5 * MiB)
    touched.append((5 * MiB, 131072))
    h.zero(65536, 7 * MiB)
    touched.append((7 * MiB, 65536))
    w(26 * MiB + 12288, 8192)  # past a hole
    w(12 * MiB + 51200, 512)
    w(16 * MiB, 4096)
    w(16 * MiB + 69632, 4096)
    h.flush()
    return touched


ROUND2 = ((2 * MiB, 16384), (9 * MiB + 512, 1024), (20 * MiB, 65536), (30 * MiB, 4096))
ROUND2_TOUCHED = list(ROUND2) + [(22 * MiB, 65536), (4 * MiB, 4096)]


def changes_round2(h, rnd):
    for off, n in ROUND2:
        h.pwrite(rnd.randbytes(n), off)
    h.trim(65536, 22 * MiB)
    old = h.pread(4096, 4 * MiB)
    h.pwrite(old, 4 * MiB)
    h.flush()


SOURCE = {}  # the source of the last api_ranges answer


def api_ranges(base, target):
    """Every range, a page of 3 at a time (next_offset)."""
    out, off = [], 0
    while off is not None:
        r = call("pool.snapshot.changed_blocks",
                 {"base": base, "target": target, "offset": off, "max_results": 3})
        assert len(r["ranges"]) <= 3, r
        out += [(x["offset"], x["length"]) for x in r["ranges"]]
        off = r["next_offset"]
        SOURCE["last"] = r["source"]
    for (a, n), (b, _) in zip(out, out[1:]):
        assert a + n < b, "ranges overlap, touch or are out of order: %s" % out
    return out


def covered(ranges, off):
    return any(a <= off < a + n for a, n in ranges)


def check_cover(old, new, ranges, what):
    """Every byte that differs lies in a reported range."""
    for blk in range(0, len(new), 4096):
        a, b = old[blk:blk + 4096], new[blk:blk + 4096]
        if a == b:
            continue
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        for i in (diff[0], diff[-1]):
            assert covered(ranges, blk + i), "%s: changed byte %d not reported (%s)" % (
                what, blk + i, ranges)


def check_bound(old, new, ranges, touched, granule, mode, what):
    """Every reported granule was touched (and in content mode differs)."""
    for a, n in ranges:
        for g in range(a - a % granule, a + n, granule):
            hit = any(o < g + granule and g < o + m for o, m in touched)
            assert hit, "%s: granule %d reported but never written (%s)" % (what, g, ranges)
            if mode == "compared":
                assert old[g:g + granule] != new[g:g + granule], \
                    "%s: granule %d reported but unchanged" % (what, g)


def dirty_map(name, base):
    h = connect(name, "qemu:dirty-bitmap:" + base)
    assert h.can_meta_context("qemu:dirty-bitmap:" + base), "no dirty-bitmap context for " + base
    size, out, off = h.get_size(), [], 0
    while off < size:
        ents = []

        def cb(ctx, o, e, err):
            if ctx == "qemu:dirty-bitmap:" + base:
                ents.extend(e)
            return 0
        h.block_status(min(size - off, 64 * MiB), off, cb)
        assert ents, "empty block status at %d" % off
        for i in range(0, len(ents), 2):
            if ents[i + 1] & 1:
                out.append((off, ents[i]))
            off += ents[i]
    h.shutdown()
    return out


def backup_round_trip(tmp, s1, s2, base_snap):
    """A full copy of s1 with nbdcopy, then only s2's dirty ranges from
    base_snap copied onto it: qemu-img compare says it is s2."""
    img = os.path.join(tmp, "backup-%s.raw" % s2)
    subprocess.run(["nbdcopy", uri(s1), img], check=True)
    dirty = dirty_map(s2, base_snap)
    h = connect(s2)
    with open(img, "r+b") as f:
        for off, n in dirty:
            for o in range(off, off + n, 4 * MiB):
                f.seek(o)
                f.write(h.pread(min(4 * MiB, off + n - o), o))
    h.shutdown()
    p = subprocess.run(["qemu-img", "compare", "-f", "raw", "-F", "raw", img, uri(s2)],
                       capture_output=True, text=True)
    assert p.returncode == 0, "incremental backup of %s differs: %s%s" % (s2, p.stdout, p.stderr)
    return sum(n for _, n in dirty)


def verify(pool, vol, a, b, touched, granule, mode, tmp):
    """mode: "log" (expect the change log), "compared" (contents compared),
    "extents" (extent maps or RBD)."""
    ea, eb = "%s-%s" % (pool, a), "%s-%s" % (pool, b)
    old, new = read_all(ea), read_all(eb)
    ranges = api_ranges("%s/%s@%s" % (pool, vol, a), "%s/%s@%s" % (pool, vol, b))
    what = "%s %s->%s" % (pool, a, b)
    want = "change_log" if mode == "log" else "snapshots"
    assert SOURCE["last"] == want, "%s: answered from %s, not %s" % (what, SOURCE["last"], want)
    check_cover(old, new, ranges, what)
    check_bound(old, new, ranges, touched, granule, mode, what)
    dirty = dirty_map(eb, a)
    assert dirty == ranges, "%s: NBD map %s != API %s" % (what, dirty, ranges)
    copied = backup_round_trip(tmp, ea, eb, a)
    print("%s: %d ranges, %d bytes reported, %d copied" % (
        what, len(ranges), sum(n for _, n in ranges), copied))
    return ranges


def listed(name):
    """The meta contexts LIST_META_CONTEXT offers on export name."""
    h = nbd.NBD()
    h.set_opt_mode(True)
    h.connect_uri(uri(name))
    names = []
    h.opt_list_meta_context(lambda n: names.append(n) or 0)
    h.opt_abort()
    return sorted(names)


def check_contexts(pool):
    """A snapshot's export offers only the older snapshots; the volume's all
    of them; a name that is not an older snapshot is not given."""
    d = "qemu:dirty-bitmap:"
    assert listed(pool + "-s2") == ["base:allocation", d + "s1"], listed(pool + "-s2")
    assert listed(pool + "-s1") == ["base:allocation"], listed(pool + "-s1")
    assert listed(pool + "-live") == ["base:allocation", d + "s1", d + "s2"], listed(pool + "-live")
    for name in ("nope", "s2"):
        h = connect(pool + "-s2", d + name)
        assert not h.can_meta_context(d + name), "context %s given on s2" % name
        h.shutdown()
    # both contexts, one extent each (REQ_ONE)
    h = connect(pool + "-s2", "base:allocation", d + "s1")
    got = {}
    h.block_status(SIZE, 0, lambda ctx, o, e, err: got.__setitem__(ctx, e) or 0,
                   nbd.CMD_FLAG_REQ_ONE)
    h.shutdown()
    assert len(got.get("base:allocation", [])) == 2 and len(got.get(d + "s1", [])) == 2, got


def phase1(pool, vol, granule, mode, tmp):
    """Pattern, s1, scattered changes, s2, checks; then round 2's writes
    (flushed), left for the caller to kill the daemon before s3."""
    rnd, ds = random.Random(pool), "%s/%s" % (pool, vol)
    ctl("volume", "create", ds, "--size", str(SIZE))
    export(ds, "%s-live" % pool)
    h = connect("%s-live" % pool)
    for off in range(0, DATA_END, MiB):
        h.pwrite(rnd.randbytes(MiB), off)
    h.flush()
    ctl("volume", "snapshot", ds + "@s1")
    touched = changes_round1(h, rnd)
    live = api_ranges(ds + "@s1", ds)  # the live volume as target
    ctl("volume", "snapshot", ds + "@s2")
    for s in ("s1", "s2"):
        export("%s@%s" % (ds, s), "%s-%s" % (pool, s))
    r12 = verify(pool, vol, "s1", "s2", touched, granule, "log" if mode == "content" else mode, tmp)
    assert live == r12, "live target %s != s2 %s" % (live, r12)
    if mode == "content":  # the log reports what was written, even unchanged
        assert covered(r12, 3 * MiB), "a range written back was not in the change log"
    check_contexts(pool)
    changes_round2(h, rnd)
    h.shutdown()


def phase2(pool, vol, granule, mode, tmp):
    """After the kill and restart: s3 holds round 2, and the maps say so."""
    ds = "%s/%s" % (pool, vol)
    ctl("volume", "snapshot", ds + "@s3")
    export(ds + "@s3", "%s-s3" % pool)
    # the log of the epoch the kill cut is not trusted: contents compared
    r23 = verify(pool, vol, "s2", "s3", ROUND2_TOUCHED, granule,
                 "compared" if mode == "content" else mode, tmp)
    if mode == "content":
        assert not covered(r23, 4 * MiB), "a range written back unchanged was reported"
    r13 = api_ranges(ds + "@s1", ds + "@s3")  # both rounds
    check_cover(read_all("%s-s1" % pool), read_all("%s-s3" % pool), r13, pool + " s1->s3")
    # from s3 on, the new epoch is trusted again
    h = connect("%s-live" % pool)
    h.pwrite(b"\x5a" * 4096, MiB)
    h.flush()
    h.shutdown()
    r3l = api_ranges(ds + "@s3", ds)
    assert covered(r3l, MiB), "a write after s3 is not reported: %s" % r3l
    want = "change_log" if mode == "content" else "snapshots"
    assert SOURCE["last"] == want, "s3->live answered from %s" % SOURCE["last"]


def main():
    phase, pool, granule, mode, tmp = sys.argv[1:6]
    (phase1 if phase == "1" else phase2)(pool, "v", int(granule), mode, tmp)
    print("ok")


if __name__ == "__main__":
    main()
