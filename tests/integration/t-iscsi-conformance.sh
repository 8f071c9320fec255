#!/bin/bash
# libiscsi's conformance suite (iscsi-test-cu) against a blockd LUN: the
# whole ALL family with --dataloss, the LUN URL given twice (multipath
# tests) and a second initiator name (-I) for the multi-initiator tests.
# Each test's outcome is compared with tests/integration/iscsi-test-cu.expected
# (one "Suite.Test passed|skipped|failed" per line); a test that did better
# before is a regression and fails this script. [SKIPPED] tests (which
# iscsi-test-cu also prints as "passed") are counted apart.
# UPDATE_EXPECTED=1 rewrites the expected list from this run.
. "$(dirname "$0")/lib.sh"
need python3 iscsi-test-cu timeout

EXPECTED=$(cd "$(dirname "$0")" && pwd)/iscsi-test-cu.expected
BASE=iqn.2026-11.org.blockd

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

blockd_start
blockctl call pool.dataset.create '{"name":"demo/cu","type":"VOLUME","volsize":134217728}' >/dev/null
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"cu\",\"groups\":[{\"portal\":$portal}]}")" 'j["id"]')
e=$(jget "$(blockctl call iscsi.extent.create '{"name":"cu","disk":"zvol/demo/cu"}')" 'j["id"]')
blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null

URL="iscsi://127.0.0.1:$ISCSI_PORT/$BASE:cu/0"
# Verbose mode (the default) prints [SKIPPED] lines; the suite takes a
# minute or two, the timeout-based iSCSI tests included.
timeout 900 iscsi-test-cu --dataloss \
    -i iqn.2026-11.org.blockd.test:init1 -I iqn.2026-11.org.blockd.test:init2 \
    -t ALL "$URL" "$URL" >"$TMP/cu.log" 2>&1 || true
blockd_alive || fail "blockd died during iscsi-test-cu (see $TMP/cu.log)"

python3 - "$TMP/cu.log" "$EXPECTED" "${UPDATE_EXPECTED:-0}" <<'PY' || fail "iscsi-test-cu regressed (log: $TMP/cu.log)"
import re, sys
log, expected_path, update = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
results, suite, test, skipped = {}, None, None, False
for line in open(log, errors="replace"):
    m = re.match(r"^Suite: (\S+)", line)
    if m:
        suite = m.group(1)
        continue
    m = re.match(r"^\s+Test: (\S+) \.\.\.", line)
    if m:
        test, skipped = f"{suite}.{m.group(1)}", False
    if test is None:
        continue
    if "[SKIPPED]" in line:
        skipped = True
    end = line.rstrip()
    if end.endswith("passed") or end.endswith("FAILED"):
        results[test] = "failed" if end.endswith("FAILED") else ("skipped" if skipped else "passed")
        test = None
counts = {k: sum(1 for v in results.values() if v == k) for k in ("passed", "skipped", "failed")}
print(f"iscsi-test-cu: {len(results)} tests: {counts['passed']} passed, "
      f"{counts['failed']} failed, {counts['skipped']} skipped")
for name, r in sorted(results.items()):
    if r == "failed":
        print(f"  failed: {name}")
if update:
    with open(expected_path, "w") as f:
        f.write("# iscsi-test-cu -t ALL --dataloss against blockd: expected outcome per test.\n")
        f.write("# Regenerate with UPDATE_EXPECTED=1 bash tests/integration/t-iscsi-conformance.sh\n")
        for name, r in sorted(results.items()):
            f.write(f"{name} {r}\n")
    print(f"wrote {expected_path}")
    sys.exit(0)
rank = {"passed": 2, "skipped": 1, "failed": 0}
expected = {}
for line in open(expected_path):
    line = line.strip()
    if line and not line.startswith("#"):
        name, r = line.split()
        expected[name] = r
bad = 0
for name, want in sorted(expected.items()):
    got = results.get(name, "missing")
    if got == "missing" or rank[got] < rank[want]:
        print(f"  REGRESSION: {name}: expected {want}, got {got}")
        bad += 1
    elif rank[got] > rank[want]:
        print(f"  improved: {name}: {want} -> {got} (update the expected list)")
if len(results) < len(expected) * 0.9:
    print("  the suite did not run to the end")
    bad += 1
sys.exit(1 if bad else 0)
PY
cp "$TMP/cu.log" /tmp/blockd-last-cu.log 2>/dev/null || true
blockd_stop
pass
