#!/usr/bin/env bash
# Fail if any tracked C file is not clang-format clean (make format fixes it).
set -u
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "error: clang-format is required" >&2; exit 1; }
bad=$(git ls-files '*.c' '*.h' | while read -r f; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"
done)
if [ -n "$bad" ]; then
    echo "not clang-format clean (run 'make format'):"
    echo "$bad" | sed 's/^/  /'
    exit 1
fi
echo "format: $(git ls-files '*.c' '*.h' | wc -l) files clang-format clean"
