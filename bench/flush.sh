#!/bin/bash
# Group commit vs one fdatasync per flush: K = 1, 4, 16 threads, each doing
# 4 KiB write + flush on one file-backed volume, 3 runs each, medians.
# Run it alone (one benchmark at a time per machine):
#   flock /tmp/blockd-bench.lock bash bench/flush.sh [DIR]
# DIR must be on a real disk (fdatasync is free on tmpfs); the default is
# ./var/bench-flush in the work tree. Output goes to bench/results/flush.md.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DIR=${1:-$PWD/var/bench-flush}
RUN_SECONDS=${RUN_SECONDS:-2}
REPS=${REPS:-3}

mkdir -p "$DIR"
fstype=$(stat -f -c %T "$DIR")
case "$fstype" in
tmpfs | ramfs | overlayfs)
    echo "error: $DIR is on $fstype: fdatasync costs nothing there; give a directory on a real disk" >&2
    exit 1
    ;;
esac
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD" bench/flush >/dev/null

dev=$(df --output=source "$DIR" | tail -1)
out=bench/results/flush.md
mkdir -p bench/results
{
    echo "# flush: group commit vs one fdatasync per flush"
    echo
    echo "\`bench/flush.sh\` on $(date -u +%Y-%m-%d), $(nproc) CPUs, kernel $(uname -r)."
    echo "Volume file in \`$DIR\` ($fstype on $dev). Each thread loops: 4 KiB write, then flush"
    echo "(volume_submit_wait from plain threads, so every request crosses the I/O pool)."
    echo "${RUN_SECONDS} s per mode per run (6 interleaved slices each, order flipping), median of ${REPS} runs."
    echo
    "$BUILD/bench/flush" "$DIR" "$RUN_SECONDS" "$REPS"
    echo
    echo "How to read it: ratio = group commit / one fdatasync per flush (> 1: group commit"
    echo "acknowledges more flushes per second). syncs/flush = fdatasync calls per acknowledged"
    echo "flush with group commit (1.000 in the other mode by construction): what it saves the"
    echo "device. Up to 4 syncs per volume may overlap. With 1 thread the two modes do the same"
    echo "work, so their difference there is this disk's run-to-run noise. On a device whose cache"
    echo "flush is cheap and where the kernel merges concurrent flushes (virtio with a host cache),"
    echo "one fdatasync per flush also scales with threads; on drives with costly flushes, the"
    echo "number of fdatasync calls is what decides."
} | tee "$out.tmp"
mv "$out.tmp" "$out"
rmdir "$DIR" 2>/dev/null || true
