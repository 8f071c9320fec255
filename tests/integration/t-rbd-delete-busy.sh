#!/bin/bash
# pool.dataset.delete of an RBD volume another client still has open
# (docs/api-datasets.md "Deleting a volume another client has
# open"): a librbd client outside blockd (python3-rbd, writable: it
# watches the image header, as a VM or another gateway member does) keeps
# the image open.
#  - the delete fails with EBUSY (JSON-RPC error, errno 16) naming the
#    image and that a client still has it open, after the bounded wait
#    (RBD_IMAGE_REMOVE_WAIT_MS, 10 s); the dataset row, the image, and (a
#    recursive delete of a volume with a snapshot) the snapshot and its
#    row all stay: nothing is removed half-way;
#  - once that client closes the image the same delete succeeds and the
#    image and its snapshot are gone;
#  - a client that closes the image during the wait does not fail the
#    delete.
. "$(dirname "$0")/lib.sh"
need python3 rbd nbdinfo
/usr/bin/python3 -c 'import rados, rbd' 2>/dev/null || fail "python3-rados or python3-rbd missing"
ceph_start
blockd_start
blockctl call pool.create "{\"name\":\"ceph\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" \
    >/dev/null || fail "pool.create of the RBD pool"
blockctl volume create ceph/busy --size 16M >/dev/null || fail "volume create"
blockctl call zfs.snapshot.create '{"dataset":"ceph/busy","name":"s1"}' >/dev/null ||
    fail "snapshot create"

# api METHOD PARAMS: "ok" or "<errno name> <message>" (exit 1)
api() { api_raw "$STATE/blockd.sock" "$1" "$2"; }
# hold: open the image writable from another librbd client, until release
cat >"$TMP/hold.py" <<'PY'
import sys, rados, rbd
with rados.Rados(conffile=sys.argv[1]) as c, c.open_ioctx(sys.argv[2]) as io:
    with rbd.Image(io, "busy") as img:
        open(sys.argv[3], "w").write("open\n")
        sys.stdin.readline()
PY
hold() {
    rm -f "$TMP/held"
    coproc HOLD { exec timeout 120 /usr/bin/python3 "$TMP/hold.py" "$CEPH_CONF" "$CEPH_POOL" "$TMP/held"; }
    HOLDER=$HOLD_PID
    BG_PIDS+=("$HOLDER")
    local _
    for _ in $(seq 1 300); do
        if [ -s "$TMP/held" ]; then
            rbd -c "$CEPH_CONF" status "$CEPH_POOL/busy" | grep -q "watcher=" ||
                fail "the other client holds the image but rbd status shows no watcher"
            return 0
        fi
        kill -0 "$HOLDER" 2>/dev/null || fail "the other client could not open the image"
        sleep 0.1
    done
    fail "the other client did not open the image in 30 s"
}
# release: the other client closes the image (a killed client's watch
# would stay until the OSD times it out, ~30 s)
release() {
    echo close >&"${HOLD[1]}"
    wait "$HOLDER" 2>/dev/null || true
}
rows() { blockctl call pool.dataset.query '[[["id","=","ceph/busy"]]]' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
snaps() { blockctl call zfs.snapshot.query '[[["dataset","=","ceph/busy"]]]' | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }

# ---- open elsewhere for longer than the wait: EBUSY, nothing removed ----
hold
t0=$(date +%s)
out=$(api pool.dataset.delete '["ceph/busy", {"recursive": true}]') && fail "the delete succeeded while another client had the image open: $out"
secs=$(($(date +%s) - t0))
echo "refused after ${secs} s: $out"
grep -q "^EBUSY " <<<"$out" || fail "not EBUSY: $out"
grep -q "RBD image busy" <<<"$out" || fail "the error does not name the image: $out"
grep -q "still open by another client" <<<"$out" || fail "the error does not say why: $out"
[ "$secs" -le 300 ] || fail "the delete took ${secs} s: it should give up"
[ "$(rows)" = 1 ] || fail "the dataset row went while the image stays"
[ "$(snaps)" = 1 ] || fail "the snapshot row went"
rbd -c "$CEPH_CONF" ls "$CEPH_POOL" | grep -qx busy || fail "the image went"
rbd -c "$CEPH_CONF" snap ls "$CEPH_POOL/busy" | grep -qw s1 || fail "the snapshot was removed half-way"
# the volume still serves
blockctl share nbd create ceph/busy --name busy >/dev/null || fail "share of the kept volume"
[ "$(nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/busy")" = 16777216 ] || fail "the kept volume does not serve"
blockctl call nbd.export.delete "[$(blockctl call nbd.export.query '[[["name","=","busy"]]]' | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')]" \
    >/dev/null || fail "nbd.export.delete"
release

# ---- closed during the wait: the delete goes through ----
hold
exec 7>&"${HOLD[1]}" # the coprocess's own descriptor is not inherited by subshells
(sleep 3 && echo close >&7) &
exec 7>&-
api pool.dataset.delete '["ceph/busy", {"recursive": true}]' >"$TMP/del.out" ||
    fail "the delete failed although the other client closed the image: $(cat "$TMP/del.out")"
wait "$HOLDER" 2>/dev/null || true
[ "$(rows)" = 0 ] || fail "the dataset row stayed"
rbd -c "$CEPH_CONF" ls "$CEPH_POOL" | grep -qx busy && fail "the image stayed"
grep -q "is still open elsewhere" "$BLOCKD_LOG" || fail "no log line for the wait"
pass "EBUSY after ${secs} s with the image, its snapshot and their rows kept; deleted once closed"
