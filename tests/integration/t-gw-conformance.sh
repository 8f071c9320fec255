#!/bin/bash
# slow: run.sh starts it first (iscsi-test-cu ALL through two members)
# SCSI conformance through a gateway group (docs/ha.md): members
# A (127.0.0.2, --gateway-id 1) and B (127.0.0.3, id 2) serve one RBD
# volume as the same target and LUN (A creates the image, B adopts it), and
# libiscsi's iscsi-test-cu runs ALL with one URL through each member: its
# multipath tests (MultipathIO.*: I/O, COMPARE AND WRITE and LU reset
# across paths) and the second-initiator tests get member B's path. 0
# failures, and the same expected list as t-scsi-conformance and
# t-rbd-conformance (tests/integration/scsi-conformance.expected: every
# skip there is an optional feature blockd reports unsupported, with the
# reason in that file's header); the LU is set up as there (512-byte
# blocks, physical block size hidden).
# Then what ALL does not cross members with:
#   - software write protect is the LU's: MODE SELECT SWP=1 through A makes
#     a write through B fail with DATA PROTECT 27/02, an I_T nexus on B gets
#     MODE PARAMETERS CHANGED (2A/01), SWP=0 through B lets A write again;
#   - deleting the dataset (and a snapshot that had an LU) removes the
#     reservation objects blockd.pr.<image id>[@snap] from the pool.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
# No member is meant to be fenced here (a loaded machine must not fence one).
GW_HEARTBEAT_TIMEOUT=30
need iscsi-test-cu python3 timeout rbd rados
PR_TOOL=$BUILD/tests/tools/pr_tool
[ -x "$PR_TOOL" ] || fail "missing $PR_TOOL (libiscsi-dev not found at build time?)"
EXPECTED=$(cd "$(dirname "$0")" && pwd)/scsi-conformance.expected
INI1=iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test
INI2=iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test-2
IQN=iqn.2026-11.org.blockd:conformance
ceph_start

json_id() { python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'; }

# conf_member NAME ADOPT: the RBD pool, the volume (created or adopted) and
# the same target/extent/LUN as scsi-conformance.sh, through NAME's API.
conf_member() {
    local m=$1 adopt=$2 portal group target extent
    gw_ctl "$m" call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"rbd\",\"conf\":\"$CEPH_CONF\"}}" \
        >/dev/null || fail "pool.create on $m"
    if [ "$adopt" = true ]; then # the share comes from the group's configuration store
        for _ in $(seq 1 200); do
            grep -q "reservations shared through" "$(gw_dir "$m")/blockd.log" && return 0
            sleep 0.05
        done
        fail "$m did not get the share from the group"
    fi
    gw_ctl "$m" call pool.dataset.create \
        "{\"name\":\"ceph/conf\",\"type\":\"VOLUME\",\"volsize\":67108864,\"adopt\":$adopt}" \
        >/dev/null || fail "pool.dataset.create ceph/conf (adopt $adopt) on $m"
    portal=$(gw_ctl "$m" call iscsi.portal.create "{\"listen\":[{\"ip\":\"${GW_ADDR[$m]}\"}]}" | json_id) ||
        fail "portal on $m"
    group=$(gw_ctl "$m" call iscsi.initiator.create '{"comment":"conformance"}' | json_id)
    target=$(gw_ctl "$m" call iscsi.target.create \
        "{\"name\":\"conformance\",\"groups\":[{\"portal\":$portal,\"initiator\":$group}]}" | json_id) ||
        fail "target on $m"
    extent=$(gw_ctl "$m" call iscsi.extent.create \
        '{"name":"conf","disk":"zvol/ceph/conf","blocksize":512,"pblocksize":true}' | json_id) ||
        fail "extent on $m"
    gw_ctl "$m" call iscsi.targetextent.create "{\"target\":$target,\"extent\":$extent,\"lunid\":0}" \
        >/dev/null || fail "LUN 0 on $m"
    grep -q "reservations shared through" "$(gw_dir "$m")/blockd.log" ||
        fail "$m: the LU does not share its state through the cluster"
}

gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
conf_member A false
conf_member B true
URL_A="iscsi://127.0.0.2:${GW_PORT[A]}/$IQN/0"
URL_B="iscsi://127.0.0.3:${GW_PORT[B]}/$IQN/0"
image_id=$(rbd -c "$CEPH_CONF" info rbd/conf --format json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

# ---- iscsi-test-cu ALL, one URL per member
OUT=$TMP/iscsi-test-cu.txt
rc=0
t0=$(date +%s)
timeout 900 iscsi-test-cu --dataloss --allow-sanitize -i "$INI1" -I "$INI2" -t ALL "$URL_A" "$URL_B" \
    >"$OUT" 2>&1 || rc=$?
echo "iscsi-test-cu ALL through A and B: $(($(date +%s) - t0)) s"
[ "$rc" = 0 ] || fail "iscsi-test-cu exited with $rc (output in $OUT): $(tail -5 "$OUT")"
kill -0 "${GW_PID[A]}" && kill -0 "${GW_PID[B]}" || fail "a member died during iscsi-test-cu"
python3 "$(dirname "$0")/cu-classify.py" "$OUT" "$EXPECTED" >"$TMP/summary.txt" ||
    fail "conformance results differ from the expected list (output in $OUT): $(cat "$TMP/summary.txt")"
cat "$TMP/summary.txt"
# The multipath suite really used both members (B's log names the initiator).
grep -q "MultipathIO" "$OUT" || fail "the MultipathIO suite did not run"
grep -qF "session of '$INI2" "$(gw_dir B)/blockd.log" || fail "no session through B during the run"

# ---- software write protect is the LU's, not a member's
pr() { # pr URL INITIATOR ISID OP...
    local url=$1 ini=$2 isid=$3
    shift 3
    PR_TOOL_ISID=$isid timeout 60 "$PR_TOOL" "$url" "iqn.2026-11.org.blockd.test:$ini" "$@" ||
        fail "pr_tool $* failed"
}
expect() { # expect WANT URL INITIATOR ISID OP...: the last output line is WANT
    local want=$1 got
    shift
    got=$(pr "$@" | tail -n 1)
    [ "$got" = "$want" ] || fail "$(printf '%s ' "$@"): got '$got', want '$want'"
}
rm -f "$TMP/s1" "$TMP/s2"
# An I_T nexus on B logged in before the change: it gets 2A/01.
pr "$URL_B" watcher 7 "signal:$TMP/s1" "hold:$TMP/s2" tur write:8 >"$TMP/watcher.out" &
watcher=$!
for _ in $(seq 1 300); do [ -f "$TMP/s1" ] && break; sleep 0.1; done
[ -f "$TMP/s1" ] || fail "the session through B did not log in"
expect GOOD "$URL_A" setter 1 swp:1
expect "CHECK 7/27/02" "$URL_B" writer 2 write:8
expect GOOD "$URL_B" writer 2 read:8
expect "CHECK 7/27/02" "$URL_A" writer 3 write:8
touch "$TMP/s2"
wait "$watcher" || fail "the session through B failed"
[ "$(sed -n 3p "$TMP/watcher.out")" = "CHECK 6/2a/01" ] ||
    fail "B's session did not get MODE PARAMETERS CHANGED: $(cat "$TMP/watcher.out")"
[ "$(sed -n 4p "$TMP/watcher.out")" = "CHECK 7/27/02" ] ||
    fail "B's session could write under SWP: $(cat "$TMP/watcher.out")"
expect GOOD "$URL_B" setter 4 swp:0
expect GOOD "$URL_A" writer 5 write:8
expect GOOD "$URL_B" writer 6 write:8

# ---- the reservation objects go with the dataset and the snapshot (a
# volume of its own: LUNs 1 and 2 of the same target on A)
gw_ctl A call pool.dataset.create '{"name":"ceph/gone","type":"VOLUME","volsize":16777216}' >/dev/null ||
    fail "pool.dataset.create ceph/gone"
gone_id=$(rbd -c "$CEPH_CONF" info rbd/gone --format json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
objs() { rados -c "$CEPH_CONF" -p rbd ls | grep "^blockd\.pr\.$gone_id" | sort | tr '\n' ' '; }
tgt_a=$(gw_ctl A call iscsi.target.query '[[["name","=","conformance"]]]' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
ext=$(gw_ctl A call iscsi.extent.create '{"name":"gone","disk":"zvol/ceph/gone"}' | json_id) ||
    fail "extent on ceph/gone"
gw_ctl A call iscsi.targetextent.create "{\"target\":$tgt_a,\"extent\":$ext,\"lunid\":1}" \
    >/dev/null || fail "LUN 1"
gw_ctl A call zfs.snapshot.create '{"dataset":"ceph/gone","name":"s1"}' >/dev/null ||
    fail "snapshot of ceph/gone"
snap_ext=$(gw_ctl A call iscsi.extent.create '{"name":"snap","disk":"zvol/ceph/gone@s1","ro":true}' |
    json_id) || fail "extent on the snapshot"
gw_ctl A call iscsi.targetextent.create "{\"target\":$tgt_a,\"extent\":$snap_ext,\"lunid\":2}" \
    >/dev/null || fail "LUN 2 on the snapshot"
[ "$(objs)" = "blockd.pr.$gone_id blockd.pr.$gone_id@s1 " ] ||
    fail "reservation objects before the delete: '$(objs)'"
gw_ctl A call iscsi.extent.delete "[$snap_ext,false,true]" >/dev/null || fail "deleting the snapshot's extent"
gw_ctl A call zfs.snapshot.delete '"ceph/gone@s1"' >/dev/null || fail "deleting the snapshot"
[ "$(objs)" = "blockd.pr.$gone_id " ] || fail "the snapshot's reservation object stayed: '$(objs)'"
gw_ctl A call iscsi.extent.delete "[$ext,false,true]" >/dev/null || fail "deleting the extent"
gw_ctl A call pool.dataset.delete '"ceph/gone"' >/dev/null || fail "deleting the dataset"
! rbd -c "$CEPH_CONF" ls | grep -qx gone || fail "the image of ceph/gone was not removed"
[ -z "$(objs)" ] || fail "the reservation object stayed after the dataset delete: '$(objs)'"
gw_stop B
gw_stop A
pass "$(head -1 "$TMP/summary.txt") through two members; SWP shared; reservation objects removed with the dataset"
