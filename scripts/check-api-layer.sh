#!/usr/bin/env bash
# Nothing below the API layer calls the JSON-RPC dispatcher in-process
# (api_call_method_json, api_call_method_as): a module calls the typed C
# functions of the object it changes, so that validation, transactions and
# publication take one path (docs/architecture.md, "Layers"). Exits 1
# naming each caller outside src/api/.
set -euo pipefail
cd "$(dirname "$0")/.."
callers=$(grep -rlE --include='*.c' 'api_call_method_(json|as)\(' src | grep -v '^src/api/' | sort || true)
rc=0
for f in $callers; do
    echo "check-api-layer: $f calls the JSON-RPC dispatcher outside src/api/:" >&2
    grep -nE 'api_call_method_(json|as)\(' "$f" | sed 's/^/  /' >&2
    rc=1
done
[ "$rc" = 0 ] && echo "api layer: no in-process JSON-RPC caller below the API (see docs/architecture.md)"
exit "$rc"
