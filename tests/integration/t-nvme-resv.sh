#!/usr/bin/env bash
# NVMe reservations through the test initiator written from the
# specification (nvmetcp.py): Identify (ONCS, RESCAP, NMIC), the Host
# Identifier feature, two hosts (different host NQN and Host Identifier)
# registering, one acquiring Write Exclusive, the other's write refused
# with Reservation Conflict while its read works, Report (extended data
# structure) listing both, keys checked, preempt, release, clear; the
# reservation (Persist Through Power Loss on) kept across a blockd stop
# and across a kill -9. Then the iSCSI interplay of docs/nvme.md: a device
# is exported over iSCSI or NVMe-oF, not both, and each API refuses the
# second export with an error naming the first.
. "$(dirname "$0")/lib.sh"
need jq
blockd_start
NVME_PORT=$(free_port)
DB=$STATE/blockd.db

call() { blockctl call "$@" || fail "API call $1 failed"; }

blockctl volume create demo/r1 --size 16M >/dev/null || fail "volume create r1"
SUB=$(call nvmet.subsys.create '{"name": "resv", "subnqn": "nqn.2026-01.org.blockd:resv", "allow_any_host": true}' | jq .id)
NS=$(call nvmet.namespace.create "{\"subsys_id\": $SUB, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/r1\", \"nsid\": 1}" | jq .id)
PORT=$(call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $NVME_PORT}" | jq .id)
call nvmet.port_subsys.create "{\"port_id\": $PORT, \"subsys_id\": $SUB}" >/dev/null

wait_port() {
    local i
    for i in $(seq 1 200); do
        (exec 3<>"/dev/tcp/127.0.0.1/$NVME_PORT") 2>/dev/null && return 0
        sleep 0.1
    done
    fail "NVMe port $NVME_PORT does not listen"
}
wait_port

# Each phase runs the same preamble: two hosts, A and B, with fixed
# identities (the reservation must know them again after a restart).
PRE='
import struct, sys
import nvmetcp as n
port = int(sys.argv[1])
SUB = "nqn.2026-01.org.blockd:resv"
HA, HB = bytes([0xA1] * 16), bytes([0xB2] * 16)
KA, KB = 0xAAAA0001, 0xBBBB0002
WE, EA = 1, 2
def host(nqn, hid):
    return n.Controller("127.0.0.1", port, SUB, hostnqn=nqn, hostid=hid).connect(io_queues=1)
a = host("nqn.2026-01.org.blockd:host-a", HA)
b = host("nqn.2026-01.org.blockd:host-b", HB)
BS = n.parse_id_ns(a.identify(0, 1))["block_size"]
DATA = b"r" * BS
def report(c=a):
    st, rep = c.resv_report(1)
    assert st == n.SC_SUCCESS, hex(st)
    return rep
def regs(rep):
    return {r["hostid"]: (r["key"], r["holds"]) for r in rep["regs"]}
def write(c):
    return c.write(1, 0, DATA, bs=BS, check=False)
def read(c):
    return c.read(1, 0, 1, bs=BS, check=False)[0]
'

/usr/bin/python3 - "$NVME_PORT" <<PY || fail "reservation commands"
$PRE
ctrl = n.parse_id_ctrl(a.identify(1))
ns = n.parse_id_ns(a.identify(0, 1))
assert ctrl["oncs"] & (1 << 5), hex(ctrl["oncs"])
assert ctrl["ctratt"] & 1, "CTRATT: 128-bit Host Identifier"
assert ns["rescap"] == 0xFF and ns["nmic"] & 1, ns
# Host Identifier: the 128-bit one of Connect; only the extended form.
res, hid = a.get_features(0x81, cdw11=1, length=16)
assert hid == HA, hid.hex()
assert a.get_features(0x81, cdw11=0, length=16, check=False)[0] == n.SC_INVALID_FIELD
assert a.set_features(0x81, 1, check=False)[0] == n.SC_CMD_SEQ
print("ok  ONCS, RESCAP, NMIC, Host Identifier")

# Register both; PTPL on (CPTPL 11b) so that the state outlives a restart.
assert a.resv_register(1, KA, cptpl=3) == n.SC_SUCCESS
assert b.resv_register(1, KB) == n.SC_SUCCESS
assert a.resv_register(1, KA) == n.SC_SUCCESS           # the same key again: fine
assert a.resv_register(1, 0x1234) == n.SC_RESV_CONFLICT   # another key: conflict
assert a.resv_register(1, 0, crkey=0x999, action=1) == n.SC_RESV_CONFLICT  # wrong CRKEY
assert a.resv_register(1, KA, cptpl=1) == n.SC_INVALID_FIELD  # CPTPL 01b is reserved
rep = report()
assert rep["regctl"] == 2 and rep["rtype"] == 0 and rep["ptpls"] == 1, rep
assert regs(rep) == {HA: (KA, False), HB: (KB, False)}, rep
assert a.get_features(0x83, nsid=1) & 1 == 1
# Report without the extended structure: our Host Identifiers are 128-bit.
assert a.resv_report(1, eds=False)[0] == n.SC_HOST_ID_INCONSISTENT
print("ok  two hosts registered, Report lists both")

# A takes Write Exclusive: B reads, B's write is refused, A writes.
assert a.resv_acquire(1, KA, WE) == n.SC_SUCCESS
assert a.resv_acquire(1, KA, WE) == n.SC_SUCCESS           # again: no change
assert b.resv_acquire(1, KB, WE) == n.SC_RESV_CONFLICT     # held by A
assert b.resv_acquire(1, 0x77, WE) == n.SC_RESV_CONFLICT   # wrong key
assert a.resv_acquire(1, KA, 7) == n.SC_INVALID_FIELD      # no such type
assert write(b) == n.SC_RESV_CONFLICT
assert read(b) == n.SC_SUCCESS
assert write(a) == n.SC_SUCCESS
rep = report(b)
assert rep["rtype"] == WE and regs(rep) == {HA: (KA, True), HB: (KB, False)}, rep
# A host that is not registered at all reads too, and cannot write.
c = host("nqn.2026-01.org.blockd:host-c", bytes([0xC3] * 16))
assert read(c) == n.SC_SUCCESS and write(c) == n.SC_RESV_CONFLICT
assert c.resv_release(1, 0) == n.SC_RESV_CONFLICT  # not a registrant
c.close()
print("ok  Write Exclusive: the other host reads, its write gets Reservation Conflict")
PY

# The reservation survives a stop and start.
blockd_stop
blockd_start
wait_port
/usr/bin/python3 - "$NVME_PORT" <<PY || fail "reservation after a restart"
$PRE
rep = report()
assert rep["rtype"] == WE and rep["ptpls"] == 1, rep
assert regs(rep) == {HA: (KA, True), HB: (KB, False)}, rep
assert write(b) == n.SC_RESV_CONFLICT and read(b) == n.SC_SUCCESS and write(a) == n.SC_SUCCESS
print("ok  restart: registrations and Write Exclusive kept")

# B preempts A and takes Exclusive Access: A is no longer registered, and
# may neither read nor write.
gen = rep["gen"]
assert b.resv_acquire(1, KB, EA, action=1, prkey=KA) == n.SC_SUCCESS
rep = report(b)
assert rep["rtype"] == EA and regs(rep) == {HB: (KB, True)} and rep["gen"] > gen, rep
assert read(a) == n.SC_RESV_CONFLICT and write(a) == n.SC_RESV_CONFLICT
assert write(b) == n.SC_SUCCESS
assert a.resv_register(1, KA) == n.SC_SUCCESS  # A registers again
print("ok  preempt: Exclusive Access moves to the other host")
PY

# kill -9 right after the change: it was saved before the command completed.
kill -KILL "$BLOCKD_PID"
wait "$BLOCKD_PID" 2>/dev/null || true
BLOCKD_PID=
blockd_start
wait_port
/usr/bin/python3 - "$NVME_PORT" <<PY || fail "reservation after kill -9"
$PRE
rep = report()
assert rep["rtype"] == EA and regs(rep) == {HA: (KA, False), HB: (KB, True)}, rep
assert read(a) == n.SC_RESV_CONFLICT and read(b) == n.SC_SUCCESS
print("ok  kill -9: the reservation and both registrations kept")

# Release: the wrong type is refused, a non-holder's release does nothing,
# the holder's ends it; then Clear drops every registration.
assert b.resv_release(1, KB, rtype=WE) == n.SC_INVALID_FIELD
assert a.resv_release(1, KA, rtype=EA) == n.SC_SUCCESS
assert report()["rtype"] == EA
assert b.resv_release(1, KB, rtype=EA) == n.SC_SUCCESS
rep = report()
assert rep["rtype"] == 0 and len(rep["regs"]) == 2, rep
assert write(a) == n.SC_SUCCESS and read(a) == n.SC_SUCCESS
assert a.resv_acquire(1, KA, WE) == n.SC_SUCCESS
assert a.resv_release(1, KB, action=1) == n.SC_RESV_CONFLICT  # Clear needs the own key
assert b.resv_release(1, KB, action=1) == n.SC_SUCCESS
rep = report()
assert rep["rtype"] == 0 and rep["regs"] == [], rep
assert write(b) == n.SC_SUCCESS
# Persistence off (Set Features 83h): nothing is kept any more.
assert a.resv_register(1, KA) == n.SC_SUCCESS
a.set_features(0x83, 0, nsid=1)
assert a.get_features(0x83, nsid=1) & 1 == 0
print("ok  release, clear, persistence off")
PY
blockd_stop
blockd_start
wait_port
/usr/bin/python3 - "$NVME_PORT" <<PY || fail "persistence off"
$PRE
rep = report()
assert rep["regs"] == [] and rep["ptpls"] == 0, rep
print("ok  with PTPL off a restart starts with no registrations")
PY

# Reservation notifications: log page 80h and its asynchronous event.
/usr/bin/python3 - "$NVME_PORT" <<PY || fail "reservation notifications"
$PRE
assert a.resv_register(1, KA) == 0 and b.resv_register(1, KB) == 0
b.admin.submit(n.sqe(0x0C, 4000))  # Asynchronous Event Request
assert a.resv_acquire(1, KA, WE, action=1, prkey=KB) == n.SC_SUCCESS  # B preempted
ev = b.wait_aen(4000)
assert ev & 0xFFFFFF == 0x800006, hex(ev)  # I/O command set event, log page 80h
log = b.resv_log()
assert log["type"] == 1 and log["nsid"] == 1 and log["available"] == 0 and log["count"], log
assert b.resv_log()["type"] == 0  # read: empty
assert a.resv_log()["type"] == 0  # the preempting host hears nothing
print("ok  registration preempted: event and log page 80h")
# Masked (feature 82h), a notice makes no entry; unmasked, the next does.
b.set_features(0x82, 1 << 1, nsid=0xFFFFFFFF)
assert b.get_features(0x82, nsid=0xFFFFFFFF) == 1 << 1
assert b.resv_register(1, KB) == 0
b.admin.submit(n.sqe(0x0C, 4001))
assert a.resv_acquire(1, KA, WE, action=1, prkey=KB) == n.SC_SUCCESS
assert b.resv_log()["type"] == 0, "a masked notice was logged"
b.set_features(0x82, 0, nsid=0xFFFFFFFF)
assert b.resv_register(1, KB) == 0
assert a.resv_acquire(1, KA, 3) == n.SC_SUCCESS     # WE registrants only
assert a.resv_release(1, KA, rtype=3) == n.SC_SUCCESS
assert b.wait_aen(4001) & 0xFFFFFF == 0x800006
log = b.resv_log()
assert log["type"] == 2 and log["nsid"] == 1, log  # reservation released
b.admin.submit(n.sqe(0x0C, 4002))
assert a.resv_release(1, KA, action=1) == n.SC_SUCCESS  # clear
assert b.wait_aen(4002) & 0xFFFFFF == 0x800006
assert b.resv_log()["type"] == 3  # reservation preempted
print("ok  notification mask, reservation released, reservation preempted (clear)")
PY

# The iSCSI interplay: one device, one of the two protocols.
out=$(blockctl call iscsi.extent.create '{"name": "r1", "type": "DISK", "disk": "zvol/demo/r1"}' 2>&1) &&
    fail "an iSCSI extent of a volume served over NVMe-oF was accepted: $out"
echo "$out" | grep -q "zvol/demo/r1 is exported over NVMe-oF by namespace 1 of subsystem resv" ||
    fail "iSCSI refusal does not name the namespace: $out"
blockctl volume create demo/r2 --size 16M >/dev/null || fail "volume create r2"
call iscsi.extent.create '{"name": "r2", "type": "DISK", "disk": "zvol/demo/r2"}' >/dev/null
out=$(blockctl call nvmet.namespace.create "{\"subsys_id\": $SUB, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/r2\"}" 2>&1) &&
    fail "an NVMe namespace of a volume served over iSCSI was accepted: $out"
echo "$out" | grep -q "zvol/demo/r2 is exported over iSCSI by extent r2" ||
    fail "NVMe refusal does not name the extent: $out"
# Disabled, the namespace does not count; enabling it is refused.
NS2=$(call nvmet.namespace.create "{\"subsys_id\": $SUB, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/r2\", \"enabled\": false}" | jq .id)
out=$(blockctl call nvmet.namespace.update "[$NS2, {\"enabled\": true}]" 2>&1) &&
    fail "enabling an NVMe namespace of an iSCSI-served volume was accepted: $out"
echo "$out" | grep -q "exported over iSCSI by extent r2" || fail "enable refusal: $out"
# The share shortcuts go through the same checks.
out=$(blockctl share iscsi create demo/r1 2>&1) && fail "share iscsi create of an NVMe-served volume: $out"
echo "$out" | grep -q "exported over NVMe-oF by namespace 1 of subsystem resv" ||
    fail "share iscsi refusal: $out"
out=$(blockctl share nvme create demo/r2 2>&1) && fail "share nvme create of an iSCSI-served volume: $out"
echo "$out" | grep -q "exported over iSCSI by extent r2" || fail "share nvme refusal: $out"
echo "ok  iSCSI and NVMe-oF exports of one volume refused both ways, naming the other"

# Deleting the namespace forgets its saved reservations.
/usr/bin/python3 - "$NVME_PORT" <<PY || fail "PTPL on again"
$PRE
assert a.resv_register(1, KA, cptpl=3) == n.SC_SUCCESS
PY
call nvmet.namespace.delete "$NS" >/dev/null
blockd_stop
left=$(/usr/bin/python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT count(*) FROM nvmet_resv").fetchone()[0])' "$DB") ||
    fail "cannot read $DB"
[ "$left" = 0 ] || fail "saved reservations of a deleted namespace left behind ($left)"
! grep -aE "AddressSanitizer|LeakSanitizer|runtime error" "$BLOCKD_LOG" || fail "sanitizer report"
echo "PASS: $TEST_NAME"
