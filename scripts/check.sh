#!/usr/bin/env bash
# make check: build (normal + ASan/UBSan), unit tests under both, then the
# integration tests against a real daemon with real clients, the build
# matrix and the fuzzers. Prints one closing line "N passed, N failed" over
# all of it.
#
# It must take under 20 minutes on 2 CPUs (Ceph clusters included). What
# only compiles (the build matrix, the fuzz targets) runs in the background
# at idle CPU priority (SCHED_IDLE) from the first build on: the tests,
# which mostly wait, leave most of a CPU unused, and an idle-priority
# compiler takes only that. Both integration passes run as one pool of jobs
# on one shared Ceph cluster (tests/integration/run.sh). A tool that is
# missing fails the run: nothing is skipped for want of it.
set -u
# A step piped into tee fails when its command fails, not when tee does.
set -o pipefail
BUILD=${1:-build}
ASAN_BUILD=${2:-build-asan}
cd "$(dirname "$0")/.."
total_pass=0; total_fail=0
START=$(date +%s)
# Logs of this run (several checkouts may run make check at once).
LOGS=$(mktemp -d /tmp/blockd-check.XXXXXX)

step() { echo; echo "=== $* ($(date -u +%H:%M:%S), +$(($(date +%s) - START)) s)"; }
ok() { total_pass=$((total_pass + 1)); }
ko() { total_fail=$((total_fail + 1)); }
die() { echo "$*"; echo "make check took $(($(date +%s) - START)) s"; echo "$total_pass passed, $((total_fail + 1)) failed"; exit 1; }

for t in chrt setsid meson ninja; do
    command -v "$t" >/dev/null || die "error: $t is required (make deps)"
done

step "format (clang-format)"
if scripts/check-format.sh; then ok; else ko; fi

# The layout rules (docs/architecture.md): no include cycle between the
# folders of src/, no header implemented in another folder, no private
# header used outside its folder; no function over 80 lines; no new
# in-process JSON-RPC caller below the API layer.
step "layout (scripts/include-graph.py)"
if python3 scripts/include-graph.py; then ok; else ko; fi
step "function length (scripts/funclen.py: none over 80 lines)"
if python3 scripts/funclen.py --check src; then ok; else ko; fi
step "API layer (scripts/check-api-layer.sh)"
if scripts/check-api-layer.sh; then ok; else ko; fi

step "build ($BUILD)"
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" --buildtype=debugoptimized -Dwerror=true >/dev/null || die "meson setup $BUILD failed"
ninja -C "$BUILD" || die "build failed"

# ---- background, at idle priority: the build matrix, then the fuzz
# targets (scripts/fuzz.sh build). Its own session, so that it is stopped
# as a whole if make check ends early.
BG_PID= unit_pid= unit_asan_pid=
stop_bg() {
    [ -z "$BG_PID" ] || kill -TERM -- "-$BG_PID" 2>/dev/null
    for p in $unit_pid $unit_asan_pid; do kill -TERM "$p" 2>/dev/null; done
    return 0
}
trap stop_bg EXIT
# Then every fuzz target runs FUZZ_SECONDS (60 s, two at a time) on the
# CPU the tests leave: the run is bounded by time, and the log shows how
# many inputs each target got through (libFuzzer's per-input timeout, 20 s
# of wall time, is far above what a slowed but working input needs).
export FUZZ_SECONDS=${FUZZ_SECONDS:-60}
setsid chrt --idle 0 nice -n 19 bash -c '
    start=$(date +%s)
    scripts/build-matrix.sh >"$1/matrix.log" 2>&1; echo "$? $(($(date +%s) - start))" >"$1/matrix.rc"
    start=$(date +%s)
    scripts/fuzz.sh build >"$1/fuzz-build.log" 2>&1; rc=$?; echo "$rc $(($(date +%s) - start))" >"$1/fuzz-build.rc"
    [ "$rc" = 0 ] || exit 0
    start=$(date +%s)
    scripts/fuzz.sh >"$1/fuzz.log" 2>&1; echo "$? $(($(date +%s) - start))" >"$1/fuzz.rc"
' bash "$LOGS" </dev/null >"$LOGS/background.log" 2>&1 &
BG_PID=$!
echo "(build matrix and fuzz targets: compiling in the background at idle priority)"

# count_meson LOG BUILDDIR: "Ok: N" / "Fail: N" from meson test output. A
# test that skipped (meson's exit 77, or a cmocka skip() for a missing tool,
# loop device or privilege) counts as failed: make check runs every test.
count_meson() {
    local log=$1 testlog=$2/meson-logs/testlog.txt
    local ok fail skips
    ok=$(grep -E '^Ok:' "$log" | awk '{print $2}'); fail=$(grep -E '^(Fail|Unexpected Pass|Timeout|Skipped):' "$log" | awk '{s+=$2} END {print s+0}')
    [ -n "$ok" ] || fail=$((fail + 1)) # no summary: meson test itself failed
    skips=$(grep -E '^\[  SKIPPED \] [A-Za-z_0-9]+$' "$testlog" 2>/dev/null | sort -u | wc -l)
    if [ "$skips" -gt 0 ]; then
        echo "FAIL: $skips unit test case(s) skipped in $2 (install what is missing, run as root):"
        grep -E '^SKIP |^\[  SKIPPED \] [A-Za-z_0-9]+$' "$testlog" | sort -u | sed 's/^/  /'
        fail=$((fail + skips))
    fi
    total_pass=$((total_pass + ${ok:-0})); total_fail=$((total_fail + ${fail:-0}))
}

# The ASan+UBSan build compiles in the background at nice 10 while the
# unit tests and the default pass of the integration tests run (they
# mostly wait, and take the CPU first); the ASan pass's tests start once it
# is built ($LOGS/asan.ready, or asan.ready.failed), and its unit tests
# then run beside them.
step "unit tests and integration tests of $BUILD, beside the ASan+UBSan build ($ASAN_BUILD)"
meson test -C "$BUILD" --suite unit --print-errorlogs >"$LOGS/unit.log" 2>&1 </dev/null &
unit_pid=$!
(
    if { [ -f "$ASAN_BUILD/build.ninja" ] || meson setup "$ASAN_BUILD" --buildtype=debug -Dwerror=true \
        -Db_sanitize=address,undefined -Db_lundef=false; } && nice -n 10 ninja -C "$ASAN_BUILD"; then
        echo "(ASan+UBSan build: $(($(date +%s) - START)) s after make check started)"
        touch "$LOGS/asan.ready"
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            meson test -C "$ASAN_BUILD" --suite unit --print-errorlogs >"$LOGS/unit-asan.log" 2>&1
    else
        touch "$LOGS/asan.ready.failed"
        echo "asan build failed" >"$LOGS/unit-asan.log"
    fi
) </dev/null >"$LOGS/asan-build.log" 2>&1 &
unit_asan_pid=$!

# Integration tests mostly wait (timeouts, throttles, clients starting):
# IT_JOBS at a time, both passes in one pool of jobs (5: 4 left make
# check at 22 min with 4,313 test-seconds).
export IT_JOBS=${IT_JOBS:-5}
# The ASan+UBSan pass: any sanitizer report aborts the daemon, which fails
# the test that drove it. It also takes the portable read path (preadv2 +
# I/O pool) instead of io_uring, so that both engines are tested.
# Left to the default pass: t-package-deb (it builds the package from the
# tree, not from the build under test); t-rbd-conformance (2.4 min under
# ASan) runs the same SCSI code as t-scsi-conformance over the RBD backend,
# which t-rbd-datasets and t-rbd-kill drive under ASan; t-rbd-pool (RBD
# pool states: t-rbd-datasets and t-rbd-kill open, serve and reconnect
# pools under ASan); t-gw-members (membership: t-gw-failover runs it under
# ASan with a member killed and rejoining); t-rbd-lost-cluster and
# t-rbd-behind (they wait on librados timeouts and the rbd CLI; the error
# paths they reach are bdev_rbd's, which t-rbd-kill also takes);
# t-gw-conformance (6.6 min under ASan, the longest test of the run: its
# SCSI commands are t-scsi-conformance's, run under ASan, and the group's
# shared reservations and configuration store run under ASan in t-gw-pr
# and t-gw-config); t-iscsi-chap-hardening (most of it waits out a 30 s
# block; the CHAP and throttle code runs under ASan in the unit tests
# iscsi-login_chap and iscsi-chap_limit); t-nbd-interop (the NBD server
# runs under ASan in t-nbd-commands, t-nbd-badinput, t-nbd-tls and
# fuzz_nbd); t-ops-metrics (a Prometheus server scraping; the metrics code
# runs under ASan in daemon-metrics and t-snapshot-nostall's scrapes);
# t-iscsi-portals (portal listeners are created, changed and removed under
# ASan in t-iscsi-config and the iscsi-config-api unit test);
# t-truenas-snapshottask (most of it waits for minute boundaries; its
# schedule, naming and lifetime rules run under ASan in the config-snaptask
# unit test); t-changed-blocks-rbd (the diff API, the change log and the
# NBD dirty-bitmap contexts run under ASan in t-changed-blocks and the
# store-diff unit test; the RBD part is one rbd_diff_iterate2 callback);
# t-gw-ports (the member port tags are served under ASan in t-gw-config
# and t-gw-pr); t-replication-incremental (its range copy runs under ASan
# in t-truenas-replication and the config-repl_copy unit test; the rest is
# loop mounts and Ceph).
ASAN_SKIP="t-package-deb t-rbd-conformance t-rbd-pool t-gw-members t-rbd-lost-cluster t-rbd-behind t-gw-conformance"
ASAN_SKIP+=" t-iscsi-chap-hardening t-nbd-interop t-ops-metrics t-iscsi-portals"
ASAN_SKIP+=" t-truenas-snapshottask t-changed-blocks-rbd t-gw-ports t-replication-incremental"
echo "integration tests: default build (io_uring) and ASan+UBSan build (preadv2), $IT_JOBS at a time"
tests/integration/run.sh \
    --pass default --build "$(pwd)/$BUILD" --skip "${IT_SKIP:-}" \
    --pass asan --build "$(pwd)/$ASAN_BUILD" --skip "$ASAN_SKIP ${IT_SKIP:-}" --after "$LOGS/asan.ready" \
    --env ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    --env UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    --env BLOCKD_IO_ENGINE=pread 2>&1 | tee "$LOGS/integration.log"
ip=$(sed -n 's/^integration: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$LOGS/integration.log")
if=$(sed -n 's/^integration: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$LOGS/integration.log")
[ -n "$ip" ] || { ip=0; if=1; }
total_pass=$((total_pass + ip)); total_fail=$((total_fail + if))

step "unit tests ($BUILD, run beside the integration tests)"
wait "$unit_pid"
unit_pid=
cat "$LOGS/unit.log"
count_meson "$LOGS/unit.log" "$BUILD"

step "ASan+UBSan build and its unit tests (run beside the integration tests)"
wait "$unit_asan_pid"
unit_asan_pid=
if [ -e "$LOGS/asan.ready.failed" ]; then
    cat "$LOGS/asan-build.log"
    ko
else
    tail -n 2 "$LOGS/asan-build.log"
fi
cat "$LOGS/unit-asan.log"
count_meson "$LOGS/unit-asan.log" "$ASAN_BUILD"

step "build matrix (release, sanitizers at -O3, Debian's hardening flags; compiled in the background)"
wait "$BG_PID"
BG_PID=
read -r rc secs 2>/dev/null <"$LOGS/matrix.rc" || rc=1 secs=?
cat "$LOGS/matrix.log"
echo "(build matrix: ${secs} s in the background)"
if [ "$rc" = 0 ]; then ok; else ko; fi

# FUZZ_SECONDS per target (a run over the corpus and fresh inputs), in the
# background above; `make fuzz-long` runs them for an hour.
step "fuzz: every libFuzzer target for $FUZZ_SECONDS s (two at a time, in the background)"
read -r rc secs 2>/dev/null <"$LOGS/fuzz-build.rc" || rc=1 secs=?
if [ "$rc" != 0 ]; then
    cat "$LOGS/fuzz-build.log"
    echo "fuzz: the targets did not build"
    ko
else
    tail -n 1 "$LOGS/fuzz-build.log"
    echo "(fuzz targets: built in ${secs} s in the background)"
    read -r rc secs 2>/dev/null <"$LOGS/fuzz.rc" || rc=1 secs=?
    cat "$LOGS/fuzz.log"
    echo "(fuzzing: ${secs} s in the background)"
    if [ "$rc" = 0 ]; then ok; else ko; fi
fi

echo
echo "make check took $(($(date +%s) - START)) s"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
