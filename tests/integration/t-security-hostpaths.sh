#!/usr/bin/env bash
# Host paths come from the operator, never from an API client
# (docs/security.md "Host paths"): the two attacks of the second
# hardening pass, replayed, each now refused with a JSON-RPC error that
# says why, and nothing created, read or changed on the host.
#  1. File pools: a pool at <tmp>/var/spool/cron/crontabs (outside
#     STATE/pools and the --allow-dir directories), a non-empty allowed
#     directory, an NBD export of a file planted in a pool, a FILE extent
#     over a planted file, a dataset outside its pool; after an "upgrade"
#     (rows an older version accepted), the pool is UNAVAIL and the export
#     not served, an RBD pool with a conf outside the rules UNAVAIL, with
#     the reason logged or in status_detail.
#  2. RBD pools: a ceph.conf written into a volume over NBD and named as
#     conf; conf=/etc/shadow; a group-writable conf, a symlinked one; a
#     conf in an allowed directory that asks for log_file, admin_socket
#     and run_dir: the pool connects (mon_host is all blockd takes from
#     it) and none of those files appears; a cephx key given as data is
#     stored sealed and never returned.
. "$(dirname "$0")/lib.sh"
need nbdinfo python3 md5sum stat
/usr/bin/python3 -c 'import nbd' 2>/dev/null || fail "python3-libnbd missing"
ceph_start
SRV=$TMP/srv    # where the operator lets pools be made
ETC=$TMP/ceph   # where the operator keeps Ceph files
mkdir -p "$SRV" "$ETC"
chmod 0755 "$ETC"
blockd_start --allow-dir "$SRV" --allow-dir "$ETC"
POOL=$STATE/pools/demo

# refused CASE WANT-ERRNO WANT-TEXT METHOD PARAMS
refused() {
    local what=$1 want_errno=$2 want=$3 out
    if out=$(api_raw "$SOCK" "$4" "$5"); then
        fail "$what: accepted"
    fi
    [ "${out%% *}" = "$want_errno" ] || fail "$what: errno ${out%% *}, want $want_errno: $out"
    grep -q -- "$want" <<<"$out" || fail "$what: error lacks '$want': $out"
    echo "refused: $what: $out"
}

# ---- 1. file pools ----
CRON=$TMP/var/spool/cron/crontabs
mkdir -p "$CRON"
echo "# root's crontab" >"$CRON/root"
sum_cron=$(md5sum <"$CRON/root")
refused "pool at a crontab directory" EINVAL "must lie below $POOL\|must lie below $STATE/pools" \
    pool.create "[{\"name\": \"cron\", \"path\": \"$CRON\"}]"
refused "pool at a new directory outside the allowed ones" EINVAL "blockd --allow-dir" \
    pool.create "[{\"name\": \"cron\", \"path\": \"$TMP/var/spool/cron/new\"}]"
[ ! -e "$TMP/var/spool/cron/new" ] || fail "a refused pool.create made its directory"
mkdir -p "$SRV/full" && echo data >"$SRV/full/keep"
refused "pool at a non-empty allowed directory" EINVAL "not empty" \
    pool.create "[{\"name\": \"full\", \"path\": \"$SRV/full\"}]"
refused "volume in the refused pool" ENOENT "" \
    pool.dataset.create '[{"name": "cron/root", "type": "VOLUME", "volsize": 1048576}]'
refused "volume escaping its pool" EINVAL "" \
    pool.dataset.create '[{"name": "demo/../../../var/spool/cron/crontabs/root", "type": "VOLUME", "volsize": 1048576}]'
[ "$(md5sum <"$CRON/root")" = "$sum_cron" ] || fail "root's crontab changed"
[ "$(ls -A "$CRON")" = root ] || fail "files appeared in the crontab directory: $(ls -A "$CRON")"
[ "$(cat "$SRV/full/keep")" = data ] || fail "the non-empty directory changed"
for p in cron full; do
    blockctl call pool.query "[[[\"name\", \"=\", \"$p\"]]]" | grep -q "\"$p\"" && fail "pool $p recorded"
done
# allowed and new: fine
api_raw "$SOCK" pool.create "[{\"name\": \"srv\", \"path\": \"$SRV/p\"}]" >/dev/null ||
    fail "a pool in an allowed directory was refused"

# a file planted in a pool is not blockd's: neither exported nor taken
# over by a FILE extent
head -c 1M /dev/urandom >"$POOL/planted.img"
sum_planted=$(md5sum <"$POOL/planted.img")
refused "NBD export of a planted file" EINVAL "not a blockd volume" \
    nbd.export.create "[{\"name\": \"planted\", \"path\": \"$POOL/planted.img\"}]"
if nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/planted" >/dev/null 2>&1; then
    fail "the planted file is served"
fi
refused "FILE extent over a planted file" EEXIST "created by blockd" \
    iscsi.extent.create "[{\"name\": \"planted\", \"type\": \"FILE\", \"path\": \"$POOL/planted.img\", \"filesize\": 2097152}]"
[ "$(md5sum <"$POOL/planted.img")" = "$sum_planted" ] || fail "the planted file changed"
[ "$(stat -c %s "$POOL/planted.img")" = 1048576 ] || fail "the planted file was grown"

# ---- 1b. rows an older version accepted: refused at start ----
blockctl volume create demo/v --size 1M >/dev/null || fail "volume create"
blockd_stop
# an RBD pool whose conf an older version let a client name anywhere
cp "$CEPH_CONF" "$TMP/var/old.conf"
/usr/bin/python3 - "$STATE/blockd.db" "$CRON" "$POOL/planted.img" "$CEPH_POOL" "$TMP/var/old.conf" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
db.execute("INSERT INTO pools (name, path, created) VALUES ('oldrbd', ?, ?)", ("rbd:%s/old" % sys.argv[4], int(time.time())))
rid = db.execute("SELECT id FROM pools WHERE name = 'oldrbd'").fetchone()[0]
db.execute("INSERT INTO datasets (name, pool_id, type, created) VALUES ('oldrbd', ?, 'FILESYSTEM', ?)", (rid, int(time.time())))
db.execute("INSERT INTO pool_rbd (pool_id, rbd_pool, namespace, conf) VALUES (?, ?, 'old', ?)", (rid, sys.argv[4], sys.argv[5]))
db.execute("INSERT INTO pools (name, path, created) VALUES ('cron', ?, ?)", (sys.argv[2], int(time.time())))
pid = db.execute("SELECT id FROM pools WHERE name = 'cron'").fetchone()[0]
db.execute("INSERT INTO datasets (name, pool_id, type, created) VALUES ('cron', ?, 'FILESYSTEM', ?)", (pid, int(time.time())))
db.execute("INSERT INTO nbd_export (name, path) VALUES ('old', ?)", (sys.argv[3],))
db.commit()
PY
blockd_start --allow-dir "$SRV" --allow-dir "$ETC"
grep -q "pool cron is unavailable (its files are not opened): $CRON: a pool directory must lie below" \
    "$BLOCKD_LOG" || fail "no log line for the refused pool"
st=$(blockctl call pool.query '[[["name", "=", "cron"]]]' | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["status"])')
[ "$st" = UNAVAIL ] || fail "the old pool at the crontab directory is $st"
refused "volume in the old pool" EXDEV "" \
    pool.dataset.create '[{"name": "cron/root", "type": "VOLUME", "volsize": 1048576}]'
if nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/old" >/dev/null 2>&1; then
    fail "the old export of a planted file is served"
fi
grep -q "nbd: export of $POOL/planted.img disabled: .*not a blockd volume" "$BLOCKD_LOG" ||
    fail "no log line for the refused export"
[ "$(md5sum <"$CRON/root")" = "$sum_cron" ] || fail "root's crontab changed"
[ "$(md5sum <"$POOL/planted.img")" = "$sum_planted" ] || fail "the planted file changed"
detail=
for _ in $(seq 1 100); do
    detail=$(blockctl call pool.query '[[["name", "=", "oldrbd"]]]' | python3 -c 'import json,sys; r=json.load(sys.stdin)[0]; print(r["status"], r["status_detail"])')
    grep -q "settings are refused" <<<"$detail" && break
    sleep 0.2
done
grep -q "^UNAVAIL .*settings are refused: $TMP/var/old.conf: a Ceph conf or keyring must be in /etc/ceph" \
    <<<"$detail" || fail "the old RBD pool with a conf outside the rules: $detail"

# ---- 2. RBD pools ----
EVIL=$TMP/evil
mkdir -p "$EVIL"
evil_conf() { # a ceph.conf asking librados to write and load files
    printf '[global]\nmon host = %s\nlog file = %s/log\nlog to file = true\nadmin socket = %s/asok\nrun dir = %s\nplugin dir = %s\ndebug ms = 20\n#' \
        "$1" "$EVIL" "$EVIL" "$EVIL" "$EVIL"
}
# the conf written into a volume over NBD, then named as conf
blockctl share nbd create demo/v --name v >/dev/null || fail "share v"
evil_conf "$CEPH_MON_HOST" >"$TMP/conf.bin"
/usr/bin/python3 - "nbd://127.0.0.1:$NBD_PORT/v" "$TMP/conf.bin" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
data = open(sys.argv[2], "rb").read()
h.pwrite(data + bytes(512 - len(data) % 512), 0); h.flush(); h.shutdown()
PY
grep -q "log to file" "$POOL/v" || fail "the conf did not reach the volume's file"
refused "conf in a volume" EACCES "state directory or a pool" \
    pool.create "[{\"name\": \"r1\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"conf\": \"$POOL/v\"}}]"
refused "conf=/etc/shadow" EACCES "must be in /etc/ceph or a directory the operator allows" \
    pool.create "[{\"name\": \"r1\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"conf\": \"/etc/shadow\"}}]"
refused "keyring=/etc/shadow" EACCES "must be in /etc/ceph or a directory the operator allows" \
    pool.create "[{\"name\": \"r1\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"mon_host\": \"$CEPH_MON_HOST\", \"keyring\": \"/etc/shadow\"}}]"
evil_conf "$CEPH_MON_HOST" >"$ETC/gw.conf"
chmod 0664 "$ETC/gw.conf"
refused "group-writable conf" EPERM "not writable by group or others" \
    pool.create "[{\"name\": \"r1\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"conf\": \"$ETC/gw.conf\"}}]"
ln -s "$ETC/gw.conf" "$ETC/link.conf"
chmod 0644 "$ETC/gw.conf"
refused "symlinked conf" EINVAL "symbolic link" \
    pool.create "[{\"name\": \"r1\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"conf\": \"$ETC/link.conf\"}}]"
refused "mon_host with a newline" EINVAL "invalid character" \
    pool.create "[{\"name\": \"r1\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"mon_host\": \"127.0.0.1\\nlog_file=/x\"}}]"
blockctl call pool.query '[[["name", "=", "r1"]]]' | grep -q '"r1"' && fail "a refused RBD pool was recorded"
# A conf the operator placed in an allowed directory: blockd takes its
# mon_host only; librados never sees log_file, admin_socket, run_dir.
api_raw "$SOCK" pool.create "[{\"name\": \"r2\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"conf\": \"$ETC/gw.conf\"}}]" \
    >/dev/null || fail "a conf in an allowed directory was refused: $(tail -3 "$BLOCKD_LOG")"
blockctl volume create r2/img --size 4M >/dev/null || fail "volume create on r2"
[ -z "$(ls -A "$EVIL")" ] || fail "librados wrote files the conf asked for: $(ls -A "$EVIL")"
# The cluster as data: the key stored sealed, never returned.
KEY=AQBqNnBlAAAAABAAmZ0R1eWsVNQuHDeKbZwz2g==
api_raw "$SOCK" pool.create "[{\"name\": \"r3\", \"rbd\": {\"pool\": \"$CEPH_POOL\", \"namespace\": \"sealed\", \"mon_host\": \"$CEPH_MON_HOST\", \"key\": \"$KEY\"}}]" \
    >/dev/null || fail "pool.create with mon_host and key: $(tail -3 "$BLOCKD_LOG")"
row=$(blockctl call pool.query '[[["name", "=", "r3"]]]')
grep -q "$KEY" <<<"$row" && fail "pool.query returned the key: $row"
python3 -c 'import json,sys; r=json.loads(sys.argv[1])[0]["rbd"]; assert r["key_set"] is True and "key" not in r, r' \
    "$row" || fail "rbd row: $row"
grep -q "$KEY" "$BLOCKD_LOG" && fail "the key is in the log"
blockd_stop
grep -aq "$KEY" "$STATE/blockd.db"* && fail "the key is stored in cleartext"
blockd_start --allow-dir "$SRV" --allow-dir "$ETC"
for _ in $(seq 1 100); do
    st=$(blockctl call pool.query '[[["name", "=", "r3"]]]' | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["status"])')
    [ "$st" = ONLINE ] && break
    sleep 0.2
done
[ "$st" = ONLINE ] || fail "pool r3 (mon_host and a sealed key) is $st after a restart"
[ -z "$(ls -A "$EVIL")" ] || fail "librados wrote files the conf asked for: $(ls -A "$EVIL")"
blockctl volume delete r2/img >/dev/null || fail "volume delete"
pass
