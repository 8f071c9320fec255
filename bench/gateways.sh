#!/usr/bin/env bash
# Gateway groups (docs/ha.md): two blockd members (127.0.0.2 and
# 127.0.0.3, separate state directories) serve one RBD volume on one
# throwaway Ceph cluster (scripts/ceph-cluster.sh: a monitor and a memstore
# OSD on the same CPUs).
#   scaling   4K random read/write at QD32 (bench/iscsi_load, one libiscsi
#             session per path) through one member, then through both at
#             once (QD32 on each). Writes through both bounce the image's
#             exclusive lock between the members at every write (librbd's
#             cooperative transfer): the case an initiator that ignores
#             ALUA produces, measured so that docs/ha.md can say what it
#             costs.
#   failover  a QD4 random writer through A (holding the lock), A gets
#             SIGKILL, then the time until a 4K FUA write through B is
#             acknowledged (tests/tools/gw_probe first-write: reconnect +
#             write, retried). B first notices A's silence (heartbeat
#             timeout, --gateway-heartbeat-timeout, default 3 s; rounds of
#             1 s), blocklists A and breaks its lock. Target: <= 5 s.
#   propagation  a share created through A (`blockctl share iscsi create`),
#             then the time until B answers INQUIRY on it; then the share
#             deleted through B, and the time until A no longer lists the
#             target in SendTargets. Both go through the group's
#             configuration store (docs/ha.md "Shared configuration"; each
#             member's apply waits for no fdatasync). Target: <= 1 s. The
#             integration test t-gw-config checks only that it happens.
#
# Run under the bench lock:  flock /tmp/blockd-bench.lock bash bench/gateways.sh
# Knobs: BUILD (./build), RUNTIME (s per run, 5), SIZE_MB (1024), REP (3),
#        TIMEOUT (heartbeat timeout, 3), OUT (bench/results/gateways.md;
#        "-" prints only).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
BUILD=${BUILD:-$root/build}
RUNTIME=${RUNTIME:-5}
SIZE_MB=${SIZE_MB:-1024}
REP=${REP:-3}
TIMEOUT=${TIMEOUT:-3}
OUT=${OUT:-$here/results/gateways.md}
BLOCKD=$BUILD/src/daemon/blockd
BLOCKCTL=$BUILD/src/cli/blockctl
LOAD=$BUILD/bench/iscsi_load
PROBE=$BUILD/tests/tools/gw_probe

for t in rbd python3 "$BLOCKD" "$BLOCKCTL" "$LOAD" "$PROBE"; do
    command -v "$t" >/dev/null 2>&1 || { echo "bench/gateways.sh: missing $t" >&2; exit 1; }
done

TMP=$(mktemp -d /tmp/blockd-bench-gw.XXXXXX)
declare -A PID ADDR PORT
cleanup() {
    for p in "${PID[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    "$root/scripts/ceph-cluster.sh" stop "$TMP/ceph" >/dev/null 2>&1 || true
    rm -rf "$TMP"
}
trap cleanup EXIT
port() { "$here/../scripts/free-port"; }
ctl() { local n=$1; shift; "$BLOCKCTL" --socket "$TMP/$n/blockd.sock" "$@"; }

echo "starting a Ceph cluster ..." >&2
CEPH_MEM_BYTES=$(((SIZE_MB * 3 + 2048) << 20)) "$root/scripts/ceph-cluster.sh" start "$TMP/ceph" >&2
export CEPH_CONF=$TMP/ceph/ceph.conf

# member NAME ADDR ID: start it and wait for its API
member() {
    local n=$1
    ADDR[$n]=$2
    [ -n "${PORT[$n]:-}" ] || PORT[$n]=$(port)
    "$BLOCKD" --state-dir "$TMP/$n" --log-level info --nbd-listen "$2:0" \
        --iscsi-listen "$2:${PORT[$n]}" --gateway-group bench --gateway-id "$3" \
        --gateway-name "$n" --gateway-ceph-conf "$CEPH_CONF" \
        --gateway-heartbeat-timeout "$TIMEOUT" >>"$TMP/$n.log" 2>&1 &
    PID[$n]=$!
    for _ in $(seq 1 300); do
        ctl "$n" call core.ping >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "bench/gateways.sh: member $n did not start" >&2; tail "$TMP/$n.log" >&2; exit 1
}
member A 127.0.0.2 1
member B 127.0.0.3 2
size=$((SIZE_MB << 20))
# The share is made through A; B gets it from the group's configuration
# store (docs/ha.md) once it has the pool.
for n in A B; do
    ctl "$n" call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"rbd\",\"mon_host\":\"$(sed -n 's/^mon host = //p' "$CEPH_CONF")\"}}" >/dev/null
done
ctl A call pool.dataset.create "{\"name\":\"ceph/v\",\"type\":\"VOLUME\",\"volsize\":$size}" >/dev/null
ctl A share iscsi create ceph/v >/dev/null
BASE=$(ctl A call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
url() { echo "iscsi://${ADDR[$1]}:${PORT[$1]}/$BASE:ceph:v/0"; }
for _ in $(seq 1 100); do iscsi-inq "$(url B)" >/dev/null 2>&1 && break; sleep 0.1; done
iscsi-inq "$(url B)" >/dev/null || { echo "bench/gateways.sh: B does not serve the share" >&2; exit 1; }
echo "filling the volume through A ..." >&2
"$LOAD" "$(url A)" write 1048576 8 "$((SIZE_MB / 100 + 3))" >/dev/null

iops() { sed -n 's/.*IOPS=\([0-9.]*\).*/\1/p' "$1"; }
results=()
row() { results+=("$1"); echo "$1" >&2; }

for rw in randread randwrite; do
    for r in $(seq 1 "$REP"); do
        "$LOAD" "$(url A)" "$rw" 4096 32 "$RUNTIME" >"$TMP/one" || { cat "$TMP/one" >&2; exit 1; }
        "$LOAD" "$(url A)" "$rw" 4096 32 "$RUNTIME" >"$TMP/a" &
        la=$!
        "$LOAD" "$(url B)" "$rw" 4096 32 "$RUNTIME" >"$TMP/b" &
        lb=$!
        wait "$la" && wait "$lb" || { cat "$TMP/a" "$TMP/b" >&2; exit 1; }
        one=$(iops "$TMP/one")
        a=$(iops "$TMP/a")
        b=$(iops "$TMP/b")
        two=$(python3 -c "print(round($a + $b))")
        ratio=$(python3 -c "print(f'{($a + $b) / $one:.2f}')")
        row "| 4K $rw QD32 | $r | $(python3 -c "print(round($one))") | $(python3 -c "print(round($a))") + $(python3 -c "print(round($b))") = $two | ${ratio}x |"
    done
done
lock_moves=$(grep -c "exclusive lock is now held" "$TMP/A.log" || true)

# propagation: a share made on A, served by B; deleted on B, gone from A
now_ms() { echo $(($(date +%s%N) / 1000000)); }
until_ok() { # until_ok CMD...: poll every 10 ms for up to 60 s; prints ms
    local t0 t
    t0=$(now_ms)
    until "$@"; do
        t=$(now_ms)
        [ $((t - t0)) -lt 60000 ] || { echo "bench/gateways.sh: never: $*" >&2; exit 1; }
        sleep 0.01
    done
    echo $(($(now_ms) - t0))
}
listed() { iscsi-ls "iscsi://${ADDR[$1]}:${PORT[$1]}" 2>/dev/null | grep "^Target:$BASE:$2 " >/dev/null; }
unlisted() { ! listed "$@"; }
served() { iscsi-inq "iscsi://${ADDR[$1]}:${PORT[$1]}/$BASE:$2/0" >/dev/null 2>&1; }
pa=() pd=()
for r in $(seq 1 "$REP"); do
    ctl A call pool.dataset.create "{\"name\":\"ceph/p$r\",\"type\":\"VOLUME\",\"volsize\":8388608}" >/dev/null
    ctl A share iscsi create "ceph/p$r" >/dev/null
    ms=$(until_ok served B "ceph:p$r")
    pa+=("$ms")
    ctl B share iscsi delete "ceph/p$r" >/dev/null
    ms=$(until_ok unlisted A "ceph:p$r")
    pd+=("$ms")
    echo "propagation $r: create A->B ${pa[-1]} ms, delete B->A ${pd[-1]} ms" >&2
done

fo=()
for r in $(seq 1 "$REP"); do
    # A holds the lock (its writes take it), a writer on it, then SIGKILL
    "$PROBE" write "$(url A)" 0 1 1 >/dev/null
    "$LOAD" "$(url A)" randwrite 4096 4 60 >/dev/null 2>&1 &
    w=$!
    sleep 2
    kill -KILL "${PID[A]}"
    t0=$(date +%s%N)
    "$PROBE" first-write "$(url B)" 7 "$r" 60 >/dev/null
    ms=$((($(date +%s%N) - t0) / 1000000))
    kill -KILL "$w" 2>/dev/null || true # libiscsi would reconnect to A forever
    wait "$w" 2>/dev/null || true
    wait "${PID[A]}" 2>/dev/null || true
    fo+=("$ms")
    echo "failover $r: $ms ms" >&2
    member A 127.0.0.2 1 # rejoins (after checking its old self is dead)
done

{
    echo "## $(date -u +%Y-%m-%dT%H:%MZ): $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), RUNTIME=$RUNTIME REP=$REP SIZE_MB=$SIZE_MB, heartbeat timeout ${TIMEOUT} s"
    echo
    echo "Command: \`flock /tmp/blockd-bench.lock bash bench/gateways.sh\` (memstore OSD on the same CPUs)"
    echo
    echo "| case | run | one member (IOPS) | two members at once (IOPS) | two / one |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${results[@]}"
    echo
    echo "Lock moves logged by A during the runs: $lock_moves (the write case through both paths bounces it)."
    echo
    echo "Failover, SIGKILL of the optimized member under a QD4 writer to the first acknowledged"
    echo "write through the survivor (ms): ${fo[*]} (target <= 5000)."
    echo
    echo "Configuration propagation (ms, polled every 10 ms): share created on A until B answers"
    echo "INQUIRY: ${pa[*]}; share deleted on B until A no longer lists it: ${pd[*]} (target <= 1000)."
    echo
} >"$TMP/report"
cat "$TMP/report"
if [ "$OUT" != - ]; then
    mkdir -p "$(dirname "$OUT")"
    cat "$TMP/report" >>"$OUT"
fi
