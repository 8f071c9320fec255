#!/usr/bin/env bash
# NVMe in-band authentication (DH-HMAC-CHAP) end to end: keys made by
# nvme-cli's `nvme gen-dhchap-key`, hosts configured through the nvmet.*
# API, and the test initiator written from the specification (nvmetcp.py)
# as the host. Unidirectional with each hash and the null, ffdhe2048,
# ffdhe4096 and ffdhe8192 groups, bidirectional with ffdhe3072, then I/O
# (written and read back) on authenticated queues; refused: a wrong key
# (logged with the host NQN and the reason), guesses throttled (five wrong
# responses block the host NQN), a host that has no key
# (Authentication Required for every command, and dropped at the
# deadline), a controller whose key is not the one the host expects
# (detected by the host, its Failure2 logged), hashes or groups the host
# does not offer, and malformed or out-of-sequence messages (each Failure1
# with its reason). Live queues authenticate again and keep their I/O.
. "$(dirname "$0")/lib.sh"
need jq nvme
NVME_PORT=$(free_port)
# A short handshake deadline: it bounds an unfinished authentication too.
blockd_start --handshake-timeout 3

call() { blockctl call "$@" || fail "API call $1 failed"; }
key() { nvme gen-dhchap-key -m "$1" -l "$2" -n "$3" || fail "nvme gen-dhchap-key -m $1 -l $2"; }

SUBNQN=nqn.2026-01.org.blockd:auth
blockctl volume create demo/a1 --size 16M >/dev/null || fail "volume create"
SUB=$(call nvmet.subsys.create "{\"name\": \"auth\", \"subnqn\": \"$SUBNQN\"}" | jq .id)
call nvmet.namespace.create "{\"subsys_id\": $SUB, \"device_type\": \"ZVOL\", \"device_path\": \"zvol/demo/a1\", \"nsid\": 1}" >/dev/null
PORT=$(call nvmet.port.create "{\"addr_trtype\": \"TCP\", \"addr_traddr\": \"127.0.0.1\", \"addr_trsvcid\": $NVME_PORT}" | jq .id)
call nvmet.port_subsys.create "{\"port_id\": $PORT, \"subsys_id\": $SUB}" >/dev/null

# host NAME HASH DHGROUP KEY [CTRL_KEY]: an nvmet.host linked to the subsystem.
host() {
    local q="{\"hostnqn\": \"nqn.2026-01.org.blockd:$1\", \"dhchap_hash\": \"$2\", \"dhchap_dhgroup\": $3, \"dhchap_key\": \"$4\""
    [ -n "${5:-}" ] && q="$q, \"dhchap_ctrl_key\": \"$5\""
    local id
    id=$(call nvmet.host.create "$q}" | jq .id)
    call nvmet.host_subsys.create "{\"host_id\": $id, \"subsys_id\": $SUB}" >/dev/null
}

declare -A K
for h in u256 u384 u512 u0 bidi wrong nokey badctrl guess; do
    n=nqn.2026-01.org.blockd:$h
    case $h in
    u384) K[$h]=$(key 2 48 "$n") ;;
    u512) K[$h]=$(key 3 64 "$n") ;;
    u0) K[$h]=$(key 0 32 "$n") ;;
    *) K[$h]=$(key 1 32 "$n") ;;
    esac
done
CTRL_KEY=$(key 2 48 "$SUBNQN")
OTHER_KEY=$(key 1 32 nqn.2026-01.org.blockd:wrong)
OTHER_CTRL=$(key 2 48 "$SUBNQN")
host u256 SHA-256 null "${K[u256]}"
host u384 SHA-384 '"2048-BIT"' "${K[u384]}"
host u512 SHA-512 '"4096-BIT"' "${K[u512]}"
host u0 SHA-256 '"8192-BIT"' "${K[u0]}"
host bidi SHA-256 '"3072-BIT"' "${K[bidi]}" "$CTRL_KEY"
host wrong SHA-256 '"2048-BIT"' "${K[wrong]}"
host nokey SHA-256 null "${K[nokey]}"
host badctrl SHA-384 '"2048-BIT"' "${K[badctrl]}" "$CTRL_KEY"
host guess SHA-256 null "${K[guess]}"

for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$NVME_PORT") 2>/dev/null && break
    sleep 0.1
done

export SUBNQN CTRL_KEY OTHER_KEY OTHER_CTRL BLOCKD_LOG
for h in "${!K[@]}"; do export "KEY_$h=${K[$h]}"; done
/usr/bin/python3 - "$NVME_PORT" <<'PY' || fail "DH-HMAC-CHAP checks failed"
import os, socket, struct, sys, time
import nvmetcp as n
port = int(sys.argv[1])
sub = os.environ["SUBNQN"]
log = os.environ["BLOCKD_LOG"]


def nqn(h):
    return "nqn.2026-01.org.blockd:" + h


def ctrl(h, key=None, ctrl_key=None, **kw):
    return n.Controller("127.0.0.1", port, sub, hostnqn=nqn(h), dhchap_key=key,
                        dhchap_ctrl_key=ctrl_key, **kw)


def wait_log(text, what):
    for _ in range(100):
        if text in open(log, errors="replace").read():
            return
        time.sleep(0.1)
    raise AssertionError("not logged: %s (%r)" % (what, text))


def io_check(c, seed):
    data = bytes((seed + i) & 0xFF for i in range(8192))
    bs = n.parse_id_ns(c.identify(0, 1))["block_size"]
    c.write(1, 0, data, bs=bs, inline=False)
    c.flush(1)
    assert c.read(1, 0, len(data) // bs, bs=bs) == data, "read back differs"


# Unidirectional: each hash; null, ffdhe2048, ffdhe4096, ffdhe8192 (an
# untransformed secret for the last); two I/O queues each authenticate.
for h, want in (("u256", (1, 0)), ("u384", (2, 1)), ("u512", (3, 3)), ("u0", (1, 5))):
    c = ctrl(h, os.environ["KEY_" + h]).connect(io_queues=2)
    assert c.auth_required and c.auth_chosen == want, (h, c.auth_required, c.auth_chosen)
    io_check(c, want[0] * 7 + want[1])
    c.close()
    print("ok  unidirectional %s (hash %d, DH group %d), then I/O" % (h, *want))
wait_log("host %s authenticated on queue 2 (DH-HMAC-CHAP SHA-512, ffdhe4096)" % nqn("u512"),
         "authentication")

# Bidirectional: the controller proves it holds the controller key.
c = ctrl("bidi", os.environ["KEY_bidi"], os.environ["CTRL_KEY"]).connect(io_queues=1)
assert c.auth_chosen == (1, 2), c.auth_chosen
io_check(c, 99)
c.close()
wait_log("host %s authenticated on queue 1 (DH-HMAC-CHAP SHA-256, ffdhe3072, bidirectional)"
         % nqn("bidi"), "bidirectional authentication")
print("ok  bidirectional (ffdhe3072), then I/O")

# Re-authentication of a live queue (a new AUTH_Negotiate): I/O goes on.
c = ctrl("u384", os.environ["KEY_u384"]).connect(io_queues=1)
assert n.authenticate(c.admin, nqn("u384"), sub, os.environ["KEY_u384"]) == (2, 1)
assert n.authenticate(c.ioq(0), nqn("u384"), sub, os.environ["KEY_u384"]) == (2, 1)
io_check(c, 5)
c.close()
print("ok  re-authentication of live queues, then I/O")


def raw_admin(h):
    """An admin queue connected (ATR) and not authenticated."""
    c = ctrl(h)
    c.admin, c.cntlid = c._connect_queue(0, 32, 0xFFFF)
    assert c.auth_required
    return c


def expect_failure1(q, reason):
    try:
        n.auth_recv(q)
        raise AssertionError("no Failure1")
    except n.AuthFailed as e:
        assert e.reason == reason, (e.reason, reason)


# Protocol errors: a Receive before any AUTH_Negotiate (Command Sequence
# Error); a secure channel asked for (concatenation mismatch); a Reply of
# another transaction (incorrect payload); a Success2 where a Reply is due
# (incorrect message). Each Failure1 closes the queue.
c = raw_admin("u256")
st, _ = n.auth_recv(c.admin, check=False)
assert st == n.SC_CMD_SEQ, hex(st)
n.auth_send(c.admin, n.negotiate_msg(9, sc_c=1))
expect_failure1(c.admin, n.R_CONCAT)
c.close()
c = raw_admin("u256")
n.auth_send(c.admin, n.negotiate_msg(9))
n.auth_recv(c.admin)
n.auth_send(c.admin, struct.pack("<BBHHBBBBHI", 1, 2, 0, 10, 32, 0, 0, 0, 0, 0) + bytes(64))
expect_failure1(c.admin, n.R_PAYLOAD)
c.close()
c = raw_admin("u256")
n.auth_send(c.admin, n.negotiate_msg(9))
n.auth_recv(c.admin)
n.auth_send(c.admin, struct.pack("<BBHH", 1, 4, 0, 9) + bytes(10))
expect_failure1(c.admin, n.R_MESSAGE)
c.close()
print("ok  out-of-sequence and malformed messages: Failure1 with their reasons")

# A wrong key: Failure1 (failed), logged with the host NQN and the reason, closed.
try:
    ctrl("wrong", os.environ["OTHER_KEY"]).connect()
    raise AssertionError("a wrong key got in")
except n.AuthFailed as e:
    assert e.reason == n.R_FAILED, e.reason
wait_log("authentication of host %s (queue 0) failed: wrong response" % nqn("wrong"),
         "wrong key")
print("ok  wrong key refused and logged")

# Guessing is throttled: 5 wrong responses block the host NQN for 30 s,
# during which even the right key is refused.
for i in range(5):
    try:
        ctrl("guess", os.environ["OTHER_KEY"]).connect()
        raise AssertionError("a wrong key got in")
    except n.AuthFailed as e:
        assert e.reason == n.R_FAILED, e.reason
try:
    ctrl("guess", os.environ["KEY_guess"]).connect()
    raise AssertionError("the right key got in while the host was blocked")
except n.AuthFailed as e:
    assert e.reason == n.R_FAILED, e.reason
wait_log("host %s: too many failed authentications, host NQN blocked for 30 s" % nqn("guess"),
         "the block")
wait_log("authentication of host %s (queue 0) failed: blocked for" % nqn("guess"), "refusal")
print("ok  repeated wrong responses block the host NQN, the right key too")

# The host expects another controller key: it detects the wrong R2 and
# says so (Failure2), which the controller logs.
try:
    ctrl("badctrl", os.environ["KEY_badctrl"], os.environ["OTHER_CTRL"]).connect()
    raise AssertionError("a wrong controller response was accepted")
except n.AuthFailed as e:
    assert e.reason is None, e.reason
wait_log("authentication of host %s (queue 0) failed: the host refused the controller's "
         "response (Failure2)" % nqn("badctrl"), "Failure2")
print("ok  wrong controller key detected by the host (Failure2 logged)")

# A hash or a DH group the host does not offer: Failure1 with that reason.
for kw, reason in ((dict(auth_hashes=(2, 3)), n.R_HASH), (dict(auth_dhgroups=(1, 2)), n.R_DHGROUP)):
    try:
        ctrl("u256", os.environ["KEY_u256"], **kw).connect()
        raise AssertionError("negotiated without the configured algorithm")
    except n.AuthFailed as e:
        assert e.reason == reason, (e.reason, reason)
print("ok  hash and DH group not offered: Failure1 with their reasons")

# No key on the host side: Connect says ATR, every other command is refused
# (Authentication Required) and the queue is dropped at the deadline.
c = ctrl("nokey")
c.admin, c.cntlid = c._connect_queue(0, 32, 0xFFFF)
assert c.auth_required, "Connect did not ask for authentication"
for what, f in (("Property Get", lambda: c.prop_get(0x1C)),
                ("Identify", lambda: c.identify(1)),
                ("Keep Alive", c.keep_alive)):
    try:
        f()
        raise AssertionError(what + " ran before authentication")
    except n.NvmeError as e:
        assert e.status == n.SC_AUTH_REQUIRED, (what, hex(e.status))
# An I/O queue of that controller is no better.
io, _ = c._connect_queue(1, 32, c.cntlid)
c.io.append(io)
try:
    c.read(1, 0, 1)
    raise AssertionError("a read ran before authentication")
except n.NvmeError as e:
    assert e.status == n.SC_AUTH_REQUIRED, hex(e.status)
# The admin queue's deadline tears the controller down, its I/O queue with it.
for q in (io, c.admin):
    q.sock.settimeout(15)
    try:
        assert q.sock.recv(1) == b"", "data after the deadline"
    except ConnectionError:
        pass
wait_log("host %s did not authenticate queue 0 within 3 s, closing" % nqn("nokey"), "deadline")
print("ok  no key on the host: Authentication Required, dropped at the deadline")
PY
blockd_stop
! grep -aE "AddressSanitizer|LeakSanitizer|runtime error" "$BLOCKD_LOG" || fail "sanitizer report"
pass
