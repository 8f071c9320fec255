#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# The Ceph cluster lost mid-I/O: the monitor and the OSD are
# frozen with SIGSTOP (a partition: memstore would lose its data if the OSD
# died) while an RBD volume is exported over NBD and iSCSI, with a 5 s op
# timeout (BLOCKD_RBD_OP_TIMEOUT):
#  1. before: a known pattern is written and flushed (acknowledged);
#  2. during: an in-flight NBD write, new NBD reads/writes/flushes and new
#     iSCSI READ/WRITE each end, while the cluster is still frozen, with a
#     retriable error (the op timeout; how soon is printed, not asserted): NBD EIO, SCSI NOT READY (never MEDIUM ERROR or
#     HARDWARE ERROR); the daemon stays responsive (API answers), a file
#     volume's NBD export keeps serving, the pool goes UNAVAIL with the
#     reason;
#  3. after SIGCONT: the pool comes back ONLINE on its own, NBD and iSCSI
#     I/O resume on the same export, and the flushed pattern reads back.
. "$(dirname "$0")/lib.sh"
need nbdsh qemu-io python3 rbd ceph
# A placement group's read lease (Ceph's default: 0.8 x osd_heartbeat_grace
# = 16 s) shorter than the freeze leaves the PG "laggy" after SIGCONT, and
# Ceph 16 on a one-OSD cluster may never renew it: every op on that PG then
# waits "for readable" for good, for any client (ceph/ceph-container#1682;
# seen here as one PG's ops stuck for minutes while the other PGs served).
# A real cluster renews leases through its peers; the freeze stands for a
# partition, so the lease (6 x 20 s) outlasts it.
export CEPH_READ_LEASE_RATIO=6
ceph_start --private
CEPH_PIDS=$(pgrep -f -- "ceph-(mon|osd) -c $CEPH_DIR/ceph.conf( |$)" | tr '\n' ' ')
[ -n "$CEPH_PIDS" ] || fail "no ceph-mon/ceph-osd processes for $CEPH_DIR"
FROZEN=
heal() {
    # shellcheck disable=SC2086
    [ -z "$FROZEN" ] || kill -CONT $CEPH_PIDS 2>/dev/null || true
    FROZEN=
}
trap 'rc=$?; heal; (exit $rc); _cleanup' EXIT
pool_field() {
    blockctl call pool.query "[[[\"name\",\"=\",\"$1\"]]]" |
        python3 -c "import json,sys; r=json.load(sys.stdin); print(r[0]$2 if r else 'none')"
}
# Seconds to wait for a request to end while the cluster stays frozen (the
# 5 s op timeout, a retry of librbd's, and a loaded machine): any end before
# the thaw shows the op timeout at work.
BOUND=60

BLOCKD_RBD_OP_TIMEOUT=5 blockd_start
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"rbd\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"
blockctl volume create ceph/v --size 64M >/dev/null || fail "volume create"
blockctl share nbd create ceph/v --name v >/dev/null || fail "share nbd create"
blockctl share iscsi create ceph/v >/dev/null || fail "share iscsi create"
blockctl volume create demo/f --size 16M >/dev/null || fail "file volume create"
blockctl share nbd create demo/f --name f >/dev/null || fail "share nbd create (file)"
BASE=$(blockctl call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
IQN=$BASE:ceph:v
U=nbd://127.0.0.1:$NBD_PORT/v
F=nbd://127.0.0.1:$NBD_PORT/f

# 1. a known pattern, acknowledged by a flush
qemu-io -f raw "$U" -c "write -P 0xa5 0 4M" -c flush >/dev/null || fail "write of the pattern"
qemu-io -f raw "$U" -c "read -P 0xa5 0 4M" | grep -q "read 4194304" || fail "pattern not read back"

# iSCSI: a session logged in before the freeze runs READ and WRITE once
# it is frozen (it reads "go" on stdin; the wait stays under the target's
# 30 s NOP-In timeout); after the thaw a new session checks the data.
cat >"$TMP/iscsi.py" <<'PY'
import sys, time, iscsiraw as R
port, iqn, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
s = R.Session(port, iqn)
s.clear_unit_attention()
if mode == "after":
    st, sense, data = s.cmd(R.read16(0, 8), data_in_len=4096)
    assert st == 0 and data == b"\xa5" * 4096, "READ after: status %d sense %s" % (st, sense.hex())
    st, sense, _ = s.cmd(R.write16(16384, 8), b"\x3c" * 4096)
    assert st == 0, "WRITE after: status %d sense %s" % (st, sense.hex())
    st, sense, data = s.cmd(R.read16(16384, 8), data_in_len=4096)
    assert st == 0 and data == b"\x3c" * 4096, "READ back after: status %d" % st
    sys.exit(0)
st, sense, _ = s.cmd(R.read16(0, 8), data_in_len=4096)
assert st == 0, "READ before the freeze: status %d sense %s" % (st, sense.hex())
print("ready", flush=True)
sys.stdin.readline()
for name, cdb, dout, din in (("READ", R.read16(0, 8), b"", 4096),
                             ("WRITE", R.write16(16384, 8), b"\x5a" * 4096, 0),
                             ("SYNC", R.sync_cache10(), b"", 0)):
    t0 = time.monotonic()
    st, sense, _ = s.cmd(cdb, dout, din)
    a = R.asc_ascq(sense) or (0, 0)
    with open(sys.argv[4], "a") as f:
        f.write("%s %d %s %02x/%02x %.1f\n" % (name, st, R.sense_key(sense), a[0], a[1],
                                              time.monotonic() - t0))
PY
coproc ISC { exec timeout 300 python3 "$TMP/iscsi.py" "$ISCSI_PORT" "$IQN" frozen "$TMP/iscsi.out" 2>&1; }
BG_PIDS+=("$ISC_PID")
read -r -t 60 line <&"${ISC[0]}" && [ "$line" = ready ] || fail "iSCSI session: $line"

# 2. frozen
# shellcheck disable=SC2086
kill -STOP $CEPH_PIDS
FROZEN=1
t0=$(date +%s)
# an in-flight write (qemu-io keeps it outstanding until it ends)
( s=$(date +%s); rc=0; out=$(qemu-io -f raw "$U" -c "write -P 0x11 8M 1M" 2>&1) || rc=$?
  echo "$rc $(($(date +%s) - s)) $out" >"$TMP/inflight.out" ) &
INFL=$!
BG_PIDS+=("$INFL")
sleep 1
# new requests on a fresh connection
cat >"$TMP/nbdreq.py" <<'PY'
import nbd, sys, time, errno
h = nbd.NBD()
h.connect_uri(sys.argv[1])
for name, f in (("read", lambda: h.pread(4096, 0)),
                ("write", lambda: h.pwrite(b"\x22" * 4096, 12 << 20)),
                ("flush", lambda: h.flush())):
    t0 = time.monotonic()
    try:
        f()
        print(name, "ok", "%.1f" % (time.monotonic() - t0))
    except nbd.Error as e:
        print(name, errno.errorcode.get(e.errno, e.errno), "%.1f" % (time.monotonic() - t0))
PY
timeout 200 /usr/bin/python3 "$TMP/nbdreq.py" "$U" >"$TMP/nbd.out" 2>&1 &
NEWR=$!
BG_PIDS+=("$NEWR")
echo go >&"${ISC[1]}"
# meanwhile the daemon answers, and the file volume serves
for i in 1 2 3; do
    timeout 10 "$BLOCKCTL_BIN" --socket "$SOCK" call pool.query >/dev/null || fail "the API did not answer while the cluster is frozen"
    timeout 10 qemu-io -f raw "$F" -c "write -P 0x77 0 64k" -c flush -c "read -P 0x77 0 64k" >/dev/null ||
        fail "the file volume's export did not serve while the cluster is frozen"
    sleep 1
done
for i in $(seq 1 $((2 * BOUND))); do
    [ -s "$TMP/inflight.out" ] && break
    sleep 1
done
[ -s "$TMP/inflight.out" ] || fail "the in-flight write did not end in $((2 * BOUND)) s"
read -r rc secs rest <"$TMP/inflight.out"
[ "$rc" != 0 ] || fail "the in-flight write succeeded against a frozen cluster: $rest"
echo "$rest" | grep -q "Input/output error" || fail "in-flight write: not EIO: $rest"
for i in $(seq 1 $((4 * BOUND))); do
    kill -0 "$NEWR" 2>/dev/null || break
    sleep 1
done
[ "$(grep -c . "$TMP/nbd.out")" = 3 ] || fail "the new NBD requests did not all end: $(cat "$TMP/nbd.out")"
for op in read write; do
    grep -q "^$op EIO " "$TMP/nbd.out" || fail "new NBD $op: $(cat "$TMP/nbd.out")"
done
# A flush has nothing to make durable (every write acknowledged before it
# is on the OSDs, no write was acknowledged since): it succeeds at once;
# one that reaches the cluster (an image with a client cache) gets EIO.
grep -Eq "^flush (ok|EIO) " "$TMP/nbd.out" || fail "new NBD flush: $(cat "$TMP/nbd.out")"
# NOT READY (2), LOGICAL UNIT IS IN PROCESS OF BECOMING READY (04h/01h):
# initiators retry it; never MEDIUM ERROR (3) or HARDWARE ERROR (4)
for i in $(seq 1 $((3 * BOUND))); do
    [ "$(grep -c . "$TMP/iscsi.out" 2>/dev/null)" = 3 ] && break
    sleep 1
done
[ "$(grep -c . "$TMP/iscsi.out" 2>/dev/null)" = 3 ] || fail "iSCSI commands did not all end: $(cat "$TMP/iscsi.out")"
while read -r name st key ascq secs; do
    # SYNCHRONIZE CACHE with nothing acknowledged since the last: GOOD
    [ "$name" = SYNC ] && [ "$st" = 0 ] && continue
    [ "$st" = 2 ] && [ "$key" = 2 ] && [ "$ascq" = 04/01 ] ||
        fail "iSCSI $name while frozen: status $st, sense key $key, $ascq"
done <"$TMP/iscsi.out"
for i in $(seq 1 30); do
    [ "$(pool_field ceph '["status"]')" = UNAVAIL ] && break
    sleep 1
done
[ "$(pool_field ceph '["status"]')" = UNAVAIL ] || fail "frozen cluster: the pool is $(pool_field ceph '["status"]')"
pool_field ceph '["status_detail"]' | grep -qi "ceph" || fail "UNAVAIL reason: $(pool_field ceph '["status_detail"]')"
echo "frozen for $(($(date +%s) - t0)) s: $(tr '\n' ';' <"$TMP/nbd.out") iSCSI: $(tr '\n' ';' <"$TMP/iscsi.out")"

# 3. healed
heal
for i in $(seq 1 60); do
    [ "$(pool_field ceph '["status"]')" = ONLINE ] && break
    sleep 1
done
[ "$(pool_field ceph '["status"]')" = ONLINE ] || fail "the pool did not come back: $(pool_field ceph '["status_detail"]')"
# the same export, no restart: I/O resumes, the flushed pattern is intact
# The pool is ONLINE once the monitor answers; the OSD may still be
# re-peering (an op can time out once more under load): retry errors for up
# to 60 s, but wrong data fails at once.
ok=
for i in $(seq 1 12); do
    out=$(timeout 120 qemu-io -f raw "$U" -c "read -P 0xa5 0 4M" 2>&1) || true
    grep -q "Pattern verification failed" <<<"$out" && fail "the flushed pattern changed: $out"
    grep -q "read 4194304" <<<"$out" && { ok=1; break; }
    sleep 5
done
[ -n "$ok" ] || fail "the flushed pattern did not read back after the cluster came back: $out"
out=$(timeout 120 qemu-io -f raw "$U" -c "write -P 0x33 8M 1M" -c flush -c "read -P 0x33 8M 1M" 2>&1) ||
    fail "writes do not resume after the cluster came back: $out"
timeout 120 python3 "$TMP/iscsi.py" "$ISCSI_PORT" "$IQN" after ||
    fail "iSCSI after the cluster came back"
blockd_alive || fail "blockd died"
blockd_stop
pass
