#!/usr/bin/env bash
# blockd as the systemd unit runs it, without systemd as PID 1 (a CI
# machine or container has none; systemd-run cannot work there): the
# environment blockd.service gives it (StateDirectory= and
# RuntimeDirectory= paths, NOTIFY_SOCKET with WATCHDOG_USEC/WATCHDOG_PID,
# JOURNAL_STREAM naming its stderr, --config FILE) is set by hand and a
# small Python listener plays systemd's notify socket. Checks: READY=1,
# periodic WATCHDOG=1 fed by the reactors (none while one reactor thread is
# frozen), <N> priority prefixes instead
# of timestamps, state and socket where the unit puts them; SIGHUP
# (ExecReload) applies log_level live without dropping an NBD session,
# logs the keys that need a restart, refuses a broken file; config-file
# errors name the line; every flag of --help is a key; SIGTERM sends
# STOPPING=1 and exits 0. The unit itself is verified by systemd-analyze.
. "$(dirname "$0")/lib.sh"
need python3 nbdsh systemd-analyze stat
NBDSH() { PATH=/usr/bin:$PATH nbdsh "$@"; }
repo=$(cd "$(dirname "$0")/../.." && pwd)

# The unit from the build tree, with ExecStart pointing at this build.
unit=$BUILD/dist/blockd.service
[ -f "$unit" ] || fail "$unit not built"
sed "s|^ExecStart=[^ ]*|ExecStart=$BLOCKD_BIN|" "$unit" >"$TMP/blockd.service"
systemd-analyze verify --man=no "$TMP/blockd.service" >"$TMP/verify.log" 2>&1 ||
    { cat "$TMP/verify.log" >&2; fail "systemd-analyze verify"; }
for k in Type=notify WatchdogSec= StateDirectory=blockd RuntimeDirectory=blockd \
    'ExecReload=/bin/kill -HUP $MAINPID' ProtectSystem=strict ProtectHome=yes PrivateTmp=yes \
    NoNewPrivileges=yes CapabilityBoundingSet=CAP_NET_BIND_SERVICE LimitNOFILE= \
    'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' \
    'SystemCallFilter=@system-service io_uring_setup io_uring_enter io_uring_register'; do
    grep -qF -- "$k" "$TMP/blockd.service" || fail "unit lacks $k"
done
score=$(systemd-analyze security --offline=true "$TMP/blockd.service" 2>&1 |
    sed -n 's/.*Overall exposure level for blockd.service: \([0-9.]*\).*/\1/p')
awk -v s="${score:-99}" 'BEGIN { exit !(s <= 3.0) }' || fail "exposure score '$score' > 3.0"

# Config-file errors stop the daemon before it starts, naming the line.
conf=$TMP/blockd.conf
printf '# comment\n\nlog_level = info\nno_such_key = 1\n' >"$conf"
rc=0; "$BLOCKD_BIN" --config "$conf" --state-dir "$TMP/x" >"$TMP/err" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "blockd.conf:4: unknown key 'no_such_key'" "$TMP/err" ||
    fail "unknown key: rc=$rc $(cat "$TMP/err")"
printf 'threads = 0\n' >"$conf"
rc=0; "$BLOCKD_BIN" --config "$conf" --state-dir "$TMP/x" >"$TMP/err" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q -- "--threads must be" "$TMP/err" && grep -q "set by $conf line 1" "$TMP/err" ||
    fail "bad value: rc=$rc $(cat "$TMP/err")"
# Every flag of --help has a key (the getopt table is the list of keys).
for f in $("$BLOCKD_BIN" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
    case $f in --help | --version | --config) continue ;; esac
    printf '%s =\n' "$(echo "${f#--}" | tr - _)" >"$conf"
    "$BLOCKD_BIN" --config "$conf" --state-dir "$TMP/x" >"$TMP/err" 2>&1 && fail "empty $f accepted"
    grep -q "unknown key" "$TMP/err" && fail "$f has no config key: $(cat "$TMP/err")"
    grep -q "needs a value\|takes yes or no" "$TMP/err" || fail "$f: $(cat "$TMP/err")"
done

# systemd's side of the notify socket: one line per datagram.
cat >"$TMP/notify.py" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a", buffering=1) as log:
    while True:
        msg = s.recv(4096).decode()
        log.write("%.3f %s\n" % (time.monotonic(), msg.replace("\n", " ")))
PY
NOTIFY=$TMP/notify.sock
python3 "$TMP/notify.py" "$NOTIFY" "$TMP/notify.log" &
BG_PIDS+=($!)
for _ in $(seq 100); do [ -S "$NOTIFY" ] && break; sleep 0.05; done
[ -S "$NOTIFY" ] || fail "notify listener did not start"
notes() { cat "$TMP/notify.log" 2>/dev/null || true; }
wait_note() { # wait_note REGEX [after-line]: a datagram matching REGEX
    local i
    for i in $(seq 400); do
        notes | tail -n +"$((${2:-0} + 1))" | grep -qE "$1" && return 0
        blockd_alive || fail "blockd died waiting for $1"
        sleep 0.05
    done
    fail "no '$1' from blockd in 20 s; got: $(notes | tail -5)"
}

# The directories systemd creates for StateDirectory= and RuntimeDirectory=.
mkdir -p -m 0700 "$TMP/lib/blockd"
mkdir -p -m 0755 "$TMP/run/blockd"
NBD_PORT=$(free_port)
ISCSI_PORT=$(free_port)
cat >"$conf" <<C
# as /etc/blockd/blockd.conf
nbd_listen = 127.0.0.1:$NBD_PORT
iscsi-listen = 127.0.0.1:$ISCSI_PORT
log_level = info
threads = 2
C
: >"$BLOCKD_LOG"
# JOURNAL_STREAM is the device:inode of the stream on blockd's stderr.
env STATE_DIRECTORY="$TMP/lib/blockd" RUNTIME_DIRECTORY="$TMP/run/blockd" \
    NOTIFY_SOCKET="$NOTIFY" WATCHDOG_USEC=1000000 JOURNAL_STREAM="$(stat -c %d:%i "$BLOCKD_LOG")" \
    bash -c 'export WATCHDOG_PID=$$; exec "$@"' _ "$BLOCKD_BIN" --config "$conf" >>"$BLOCKD_LOG" 2>&1 &
BLOCKD_PID=$!
wait_note '^[0-9.]+ READY=1$'
SOCK=$TMP/run/blockd/blockd.sock
[ -S "$SOCK" ] || fail "no API socket in the RuntimeDirectory"
[ -f "$TMP/lib/blockd/blockd.db" ] || fail "no blockd.db in the StateDirectory"
blockctl volume create demo/svc --size 16M >/dev/null || fail "volume create"
uri=$(blockctl share nbd create demo/svc | grep -o 'nbd://[^ ]*') || fail "share nbd create"

# Journal format: a priority prefix, no timestamp, one line per event.
grep -q '^<6>blockd ready' "$BLOCKD_LOG" || fail "no '<6>blockd ready' line"
grep -vqE '^<[0-7]>' "$BLOCKD_LOG" && fail "a log line without a priority prefix: $(grep -vE '^<[0-7]>' "$BLOCKD_LOG" | head -1)"
grep -qE '^[0-9]{4}-[0-9]{2}-' "$BLOCKD_LOG" && fail "timestamps under the journal"

# The watchdog: WATCHDOG=1 keeps coming (every 250 ms for WATCHDOG_USEC=1 s).
n0=$(notes | grep -c 'WATCHDOG=1' || true)
sleep 2
n1=$(notes | grep -c 'WATCHDOG=1' || true)
[ "$((n1 - n0))" -ge 2 ] || fail "only $((n1 - n0)) WATCHDOG=1 in 2 s"

# A hung reactor stops the pings (systemd would restart blockd): freeze
# one reactor thread alone (ptrace SEIZE + INTERRUPT stops only that
# thread), then let it go and see the pings come back.
cat >"$TMP/freeze.py" <<'PY'
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
tid, thaw = int(sys.argv[1]), sys.argv[2]
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT, WALL = 17, 0x4206, 0x4207, 0x40000000
if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
    sys.exit("ptrace seize: %s" % os.strerror(ctypes.get_errno()))
libc.ptrace(PTRACE_INTERRUPT, tid, None, None)
os.waitpid(tid, WALL)
open(sys.argv[3], "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(thaw) and time.monotonic() < deadline:
    time.sleep(0.05)
libc.ptrace(PTRACE_DETACH, tid, None, None)
PY
rtid=
for t in /proc/"$BLOCKD_PID"/task/*; do
    [ "$(cat "$t/comm")" = reactor1 ] && rtid=${t##*/}
done
[ -n "$rtid" ] || fail "no reactor1 thread"
python3 "$TMP/freeze.py" "$rtid" "$TMP/thaw" "$TMP/frozen" &
freeze_pid=$!
for _ in $(seq 200); do [ -f "$TMP/frozen" ] && break; sleep 0.05; done
[ -f "$TMP/frozen" ] || fail "could not freeze reactor1"
sleep 1 # a round already answered may still ping once
n0=$(notes | grep -c 'WATCHDOG=1' || true)
sleep 2
n1=$(notes | grep -c 'WATCHDOG=1' || true)
[ "$n1" = "$n0" ] || { touch "$TMP/thaw"; fail "$((n1 - n0)) WATCHDOG=1 while reactor1 was frozen"; }
grep -q '^<4>watchdog: 1 reactor(s) (first: 1) did not answer' "$BLOCKD_LOG" ||
    fail "the hung reactor was not logged"
touch "$TMP/thaw"
wait "$freeze_pid" || fail "freeze.py failed"
wait_note 'WATCHDOG=1' "$(notes | wc -l)"
grep -q '^<6>watchdog: every reactor answers again' "$BLOCKD_LOG" || fail "no recovery line"

# An NBD session open across the reload.
rm -f "$TMP/go"
NBDSH -u "$uri" -c "
import os, time
h.pwrite(b'x' * 4096, 0)
open('$TMP/first', 'w').close()
while not os.path.exists('$TMP/go'):
    time.sleep(0.05)
assert h.pread(4096, 0) == b'x' * 4096
print('SESSION-OK')
" >"$TMP/nbdsh.out" 2>&1 &
nbd_pid=$!
BG_PIDS+=($nbd_pid)
for _ in $(seq 200); do [ -f "$TMP/first" ] && break; sleep 0.05; done
[ -f "$TMP/first" ] || fail "nbdsh did not connect: $(cat "$TMP/nbdsh.out")"

# Reload: log_level applies now, threads waits for a restart.
sed -i 's/^log_level = info/log_level = debug/; s/^threads = 2/threads = 3/' "$conf"
before=$(notes | wc -l)
kill -HUP "$BLOCKD_PID"
wait_note 'RELOADING=1' "$before"
wait_note '^[0-9.]+ READY=1$' "$before"
grep -q '^<4>reload: threads changed' "$BLOCKD_LOG" || fail "no warning that threads needs a restart"
blockctl volume list >/dev/null
grep -q '^<7>api: .*call ' "$BLOCKD_LOG" || fail "log_level = debug not applied at reload"
touch "$TMP/go"
wait "$nbd_pid" || fail "NBD session broken by the reload: $(cat "$TMP/nbdsh.out")"
grep -q SESSION-OK "$TMP/nbdsh.out" || fail "NBD session: $(cat "$TMP/nbdsh.out")"

# A broken file at reload changes nothing; removing log_level restores info.
echo 'log_level = loud' >>"$conf"
kill -HUP "$BLOCKD_PID"
for _ in $(seq 200); do grep -q "^<3>reload: .*bad log-level 'loud'; nothing changed" "$BLOCKD_LOG" && break; sleep 0.05; done
grep -q "^<3>reload: .*nothing changed" "$BLOCKD_LOG" || fail "a bad value at reload was not refused"
grep -v '^log_level' "$conf" >"$conf.new" && mv "$conf.new" "$conf"
n=$(grep -c '^<7>' "$BLOCKD_LOG")
before=$(notes | wc -l)
kill -HUP "$BLOCKD_PID"
wait_note '^[0-9.]+ READY=1$' "$before"
blockctl volume list >/dev/null
[ "$(grep -c '^<7>' "$BLOCKD_LOG")" = "$n" ] || fail "debug lines after log_level left the file"
blockd_alive || fail "blockd died during reloads"

# SIGTERM: STOPPING=1 and a clean exit.
before=$(notes | wc -l)
blockd_stop
notes | tail -n +"$((before + 1))" | grep -q 'STOPPING=1' || fail "no STOPPING=1 at shutdown"
pass "notify, watchdog, journal prefixes, reload, exposure $score"
