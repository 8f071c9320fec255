#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Nothing acknowledged is lost when blockd is killed (RBD pools):
# fio writes half of an RBD volume over NBD with crc32c verify headers and
# flushes (end_fsync); a second fio keeps writing the other half while
# blockd gets SIGKILL. A new blockd on the same state directory serves the
# volume again (it takes the image's exclusive lock from the dead owner) and
# fio --verify_only reads every block of the first half back intact. The
# volume's iSCSI share comes back too (the same bytes as over NBD).
. "$(dirname "$0")/lib.sh"
need fio rbd qemu-img
ceph_start
blockd_start
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"
blockctl volume create ceph/v --size 64M >/dev/null || fail "volume create"
blockctl share nbd create ceph/v --name v >/dev/null || fail "share nbd create"
blockctl share iscsi create ceph/v >/dev/null || fail "share iscsi create"
BASE=$(blockctl call iscsi.global.config | python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
I=iscsi://127.0.0.1:$ISCSI_PORT/$BASE:ceph:v/0
U=nbd://127.0.0.1:$NBD_PORT/v
job=(--name=acked --ioengine=nbd --uri="$U" --rw=randwrite --bs=4k --iodepth=16 --size=32M
    --verify=crc32c --verify_fatal=1 --randrepeat=1 --randseed=1234 --verify_state_save=0)
fio "${job[@]}" --do_verify=0 --end_fsync=1 --output="$TMP/w.out" ||
    fail "fio write: $(tail -5 "$TMP/w.out")"
fio --name=busy --ioengine=nbd --uri="$U" --rw=randwrite --bs=64k --iodepth=16 --offset=32M \
    --size=32M --time_based --runtime=120 --output="$TMP/busy.out" >/dev/null 2>&1 &
BUSY=$!
BG_PIDS+=("$BUSY")
sleep 2
kill -0 "$BUSY" 2>/dev/null || fail "the busy writer ended early: $(tail -5 "$TMP/busy.out")"
kill -KILL "$BLOCKD_PID"
wait "$BLOCKD_PID" 2>/dev/null || true
BLOCKD_PID=
wait "$BUSY" 2>/dev/null || true
blockd_start
# The dead daemon's exclusive lock and watch are still on the image: the
# new owner must take over (librbd breaks a lock whose owner has no watch).
timeout 120 fio "${job[@]}" --verify_only --output="$TMP/v.out" ||
    fail "fio verify after kill -9: $(tail -8 "$TMP/v.out")"
grep -q "err= 0" "$TMP/v.out" || fail "fio verify reported errors: $(tail -8 "$TMP/v.out")"
# The LU reports NOT READY (becoming ready) until its image has reopened,
# which may come after the NBD export's: wait for it, then compare once.
for i in $(seq 1 120); do
    timeout 20 qemu-img info -f raw "$I" >"$TMP/info.out" 2>&1 && break
    sleep 0.5
done
timeout 60 qemu-img compare -f raw -F raw "$U" "$I" >/dev/null ||
    fail "after the restart, the iSCSI share does not serve the bytes the NBD export does"
blockd_stop
pass "32 MiB acknowledged and flushed before kill -9, all read back intact"
