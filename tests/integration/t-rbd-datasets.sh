#!/bin/bash
# Datasets and snapshots on an RBD pool (control plane), over
# WebSocket with an API key as TrueNAS clients call them, each checked
# with the rbd CLI against a throwaway cluster started here (stopped on
# exit; a machine without Ceph FAILS this test):
#  - FILESYSTEM + VOLUME: the image "vms%d1" (format 2, thin); sparse:false
#    refused clearly; volsize update resizes the image, also live under an
#    NBD export (a new connection sees the new size);
#  - data written over NBD; used/referenced from the image;
#  - snapshot (an RBD snapshot), query, rollback (contents back, over NBD
#    and over iSCSI with qemu-img), clone (RBD clone v2: a parent, no
#    protection), promote (flattened: no parent, origin deletable, a job
#    in core.get_jobs), rename of a filesystem (images follow) and of a
#    snapshot, delete recursive (images and snapshots gone);
#  (replication between RBD and file pools: t-replication-incremental.sh).
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 rbd ceph-mon ceph-osd qemu-img
/usr/bin/python3 -c 'import websocket, nbd' 2>/dev/null || fail "python3-websocket or python3-libnbd missing"
ceph_start
export CONF=$CEPH_CONF

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
KEY=$(blockctl call api_key.create '{"name":"rbd"}' |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
export URL="ws://127.0.0.1:$WS_PORT/api/current" KEY ISCSI_PORT NBD_PORT TMP

cat >"$TMP/rbd.py" <<'PY'
import json, os, subprocess, time, websocket, nbd

from wsclient import Client as WsClient

class Client(WsClient):
    def __init__(self):
        super().__init__(timeout=120)
    def err(self, method, *params):
        r = self.call(method, *params)
        assert "error" in r, (method, params, r)
        e = r["error"]
        return e.get("message", "") + json.dumps(e.get("data", {}))

POOL = os.environ["CEPH_POOL"]  # the test's RADOS pool (lib.sh ceph_start)
def rbd(*args):
    p = subprocess.run(["rbd", "-c", os.environ["CONF"]] + list(args), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout
def rbd_json(*args):
    return json.loads(rbd(*args, "--format", "json"))
def images():
    return sorted(rbd_json("ls", POOL))

c = Client()
assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
MiB = 1 << 20
NBDP = os.environ["NBD_PORT"]
def connect(name):
    h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/%s" % (NBDP, name)); return h
def idle(export):
    # a client's disconnect reaches the server a little after shutdown()
    for _ in range(100):
        if not [x for x in c.ok("nbd.global.sessions") if x["export"] == export]:
            return
        time.sleep(0.1)
    raise AssertionError("NBD clients of %s still connected" % export)
def ds(name):
    rows = c.ok("pool.dataset.query", [["name", "=", name]])
    assert len(rows) == 1, (name, rows)
    return rows[0]

c.ok("pool.create", {"name": "rp", "rbd": {"pool": POOL, "mon_host": os.environ["CEPH_MON_HOST"]}})

# create: filesystem + volume
c.ok("pool.dataset.create", {"name": "rp/vms", "type": "FILESYSTEM"})
row = c.ok("pool.dataset.create", {"name": "rp/vms/d1", "type": "VOLUME", "volsize": 32 * MiB,
                                   "volblocksize": "16K"})
assert row["backend"] == "rbd", row
assert row["path"] == "rbd:" + POOL + "/vms%d1", row["path"]
assert images() == ["vms%d1"], images()
assert ds("rp")["mountpoint"] == "rbd:" + POOL, ds("rp")["mountpoint"]
assert ds("rp/vms")["mountpoint"] == "rbd:" + POOL + "/vms", ds("rp/vms")["mountpoint"]
info = rbd_json("info", POOL + "/vms%d1")
assert info["size"] == 32 * MiB and info["format"] == 2, info
assert set(info["features"]) >= {"layering", "exclusive-lock", "object-map", "fast-diff",
                                 "deep-flatten"}, info
m = c.err("pool.dataset.create", {"name": "rp/thick", "type": "VOLUME", "volsize": 8 * MiB,
                                  "sparse": False})
assert "not supported on RBD pools" in m, m
assert "thick" not in " ".join(images()), images()
assert not c.ok("pool.dataset.query", [["name", "=", "rp/thick"]])
print("OK create")

# data over NBD, then usage figures
c.ok("nbd.export.create", {"name": "d1", "dataset": "rp/vms/d1"})
h = connect("d1")
h.pwrite(bytes([0xa1]) * (4 * MiB), 0); h.flush(); h.shutdown()
row = ds("rp/vms/d1")
assert row["used"]["parsed"] >= 4 * MiB, row["used"]
assert row["usedbydataset"]["parsed"] >= 4 * MiB, row["usedbydataset"]
du = rbd_json("du", POOL + "/vms%d1")
assert du["images"][0]["used_size"] >= 4 * MiB, du
print("OK data")

# live resize: the open volume and a new NBD connection see it
h = connect("d1")
c.ok("pool.dataset.update", "rp/vms/d1", {"volsize": 48 * MiB})
assert rbd_json("info", POOL + "/vms%d1")["size"] == 48 * MiB
assert ds("rp/vms/d1")["volsize"]["parsed"] == 48 * MiB
h.shutdown()
h = connect("d1"); assert h.get_size() == 48 * MiB, h.get_size()
assert h.pread(MiB, 0) == bytes([0xa1]) * MiB; h.shutdown()
print("OK resize")

# snapshot: an RBD snapshot, O(1)
snap = c.ok("zfs.snapshot.create", {"dataset": "rp/vms/d1", "name": "s1"})
assert snap["name"] == "rp/vms/d1@s1", snap
assert [s["name"] for s in rbd_json("snap", "ls", POOL + "/vms%d1")] == ["s1"]
q = c.ok("zfs.snapshot.query", [["dataset", "=", "rp/vms/d1"]])
assert [s["name"] for s in q] == ["rp/vms/d1@s1"], q
assert q[0]["properties"]["referenced"]["parsed"] >= 4 * MiB, q[0]["properties"]["referenced"]
h = connect("d1"); h.pwrite(bytes([0xb2]) * MiB, 0); h.flush(); h.shutdown()
# rollback (no client connected): contents and size come back
idle("d1")
c.ok("zfs.snapshot.rollback", "rp/vms/d1@s1", {})
assert rbd_json("info", POOL + "/vms%d1")["size"] == 48 * MiB
h = connect("d1"); assert h.pread(MiB, 0) == bytes([0xa1]) * MiB, "rollback over NBD"; h.shutdown()
# a snapshot exported read-only
c.ok("nbd.export.create", {"name": "d1s1", "dataset": "rp/vms/d1@s1"})
h = connect("d1s1"); assert h.pread(MiB, 0) == bytes([0xa1]) * MiB; h.shutdown()
idle("d1s1")
c.ok("nbd.export.delete", c.ok("nbd.export.query", [["name", "=", "d1s1"]])[0]["id"])
print("OK snapshot rollback")

# iSCSI: the same contents through an extent of the RBD volume
port = int(os.environ["ISCSI_PORT"])
portal = c.ok("iscsi.portal.create", {"listen": [{"ip": "127.0.0.1"}]})["id"]
init = c.ok("iscsi.initiator.create", {"comment": "all"})["id"]
tgt = c.ok("iscsi.target.create", {"name": "d1", "groups": [{"portal": portal, "initiator": init}]})
ext = c.ok("iscsi.extent.create", {"name": "d1", "disk": "zvol/rp/vms/d1"})
c.ok("iscsi.targetextent.create", {"target": tgt["id"], "lunid": 0, "extent": ext["id"]})
out = os.environ["TMP"] + "/d1.raw"
p = subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "raw",
                    "iscsi://127.0.0.1:%d/iqn.2026-11.org.blockd:d1/0" % port, out],
                   capture_output=True, text=True, timeout=120)
assert p.returncode == 0, p.stderr
data = open(out, "rb").read()
assert len(data) == 48 * MiB and data[:4 * MiB] == bytes([0xa1]) * (4 * MiB), len(data)
assert data[4 * MiB:] == bytes(44 * MiB)
print("OK iscsi")

# clone v2 (no protection), O(1)
c.ok("zfs.snapshot.clone", {"snapshot": "rp/vms/d1@s1", "dataset_dst": "rp/c1"})
info = rbd_json("info", POOL + "/c1")
assert info["parent"]["image"] == "vms%d1" and info["parent"]["snapshot"] == "s1", info
assert not info.get("protected", "false") == "true"
assert ds("rp/c1")["origin"]["value"] == "rp/vms/d1@s1", ds("rp/c1")["origin"]
c.ok("nbd.export.create", {"name": "c1", "dataset": "rp/c1"})
h = connect("c1"); assert h.pread(MiB, 0) == bytes([0xa1]) * MiB; h.pwrite(bytes([0xc3]) * MiB, MiB)
h.flush(); h.shutdown()
m = c.err("zfs.snapshot.delete", "rp/vms/d1@s1")
assert "dependent clones (rp/c1)" in m, m
print("OK clone")

# promote: flattened (a job), no parent left, the origin can go
c.ok("pool.dataset.promote", "rp/c1")
info = rbd_json("info", POOL + "/c1")
assert "parent" not in info, info
assert ds("rp/c1")["origin"]["value"] == "", ds("rp/c1")["origin"]
jobs = c.ok("core.get_jobs", [["description", "^", "promote rp/c1"]])
assert jobs and jobs[-1]["state"] == "SUCCESS", jobs
h = connect("c1"); assert h.pread(2 * MiB, 0) == bytes([0xa1]) * MiB + bytes([0xc3]) * MiB
h.shutdown()
print("OK promote")

# renames: a filesystem (its images follow) and a snapshot
c.ok("pool.dataset.rename", "rp/vms", {"new_name": "rp/vm2"})
assert images() == ["c1", "vm2%d1"], images()
assert ds("rp/vm2/d1")["path"] == "rbd:" + POOL + "/vm2%d1"
h = connect("d1"); assert h.pread(MiB, 0) == bytes([0xa1]) * MiB, "export after rename"; h.shutdown()
c.ok("zfs.snapshot.rename", "rp/vm2/d1@s1", {"new_name": "rp/vm2/d1@s2"})
assert [s["name"] for s in rbd_json("snap", "ls", POOL + "/vm2%d1")] == ["s2"]
assert [s["name"] for s in c.ok("zfs.snapshot.query", [["dataset", "=", "rp/vm2/d1"]])] == ["rp/vm2/d1@s2"]
print("OK rename")

# delete: recursive takes the snapshots and images along
m = c.err("pool.dataset.delete", "rp/vm2/d1", {})
assert "has snapshots" in m, m
c.ok("iscsi.extent.delete", ext["id"], False, True)
for e in c.ok("nbd.export.query"):
    c.ok("nbd.export.delete", e["id"])
c.ok("pool.dataset.delete", "rp/vm2", {"recursive": True})
assert images() == ["c1"], images()
c.ok("pool.dataset.delete", "rp/c1", {})
assert images() == [], images()
print("OK delete")
PY
/usr/bin/python3 "$TMP/rbd.py" || fail "RBD dataset cycle"
blockd_stop
pass
