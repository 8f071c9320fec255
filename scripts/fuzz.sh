#!/usr/bin/env bash
# Build every libFuzzer target in fuzz/ with clang (the libraries under test
# instrumented too) and run each for a bounded time from its seed corpus.
#   scripts/fuzz.sh            each target FUZZ_SECONDS (default 60), two at a
#                              time; new inputs go to a scratch directory
#   scripts/fuzz.sh long       each target FUZZ_SECONDS (default 3600); the
#                              inputs that add coverage are merged into
#                              fuzz/corpus/<target> (commit them)
#   scripts/fuzz.sh build      only build the targets (make check builds
#                              them while the tests run, and fuzzes later)
# A crash fails the run; the input that crashed is saved as
# build-fuzz/crash-<target>-* and the fuzzer's output is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-short}
if [ "$mode" = long ]; then SECONDS_EACH=${FUZZ_SECONDS:-3600}; else SECONDS_EACH=${FUZZ_SECONDS:-60}; fi
JOBS=${FUZZ_JOBS:-2}
command -v clang >/dev/null || { echo "error: clang is required for make fuzz" >&2; exit 1; }
if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang meson setup build-fuzz -Dfuzz=true --buildtype=debug -Dwerror=true \
        -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
targets=$(sed -n "s/^executable('\(fuzz_[a-z_]*\)'.*/\1/p; s/^foreach f : \[\(.*\)\]/\1/p" fuzz/meson.build |
          tr -d "',[]" | tr ' ' '\n' | grep '^fuzz_' | sort -u)
[ -n "$targets" ] || { echo "error: no fuzz targets in fuzz/meson.build" >&2; exit 1; }
# Only what the fuzzers need (the unit tests and the daemon are not rebuilt).
ninja -C build-fuzz $(for t in $targets; do echo "fuzz/$t"; done)
if [ "$mode" = build ]; then
    echo "fuzz: $(echo $targets | wc -w) targets built"
    exit 0
fi

out=$(mktemp -d /tmp/blockd-fuzz.XXXXXX)
run_one() {
    local name=$1 f=build-fuzz/fuzz/$1 corpus=fuzz/corpus/$1
    mkdir -p "$corpus" "$out/$name.new"
    local wrap=()
    if [ "$name" = fuzz_api ]; then
        # Its methods create files: a read-only host with a writable state dir.
        mkdir -p "$out/$name.state"
        export FUZZ_STATE=$out/$name.state
        wrap=(scripts/fuzz-sandbox.sh "$out" build-fuzz "$corpus" --)
    fi
    # Sanitizer reports abort the run; UBSan's too.
    if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
        "${wrap[@]}" "$f" -max_total_time="$SECONDS_EACH" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="build-fuzz/crash-$name-" "$out/$name.new" "$corpus" >"$out/$name.log" 2>&1; then
        tail -n 60 "$out/$name.log"
        echo "fuzz: $name FAILED (input saved as build-fuzz/crash-$name-*)"
        return 1
    fi
    local runs new cov
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$name.log")
    new=$(sed -n 's/^stat::new_units_added: *//p' "$out/$name.log")
    cov=$(grep -o 'cov: [0-9]*' "$out/$name.log" | tail -n 1)
    echo "ok   $name: ${SECONDS_EACH}s, $runs runs, $cov, $new new inputs"
    if [ "$mode" = long ]; then
        "$f" -merge=1 "$corpus" "$out/$name.new" >"$out/$name.merge.log" 2>&1 ||
            { tail -n 20 "$out/$name.merge.log"; return 1; }
    fi
}
export -f run_one
export out mode SECONDS_EACH
if ! printf '%s\n' $targets | xargs -P "$JOBS" -I{} bash -c 'run_one {}'; then
    echo "fuzz: a target crashed (logs in $out)" >&2
    exit 1
fi
rm -rf "$out"
echo "fuzz: $(echo $targets | wc -w) targets ran ${SECONDS_EACH}s each without a crash"
