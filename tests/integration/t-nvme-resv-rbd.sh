#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# NVMe reservations of a namespace over an RBD image are shared by every
# daemon serving the image: A and B, two blockd daemons with separate
# state directories on one throwaway Ceph cluster, both export the same
# image as an NVMe namespace (B adopts A's volume). Through the test
# initiator written from the specification (nvmetcp.py):
#   - host 1 registers through A, host 2 through B; Report through either
#     daemon lists both;
#   - host 1 takes Write Exclusive through A: host 2's write through B gets
#     Reservation Conflict at once, its read works;
#   - host 2 preempts host 1 through B, taking Exclusive Access: host 1's
#     read through A is refused, and its controller on A gets the
#     registration-preempted notice (event, log page 80h);
#   - kill -9 A: the reservation still holds through B, and B can change it;
#     A started again enforces the state it finds in the cluster.
. "$(dirname "$0")/lib.sh"
need python3
ceph_start
blockd_start
NVME_A=$(free_port)
NVME_B=$(free_port)
NBD_B=$(free_port)
ISCSI_B=$(free_port)
SOCK_B=$TMP/b/blockd.sock
LOG_B=$TMP/b.log
PID_B=

ctl_b() { "$BLOCKCTL_BIN" --socket "$SOCK_B" "$@"; }
start_b() {
    local before=0
    [ -f "$LOG_B" ] && before=$(wc -l <"$LOG_B")
    "$BLOCKD_BIN" --state-dir "$TMP/b" --log-level info --nbd-listen "127.0.0.1:$NBD_B" \
        --iscsi-listen "127.0.0.1:$ISCSI_B" >>"$LOG_B" 2>&1 &
    PID_B=$!
    BG_PIDS+=("$PID_B")
    for _ in $(seq 1 600); do
        tail -n +"$((before + 1))" "$LOG_B" | grep -q "blockd ready" && return 0
        kill -0 "$PID_B" 2>/dev/null || fail "B exited during start-up: $(tail -5 "$LOG_B")"
        sleep 0.05
    done
    fail "B did not start"
}
start_b

POOL="{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}"
blockctl call pool.create "$POOL" >/dev/null || fail "pool.create on A"
ctl_b call pool.create "$POOL" >/dev/null || fail "pool.create on B"
blockctl volume create ceph/v --size 16M >/dev/null || fail "volume create on A"
ctl_b call pool.dataset.create '{"name": "ceph/v", "type": "VOLUME", "volsize": 16777216, "adopt": true}' >/dev/null ||
    fail "B cannot adopt ceph/v"

# export_nvme CTL PORT: the volume as namespace 1 of subsystem "shared".
export_nvme() {
    local ctl=$1 port=$2 sub p
    sub=$($ctl call nvmet.subsys.create '{"name": "shared", "subnqn": "nqn.2026-01.org.blockd:shared", "allow_any_host": true}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') ||
        fail "subsystem on $ctl"
    $ctl call nvmet.namespace.create "{\"subsys_id\": $sub, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/ceph/v\", \"nsid\": 1}" >/dev/null ||
        fail "namespace on $ctl"
    p=$($ctl call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $port}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') ||
        fail "port on $ctl"
    $ctl call nvmet.port_subsys.create "{\"port_id\": $p, \"subsys_id\": $sub}" >/dev/null ||
        fail "port link on $ctl"
}
export_nvme blockctl "$NVME_A"
export_nvme ctl_b "$NVME_B"
for log in "$BLOCKD_LOG" "$LOG_B"; do
    for _ in $(seq 1 200); do
        grep -q "NVMe reservations kept in blockd.nvme-resv." "$log" && break
        sleep 0.1
    done
    grep -q "NVMe reservations kept in blockd.nvme-resv." "$log" ||
        fail "no shared reservations in $log: $(grep -i "nvme" "$log" | tail -5)"
done

PRE='
import sys, time
import nvmetcp as n
pa, pb = int(sys.argv[1]), int(sys.argv[2])
SUB = "nqn.2026-01.org.blockd:shared"
H1, H2 = bytes([0x11] * 16), bytes([0x22] * 16)
K1, K2 = 0x1111, 0x2222
def host(port, nqn, hid):
    end = time.time() + 30
    while True:
        try:
            return n.Controller("127.0.0.1", port, SUB, hostnqn=nqn, hostid=hid).connect()
        except (OSError, n.NvmeError):
            if time.time() > end:
                raise
            time.sleep(0.2)
def report(c):
    st, rep = c.resv_report(1)
    assert st == n.SC_SUCCESS, hex(st)
    return rep
def regs(rep):
    return {r["hostid"]: (r["key"], r["holds"]) for r in rep["regs"]}
'

/usr/bin/python3 - "$NVME_A" "$NVME_B" <<PY || fail "shared reservations"
$PRE
a = host(pa, "nqn.2026-01.org.blockd:h1", H1)
b = host(pb, "nqn.2026-01.org.blockd:h2", H2)
bs = n.parse_id_ns(a.identify(0, 1))["block_size"]
assert n.parse_id_ns(b.identify(0, 1))["rescap"] == 0xFF
assert a.resv_register(1, K1) == n.SC_SUCCESS
assert b.resv_register(1, K2) == n.SC_SUCCESS
for c in (a, b):
    assert regs(report(c)) == {H1: (K1, False), H2: (K2, False)}, report(c)
print("ok  registrations through A and B, Report through each lists both")
assert a.resv_acquire(1, K1, 1) == n.SC_SUCCESS
assert a.write(1, 0, b"w" * bs, bs=bs, check=False) == n.SC_SUCCESS
assert b.write(1, 0, b"x" * bs, bs=bs, check=False) == n.SC_RESV_CONFLICT
assert b.read(1, 0, 1, bs=bs, check=False)[0] == n.SC_SUCCESS
assert b.resv_acquire(1, K2, 1) == n.SC_RESV_CONFLICT
print("ok  Write Exclusive through A: the write through B is refused, its read works")
a.admin.submit(n.sqe(0x0C, 4000))  # Asynchronous Event Request on A
assert b.resv_acquire(1, K2, 2, action=1, prkey=K1) == n.SC_SUCCESS
assert a.read(1, 0, 1, bs=bs, check=False)[0] == n.SC_RESV_CONFLICT
rep = report(a)
assert rep["rtype"] == 2 and regs(rep) == {H2: (K2, True)}, rep
print("ok  preempt through B: Exclusive Access, enforced through A")
assert a.wait_aen(4000) & 0xFFFFFF == 0x800006
log = a.resv_log()
assert log["type"] == 1 and log["nsid"] == 1, log
print("ok  the host preempted through B hears of it through A (event, log page 80h)")
PY

kill -KILL "$BLOCKD_PID"
wait "$BLOCKD_PID" 2>/dev/null || true
BLOCKD_PID=
A_BEFORE=$(grep -c "NVMe reservations kept in blockd.nvme-resv." "$BLOCKD_LOG")
/usr/bin/python3 - "$NVME_A" "$NVME_B" <<PY || fail "after kill -9 of A"
$PRE
b = host(pb, "nqn.2026-01.org.blockd:h2", H2)
rep = report(b)
assert rep["rtype"] == 2 and regs(rep) == {H2: (K2, True)}, rep
assert b.resv_release(1, K2, rtype=2) == n.SC_SUCCESS
assert b.resv_acquire(1, K2, 1) == n.SC_SUCCESS
print("ok  A killed: the reservation holds through B, and B changes it")
PY
blockd_start
for _ in $(seq 1 300); do
    [ "$(grep -c "NVMe reservations kept in blockd.nvme-resv." "$BLOCKD_LOG")" -gt "$A_BEFORE" ] && break
    sleep 0.1
done
[ "$(grep -c "NVMe reservations kept in blockd.nvme-resv." "$BLOCKD_LOG")" -gt "$A_BEFORE" ] ||
    fail "A restarted: its namespace's reservations are not shared again"
/usr/bin/python3 - "$NVME_A" "$NVME_B" <<PY || fail "A restarted"
$PRE
a = host(pa, "nqn.2026-01.org.blockd:h1", H1)
bs = n.parse_id_ns(a.identify(0, 1))["block_size"]
rep = report(a)
assert rep["rtype"] == 1 and regs(rep) == {H2: (K2, True)}, rep
assert a.write(1, 0, b"y" * bs, bs=bs, check=False) == n.SC_RESV_CONFLICT
assert a.read(1, 0, 1, bs=bs, check=False)[0] == n.SC_SUCCESS
print("ok  A started again enforces what B holds")
PY
# Both stop cleanly (exit 0, no leak in an ASan build) with their
# namespaces' reservation objects open.
kill -TERM "$PID_B" 2>/dev/null || true
rc=0
wait "$PID_B" || rc=$?
[ "$rc" = 0 ] || fail "B exited with status $rc on SIGTERM"
blockd_stop
! grep -aE "AddressSanitizer|LeakSanitizer|runtime error" "$BLOCKD_LOG" "$LOG_B" || fail "sanitizer report"
echo "PASS: $TEST_NAME"
