#!/bin/bash
# Datasets through the raw API (blockctl call) on a real daemon: TrueNAS
# shapes, field-named validation errors, files on disk, snapshots, clones,
# rollback, refusals, and persistence across a restart.
. "$(dirname "$0")/lib.sh"
need python3 dd cmp

# jget JSON EXPR: evaluate a Python expression on the parsed JSON `j`.
jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

# expect_error METHOD PARAMS TEXT: the call must fail (exit 1) mentioning TEXT.
expect_error() {
    local out rc=0
    out=$(blockctl call "$1" "$2" 2>&1) || rc=$?
    [ "$rc" = 1 ] || fail "$1 $2: exit $rc, wanted 1 (output: $out)"
    case "$out" in
    *"$3"*) ;;
    *) fail "$1 $2: error does not mention '$3': $out" ;;
    esac
}

blockd_start
POOL=$STATE/pools/demo

out=$(blockctl call pool.query '[[["name","=","demo"]],{"get":true}]')
[ "$(jget "$out" 'j["status"]')" = ONLINE ] || fail "default pool not ONLINE: $out"
[ -d "$POOL" ] || fail "default pool directory missing"

# validation errors name their field
expect_error pool.dataset.create '{"name":"demo/v","type":"VOLUME","volsize":1000}' \
    "pool.dataset.create.volsize: must be a multiple of volblocksize"
expect_error pool.dataset.create '{"name":"demo/../x","type":"VOLUME","volsize":16384}' \
    "pool.dataset.create.name"
expect_error pool.dataset.create '{"name":"demo/v","type":"VOLUME","volsize":16384,"volblocksize":"3K"}' \
    "pool.dataset.create.volblocksize"
expect_error pool.dataset.create '{"name":"demo/v","type":"VOLUME","volsize":16384,"sync":"often"}' \
    "pool.dataset.create.sync"
expect_error pool.dataset.create '{"name":"demo/v","type":"VOLUME","volsize":16384,"bogus":1}' \
    "pool.dataset.create.bogus"
expect_error pool.dataset.create '{"name":"nopool/v","type":"VOLUME","volsize":16384}' \
    "pool nopool does not exist"
[ ! -e "$POOL/v" ] || fail "a rejected create left a file"

# create and query (TrueNAS property objects)
blockctl call pool.dataset.create '{"name":"demo/vm/disk0","type":"VOLUME","volsize":8388608,"volblocksize":"4K","comments":"c"}' >/dev/null
[ -d "$POOL/vm" ] || fail "implicit parent directory missing"
[ "$(stat -c %s "$POOL/vm/disk0")" = 8388608 ] || fail "volume file has the wrong size"
out=$(blockctl call pool.dataset.query '[[["id","=","demo/vm/disk0"]],{"get":true}]')
[ "$(jget "$out" 'j["volsize"]["parsed"]')" = 8388608 ] || fail "volsize.parsed: $out"
[ "$(jget "$out" 'j["volsize"]["value"]')" = 8M ] || fail "volsize.value: $out"
[ "$(jget "$out" 'j["volblocksize"]["value"]')" = 4K ] || fail "volblocksize: $out"
[ "$(jget "$out" 'j["sync"]["value"]')" = STANDARD ] || fail "sync: $out"
out=$(blockctl call pool.dataset.query '[[["id","=","demo/vm"]],{"get":true}]')
[ "$(jget "$out" 'j["type"]')" = FILESYSTEM ] || fail "parent is not a FILESYSTEM: $out"
[ "$(jget "$out" '[c["name"] for c in j["children"]]')" = "['demo/vm/disk0']" ] ||
    fail "children: $out"
expect_error pool.dataset.create '{"name":"demo/vm/disk0/x","type":"VOLUME","volsize":16384}' \
    "is a volume"

# update: resize and properties
out=$(blockctl call pool.dataset.update '["demo/vm/disk0",{"volsize":16777216,"sync":"ALWAYS"}]')
[ "$(jget "$out" 'j["volsize"]["parsed"]')" = 16777216 ] || fail "resize: $out"
[ "$(jget "$out" 'j["sync"]["value"]')" = ALWAYS ] || fail "sync update: $out"
[ "$(stat -c %s "$POOL/vm/disk0")" = 16777216 ] || fail "file not resized"
expect_error pool.dataset.update '["demo/vm/disk0",{"volsize":1000}]' "pool.dataset.update.volsize"

# snapshot, change, rollback: contents come back
dd if=/dev/urandom of="$TMP/a.bin" bs=64K count=3 status=none
dd if=/dev/urandom of="$TMP/b.bin" bs=64K count=3 status=none
dd if="$TMP/a.bin" of="$POOL/vm/disk0" bs=64K seek=5 conv=notrunc status=none
blockctl call zfs.snapshot.create '{"dataset":"demo/vm/disk0","name":"s1"}' >/dev/null
[ -f "$POOL/vm/disk0@s1" ] || fail "snapshot file missing"
dd if="$TMP/b.bin" of="$POOL/vm/disk0" bs=64K seek=5 conv=notrunc status=none
blockctl call pool.dataset.update '["demo/vm/disk0",{"volsize":33554432}]' >/dev/null
blockctl call zfs.snapshot.rollback '["demo/vm/disk0@s1"]' >/dev/null
dd if="$POOL/vm/disk0" of="$TMP/back.bin" bs=64K skip=5 count=3 status=none
cmp -s "$TMP/a.bin" "$TMP/back.bin" || fail "rollback did not restore the snapshot's data"
out=$(blockctl call pool.dataset.query '[[["id","=","demo/vm/disk0"]],{"get":true}]')
[ "$(jget "$out" 'j["volsize"]["parsed"]')" = 16777216 ] || fail "rollback volsize: $out"
out=$(blockctl call zfs.snapshot.query '[[["id","=","demo/vm/disk0@s1"]],{"get":true}]')
[ "$(jget "$out" 'j["snapshot_name"]')" = s1 ] || fail "snapshot row: $out"
[ "$(jget "$out" 'j["dataset"]')" = demo/vm/disk0 ] || fail "snapshot row: $out"

# clone, then the refusals that protect it
blockctl call zfs.snapshot.clone '{"snapshot":"demo/vm/disk0@s1","dataset_dst":"demo/c1"}' >/dev/null
cmp -s "$POOL/vm/disk0@s1" "$POOL/c1" || fail "clone differs from its snapshot"
expect_error zfs.snapshot.delete '["demo/vm/disk0@s1"]' "dependent clones (demo/c1)"
expect_error pool.dataset.delete '["demo/vm/disk0"]' "has snapshots"
expect_error pool.dataset.delete '["demo/vm",{"recursive":true}]' "has dependent clones"

# memory backend: configuration persists, data does not
blockctl call pool.dataset.create '{"name":"demo/mem","type":"VOLUME","volsize":1048576,"backend":"memory"}' >/dev/null
[ ! -e "$POOL/mem" ] || fail "memory volume created a file"

# restart: everything persisted
blockd_stop
blockd_start
out=$(blockctl call pool.dataset.query '[[["id","=","demo/c1"]],{"get":true}]')
[ "$(jget "$out" 'j["origin"]["value"]')" = demo/vm/disk0@s1 ] || fail "origin lost: $out"
out=$(blockctl call pool.dataset.query '[[["id","=","demo/mem"]],{"get":true}]')
[ "$(jget "$out" 'j["backend"]')" = memory ] || fail "memory volume lost: $out"
out=$(blockctl call pool.dataset.query '[[["id","=","demo/vm/disk0"]],{"get":true}]')
[ "$(jget "$out" 'j["sync"]["value"]')" = ALWAYS ] || fail "sync lost: $out"
out=$(blockctl call zfs.snapshot.query '[[], {"count":true}]')
[ "$out" = 1 ] || fail "snapshot count after restart: $out"

# delete in the right order
blockctl call pool.dataset.delete '["demo/c1"]' >/dev/null
blockctl call zfs.snapshot.delete '["demo/vm/disk0@s1"]' >/dev/null
blockctl call pool.dataset.delete '["demo/vm",{"recursive":true}]' >/dev/null
[ ! -e "$POOL/vm" ] || fail "directory left after recursive delete"
out=$(blockctl call pool.dataset.query '[[["pool","=","demo"]],{"count":true}]')
[ "$out" = 2 ] || fail "datasets left: $out (wanted demo and demo/mem)"

# a shared volume: refused at once naming the share; with force deleted,
# its iSCSI extent and NBD export going with it (docs/api-datasets.md)
blockctl volume create demo/shared --size 1M >/dev/null
blockctl share nbd create demo/shared --name shared >/dev/null
blockctl share iscsi create demo/shared >/dev/null
expect_error pool.dataset.delete '["demo/shared"]' "exported over NBD as 'shared'"
blockctl call pool.dataset.delete '["demo/shared",{"force":true}]' >/dev/null
[ ! -e "$POOL/shared" ] || fail "the force-deleted volume's file stayed"
out=$(blockctl call nbd.export.query '[[["name","=","shared"]],{"count":true}]')
[ "$out" = 0 ] || fail "the force-deleted volume's NBD export stayed"
out=$(blockctl call iscsi.extent.query '[[["disk","=","zvol/demo/shared"]],{"count":true}]')
[ "$out" = 0 ] || fail "the force-deleted volume's iSCSI extent stayed"
blockd_alive || fail "daemon died"
blockd_stop
pass
