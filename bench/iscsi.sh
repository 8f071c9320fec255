#!/usr/bin/env bash
# iSCSI side by side: blockd vs tgtd serving the same 1 GiB file from the page
# cache, measured in one run with iscsi-perf (random 4 KiB reads, sequential
# 1 MiB reads), qemu-img bench over iscsi:// (libiscsi inside qemu), and
# bench/iscsi_flush (the guest flush pattern: small writes, each followed by
# SYNCHRONIZE CACHE, 1 and 8 writers). The flush pattern is also run against
# blockd with sync=disabled, to show the price of honest durability and how
# much group commit wins back. Ratios are blockd / tgtd.
#
# Run under the bench lock:  flock /tmp/blockd-bench.lock bash bench/iscsi.sh
# Knobs: BUILD (default ./build), RUNTIME (s per timed run, 5), SIZE_MB (1024),
#        OUT (bench/results/iscsi.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BUILD=${BUILD:-$root/build}
RUNTIME=${RUNTIME:-5}
SIZE_MB=${SIZE_MB:-1024}
OUT=${OUT:-$here/results/iscsi.md}
BLOCKD=$BUILD/src/daemon/blockd
BLOCKCTL=$BUILD/src/cli/blockctl
FLUSH=$BUILD/bench/iscsi_flush
SYNCBOUND=$BUILD/bench/sync_bound

for t in iscsi-perf qemu-img tgtd tgtadm python3 "$BLOCKD" "$BLOCKCTL" "$FLUSH" "$SYNCBOUND"; do
    command -v "$t" >/dev/null 2>&1 || { echo "bench/iscsi.sh: missing $t" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/blockd-bench-iscsi.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    sleep 1
    # tgtd ignores SIGTERM while it still has targets
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
port() { "$here/../scripts/free-port"; }
jget() { python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }

# --- blockd: a 1 GiB volume; its file is what tgtd serves too ---
BP=$(port)
STATE=$TMP/state
"$BLOCKD" --state-dir "$STATE" --log-level warn --nbd-listen "127.0.0.1:$(port)" \
    --iscsi-listen "127.0.0.1:$BP" >"$TMP/blockd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 200); do grep -q "blockd ready" "$TMP/blockd.log" 2>/dev/null && break; sleep 0.05; done
bctl() { "$BLOCKCTL" --socket "$STATE/blockd.sock" "$@"; }
bctl call pool.dataset.create "{\"name\":\"demo/bench\",\"type\":\"VOLUME\",\"volsize\":$((SIZE_MB << 20))}" >/dev/null
portal=$(jget "$(bctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
tid=$(jget "$(bctl call iscsi.target.create "{\"name\":\"bench\",\"groups\":[{\"portal\":$portal}]}")" 'j["id"]')
eid=$(jget "$(bctl call iscsi.extent.create '{"name":"bench","disk":"zvol/demo/bench"}')" 'j["id"]')
bctl call iscsi.targetextent.create "{\"target\":$tid,\"extent\":$eid}" >/dev/null
DISK=$(find "$STATE" -type f -name bench | head -n 1)
[ -f "$DISK" ] || { echo "bench/iscsi.sh: cannot find the volume file" >&2; exit 1; }
echo "filling the ${SIZE_MB} MiB volume file $DISK ..." >&2
dd if=/dev/urandom of="$DISK" bs=1M count="$SIZE_MB" conv=notrunc status=none
cat "$DISK" >/dev/null

# --- tgtd on the same file (write cache on, its default) ---
TP=$(port)
CP=$((RANDOM % 900 + 100)) # tgtadm -C takes a small number (control socket suffix)
tgtd -f -C "$CP" --iscsi "portal=127.0.0.1:$TP" >"$TMP/tgtd.log" 2>&1 &
PIDS+=($!)
sleep 1
tgtadm -C "$CP" --lld iscsi --op new --mode target --tid 1 -T iqn.2026-11.org.bench:tgt
tgtadm -C "$CP" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$DISK"
tgtadm -C "$CP" --lld iscsi --op bind --mode target --tid 1 -I ALL

declare -A URL=([blockd]="iscsi://127.0.0.1:$BP/iqn.2026-11.org.blockd:bench/0"
    [tgtd]="iscsi://127.0.0.1:$TP/iqn.2026-11.org.bench:tgt/1")
SERVERS=(blockd tgtd)

# iscsi-perf: → "IOPS MiB/s"
perf_run() { # url blocks_per_request max_requests [-r]
    timeout $((RUNTIME + 30)) iscsi-perf -b "$2" -m "$3" ${4:-} -t "$RUNTIME" "$1" 2>&1 | tr '\r' '\n' |
        sed -n 's/.*iops average \([0-9]*\) (\([0-9]*\) MB\/s).*/\1 \2/p' | tail -n 1
}
# qemu-img bench: → "IOPS MiB/s"
qb_run() { # url size count depth [-w]
    local out
    out=$(timeout 300 qemu-img bench -f raw -t none -n -c "$3" -d "$4" -s "$2" ${5:-} "$1" 2>&1)
    python3 - "$out" "$2" "$3" <<'PY'
import re, sys
out, size, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = re.search(r"Run completed in ([0-9.]+) seconds", out)
if not m:
    print("0 0"); sys.exit(0)
mult = {"k": 1024, "M": 1 << 20}
b = int(size[:-1]) * mult[size[-1]] if size[-1] in mult else int(size)
t = float(m.group(1))
print("%.0f %.1f" % (count / t, count * b / t / 1048576))
PY
}
flush_run() { # url bs writers
    "$FLUSH" "$1" "$2" "$3" "$RUNTIME" | sed -n 's/.*MiB\/s=\([0-9.]*\) IOPS=\([0-9]*\).*/\2 \1/p'
}

RESULTS=$TMP/results
: >"$RESULTS"
# The items in order on odd repeats, reversed on even ones, so that no side
# always runs first (the disk's flush rate drifts within minutes).
rep_order() { # rep item...
    local rep=$1
    shift
    if [ $((rep % 2)) = 1 ]; then echo "$@"; else printf '%s\n' "$@" | tac | tr '\n' ' '; fi
}
case_all() { # name kind args...   (REP=N: N runs each, order alternating; the report takes medians)
    local name=$1 kind=$2 s r rep
    shift 2
    for rep in $(seq 1 "${REP:-1}"); do
        for s in $(rep_order "$rep" "${SERVERS[@]}"); do
            sync # no run pays for the writeback of dirty pages an earlier one left
            case $kind in
            perf) r=$(perf_run "${URL[$s]}" "$@") || r="0 0" ;;
            qb) r=$(qb_run "${URL[$s]}" "$@") || r="0 0" ;;
            flush) r=$(flush_run "${URL[$s]}" "$@") || r="0 0" ;;
            esac
            echo "$name $s ${r:-0 0}" | tee -a "$RESULTS" >&2
        done
    done
}

case_all "4k-randread-QD1 (iscsi-perf)" perf 8 1 -r
case_all "4k-randread-QD32 (iscsi-perf)" perf 8 32 -r
case_all "4k-read-QD32 (qemu-img bench)" qb 4k 200000 32
case_all "4k-write-QD32 (qemu-img bench)" qb 4k 100000 32 -w
case_all "1M-seqread-QD8 (iscsi-perf)" perf 2048 8
case_all "1M-seqread-QD8 (qemu-img bench)" qb 1M 2048 8
case_all "1M-seqwrite-QD8 (qemu-img bench)" qb 1M 1024 8 -w
REP=3 case_all "4k-write+SYNC-8writers (iscsi_flush)" flush 4096 8
# What the disk itself allows there: 8 local threads doing the same write +
# fdatasync with no network and no server (bench/sync_bound).
SYNC_BOUND=$("$SYNCBOUND" "$DISK" 8 2 | awk '$1 == "best" {print $2}')
echo "the disk alone: at most $SYNC_BOUND write+flush/s with 8 writers" >&2

# The flush pattern sweep: blockd sync=standard and sync=disabled vs tgtd.
# Every cell runs the three side by side (rep_order) and the report takes
# each one's median over SWEEP_REPEAT runs.
SWEEP=$TMP/sweep
: >"$SWEEP"
blockd_sync() { bctl call pool.dataset.update "[\"demo/bench\",{\"sync\":\"$1\"}]" >/dev/null; }
sweep_run() { # who bs w
    local r
    case $1 in
    tgtd) r=$(flush_run "${URL[tgtd]}" "$2" "$3") || r="0 0" ;;
    *) blockd_sync "${1#blockd-}"; r=$(flush_run "${URL[blockd]}" "$2" "$3") || r="0 0" ;;
    esac
    echo "$1 $2 $3 ${r:-0 0}" | tee -a "$SWEEP" >&2
}
for rep in $(seq 1 "${SWEEP_REPEAT:-3}"); do
    for bs in 512 4096 32768; do
        for w in 1 8; do
            for who in $(rep_order "$rep" blockd-STANDARD tgtd blockd-DISABLED); do
                sync
                sweep_run "$who" "$bs" "$w"
            done
        done
    done
done
blockd_sync STANDARD

python3 - "$RESULTS" "$SWEEP" "$SIZE_MB" "$RUNTIME" "$(nproc)" "$SYNC_BOUND" >"$TMP/report.md" <<'PY'
import sys, collections, statistics
res, sweep, size, runtime, cpus, sync_bound = sys.argv[1:7]
runs = collections.OrderedDict()
for line in open(res):
    *name, srv, iops, mib = line.split()
    runs.setdefault(" ".join(name), collections.defaultdict(list))[srv].append((float(iops), float(mib)))
rows = collections.OrderedDict(
    (name, {srv: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
            for srv, v in by.items()})
    for name, by in runs.items())
print("# iSCSI: blockd vs tgtd\n")
print(f"Same {size} MiB file in the page cache, both targets on 127.0.0.1, {cpus} CPUs, "
      f"{runtime} s per timed run; clients: iscsi-perf, qemu-img bench (libiscsi), "
      "bench/iscsi_flush (median of 3 runs each, order alternating). Ratio = blockd / tgtd "
      "(MiB/s).\n")
print("| case | blockd IOPS | blockd MiB/s | tgtd IOPS | tgtd MiB/s | ratio |")
print("|---|---:|---:|---:|---:|---:|")
for name, r in rows.items():
    b, t = r.get("blockd", (0, 0)), r.get("tgtd", (0, 0))
    ratio = b[1] / t[1] if t[1] else 0
    print(f"| {name} | {b[0]:.0f} | {b[1]:.1f} | {t[0]:.0f} | {t[1]:.1f} | {ratio:.2f} |")
f = rows.get("4k-write+SYNC-8writers (iscsi_flush)", {})
if "tgtd" in f and f["tgtd"][0]:
    print(f"\nFlush case: the disk alone allows {float(sync_bound):.0f} write+flush/s with 8 "
          f"writers ({float(sync_bound) / f['tgtd'][0]:.2f}x tgtd; 8 local threads, no network, "
          f"no server: bench/sync_bound); blockd reaches "
          f"{100 * f.get('blockd', (0, 0))[0] / float(sync_bound):.0f}% of it.")
print("\n## The guest flush pattern (write of bs bytes + SYNCHRONIZE CACHE, W writers)\n")
runs = collections.defaultdict(list)
for line in open(sweep):
    who, bs, w, iops, mib = line.split()
    runs[(who, int(bs), int(w))].append(float(mib))
sw = {k: statistics.median(v) for k, v in runs.items()}
nrep = max((len(v) for v in runs.values()), default=0)
print("MiB/s, median of %d runs per cell, the three run side by side; blockd with "
      "sync=standard (durable: group commit) and sync=disabled (flush returns at once), tgtd "
      "with its write cache on (every flush an fdatasync).\n" % nrep)
print("| bs | writers | blockd standard | blockd disabled | tgtd | standard/tgtd | standard/disabled |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for bs in (512, 4096, 32768):
    for w in (1, 8):
        s = sw.get(("blockd-STANDARD", bs, w), 0)
        d = sw.get(("blockd-DISABLED", bs, w), 0)
        t = sw.get(("tgtd", bs, w), 0)
        print(f"| {bs} | {w} | {s:.2f} | {d:.2f} | {t:.2f} | {s / t if t else 0:.2f} | {s / d if d else 0:.2f} |")
PY
mkdir -p "$(dirname "$OUT")"
cp "$TMP/report.md" "$OUT"
cat "$TMP/report.md"
