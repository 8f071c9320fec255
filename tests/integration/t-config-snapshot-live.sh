#!/usr/bin/env bash
# Snapshots of a volume that an NBD client is writing are point-in-time,
# also when the copy is not a reflink (ext4): the snapshot's instant is a
# brief hold of the writes, then copy-before-write while they go on.
#
# A writer writes sequence-numbered 4 KiB blocks, one at a time, round robin
# over 64 slots spread across a 256 MiB volume (192 MiB of it allocated, so
# a sparse copy takes a while), while `blockctl volume snapshot` runs three
# times. Each snapshot, read back through a read-only NBD export, must hold
# exactly the state after writes 1..M for one M: every slot holds the last
# write ≤ M to it, none a newer or an older one. M must lie between the
# last write acknowledged before the snapshot command started and the last
# one started before it returned. A copy made while writes go on breaks
# this (slots copied later hold newer sequence numbers). Afterwards every
# write made during the holds has landed on the live volume.
. "$(dirname "$0")/lib.sh"
need nbdsh nbdcopy python3
NBDSH() { PATH=/usr/bin:$PATH nbdsh "$@"; }
NBDSH -n -c 'import nbd' || fail "nbdsh cannot import nbd (python3-libnbd missing)"
blockd_start

blockctl volume create demo/live --size 256M >/dev/null || fail "volume create"
blockctl share nbd create demo/live --name live >/dev/null || fail "share create"
head -c 192M /dev/urandom >"$TMP/fill" || fail "cannot make fill data"
nbdcopy --allocated "$TMP/fill" "nbd://127.0.0.1:$NBD_PORT/live" || fail "prefill with nbdcopy"
rm -f "$TMP/fill"
export URI=nbd://127.0.0.1:$NBD_PORT/live BLOCKCTL_BIN SOCK NBD_PORT TMP

cat >"$TMP/live.py" <<'PY'
import json, os, struct, subprocess, time, nbd

K = 64
BS = 4096
VOL = 256 << 20
SNAPS = ["s1", "s2", "s3"]

def off(slot):
    return slot * (VOL // K) + 3 * BS

def block(seq, slot):
    head = struct.pack("<4sQI", b"QSEQ", seq, slot)
    body = struct.pack("<Q", (seq * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) * ((BS - 16) // 8)
    return head + body[: BS - len(head)]

def expected_seq(slot, m):
    # the last write <= m to slot (seq n goes to slot n % K), 0 = initial
    if m < 1:
        return 0
    n = m - ((m - slot) % K)
    return n if n >= 1 else 0

def ctl(*args):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    assert p.returncode == 0, "blockctl %s: %s" % (args, p.stderr)
    return p.stdout

h = nbd.NBD()
h.connect_uri(os.environ["URI"])
for s in range(K):
    h.pwrite(block(0, s), off(s))
h.flush()

n = 1
windows = []
for name in SNAPS:
    t_end = time.monotonic() + 0.3
    while time.monotonic() < t_end:  # writing well before the snapshot
        h.pwrite(block(n, n % K), off(n % K), nbd.CMD_FLAG_FUA if n % 17 == 0 else 0)
        n += 1
    done_before = n - 1
    p = subprocess.Popen([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"],
                          "volume", "snapshot", "demo/live@" + name],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while p.poll() is None:
        h.pwrite(block(n, n % K), off(n % K))
        n += 1
    out, err = p.communicate()
    assert p.returncode == 0, "snapshot %s: %s" % (name, err)
    started_before_end = n - 1
    windows.append((name, done_before, started_before_end, time.monotonic() - t0))
    assert started_before_end > done_before, "no write ran during snapshot %s" % name
for _ in range(200):  # and some more after the last one
    h.pwrite(block(n, n % K), off(n % K))
    n += 1
last = n - 1

# The live volume holds every write (the held ones were not lost).
for s in range(K):
    got = h.pread(BS, off(s))
    want = expected_seq(s, last)
    assert got == block(want, s), "live slot %d: want seq %d, got %r" % (
        s, want, struct.unpack("<4sQI", got[:16]))
h.shutdown()

for name, lo, hi, secs in windows:
    ctl("share", "nbd", "create", "demo/live@" + name, "--name", "snap-" + name, "--readonly")
    r = nbd.NBD()
    r.connect_uri("nbd://127.0.0.1:%s/snap-%s" % (os.environ["NBD_PORT"], name))
    assert r.is_read_only()
    seqs = []
    for s in range(K):
        got = r.pread(BS, off(s))
        magic, seq, slot = struct.unpack("<4sQI", got[:16])
        assert magic == b"QSEQ" and slot == s, "snapshot %s slot %d: not a written block" % (name, s)
        assert got == block(seq, s), "snapshot %s slot %d: torn block (seq %d)" % (name, s, seq)
        seqs.append(seq)
    r.shutdown()
    m = max(seqs)
    bad = [(s, seqs[s], expected_seq(s, m)) for s in range(K) if seqs[s] != expected_seq(s, m)]
    assert not bad, "snapshot %s is not point-in-time: newest write %d, but (slot, seq, want) %s" % (
        name, m, bad[:8])
    assert lo <= m <= hi, "snapshot %s holds writes up to %d, outside its call (%d..%d)" % (
        name, m, lo, hi)
    print("%s: writes up to #%d (acked before: %d, started before return: %d), %.2f s" % (
        name, m, lo, hi, secs))
print("ok %d writes" % last)
PY
out=$(NBDSH -c "exec(open('$TMP/live.py').read())" 2>&1) || fail "live snapshot: $out"
case "$out" in *"ok "*) ;; *) fail "script did not finish: $out" ;; esac
echo "$out"
grep -q "not point-in-time\|may be partly included" "$BLOCKD_LOG" && fail "the old warning is still logged"
held=$(grep -o "snapshot demo/live@s[0-9] created (.*writes held [0-9.]* ms" "$BLOCKD_LOG") ||
    fail "no snapshot log lines"
echo "$held"
blockd_alive || fail "daemon died"
pass "$(echo "$out" | tail -n 1); $(echo "$held" | head -n 1 | sed 's/.*(//')"
