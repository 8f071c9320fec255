#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# NVMe reservations in a gateway group: members A (127.0.0.2) and B
# (127.0.0.3) serve one RBD volume as namespace 1 of a subsystem made
# through A's API only (the group's configuration store gives it to B).
# Through the test host written from the specification (nvmetcp.py):
#   - host 1 registers through A, host 2 through B; Report through either
#     member lists both;
#   - host 1 takes Write Exclusive through A: host 2's write through B gets
#     Reservation Conflict at once, its read works;
#   - host 2 preempts host 1 through B (Exclusive Access): host 1's read
#     through A is refused and its controller on A gets the
#     registration-preempted notice (event, log page 80h);
#   - kill -9 A: B still enforces the reservation and changes it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
need python3 jq
ceph_start
# No fencing is exercised before the kill: a loaded machine must not fence
# a member in the middle.
GW_HEARTBEAT_TIMEOUT=30
gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
PA=$(free_port)
PB=$(free_port)
callA() { gw_ctl A call "$@" || fail "A: API call $1 failed"; }

for m in A B; do
    gw_ctl $m call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" \
        >/dev/null || fail "pool.create on $m"
    gw_ctl $m call nvmet.global.update '{"discovery_listen": ""}' >/dev/null || fail "global on $m"
done
callA nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.2\", \"addr_trsvcid\": $PA}" >/dev/null
gw_ctl B call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.3\", \"addr_trsvcid\": $PB}" >/dev/null ||
    fail "port on B"
NQN=nqn.2026-01.org.blockd:gwresv
callA pool.dataset.create '{"name":"ceph/v","type":"VOLUME","volsize":16777216}' >/dev/null
S=$(callA nvmet.subsys.create "{\"name\": \"gwresv\", \"subnqn\": \"$NQN\", \"allow_any_host\": true}" | jq .id)
callA nvmet.namespace.create "{\"subsys_id\": $S, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/ceph/v\", \"nsid\": 1}" >/dev/null
PORTA=$(callA nvmet.port.query | jq '.[0].id')
callA nvmet.port_subsys.create "{\"port_id\": $PORTA, \"subsys_id\": $S}" >/dev/null
for m in A B; do
    for _ in $(seq 1 600); do
        grep -q "NVMe reservations kept in blockd.nvme-resv." "$(gw_dir $m)/blockd.log" && break
        sleep 0.1
    done
    grep -q "NVMe reservations kept in blockd.nvme-resv." "$(gw_dir $m)/blockd.log" ||
        fail "$m does not serve the namespace with shared reservations"
done
for p in "127.0.0.2/$PA" "127.0.0.3/$PB"; do
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/$p") 2>/dev/null && break
        sleep 0.1
    done
done

PRE='
import sys, time
import nvmetcp as n
pa, pb, SUB = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
H1, H2 = bytes([0x11] * 16), bytes([0x22] * 16)
K1, K2 = 0x1111, 0x2222
def host(addr, port, nqn, hid):
    end = time.time() + 30
    while True:
        try:
            return n.Controller(addr, port, SUB, hostnqn=nqn, hostid=hid).connect()
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

/usr/bin/python3 - "$PA" "$PB" "$NQN" <<PY || fail "reservations through the group"
$PRE
a = host("127.0.0.2", pa, "nqn.2026-01.org.blockd:h1", H1)
b = host("127.0.0.3", pb, "nqn.2026-01.org.blockd:h2", H2)
bs = n.parse_id_ns(a.identify(0, 1))["block_size"]
assert n.parse_id_ns(b.identify(0, 1))["rescap"] == 0xFF
assert a.resv_register(1, K1) == n.SC_SUCCESS and b.resv_register(1, K2) == n.SC_SUCCESS
for c in (a, b):
    assert regs(report(c)) == {H1: (K1, False), H2: (K2, False)}, report(c)
print("ok  registrations through A and B, Report through each member lists both")
assert a.resv_acquire(1, K1, 1) == n.SC_SUCCESS
assert b.write(1, 0, b"x" * bs, bs=bs, check=False) == n.SC_RESV_CONFLICT
assert b.read(1, 0, 1, bs=bs, check=False)[0] == n.SC_SUCCESS
print("ok  Write Exclusive through A: the write through B is refused, its read works")
a.admin.submit(n.sqe(0x0C, 4000))
assert b.resv_acquire(1, K2, 2, action=1, prkey=K1) == n.SC_SUCCESS
assert a.read(1, 0, 1, bs=bs, check=False)[0] == n.SC_RESV_CONFLICT
assert a.wait_aen(4000) & 0xFFFFFF == 0x800006
assert a.resv_log()["type"] == 1
print("ok  preempt through B: enforced through A, whose host hears of it (log page 80h)")
PY

gw_kill A
/usr/bin/python3 - "$PA" "$PB" "$NQN" <<PY || fail "after kill -9 of A"
$PRE
b = host("127.0.0.3", pb, "nqn.2026-01.org.blockd:h2", H2)
rep = report(b)
assert rep["rtype"] == 2 and regs(rep) == {H2: (K2, True)}, rep
assert b.resv_release(1, K2, rtype=2) == n.SC_SUCCESS
assert report(b)["rtype"] == 0
print("ok  A killed: B enforces the reservation and changes it")
PY
gw_stop B
! grep -aE "AddressSanitizer|LeakSanitizer|runtime error" "$(gw_dir A)/blockd.log" "$(gw_dir B)/blockd.log" ||
    fail "sanitizer report"
echo "PASS: $TEST_NAME"
