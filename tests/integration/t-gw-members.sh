#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Gateway group membership (docs/ha.md): two members on
# 127.0.0.2 and 127.0.0.3 (separate state directories, one Ceph cluster)
# see each other join and leave (by notification: how soon is measured by
# bench/gateways.sh, printed here from the log timestamps); a second daemon
# claiming a live member's --gateway-id is refused at start; a member killed
# with SIGKILL becomes OFFLINE (and fenced) after the heartbeat timeout,
# and rejoins ONLINE when restarted with the same id.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
need python3
ceph_start

# Flags without a group are refused (no silent single-member mode).
if "$BLOCKD_BIN" --state-dir "$TMP/nogroup" --nbd-listen 127.0.0.1:0 --iscsi-listen 127.0.0.1:0 \
    --gateway-id 1 >"$TMP/nogroup.log" 2>&1; then
    fail "--gateway-id without --gateway-group was accepted"
fi
grep -q "need --gateway-group" "$TMP/nogroup.log" || fail "no clear error: $(cat "$TMP/nogroup.log")"

gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
gw_wait_state A B ONLINE 60 >/dev/null
gw_wait_state B A ONLINE 60 >/dev/null
# The join notification, not the next heartbeat: from B's registration to
# A's log of the join (the daemons' timestamps: blockctl's start-up under
# load is not part of it).
ms=$(gw_log_gap B "gateway test: member B, id 2" A "member B \(id 2\) joined") || fail "$ms"
echo "A saw B join ${ms} ms after B registered"
rows=$(gw_ctl A call gateway.query '[[["state","=","ONLINE"]],{"order_by":["id"]}]')
python3 - "$rows" "${GW_PORT[A]}" "${GW_PORT[B]}" <<'PY' || fail "gateway.query on A: $rows"
import json, sys
rows = json.loads(sys.argv[1])
assert [(r["id"], r["name"], r["local"]) for r in rows] == [(1, "A", True), (2, "B", False)], rows
assert rows[0]["portals"] == "127.0.0.2:" + sys.argv[2], rows
assert rows[1]["portals"] == "127.0.0.3:" + sys.argv[3], rows
assert all(r["client_address"] and r["last_seen"] > 0 and not r["fenced"] for r in rows), rows
PY
gw_ctl B gateway list | grep -E "^1 +A +ONLINE +127.0.0.2:${GW_PORT[A]}" >/dev/null ||
    fail "blockctl gateway list on B: $(gw_ctl B gateway list)"

# A duplicate id is refused loudly while its holder is alive.
mkdir -p "$TMP/dup"
if timeout 30 "$BLOCKD_BIN" --state-dir "$TMP/dup/state" --nbd-listen 127.0.0.4:0 \
    --iscsi-listen "127.0.0.4:$(free_port)" --gateway-group test --gateway-id 2 \
    --gateway-name C --gateway-ceph-conf "$CEPH_CONF" --gateway-pool "$CEPH_POOL" \
    >"$TMP/dup/log" 2>&1; then
    fail "a second member with id 2 started"
fi
grep -q "gateway id 2 is already used by the live member B" "$TMP/dup/log" ||
    fail "no clear refusal of the duplicate id: $(tail -3 "$TMP/dup/log")"
[ "$(gw_state A C)" = "" ] || fail "the refused member appears in the group"

# A leave (SIGTERM) is seen.
gw_stop B
gw_wait_state A B "" 60 >/dev/null
ms=$(gw_log_gap B "member B \(id 2\) leaving the group" A "member B \(id 2\) left") || fail "$ms"
echo "A saw B leave ${ms} ms after B left"

# SIGKILL: no leave; OFFLINE after the heartbeat timeout (3 s), fenced.
gw_start B 127.0.0.3 2
gw_wait_state A B ONLINE 60 >/dev/null
gw_kill B
ms=$(gw_wait_state A B OFFLINE 60)
echo "A saw B OFFLINE ${ms} ms after SIGKILL"
# fenced once the monitors took the blocklist entry (one more round trip)
for i in $(seq 1 600); do
    gw_ctl A call gateway.query '[[["name","=","B"]],{"get":true}]' | grep -q '"fenced": *true' && break
    sleep 0.1
done
gw_ctl A call gateway.query '[[["name","=","B"]],{"get":true}]' | grep -q '"fenced": *true' ||
    fail "B was not fenced 60 s after it went OFFLINE: $(gw_ctl A call gateway.query)"
grep -q "fenced member B (id 2): client .* blocklisted" "$(gw_dir A)/blockd.log" ||
    fail "no fencing line in A's log"

# Restarted with the same id: it takes its dead self's id over and is ONLINE.
gw_start B 127.0.0.3 2
gw_wait_state A B ONLINE 60 >/dev/null
gw_ctl A call gateway.query '[[["name","=","B"]],{"get":true}]' | grep -q '"fenced": *false' ||
    fail "B rejoined but is still marked fenced"
gw_stop B
gw_stop A
pass "join and leave seen, duplicate id refused, SIGKILL → OFFLINE + fenced, rejoin"
