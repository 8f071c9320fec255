#!/usr/bin/env bash
# What a Prometheus scrape costs blockd, and whether it disturbs I/O (issue
# #15): 1,000 volumes shared over iSCSI (so each has its series), then
#  - daemon CPU per scrape of /metrics (from /proc/PID/stat, 50 scrapes);
#  - fio 4K random reads at QD32 over NBD on one volume, 10 s per run,
#    alternating: no scrapes / a scrape every second (Prometheus' pace) /
#    scrapes back to back (the worst case); medians of ROUNDS rounds.
#   flock /tmp/blockd-bench.lock bash bench/metrics.sh
set -u
export BUILD=${BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
ROUNDS=${ROUNDS:-3}
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)/results/metrics.md}
. "$(dirname "$0")/../tests/integration/lib.sh"
need fio curl python3
WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
KEY=$(blockctl call api_key.create '{"name":"bench"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
M="http://127.0.0.1:$WS_PORT/metrics"
vols=()
for i in $(seq 1 1000); do vols+=("demo/v$i"); done
# One core.bulk job creates them all (blockctl waits for the job and prints
# one result per call).
blockctl call core.bulk "$(python3 -c '
import json
print(json.dumps(["pool.dataset.create", [[{"name": "demo/v%d" % i, "type": "VOLUME", "volsize": 16 << 20}] for i in range(1, 1001)]]))')" >"$TMP/bulk.json" || fail "core.bulk"
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

run_fio() {
    fio --name=r --ioengine=nbd --uri="nbd://127.0.0.1:$NBD_PORT/v1" --rw=randread --bs=4k \
        --iodepth=32 --size=16m --time_based --runtime=10 --output-format=json 2>/dev/null |
        python3 -c 'import json,sys; print(int(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))'
}
scraper() { # $1: seconds between scrapes (0: back to back)
    while :; do curl -s -o /dev/null -H "Authorization: Bearer $KEY" "$M"; sleep "$1"; done
}
declare -A res=([none]="" [1s]="" [busy]="")
for r in $(seq 1 "$ROUNDS"); do
    for mode in none 1s busy; do
        pid=
        case $mode in 1s) scraper 1 & pid=$! ;; busy) scraper 0 & pid=$! ;; esac
        iops=$(run_fio)
        [ -n "$pid" ] && { kill "$pid"; wait "$pid" 2>/dev/null; }
        res[$mode]="${res[$mode]} $iops"
        echo "round $r $mode: $iops IOPS"
    done
done
med() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
n=$(med "${res[none]}") s=$(med "${res[1s]}") b=$(med "${res[busy]}")
summary="scrape of 1,000 volumes ($lines lines): $per ms blockd CPU; fio 4K QD32 NBD reads, medians of $ROUNDS: no scrapes $n IOPS, 1 s scrapes $s ($(python3 -c "print('%.3f' % ($s / $n))")x), back-to-back scrapes $b ($(python3 -c "print('%.3f' % ($b / $n))")x)"
echo "$summary"
echo "- $(date -u '+%Y-%m-%d %H:%M') $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg): $summary" >>"$OUT"
