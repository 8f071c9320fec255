#!/bin/bash
# Control-plane benchmark: how long iSCSI share changes take and
# whether they disturb I/O on an unrelated target.
#
#  1. create cycle = the 8 calls a TrueNAS client makes (iscsi.target.query
#     by alias, iscsi.portal.query, iscsi.initiator.query, iscsi.target.create,
#     iscsi.extent.query, iscsi.extent.create, iscsi.targetextent.query,
#     iscsi.targetextent.create) and delete cycle (iscsi.target.query,
#     pool.dataset.query, iscsi.target.delete [id, true, true]) over one
#     persistent WebSocket, without and with defer (+ one service.reload);
#  2. blockctl share iscsi create/delete as whole processes;
#  3. 1,000 shares created then deleted, total time: through the TrueNAS
#     create/delete cycles on one connection, through share.iscsi.create/
#     delete on one connection (one call at a time), on N_CONN connections
#     at once (how a CSI driver provisioning volumes in parallel calls it),
#     and as two core.bulk calls (one job each);
#  4. disruption: QD32 4 KiB reads on target A (bench/control_reader,
#     libiscsi) alone, then while 1,000 shares are created and deleted:
#     A's IOPS and the longest gap between two completions; then the same
#     churn again in blocks of 50 shares, each followed by a pause as long
#     as the block, comparing A's reads inside the blocks with those in the
#     pauses (from the reader's 10 ms completion counts): other load on the
#     machine then weighs on both sides alike. Interleaved again with the
#     bench client at SCHED_IDLE (as if it ran on another machine), and
#     with 11 core.ping per "share" instead of the calls that change
#     anything: the floor, what the client's own round trips cost A on 2
#     shared CPUs. Each row also gives A's reads lost per share, which does
#     not depend on how fast the churn goes.
# Medians and p99 in milliseconds. Run alone (flock /tmp/blockd-bench.lock).
#
#   flock /tmp/blockd-bench.lock bash bench/control.sh [BUILD_DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${BUILD:-$ROOT/build}}
BLOCKD=$BUILD/src/daemon/blockd
BLOCKCTL=$BUILD/src/cli/blockctl
READER=$BUILD/bench/control_reader
PY=/usr/bin/python3
N_CYCLES=${N_CYCLES:-200}
N_CLI=${N_CLI:-100}
N_MANY=${N_MANY:-1000}
N_CONN=${N_CONN:-4}
for f in "$BLOCKD" "$BLOCKCTL" "$READER"; do
    [ -x "$f" ] || { echo "missing $f (ninja -C $BUILD)" >&2; exit 1; }
done
$PY -c 'import websocket' || { echo "python3-websocket is required" >&2; exit 1; }

TMP=$(mktemp -d /tmp/blockd-bench-control.XXXXXX)
port() { "$ROOT/scripts/free-port"; }
WS_PORT=$(port)
ISCSI_PORT=$(port)
"$BLOCKD" --state-dir "$TMP/state" --log-level warn --nbd-listen "127.0.0.1:$(port)" \
    --iscsi-listen "127.0.0.1:$ISCSI_PORT" --api-listen "127.0.0.1:$WS_PORT" >"$TMP/blockd.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$TMP"' EXIT
for i in $(seq 1 100); do [ -S "$TMP/state/blockd.sock" ] && break; sleep 0.1; done
SOCK=$TMP/state/blockd.sock
KEY=$("$BLOCKCTL" --socket "$SOCK" call api_key.create '{"name":"bench"}' |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["key"])')

echo "# blockd control-plane benchmark ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, $(uname -r))"
echo

$PY - "$WS_PORT" "$KEY" "$SOCK" "$BLOCKCTL" "$READER" "$ISCSI_PORT" "$N_CYCLES" "$N_CLI" \
    "$N_MANY" "$N_CONN" "$PID" <<'PY'
import collections, json, os, signal, statistics, subprocess, sys, tempfile, threading, time
import websocket

ws_port, key, sock, blockctl, reader, iscsi_port = sys.argv[1:7]
n_cycles, n_cli, n_many, n_conn, blockd_pid = (int(x) for x in sys.argv[7:12])
HZ = os.sysconf("SC_CLK_TCK")

def cpu_ticks(path):
    """utime + stime of one /proc stat file (the name field may hold spaces)."""
    with open(path) as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])

def cpu_by_role(reader_pid=None):
    """CPU seconds so far: blockd's threads by role (named in src/core), the
    reader process and this client."""
    out = collections.Counter()
    task = "/proc/%d/task" % blockd_pid
    for tid in os.listdir(task):
        try:
            with open("%s/%s/comm" % (task, tid)) as f:
                comm = f.read().strip()
            t = cpu_ticks("%s/%s/stat" % (task, tid))
        except OSError:
            continue  # thread exited meanwhile
        role = ("blockd reactors" if comm.startswith("reactor") else
                "blockd I/O pool" if comm.startswith("io") else "blockd API and other")
        out[role] += t / HZ
    if reader_pid:
        out["reader (initiator)"] = cpu_ticks("/proc/%d/stat" % reader_pid) / HZ
    t = os.times()
    out["bench client"] = t.user + t.system
    return out
BASE = "iqn.2026-11.org.blockd"

class Client:
    """One persistent WebSocket JSON-RPC connection, logged in."""
    def __init__(self):
        # skip_utf8_validation: websocket-client checks every text frame
        # byte by byte in Python (0.1 µs/byte: 3 ms for the 47 KB
        # iscsi.targetextent.query answer at 1,000 shares) before recv()
        # decodes it as UTF-8 anyway, which validates it again in C.
        self.ws = websocket.create_connection("ws://127.0.0.1:%s/api/current" % ws_port,
                                              timeout=120, skip_utf8_validation=True)
        self.ws.sock.setsockopt(6, 1, 1)  # TCP_NODELAY
        self.seq = 0
        self.times = None  # method -> [ms] while profiling
        assert self.call("auth.login_with_api_key", [key]) is True
    def call(self, method, params=None):
        self.seq += 1
        t0 = time.perf_counter()
        self.ws.send(json.dumps({"jsonrpc": "2.0", "id": self.seq, "method": method,
                                 "params": params or []}))
        while True:
            r = json.loads(self.ws.recv())
            if r.get("id") == self.seq:
                if self.times is not None:
                    self.times[method].append((time.perf_counter() - t0) * 1000)
                if "error" in r:
                    raise RuntimeError("%s %s: %s" % (method, params, r["error"]))
                return r["result"]

main_client = Client()
call = main_client.call

def make_volumes(prefix, n):
    for i in range(n):
        call("pool.dataset.create", [{"name": "demo/%s%d" % (prefix, i), "type": "VOLUME",
                                      "volsize": 1048576}])

portal = call("iscsi.portal.create", [{"listen": [{"ip": "127.0.0.1"}]}])["id"]
initiator = call("iscsi.initiator.create", [{"comment": "bench-all"}])["id"]

def create_cycle(vol, defer=False):
    name = "bench:" + vol.replace("/", ":")
    d = {"defer": True} if defer else {}
    call("iscsi.target.query", [[["alias", "in", [vol]]], {"extra": {"retrieve_locked_info": False}}])
    p = call("iscsi.portal.query", [[["listen", "=", [{"ip": "127.0.0.1", "port": 3260}]]], {}])
    i = call("iscsi.initiator.query", [[["comment", "=", "bench-all"]]])
    t = call("iscsi.target.create", [dict(name=name, alias=vol, groups=[
        {"portal": p[0]["id"] if p else portal, "initiator": i[0]["id"]}], **d)])
    call("iscsi.extent.query", [[["disk", "in", ["zvol/" + vol]]]])
    e = call("iscsi.extent.create", [dict(name=name.replace(":", "-"), disk="zvol/" + vol,
                                          ro=False, **d)])
    call("iscsi.targetextent.query", [])
    call("iscsi.targetextent.create", [dict(target=t["id"], lunid=0, extent=e["id"], **d)])

def delete_cycle(vol, defer=False):
    t = call("iscsi.target.query", [[["alias", "in", [vol]]]])
    call("pool.dataset.query", [[["id", "=", vol]], {"extra": {"retrieve_children": True,
                                                              "flat": False}}])
    call("iscsi.target.delete", [t[0]["id"], True, True] + ([True] if defer else []))

def stats(ms):
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(round(0.99 * len(ms))) - 1)]
    return statistics.median(ms), p99

def timed(fn, vols, **kw):
    out = []
    for v in vols:
        t0 = time.perf_counter()
        fn(v, **kw)
        out.append((time.perf_counter() - t0) * 1000)
    return out

rows = []
def row(what, ms, target=None, ref=None):
    med, p99 = stats(ms)
    rows.append((what, len(ms), med, p99, target, ref))

# 1. WebSocket cycles
vols = ["demo/c%d" % i for i in range(n_cycles)]
make_volumes("c", n_cycles)
main_client.times = collections.defaultdict(list)
c = timed(create_cycle, vols)
d = timed(delete_cycle, vols)
per_call = main_client.times
main_client.times = None
row("create cycle, WebSocket (8 calls)", c, 5, 5300)
row("delete cycle, WebSocket (3 calls)", d, 5, 15200)
c = timed(create_cycle, vols, defer=True)
t0 = time.perf_counter(); call("service.reload", ["iscsitarget", {}]); rc = (time.perf_counter() - t0) * 1000
d = timed(delete_cycle, vols, defer=True)
t0 = time.perf_counter(); call("service.reload", ["iscsitarget", {}]); rd = (time.perf_counter() - t0) * 1000
row("create cycle, WebSocket, defer", c, 5, 1900)
row("delete cycle, WebSocket, defer", d, 5, 3500)
reloads = (rc, rd)

# 2. blockctl as whole processes
cli_vols = vols[:n_cli]
def cli(cmd, vol):
    r = subprocess.run([blockctl, "--socket", sock, "share", "iscsi", cmd, "--target-prefix",
                        "cli", vol], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith(cmd + "d\t"), (r.stdout, r.stderr)
c = timed(lambda v: cli("create", v), cli_vols)
d = timed(lambda v: cli("delete", v), cli_vols)
row("blockctl share iscsi create (process)", c, 20, 5300)
row("blockctl share iscsi delete (process)", d, 20, 15200)

# 3. many shares
many = ["demo/m%d" % i for i in range(n_many)]
make_volumes("m", n_many)
t0 = time.perf_counter()
for v in many:
    create_cycle(v)
t_create = time.perf_counter() - t0
t0 = time.perf_counter()
for v in many:
    delete_cycle(v)
t_delete = time.perf_counter() - t0
# the same shares through the one-transaction API (one commit per share)
t0 = time.perf_counter()
for v in many:
    call("share.iscsi.create", [{"name": v, "target_prefix": "one"}])
t_share_create = time.perf_counter() - t0
t0 = time.perf_counter()
for v in many:
    call("share.iscsi.delete", [{"name": v, "target_prefix": "one"}])
t_share_delete = time.perf_counter() - t0

# the same, n_conn connections at once (each takes every n_conn-th volume)
def parallel(method, prefix):
    clients = [Client() for _ in range(n_conn)]
    errors = []
    def run(k):
        try:
            for v in many[k::n_conn]:
                clients[k].call(method, [{"name": v, "target_prefix": prefix}])
        except Exception as e:  # reported below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_conn)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    for cl in clients:
        cl.ws.close()
    assert not errors, errors[:3]
    return dt
t_par_create = parallel("share.iscsi.create", "par")
assert len(call("iscsi.target.query", [[["name", "^", "par:"]]])) == n_many
t_par_delete = parallel("share.iscsi.delete", "par")
assert len(call("iscsi.target.query", [[["name", "^", "par:"]]])) == 0

# core.bulk: one call (one job) for all creates, one for all deletes
bulk = Client()
bulk.call("core.set_options", [{"legacy_jobs": False}])  # answer with the job's result
def run_bulk(method):
    t0 = time.perf_counter()
    res = bulk.call("core.bulk", [method, [[{"name": v, "target_prefix": "bulk"}] for v in many]])
    dt = time.perf_counter() - t0
    bad = [r for r in res if r["error"]]
    assert len(res) == n_many and not bad, bad[:3]
    return dt
t_bulk_create = run_bulk("share.iscsi.create")
t_bulk_delete = run_bulk("share.iscsi.delete")
bulk.ws.close()

# 4. disruption
call("pool.dataset.create", [{"name": "demo/a", "type": "VOLUME", "volsize": 1 << 30}])
create_cycle("demo/a")
iqn_a = BASE + ":bench:demo:a"
portal_a = "127.0.0.1:%s" % iscsi_port
subprocess.run([reader, portal_a, iqn_a, "3", "32"], capture_output=True, text=True)  # warm-up
cpu0 = cpu_by_role()
base = subprocess.run([reader, portal_a, iqn_a, "10", "32"], capture_output=True, text=True)
assert base.returncode == 0, base.stderr
cpu_base = cpu_by_role() - cpu0
p = subprocess.Popen([reader, portal_a, iqn_a, "0", "32"], stdout=subprocess.PIPE, text=True)
time.sleep(1.0)
cpu0 = cpu_by_role(p.pid)
t0 = time.perf_counter()
for v in many:
    create_cycle(v)
for v in many:
    delete_cycle(v)
t_churn = time.perf_counter() - t0
cpu_churn = cpu_by_role(p.pid) - cpu0
time.sleep(1.0)
p.send_signal(signal.SIGTERM)
churn_out = p.communicate()[0]
assert p.returncode == 0, churn_out
def parse(s):
    return dict(kv.split("=") for kv in s.split())
b, ch = parse(base.stdout), parse(churn_out)

# interleaved: blocks of 50 lifecycle steps, each followed by an equal pause
def interleaved(create_fn, delete_fn, client_idle=False):
    trace = tempfile.NamedTemporaryFile(prefix="blockd-bench-trace.", delete=False).name
    p = subprocess.Popen([reader, portal_a, iqn_a, "0", "32", trace], stdout=subprocess.PIPE,
                         text=True)
    # client_idle: this (client) process only, not the reader, runs as
    # SCHED_IDLE, as if the automation client ran on another machine: its
    # own CPU then no longer counts against target A.
    if client_idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    time.sleep(1.0)
    on, off = [], []
    blocks = [(create_fn, many[i:i + 50]) for i in range(0, n_many, 50)]
    blocks += [(delete_fn, many[i:i + 50]) for i in range(0, n_many, 50)]
    for fn, vols in blocks:
        t0 = time.monotonic()
        for v in vols:
            fn(v)
        t1 = time.monotonic()
        on.append((t0, t1))
        time.sleep(t1 - t0)
        off.append((t1, time.monotonic()))
    if client_idle:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    p.send_signal(signal.SIGTERM)
    out = p.communicate()[0]
    assert p.returncode == 0, out
    with open(trace) as f:
        fields = f.read().split()
    os.unlink(trace)
    T0, counts = float(fields[0]), [int(x) for x in fields[1:]]
    def rate(windows):
        reads, secs = 0, 0.0
        for a, z in windows:
            i = int((a - T0) / 0.01) + 1  # whole 10 ms buckets inside the window
            j = int((z - T0) / 0.01)
            if j > i:
                reads += sum(counts[i:j])
                secs += (j - i) * 0.01
        return reads / secs if secs else 0.0
    r = parse(out)
    return dict(on=rate(on), off=rate(off), on_s=sum(z - a for a, z in on),
                off_s=sum(z - a for a, z in off), gap=r["max_gap_ms"], errors=r["errors"])
inter_cycles = interleaved(create_cycle, delete_cycle)
inter_share = interleaved(
    lambda v: call("share.iscsi.create", [{"name": v, "target_prefix": "churn"}]),
    lambda v: call("share.iscsi.delete", [{"name": v, "target_prefix": "churn"}]))
inter_idle = interleaved(create_cycle, delete_cycle, client_idle=True)
# The floor of this measurement: the same number of WebSocket round trips
# as a create + delete cycle (11), each a core.ping that changes nothing.
# What A loses here is the client's and the transport's CPU, not a
# configuration change.
def pings(_v, n=0):
    for _ in range(n):
        call("core.ping", [])
inter_ping = interleaved(lambda v: pings(v, 8), lambda v: pings(v, 3))
INTER = (("TrueNAS cycles", inter_cycles), ("share.iscsi.create/delete", inter_share),
         ("TrueNAS cycles, bench client SCHED_IDLE", inter_idle),
         ("11 core.ping per share, no change (floor)", inter_ping))

print("## Share changes (ms)")
print()
print("| operation | n | median | p99 | target | vs TrueNAS (median) |")
print("|---|---:|---:|---:|---:|---:|")
for what, n, med, p99, target, ref in rows:
    print("| %s | %d | %.2f | %.2f | ≤ %d | %s |" % (what, n, med, p99, target,
          "%.0f× faster than %.1f s" % (ref / med, ref / 1000) if ref else ""))
print()
print("service.reload after %d deferred creates: %.2f ms; after %d deferred deletes: %.2f ms"
      % (n_cycles, reloads[0], n_cycles, reloads[1]))
print()
print("Per call, undeferred cycles (ms, client round trip):")
print()
print("| call | n | median | p99 |")
print("|---|---:|---:|---:|")
for m, ms in per_call.items():
    med, p99 = stats(ms)
    print("| %s | %d | %.3f | %.3f |" % (m, len(ms), med, p99))
print()
print("## %d shares" % n_many)
print()
print("| how | create all | delete all | total |")
print("|---|---:|---:|---:|")
print("| TrueNAS create/delete cycles over WebSocket | %.2f s | %.2f s | %.2f s |"
      % (t_create, t_delete, t_create + t_delete))
print("| share.iscsi.create/delete over WebSocket, one call at a time | %.2f s | %.2f s | %.2f s |"
      % (t_share_create, t_share_delete, t_share_create + t_share_delete))
print("| share.iscsi.create/delete over %d WebSocket connections at once | %.2f s | %.2f s | %.2f s |"
      % (n_conn, t_par_create, t_par_delete, t_par_create + t_par_delete))
print("| core.bulk share.iscsi.create/delete (two calls) | %.2f s | %.2f s | %.2f s |"
      % (t_bulk_create, t_bulk_delete, t_bulk_create + t_bulk_delete))
print()
print("target: 1,000 shares in ≤ 2 s")
print()
print("## Disruption: QD32 4 KiB random reads on target A")
print()
print("| | IOPS | longest gap between completions | errors |")
print("|---|---:|---:|---:|")
print("| alone, 10 s | %s | %s ms | %s |" % (b["iops"], b["max_gap_ms"], b["errors"]))
print("| while %d shares are created and deleted (%.1f s) | %s | %s ms | %s |"
      % (n_many, t_churn, ch["iops"], ch["max_gap_ms"], ch["errors"]))
for what, r in INTER:
    print("| interleaved %s: in the pauses (%.1f s) | %.0f | | |" % (what, r["off_s"], r["off"]))
    print("| interleaved %s: in the churn blocks (%.1f s) | %.0f | %s ms (whole run) | %s |"
          % (what, r["on_s"], r["on"], r["gap"], r["errors"]))
print()
print("CPU seconds used during the %.1f s churn (%d CPUs: %.1f s available):"
      % (t_churn, os.cpu_count(), t_churn * os.cpu_count()))
print()
print("| who | CPU s | per share (create + delete), ms |")
print("|---|---:|---:|")
for who in ("reader (initiator)", "blockd reactors", "blockd I/O pool", "blockd API and other",
            "bench client"):
    print("| %s | %.2f | %.2f |" % (who, cpu_churn[who], cpu_churn[who] * 1000 / n_many))
reactor_us_base = cpu_base["blockd reactors"] * 1e6 / (float(b["iops"]) * 10)
reactor_us_churn = cpu_churn["blockd reactors"] * 1e6 / (float(ch["iops"]) * t_churn)
print()
print("Reactor CPU per read of target A: %.2f us alone, %.2f us during the churn (what adopting"
      % (reactor_us_base, reactor_us_churn))
print("the new configuration generations costs the data path, plus cache effects).")
loss = 100.0 * (1 - float(ch["iops"]) / float(b["iops"]))
lost = (float(b["iops"]) - float(ch["iops"])) * t_churn / n_many
print()
print("IOPS lost under churn: %.1f%% (target < 10%%); longest gap %.1f ms (target < 50 ms);"
      % (loss, float(ch["max_gap_ms"])))
print("%.0f reads of A lost per share created and deleted" % lost)
for what, r in INTER:
    print("Interleaved, %s: %.1f%% fewer IOPS in the churn blocks than in the pauses between them"
          " (%.0f reads lost per share)"
          % (what, 100.0 * (1 - r["on"] / r["off"]) if r["off"] else 0.0,
             (r["off"] - r["on"]) * r["on_s"] / n_many))
PY
