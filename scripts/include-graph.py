#!/usr/bin/env python3
"""Print the folder-level include graph of src/ and check the layout rules.

A folder is a top-level directory of src/ (src/iscsi/config/ belongs to
iscsi): the unit the build links as one library. For each folder it prints
the folders it includes headers from, with the number of #include "..."
lines. It exits non-zero, naming each offence, when:
  - the graph has a cycle (a folder reaches itself through its includes);
  - a header declares functions that are defined in another folder (a
    header is implemented where it lives);
  - a private header (named *_internal.h, or saying "private to" in its
    opening comment) is included from outside its own directory.

Usage: scripts/include-graph.py [SRC_DIR]   (default: src next to this script)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# A non-static function definition: return type and name at column 0, the
# parameter list, then the body's brace (clang-format puts it on the next line).
DEFINITION = re.compile(r'^(?!static\b|typedef\b|extern\b)[A-Za-z_][\w \t*]*?\b(\w+)\(([^;{}]*?)\)\s*\{', re.M)
# A prototype in a header: the same shape ending in ';'.
PROTOTYPE = re.compile(r'^(?!static\b|typedef\b|#)[A-Za-z_][\w \t*]*?\b(\w+)\(([^;{}]*?)\)[^;{}()]*;', re.M)
COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*', re.S)


def folder(rel):
    """The top-level folder of a path relative to src/ ('.' for src/ itself)."""
    parts = rel.split(os.sep)
    return parts[0] if len(parts) > 1 else "."


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def sources(src):
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(root, name), src)


def resolve(src, rel, inc):
    """The included header relative to src/: next to the includer first, then from src/."""
    here = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
    if os.path.exists(os.path.join(src, here)):
        return here
    if os.path.exists(os.path.join(src, inc)):
        return os.path.normpath(inc)
    return None  # generated or outside src/: not part of the graph


def is_private(text, rel):
    head = text[:1200]
    return rel.endswith("_internal.h") or "private to" in head.lower()


def find_cycles(graph):
    """Strongly connected components with more than one folder (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "src")
    files = list(sources(src))
    texts = {rel: read(os.path.join(src, rel)) for rel in files}
    graph, lines, problems = {}, {}, []

    for rel, text in texts.items():
        for inc in INCLUDE.findall(text):
            target = resolve(src, rel, inc)
            if target is None:
                continue
            a, b = folder(rel), folder(target)
            if a != b:
                graph.setdefault(a, {}).setdefault(b, 0)
                graph[a][b] += 1
                lines.setdefault((a, b), []).append("%s -> %s" % (rel, target))
            if target.endswith(".h") and is_private(texts.get(target, ""), target):
                home = os.path.dirname(target)
                if os.path.dirname(rel) != home and not rel.startswith(home + os.sep):
                    problems.append("private header %s included from %s" % (target, rel))

    defined = {}
    for rel, text in texts.items():
        if rel.endswith(".c"):
            for name, _ in DEFINITION.findall(COMMENT.sub("", text)):
                defined.setdefault(name, set()).add(folder(rel))
    for rel, text in texts.items():
        if not rel.endswith(".h"):
            continue
        home = folder(rel)
        for name, _ in PROTOTYPE.findall(COMMENT.sub("", text)):
            where = defined.get(name, set())
            if where and home not in where:
                problems.append("%s declares %s(), defined in %s/" % (rel, name, ", ".join(sorted(where))))

    print("folder include graph of src/ (folder -> folders it includes from: #include lines)")
    for a in sorted(set(folder(r) for r in files)):
        deps = graph.get(a, {})
        print("  %-8s -> %s" % (a, ", ".join("%s (%d)" % (b, deps[b]) for b in sorted(deps)) or "-"))
    for comp in find_cycles(graph):
        problems.append("include cycle between folders: %s" % " <-> ".join(comp))
        for a in comp:
            for b in comp:
                for line in lines.get((a, b), [])[:5]:
                    problems.append("    %s" % line)
    if problems:
        print("\n%d problem(s):" % sum(1 for p in problems if not p.startswith("    ")))
        for p in problems:
            print("  " + p)
        return 1
    print("no cycle, no header implemented in another folder, no private header used outside")
    return 0


if __name__ == "__main__":
    sys.exit(main())
