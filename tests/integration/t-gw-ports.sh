#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Each gateway member presents its own SCSI target port (docs/ha.md
# "Identity"): through members A (--gateway-id 1) and B (id 2), serving the
# same RBD volume, the target port's name in VPD 0x83 (SCSI name string,
# "IQN,t,0xTPGT"), the TPGT at login and in SendTargets differ (1001 and
# 2001: 1000 x id + the portal's tag), as do the relative target port ids
# and the target port groups; the LU designator is the same (one device);
# after a restart B presents the same port again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
need python3 iscsi-ls
ceph_start

gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
gw_wait_state A B ONLINE 5 >/dev/null
gw_share A false $((16 << 20))
gw_share B true $((16 << 20))
BASE=$(gw_ctl A call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
IQN=$BASE:ceph:v

# port_of MEMBER: "TPGT TARGET_PORT_NAME REL_PORT TPG LU_NAA" through it
port_of() {
    timeout 60 python3 - "${GW_ADDR[$1]}" "${GW_PORT[$1]}" "$IQN" <<'PY'
import struct, sys
from iscsiraw import Session
host, port, iqn = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = Session(port, iqn, host=host)
s.clear_unit_attention()
st, sense, d = s.cmd(bytes([0x12, 0x01, 0x83, 0x01, 0x00, 0x00]), data_in_len=256)
assert st == 0, (st, sense)
n = struct.unpack(">H", d[2:4])[0]
name = rel = tpg = naa = None
off = 4
while off + 4 <= 4 + n and off + 4 <= len(d):
    assoc, typ, ln = (d[off + 1] >> 4) & 3, d[off + 1] & 0xF, d[off + 3]
    v = d[off + 4:off + 4 + ln]
    if assoc == 1 and typ == 8:
        name = v.rstrip(b"\0").decode()
    elif assoc == 1 and typ == 4:
        rel = struct.unpack(">H", v[2:4])[0]
    elif assoc == 1 and typ == 5:
        tpg = struct.unpack(">H", v[2:4])[0]
    elif assoc == 0 and typ == 3:
        naa = v.hex()
    off += 4 + ln
s.close()
print(s.login_keys["TargetPortalGroupTag"], name, rel, tpg, naa)
PY
}

read -r tag_a name_a rel_a tpg_a naa_a <<<"$(port_of A)" || fail "VPD 0x83 through A"
read -r tag_b name_b rel_b tpg_b naa_b <<<"$(port_of B)" || fail "VPD 0x83 through B"
echo "A: TPGT $tag_a, $name_a, relative port $rel_a, group $tpg_a"
echo "B: TPGT $tag_b, $name_b, relative port $rel_b, group $tpg_b"
[ "$tag_a" = 1001 ] && [ "$tag_b" = 2001 ] || fail "login TPGT $tag_a / $tag_b, want 1001 / 2001"
[ "$name_a" = "$IQN,t,0x03e9" ] || fail "target port name through A: $name_a"
[ "$name_b" = "$IQN,t,0x07d1" ] || fail "target port name through B: $name_b"
[ "$rel_a" = 1 ] && [ "$rel_b" = 2 ] || fail "relative target port ids $rel_a / $rel_b, want 1 / 2"
[ "$tpg_a" = 1 ] && [ "$tpg_b" = 2 ] || fail "target port groups $tpg_a / $tpg_b, want 1 / 2"
[ -n "$naa_a" ] && [ "$naa_a" = "$naa_b" ] || fail "LU designators differ: $naa_a / $naa_b"

# SendTargets answers each member's own tag
st_a=$(timeout 30 iscsi-ls "iscsi://${GW_ADDR[A]}:${GW_PORT[A]}" 2>&1)
st_b=$(timeout 30 iscsi-ls "iscsi://${GW_ADDR[B]}:${GW_PORT[B]}" 2>&1)
grep -q "Target:$IQN Portal:${GW_ADDR[A]}:${GW_PORT[A]},1001" <<<"$st_a" ||
    fail "SendTargets through A: $st_a"
grep -q "Target:$IQN Portal:${GW_ADDR[B]}:${GW_PORT[B]},2001" <<<"$st_b" ||
    fail "SendTargets through B: $st_b"

# stable across a restart
gw_stop B
gw_start B 127.0.0.3 2
for _ in $(seq 1 100); do
    grep -q "reservations shared through" <(tail -n 50 "$(gw_dir B)/blockd.log") && break
    sleep 0.1
done
read -r tag_b2 name_b2 rel_b2 _ _ <<<"$(port_of B)" || fail "VPD 0x83 through B after a restart"
[ "$tag_b2 $name_b2 $rel_b2" = "$tag_b $name_b $rel_b" ] ||
    fail "B's port changed across a restart: $tag_b2 $name_b2 $rel_b2"
gw_stop B
gw_stop A
pass "two members, two target ports: $name_a, $name_b"
