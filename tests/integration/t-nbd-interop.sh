#!/usr/bin/env bash
# slow: run.sh starts it first (30 s or more)
# NBD interop with real clients: nbdinfo (--list, flags, --map), qemu-img
# convert/compare/map, nbdcopy over 4 connections, fio verify over 4
# connections, the Unix socket, and the blockctl share nbd commands.
. "$(dirname "$0")/lib.sh"
need nbdinfo nbdcopy qemu-img fio python3 md5sum
blockd_start

blockctl volume create demo/vm1 --size 64M >/dev/null || fail "volume create"
uri=$(blockctl share nbd create demo/vm1 --name vm1 --description "first vm") || fail "share nbd create"
[ "$uri" = "nbd://127.0.0.1:$NBD_PORT/vm1" ] || fail "create printed '$uri'"
U=nbd://127.0.0.1:$NBD_PORT/vm1

# --list shows the export and its description.
nbdinfo --list "nbd://127.0.0.1:$NBD_PORT" >"$TMP/list" || fail "nbdinfo --list"
grep -q 'export="vm1"' "$TMP/list" || fail "--list lacks vm1"
grep -q 'description: first vm' "$TMP/list" || fail "--list lacks the description"

# Every advertised flag matches the settings (file volume, writable, multi-conn).
check_flag() { # URI key value
    local v
    v=$(nbdinfo --json "$1" | python3 -c "import json,sys; print(str(json.load(sys.stdin)['exports'][0]['$2']).lower())")
    [ "$v" = "$3" ] || fail "$1: $2 is $v, expected $3"
}
check_flag "$U" is_read_only false
check_flag "$U" can_flush true
check_flag "$U" can_fua true
check_flag "$U" can_trim true
check_flag "$U" can_zero true
check_flag "$U" can_fast_zero true
check_flag "$U" can_df true
check_flag "$U" can_multi_conn true
check_flag "$U" can_cache true
check_flag "$U" export-size 67108864
check_flag "$U" block_size_minimum 1
check_flag "$U" block_size_maximum 33554432

# A read-only export without multi-conn says so.
blockctl share nbd create demo/vm1 --name ro --readonly --no-multi-conn >/dev/null || fail "create ro"
R=nbd://127.0.0.1:$NBD_PORT/ro
check_flag "$R" is_read_only true
check_flag "$R" can_trim false
check_flag "$R" can_zero false
check_flag "$R" can_fua false
check_flag "$R" can_multi_conn false

# qemu-img convert in, compare; local file with holes.
python3 - "$TMP/src.img" <<'PY'
import os, sys
with open(sys.argv[1], "wb") as f:
    f.truncate(64 << 20)
    for off, n in ((0, 3 << 20), (20 << 20, 1 << 20), (40 << 20, 5 << 20), ((64 << 20) - 4096, 4096)):
        f.seek(off); f.write(os.urandom(n))
PY
qemu-img convert -n -f raw -O raw "$TMP/src.img" "$U" || fail "qemu-img convert in"
qemu-img compare -f raw -F raw "$TMP/src.img" "$U" >/dev/null || fail "qemu-img compare"
qemu-img convert -f raw -O raw "$U" "$TMP/back.img" || fail "qemu-img convert out"
cmp "$TMP/src.img" "$TMP/back.img" || fail "converted-out image differs"

# The export's holes match the local file's (qemu-img map and nbdinfo --map).
qemu-img map --output=json -f raw "$TMP/src.img" | python3 -c '
import json,sys; print([(e["start"], e["length"], e["data"]) for e in json.load(sys.stdin)])' >"$TMP/map.local"
qemu-img map --output=json -f raw "$U" | python3 -c '
import json,sys; print([(e["start"], e["length"], e["data"]) for e in json.load(sys.stdin)])' >"$TMP/map.nbd"
cmp -s "$TMP/map.local" "$TMP/map.nbd" || fail "qemu-img map differs: $(cat "$TMP/map.local") vs $(cat "$TMP/map.nbd")"
nbdinfo --map "$U" | awk '{print $1, $2, $3}' >"$TMP/nbdmap"
grep -q "^0 3145728 0$" "$TMP/nbdmap" || fail "nbdinfo --map: first data extent: $(cat "$TMP/nbdmap")"
grep -q "^3145728 17825792 3$" "$TMP/nbdmap" || fail "nbdinfo --map: hole: $(cat "$TMP/nbdmap")"

# nbdcopy with 4 connections, out and in, checksums.
nbdcopy --connections=4 "$U" "$TMP/copy.img" || fail "nbdcopy out"
[ "$(md5sum <"$TMP/copy.img")" = "$(md5sum <"$TMP/src.img")" ] || fail "nbdcopy out checksum"
head -c $((64 << 20)) /dev/urandom >"$TMP/rand.img"
nbdcopy --connections=4 "$TMP/rand.img" "$U" || fail "nbdcopy in"
nbdcopy --connections=4 "$U" "$TMP/rand.back" || fail "nbdcopy out 2"
[ "$(md5sum <"$TMP/rand.back")" = "$(md5sum <"$TMP/rand.img")" ] || fail "nbdcopy in checksum"

# fio, nbd engine, verify=crc32c, 4 connections (one per job, disjoint ranges).
fio --name=verify --ioengine=nbd --uri="$U" --rw=randwrite --bs=4k --iodepth=16 \
    --numjobs=4 --size=16M --offset_increment=16M --verify=crc32c --verify_fatal=1 --verify_state_save=0 \
    --do_verify=1 --output="$TMP/fio.out" || fail "fio verify: $(tail -5 "$TMP/fio.out")"
grep -q "err= 0" "$TMP/fio.out" || fail "fio reported errors"

# Reads of a file that is not in the page cache complete asynchronously in
# the io_uring engine (a completion that never woke the reactor once hung
# the client right here), and return the file's bytes.
# (A path export names a volume's file: a volume whose data is written
# straight into its file here, so that it is on disk but not cached.)
blockctl volume create demo/cold --size 32M >/dev/null || fail "volume create cold"
COLD=$STATE/pools/demo/cold
head -c 32M /dev/urandom | dd of="$COLD" conv=notrunc status=none
blockctl share nbd create --path "$COLD" --name cold >/dev/null || fail "share cold"
C=nbd://127.0.0.1:$NBD_PORT/cold
sync "$COLD"
dd if="$COLD" iflag=nocache count=0 status=none # drop it from the page cache
timeout -k 5 60 fio --name=cold --ioengine=nbd --uri="$C" --rw=randread --bs=4k --iodepth=1 \
    --size=32M --runtime=2 --time_based --output="$TMP/cold.out" || fail "fio on a cold file hung or failed"
grep -q "err= 0" "$TMP/cold.out" || fail "fio on a cold file reported errors"
dd if="$COLD" iflag=nocache count=0 status=none
timeout -k 5 60 nbdcopy "$C" "$TMP/cold.back" || fail "nbdcopy of a cold file"
cmp -s "$COLD" "$TMP/cold.back" || fail "cold file read back differs"
blockctl share nbd delete cold >/dev/null || fail "share nbd delete cold"

# Unix socket listener (set live), and the default export "".
blockctl call nbd.global.update "[{\"unix_socket\": \"$STATE/nbd.sock\"}]" >/dev/null || fail "unix_socket"
blockctl call nbd.export.create '[{"name": "", "dataset": "demo/vm1", "readonly": true}]' >/dev/null ||
    fail "default export"
nbdinfo --size "nbd+unix:///vm1?socket=$STATE/nbd.sock" | grep -qx 67108864 || fail "unix socket"
nbdinfo --size "nbd://127.0.0.1:$NBD_PORT" | grep -qx 67108864 || fail "default export"

# list shows URIs; delete works; a deleted export refuses new connections.
blockctl share nbd list >"$TMP/ls" || fail "share nbd list"
grep -q "nbd://127.0.0.1:$NBD_PORT/ro" "$TMP/ls" || fail "list lacks the ro URI: $(cat "$TMP/ls")"
blockctl share nbd delete ro >/dev/null || fail "share nbd delete"
if nbdinfo "$R" >/dev/null 2>&1; then fail "deleted export still served"; fi
nbdinfo --size "$U" >/dev/null || fail "other export disturbed by delete"

# A dataset in use by an export cannot be deleted.
if blockctl volume delete demo/vm1 2>"$TMP/vdel.err"; then fail "exported volume deleted"; fi
grep -q "exported over NBD" "$TMP/vdel.err" || fail "volume delete error: $(cat "$TMP/vdel.err")"

blockd_stop
pass
