#!/usr/bin/env bash
# slow: run.sh starts it first (30 s or more: the guest's CPU is emulated where KVM cannot boot it)
# The Linux kernel's NVMe/TCP host against blockd: Debian's kernel boots in
# a small QEMU guest (linux-guest.sh, docs/testing.md) and connects through
# /dev/nvme-fabrics and nvme-cli to a volume shared with the nvmet.* API.
# Checked in the guest: a host not allowed is refused; the controller's
# sysfs attributes (model, subsystem NQN, transport, state) and the
# namespace's size; a pattern written with O_DIRECT, flushed, read back;
# data written over NBD read by the kernel; Write Zeroes and a discard;
# the discovery log through nvme-cli and through the kernel's own
# discovery controller; the volume resized on the host and the new size in
# sysfs (Namespace Attribute Changed event, rescan); the controller kept
# past the keep-alive timeout; a second connection with header and data
# digests (nvme connect) reading the pattern; disconnects; DH-HMAC-CHAP (a
# wrong key, then SHA-384 with ffdhe2048 both ways). Checked on the host:
# the pattern is on the volume (over NBD), the sessions are gone, blockd
# logged no protocol error and the guest's kernel no NVMe error.
# DH-HMAC-CHAP needs the host side of it in the kernel
# (CONFIG_NVME_HOST_AUTH, as 6.12 has; Debian 12's 6.1 has not): without
# it the test fails, unless the kernel was chosen with LG_KERNEL_VERSION.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/linux-guest.sh"
need jq nbdcopy cmp
lg_need
blockd_start
NVME_PORT=$(free_port)
DISC_PORT=$(free_port)
SUBNQN=nqn.2026-01.org.blockd:linux
# Each host NQN with a host ID of its own: Linux (from 6.8) refuses a
# host ID already used with another NQN.
HOSTID=6b1c0e4e-2f0b-4c41-9a51-1c0ffee0c0de
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID
AUTHNQN=nqn.2026-01.org.blockd:linux-auth
AUTHHOST=nqn.2026-01.org.blockd:host-auth
DISCNQN=nqn.2014-08.org.nvmexpress.discovery

call() { blockctl call "$@" || fail "API call $1 failed"; }

blockctl volume create demo/lx --size 64M >/dev/null || fail "volume create"
blockctl share nbd create demo/lx --name lx >/dev/null || fail "share over NBD"
call nvmet.global.update "{\"discovery_listen\": \"127.0.0.1:$DISC_PORT\"}" >/dev/null
SUB=$(call nvmet.subsys.create "{\"name\": \"linux\", \"subnqn\": \"$SUBNQN\"}" | jq .id)
call nvmet.namespace.create "{\"subsys_id\": $SUB, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/lx\", \"nsid\": 1}" >/dev/null
PORT=$(call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $NVME_PORT}" | jq .id)
call nvmet.port_subsys.create "{\"port_id\": $PORT, \"subsys_id\": $SUB}" >/dev/null
HOST=$(call nvmet.host.create "{\"hostnqn\": \"$HOSTNQN\"}" | jq .id)
call nvmet.host_subsys.create "{\"host_id\": $HOST, \"subsys_id\": $SUB}" >/dev/null

# DH-HMAC-CHAP: only a kernel built with the host side of it can take part.
AUTH=0
if [ "$(lg_config NVME_AUTH)" = y ] || [ "$(lg_config NVME_HOST_AUTH)" = y ]; then
    AUTH=1
    KEY=$(nvme gen-dhchap-key --hmac=1 --nqn="$AUTHHOST")
    WRONG=$(nvme gen-dhchap-key --hmac=1 --nqn="$AUTHHOST")
    CKEY=$(nvme gen-dhchap-key --hmac=2 --nqn="$AUTHNQN")
    blockctl volume create demo/la --size 16M >/dev/null || fail "volume create la"
    ASUB=$(call nvmet.subsys.create "{\"name\": \"linux-auth\", \"subnqn\": \"$AUTHNQN\"}" | jq .id)
    call nvmet.namespace.create "{\"subsys_id\": $ASUB, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/la\", \"nsid\": 1}" >/dev/null
    call nvmet.port_subsys.create "{\"port_id\": $PORT, \"subsys_id\": $ASUB}" >/dev/null
    # bidirectional, SHA-384, ffdhe2048: the kernel checks our response too
    AHOST=$(call nvmet.host.create "{\"hostnqn\": \"$AUTHHOST\", \"dhchap_key\": \"$KEY\", \"dhchap_ctrl_key\": \"$CKEY\", \"dhchap_hash\": \"SHA-384\", \"dhchap_dhgroup\": \"2048-BIT\"}" | jq .id)
    call nvmet.host_subsys.create "{\"host_id\": $AHOST, \"subsys_id\": $ASUB}" >/dev/null
elif [ -n "${LG_KERNEL_VERSION:-}" ]; then
    echo "note: kernel $LG_KVER (LG_KERNEL_VERSION) has no NVMe host authentication: DH-HMAC-CHAP left out"
else
    fail "kernel $LG_KVER has no NVMe host authentication (CONFIG_NVME_HOST_AUTH): make deps installs linux-image-6.12-amd64"
fi

for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NVME_PORT") 2>/dev/null && break
    sleep 0.1
done

# The pattern the guest writes at 0, and one written over NBD at 8 MiB that
# the guest reads.
head -c $((4 << 20)) /dev/urandom >"$TMP/pattern.bin"
head -c $((1 << 20)) /dev/urandom >"$TMP/nbd.bin"
/usr/bin/python3 - "$TMP/nbd.bin" "$NBD_PORT" <<'PY' || fail "NBD write at 8 MiB"
import nbd, sys
h = nbd.NBD()
h.connect_uri("nbd://127.0.0.1:%s/lx" % sys.argv[2])
h.pwrite(open(sys.argv[1], "rb").read(), 8 << 20)
h.flush()
h.shutdown()
PY

cat >"$TMP/steps.sh" <<EOF
P=$NVME_PORT D=$DISC_PORT SUBNQN=$SUBNQN HOSTNQN=$HOSTNQN HOSTID=$HOSTID DISCNQN=$DISCNQN
AUTH=$AUTH AUTHNQN=$AUTHNQN AUTHHOST=$AUTHHOST KEY='${KEY:-}' WRONG='${WRONG:-}' CKEY='${CKEY:-}'
EOF
lg_guest_helpers >>"$TMP/steps.sh"
cat >>"$TMP/steps.sh" <<'EOF'
# attr CTRL NAME: a controller's sysfs attribute, without the padding of
# the Identify field it comes from
attr() { sed 's/ *$//' "/sys/class/nvme/$1/$2"; }
instance() { echo "$1" | sed -n 's/^instance=\([0-9]*\),.*/\1/p'; }
gone() { [ ! -e "/sys/class/nvme/$1" ]; }
has_ns() { ls /sys/block | grep -q '^nvme[0-9]*n1$'; }
delete() { echo 1 >"/sys/class/nvme/$1/delete_controller" && wait_for 30 gone "$1"; }

run() {
    if fabrics "trsvcid=$P,nqn=$SUBNQN,hostnqn=nqn.2026-01.org.blockd:not-allowed,hostid=6b1c0e4e-2f0b-4c41-9a51-000000000001" >/dev/null; then
        bad refused "a host not allowed got a controller"; return
    fi
    # refused by blockd (Connect Invalid Host), not by the kernel itself
    dmesg | grep -q "is not allowed, hostnqn: nqn.2026-01.org.blockd:not-allowed" ||
        { bad refused "$(cat /tmp/fabrics.err; dmesg | tail -n 3)"; return; }
    ok "host not allowed refused (Connect Invalid Host)"

    r=$(fabrics "trsvcid=$P,nqn=$SUBNQN,hostnqn=$HOSTNQN,hostid=$HOSTID") ||
        { bad connect "$(cat /tmp/fabrics.err)"; return; }
    c=nvme$(instance "$r")
    ok "connected through /dev/nvme-fabrics ($r)"
    want model blockd "$(attr $c model)" || return
    want subsysnqn "$SUBNQN" "$(attr $c subsysnqn)" || return
    want transport tcp "$(attr $c transport)" || return
    wait_for 30 grep -qx live "/sys/class/nvme/$c/state" || { bad state "$(cat /sys/class/nvme/$c/state)"; return; }
    ok "controller attributes: model, subsysnqn, transport, state live"
    wait_for 30 [ -b /dev/nvme0n1 ] || { bad namespace "no /dev/nvme0n1"; return; }
    want size 131072 "$(cat /sys/block/nvme0n1/size)" || return
    want lba 4096 "$(cat /sys/block/nvme0n1/queue/logical_block_size)" || return
    ok "namespace: 64 MiB, 4096-byte blocks"

    # conv=fsync: the block device's fsync sends the controller a Flush
    dd if=/data/pattern.bin of=/dev/nvme0n1 bs=1M oflag=direct conv=fsync 2>/tmp/dd.err ||
        { bad write "$(cat /tmp/dd.err)"; return; }
    sync
    blockdev --flushbufs /dev/nvme0n1 || { bad flush "blockdev --flushbufs failed"; return; }
    dd if=/dev/nvme0n1 of=/tmp/back.bin bs=1M count=4 iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    cmp /data/pattern.bin /tmp/back.bin || { bad readback "pattern differs"; return; }
    ok "4 MiB written with O_DIRECT, flushed, read back"
    dd if=/dev/nvme0n1 of=/tmp/nbd.bin bs=1M skip=8 count=1 iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    cmp /data/nbd.bin /tmp/nbd.bin || { bad nbdread "data written over NBD differs"; return; }
    ok "data written over NBD read by the kernel"

    # Write Zeroes (nvme-cli, 256 blocks of 4 KiB at 16 MiB) over data, then
    # a discard (Dataset Management, deallocate) of the same range.
    dd if=/data/nbd.bin of=/dev/nvme0n1 bs=1M seek=16 oflag=direct 2>/tmp/dd.err ||
        { bad write "$(cat /tmp/dd.err)"; return; }
    out=$(nvme write-zeroes /dev/nvme0n1 --namespace-id=1 --start-block=4096 --block-count=255 2>&1) ||
        { bad write-zeroes "$out"; return; }
    dd if=/dev/nvme0n1 of=/tmp/z.bin bs=1M skip=16 count=1 iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    head -c 1048576 /dev/zero | cmp - /tmp/z.bin || { bad write-zeroes "range not zero"; return; }
    [ "$(cat /sys/block/nvme0n1/queue/discard_max_bytes)" -gt 0 ] || { bad discard "no discard"; return; }
    out=$(blkdiscard -o $((16 << 20)) -l $((1 << 20)) /dev/nvme0n1 2>&1) || { bad discard "$out"; return; }
    ok "nvme write-zeroes reads back zeroes; blkdiscard"
    host written

    out=$(nvme discover -t tcp -a 10.0.2.2 -s "$D" -q "$HOSTNQN" -I "$HOSTID" 2>&1) ||
        { bad discover "$out"; return; }
    echo "$out" | grep -q "subnqn: *$SUBNQN" || { bad discover "$SUBNQN not listed: $out"; return; }
    echo "$out" | grep -q "trsvcid: *$P" || { bad discover "port $P not listed: $out"; return; }
    ok "nvme discover lists the subsystem and its port"
    r=$(fabrics "trsvcid=$D,nqn=$DISCNQN,hostnqn=$HOSTNQN,hostid=$HOSTID") ||
        { bad discovery-ctrl "$(cat /tmp/fabrics.err)"; return; }
    d=nvme$(instance "$r")
    want discovery-subsysnqn "$DISCNQN" "$(attr $d subsysnqn)" || return
    out=$(nvme discover --device="$d" 2>&1) || { bad discovery-log "$out"; return; }
    echo "$out" | grep -q "subnqn: *$SUBNQN" || { bad discovery-log "$SUBNQN not listed: $out"; return; }
    delete "$d" || { bad discovery-ctrl "$d not deleted"; return; }
    ok "the kernel's discovery controller: log page read through it, deleted"

    host resize
    wait_for 60 grep -qx 163840 /sys/block/nvme0n1/size ||
        { bad resize "size $(cat /sys/block/nvme0n1/size), not 163840"; return; }
    ok "volume resized on the host: 80 MiB in sysfs"

    # Past the keep-alive timeout (5 s): the kernel's keep-alives keep the
    # controller, which still reads.
    sleep 7
    want state live "$(cat /sys/class/nvme/$c/state)" || return
    dd if=/dev/nvme0n1 of=/tmp/back.bin bs=1M count=4 iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    cmp /data/pattern.bin /tmp/back.bin || { bad keep-alive "pattern differs"; return; }
    ok "controller live past the keep-alive timeout"

    delete "$c" || { bad disconnect "$c not deleted"; return; }
    wait_for 30 [ ! -b /dev/nvme0n1 ] || { bad disconnect "nvme0n1 still there"; return; }
    ok "disconnected"

    out=$(nvme connect -t tcp -a 10.0.2.2 -s "$P" -n "$SUBNQN" -q "$HOSTNQN" -I "$HOSTID" \
        --hdr-digest --data-digest --nr-write-queues=1 --nr-poll-queues=1 2>&1) ||
        { bad nvme-connect "$out"; return; }
    c=$(basename "$(ls -d /sys/class/nvme/nvme* | head -n 1)")
    wait_for 30 [ -b /dev/nvme0n1 ] || { bad nvme-connect "no /dev/nvme0n1"; return; }
    # three I/O queues on one CPU: with write queues asked for, the default
    # set takes the writes and a read set the reads; and one polled queue
    dmesg | grep -q "$c: mapped 1/1/1 default/read/poll queues" ||
        { bad queues "$(dmesg | grep "$c: mapped")"; return; }
    dd if=/dev/nvme0n1 of=/tmp/back2.bin bs=1M count=4 iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    cmp /data/pattern.bin /tmp/back2.bin || { bad digests "pattern differs"; return; }
    # four writers at once, then read back
    for i in 0 1 2 3; do
        dd if=/data/pattern.bin of=/dev/nvme0n1 bs=1M skip=$i seek=$((32 + i)) count=1 \
            oflag=direct 2>/tmp/dd$i.err &
    done
    wait
    dd if=/dev/nvme0n1 of=/tmp/back3.bin bs=1M skip=32 count=4 iflag=direct 2>/tmp/dd.err ||
        { bad read "$(cat /tmp/dd.err)"; return; }
    cmp /data/pattern.bin /tmp/back3.bin || { bad parallel "parallel writes differ"; return; }
    out=$(nvme disconnect -n "$SUBNQN" 2>&1) || { bad nvme-disconnect "$out"; return; }
    wait_for 30 gone "$c" || { bad nvme-disconnect "$c still there"; return; }
    ok "nvme connect with header and data digests and 3 I/O queues: pattern read back, parallel writes; nvme disconnect"

    [ "$AUTH" = 1 ] || return
    aid=hostid=6b1c0e4e-2f0b-4c41-9a51-000000000002
    if fabrics "trsvcid=$P,nqn=$AUTHNQN,hostnqn=$AUTHHOST,$aid,dhchap_secret=$WRONG" >/dev/null; then
        bad auth "a wrong DH-HMAC-CHAP key got a controller"; return
    fi
    ok "DH-HMAC-CHAP: a wrong key refused"
    r=$(fabrics "trsvcid=$P,nqn=$AUTHNQN,hostnqn=$AUTHHOST,$aid,dhchap_secret=$KEY,dhchap_ctrl_secret=$CKEY") ||
        { bad auth "$(cat /tmp/fabrics.err; dmesg | tail -n 3)"; return; }
    c=nvme$(instance "$r")
    dmesg | grep -q "$c: qid 0: authenticated with hash hmac(sha384) dhgroup ffdhe2048" ||
        { bad auth "$(dmesg | grep "$c: qid 0")"; return; }
    wait_for 30 has_ns || { bad auth "no namespace"; return; }
    n=$(ls /sys/block | grep '^nvme[0-9]*n1$')
    want auth-size 32768 "$(cat /sys/block/$n/size)" || return
    delete "$c" || { bad auth "$c not deleted"; return; }
    ok "DH-HMAC-CHAP (SHA-384, ffdhe2048, both ways): the right keys let in, namespace seen, disconnected"
}
run
EOF

lg_initramfs "$TMP/steps.sh" "$TMP/pattern.bin" "$TMP/nbd.bin"
lg_start
echo "guest: kernel $LG_KVER, accelerator $LG_ACCEL_USED"
lg_wait_line "^LGUEST host written" 240
# The guest's writes, flushed, are on the volume: read them over NBD.
nbdcopy "nbd://127.0.0.1:$NBD_PORT/lx" "$TMP/volume.bin" || fail "nbdcopy from the volume"
cmp -n $((4 << 20)) "$TMP/pattern.bin" "$TMP/volume.bin" || fail "the guest's pattern is not on the volume"
echo "ok  the guest's writes read over NBD"
lg_wait_line "^LGUEST host resize" 120
blockctl volume resize demo/lx --size 80M >/dev/null || fail "volume resize"
lg_finish 240

# The guest's kernel: nothing about NVMe but what the steps caused.
grep -a "nvme" "$LG_DIR/dmesg.txt" >"$TMP/nvme-dmesg.txt" || true
sed 's/^/    /' "$TMP/nvme-dmesg.txt"
# Lines the steps cause: the host not allowed (Connect Invalid Host, 4184h)
# and, with DH-HMAC-CHAP, the wrong key.
expected="not-allowed|failed to connect queue: 0 ret=16772"
[ "$AUTH" = 0 ] || expected="$expected|qid 0: authentication failed, error -129|failed to connect queue: 0 ret=-129"
if grep -aiE "error|fail|timeout|timed out|reset|invalid|warn|refused|clamping" "$TMP/nvme-dmesg.txt" |
    grep -avE "$expected" >"$TMP/nvme-bad.txt"; then
    cat "$TMP/nvme-bad.txt" >&2
    fail "the guest's kernel logged NVMe errors"
fi
# blockd: the refused host logged, no protocol error, the sessions gone.
grep -q "Connect of host nqn.2026-01.org.blockd:not-allowed refused" "$BLOCKD_LOG" ||
    fail "refused host not logged"
! grep -aE "C2HTermReq|H2CTermReq|protocol error" "$BLOCKD_LOG" || fail "protocol error in blockd's log"
if [ "$AUTH" = 1 ]; then
    grep -q "authentication of host $AUTHHOST (queue 0) failed: wrong response" "$BLOCKD_LOG" ||
        fail "the wrong key not logged"
    grep -q "host $AUTHHOST authenticated on queue 1 (DH-HMAC-CHAP SHA-384, ffdhe2048, bidirectional)" "$BLOCKD_LOG" ||
        fail "the I/O queue's authentication not logged"
fi
for _ in $(seq 1 100); do
    blockctl session list >"$TMP/sessions.txt" 2>&1 || true
    grep -q "^nvme" "$TMP/sessions.txt" || break
    sleep 0.1
done
! grep -q "^nvme" "$TMP/sessions.txt" || fail "NVMe sessions left: $(cat "$TMP/sessions.txt")"
blockd_stop
! grep -aE "AddressSanitizer|LeakSanitizer|runtime error" "$BLOCKD_LOG" || fail "sanitizer report"
echo "PASS: $TEST_NAME"
