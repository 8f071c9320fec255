#!/bin/bash
# blockctl share iscsi create/delete/list and session list, the
# one-transaction share.iscsi.* API behind them, and the service.* calls:
#  - target names from prefix + dataset path (lowercase, : . _ → -, / @ → :,
#    hashed when over 64 characters); a default portal and an allow-all
#    group are created on first use; discoverable at once (iscsi-ls);
#  - a share that fails (missing volume) leaves nothing behind, not even
#    the default portal/group it would have created;
#  - --readonly extents; re-creating is idempotent;
#  - session list shows a live qemu-io session over iSCSI and one over NBD,
#    each with its peer, target/export, parameters and the bytes it moved;
#    delete refuses while the iSCSI one is logged in and --force closes it;
#  - --defer: committed and listed, discoverable only after service.reload;
#  - service.stop/start iscsitarget closes and reopens the listener.
. "$(dirname "$0")/lib.sh"
need python3 iscsi-ls qemu-io

BASE=iqn.2026-11.org.blockd
discover() {
    iscsi-ls "iscsi://127.0.0.1:$ISCSI_PORT" 2>&1 | sed -n 's/^Target:\([^ ]*\).*/\1/p'
}
count() {
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' <<<"$(blockctl call "$1")"
}

blockd_start
for v in a My_Vol.x ro; do
    blockctl call pool.dataset.create "{\"name\":\"demo/$v\",\"type\":\"VOLUME\",\"volsize\":8388608}" \
        >/dev/null
done
long=demo/$(printf 'v%.0s' $(seq 1 70))
blockctl call pool.dataset.create "{\"name\":\"$long\",\"type\":\"VOLUME\",\"volsize\":4194304}" \
    >/dev/null

# A failing share leaves nothing behind (first use: portal and group too).
rc=0
out=$(blockctl share iscsi create demo/missing 2>&1) || rc=$?
[ "$rc" = 1 ] || fail "share of a missing volume: exit $rc ($out)"
[ "$(count iscsi.target.query)" = 0 ] || fail "a target was left behind"
[ "$(count iscsi.portal.query)" = 0 ] || fail "a portal was left behind"
[ "$(count iscsi.initiator.query)" = 0 ] || fail "an initiator group was left behind"
[ "$(count iscsi.extent.query)" = 0 ] || fail "an extent was left behind"
# nor the listener of the rolled-back default portal (0.0.0.0)
python3 -c 'import socket,sys; socket.create_connection(("127.0.0.5", int(sys.argv[1])), timeout=5)' \
    "$ISCSI_PORT" 2>/dev/null && fail "the rolled-back default portal still listens"

out=$(blockctl share iscsi create --target-prefix incus demo/a demo/My_Vol.x "$long")
[ "$(printf 'created\tdemo/a\ncreated\tdemo/My_Vol.x\ncreated\t%s' "$long")" = "$out" ] ||
    fail "create output: $out"
d=$(discover)
grep -qx "$BASE:incus:demo:a" <<<"$d" || fail "incus:demo:a not discoverable: $d"
grep -qx "$BASE:incus:demo:my-vol-x" <<<"$d" || fail "name conversion: $d"
hashed=$(echo "$d" | grep "$BASE:incus:-:" || true)
[ -n "$hashed" ] || fail "long name not hashed: $d"
[ ${#hashed} -le $((${#BASE} + 1 + 64)) ] || fail "hashed name too long: $hashed"
[ "$(count iscsi.portal.query)" = 1 ] || fail "default portal not created once"
[ "$(count iscsi.initiator.query)" = 1 ] || fail "allow-all group not created once"
# idempotent
blockctl share iscsi create --target-prefix incus demo/a >/dev/null || fail "re-create failed"
[ "$(count iscsi.target.query)" = 3 ] || fail "re-create made another target"

blockctl share iscsi create --readonly --target-prefix incus demo/ro >/dev/null
blockctl share iscsi list | grep -E '^demo/ro +0 +yes +'"$BASE:incus:demo:ro" >/dev/null ||
    fail "read-only share not listed as such: $(blockctl share iscsi list)"
out=$(qemu-io -f raw -c 'write 0 4k' "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:incus:demo:ro/0" 2>&1) || true
grep -qi "failed\|error\|read-only\|protect" <<<"$out" || fail "write to a read-only share worked: $out"

# Live sessions (kept open for up to 60 s: a loaded machine may take many
# seconds to list them; the test kills them when done): listed with what they
# moved; iSCSI's protects the share
# from a plain delete.
blockctl share nbd create demo/My_Vol.x --name sess >/dev/null
qemu-io -f raw -c 'write -P 0x5a 0 64k' -c 'read 0 1M' -c 'sleep 60000' \
    "iscsi://127.0.0.1:$ISCSI_PORT/$BASE:incus:demo:a/0" >"$TMP/qio.log" 2>&1 &
qio=$!
qemu-io -f raw -c 'write -P 0xa5 0 128k' -c 'read 0 2M' -c 'sleep 60000' \
    "nbd://127.0.0.1:$NBD_PORT/sess" >"$TMP/qio-nbd.log" 2>&1 &
qnbd=$!
BG_PIDS+=("$qio" "$qnbd")
# rows: "proto peer name read written count", once both have read
rows() {
    blockctl --json session list | python3 -c '
import json, sys
j = json.load(sys.stdin)
for r in j["iscsi"]:
    print("iscsi", r["initiator_addr"], r["target"], r["bytes_read"], r["bytes_written"], r["commands"])
for r in j["nbd"]:
    print("nbd", r["peer"], r["export"] or "-", r["bytes_read"], r["bytes_written"], r["requests"],
          r["state"], r["structured_replies"])'
}
# Wait until both clients' reads are complete in the counters (a reply is
# counted chunk by chunk as it is sent: a row can show part of a read).
for i in $(seq 1 100); do
    r=$(rows)
    echo "$r" | awk '$1 == "iscsi" && $4 >= 1048576 {i = 1} $1 == "nbd" && $4 >= 2097152 {n = 1}
        END {exit !(i && n)}' && break
    sleep 0.1
done
echo "$r" | grep -E "^iscsi 127\.0\.0\.1:[0-9]+ $BASE:incus:demo:a " >/dev/null ||
    fail "iSCSI session not listed: $r"
read -r _ _ _ ird iwr icmd <<<"$(echo "$r" | grep '^iscsi ')"
[ "$ird" -ge 1048576 ] && [ "$iwr" = 65536 ] && [ "$icmd" -ge 2 ] ||
    fail "iSCSI session counters: read $ird written $iwr commands $icmd"
read -r _ npeer nexp nrd nwr nreq nstate nsr <<<"$(echo "$r" | grep '^nbd ')"
[[ $npeer == 127.0.0.1:* ]] && [ "$nexp" = sess ] && [ "$nstate" = transmission ] &&
    [ "$nsr" = True ] || fail "NBD connection row: $r"
[ "$nrd" -ge 2097152 ] && [ "$nwr" = 131072 ] && [ "$nreq" -ge 2 ] ||
    fail "NBD connection counters: read $nrd written $nwr requests $nreq"
sess=$(blockctl session list)
echo "$sess" | grep -E "^iscsi .*$BASE:incus:demo:a" >/dev/null || fail "session not listed: $sess"
echo "$sess" | grep -E "^nbd +127\.0\.0\.1:[0-9]+ +sess +2\.0 MiB +128\.0 KiB +[0-9]+ +transmission" >/dev/null ||
    fail "NBD connection not in the table: $sess"
kill $qnbd 2>/dev/null || true
wait $qnbd 2>/dev/null || true
rc=0
out=$(blockctl share iscsi delete --target-prefix incus demo/a 2>&1) || rc=$?
[ "$rc" = 1 ] && grep -q "in use" <<<"$out" || fail "delete with a session: exit $rc: $out"
out=$(blockctl share iscsi delete --force --target-prefix incus demo/a)
[ "$out" = "$(printf 'deleted\tdemo/a')" ] || fail "forced delete: $out"
# The session is closed (qemu-io's libiscsi then retries a login that the
# deleted target refuses, so it is stopped here).
for i in $(seq 1 50); do
    blockctl session list | grep -q "incus:demo:a" || break
    sleep 0.1
done
blockctl session list | grep -q "incus:demo:a" && fail "forced delete left the session open"
kill $qio 2>/dev/null || true
wait $qio 2>/dev/null || true
discover | grep -q "incus:demo:a$" && fail "deleted target still discoverable"
blockctl share iscsi list | grep -q "^demo/a " && fail "deleted share still listed"
[ "$(count iscsi.extent.query)" = 3 ] || fail "extent of the deleted share left behind"

# Deferred: committed and listed at once, served after service.reload.
blockctl share iscsi create --defer --target-prefix late demo/a >/dev/null
blockctl share iscsi list | grep -q "$BASE:late:demo:a" || fail "deferred share not listed"
discover | grep -q "late:demo:a" && fail "deferred share served before reload"
[ "$(blockctl call service.reload '["iscsitarget", {}]')" = true ] || fail "reload failed"
discover | grep -q "late:demo:a" || fail "deferred share not served after reload"

# service stop/start
[ "$(blockctl call service.started '["iscsitarget"]')" = true ] || fail "not started"
blockctl call service.stop '["iscsitarget"]' >/dev/null
[ "$(blockctl call service.started '["iscsitarget"]')" = false ] || fail "still started"
discover | grep -q "late:demo:a" && fail "stopped service still answers discovery"
blockctl call service.query | grep -q STOPPED || fail "service.query does not say STOPPED"
blockctl call service.start '["iscsitarget"]' >/dev/null
discover | grep -q "late:demo:a" || fail "restarted service does not serve the share"
blockctl call service.restart '["nbd"]' >/dev/null
[ "$(blockctl call service.started '["nbd"]')" = true ] || fail "nbd not running after restart"
rc=0
blockctl call service.start '["nosuch"]' >/dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "unknown service accepted"

# Everything survives a restart.
blockd_stop
blockd_start
discover | grep -q "late:demo:a" || fail "share lost on restart"
blockctl share iscsi delete --target-prefix late demo/a | grep -q "^deleted" || fail "delete after restart"
blockd_stop
pass
