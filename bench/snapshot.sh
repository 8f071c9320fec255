#!/usr/bin/env bash
# Snapshots under a writing guest on a filesystem without reflink:
# the full case (2 GiB volume, 1 GiB written, 10 snapshots
# while fio writes 4 KiB blocks at 1,500 IOPS over NBD), with fio's worst
# write latency asserted (< 100 ms, or twice the same job's worst latency
# without snapshots on a machine too loaded for that). Prints the longest
# hold and the latencies with and without snapshots; appends them to OUT.
#   flock /tmp/blockd-bench.lock bash bench/snapshot.sh
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build}
OUT=${OUT:-bench/results/snapshot.md}
log=$(mktemp /tmp/blockd-bench-snapshot.XXXXXX)
rc=0
NOSTALL_MODE=strict BUILD=$BUILD bash tests/integration/t-snapshot-nostall.sh >"$log" 2>&1 || rc=$?
line=$(grep -E '^(ok|PASS|FAIL)|snapshots, longest hold|a write waited' "$log" | tail -n 1)
echo "$line"
{
    echo "- $(date -u '+%Y-%m-%d %H:%M') $(git rev-parse --short HEAD) load $(cut -d' ' -f1-3 /proc/loadavg):" \
        "${line:-no result (see $log)}"
} >>"$OUT"
exit $rc
