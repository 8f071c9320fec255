#!/usr/bin/env bash
# NVMe/TCP end to end through the nvmet.* API: subsystems, namespaces,
# ports and hosts made the way TrueNAS clients make them, then the test
# initiator written from the specifications (nvmetcp.py): data written
# over NVMe reads back over NBD and the other way round, large writes
# through R2T with digests, qemu-img compare of the volume against what
# was written, the discovery log of the discovery-only listener, a refused
# host, bad PDUs (each a C2HTermReq, the other sessions untouched),
# keep-alive teardown, the session in the metrics, asynchronous events when
# a namespace is added and when the volume grows, a controller torn down
# when its subsystem is deleted, and a clean stop with a controller
# connected.
. "$(dirname "$0")/lib.sh"
need jq qemu-img nbdcopy curl
WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
METRICS="http://127.0.0.1:$WS_PORT/metrics"
KEY=$(blockctl call api_key.create '{"name":"prom"}' | jq -r .key)
NVME_PORT=$(free_port)
DISC_PORT=$(free_port)

call() { blockctl call "$@" || fail "API call $1 failed"; }

blockctl volume create demo/n1 --size 64M >/dev/null || fail "volume create n1"
blockctl volume create demo/n2 --size 16M >/dev/null || fail "volume create n2"
blockctl share nbd create demo/n1 --name n1 >/dev/null || fail "share n1 over NBD"
call nvmet.global.update "{\"discovery_listen\": \"127.0.0.1:$DISC_PORT\"}" >/dev/null
ANY=$(call nvmet.subsys.create '{"name": "any", "subnqn": "nqn.2026-01.org.blockd:any", "allow_any_host": true}' | jq .id)
ONLY=$(call nvmet.subsys.create '{"name": "only", "subnqn": "nqn.2026-01.org.blockd:only"}' | jq .id)
call nvmet.namespace.create "{\"subsys_id\": $ANY, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/n1\", \"nsid\": 1}" >/dev/null
PORT=$(call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $NVME_PORT}" | jq .id)
call nvmet.port_subsys.create "{\"port_id\": $PORT, \"subsys_id\": $ANY}" >/dev/null
call nvmet.port_subsys.create "{\"port_id\": $PORT, \"subsys_id\": $ONLY}" >/dev/null
HOST=$(call nvmet.host.create '{"hostnqn": "nqn.2026-01.org.blockd:host-ok"}' | jq .id)
LINK=$(call nvmet.host_subsys.create "{\"host_id\": $HOST, \"subsys_id\": $ONLY}" | jq .id)

# Wait for the port to listen.
for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NVME_PORT") 2>/dev/null && break
    sleep 0.1
done

export NBD_PORT BLOCKCTL_BIN SOCK ANY METRICS KEY BLOCKD_LOG HOST ONLY LINK
head -c $((8 << 20)) /dev/urandom >"$TMP/ref.img"
/usr/bin/python3 - "$NVME_PORT" "$DISC_PORT" "$TMP" <<'PY' || fail "NVMe checks failed"
import json, os, struct, subprocess, sys
import nvmetcp as n
import nvme_engine_checks as k
port, disc, tmp = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ref = open(tmp + "/ref.img", "rb").read()

# Write 8 MiB over NVMe (R2T, digests on), flush, then read it over NBD.
c = n.Controller("127.0.0.1", port, k.ANY, hdgst=True, ddgst=True).connect(io_queues=2)
ns = n.parse_id_ns(c.identify(0, 1))
bs = ns["block_size"]
assert ns["nsze"] * bs == 64 << 20, ns
# 16 KiB volume blocks: 4 KiB LBAs, the volume's block as write granularity.
idns = c.identify(0, 1)
assert bs == 4096 and idns[24] & 0x10 and struct.unpack_from("<H", idns, 64)[0] == 3, ns
for i, off in enumerate(range(0, len(ref), 1 << 20)):
    c.write(1, off // bs, ref[off:off + (1 << 20)], bs=bs, inline=False, q=c.ioq(i))
c.flush(1)
subprocess.run(["qemu-img", "compare", "-f", "raw", "-F", "raw", tmp + "/ref.img",
                "nbd://127.0.0.1:%s/n1" % os.environ["NBD_PORT"]], check=True,
               stdout=subprocess.DEVNULL)
print("ok  NVMe writes read back over NBD (qemu-img compare)")

# Write over NBD, read over NVMe.
other = os.urandom(1 << 20)
open(tmp + "/other.img", "wb").write(other)
subprocess.run(["nbdcopy", "--destination-is-zero", tmp + "/other.img",
                "nbd://127.0.0.1:%s/n1" % os.environ["NBD_PORT"]], check=True)
assert c.read(1, 0, (1 << 20) // bs, bs=bs) == other, "NBD write not seen over NVMe"
print("ok  NBD writes read back over NVMe")

# Discovery: the discovery-only listener lists the open subsystem on the port.
d = n.Controller("127.0.0.1", disc, n.DISCOVERY_NQN).connect(io_queues=0)
gen, entries = d.discovery_log()
assert [e["subnqn"] for e in entries] == [k.ANY], entries
assert entries[0]["trsvcid"] == str(port) and entries[0]["traddr"] == "127.0.0.1", entries
d.close()
d = n.Controller("127.0.0.1", disc, n.DISCOVERY_NQN, hostnqn=k.HOST_OK).connect(io_queues=0)
gen2, entries = d.discovery_log()
assert sorted(e["subnqn"] for e in entries) == [k.ANY, k.ONLY], entries
d.close()
print("ok  discovery log")

# A host not allowed on ONLY is refused; the allowed one gets in.
try:
    n.Controller("127.0.0.1", port, k.ONLY).connect()
    raise AssertionError("refused host connected")
except n.NvmeError as e:
    assert e.status == n.SC_CONNECT_INVALID_HOST, hex(e.status)
n.Controller("127.0.0.1", port, k.ONLY, hostnqn=k.HOST_OK).connect().close()
print("ok  refused host")

# The controller counts as a session in the metrics (discovery ones do not).
m = subprocess.run(["curl", "-sf", "-H", "Authorization: Bearer " + os.environ["KEY"],
                    os.environ["METRICS"]], check=True, capture_output=True, text=True).stdout
want = 'blockd_sessions{protocol="nvme",target="%s",peer="127.0.0.1"} 1' % k.ANY
assert want in m, [l for l in m.splitlines() if "blockd_sessions" in l]
w = [l for l in m.splitlines()
     if l.startswith('blockd_volume_write_bytes_total{volume="demo/n1",protocol="nvme"}')]
assert w and int(float(w[0].split()[-1])) >= 8 << 20, w
# and in nvmet.global.sessions, as TrueNAS lists them (filterable)
out = subprocess.run(["bash", "-c", '"$BLOCKCTL_BIN" --socket "$SOCK" call nvmet.global.sessions '
                      '\'[[["hostnqn", "!=", "x"], ["discovery", "=", false]]]\''],
                     check=True, capture_output=True, text=True).stdout
rows = json.loads(out)
assert rows and all(r["host_traddr"] == "127.0.0.1" and r["subsys_id"] and r["port_id"] and
                    r["ctrl"] > 0 and r["hostnqn"] for r in rows), rows
out = subprocess.run(["bash", "-c", '"$BLOCKCTL_BIN" --socket "$SOCK" session list'],
                     check=True, capture_output=True, text=True).stdout
assert any(l.split()[:1] == ["nvme"] and "@127.0.0.1" in l and "cntlid=" in l
           for l in out.splitlines()), out
print("ok  session and volume I/O in the metrics, sessions in nvmet.global.sessions and "
      "blockctl session list")

# Bad PDUs on blockd's own port: each a C2HTermReq, logged; the others' data intact.
env = k.Env("127.0.0.1", port, disc, os.environ["BLOCKD_LOG"])
k.check_bad_pdus(env, bs=bs)
print("ok  bad PDUs")
k.check_keepalive(env)
print("ok  keep-alive teardown")

# ANA on one daemon (the subsystem's ana; off until now): one group,
# optimized, holding every namespace.
assert not n.parse_id_ctrl(c.identify(1))["cmic"] & 0x8, "ANA reported while ana is off"
subprocess.run(["bash", "-c", 'blockctl() { "$BLOCKCTL_BIN" --socket "$SOCK" "$@"; }; '
                'blockctl call nvmet.subsys.update "[$ANY, {\\"ana\\": true}]"'],
               check=True, stdout=subprocess.DEVNULL)
a = n.Controller("127.0.0.1", port, k.ANY).connect(io_queues=0)
idc = n.parse_id_ctrl(a.identify(1))
assert idc["cmic"] & 0x8 and idc["nanagrpid"] == 1 and idc["anagrpmax"] == 1, idc
assert n.parse_id_ns(a.identify(0, 1))["anagrpid"] == 1
log = n.ana_log(a)
assert [(g["grpid"], g["state"], g["nsids"]) for g in log["groups"]] == [(1, "optimized", [1])], log
assert n.ana_log(a, rgo=True)["groups"][0]["nsids"] == [], "RGO: groups only"
a.close()
print("ok  ANA on one daemon: group 1 optimized")

# Keep the controller for the next steps (AEN, delete).
c.set_features(0x0B, 1 << 8)
c.admin.submit(n.sqe(0x0C, 4000))
# The configuration gains a namespace: the held AER completes.
subprocess.run(["bash", "-c", 'blockctl() { "$BLOCKCTL_BIN" --socket "$SOCK" "$@"; }; '
                'blockctl call nvmet.namespace.create "{\\"subsys_id\\": $ANY, '
                '\\"device_type\\": \\"ZVOL\\", \\"device_path\\": \\"zvol/demo/n2\\", \\"nsid\\": 2}"'],
               check=True, stdout=subprocess.DEVNULL)
c.admin.sock.settimeout(15)
t, flags, hdr, _ = c.admin.recv_pdu()
res, _, _, cid, sf = struct.unpack_from("<QHHHH", hdr, 8)
assert t == n.RSP and cid == 4000 and res & 0xFFFFFF == 0x040002, (t, cid, hex(res))
assert struct.unpack_from("<I", c.get_log_page(0x04, 4096), 0)[0] == 2
assert struct.unpack("<2I", c.identify(2)[:8]) == (1, 2)
print("ok  asynchronous event for the namespace added")

# The volume grows: another event, and Identify shows the new size.
c.admin.submit(n.sqe(0x0C, 4001))
subprocess.run(["bash", "-c", '"$BLOCKCTL_BIN" --socket "$SOCK" volume resize demo/n1 --size 80M'],
               check=True, stdout=subprocess.DEVNULL)
t, flags, hdr, _ = c.admin.recv_pdu()
res, _, _, cid, sf = struct.unpack_from("<QHHHH", hdr, 8)
assert t == n.RSP and cid == 4001 and res & 0xFFFFFF == 0x040002, (t, cid, hex(res))
assert struct.unpack_from("<I", c.get_log_page(0x04, 4096), 0)[0] == 1
assert n.parse_id_ns(c.identify(0, 1))["nsze"] * bs == 80 << 20
print("ok  asynchronous event for the volume resized")

subprocess.run(["bash", "-c", 'blockctl() { "$BLOCKCTL_BIN" --socket "$SOCK" "$@"; }; '
                'blockctl call nvmet.subsys.delete "[$ANY, {\\"force\\": true}]"'],
               check=True, stdout=subprocess.DEVNULL)
try:
    closed = c.admin.sock.recv(1) == b""
except ConnectionResetError:
    closed = True
assert closed, "controller survived its subsystem's deletion"
print("ok  subsystem deleted: controller torn down")

# A host taken off a subsystem loses its controller; linked again, it is back.
c = n.Controller("127.0.0.1", port, k.ONLY, hostnqn=k.HOST_OK).connect(io_queues=1)
subprocess.run(["bash", "-c", '"$BLOCKCTL_BIN" --socket "$SOCK" call nvmet.host_subsys.delete $LINK'],
               check=True, stdout=subprocess.DEVNULL)
c.admin.sock.settimeout(15)
try:
    closed = c.admin.sock.recv(1) == b""
except ConnectionResetError:
    closed = True
assert closed, "controller of a host no longer allowed still open"
c.close()
subprocess.run(["bash", "-c", '"$BLOCKCTL_BIN" --socket "$SOCK" call nvmet.host_subsys.create '
                '"{\\"host_id\\": $HOST, \\"subsys_id\\": $ONLY}"'],
               check=True, stdout=subprocess.DEVNULL)
print("ok  host taken off the subsystem: controller torn down")
PY
grep -q "Connect of host nqn.2026-01.org.blockd:host-test refused" "$BLOCKD_LOG" ||
    fail "refused host not logged"
grep -q "subsystem removed from the configuration" "$BLOCKD_LOG" || fail "teardown not logged"
grep -q "host no longer allowed on the subsystem" "$BLOCKD_LOG" || fail "host removal not logged"
# A clean stop (exit status 0, no leak in an ASan build) with a controller
# and its I/O queue still connected.
/usr/bin/python3 - "$NVME_PORT" >"$TMP/held.out" 2>&1 <<'PY' &
import sys, time
import nvmetcp as n, nvme_engine_checks as k
c = n.Controller("127.0.0.1", int(sys.argv[1]), k.ONLY, hostnqn=k.HOST_OK).connect(io_queues=1)
print("up", flush=True)
time.sleep(60)
PY
HELD=$!
BG_PIDS+=($HELD)
for i in $(seq 1 100); do grep -q up "$TMP/held.out" && break; sleep 0.1; done
grep -q up "$TMP/held.out" || fail "no controller to hold: $(cat "$TMP/held.out")"
blockd_stop
kill $HELD 2>/dev/null || true
wait $HELD 2>/dev/null || true
! grep -aE "AddressSanitizer|LeakSanitizer|runtime error" "$BLOCKD_LOG" || fail "sanitizer report"
echo "PASS: $TEST_NAME"
