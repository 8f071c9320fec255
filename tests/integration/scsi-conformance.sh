#!/bin/bash
# The body of the SCSI conformance test, shared by t-scsi-conformance.sh
# (a file pool) and t-rbd-conformance.sh (an RBD pool). Sourced after lib.sh
# with a running daemon; CONF_POOL names the pool the LUNs' volumes go in.
: "${CONF_POOL:?CONF_POOL must name the pool}"
need iscsi-test-cu python3 timeout

EXPECTED=$(cd "$(dirname "$0")" && pwd)/scsi-conformance.expected
[ -f "$EXPECTED" ] || fail "missing $EXPECTED"
INI1=iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test
INI2=iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test-2

blockctl call pool.dataset.create "{\"name\":\"$CONF_POOL/conf\",\"type\":\"VOLUME\",\"volsize\":67108864}" >/dev/null
portal=$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
group=$(blockctl call iscsi.initiator.create '{"comment":"conformance"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
target=$(blockctl call iscsi.target.create \
    "{\"name\":\"conformance\",\"groups\":[{\"portal\":$portal,\"initiator\":$group}]}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
extent=$(blockctl call iscsi.extent.create \
    "{\"name\":\"conf\",\"disk\":\"zvol/$CONF_POOL/conf\",\"blocksize\":512,\"pblocksize\":true}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
blockctl call iscsi.targetextent.create "{\"target\":$target,\"extent\":$extent,\"lunid\":0}" >/dev/null

URL="iscsi://127.0.0.1:$ISCSI_PORT/iqn.2026-11.org.blockd:conformance/0"
OUT=$TMP/iscsi-test-cu.txt
rc=0
# Line-buffered, so that on a timeout the output names the test that hung.
timeout 1200 stdbuf -oL -eL iscsi-test-cu --dataloss --allow-sanitize -i "$INI1" -I "$INI2" -t ALL \
    "$URL" "$URL" >"$OUT" 2>&1 || rc=$?
[ "$rc" != 124 ] || fail "iscsi-test-cu timed out (output in $OUT): $(grep -a "Test:\|Suite:" "$OUT" | tail -3)
$(blockd_threads)"
[ "$rc" = 0 ] || fail "iscsi-test-cu exited with $rc (output in $OUT): $(tail -5 "$OUT")"
blockd_alive || fail "blockd died during the conformance run"

python3 "$(dirname "$0")/cu-classify.py" "$OUT" "$EXPECTED" >"$TMP/summary.txt" || fail "conformance results differ from the expected list (output kept in $OUT): $(cat "$TMP/summary.txt")"
cat "$TMP/summary.txt"

# Supplementary runs for what the ALL run's LUN cannot exercise: a LUN that
# reports its physical block size (LOGICAL BLOCKS PER PHYSICAL BLOCK > 1) and
# a read-only LUN. Every test here must really pass.
supplementary() { # LUN TESTS...
    local lun=$1 tests
    shift
    tests=$(IFS=,; echo "$*")
    local out=$TMP/supp-$lun.txt rc=0
    timeout 300 iscsi-test-cu --dataloss -i "$INI1" -I "$INI2" -t "$tests" \
        "${URL%/0}/$lun" "${URL%/0}/$lun" >"$out" 2>&1 || rc=$?
    [ "$rc" = 0 ] || fail "iscsi-test-cu on LUN $lun exited with $rc: $(tail -5 "$out")"
    local ran passed
    ran=$(grep -c '^  Test: ' "$out" || true)
    passed=$(grep -E '^  Test: .*\.\.\.passed$' "$out" | grep -vc SKIPPED || true)
    [ "$ran" = "$#" ] && [ "$passed" = "$#" ] ||
        fail "LUN $lun: $passed of $# tests really passed: $(grep -E '^  Test:|FAILED|SKIPPED' "$out")"
    echo "supplementary LUN $lun: $passed really passed"
}
blockctl call pool.dataset.create "{\"name\":\"$CONF_POOL/pblock\",\"type\":\"VOLUME\",\"volsize\":67108864}" >/dev/null
blockctl call pool.dataset.create "{\"name\":\"$CONF_POOL/ro\",\"type\":\"VOLUME\",\"volsize\":67108864}" >/dev/null
e2=$(blockctl call iscsi.extent.create "{\"name\":\"pblock\",\"disk\":\"zvol/$CONF_POOL/pblock\",\"blocksize\":512}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
e3=$(blockctl call iscsi.extent.create "{\"name\":\"ro\",\"disk\":\"zvol/$CONF_POOL/ro\",\"blocksize\":512,\"ro\":true}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
blockctl call iscsi.targetextent.create "{\"target\":$target,\"extent\":$e2,\"lunid\":1}" >/dev/null
blockctl call iscsi.targetextent.create "{\"target\":$target,\"extent\":$e3,\"lunid\":2}" >/dev/null
supplementary 1 ALL.CompareAndWrite.InvalidDataOutSize ALL.WriteSame10.InvalidDataOutSize \
    ALL.WriteSame10.UnmapUnaligned ALL.WriteSame16.InvalidDataOutSize ALL.WriteSame16.UnmapUnaligned
supplementary 2 ALL.ReadOnly.ReadOnlySBC

# An extent with insecure_tpc=false reports EXTENDED COPY / RECEIVE COPY
# RESULTS unsupported, so the suite skips them (and nothing is copied).
blockctl call pool.dataset.create "{\"name\":\"$CONF_POOL/notpc\",\"type\":\"VOLUME\",\"volsize\":67108864}" >/dev/null
e4=$(blockctl call iscsi.extent.create \
    "{\"name\":\"notpc\",\"disk\":\"zvol/$CONF_POOL/notpc\",\"blocksize\":512,\"insecure_tpc\":false}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
blockctl call iscsi.targetextent.create "{\"target\":$target,\"extent\":$e4,\"lunid\":3}" >/dev/null
out=$TMP/supp-3.txt
rc=0
timeout 120 iscsi-test-cu --dataloss -i "$INI1" -I "$INI2" \
    -t ALL.ExtendedCopy.Simple,ALL.ReceiveCopyResults.OpParams "${URL%/0}/3" >"$out" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "iscsi-test-cu on LUN 3 exited with $rc: $(tail -5 "$out")"
skips=$(grep -c 'SKIPPED.*not implemented' "$out" || true)
[ "$skips" -ge 2 ] && ! grep -q FAILED "$out" ||
    fail "LUN 3 (insecure_tpc=false): EXTENDED COPY / RECEIVE COPY RESULTS not reported unsupported: $(grep -E '^  Test:|FAILED|SKIPPED' "$out")"
echo "supplementary LUN 3 (insecure_tpc=false): third-party copy reported unsupported"
blockd_stop
pass "$(head -1 "$TMP/summary.txt")"
