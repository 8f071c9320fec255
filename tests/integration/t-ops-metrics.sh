#!/bin/bash
# slow: run.sh starts it first (30 s or more)
# Prometheus metrics on the API listener (GET /metrics), scraped by the real
# Prometheus server (Debian's prometheus package):
#  - 401 without an API key or with a wrong one, 200 with "Authorization:
#    Bearer <key>"; Prometheus scrapes with the key (credentials_file);
#  - NBD writes and iSCSI reads on demo/m1, nothing on demo/m2: through
#    Prometheus's HTTP API, rate(...) of the bytes is non-zero for the
#    volume and protocol that did the I/O and zero for the others;
#  - the latency histogram: buckets from 16 µs to 10 s, _count equal to
#    the ops counter, a median between 0 and 10 s through histogram_quantile;
#  - sessions per export with the peer address, pool capacity, API calls by
#    method, process_* metrics.
. "$(dirname "$0")/lib.sh"
need prometheus curl qemu-io python3

WS_PORT=$(free_port)
blockd_start --api-listen "127.0.0.1:$WS_PORT"
M="http://127.0.0.1:$WS_PORT/metrics"

KEY=$(blockctl call api_key.create '{"name":"prom"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
for v in m1 m2; do
    blockctl volume create demo/$v --size 64M >/dev/null
    blockctl share nbd create demo/$v --name $v >/dev/null
done
blockctl share iscsi create demo/m1 >/dev/null
IQN=iqn.2026-11.org.blockd:demo:m1 # the default prefix + the dataset path

# API-key protection.
code=$(curl -s -o "$TMP/noauth" -w '%{http_code}' "$M")
[ "$code" = 401 ] || fail "/metrics without a key: HTTP $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer 1-wrongwrongwrong" "$M")
[ "$code" = 401 ] || fail "/metrics with a wrong key: HTTP $code"
grep -q "invalid API key" "$BLOCKD_LOG" || fail "the refused key is not logged"
code=$(curl -s -o "$TMP/m0" -w '%{http_code}' -H "Authorization: Bearer $KEY" "$M")
[ "$code" = 200 ] || fail "/metrics with the key: HTTP $code"
for m in process_cpu_seconds_total process_resident_memory_bytes process_open_fds \
    'blockd_pool_size_bytes{pool="demo"}' 'blockd_pool_free_bytes{pool="demo"}' \
    blockd_config_generation blockd_config_last_apply_timestamp_seconds \
    'blockd_api_calls_total{method="api_key.create"}' \
    'blockd_volume_read_ops_total{volume="demo/m1",protocol="iscsi"}'; do
    grep -qF "$m " "$TMP/m0" || fail "missing metric $m"
done

# Prometheus, scraping every second with the key.
printf '%s' "$KEY" >"$TMP/key"
P_PORT=$(free_port)
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: blockd
    authorization:
      type: Bearer
      credentials_file: $TMP/key
    static_configs:
      - targets: ['127.0.0.1:$WS_PORT']
YML
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/prom" \
    --web.listen-address="127.0.0.1:$P_PORT" >"$TMP/prometheus.log" 2>&1 &
BG_PIDS+=($!)
P="http://127.0.0.1:$P_PORT"
query() { # prints the first result's value, or "none"
    curl -s --get "$P/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "success", r
res = r["data"]["result"]
print(res[0]["value"][1] if res else "none")'
}
# Prometheus starts, then scrapes every second: on a loaded machine its
# start alone has taken 8 s, so wait up to 2 minutes for the first scrape.
deadline=$((SECONDS + 120))
while [ "$SECONDS" -lt "$deadline" ]; do
    [ "$(query 'up{job="blockd"}' 2>/dev/null)" = 1 ] && break
    sleep 0.2
done
[ "$(query 'up{job="blockd"}')" = 1 ] || { cat "$TMP/prometheus.log" >&2; fail "prometheus does not scrape blockd"; }

# An idle client on m2 (its series exist, at zero), then I/O on m1 for ~6 s.
qemu-io -f raw -c 'sleep 600000' "nbd://127.0.0.1:$NBD_PORT/m2" >"$TMP/idle.log" 2>&1 &
IDLE=$!
BG_PIDS+=($IDLE)
for i in $(seq 1 12); do
    args=()
    for j in $(seq 0 15); do args+=(-c "write -P $i $((j * 1048576)) 1M"); done
    qemu-io -f raw "${args[@]}" -c flush "nbd://127.0.0.1:$NBD_PORT/m1" >/dev/null ||
        fail "qemu-io write over NBD failed"
    qemu-io -f raw -c 'read 0 4M' "iscsi://127.0.0.1:$ISCSI_PORT/$IQN/0" >/dev/null ||
        fail "qemu-io read over iSCSI failed"
    sleep 0.5
done
sleep 2.5 # at least two scrapes after the last request

curl -s -H "Authorization: Bearer $KEY" "$M" >"$TMP/m1"
grep -q 'blockd_sessions{protocol="nbd",target="m2",peer="127.0.0.1"} 1' "$TMP/m1" ||
    fail "no NBD session counted for m2 from 127.0.0.1: $(grep blockd_sessions "$TMP/m1")"

nz() { # query → value, asserted > 0
    local v
    v=$(query "$1")
    python3 -c "import sys; sys.exit(0 if '$v' != 'none' and float('$v') > 0 else 1)" ||
        fail "expected a non-zero value for $1, got $v"
}
zero() { # query → value, asserted == 0 (the series exists)
    local v
    v=$(query "$1")
    [ "$v" = 0 ] || fail "expected 0 for $1, got $v"
}
W='volume="demo/m1",protocol="nbd"'
I='volume="demo/m1",protocol="iscsi"'
nz "rate(blockd_volume_write_bytes_total{$W}[2m])"
nz "rate(blockd_volume_write_ops_total{$W}[2m])"
nz "rate(blockd_volume_flush_ops_total{$W}[2m])"
nz "rate(blockd_volume_read_bytes_total{$I}[2m])"
zero "rate(blockd_volume_write_bytes_total{$I}[2m])"
zero "rate(blockd_volume_read_bytes_total{volume=\"demo/m2\",protocol=\"nbd\"}[2m])"
zero "rate(blockd_volume_write_bytes_total{volume=\"demo/m2\",protocol=\"nbd\"}[2m])"
zero "blockd_volume_write_errors_total{$W}"
# 12 rounds of 16 writes of 1 MiB.
[ "$(query "blockd_volume_write_bytes_total{$W}")" = $((12 * 16 * 1048576)) ] ||
    fail "write bytes: $(query "blockd_volume_write_bytes_total{$W}")"
[ "$(query "blockd_volume_write_ops_total{$W}")" = 192 ] ||
    fail "write ops: $(query "blockd_volume_write_ops_total{$W}")"

# Histogram: 22 buckets (16 µs … 8.39 s, 10 s, +Inf), count == ops.
[ "$(grep -c "^blockd_volume_write_seconds_bucket{$W," "$TMP/m1")" = 22 ] ||
    fail "write histogram buckets: $(grep -c "^blockd_volume_write_seconds_bucket{$W," "$TMP/m1")"
grep -q "^blockd_volume_write_seconds_bucket{$W,le=\"1.6e-05\"} " "$TMP/m1" || fail "no 16 µs bucket"
grep -q "^blockd_volume_write_seconds_bucket{$W,le=\"10\"} " "$TMP/m1" || fail "no 10 s bucket"
[ "$(query "blockd_volume_write_seconds_count{$W}")" = 192 ] || fail "histogram count != ops"
nz "blockd_volume_write_seconds_sum{$W}"
med=$(query "histogram_quantile(0.5, rate(blockd_volume_write_seconds_bucket{$W}[2m]))")
python3 -c "import sys; sys.exit(0 if 0 < float('$med') < 10 else 1)" ||
    fail "median write latency $med"
zero "blockd_volume_inflight_requests{$W}"
nz 'blockd_api_calls_total{method="api_key.create"}'

kill "$IDLE" 2>/dev/null || true
pass "prometheus saw NBD writes ($(query "rate(blockd_volume_write_bytes_total{$W}[2m])") B/s), iSCSI reads, none on m2; median write latency ${med}s"
