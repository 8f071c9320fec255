#!/usr/bin/env bash
# Nothing below the API layer calls the JSON-RPC dispatcher in-process
# (api_call_method_json, api_call_method_as): a module calls the typed C functions of the
# object it changes, so that validation, transactions and publication take
# one path (docs/architecture.md, "Layers"). Exits 1 naming each caller
# outside src/api/ that is not in KNOWN.
#
# KNOWN is the remaining work, listed in docs/architecture.md: remove a
# line here when its caller moves to typed functions. A line whose file no
# longer calls the dispatcher fails too, so that the list stays true.
set -euo pipefail
cd "$(dirname "$0")/.."
KNOWN=(
    src/gwsync/gwconfig_rows.c # applies the group's rows through the iscsi.*/nbd.* methods
)
callers=$(grep -rlE --include='*.c' 'api_call_method_(json|as)\(' src | grep -v '^src/api/' | sort || true)
rc=0
for f in $callers; do
    known=0
    for k in "${KNOWN[@]}"; do [ "$f" = "$k" ] && known=1; done
    if [ "$known" = 0 ]; then
        echo "check-api-layer: $f calls api_call_method_json outside src/api/:" >&2
        grep -nE 'api_call_method_(json|as)\(' "$f" | sed 's/^/  /' >&2
        rc=1
    fi
done
for k in "${KNOWN[@]}"; do
    grep -qx "$k" <<<"$callers" || {
        echo "check-api-layer: $k no longer calls api_call_method_json: remove it from KNOWN" >&2
        rc=1
    }
done
[ "$rc" = 0 ] && echo "api layer: no new in-process JSON-RPC callers (known: ${#KNOWN[@]}, see docs/architecture.md)"
exit "$rc"
