#!/usr/bin/env bash
# slow: run.sh starts it first (Ceph, two loop-mounted filesystems)
# replication.run_onetime copies only the changed ranges on incremental
# runs, on every pool type pair: ext4 → ext4 (the change log), XFS → XFS
# (extent maps), RBD → ext4, ext4 → RBD and RBD → RBD (rbd_diff_iterate2),
# with the shared test Ceph. Per pair (repl_incr.py): a pattern, s1, a
# full replication; scattered changes (writes, old content written back,
# a trim, zeroing, a write past a hole), s2, an incremental one; each
# target snapshot equal to the source's (qemu-img compare over NBD
# exports), the job reporting an incremental run that copied far fewer
# bytes than the volume holds. Then writes, kill -9 of the daemon, a
# restart, s3: the next incremental run is still exact.
. "$(dirname "$0")/lib.sh"
need qemu-img mkfs.xfs mkfs.ext4 mount umount /usr/bin/python3
[ "$(id -u)" = 0 ] || fail "needs root to loop-mount the XFS and ext4 images"
/usr/bin/python3 -c 'import nbd' || fail "python3 cannot import nbd (python3-libnbd missing)"

mount_fs xfs
mount_fs ext4
ceph_start

start() { blockd_start --allow-dir "$TMP/xfs" --allow-dir "$TMP/ext4"; }
start
export BLOCKCTL_BIN SOCK NBD_PORT BLOCKD_LOG
blockctl call pool.create "{\"name\":\"x\",\"path\":\"$TMP/xfs/pool\"}" >/dev/null || fail "pool on XFS"
blockctl call pool.create "{\"name\":\"e\",\"path\":\"$TMP/ext4/pool\"}" >/dev/null || fail "pool on ext4"
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"

CASES=(e:e:ee x:x:xx ceph:e:re e:ceph:er ceph:ceph:rr)
run() {
    /usr/bin/python3 "$(dirname "$0")/repl_incr.py" "$@" || fail "incremental replication, phase $1"
}
run 1 "${CASES[@]}"
kill -KILL "$BLOCKD_PID"
wait "$BLOCKD_PID" 2>/dev/null || true
BLOCKD_PID=
start
run 2 "${CASES[@]}"
blockd_alive || fail "daemon died"
pass
