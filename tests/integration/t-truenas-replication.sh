#!/bin/bash
# replication.run_onetime with transport LOCAL, driven over WebSocket with
# an API key the way truenas_incus_ctl's `replication start` sends it
# ([{direction, transport: "LOCAL", source_datasets, target_dataset,
# recursive, retention_policy, also_include_naming_schema | name_regex,
# ...}] → a job id): a full then an incremental replication of a volume
# with snapshots to another pool (every snapshot compared with qemu-img
# compare and checksums; the incremental one writes only what changed),
# naming-schema and regex selection, recursive with children and exclude,
# retention SOURCE deleting a target snapshot and CUSTOM (lifetime), no
# common snapshot refused unless allow_from_scratch, readonly SET and
# REQUIRE, a target in use refused before anything changes, the
# job's progress seen through core.get_jobs events and awaited with
# core.job_wait, and SSH transports refused with ENOTSUP.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 qemu-io qemu-img sha256sum
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
mkdir -p "$TMP/srv" # pools outside the state directory: where the operator allows
blockd_start --api-listen "127.0.0.1:$WS_PORT" --allow-dir "$TMP/srv"
URL="ws://127.0.0.1:$WS_PORT/api/current"

KEY=$(blockctl call api_key.create '{"name":"repl"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
mkdir -p "$TMP/srv/p2dir"
blockctl pool create p2 --path "$TMP/srv/p2dir" >/dev/null || fail "pool create p2"
blockctl call pool.dataset.create '{"name":"demo/src","type":"VOLUME","volsize":67108864}' \
    >/dev/null || fail "create demo/src"
blockctl share nbd create demo/src --name src >/dev/null || fail "share demo/src"

export URL KEY NBD_PORT TMP BLOCKD_LOG
cat >"$TMP/repl.py" <<'PY'
import hashlib, json, os, subprocess, sys, time, websocket

URL, KEY, NBD, TMP, LOG = (os.environ[k] for k in ("URL", "KEY", "NBD_PORT", "TMP", "BLOCKD_LOG"))
SRC_URI = "nbd://127.0.0.1:%s/src" % NBD

class Client:
    def __init__(self):
        self.ws = websocket.create_connection(URL, timeout=60)
        self.next = 0
        self.events = []
    def call(self, method, params=None):
        self.next += 1
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.next, "method": method,
                                 "params": params if params is not None else []}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("method") == "collection_update":
                self.events.append(r["params"])
                continue
            if r.get("method"):
                continue
            assert r.get("id") == self.next, r
            return r
    def wait_job(self, jid):
        """Read core.get_jobs events until job jid has ended; its fields."""
        seen = 0
        deadline = time.time() + 120
        while time.time() < deadline:
            for e in self.events[seen:]:
                f = e.get("fields") or {}
                if e.get("collection") == "core.get_jobs" and e.get("id") == jid and \
                        f.get("state") in ("SUCCESS", "FAILED", "ABORTED"):
                    return f
            seen = len(self.events)
            r = json.loads(self.ws.recv())
            if r.get("method") == "collection_update":
                self.events.append(r["params"])
        raise AssertionError("job %d did not end" % jid)
    def ok(self, method, params=None):
        r = self.call(method, params)
        assert "result" in r, (method, params, r)
        return r["result"]

c = Client()
assert c.ok("auth.login_with_api_key", [KEY]) is True
c.ok("core.subscribe", ["core.get_jobs"])

def qio(cmd):
    subprocess.run(["qemu-io", "-f", "raw", "-c", cmd, SRC_URI], check=True,
                   capture_output=True)

def snap(ds, name):
    c.ok("zfs.snapshot.create", [{"dataset": ds, "name": name}])

def snaps(ds):
    rows = c.ok("zfs.snapshot.query", [[["dataset", "=", ds]]])
    return [r["snapshot_name"] for r in sorted(rows, key=lambda r: int(r["createtxg"]))]

def pool_path(name):
    return c.ok("pool.query", [[["name", "=", name]], {"get": True}])["path"]

def file_of(full):
    ds, _, sn = full.partition("@")
    pool, _, rest = ds.partition("/")
    return os.path.join(pool_path(pool), rest) + ("@" + sn if sn else "")

def same(a, b):
    fa, fb = file_of(a), file_of(b)
    r = subprocess.run(["qemu-img", "compare", "-q", "-f", "raw", "-F", "raw", fa, fb])
    assert r.returncode == 0, "qemu-img compare %s %s: %d" % (a, b, r.returncode)
    ha = hashlib.sha256(open(fa, "rb").read()).hexdigest()
    hb = hashlib.sha256(open(fb, "rb").read()).hexdigest()
    assert ha == hb and os.path.getsize(fa) == os.path.getsize(fb), (a, b)

def run(args, expect="SUCCESS"):
    """replication.run_onetime as a job: the id at once, then core.job_wait."""
    c.events.clear()
    jid = c.ok("replication.run_onetime", [args])
    assert isinstance(jid, int), jid
    job = c.ok("core.get_jobs", [[["id", "=", jid]], {"get": True}])
    assert job["method"] == "replication.run_onetime", job
    assert job["arguments"] == [args], job
    # core.job_wait is itself a job: it ends when the replication has
    wait_id = c.ok("core.job_wait", [jid])
    assert isinstance(wait_id, int) and wait_id != jid, wait_id
    w = c.wait_job(wait_id)
    job = c.ok("core.get_jobs", [[["id", "=", jid]], {"get": True}])
    assert job["state"] == expect, (args, job, w)
    assert w["state"] == ("SUCCESS" if expect == "SUCCESS" else "FAILED"), w
    if expect == "SUCCESS":
        assert job["result"] is None, job
        assert job["progress"]["percent"] == 100, job
    return job

def progress_texts():
    return [e["fields"]["progress"]["description"] for e in c.events
            if e.get("collection") == "core.get_jobs" and e.get("fields", {}).get("progress")
            and e["fields"]["progress"].get("description")]

def log_lines(word):
    return [l for l in open(LOG).read().splitlines() if "replication:" in l and word in l]

def blockctl(*args):
    subprocess.run([os.environ.get("BLOCKCTL_BIN"), "--socket", os.environ["SOCK"]] + list(args),
                   check=True, capture_output=True)

def unshare(name):
    """Delete an NBD export once its client has gone: the server may see
    the client's disconnect a moment after the client exited (EBUSY)."""
    deadline = time.time() + 30
    while True:
        p = subprocess.run([os.environ.get("BLOCKCTL_BIN"), "--socket", os.environ["SOCK"],
                            "share", "nbd", "delete", name], capture_output=True, text=True)
        if p.returncode == 0:
            return
        assert "open connection" in p.stderr + p.stdout and time.time() < deadline, p
        time.sleep(0.1)

SCHEMA = "auto-%Y-%m-%d_%H-%M"
BASE = {"direction": "PUSH", "transport": "LOCAL", "source_datasets": ["demo/src"],
        "target_dataset": "p2/backup/vol", "recursive": False, "retention_policy": "NONE",
        "also_include_naming_schema": [SCHEMA], "readonly": "IGNORE"}

# ---- source: two schema snapshots with a manual one between ----
qio("write -P 0x11 0 1M"); qio("write -P 0x22 32M 1M")
snap("demo/src", "auto-2026-01-01_00-00")
qio("write -P 0x55 4M 1M")
snap("demo/src", "manual-1")
qio("write -P 0x33 1M 2M"); qio("discard 32M 1M")
snap("demo/src", "auto-2026-01-02_00-00")
qio("write -P 0x66 16M 1M")   # live data after the last snapshot is not sent

# ---- refusals before any job ----
for tr in ("SSH", "SSH+NETCAT", "LEGACY"):
    r = c.call("replication.run_onetime", [dict(BASE, transport=tr, ssh_credentials=1)])
    e = r.get("error")
    assert e and e["code"] == -32001 and e["data"]["error"] == 95, r
    assert "LOCAL" in e["message"] and tr in e["message"], r
r = c.call("replication.run_onetime", [dict(BASE, naming_schema=[SCHEMA])])
assert r["error"]["code"] == -32602, r
assert any(x[0] == "replication.run_onetime.naming_schema" and "no sense for push" in x[1]
           for x in r["error"]["data"]["extra"]), r
r = c.call("replication.run_onetime", [dict(BASE, also_include_naming_schema=["auto-%Y"])])
assert any(x[0] == "replication.run_onetime.also_include_naming_schema.0" and "%m" in x[1]
           for x in r["error"]["data"]["extra"]), r
r = c.call("replication.run_onetime", [dict(BASE, bogus=1)])
assert any(x[0] == "replication.run_onetime.bogus" for x in r["error"]["data"]["extra"]), r
r = c.call("replication.run_onetime", [dict(BASE, name_regex="auto-.*")])
assert any("Naming regex can't be used with Naming schema" in x[1]
           for x in r["error"]["data"]["extra"]), r
assert c.ok("replication.list_naming_schemas") == []
cnt = c.ok("replication.count_eligible_manual_snapshots",
           [{"datasets": ["demo/src"], "naming_schema": [SCHEMA], "transport": "LOCAL"}])
assert cnt == {"total": 3, "eligible": 2}, cnt

# ---- full replication to another pool (the target's parent is created) ----
run(BASE)
assert snaps("p2/backup/vol") == ["auto-2026-01-01_00-00", "auto-2026-01-02_00-00"], \
    snaps("p2/backup/vol")
for s in ("auto-2026-01-01_00-00", "auto-2026-01-02_00-00"):
    same("demo/src@" + s, "p2/backup/vol@" + s)
same("demo/src@auto-2026-01-02_00-00", "p2/backup/vol")
t = progress_texts()
assert any(x.startswith("Sending 1 of 2: demo/src@auto-2026-01-01_00-00") for x in t), t
assert any(x.startswith("Sending 2 of 2: demo/src@auto-2026-01-02_00-00") for x in t), t
parent = c.ok("pool.dataset.query", [[["name", "=", "p2/backup"]], {"get": True}])
assert parent["type"] == "FILESYSTEM", parent
vol = c.ok("pool.dataset.query", [[["name", "=", "p2/backup/vol"]], {"get": True}])
assert vol["type"] == "VOLUME" and vol["volsize"]["parsed"] == 64 << 20, vol

# ---- nothing new: succeeds, sends nothing ----
run(BASE)
assert snaps("p2/backup/vol") == ["auto-2026-01-01_00-00", "auto-2026-01-02_00-00"]

# ---- incremental: only the newest snapshot, only what changed written ----
qio("write -P 0x44 8M 1M")
snap("demo/src", "auto-2026-01-03_00-00")
n_before = len(log_lines("compare-and-write"))
run(BASE)
assert snaps("p2/backup/vol") == ["auto-2026-01-01_00-00", "auto-2026-01-02_00-00",
                                  "auto-2026-01-03_00-00"], snaps("p2/backup/vol")
for s in snaps("p2/backup/vol"):
    same("demo/src@" + s, "p2/backup/vol@" + s)
t = progress_texts()
assert any(x.startswith("Sending 1 of 1: demo/src@auto-2026-01-03_00-00") for x in t), t
inc = [l for l in log_lines("auto-2026-01-03_00-00") if "p2/backup/vol" in l]
assert inc and "incremental from @auto-2026-01-02_00-00" in inc[-1], inc
# 2 MiB changed since the common snapshot (16M and 8M): only they are copied
assert "2097152 bytes copied" in inc[-1], inc[-1]
assert any("incremental from auto-2026-01-02_00-00: 2097152 bytes in" in x for x in t), t

# ---- a write on the target is undone (zfs recv -F), data still equal ----
# (written by a client of a share of the target, withdrawn before the run)
blockctl("share", "nbd", "create", "p2/backup/vol", "--name", "tgtw")
subprocess.run(["qemu-io", "-f", "raw", "-c", "write -P 0x77 0 64k",
                "nbd://127.0.0.1:%s/tgtw" % NBD], check=True, capture_output=True)
unshare("tgtw")
qio("write -P 0x45 9M 1M")
snap("demo/src", "auto-2026-01-04_00-00")
run(BASE)
same("demo/src@auto-2026-01-04_00-00", "p2/backup/vol@auto-2026-01-04_00-00")
same("demo/src@auto-2026-01-04_00-00", "p2/backup/vol")

# ---- retention SOURCE: a snapshot gone from the source goes from the target ----
snap("p2/backup/vol", "keep-me")  # matches no schema: never touched
c.ok("zfs.snapshot.delete", ["demo/src@auto-2026-01-01_00-00"])
run(dict(BASE, retention_policy="SOURCE"))
got = snaps("p2/backup/vol")
assert "auto-2026-01-01_00-00" not in got, got
assert got == ["auto-2026-01-02_00-00", "auto-2026-01-03_00-00", "auto-2026-01-04_00-00",
               "keep-me"], got

# ---- a target in use is refused ----
subprocess.run([os.environ.get("BLOCKCTL_BIN"), "--socket", os.environ["SOCK"], "share", "nbd",
                "create", "p2/backup/vol", "--name", "tgt"], check=True, capture_output=True)
snap("demo/src", "auto-2026-01-05_00-00")
job = run(BASE, expect="FAILED")
assert "in use" in job["error"] and job["exc_info"]["errno"] == 16, job
subprocess.run([os.environ.get("BLOCKCTL_BIN"), "--socket", os.environ["SOCK"], "share", "nbd",
                "delete", "tgt"], check=True, capture_output=True)

# ---- no common snapshot: refused, then allowed from scratch ----
c.ok("pool.dataset.create", [{"name": "demo/other", "type": "VOLUME", "volsize": 33554432}])
snap("demo/other", "auto-2027-01-01_00-00")
OTHER = dict(BASE, source_datasets=["demo/other"])
job = run(OTHER, expect="FAILED")
assert "No incremental base on dataset 'demo/other' and replication from scratch is not allowed" \
    in job["error"], job
assert snaps("p2/backup/vol")[-1] == "keep-me"  # nothing changed
run(dict(OTHER, allow_from_scratch=True))
assert snaps("p2/backup/vol") == ["auto-2027-01-01_00-00"], snaps("p2/backup/vol")
same("demo/other@auto-2027-01-01_00-00", "p2/backup/vol@auto-2027-01-01_00-00")
vol = c.ok("pool.dataset.query", [[["name", "=", "p2/backup/vol"]], {"get": True}])
assert vol["volsize"]["parsed"] == 32 << 20, vol

# ---- no matching snapshot at all ----
job = run(dict(BASE, also_include_naming_schema=["nightly-%Y%m%d-%H%M"]), expect="FAILED")
assert "does not have any matching snapshots to replicate" in job["error"], job

# ---- recursive, name_regex, exclude, readonly SET (as the Incus driver copies) ----
c.ok("pool.dataset.create", [{"name": "demo/tree", "type": "FILESYSTEM"}])
for v in ("a", "b", "sub/c"):
    c.ok("pool.dataset.create", [{"name": "demo/tree/" + v, "type": "VOLUME",
                                  "volsize": 16777216, "create_ancestors": True,
                                  "user_properties": [{"key": "incus:content_type",
                                                       "value": "block"}]}])
    uri = "nbd://127.0.0.1:%s/t" % NBD
    subprocess.run([os.environ["BLOCKCTL_BIN"], "--socket", os.environ["SOCK"], "share", "nbd",
                    "create", "demo/tree/" + v, "--name", "t"], check=True, capture_output=True)
    subprocess.run(["qemu-io", "-f", "raw", "-c", "write -P 0x%x 0 2M" % (0x10 + len(v)), uri],
                   check=True, capture_output=True)
    unshare("t")
    for s in ("snapshot-one", "other", "copy-1234"):
        snap("demo/tree/" + v, s)
TREE = {"direction": "PUSH", "transport": "LOCAL", "source_datasets": ["demo/tree"],
        "target_dataset": "p2/treecopy", "recursive": True, "exclude": ["demo/tree/b"],
        "name_regex": "(snapshot-.*|copy-1234)", "retention_policy": "NONE"}
run(TREE)
for v in ("a", "sub/c"):
    assert snaps("p2/treecopy/" + v) == ["snapshot-one", "copy-1234"], snaps("p2/treecopy/" + v)
    for s in ("snapshot-one", "copy-1234"):
        same("demo/tree/%s@%s" % (v, s), "p2/treecopy/%s@%s" % (v, s))
    row = c.ok("pool.dataset.query", [[["name", "=", "p2/treecopy/" + v]], {"get": True}])
    assert row["readonly"]["value"] == "ON", row          # readonly SET (the default)
    assert row["user_properties"]["incus:content_type"]["value"] == "block", row
assert c.ok("pool.dataset.query", [[["name", "=", "p2/treecopy/b"]]]) == [], "excluded child sent"
# again, incrementally into the read-only targets, with retention SOURCE
# over the regex's snapshots (the Incus driver's refresh)
snap("demo/tree/a", "snapshot-two")
c.ok("zfs.snapshot.delete", ["demo/tree/a@copy-1234"])
run(dict(TREE, retention_policy="SOURCE", allow_from_scratch=True))
assert snaps("p2/treecopy/a") == ["snapshot-one", "snapshot-two"], snaps("p2/treecopy/a")
same("demo/tree/a@snapshot-two", "p2/treecopy/a@snapshot-two")
assert snaps("p2/treecopy/sub/c") == ["snapshot-one", "copy-1234"], snaps("p2/treecopy/sub/c")
r = c.call("replication.run_onetime", [dict(TREE, recursive=False)])
assert any("only supported for recursive" in x[1] for x in r["error"]["data"]["extra"]), r
# ---- retention CUSTOM: selected target snapshots older than the lifetime go ----
import datetime
now = datetime.datetime.now()
def nm(days):
    return (now - datetime.timedelta(days=days)).strftime("auto-%Y-%m-%d_%H-%M")
c.ok("pool.dataset.create", [{"name": "demo/cust", "type": "VOLUME", "volsize": 16777216}])
for d in (3, 2):
    snap("demo/cust", nm(d))
CUST = dict(BASE, source_datasets=["demo/cust"], target_dataset="p2/cust",
            retention_policy="CUSTOM", lifetime_value=1, lifetime_unit="YEAR")
run(CUST)
assert snaps("p2/cust") == [nm(3), nm(2)], snaps("p2/cust")
snap("p2/cust", nm(400))  # older than a year: goes
snap("p2/cust", nm(1))    # not on the source, but young: SOURCE would delete it, CUSTOM keeps it
run(CUST)
assert snaps("p2/cust") == [nm(3), nm(2), nm(1)], snaps("p2/cust")
r = c.call("replication.run_onetime", [dict(CUST, lifetime_unit=None)])
assert any(x[0] == "replication.run_onetime.lifetime_unit" for x in r["error"]["data"]["extra"]), r
r = c.call("replication.run_onetime", [dict(BASE, lifetime_value=1)])
assert any("no sense for specified retention" in x[1] for x in r["error"]["data"]["extra"]), r

# ---- PULL (LOCAL: both sides are ours) takes naming_schema; two jobs at once ----
r = c.call("replication.run_onetime", [dict(BASE, direction="PULL")])
assert any("also_include_naming_schema" in x[0] and "no sense for pull" in x[1]
           for x in r["error"]["data"]["extra"]), r
PULL = dict(BASE, direction="PULL", naming_schema=[SCHEMA], target_dataset="p2/pulled")
del PULL["also_include_naming_schema"]
j1 = c.ok("replication.run_onetime", [PULL])
j2 = c.ok("replication.run_onetime", [dict(CUST, target_dataset="p2/cust2")])
for j in (j1, j2):
    w = c.wait_job(c.ok("core.job_wait", [j]))
    assert w["state"] == "SUCCESS", w
want = [s for s in snaps("demo/src") if s.startswith("auto-")]  # not manual-1
assert snaps("p2/pulled") == want and len(want) == 4, (snaps("p2/pulled"), snaps("demo/src"))
same("demo/src@auto-2026-01-05_00-00", "p2/pulled@auto-2026-01-05_00-00")
assert snaps("p2/cust2") == [nm(3), nm(2)], snaps("p2/cust2")

# readonly REQUIRE on an existing writable target
job = run(dict(BASE, readonly="REQUIRE"), expect="FAILED")
assert "does not have readonly=on property" in job["error"], job
print("ok")
PY
SOCK=$SOCK BLOCKCTL_BIN=$BLOCKCTL_BIN /usr/bin/python3 "$TMP/repl.py" || fail "replication client"
grep -q "replication: run_onetime demo/src → p2/backup/vol" "$BLOCKD_LOG" ||
    fail "no log line naming the replication and its peer"
pass
