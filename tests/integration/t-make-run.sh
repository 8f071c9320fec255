#!/bin/bash
# make run's demo (scripts/run-demo.sh), as a new user meets it: the daemon
# starts on a fresh state directory, the demo volumes are made and shared
# (demo/disk0 over NBD and iSCSI, demo/disk1 over NVMe/TCP), and each
# "how to connect" line it prints works when run as printed (the nvme-cli
# lines need the kernel's nvme-tcp, so the spec-written host of nvmetcp.py
# connects to the printed address and NQN instead). Ctrl-C stops blockd
# cleanly; a second run finds the volumes and shares and makes no new ones.
. "$(dirname "$0")/lib.sh"
need nbdinfo qemu-img iscsi-ls iscsi-inq /usr/bin/python3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NBD_P=$(free_port)
ISCSI_P=$(free_port)
NVME_P=$(free_port)
RUN_PID=

# demo N: start run-demo.sh in the background (its own process group, as a
# terminal's Ctrl-C reaches it) and wait for its message in $TMP/run.N.
demo() {
    (cd "$ROOT" && exec setsid env BUILD="$BUILD" STATE="$TMP/var" NBD_LISTEN="127.0.0.1:$NBD_P" \
        ISCSI_LISTEN="127.0.0.1:$ISCSI_P" NVME_LISTEN="127.0.0.1:$NVME_P" \
        scripts/run-demo.sh) >"$TMP/run.$1" 2>&1 &
    RUN_PID=$!
    BG_PIDS+=("$RUN_PID")
    for _ in $(seq 1 600); do
        grep -q "Press Ctrl-C to stop." "$TMP/run.$1" && return 0
        kill -0 "$RUN_PID" 2>/dev/null || fail "run-demo.sh exited: $(cat "$TMP/run.$1")"
        sleep 0.1
    done
    fail "no 'Press Ctrl-C' from run-demo.sh: $(cat "$TMP/run.$1")"
}

# stop: Ctrl-C (SIGINT to the process group); the daemon must be gone.
stop() {
    kill -INT -- "-$RUN_PID"
    for _ in $(seq 1 300); do
        kill -0 "$RUN_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$RUN_PID" 2>/dev/null && fail "run-demo.sh still runs 30 s after Ctrl-C"
    pgrep -f -- "--state-dir $TMP/var" >/dev/null && fail "blockd still runs after Ctrl-C"
    return 0
}

demo 1
# Every printed command line, run as printed (the blockctl ones too).
n=0
while read -r line; do
    case $line in
    blockctl* | nbdinfo* | qemu-img* | iscsi-ls* | iscsi-inq*)
        out=$(cd "$ROOT" && PATH="$BUILD/src/cli:$PATH" timeout 60 bash -c "$line" 2>&1) ||
            fail "printed command failed: $line: $out"
        n=$((n + 1))
        ;;
    esac
done <"$TMP/run.1"
[ "$n" -ge 7 ] || fail "only $n commands found in the message: $(cat "$TMP/run.1")"
size=$(nbdinfo --size "nbd://127.0.0.1:$NBD_P/disk0")
[ "$size" = 1073741824 ] || fail "demo/disk0 is $size bytes over NBD"
grep -q "^  nvme discover -t tcp -a 127.0.0.1 -s $NVME_P$" "$TMP/run.1" ||
    fail "no nvme discover line: $(cat "$TMP/run.1")"
nqn=$(sed -nE "s/^  nvme connect -t tcp -a 127\.0\.0\.1 -s $NVME_P -n (nqn\.[^ ]+)$/\1/p" "$TMP/run.1")
[ -n "$nqn" ] || fail "no nvme connect line with an NQN: $(cat "$TMP/run.1")"
/usr/bin/python3 - "$NVME_P" "$nqn" <<'PY' || fail "NVMe/TCP host on the printed address and NQN"
import sys
import nvmetcp as n
c = n.Controller("127.0.0.1", int(sys.argv[1]), sys.argv[2]).connect()
ns = n.parse_id_ns(c.identify(0, nsid=1))
size = ns["nsze"] * ns["block_size"]
assert size == 1 << 30, "demo/disk1 is %d bytes over NVMe/TCP" % size
c.close()
PY
stop
grep -q "blockd stopped" "$TMP/run.1" ||
    fail "no sign of a clean stop in the output: $(tail -5 "$TMP/run.1")"

# Again on the same state: the same volumes and shares, nothing added.
demo 2
grep -q "created volume" "$TMP/run.2" && fail "the second run created a volume again"
for kind in nbd iscsi nvme; do
    rows=$("$BLOCKCTL_BIN" --socket "$TMP/var/blockd.sock" share $kind list | grep -c "demo/disk")
    [ "$rows" = 1 ] || fail "$rows $kind shares of the demo volumes after the second run"
done
stop
pass "make run's demo: every printed command works, NVMe/TCP on the printed NQN, Ctrl-C stops, a rerun adds nothing"
