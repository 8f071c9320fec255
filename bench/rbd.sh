#!/usr/bin/env bash
# RBD side by side, all against the same image on one throwaway
# Ceph cluster (scripts/ceph-cluster.sh: one monitor, one memstore OSD on the
# same 2 CPUs), in one run:
#   direct   librbd itself (fio --ioengine=rbd): the limit a gateway is
#            measured against, configured as blockd configures librbd:
#            rbd_cache off (a client cache would absorb writes a gateway
#            must send to the OSDs), and for write+flush one image handle
#            with 8 writes in flight (one fio job, iodepth 8, a flush after
#            each write) like blockd's one handle for all its clients, not
#            8 handles bouncing the exclusive lock
#   iSCSI    blockd on an RBD pool vs tgtd with bs_rbd (tgt-rbd), driven by
#            bench/iscsi_load (libiscsi, one session) and bench/iscsi_flush
#   NBD      blockd on an RBD pool vs qemu-nbd on rbd:, driven by fio's nbd
#            engine (libnbd)
# Cases: 4K random read/write at QD1 and QD32, 1M sequential read/write at
# QD8, 4K write + flush with 8 writers. Each server runs alone on the image
# (the others stopped: two owners would bounce its exclusive lock). CPU per
# I/O is the server's utime+stime over the run divided by the I/Os done.
#
# Run under the bench lock:  flock /tmp/blockd-bench.lock bash bench/rbd.sh
# Knobs: BUILD (./build), RUNTIME (s per run, 5), SIZE_MB (1024), REP (3),
#        OUT (bench/results/rbd.md; "-" prints only), SERVERS (a subset of
#        "direct blockd-iscsi tgtd blockd-nbd qemu-nbd"), CASES (a subset of
#        the case names below, space-separated).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BUILD=${BUILD:-$root/build}
RUNTIME=${RUNTIME:-5}
SIZE_MB=${SIZE_MB:-1024}
REP=${REP:-3}
OUT=${OUT:-$here/results/rbd.md}
BLOCKD=$BUILD/src/daemon/blockd
BLOCKCTL=$BUILD/src/cli/blockctl
LOAD=$BUILD/bench/iscsi_load
FLUSH=$BUILD/bench/iscsi_flush

for t in /usr/bin/time fio rbd nbdinfo iscsi-inq tgtd tgtadm qemu-nbd python3 "$BLOCKD" "$BLOCKCTL" "$LOAD" "$FLUSH"; do
    command -v "$t" >/dev/null 2>&1 || { echo "bench/rbd.sh: missing $t" >&2; exit 1; }
done
[ -e /usr/lib/tgt/backing-store/bs_rbd.so ] ||
    { echo "bench/rbd.sh: tgtd's bs_rbd is missing (apt-get install tgt-rbd)" >&2; exit 1; }
fio --enghelp 2>/dev/null | grep -qw rbd || { echo "bench/rbd.sh: fio has no rbd engine" >&2; exit 1; }

TMP=$(mktemp -d /tmp/blockd-bench-rbd.XXXXXX)
SERVER_PID=
stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    # tgtd ignores SIGTERM while it has targets (and during a long WRITE SAME)
    kill -KILL "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    release_image
}
# A server killed with SIGKILL (tgtd) leaves the image's exclusive lock to a
# dead owner: the next server's first write would wait for librbd's
# dead-owner timeout (about 30 s, a 0-IOPS run). Wait for the old watch to
# go and break a lock nobody watches any more.
release_image() {
    [ -n "${IMAGE:-}" ] || return 0
    local i
    for i in $(seq 1 100); do
        rbd status "rbd/$IMAGE" --format json 2>/dev/null |
            python3 -c 'import json,sys; sys.exit(1 if json.load(sys.stdin)["watchers"] else 0)' && break
        sleep 0.1
    done
    rbd lock ls "rbd/$IMAGE" --format json 2>/dev/null | python3 -c '
import json, sys
for l in json.load(sys.stdin):
    print(l["id"], l["locker"])' | while read -r id locker; do
        rbd lock rm "rbd/$IMAGE" "$id" "$locker" >/dev/null 2>&1 || true
    done
}
cleanup() {
    stop_server
    "$root/scripts/ceph-cluster.sh" stop "$TMP/ceph" || true
    rm -rf "$TMP"
}
trap cleanup EXIT
port() { "$here/../scripts/free-port"; }
jget() { python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# the Ceph daemons' CPU (monitor + OSD), in ticks
ceph_ticks() {
    local t=0 f
    for f in "$TMP"/ceph/run/*.pid; do t=$((t + $(cpu_ticks "$(cat "$f")"))); done
    echo "$t"
}
# the client's CPU of the last case (fio, iscsi_load, iscsi_flush), in ticks
client_ticks() { awk -v hz="$HZ" '{t += $1 + $2} END {printf "%d\n", t * hz}' "$TMP/client.time" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)

echo "starting a Ceph cluster ..." >&2
CEPH_MEM_BYTES=$(((SIZE_MB * 3 + 2048) << 20)) "$root/scripts/ceph-cluster.sh" start "$TMP/ceph" >&2
export CEPH_CONF=$TMP/ceph/ceph.conf
# The direct runs read this copy (CEPH_CONF): librbd's cache off, as in
# blockd (src/store/rbd_cluster.c). qemu-nbd turns it off with
# --cache=none; tgtd's bs_rbd runs librbd's default (on, writethrough until
# the first flush) as it is deployed.
sed 's/^\[global\]$/[global]\nrbd cache = false/' "$CEPH_CONF" >"$TMP/ceph/direct.conf"

# --- blockd makes the volume (so it is named as blockd names its images) ---
STATE=$TMP/state
BP=$(port)
NP=$(port)
start_blockd() {
    "$BLOCKD" --state-dir "$STATE" --log-level warn --nbd-listen "127.0.0.1:$NP" \
        --iscsi-listen "127.0.0.1:$BP" >>"$TMP/blockd.log" 2>&1 &
    SERVER_PID=$!
    # (--log-level warn hides the "ready" line: ask the API instead)
    for _ in $(seq 1 200); do
        "$BLOCKCTL" --socket "$STATE/blockd.sock" call core.ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    # The API answers before an RBD pool has connected (it connects in the
    # background, so that a lost cluster never holds the daemon's start):
    # until then its LUs and exports are not served. Wait for the export.
    [ -n "$IQN_BLOCKD" ] || return 0
    for _ in $(seq 1 300); do
        nbdinfo --size "nbd://127.0.0.1:$NP/bench" >/dev/null 2>&1 &&
            iscsi-inq "iscsi://127.0.0.1:$BP/$IQN_BLOCKD:bench/0" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "bench/rbd.sh: blockd did not serve the RBD volume" >&2; cat "$TMP/blockd.log" >&2; exit 1
}
bctl() { "$BLOCKCTL" --socket "$STATE/blockd.sock" "$@"; }
read -r -a SERVERS <<<"${SERVERS:-direct blockd-iscsi tgtd blockd-nbd qemu-nbd}"
IQN_BLOCKD=
if [[ " ${SERVERS[*]} " == *" blockd-"* ]]; then
    start_blockd
bctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"rbd\",\"mon_host\":\"$(sed -n 's/^mon host = //p' "$CEPH_CONF")\"}}" >/dev/null
bctl call pool.dataset.create "{\"name\":\"ceph/bench\",\"type\":\"VOLUME\",\"volsize\":$((SIZE_MB << 20))}" >/dev/null
portal=$(jget "$(bctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
tid=$(jget "$(bctl call iscsi.target.create "{\"name\":\"bench\",\"groups\":[{\"portal\":$portal}]}")" 'j["id"]')
eid=$(jget "$(bctl call iscsi.extent.create '{"name":"bench","disk":"zvol/ceph/bench"}')" 'j["id"]')
bctl call iscsi.targetextent.create "{\"target\":$tid,\"extent\":$eid}" >/dev/null
bctl call nbd.export.create '{"name":"bench","dataset":"ceph/bench"}' >/dev/null
IQN_BLOCKD=$(jget "$(bctl call iscsi.global.config)" 'j["basename"]')
stop_server
else
    rbd create --size "${SIZE_MB}M" rbd/bench # peers only
fi
IMAGE=$(rbd ls rbd | head -n 1)
[ -n "$IMAGE" ] || { echo "bench/rbd.sh: blockd made no image" >&2; exit 1; }
echo "filling rbd/$IMAGE (${SIZE_MB} MiB) ..." >&2
fio --name=fill --ioengine=rbd --pool=rbd --rbdname="$IMAGE" --clientname=admin --rw=write \
    --bs=4M --iodepth=8 --size="${SIZE_MB}M" --output=/dev/null

# --- the servers: start one, run a case, stop it ---
TP=$(port)
CP=$((RANDOM % 900 + 100)) # tgtadm -C: a small number (control socket suffix)
start_server() {
    case $1 in
    blockd) start_blockd ;;
    tgtd)
        tgtd -f -C "$CP" --iscsi "portal=127.0.0.1:$TP" >>"$TMP/tgtd.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 100); do tgtadm -C "$CP" --op show --mode sys >/dev/null 2>&1 && break; sleep 0.05; done
        tgtadm -C "$CP" --lld iscsi --op new --mode target --tid 1 -T iqn.2026-12.org.bench:tgt
        tgtadm -C "$CP" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 --bstype rbd \
            --backing-store "rbd/$IMAGE" --bsopts "conf=$CEPH_CONF"
        tgtadm -C "$CP" --lld iscsi --op bind --mode target --tid 1 -I ALL
        ;;
    qemu-nbd)
        # -e 8: qemu-nbd serves one client at a time by default; the
        # 8-writer case's other connections would wait their turn (and
        # fio would add up 8 runs that never overlapped).
        qemu-nbd -f raw -t -e 8 -x bench -b 127.0.0.1 -p "$NP" --cache=none --aio=threads \
            "rbd:rbd/$IMAGE:conf=$CEPH_CONF" >>"$TMP/qemu-nbd.log" 2>&1 &
        SERVER_PID=$!
        for _ in $(seq 1 100); do nbdinfo "nbd://127.0.0.1:$NP/bench" >/dev/null 2>&1 && break; sleep 0.1; done
        ;;
    direct) SERVER_PID= ;;
    esac
}

declare -A ISCSI_URL=([blockd]="iscsi://127.0.0.1:$BP/$IQN_BLOCKD:bench/0"
    [tgtd]="iscsi://127.0.0.1:$TP/iqn.2026-12.org.bench:tgt/1")

# fio: → "IOPS MiB/s"
fio_run() { # engine-args rw bs qd [extra]
    local eng=$1 rw=$2 bs=$3 qd=$4 extra=${5:-} t0
    t0=$(date +%s)
    # shellcheck disable=SC2086
    /usr/bin/time -a -o "$TMP/client.time" -f "%U %S" fio --name=b $eng --rw="$rw" --bs="$bs" --iodepth="$qd" --size="${SIZE_MB}M" \
        --time_based --runtime="$RUNTIME" --randrepeat=1 --norandommap $extra \
        --output-format=json 2>>"$TMP/fio.err" | python3 -c '
import json, sys, time
out = sys.stdin.read()
# the fio nbd engine prints "fio: connected to NBD server" before the JSON
j = json.loads(out[out.index("{"):])["jobs"]
# Jobs add up only if they ran at the same time: a server that takes its
# clients one after another (qemu-nbd without -e) makes the run last
# jobs x runtime. Such a run is a failure, not a figure.
wall, runtime = time.time() - float(sys.argv[1]), float(sys.argv[2])
if wall > 2 * runtime + 10:
    sys.stderr.write("fio: %d jobs ran %.0f s for a %.0f s run: not concurrently\n" % (len(j), wall, runtime))
    print("0 0")
    sys.exit(0)
iops = sum(x["read"]["iops"] + x["write"]["iops"] for x in j)
bw = sum(x["read"]["bw_bytes"] + x["write"]["bw_bytes"] for x in j)
print("%.0f %.1f" % (iops, bw / 1048576))' "$t0" "$RUNTIME" 2>>"$TMP/fio.err"
}
ENG_DIRECT="--ioengine=rbd --pool=rbd --rbdname=IMAGE --clientname=admin"
ENG_NBD="--ioengine=nbd --uri=nbd://127.0.0.1:$NP/bench"

# One case on one server → "IOPS MiB/s"
run_case() { # server case
    local s=$1 c=$2 rw bs qd
    read -r rw bs qd <<<"$(case_params "$c")"
    case $s in
    direct)
        if [ "$c" = 4k-write+flush-8w ]; then # one handle, 8 writes in flight
            CEPH_CONF=$TMP/ceph/direct.conf fio_run "${ENG_DIRECT/IMAGE/$IMAGE}" "$rw" "$bs" 8 --fsync=1
        else
            CEPH_CONF=$TMP/ceph/direct.conf fio_run "${ENG_DIRECT/IMAGE/$IMAGE}" "$rw" "$bs" "$qd"
        fi
        ;;
    blockd-nbd | qemu-nbd) fio_run "$ENG_NBD" "$rw" "$bs" "$qd" "$(flush_extra "$c")" ;;
    blockd-iscsi | tgtd)
        local url=${ISCSI_URL[${s%-iscsi}]}
        if [ "$c" = 4k-write+flush-8w ]; then
            /usr/bin/time -a -o "$TMP/client.time" -f "%U %S" "$FLUSH" "$url" 4096 8 "$RUNTIME" | sed -n 's/.*MiB\/s=\([0-9.]*\) IOPS=\([0-9]*\).*/\2 \1/p'
        else
            local b
            case $bs in *M) b=$((${bs%M} << 20)) ;; *k) b=$((${bs%k} << 10)) ;; *) b=$bs ;; esac
            /usr/bin/time -a -o "$TMP/client.time" -f "%U %S" "$LOAD" "$url" "$rw" "$b" "$qd" "$RUNTIME" | sed -n 's/.*IOPS=\([0-9]*\) MiB\/s=\([0-9.]*\).*/\1 \2/p'
        fi
        ;;
    esac
}
case_params() {
    case $1 in
    4k-randread-qd1) echo randread 4k 1 ;;
    4k-randread-qd32) echo randread 4k 32 ;;
    4k-randwrite-qd1) echo randwrite 4k 1 ;;
    4k-randwrite-qd32) echo randwrite 4k 32 ;;
    1M-read-qd8) echo read 1M 8 ;;
    1M-write-qd8) echo write 1M 8 ;;
    4k-write+flush-8w) echo randwrite 4k 1 ;;
    esac
}
flush_extra() { [ "$1" = 4k-write+flush-8w ] && echo "--fsync=1 --numjobs=8" || true; }
read -r -a CASES <<<"${CASES:-4k-randread-qd1 4k-randread-qd32 4k-randwrite-qd1 4k-randwrite-qd32 1M-read-qd8 1M-write-qd8 4k-write+flush-8w}"
# server → process to start ("direct" runs in fio itself)
declare -A PROC=([direct]=direct [blockd-iscsi]=blockd [tgtd]=tgtd [blockd-nbd]=blockd [qemu-nbd]=qemu-nbd)

RESULTS=$TMP/results
: >"$RESULTS"
FAILED=0
for rep in $(seq 1 "$REP"); do
    order=("${SERVERS[@]}")
    [ $((rep % 2)) = 0 ] && order=($(printf '%s\n' "${SERVERS[@]}" | tac))
    for s in "${order[@]}"; do
        start_server "${PROC[$s]}"
        for c in "${CASES[@]}"; do
            t0=0
            [ -n "$SERVER_PID" ] && t0=$(cpu_ticks "$SERVER_PID")
            c0=$(ceph_ticks)
            : >"$TMP/fio.err"
            : >"$TMP/client.time"
            r=$(run_case "$s" "$c") || r=""
            if [ -z "$r" ] || [ "${r%% *}" = 0 ]; then
                # a failed run is reported and left out of the medians,
                # never counted as 0 IOPS
                FAILED=$((FAILED + 1))
                echo "bench/rbd.sh: FAILED $s $c (rep $rep): $(tail -3 "$TMP/fio.err")" >&2
                continue
            fi
            cpu=0
            [ -n "$SERVER_PID" ] && cpu=$(($(cpu_ticks "$SERVER_PID") - t0))
            echo "$c $s $r $cpu $(($(ceph_ticks) - c0)) $(client_ticks)" | tee -a "$RESULTS" >&2
        done
        stop_server
    done
done

python3 - "$RESULTS" "$HZ" "$RUNTIME" "$REP" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY' >"$TMP/report.md"
import statistics, sys, datetime, collections
path, hz, runtime, rep, ncpu, load = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
runs = collections.defaultdict(list)
for line in open(path):
    c, s, iops, mib, cpu, ceph, client = line.split()
    runs[(c, s)].append((float(iops), float(mib), int(cpu), int(ceph), int(client)))
def med(c, s, i):
    v = [r[i] for r in runs.get((c, s), [])]
    return statistics.median(v) if v else 0.0
def cpu_us(c, s):
    """server CPU per I/O in microseconds (median over runs)"""
    v = [r[2] / hz / (r[0] * runtime) * 1e6 for r in runs.get((c, s), []) if r[0] > 0]
    return statistics.median(v) if v else 0.0
cases = []
for (c, s) in runs:
    if c not in cases:
        cases.append(c)
def ratio(a, b):
    return "%.2f" % (a / b) if b else "n/a"
print("# RBD: blockd vs tgtd bs_rbd vs qemu-nbd vs librbd direct\n")
print("%s, %s CPUs, load %s at the end, %s s per run, median of %s runs (order alternating).\n" %
      (datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%MZ"), ncpu, load, int(runtime), rep))
print("| case | direct IOPS | blockd iSCSI | tgtd | blockd/tgtd | blockd/direct | blockd NBD | qemu-nbd | blockd/qemu-nbd | NBD/direct |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in cases:
    d, bi, t, bn, q = (med(c, s, 0) for s in ("direct", "blockd-iscsi", "tgtd", "blockd-nbd", "qemu-nbd"))
    print("| %s | %.0f | %.0f | %.0f | %s | %s | %.0f | %.0f | %s | %s |" %
          (c, d, bi, t, ratio(bi, t), ratio(bi, d), bn, q, ratio(bn, q), ratio(bn, d)))
print("\nMiB/s (medians):\n")
print("| case | direct | blockd iSCSI | tgtd | blockd NBD | qemu-nbd |")
print("|---|---:|---:|---:|---:|---:|")
for c in cases:
    print("| %s | %s |" % (c, " | ".join("%.1f" % med(c, s, 1) for s in ("direct", "blockd-iscsi", "tgtd", "blockd-nbd", "qemu-nbd"))))
print("\nServer CPU per I/O (µs, utime+stime of the server process / I/Os):\n")
print("| case | blockd iSCSI | tgtd | blockd/tgtd | blockd NBD | qemu-nbd |")
print("|---|---:|---:|---:|---:|---:|")
for c in cases:
    bi, t, bn, q = (cpu_us(c, s) for s in ("blockd-iscsi", "tgtd", "blockd-nbd", "qemu-nbd"))
    print("| %s | %.1f | %.1f | %s | %.1f | %.1f |" % (c, bi, t, ratio(bi, t), bn, q))
def part_us(c, s, i):
    """CPU per I/O in microseconds of part i (2 server, 3 Ceph, 4 client)"""
    v = [r[i] / hz / (r[0] * runtime) * 1e6 for r in runs.get((c, s), []) if r[0] > 0]
    return statistics.median(v) if v else 0.0
def busy(c, s):
    """how much of the machine's CPUs server + client + Ceph kept busy"""
    v = [(r[2] + r[3] + r[4]) / hz / runtime / int(ncpu) for r in runs.get((c, s), []) if r[0] > 0]
    return statistics.median(v) if v else 0.0
print("""
Where the CPU goes (µs per I/O, medians) and the CPU ceiling. Client, gateway and Ceph share
the same %s CPUs here, so a case that keeps them near 100%% busy is CPU-bound: direct spends
librbd (in fio) + Ceph per I/O; a gateway spends Ceph + its own librbd + its protocol + the
initiator's protocol (in fio's nbd engine or libiscsi). Even a gateway whose own protocol cost
nothing would pay the initiator's, so its ceiling against direct is
direct / (direct + initiator): "ceiling". "of ceiling" = measured (blockd / direct) / ceiling.
On real deployments the initiator and the OSDs run on other machines.
""" % ncpu)
print("| case | direct: fio+librbd / Ceph / busy | blockd: server / initiator / Ceph / busy | blockd/direct | ceiling | of ceiling |")
print("|---|---:|---:|---:|---:|---:|")
for c in cases:
    for s, label in (("blockd-iscsi", "iSCSI"), ("blockd-nbd", "NBD")):
        d = med(c, "direct", 0)
        if not d or not med(c, s, 0):
            continue
        dc, dceph = part_us(c, "direct", 4), part_us(c, "direct", 3)
        bs, bc, bceph = part_us(c, s, 2), part_us(c, s, 4), part_us(c, s, 3)
        ceil = (dc + dceph) / (dc + dceph + bc) if dc + dceph + bc else 0
        got = med(c, s, 0) / d
        print("| %s %s | %.0f / %.0f / %.0f%% | %.0f / %.0f / %.0f / %.0f%% | %.2f | %.2f | %.2f |" %
              (c, label, dc, dceph, busy(c, "direct") * 100, bs, bc, bceph, busy(c, s) * 100,
               got, ceil, got / ceil if ceil else 0))
PY
[ "$FAILED" = 0 ] || echo "**$FAILED run(s) failed** (left out of the medians; see the log)." >>"$TMP/report.md"
cat "$TMP/report.md"
if [ "$OUT" != - ]; then
    {
        echo
        echo "## Run of $(date -u +%Y-%m-%dT%H:%MZ) (tree $(git -C "$root" rev-parse --short HEAD))"
        echo
        echo "\`flock /tmp/blockd-bench.lock bash bench/rbd.sh\`"
        echo
        sed 1,2d "$TMP/report.md"
    } >>"$OUT"
fi
[ "$FAILED" = 0 ] || exit 1
