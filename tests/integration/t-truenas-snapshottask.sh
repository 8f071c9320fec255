#!/bin/bash
# Periodic snapshot tasks (pool.snapshottask.*, as TrueNAS 25.10 has them),
# over WebSocket with an API key:
# - create/query/get_instance/update/delete, TrueNAS's defaults in the row,
#   state PENDING, vmware_sync false; field errors named
#   pool_snapshottask_create.<field> / pool_snapshottask_update.<field>
#   (missing or unknown dataset, naming schema without %M, a bad cron
#   field, a bad lifetime unit, exclude without recursive, vmware_sync as
#   an input, allow_empty false), ENOENT for an unknown id;
# - a task scheduled every minute takes a snapshot named by its schema
#   within 150 s and expires a schema-named snapshot older than its
#   lifetime (1 HOUR), keeps one that does not parse with the schema and
#   one that is held;
# - after a restart the task is still there and takes another snapshot;
# - pool.snapshottask.run takes one at once (on a disabled task too) and
#   expires that task's old snapshots;
# - after delete, no new snapshot comes past a minute boundary.
# slow
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
export URL="ws://127.0.0.1:$WS_PORT/api/current"
KEY=$(blockctl call api_key.create '{"name":"tasks"}' |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
export KEY STATE

# the helpers every step below shares
cat >"$TMP/common.py" <<'PY'
import os, time
from wsclient import Client

SCHEMA = "auto-%Y-%m-%d_%H-%M"

def login():
    c = Client()
    assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
    return c

def snaps(c, ds):
    return {s["name"] for s in c.ok("pool.snapshot.query", [["dataset", "=", ds]])}

def scheduled(c, ds, prefix="auto-"):
    """snapshots named by the schema, not older than 10 minutes"""
    out = set()
    for n in snaps(c, ds):
        short = n.split("@", 1)[1]
        if short.startswith(prefix):
            t = time.mktime(time.strptime(short[len(prefix):], "%Y-%m-%d_%H-%M"))
            if t > time.time() - 600:
                out.add(n)
    return out

def wait_new(c, ds, before, limit=150):
    end = time.time() + limit
    while time.time() < end:
        new = scheduled(c, ds) - before
        if new:
            return new
        time.sleep(2)
    raise AssertionError("no scheduled snapshot of %s in %d s (have %s)" % (ds, limit, snaps(c, ds)))
PY

export TMP
/usr/bin/python3 - <<'PY' || fail "CRUD, validation, run"
import os, sys, time
sys.path.insert(0, os.environ["TMP"])
from common import *

c = login()
for v in ("v1", "v2"):
    c.ok("pool.dataset.create", {"name": "demo/" + v, "type": "VOLUME", "volsize": 4 << 20,
                                 "sparse": True})

def verr(r, field, errno=None, text=None):
    e = r.get("error")
    assert e and e["code"] == -32602, r
    hit = [x for x in e["data"]["extra"] if x[0] == field]
    assert hit, (field, e)
    if errno is not None:
        assert hit[0][2] == errno, (field, e)
    if text is not None:
        assert text in hit[0][1], (text, e)

P = "pool_snapshottask_create."
verr(c.call("pool.snapshottask.create", {}), P + "dataset", text="Field required")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/nope"}), P + "dataset", 2,
     "does not exist")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "naming_schema": "s-%Y%m%d%H"}),
     P + "naming_schema", text="%M")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "schedule": {"minute": "61"}}),
     P + "schedule.minute")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "schedule": {"dow": "1-9"}}),
     P + "schedule.dow")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "schedule": {"begin": "25:00"}}),
     P + "schedule.begin")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "lifetime_unit": "FORTNIGHT"}),
     P + "lifetime_unit")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "exclude": ["demo/v1/x"]}),
     P + "exclude")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "lifetime_value": "1"}),
     P + "lifetime_value")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "colour": "red"}), P + "colour")
# vmware_sync is in rows only (TrueNAS 25.10); allow_empty false is refused
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "vmware_sync": False}),
     P + "vmware_sync", text="Extra inputs")
verr(c.call("pool.snapshottask.create", {"dataset": "demo/v1", "allow_empty": False}),
     P + "allow_empty", 95)
assert c.ok("pool.snapshottask.query") == []

# defaults as TrueNAS's
t0 = c.ok("pool.snapshottask.create", {"dataset": "demo/v2", "enabled": False})
assert t0["recursive"] is False and t0["exclude"] == [] and t0["lifetime_value"] == 2, t0
assert t0["lifetime_unit"] == "WEEK" and t0["naming_schema"] == SCHEMA, t0
assert t0["schedule"] == {"minute": "00", "hour": "*", "dom": "*", "month": "*", "dow": "*",
                          "begin": "00:00", "end": "23:59"}, t0
assert t0["allow_empty"] is True and t0["vmware_sync"] is False, t0
assert t0["state"]["state"] == "PENDING" and t0["enabled"] is False, t0

# the task every minute, one hour of lifetime; created disabled, so that
# no minute boundary runs it (and expires) before the old snapshots below
# are made and held
t = c.ok("pool.snapshottask.create", {
    "dataset": "demo/v1", "recursive": False, "lifetime_value": 3, "lifetime_unit": "HOUR",
    "naming_schema": SCHEMA, "allow_empty": True, "enabled": False,
    "schedule": {"minute": "*", "hour": "*", "dom": "*", "month": "*", "dow": "*"}})
tid = t["id"]
assert t["schedule"]["minute"] == "*" and t["lifetime_value"] == 3, t
assert c.ok("pool.snapshottask.get_instance", tid) == c.ok("pool.snapshottask.query",
                                                           [["id", "=", tid]])[0]
e = c.call("pool.snapshottask.get_instance", 999)["error"]
assert e["data"]["errname"] == "ENOENT" and "does not exist" in e["message"], e
e = c.call("pool.snapshottask.update", 999, {"enabled": True})["error"]
assert e["data"]["errname"] == "ENOENT", e
verr(c.call("pool.snapshottask.update", tid, {"lifetime_unit": "EON"}),
     "pool_snapshottask_update.lifetime_unit")
verr(c.call("pool.snapshottask.update", tid, {"naming_schema": "x"}),
     "pool_snapshottask_update.naming_schema")
u = c.ok("pool.snapshottask.update", tid, {"lifetime_value": 1, "fixate_removal_date": True})
assert "fixate_removal_date" not in u, u
assert u["lifetime_value"] == 1 and u["lifetime_unit"] == "HOUR" and u["schedule"]["minute"] == "*", u

# old snapshots of v1: one in the schema (expires), one outside it and an
# old one held (both kept)
old = time.strftime(SCHEMA, time.localtime(time.time() - 2 * 3600))
older = time.strftime(SCHEMA, time.localtime(time.time() - 3 * 3600))
for n in (old, older, "keep-me"):
    c.ok("pool.snapshot.create", {"dataset": "demo/v1", "name": n})
c.ok("pool.snapshot.hold", "demo/v1@" + older)
assert c.ok("pool.snapshottask.update", tid, {"enabled": True})["enabled"] is True

# run: the disabled task on v2 (lifetime 2 WEEK; a three-week-old one goes)
gone = time.strftime(SCHEMA, time.localtime(time.time() - 21 * 86400))
c.ok("pool.snapshot.create", {"dataset": "demo/v2", "name": gone})
before = scheduled(c, "demo/v2")
c.ok("pool.snapshottask.run", t0["id"])
new = scheduled(c, "demo/v2") - before
assert len(new) == 1, (new, snaps(c, "demo/v2"))
assert "demo/v2@" + gone not in snaps(c, "demo/v2"), snaps(c, "demo/v2")
st = c.ok("pool.snapshottask.get_instance", t0["id"])["state"]
assert st["state"] == "FINISHED", st
e = c.call("pool.snapshottask.run", 999)["error"]
assert e["data"]["errname"] == "ENOENT", e

# the schedule: a new snapshot, and the old one expired by that run
new = wait_new(c, "demo/v1", set())
deadline = time.time() + 30
while "demo/v1@" + old in snaps(c, "demo/v1") and time.time() < deadline:
    time.sleep(1)
have = snaps(c, "demo/v1")
assert "demo/v1@" + old not in have, have
assert {"demo/v1@keep-me", "demo/v1@" + older} <= have, have
open(os.path.join(os.environ["TMP"], "tid"), "w").write(str(tid))
print("scheduled:", sorted(new))
PY
grep -q "snapshottask: task [0-9]* expired snapshot demo/v1@auto-" "$BLOCKD_LOG" ||
    fail "no log line for the expired snapshot"
grep -q "snapshottask: task [0-9]* keeps expired snapshot demo/v1@auto-.*held" "$BLOCKD_LOG" ||
    fail "no log line for the held snapshot kept"

# restart: the task survives and takes the next snapshot
blockd_stop
blockd_start --api-listen "127.0.0.1:$WS_PORT"
/usr/bin/python3 - <<'PY' || fail "after the restart"
import os, sys, time
sys.path.insert(0, os.environ["TMP"])
from common import *

c = login()
tid = int(open(os.path.join(os.environ["TMP"], "tid")).read())
t = c.ok("pool.snapshottask.get_instance", tid)
assert t["enabled"] is True and t["lifetime_unit"] == "HOUR", t
before = scheduled(c, "demo/v1")
new = wait_new(c, "demo/v1", before)
print("after restart:", sorted(new))

# delete: no new snapshot past the next minute boundary
assert c.ok("pool.snapshottask.delete", tid) is True
e = c.call("pool.snapshottask.get_instance", tid)["error"]
assert e["data"]["errname"] == "ENOENT", e
before = snaps(c, "demo/v1")
time.sleep(60 - time.time() % 60 + 15)
assert snaps(c, "demo/v1") == before, (snaps(c, "demo/v1"), before)
PY
blockd_alive || fail "daemon died"
blockd_stop
grep -q "snapshottask: task [0-9]* took snapshot demo/v1@auto-" "$BLOCKD_LOG" ||
    fail "no log line for a snapshot taken"
pass
