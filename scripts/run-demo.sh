#!/usr/bin/env bash
# make run: start blockd in the foreground on ./var, make sure the demo
# volume demo/disk0 (1 GiB, sparse) exists and is shared over NBD and iSCSI,
# and demo/disk1 over NVMe/TCP (a volume is exported over iSCSI or NVMe-oF,
# not both), and print how to connect. Ctrl-C stops blockd cleanly.
set -eu
BUILD=${BUILD:-build}
STATE=${STATE:-./var}
NBD_LISTEN=${NBD_LISTEN:-0.0.0.0:10809}
ISCSI_LISTEN=${ISCSI_LISTEN:-0.0.0.0:3260}
NVME_LISTEN=${NVME_LISTEN:-0.0.0.0:4420}
mkdir -p "$STATE"
SOCK=$STATE/blockd.sock
ctl() { "$BUILD/src/cli/blockctl" --socket "$SOCK" "$@"; }

"$BUILD/src/daemon/blockd" --state-dir "$STATE" --nbd-listen "$NBD_LISTEN" \
    --iscsi-listen "$ISCSI_LISTEN" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid; exit 0' INT TERM EXIT
for _ in $(seq 1 100); do
    [ -S "$SOCK" ] && ctl call core.ping >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { wait $pid; exit 1; }
    sleep 0.1
done

for v in disk0 disk1; do
    ctl call pool.dataset.query "[[[\"id\",\"=\",\"demo/$v\"]]]" | grep -q "$v" ||
        ctl volume create "demo/$v" --size 1G >/dev/null
done
# Share it over NBD (export "disk0") and iSCSI (one target, LUN 0), once.
ctl share nbd list 2>/dev/null | grep -q "demo/disk0" ||
    ctl share nbd create demo/disk0 --name disk0 >/dev/null
ctl share iscsi list 2>/dev/null | grep -q "demo/disk0" ||
    ctl share iscsi create demo/disk0 >/dev/null
# and demo/disk1 over NVMe/TCP (one subsystem, namespace 1), once.
ctl share nvme list 2>/dev/null | grep -q "demo/disk1" ||
    ctl share nvme create demo/disk1 --address "${NVME_LISTEN%:*}" --tcp-port "${NVME_LISTEN##*:}" \
        >/dev/null
shares=$(ctl share nbd list; echo; ctl share iscsi list; echo; ctl share nvme list)
iqn=$(ctl share iscsi list | awk '$1 == "demo/disk0" {print $4}')
nqn=$(ctl share nvme list | awk '$1 == "demo/disk1" {print $3}')

host=127.0.0.1
nport=${NBD_LISTEN##*:}
iport=${ISCSI_LISTEN##*:}
vport=${NVME_LISTEN##*:}
cat <<MSG

blockd is running (pid $pid), state in $STATE, API socket $SOCK.
Demo volumes demo/disk0 over NBD and iSCSI, demo/disk1 over NVMe/TCP (1 GiB, sparse):

  blockctl --socket $SOCK volume list
  blockctl --socket $SOCK share nbd list
  nbdinfo nbd://$host:$nport/disk0
  qemu-img info nbd://$host:$nport/disk0
  iscsi-ls -s iscsi://$host:$iport
  iscsi-inq iscsi://$host:$iport/$iqn/0
  qemu-img info iscsi://$host:$iport/$iqn/0
  nvme discover -t tcp -a $host -s $vport
  nvme connect -t tcp -a $host -s $vport -n $nqn

$shares
Press Ctrl-C to stop.
MSG
wait $pid
trap - EXIT
