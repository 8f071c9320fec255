"""Incremental replication checks for t-replication-incremental.sh, with
real clients only: libnbd writes the sources, qemu-img compare reads the
snapshots back over NBD exports, blockctl drives the API.

    python3 repl_incr.py 1|2 CASE...      CASE: SRCPOOL:DSTPOOL:NAME
Phase 1, per case: a pattern on SRCPOOL/NAME, snapshot s1, replication
(full) to DSTPOOL/bk/NAME, scattered changes (writes, a range written back
with its old content, a trim, zeroing, a write past a hole), s2,
replication (incremental): each target snapshot equal to the source's, the
job saying it copied incrementally and far fewer bytes than the volume
holds; then round 2's writes, not yet snapshotted. The caller kills the
daemon (-9) and restarts it; phase 2: s3, replication (incremental
again), equal.
Environment: BLOCKCTL_BIN, SOCK, NBD_PORT, BLOCKD_LOG.
"""
import json
import os
import random
import subprocess
import sys
import time

import nbd

MiB = 1 << 20
SIZE = 64 * MiB
DATA_END = 48 * MiB  # the pattern's end: 48-64 MiB stays a hole


def ctl(*args, ok=True):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    if ok and p.returncode != 0:
        raise AssertionError("blockctl %s: %s %s" % (" ".join(args), p.stdout, p.stderr))
    return p


def call(method, *params, ok=True):
    p = ctl("call", method, json.dumps(list(params)), ok=ok)
    return json.loads(p.stdout) if p.returncode == 0 else p


def uri(name):
    return "nbd://127.0.0.1:%s/%s" % (os.environ["NBD_PORT"], name)


def export(dataset, name):
    ctl("share", "nbd", "create", dataset, "--name", name, *(["--readonly"] if "@" in dataset else []))


def unshare(name):
    """Delete an export once its client has gone (the server may see the
    disconnect a moment after the client exited: EBUSY until then)."""
    deadline = time.time() + 30
    while True:
        p = ctl("share", "nbd", "delete", name, ok=False)
        if p.returncode == 0:
            return
        assert "open connection" in p.stderr + p.stdout and time.time() < deadline, p
        time.sleep(0.1)


def ename(dataset):
    return dataset.replace("/", "-").replace("@", "-")


def snapshot(dataset, snap):
    """Taken once the pool answers (an RBD pool reconnects after a restart)."""
    deadline = time.time() + 90
    while True:
        p = call("zfs.snapshot.create", {"dataset": dataset, "name": snap}, ok=False)
        if not isinstance(p, subprocess.CompletedProcess):
            return
        if time.time() > deadline:
            raise AssertionError("snapshot %s@%s: %s" % (dataset, snap, p.stderr))
        time.sleep(0.5)


def replicate(src, dst):
    """replication.run_onetime as a job; its record once it ended."""
    jid = call("replication.run_onetime", {
        "direction": "PUSH", "transport": "LOCAL", "source_datasets": [src],
        "target_dataset": dst, "recursive": False, "retention_policy": "NONE",
        "name_regex": "s[0-9]+"})
    if not isinstance(jid, int):  # blockctl waited for the job: the newest one
        jid = max(j["id"] for j in call("core.get_jobs",
                                        [["method", "=", "replication.run_onetime"]]))
    deadline = time.time() + 120
    while time.time() < deadline:
        job = call("core.get_jobs", [["id", "=", jid]], {"get": True})
        if job["state"] in ("SUCCESS", "FAILED", "ABORTED"):
            assert job["state"] == "SUCCESS", job
            return job
        time.sleep(0.1)
    raise AssertionError("replication job %d did not end in 120 s" % jid)


def finished(job):
    """(snapshots sent, incremental, full, bytes copied) from the job's last words."""
    d = job["progress"]["description"]
    words = d.replace("(", " ").replace(")", " ").replace(",", " ").split()
    try:
        return (int(words[2]), int(words[words.index("incremental") - 1]),
                int(words[words.index("full") - 1]), int(words[words.index("bytes") - 1]))
    except (ValueError, IndexError):
        raise AssertionError("unexpected final progress: %r" % d)


def same(a, b):
    """The two snapshots, read back over NBD by qemu-img, are equal. The
    exports go again after: a target whose snapshot is exported is in use,
    and a replication refuses it."""
    for ds in (a, b):
        export(ds, ename(ds))
    r = subprocess.run(["qemu-img", "compare", "-f", "raw", "-F", "raw", uri(ename(a)),
                        uri(ename(b))], capture_output=True, text=True)
    for ds in (a, b):
        unshare(ename(ds))
    assert r.returncode == 0, "qemu-img compare %s %s: %s%s" % (a, b, r.stdout, r.stderr)


def writer(src):
    h = nbd.NBD()
    h.connect_uri(uri(ename(src)))
    return h


def pattern(h, rnd):
    for off in range(0, DATA_END, 4 * MiB):
        h.pwrite(rnd.randbytes(4 * MiB), off)
    h.flush()


def changes_round1(h, rnd):
    h.pwrite(rnd.randbytes(4096), 1 * MiB + 4096)
    old = h.pread(65536, 3 * MiB)  # written back with its old content
    h.pwrite(old, 3 * MiB)
    h.trim(131072, 5 * MiB)  # must not keep its old data on the target
    h.zero(65536, 7 * MiB)
    h.pwrite(rnd.randbytes(8192), 52 * MiB + 12288)  # past a hole
    h.pwrite(rnd.randbytes(512), 12 * MiB + 51200)
    h.pwrite(rnd.randbytes(4096), 16 * MiB)
    h.flush()


def changes_round2(h, rnd):
    for off, n in ((2 * MiB, 16384), (9 * MiB + 512, 1024), (20 * MiB, 65536)):
        h.pwrite(rnd.randbytes(n), off)
    h.trim(65536, 22 * MiB)
    h.pwrite(rnd.randbytes(4096), 60 * MiB)
    h.flush()


def pools():
    return {p["name"]: p for p in call("pool.query")}


def bound(src_pool):
    """What an incremental run may copy: the changed granules, rounded up
    to the source's unit (a 4 MiB RADOS object for RBD, 64 KiB for files)."""
    return 24 * MiB if pools()[src_pool].get("rbd") else 2 * MiB


def check_incremental(job, src, dst, base, snap):
    sent, inc, full, copied = finished(job)
    assert (sent, inc, full) == (1, 1, 0), job["progress"]
    assert copied < bound(src.split("/")[0]) and copied < SIZE // 2, \
        "%s → %s: %d bytes copied for an incremental run" % (src, dst, copied)
    logs = [l for l in open(os.environ["BLOCKD_LOG"]).read().splitlines()
            if "replication: %s@%s → %s: incremental from @%s" % (src, snap, dst, base) in l]
    assert logs, "no incremental log line for %s@%s" % (src, snap)
    print("%s → %s @%s: incremental, %d bytes copied of %d" % (src, dst, snap, copied, SIZE))


def phase1(sp, dp, name, seed):
    src, dst = "%s/%s" % (sp, name), "%s/bk/%s" % (dp, name)
    rnd = random.Random(seed)
    call("pool.dataset.create", {"name": src, "type": "VOLUME", "volsize": SIZE})
    export(src, ename(src))
    h = writer(src)
    pattern(h, rnd)
    snapshot(src, "s1")
    job = replicate(src, dst)
    sent, inc, full, copied = finished(job)
    assert (sent, inc, full) == (1, 0, 1), job["progress"]
    same(src + "@s1", dst + "@s1")
    changes_round1(h, rnd)
    snapshot(src, "s2")
    job = replicate(src, dst)
    check_incremental(job, src, dst, "s1", "s2")
    same(src + "@s2", dst + "@s2")
    ro = call("pool.dataset.query", [["name", "=", dst]], {"get": True})["readonly"]
    assert ro["value"] == "ON", ro
    changes_round2(h, rnd)
    h.shutdown()


def phase2(sp, dp, name):
    src, dst = "%s/%s" % (sp, name), "%s/bk/%s" % (dp, name)
    snapshot(src, "s3")
    job = replicate(src, dst)
    check_incremental(job, src, dst, "s2", "s3")
    same(src + "@s3", dst + "@s3")


def main():
    phase = sys.argv[1]
    for i, case in enumerate(sys.argv[2:]):
        sp, dp, name = case.split(":")
        if phase == "1":
            phase1(sp, dp, name, 1000 + i)
        else:
            phase2(sp, dp, name)
    print("phase %s OK" % phase)


main()
