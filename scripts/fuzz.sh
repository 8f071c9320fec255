#!/usr/bin/env bash
# make fuzz: build every libFuzzer target in fuzz/ with clang and run each
# for a bounded time (FUZZ_SECONDS, default 30) from its seed corpus.
set -eu
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
    [ -x "$f" ] || continue
    found=$((found + 1))
    name=$(basename "$f")
    corpus=fuzz/corpus/$name
    mkdir -p "$corpus" "/tmp/blockd-fuzz-$name"
    echo "== $name (${SECONDS_EACH}s)"
    "$f" -max_total_time="$SECONDS_EACH" -print_final_stats=1 "/tmp/blockd-fuzz-$name" "$corpus" \
        2>&1 | tail -n 5
done
[ "$found" -gt 0 ] || { echo "error: no fuzz targets were built" >&2; exit 1; }
echo "fuzz: $found targets ran without a crash"
