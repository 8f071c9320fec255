#!/bin/bash
# zfs.snapshot.rollback and shares, over WebSocket with
# an API key as TrueNAS clients call it:
#  1. a volume exported over NBD with no client connected rolls back
#     without force; the export then serves the rolled-back data;
#  2. an export of a SNAPSHOT (even with a client connected to it) never
#     blocks rolling back its volume, and keeps serving the snapshot;
#  3. with a client connected to the volume's export, rollback needs force
#     (the error names the export and its clients); forced, the client is
#     disconnected and a new connection sees the rolled-back data;
#  4. a volume shared over iSCSI with no session rolls back without force;
#  5. with an iSCSI session, rollback needs force; forced, the session
#     stays, gets a unit attention (28/00 MEDIUM MAY HAVE CHANGED) and
#     reads the rolled-back data;
#  6. blockctl volume rollback: refused with clients, --force rolls back.
. "$(dirname "$0")/lib.sh"
need /usr/bin/python3 qemu-io
/usr/bin/python3 -c 'import websocket, nbd' 2>/dev/null || fail "python3-websocket or python3-libnbd missing"

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
KEY=$(blockctl call api_key.create '{"name":"rollback"}' |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
export URL="ws://127.0.0.1:$WS_PORT/api/current" KEY ISCSI_PORT NBD_PORT BLOCKCTL_BIN SOCK

cat >"$TMP/rollback.py" <<'PY'
import json, os, subprocess, threading, time, websocket, nbd

from wsclient import Client

c = Client()
assert c.ok("auth.login_with_api_key", os.environ["KEY"]) is True
NBDP = os.environ["NBD_PORT"]
MiB = 1 << 20

def connect(name):
    h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/%s" % (NBDP, name)); return h
def volume(name):
    c.ok("pool.dataset.create", {"name": name, "type": "VOLUME", "volsize": 8 * MiB, "sparse": True})
def fill(export, byte):
    h = connect(export); h.pwrite(bytes([byte]) * MiB, 0); h.flush(); h.shutdown()
def first_mib(export):
    h = connect(export); d = h.pread(MiB, 0); h.shutdown(); return d
def nbd_sessions(export):
    return [s for s in c.ok("nbd.global.sessions") if s["export"] == export]
def wait_closed(export):
    # a client's shutdown returns before the server has let go of it
    deadline = time.time() + 30
    while nbd_sessions(export):
        assert time.time() < deadline, nbd_sessions(export)
        time.sleep(0.02)

# 1. exported, nobody connected: no force needed
volume("demo/r1")
c.ok("nbd.export.create", {"name": "r1", "dataset": "demo/r1"})
fill("r1", 0xa1)
c.ok("zfs.snapshot.create", {"dataset": "demo/r1", "name": "s"})
fill("r1", 0xb1)
wait_closed("r1")
r = c.call("zfs.snapshot.rollback", "demo/r1@s", {})
assert "result" in r, ("rollback of an export without clients refused", r)
assert first_mib("r1") == bytes([0xa1]) * MiB, "the export does not serve the rolled-back data"
wait_closed("r1")
print("OK 1")

# 2. only a snapshot is exported, with a client on it: no force needed
volume("demo/r2")
c.ok("nbd.export.create", {"name": "r2tmp", "dataset": "demo/r2"})
fill("r2tmp", 0xa2)
c.ok("zfs.snapshot.create", {"dataset": "demo/r2", "name": "s"})
fill("r2tmp", 0xb2)
wait_closed("r2tmp")
c.ok("nbd.export.delete", [e for e in c.ok("nbd.export.query") if e["name"] == "r2tmp"][0]["id"], {})
c.ok("nbd.export.create", {"name": "r2snap", "dataset": "demo/r2@s"})
hs = connect("r2snap")
r = c.call("zfs.snapshot.rollback", "demo/r2@s", {})
assert "result" in r, ("an export of the snapshot blocked the rollback", r)
assert hs.pread(MiB, 0) == bytes([0xa2]) * MiB, "the snapshot export stopped serving"
assert len(nbd_sessions("r2snap")) == 1, "the snapshot's client was disconnected"
hs.shutdown()
print("OK 2")

# 3. a client connected to the volume's export: force needed; forced, it is disconnected
h = connect("r1")
h.pwrite(bytes([0xc1]) * MiB, 0); h.flush()
r = c.call("zfs.snapshot.rollback", "demo/r1@s", {})
e = r.get("error")
assert e and e["data"]["error"] == 16, r
assert "exported over NBD as 'r1' with 1 connected client" in e["message"], e["message"]
assert "use force" in e["message"], e["message"]
assert h.pread(MiB, 0) == bytes([0xc1]) * MiB, "refused rollback changed data"
h2 = connect("r1")  # a second client: both are disconnected
h2.pread(4096, 0)
assert "result" in c.call("zfs.snapshot.rollback", "demo/r1@s", {"force": True})
assert nbd_sessions("r1") == [], "client still connected after a forced rollback returned"
try:
    h.pread(4096, 0)
    raise AssertionError("the NBD client was not disconnected")
except nbd.Error:
    pass
try:
    h2.pread(4096, 0)
    raise AssertionError("the second NBD client was not disconnected")
except nbd.Error:
    pass
assert first_mib("r1") == bytes([0xa1]) * MiB, "a new connection does not see the rolled-back data"
print("OK 3")

# 4. iSCSI share without sessions: no force needed
volume("demo/r4")
port = int(os.environ["ISCSI_PORT"])
portal = c.ok("iscsi.portal.create", {"listen": [{"ip": "127.0.0.1"}]})["id"]
init = c.ok("iscsi.initiator.create", {"comment": "all"})["id"]
tgt = c.ok("iscsi.target.create", {"name": "r4", "groups": [{"portal": portal, "initiator": init}]})
ext = c.ok("iscsi.extent.create", {"name": "r4", "disk": "zvol/demo/r4"})
c.ok("iscsi.targetextent.create", {"target": tgt["id"], "lunid": 0, "extent": ext["id"]})
url = "iscsi://127.0.0.1:%d/iqn.2026-11.org.blockd:r4/0" % port
def qemu_io(*cmds):
    args = ["qemu-io", "-f", "raw"]
    for cm in cmds:
        args += ["-c", cm]
    p = subprocess.run(args + [url], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "fail" not in p.stdout.lower(), p.stdout + p.stderr
qemu_io("write -P 0xa4 0 1M", "flush")
c.ok("zfs.snapshot.create", {"dataset": "demo/r4", "name": "s"})
qemu_io("write -P 0xb4 0 1M", "flush")
# qemu-io has logged out; the session leaves the list once its connection
# is torn down, which may come a moment later on a loaded machine
deadline = time.time() + 60
while c.ok("iscsi.global.sessions") != []:
    assert time.time() < deadline, c.ok("iscsi.global.sessions")
    time.sleep(0.05)
r = c.call("zfs.snapshot.rollback", "demo/r4@s", {})
assert "result" in r, ("rollback of an iSCSI share without sessions refused", r)
qemu_io("read -P 0xa4 0 1M")
print("OK 4")

# 5. an iSCSI session: force needed; forced, the session stays and gets a UA
qio = subprocess.Popen(["qemu-io", "-f", "raw", url], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
qout = []
threading.Thread(target=lambda: [qout.append(l) for l in qio.stdout], daemon=True).start()
def qcmd(cmd, marker):
    n = sum(marker in l for l in qout)
    qio.stdin.write(cmd + "\n"); qio.stdin.flush()
    deadline = time.time() + 60
    while sum(marker in l for l in qout) == n:
        assert qio.poll() is None and time.time() < deadline, "".join(qout)
        time.sleep(0.01)
qcmd("write -P 0xc4 0 1M", "wrote 1048576")
assert len(c.ok("iscsi.global.sessions")) == 1
r = c.call("zfs.snapshot.rollback", "demo/r4@s", {})
e = r.get("error")
assert e and e["data"]["error"] == 16, r
assert "shared over iSCSI as extent r4 of target r4 with 1 session" in e["message"], e["message"]
assert "result" in c.call("zfs.snapshot.rollback", "demo/r4@s", {"force": True})
assert len(c.ok("iscsi.global.sessions")) == 1, "the iSCSI session was dropped"
qcmd("read -P 0xa4 0 1M", "read 1048576")
qio.stdin.write("quit\n"); qio.stdin.close()
assert qio.wait(timeout=60) == 0
time.sleep(0.1)
out = "".join(qout)
assert "Pattern verification failed" not in out, out
# qemu reports the unit attention it got (then retries the command)
assert "UNIT_ATTENTION(6)" in out and "(0x2800)" in out, out
print("OK 5")
PY

out=$(/usr/bin/python3 "$TMP/rollback.py" 2>&1) || fail "rollback and exports: $out"
grep -q "OK 5" <<<"$out" || fail "script did not finish: $out"
grep -q "r4 rolled back: MEDIUM MAY HAVE CHANGED raised on 1 LU" "$BLOCKD_LOG" ||
    fail "no unit attention raised for the forced rollback"

# 6. blockctl volume rollback --force
blockctl volume create demo/r6 --size 8M >/dev/null
blockctl share nbd create demo/r6 --name r6 >/dev/null
blockctl volume snapshot demo/r6@s >/dev/null
cat >"$TMP/hold.py" <<'PY'
import nbd, os, sys, time
h = nbd.NBD(); h.connect_uri("nbd://127.0.0.1:%s/r6" % os.environ["NBD_PORT"])
print("connected", flush=True)
sys.stdin.read()
PY
coproc HOLD { /usr/bin/python3 "$TMP/hold.py"; }
BG_PIDS+=("$HOLD_PID")
read -r line <&"${HOLD[0]}"
[ "$line" = connected ] || fail "NBD holder did not connect"
err=$(blockctl volume rollback demo/r6@s 2>&1) && fail "rollback with a client connected succeeded: $err"
case "$err" in *"use force"*) ;; *) fail "unexpected refusal: $err" ;; esac
blockctl volume rollback --force demo/r6@s >/dev/null || fail "blockctl volume rollback --force"
blockctl call nbd.global.sessions | grep -q '"r6"' && fail "client still connected after --force"
blockd_alive || fail "daemon died"
pass
