#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# The iscsi.* configuration API on a real daemon (blockctl call), checked
# with real initiators: a created target is discoverable at once (iscsi-ls),
# its LUN answers INQUIRY with the extent's serial (iscsi-inq), initiator
# groups limit SendTargets, a deleted target is gone at once, deleting a
# target with a logged-in session is refused (EBUSY) unless forced, and the
# configuration survives a restart; defer + service.reload; portals without
# --iscsi-listen follow listen_port.
. "$(dirname "$0")/lib.sh"
need python3 iscsi-ls iscsi-inq qemu-io timeout sqlite3

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

# expect_error METHOD PARAMS TEXT: the call must fail (exit 1) mentioning TEXT.
expect_error() {
    local out rc=0
    out=$(blockctl call "$1" "$2" 2>&1) || rc=$?
    [ "$rc" = 1 ] || fail "$1 $2: exit $rc, wanted 1 (output: $out)"
    case "$out" in
    *"$3"*) ;;
    *) fail "$1 $2: error does not mention '$3': $out" ;;
    esac
}

BASE=iqn.2026-11.org.blockd
INI_OK=iqn.2026-01.test:allowed
INI_OTHER=iqn.2026-01.test:other

# discover INITIATOR: the target names SendTargets returns to that initiator.
discover() {
    timeout 20 iscsi-ls -i "$1" "iscsi://127.0.0.1:$ISCSI_PORT" 2>&1 | sed -n 's/^Target:\([^ ]*\).*/\1/p'
}

blockd_start

blockctl call pool.dataset.create '{"name":"demo/v1","type":"VOLUME","volsize":16777216}' >/dev/null
blockctl call pool.dataset.create '{"name":"demo/v2","type":"VOLUME","volsize":16777216}' >/dev/null

# ---- validation, with field names (TrueNAS shapes) ----
expect_error iscsi.target.create '{"name":"Bad Name"}' "iscsi.target.create.name"
expect_error iscsi.target.create '{"name":"t","bogus":1}' \
    "iscsi.target.create.bogus: Extra inputs are not permitted"
expect_error iscsi.target.create '{"name":5}' "iscsi.target.create.name: Input should be a valid string"
expect_error iscsi.auth.create '{"tag":1,"user":"u","secret":"short"}' "iscsi.auth.create.secret"
expect_error iscsi.extent.create '{"name":"e","disk":"zvol/demo/missing"}' "iscsi.extent.create.disk"
expect_error iscsi.portal.create '{"listen":[{"ip":"not-an-ip"}]}' "iscsi.portal.create.listen.0.ip"

# ---- objects ----
portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
all=$(jget "$(blockctl call iscsi.initiator.create '{"comment":"everyone"}')" 'j["id"]')
only=$(jget "$(blockctl call iscsi.initiator.create "{\"initiators\":[\"$INI_OK\"]}")" 'j["id"]')

out=$(blockctl call iscsi.target.create \
    "{\"name\":\"it-one\",\"alias\":\"one\",\"groups\":[{\"portal\":$portal,\"initiator\":$all}]}")
t1=$(jget "$out" 'j["id"]')
[ "$(jget "$out" 'j["rel_tgt_id"]')" -ge 1 ] || fail "no rel_tgt_id: $out"
expect_error iscsi.target.create '{"name":"it-one"}' "Target name already exists"

# discoverable as soon as the call returns
discover "$INI_OTHER" | grep -qx "$BASE:it-one" || fail "new target not discoverable: $(discover "$INI_OTHER")"

out=$(blockctl call iscsi.extent.create '{"name":"e1","disk":"zvol/demo/v1","serial":"BLOCKDSER1"}')
e1=$(jget "$out" 'j["id"]')
[ "$(jget "$out" 'j["naa"][:15]')" = 0x6589cfc000000 ] || fail "naa: $out"
out=$(blockctl call iscsi.targetextent.create "{\"target\":$t1,\"extent\":$e1}")
[ "$(jget "$out" 'j["lunid"]')" = 0 ] || fail "first LUN is not 0: $out"
expect_error iscsi.targetextent.create "{\"target\":$t1,\"extent\":$e1}" "Extent is already in use."
# the volume behind an extent cannot be deleted (without recursive/force)
expect_error pool.dataset.delete '["demo/v1"]' "demo/v1 is used by iSCSI extent e1"
e2=$(jget "$(blockctl call iscsi.extent.create '{"name":"e2","disk":"zvol/demo/v2"}')" 'j["id"]')
expect_error iscsi.targetextent.create "{\"target\":$t1,\"extent\":$e2,\"lunid\":0}" \
    "LUN ID is already being used for this target."
# the dataset behind an extent cannot be deleted silently
expect_error pool.dataset.delete '"demo/v1"' "e1"

# the LUN is live: INQUIRY VPD 0x80 returns the extent's serial
inq=$(timeout 20 iscsi-inq -i "$INI_OTHER" -e 1 -c 128 "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:it-one/0" 2>&1) ||
    fail "iscsi-inq failed: $inq"
grep -q BLOCKDSER1 <<<"$inq" || fail "VPD 0x80 does not show the serial: $inq"

# ---- initiator groups limit discovery ----
blockctl call iscsi.target.create \
    "{\"name\":\"it-two\",\"groups\":[{\"portal\":$portal,\"initiator\":$only}]}" >/dev/null
discover "$INI_OK" | grep -qx "$BASE:it-two" || fail "allowed initiator does not see it-two"
if discover "$INI_OTHER" | grep -qx "$BASE:it-two"; then
    fail "it-two is visible to an initiator outside its group"
fi

# ---- defer (TrueNAS PR #16614): committed at once, served after service.reload ----
out=$(blockctl call iscsi.target.create \
    "{\"name\":\"it-late\",\"groups\":[{\"portal\":$portal,\"initiator\":$all}],\"defer\":true}")
tl=$(jget "$out" 'j["id"]')
[ "$(jget "$(blockctl call iscsi.target.query '[[["name","=","it-late"]]]')" 'len(j)')" = 1 ] ||
    fail "deferred target not in queries"
if discover "$INI_OTHER" | grep -qx "$BASE:it-late"; then
    fail "deferred target served before service.reload"
fi
blockctl call service.reload '["iscsitarget", {}]' >/dev/null
discover "$INI_OTHER" | grep -qx "$BASE:it-late" || fail "deferred target not served after reload"
blockctl call iscsi.target.delete "[$tl, false, false, true]" >/dev/null
discover "$INI_OTHER" | grep -qx "$BASE:it-late" || fail "deferred delete stopped serving before reload"
blockctl call service.reload '["iscsitarget", {}]' >/dev/null
if discover "$INI_OTHER" | grep -qx "$BASE:it-late"; then
    fail "deferred delete still served after reload"
fi
expect_error iscsi.target.delete "[$tl, false, false, true, 1]" "Too many arguments"

# ---- secrets: returned as TrueNAS returns them to an admin, stored sealed ----
blockctl call iscsi.auth.create '{"tag":5,"user":"chapuser","secret":"chapsecret123"}' >/dev/null
q=$(blockctl call iscsi.auth.query)
grep -q '"secret": *"chapsecret123"' <<<"$q" ||
    fail "iscsi.auth.query does not return the secret (TrueNAS does)"
dump=$(sqlite3 "$STATE/blockd.db" .dump)
grep -q chapsecret123 <<<"$dump" && fail "the DB holds a CHAP secret in clear"

# ---- delete while logged in: EBUSY unless forced ----
qemu-io -f raw -r -c 'sleep 60000' "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:it-one/0" \
    >"$TMP/qemu-io.log" 2>&1 &
qpid=$!
for i in $(seq 1 50); do
    n=$(jget "$(blockctl call iscsi.global.sessions "[[[\"target\",\"=\",\"$BASE:it-one\"]]]")" 'len(j)')
    [ "$n" -ge 1 ] && break
    sleep 0.1
done
[ "$n" -ge 1 ] || fail "the qemu-io session does not show in iscsi.global.sessions"
expect_error iscsi.target.delete "[$t1]" "Target it-one is in use"
discover "$INI_OTHER" | grep -qx "$BASE:it-one" || fail "a refused delete removed the target"
blockctl call iscsi.target.delete "[$t1, true]" >/dev/null
for i in $(seq 1 50); do
    n=$(jget "$(blockctl call iscsi.global.sessions "[[[\"target\",\"=\",\"$BASE:it-one\"]]]")" 'len(j)')
    [ "$n" = 0 ] && break
    sleep 0.1
done
[ "$n" = 0 ] || fail "forced delete left the session logged in"
kill "$qpid" 2>/dev/null || true
wait "$qpid" 2>/dev/null || true

# gone at once
if discover "$INI_OTHER" | grep -qx "$BASE:it-one"; then
    fail "deleted target still discoverable"
fi
# its mapping went with it, the extent stays (delete_extents=false)
[ "$(jget "$(blockctl call iscsi.targetextent.query "[[[\"extent\",\"=\",$e1]]]")" 'len(j)')" = 0 ] ||
    fail "mapping survived its target"
[ "$(jget "$(blockctl call iscsi.extent.query "[[[\"id\",\"=\",$e1]]]")" 'len(j)')" = 1 ] ||
    fail "extent deleted without delete_extents"

# ---- persistence across a restart ----
t3=$(jget "$(blockctl call iscsi.target.create \
    "{\"name\":\"it-three\",\"groups\":[{\"portal\":$portal,\"initiator\":$all}]}")" 'j["id"]')
blockctl call iscsi.targetextent.create "{\"target\":$t3,\"extent\":$e1,\"lunid\":3}" >/dev/null
# The unfiltered list comes from cached rows written from saved texts
# (api/jsonw): it must follow every update.
te3=$(jget "$(blockctl call iscsi.targetextent.query "[[[\"target\",\"=\",$t3]],{\"get\":true}]")" 'j["id"]')
blockctl call iscsi.targetextent.query '[]' >/dev/null
for lun in 4 9 3; do
    blockctl call iscsi.targetextent.update "[$te3, {\"lunid\": $lun}]" >/dev/null
    got=$(jget "$(blockctl call iscsi.targetextent.query '[]')" "[r['lunid'] for r in j if r['id'] == $te3]")
    [ "$got" = "[$lun]" ] || fail "unfiltered targetextent.query shows $got after lunid $lun"
done
blockd_stop
blockd_start
discover "$INI_OTHER" | grep -qx "$BASE:it-three" || fail "it-three not discoverable after restart"
out=$(blockctl call iscsi.targetextent.query "[[[\"target\",\"=\",$t3]],{\"get\":true}]")
[ "$(jget "$out" 'j["lunid"]')" = 3 ] || fail "mapping lost across restart: $out"
inq=$(timeout 20 iscsi-inq -i "$INI_OTHER" -e 1 -c 128 "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:it-three/3" 2>&1) ||
    fail "LUN 3 not reachable after restart: $inq"
blockctl call iscsi.target.delete "[$t3, false, true]" >/dev/null
[ "$(jget "$(blockctl call iscsi.extent.query "[[[\"id\",\"=\",$e1]]]")" 'len(j)')" = 0 ] ||
    fail "delete_extents left the extent"

# ---- portals: without --iscsi-listen, each portal address listens on
# iscsi.global.listen_port, and a port change moves the listeners at once ----
P1=$(free_port)
P2=$(free_port)
blockctl call iscsi.global.update "{\"listen_port\":$P1}" >/dev/null
blockd_stop
ready_before=$(grep -c "blockd ready" "$BLOCKD_LOG")
"$BLOCKD_BIN" --state-dir "$STATE" --log-level info --nbd-listen "127.0.0.1:$NBD_PORT" \
    >>"$BLOCKD_LOG" 2>&1 &
BLOCKD_PID=$!
for i in $(seq 1 200); do
    [ "$(grep -c "blockd ready" "$BLOCKD_LOG")" -gt "$ready_before" ] && break
    kill -0 "$BLOCKD_PID" 2>/dev/null || fail "blockd exited during start-up"
    sleep 0.05
done
ISCSI_PORT=$P1
discover "$INI_OK" | grep -qx "$BASE:it-two" || fail "portal 127.0.0.1:$P1 does not serve it-two"
blockctl call iscsi.global.update "{\"listen_port\":$P2}" >/dev/null
ISCSI_PORT=$P2
discover "$INI_OK" | grep -qx "$BASE:it-two" || fail "listen_port change did not move the portal"
ISCSI_PORT=$P1
if discover "$INI_OK" | grep -q "$BASE"; then
    fail "the old listen_port still answers"
fi

blockd_stop
pass
