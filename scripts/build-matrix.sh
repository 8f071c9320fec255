#!/usr/bin/env bash
# Compile the tree in several buildtype x sanitizer combinations with
# warnings as errors, so that a compiler's warning at one optimisation level
# (format-truncation at -O3, maybe-uninitialized, format-overflow with the
# sanitizers' instrumentation) is found here rather than by a packager.
#   scripts/build-matrix.sh          the combinations make check builds
#   scripts/build-matrix.sh full     every buildtype x sanitizer combination
# Build directories go to a temporary directory removed on exit.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/blockd-matrix.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

if [ "${1:-}" = full ]; then
    combos=()
    for bt in plain debug debugoptimized release minsize; do
        for san in none address undefined address,undefined; do combos+=("$bt:$san"); done
    done
    combos+=("debian:none")
else
    # -O3 alone, the sanitizers at -O3 (where gcc's flow analysis differs
    # most from the -O0 ASan and -O2 builds make check runs itself), and
    # Debian's hardening flags as dpkg-buildpackage passes them. The
    # sanitizers at -O2 are left to "full" (make build-matrix), to keep make
    # check under 20 minutes.
    combos=(release:none release:address,undefined debian:none)
fi

failed=()
for c in "${combos[@]}"; do
    bt=${c%%:*} san=${c#*:} dir=$tmp/${bt}-${san/,/-}
    args=(-Dwerror=true -Db_lundef=false)
    [ "$san" = none ] || args+=(-Db_sanitize="$san")
    # make check's sanitizer combinations compile what ships (daemon, CLI and
    # their libraries); the unit tests and bench clients are compiled by the
    # plain combinations and by make check's own two builds. "full" compiles
    # everything everywhere.
    [ "${1:-}" = full ] || [ "$san" = none ] || args+=(-Dtests=false -Dbench=false)
    if [ "$bt" = debian ]; then
        command -v dpkg-buildflags >/dev/null || { echo "dpkg-buildflags missing (dpkg-dev)"; exit 1; }
        env CFLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
            LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
            meson setup "$dir" --buildtype=plain "${args[@]}" >"$dir.log" 2>&1
    else
        meson setup "$dir" --buildtype="$bt" "${args[@]}" >"$dir.log" 2>&1
    fi || { failed+=("$c (setup)"); cat "$dir.log"; continue; }
    if ninja -C "$dir" >>"$dir.log" 2>&1; then
        echo "ok   $c"
    else
        failed+=("$c"); echo "FAIL $c"; grep -E 'error|warning' "$dir.log" | head -20
    fi
    rm -rf "$dir"
done
[ ${#failed[@]} = 0 ] || { echo "build matrix: failed: ${failed[*]}"; exit 1; }
echo "build matrix: ${#combos[@]} combinations compiled"
