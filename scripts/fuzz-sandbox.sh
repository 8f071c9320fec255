#!/usr/bin/env bash
# Run a command in a private mount namespace where / is read-only except the
# directories named before "--" (bind-mounted read-write onto themselves).
# For fuzz targets whose code under test creates files (fuzz_api: pools,
# volumes, sockets): whatever the fuzzer asks for, the host stays untouched.
#   scripts/fuzz-sandbox.sh DIR... -- COMMAND [ARGS...]
# Needs root (or CAP_SYS_ADMIN) and util-linux's unshare; fails loudly without.
set -eu
dirs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do dirs+=("$(realpath "$1")"); shift; done
[ "${1:-}" = -- ] || { echo "usage: $0 DIR... -- COMMAND [ARGS...]" >&2; exit 2; }
shift
command -v unshare >/dev/null || { echo "error: unshare (util-linux) is required" >&2; exit 1; }
exec unshare --mount --propagation private bash -c '
    set -e
    n=$1; shift
    for ((i = 0; i < n; i++)); do mount --bind "$1" "$1"; shift; done
    # Only this namespace'"'"'s view of / becomes read-only (a bind remount
    # changes the mount, not the filesystem).
    mount -o remount,bind,ro /
    export FUZZ_API_SANDBOX=1
    exec "$@"' sandbox "${#dirs[@]}" "${dirs[@]}" "$@"
