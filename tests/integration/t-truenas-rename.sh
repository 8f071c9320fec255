#!/bin/bash
# TrueNAS rename and promote, over WebSocket with an API key, with the
# parameter shapes truenas_incus_ctl sends:
#  - zfs.dataset.rename [id, {new_name}] of a volume (its snapshots move
#    along), of a filesystem (the whole subtree moves: rows, files and
#    directories), of a snapshot; zfs.snapshot.rename [id, new_name];
#    recursive snapshot rename over descendants (all or nothing); the
#    TrueNAS errors (target exists, parent missing, cross-pool, into its
#    own descendant, snapshot into another dataset, missing source);
#    clones' origin follows a renamed origin.
#  - a volume shared over iSCSI (the 8-call TrueNAS sequence) and NBD is
#    renamed twice while qemu-io (iSCSI) and libnbd (NBD) keep their
#    sessions open and do I/O with verified patterns before, between and
#    after: no error, the sessions are the same ones, the extent's disk
#    and the export's dataset show the new name, new sessions work.
#  - pool.dataset.promote: the clone takes the origin's older snapshots,
#    the origin becomes a clone of the moved snapshot, origins/clones in
#    queries are right, the origin can then be deleted and the data is
#    intact; errors for a non-clone and a snapshot name conflict; a
#    cross-pool promote copies the snapshot files as a job.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 qemu-io
/usr/bin/python3 -c 'import websocket, nbd' 2>/dev/null || fail "python3-websocket or python3-libnbd missing"

WS_PORT=$(free_port)
mkdir -p "$TMP/srv" # a pool outside the state directory: where the operator allows
blockd_start --api-listen "127.0.0.1:$WS_PORT" --allow-dir "$TMP/srv"
KEY=$(blockctl call api_key.create '{"name":"rename"}' |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
P2DIR=$TMP/srv/pool2
export URL="ws://127.0.0.1:$WS_PORT/api/current" KEY STATE ISCSI_PORT NBD_PORT P2DIR

cat >"$TMP/rename.py" <<'PY'
import json, os, subprocess, threading, time, websocket, nbd

STATE, P2DIR = os.environ["STATE"], os.environ["P2DIR"]
POOL = STATE + "/pools/demo"

from wsclient import Client as WsClient

class Client(WsClient):
    def err(self, method, *params, errno=None, text=None):
        r = self.call(method, *params)
        e = r.get("error")
        assert e, (method, params, "succeeded", r)
        if errno is not None:
            assert e["data"]["error"] == errno, (method, params, e)
        if text is not None:
            assert text in e["message"], (method, params, e["message"])
        return e

c = Client()
assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True

def names(prefix):
    rows = c.ok("pool.dataset.query", [["name", "^", prefix]], {"extra": {"flat": True}})
    return sorted(r["name"] for r in rows)
def snaps(ds):
    return sorted(s["name"] for s in c.ok("zfs.snapshot.query", [["dataset", "=", ds]]))
def ds(name):
    r = c.ok("pool.dataset.query", [["id", "=", name]])
    assert len(r) == 1, (name, r)
    return r[0]
def origin(name):
    return ds(name)["origin"]["value"]
def vol(name, size=16 << 20):
    c.ok("pool.dataset.create", {"name": name, "type": "VOLUME", "volsize": size, "sparse": True})
def fs(name):
    c.ok("pool.dataset.create", {"name": name, "type": "FILESYSTEM"})
def snap(dataset, name):
    c.ok("zfs.snapshot.create", {"dataset": dataset, "name": name})
def exists(path):
    return os.path.exists(path)

# ---- volume, filesystem and snapshot renames (Incus' tree) ----
fs("demo/incus"); fs("demo/incus/containers")
vol("demo/incus/containers/c1")
snap("demo/incus/containers/c1", "snap0"); snap("demo/incus/containers/c1", "snap1")
assert c.ok("zfs.dataset.rename", "demo/incus/containers/c1", {"new_name": "demo/incus/containers/c2"}) is None
assert names("demo/incus") == ["demo/incus", "demo/incus/containers", "demo/incus/containers/c2"], names("demo/incus")
assert snaps("demo/incus/containers/c2") == ["demo/incus/containers/c2@snap0", "demo/incus/containers/c2@snap1"]
assert snaps("demo/incus/containers/c1") == []
assert exists(POOL + "/incus/containers/c2") and exists(POOL + "/incus/containers/c2@snap1")
assert not exists(POOL + "/incus/containers/c1") and not exists(POOL + "/incus/containers/c1@snap0")
# a filesystem moves with everything below it
assert c.ok("zfs.dataset.rename", "demo/incus/containers", {"new_name": "demo/incus/ctrs"}) is None
assert names("demo/incus") == ["demo/incus", "demo/incus/ctrs", "demo/incus/ctrs/c2"], names("demo/incus")
assert snaps("demo/incus/ctrs/c2") == ["demo/incus/ctrs/c2@snap0", "demo/incus/ctrs/c2@snap1"]
assert exists(POOL + "/incus/ctrs/c2@snap0") and not exists(POOL + "/incus/containers")
# snapshot renames: zfs.dataset.rename (what Incus sends) and zfs.snapshot.rename
assert c.ok("zfs.dataset.rename", "demo/incus/ctrs/c2@snap1", {"new_name": "demo/incus/ctrs/c2@snap9"}) is None
assert c.ok("zfs.snapshot.rename", "demo/incus/ctrs/c2@snap0", "demo/incus/ctrs/c2@first") is None
assert snaps("demo/incus/ctrs/c2") == ["demo/incus/ctrs/c2@first", "demo/incus/ctrs/c2@snap9"], snaps("demo/incus/ctrs/c2")
assert exists(POOL + "/incus/ctrs/c2@snap9") and not exists(POOL + "/incus/ctrs/c2@snap1")
# a clone's origin follows its origin's renames
c.ok("zfs.snapshot.clone", {"snapshot": "demo/incus/ctrs/c2@first", "dataset_dst": "demo/incus/ctrs/k1"})
assert origin("demo/incus/ctrs/k1") == "demo/incus/ctrs/c2@first"
c.ok("zfs.dataset.rename", "demo/incus/ctrs/c2", {"new_name": "demo/incus/ctrs/c3"})
c.ok("zfs.snapshot.rename", "demo/incus/ctrs/c3@first", {"new_name": "demo/incus/ctrs/c3@base"})
assert origin("demo/incus/ctrs/k1") == "demo/incus/ctrs/c3@base", origin("demo/incus/ctrs/k1")
s = c.ok("zfs.snapshot.query", [["id", "=", "demo/incus/ctrs/c3@base"]])[0]
assert s["properties"]["clones"]["value"] == "demo/incus/ctrs/k1", s["properties"]["clones"]

# recursive snapshot rename: every descendant's snapshot of that name, all or nothing
fs("demo/r"); vol("demo/r/v1"); fs("demo/r/sub"); vol("demo/r/sub/v2"); vol("demo/rx")
for d in ("demo/r/v1", "demo/r/sub/v2", "demo/rx"):
    snap(d, "s")
assert c.ok("zfs.dataset.rename", "demo/r@s", {"new_name": "demo/r@t", "recursive": True}) is None
assert snaps("demo/r/v1") == ["demo/r/v1@t"] and snaps("demo/r/sub/v2") == ["demo/r/sub/v2@t"]
assert snaps("demo/rx") == ["demo/rx@s"], "a sibling with a common prefix was renamed"
snap("demo/r/v1", "u"); snap("demo/r/sub/v2", "u"); snap("demo/r/sub/v2", "w")
c.err("zfs.dataset.rename", "demo/r@u", {"new_name": "demo/r@w", "recursive": True}, errno=17,
      text="a child dataset already has a snapshot with the new name")
assert snaps("demo/r/v1") == ["demo/r/v1@t", "demo/r/v1@u"], "a failed recursive rename renamed something"
# without recursive, a filesystem has no snapshot of that name
c.err("zfs.dataset.rename", "demo/r@t", {"new_name": "demo/r@x"}, errno=2)

# errors, TrueNAS-shaped ("Failed to rename dataset: ...")
c.err("zfs.dataset.rename", "demo/incus/ctrs/c3", {"new_name": "demo/incus/ctrs/k1"}, errno=17, text="dataset already exists")
c.err("zfs.dataset.rename", "demo/incus/ctrs/c3", {"new_name": "demo/nowhere/c3"}, errno=2, text="parent does not exist")
c.ok("pool.create", {"name": "p2", "path": P2DIR})
c.err("zfs.dataset.rename", "demo/incus/ctrs/c3", {"new_name": "p2/c3"}, errno=18, text="datasets must be within same pool")
c.err("zfs.dataset.rename", "demo/incus", {"new_name": "demo/incus/ctrs/deeper"}, errno=22, text="descendant")
c.err("zfs.dataset.rename", "demo/incus/ctrs/c3@base", {"new_name": "demo/incus/ctrs/k1@base"}, errno=22,
      text="snapshots must be part of same dataset")
c.err("zfs.dataset.rename", "demo/incus/nope", {"new_name": "demo/incus/nope2"}, errno=2, text="does not exist")
c.err("zfs.dataset.rename", "demo", {"new_name": "demo2"}, text="root dataset")
c.err("zfs.dataset.rename", "demo/incus/ctrs/c3", {"new_name": "demo/incus/ctrs/k1/x"}, errno=20)
c.err("zfs.dataset.rename", "demo/incus/ctrs/c3", {"new_name": "demo/incus/ctrs/c3", "bogus": 1})
c.err("zfs.snapshot.rename", "demo/incus/ctrs/c3@base", "demo/incus/ctrs/c3@snap9", errno=17)
# pool.dataset.rename (TrueNAS 25.10+ shape, force accepted)
assert c.ok("pool.dataset.rename", "demo/rx", {"new_name": "demo/ry", "force": True}) is None
assert snaps("demo/ry") == ["demo/ry@s"]
# Incus' driver may give the new snapshot name as "[dataset]@name"
assert c.ok("zfs.dataset.rename", "demo/ry@s", {"new_name": "@s2"}) is None
assert snaps("demo/ry") == ["demo/ry@s2"]
c.err("pool.dataset.rename", "demo/ry@s2", {"new_name": "demo/ry@z"})
# inherited properties come from the new parent (ZFS): a volume moved under
# a read-only filesystem is read-only, with source INHERITED
c.ok("pool.dataset.create", {"name": "demo/rofs", "type": "FILESYSTEM", "readonly": "ON"})
vol("demo/rw1")
assert ds("demo/rw1")["readonly"]["value"] == "OFF"
rwx = c.ok("nbd.export.create", {"name": "rw1", "dataset": "demo/rw1"})
h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/rw1" % os.environ["NBD_PORT"])
h.pwrite(b"x" * 4096, 0); h.shutdown()
c.ok("zfs.dataset.rename", "demo/rw1", {"new_name": "demo/rofs/rw1"})
ro = ds("demo/rofs/rw1")["readonly"]
assert ro["value"] == "ON" and ro["source"] == "INHERITED", ro
# the open volume follows: writes are refused now
h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/rw1" % os.environ["NBD_PORT"])
try:
    h.pwrite(b"y" * 4096, 0)
    raise AssertionError("write to a volume under a read-only parent succeeded")
except nbd.Error:
    pass
h.shutdown()
c.ok("nbd.export.delete", rwx["id"], {"force": True})  # the closed client may still count
# files inside a renamed filesystem: FILE extents (a file the extent
# created) and NBD path exports (of a volume's file) follow
fs("demo/fdir")
fext = c.ok("iscsi.extent.create", {"name": "fext", "type": "FILE", "path": POOL + "/fdir/disk.img", "filesize": 1048576})
c.ok("pool.dataset.create", {"name": "demo/fdir/vol", "type": "VOLUME", "volsize": 1048576})
fexp = c.ok("nbd.export.create", {"name": "fexp", "path": POOL + "/fdir/vol"})
c.ok("zfs.dataset.rename", "demo/fdir", {"new_name": "demo/fdir2"})
assert c.ok("iscsi.extent.get_instance", fext["id"])["path"] == POOL + "/fdir2/disk.img"
assert c.ok("nbd.export.query", [["id", "=", fexp["id"]]])[0]["path"] == POOL + "/fdir2/vol"
h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/fexp" % os.environ["NBD_PORT"])
assert h.get_size() == 1048576; h.shutdown()
c.ok("nbd.export.delete", fexp["id"], {"force": True})
c.ok("iscsi.extent.delete", fext["id"], True, True)
print("OK renames")

# ---- a shared volume renamed under live iSCSI and NBD sessions ----
fs("demo/live"); vol("demo/live/vol", 32 << 20)
port = int(os.environ["ISCSI_PORT"])
portal = c.ok("iscsi.portal.create", {"listen": [{"ip": "127.0.0.1"}]})["id"]
init = c.ok("iscsi.initiator.create", {"comment": "all"})["id"]
tgt = c.ok("iscsi.target.create", {"name": "live", "alias": "demo/live/vol", "groups": [{"portal": portal, "initiator": init}]})
ext = c.ok("iscsi.extent.create", {"name": "live", "disk": "zvol/demo/live/vol", "ro": False})
c.ok("iscsi.targetextent.create", {"target": tgt["id"], "lunid": 0, "extent": ext["id"]})
exp = c.ok("nbd.export.create", {"name": "live", "dataset": "demo/live/vol"})
iqn = "iqn.2026-11.org.blockd:live"
qio = subprocess.Popen(["qemu-io", "-f", "raw", "iscsi://127.0.0.1:%d/%s/0" % (port, iqn)],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
qout = []
def qreader():
    for line in qio.stdout:
        qout.append(line)
threading.Thread(target=qreader, daemon=True).start()
def qcmd(cmd, done_marker):
    # one command, then wait until qemu-io printed its result: the commands
    # of both clients are ordered
    n = sum(done_marker in l for l in qout)
    qio.stdin.write(cmd + "\n"); qio.stdin.flush()
    deadline = time.time() + 60
    while sum(done_marker in l for l in qout) == n:
        assert qio.poll() is None and time.time() < deadline, "qemu-io: " + "".join(qout)
        time.sleep(0.01)
h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/live" % os.environ["NBD_PORT"])
def io_round(k):
    # iSCSI writes the first MiB, NBD the second; each reads back both
    qcmd("write -P %d 0 1M" % (0x10 + k), "wrote 1048576/1048576")
    h.pwrite(bytes([0x40 + k]) * (1 << 20), 1 << 20); h.flush()
    qcmd("read -P %d 1M 1M" % (0x40 + k), "read 1048576/1048576")
    qcmd("read -P %d 0 1M" % (0x10 + k), "read 1048576/1048576")
    assert h.pread(1 << 20, 0) == bytes([0x10 + k]) * (1 << 20), "NBD does not see the iSCSI write"
    assert not any("fail" in l.lower() or "error" in l.lower() for l in qout), "".join(qout)
def sessions():
    return (len(c.ok("iscsi.global.sessions")), len(c.ok("nbd.global.sessions")))
io_round(0)
deadline = time.time() + 30
while sessions() != (1, 1):
    assert time.time() < deadline, sessions()
    time.sleep(0.05)
nbd_before = c.ok("nbd.global.sessions")[0]["connected_at"]
c.ok("zfs.dataset.rename", "demo/live/vol", {"new_name": "demo/live/vol2"})
io_round(1)
c.ok("zfs.dataset.rename", "demo/live", {"new_name": "demo/lv"})
io_round(2)
assert sessions() == (1, 1), sessions()
assert c.ok("nbd.global.sessions")[0]["connected_at"] == nbd_before, "the NBD session was replaced"
e = c.ok("iscsi.extent.get_instance", ext["id"])
assert e["disk"] == "zvol/demo/lv/vol2", e
assert c.ok("iscsi.extent.query", [["disk", "=", "zvol/demo/lv/vol2"]])[0]["id"] == ext["id"]
x = c.ok("nbd.export.query", [["id", "=", exp["id"]]])[0]
assert x["dataset"] == "demo/lv/vol2" and x["connections"] == 1, x
# the old name is gone for everyone; deleting the renamed volume is refused (in use)
c.err("pool.dataset.delete", "demo/lv/vol2", {}, errno=16)
assert "zvol/demo/lv/vol2" not in c.ok("iscsi.extent.disk_choices")
qio.stdin.write("quit\n"); qio.stdin.close()
assert qio.wait(timeout=120) == 0, "".join(qout)
time.sleep(0.1)
out = "".join(qout)
assert "fail" not in out.lower() and "error" not in out.lower(), out
assert out.count("read 1048576/1048576") == 6, out
# new sessions on the new name see the data
h2 = nbd.NBD(); h2.connect_uri("nbd://127.0.0.1:%s/live" % os.environ["NBD_PORT"])
assert h2.pread(1 << 20, 0) == bytes([0x12]) * (1 << 20) and h2.pread(1 << 20, 1 << 20) == bytes([0x42]) * (1 << 20)
h2.shutdown(); h.shutdown()
q = subprocess.run(["qemu-io", "-f", "raw", "-c", "read -P 0x42 1M 1M",
                    "iscsi://127.0.0.1:%d/%s/0" % (port, iqn)], capture_output=True, text=True)
assert q.returncode == 0 and "Pattern verification failed" not in q.stdout, q.stdout + q.stderr
print("OK live")

# ---- promote ----
fs("demo/p"); vol("demo/p/base", 8 << 20)
pexp = c.ok("nbd.export.create", {"name": "pbase", "dataset": "demo/p/base"})
hb = nbd.NBD(); hb.connect_uri("nbd://127.0.0.1:%s/pbase" % os.environ["NBD_PORT"])
for i, s in enumerate(["s1", "s2", "s3"]):
    hb.pwrite(bytes([0xa0 + i]) * 65536, 0); hb.flush()
    snap("demo/p/base", s)
hb.shutdown()
c.ok("nbd.export.delete", pexp["id"], {"force": True})  # the closed client may still count
c.ok("zfs.snapshot.clone", {"snapshot": "demo/p/base@s2", "dataset_dst": "demo/p/clone"})
c.ok("zfs.snapshot.clone", {"snapshot": "demo/p/base@s1", "dataset_dst": "demo/p/other"})
sexp = c.ok("nbd.export.create", {"name": "ps1", "dataset": "demo/p/base@s1"})
c.err("pool.dataset.promote", "demo/p/base", errno=22, text="not a cloned filesystem")
assert c.ok("pool.dataset.promote", "demo/p/clone") is None
assert origin("demo/p/clone") == "", origin("demo/p/clone")
assert origin("demo/p/base") == "demo/p/clone@s2", origin("demo/p/base")
assert origin("demo/p/other") == "demo/p/clone@s1", origin("demo/p/other")
assert snaps("demo/p/clone") == ["demo/p/clone@s1", "demo/p/clone@s2"], snaps("demo/p/clone")
assert snaps("demo/p/base") == ["demo/p/base@s3"], snaps("demo/p/base")
s2 = c.ok("zfs.snapshot.query", [["id", "=", "demo/p/clone@s2"]])[0]
assert s2["properties"]["clones"]["value"] == "demo/p/base", s2["properties"]["clones"]
assert exists(POOL + "/p/clone@s1") and not exists(POOL + "/p/base@s1")
# the export of the moved snapshot follows it
assert c.ok("nbd.export.query", [["id", "=", sexp["id"]]])[0]["dataset"] == "demo/p/clone@s1"
# the old origin can go now (with its own newer snapshot)
c.ok("pool.dataset.delete", "demo/p/base", {"recursive": True})
hc = nbd.NBD(); c.ok("nbd.export.create", {"name": "pclone", "dataset": "demo/p/clone"})
hc.connect_uri("nbd://127.0.0.1:%s/pclone" % os.environ["NBD_PORT"])
assert hc.pread(65536, 0) == bytes([0xa1]) * 65536, "clone data changed"
hc.shutdown()
hs = nbd.NBD(); hs.connect_uri("nbd://127.0.0.1:%s/ps1" % os.environ["NBD_PORT"])
assert hs.pread(65536, 0) == bytes([0xa0]) * 65536, "moved snapshot data changed"
hs.shutdown()
# a snapshot name the clone already has: refused, nothing moved
vol("demo/p/b2", 8 << 20); snap("demo/p/b2", "a"); snap("demo/p/b2", "b")
c.ok("zfs.snapshot.clone", {"snapshot": "demo/p/b2@b", "dataset_dst": "demo/p/c2"})
snap("demo/p/c2", "a")
c.err("pool.dataset.promote", "demo/p/c2", errno=17, text="conflicts")
assert snaps("demo/p/b2") == ["demo/p/b2@a", "demo/p/b2@b"]
# across pools (blockd allows cross-pool clones): the snapshot files are copied, as a job
c.ok("zfs.snapshot.clone", {"snapshot": "demo/p/b2@a", "dataset_dst": "p2/xc"})
assert c.ok("pool.dataset.promote", "p2/xc") is None
assert snaps("p2/xc") == ["p2/xc@a"] and origin("demo/p/b2") == "p2/xc@a"
assert exists(P2DIR + "/xc@a") and not exists(POOL + "/p/b2@a")
jobs = c.ok("core.get_jobs", [["method", "=", "pool.dataset.promote"]])
assert jobs and jobs[-1]["state"] == "SUCCESS", jobs
print("OK promote")

# ---- the Incus driver's tree, step by step: image -> snapshot -> instance
# clone -> rename -> promote -> delete the image ----
def row(name):
    r = c.ok("pool.dataset.query", [["name", "=", name]], {"extra": {"flat": True, "retrieve_children": False}})
    return r[0] if r else None
for d in ("demo/inc", "demo/inc/images", "demo/inc/virtual-machines"):
    c.ok("pool.dataset.create", {"name": d, "type": "FILESYSTEM", "managedby": "incus",
                                 "user_properties": [{"key": "incus:content_type", "value": "dir"}]})
    assert row(d)["type"] == "FILESYSTEM"
img = "demo/inc/images/abc123.block"
vol(img)
c.ok("zfs.snapshot.create", {"dataset": img, "name": "readonly"})
assert snaps(img) == [img + "@readonly"]
c.ok("zfs.snapshot.clone", {"snapshot": img + "@readonly", "dataset_dst": "demo/inc/virtual-machines/vm1.block"})
assert row("demo/inc/virtual-machines/vm1.block")["origin"]["value"] == img + "@readonly"
c.ok("zfs.dataset.rename", "demo/inc/virtual-machines/vm1.block", {"new_name": "demo/inc/virtual-machines/vm2.block"})
assert row("demo/inc/virtual-machines/vm1.block") is None
assert row("demo/inc/virtual-machines/vm2.block")["origin"]["value"] == img + "@readonly"
c.ok("pool.dataset.promote", "demo/inc/virtual-machines/vm2.block")
assert row("demo/inc/virtual-machines/vm2.block")["origin"]["value"] == ""
assert row(img)["origin"]["value"] == "demo/inc/virtual-machines/vm2.block@readonly"
assert snaps("demo/inc/virtual-machines/vm2.block") == ["demo/inc/virtual-machines/vm2.block@readonly"]
c.ok("pool.dataset.delete", img, {"recursive": True})
assert row(img) is None
c.ok("pool.dataset.delete", "demo/inc/virtual-machines/vm2.block", {"recursive": True})
assert names("demo/inc/") == ["demo/inc/images", "demo/inc/virtual-machines"], names("demo/inc/")
print("OK incus tree")
PY

out=$(/usr/bin/python3 "$TMP/rename.py" 2>&1) || fail "rename/promote: $out"
grep -q "OK incus tree" <<<"$out" || fail "script did not finish: $out"
blockd_alive || fail "daemon died"

# Everything survives a restart under the new names.
blockd_stop
blockd_start --api-listen "127.0.0.1:$WS_PORT" --allow-dir "$TMP/srv"
blockctl call pool.dataset.query '[[["id","=","demo/lv/vol2"]]]' | grep -q '"demo/lv/vol2"' ||
    fail "renamed volume lost after restart"
blockctl call iscsi.extent.query | grep -q '"zvol/demo/lv/vol2"' || fail "extent lost its new disk"
timeout 30 qemu-io -f raw -c "read -P 0x42 1M 1M" \
    "iscsi://127.0.0.1:$ISCSI_PORT/iqn.2026-11.org.blockd:live/0" | grep -q "read 1048576" ||
    fail "renamed share does not serve after restart"
grep -q "renamed volume demo/live/vol to demo/live/vol2" "$BLOCKD_LOG" || fail "no log line for the rename"
pass
