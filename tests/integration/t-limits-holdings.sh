#!/bin/bash
# What an API client can hold is capped, each cap with a default, a flag,
# an EDQUOT error naming it and a log line naming the peer:
# - 5,000 core.subscribe calls on one WebSocket connection: the first 64
#   (the default --max-subscriptions) are accepted, every later one is
#   refused; after an unsubscribe one more fits; another connection has
#   its own 64;
# - API keys, pools, datasets (clones included) and snapshots per dataset
#   beyond caps set low by flags are refused, and nothing is created; after
#   a delete one more fits;
# - share objects of each kind (--max-share-objects 2): a third NBD export,
#   iSCSI initiator group or target is refused, also through
#   share.iscsi.create; other kinds keep their own count.
. "$(dirname "$0")/lib.sh"
need python3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT" --max-api-keys 3 --max-pools 2 \
    --max-datasets 6 --max-snapshots 3 --max-share-objects 2
KEY=$(blockctl call api_key.create '{"name":"holder"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')

URL="ws://127.0.0.1:$WS_PORT/api/current" KEY=$KEY POOLDIR="$TMP/p2" \
    timeout 300 /usr/bin/python3 - <<'PY' || fail "holdings client"
import errno, os, sys
from wsclient import Client

def login():
    c = Client()
    assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
    return c

def refused(r, flag):
    e = r.get("error")
    assert e and e["data"]["error"] == errno.EDQUOT, r
    assert flag in e["message"], r
    return e["message"]

# --- subscriptions: 5,000 on one connection ---
c = login()
ok, no = [], 0
for i in range(5000):
    r = c.call("core.subscribe", "core.get_jobs")
    if "result" in r:
        ok.append(r["result"])
    else:
        refused(r, "--max-subscriptions")
        no += 1
assert len(ok) == 64 and no == 5000 - 64, (len(ok), no)
assert c.ok("core.unsubscribe", ok[0]) is None
c.ok("core.subscribe", "core.get_jobs")
refused(c.call("core.subscribe", "core.get_jobs"), "--max-subscriptions")
c2 = login()
c2.ok("core.subscribe", "core.get_jobs")   # per connection

# --- API keys: 3 in all (holder is one) ---
k2 = c.ok("api_key.create", {"name": "k2"})
c.ok("api_key.create", {"name": "k3"})
print(refused(c.call("api_key.create", {"name": "k4"}), "--max-api-keys"))
names = [k["name"] for k in c.ok("api_key.query")]
assert sorted(names) == ["holder", "k2", "k3"], names
c.ok("api_key.delete", k2["id"])
c.ok("api_key.create", {"name": "k4"})

# --- pools: 2 in all (demo is one) ---
npools = len(c.ok("pool.query"))
assert npools == 1, npools
c.ok("pool.create", {"name": "p2"})
refused(c.call("pool.create", {"name": "p3"}), "--max-pools")
assert len(c.ok("pool.query")) == 2

# --- datasets: 6 in all, whatever they are ---
def ndatasets():
    return len(c.ok("pool.dataset.query", [], {"extra": {"flat": True}}))
have = ndatasets()
made = []
while True:
    name = "demo/v%d" % len(made)
    r = c.call("pool.dataset.create", {"name": name, "type": "VOLUME", "volsize": 1 << 20})
    if "error" in r:
        refused(r, "--max-datasets")
        break
    made.append(name)
    assert len(made) < 10, "no cap on datasets"
assert ndatasets() == 6, (have, made, ndatasets())
# a clone is a dataset too
c.ok("zfs.snapshot.create", {"dataset": made[0], "name": "s0"})
refused(c.call("zfs.snapshot.clone", {"snapshot": made[0] + "@s0", "dataset_dst": "demo/clone"}),
        "--max-datasets")
assert ndatasets() == 6

# --- snapshots: 3 per dataset ---
c.ok("zfs.snapshot.create", {"dataset": made[0], "name": "s1"})
c.ok("zfs.snapshot.create", {"dataset": made[0], "name": "s2"})
refused(c.call("zfs.snapshot.create", {"dataset": made[0], "name": "s3"}), "--max-snapshots")
snaps = c.ok("zfs.snapshot.query", [["dataset", "=", made[0]]])
assert len(snaps) == 3, snaps
# another dataset has its own 3
c.ok("zfs.snapshot.create", {"dataset": made[1], "name": "s0"})
# after a delete, one more fits
c.ok("zfs.snapshot.delete", made[0] + "@s2")
c.ok("zfs.snapshot.create", {"dataset": made[0], "name": "s3"})
# a dataset deleted frees a place for one more
c.ok("pool.dataset.delete", made[-1])
c.ok("pool.dataset.create", {"name": "demo/again", "type": "VOLUME", "volsize": 1 << 20})

# --- share objects: 2 of each kind ---
for i in range(2):
    c.ok("nbd.export.create", {"name": "e%d" % i, "dataset": made[i]})
refused(c.call("nbd.export.create", {"name": "e2", "dataset": made[2]}), "--max-share-objects")
assert len(c.ok("nbd.export.query")) == 2
c.ok("iscsi.initiator.create", {"initiators": []})
c.ok("iscsi.initiator.create", {"initiators": ["iqn.2005-10.org.example:a"]})
refused(c.call("iscsi.initiator.create", {"initiators": []}), "--max-share-objects")
assert len(c.ok("iscsi.initiator.query")) == 2
# share.iscsi.create makes a target, an extent and a mapping each time
c.ok("share.iscsi.create", {"name": made[0]})
c.ok("share.iscsi.create", {"name": made[1]})
refused(c.call("share.iscsi.create", {"name": made[2]}), "--max-share-objects")
assert len(c.ok("iscsi.target.query")) == 2 and len(c.ok("iscsi.extent.query")) == 2
refused(c.call("iscsi.target.create", {"name": "direct"}), "--max-share-objects")
# after a delete, one more fits
c.ok("nbd.export.delete", c.ok("nbd.export.query", [["name", "=", "e0"]])[0]["id"])
c.ok("nbd.export.create", {"name": "e2", "dataset": made[2]})
print("OK")
PY
for what in "64 event subscriptions per connection is the limit (--max-subscriptions)" \
    "3 API keys is the limit (--max-api-keys)" "2 pools is the limit (--max-pools)" \
    "6 datasets is the limit (--max-datasets)" \
    "3 snapshots per dataset is the limit (--max-snapshots; demo/v0)" \
    "2 share objects of one kind is the limit (--max-share-objects; nbd.export.create)" \
    "2 share objects of one kind is the limit (--max-share-objects; iscsi.target.create)"; do
    grep -qF -- "$what" "$BLOCKD_LOG" || fail "no log line: $what"
done
grep -q "limits: ws:127.0.0.1:[0-9]*: refused: 6 datasets" "$BLOCKD_LOG" ||
    fail "the refusal does not name the peer"
blockd_alive || fail "blockd died"
blockd_stop
pass
