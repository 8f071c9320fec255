#!/usr/bin/env bash
# Fail if any tracked C file is not clang-format clean (make format fixes it).
# The files go to clang-format in batches, one batch per CPU (one process
# per file cost make check 39 s); each violation names its file on stderr.
set -u
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "error: clang-format is required" >&2; exit 1; }
files=$(git ls-files '*.c' '*.h')
n=$(echo "$files" | wc -l)
out=$(echo "$files" | xargs -d '\n' -P "$(nproc)" -n 40 clang-format --dry-run --Werror 2>&1)
rc=$?
bad=$(echo "$out" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ -n "$bad" ]; then
    echo "not clang-format clean (run 'make format'):"
    echo "$bad" | sed 's/^/  /'
    exit 1
fi
if [ "$rc" != 0 ]; then
    # clang-format itself failed (a bad .clang-format, an unreadable file).
    echo "$out" | head -n 20
    echo "error: clang-format failed (exit $rc)" >&2
    exit 1
fi
echo "format: $n files clang-format clean"
