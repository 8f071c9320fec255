#!/usr/bin/env bash
# Confinement: what the API can make the daemon open,
# create, replace or grow on the host.
#  1. NBD path exports: only a volume's file (served as that volume);
#     iSCSI FILE extents: only files inside a pool, never through a
#     symlink, never a host file (/etc/passwd, the DB).
#  2. nbd.global.update unix_socket: never replaces a regular file or a live
#     socket; a stale socket is replaced; mode 0660; only in allowed dirs.
#  3. pool.create: absolute, canonical, no symlink, not a system directory,
#     not procfs; a symlink planted inside a pool sends nothing outside it.
. "$(dirname "$0")/lib.sh"
need nbdinfo python3 stat md5sum
mkdir -p "$TMP/srv" # where the operator lets pools be made (--allow-dir)
blockd_start --allow-dir "$TMP/srv"

POOL=$STATE/pools/demo
OUT=$TMP/outside
mkdir -p "$OUT"

# Expect a JSON-RPC error whose text contains $2; $1 names the case.
refused() {
    local what=$1 want=$2
    shift 2
    if blockctl call "$@" >"$TMP/out" 2>"$TMP/err"; then
        fail "$what: accepted: $(cat "$TMP/out")"
    fi
    grep -q -- "$want" "$TMP/err" || fail "$what: error lacks '$want': $(cat "$TMP/err")"
}

# ---- 1. exports and extents ----
refused "export /etc/passwd" "must be a volume's file inside a pool" \
    nbd.export.create '[{"name": "pw", "path": "/etc/passwd"}]'
refused "export the config DB" "must be a volume's file inside a pool" \
    nbd.export.create "[{\"name\": \"db\", \"path\": \"$STATE/blockd.db\"}]"
refused "export a host block device" "must be a volume's file inside a pool" \
    nbd.export.create '[{"name": "dev", "path": "/dev/null"}]'
# A symlink inside the pool that points at a host file.
ln -s /etc/passwd "$POOL/pw-link"
refused "export a symlink in a pool" "not a blockd volume" \
    nbd.export.create "[{\"name\": \"pw\", \"path\": \"$POOL/pw-link\"}]"
# ... or a directory symlink on the way.
ln -s /etc "$POOL/etc-link"
refused "export through a symlinked directory" "not a blockd volume" \
    nbd.export.create "[{\"name\": \"pw\", \"path\": \"$POOL/etc-link/passwd\"}]"
refused "export with .." "not a blockd volume\|inside a pool" \
    nbd.export.create "[{\"name\": \"pw\", \"path\": \"$POOL/../../blockd.db\"}]"
grep -q "refused path /etc/passwd (peer" "$BLOCKD_LOG" || fail "no log line naming the peer"
# A volume's own file is served, as that volume.
blockctl volume create demo/v1 --size 16M >/dev/null || fail "volume create"
blockctl call nbd.export.create "[{\"name\": \"v1\", \"path\": \"$POOL/v1\"}]" \
    >/dev/null || fail "export of a volume's file refused"
nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/v1" | grep -qx 16777216 || fail "volume export not served"
# A plain file inside the pool was not made by blockd: refused.
truncate -s 8M "$POOL/plain.img"
refused "export a file blockd did not create" "not a blockd volume" \
    nbd.export.create "[{\"name\": \"plain\", \"path\": \"$POOL/plain.img\"}]"
# Nothing was exported: none of the refused names exists.
for n in pw db dev plain; do
    if nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/$n" >/dev/null 2>&1; then
        fail "export $n is served"
    fi
done

# iSCSI FILE extents: outside a pool (not created), through a symlink (not
# grown), and the DISK form cannot name anything but a dataset.
refused "FILE extent outside a pool" "reside within a pool" \
    iscsi.extent.create "[{\"name\": \"e1\", \"type\": \"FILE\", \"path\": \"$OUT/new.img\", \"filesize\": 1048576}]"
[ ! -e "$OUT/new.img" ] || fail "FILE extent created a file outside the pool"
echo "foreign data" >"$OUT/foreign"
sum_before=$(md5sum <"$OUT/foreign")
ln -s "$OUT/foreign" "$POOL/foreign-link"
refused "FILE extent through a symlink" "symbolic links" \
    iscsi.extent.create "[{\"name\": \"e2\", \"type\": \"FILE\", \"path\": \"$POOL/foreign-link\", \"filesize\": 1048576}]"
ln -s "$OUT" "$POOL/out-dir"
refused "FILE extent in a symlinked directory" "symbolic links" \
    iscsi.extent.create "[{\"name\": \"e3\", \"type\": \"FILE\", \"path\": \"$POOL/out-dir/grown.img\", \"filesize\": 1048576}]"
[ "$(md5sum <"$OUT/foreign")" = "$sum_before" ] || fail "a FILE extent changed a foreign file"
[ ! -e "$OUT/grown.img" ] || fail "a FILE extent created a file through a symlink"
refused "DISK extent naming a host path" "zvol\|Invalid dataset" \
    iscsi.extent.create '[{"name": "e4", "type": "DISK", "disk": "/etc/passwd"}]'
refused "DISK extent escaping with .." "Invalid dataset" \
    iscsi.extent.create '[{"name": "e5", "type": "DISK", "disk": "zvol/demo/../../etc"}]'
# A FILE extent inside the pool works.
blockctl call iscsi.extent.create "[{\"name\": \"e6\", \"type\": \"FILE\", \"path\": \"$POOL/lun.img\", \"filesize\": 1048576}]" \
    >/dev/null || fail "FILE extent inside the pool refused"
[ "$(stat -c %s "$POOL/lun.img")" = 1048576 ] || fail "FILE extent file not created"

# ---- 3. pools ----
refused "pool in /etc" "system directory /etc" pool.create '[{"name": "p1", "path": "/etc"}]'
refused "pool in /etc/x" "system directory /etc" pool.create '[{"name": "p1", "path": "/etc/blockd-pool"}]'
[ ! -e /etc/blockd-pool ] || fail "pool.create made /etc/blockd-pool"
refused "pool /proc/self" "system directory /proc" pool.create '[{"name": "p1", "path": "/proc/self"}]'
refused "pool relative" "absolute" pool.create '[{"name": "p1", "path": "rel/dir"}]'
refused "pool with .." "canonical" pool.create "[{\"name\": \"p1\", \"path\": \"$TMP/a/../b\"}]"
ln -s "$OUT" "$TMP/pool-link"
refused "pool at a symlink" "symbolic link" pool.create "[{\"name\": \"p1\", \"path\": \"$TMP/pool-link\"}]"
refused "pool below a symlink" "symbolic link" pool.create "[{\"name\": \"p1\", \"path\": \"$TMP/pool-link/sub\"}]"
[ ! -e "$OUT/sub" ] || fail "pool.create made a directory through a symlink"
refused "pool containing the state dir" "state directory" pool.create "[{\"name\": \"p1\", \"path\": \"$TMP\"}]"
blockctl call pool.query '[[["name", "=", "p1"]]]' | grep -q '"p1"' && fail "a refused pool was recorded"
# A good pool still works.
blockctl call pool.create "[{\"name\": \"p2\", \"path\": \"$TMP/srv/p2dir\"}]" >/dev/null || fail "good pool refused"

# Symlinks planted inside a pool: dataset create and open stay inside.
ln -s "$OUT" "$POOL/fs-link"
refused "volume under a symlinked directory" "cannot create dataset" \
    pool.dataset.create '[{"name": "demo/fs-link/vol", "type": "VOLUME", "volsize": 1048576}]'
[ -z "$(ls -A "$OUT" | grep -v '^foreign$')" ] || fail "dataset create wrote outside the pool: $(ls "$OUT")"
ln -s "$OUT/planted" "$POOL/v2"
refused "volume over a planted symlink" "cannot create dataset" \
    pool.dataset.create '[{"name": "demo/v2", "type": "VOLUME", "volsize": 1048576}]'
[ ! -e "$OUT/planted" ] || fail "dataset create followed a planted symlink"
# An existing volume's file swapped for a symlink is not opened.
blockctl volume create demo/v3 --size 1M >/dev/null || fail "volume create v3"
echo secret >"$OUT/secret"
rm -f "$POOL/v3" && ln -s "$OUT/secret" "$POOL/v3"
refused "open a volume swapped for a symlink" "cannot open\|Too many levels" \
    nbd.export.create '[{"name": "v3", "dataset": "demo/v3"}]'
refused "snapshot of a volume swapped for a symlink" "Too many levels\|cannot\|ELOOP" \
    zfs.snapshot.create '[{"dataset": "demo/v3", "name": "s1"}]'
[ "$(cat "$OUT/secret")" = secret ] || fail "the symlink target changed"
[ -z "$(ls -A "$OUT" | grep -v '^\(foreign\|secret\)$')" ] || fail "files appeared outside: $(ls "$OUT")"

# ---- 2. the NBD Unix socket ----
echo "keep me" >"$STATE/regular"
refused "unix_socket on a regular file" "not a socket" \
    nbd.global.update "[{\"unix_socket\": \"$STATE/regular\"}]"
[ -f "$STATE/regular" ] && [ "$(cat "$STATE/regular")" = "keep me" ] || fail "the regular file was replaced"
refused "unix_socket outside the allowed dirs" "allow-dir" \
    nbd.global.update "[{\"unix_socket\": \"$OUT/nbd.sock\"}]"
[ ! -e "$OUT/nbd.sock" ] || fail "socket created outside the allowed dirs"
refused "tls_key outside the allowed dirs" "allow-dir" \
    nbd.global.update '[{"tls_key": "/etc/ssl/private/ssl-cert-snakeoil.key"}]'
# A live socket (someone listening) is not taken over.
python3 - "$STATE/live.sock" <<'PY' &
import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); time.sleep(30)
PY
LIVE=$!
for _ in $(seq 1 100); do [ -S "$STATE/live.sock" ] && break; sleep 0.05; done
if blockctl call nbd.global.update "[{\"unix_socket\": \"$STATE/live.sock\"}]" >/dev/null 2>"$TMP/err"; then
    fail "a live socket was replaced"
fi
kill "$LIVE" 2>/dev/null || true
wait "$LIVE" 2>/dev/null || true
# A stale socket (bound, nobody listening) is replaced, with mode 0660.
python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$STATE/nbd.sock"
[ -S "$STATE/nbd.sock" ] || fail "could not make a stale socket"
blockctl call nbd.global.update "[{\"unix_socket\": \"$STATE/nbd.sock\"}]" >/dev/null 2>"$TMP/err" ||
    fail "stale socket not replaced: $(cat "$TMP/err")"
[ "$(stat -c %a "$STATE/nbd.sock")" = 660 ] || fail "socket mode $(stat -c %a "$STATE/nbd.sock"), want 660"
nbdinfo --size "nbd+unix:///v1?socket=$STATE/nbd.sock" | grep -qx 16777216 || fail "unix socket not served"

pass
