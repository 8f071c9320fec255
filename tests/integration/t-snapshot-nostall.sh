#!/usr/bin/env bash
# run-alone: it measures latency or daemon memory, which other tests running beside it would disturb
# disk: the pool is on the machine's disk filesystem (ext4 without reflink), as in the issue
# Snapshots never stall writes, on a filesystem without reflink.
#
# The pool lives in the test's temp dir: ext4 on Debian (checked: FICLONE
# must fail there, and pool.query must say snapshot_o1: false). A 2 GiB
# volume with 1 GiB written; fio (ioengine=nbd) writes random 4 KiB blocks
# over [512M, 1G) with latency statistics while 10 snapshots are taken one
# after the other. No snapshot may hold the writes for 50 ms (the daemon
# logs each hold), and fio's maximum completion latency must stay under
# 100 ms, or twice that of the same job without snapshots if the machine
# is so loaded that this is higher (before copy-before-write, each
# snapshot held the writes for its whole sparse copy: seconds). blockd's
# own write latency histogram (/metrics, scraped without a key from
# 127.0.0.1) is printed for both runs: it tells a stall inside the daemon
# from one of the loaded machine. Meanwhile a Python writer writes sequence-numbered
# blocks into 1024 slots over [0, 128M); each snapshot, read from its file,
# must hold exactly the state after writes 1..M for one M inside the
# snapshot call's window (point-in-time), and every byte of [0, 128M)
# outside the slots must equal the prefill (chunks copied by writes and by
# the background copier alike). The snapshots are checked (and deleted)
# once fio has stopped.
. "$(dirname "$0")/lib.sh"
need fio nbdsh nbdcopy python3 cp curl
NBDSH() { PATH=/usr/bin:$PATH nbdsh "$@"; }
NBDSH -n -c 'import nbd' || fail "nbdsh cannot import nbd (python3-libnbd missing)"
fio --enghelp 2>/dev/null | grep -qw nbd || fail "fio has no nbd ioengine"
# /metrics from 127.0.0.1 without a key: the daemon's own write latency
# histogram, to tell a stall inside blockd from one outside (fio's process
# or the machine; see the end).
WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT" --metrics-allow 127.0.0.1

POOL_DIR=$STATE/pools/demo
[ -d "$POOL_DIR" ] || fail "no default pool directory at $POOL_DIR"
head -c 65536 /dev/urandom >"$POOL_DIR/.reflink-check" || fail "cannot write in the pool"
if cp --reflink=always "$POOL_DIR/.reflink-check" "$POOL_DIR/.reflink-check2" 2>/dev/null; then
    fail "the pool's filesystem ($(stat -f -c %T "$POOL_DIR")) can reflink: this test needs one that cannot"
fi
rm -f "$POOL_DIR/.reflink-check" "$POOL_DIR/.reflink-check2"
o1=$(blockctl call pool.query '[[["name","=","demo"]]]' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0].get("snapshot_o1"))')
[ "$o1" = "False" ] || fail "pool.query: snapshot_o1 is '$o1' on a filesystem without reflink"

# Sizes: the issue's case (2 GiB volume, 1 GiB written, 10 snapshots) with
# NOSTALL_MODE=strict, as bench/snapshot.sh runs it; make check runs a
# smaller one (1 GiB, 256 MiB written, 4 snapshots), which takes a third of
# the time and writes a tenth of the data.
if [ "${NOSTALL_MODE:-check}" = strict ]; then
    VSIZE=2G VBYTES=$((2 << 30)) FILL_MB=1024 SNAPS=10
else
    VSIZE=1G VBYTES=$((1 << 30)) FILL_MB=256 SNAPS=4
fi
export SNAPS VBYTES
blockctl volume create demo/ns --size $VSIZE >/dev/null || fail "volume create"
blockctl share nbd create demo/ns --name ns >/dev/null || fail "share create"
head -c ${FILL_MB}M /dev/urandom >"$TMP/fill" || fail "cannot make fill data"
nbdcopy --allocated "$TMP/fill" "nbd://127.0.0.1:$NBD_PORT/ns" || fail "prefill with nbdcopy"
truncate -s 128M "$TMP/fill" # the part the snapshots are compared with

cat >"$TMP/fio.job" <<EOF
[w]
ioengine=nbd
uri=nbd://127.0.0.1:$NBD_PORT/ns
rw=randwrite
bs=4k
offset=$((FILL_MB / 2))m
size=$((FILL_MB / 2))m
iodepth=4
rate_iops=1500
time_based=1
EOF
export URI=nbd://127.0.0.1:$NBD_PORT/ns BLOCKCTL_BIN SOCK TMP POOL_DIR
export METRICS=http://127.0.0.1:$WS_PORT/metrics

cat >"$TMP/nostall.py" <<'PY'
import json, mmap, os, signal, struct, subprocess, time, nbd

K = 1024
BS = 4096
REGION = 128 << 20
STRIDE = REGION // K
SNAPS = int(os.environ["SNAPS"])

def off(slot):
    return slot * STRIDE + 2 * BS

def block(seq, slot):
    head = struct.pack("<4sQI", b"NSEQ", seq, slot)
    body = struct.pack("<Q", (seq * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) * ((BS - 16) // 8)
    return head + body[: BS - len(head)]

def expected_seq(slot, m):
    if m < 1:
        return 0
    n = m - ((m - slot) % K)
    return n if n >= 1 else 0

def ctl(*args):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    assert p.returncode == 0, "blockctl %s: %s" % (args, p.stderr)
    return p.stdout

fill = open(os.path.join(os.environ["TMP"], "fill"), "rb")
fillmap = mmap.mmap(fill.fileno(), 0, prot=mmap.PROT_READ)

def check_snapshot(name, lo, hi):
    path = os.path.join(os.environ["POOL_DIR"], "ns@" + name)
    with open(path, "rb") as f:
        assert os.fstat(f.fileno()).st_size == int(os.environ["VBYTES"]), "snapshot %s: wrong size" % name
        seqs = []
        for s in range(K):
            f.seek(off(s))
            got = f.read(BS)
            magic, seq, slot = struct.unpack("<4sQI", got[:16])
            assert magic == b"NSEQ" and slot == s, "snapshot %s slot %d: not a written block" % (name, s)
            assert got == block(seq, s), "snapshot %s slot %d: torn block (seq %d)" % (name, s, seq)
            seqs.append(seq)
        m = max(seqs)
        bad = [(s, seqs[s], expected_seq(s, m)) for s in range(K) if seqs[s] != expected_seq(s, m)]
        assert not bad, "snapshot %s is not point-in-time: newest write %d, but (slot, seq, want) %s" % (
            name, m, bad[:8])
        assert lo <= m <= hi, "snapshot %s holds writes up to %d, outside its call (%d..%d)" % (
            name, m, lo, hi)
        # Everything else in [0, 128M) is the prefill.
        f.seek(0)
        for s in range(K):
            piece = f.read(STRIDE)
            base = s * STRIDE
            rel = off(s) - base
            want = fillmap[base:base + STRIDE]
            if piece[:rel] != want[:rel] or piece[rel + BS:] != want[rel + BS:]:
                raise AssertionError("snapshot %s: data at %d..%d differs from the prefill" % (
                    name, base, base + STRIDE))
    return m

h = nbd.NBD()
h.connect_uri(os.environ["URI"])
for s in range(K):
    h.pwrite(block(0, s), off(s))
h.flush()

def write_hist():
    """blockd's cumulative write latency buckets for demo/ns over NBD: {le: count}."""
    text = subprocess.run(["curl", "-sf", os.environ["METRICS"]], capture_output=True,
                          text=True, check=True).stdout
    h = {}
    for line in text.splitlines():
        if line.startswith("blockd_volume_write_seconds_bucket{") and 'volume="demo/ns"' in line \
                and 'protocol="nbd"' in line:
            le = line.split('le="')[1].split('"')[0]
            h[float("inf") if le == "+Inf" else float(le)] = int(line.rsplit(" ", 1)[1])
    return h

def slow_writes(h0, h1):
    """Writes between two scrapes, and how many took over ~65 and ~131 ms in blockd."""
    les = sorted(h1)
    total = h1[float("inf")] - h0.get(float("inf"), 0)
    def over(t):
        le = max(l for l in les if l <= t)
        return total - (h1[le] - h0.get(le, 0))
    return "blockd: %d writes, %d over 65 ms, %d over 131 ms, worst bucket le %s" % (
        total, over(0.065536), over(0.131072),
        min((l for l in les if h1[l] - h0.get(l, 0) == total), default="?"))

def fio_stats(path):
    text = open(path).read()
    w = json.loads(text[text.index("{"):])["jobs"][0]["write"]  # after any "terminating" line
    return "%d writes, clat max %.1f ms, mean %.2f ms, p99.9 %.1f ms" % (
        w["total_ios"], w["clat_ns"]["max"] / 1e6, w["clat_ns"]["mean"] / 1e6,
        w["clat_ns"]["percentile"].get("99.900000", 0) / 1e6)

# Baseline: the same fio job for 15 s, the writer writing, no snapshot.
base = os.path.join(os.environ["TMP"], "fio-base.json")
h0 = write_hist()
fio = subprocess.Popen(["fio", "--output-format=json", "--output=" + base, "--runtime=15",
                        os.path.join(os.environ["TMP"], "fio.job")])
n = 1
while fio.poll() is None:
    h.pwrite(block(n, n % K), off(n % K))
    n += 1
assert fio.returncode == 0, "baseline fio failed"
print("baseline: " + fio_stats(base), flush=True)
h1 = write_hist()
print("baseline " + slow_writes(h0, h1), flush=True)

fio = subprocess.Popen(["fio", "--output-format=json", "--runtime=600",
                        "--output=" + os.path.join(os.environ["TMP"], "fio.json"),
                        os.path.join(os.environ["TMP"], "fio.job")])
t_end = time.monotonic() + 2.0
while time.monotonic() < t_end:  # fio ramps up, the writer runs
    h.pwrite(block(n, n % K), off(n % K))
    n += 1
assert fio.poll() is None, "fio exited early"

windows = []
for i in range(1, SNAPS + 1):
    name = "s%d" % i
    t_end = time.monotonic() + 0.2
    while time.monotonic() < t_end:
        h.pwrite(block(n, n % K), off(n % K))
        n += 1
    done_before = n - 1
    p = subprocess.Popen([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"],
                          "volume", "snapshot", "demo/ns@" + name],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while p.poll() is None:
        h.pwrite(block(n, n % K), off(n % K))
        n += 1
    out, err = p.communicate()
    assert p.returncode == 0, "snapshot %s: %s" % (name, err)
    secs = time.monotonic() - t0
    started_before_end = n - 1
    assert fio.poll() is None, "fio exited during snapshot %s" % name
    windows.append((name, done_before, started_before_end, secs))
    print("%s: %.2f s" % (name, secs), flush=True)

fio.send_signal(signal.SIGINT)
fio.wait(timeout=60)
h2 = write_hist()
h.shutdown()
print("fio: " + fio_stats(os.path.join(os.environ["TMP"], "fio.json")), flush=True)
print("snapshots " + slow_writes(h1, h2), flush=True)
# Checked once fio has stopped: reading and deleting 1 GiB files on the
# same filesystem is not what the latency limit is about.
for name, lo, hi, secs in windows:
    m = check_snapshot(name, lo, hi)
    ctl("snapshot", "delete", "demo/ns@" + name)
    print("%s: writes up to #%d (window %d..%d), contents ok" % (name, m, lo, hi), flush=True)
print("ok %d writer writes" % (n - 1))
PY
out=$(NBDSH -c "exec(open('$TMP/nostall.py').read())" 2>&1) || fail "snapshots under fio: $out"
echo "$out"
case "$out" in *"ok "*) ;; *) fail "script did not finish: $out" ;; esac
ios=$(echo "$out" | sed -n 's/^fio: \([0-9]*\) writes.*/\1/p')
[ "${ios:-0}" -gt 1000 ] || fail "fio wrote only ${ios:-0} blocks"
grep -c "copy-before-write" "$BLOCKD_LOG" | grep -qx "$SNAPS" ||
    fail "not $SNAPS copy-before-write snapshots in the log"
# No snapshot holds the writes for the copy: the goal is 50 ms (asserted in
# strict mode, bench/snapshot.sh); otherwise only a hold of seconds, what a
# snapshot that waits for its copy does, fails: a loaded machine can
# deschedule the holder for far longer than 50 ms.
held=$(grep -o "writes held [0-9.]* ms" "$BLOCKD_LOG" | awk '{print $3}' | sort -n | tail -n 1)
hold_limit=2000
[ "${NOSTALL_MODE:-check}" = strict ] && hold_limit=50
python3 -c "import sys; sys.exit(0 if float('$held') < $hold_limit else 1)" ||
    fail "a snapshot held the volume's writes for $held ms (limit $hold_limit ms)"
# And what a guest sees: no write waits 100 ms. This machine may be so
# loaded that writes wait that long with no snapshot at all: then the
# limit is twice the worst latency of the same fio job without snapshots.
# NOSTALL_LIMIT_MS overrides the 100 ms (a CI host that is known to be slow).
# A latency is a performance figure, which a shared CI machine cannot
# promise: it is asserted in strict mode (bench/snapshot.sh) and reported
# otherwise.
max=$(echo "$out" | sed -n 's/^fio: .*clat max \([0-9.]*\) ms.*/\1/p')
base=$(echo "$out" | sed -n 's/^baseline: .*clat max \([0-9.]*\) ms.*/\1/p')
limit=$(python3 -c "print(max(float('${NOSTALL_LIMIT_MS:-100}'), 2 * float('$base')))")
# blockd's own histogram says whether a stall was inside the daemon (from
# the request's arrival to its reply) or outside (fio's process, the
# machine): both are printed with a failure.
inside=$(echo "$out" | sed -n 's/^snapshots blockd: //p')
inside_base=$(echo "$out" | sed -n 's/^baseline blockd: //p')
if ! python3 -c "import sys; sys.exit(0 if float('$max') < float('$limit') else 1)"; then
    msg="a write waited ${max} ms during the snapshots (limit ${limit} ms; without snapshots: ${base} ms); inside blockd during the snapshots: $inside; without: $inside_base"
    [ "${NOSTALL_MODE:-check}" = strict ] && fail "$msg"
    echo "note: $msg"
fi
blockd_alive || fail "daemon died"
pass "$SNAPS snapshots, longest hold ${held} ms; fio clat max ${max} ms (without snapshots ${base} ms); inside blockd: $inside (without snapshots: $inside_base)"
