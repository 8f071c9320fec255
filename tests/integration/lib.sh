# Shared helpers for integration tests. Source it from a test script:
#   . "$(dirname "$0")/lib.sh"
#   blockd_start            # private daemon: $STATE $SOCK $NBD_PORT $ISCSI_PORT
#   blockctl volume create demo/x --size 64M
#   ... assertions (fail "why" on error) ...
# The daemon is stopped and the temp dir removed on exit.
set -euo pipefail

BUILD=${BUILD:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build}
BLOCKD_BIN=${BLOCKD_BIN:-$BUILD/src/daemon/blockd}
BLOCKCTL_BIN=${BLOCKCTL_BIN:-$BUILD/src/cli/blockctl}
TEST_NAME=$(basename "$0" .sh)
# tests/integration/wsclient.py for the tests' Python WebSocket clients
export PYTHONPATH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)${PYTHONPATH:+:$PYTHONPATH}
# BLOCKD_TEST_TMP: where the test's directory goes (run.sh picks tmpfs)
TMP=$(mktemp -d "${BLOCKD_TEST_TMP:-/tmp}/blockd-${TEST_NAME}.XXXXXX")
STATE=$TMP/state
SOCK=$STATE/blockd.sock
BLOCKD_PID=
BLOCKD_LOG=$TMP/blockd.log

fail() {
    echo "FAIL: $TEST_NAME: $*" >&2
    if [ -f "$BLOCKD_LOG" ]; then
        echo "--- last lines of blockd log ---" >&2
        tail -n 30 "$BLOCKD_LOG" >&2
    fi
    exit 1
}

# A missing tool is a failure, never a silent skip.
need() {
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || fail "required tool '$t' is not installed (make deps)"
    done
}

# A TCP port for one of this test's listeners, outside the kernel's
# ephemeral range and reserved across tests run side by side.
FREE_PORT_BIN=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/free-port
free_port() {
    "$FREE_PORT_BIN"
}

blockctl() {
    "$BLOCKCTL_BIN" --socket "$SOCK" "$@"
}

# Start a private blockd. Extra arguments are passed to blockd.
blockd_start() {
    NBD_PORT=${NBD_PORT:-$(free_port)}
    local before=0
    [ -f "$BLOCKD_LOG" ] && before=$(wc -l <"$BLOCKD_LOG")
    ISCSI_PORT=${ISCSI_PORT:-$(free_port)}
    "$BLOCKD_BIN" --state-dir "$STATE" --log-level "${BLOCKD_LOG_LEVEL:-info}" \
        --nbd-listen "127.0.0.1:$NBD_PORT" --iscsi-listen "127.0.0.1:$ISCSI_PORT" "$@" \
        >>"$BLOCKD_LOG" 2>&1 &
    BLOCKD_PID=$!
    local i
    # Up to 60 s: an ASan daemon on a loaded machine can take a while; a
    # start-up that fails ends the loop at once (kill -0).
    for i in $(seq 1 1200); do
        # Only a ready line written by this start counts (restarts reuse the log).
        if tail -n +"$((before + 1))" "$BLOCKD_LOG" 2>/dev/null | grep -q "blockd ready"; then
            return 0
        fi
        kill -0 "$BLOCKD_PID" 2>/dev/null || fail "blockd exited during start-up"
        sleep 0.05
    done
    fail "blockd did not become ready in 60 s"
}

# Stop with SIGTERM and check it exits 0.
blockd_stop() {
    [ -n "$BLOCKD_PID" ] || return 0
    kill -TERM "$BLOCKD_PID" 2>/dev/null || true
    local rc=0
    wait "$BLOCKD_PID" || rc=$?
    BLOCKD_PID=
    [ "$rc" = 0 ] || fail "blockd exited with status $rc on SIGTERM"
}

blockd_alive() {
    [ -n "$BLOCKD_PID" ] && kill -0 "$BLOCKD_PID" 2>/dev/null
}

# blockd_threads: for a test that timed out waiting on the daemon, every
# thread's stack (gdb, when installed) into $TMP/blockd-threads.txt; prints
# the daemon's own frames, for the failure message.
blockd_threads() {
    blockd_alive && command -v gdb >/dev/null || return 0
    timeout 60 gdb -p "$BLOCKD_PID" -batch -ex "thread apply all bt" >"$TMP/blockd-threads.txt" 2>&1 || true
    echo "(blockd's threads in $TMP/blockd-threads.txt)"
    grep -E "^Thread |/src/" "$TMP/blockd-threads.txt" | grep -B1 "/src/" | head -60 || true
}

# Client processes a test starts in the background: killed on exit, so a
# failed test leaves none behind (holding the bench lock, or retrying).
BG_PIDS=()
CEPH_DIR= CEPH_PRIVATE= CEPH_OWN_POOL=
_cleanup() {
    local rc=$?
    for p in "${BG_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    if [ -n "$BLOCKD_PID" ]; then
        kill -KILL "$BLOCKD_PID" 2>/dev/null || true
        wait "$BLOCKD_PID" 2>/dev/null || true
    fi
    [ "$CEPH_PRIVATE" != 1 ] || "$CEPH_SCRIPT" stop "$CEPH_DIR" >/dev/null 2>&1 || true
    [ -z "$CEPH_OWN_POOL" ] || _ceph_pool delete "$CEPH_OWN_POOL" >/dev/null 2>&1 || true
    if [ "$rc" = 0 ]; then rm -rf "$TMP"; else echo "(test files kept in $TMP)" >&2; fi
}
trap _cleanup EXIT

# mount_fs TYPE [SIZE] (xfs with reflink, or ext4): a sparse image of that
# filesystem, SIZE bytes (default 1 GiB), in $TMP, loop-mounted at
# $TMP/TYPE (needs root). The test's exit kills the daemon first (it holds
# files there), then unmounts.
MOUNTS=()
_fs_cleanup() {
    local rc=$? m
    if [ -n "$BLOCKD_PID" ]; then
        kill -KILL "$BLOCKD_PID" 2>/dev/null || true
        wait "$BLOCKD_PID" 2>/dev/null || true
        BLOCKD_PID=
    fi
    for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    (exit "$rc")
    _cleanup
}
mount_fs() {
    [ "$(id -u)" = 0 ] || fail "needs root to loop-mount the $1 image"
    truncate -s "${2:-1G}" "$TMP/$1.img"
    case $1 in
    xfs) mkfs.xfs -q -m reflink=1 "$TMP/$1.img" ;;
    ext4) mkfs.ext4 -q -F "$TMP/$1.img" ;;
    esac || fail "mkfs.$1"
    mkdir -p "$TMP/$1"
    mount -o loop "$TMP/$1.img" "$TMP/$1" || fail "mount the $1 image"
    MOUNTS+=("$TMP/$1")
    trap _fs_cleanup EXIT
}

# A throwaway Ceph cluster (scripts/ceph-cluster.sh: one monitor, one
# in-memory OSD). Sets CEPH_CONF, CEPH_DIR (the cluster's directory) and
# CEPH_POOL, the RADOS pool (initialised for rbd) the test must use: name it
# as $CEPH_POOL, never as "rbd".
#   ceph_start            the run's shared cluster when run.sh started one
#                         (BLOCKD_IT_CEPH), in a pool of the test's own,
#                         deleted on exit; else a cluster of its own
#   ceph_start --private  a cluster of its own, stopped on exit, with the
#                         pool "rbd": for a test that stops, freezes or
#                         restarts the cluster
# A test file that names the pool rbd itself ("pool":"rbd", rbd/IMAGE,
# rbd:rbd, --gateway-ceph-conf without --gateway-pool) gets a cluster of
# its own too, as before the shared one: its images would meet other
# tests' there (use $CEPH_POOL to share).
# No Ceph on the machine: the test fails (make deps installs it).
CEPH_SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/ceph-cluster.sh
ceph_start() {
    need ceph-mon ceph-osd ceph rbd
    local why=
    if [ "${1:-}" = --private ]; then
        why="asked for"
    elif [ -z "${BLOCKD_IT_CEPH:-}" ]; then
        why="no shared cluster (not run by run.sh)"
    elif grep -Eq '\\?"pool\\?": *\\?"rbd\\?"|[[:space:]"'"'"'(]rbd/[[:alnum:]%_]|rbd:rbd|open_ioctx\(.rbd.\)' "$0"; then
        why="$TEST_NAME names the pool rbd"
    elif grep -q -- '--gateway-ceph-conf' "$0" && ! grep -q -- '--gateway-pool' "$0"; then
        why="$TEST_NAME starts gateway members on the default --gateway-pool rbd"
    fi
    if [ -n "$why" ]; then
        echo "ceph_start: a private cluster ($why)"
        CEPH_DIR=$TMP/ceph CEPH_PRIVATE=1
        "$CEPH_SCRIPT" start "$CEPH_DIR" >"$TMP/ceph-start.log" 2>&1 ||
            fail "the Ceph test cluster did not start: $(tail -5 "$TMP/ceph-start.log")"
        export CEPH_CONF=$CEPH_DIR/ceph.conf CEPH_POOL=rbd
        _ceph_mon_host
        return 0
    fi
    # run.sh starts the shared cluster in the background: wait for it.
    local i
    for i in $(seq 1 1200); do
        [ -e "$BLOCKD_IT_CEPH/ready" ] && break
        [ -e "$BLOCKD_IT_CEPH/failed" ] &&
            fail "the shared Ceph test cluster did not start: $(tail -5 "${BLOCKD_IT_CEPH_LOG:-/dev/null}")"
        sleep 0.1
    done
    [ -e "$BLOCKD_IT_CEPH/ready" ] || fail "the shared Ceph test cluster is not ready after 120 s"
    CEPH_DIR=$BLOCKD_IT_CEPH
    export CEPH_CONF=$CEPH_DIR/ceph.conf CEPH_POOL=$TEST_NAME-$$
    CEPH_OWN_POOL=$CEPH_POOL
    _ceph_mon_host
    _ceph_pool create "$CEPH_POOL" >"$TMP/ceph-pool.log" 2>&1 ||
        fail "cannot create the test's pool $CEPH_POOL on the shared cluster: $(tail -5 "$TMP/ceph-pool.log")"
    echo "ceph_start: pool $CEPH_POOL on the shared cluster $CEPH_DIR"
}

# _ceph_mon_host: CEPH_MON_HOST, the cluster's monitors as a user gives
# them to pool.create (rbd.mon_host): blockd reads no conf a client names
# outside /etc/ceph (docs/security.md). The test cluster has no cephx, so
# no key.
_ceph_mon_host() {
    CEPH_MON_HOST=$(sed -n 's/^mon host = //p' "$CEPH_CONF")
    [ -n "$CEPH_MON_HOST" ] || fail "no mon host in $CEPH_CONF"
    export CEPH_MON_HOST
}

# _ceph_pool create|delete NAME: a pool with 8 placement groups (several
# tests' pools live side by side on one OSD), initialised for rbd; or its
# deletion. One python3 process with librados, bounded.
_ceph_pool() {
    timeout 60 /usr/bin/python3 - "$CEPH_CONF" "$1" "$2" <<'PY'
import json, sys
import rados, rbd
conf, op, name = sys.argv[1:4]
with rados.Rados(conffile=conf) as c:
    if op == "create":
        cmd = {"prefix": "osd pool create", "pool": name, "pg_num": 8, "pgp_num": 8}
    else:
        cmd = {"prefix": "osd pool rm", "pool": name, "pool2": name,
               "yes_i_really_really_mean_it": True}
    rc, out, err = c.mon_command(json.dumps(cmd), b"", timeout=30)
    if rc:
        sys.exit("%s %s: %s" % (cmd["prefix"], name, err))
    if op == "create":
        with c.open_ioctx(name) as io:
            rbd.RBD().pool_init(io, False)  # waits until the pool's PGs are active
PY
}

pass() {
    echo "PASS: $TEST_NAME${1:+: $1}"
}

# api_raw SOCKET METHOD PARAMS: one JSON-RPC call over an API socket, as a
# client sees it: prints "ok", or "<errno name> <message>" and returns 1.
# The errno is the error's own, or that of its first field error (extra);
# the message of a -32602 is its field errors ("field: msg; ..."), as
# TrueNAS's own message there is only "Invalid params".
api_raw() {
    python3 - "$1" "$2" "$3" <<'PY'
import errno, json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall((json.dumps({"jsonrpc": "2.0", "id": 1, "method": sys.argv[2],
                       "params": json.loads(sys.argv[3])}) + "\n").encode())
buf = b""
while not buf.endswith(b"\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    buf += chunk
r = json.loads(buf)
if "error" in r:
    d = r["error"].get("data", {})
    e = next((x[2] for x in d.get("extra") or [] if len(x) > 2 and x[2]), d.get("error", 0))
    msg = r["error"]["message"]
    if d.get("extra"):
        msg = "; ".join("%s: %s" % (x[0], x[1]) for x in d["extra"])
    print(errno.errorcode.get(e, str(e)), msg)
    sys.exit(1)
print("ok")
PY
}
