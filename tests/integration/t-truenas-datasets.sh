#!/bin/bash
# TrueNAS dataset API compatibility, replayed over
# WebSocket with an API key in the shapes truenas_incus_ctl (the Go client
# Incus' truenas driver runs) sends them:
# - the Incus tree (filesystems with atime/exec/acltype/aclmode, managedby,
#   comments; a sparse volume with a user property) is created with those
#   properties, which come back as {parsed, rawvalue, value, source};
# - existence checks ("name" "in"/"=" on a NESTED dataset, extra.flat=false,
#   properties=[], retrieve_children=false, user_properties=false) find the
#   dataset; retrieve_children and properties select what rows carry;
# - children inherit unset properties (source INHERITED, also a volume under
#   a filesystem; sync and readonly too), "INHERIT" on update drops a local
#   value; no child under a read-only parent;
# - update takes user_properties (the whole set) besides
#   user_properties_update, never both;
# - bad values get TrueNAS-shaped field errors (-32602, the field's name);
# - everything survives a restart.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 sqlite3
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
URL="ws://127.0.0.1:$WS_PORT/api/current"
KEY=$(blockctl call api_key.create '{"name":"incus"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')

cat >"$TMP/client.py" <<'PY'
import json, sys, websocket

url, key, phase = sys.argv[1], sys.argv[2], sys.argv[3]
ws = websocket.create_connection(url, timeout=20)
seq = 0

def call(method, params):
    global seq
    seq += 1
    ws.send(json.dumps({"jsonrpc": "2.0", "id": seq, "method": method, "params": params}))
    while True:
        r = json.loads(ws.recv())
        if r.get("id") == seq:
            return r

def ok(method, params):
    r = call(method, params)
    assert "result" in r, (method, params, r)
    return r["result"]

def field_error(method, params, field, text=None):
    r = call(method, params)
    e = r.get("error")
    assert e and e["code"] == -32602, (method, params, r)
    fields = [x[0] for x in e["data"]["extra"]]
    assert field in fields, (field, e)
    if text:
        msgs = [x[1] for x in e["data"]["extra"] if x[0] == field]
        assert any(text in m for m in msgs), (text, e)

def prop(row, key, value, rawvalue, parsed, source):
    p = row[key]
    assert set(p) >= {"value", "rawvalue", "parsed", "source"}, (key, p)
    got = (p["value"], p["rawvalue"], p["parsed"], p["source"])
    assert got == (value, rawvalue, parsed, source), (row["name"], key, got)

# truenas_incus_ctl's existence check (dataset list NAME): "in" with one
# name, flat=false, no properties, no children, no user properties.
def exists_query(names, op="in"):
    value = names if op == "in" else names[0]
    return ok("pool.dataset.query", [[["name", op, value]],
              {"extra": {"flat": False, "properties": [], "retrieve_children": False,
                         "user_properties": False}}])

def get(name, **extra):
    rows = ok("pool.dataset.query", [[["name", "=", name]], {"extra": dict({"flat": False}, **extra)}])
    assert len(rows) == 1, (name, rows)
    return rows[0]

assert ok("auth.login_with_api_key", [key]) is True
ROOT, VMS, VOL = "demo/incus", "demo/incus/virtual-machines", "demo/incus/virtual-machines/v1.block"
INCUS = {"aclmode": "DISCARD", "acltype": "POSIX", "atime": "OFF",
         "comments": "Managed by Incus.TrueNAS", "exec": "ON", "managedby": "incus.truenas"}

if phase == "create":
    # 1. nothing there yet: the checks say so
    assert exists_query([VMS]) == [], "a missing dataset was found"
    # 2. the tree, as the driver lays it out (dataset create -o exec=on,…)
    for name in (ROOT, VMS):
        assert exists_query([name]) == []
        row = ok("pool.dataset.create", [dict(INCUS, name=name, type="FILESYSTEM",
                                               create_ancestors=True)])
        prop(row, "atime", "OFF", "off", False, "LOCAL")
        prop(row, "exec", "ON", "on", True, "LOCAL")
        prop(row, "acltype", "POSIX", "posix", "posix", "LOCAL")
        prop(row, "aclmode", "DISCARD", "discard", "discard", "LOCAL")
        prop(row, "managedby", "incus.truenas", "incus.truenas", "incus.truenas", "LOCAL")
        prop(row, "xattr", "SA", "sa", None, "LOCAL")  # TrueNAS sets it on create
        prop(row, "quota", None, "0", None, "DEFAULT")
        prop(row, "recordsize", "128K", "131072", 131072, "DEFAULT")
    vol = ok("pool.dataset.create", [{"name": VOL, "type": "VOLUME", "volsize": 16 << 20,
                                      "sparse": True, "volblocksize": "16K",
                                      "managedby": "incus.truenas",
                                      "comments": "Managed by Incus.TrueNAS",
                                      "user_properties": [{"key": "incus:content_type",
                                                           "value": "block"}]}])
    assert "atime" not in vol and "acltype" not in vol, "FILESYSTEM properties on a VOLUME row"

    # 3. existence checks on NESTED datasets, both filter forms
    for op in ("in", "="):
        rows = exists_query([VOL], op)
        assert [r["name"] for r in rows] == [VOL], (op, rows)
        r = rows[0]
        assert r["children"] == [] and r["type"] == "VOLUME", r
        assert not [k for k, v in r.items() if isinstance(v, dict) and "rawvalue" in v], \
            "properties: [] still returned property objects: %r" % r
        assert r["user_properties"] == {}, r
    rows = exists_query([VMS, VOL, "demo/incus/nope"])
    assert sorted(r["name"] for r in rows) == [VMS, VOL], rows
    assert exists_query(["demo/incus/virtual-machines/nope"]) == []

    # 4. flat=false with retrieve_children: the nested row with its subtree
    r = get(ROOT, retrieve_children=True, properties=None)
    assert [c["name"] for c in r["children"]] == [VMS], r["children"]
    assert [c["name"] for c in r["children"][0]["children"]] == [VOL]
    r = get(VMS, retrieve_children=False)
    assert r["children"] == [], r
    # no filter: only the pool roots, the rest nested
    roots = ok("pool.dataset.query", [[], {"extra": {"flat": False}}])
    assert all("/" not in x["name"] for x in roots), [x["name"] for x in roots]
    # properties: a list of ZFS names (the client passes -o name,atime,relatime)
    r = get(ROOT, properties=["name", "atime", "relatime", "dedup"], retrieve_children=False)
    prop(r, "atime", "OFF", "off", False, "LOCAL")
    prop(r, "deduplication", "OFF", "off", "off", "DEFAULT")
    assert "sync" not in r and "exec" not in r and "relatime" not in r, sorted(r)
    assert r["name"] == ROOT and r["type"] == "FILESYSTEM"

    # 5. inheritance: a child filesystem with nothing set, a volume below
    ok("pool.dataset.update", [ROOT, {"compression": "LZ4", "checksum": "SHA256",
                                      "copies": 2, "quota": 2 << 30}])
    ok("pool.dataset.create", [{"name": "demo/incus/custom", "type": "FILESYSTEM"}])
    c = get("demo/incus/custom")
    prop(c, "atime", "OFF", "off", False, "INHERITED")
    prop(c, "acltype", "POSIX", "posix", "posix", "INHERITED")
    prop(c, "compression", "LZ4", "lz4", "lz4", "INHERITED")
    prop(c, "checksum", "SHA256", "sha256", None, "INHERITED")
    prop(c, "copies", "2", "2", 2, "INHERITED")
    prop(c, "quota", None, "0", None, "DEFAULT")  # quotas are not inherited
    prop(c, "snapdir", "HIDDEN", "hidden", "hidden", "DEFAULT")
    v = get(VOL)
    prop(v, "compression", "LZ4", "lz4", "lz4", "INHERITED")
    prop(v, "copies", "2", "2", 2, "INHERITED")
    prop(v, "deduplication", "OFF", "off", "off", "DEFAULT")
    prop(get(ROOT), "quota", "2G", str(2 << 30), 2 << 30, "LOCAL")
    # set locally, then back to INHERIT
    prop(ok("pool.dataset.update", ["demo/incus/custom", {"atime": "ON"}]),
         "atime", "ON", "on", True, "LOCAL")
    prop(ok("pool.dataset.update", ["demo/incus/custom", {"atime": "INHERIT"}]),
         "atime", "OFF", "off", False, "INHERITED")
    # the driver's dataset update (exec off, same ACL pair)
    prop(ok("pool.dataset.update", [VMS, dict(INCUS, exec="OFF")]), "exec", "OFF", "off", False,
         "LOCAL")
    prop(ok("pool.dataset.update", [VOL, {"compression": "ZSTD-3", "snapdev": "VISIBLE"}]),
         "compression", "ZSTD-3", "zstd-3", "zstd-3", "LOCAL")

    # sync / readonly (which blockd acts on) are inherited too
    prop(ok("pool.dataset.update", [VMS, {"readonly": "ON", "sync": "ALWAYS"}]),
         "readonly", "ON", "on", True, "LOCAL")
    v = get(VOL)
    prop(v, "readonly", "ON", "on", True, "INHERITED")
    prop(v, "sync", "ALWAYS", "always", "always", "INHERITED")
    field_error("pool.dataset.create", [{"name": VMS + "/v2", "type": "VOLUME", "volsize": 1 << 20}],
                "pool.dataset.create.readonly", "Turn off readonly mode")
    ok("pool.dataset.update", [VMS, {"readonly": "INHERIT", "sync": "INHERIT"}])
    v = get(VOL)
    prop(v, "readonly", "OFF", "off", False, "DEFAULT")
    prop(v, "sync", "STANDARD", "standard", "standard", "DEFAULT")

    # 6. user_properties on update: the whole set
    u = ok("pool.dataset.update", [VOL, {"user_properties": [
        {"key": "incus:content_type", "value": "block"}, {"key": "incus:x", "value": "1"}]}])
    assert sorted(u["user_properties"]) == ["incus:content_type", "incus:x"], u["user_properties"]
    assert u["user_properties"]["incus:x"]["value"] == "1"
    u = ok("pool.dataset.update", [VOL, {"user_properties": [{"key": "incus:x", "value": "2"}]}])
    assert list(u["user_properties"]) == ["incus:x"], u["user_properties"]
    assert u["user_properties"]["incus:x"]["value"] == "2"
    u = ok("pool.dataset.update", [VOL, {"user_properties_update": [
        {"key": "incus:content_type", "value": "block"}]}])
    assert sorted(u["user_properties"]) == ["incus:content_type", "incus:x"]
    field_error("pool.dataset.update", [VOL, {"user_properties": [{"key": "a:b", "value": "c"}],
                                              "user_properties_update": [{"key": "a:b", "remove": True}]}],
                "pool.dataset.update.user_properties_update", "Should not be specified")
    field_error("pool.dataset.update", [VOL, {"user_properties": [{"key": "nocolon", "value": "c"}]}],
                "pool.dataset.update.user_properties.0.key")

    # 7. bad values: TrueNAS-shaped field errors, nothing created
    C = "pool.dataset.create"
    bad = [
        ({"atime": "MAYBE"}, "atime", "Input should be"),
        ({"exec": "on"}, "exec", "Input should be"),
        ({"acltype": "NFSV4", "aclmode": "DISCARD"}, "aclmode", "DISCARD aclmode may not be set"),
        ({"acltype": "POSIX", "aclmode": "PASSTHROUGH"}, "aclmode", "Must be set to DISCARD"),
        ({"recordsize": "3K"}, "recordsize", "'3K' is an invalid recordsize."),
        ({"quota": 5}, "quota", "1073741824"),
        ({"copies": 4}, "copies", "1, 2 or 3"),
        ({"copies": "two"}, "copies", "valid integer"),
        ({"special_small_block_size": 1 << 30}, "special_small_block_size", "from zero to 16M"),
        ({"compression": "BROTLI"}, "compression", "Input should be"),
        ({"snapdir": "SHOWN"}, "snapdir", "Input should be"),
        ({"share_type": "WEBDAV"}, "share_type", "Input should be"),
        ({"reservation": -1}, "reservation", "greater than or equal to 0"),
        ({"encryption": True}, "encryption", "does not encrypt"),
    ]
    for extra, field, text in bad:
        field_error(C, [dict(extra, name="demo/incus/bad", type="FILESYSTEM")], C + "." + field, text)
    for key, val in (("atime", "OFF"), ("acltype", "POSIX"), ("recordsize", "64K"), ("quota", 0)):
        field_error(C, [{"name": "demo/incus/badvol", "type": "VOLUME", "volsize": 1 << 20, key: val}],
                    C + "." + key, "not valid for VOLUME")
    field_error("pool.dataset.update", ["demo/incus/custom", {"casesensitivity": "INSENSITIVE"}],
                "pool.dataset.update.casesensitivity")
    field_error("pool.dataset.update", [ROOT, {"acltype": "NFSV4"}],
                "pool.dataset.update.aclmode", "DISCARD aclmode may not be set")
    assert exists_query(["demo/incus/bad", "demo/incus/badvol"]) == []
    # share_type presets, as TrueNAS applies them
    s = ok(C, [{"name": "demo/incus/smb", "share_type": "SMB"}])
    prop(s, "casesensitivity", "INSENSITIVE", "insensitive", "insensitive", "LOCAL")
    prop(s, "acltype", "NFSV4", "nfsv4", "nfsv4", "LOCAL")
    prop(s, "aclmode", "RESTRICTED", "restricted", "restricted", "LOCAL")
    print("create phase ok")

elif phase == "restart":
    # 8. after a restart: same values, same sources
    r = get(ROOT)
    prop(r, "atime", "OFF", "off", False, "LOCAL")
    prop(r, "compression", "LZ4", "lz4", "lz4", "LOCAL")
    prop(r, "quota", "2G", str(2 << 30), 2 << 30, "LOCAL")
    prop(get("demo/incus/custom"), "acltype", "POSIX", "posix", "posix", "INHERITED")
    v = get(VOL)
    prop(v, "compression", "ZSTD-3", "zstd-3", "zstd-3", "LOCAL")
    prop(v, "copies", "2", "2", 2, "INHERITED")
    assert sorted(v["user_properties"]) == ["incus:content_type", "incus:x"]
    # the driver's delete: recursive, then nothing is found
    assert ok("pool.dataset.delete", [ROOT, {"recursive": True}]) is True
    assert exists_query([ROOT, VMS, VOL]) == []
    print("restart phase ok")
PY

/usr/bin/python3 "$TMP/client.py" "$URL" "$KEY" create || fail "create phase"
blockd_stop
blockd_start --api-listen "127.0.0.1:$WS_PORT"
/usr/bin/python3 "$TMP/client.py" "$URL" "$KEY" restart || fail "restart phase"
# no property rows outlive their dataset
[ "$(sqlite3 "$STATE/blockd.db" "SELECT COUNT(*) FROM dataset_props WHERE dataset_id NOT IN (SELECT id FROM datasets)")" = 0 ] ||
    fail "orphan dataset_props rows"
pass
