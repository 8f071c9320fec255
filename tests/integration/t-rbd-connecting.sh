#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# An RBD pool still connecting when blockd starts (docs/
# api-datasets.md "Start-up"): the pool's conf names a monitor that does
# not answer (a copy of the test cluster's conf with another port), then
# the right one again, without a restart.
#  - while the pool is UNAVAIL ("connecting"), its LU exists: REPORT LUNS
#    lists LUN 0, a standard INQUIRY answers (direct access), TEST UNIT
#    READY, READ, WRITE and READ CAPACITY get NOT READY, LOGICAL UNIT IS IN
#    PROCESS OF BECOMING READY (02/04/01), not LOGICAL UNIT NOT SUPPORTED;
#  - the NBD export is listed (NBD_OPT_LIST), and a connection to it waits
#    5 s for the pool, then is refused with the reason (qemu-img prints
#    it), never served as an empty or zero-sized disk;
#  - once the conf is fixed the pool comes ONLINE by itself, and the same
#    iSCSI session reads back what was written before the restart (after
#    a unit attention), writes, and the NBD export serves.
# The conf lives where an operator keeps one: a directory blockd is told
# about with --allow-dir (blockd reads mon_host from it, librados never
# reads it).
. "$(dirname "$0")/lib.sh"
need python3 nbdinfo qemu-io qemu-img
/usr/bin/python3 -c 'import nbd' 2>/dev/null || fail "python3-libnbd missing"
ceph_start
ETC=$TMP/etc-ceph
mkdir -m 0755 "$ETC"
cp "$CEPH_CONF" "$ETC/pool.conf"
blockd_start --allow-dir "$ETC"
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$ETC/pool.conf\"}}" \
    >/dev/null || fail "pool.create of the RBD pool"
blockctl volume create ceph/v --size 64M >/dev/null || fail "volume create"
blockctl share iscsi create ceph/v >/dev/null || fail "share iscsi create"
blockctl share nbd create ceph/v --name v >/dev/null || fail "share nbd create"
U=nbd://127.0.0.1:$NBD_PORT/v
qemu-io -f raw "$U" -c "write -P 0xa7 0 1M" -c flush >/dev/null || fail "write of the pattern"
BASE=$(blockctl call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
IQN=$BASE:ceph:v
blockd_stop

# The monitor the conf names does not answer (nothing listens there).
dead=$(free_port)
sed -i -E "s/^([[:space:]]*mon[ _]host[[:space:]]*=).*/\1 [v2:127.0.0.1:$dead,v1:127.0.0.1:$dead]/" "$ETC/pool.conf"
grep -q "127.0.0.1:$dead" "$ETC/pool.conf" || fail "the conf has no mon host line to change: $(cat "$ETC/pool.conf")"
blockd_start --allow-dir "$ETC"
status() { blockctl call pool.query '[[["name","=","ceph"]]]' | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["status"])'; }
[ "$(status)" = UNAVAIL ] || fail "the pool is $(status) with a dead monitor"

cat >"$TMP/ready.py" <<'PY'
import struct, sys, time, iscsiraw as R
port, iqn = int(sys.argv[1]), sys.argv[2]
s = R.Session(port, iqn)
s.clear_unit_attention()
def check(name, cdb, data_out=b"", data_in_len=0):
    st, sense, data = s.cmd(cdb, data_out, data_in_len)
    return st, R.sense_key(sense), R.asc_ascq(sense), data
# REPORT LUNS lists LUN 0
st, _, _, d = check("REPORT LUNS", bytes([0xa0, 0, 0, 0, 0, 0]) + struct.pack(">I", 64) + bytes(2),
                    data_in_len=64)
assert st == 0 and struct.unpack(">I", d[:4])[0] >= 8 and d[8:16] == bytes(8), \
    "REPORT LUNS: status %d data %s" % (st, d.hex())
st, _, _, d = check("INQUIRY", bytes([0x12, 0, 0, 0, 96, 0]), data_in_len=96)
assert st == 0 and d[0] & 0x1f == 0, "standard INQUIRY: status %d data %s" % (st, d[:8].hex())
for name, cdb, dout, din in (
        ("TEST UNIT READY", bytes(6), b"", 0),
        ("READ CAPACITY(16)", bytes([0x9e, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2), b"", 32),
        ("READ(16)", R.read16(0, 8), b"", 4096),
        ("WRITE(16)", R.write16(4096, 8), b"\x55" * 4096, 0)):
    st, key, asc, _ = check(name, cdb, dout, din)
    assert (st, key, asc) == (2, 2, (4, 1)), \
        "%s while the pool connects: status %d sense key %s asc %s" % (name, st, key, asc)
print("becoming-ready", flush=True)
sys.stdin.readline()  # the conf is fixed
t0 = time.monotonic()
while True:
    st, key, asc, _ = check("TEST UNIT READY", bytes(6))
    if st == 0:
        break
    assert (st, key) == (2, 6) or (st, key, asc) == (2, 2, (4, 1)), \
        "TEST UNIT READY while becoming ready: status %d key %s asc %s" % (st, key, asc)
    assert time.monotonic() - t0 < 60, "not ready after 60 s"
    time.sleep(0.2)
st, key, asc, d = check("READ(16)", R.read16(0, 8), b"", 4096)
assert st == 0 and d == b"\xa7" * 4096, "READ when ready: status %d %s %s" % (st, key, asc)
st, key, asc, _ = check("WRITE(16)", R.write16(4096, 8), b"\x55" * 4096)
assert st == 0, "WRITE when ready: status %d %s %s" % (st, key, asc)
print("ready after %.1f s" % (time.monotonic() - t0), flush=True)
PY
coproc RD { exec timeout 200 python3 "$TMP/ready.py" "$ISCSI_PORT" "$IQN" 2>&1; }
BG_PIDS+=("$RD_PID")
read -r -t 60 line <&"${RD[0]}" && [ "$line" = becoming-ready ] || fail "iSCSI while connecting: $line"

# NBD_OPT_LIST names it (libnbd's option mode; nbdinfo --list also asks
# each export's details, which wait and then fail like a connection)
listed=$(/usr/bin/python3 - "nbd://127.0.0.1:$NBD_PORT" <<'PY'
import sys, nbd
h = nbd.NBD()
h.set_opt_mode(True)
h.connect_uri(sys.argv[1])
names = []
h.opt_list(lambda name, desc: names.append(name) or 0)
h.opt_abort()
print(" ".join(names))
PY
) || fail "NBD_OPT_LIST while the pool connects: $listed"
[ "$listed" = v ] || fail "the export is not listed while the pool connects: '$listed'"
# a connection waits (bounded), then gets the reason (qemu prints the
# server's message; libnbd only its own text for NBD_REP_ERR_UNKNOWN)
t0=$(date +%s)
out=$(timeout 60 qemu-img info "$U" 2>&1) && fail "the export served while its pool connects: $out"
echo "NBD while connecting, after $(($(date +%s) - t0)) s: $out"
grep -q "export 'v' is not ready: the pool of ceph/v is not reachable yet" <<<"$out" ||
    fail "qemu-img does not show why: $out"
[ $(($(date +%s) - t0)) -ge 4 ] || fail "the connection did not wait for the pool"

cp "$CEPH_CONF" "$ETC/pool.conf"
echo go >&"${RD[1]}"
read -r -t 120 line <&"${RD[0]}" || line="no answer"
echo "iSCSI: $line"
[ "${line%% *}" = ready ] || fail "iSCSI after the pool came online: $line"
[ "$(status)" = ONLINE ] || fail "the pool is $(status)"
[ "$(nbdinfo --size "$U")" = 67108864 ] || fail "the export does not serve after the pool came online"
qemu-io -f raw "$U" -c "read -P 0xa7 0 1M" | grep -q "read 1048576" || fail "pattern over NBD"
pass "LU becoming ready (02/04/01) while the pool connects, ready without a restart ($line)"
