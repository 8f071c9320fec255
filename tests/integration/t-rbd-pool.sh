#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# RBD pools (control plane): pool.create {rbd: …} and pool.query
# against a throwaway Ceph cluster started here (scripts/ceph-cluster.sh,
# stopped on exit; a machine without Ceph FAILS this test):
#  1. blockctl pool create --rbd: ONLINE, its settings under "rbd", a
#     volume in it is an RBD image (rbd CLI);
#  2. refused clearly: a conf file that does not exist, a Ceph pool that
#     does not exist, path and rbd together;
#  3. the cluster lost while the daemon runs: the pool goes UNAVAIL; the
#     cluster down at start-up: the daemon starts at once, the pool is
#     UNAVAIL with the reason, dataset calls on it fail naming it, a file
#     pool keeps serving; the cluster back: the pool comes back ONLINE on
#     its own and takes new volumes;
#  4. an image removed behind blockd's back: a clear error naming it, the
#     dataset can still be deleted.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 rbd ceph-mon ceph-osd
ceph_start --private
CEPH=$CEPH_SCRIPT
CONF=$CEPH_CONF
rbdc() { rbd -c "$CONF" "$@"; }
pool_field() { # pool.query's FIELD of pool NAME
    blockctl call pool.query "[[[\"name\",\"=\",\"$1\"]]]" |
        python3 -c "import json,sys; r=json.load(sys.stdin); print(r[0]$2 if r else 'none')"
}

# The pool rp follows the cluster's conf (its monitors move when the test
# restarts the cluster, section 3): kept where an operator keeps one, in a
# directory blockd is told about (blockd reads mon_host from it).
ETC=$TMP/etc-ceph
mkdir -m 0755 "$ETC"
cp "$CONF" "$ETC/ceph.conf"
BLOCKD_RBD_OP_TIMEOUT=5 blockd_start --allow-dir "$ETC"

# 1. an RBD pool
blockctl pool create rp --rbd rbd --ceph-conf "$ETC/ceph.conf" >/dev/null || fail "pool create --rbd failed"
[ "$(pool_field rp '["status"]')" = ONLINE ] || fail "rbd pool not ONLINE"
[ "$(pool_field rp '["rbd"]["pool"]')" = rbd ] || fail "pool.query lacks rbd.pool"
[ "$(pool_field rp '["path"]')" = rbd:rbd ] || fail "path of the rbd pool"
blockctl pool list | grep -q "^rp .*rbd:rbd .*ONLINE" || fail "pool list: $(blockctl pool list)"
blockctl volume create rp/v1 --size 64M >/dev/null || fail "volume create in the rbd pool"
rbdc ls rbd | grep -qx v1 || fail "no RBD image v1: $(rbdc ls rbd)"
rbdc info rbd/v1 | grep -q "size 64 MiB" || fail "image size: $(rbdc info rbd/v1)"
rbdc info rbd/v1 | grep -q "features: layering, exclusive-lock, object-map, fast-diff, deep-flatten" ||
    fail "image features: $(rbdc info rbd/v1)"
# resize of a volume no front-end has open (a handle of its own)
blockctl volume resize rp/v1 --size 96M >/dev/null || fail "resize of a closed RBD volume"
rbdc info rbd/v1 | grep -q "size 96 MiB" || fail "resized image: $(rbdc info rbd/v1)"
# a namespace, made on the way
blockctl pool create rns --rbd rbd --rbd-namespace blk --mon-host "$CEPH_MON_HOST" >/dev/null ||
    fail "pool create with a namespace"
blockctl volume create rns/a/v2 --size 16M >/dev/null || fail "volume create in the namespace"
rbdc ls rbd --namespace blk | grep -qx 'a%v2' || fail "image a%v2 not in namespace blk"

# 2. refused, with the reason
out=$(blockctl pool create bad --rbd rbd --ceph-conf /nonexistent/ceph.conf 2>&1) &&
    fail "a missing conf was accepted"
grep -q "must be in /etc/ceph or a directory the operator allows" <<<"$out" || fail "missing conf: $out"
out=$(blockctl pool create bad --rbd rbd --mon-host "127.0.0.1:$(free_port)" 2>&1) &&
    fail "a monitor that does not answer was accepted"
grep -q "cannot connect to the Ceph cluster" <<<"$out" || fail "dead monitor: $out"
out=$(blockctl pool create bad --rbd nosuchpool --mon-host "$CEPH_MON_HOST" 2>&1) &&
    fail "a missing Ceph pool was accepted"
grep -q "the Ceph pool nosuchpool does not exist" <<<"$out" || fail "missing pool: $out"
out=$(blockctl call pool.create "{\"name\":\"bad\",\"path\":\"$TMP/p\",\"rbd\":{\"pool\":\"rbd\"}}" 2>&1) &&
    fail "path and rbd together were accepted"
grep -q "either a directory" <<<"$out" || fail "path+rbd: $out"
[ "$(pool_field bad '')" = none ] || fail "a refused pool was recorded"

# 3. the cluster lost while the daemon runs: UNAVAIL (requests time out
# after BLOCKD_RBD_OP_TIMEOUT, 5 s here), file pools unaffected
"$CEPH" stop "$CEPH_DIR" >/dev/null
for i in $(seq 1 40); do
    [ "$(pool_field rp '["status"]')" = UNAVAIL ] && break
    sleep 1
done
[ "$(pool_field rp '["status"]')" = UNAVAIL ] || fail "lost cluster: pool still $(pool_field rp '["status"]')"
grep -q "RBD pool rp is UNAVAIL" "$BLOCKD_LOG" || fail "no log line for the lost cluster"
blockctl volume create demo/f0 --size 16M >/dev/null || fail "file pool does not serve"

# ... and down at start-up: the daemon starts at once, the pool UNAVAIL
blockd_stop
t0=$(date +%s)
BLOCKD_RBD_OP_TIMEOUT=5 blockd_start --allow-dir "$ETC"
[ $(($(date +%s) - t0)) -le 5 ] || fail "start-up waited for the lost cluster"
st=$(pool_field rp '["status"]')
[ "$st" = UNAVAIL ] || fail "rbd pool with the cluster down is $st"
detail=$(pool_field rp '["status_detail"]')
grep -qi "ceph cluster" <<<"$detail" || fail "UNAVAIL reason: $detail"
out=$(blockctl volume create rp/v3 --size 16M 2>&1) && fail "volume create on an UNAVAIL pool"
grep -q "pool rp is UNAVAIL" <<<"$out" || fail "create on UNAVAIL pool: $out"
blockctl volume create demo/f1 --size 16M >/dev/null || fail "file pool does not serve"
[ "$(pool_field demo '["status"]')" = ONLINE ] || fail "file pool not ONLINE"

# the cluster back (a new one on the same conf path): ONLINE on its own
"$CEPH" start "$CEPH_DIR" >"$TMP/ceph-start2.log" 2>&1 || fail "the cluster did not restart"
cp "$CONF" "$ETC/ceph.conf" # the operator's conf follows the new monitors
for i in $(seq 1 60); do
    [ "$(pool_field rp '["status"]')" = ONLINE ] && break
    sleep 1
done
[ "$(pool_field rp '["status"]')" = ONLINE ] || fail "rbd pool did not come back ($(pool_field rp '["status_detail"]'))"
grep -q "RBD pool rp .* is ONLINE" "$BLOCKD_LOG" || fail "no log line for the pool coming back"
blockctl volume create rp/v3 --size 16M >/dev/null || fail "volume create after the cluster came back"
rbdc ls rbd | grep -qx v3 || fail "no image v3 after the cluster came back"

# 4. an image removed behind blockd's back: a clear error, no crash, and
# the dataset can still be deleted
rbdc rm rbd/v3 >/dev/null 2>&1 || fail "rbd rm v3"
out=$(blockctl volume snapshot rp/v3@s 2>&1) && fail "snapshot of a removed image succeeded"
grep -q "the RBD image v3 does not exist in rbd" <<<"$out" || fail "removed image: $out"
blockctl volume delete rp/v3 >/dev/null || fail "delete of a dataset whose image is gone"
blockd_alive || fail "blockd died"
blockd_stop
pass
