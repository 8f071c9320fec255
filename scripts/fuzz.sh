#!/usr/bin/env bash
# make fuzz: build every libFuzzer target in fuzz/ with clang and run each
# for a bounded time (FUZZ_SECONDS, default 30) from its seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-30}
command -v clang >/dev/null || { echo "error: clang is required for make fuzz" >&2; exit 1; }
if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang meson setup build-fuzz -Dfuzz=true --buildtype=debug \
        -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
ninja -C build-fuzz
found=0
for f in build-fuzz/fuzz/fuzz_*; do
    [ -f "$f" ] && [ -x "$f" ] || continue
    found=$((found + 1))
    name=$(basename "$f")
    corpus=fuzz/corpus/$name
    mkdir -p "$corpus" "/tmp/blockd-fuzz-$name"
    echo "== $name (${SECONDS_EACH}s)"
    if ! "$f" -max_total_time="$SECONDS_EACH" -print_final_stats=1 "/tmp/blockd-fuzz-$name" \
        "$corpus" >"/tmp/blockd-fuzz-$name.log" 2>&1; then
        tail -n 60 "/tmp/blockd-fuzz-$name.log"
        echo "fuzz: $name FAILED (crash input saved in the current directory)" >&2
        exit 1
    fi
    grep -E 'stat::(number_of_executed_units|new_units_added)' "/tmp/blockd-fuzz-$name.log"
done
[ "$found" -gt 0 ] || { echo "error: no fuzz targets were built" >&2; exit 1; }
echo "fuzz: $found targets ran without a crash"
