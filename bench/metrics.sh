#!/usr/bin/env bash
# What a Prometheus scrape costs blockd, and whether it disturbs I/O:
# 1,000 volumes shared over iSCSI (so each has its series), then
#  - daemon CPU per scrape of /metrics (from /proc/PID/stat, 50 scrapes);
#  - fio 4K random reads at QD32 over NBD on one volume, 10 s per run,
#    alternating (the order rotates each round): no scrapes / a scrape every
#    second (Prometheus' pace) / every 100 ms / back to back (the worst
#    case); medians of ROUNDS rounds (default 5), and each mode's ratio to
#    the run without scrapes.
#   flock /tmp/blockd-bench.lock bash bench/metrics.sh
# (fio's nbd engine prints "fio: connected to NBD server" on stdout before
# its JSON: the first run of this script read that as an empty result.)
set -u
export BUILD=${BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
ROUNDS=${ROUNDS:-5}
VOLS=${VOLS:-1000}     # smaller for a smoke run of the script only
RUNTIME=${RUNTIME:-10}
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)/results/metrics.md}
. "$(dirname "$0")/../tests/integration/lib.sh"
need fio curl python3
WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
KEY=$(blockctl call api_key.create '{"name":"bench"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
M="http://127.0.0.1:$WS_PORT/metrics"
vols=()
for i in $(seq 1 "$VOLS"); do vols+=("demo/v$i"); done
# One core.bulk job creates them all (blockctl waits for the job and prints
# one result per call).
blockctl call core.bulk "$(python3 -c '
import json
print(json.dumps(["pool.dataset.create", [[{"name": "demo/v%d" % i, "type": "VOLUME", "volsize": 16 << 20}] for i in range(1, '"$VOLS"' + 1)]]))')" >"$TMP/bulk.json" || fail "core.bulk"
blockctl share iscsi create "${vols[@]}" >/dev/null || fail "share iscsi create"
blockctl share nbd create demo/v1 --name v1 >/dev/null || fail "share nbd create"
lines=$(curl -s -H "Authorization: Bearer $KEY" "$M" | wc -l)
cpu() { awk '{print $14 + $15}' "/proc/$BLOCKD_PID/stat"; }
tck=$(getconf CLK_TCK)
c0=$(cpu)
for i in $(seq 1 50); do curl -s -o /dev/null -H "Authorization: Bearer $KEY" "$M"; done
c1=$(cpu)
per=$(python3 -c "print('%.2f' % (($c1 - $c0) * 1000.0 / $tck / 50))")
echo "scrape: $lines lines, $per ms of blockd CPU each (50 scrapes)"

load0=$(cut -d' ' -f1-3 /proc/loadavg)
run_fio() {
    local out="$TMP/fio.json"
    fio --name=r --ioengine=nbd --uri="nbd://127.0.0.1:$NBD_PORT/v1" --rw=randread --bs=4k \
        --iodepth=32 --size=16m --time_based --runtime="$RUNTIME" --output-format=json \
        --output="$out" >/dev/null 2>"$TMP/fio.err" || fail "fio: $(cat "$TMP/fio.err")"
    python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(int(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"]))' "$out" ||
        fail "no fio result: $(head -c 300 "$out")"
}
scraper() { # $1: seconds between scrapes (0: back to back)
    while :; do curl -s -o /dev/null -H "Authorization: Bearer $KEY" "$M"; sleep "$1"; done
}
modes=(none 1s 100ms busy)
declare -A res=([none]="" [1s]="" [100ms]="" [busy]="")
declare -A pause=([1s]=1 [100ms]=0.1 [busy]=0)
for r in $(seq 1 "$ROUNDS"); do
    for k in 0 1 2 3; do
        mode=${modes[$(((k + r - 1) % 4))]}
        pid=
        if [ "$mode" != none ]; then scraper "${pause[$mode]}" & pid=$!; fi
        iops=$(run_fio)
        if [ -n "$pid" ]; then kill "$pid"; wait "$pid" 2>/dev/null || true; fi
        res[$mode]="${res[$mode]} $iops"
        echo "round $r $mode: $iops IOPS"
    done
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
n=$(med "${res[none]}") s=$(med "${res[1s]}") h=$(med "${res[100ms]}") b=$(med "${res[busy]}")
ratio() { python3 -c "print('%.3f' % ($1 / $2))"; }
load1=$(cut -d' ' -f1-3 /proc/loadavg)
summary="scrape of $VOLS volumes ($lines lines): $per ms blockd CPU; fio 4K QD32 NBD random reads, medians of $ROUNDS x $RUNTIME s: no scrapes $n IOPS | 1 s scrapes $s IOPS ($(ratio "$s" "$n")x) | 100 ms scrapes $h IOPS ($(ratio "$h" "$n")x) | back-to-back scrapes $b IOPS ($(ratio "$b" "$n")x); load average $load0 at the start, $load1 at the end"
echo "$summary"
for mode in "${modes[@]}"; do echo "  $mode:${res[$mode]}"; done
{
    echo "- $(date -u '+%Y-%m-%d %H:%M') $(git rev-parse --short HEAD): $summary"
    echo "  (every run, IOPS: none${res[none]}; 1 s${res[1s]}; 100 ms${res[100ms]}; back to back${res[busy]})"
} >>"$OUT"
pass "metrics bench"
