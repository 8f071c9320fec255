#!/usr/bin/env bash
# Every NBD command and flag through libnbd (nbdsh), including the errors:
# read past the end → EINVAL, write to a read-only export → EPERM, unknown
# flag → EINVAL; structured reads (holes as OFFSET_HOLE, chunking, DF),
# BLOCK_STATUS (+REQ_ONE), multi-conn flush visibility, live export changes,
# delete refused with EBUSY while connected unless forced.
. "$(dirname "$0")/lib.sh"
need nbdsh python3
# Debian's nbdsh runs "python3 -m nbd": make sure it finds the system python
# that has the nbd module (python3-libnbd), not another python3 on PATH.
NBDSH() { PATH=/usr/bin:$PATH nbdsh "$@"; }
NBDSH -n -c 'import nbd' || fail "nbdsh cannot import nbd (python3-libnbd missing)"
blockd_start

blockctl volume create demo/d1 --size 64M >/dev/null || fail "volume create"
blockctl share nbd create demo/d1 --name rw >/dev/null || fail "create rw"
blockctl share nbd create demo/d1 --name ro --readonly >/dev/null || fail "create ro"
export RW=nbd://127.0.0.1:$NBD_PORT/rw RO=nbd://127.0.0.1:$NBD_PORT/ro

cat >"$TMP/cmds.py" <<'PY'
import errno, os, nbd

def handle(uri, meta=True):
    h = nbd.NBD()
    if meta:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    h.set_strict_mode(0)   # let the server judge bad requests
    return h

def expect_err(fn, code, what):
    try:
        fn()
    except nbd.Error as e:
        assert e.errnum == code, "%s: errno %s, expected %s" % (what, e.errnum, code)
        return
    raise AssertionError("%s: no error" % what)

h = handle(os.environ["RW"])
assert h.get_structured_replies_negotiated()
assert h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
size = h.get_size()
assert size == 64 << 20

# WRITE / READ / FUA / FLUSH
data = os.urandom(1 << 20)
h.pwrite(data, 4096)
assert h.pread(len(data), 4096) == data
h.pwrite(b"x" * 512, 0, nbd.CMD_FLAG_FUA)
assert h.pread(512, 0) == b"x" * 512
h.flush()

# Errors decided by the server
expect_err(lambda: h.pread(4096, size - 1024), errno.EINVAL, "read past end")
expect_err(lambda: h.pread(4096, size + 4096), errno.EINVAL, "read beyond end")
expect_err(lambda: h.pread(512, 0, 1 << 9), errno.EINVAL, "unknown flag")
expect_err(lambda: h.pread(512, 0, nbd.CMD_FLAG_FUA), errno.EINVAL, "FUA on read")
expect_err(lambda: h.pwrite(b"z" * 4096, size - 1024), errno.ENOSPC, "write past end")
expect_err(lambda: h.pread((32 << 20) + 1, 0), errno.EINVAL, "read over max size")
# a refused write payload is skipped: the connection keeps working
expect_err(lambda: h.pwrite(b"q" * ((32 << 20) + 4096), 0), errno.EINVAL, "write over max size")
assert h.pread(512, 0) == b"x" * 512

# TRIM → hole (block status), reads zeros
h.pwrite(os.urandom(1 << 20), 8 << 20)
h.trim(1 << 20, 8 << 20, nbd.CMD_FLAG_FUA)
assert h.pread(1 << 20, 8 << 20) == bytes(1 << 20)
ext = []
h.block_status(1 << 20, 8 << 20, lambda ctx, off, e, err: ext.extend(e) if ctx == nbd.CONTEXT_BASE_ALLOCATION else None)
assert ext[1] & nbd.STATE_HOLE and ext[1] & nbd.STATE_ZERO, ext

# WRITE_ZEROES with and without NO_HOLE, FAST_ZERO
h.pwrite(os.urandom(1 << 20), 16 << 20)
h.zero(1 << 20, 16 << 20)
assert h.pread(1 << 20, 16 << 20) == bytes(1 << 20)
ext = []
h.block_status(1 << 20, 16 << 20, lambda ctx, off, e, err: ext.extend(e))
assert ext[1] & nbd.STATE_ZERO, ext
h.pwrite(os.urandom(65536), 18 << 20)
h.zero(65536, 18 << 20, nbd.CMD_FLAG_NO_HOLE | nbd.CMD_FLAG_FUA)
assert h.pread(65536, 18 << 20) == bytes(65536)
try:
    h.zero(65536, 19 << 20, nbd.CMD_FLAG_FAST_ZERO)
except nbd.Error as e:
    assert e.errnum == errno.ENOTSUP, e

# CACHE
h.cache(1 << 20, 0)

# BLOCK_STATUS: data then hole; REQ_ONE returns one extent
ext = []
h.block_status(32 << 20, 0, lambda ctx, off, e, err: ext.extend(e))
assert len(ext) >= 4 and ext[1] == 0 and ext[3] & nbd.STATE_HOLE, ext[:6]
ext = []
h.block_status(32 << 20, 0, lambda ctx, off, e, err: ext.extend(e), nbd.CMD_FLAG_REQ_ONE)
assert len(ext) == 2, ext   # exactly one (length, flags) descriptor

# Structured reads: a hole comes back as OFFSET_HOLE, a big read in chunks,
# DF forces one chunk.
chunks = []
def chunk(sub, off, status, err):
    chunks.append((status, off, len(sub)))
    return 0
buf = h.pread_structured(1 << 20, 40 << 20, chunk)
assert buf == bytes(1 << 20)
assert [c[0] for c in chunks] == [nbd.READ_HOLE], chunks
chunks.clear()
h.pwrite(os.urandom(4 << 20), 44 << 20)
h.pread_structured(4 << 20, 44 << 20, chunk)
assert len(chunks) == 4 and all(c[0] == nbd.READ_DATA for c in chunks), chunks
chunks.clear()
h.pread_structured(4 << 20, 42 << 20, chunk, nbd.CMD_FLAG_DF)
assert len(chunks) == 1 and chunks[0][0] == nbd.READ_DATA, chunks
chunks.clear()
h.pread_structured(4 << 20, 42 << 20, chunk)   # 2 MiB hole + 2 MiB data
kinds = sorted(c[0] for c in chunks)
assert nbd.READ_HOLE in kinds and nbd.READ_DATA in kinds, chunks

# Many requests in flight at once, answered out of order
cookies = [h.aio_pread(nbd.Buffer(4096), (i * 7919 * 4096) % (60 << 20)) for i in range(64)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    assert h.aio_command_completed(c)

# Large writes in flight beyond the payload a connection may hold
# (4 MiB): it stops reading and resumes as writes complete
bufs = [os.urandom(1 << 20) for _ in range(3)] + [os.urandom(5 << 20)]
offs = [(8 + 6 * i) << 20 for i in range(len(bufs))]
cookies = [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(b)), o) for b, o in zip(bufs, offs)]
cookies += [h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(b[:4096])), o + (1 << 20) * 5 + 8192)
            for b, o in zip(bufs, offs)]
while h.aio_in_flight() > 0:
    h.poll(-1)
for c in cookies:
    assert h.aio_command_completed(c)
for b, o in zip(bufs, offs):
    assert h.pread(len(b), o) == b, "large write at %d" % o
    assert h.pread(4096, o + (1 << 20) * 5 + 8192) == b[:4096]

# Read-only export: writes refused with EPERM
r = handle(os.environ["RO"])
assert r.is_read_only()
expect_err(lambda: r.pwrite(b"a" * 512, 0), errno.EPERM, "write to read-only")
expect_err(lambda: r.trim(4096, 0), errno.EPERM, "trim on read-only")
expect_err(lambda: r.zero(4096, 0), errno.EPERM, "zero on read-only")
assert r.pread(512, 0) == b"x" * 512

# Multi-conn: write on one handle, flush on a second, read on a third
assert h.can_multi_conn()
h2 = handle(os.environ["RW"]); h3 = handle(os.environ["RW"])
pat = os.urandom(65536)
h.pwrite(pat, 50 << 20)
h2.flush()
assert h3.pread(65536, 50 << 20) == pat

# No meta context: BLOCK_STATUS refused by the server
n = handle(os.environ["RW"], meta=False)
expect_err(lambda: n.block_status(4096, 0, lambda *a: 0), errno.EINVAL, "block status without context")

for x in (h, h2, h3, r, n):
    x.shutdown()
print("commands ok")
PY
NBDSH -n -c "exec(open('$TMP/cmds.py').read())" >"$TMP/cmds.out" 2>&1 || fail "nbdsh script: $(cat "$TMP/cmds.out")"
grep -q "commands ok" "$TMP/cmds.out" || fail "nbdsh script did not finish"

# Live changes: make rw read-only, new connections see it at once.
id=$(blockctl call nbd.export.query '[[["name","=","rw"]], {"get": true}]' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
blockctl call nbd.export.update "[$id, {\"readonly\": true, \"description\": \"now ro\"}]" >/dev/null || fail "update"
NBDSH -u "$RW" -c 'assert h.is_read_only()' || fail "update not live"
blockctl call nbd.export.update "[$id, {\"enabled\": false}]" >/dev/null || fail "disable"
if NBDSH -u "$RW" -c 'pass' 2>/dev/null; then fail "disabled export served"; fi
blockctl call nbd.export.update "[$id, {\"enabled\": true, \"readonly\": false}]" >/dev/null || fail "enable"

# Delete with an open connection: EBUSY, then --force closes it.
NBDSH -u "$RW" -c 'import time
open("'"$TMP"'/held","w").close()
try:
    for i in range(200):
        h.pread(512, 0); time.sleep(0.05)
    print("still connected")
except nbd.Error as e:
    print("closed by server")' >"$TMP/holder.out" 2>&1 &
holder=$!
for i in $(seq 1 100); do [ -f "$TMP/held" ] && break; sleep 0.05; done
if blockctl share nbd delete rw 2>"$TMP/del.err"; then fail "delete with a connection succeeded"; fi
grep -q "EBUSY\|open connection" "$TMP/del.err" || fail "delete error: $(cat "$TMP/del.err")"
blockctl share nbd delete rw --force >/dev/null || fail "forced delete"
wait $holder || true
grep -q "closed by server" "$TMP/holder.out" || fail "forced delete left the connection: $(cat "$TMP/holder.out")"

blockd_stop
pass
