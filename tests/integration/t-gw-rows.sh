#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Dataset rows in a gateway group (docs/ha.md "Resizes" and
# "Adopted volumes"): members A and B on 127.0.0.2-3, one throwaway Ceph
# cluster, each with the RBD pool "ceph".
#  - a resize through A's pool.dataset.update reaches B without a call on
#    B: an iSCSI session logged in to B gets CAPACITY DATA HAS CHANGED
#    (06/2A/09) and READ CAPACITY(16) the new size, a new NBD connection
#    to B sees it, B's dataset row says it; the same for `rbd resize`
#    behind both members' backs, growing and shrinking (A's session too);
#  - B drops the dataset row it adopted for A's share once the share is
#    deleted on A (the image stays, A's row stays); a volume B made itself
#    and shared stays B's after its share is deleted (A drops its adopted
#    row of it instead); a volume B adopted and then resized through its
#    own API is B's and stays.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
# No member is meant to be fenced here (a loaded machine must not fence one).
GW_HEARTBEAT_TIMEOUT=30
need python3 nbdinfo rbd
ceph_start

declare -A NBD
for m in A B; do NBD[$m]=$(free_port); done
gw_start A 127.0.0.2 1 --nbd-listen "127.0.0.2:${NBD[A]}"
gw_start B 127.0.0.3 2 --nbd-listen "127.0.0.3:${NBD[B]}"
MiB=1048576
gw_share A false $((64 * MiB))
gw_share B true $((64 * MiB))
gw_ctl A call nbd.export.create '{"name":"v","dataset":"ceph/v"}' >/dev/null || fail "nbd.export.create on A"
now_ms() { echo $(($(date +%s%N) / 1000000)); }
wait_for() { # wait_for SECONDS WHAT CMD...
    local secs=$1 what=$2 t0
    shift 2
    t0=$(now_ms)
    until "$@"; do
        [ $(($(now_ms) - t0)) -lt $((secs * 1000)) ] || fail "$what: not after $secs s"
        sleep 0.05
    done
}
nbd_size() { nbdinfo --size "nbd://${GW_ADDR[$1]}:${NBD[$1]}/v" 2>/dev/null; }
nbd_size_is() { [ "$(nbd_size "$1")" = "$2" ]; }
wait_for 10 "B serving the NBD export v" nbd_size_is B $((64 * MiB))
volsize() { # volsize MEMBER DATASET: the row's volsize, "" when there is no row
    gw_ctl "$1" call pool.dataset.query "[[[\"id\",\"=\",\"$2\"]]]" |
        python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["volsize"]["parsed"] if r else "")'
}
has_row() { [ -n "$(volsize "$1" "$2")" ]; }
no_row() { [ -z "$(volsize "$1" "$2")" ]; }
BASE=$(gw_ctl A call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')

# An iSCSI session through each member, driven from stdin: "cap BYTES"
# waits (up to 20 s, TEST UNIT READY every 50 ms) for CAPACITY DATA HAS
# CHANGED and then checks READ CAPACITY(16); prints "ok ..." or "bad ...".
cat >"$TMP/cap.py" <<'PY'
import struct, sys, time, iscsiraw as R
host, port, iqn = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = R.Session(port, iqn, host=host)
s.clear_unit_attention()
def capacity():
    st, sense, d = s.cmd(bytes([0x9e, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2),
                         data_in_len=32)
    assert st == 0, "READ CAPACITY(16): status %d sense %s" % (st, sense.hex())
    lba, bs = struct.unpack(">QI", d[:12])
    return (lba + 1) * bs
print("ok %d" % capacity(), flush=True)
for line in sys.stdin:
    want = int(line.split()[1])
    t0, ua = time.monotonic(), None
    while time.monotonic() - t0 < 20:
        st, sense, _ = s.cmd(bytes(6))
        if st == 2 and R.sense_key(sense) == 6:
            ua = R.asc_ascq(sense)
            if ua == (0x2a, 0x09):
                break
        time.sleep(0.05)
    got = capacity()
    ok = ua == (0x2a, 0x09) and got == want
    print("%s ua=%s capacity=%d after %.2f s" % ("ok" if ok else "bad", ua, got,
                                                 time.monotonic() - t0), flush=True)
PY
coproc CA { exec timeout 300 python3 "$TMP/cap.py" 127.0.0.2 "${GW_PORT[A]}" "$BASE:ceph:v" 2>&1; }
BG_PIDS+=("$CA_PID")
coproc CB { exec timeout 300 python3 "$TMP/cap.py" 127.0.0.3 "${GW_PORT[B]}" "$BASE:ceph:v" 2>&1; }
BG_PIDS+=("$CB_PID")
read -r -t 30 la <&"${CA[0]}" && [ "$la" = "ok $((64 * MiB))" ] || fail "A's session: $la"
read -r -t 30 lb <&"${CB[0]}" && [ "$lb" = "ok $((64 * MiB))" ] || fail "B's session: $lb"
expect_cap() { # expect_cap BYTES WHO...: each session sees the change
    local want=$1 m line
    shift
    for m in "$@"; do
        if [ "$m" = A ]; then
            echo "cap $want" >&"${CA[1]}"
            read -r -t 40 line <&"${CA[0]}" || line="no answer"
        else
            echo "cap $want" >&"${CB[1]}"
            read -r -t 40 line <&"${CB[0]}" || line="no answer"
        fi
        echo "$m: $line"
        [ "${line%% *}" = ok ] || fail "$m's iSCSI session after the resize to $want: $line"
    done
}

# ---- grown through A's API: B follows ----
gw_ctl A call pool.dataset.update "[\"ceph/v\", {\"volsize\": $((128 * MiB))}]" >/dev/null ||
    fail "pool.dataset.update on A"
expect_cap $((128 * MiB)) B A
wait_for 10 "B's NBD export at 128 MiB" nbd_size_is B $((128 * MiB))
[ "$(volsize B ceph/v)" = $((128 * MiB)) ] || fail "B's row: $(volsize B ceph/v)"
grep -q "ceph/v resized 67108864 -> 134217728 bytes by another client" "$(gw_dir B)/blockd.log" ||
    fail "no log line on B for the resize"

# ---- `rbd resize` behind both members' backs: grow, then shrink ----
rbd -c "$CEPH_CONF" resize --size 192M "$CEPH_POOL/v" >/dev/null 2>&1 || fail "rbd resize (grow)"
expect_cap $((192 * MiB)) A B
rbd -c "$CEPH_CONF" resize --size 96M --allow-shrink "$CEPH_POOL/v" >/dev/null 2>&1 ||
    fail "rbd resize (shrink)"
expect_cap $((96 * MiB)) A B
wait_for 10 "A's NBD export at 96 MiB" nbd_size_is A $((96 * MiB))
wait_for 10 "B's NBD export at 96 MiB" nbd_size_is B $((96 * MiB))
[ "$(volsize A ceph/v)" = $((96 * MiB)) ] || fail "A's row: $(volsize A ceph/v)"
[ "$(volsize B ceph/v)" = $((96 * MiB)) ] || fail "B's row: $(volsize B ceph/v)"
eval "exec ${CA[1]}>&- ${CB[1]}>&-" # the sessions end

# ---- the share goes on A: B drops the row it adopted, never the image ----
gw_ctl A call nbd.export.delete "[$(gw_ctl A call nbd.export.query '[[["name","=","v"]]]' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')]" >/dev/null ||
    fail "nbd.export.delete on A"
gw_ctl A share iscsi delete --force ceph/v >/dev/null || fail "share iscsi delete on A"
t0=$(now_ms)
wait_for 10 "B dropping its adopted row of ceph/v" no_row B ceph/v
echo "B dropped its row of ceph/v $(($(now_ms) - t0)) ms after A's share delete returned"
has_row A ceph/v || fail "A lost its own row of ceph/v"
rbd -c "$CEPH_CONF" ls "$CEPH_POOL" | grep -qx v || fail "the image of ceph/v is gone"
# (logged once the row's volume is closed, after the row is gone)
wait_for 5 "the log line on B" grep -q "dropped the dataset row of ceph/v" "$(gw_dir B)/blockd.log" \
    >/dev/null
# the image is not watched by B any more: A deletes the dataset at once
t0=$(now_ms)
gw_ctl A call pool.dataset.delete '"ceph/v"' >/dev/null || fail "pool.dataset.delete ceph/v on A"
echo "A deleted ceph/v in $(($(now_ms) - t0)) ms"

# ---- a volume B made itself stays B's; A drops the row it adopted ----
gw_ctl B call pool.dataset.create "{\"name\":\"ceph/own\",\"type\":\"VOLUME\",\"volsize\":$((16 * MiB))}" \
    >/dev/null || fail "ceph/own on B"
gw_ctl B share iscsi create ceph/own >/dev/null || fail "share of ceph/own on B"
wait_for 10 "A adopting ceph/own" has_row A ceph/own
gw_ctl B share iscsi delete --force ceph/own >/dev/null || fail "share delete of ceph/own on B"
wait_for 10 "A dropping its adopted row of ceph/own" no_row A ceph/own
sleep 2.5 # more than a reread period (GWCONFIG_POLL_MS)
has_row B ceph/own || fail "B dropped the row of a volume it made itself"

# ---- adopted, then changed through B's own API: B's from then on ----
gw_ctl A call pool.dataset.create "{\"name\":\"ceph/used\",\"type\":\"VOLUME\",\"volsize\":$((16 * MiB))}" \
    >/dev/null || fail "ceph/used on A"
gw_ctl A share iscsi create ceph/used >/dev/null || fail "share of ceph/used on A"
wait_for 10 "B adopting ceph/used" has_row B ceph/used
gw_ctl B call pool.dataset.update "[\"ceph/used\", {\"volsize\": $((32 * MiB))}]" >/dev/null ||
    fail "pool.dataset.update of ceph/used on B"
gw_ctl A share iscsi delete --force ceph/used >/dev/null || fail "share delete of ceph/used on A"
sleep 2.5
has_row B ceph/used || fail "B dropped a row it used itself"
pass "resizes reach the other member's sessions, exports and rows; adopted rows dropped with their share"
