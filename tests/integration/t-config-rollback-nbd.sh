#!/usr/bin/env bash
# Snapshot and rollback under a connected NBD client: the export's open
# volume sees the snapshot's data and size at once (in-place rollback);
# rollback is refused while a client is connected unless forced (then the
# client is disconnected), delete while exported; a snapshot can be
# exported read-only; a resize is seen by a new connection.
. "$(dirname "$0")/lib.sh"
need nbdsh python3
NBDSH() { PATH=/usr/bin:$PATH nbdsh "$@"; }
NBDSH -n -c 'import nbd' || fail "nbdsh cannot import nbd (python3-libnbd missing)"
blockd_start

blockctl volume create demo/rb --size 8M >/dev/null || fail "volume create"
blockctl share nbd create demo/rb --name rb >/dev/null || fail "share create"
export URI=nbd://127.0.0.1:$NBD_PORT/rb BLOCKCTL_BIN SOCK NBD_PORT

cat >"$TMP/rb.py" <<'PY'
import os, subprocess, nbd

def ctl(*args, ok=True):
    p = subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"]] + list(args),
                       capture_output=True, text=True)
    if ok:
        assert p.returncode == 0, "blockctl %s: %s" % (args, p.stderr)
    return p

h = nbd.NBD()
h.connect_uri(os.environ["URI"])
A = b"A" * 65536
B = b"B" * 65536
h.pwrite(A, 1 << 20)
h.flush()
ctl("call", "zfs.snapshot.create", '{"dataset":"demo/rb","name":"s1"}')
h.pwrite(B, 1 << 20)
h.pwrite(B, 0)
h.flush()
assert h.pread(65536, 1 << 20) == B

# refused while exported, with the front-end's reason
p = ctl("call", "zfs.snapshot.rollback", '["demo/rb@s1"]', ok=False)
assert p.returncode == 1 and "exported over NBD" in p.stderr, p.stderr
p = ctl("call", "pool.dataset.delete", '["demo/rb",{"recursive":true}]', ok=False)
assert p.returncode == 1 and "in use" in p.stderr, p.stderr

# forced: the client is disconnected (NBD cannot tell it the disk changed);
# a new connection reads the snapshot's data
ctl("call", "zfs.snapshot.rollback", '["demo/rb@s1",{"force":true}]')
try:
    h.pread(4096, 0)
    raise AssertionError("the client survived a forced rollback")
except nbd.Error:
    pass
h = nbd.NBD()
h.connect_uri(os.environ["URI"])
assert h.pread(65536, 1 << 20) == A, "rolled-back data not visible on the export"
assert h.pread(65536, 0) == bytes(65536), "data written after the snapshot survived"
h.shutdown()

# grow, then a new connection sees the new size
ctl("call", "pool.dataset.update", '["demo/rb",{"volsize":16777216}]')
h = nbd.NBD()
h.connect_uri(os.environ["URI"])
assert h.get_size() == 16 << 20, h.get_size()
h.shutdown()

# the snapshot exported read-only holds the snapshot's data
ctl("share", "nbd", "create", "demo/rb@s1", "--name", "snap", "--readonly")
h = nbd.NBD()
h.connect_uri("nbd://127.0.0.1:%s/snap" % os.environ["NBD_PORT"])
assert h.is_read_only()
assert h.pread(65536, 1 << 20) == A
assert h.get_size() == 8 << 20
h.shutdown()
print("ok")
PY
out=$(NBDSH -c "exec(open('$TMP/rb.py').read())" 2>&1) || fail "rollback under NBD: $out"
case "$out" in *ok*) ;; *) fail "script did not finish: $out" ;; esac
blockd_alive || fail "daemon died"
pass
