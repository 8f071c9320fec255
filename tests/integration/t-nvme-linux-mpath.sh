#!/usr/bin/env bash
# slow: run.sh starts it first (the throwaway Ceph cluster and a QEMU guest)
# The Linux kernel's native NVMe multipath (nvme_core multipath) against a
# two-member gateway group with ANA on (docs/ha.md "NVMe: ANA"). Members A
# (id 1) and B (id 2) serve one RBD volume, each through its own port on
# 127.0.0.1 (the only host address the guest reaches, as 10.0.2.2).
# Debian's kernel in a QEMU guest (linux-guest.sh) connects to the
# subsystem through both ports with one host NQN and host ID. Checked:
#   - the kernel builds one multipath head, /dev/nvme0n1, with two paths;
#     one path's ana_state is optimized, the other's non-optimized, and
#     the optimized one is the member that blockd reports optimized (its
#     ANA log page read with the test host nvmetcp.py);
#   - a verifying writer in the guest (numbered 4 KiB blocks of a known
#     pattern, dd with O_DIRECT, one after the other, each recorded once
#     acknowledged) runs on the head; the host kills the optimized member
#     (SIGKILL) once the guest says so; the kernel goes on through the
#     survivor, whose path turns optimized; the longest gap between two
#     acknowledged writes (the failover as the writer sees it) is printed,
#     not asserted;
#   - every acknowledged block reads back in the guest and, after the
#     guest is gone, through the survivor with nvmetcp.py;
#   - reservations with nvme-cli through the head (now the survivor's
#     path): resv-register, resv-acquire (Write Exclusive), resv-report;
#     a second host (nvmetcp.py on the host) refused with Reservation
#     Conflict while the guest holds it; the guest sees it registered,
#     releases, and the second host writes;
#   - the guest's kernel logged nothing about NVMe but what losing a path
#     causes (the lost connection, refused reconnects).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/gw-lib.sh"
. "$(dirname "$0")/linux-guest.sh"
need jq cmp
lg_need
ceph_start

gw_start A 127.0.0.2 1
gw_start B 127.0.0.3 2
PA=$(free_port)
PB=$(free_port)
NQN=nqn.2026-01.org.blockd:mpath
HOSTID=5d0f4b1e-7c1a-4b9e-8e55-1c0ffee0c0de
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID
# the host-side checks (nvmetcp.py's default host NQN)
TESTNQN=nqn.2026-01.org.blockd:host-test
NBLK=2048 # the pattern's blocks: the writer stops there at the latest

callA() { gw_ctl A call "$@" || fail "A: API call $1 failed"; }

for m in A B; do
    gw_ctl $m call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"conf\":\"$CEPH_CONF\"}}" \
        >/dev/null || fail "pool.create on $m"
    gw_ctl $m call nvmet.global.update '{"discovery_listen": ""}' >/dev/null || fail "global on $m"
done
# Both ports on 127.0.0.1 (the guest's 10.0.2.2), each member its own.
callA nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $PA}" >/dev/null
gw_ctl B call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $PB}" \
    >/dev/null || fail "port on B"

callA pool.dataset.create '{"name":"ceph/m","type":"VOLUME","volsize":67108864}' >/dev/null
callA nvmet.global.update '{"ana": true}' >/dev/null
S=$(callA nvmet.subsys.create "{\"name\": \"mpath\", \"subnqn\": \"$NQN\"}" | jq .id)
callA nvmet.namespace.create "{\"subsys_id\": $S, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/ceph/m\", \"nsid\": 1}" >/dev/null
for h in "$HOSTNQN" "$TESTNQN"; do
    H=$(callA nvmet.host.create "{\"hostnqn\": \"$h\"}" | jq .id)
    callA nvmet.host_subsys.create "{\"host_id\": $H, \"subsys_id\": $S}" >/dev/null
done
PORTA=$(callA nvmet.port.query | jq '.[0].id')
callA nvmet.port_subsys.create "{\"port_id\": $PORTA, \"subsys_id\": $S}" >/dev/null
for _ in $(seq 1 600); do
    n=$(gw_ctl B call nvmet.port_subsys.query 2>/dev/null | jq 'length' 2>/dev/null || echo 0)
    [ "${n:-0}" -ge 1 ] && break
    sleep 0.1
done
[ "${n:-0}" -ge 1 ] || fail "B did not get the subsystem's port link from the group"
for p in "$PA" "$PB"; do
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break
        sleep 0.1
    done
done

# blockd's view: the member whose ANA log reports the namespace optimized.
export PA PB NQN
cat >"$TMP/ana.py" <<'PY'
import os, time
import nvmetcp as n
ports = {"A": int(os.environ["PA"]), "B": int(os.environ["PB"])}
c = {m: n.Controller("127.0.0.1", p, os.environ["NQN"]).connect(io_queues=0)
     for m, p in ports.items()}
for _ in range(600):
    v = {m: n.ana_state_of(n.ana_log(c[m]), 1)[1] for m in c}
    if sorted(v.values()) == ["non-optimized", "optimized"]:
        print([m for m in v if v[m] == "optimized"][0])
        break
    time.sleep(0.1)
else:
    raise SystemExit("ANA states never settled: %r" % v)
for x in c.values():
    x.close()
PY
OPT=$(/usr/bin/python3 "$TMP/ana.py") || fail "no member reports the namespace optimized"
echo "ok  blockd: member $OPT reports the namespace optimized"
declare -A PORT_OF=([A]=$PA [B]=$PB) MEMBER_OF=([$PA]=A [$PB]=B)

head -c $((NBLK * 4096)) /dev/urandom >"$TMP/pattern.bin"
cat >"$TMP/steps.sh" <<EOF
PA=$PA PB=$PB SUBNQN=$NQN HOSTNQN=$HOSTNQN HOSTID=$HOSTID NBLK=$NBLK
EOF
lg_guest_helpers >>"$TMP/steps.sh"
cat >>"$TMP/steps.sh" <<'EOF'
instance() { echo "$1" | sed -n 's/^instance=\([0-9]*\),.*/\1/p'; }
# the path device of controller nvmeN: /sys/block/nvme<subsystem>c<N>n1
path_of() { ls -d /sys/block/nvme*c"$1"n1 2>/dev/null | head -n 1; }
ana() { cat "$(path_of "$1")/ana_state" 2>/dev/null; }
# centiseconds since boot
now() { read -r up _ </proc/uptime; echo "${up%.*}${up#*.}" | sed 's/^0*//'; }
gone() { [ ! -e "/sys/class/nvme/$1" ]; }

run() {
    want multipath Y "$(cat /sys/module/nvme_core/parameters/multipath)" || return
    ra=$(fabrics "trsvcid=$PA,nqn=$SUBNQN,hostnqn=$HOSTNQN,hostid=$HOSTID") ||
        { bad connect-a "$(cat /tmp/fabrics.err)"; return; }
    rb=$(fabrics "trsvcid=$PB,nqn=$SUBNQN,hostnqn=$HOSTNQN,hostid=$HOSTID") ||
        { bad connect-b "$(cat /tmp/fabrics.err)"; return; }
    ia=$(instance "$ra") ib=$(instance "$rb")
    ok "connected through both members' ports ($ra; $rb)"
    wait_for 30 [ -b /dev/nvme0n1 ] || { bad head "no /dev/nvme0n1"; return; }
    wait_for 30 [ -n "$(path_of $ia)" ] || { bad paths "no path device of nvme$ia"; return; }
    wait_for 30 [ -n "$(path_of $ib)" ] || { bad paths "no path device of nvme$ib"; return; }
    heads=$(ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$')
    want heads 1 "$heads" || return
    ctrls=$(ls /sys/class/nvme-subsystem/nvme-subsys*/ | grep -c '^nvme[0-9]*$')
    want subsystem-controllers 2 "$ctrls" || return
    ok "one multipath head, /dev/nvme0n1, one subsystem with two controllers, paths: $(ls /sys/block | grep 'c[0-9]*n1$' | tr '\n' ' ')"
    both() { [ "$(ana $ia)/$(ana $ib)" = optimized/non-optimized ] ||
        [ "$(ana $ia)/$(ana $ib)" = non-optimized/optimized ]; }
    wait_for 60 both || { bad ana "ana_state: nvme$ia $(ana $ia), nvme$ib $(ana $ib)"; return; }
    if [ "$(ana $ia)" = optimized ]; then
        io=$ia po=$PA isv=$ib psv=$PB
    else
        io=$ib po=$PB isv=$ia psv=$PA
    fi
    n=$(ls /sys/class/nvme-subsystem/nvme-subsys*/nvme*/nvme*c*n1/ana_state | wc -l)
    want ana-files 2 "$n" || return
    ok "ana_state: optimized through port $po (nvme$io), non-optimized through port $psv (nvme$isv)"
    host "optimized $po"

    # The writer: block i of the pattern to block i, one dd each.
    i=0 last=$(now) gap=0 gapat=0 lost=0 after=-1 t0=
    while [ "$i" -lt "$NBLK" ]; do
        dd if=/data/pattern.bin of=/dev/nvme0n1 bs=4096 skip=$i seek=$i count=1 \
            oflag=direct conv=notrunc 2>/tmp/dd.err ||
            { bad write "block $i: $(cat /tmp/dd.err)"; return; }
        t=$(now)
        [ $((t - last)) -le "$gap" ] || { gap=$((t - last)) gapat=$i; }
        last=$t
        i=$((i + 1))
        [ "$i" = 64 ] && { host kill; t0=$t; }
        [ -n "$t0" ] || continue
        [ "$lost" = 1 ] || grep -qx live "/sys/class/nvme/nvme$io/state" || lost=1
        if [ "$after" -lt 0 ]; then
            [ "$lost" = 1 ] && [ "$(ana $isv)" = optimized ] && after=0
        else
            after=$((after + 1))
            [ "$after" -lt 64 ] || break
        fi
        [ $((t - t0)) -lt 18000 ] ||
            { bad failover "after 180 s: nvme$io $(cat /sys/class/nvme/nvme$io/state), survivor $(ana $isv)"; return; }
    done
    [ "$after" -ge 64 ] || { bad failover "the pattern's end before failing over (lost $lost, survivor $(ana $isv))"; return; }
    ok "failover: nvme$io $(cat /sys/class/nvme/nvme$io/state), the survivor's path (nvme$isv) optimized"
    echo "LGUEST lost nvme$io"
    echo "LGUEST acked $i"
    echo "LGUEST gap $gap $gapat"
    dd if=/dev/nvme0n1 of=/tmp/back.bin bs=4096 count=$i iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    dd if=/data/pattern.bin of=/tmp/want.bin bs=4096 count=$i 2>/dev/null
    cmp /tmp/want.bin /tmp/back.bin || { bad readback "acknowledged blocks differ"; return; }
    ok "all $i acknowledged blocks read back through the head"

    # Reservations through the head with nvme-cli (the survivor's path);
    # the host's test initiator is a second host.
    K=0xb10cd
    rsv() { out=$(nvme "$@" /dev/nvme0n1 --namespace-id=1 2>&1) || { bad "$1" "$out"; return 1; }; }
    report() { nvme resv-report /dev/nvme0n1 --namespace-id=1 --eds -o json 2>/dev/null | tr -d ' \n'; }
    rsv resv-register --nrkey=$K --rrega=0 || return
    rsv resv-acquire --crkey=$K --rtype=1 --racqa=0 || return
    r=$(report)
    case $r in *'"rtype":1'*'"regctl":1'*) ;; *) bad resv-report "after acquire: $r"; return ;; esac
    dd if=/data/pattern.bin of=/dev/nvme0n1 bs=4096 count=1 oflag=direct conv=notrunc 2>/tmp/dd.err ||
        { bad resv-write "the holder's write: $(cat /tmp/dd.err)"; return; }
    ok "nvme resv-register, resv-acquire (Write Exclusive), resv-report: $r; the holder writes"
    host resv
    two() { case $(report) in *'"regctl":2'*) return 0 ;; esac; return 1; }
    wait_for 60 two || { bad resv-report "the second host never registered: $(report)"; return; }
    rsv resv-release --crkey=$K --rtype=1 --rrela=0 || return
    rsv resv-register --crkey=$K --rrega=1 || return
    r=$(report)
    case $r in *'"rtype":0'*) ;; *) bad resv-report "after release: $r"; return ;; esac
    ok "the second host seen registered; nvme resv-release, unregistered: $r"
    host released

    out=$(nvme disconnect -n "$SUBNQN" 2>&1) || { bad disconnect "$out"; return; }
    wait_for 30 gone "nvme$ia" && wait_for 30 gone "nvme$ib" ||
        { bad disconnect "controllers left: $(ls /sys/class/nvme)"; return; }
    wait_for 30 [ ! -b /dev/nvme0n1 ] || { bad disconnect "nvme0n1 still there"; return; }
    ok "nvme disconnect: both paths and the head gone"
}
run
EOF

lg_initramfs "$TMP/steps.sh" "$TMP/pattern.bin"
lg_start
echo "guest: kernel $LG_KVER, accelerator $LG_ACCEL_USED"
lg_wait_line "^LGUEST host optimized " 240
gopt=$(grep -a "^LGUEST host optimized " "$LG_LOG" | tr -d '\r' | awk '{print $4}')
P=${MEMBER_OF[$gopt]:-?}
[ "$P" = "$OPT" ] || fail "the guest's kernel finds port $gopt ($P) optimized, blockd says $OPT"
N=$([ "$P" = A ] && echo B || echo A)
echo "ok  the kernel's optimized path is member $P's, as blockd says"
lg_wait_line "^LGUEST host kill" 240
gw_kill "$P"
echo "member $P killed (SIGKILL) during the guest's writes"
export PORT=${PORT_OF[$N]}
lg_wait_line "^LGUEST host resv" 120
# The second host (nvmetcp.py) through the survivor: refused while the
# guest holds Write Exclusive, let in once it released.
export LG_LOG
/usr/bin/python3 - <<'PY' || fail "the second host and the guest's reservation"
import os, time
import nvmetcp as n
c = n.Controller("127.0.0.1", int(os.environ["PORT"]), os.environ["NQN"]).connect(io_queues=1)
blk = b"\x5a" * 4096
st = c.write(1, 4000, blk, bs=4096, check=False)
assert st == n.SC_RESV_CONFLICT, "write under the guest's reservation: status 0x%x" % st
print("ok  the second host's write refused: Reservation Conflict (0x%x)" % st)
st = c.resv_register(1, 0x5eed)
assert st == 0, "register: 0x%x" % st
for _ in range(1200):
    con = open(os.environ["LG_LOG"], errors="replace").read()
    if "LGUEST host released" in con:
        break
    if "LGUEST fail" in con or "LGUEST end" in con:
        raise SystemExit("the guest failed before releasing")
    time.sleep(0.1)
else:
    raise SystemExit("the guest never released")
st = c.write(1, 4000, blk, bs=4096, check=False)
assert st == 0, "write after the release: status 0x%x" % st
assert c.read(1, 4000, 1, bs=4096) == blk
assert c.resv_register(1, 0, crkey=0x5eed, action=1) == 0
print("ok  the guest released: the second host writes")
c.close()
PY
lg_finish 300
LOST=$(grep -a "^LGUEST lost " "$LG_LOG" | tr -d '\r' | awk '{print $3}')
acked=$(grep -a "^LGUEST acked " "$LG_LOG" | tr -d '\r' | awk '{print $3}')
read -r _ _ gap gapat < <(grep -a "^LGUEST gap " "$LG_LOG" | tr -d '\r')
echo "FAILOVER: longest gap in the guest's writer: $((gap * 10)) ms (before block $gapat; $acked blocks acknowledged)"

# Every acknowledged block, through the survivor.
export ACKED=$acked PATTERN=$TMP/pattern.bin
/usr/bin/python3 - <<'PY' || fail "the acknowledged blocks through the survivor"
import os
import nvmetcp as n
c = n.Controller("127.0.0.1", int(os.environ["PORT"]), os.environ["NQN"]).connect(io_queues=1)
want = open(os.environ["PATTERN"], "rb").read()
acked = int(os.environ["ACKED"])
for lba in range(0, acked, 16):
    nlb = min(16, acked - lba)
    got = c.read(1, lba, nlb, bs=4096)
    assert got == want[lba * 4096:(lba + nlb) * 4096], "block %d..%d differs" % (lba, lba + nlb - 1)
c.close()
PY
echo "ok  all $acked acknowledged blocks read back through $N (nvmetcp.py)"

# The guest's kernel: nothing about NVMe but what the lost path causes
# (error recovery, a keep-alive that was in flight when the path died,
# reconnects refused, and deleting the dead controller: its shutdown's
# Property Set of CC fails on the host's side, 370h Host Path Error, as it
# has no queue).
grep -a "nvme" "$LG_DIR/dmesg.txt" >"$TMP/nvme-dmesg.txt" || true
sed 's/^/    /' "$TMP/nvme-dmesg.txt"
expected="$LOST: (starting error recovery|failed nvme_keep_alive_end_io error=[0-9]+|Reconnecting in [0-9]+ seconds|failed to connect socket: -111|Failed reconnect attempt|Property Set error: 880, offset 0x14)"
if grep -aiE "error|fail|timeout|timed out|reset|invalid|warn|refused|clamping|larger" "$TMP/nvme-dmesg.txt" |
    grep -avE "$expected" >"$TMP/nvme-bad.txt"; then
    cat "$TMP/nvme-bad.txt" >&2
    fail "the guest's kernel logged NVMe errors"
fi
! grep -aE "C2HTermReq|H2CTermReq|protocol error" "$(gw_dir "$N")/blockd.log" || fail "protocol error in $N's log"
gw_stop "$N"
pass "the kernel's native multipath over two members: one head, ANA states as blockd's, kill -9 of the optimized member under a verifying writer: the survivor's path turns optimized, every acknowledged block reads back; nvme-cli reservations refuse a second host's write until released"
