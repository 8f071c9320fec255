#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# A fenced gateway member rejoins by itself, without a restart
# (docs/ha.md "Rejoining after fencing"). Members A (127.0.0.2, id 1) and B
# (127.0.0.3, id 2) serve one RBD volume over iSCSI and NBD.
#   1. A holds the image's lock (it wrote last); a writer through A runs
#      when A is frozen (SIGSTOP). B logs A OFFLINE, blocklists it and
#      writes a pattern over A's blocks, the writer's included.
#   2. A woken up (SIGCONT): an NBD read through A ends (error or data)
#      within a bound, never hangs; within 30 s TEST UNIT READY through A
#      succeeds with no restart (same process), INQUIRY works, reads
#      through A return B's pattern (the old client never wrote after B:
#      nothing of the writer's in-flight write landed), a write through A
#      reads back through B, NBD through A serves B's bytes, RTPG through
#      both paths shows A's group active again, B sees A ONLINE with a new
#      client address, and A's log names each step.
#   3. An operator's fencing, `rbd lock rm` of A's lock (which blocklists
#      A's client), takes the same path: A rejoins again and serves.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
need python3 rbd iscsi-inq nbdcopy qemu-io
[ -x "$GW_PROBE" ] || fail "tests/tools/gw_probe is not built (libiscsi-dev missing?)"
ceph_start

declare -A NBD
NBD[A]=$(free_port)
NBD[B]=$(free_port)
gw_start A 127.0.0.2 1 --nbd-listen "127.0.0.2:${NBD[A]}"
gw_start B 127.0.0.3 2 --nbd-listen "127.0.0.3:${NBD[B]}"
gw_share A false 67108864
gw_share B true 67108864
gw_ctl A share nbd create ceph/v --name v >/dev/null || fail "share nbd create on A"
UA=$(gw_url A)
UB=$(gw_url B)
PID_A=${GW_PID[A]}
LOG_A=$(gw_dir A)/blockd.log
LOG_B=$(gw_dir B)/blockd.log
for i in $(seq 1 100); do
    nbdinfo --size "nbd://127.0.0.3:${NBD[B]}/v" >/dev/null 2>&1 && break
    sleep 0.1
done
nbdinfo --size "nbd://127.0.0.3:${NBD[B]}/v" >/dev/null 2>&1 || fail "B does not serve the NBD export"

# Wait up to $1 s for $3 in log $2.
wait_log() {
    local secs=$1 log=$2 re=$3 i
    for i in $(seq 1 $((secs * 10))); do
        grep -Eq "$re" "$log" && return 0
        sleep 0.1
    done
    fail "no '$re' in $(basename "$(dirname "$log")")'s log after $secs s"
}
addr_of() { # client address of member $2 as member $1 sees it
    gw_ctl "$1" call gateway.query | python3 -c '
import json, sys
print([r for r in json.load(sys.stdin) if r["name"] == sys.argv[1]][0]["client_address"])' "$2"
}
rtpg_a_active() { # A's group active (state 0 or 1) through both paths
    local i a b
    for i in $(seq 1 100); do
        a=$("$GW_PROBE" rtpg "$UA" 2>&1 | tr '\n' ' ') || true
        b=$("$GW_PROBE" rtpg "$UB" 2>&1 | tr '\n' ' ') || true
        if [ "$a" = "$b" ] && echo "$a" | grep -Eq '^tpg=1 state=[01] relport=1 tpg=2 state=[01] relport=2 $'; then
            return 0
        fi
        sleep 0.1
    done
    fail "RTPG after the rejoin: A says '$a', B says '$b' (want A's group active on both)"
}

# ---- 1. A holds the lock, a writer through A, A freezes, B fences it
"$GW_PROBE" write "$UA" 0 16 1 >"$TMP/acked_a" || fail "write through A"
wait_log 10 "$LOG_A" "exclusive lock is now held by member 1 \(this member\)"
addr0=$(addr_of B A)
"$GW_PROBE" write "$UA" 100 100000 2 >"$TMP/acked_w" 2>"$TMP/writer.err" &
WRITER=$!
BG_PIDS+=("$WRITER")
for i in $(seq 1 100); do
    [ "$(wc -l <"$TMP/acked_w")" -ge 50 ] && break
    kill -0 "$WRITER" 2>/dev/null || fail "the writer through A stopped: $(cat "$TMP/writer.err")"
    sleep 0.1
done
kill -STOP "$PID_A"
FROZEN=1
trap 'rc=$?; [ -z "${FROZEN:-}" ] || kill -CONT "$PID_A" 2>/dev/null; (exit $rc); _cleanup' EXIT
gw_wait_state B A OFFLINE 20 >/dev/null
wait_log 10 "$LOG_B" "fenced member A \(id 1\): client .* blocklisted"
# B writes over A's blocks and past the writer's last acknowledged one
# (its write in flight at the freeze, too).
nw=$(wc -l <"$TMP/acked_w")
"$GW_PROBE" first-write "$UB" 0 3 30 >/dev/null || fail "no write through B after A was fenced"
"$GW_PROBE" write "$UB" 0 16 3 >"$TMP/acked_b1" || fail "write of B's pattern over A's blocks"
"$GW_PROBE" write "$UB" 100 $((nw + 16)) 3 >"$TMP/acked_b2" || fail "write of B's pattern over the writer's"
qemu-io -f raw "nbd://127.0.0.3:${NBD[B]}/v" -c "write -P 0x5b 16M 1M" >/dev/null ||
    fail "NBD write through B"
echo "A frozen after $nw writes; B fenced it and wrote its pattern"

# ---- 2. A wakes up and rejoins by itself
t0=$(date +%s%N)
kill -CONT "$PID_A"
FROZEN=
# Whatever A answers first (refusal while fenced, data once back) comes
# within a bound: nothing hangs.
if timeout 120 qemu-io -f raw "nbd://127.0.0.2:${NBD[A]}/v" -c "read 16M 4k" >"$TMP/nbd_early" 2>&1; then
    echo "NBD read through A right after SIGCONT: served"
else
    [ $? = 124 ] && fail "an NBD read through the woken A hung"
    echo "NBD read through A right after SIGCONT: refused ($(tr '\n' ' ' <"$TMP/nbd_early" | cut -c1-120))"
fi
"$GW_PROBE" ready "$UA" 120 >"$TMP/ready" 2>"$TMP/ready.err" ||
    fail "A does not serve again within 120 s of SIGCONT: $(cat "$TMP/ready.err")"
ms=$((($(date +%s%N) - t0) / 1000000))
echo "TEST UNIT READY through A succeeds $ms ms after SIGCONT ($(tr '\n' ' ' <"$TMP/ready.err"))"
kill -0 "$PID_A" 2>/dev/null || fail "A exited"
[ "${GW_PID[A]}" = "$PID_A" ] || fail "A was restarted"
wait "$WRITER" 2>/dev/null && fail "the writer through A did not notice the fencing"
grep -Eq "member A \(id 1, client .*\) was fenced by the group" "$LOG_A" || fail "A does not say it was fenced"
grep -q "member A: rejoining: connected a new client" "$LOG_A" || fail "A does not log its new client"
grep -Eq "member A: rejoining: reopened [1-9][0-9]* image\(s\)" "$LOG_A" || fail "A does not log the reopen"
grep -Eq "member A \(id 1\) rejoined the group as client" "$LOG_A" || fail "A does not log the rejoin"
grep -E "member A[ :(].*(fenced by|rejoin)" "$LOG_A" | cut -c1-200
iscsi-inq "$UA" >"$TMP/inq" 2>&1 || fail "iscsi-inq through A: $(cat "$TMP/inq")"
# The data: B's pattern everywhere B wrote, through A.
"$GW_PROBE" verify "$UA" "$TMP/acked_b1" 3 >/dev/null || fail "A does not read B's pattern over its own old blocks"
"$GW_PROBE" verify "$UA" "$TMP/acked_b2" 3 >/dev/null ||
    fail "A does not read B's pattern over the writer's blocks (the fenced client wrote?)"
"$GW_PROBE" write "$UA" 300 8 4 >"$TMP/acked_a2" || fail "write through A after the rejoin"
"$GW_PROBE" verify "$UB" "$TMP/acked_a2" 4 >/dev/null || fail "A's write after the rejoin through B"
# NBD through A: the same bytes as through B (B's NBD write included).
nbdcopy "nbd://127.0.0.2:${NBD[A]}/v" "$TMP/via_a.img" || fail "NBD read of the volume through A"
nbdcopy "nbd://127.0.0.3:${NBD[B]}/v" "$TMP/via_b.img" || fail "NBD read of the volume through B"
cmp "$TMP/via_a.img" "$TMP/via_b.img" >/dev/null || fail "NBD through A and B differ after the rejoin"
qemu-io -f raw "nbd://127.0.0.2:${NBD[A]}/v" -c "read -P 0x5b 16M 1M" | grep -q "read 1048576" ||
    fail "B's NBD write does not read back through A"
rtpg_a_active
gw_wait_state B A ONLINE 10 >/dev/null
addr1=$(addr_of B A)
[ -n "$addr1" ] && [ "$addr1" != "$addr0" ] || fail "A's client address: before $addr0, after $addr1"
[ "$(gw_state A A)" = ONLINE ] || fail "A sees itself $(gw_state A A)"

# ---- 3. an operator's fencing: rbd lock rm (blocklists the locker)
"$GW_PROBE" write "$UA" 400 4 5 >/dev/null || fail "write through A before the lock removal"
locks=$(rbd -c "$CEPH_CONF" lock ls "$CEPH_POOL/v" --format json)
# The id of an exclusive lock holds a space ("auto 1403..."): tab-separated.
IFS=$'\t' read -r lid locker laddr < <(python3 -c '
import json, sys
l = json.loads(sys.argv[1])
l = l if isinstance(l, list) else [dict(id=k, **v) for k, v in l.items()]
print("\t".join((l[0]["id"], l[0]["locker"], l[0]["address"])))' "$locks") || fail "rbd lock ls: $locks"
echo "A's lock: id $lid, locker $locker, address $laddr (A's client: $addr1)"
n0=$(grep -c "rejoined the group as client" "$LOG_A")
rbd -c "$CEPH_CONF" lock rm "$CEPH_POOL/v" "$lid" "$locker" || fail "rbd lock rm"
"$GW_PROBE" write "$UB" 500 4 6 >"$TMP/acked_b3" || fail "write through B after the lock removal"
t0=$(date +%s%N)
for i in $(seq 1 1200); do
    [ "$(grep -c "rejoined the group as client" "$LOG_A")" -gt "$n0" ] && break
    sleep 0.1
done
[ "$(grep -c "rejoined the group as client" "$LOG_A")" -gt "$n0" ] ||
    fail "A did not rejoin after its lock was removed (and its client blocklisted)"
"$GW_PROBE" ready "$UA" 120 >/dev/null 2>&1 || fail "A does not serve after the second rejoin"
"$GW_PROBE" verify "$UA" "$TMP/acked_b3" 6 >/dev/null || fail "A does not read B's writes after the second rejoin"
"$GW_PROBE" write "$UA" 600 4 7 >"$TMP/acked_a3" || fail "write through A after the second rejoin"
"$GW_PROBE" verify "$UB" "$TMP/acked_a3" 7 >/dev/null || fail "A's write after the second rejoin through B"
ms2=$((($(date +%s%N) - t0) / 1000000))
addr2=$(addr_of B A)
[ "$addr2" != "$addr1" ] || fail "A kept its blocklisted client $addr1"
gw_stop A
gw_stop B
pass "a frozen member fenced by B rejoins by itself in $ms ms after SIGCONT (same process, new client), serves B's writes and its own over iSCSI and NBD, and never wrote with the fenced client; after rbd lock rm it rejoins again ($ms2 ms)"
