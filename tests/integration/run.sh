#!/usr/bin/env bash
# Run every integration test (tests/integration/t-*.sh) and print a summary.
# Usage: run.sh [PATTERN]   (PATTERN filters test names)
#
# Tests run IT_JOBS at a time (default 2): most of their time is spent
# waiting (timeouts, throttles, clients starting), and each test runs its
# own daemon on free ports in its own temporary directory. A test whose
# file has a line "# run-alone" (it measures latency or memory) runs after
# the others, by itself. IT_SKIP (names, space-separated) leaves tests out,
# each said on a line of its own. Tests with a line "# slow" (30 s or more)
# start first, so that the long ones do not end up alone at the tail.
set -u
here=$(cd "$(dirname "$0")" && pwd)
JOBS=${IT_JOBS:-2}
pass=0; failed=0; failures=()
# Per-run log directory, so that runs from several checkouts do not clash.
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/blockd-it-logs.XXXXXX)}

parallel=(); alone=(); rest=()
for t in "$here"/t-*.sh; do
    name=$(basename "$t" .sh)
    if [ -n "${1:-}" ] && [[ "$name" != *"$1"* ]]; then continue; fi
    if [[ " ${IT_SKIP:-} " == *" $name "* ]]; then echo "skip $name (IT_SKIP)"; continue; fi
    if grep -q '^# run-alone' "$t"; then
        alone+=("$t")
    elif grep -q '^# slow' "$t"; then
        parallel+=("$t")
    else
        rest+=("$t")
    fi
done
parallel+=("${rest[@]}")

# One test: its log, then a status file "<rc> <seconds>".
run_one() {
    local t=$1 name start rc
    name=$(basename "$t" .sh)
    start=$(date +%s)
    bash "$t" >"$LOGDIR/$name.log" 2>&1
    rc=$?
    echo "$rc $(($(date +%s) - start))" >"$LOGDIR/$name.status"
}

report() {
    local name=$1 rc secs
    read -r rc secs <"$LOGDIR/$name.status"
    if [ "$rc" = 0 ]; then
        pass=$((pass + 1)); echo "ok   $name (${secs}s)"
    else
        failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name (${secs}s)"
        sed 's/^/    /' "$LOGDIR/$name.log" | tail -n 40
    fi
}

# Start up to JOBS tests; report each as it ends (in the order they end).
declare -A running=()
for t in "${parallel[@]}"; do
    while [ ${#running[@]} -ge "$JOBS" ]; do
        wait -n 2>/dev/null || true
        for pid in "${!running[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            wait "$pid" 2>/dev/null; report "${running[$pid]}"; unset "running[$pid]"
        done
    done
    run_one "$t" &
    running[$!]=$(basename "$t" .sh)
done
for pid in "${!running[@]}"; do
    wait "$pid" 2>/dev/null; report "${running[$pid]}"
done
for t in "${alone[@]}"; do
    run_one "$t"; report "$(basename "$t" .sh)"
done
echo "integration: $pass passed, $failed failed"
[ "$failed" = 0 ]
