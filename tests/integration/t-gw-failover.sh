#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Gateway failover (issue #17, docs/ha.md): members A (127.0.0.2, id 1)
# and B (127.0.0.3, id 2) serve the same RBD volume (B adopts the image A
# created).
#   - identity: the same VPD 0x80 serial (the RBD image id) and 0x83 NAA
#     on both paths; relative port and port group = the member's id;
#   - ALUA: REPORT TARGET PORT GROUPS is the same on both paths and names
#     the exclusive-lock holder active/optimized, the other active/
#     non-optimized; I/O through the non-optimized member works, and the
#     optimized state follows the lock;
#   - failover: a libiscsi writer (4 KiB FUA writes, each logged once
#     acknowledged) runs through A; A gets SIGKILL mid-I/O; a write through
#     B succeeds within 15 s (B fences A, breaks its lock; target 5 s) and
#     every acknowledged block reads back intact through B; B is optimized
#     and A unavailable;
#   - a restarted A rejoins as non-optimized and serves the same bytes;
#   - a member that freezes (SIGSTOP) is fenced by the other, which takes
#     over; woken up, it refuses I/O (NOT READY 04/0C) and cannot write.
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

# RTPG through both paths until both say WANT (the view follows the lock
# within a membership round, 1 s).
rtpg_both() {
    local want=$1 i a b
    for i in $(seq 1 60); do
        a=$("$GW_PROBE" rtpg "$UA" 2>&1 | tr '\n' ' ') || true
        b=$("$GW_PROBE" rtpg "$UB" 2>&1 | tr '\n' ' ') || true
        [ "$a" = "$want" ] && [ "$b" = "$want" ] && return 0
        sleep 0.1
    done
    fail "RTPG: want '$want' on both paths, A says '$a', B says '$b'"
}
"$GW_PROBE" write "$UA" 0 8 1 >"$TMP/acked0" || fail "write through A"
rtpg_both "tpg=1 state=0 relport=1 tpg=2 state=1 relport=2 "
# The non-optimized path serves reads and writes; the lock (and the
# optimized state) moves to it.
"$GW_PROBE" verify "$UB" "$TMP/acked0" 1 >/dev/null || fail "read through non-optimized B"
"$GW_PROBE" write "$UB" 8 8 1 >"$TMP/acked1" || fail "write through non-optimized B"
rtpg_both "tpg=1 state=1 relport=1 tpg=2 state=0 relport=2 "
"$GW_PROBE" verify "$UA" "$TMP/acked1" 1 >/dev/null || fail "B's writes read through A"

# ---- failover: SIGKILL of the optimized member mid-I/O
"$GW_PROBE" write "$UA" 1000 100000 2 >"$TMP/acked2" 2>"$TMP/writer.err" &
WRITER=$!
BG_PIDS+=("$WRITER")
for i in $(seq 1 100); do
    [ "$(wc -l <"$TMP/acked2")" -ge 200 ] && break
    kill -0 "$WRITER" 2>/dev/null || fail "the writer through A stopped: $(cat "$TMP/writer.err")"
    sleep 0.1
done
rtpg_both "tpg=1 state=0 relport=1 tpg=2 state=1 relport=2 "
gw_kill A
t0=$(date +%s%N)
out=$("$GW_PROBE" first-write "$UB" 500 3 30) || fail "no write through B after A died"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait "$WRITER" 2>/dev/null && fail "the writer through A did not notice A's death"
acked=$(wc -l <"$TMP/acked2")
echo "SIGKILL of A with $acked blocks acknowledged; first write through B after $ms ms"
[ "$ms" -le 15000 ] || fail "failover took $ms ms (> 15 s)"
"$GW_PROBE" verify "$UB" "$TMP/acked2" 2 >"$TMP/v2" || fail "an acknowledged write is lost"
grep -qx "verified $acked" "$TMP/v2" || fail "verify: $(cat "$TMP/v2")"
"$GW_PROBE" verify "$UB" "$TMP/acked0" 1 >/dev/null || fail "earlier data lost"
grep -q "fenced member A (id 1): client .* blocklisted" "$(gw_dir B)/blockd.log" ||
    fail "B did not fence A"
grep -q "broke the exclusive lock of fenced client" "$(gw_dir B)/blockd.log" ||
    fail "B did not break A's lock"
b=$("$GW_PROBE" rtpg "$UB" | tr '\n' ' ')
[ "$b" = "tpg=1 state=3 relport=1 tpg=2 state=0 relport=2 " ] ||
    fail "after the failover B reports '$b' (want A unavailable, B optimized)"
"$GW_PROBE" write "$UB" 2000 64 4 >"$TMP/acked3" || fail "writes through B after the failover"

# ---- A rejoins: non-optimized, the same bytes
gw_start A 127.0.0.2 1
rtpg_both "tpg=1 state=1 relport=1 tpg=2 state=0 relport=2 "
"$GW_PROBE" verify "$UA" "$TMP/acked2" 2 >/dev/null || fail "A after rejoining: acknowledged data"
"$GW_PROBE" verify "$UA" "$TMP/acked3" 4 >/dev/null || fail "A after rejoining: B's writes"

# ---- a zombie: B (optimized) stops answering without dying (SIGSTOP);
# A fences it and takes over; when B wakes up it must not write again: its
# commands fail with NOT READY, TARGET PORT IN UNAVAILABLE STATE.
kill -STOP "${GW_PID[B]}"
"$GW_PROBE" first-write "$UA" 600 5 30 >/dev/null || fail "no write through A after B froze"
kill -CONT "${GW_PID[B]}"
if "$GW_PROBE" write "$UB" 600 1 6 >/dev/null 2>"$TMP/zombie.err"; then
    fail "the fenced member B acknowledged a write"
fi
grep -q "0x040c" "$TMP/zombie.err" || fail "the fenced member's refusal: $(cat "$TMP/zombie.err")"
echo 'acked 600' >"$TMP/acked5"
"$GW_PROBE" verify "$UA" "$TMP/acked5" 5 >/dev/null || fail "the zombie's write reached the image"
grep -q "was fenced by the group" "$(gw_dir B)/blockd.log" || fail "B does not say it was fenced"
gw_stop A
gw_stop B
pass "identity and RTPG the same on both paths, ALUA follows the lock, kill -9 → B writes after $ms ms with $acked acknowledged blocks intact, A rejoins non-optimized, a frozen member is fenced and cannot write when it wakes"
