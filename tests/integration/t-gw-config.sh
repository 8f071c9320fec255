#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# The gateway group's shared configuration (docs/ha.md "Shared
# configuration"): members A, B, C on 127.0.0.2-4, separate state dirs,
# one throwaway Ceph cluster; each has the RBD pool "ceph" (pools are per
# member).
#   - a share made through A's API the way a TrueNAS driver makes it
#     (iscsi.target.create, iscsi.extent.create, iscsi.targetextent.create,
#     separate calls) is served by B (iscsi-ls and iscsi-inq through B's
#     portal; B adopted the volume); an NBD export made on A is served by B
#     (nbdinfo through B's NBD port);
#   - updates of the target, extent and export made through B reach A;
#   - deleting them through B withdraws them from A;
#   each waited for up to WAIT seconds (60): how soon it happens is a
#   performance figure, measured by bench/gateways.sh ("propagation"), and
#   printed here from the daemons' log timestamps for information;
#   - a member stopped meanwhile (C) catches up when it starts: what was
#     deleted is gone, what was created is served;
#   - the same extent and export name created through A and B at once:
#     exactly one call succeeds, the other fails with EEXIST, and both
#     members end up with the same row;
#   - a share on A's file pool stays A's (not on B, not in the object).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
# No member is meant to be fenced here (a loaded machine must not fence one).
GW_HEARTBEAT_TIMEOUT=30
need python3 iscsi-ls iscsi-inq nbdinfo rados
ceph_start

BASE=iqn.2026-11.org.blockd
declare -A NBD
for m in A B C; do NBD[$m]=$(free_port); done
WAIT=60 # seconds for a member to apply what another wrote (fail only if never)
start() { # start NAME ADDR ID
    gw_start "$1" "$2" "$3" --nbd-listen "$2:${NBD[$1]}"
}
call() { # call MEMBER METHOD [JSON]
    local m=$1
    shift
    gw_ctl "$m" call "$@"
}
jget() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
keys() { rados -c "$CEPH_CONF" -p "$CEPH_POOL" listomapkeys blockd.config.test 2>/dev/null; }
served_iscsi() { # served_iscsi MEMBER TARGET: discoverable and LUN 0 answers INQUIRY
    local m=$1 url="iscsi://${GW_ADDR[$1]}:${GW_PORT[$1]}"
    iscsi-ls "$url" 2>/dev/null | grep -q "^Target:$BASE:$2 " &&
        timeout 10 iscsi-inq "$url/$BASE:$2/0" >/dev/null 2>&1
}
discoverable() { iscsi-ls "iscsi://${GW_ADDR[$1]}:${GW_PORT[$1]}" 2>/dev/null | grep -q "^Target:$BASE:$2 "; }
served_nbd() { nbdinfo --size "nbd://${GW_ADDR[$1]}:${NBD[$1]}/$2" >/dev/null 2>&1; }
# wait_for SECONDS WHAT CMD...: until CMD succeeds; prints the wait in ms.
wait_for() {
    local secs=$1 what=$2 t0
    shift 2
    t0=$(now_ms)
    until "$@"; do
        [ $(($(now_ms) - t0)) -lt $((secs * 1000)) ] || fail "$what: not after $secs s"
        sleep 0.02
    done
    echo $(($(now_ms) - t0))
}
not() { ! "$@"; }
# rawcall MEMBER METHOD PARAMS: the call over the API socket; prints "ok" or
# the error's errno name (EEXIST when a field error says so) and message
# (blockctl prints only the message). A create that loses the race in the
# group's store fails with EEXIST; one that reaches its member after the
# winner's row was applied there fails with the field error "name must be
# unique" (EEXIST), as on a single daemon.
rawcall() { api_raw "$(gw_dir "$1")/state/blockd.sock" "$2" "$3"; }
pool_create() {
    call "$1" pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" \
        >/dev/null || fail "pool.create ceph on $1"
}
volume() { # volume MEMBER NAME
    call "$1" pool.dataset.create "{\"name\":\"ceph/$2\",\"type\":\"VOLUME\",\"volsize\":67108864}" \
        >/dev/null || fail "pool.dataset.create ceph/$2 on $1"
}
id_of() { # id_of MEMBER NS NAME: the id of the row named NAME (query by name, as drivers do)
    call "$1" "$2.query" "[[[\"name\",\"=\",\"$3\"]]]" | jget 'd[0]["id"] if d else ""'
}
# The TrueNAS driver's three calls; the time the last one returned.
truenas_share() { # truenas_share MEMBER NAME
    local t e
    t=$(call "$1" iscsi.target.create "{\"name\":\"$2\",\"groups\":[]}" | jget 'd["id"]') ||
        fail "iscsi.target.create $2 on $1"
    e=$(call "$1" iscsi.extent.create "{\"name\":\"$2\",\"disk\":\"zvol/ceph/$2\"}" | jget 'd["id"]') ||
        fail "iscsi.extent.create $2 on $1"
    call "$1" iscsi.targetextent.create "{\"target\":$t,\"extent\":$e,\"lunid\":0}" >/dev/null ||
        fail "iscsi.targetextent.create $2 on $1"
}

start A 127.0.0.2 1
start B 127.0.0.3 2
pool_create A
pool_create B

# ---- a share made through A is served by B ----
volume A vol1
truenas_share A vol1
t0=$(now_ms)
ms=$(wait_for "$WAIT" "B serving target vol1 made on A" served_iscsi B vol1)
echo "B served vol1 (iSCSI) $(($(now_ms) - t0)) ms after A's iscsi.targetextent.create returned (first probe success after ${ms} ms)"
gap=$(gw_log_gap A "gateway config: wrote .*lun/vol1/0" B "applied lun/vol1/0") || fail "$gap"
echo "B applied it ${gap} ms after A wrote it (daemon timestamps)"
[ "$(call B pool.dataset.query '[[["id","=","ceph/vol1"]]]' | jget 'len(d)')" = 1 ] ||
    fail "B did not adopt ceph/vol1"
[ "$(call B iscsi.extent.query '[[["name","=","vol1"]]]' | jget 'd[0]["disk"]')" = zvol/ceph/vol1 ] ||
    fail "B's extent vol1"
# One device on both paths: the same serial (VPD 0x80) through A and B.
sa=$(iscsi-inq -e 1 -c 0x80 "iscsi://127.0.0.2:${GW_PORT[A]}/$BASE:vol1/0" 2>&1 | grep -i serial)
sb=$(iscsi-inq -e 1 -c 0x80 "iscsi://127.0.0.3:${GW_PORT[B]}/$BASE:vol1/0" 2>&1 | grep -i serial)
[ -n "$sa" ] && [ "$sa" = "$sb" ] || fail "unit serial differs: A '$sa' B '$sb'"

volume A vol2
call A nbd.export.create '{"name":"vol2","dataset":"ceph/vol2"}' >/dev/null || fail "nbd.export.create on A"
t0=$(now_ms)
wait_for "$WAIT" "B serving NBD export vol2 made on A" served_nbd B vol2 >/dev/null
echo "B served vol2 (NBD) $(($(now_ms) - t0)) ms after A's nbd.export.create returned"
gap=$(gw_log_gap A "gateway config: wrote .*nbd/vol2" B "applied nbd/vol2") || fail "$gap"
echo "B applied it ${gap} ms after A wrote it"
[ "$(nbdinfo --size "nbd://127.0.0.3:${NBD[B]}/vol2")" = 67108864 ] || fail "size of vol2 through B"

# ---- updates made through B reach A (target alias, extent comment, NBD
# description: each an update of an existing row there) ----
call B iscsi.target.update "[$(id_of B iscsi.target vol1), {\"alias\":\"vol1-alias\"}]" >/dev/null ||
    fail "iscsi.target.update on B"
call B iscsi.extent.update "[$(id_of B iscsi.extent vol1), {\"comment\":\"set on B\"}]" >/dev/null ||
    fail "iscsi.extent.update on B"
call B nbd.export.update "[$(id_of B nbd.export vol2), {\"description\":\"set on B\"}]" >/dev/null ||
    fail "nbd.export.update on B"
field_is() { # field_is MEMBER NS NAME FIELD VALUE
    [ "$(call "$1" "$2.query" "[[[\"name\",\"=\",\"$3\"]]]" | jget "d[0]['$4'] if d else ''")" = "$5" ]
}
t0=$(now_ms)
wait_for "$WAIT" "A taking B's target alias" field_is A iscsi.target vol1 alias vol1-alias >/dev/null
wait_for "$WAIT" "A taking B's extent comment" field_is A iscsi.extent vol1 comment "set on B" >/dev/null
wait_for "$WAIT" "A taking B's export description" field_is A nbd.export vol2 description "set on B" >/dev/null
served_iscsi A vol1 || fail "A no longer serves vol1 after the updates"
served_nbd A vol2 || fail "A no longer serves vol2 after the updates"
echo "A took the three updates made on B $(($(now_ms) - t0)) ms after the last call returned"

# ---- C joins, catches up, then is stopped ----
start C 127.0.0.4 3
pool_create C
wait_for "$WAIT" "C serving vol1" served_iscsi C vol1 >/dev/null
wait_for "$WAIT" "C serving vol2" served_nbd C vol2 >/dev/null
gw_stop C

# ---- a file-pool share on A stays A's ----
call A pool.dataset.create '{"name":"demo/loc","type":"VOLUME","volsize":8388608}' >/dev/null ||
    fail "demo/loc on A"
gw_ctl A share iscsi create demo/loc >/dev/null || fail "share of demo/loc on A"
discoverable A demo:loc || fail "A does not serve its local share"

# ---- deleting through B withdraws from A (the driver's order) ----
te=$(call B iscsi.targetextent.query "[[[\"target\",\"=\",$(id_of B iscsi.target vol1)]]]" | jget 'd[0]["id"]')
call B iscsi.targetextent.delete "[$te]" >/dev/null || fail "targetextent.delete on B"
call B iscsi.extent.delete "[$(id_of B iscsi.extent vol1)]" >/dev/null || fail "extent.delete on B"
tid=$(id_of B iscsi.target vol1)
[ -z "$tid" ] || call B iscsi.target.delete "[$tid]" >/dev/null || fail "target.delete on B"
t0=$(now_ms)
wait_for "$WAIT" "A withdrawing vol1" not discoverable A vol1 >/dev/null
echo "A withdrew vol1 $(($(now_ms) - t0)) ms after B's deletes returned"
gap=$(gw_log_gap B "gateway config: wrote .*lun/vol1/0" A "withdrew lun/vol1/0") || fail "$gap"
echo "A withdrew it ${gap} ms after B wrote it"
[ -z "$(id_of A iscsi.extent vol1)" ] || fail "A kept extent vol1"
call B nbd.export.delete "[$(id_of B nbd.export vol2)]" >/dev/null || fail "nbd.export.delete on B"
t0=$(now_ms)
wait_for "$WAIT" "A withdrawing export vol2" not served_nbd A vol2 >/dev/null
echo "A withdrew vol2 (NBD) $(($(now_ms) - t0)) ms after B's delete returned"

# ---- the local share never left A ----
sleep 2.5 # more than a reread period (GWCONFIG_POLL_MS)
discoverable A demo:loc || fail "A lost its local share"
discoverable B demo:loc && fail "B serves A's file-pool share"
call B iscsi.extent.query | grep -q demo/loc && fail "B has A's local extent"
keys | grep -q loc && fail "a local share is in the group's object: $(keys)"

# ---- C catches up at start ----
volume A vol3
truenas_share A vol3
start C 127.0.0.4 3
wait_for "$WAIT" "C serving vol3 after its restart" served_iscsi C vol3 >/dev/null
wait_for "$WAIT" "C withdrawing vol1 after its restart" not discoverable C vol1 >/dev/null
wait_for "$WAIT" "C withdrawing vol2 after its restart" not served_nbd C vol2 >/dev/null
[ -z "$(id_of C iscsi.extent vol1)" ] || fail "C kept extent vol1"

# ---- concurrent creates of the same name through two members ----
volume A race
call B pool.dataset.create '{"name":"ceph/race","type":"VOLUME","volsize":67108864,"adopt":true}' \
    >/dev/null || fail "adopting ceph/race on B"
for round in 1 2 3; do
    for m in A B; do
        rawcall "$m" iscsi.extent.create "[{\"name\":\"race$round\",\"disk\":\"zvol/ceph/race\",\"comment\":\"$m\"}]" \
            >"$TMP/race.$m" 2>&1 &
        eval "p$m=\$!"
    done
    ra=0 rb=0
    wait "$pA" || ra=$?
    wait "$pB" || rb=$?
    [ $((ra == 0)) -ne $((rb == 0)) ] || fail "round $round: A exit $ra, B exit $rb: $(cat "$TMP/race.A" "$TMP/race.B")"
    loser=A
    [ "$ra" = 0 ] && loser=B
    grep -q "^EEXIST " "$TMP/race.$loser" || fail "round $round: the loser's error is not EEXIST: $(cat "$TMP/race.$loser")"
    same() {
        [ "$(call A iscsi.extent.query "[[[\"name\",\"=\",\"race$round\"]]]" | jget 'd[0]["comment"] if d else ""')" = \
            "$(call B iscsi.extent.query "[[[\"name\",\"=\",\"race$round\"]]]" | jget 'd[0]["comment"] if d else "-"')" ]
    }
    wait_for "$WAIT" "round $round: A and B agree on extent race$round" same >/dev/null
    echo "round $round: $([ "$loser" = A ] && echo B || echo A) won, $loser got $(cat "$TMP/race.$loser")"
    # free the volume for the next round (an extent per volume)
    call A iscsi.extent.delete "[$(id_of A iscsi.extent "race$round")]" >/dev/null ||
        fail "extent.delete race$round on A"
    not_there() { [ -z "$(id_of B iscsi.extent "race$round")" ]; }
    wait_for "$WAIT" "B withdrawing race$round" not_there >/dev/null
done
for m in A B; do
    rawcall "$m" nbd.export.create '[{"name":"racenbd","dataset":"ceph/race","description":"'$m'"}]' \
        >"$TMP/nrace.$m" 2>&1 &
    eval "p$m=\$!"
done
ra=0 rb=0
wait "$pA" || ra=$?
wait "$pB" || rb=$?
[ $((ra == 0)) -ne $((rb == 0)) ] || fail "NBD race: A exit $ra, B exit $rb: $(cat "$TMP/nrace.A" "$TMP/nrace.B")"
grep -q "^EEXIST " "$TMP/nrace.A" "$TMP/nrace.B" || fail "NBD race: no EEXIST: $(cat "$TMP/nrace.A" "$TMP/nrace.B")"
samenbd() {
    [ "$(call A nbd.export.query '[[["name","=","racenbd"]]]' | jget 'd[0]["description"] if d else ""')" = \
        "$(call B nbd.export.query '[[["name","=","racenbd"]]]' | jget 'd[0]["description"] if d else "-"')" ]
}
wait_for "$WAIT" "A and B agree on export racenbd" samenbd >/dev/null
keys | grep -qx "extent/vol3" || fail "the object lacks extent/vol3: $(keys)"
pass
