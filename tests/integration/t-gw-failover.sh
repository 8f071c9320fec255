#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Gateway failover (docs/ha.md): members A (127.0.0.2, id 1)
# and B (127.0.0.3, id 2) serve the same RBD volume (B adopts the image A
# created).
#   - identity: the same VPD 0x80 serial (the RBD image id) and 0x83 NAA
#     on both paths; relative port and port group = the member's id;
#   - ALUA: REPORT TARGET PORT GROUPS is the same on both paths and names
#     one member optimized (P: the image's first-ranked live member), the
#     other (N) non-optimized; I/O through N works (librbd moves the lock
#     to it) and the view does not follow the lock;
#   - failover: a libiscsi writer (4 KiB FUA writes, each logged once
#     acknowledged) runs through P; P gets SIGKILL mid-I/O; a write through
#     N succeeds (N fences P, breaks its lock; waited for up to 120 s: the
#     time is measured by bench/gateways.sh, target 5 s) and
#     every acknowledged block reads back intact through N; N is optimized
#     and P unavailable;
#   - a restarted P rejoins as the optimized member and serves the same
#     bytes;
#   - a member that freezes (SIGSTOP) is fenced by the other, which takes
#     over; woken up, it rejoins with a new client by itself and reads the
#     survivor's write (t-gw-rejoin covers the rejoin in detail).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
need python3 rbd
[ -x "$GW_PROBE" ] || fail "tests/tools/gw_probe is not built (libiscsi-dev missing?)"
ceph_start

gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
gw_share A false 67108864
gw_share B true 67108864
UA=$(gw_url A)
UB=$(gw_url B)

# ---- the same identity on both paths
"$GW_PROBE" ident "$UA" >"$TMP/ia" || fail "INQUIRY through A"
"$GW_PROBE" ident "$UB" >"$TMP/ib" || fail "INQUIRY through B"
image_id=$(rbd -c "$CEPH_CONF" info "$CEPH_POOL/v" --format json | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
grep -qx "serial=$image_id" "$TMP/ia" || fail "serial through A is not the image id $image_id: $(cat "$TMP/ia")"
[ "$(grep -E '^(serial|naa)=' "$TMP/ia")" = "$(grep -E '^(serial|naa)=' "$TMP/ib")" ] ||
    fail "the LU identity differs between paths: A $(cat "$TMP/ia") / B $(cat "$TMP/ib")"
grep -qx "relport=1" "$TMP/ia" && grep -qx "tpg=1" "$TMP/ia" || fail "A's port: $(cat "$TMP/ia")"
grep -qx "relport=2" "$TMP/ib" && grep -qx "tpg=2" "$TMP/ib" || fail "B's port: $(cat "$TMP/ib")"

# RTPG through both paths until both say WANT (a membership change is
# seen within a round, 1 s; waited for generously, 60 s and more).
rtpg_both() {
    local want=$1 i a b
    for i in $(seq 1 600); do
        a=$("$GW_PROBE" rtpg "$UA" 2>&1 | tr '\n' ' ') || true
        b=$("$GW_PROBE" rtpg "$UB" 2>&1 | tr '\n' ' ') || true
        [ "$a" = "$want" ] && [ "$b" = "$want" ] && return 0
        sleep 0.1
    done
    fail "RTPG: want '$want' on both paths, A says '$a', B says '$b'"
}
# The view with member P optimized and the other non-optimized (S: the
# other's state, 1 by default).
view() {
    local p=$1 s=${2:-1}
    if [ "$p" = A ]; then
        echo "tpg=1 state=0 relport=1 tpg=2 state=$s relport=2 "
    else
        echo "tpg=1 state=$s relport=1 tpg=2 state=0 relport=2 "
    fi
}
url() { if [ "$1" = A ]; then echo "$UA"; else echo "$UB"; fi; }
# The optimized member is the image's first-ranked live member: the same
# through both paths; call it P and the other N.
a=$("$GW_PROBE" rtpg "$UA" | tr '\n' ' ')
if [ "$a" = "$(view A)" ]; then P=A N=B; elif [ "$a" = "$(view B)" ]; then P=B N=A; else
    fail "RTPG through A: '$a' (want one optimized and one non-optimized member)"
fi
UP=$(url $P)
UN=$(url $N)
rtpg_both "$(view $P)"
echo "optimized member for this image: $P"
"$GW_PROBE" write "$UP" 0 8 1 >"$TMP/acked0" || fail "write through the optimized member $P"
# The non-optimized path serves reads and writes (librbd moves the lock to
# it), and the view does not move with the lock (no ASYMMETRIC ACCESS
# STATE CHANGED at every write through another path).
"$GW_PROBE" verify "$UN" "$TMP/acked0" 1 >/dev/null || fail "read through non-optimized $N"
"$GW_PROBE" write "$UN" 8 8 1 >"$TMP/acked1" || fail "write through non-optimized $N"
for i in $(seq 1 50); do
    grep -q "exclusive lock is now held by member .* (this member)" "$(gw_dir $N)/blockd.log" && break
    sleep 0.1
done
grep -q "exclusive lock is now held by member .* (this member)" "$(gw_dir $N)/blockd.log" ||
    fail "$N does not report taking the lock after writing"
sleep 1.2 # a membership round after the lock moved: the view must not follow it
rtpg_both "$(view $P)"
"$GW_PROBE" verify "$UP" "$TMP/acked1" 1 >/dev/null || fail "$N's writes read through $P"

# ---- failover: SIGKILL of the optimized member mid-I/O
"$GW_PROBE" write "$UP" 1000 100000 2 >"$TMP/acked2" 2>"$TMP/writer.err" &
WRITER=$!
BG_PIDS+=("$WRITER")
for i in $(seq 1 100); do
    [ "$(wc -l <"$TMP/acked2")" -ge 200 ] && break
    kill -0 "$WRITER" 2>/dev/null || fail "the writer through $P stopped: $(cat "$TMP/writer.err")"
    sleep 0.1
done
gw_kill $P
t0=$(date +%s%N)
out=$("$GW_PROBE" first-write "$UN" 500 3 120) || fail "no write through $N 120 s after $P died"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$WRITER" 2>/dev/null && fail "the writer through $P did not notice its death"
acked=$(wc -l <"$TMP/acked2")
echo "SIGKILL of $P with $acked blocks acknowledged; first write through $N after $ms ms"
"$GW_PROBE" verify "$UN" "$TMP/acked2" 2 >"$TMP/v2" || fail "an acknowledged write is lost"
grep -qx "verified $acked" "$TMP/v2" || fail "verify: $(cat "$TMP/v2")"
"$GW_PROBE" verify "$UN" "$TMP/acked0" 1 >/dev/null || fail "earlier data lost"
grep -q "fenced member $P (id [12]): client .* blocklisted" "$(gw_dir $N)/blockd.log" ||
    fail "$N did not fence $P"
grep -q "breaking the exclusive lock of fenced client" "$(gw_dir $N)/blockd.log" ||
    fail "$N did not break $P's lock"
b=$("$GW_PROBE" rtpg "$UN" | tr '\n' ' ')
[ "$b" = "$(view $N 3)" ] ||
    fail "after the failover $N reports '$b' (want $P unavailable, $N optimized)"
"$GW_PROBE" write "$UN" 2000 64 4 >"$TMP/acked3" || fail "writes through $N after the failover"

# ---- P rejoins: the image's first-ranked member is optimized again (an
# initiator following ALUA fails back), and it serves the same bytes
if [ $P = A ]; then gw_start A 127.0.0.2 1; else gw_start B 127.0.0.3 2; fi
rtpg_both "$(view $P)"
"$GW_PROBE" verify "$UP" "$TMP/acked2" 2 >/dev/null || fail "$P after rejoining: acknowledged data"
"$GW_PROBE" verify "$UP" "$TMP/acked3" 4 >/dev/null || fail "$P after rejoining: $N's writes"
"$GW_PROBE" write "$UP" 3000 8 7 >/dev/null || fail "writes through $P after rejoining"

# ---- a zombie: P (optimized, holding the lock) stops answering without
# dying (SIGSTOP); N fences it and takes over; when P wakes up it never
# writes with its fenced client: it refuses I/O (NOT READY, TARGET PORT IN
# UNAVAILABLE STATE) until it has rejoined with a new one, by itself.
kill -STOP "${GW_PID[$P]}"
"$GW_PROBE" first-write "$UN" 600 5 30 >/dev/null || fail "no write through $N after $P froze"
kill -CONT "${GW_PID[$P]}"
# Woken up, P may answer TEST UNIT READY before its first cluster call
# tells it that it was fenced (no write can succeed with the fenced
# client): wait for it to say it rejoined, then for the path to be ready.
for i in $(seq 1 300); do
    grep -q "rejoined the group as client" "$(gw_dir $P)/blockd.log" && break
    sleep 0.1
done
"$GW_PROBE" ready "$UP" 30 >/dev/null 2>"$TMP/zombie.err" ||
    fail "the fenced member $P did not rejoin: $(cat "$TMP/zombie.err")"
echo 'acked 600' >"$TMP/acked5"
"$GW_PROBE" verify "$UP" "$TMP/acked5" 5 >/dev/null || fail "$P does not read $N's write after it rejoined"
grep -q "was fenced by the group" "$(gw_dir $P)/blockd.log" || fail "$P does not say it was fenced"
grep -q "rejoined the group as client" "$(gw_dir $P)/blockd.log" || fail "$P does not say it rejoined"
gw_stop A
gw_stop B
pass "identity and RTPG the same on both paths, the optimized member stays put while the lock moves, kill -9 → $N writes after $ms ms with $acked acknowledged blocks intact, $P rejoins optimized, a frozen member is fenced and rejoins by itself"
