#!/usr/bin/env bash
# A volume resized with pool.dataset.update {volsize}, seen by connected
# clients of both front-ends. iSCSI: every session's next command gets
# UNIT ATTENTION, CAPACITY DATA HAS CHANGED (sense 6/2A/09, SPC-4), then
# READ CAPACITY reports the new size; this for a grow and for a shrink.
# NBD has no in-band resize notice: a connection keeps the size it
# negotiated (requests past it are refused, nbd.global.sessions shows
# it), a new connection sees the new size, and after a shrink the old
# connection's requests past the new end fail instead of touching
# anything. Raw iSCSI (tests/integration/iscsiraw.py), libnbd and nbdinfo.
. "$(dirname "$0")/lib.sh"
need nbdinfo timeout
PY3=/usr/bin/python3
$PY3 -c 'import nbd' || fail "python3-libnbd missing"
blockd_start

M=$((1 << 20))
blockctl volume create demo/grow --size 8M >/dev/null || fail "volume create"
blockctl share iscsi create demo/grow >/dev/null || fail "share iscsi create"
blockctl share nbd create demo/grow --name grow >/dev/null || fail "share nbd create"
BASE=$(blockctl call iscsi.global.config | $PY3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
export BLOCKCTL_BIN SOCK NBD_PORT

timeout 120 $PY3 - "$ISCSI_PORT" "$BASE:demo:grow" <<'PY' >"$TMP/resize.out" 2>&1 || fail "resize client: $(cat "$TMP/resize.out")"
import json, os, struct, subprocess, sys
import nbd
import iscsiraw as R

M = 1 << 20
URI = "nbd://127.0.0.1:%s/grow" % os.environ["NBD_PORT"]

def ctl(*args):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    assert p.returncode == 0, "blockctl %s: %s" % (args, p.stderr)
    return p.stdout

def resize(size):
    ctl("call", "pool.dataset.update", json.dumps(["demo/grow", {"volsize": size}]))

def capacity(s):
    st, sense, cap = s.cmd(bytes([0x9E, 0x10]) + bytes(8) + struct.pack(">I", 32) + bytes(2),
                           data_in_len=32)
    assert st == 0, "READ CAPACITY (16): status %d sense %s" % (st, sense.hex())
    last, bs = struct.unpack(">QI", cap[:12])
    return (last + 1) * bs

def expect_capacity_ua(s, what):
    st, sense, _ = s.cmd(bytes(6))  # TEST UNIT READY
    assert st == 2, "%s: the next command got status %d, not CHECK CONDITION" % (what, st)
    assert R.sense_key(sense) == 6 and R.asc_ascq(sense) == (0x2A, 0x09), \
        "%s: sense %s, not 6/2A/09 CAPACITY DATA HAS CHANGED" % (what, sense.hex())
    st, sense, _ = s.cmd(bytes(6))
    assert st == 0, "%s: the UNIT ATTENTION was reported twice (sense %s)" % (what, sense.hex())
    print("%s: UNIT ATTENTION 6/2A/09, once" % what)

def session_sizes():
    rows = json.loads(ctl("call", "nbd.global.sessions"))
    return sorted(r["size"] for r in rows if r["export"] == "grow")

def connect():
    h = nbd.NBD()
    h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_BOUNDS)  # the server must refuse
    h.connect_uri(URI)
    return h

s1 = R.Session(int(sys.argv[1]), sys.argv[2], initiator="iqn.2026-12.org.blockd.test:one")
s2 = R.Session(int(sys.argv[1]), sys.argv[2], initiator="iqn.2026-12.org.blockd.test:two")
for s in (s1, s2):
    st, sense = s.clear_unit_attention()
    assert st == 0, "TEST UNIT READY: status %d sense %s" % (st, sense.hex())
    assert capacity(s) == 8 * M
old = connect()
assert old.get_size() == 8 * M

# grow: both sessions are told on their next command
resize(16 * M)
for name, s in (("grow, session one", s1), ("grow, session two", s2)):
    expect_capacity_ua(s, name)
    assert capacity(s) == 16 * M, "READ CAPACITY after the grow: %d" % capacity(s)
st, _, data = s1.cmd(R.read16(12 * M // 512, 1), data_in_len=512)
assert st == 0 and len(data) == 512, "READ in the grown space: status %d" % st
print("grow: READ CAPACITY reports 16 MiB, the new space reads")

# NBD: the open connection keeps its negotiated size; a new one sees 16 MiB
assert old.get_size() == 8 * M
try:
    old.pread(4096, 12 * M)
    raise AssertionError("a read past the negotiated size was served")
except nbd.Error as e:
    print("grow: the old NBD connection is refused past its 8 MiB (%s)" % e.string)
old.pread(4096, 0)
new = connect()
assert new.get_size() == 16 * M, "a new NBD connection sees %d" % new.get_size()
assert new.pread(4096, 12 * M) == bytes(4096)
assert session_sizes() == [8 * M, 16 * M], "nbd.global.sessions sizes %s" % session_sizes()
new.shutdown()
print("grow: a new NBD connection sees 16 MiB; sessions show each connection's size")

# shrink below what an open NBD connection negotiated (16 MiB)
old.shutdown()
old = connect()
assert old.get_size() == 16 * M
resize(4 * M)
expect_capacity_ua(s1, "shrink, session one")
assert capacity(s1) == 4 * M
st, sense, _ = s1.cmd(R.read16(6 * M // 512, 1), data_in_len=512)
assert st == 2 and R.sense_key(sense) == 5 and R.asc_ascq(sense) == (0x21, 0x00), \
    "READ past the new end: status %d sense %s" % (st, sense.hex())
expect_capacity_ua(s2, "shrink, session two")
try:
    old.pread(4096, 6 * M)
    raise AssertionError("a read past the shrunk end was served")
except nbd.Error as e:
    print("shrink: the old NBD connection's read past the new end fails (%s)" % e.string)
old.pread(4096, 0)
old.shutdown()
print("shrink: READ CAPACITY reports 4 MiB, a read past it is LBA OUT OF RANGE")
for s in (s1, s2):
    s.close()
PY
cat "$TMP/resize.out"
SIZE=$(nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/grow") || fail "nbdinfo"
[ "$SIZE" = $((4 * M)) ] || fail "nbdinfo --size after the shrink: $SIZE, not $((4 * M))"
grep -q "export .grow.: demo/grow resized to 16777216 bytes; 1 open connection(s) keep" "$BLOCKD_LOG" ||
    fail "no log line about the NBD connections that keep their size"
pass "resize: iSCSI sessions get CAPACITY DATA HAS CHANGED once and READ CAPACITY the new size (grow and shrink); NBD connections keep their negotiated size, new ones (nbdinfo) see the new one"
