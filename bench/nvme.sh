#!/usr/bin/env bash
# NVMe/TCP vs iSCSI on one blockd: the same I/O pattern (queues x QD per
# queue, block size, random or sequential) over blockd's NVMe/TCP target
# (bench/nvme_load, a host written from the specifications) and over its
# iSCSI target (bench/iscsi_load, libiscsi: one session per queue, run side
# by side), and blockd's CPU (utime + stime of the daemon from /proc/PID/stat
# over each run) per I/O. A device is exported over iSCSI or over NVMe-oF,
# never both, so the daemon serves two volumes of identical content from the
# file pool (demo/nv over NVMe/TCP, demo/is over iSCSI: the same random bytes
# written to both files), both in the page cache. The 1 MiB sequential read is
# also set against the loopback TCP limit (bench/nbd_tcp_limit).
#
# Targets (docs/nvme.md, Performance): server CPU per 4 KiB read <= 0.75x the
# iSCSI path's; 4 KiB random read QD32 IOPS >= iSCSI's; 1 MiB sequential
# read >= 80% of the loopback TCP limit.
#
# POOL=rbd: the same on an RBD pool of a throwaway Ceph cluster
# (scripts/ceph-cluster.sh: one monitor, one memstore OSD on the same CPUs),
# two images written in full by fio (the same seed), plus librbd itself
# (fio --ioengine=rbd, one handle, rbd_cache off as blockd runs it) as
# "direct", and bench/rbd.sh's ceiling rule: a gateway pays what direct pays
# plus its initiator's CPU (on the same CPUs here), so its ceiling against
# direct is (direct client + Ceph) / (direct client + Ceph + initiator) per
# I/O, and "of ceiling" = (path / direct) / ceiling.
#
# Run under the bench lock:  flock /tmp/blockd-bench.lock bash bench/nvme.sh
# Knobs: BUILD (default ./build), RUNTIME (s per timed run, 5), SIZE_MB (1024;
#        512 with POOL=rbd), REPEAT (runs per case, order alternating,
#        medians; 3), POOL (file or rbd), CASES (only the cases whose name
#        holds this string, e.g. "1M"), RATE (IOPS in all of the paced
#        4-queue case, 100000), OUT (bench/results/nvme.md: the
#        report is appended).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BUILD=${BUILD:-$root/build}
RUNTIME=${RUNTIME:-5}
POOL=${POOL:-file}
[ "$POOL" = rbd ] && SIZE_MB=${SIZE_MB:-512}
SIZE_MB=${SIZE_MB:-1024}
REPEAT=${REPEAT:-3}
OUT=${OUT:-$here/results/nvme.md}
BLOCKD=$BUILD/src/daemon/blockd
BLOCKCTL=$BUILD/src/cli/blockctl
NVLOAD=$BUILD/bench/nvme_load
ISLOAD=$BUILD/bench/iscsi_load
TCPLIMIT=$BUILD/bench/nbd_tcp_limit

for t in jq python3 "$BLOCKD" "$BLOCKCTL" "$NVLOAD" "$ISLOAD" "$TCPLIMIT"; do
    command -v "$t" >/dev/null 2>&1 || { echo "bench/nvme.sh: missing $t" >&2; exit 1; }
done
if [ "$POOL" = rbd ]; then
    for t in fio rbd iscsi-inq /usr/bin/time; do
        command -v "$t" >/dev/null 2>&1 || { echo "bench/nvme.sh: missing $t" >&2; exit 1; }
    done
    fio --enghelp 2>/dev/null | grep -qw rbd || { echo "bench/nvme.sh: fio has no rbd engine" >&2; exit 1; }
fi
REV=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
HZ=$(getconf CLK_TCK)

TMP=$(mktemp -d /tmp/blockd-bench-nvme.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ "$POOL" != rbd ] || "$root/scripts/ceph-cluster.sh" stop "$TMP/ceph" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
port() { "$root/scripts/free-port"; }

# --- one blockd, two volumes of identical content ---
IP=$(port)
NP=$(port)
STATE=$TMP/state
start_blockd() {
    "$BLOCKD" --state-dir "$STATE" --log-level warn --nbd-listen "127.0.0.1:$(port)" \
        --iscsi-listen "127.0.0.1:$IP" >>"$TMP/blockd.log" 2>&1 &
    BPID=$!
    PIDS+=("$BPID")
    for _ in $(seq 1 200); do
        "$BLOCKCTL" --socket "$STATE/blockd.sock" call core.ping >/dev/null 2>&1 && break
        sleep 0.05
    done
}
bctl() { "$BLOCKCTL" --socket "$STATE/blockd.sock" "$@"; }
DS=demo
if [ "$POOL" = rbd ]; then
    DS=ceph
    echo "starting a Ceph cluster ..." >&2
    CEPH_MEM_BYTES=$(((SIZE_MB * 3 + 2048) << 20)) "$root/scripts/ceph-cluster.sh" start "$TMP/ceph" >&2
    export CEPH_CONF=$TMP/ceph/ceph.conf
    # direct: librbd's cache off, as blockd runs it (src/store/rbd_cluster.c)
    sed 's/^\[global\]$/[global]\nrbd cache = false/' "$CEPH_CONF" >"$TMP/ceph/direct.conf"
    start_blockd
    bctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"rbd\",\"mon_host\":\"$(sed -n 's/^mon host = //p' "$CEPH_CONF")\"}}" >/dev/null
fi
[ -n "${BPID:-}" ] || start_blockd
for v in nv is; do
    bctl call pool.dataset.create "{\"name\":\"$DS/$v\",\"type\":\"VOLUME\",\"volsize\":$((SIZE_MB << 20))}" >/dev/null
done
if [ "$POOL" = rbd ]; then
    # fill the images with blockd stopped (a writer takes the exclusive lock)
    IMAGES=$(rbd ls rbd)
    [ "$(echo "$IMAGES" | wc -w)" = 2 ] || { echo "bench/nvme.sh: blockd made no images" >&2; exit 1; }
    kill "$BPID"
    wait "$BPID" 2>/dev/null || true
    for img in $IMAGES; do
        echo "filling rbd/$img (${SIZE_MB} MiB) ..." >&2
        fio --name=fill --ioengine=rbd --pool=rbd --rbdname="$img" --clientname=admin --rw=write \
            --bs=4M --iodepth=8 --size="${SIZE_MB}M" --randseed=1 --output=/dev/null
    done
    start_blockd
    DIRECT_IMAGE=$(echo "$IMAGES" | head -n 1)
fi
NQN=nqn.2026-12.org.blockd:bench-nvme
sid=$(bctl call nvmet.subsys.create "{\"name\":\"bench\",\"subnqn\":\"$NQN\",\"allow_any_host\":true}" | jq .id)
bctl call nvmet.namespace.create "{\"subsys_id\":$sid,\"device_type\":\"ZVOL\",\"device_path\":\"zvol/$DS/nv\",\"nsid\":1}" >/dev/null
pid=$(bctl call nvmet.port.create "{\"addr_trtype\":\"TCP\",\"addr_traddr\":\"127.0.0.1\",\"addr_trsvcid\":$NP}" | jq .id)
bctl call nvmet.port_subsys.create "{\"port_id\":$pid,\"subsys_id\":$sid}" >/dev/null
portal=$(bctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}' | jq .id)
tid=$(bctl call iscsi.target.create "{\"name\":\"bench\",\"groups\":[{\"portal\":$portal}]}" | jq .id)
eid=$(bctl call iscsi.extent.create "{\"name\":\"bench\",\"disk\":\"zvol/$DS/is\"}" | jq .id)
bctl call iscsi.targetextent.create "{\"target\":$tid,\"extent\":$eid}" >/dev/null
URL="iscsi://127.0.0.1:$IP/iqn.2026-11.org.blockd:bench/0"
if [ "$POOL" = rbd ]; then
    # An RBD pool connects in the background: wait until both paths serve.
    for _ in $(seq 1 300); do
        "$NVLOAD" -q 1 -d 1 -t 0.1 127.0.0.1 "$NP" "$NQN" >/dev/null 2>&1 &&
            iscsi-inq "$URL" >/dev/null 2>&1 && break
        sleep 0.2
    done
else
    NVF=$(find "$STATE" -type f -name nv | head -n 1)
    ISF=$(find "$STATE" -type f -name is | head -n 1)
    [ -f "$NVF" ] && [ -f "$ISF" ] || { echo "bench/nvme.sh: cannot find the volume files" >&2; exit 1; }
    echo "filling the two ${SIZE_MB} MiB volume files with the same random bytes ..." >&2
    dd if=/dev/urandom of="$NVF" bs=1M count="$SIZE_MB" conv=notrunc status=none
    dd if="$NVF" of="$ISF" bs=1M conv=notrunc status=none
    sync
    cmp "$NVF" "$ISF"
    cat "$NVF" "$ISF" >/dev/null
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$NP") 2>/dev/null && break; sleep 0.1; done
fi

cpu_ticks() { awk '{print $14 + $15}' "/proc/$BPID/stat"; }
# the Ceph daemons' CPU (monitor + OSD), in ticks; 0 on a file pool
ceph_ticks() {
    local t=0 f
    [ "$POOL" = rbd ] || { echo 0; return; }
    for f in "$TMP"/ceph/run/*.pid; do
        t=$((t + $(awk '{print $14 + $15}' "/proc/$(cat "$f")/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
# direct (POOL=rbd): librbd in fio, one handle, all queues' depth on it
# (blockd too has one handle per image) → "ops client_cpu_s"
direct_run() {
    [ "$POOL" = rbd ] && [ -z "${CASE_RATE:-}" ] || { echo skip; return; }
    local ops
    ops=$(CEPH_CONF=$TMP/ceph/direct.conf /usr/bin/time -o "$TMP/direct.time" -f "%U %S" \
        fio --name=d --ioengine=rbd --pool=rbd --rbdname="$DIRECT_IMAGE" --clientname=admin \
        --rw="$4" --bs="$3" --iodepth=$(($1 * $2)) --size="${SIZE_MB}M" --time_based \
        --runtime="$RUNTIME" --randrepeat=1 --norandommap --output-format=json 2>>"$TMP/fio.err" |
        python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]["read"]; print(j["total_ios"])')
    echo "${ops:-0} $(awk '{printf "%.2f", $1 + $2}' "$TMP/direct.time")"
}

# nvme: queues qd bs mode [-S] → "ops client_cpu_s"
nvme_run() {
    timeout $((RUNTIME + 60)) "$NVLOAD" -q "$1" -d "$2" -b "$3" -w "$4" -t "$RUNTIME" ${5:-} \
        ${CASE_RATE:+-r $((CASE_RATE / $1))} \
        127.0.0.1 "$NP" "$NQN" | tee -a "$TMP/raw" |
        sed -n 's/.*ops=\([0-9]*\) .*client_cpu_s=\([0-9.]*\).*/\1 \2/p'
}
# The two ways a host may connect its I/O queues: SQ flow control on (the
# Linux host's default: every read ends with a CapsuleResp) and off (-S: the
# last C2HData carries the completion, SUCCESS flag).
nvmesq_run() { nvme_run "$@" -S; }
# iscsi: one iscsi_load (one session) per queue, side by side → "ops client_cpu_s"
iscsi_run() {
    local i ps=()
    for i in $(seq 1 "$1"); do
        # `times` after the run: the client's CPU (children's user and system time)
        timeout $((RUNTIME + 60)) bash -c 'out=$("$0" "$@"); echo "$out"; times' \
            "$ISLOAD" "$URL" "$4" "$3" "$2" "$RUNTIME" ${CASE_RATE:+$((CASE_RATE / $1))} \
            >"$TMP/is.$i" &
        ps+=($!)
    done
    wait "${ps[@]}"
    cat "$TMP"/is.* >>"$TMP/raw"
    python3 - "$TMP" "$1" <<'PY'
import re, sys
tmp, n = sys.argv[1], int(sys.argv[2])
ops = cpu = 0
for i in range(1, n + 1):
    t = open("%s/is.%d" % (tmp, i)).read()
    m = re.search(r"ops=(\d+)", t)
    ops += int(m.group(1)) if m else 0
    # `times`: second line is the children's user and system time (XmY.YYYs)
    lines = [l for l in t.splitlines() if re.match(r"\d+m[\d.]+s \d+m[\d.]+s", l)]
    if len(lines) >= 2:
        for f in lines[1].split():
            mm, ss = f[:-1].split("m")
            cpu += int(mm) * 60 + float(ss)
print(ops, "%.2f" % cpu)
PY
    rm -f "$TMP"/is.*
}

# iscsi-perf (libiscsi's own reader, one session; reads only), as bench/iscsi.sh
# runs it: a second iSCSI client, cheaper per I/O than iscsi_load, for the
# one-queue cases → "ops client_cpu_s"
iscsiperf_run() {
    local out ops cpu
    [ "$1" = 1 ] && [ "$POOL" != rbd ] && [ -z "${CASE_RATE:-}" ] || { echo skip; return; }
    out=$(timeout $((RUNTIME + 60)) bash -c '"$0" "$@" 2>&1; times' iscsi-perf -b $(($3 / 512)) \
        -m "$2" $([ "$4" = randread ] && echo -r) -t "$RUNTIME" "$URL" | tr '\r' '\n')
    ops=$(echo "$out" | sed -n 's/.*iops average \([0-9]*\) .*/\1/p' | tail -n 1)
    cpu=$(echo "$out" | grep -E '^[0-9]+m[0-9.]+s [0-9]+m[0-9.]+s$' | sed -n 2p |
        awk '{split($1,u,"m"); split($2,s,"m"); printf "%.2f", u[1]*60+u[2]+s[1]*60+s[2]}')
    echo "$(( ${ops:-0} * RUNTIME )) ${cpu:-0}"
}

# the loopback TCP limit (bench/nbd_tcp_limit) in the same rotation as the
# 1 MiB reads, so that each repeat sets them against the machine's state of
# that minute (other work on the CPUs moves it by 2x) → "ops 0" in MiB
tcplimit_run() {
    [ "$3" = 1048576 ] && [ "$POOL" != rbd ] || { echo skip; return; }
    echo "$(("$("$TCPLIMIT" "$RUNTIME")" * RUNTIME)) 0"
}

RESULTS=$TMP/results
: >"$RESULTS"
rep_order() { # rep item...
    local rep=$1
    shift
    if [ $((rep % 2)) = 1 ]; then echo "$@"; else printf '%s\n' "$@" | tac | tr '\n' ' '; fi
}
case_run() { # name queues qd bs mode [rate: IOPS in all, paced]
    local rep path c0 c1 e0 r
    [[ "$1" == *"${CASES:-}"* ]] || return 0
    CASE_RATE=${6:-}
    for rep in $(seq 1 "$REPEAT"); do
        for path in $(rep_order "$rep" nvme nvmesq iscsi iscsiperf direct tcplimit); do
            c0=$(cpu_ticks)
            e0=$(ceph_ticks)
            r=$("${path}_run" "$2" "$3" "$4" "$5") || r="0 0"
            c1=$(cpu_ticks)
            [ "$r" = skip ] && continue
            case $path in direct | tcplimit) c1=$c0 ;; esac # blockd idle: not its run
            echo "$1|$path|${r:-0 0} $((c1 - c0)) $(($(ceph_ticks) - e0))" | tee -a "$RESULTS" >&2
        done
    done
}

case_run "4K randread QD32 (1 queue x QD32)" 1 32 4096 randread
case_run "4K randread QD32 (4 queues x QD8)" 4 8 4096 randread
# The same at one rate for both protocols (RATE, IOPS in all): unpaced, the
# faster one saturates the 2 CPUs that client and server share, and its
# CPU per I/O then includes the contention; paced, both do the same work.
case_run "4K randread QD32 (4 queues x QD8) at ${RATE:-100000} IOPS" 4 8 4096 randread "${RATE:-100000}"
[ "$POOL" = rbd ] || case_run "4K randread QD1 (1 queue x QD1)" 1 1 4096 randread
case_run "1M seq read QD8 (1 queue x QD8)" 1 8 1048576 read

python3 - "$RESULTS" "$HZ" "$RUNTIME" "$REPEAT" "$SIZE_MB" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$REV" "$POOL" <<'PY' >"$TMP/report.md"
import sys, collections, statistics, datetime
res, hz, runtime, rep, size, cpus, load, rev, pool = sys.argv[1:10]
hz, runtime = int(hz), float(runtime)
runs = collections.OrderedDict()
for line in open(res):
    name, path, vals = line.rstrip("\n").split("|")
    ops, ccpu, ticks, ceph = vals.split()
    runs.setdefault(name, collections.defaultdict(list))[path].append(
        (int(ops), float(ccpu), int(ticks), int(ceph)))
def med(v, f):
    return statistics.median(f(x) for x in v)
now = datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC")
print(f"\n## {now}, {rev}, {pool} pool: {cpus} CPUs, load average at end {load}, "
      f"RUNTIME={runtime:g} REPEAT={rep} SIZE_MB={size}\n")
print("| case | path | IOPS | MiB/s | server CPU µs/IO | client CPU µs/IO |")
print("|---|---|---:|---:|---:|---:|")
row = {}
for name, by in runs.items():
    bs = 1048576 if name.startswith("1M") else 4096
    for path in ("nvme", "nvmesq", "iscsi", "iscsiperf", "direct", "tcplimit"):
        v = by.get(path, [])
        if not v:
            continue
        iops = med(v, lambda x: x[0] / runtime)
        srv = med(v, lambda x: x[2] * 1e6 / hz / x[0] if x[0] else 0)
        cli = med(v, lambda x: x[1] * 1e6 / x[0] if x[0] else 0)
        row[(name, path)] = (iops, srv, cli, med(v, lambda x: x[3] * 1e6 / hz / x[0] if x[0] else 0))
        print(f"| {name} | {path} | {iops:.0f} | {iops * bs / 1048576:.1f} | {srv:.2f} | {cli:.2f} |")
print()
print("nvme: SQ flow control on (a CapsuleResp per read, the Linux host's default); "
      "nvmesq: off (the last C2HData carries the completion, SUCCESS). Server CPU: blockd's "
      "utime+stime over the run / I/Os; client CPU: the load generator's. iscsi: bench/iscsi_load, "
      "one libiscsi session per queue; iscsiperf: libiscsi's iscsi-perf (one session, so the "
      "one-queue cases only); tcplimit: bench/nbd_tcp_limit (1 MiB buffers over one loopback "
      "connection, no server work), run between the others. Ratios below are against iscsi (the same load generator "
      "design), and against iscsiperf in brackets.\n")
def ratio(name, path, i, peer="iscsi"):
    n, s = row.get((name, path)), row.get((name, peer))
    return n[i] / s[i] if n and s and s[i] else 0
for name in runs:
    if name.startswith("4K randread QD32"):
        for path in ("nvme", "nvmesq"):
            c, r = ratio(name, path, 1), ratio(name, path, 0)
            cp, rp = ratio(name, path, 1, "iscsiperf"), ratio(name, path, 0, "iscsiperf")
            bc = f" [{cp:.2f}]" if cp else ""
            br = f" [{rp:.2f}]" if rp else ""
            paced = " IOPS" in name  # both paths held to one rate: no IOPS target
            iops = (f"; IOPS NVMe/iSCSI {r:.2f} (paced: both at the same rate)" if paced else
                    f"; IOPS NVMe/iSCSI {r:.2f}{br} (target >= 1: {'met' if r >= 1 else 'NOT met'})")
            print(f"- {name}, {path}: server CPU per read NVMe/iSCSI {c:.2f}{bc} "
                  f"(target <= 0.75: {'met' if 0 < c <= 0.75 else 'NOT met'}){iops}")
if pool == "rbd":
    print("\nThe ceiling rule (bench/rbd.sh): per I/O, direct pays fio+librbd (client) + Ceph; "
          "a gateway path pays that plus its initiator's CPU on the same CPUs, so its ceiling "
          "against direct is (client + Ceph) / (client + Ceph + initiator); "
          "of ceiling = (path / direct) / ceiling.\n")
    print("| case | path | direct client / Ceph µs | server / initiator / Ceph µs | path/direct | ceiling | of ceiling |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in runs:
        d = row.get((name, "direct"))
        for path in ("nvme", "nvmesq", "iscsi"):
            p = row.get((name, path))
            if not d or not p or not d[0]:
                continue
            ceil = (d[2] + d[3]) / (d[2] + d[3] + p[2]) if d[2] + d[3] + p[2] else 0
            got = p[0] / d[0]
            print(f"| {name} | {path} | {d[2]:.0f} / {d[3]:.0f} | {p[1]:.0f} / {p[2]:.0f} / "
                  f"{p[3]:.0f} | {got:.2f} | {ceil:.2f} | {got / ceil if ceil else 0:.2f} |")
    sys.exit(0)
sname = "1M seq read QD8 (1 queue x QD8)"
iseq = max(row.get((sname, "iscsi"), (0, 0)), row.get((sname, "iscsiperf"), (0, 0)))
tcp = row.get((sname, "tcplimit"), (0,))[0]
for path in ("nvme", "nvmesq"):
    seq = row.get((sname, path))
    if seq and tcp:
        f = seq[0] / tcp
        print(f"- 1M seq read, {path}: {seq[0]:.0f} MiB/s = {100 * f:.0f}% of the loopback TCP "
              f"limit {tcp:.0f} MiB/s (bench/nbd_tcp_limit in the same rotation, median) (target >= 80%: "
              f"{'met' if f >= 0.8 else 'NOT met'}); iSCSI (the better client) {iseq[0]:.0f} MiB/s = "
              f"{100 * iseq[0] / tcp:.0f}%")
PY
mkdir -p "$(dirname "$OUT")"
cat "$TMP/report.md" >>"$OUT"
cat "$TMP/report.md"
