"""Replays of the Kubernetes CSI drivers that speak the TrueNAS API
(truenas/truenas-csi's pkg/client and fenio/tns-csi's pkg/tnsapi): each
driver's calls, in its order, with its request ids (numbers for
truenas-csi, strings for tns-csi), parameters and the fields it decodes
from the replies, over wss:// with an API key, as the driver sends them.

    python3 csireplay.py truenas|tns [--snapshots-only]

Environment: URL (wss://...), CA (the server's certificate), KEY (an API
key), POOL (the pool the volumes go in), ISCSI_PORT (the iSCSI listener;
with --snapshots-only, not used), BASE (the global iSCSI basename). Each
replay prints "OK <driver>" at the end; a failed check raises.

The iSCSI side is checked with real initiators: libiscsi (qemu-io over
iscsi://, with CHAP; iscsi-readcapacity16) and a raw session
(iscsiraw.py) kept attached while the volume grows."""
import json
import os
import ssl
import subprocess
import sys
import time

import websocket

import iscsiraw


class Api:
    """One WebSocket connection; ids as the driver makes them."""

    def __init__(self, string_ids):
        self.string_ids = string_ids
        self.n = 0
        self.connect()

    def connect(self):
        self.ws = websocket.create_connection(
            os.environ["URL"], timeout=120,
            sslopt={"ca_certs": os.environ["CA"], "cert_reqs": ssl.CERT_REQUIRED,
                    "check_hostname": False})

    def call(self, method, *params):
        self.n += 1
        rid = str(self.n) if self.string_ids else self.n
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params:  # truenas-csi leaves params out when it has none
            msg["params"] = list(params)
        self.ws.send(json.dumps(msg))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("id") == rid:
                return r
            assert "id" not in r, ("a reply to another request", rid, r)

    def ok(self, method, *params):
        r = self.call(method, *params)
        assert "result" in r, (method, params, r)
        return r["result"]

    def err(self, method, *params):
        """The error of a call that must fail: (errname, text of message
        and reason), after checking its shape is TrueNAS's."""
        r = self.call(method, *params)
        assert "error" in r, (method, params, r)
        e = r["error"]
        assert isinstance(e["code"], int) and isinstance(e["message"], str), e
        data = e.get("data") or {}
        # as TrueNAS sends it: Go's decoders of both drivers need an integer
        assert isinstance(data.get("error"), int) and isinstance(data.get("errname"), str), e
        return data["errname"], e["message"] + "\n" + str(data.get("reason", ""))

    def login(self):
        assert self.ok("auth.login_with_api_key", os.environ["KEY"]) is True


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def wait_for(what, fn, timeout=60):
    """fn() until it is true (a state reached), failing only if it never is."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("never: " + what)
        time.sleep(0.2)


def run(*argv, timeout=60):
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    check(p.returncode == 0, "%s: %s%s" % (argv[0], p.stdout, p.stderr))
    return p.stdout


def iscsi_url(iqn, user=None, secret=None):
    auth = "%s%%%s@" % (user, secret) if user else ""
    return "iscsi://%s127.0.0.1:%s/%s/0" % (auth, os.environ["ISCSI_PORT"], iqn)


def qemu_io(url, *cmds):
    args = ["qemu-io", "-f", "raw"]
    for c in cmds:
        args += ["-c", c]
    out = run(*(args + [url]))
    check("verification failed" not in out.lower() and "error" not in out.lower(), out)
    return out


def capacity16(session):
    """READ CAPACITY(16) on an attached raw session: the size in bytes."""
    st, sense, data = session.cmd(bytes([0x9E, 0x10] + [0] * 8 + [0, 0, 0, 32, 0, 0]),
                                  data_in_len=32)
    if st != 0:
        return None, sense
    last = int.from_bytes(data[0:8], "big")
    blen = int.from_bytes(data[8:12], "big")
    return (last + 1) * blen, sense


def attached_sees(session, size):
    """The attached session reads the capacity size, after the unit
    attention the change raises (CAPACITY DATA HAS CHANGED, 2A/09)."""
    seen = []

    def probe():
        got, sense = capacity16(session)
        if got is None:
            seen.append(iscsiraw.asc_ascq(sense))
            return False
        return got == size
    wait_for("the attached session to see %d bytes" % size, probe)
    return seen


def snapshot_by_id(api, sid, opts=None):
    rows = api.ok("pool.snapshot.query", [["id", "=", sid]], opts or {})
    return rows[0] if rows else None


# ---------------------------------------------------------------- shared --

def deferred_lifecycle(api, pool, vol, clone, snapname, expect_props):
    """DeleteSnapshot while a clone exists (deferred: still listed with
    defer_destroy on and its clones), then DeleteVolume of the clone: the
    snapshot goes with it."""
    sid = "%s@%s" % (vol, snapname)
    # without defer: ZFS's refusal, which the drivers match
    name, text = api.err("pool.snapshot.delete", sid, {"defer": False, "recursive": False})
    check(name == "EBUSY" and "has dependent clones" in text, (name, text))
    check(api.ok("pool.snapshot.delete", sid, {"defer": True}) is True, "deferred delete")
    row = snapshot_by_id(api, sid, {"extra": {"user_properties": True}})
    check(row is not None, "a deferred snapshot stays until its last clone goes")
    props = row["properties"]
    check(props["defer_destroy"]["value"] == "on", props["defer_destroy"])
    check(clone in props["clones"]["value"].split(","), props["clones"])
    for k, v in expect_props.items():
        check(props[k]["value"] == v, (k, props.get(k)))
    # the clone's data is still the snapshot's
    check(api.ok("pool.dataset.delete", clone, {"recursive": True, "force": True}) is True,
          "DeleteVolume returns true")
    check(snapshot_by_id(api, sid) is None, "the deferred snapshot went with its last clone")
    name, text = api.err("pool.snapshot.get_instance", sid)
    check(name == "ENOENT" and "does not exist" in text, (name, text))


def expand_attached(api, dataset, iqn, old, new, update_params):
    """ControllerExpandVolume with a session attached: it sees the new
    capacity without logging in again."""
    s = iscsiraw.Session(int(os.environ["ISCSI_PORT"]), iqn)
    try:
        s.clear_unit_attention()
        got, sense = capacity16(s)
        check(got == old, ("capacity before", got, sense))
        api.ok("pool.dataset.update", dataset, update_params)
        attached_sees(s, new)
    finally:
        s.close()
    out = run("iscsi-readcapacity16", iscsi_url(iqn))
    check("Total capacity:%d" % new in out.replace(" ", "") or
          "LOGICALBLOCKADDRESS:%d" % (new // 512 - 1) in out.replace(" ", ""), out)


# ---------------------------------------------------------- truenas-csi --

def truenas_publish(api, base, vol, name, chap):
    """ControllerPublishVolume as truenas-csi makes it: CHAP credentials,
    an initiator group, the target on portal 1, a DISK extent, LUN 0."""
    auth_tag = None
    groups = {"portal": 1}
    if chap:
        tags = [a["tag"] for a in api.ok("iscsi.auth.query", [], {})]
        auth_tag = max(tags + [0]) + 1
        api.ok("iscsi.auth.create", {"tag": auth_tag, "user": chap[0], "secret": chap[1]})
        groups.update({"authmethod": "CHAP", "auth": auth_tag})
    ini = api.ok("iscsi.initiator.create",
                 {"initiators": [], "comment": "csi " + name})
    groups["initiator"] = ini["id"]
    t = api.ok("iscsi.target.create",
               {"name": name, "alias": name, "mode": "ISCSI", "groups": [groups]})
    check(isinstance(t["id"], int), t)
    e = api.ok("iscsi.extent.create", {"name": name, "type": "DISK", "disk": "zvol/" + vol,
                                       "blocksize": 512, "enabled": True})
    te = api.ok("iscsi.targetextent.create", {"target": t["id"], "extent": e["id"], "lunid": 0})
    got = api.ok("iscsi.target.query", [["name", "=", name]], {})
    check(len(got) == 1 and got[0]["id"] == t["id"], got)
    return {"target": t["id"], "extent": e["id"], "te": te["id"], "auth": auth_tag,
            "initiator": ini["id"], "iqn": "%s:%s" % (base, name)}


def truenas_unpublish(api, pub):
    tes = api.ok("iscsi.targetextent.query", [["target", "=", pub["target"]]], {})
    for te in tes:
        check(api.ok("iscsi.targetextent.delete", te["id"], True) is True, te)
    check(api.ok("iscsi.extent.delete", pub["extent"], False, True) is True, "extent delete")
    check(api.ok("iscsi.target.delete", pub["target"], True) is True, "target delete")
    api.ok("iscsi.initiator.delete", pub["initiator"])
    if pub["auth"] is not None:
        for a in api.ok("iscsi.auth.query", [["tag", "=", pub["auth"]]], {}):
            api.ok("iscsi.auth.delete", a["id"])
    check(api.ok("iscsi.target.query", [["id", "=", pub["target"]]], {}) == [], "target gone")


def truenas_volume(api, name, size):
    """CreateVolume: a sparse zvol with its block size and compression."""
    r = api.ok("pool.dataset.create", {"name": name, "type": "VOLUME", "volsize": size,
                                       "volblocksize": "16K", "compression": "LZ4",
                                       "sparse": True})
    check(r["id"] == name, r)
    rows = api.ok("pool.dataset.query", [["id", "=", name]], {})
    check(len(rows) == 1 and rows[0]["volsize"]["parsed"] == size, rows)
    row = api.ok("pool.dataset.get_instance", name,
                 {"extra": {"properties": ["refquota", "volsize", "refreservation"]}})
    check(row["id"] == name and row["volsize"]["parsed"] == size, row)


def truenas_snapshots(api, pool, vol, clone):
    """CreateSnapshot, ListSnapshots, CreateVolume from a snapshot and from
    a volume, DeleteSnapshot (deferred), DeleteVolume of the clone."""
    snap = api.ok("pool.snapshot.create", {"dataset": vol, "name": "snap-1", "recursive": False})
    check(snap["id"] == vol + "@snap-1" and snap["snapshot_name"] == "snap-1", snap)
    # AlreadyExists: the driver matches "already exists"
    name, text = api.err("pool.snapshot.create", {"dataset": vol, "name": "snap-1",
                                                  "recursive": False})
    check("already exists" in text, (name, text))
    for flt in ([["dataset", "=", vol]], [["snapshot_name", "=", "snap-1"]]):
        rows = api.ok("pool.snapshot.query", flt, {})
        check([r["id"] for r in rows] == [vol + "@snap-1"], rows)
        check(all(isinstance(r["used"], int) and isinstance(r["referenced"], int)
                  for r in rows), rows)
    # from a snapshot
    check(api.ok("pool.snapshot.clone", {"snapshot": vol + "@snap-1",
                                         "dataset_dst": clone}) is True, "clone")
    # from a volume: a snapshot of the source, cloned
    api.ok("pool.snapshot.create", {"dataset": vol, "name": "vc-src", "recursive": False})
    check(api.ok("pool.snapshot.clone", {"snapshot": vol + "@vc-src",
                                         "dataset_dst": clone + "-v"}) is True, "volume clone")
    name, text = api.err("pool.snapshot.get_instance", vol + "@nosuch")
    check("does not exist" in text, (name, text))
    deferred_lifecycle(api, pool, vol, clone, "snap-1", {})
    deferred_lifecycle(api, pool, vol, clone + "-v", "vc-src", {})


def replay_truenas(snapshots_only):
    pool, base = os.environ["POOL"], os.environ.get("BASE", "")
    api = Api(string_ids=False)
    api.login()
    check(api.ok("core.ping") == "pong", "ping")
    pools = api.ok("pool.query", [["name", "=", pool]], {})
    check(len(pools) == 1 and pools[0]["name"] == pool, pools)
    # capacity: GetCapacity reads these as integers
    check(all(isinstance(pools[0][k], int) for k in ("size", "allocated", "free")), pools)
    # GetAvailableSpace
    res = api.ok("zfs.resource.query", {"paths": [pool], "properties": ["available"]})
    check(len(res) == 1 and int(res[0]["properties"]["available"]["value"]) >= 0, res)
    vol = pool + "/csi/pvc-t1"
    clone = pool + "/csi/pvc-t2"
    truenas_volume(api, vol, 32 << 20)
    if not snapshots_only:
        pub = truenas_publish(api, base, vol, "pvc-t1", None)
        qemu_io(iscsi_url(pub["iqn"]), "write -P 0x5a 0 1M")
        expand_attached(api, vol, pub["iqn"], 32 << 20, 48 << 20, {"volsize": 48 << 20})
    truenas_snapshots(api, pool, vol, clone)
    if not snapshots_only:
        # a clone published with CHAP: a real libiscsi login reads the data
        api.ok("pool.snapshot.create", {"dataset": vol, "name": "pub", "recursive": False})
        api.ok("pool.snapshot.clone", {"snapshot": vol + "@pub", "dataset_dst": clone})
        cpub = truenas_publish(api, base, clone, "pvc-t2", ("csiuser", "csisecret1234"))
        qemu_io(iscsi_url(cpub["iqn"], "csiuser", "csisecret1234"), "read -P 0x5a 0 1M")
        p = subprocess.run(["qemu-io", "-f", "raw", "-c", "read 0 4k",
                            iscsi_url(cpub["iqn"], "csiuser", "wrongsecret99")],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 or "error" in (p.stdout + p.stderr).lower(),
              "a wrong CHAP secret read data")
        truenas_unpublish(api, cpub)
        truenas_unpublish(api, pub)
        check(api.ok("pool.dataset.delete", clone, {"recursive": True, "force": True}) is True,
              "delete clone")
        api.ok("pool.snapshot.delete", vol + "@pub", {"defer": False, "recursive": False})
    check(api.ok("pool.dataset.delete", vol, {"recursive": True, "force": True}) is True,
          "DeleteVolume")
    name, text = api.err("pool.dataset.get_instance", vol)
    check("does not exist" in text, (name, text))
    print("OK truenas-csi")


# --------------------------------------------------------------- tns-csi --

def tns_volume(api, name, size):
    r = api.ok("pool.dataset.create", {"name": name, "type": "VOLUME", "volsize": size,
                                       "volblocksize": "16K", "sparse": True,
                                       "compression": "LZ4", "comments": "tns-csi"})
    check(r["id"] == name, r)
    props = [{"key": "tns-csi:managed_by", "value": "tns-csi"},
             {"key": "tns-csi:csi_volume_name", "value": name.rsplit("/", 1)[1]}]
    api.ok("pool.dataset.update", name, {"user_properties_update": props})
    rows = api.ok("pool.dataset.query", [["id", "=", name]],
                  {"extra": {"flat": True, "retrieve_children": False, "user_properties": True}})
    check(len(rows) == 1 and
          rows[0]["user_properties"]["tns-csi:managed_by"]["value"] == "tns-csi", rows)


def tns_snapshots(api, pool, vol, clone):
    """CreateSnapshot with its bookkeeping in user properties, ListSnapshots
    reading them, a restore by clone, DeleteSnapshot with defer, and the
    clone's DeleteVolume taking the snapshot with it."""
    snap = api.ok("pool.snapshot.create", {"dataset": vol, "name": "snap-1"})
    sid = snap["id"]
    check(sid == vol + "@snap-1" and isinstance(snap["createtxg"], str), snap)
    bookkeeping = {"tns-csi:managed_by": "tns-csi", "tns-csi:snapshot_id": "snap-1",
                   "tns-csi:source_volume": vol.rsplit("/", 1)[1]}
    api.ok("pool.snapshot.update", sid,
           {"user_properties_update": [{"key": k, "value": v} for k, v in bookkeeping.items()]})
    api.ok("pool.snapshot.update", sid,
           {"user_properties_update": [{"key": "tns-csi:tmp", "value": "1"}]})
    api.ok("pool.snapshot.update", sid,
           {"user_properties_update": [], "user_properties_remove": ["tns-csi:tmp"]})
    rows = api.ok("pool.snapshot.query", [["id", "=", sid]],
                  {"extra": {"user_properties": True}})
    props = rows[0]["properties"]
    for k, v in bookkeeping.items():
        check(props[k]["value"] == v and props[k]["source"] == "LOCAL", (k, props.get(k)))
    check("tns-csi:tmp" not in props, props)
    check(props["defer_destroy"]["value"] == "off", props["defer_destroy"])
    ids = api.ok("pool.snapshot.query", [["dataset", "=", vol]], {"select": ["id"]})
    check(ids == [{"id": sid}], ids)
    name, text = api.err("pool.snapshot.create", {"dataset": vol, "name": "snap-1"})
    check("already exists" in text, (name, text))
    # restore: a clone of the snapshot
    check(api.ok("pool.snapshot.clone", {"snapshot": sid, "dataset_dst": clone}) is True,
          "CloneSnapshot returns true")
    rows = api.ok("pool.dataset.query", [["id", "=", clone]])
    check(len(rows) == 1 and rows[0]["origin"]["value"] == sid, rows)
    deferred_lifecycle(api, pool, vol, clone, "snap-1", bookkeeping)
    name, text = api.err("pool.snapshot.update", vol + "@nosuch",
                         {"user_properties_update": [{"key": "a:b", "value": "c"}]})
    check(name == "ENOENT" and "does not exist" in text, (name, text))


def tns_relogin():
    """A session that is not (or no longer) authenticated: the driver logs
    in again on that connection when the error says so, and goes on."""
    api = Api(string_ids=True)
    name, text = api.err("pool.dataset.query", [["id", "^", os.environ["POOL"]]])
    check(name == "ENOTAUTHENTICATED", (name, text))
    api.login()
    api.ok("pool.dataset.query", [["id", "^", os.environ["POOL"]]])


def tns_publish(api, base, vol, name):
    api.ok("iscsi.global.config")
    check(len(api.ok("iscsi.portal.query")) >= 1, "a portal")
    check(len(api.ok("iscsi.initiator.query")) >= 1, "an initiator group")
    portal = api.ok("iscsi.portal.query")[0]["id"]
    ini = api.ok("iscsi.initiator.query")[0]["id"]
    t = api.ok("iscsi.target.create", {"name": name, "alias": name, "mode": "ISCSI",
                                       "groups": [{"portal": portal, "initiator": ini}]})
    e = api.ok("iscsi.extent.create", {"name": name, "type": "DISK", "disk": "zvol/" + vol,
                                       "blocksize": 512, "enabled": True})
    api.ok("iscsi.targetextent.create", {"target": t["id"], "extent": e["id"], "lunid": 0})
    job = api.ok("service.control", "RELOAD", "iscsitarget")
    check(isinstance(job, int), job)
    wait_for("the reload job to succeed",
             lambda: api.ok("core.get_jobs", [["id", "=", job]])[0]["state"] == "SUCCESS")
    return t["id"], e["id"], "%s:%s" % (base, name)


def replay_tns(snapshots_only):
    pool, base = os.environ["POOL"], os.environ.get("BASE", "")
    api = Api(string_ids=True)
    api.login()
    pools = api.ok("pool.query", [["name", "=", pool]])
    check(len(pools) == 1, pools)
    # GetCapacity: properties.{size,free,allocated}.parsed
    props = pools[0]["properties"]
    check(all(isinstance(props[k]["parsed"], int) for k in ("size", "free", "allocated")), props)
    vol, clone = pool + "/k8s/pvc-n1", pool + "/k8s/pvc-n2"
    tns_volume(api, vol, 32 << 20)
    if not snapshots_only:
        tid, eid, iqn = tns_publish(api, base, vol, "pvc-n1")
        qemu_io(iscsi_url(iqn), "write -P 0x6b 0 1M")
        expand_attached(api, vol, iqn, 32 << 20, 64 << 20, {"volsize": 64 << 20})
    tns_snapshots(api, pool, vol, clone)
    tns_relogin()
    if not snapshots_only:
        for te in api.ok("iscsi.targetextent.query", [["target", "=", tid]]):
            api.ok("iscsi.targetextent.delete", te["id"], True)
        api.ok("iscsi.extent.delete", eid, False, True)
        api.ok("iscsi.target.delete", tid, True)
    check(api.ok("pool.dataset.delete", vol, {"recursive": True, "force": True}) is True,
          "DeleteVolume returns true")
    rows = api.ok("pool.dataset.query", [["id", "=", vol]])
    check(rows == [], rows)
    print("OK tns-csi")


if __name__ == "__main__":
    only = "--snapshots-only" in sys.argv[2:]
    {"truenas": replay_truenas, "tns": replay_tns}[sys.argv[1]](only)
