#!/usr/bin/env bash
# NBD side by side: blockd vs nbdkit (file plugin) vs qemu-nbd (--cache=writeback
# --shared=8), all serving the same 1 GiB file from the page cache, measured in
# one run with fio (ioengine=nbd) and nbdcopy. Then a memory-backed volume with
# 1 ms latency per request (nbdkit: memory + delay filter; qemu-nbd: proxying
# an nbdkit memory + delay instance) at QD1 over 1 vs 8 connections. Every figure is the median
# of REPEAT runs; ratios are blockd / peer. Output goes to stdout and to
# bench/results/nbd.md.
#
# Run under the bench lock:  flock /tmp/blockd-bench.lock bash bench/nbd.sh
# Knobs: BUILD (default ./build), RUNTIME (s per fio run, 5), REPEAT (3),
#        SIZE_MB (1024), OUT (bench/results/nbd.md),
#        CASES (a regex: run only the cases whose name matches; for quick
#        checks while tuning — the results file is then not written).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BUILD=${BUILD:-$root/build}
RUNTIME=${RUNTIME:-5}
REPEAT=${REPEAT:-3}
SIZE_MB=${SIZE_MB:-1024}
OUT=${OUT:-$here/results/nbd.md}
BLOCKD=$BUILD/src/daemon/blockd
BLOCKCTL=$BUILD/src/cli/blockctl
TCPLIMIT=$BUILD/bench/nbd_tcp_limit
SYNCBOUND=$BUILD/bench/sync_bound

for t in fio nbdcopy nbdkit qemu-nbd python3 "$BLOCKD" "$BLOCKCTL" "$TCPLIMIT" "$SYNCBOUND"; do
    command -v "$t" >/dev/null 2>&1 || { echo "bench/nbd.sh: missing $t" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/blockd-bench-nbd.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

port() { "$here/../scripts/free-port"; }
wait_port() {
    for _ in $(seq 1 200); do
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1)).close()" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bench/nbd.sh: nothing listening on port $1" >&2
    exit 1
}


# --- servers on the file ---
BP=$(port)
STATE=$TMP/state
"$BLOCKD" --state-dir "$STATE" --log-level warn --nbd-listen "127.0.0.1:$BP" \
    --iscsi-listen "127.0.0.1:$(port)" >"$TMP/blockd.log" 2>&1 &
BLOCKD_PID=$!
PIDS+=("$BLOCKD_PID")
for _ in $(seq 1 200); do grep -q "blockd ready" "$TMP/blockd.log" 2>/dev/null && break; sleep 0.05; done
bctl() { "$BLOCKCTL" --socket "$STATE/blockd.sock" "$@"; }
# The file is a volume of blockd's (a path export names a volume's file:
# docs/security.md); nbdkit and qemu-nbd serve the same file.
bctl volume create demo/bench --size "${SIZE_MB}M" >/dev/null
DISK=$STATE/pools/demo/bench
echo "preparing a ${SIZE_MB} MiB file..." >&2
head -c $((SIZE_MB << 20)) /dev/urandom | dd of="$DISK" conv=notrunc bs=1M status=none
cat "$DISK" >/dev/null
bctl share nbd create --path "$DISK" --name bench >/dev/null
KP=$(port)
nbdkit -f -p "$KP" -i 127.0.0.1 file "$DISK" 2>>"$TMP/peers.log" &
PIDS+=($!)
KPID=$!
QP=$(port)
qemu-nbd -t -f raw --cache=writeback --shared=8 -b 127.0.0.1 -p "$QP" -x bench "$DISK" 2>>"$TMP/peers.log" &
PIDS+=($!)
QPID=$!
wait_port "$KP"
wait_port "$QP"
declare -A URI=([blockd]="nbd://127.0.0.1:$BP/bench" [nbdkit]="nbd://127.0.0.1:$KP/"
    [qemu-nbd]="nbd://127.0.0.1:$QP/bench")
SERVERS=(blockd nbdkit qemu-nbd)
declare -A SPID=([blockd]=$BLOCKD_PID [nbdkit]=$KPID [qemu-nbd]=$QPID)
# CPU time (clock ticks) used so far by a server process, all threads.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# fio → "IOPS MiB/s IOs" (summed over jobs)
fio_run() { # uri args...
    local uri=$1
    shift
    fio --name=b --ioengine=nbd --uri="$uri" --size=$((SIZE_MB << 20)) --runtime="$RUNTIME" \
        --time_based --group_reporting --output-format=json "$@" 2>/dev/null |
        python3 -c '
import json, sys
t = sys.stdin.read()
j = json.loads(t[t.index("{"):])["jobs"][0]   # fio nbd prints a line before the JSON
iops = j["read"]["iops"] + j["write"]["iops"]
bw = (j["read"]["bw_bytes"] + j["write"]["bw_bytes"]) / 1048576
ios = j["read"]["total_ios"] + j["write"]["total_ios"]
print("%.0f %.1f %d" % (iops, bw, ios))'
}

# nbdcopy of the whole export to null: → "IOPS(1MiB requests) MiB/s IOs"
copy_run() { # uri connections
    local t0 t1
    t0=$(date +%s.%N)
    nbdcopy --connections="$2" --request-size=1048576 "$1" null: >/dev/null 2>&1
    t1=$(date +%s.%N)
    python3 -c "s=$t1-$t0; mb=$SIZE_MB; print('%.0f %.1f %d' % (mb/s, mb/s, mb))"
}

median() { python3 -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print("%.1f" % statistics.median(v))' "$@"; }

RESULTS=$TMP/results
: >"$RESULTS"
# run_case NAME KIND(fio|copy) ARGS... — every server, REPEAT times, interleaved
run_case() {
    local name=$1 kind=$2
    shift 2
    if [ -n "${CASES:-}" ] && ! [[ $name =~ $CASES ]]; then return 0; fi
    declare -A iops bw cpu
    local s r out c0 c1 a b n
    for r in $(seq 1 "$REPEAT"); do
        # The order rotates from one repeat to the next: the server that
        # runs first in a round can do 10% better (fio nbd 4 KiB
        # writes: of two builds that differ in nothing on that path, the one
        # run first won 6 rounds of 8), so no server keeps that seat.
        local order=("${SERVERS[@]:$(((r - 1) % ${#SERVERS[@]}))}" "${SERVERS[@]:0:$(((r - 1) % ${#SERVERS[@]}))}")
        for s in "${order[@]}"; do
            # Start every run with no dirty pages: a flush otherwise pays for
            # the writeback of whatever an earlier run (or the file's
            # preparation) left, and the server that happens to run first
            # in a case would pay for all of it.
            sync
            c0=$(cpu_ticks "${SPID[$s]}")
            if [ "$kind" = fio ]; then out=$(fio_run "${URI[$s]}" "$@"); else out=$(copy_run "${URI[$s]}" "$@"); fi
            c1=$(cpu_ticks "${SPID[$s]}")
            read -r a b n <<<"$out"
            iops[$s]="${iops[$s]:-} $a"
            bw[$s]="${bw[$s]:-} $b"
            # server CPU microseconds per I/O (clock ticks are 10 ms)
            cpu[$s]="${cpu[$s]:-} $(python3 -c "print(($c1 - $c0) * 1e6 / $(getconf CLK_TCK) / max($n, 1))")"
        done
    done
    local line="$name"
    for s in "${SERVERS[@]}"; do
        # shellcheck disable=SC2086
        line="$line|$(median ${iops[$s]})|$(median ${bw[$s]})|$(median ${cpu[$s]})"
    done
    echo "$line" >>"$RESULTS"
    echo "  $line" >&2
}

echo "measuring (RUNTIME=${RUNTIME}s, REPEAT=$REPEAT)..." >&2
TCP=$(for r in $(seq 1 "$REPEAT"); do "$TCPLIMIT" 3; done | sort -n | sed -n "$(((REPEAT + 1) / 2))p")
run_case "4K randread QD1" fio --rw=randread --bs=4k --iodepth=1
run_case "4K randread QD32" fio --rw=randread --bs=4k --iodepth=32
RSS_KB=$(awk '/VmHWM/ {print $2}' "/proc/$BLOCKD_PID/status")
run_case "4K randwrite QD32" fio --rw=randwrite --bs=4k --iodepth=32
run_case "1M seq read QD8" fio --rw=read --bs=1M --iodepth=8
run_case "1M seq write QD8" fio --rw=write --bs=1M --iodepth=8
run_case "4 conns x QD32 4K randread" fio --rw=randread --bs=4k --iodepth=32 --numjobs=4
run_case "migration 512B randread 1 conn" fio --rw=randread --bs=512 --iodepth=4 --numjobs=1
run_case "migration 512B randread 8 conns" fio --rw=randread --bs=512 --iodepth=4 --numjobs=8
run_case "migration 1M randread 1 conn" fio --rw=randread --bs=1M --iodepth=4 --numjobs=1
run_case "migration 1M randread 8 conns" fio --rw=randread --bs=1M --iodepth=4 --numjobs=8
run_case "nbdcopy to null 1 conn" copy 1
run_case "nbdcopy to null 8 conns" copy 8
run_case "4K write+flush 8 writers" fio --rw=randwrite --bs=4k --iodepth=1 --numjobs=8 --fsync=1
# What the disk itself allows in that case: 8 local threads doing the same
# write + fdatasync with no network and no server (bench/sync_bound).
SYNC_BOUND=$("$SYNCBOUND" "$DISK" 8 2 | awk '$1 == "best" {print $2}')
echo "  the disk alone: at most $SYNC_BOUND write+flush/s with 8 writers" >&2

# --- 1 ms latency per request: memory-backed devices ---
kill "${PIDS[1]}" "${PIDS[2]}" 2>/dev/null || true
bctl call pool.dataset.create '[{"name": "demo/mem", "type": "VOLUME", "volsize": 1073741824,
    "backend": "memory", "latency_us": 1000}]' >/dev/null
bctl share nbd create demo/mem --name mem >/dev/null
KP=$(port)
nbdkit -f -p "$KP" -i 127.0.0.1 --filter=delay pattern 1G rdelay=1ms delay-extents=1ms 2>>"$TMP/peers.log" &
PIDS+=($!)
SPID[nbdkit]=$!
# qemu-nbd has no per-request delay of its own (null-co's latency-ns is not
# applied by this build), so it serves a second nbdkit memory+delay instance
# through its NBD client: the 1 ms is then paid behind qemu-nbd's own request
# handling, which is what the case measures. The nbdkit side uses the pattern
# plugin (all data, no holes) with extents delayed too, so that no server can
# answer a read of a hole from block status without paying the latency.
KP2=$(port)
nbdkit -f -p "$KP2" -i 127.0.0.1 --filter=delay pattern 1G rdelay=1ms delay-extents=1ms 2>>"$TMP/peers.log" &
PIDS+=($!)
wait_port "$KP2"
QP=$(port)
qemu-nbd -t -r --shared=8 -b 127.0.0.1 -p "$QP" -x bench \
    --image-opts "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port=$KP2" \
    2>>"$TMP/peers.log" &
PIDS+=($!)
SPID[qemu-nbd]=$!
wait_port "$KP"
wait_port "$QP"
URI=([blockd]="nbd://127.0.0.1:$BP/mem" [nbdkit]="nbd://127.0.0.1:$KP/" [qemu-nbd]="nbd://127.0.0.1:$QP/bench")
run_case "1ms-latency 4K randread QD1 1 conn" fio --rw=randread --bs=4k --iodepth=1 --numjobs=1
run_case "1ms-latency 4K randread QD1 8 conns" fio --rw=randread --bs=4k --iodepth=1 --numjobs=8

if [ -n "${CASES:-}" ]; then
    echo "CASES given: partial run, results above (blockd|nbdkit|qemu-nbd: IOPS|MiB/s|us/IO); $OUT untouched" >&2
    exit 0
fi

# --- report ---
python3 - "$RESULTS" "$TCP" "$RSS_KB" "$RUNTIME" "$REPEAT" "$SIZE_MB" "$SYNC_BOUND" >"$TMP/report.md" <<'PY'
import sys
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1]) if l.strip()]
tcp, rss_kb, runtime, repeat, size_mb = float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
sync_bound = float(sys.argv[7])
R = {r[0]: [float(x) for x in r[1:]] for r in rows}
out = []
p = out.append
p("# NBD benchmark: blockd vs nbdkit (file) vs qemu-nbd (--cache=writeback --shared=8)")
p("")
p("Same %s MiB file in the page cache; fio ioengine=nbd and nbdcopy; %ss per run, median of %s runs." % (size_mb, runtime, repeat))
p("Ratios are blockd / peer (higher is better for blockd). Client and server share the machine's CPUs.")
p("")
p("| case | blockd IOPS | blockd MiB/s | nbdkit IOPS | nbdkit MiB/s | qemu-nbd IOPS | qemu-nbd MiB/s | vs nbdkit | vs qemu-nbd |")
p("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, v in R.items():
    b, k, q = v[0], v[3], v[6]
    bmb = v[1]; kmb = v[4]; qmb = v[7]
    rk = bmb / kmb if kmb else float("inf")
    rq = bmb / qmb if qmb else float("inf")
    p("| %s | %.0f | %.1f | %.0f | %.1f | %.0f | %.1f | %.2f | %.2f |" % (name, b, bmb, k, kmb, q, qmb, rk, rq))
p("")
p("## Server CPU per I/O")
p("")
p("CPU time (user + system, all threads) the server process used during each run, divided by the")
p("I/Os completed: what decides throughput when client and server compete for the same cores.")
p("")
p("| case | blockd µs/IO | nbdkit µs/IO | qemu-nbd µs/IO | nbdkit / blockd | qemu-nbd / blockd |")
p("|---|---:|---:|---:|---:|---:|")
for name, v in R.items():
    b, k, q = v[2], v[5], v[8]
    p("| %s | %.1f | %.1f | %.1f | %.2f | %.2f |" % (name, b, k, q, k / b if b else 0, q / b if b else 0))
p("")
def scale(i):
    a = R["1ms-latency 4K randread QD1 1 conn"][3 * i]; b = R["1ms-latency 4K randread QD1 8 conns"][3 * i]
    return b / a if a else 0
p("## Targets")
p("")
checks = []
minr = min(min(v[1] / v[4], v[1] / v[7]) for v in R.values() if v[4] and v[7])
checks.append(("every ratio >= 1.0 against both peers", "min %.2f" % minr, minr >= 1.0))
r = R["4K randread QD32"]
checks.append(("4K QD32 randread >= 1.3x nbdkit", "%.2fx" % (r[0] / r[3]), r[0] / r[3] >= 1.3))
seq = R["1M seq read QD8"][1]
checks.append(("1M seq read >= 80%% of loopback TCP (%.0f MiB/s)" % tcp, "%.0f%%" % (100 * seq / tcp), seq >= 0.8 * tcp))
f = R["4K write+flush 8 writers"]
checks.append(("write+flush >= 3x nbdkit",
               "%.2fx; the disk alone allows %.0f/s = %.2fx nbdkit (8 local threads, no server: bench/sync_bound)"
               % (f[0] / f[3], sync_bound, sync_bound / f[3]), f[0] / f[3] >= 3))
checks.append(("peak RSS of blockd after the QD32 test <= 64 MiB", "%.1f MiB" % (rss_kb / 1024), rss_kb <= 65536))
checks.append(("1 ms latency: 8 conns / 1 conn >= 7x (blockd)", "blockd %.1fx, nbdkit %.1fx, qemu-nbd %.1fx" % (scale(0), scale(1), scale(2)), scale(0) >= 7))
p("| target | measured | met |")
p("|---|---|---|")
for t, m, ok in checks:
    p("| %s | %s | %s |" % (t, m, "yes" if ok else "**no**"))
print("\n".join(out))
PY
{
    cat "$TMP/report.md"
    echo
    echo "Machine: $(nproc) CPUs, $(uname -r), load average at end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Peers: $(nbdkit --version 2>&1 | head -1), $(qemu-nbd --version | head -1), $(fio --version)."
} >"$TMP/final.md"
cat "$TMP/final.md"
mkdir -p "$(dirname "$OUT")"
cp "$TMP/final.md" "$OUT"
