#!/usr/bin/env bash
# Changed blocks between snapshots on file pools: ext4 (a snapshot is a
# sparse copy: contents compared), XFS (reflinks: extent maps compared),
# each a loop-mounted image in the test's directory, and the default pool
# wherever the test runs (tmpfs under run.sh: no FIEMAP). On each: a known
# pattern, a snapshot, scattered changes (writes, a range written back with
# its old data, a trim, zeroing, writes past a hole), a second snapshot;
# pool.snapshot.changed_blocks covers every changed byte and reports no
# granule that was not touched, the NBD qemu:dirty-bitmap map is the same,
# and an incremental backup (nbdcopy of s1, then only the dirty ranges of
# s2) is identical to s2 (qemu-img compare). The same for a third snapshot
# taken after a kill -9 of the daemon between the writes and it.
# slow
. "$(dirname "$0")/lib.sh"
need nbdcopy qemu-img mkfs.xfs mkfs.ext4 mount umount /usr/bin/python3
[ "$(id -u)" = 0 ] || fail "needs root to loop-mount the XFS and ext4 images"
/usr/bin/python3 -c 'import nbd' || fail "python3 cannot import nbd (python3-libnbd missing)"

mount_fs xfs
mount_fs ext4

blockd_start --allow-dir "$TMP/xfs" --allow-dir "$TMP/ext4"
export BLOCKCTL_BIN SOCK NBD_PORT
blockctl call pool.create "{\"name\":\"x\",\"path\":\"$TMP/xfs/pool\"}" >/dev/null || fail "pool on XFS"
blockctl call pool.create "{\"name\":\"e\",\"path\":\"$TMP/ext4/pool\"}" >/dev/null || fail "pool on ext4"

run() {
    /usr/bin/python3 "$(dirname "$0")/changedlib.py" "$@" || fail "changed blocks, phase $1 on pool $2"
}
# pool, granule of the over-report check, mode (changedlib.py)
run 1 e 65536 content "$TMP"
run 1 x 65536 extents "$TMP"
run 1 demo 65536 content "$TMP"

kill -KILL "$BLOCKD_PID"
wait "$BLOCKD_PID" 2>/dev/null || true
BLOCKD_PID=
blockd_start --allow-dir "$TMP/xfs" --allow-dir "$TMP/ext4"
run 2 e 65536 content "$TMP"
run 2 x 65536 extents "$TMP"
run 2 demo 65536 content "$TMP"

# blockctl volume diff: the ranges and a total
out=$(blockctl volume diff e/v@s1 e/v@s2) || fail "volume diff: $out"
echo "$out" | grep -q '^total	[0-9]* bytes in [0-9]* ranges (of 33554432)$' || fail "volume diff total: $out"
[ "$(echo "$out" | grep -c '^[0-9]')" -ge 5 ] || fail "volume diff ranges: $out"
blockd_alive || fail "daemon died"
pass
