#!/bin/bash
# Share churn, two builds side by side (a "within noise" check of
# bench/control.sh's share rows, without its 12 minutes per run): for each
# build in turn, REPS rounds alternating A B A B ..., each round a fresh
# daemon, N pool.dataset.create (1 MiB volumes), then N share.iscsi.create and N share.iscsi.delete
# over one WebSocket, one call at a time (what a CSI driver does), then the
# same N creates as one core.bulk call. Prints each round and the medians,
# and B/A. The daemon's state is on /tmp (the disk: every share is one
# commit and one fdatasync, as in production).
#
#   flock /tmp/blockd-bench.lock bash bench/share_churn.sh [BUILD_A BUILD_B [REPS] [N]]
#
# Without builds (make bench) both are ./build: this build's figures, and
# B/A shows the run-to-run noise a comparison has to beat.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
A=${1:-$root/build}
B=${2:-$root/build}
REPS=${3:-3}
N=${4:-1000}
PY=/usr/bin/python3
$PY -c 'import websocket' || { echo "python3-websocket is required" >&2; exit 1; }
for b in "$A" "$B"; do
    [ -x "$b/src/daemon/blockd" ] && [ -x "$b/src/cli/blockctl" ] ||
        { echo "missing $b/src/daemon/blockd or blockctl" >&2; exit 1; }
done
port() { "$root/scripts/free-port"; }

# one_round BUILD: prints "volume_s create_s delete_s bulk_s"
one_round() {
    local build=$1 tmp ws pid key
    tmp=$(mktemp -d /tmp/blockd-bench-churn.XXXXXX)
    ws=$(port)
    "$build/src/daemon/blockd" --state-dir "$tmp/state" --log-level warn \
        --nbd-listen "127.0.0.1:$(port)" --iscsi-listen "127.0.0.1:$(port)" \
        --api-listen "127.0.0.1:$ws" >"$tmp/blockd.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do [ -S "$tmp/state/blockd.sock" ] && break; sleep 0.1; done
    key=$("$build/src/cli/blockctl" --socket "$tmp/state/blockd.sock" call api_key.create \
        '{"name":"bench"}' | $PY -c 'import json,sys; print(json.load(sys.stdin)["key"])')
    $PY - "$ws" "$key" "$N" <<'PY' || { kill $pid; rm -rf "$tmp"; return 1; }
import json, sys, time
import websocket
ws_port, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ws = websocket.create_connection("ws://127.0.0.1:%s/api/current" % ws_port, timeout=300,
                                 skip_utf8_validation=True)
ws.sock.setsockopt(6, 1, 1)
seq = 0
def call(method, params):
    global seq
    seq += 1
    ws.send(json.dumps({"jsonrpc": "2.0", "id": seq, "method": method, "params": params}))
    while True:
        r = json.loads(ws.recv())
        if r.get("id") == seq:
            if "error" in r:
                raise SystemExit("%s: %s" % (method, r["error"]))
            return r["result"]
assert call("auth.login_with_api_key", [key]) is True
call("core.set_options", [{"legacy_jobs": False}])  # core.bulk answers with its results
vols = ["demo/c%d" % i for i in range(n)]
tv = time.perf_counter()
for v in vols:
    call("pool.dataset.create", [{"name": v, "type": "VOLUME", "volsize": 1048576}])
t0 = time.perf_counter()
for v in vols:
    call("share.iscsi.create", [{"name": v, "target_prefix": "one"}])
t1 = time.perf_counter()
for v in vols:
    call("share.iscsi.delete", [{"name": v, "target_prefix": "one"}])
t2 = time.perf_counter()
res = call("core.bulk", ["share.iscsi.create", [[{"name": v, "target_prefix": "bulk"}] for v in vols]])
t3 = time.perf_counter()
bad = [r for r in res if r["error"]]
assert len(res) == n and not bad, bad[:3]
print("%.3f %.3f %.3f %.3f" % (t0 - tv, t1 - t0, t2 - t1, t3 - t2))
PY
    kill $pid
    wait $pid 2>/dev/null || true
    rm -rf "$tmp"
}

echo "# share churn: $N shares, $REPS rounds per build, alternating ($(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs)"
echo "# A=$A ($(git -C "$A/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
echo "# B=$B ($(git -C "$B/.." rev-parse --short HEAD 2>/dev/null || echo ?))"
printf '%-6s %-5s %10s %10s %10s %10s\n' round build volume_s create_s delete_s bulk_s
: >/tmp/blockd-churn.$$
for r in $(seq 1 "$REPS"); do
    for which in A B; do
        build=$A
        [ "$which" = B ] && build=$B
        out=$(one_round "$build")
        printf '%-6s %-5s %10s %10s %10s %10s\n' "$r" "$which" $out
        echo "$which $out" >>/tmp/blockd-churn.$$
    done
done
$PY - /tmp/blockd-churn.$$ <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for b in "AB":
    cols = list(zip(*[[float(x) for x in r[1:]] for r in rows if r[0] == b]))
    med[b] = [statistics.median(c) for c in cols]
    print("median %s  volume create %.3f s  share create %.3f s  delete %.3f s  bulk create %.3f s"
          % (b, *med[b]))
print("B/A     volume create %.2f  share create %.2f  delete %.2f  bulk create %.2f" %
      tuple(med["B"][i] / med["A"][i] for i in range(4)))
PY
rm -f /tmp/blockd-churn.$$
