#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# NVMe/TCP in a gateway group (docs/ha.md "NVMe: ANA"): members A
# (127.0.0.2, id 1) and B (127.0.0.3, id 2) serve one RBD volume.
#   - configuration: nvmet.global ana, a subsystem, its ZVOL namespace, a
#     host and the port link made through A's API appear on B (the group's
#     configuration store); each member has its own port (index 1) on its
#     own address; the namespace has the same NGUID and the subsystem the
#     same serial on both;
#   - the other way: a subsystem made through B reaches A, and its delete
#     (force) through A withdraws it from B;
#   - discovery: A's discovery log lists B's port for the subsystem too;
#   - ANA (the test host nvmetcp.py, written from the specification):
#     CMIC reports ANA; the namespace is in the ANA group of its optimized
#     member P (the image's first-ranked member, as ALUA), which reports it
#     optimized, the other (N) non-optimized; writes through P leave the
#     RBD lock with P;
#   - failover: a verifying writer (4 KiB FUA writes, each recorded once
#     acknowledged) runs through P; P gets SIGKILL; the writer goes on
#     through N (the time from the kill to its first acknowledged write
#     there is printed, not asserted); every acknowledged block reads back
#     through N; N reports the namespace optimized and an ANA change
#     notice arrives on N's admin queue.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
need python3 rbd jq
ceph_start

gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
PA=$(free_port)
PB=$(free_port)

callA() { gw_ctl A call "$@" || fail "A: API call $1 failed"; }
callB() { gw_ctl B call "$@" || fail "B: API call $1 failed"; }

# Each member: the RBD pool, its own discovery listener off (both would
# want :8009), its own port on its own address.
for m in A B; do
    gw_ctl $m call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" \
        >/dev/null || fail "pool.create on $m"
    gw_ctl $m call nvmet.global.update '{"discovery_listen": ""}' >/dev/null || fail "global on $m"
done
callA nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.2\", \"addr_trsvcid\": $PA}" >/dev/null
callB nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.3\", \"addr_trsvcid\": $PB}" >/dev/null

# The share, through A only.
NQN=nqn.2026-01.org.blockd:gwnvme
callA pool.dataset.create '{"name":"ceph/v","type":"VOLUME","volsize":67108864}' >/dev/null
callA nvmet.global.update '{"ana": true}' >/dev/null
SA=$(callA nvmet.subsys.create "{\"name\": \"gw\", \"subnqn\": \"$NQN\"}" | jq .id)
callA nvmet.namespace.create "{\"subsys_id\": $SA, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/ceph/v\", \"nsid\": 1}" >/dev/null
HA=$(callA nvmet.host.create '{"hostnqn": "nqn.2026-01.org.blockd:host-test"}' | jq .id)
callA nvmet.host_subsys.create "{\"host_id\": $HA, \"subsys_id\": $SA}" >/dev/null
PORTA=$(callA nvmet.port.query | jq '.[0].id')
callA nvmet.port_subsys.create "{\"port_id\": $PORTA, \"subsys_id\": $SA}" >/dev/null

# B gets all of it from the group.
t0=$(date +%s%N)
for i in $(seq 1 600); do
    n=$(gw_ctl B call nvmet.port_subsys.query 2>/dev/null | jq 'length' 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 1 ] && break
    sleep 0.1
done
[ "${n:-0}" -ge 1 ] || fail "B did not get the subsystem's port link from the group"
echo "nvmet.* rows made on A configured on B after $((($(date +%s%N) - t0) / 1000000)) ms"
[ "$(callB nvmet.global.config | jq .ana)" = true ] || fail "B: nvmet.global.ana is not shared"
sa=$(callA nvmet.subsys.query | jq -c '.[0] | {name, subnqn, serial}')
sb=$(callB nvmet.subsys.query | jq -c '.[0] | {name, subnqn, serial}')
[ "$sa" = "$sb" ] || fail "the subsystem differs: A $sa, B $sb"
na=$(callA nvmet.namespace.query | jq -c '.[0] | {nsid, device_path, device_uuid, device_nguid}')
nb=$(callB nvmet.namespace.query | jq -c '.[0] | {nsid, device_path, device_uuid, device_nguid}')
[ "$na" = "$nb" ] || fail "the namespace differs: A $na, B $nb"
[ "$(callB nvmet.host.query | jq -r '.[0].hostnqn')" = nqn.2026-01.org.blockd:host-test ] ||
    fail "B: the host is not shared"

# The other way, and a withdrawal: a second subsystem made through B
# reaches A (which adopts the volume); deleted through A (force: with its
# namespace and link), it leaves B.
callB pool.dataset.create '{"name":"ceph/w","type":"VOLUME","volsize":16777216}' >/dev/null
S2=$(callB nvmet.subsys.create '{"name": "gw2", "allow_any_host": true}' | jq .id)
callB nvmet.namespace.create "{\"subsys_id\": $S2, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/ceph/w\"}" >/dev/null
PORTB=$(callB nvmet.port.query | jq '.[0].id')
callB nvmet.port_subsys.create "{\"port_id\": $PORTB, \"subsys_id\": $S2}" >/dev/null
for i in $(seq 1 300); do
    [ "$(gw_ctl A call nvmet.port_subsys.query 2>/dev/null | jq 'length')" = 2 ] && break
    sleep 0.1
done
[ "$(callA nvmet.namespace.query | jq '[.[] | select(.device_path == "zvol/ceph/w")] | length')" = 1 ] ||
    fail "A did not get gw2's namespace from B"
S2A=$(callA nvmet.subsys.query | jq '.[] | select(.name == "gw2") | .id')
callA nvmet.subsys.delete "[$S2A, {\"force\": true}]" >/dev/null
for i in $(seq 1 300); do
    [ "$(gw_ctl B call nvmet.subsys.query 2>/dev/null | jq 'length')" = 1 ] && break
    sleep 0.1
done
[ "$(callB nvmet.subsys.query | jq -r '[.[].name] | join(",")')" = gw ] || fail "gw2 is still on B"
[ "$(callB nvmet.namespace.query | jq 'length')" = 1 ] || fail "gw2's namespace is still on B"
echo "ok  a subsystem made through B reaches A, and its delete through A reaches B"

for p in "127.0.0.2/$PA" "127.0.0.3/$PB"; do
    for i in $(seq 1 100); do
        (exec 3<>"/dev/tcp/$p") 2>/dev/null && break
        sleep 0.1
    done
done

export PA PB NQN GW_A_PID=${GW_PID[A]} GW_B_PID=${GW_PID[B]}
export GW_A_LOG=$(gw_dir A)/blockd.log GW_B_LOG=$(gw_dir B)/blockd.log
/usr/bin/python3 - <<'PY' || fail "NVMe ANA checks failed"
import os, signal, struct, threading, time
import nvmetcp as n

nqn = os.environ["NQN"]
addr = {"A": ("127.0.0.2", int(os.environ["PA"])), "B": ("127.0.0.3", int(os.environ["PB"]))}
pid = {"A": int(os.environ["GW_A_PID"]), "B": int(os.environ["GW_B_PID"])}
log = {"A": os.environ["GW_A_LOG"], "B": os.environ["GW_B_LOG"]}
mid = {"A": 1, "B": 2}


def wait_for(what, fn, secs=60):
    t = time.time()
    while time.time() - t < secs:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise SystemExit("never came: " + what)


# Discovery through A lists A's port and B's (the other member's).
d = n.Controller(*addr["A"], n.DISCOVERY_NQN).connect(io_queues=0)
def both_ports():
    _, entries = d.discovery_log()
    got = {(e["traddr"], int(e["trsvcid"])) for e in entries if e["subnqn"] == nqn}
    return got == {addr["A"], addr["B"]} and entries
entries = wait_for("B's port in A's discovery log", both_ports, 30)
print("ok  A's discovery log:", sorted((e["traddr"], e["trsvcid"], e["portid"]) for e in entries))
d.close()

c = {m: n.Controller(*addr[m], nqn).connect(io_queues=1) for m in "AB"}
cntlids = set()
for m in "AB":
    idc = n.parse_id_ctrl(c[m].identify(1))
    assert idc["cmic"] & 0x8, "%s: CMIC does not report ANA: %r" % (m, idc)
    assert idc["oaes"] & n.AEC_ANA_CHANGE and idc["anacap"] & 0x7 == 0x7, idc
    assert idc["nanagrpid"] >= 2 and idc["anagrpmax"] >= 2 and idc["anatt"] > 0, idc
    cntlids.add(idc["cntlid"])
assert len(cntlids) == 2, "both members gave the same CNTLID %r" % cntlids
ns = {m: n.parse_id_ns(c[m].identify(0, 1)) for m in "AB"}
assert ns["A"]["nguid"] == ns["B"]["nguid"], "NGUIDs differ"
bs = ns["A"]["block_size"]

# One member optimized, the other non-optimized, and both agree on the group.
def view():
    v = {m: n.ana_state_of(n.ana_log(c[m]), 1) for m in "AB"}
    states = sorted(s for _, s in v.values())
    if states != ["non-optimized", "optimized"] or v["A"][0] != v["B"][0]:
        return None
    return v
v = wait_for("one optimized and one non-optimized path", view, 60)
P = "A" if v["A"][1] == "optimized" else "B"
N = "B" if P == "A" else "A"
assert v[P][0] == mid[P], "the namespace's group is not its optimized member's id: %r" % v
assert ns[P]["anagrpid"] == mid[P] or n.parse_id_ns(c[P].identify(0, 1))["anagrpid"] == mid[P]
print("ok  ANA: optimized through %s (group %d), non-optimized through %s" % (P, v[P][0], N))

# The host writes through the optimized path: the RBD lock settles there.
block = lambda lba, seq: struct.pack("<QQ", lba, seq) * (bs // 16)
c[P].write(1, 0, block(0, 0), bs=bs, fua=True)
wait_for("the lock with " + P, lambda: "is now held by member %d (this member)" % mid[P]
         in open(log[P], errors="replace").read(), 30)
print("ok  the exclusive lock is held by the optimized member", P)

# ANA change notices on N, then a verifying writer through P, and kill -9 P.
c[N].set_features(0x0B, n.AEC_ANA_CHANGE)
aq = c[N].admin
aer = aq.next_cid()
aq.submit(n.sqe(0x0C, aer))
acked, inflight, switched = {}, {}, {}

def writer():
    seq, path, after = 1, P, 0
    while after < 200:
        lba = seq % 2048
        inflight[lba] = seq
        try:
            st = c[path].write(1, lba, block(lba, seq), bs=bs, fua=True, check=False)
        except OSError:  # the path died: the host's multipath takes the other one
            path = N
            continue
        if st != n.SC_SUCCESS:
            if st >> 8 == 3:  # a path error: retried on the other path
                path = N
                continue
            raise SystemExit("write status 0x%x" % st)
        acked[lba] = seq
        if path == N:
            switched.setdefault("first", time.time())
            after += 1
        seq += 1


t = threading.Thread(target=writer)
t.start()
wait_for("200 acknowledged writes", lambda: len(acked) >= 200, 60)
os.kill(pid[P], signal.SIGKILL)
t_kill = time.time()
t.join(120)
assert not t.is_alive(), "the writer is stuck"
assert "first" in switched, "no acknowledged write through %s" % N
print("FAILOVER: kill -9 of %s to the first acknowledged write through %s: %d ms "
      "(%d blocks acknowledged)" % (P, N, (switched["first"] - t_kill) * 1000, len(acked)))

# Nothing acknowledged is lost (the write in flight at the kill may or may not have landed).
for lba, seq in acked.items():
    got = struct.unpack_from("<QQ", c[N].read(1, lba, 1, bs=bs), 0)
    assert got[0] == lba and got[1] in (seq, inflight.get(lba)), \
        "lba %d: read %r, acknowledged seq %d" % (lba, got, seq)
print("ok  every acknowledged block (%d) reads back through %s" % (len(acked), N))

# The survivor reports the namespace optimized, and said so with an event.
wait_for(N + " optimized", lambda: n.ana_state_of(n.ana_log(c[N]), 1) == (mid[N], "optimized"),
         30)
aq.sock.settimeout(30)
st, res, _ = aq.wait(aer)
assert st == 0 and res & 0xFFFFFF == n.AEN_ANA_CHANGE, "AER: status 0x%x result 0x%x" % (st, res)
print("ok  %s reports the namespace optimized (group %d); ANA change notice 0x%x" %
      (N, mid[N], res & 0xFFFFFF))
c[N].close()
PY
for m in A B; do
    if kill -0 "${GW_PID[$m]}" 2>/dev/null; then gw_stop $m; else gw_kill $m; fi
done
pass "nvmet.* rows shared, discovery lists both members, ANA optimized/non-optimized, kill -9 of the optimized member: the survivor takes over with every acknowledged write, reports optimized and sends an ANA change notice"
