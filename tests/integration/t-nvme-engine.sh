#!/usr/bin/env bash
# The NVMe/TCP target engine alone (nvmet_harness: its own configuration
# over memory volumes), driven by the test initiator written from the
# specifications (nvmetcp.py): identify, properties, features, I/O with
# and without digests, R2T, queue depth, refused hosts and queues,
# read-only namespaces, discovery, bad PDUs (each answered with a
# C2HTermReq while another session keeps working), keep-alive teardown,
# asynchronous events and a subsystem removed under a controller.
. "$(dirname "$0")/lib.sh"
HARNESS=$BUILD/tests/tools/nvmet_harness
[ -x "$HARNESS" ] || fail "$HARNESS not built"
"$HARNESS" >"$TMP/ports" 2>"$TMP/harness.log" &
HPID=$!
BG_PIDS+=($HPID) # killed by lib.sh on exit if still there
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
for i in $(seq 1 100); do
    [ "$(wc -l <"$TMP/ports")" -ge 2 ] && break
    kill -0 $HPID 2>/dev/null || fail "nvmet_harness died: $(tail -5 "$TMP/harness.log")"
    sleep 0.1
done
IO=$(awk '$1=="io"{print $2}' "$TMP/ports")
DISC=$(awk '$1=="disc"{print $2}' "$TMP/ports")
[ -n "$IO" ] && [ -n "$DISC" ] || fail "no ports from nvmet_harness"

/usr/bin/python3 - "$IO" "$DISC" "$TMP/harness.log" "$HPID" <<'PY' || { tail -30 "$TMP/harness.log" >&2; fail "checks failed"; }
import os, signal, sys
import nvme_engine_checks as k
io, disc, log, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
env = k.Env("127.0.0.1", io, disc, log)
k.run(env)
k.check_aer(env, lambda: os.kill(pid, signal.SIGUSR1), ana=True)
print("ok  asynchronous events on a namespace added (namespace attribute, ANA change)")
k.check_aer(env, lambda: os.kill(pid, signal.SIGHUP), nsid=1)
c = env.ctrl().connect(io_queues=0)
size = k.n.parse_id_ns(c.identify(0, 1))["nsze"] * 512
c.close()
assert size == (64 << 20) + (1 << 20), "resized namespace: %d" % size
print("ok  asynchronous event on a namespace resized")
k.check_disc_aen(env, lambda: os.kill(pid, signal.SIGUSR1))
print("ok  discovery log change event")
k.check_gone(env, lambda: os.kill(pid, signal.SIGUSR2))
print("ok  subsystem removed under a controller")
PY
kill -0 $HPID || fail "nvmet_harness died"
# A clean stop, and nothing the sanitizers (in an ASan build) complained of.
kill $HPID
wait $HPID || fail "nvmet_harness exited with status $?: $(tail -20 "$TMP/harness.log")"
! grep -aE "AddressSanitizer|runtime error|LeakSanitizer" "$TMP/harness.log" ||
    fail "sanitizer report in nvmet_harness"
echo "PASS: $TEST_NAME"
