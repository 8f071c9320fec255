#!/usr/bin/env python3
"""Classify an iscsi-test-cu run against the expected list.

usage: cu-classify.py OUTPUT EXPECTED

iscsi-test-cu prints "[SKIPPED]" and then "passed" for a skipped test, so
each test is classified as passed / skipped / failed and compared with
EXPECTED (tests/integration/scsi-conformance.expected): a failed test, a
test expected "passed" that is skipped (a regression) or a test that did
not run makes the exit status 1; a test expected "skipped" that now passes
is reported. The first line printed is the summary. Shared by
scsi-conformance.sh (t-scsi-conformance, t-rbd-conformance) and
t-gw-conformance.
"""
import re, sys
out, expected_path = sys.argv[1], sys.argv[2]
results, suite, cur = {}, None, None
for line in open(out, errors="replace"):
    m = re.match(r"Suite: (\S+)", line)
    if m:
        suite, cur = m.group(1), None
        continue
    m = re.match(r"\s+Test: (\S+) \.\.\.", line)
    if m:
        cur = suite + "." + m.group(1)
        results[cur] = "unknown"
    if cur is None:
        continue
    s = line.rstrip()
    if re.search(r"(^|\.\.\.)\s*FAILED$", s.strip()):
        results[cur] = "failed"
    elif results[cur] != "failed":
        if "[SKIPPED]" in s:
            results[cur] = "skipped"
        # "passed" ends a test's output, possibly followed on the same line
        # by log output of the next test
        if re.search(r"(^|\.\.\.)\s*passed\b", s.strip()) and results[cur] == "unknown":
            results[cur] = "passed"
expected = {}
for line in open(expected_path):
    line = line.split("#", 1)[0].strip()
    if line:
        name, status = line.split()
        expected[name] = status
counts = {k: sum(1 for v in results.values() if v == k) for k in ("passed", "skipped", "failed", "unknown")}
print("iscsi-test-cu: %d tests: %d really passed, %d skipped, %d failed%s" % (
    len(results), counts["passed"], counts["skipped"], counts["failed"],
    ", %d unclassified" % counts["unknown"] if counts["unknown"] else ""))
bad = False
for name, status in sorted(results.items()):
    want = expected.get(name)
    if status in ("failed", "unknown"):
        print("  FAILED:", name)
        bad = True
    elif want == "passed" and status != "passed":
        print("  REGRESSION: %s is %s, expected passed" % (name, status))
        bad = True
    elif want is None:
        print("  NEW TEST: %s %s (add it to the expected list)" % (name, status))
    elif want == "skipped" and status == "passed":
        print("  IMPROVED: %s now passes (update the expected list)" % name)
for name in sorted(set(expected) - set(results)):
    print("  MISSING: %s did not run" % name)
    bad = True
sys.exit(1 if bad else 0)
