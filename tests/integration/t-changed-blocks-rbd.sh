#!/usr/bin/env bash
# slow: run.sh starts it first (30 s or more)
# Changed blocks between snapshots on an RBD pool (rbd_diff_iterate2 from
# the base snapshot, whole objects with fast-diff): the checks of
# t-changed-blocks.sh (changedlib.py) with the over-report bound of one
# RADOS object (4 MiB): every changed byte reported, every reported object
# touched, the NBD qemu:dirty-bitmap map equal to the API's, an incremental
# backup (nbdcopy + the dirty ranges) identical to the newer snapshot, and
# the same after a kill -9 of the daemon between the writes and the next
# snapshot. Then the API's bad input, each a clear error.
. "$(dirname "$0")/lib.sh"
need nbdcopy qemu-img /usr/bin/python3
/usr/bin/python3 -c 'import nbd' || fail "python3 cannot import nbd (python3-libnbd missing)"
ceph_start
blockd_start
export BLOCKCTL_BIN SOCK NBD_PORT
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"

run() {
    /usr/bin/python3 "$(dirname "$0")/changedlib.py" "$@" || fail "changed blocks, phase $1 on pool $2"
}
run 1 ceph 4194304 extents "$TMP"
kill -KILL "$BLOCKD_PID"
wait "$BLOCKD_PID" 2>/dev/null || true
BLOCKD_PID=
blockd_start
run 2 ceph 4194304 extents "$TMP"

# bad input: each a field error naming what is wrong
blockctl volume create ceph/w --size 8M >/dev/null || fail "volume create w"
blockctl volume snapshot ceph/w@s1 >/dev/null || fail "snapshot w@s1"
refused() { # what, expected text, params
    local out
    out=$(blockctl call pool.snapshot.changed_blocks "$3" 2>&1) && fail "$1 accepted: $out"
    case $out in *"$2"*) ;; *) fail "$1: expected '$2', got: $out" ;; esac
}
refused "unknown base" "snapshot ceph/v@nope does not exist" '{"base":"ceph/v@nope","target":"ceph/v@s2"}'
refused "unknown target" "snapshot ceph/v@nope does not exist" '{"base":"ceph/v@s1","target":"ceph/v@nope"}'
refused "unknown volume" "volume ceph/nope does not exist" '{"base":"ceph/nope@s1","target":"ceph/nope"}'
refused "different volumes" "are not of the same volume" '{"base":"ceph/v@s1","target":"ceph/w@s1"}'
refused "base newer" "was taken after target" '{"base":"ceph/v@s2","target":"ceph/v@s1"}'
refused "base not a snapshot" "base must be a snapshot" '{"base":"ceph/v","target":"ceph/v@s1"}'
refused "offset past the end" "is past the end" '{"base":"ceph/v@s1","target":"ceph/v","offset":33554433}'
refused "length past the end" "is past the end" '{"base":"ceph/v@s1","target":"ceph/v","offset":4096,"length":33554432}'
refused "max_results 0" "max_results" '{"base":"ceph/v@s1","target":"ceph/v","max_results":0}'
out=$(blockctl call pool.snapshot.allocated_blocks '{"snapshot":"ceph/v"}' 2>&1) &&
    fail "allocated_blocks of a volume accepted: $out"
case $out in *"is not a snapshot"*) ;; *) fail "allocated_blocks of a volume: $out" ;; esac
# allocated blocks of s1: the pattern's 24 MiB, not the hole after it
out=$(blockctl call pool.snapshot.allocated_blocks '{"snapshot":"ceph/v@s1"}') || fail "allocated_blocks: $out"
echo "$out" | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["next_offset"] is None, r
assert sum(x["length"] for x in r["ranges"]) == 24 << 20, r
assert r["ranges"][-1]["offset"] + r["ranges"][-1]["length"] <= 24 << 20, r' || fail "allocated_blocks of s1: $out"
blockd_alive || fail "daemon died"
pass
