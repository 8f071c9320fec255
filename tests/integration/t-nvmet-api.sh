#!/bin/bash
# The nvmet.* API (TrueNAS 25.10 shapes) over wss:// with API keys, as its
# clients call it: fenio/tns-csi's exact calls (string ids; subsys with
# subnqn = name and with subnqn "", port query, port_subsys, namespace
# {nsid: 1}, lookups by device_path, deletes in reverse) and the
# truenas_incus_ctl fork's sequence (subsys {name, allow_any_host} →
# port_subsys → host_subsys → namespace {device_type: ZVOL}; deletes in
# reverse); query filters (subsys.id; a subsys_id filter matches nothing,
# as on TrueNAS), extra.verbose id lists; bad input (unknown subsys_id,
# nsid taken, a FILE path outside the pools, a non-volume dataset, a port
# out of range, RDMA, a duplicate name, missing ids); DH-HMAC-CHAP keys
# sealed at rest, in clear to a sharing key, hidden from a read-only one,
# which is refused every write; core.bulk; the listeners (log lines) and
# the discovery listener moved live; persistence across a restart (ids,
# NQN, serial and namespace UUIDs stable); a namespaced dataset renamed
# (the namespace follows) and deleted (refused, then forced: the
# namespace goes); share.nvme.* and blockctl share nvme; DH-HMAC-CHAP keys
# exchanged with nvme-cli both ways; a change to one subsystem publishing
# that one only; FILE namespaces; service stop/start; the --max-share-objects cap.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/csi-lib.sh"
need sqlite3 nvme

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

jkey() {
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'
}

csi_cert
csi_start
export URL="wss://127.0.0.1:$WS_PORT/api/current" CA="$TMP/cert.pem"
FULL=$(blockctl call api_key.create '{"name":"full"}' | jkey)
SHR=$(blockctl call api_key.create '{"name":"csi","roles":["SHARING_ADMIN"]}' | jkey)
RO=$(blockctl call api_key.create '{"name":"ro","roles":["READONLY_ADMIN"]}' | jkey)
export FULL SHR RO
NVME_PORT=$(free_port)
export NVME_PORT

# The discovery listener moves live (":0": the kernel picks the port, the
# log names it), and opens only while some port serves: none yet.
blockctl call nvmet.global.update '{"discovery_listen":"127.0.0.1:0"}' >/dev/null
grep -q "nvmet: discovery listening" "$BLOCKD_LOG" && fail "a discovery listener without any port"
P0=$(blockctl call nvmet.port.create "{\"addr_trtype\":\"TCP\",\"addr_traddr\":\"127.0.0.1\",\"addr_trsvcid\":$(free_port)}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') || fail "nvmet.port.create"
for _ in $(seq 1 200); do
    grep -q "nvmet: discovery listening on 127.0.0.1:" "$BLOCKD_LOG" && break
    sleep 0.05
done
grep -q "nvmet: discovery listening on 127.0.0.1:" "$BLOCKD_LOG" || fail "no discovery listener"
DISC=$(grep -o "nvmet: discovery listening on 127.0.0.1:[0-9]*" "$BLOCKD_LOG" | tail -1 | sed 's/.*://')
python3 -c "import socket; socket.create_connection(('127.0.0.1', $DISC), 5).close()" ||
    fail "the discovery listener at $DISC does not accept"
blockctl call nvmet.port.delete "[$P0]" >/dev/null || fail "nvmet.port.delete"

cat >"$TMP/nvmet.py" <<'PY'
import json, os, ssl, sys, time
import websocket

class Api:
    def __init__(self, key, string_ids=False):
        self.ws = websocket.create_connection(
            os.environ["URL"], timeout=60,
            sslopt={"ca_certs": os.environ["CA"], "cert_reqs": ssl.CERT_REQUIRED,
                    "check_hostname": False})
        self.n, self.string_ids = 0, string_ids
        assert self.ok("auth.login_with_api_key", key) is True

    def call(self, method, *params):
        self.n += 1
        rid = str(self.n) if self.string_ids else self.n
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                                 "params": list(params)}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("id") == rid:
                return r

    def ok(self, method, *params):
        r = self.call(method, *params)
        assert "result" in r, (method, params, r)
        return r["result"]

    def err(self, method, *params):
        """(errno, errname, fields: {field: errno}) of a call that must fail."""
        r = self.call(method, *params)
        assert "error" in r, (method, params, r)
        d = r["error"].get("data") or {}
        assert isinstance(d.get("error"), int) and isinstance(d.get("errname"), str), r
        fields = {e[0]: e[2] for e in (d.get("extra") or []) if isinstance(e, list)}
        return d["error"], d["errname"], fields, r["error"]["message"] + " " + str(d.get("reason"))

PORT = int(os.environ["NVME_PORT"])
phase = sys.argv[1]
full = Api(os.environ["FULL"])

def ns_of(api, sid):
    return api.ok("nvmet.namespace.query", [["subsys.id", "=", sid]])

if phase == "tns":
    # ---- fenio/tns-csi (pkg/tnsapi), string ids, a SHARING_ADMIN key ----
    c = Api(os.environ["SHR"], string_ids=True)
    port = full.ok("nvmet.port.create", {"addr_trtype": "TCP", "addr_traddr": "127.0.0.1",
                                         "addr_trsvcid": PORT})
    assert port["index"] == 1 and port["addr_adrfam"] == "IPV4" and port["enabled"], port
    made = []
    for i, subnqn_given in enumerate([True, False]):
        vol = "demo/pvc-%d" % i
        nqn = "nqn.2137.csi.tns:pvc-%d" % i
        c.ok("pool.dataset.create", {"name": vol, "type": "VOLUME", "volsize": 16 << 20,
                                     "volblocksize": "16K"})
        params = {"name": nqn, "subnqn": nqn if subnqn_given else "", "allow_any_host": True}
        sub = c.ok("nvmet.subsys.create", params)
        assert sub["name"] == nqn and isinstance(sub["id"], int), sub
        base = full.ok("nvmet.global.config")["basenqn"]
        assert base.startswith("nqn.2011-06.com.truenas:uuid:"), base
        assert sub["subnqn"] == (nqn if subnqn_given else base + ":" + nqn), sub
        assert len(sub["serial"]) == 20, sub
        ports = c.ok("nvmet.port.query")
        assert ports and ports[0]["addr_trtype"] == "TCP" and ports[0]["addr_trsvcid"] == PORT, ports
        c.ok("nvmet.port_subsys.create", {"port_id": ports[0]["id"], "subsys_id": sub["id"]})
        ns = c.ok("nvmet.namespace.create", {"device_path": "zvol/" + vol, "device_type": "ZVOL",
                                             "subsys_id": sub["id"], "nsid": 1})
        assert ns["nsid"] == 1 and ns["subsys"]["id"] == sub["id"], ns
        assert ns["subsys"]["subnqn"] == sub["subnqn"] and ns["device_path"] == "zvol/" + vol, ns
        assert len(ns["device_uuid"]) == 36 and ns["device_uuid"] != ns["device_nguid"], ns
        # idempotency lookup: by device_path, reading subsys.{id,name,subnqn}
        got = c.ok("nvmet.namespace.query", [["device_path", "=", "zvol/" + vol]], {})
        assert len(got) == 1 and got[0]["subsys"]["name"] == nqn, got
        assert c.ok("nvmet.namespace.query", [["id", "=", ns["id"]]])[0]["nsid"] == 1
        made.append((vol, sub, ns))
    subs = c.ok("nvmet.subsys.query")
    assert sorted(s["name"] for s in subs) == ["nqn.2137.csi.tns:pvc-0", "nqn.2137.csi.tns:pvc-1"], subs
    # DeleteVolume: namespace, the subsystem's port bindings, subsystem, zvol
    for vol, sub, ns in made:
        assert c.ok("nvmet.namespace.delete", ns["id"]) is True
        binds = [b for b in c.ok("nvmet.port_subsys.query") if b["subsys"]["id"] == sub["id"]]
        assert len(binds) == 1 and binds[0]["port"]["id"] == port["id"], binds
        c.ok("nvmet.port_subsys.delete", binds[0]["id"])
        assert c.ok("nvmet.subsys.delete", sub["id"]) is True
        assert c.ok("pool.dataset.delete", vol, {"recursive": True, "force": True}) is True
    assert c.ok("nvmet.subsys.query") == [] and c.ok("nvmet.namespace.query") == []
    print("OK tns")

elif phase == "incus":
    # ---- the truenas_incus_ctl fork: subsys → port_subsys → host_subsys → namespace ----
    c = Api(os.environ["SHR"])
    c.ok("pool.dataset.create", {"name": "demo/inc", "type": "VOLUME", "volsize": 8 << 20})
    port = c.ok("nvmet.port.query")[0]
    key = c.ok("nvmet.host.generate_key", "SHA-256", "nqn.2014-08.org.nvmexpress:uuid:h1")
    ctrl = c.ok("nvmet.host.generate_key", "SHA-512")
    assert key.startswith("DHHC-1:01:") and ctrl.startswith("DHHC-1:03:"), (key, ctrl)
    host = c.ok("nvmet.host.create", {"hostnqn": "nqn.2014-08.org.nvmexpress:uuid:h1",
                                      "dhchap_key": key, "dhchap_ctrl_key": ctrl,
                                      "dhchap_dhgroup": "2048-BIT"})
    assert host["dhchap_key"] == key and host["dhchap_hash"] == "SHA-256", host
    sub = c.ok("nvmet.subsys.create", {"name": "incus-inc", "allow_any_host": False})
    ps = c.ok("nvmet.port_subsys.create", {"port_id": port["id"], "subsys_id": sub["id"]})
    assert ps["port"]["id"] == port["id"] and ps["subsys"]["id"] == sub["id"], ps
    hs = c.ok("nvmet.host_subsys.create", {"host_id": host["id"], "subsys_id": sub["id"]})
    assert hs["host"]["hostnqn"] == host["hostnqn"] and "dhchap_key" not in hs["host"], hs
    ns = c.ok("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/inc",
                                         "subsys_id": sub["id"]})
    assert ns["nsid"] == 1, ns
    # filters: subsys.id matches; subsys_id does not exist on the rows (TrueNAS too)
    assert [n["id"] for n in ns_of(c, sub["id"])] == [ns["id"]]
    assert c.ok("nvmet.namespace.query", [["subsys_id", "=", sub["id"]]]) == []
    assert c.ok("nvmet.port_subsys.query", [["port.id", "=", port["id"]]])[0]["id"] == ps["id"]
    v = c.ok("nvmet.subsys.query", [["id", "=", sub["id"]]], {"extra": {"verbose": True}})[0]
    assert v["hosts"] == [host["id"]] and v["ports"] == [port["id"]] and v["namespaces"] == [ns["id"]], v
    plain = c.ok("nvmet.subsys.get_instance", sub["id"])
    assert plain["hosts"] == [] and plain["namespaces"] == [], plain
    # read-only key: reads (keys hidden), every write refused
    ro = Api(os.environ["RO"])
    h = ro.ok("nvmet.host.get_instance", host["id"])
    assert h["dhchap_key"] == "********" and h["dhchap_ctrl_key"] == "********", h
    for m, p in [("nvmet.subsys.create", [{"name": "x"}]),
                 ("nvmet.subsys.delete", [sub["id"]]),
                 ("nvmet.namespace.update", [ns["id"], {"enabled": False}]),
                 ("nvmet.port.create", [{"addr_trtype": "TCP", "addr_traddr": "127.0.0.1",
                                         "addr_trsvcid": 4444}]),
                 ("nvmet.host.delete", [host["id"]]),
                 ("nvmet.global.update", [{"ana": True}]),
                 ("share.nvme.create", [{"name": "demo/inc"}])]:
        e = ro.err(m, *p)
        assert e[1] == "EACCES", (m, e)
    assert ro.ok("nvmet.global.sessions") == []
    # subsys.delete refuses clearly while in use (TrueNAS "succeeds" without deleting)
    e = c.err("nvmet.subsys.delete", sub["id"])
    assert e[2].get("nvmet.subsys.delete.id") == 16 and "namespace" in e[3], e
    # deletes in reverse
    assert c.ok("nvmet.namespace.delete", ns["id"]) is True
    assert c.ok("nvmet.host_subsys.delete", hs["id"]) is True
    assert c.ok("nvmet.port_subsys.delete", ps["id"]) is True
    assert c.ok("nvmet.subsys.delete", sub["id"]) is True
    assert c.ok("nvmet.host.delete", host["id"]) is True
    print("OK incus")

elif phase == "bad":
    c = Api(os.environ["SHR"])
    c.ok("pool.dataset.create", {"name": "demo/b1", "type": "VOLUME", "volsize": 8 << 20})
    c.ok("pool.dataset.create", {"name": "demo/b2", "type": "VOLUME", "volsize": 8 << 20})
    c.ok("pool.dataset.create", {"name": "demo/fs", "type": "FILESYSTEM"})
    sub = c.ok("nvmet.subsys.create", {"name": "bad"})
    assert sub["allow_any_host"] is False and sub["ana"] is None, sub
    def field(method, body, name, errno):
        e = c.err(method, body)
        assert e[2].get(method + "." + name) == errno, (method, body, e)
    field("nvmet.subsys.create", {"name": "bad"}, "name", 17)
    field("nvmet.subsys.create", {"name": "x", "subnqn": "not an nqn"}, "subnqn", 22)
    field("nvmet.subsys.create", {"name": "y", "ieee_oui": "zz"}, "ieee_oui", 22)
    field("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/b1",
                                     "subsys_id": 999}, "subsys_id", 2)
    c.ok("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/b1",
                                    "subsys_id": sub["id"], "nsid": 7})
    field("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/b2",
                                     "subsys_id": sub["id"], "nsid": 7}, "nsid", 17)
    field("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/b1",
                                     "subsys_id": sub["id"]}, "device_path", 17)
    field("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/fs",
                                     "subsys_id": sub["id"]}, "device_path", 22)
    field("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/nope",
                                     "subsys_id": sub["id"]}, "device_path", 2)
    field("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "/dev/sda",
                                     "subsys_id": sub["id"]}, "device_path", 22)
    field("nvmet.namespace.create", {"device_type": "FILE", "device_path": "/etc/passwd",
                                     "subsys_id": sub["id"]}, "device_path", 22)
    field("nvmet.namespace.create", {"device_type": "FILE", "device_path": "/tmp/nvmet-x.img",
                                     "filesize": 1 << 20, "subsys_id": sub["id"]}, "device_path", 22)
    field("nvmet.namespace.create", {"device_type": "DISK", "device_path": "zvol/demo/b2",
                                     "subsys_id": sub["id"]}, "device_type", 22)
    # the next free nsid
    ns = c.ok("nvmet.namespace.create", {"device_type": "ZVOL", "device_path": "zvol/demo/b2",
                                         "subsys_id": sub["id"]})
    assert ns["nsid"] == 1, ns
    port = {"addr_trtype": "TCP", "addr_traddr": "127.0.0.1", "addr_trsvcid": 80}
    e = c.err("nvmet.port.create", port)
    assert "nvmet.port.create.addr_trsvcid" in e[2], e
    e = c.err("nvmet.port.create", dict(port, addr_trsvcid=PORT, addr_trtype="RDMA"))
    assert e[2].get("nvmet.port.create.addr_trtype") == 95 and "TCP only" in e[3], e
    e = c.err("nvmet.port.create", dict(port, addr_trsvcid=PORT + 1, addr_traddr="host.example"))
    assert e[2].get("nvmet.port.create.addr_traddr") == 22, e
    e = c.err("nvmet.port.create", dict(port, addr_trsvcid=PORT))  # the tns phase's port
    assert e[2].get("nvmet.port.create") == 17, e
    e = c.err("nvmet.host.create", {"hostnqn": "nqn.x", "dhchap_key": "DHHC-1:01:abcd:"})
    assert e[2].get("nvmet.host.create.dhchap_key") == 22, e
    e = c.err("nvmet.host.create", {"hostnqn": "nqn.x", "dhchap_ctrl_key":
                                    c.ok("nvmet.host.generate_key")})
    assert e[2].get("nvmet.host.create.dhchap_ctrl_key") == 22, e
    assert c.err("nvmet.subsys.get_instance", 999)[1] == "ENOENT"
    assert c.err("nvmet.namespace.delete", 999)[1] == "ENOENT"
    assert c.err("nvmet.port.update", 999, {"enabled": False})[1] == "ENOENT"
    assert full.err("nvmet.global.update", {"rdma": True})[2].get("nvmet.global.update.rdma") == 95
    # core.bulk runs them as calls
    jid = c.ok("core.bulk", "nvmet.host.create", [[{"hostnqn": "nqn.2014-08.b:1"}],
                                                  [{"hostnqn": "nqn.2014-08.b:1"}]])
    for _ in range(600):  # a job: poll until it ended
        job = c.ok("core.get_jobs", [["id", "=", jid]], {"get": True})
        if job["state"] != "RUNNING":
            break
        time.sleep(0.05)
    assert job["state"] == "SUCCESS", job
    res = job["result"]
    assert res[0]["error"] is None and res[1]["error"], res
    print("OK bad")

elif phase == "persist":
    subs = full.ok("nvmet.subsys.query")
    nss = full.ok("nvmet.namespace.query")
    json.dump({"subs": subs, "nss": nss}, open(sys.argv[2], "w"))
    print("OK persist")

elif phase == "check":
    was = json.load(open(sys.argv[2]))
    assert full.ok("nvmet.subsys.query") == was["subs"]
    assert full.ok("nvmet.namespace.query") == was["nss"]
    print("OK check")
PY

nvmet_py() {
    local out
    out=$(timeout 300 /usr/bin/python3 "$TMP/nvmet.py" "$@" 2>&1) || fail "nvmet.py $1: $out"
    grep -q "^OK $1" <<<"$out" || fail "nvmet.py $1 did not finish: $out"
}

nvmet_py tns
grep -q "nvmet: listening on 127.0.0.1:$NVME_PORT (port 1, id " "$BLOCKD_LOG" ||
    fail "no listener for port 1"
python3 -c "import socket; socket.create_connection(('127.0.0.1', $NVME_PORT), 5).close()" ||
    fail "port 1 does not accept"
nvmet_py incus
nvmet_py bad

# Keys and nvme-cli (the Linux host's tool) agree: its keys are taken, ours pass its check.
for h in 1 2 3; do
    k=$(nvme gen-dhchap-key -m $h -l $((16 + 16 * h)) -n "nqn.2014-08.cli:$h") || fail "nvme gen-dhchap-key"
    blockctl call nvmet.host.create "{\"hostnqn\":\"nqn.2014-08.cli:$h\",\"dhchap_key\":\"$k\"}" >/dev/null ||
        fail "an nvme-cli key was refused: $k"
    hash=$(jget "$(blockctl call nvmet.host.dhchap_hash_choices)" "j[$h - 1]")
    k=$(blockctl call nvmet.host.generate_key "[\"$hash\"]" | tr -d '"')
    nvme check-dhchap-key -k "$k" | grep -q "Key is valid (HMAC $h, length $((16 + 16 * h))," ||
        fail "nvme check-dhchap-key refuses $k: $(nvme check-dhchap-key -k "$k" 2>&1)"
done

# Keys sealed at rest.
blockctl call nvmet.host.create "{\"hostnqn\":\"nqn.2014-08.k:1\",\"dhchap_key\":$(blockctl call nvmet.host.generate_key)}" >/dev/null
stored=$(sqlite3 "$STATE/blockd.db" "SELECT dhchap_key FROM nvmet_host WHERE hostnqn = 'nqn.2014-08.k:1'")
case "$stored" in '$pwenc1$'*) ;; *) fail "dhchap_key stored in clear: $stored" ;; esac

# Restart: the same rows (ids, NQNs, serials, UUIDs), the listeners again.
nvmet_py persist "$TMP/before.json"
blockd_stop
csi_start
nvmet_py check "$TMP/before.json"
grep -c "nvmet: listening on 127.0.0.1:$NVME_PORT (port 1, id " "$BLOCKD_LOG" | grep -qx 2 ||
    fail "port 1 not listening again after the restart"

# A namespaced dataset: rename follows, delete refused then forced.
blockctl call pool.dataset.rename '["demo/b1",{"new_name":"demo/r1"}]' >/dev/null || fail "rename"
out=$(blockctl call nvmet.namespace.query '[[["device_path","=","zvol/demo/r1"]]]')
[ "$(jget "$out" 'len(j)')" = 1 ] || fail "the namespace did not follow the rename: $out"
out=$(blockctl call pool.dataset.delete '"demo/r1"' 2>&1) && fail "deleted a namespaced volume"
grep -q "NVMe-oF" <<<"$out" || fail "the refusal does not say why: $out"
blockctl call pool.dataset.delete '["demo/r1",{"force":true}]' >/dev/null || fail "forced delete"
out=$(blockctl call nvmet.namespace.query '[[["device_path","^","zvol/demo/r1"]]]')
[ "$out" = "[]" ] || fail "the namespace of a deleted volume stayed: $out"

# A change to one subsystem publishes that subsystem only; a resize
# republishes the subsystem serving the volume (the target then tells its
# hosts); the others stay the same objects (no log line for them).
blockctl volume create demo/ia --size 8M >/dev/null
blockctl volume create demo/ib --size 8M >/dev/null
PORT1=$(jget "$(blockctl call nvmet.port.query '[[["index","=",1]]]')" 'j[0]["id"]')
for x in a b; do
    sid=$(jget "$(blockctl call nvmet.subsys.create "{\"name\":\"iso-$x\"}")" 'j["id"]')
    blockctl call nvmet.namespace.create \
        "{\"device_type\":\"ZVOL\",\"device_path\":\"zvol/demo/i$x\",\"subsys_id\":$sid}" >/dev/null
    blockctl call nvmet.port_subsys.create "{\"port_id\":$PORT1,\"subsys_id\":$sid}" >/dev/null
    eval "SID_$x=$sid"
done
wait_log() {
    local i
    for i in $(seq 1 200); do
        grep -q "$1" "$BLOCKD_LOG" && return 0
        sleep 0.05
    done
    fail "no log line '$1'"
}
wait_log "nvmet: subsystem iso-b changed: 1 namespace(s), 0 host(s), 1 port(s)"
before_b=$(grep -c "nvmet: subsystem iso-b " "$BLOCKD_LOG")
blockctl call nvmet.subsys.update "[$SID_a,{\"allow_any_host\":true}]" >/dev/null
wait_log "nvmet: subsystem iso-a changed: 1 namespace(s), 0 host(s) (any host allowed), 1 port(s)"
blockctl call pool.dataset.update '["demo/ia",{"volsize":16777216}]' >/dev/null
[ "$(grep -c "nvmet: subsystem iso-a changed" "$BLOCKD_LOG")" -ge 4 ] ||
    fail "the resize did not republish iso-a: $(grep 'subsystem iso-a' "$BLOCKD_LOG")"
[ "$(grep -c "nvmet: subsystem iso-b " "$BLOCKD_LOG")" = "$before_b" ] ||
    fail "a change to iso-a republished iso-b: $(grep 'subsystem iso-b' "$BLOCKD_LOG")"

# FILE namespaces: a new file inside a pool, made by blockd; removed on request.
POOLDIR=$(jget "$(blockctl call pool.query '[[["name","=","demo"]]]')" 'j[0]["path"]')
F="$POOLDIR/ns1.img"
ns=$(blockctl call nvmet.namespace.create \
    "{\"device_type\":\"FILE\",\"device_path\":\"$F\",\"filesize\":1048576,\"subsys_id\":$SID_a}") ||
    fail "FILE namespace: $ns"
[ "$(stat -c %s "$F")" = 1048576 ] || fail "the FILE namespace's file was not made"
NSF=$(jget "$ns" 'j["id"]')
before_a=$(grep -c "nvmet: subsystem iso-a changed: 2 namespace" "$BLOCKD_LOG" || true)
blockctl call nvmet.namespace.update "[$NSF,{\"filesize\":2097152}]" >/dev/null || fail "grow"
[ "$(stat -c %s "$F")" = 2097152 ] || fail "the file did not grow"
[ "$(grep -c "nvmet: subsystem iso-a changed: 2 namespace" "$BLOCKD_LOG")" -gt "$before_a" ] ||
    fail "growing a FILE namespace did not republish its subsystem"
out=$(blockctl call nvmet.namespace.update "[$NSF,{\"filesize\":1048576}]" 2>&1) &&
    fail "shrank a FILE namespace"
out=$(blockctl call nvmet.namespace.create \
    "{\"device_type\":\"FILE\",\"device_path\":\"$F\",\"filesize\":1048576,\"subsys_id\":$SID_b}" 2>&1) &&
    fail "took another namespace's file"
blockctl call nvmet.namespace.delete "[$NSF,{\"remove\":true}]" >/dev/null || fail "delete {remove}"
[ ! -e "$F" ] || fail "delete {remove} left the file"

# share.nvme.* through blockctl: one call, the chain; delete undoes it.
blockctl volume create demo/sh --size 8M >/dev/null
out=$(blockctl share nvme create demo/sh) || fail "share nvme create: $out"
grep -q "^created	demo/sh	nqn\." <<<"$out" || fail "share nvme create said: $out"
out=$(blockctl share nvme list)
grep -q "demo/sh .* 127.0.0.1:$NVME_PORT" <<<"$out" || fail "share nvme list: $out"
blockctl share nvme delete demo/sh >/dev/null || fail "share nvme delete"
out=$(blockctl call nvmet.subsys.query '[[["name","=","demo:sh"]]]')
[ "$out" = "[]" ] || fail "share nvme delete left the subsystem: $out"
blockctl share nvme delete demo/sh 2>/dev/null && fail "deleted a share twice"

# The nvmet service: stopped, no port listens and no subsystem is served;
# started, both again.
[ "$(blockctl call service.started '["nvmet"]')" = true ] || fail "nvmet not started"
blockctl call service.stop '["nvmet"]' >/dev/null
[ "$(blockctl call service.started '["nvmet"]')" = false ] || fail "nvmet still started"
python3 -c "import socket; socket.create_connection(('127.0.0.1', $NVME_PORT), 5)" 2>/dev/null &&
    fail "a stopped nvmet still listens on port 1"
grep -q "nvmet: subsystem iso-a (.*) withdrawn" "$BLOCKD_LOG" || fail "stop did not withdraw iso-a"
blockctl call service.start '["nvmet"]' >/dev/null
python3 -c "import socket; socket.create_connection(('127.0.0.1', $NVME_PORT), 5).close()" ||
    fail "a restarted nvmet does not listen on port 1"

# The cap: past --max-share-objects, EDQUOT naming it, and a log line.
blockd_stop
blockd_start --max-share-objects 3
out=$(blockctl call nvmet.host.create '{"hostnqn":"nqn.2014-08.cap:1"}' 2>&1) && fail "the cap let a host in"
grep -q "max-share-objects" <<<"$out" || fail "the cap's error does not name it: $out"
grep -q "limit reached.*nvmet_host" "$BLOCKD_LOG" || fail "no log line for the cap"
blockd_alive || fail "blockd died"
pass
