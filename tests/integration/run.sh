#!/usr/bin/env bash
# Run every integration test (tests/integration/t-*.sh) and print a summary.
# Usage: run.sh [PATTERN]   (PATTERN filters test names)
set -u
here=$(cd "$(dirname "$0")" && pwd)
pass=0; failed=0; failures=()
# Per-run log directory, so that runs from several checkouts do not clash.
LOGDIR=${LOGDIR:-$(mktemp -d /tmp/blockd-it-logs.XXXXXX)}
for t in "$here"/t-*.sh; do
    name=$(basename "$t" .sh)
    if [ -n "${1:-}" ] && [[ "$name" != *"$1"* ]]; then continue; fi
    start=$(date +%s)
    if bash "$t" >"$LOGDIR/$name.log" 2>&1; then
        pass=$((pass + 1)); echo "ok   $name ($(( $(date +%s) - start ))s)"
    else
        failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name ($(( $(date +%s) - start ))s)"
        sed 's/^/    /' "$LOGDIR/$name.log" | tail -n 40
    fi
done
echo "integration: $pass passed, $failed failed"
[ "$failed" = 0 ]
