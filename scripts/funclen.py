#!/usr/bin/env python3
"""List C functions longer than N lines (the project keeps every function under 80).

Usage: scripts/funclen.py [-n 80] [--all] DIR_OR_FILE...

A function is a top-level brace block whose opening brace follows a ")"
(after comments, strings and character literals are blanked out), so
struct/enum/array initialisers are not counted. Its length is counted from
the line with its name to the line of its closing brace, both included
(what an editor shows). Output: "LINES  FILE:LINE  NAME", longest first.
Exit status 0 always: this is a report, not a gate.
"""
import argparse
import os
import re
import sys


def blank_comments_and_strings(text):
    """Replace comments, string and char literals with spaces, keeping newlines,
    so braces inside them do not count and line numbers stay right."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
        elif c == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                # a backslash escapes the next character, newline included
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1 : j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def blank_preprocessor(text):
    """Blank preprocessor lines (with continuations): a macro body's braces
    are not a function."""
    lines = text.split("\n")
    cont = False
    for k, line in enumerate(lines):
        if cont or line.lstrip().startswith("#"):
            cont = line.endswith("\\")
            lines[k] = ""
    return "\n".join(lines)


NAME_RE = re.compile(r"([A-Za-z_]\w*)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)\s*$", re.S)


def functions(path):
    """Yield (name, first_line, last_line) for each function definition in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = blank_preprocessor(blank_comments_and_strings(f.read()))
    depth = 0
    stmt_start = 0  # offset where the current top-level declaration began
    open_at = None
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                open_at = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and open_at is not None:
                head = text[stmt_start:open_at].rstrip()
                m = NAME_RE.search(head)
                if m and head.endswith(")"):
                    name_off = stmt_start + m.start(1)
                    first = text.count("\n", 0, name_off) + 1
                    last = text.count("\n", 0, i) + 1
                    yield m.group(1), first, last
                open_at = None
                stmt_start = i + 1
            depth = max(depth, 0)
        elif c == ";" and depth == 0:
            stmt_start = i + 1


def c_files(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for d, _, files in os.walk(root):
            for fn in sorted(files):
                if fn.endswith(".c"):
                    yield os.path.join(d, fn)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=80, help="report functions longer than N lines")
    ap.add_argument("--check", action="store_true", help="exit 1 if any function is longer (make check)")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    rows = []
    for path in c_files(args.paths):
        for name, first, last in functions(path):
            length = last - first + 1
            if length > args.n:
                rows.append((length, path, first, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for length, path, first, name in rows:
        print(f"{length:5d}  {path}:{first}  {name}")
    print(f"{len(rows)} function(s) over {args.n} lines", file=sys.stderr)
    return 1 if args.check and rows else 0


if __name__ == "__main__":
    sys.exit(main())
