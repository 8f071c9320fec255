#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# An RBD image changed behind blockd's back, as an operator or
# another librbd client would, while blockd serves it over NBD; a second
# volume in the same pool is watched throughout (never affected):
#  1. `rbd rm` of a served image is refused by rbd (the image has a
#     watcher: blockd); blockd keeps serving it;
#  2. another librbd client (python3-rbd) writes to the served image: the
#     exclusive lock moves to it and back (cooperative), both writes land,
#     blockd keeps serving;
#  3. `rbd lock add` (an advisory lock) is refused while blockd holds the
#     exclusive lock, and does not stop blockd's I/O;
#  4. `rbd feature disable` of fast-diff, object-map and exclusive-lock on
#     the served image (rbd asks the lock owner, blockd, to do it): I/O
#     goes on, the data is intact, and block status still works;
#  5. `rbd rm` of an image blockd does not hold open: opening its share
#     fails with an error naming the dataset (ENOENT), no crash;
#  6. `rbd lock rm` of blockd's exclusive lock (fencing: blocklists
#     blockd's client): requests fail at once with ESHUTDOWN, the daemon
#     stays up, a restart serves the data again.
. "$(dirname "$0")/lib.sh"
need python3 /usr/bin/python3 rbd qemu-io nbdinfo
ceph_start
rbdc() { timeout 60 rbd -c "$CEPH_CONF" "$@"; }
blockd_start
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
    fail "pool.create of the RBD pool"
for v in v w gone; do
    blockctl volume create ceph/$v --size 64M >/dev/null || fail "volume create $v"
done
blockctl share nbd create ceph/v --name v >/dev/null || fail "share nbd create v"
blockctl share nbd create ceph/w --name w >/dev/null || fail "share nbd create w"
U=nbd://127.0.0.1:$NBD_PORT/v
W=nbd://127.0.0.1:$NBD_PORT/w
qio() { timeout 60 qemu-io -f raw "$@"; }
qio "$U" -c "write -P 0x11 0 1M" -c flush >/dev/null || fail "write to v"
qio "$W" -c "write -P 0x22 0 1M" -c flush >/dev/null || fail "write to w"
w_ok() { qio "$W" -c "read -P 0x22 0 1M" -c "write -P 0x22 0 64k" -c flush >/dev/null ||
    fail "the other volume was affected ($1)"; }

# 1. rbd rm of a served image
out=$(rbdc rm "$CEPH_POOL/v" 2>&1) && fail "rbd rm removed an image blockd serves"
echo "$out" | grep -qi "watchers" || fail "rbd rm of a served image: $out"
qio "$U" -c "read -P 0x11 0 1M" >/dev/null || fail "v after the refused rbd rm"
w_ok "rbd rm"

# 2. another librbd client writes to the served image
timeout 60 /usr/bin/python3 - "$CEPH_CONF" "$CEPH_POOL" <<'PY' || fail "the other librbd client's write failed"
import rados, rbd, sys
with rados.Rados(conffile=sys.argv[1]) as c, c.open_ioctx(sys.argv[2]) as io, rbd.Image(io, "v") as im:
    im.write(b"\x33" * 65536, 2 << 20)
    im.flush()
    assert im.read(0, 4096) == b"\x11" * 4096, "the other client does not see blockd's data"
PY
qio "$U" -c "read -P 0x33 2M 64k" -c "write -P 0x44 4M 64k" -c flush -c "read -P 0x44 4M 64k" \
    -c "read -P 0x11 0 1M" >/dev/null || fail "blockd after another client's write"
timeout 60 /usr/bin/python3 - "$CEPH_CONF" "$CEPH_POOL" <<'PY' || fail "the other client does not see blockd's write"
import rados, rbd, sys
with rados.Rados(conffile=sys.argv[1]) as c, c.open_ioctx(sys.argv[2]) as io, rbd.Image(io, "v", read_only=True) as im:
    assert im.read(4 << 20, 65536) == b"\x44" * 65536
PY
w_ok "another client"

# 3. an advisory lock: refused while blockd holds the image's exclusive
# lock (rbd lock ls shows it), and blockd's I/O goes on
out=$(rbdc lock add "$CEPH_POOL/v" admin-lock 2>&1) && fail "rbd lock add on a served image succeeded"
echo "$out" | grep -q "lock is already held" || fail "rbd lock add: $out"
rbdc lock ls "$CEPH_POOL/v" | grep -q "auto " || fail "rbd lock ls does not show blockd's lock: $(rbdc lock ls "$CEPH_POOL/v")"
qio "$U" -c "write -P 0x55 6M 64k" -c flush -c "read -P 0x55 6M 64k" >/dev/null ||
    fail "blockd's I/O stopped after rbd lock add"

# 4. features disabled under blockd
rbdc feature disable "$CEPH_POOL/v" fast-diff object-map exclusive-lock || fail "rbd feature disable"
rbdc info "$CEPH_POOL/v" | grep -q "features: layering, deep-flatten" || fail "features: $(rbdc info "$CEPH_POOL/v")"
qio "$U" -c "write -P 0x66 8M 64k" -c flush -c "read -P 0x66 8M 64k" -c "read -P 0x11 0 1M" \
    -c "read -P 0x55 6M 64k" >/dev/null || fail "blockd's I/O after the features were disabled"
nbdinfo --map "$U" | grep -q "hole" || fail "block status after the features were disabled: $(nbdinfo --map "$U")"
w_ok "feature disable"

# 5. rbd rm of an image blockd does not hold
rbdc rm "$CEPH_POOL/gone" >/dev/null 2>&1 || fail "rbd rm of an image blockd does not serve"
out=$(blockctl share nbd create ceph/gone --name gone 2>&1) && ok=1 || ok=0
if [ "$ok" = 1 ]; then
    # a share may be recorded; a client then gets an error, not a crash
    nbdinfo "nbd://127.0.0.1:$NBD_PORT/gone" >/dev/null 2>&1 && fail "an export of a removed image serves"
    grep -q "the RBD image gone does not exist" "$BLOCKD_LOG" || fail "no log line names the missing image"
else
    echo "$out" | grep -Eq "cannot open ceph/gone: No such file|the RBD image gone does not exist" ||
        fail "share of a removed image: $out"
fi
w_ok "rbd rm of another image"
# 6. `rbd lock rm` of blockd's exclusive lock fences blockd: rbd
# blocklists blockd's cluster client. Its requests then fail at once with
# ESHUTDOWN (every image on that connection: known limitation, blockd does
# not reconnect by itself), the daemon and its API stay up, and a restart
# (a new client) serves the data again.
read -r locker lockid < <(rbdc lock ls --format json "$CEPH_POOL/w" | python3 -c '
import json, sys
l = json.load(sys.stdin)
print(l[0]["locker"], l[0]["id"])')
rbdc lock rm "$CEPH_POOL/w" "$lockid" "$locker" >/dev/null 2>&1 || fail "rbd lock rm of blockd's lock"
t0=$(date +%s)
out=$(timeout 300 qemu-io -f raw "$W" -c "write -P 0x77 0 64k" 2>&1) && fail "a write after blockd was fenced succeeded"
echo "$out" | grep -q "Cannot send after transport endpoint shutdown" || fail "fenced write: $out"
echo "the fenced write failed after $(($(date +%s) - t0)) s"
blockctl call pool.query >/dev/null || fail "the API does not answer after blockd was fenced"
blockd_alive || fail "blockd died after it was fenced"
blockd_stop
blockd_start
for i in $(seq 1 60); do
    qio "$W" -c "read -P 0x22 0 1M" >/dev/null 2>&1 && break
    sleep 1
done
qio "$W" -c "read -P 0x22 0 1M" -c "write -P 0x78 0 64k" -c flush >/dev/null ||
    fail "w after the restart"
qio "$U" -c "read -P 0x66 8M 64k" >/dev/null || fail "v after the restart"
blockd_alive || fail "blockd died"
blockd_stop
pass
