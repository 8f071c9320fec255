#!/bin/bash
# The TrueNAS CSI drivers' view of errors and capacity, over WebSocket with
# an API key (truenas/truenas-csi, fenio/tns-csi):
# - errors in TrueNAS's shape: data = {error: <errno integer>, errname,
#   reason "[ENAME] ...", trace: null, extra}; not found (ENOENT, "does not
#   exist"), already exists (EEXIST, "already exists"), validation (-32602
#   "Invalid params", data.extra [[field, msg, errno]]), method not found;
#   a snapshot with a clone "has dependent clones";
# - a call before login: errno 207 ENOTAUTHENTICATED; logging in then works;
#   after the key is deleted the session gets ENOTAUTHENTICATED again and a
#   new key logs in again on the same connection;
# - every get_instance takes TrueNAS's second argument (query options):
#   pool.dataset.get_instance [id, {extra: {properties: [...]}}] returns
#   only those properties, select, pool/zfs.snapshot/iscsi get_instance;
# - zfs.resource.query {paths, properties} on a pool and a volume (value
#   a number, as truenas-csi reads available); a missing path;
# - pool.query rows: properties.{size, allocated, free, capacity}.parsed and
#   top-level size/allocated/free integers that agree with them;
# - service.control [VERB, service] is a job whose result is true: RELOAD
#   iscsitarget (tns-csi), STOP/START/RESTART nbd seen by service.started
#   and by an NBD client; RELOAD nvmet (the NVMe-oF target), a bad verb is a -32602;
# - system.info/version/version_short/product_type name blockd and the
#   TrueNAS API level it follows.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 nbdinfo
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
export URL="ws://127.0.0.1:$WS_PORT/api/current"
KEY=$(blockctl call api_key.create '{"name":"csi"}' |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
KEY2=$(blockctl call api_key.create '{"name":"csi2"}' |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print("%d %s" % (d["id"], d["key"]))')
export KEY KEY2 NBD_PORT

/usr/bin/python3 - <<'PY' || fail "errors, get_instance, capacity"
import os
from wsclient import Client

c = Client()

def err(r, code=-32001, errno=None, errname=None, text=None):
    e = r.get("error")
    assert e and e["code"] == code, r
    d = e["data"]
    assert set(d) >= {"error", "errname", "reason", "trace", "extra"}, e
    assert isinstance(d["error"], int) and d["trace"] is None and "errno" not in d, e
    if errno is not None:
        assert d["error"] == errno and d["errname"] == errname, e
    # a -32602's reason starts with its first field error's errno name
    assert d["reason"].startswith("[%s] " % d["errname"]) or code == -32602, e
    if text is not None:
        assert text in e["message"] and text in d["reason"], (text, e)
    return e

# before login: ENOTAUTHENTICATED (207), then the key logs in
assert c.ok("core.ping") == "pong"
err(c.call("pool.query"), errno=207, errname="ENOTAUTHENTICATED")
assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
pools = c.ok("pool.query", [["name", "=", "demo"]])
assert len(pools) == 1, pools

# pool.query: parsed properties and the integers truenas-csi reads
p = pools[0]
for k in ("size", "allocated", "free", "capacity"):
    pr = p["properties"][k]
    assert set(pr) == {"parsed", "rawvalue", "value", "source"}, pr
    assert isinstance(pr["parsed"], int) and pr["rawvalue"] == str(pr["parsed"]), pr
for k in ("size", "allocated", "free"):
    assert p[k] == p["properties"][k]["parsed"] and p[k] >= 0, (k, p)
assert p["size"] > 0 and p["free"] <= p["size"], p
assert 0 <= p["properties"]["capacity"]["parsed"] <= 100, p

# a volume and its snapshot and clone
c.ok("pool.dataset.create", {"name": "demo/v1", "type": "VOLUME", "volsize": 4 << 20,
                             "volblocksize": "16K", "sparse": True})
e = err(c.call("pool.dataset.create", {"name": "demo/v1", "type": "VOLUME", "volsize": 4 << 20}),
        code=-32602)
assert any(x[2] == 17 and "already exists" in x[1] for x in e["data"]["extra"]), e
assert "already exists" in e["data"]["reason"], e
c.ok("zfs.snapshot.create", {"dataset": "demo/v1", "name": "s1"})
e = err(c.call("zfs.snapshot.create", {"dataset": "demo/v1", "name": "s1"}), code=-32602)
assert "already exists" in e["data"]["reason"], e
c.ok("zfs.snapshot.clone", {"snapshot": "demo/v1@s1", "dataset_dst": "demo/c1"})
err(c.call("zfs.snapshot.delete", "demo/v1@s1"), errno=16, errname="EBUSY",
    text="has dependent clones")

# not found
err(c.call("pool.dataset.get_instance", "demo/nope"), errno=2, errname="ENOENT",
    text="does not exist")
err(c.call("pool.dataset.delete", "demo/nope"), errno=2, errname="ENOENT")
err(c.call("iscsi.target.get_instance", 999), errno=2, errname="ENOENT", text="does not exist")
err(c.call("pool.get_instance", 999), errno=2, errname="ENOENT", text="does not exist")

# validation: "Invalid params", the causes in reason and extra
e = err(c.call("pool.dataset.create", {"name": "demo/v2", "type": "VOLUME", "volsize": "big"}),
        code=-32602, errno=22, errname="EINVAL")
assert e["message"] == "Invalid params", e
assert ["pool.dataset.create.volsize", "Input should be a valid integer", 22] in e["data"]["extra"], e
assert "[EINVAL] pool.dataset.create.volsize: Input should be a valid integer" in e["data"]["reason"], e
e = err(c.call("pool.dataset.get_instance", "demo/v1", {}, 3), code=-32602)
assert "Too many arguments (expected 2, found 3)" in e["data"]["reason"], e
r = c.call("no.such.method")
assert r["error"]["code"] == -32601, r

# get_instance with query options, as truenas-csi sends it
ds = c.ok("pool.dataset.get_instance", "demo/v1",
          {"extra": {"properties": ["refquota", "volsize", "refreservation"]}})
assert ds["id"] == "demo/v1" and ds["volsize"]["parsed"] == 4 << 20, ds
assert "sync" not in ds and "volblocksize" not in ds, sorted(ds)
full = c.ok("pool.dataset.get_instance", "demo/v1")
assert "sync" in full and "volblocksize" in full, sorted(full)
sel = c.ok("pool.dataset.get_instance", "demo/v1", {"select": ["id", "type"]})
assert sel == {"id": "demo/v1", "type": "VOLUME"}, sel
fs = c.ok("pool.dataset.get_instance", "demo", {"extra": {"retrieve_children": False}})
assert fs["children"] == [], fs
s = c.ok("zfs.snapshot.get_instance", "demo/v1@s1", {"select": ["id"]})
assert s == {"id": "demo/v1@s1"}, s
pid = pools[0]["id"]
assert c.ok("pool.get_instance", pid, {"select": ["name"]}) == {"name": "demo"}
e = err(c.call("pool.dataset.get_instance", "demo/v1", "x"), code=-32602)
portal = c.ok("iscsi.portal.create", {"listen": [{"ip": "127.0.0.1"}]})
assert c.ok("iscsi.portal.get_instance", portal["id"], {"select": ["id"]}) == {"id": portal["id"]}

# zfs.resource.query, as truenas-csi's GetAvailableSpace calls it
r = c.ok("zfs.resource.query", {"paths": ["demo"], "properties": ["available"]})
assert len(r) == 1 and r[0]["name"] == "demo" and r[0]["pool"] == "demo", r
av = r[0]["properties"]["available"]
assert set(r[0]["properties"]) == {"available"}, r
assert isinstance(av["value"], int) and av["value"] > 0 and av["raw"] == str(av["value"]), av
assert av["source"] is None and isinstance(r[0]["guid"], int), r
r = c.ok("zfs.resource.query", {"paths": ["demo/v1"],
                                "properties": ["available", "used", "referenced", "volsize"],
                                "get_source": True})
pr = r[0]["properties"]
assert r[0]["type"] == "VOLUME" and pr["volsize"]["value"] == 4 << 20, r
assert pr["volsize"]["source"] == {"type": "LOCAL", "value": None}, pr
assert set(pr) == {"available", "used", "referenced", "volsize"}, pr
for k in pr:
    assert isinstance(pr[k]["value"], int) and pr[k]["parsed"] == pr[k]["value"], pr
r = c.ok("zfs.resource.query", {"paths": ["demo"], "get_children": True, "properties": []})
names = {x["name"] for x in r}
assert {"demo", "demo/v1", "demo/c1"} <= names, names
err(c.call("zfs.resource.query", {"paths": ["demo/nope"]}), errno=2, errname="ENOENT",
    text="does not exist")
err(c.call("zfs.resource.query", {"paths": "demo"}), code=-32602)

# service.control: a job, as tns-csi calls it
import time, subprocess
def job(jid):
    for _ in range(600):
        j = c.ok("core.get_jobs", [["id", "=", jid]])[0]
        if j["state"] in ("SUCCESS", "FAILED"):
            return j
        time.sleep(0.1)
    raise AssertionError("job %d never finished" % jid)
def nbd_up():
    return subprocess.run(["nbdinfo", "--list", "nbd://127.0.0.1:%s" % os.environ["NBD_PORT"]],
                          capture_output=True).returncode == 0
jid = c.ok("service.control", "RELOAD", "iscsitarget")
assert isinstance(jid, int), jid
j = job(jid)
assert j["state"] == "SUCCESS" and j["result"] is True and j["method"] == "service.control", j
assert j["arguments"] == ["RELOAD", "iscsitarget"], j
assert job(c.ok("service.control", "STOP", "nbd", {"silent": False}))["result"] is True
assert c.ok("service.started", "nbd") is False and not nbd_up()
assert job(c.ok("service.control", "START", "nbd"))["result"] is True
assert c.ok("service.started", "nbd") is True and nbd_up()
assert job(c.ok("service.control", "RESTART", "nbd"))["result"] is True
assert c.ok("service.started", "nbd") is True and nbd_up()
assert job(c.ok("service.control", "RELOAD", "nvmet"))["result"] is True  # the NVMe-oF target
e = err(c.call("service.control", "FROB", "nbd"), code=-32602)
assert e["data"]["extra"][0][0] == "service.control.verb", e
err(c.call("service.control", "START", "nope"), code=-32602)

# system.*: blockd, and the TrueNAS API level it follows
info = c.ok("system.info")
assert info["product"] == "blockd" and info["api_level"] == "25.10.0", info
assert info["version"].startswith("blockd-") and info["physmem"] > 0 and info["cores"] >= 1, info
assert c.ok("system.version").startswith("blockd-")
assert c.ok("system.version_short") == "25.10.0"
assert c.ok("system.product_type") == "BLOCKD"
assert c.ok("system.ready") is True

# the key goes: the session is no longer authenticated, a new key logs in
kid, key2 = os.environ["KEY2"].split()
assert c.ok("auth.login_with_api_key", key2) is True
c2 = Client()
assert c2.ok("auth.login_with_api_key", os.environ["KEY"]) is True
assert c2.ok("api_key.delete", int(kid)) is True
err(c.call("pool.query"), errno=207, errname="ENOTAUTHENTICATED")
assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
assert isinstance(c.ok("pool.query"), list)
print("errors ok")
PY

pass
