# Helpers for the gateway-group tests (t-gw-*.sh), sourced after lib.sh:
# members are separate blockd processes on 127.0.0.N with their own state
# directories, in group "test" on the test's Ceph cluster and pool
# (ceph_start: $CEPH_CONF, $CEPH_POOL, which holds the membership object).
#   gw_start A 127.0.0.2 1     # name, address, --gateway-id [extra flags]
#   gw_ctl A gateway list      # blockctl against member A
#   gw_kill A / gw_stop A
GW_PROBE=${GW_PROBE:-$BUILD/tests/tools/gw_probe}
# Each member has its own iSCSI port too: a share's default portal is
# 0.0.0.0:<listen_port>, and a dead member's address must refuse, not reach
# another member's wildcard listener.
declare -A GW_PID GW_ADDR GW_PORT

gw_dir() { echo "$TMP/gw-$1"; }

# Like lib.sh's fail, with every member's log.
fail() {
    echo "FAIL: $TEST_NAME: $*" >&2
    local d
    for d in "$TMP"/gw-*; do
        [ -f "$d/blockd.log" ] || continue
        echo "--- last lines of $(basename "$d")'s log ---" >&2
        tail -n 25 "$d/blockd.log" >&2
    done
    exit 1
}

gw_ctl() {
    local name=$1
    shift
    "$BLOCKCTL_BIN" --socket "$(gw_dir "$name")/state/blockd.sock" "$@"
}

# Start member NAME on ADDR with id ID; waits until it is ready.
# GW_HEARTBEAT_TIMEOUT (seconds, default 3) is the members' heartbeat
# timeout: a test that does not exercise fencing sets it long, so that a
# member whose threads a loaded machine holds back for seconds is not
# fenced in the middle of it.
gw_start() {
    local name=$1 addr=$2 id=$3
    shift 3
    local d
    d=$(gw_dir "$name")
    mkdir -p "$d"
    local log=$d/blockd.log before=0
    [ -f "$log" ] && before=$(wc -l <"$log")
    [ -n "${GW_PORT[$name]:-}" ] || GW_PORT[$name]=$(free_port)
    "$BLOCKD_BIN" --state-dir "$d/state" --log-level "${BLOCKD_LOG_LEVEL:-info}" \
        --nbd-listen "$addr:0" --iscsi-listen "$addr:${GW_PORT[$name]}" \
        --gateway-group test --gateway-id "$id" --gateway-name "$name" \
        --gateway-ceph-conf "$CEPH_CONF" --gateway-pool "$CEPH_POOL" --allow-dir "$(dirname "$CEPH_CONF")" \
        --gateway-heartbeat-timeout "${GW_HEARTBEAT_TIMEOUT:-3}" "$@" >>"$log" 2>&1 &
    GW_PID[$name]=$!
    GW_ADDR[$name]=$addr
    BG_PIDS+=("$!")
    local i
    for i in $(seq 1 1200); do
        if tail -n +"$((before + 1))" "$log" 2>/dev/null | grep -q "blockd ready"; then
            return 0
        fi
        kill -0 "${GW_PID[$name]}" 2>/dev/null || fail "member $name exited during start-up"
        sleep 0.05
    done
    fail "member $name did not become ready in 60 s"
}

gw_kill() {
    kill -KILL "${GW_PID[$1]}" 2>/dev/null || true
    wait "${GW_PID[$1]}" 2>/dev/null || true
}

gw_stop() {
    kill -TERM "${GW_PID[$1]}" 2>/dev/null || true
    local rc=0
    wait "${GW_PID[$1]}" || rc=$?
    [ "$rc" = 0 ] || fail "member $1 exited with status $rc on SIGTERM"
}

# "ONLINE"/"OFFLINE" of member WHO as member NAME sees it ("" if absent).
gw_state() {
    gw_ctl "$1" call gateway.query | python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin) if r["name"] == sys.argv[1]]
print(rows[0]["state"] if rows else "")' "$2"
}

# Wait up to SECONDS for gw_state NAME WHO to be STATE; prints the wait in ms.
gw_wait_state() {
    local name=$1 who=$2 want=$3 secs=$4
    local t0 t
    t0=$(date +%s%N)
    while :; do
        [ "$(gw_state "$name" "$who")" = "$want" ] && break
        t=$(date +%s%N)
        [ $(((t - t0) / 1000000)) -lt $((secs * 1000)) ] ||
            fail "$name does not see $who as ${want:-absent} after $secs s: $(gw_ctl "$name" gateway list)"
        sleep 0.05
    done
    t=$(date +%s%N)
    echo $(((t - t0) / 1000000))
}

# The same RBD volume shared by every member: member NAME creates pool
# "ceph" on the test's RADOS pool ($CEPH_POOL); the first member (adopt
# false) then creates the volume and shares it over iSCSI, and the others
# (adopt true) get the share from the group's configuration store
# (docs/ha.md "Shared configuration": they adopt the volume themselves):
# wait until they serve it.
gw_share() {
    local name=$1 adopt=$2 size=$3
    gw_ctl "$name" call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" \
        >/dev/null || fail "pool.create of the RBD pool on $name"
    if [ "$adopt" = true ]; then
        local i
        for i in $(seq 1 200); do
            grep -q "reservations shared through" "$(gw_dir "$name")/blockd.log" && return 0
            sleep 0.05
        done
        fail "$name did not get the share of ceph/v from the group"
    fi
    gw_ctl "$name" call pool.dataset.create "{\"name\":\"ceph/v\",\"type\":\"VOLUME\",\"volsize\":$size}" \
        >/dev/null || fail "pool.dataset.create ceph/v on $name"
    gw_ctl "$name" share iscsi create ceph/v >/dev/null || fail "share iscsi create on $name"
}

gw_url() {
    local base
    base=$(gw_ctl "$1" call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
    echo "iscsi://${GW_ADDR[$1]}:${GW_PORT[$1]}/$base:ceph:v/0"
}

# Milliseconds between the first line matching RE1 in member N1's log and
# the first line matching RE2 in N2's log written after it (their
# timestamps: the daemons' own view, without the polling clients' delays).
gw_log_gap() {
    python3 - "$(gw_dir "$1")/blockd.log" "$2" "$(gw_dir "$3")/blockd.log" "$4" <<'PY'
import re, sys
from datetime import datetime
def times(path, rx):
    out = []
    for line in open(path, errors="replace"):
        if re.search(rx, line):
            out.append(datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f"))
    return out
t1 = times(sys.argv[1], sys.argv[2])
if not t1:
    sys.exit("no line matches " + sys.argv[2])
t1 = t1[-1]
t2 = [t for t in times(sys.argv[3], sys.argv[4]) if t >= t1]
if not t2:
    sys.exit("no line matches " + sys.argv[4] + " after it")
print(int((t2[0] - t1).total_seconds() * 1000))
PY
}
