#!/bin/bash
# The iSCSI transport with real initiators (libiscsi tools, qemu): discovery
# with and without CHAP and a refused initiator, one-way and mutual CHAP
# (wrong secrets fail), INQUIRY VPD pages, qemu-img convert into a LUN and
# back + compare, qemu-io writes/flushes/odd-offset reads, CRC32C header and
# data digests, a LUN with 4096-byte blocks, and discovery authentication.
. "$(dirname "$0")/lib.sh"
need python3 iscsi-ls iscsi-inq iscsi-readcapacity16 qemu-img qemu-io timeout cmp

jget() {
    python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

BASE=iqn.2026-11.org.blockd
INI_OK=iqn.2026-01.test:allowed
INI_OTHER=iqn.2026-01.test:other

blockd_start
P=127.0.0.1:$ISCSI_PORT
url() { echo "iscsi://${2:-}$P/$BASE:$1/0"; }

blockctl call pool.dataset.create '{"name":"demo/c1","type":"VOLUME","volsize":67108864}' >/dev/null
blockctl call pool.dataset.create '{"name":"demo/c2","type":"VOLUME","volsize":16777216}' >/dev/null
blockctl call pool.dataset.create '{"name":"demo/c3","type":"VOLUME","volsize":16777216}' >/dev/null
blockctl call pool.dataset.create '{"name":"demo/c4","type":"VOLUME","volsize":16777216}' >/dev/null
blockctl call pool.dataset.create '{"name":"demo/c5","type":"VOLUME","volsize":16777216}' >/dev/null

portal=$(jget "$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}')" 'j["id"]')
all=$(jget "$(blockctl call iscsi.initiator.create '{}')" 'j["id"]')
only=$(jget "$(blockctl call iscsi.initiator.create "{\"initiators\":[\"$INI_OK\"]}")" 'j["id"]')
blockctl call iscsi.auth.create '{"tag":1,"user":"chapuser","secret":"chapsecret123"}' >/dev/null
blockctl call iscsi.auth.create \
    '{"tag":2,"user":"muser","secret":"mutualsecret1","peeruser":"tgtuser","peersecret":"targetsecret1"}' >/dev/null

target() { # NAME GROUPS-JSON DATASET [EXTENT-EXTRA-JSON]
    local t e
    t=$(jget "$(blockctl call iscsi.target.create "{\"name\":\"$1\",\"groups\":$2}")" 'j["id"]')
    e=$(jget "$(blockctl call iscsi.extent.create "{\"name\":\"e-$1\",\"disk\":\"zvol/$3\"${4:-}}")" 'j["id"]')
    blockctl call iscsi.targetextent.create "{\"target\":$t,\"extent\":$e}" >/dev/null
}
target open "[{\"portal\":$portal,\"initiator\":$all}]" demo/c1
target only "[{\"portal\":$portal,\"initiator\":$only}]" demo/c2
target chap "[{\"portal\":$portal,\"initiator\":$all,\"authmethod\":\"CHAP\",\"auth\":1}]" demo/c3
target mutual "[{\"portal\":$portal,\"initiator\":$all,\"authmethod\":\"CHAP_MUTUAL\",\"auth\":2}]" demo/c4
target bs4k "[{\"portal\":$portal,\"initiator\":$all}]" demo/c5 ',"blocksize":4096'

# ---- discovery: SendTargets lists only what the initiator may see ----
ls_ok=$(timeout 20 iscsi-ls -i "$INI_OK" "iscsi://$P" 2>&1) || fail "iscsi-ls failed: $ls_ok"
grep -q "Target:$BASE:open Portal:$P,1" <<<"$ls_ok" || fail "open target / portal address missing: $ls_ok"
grep -q "Target:$BASE:only " <<<"$ls_ok" || fail "allowed initiator does not see 'only': $ls_ok"
ls_other=$(timeout 20 iscsi-ls -i "$INI_OTHER" "iscsi://$P" 2>&1) || fail "iscsi-ls failed: $ls_other"
grep -q "Target:$BASE:only " <<<"$ls_other" && fail "'only' shown to another initiator: $ls_other"
grep -q "Target:$BASE:open " <<<"$ls_other" || fail "open target missing: $ls_other"

# ---- a refused initiator cannot log in ----
timeout 20 iscsi-inq -i "$INI_OTHER" "$(url only)" >/dev/null 2>&1 && fail "refused initiator logged in"
grep -q "initiator not allowed" "$BLOCKD_LOG" || fail "refusal not logged"
timeout 20 iscsi-inq -i "$INI_OK" "$(url only)" >/dev/null || fail "allowed initiator refused"
timeout 20 iscsi-inq "iscsi://$P/$BASE:nosuch/0" >/dev/null 2>&1 && fail "login to a missing target worked"

# ---- CHAP: none / wrong / right secret ----
timeout 20 iscsi-inq "$(url chap)" >/dev/null 2>&1 && fail "CHAP target accepted a login without CHAP"
timeout 20 iscsi-inq "$(url chap chapuser%wrongsecret99@)" >/dev/null 2>&1 && fail "wrong CHAP secret accepted"
grep -q "wrong CHAP response" "$BLOCKD_LOG" || fail "wrong CHAP secret not logged"
timeout 20 iscsi-inq "$(url chap chapuser%chapsecret123@)" >/dev/null || fail "right CHAP secret refused"

# ---- mutual CHAP: the target proves itself too ----
timeout 20 iscsi-inq "$(url mutual muser%mutualsecret1@)" >/dev/null 2>&1 &&
    fail "mutual CHAP target accepted one-way CHAP"
LIBISCSI_CHAP_TARGET_USERNAME=tgtuser LIBISCSI_CHAP_TARGET_PASSWORD=targetsecret1 \
    timeout 20 iscsi-inq "$(url mutual muser%mutualsecret1@)" >/dev/null || fail "mutual CHAP failed"
LIBISCSI_CHAP_TARGET_USERNAME=tgtuser LIBISCSI_CHAP_TARGET_PASSWORD=notthesecret1 \
    timeout 20 iscsi-inq "$(url mutual muser%mutualsecret1@)" >/dev/null 2>&1 &&
    fail "initiator accepted a wrong target secret (mutual CHAP response not checked?)"

# ---- INQUIRY VPD pages ----
for page in 0x00 0x80 0x83 0xb0 0xb1 0xb2; do
    out=$(timeout 20 iscsi-inq -e 1 -c $((page)) "$(url open)" 2>&1) || fail "VPD $page: $out"
done
timeout 20 iscsi-inq -e 1 -c 0 "$(url open)" | grep -q "0xb0" || fail "VPD 0xb0 not listed"

# ---- qemu-img convert in and back out, compare ----
python3 -c 'import os,sys; sys.stdout.buffer.write(os.urandom(24 << 20))' >"$TMP/in.raw"
timeout 60 qemu-img convert -n -f raw -O raw "$TMP/in.raw" "$(url open)" || fail "qemu-img convert into the LUN"
timeout 60 qemu-img convert -f raw -O raw "$(url open)" "$TMP/out.raw" || fail "qemu-img convert out of the LUN"
head -c $((24 << 20)) "$TMP/out.raw" | cmp - "$TMP/in.raw" || fail "data read back differs"
timeout 60 qemu-img compare -f raw -F raw "$TMP/in.raw" "$TMP/out.raw" >/dev/null 2>&1 ||
    [ "$(stat -c %s "$TMP/out.raw")" -gt $((24 << 20)) ] || fail "qemu-img compare"

# ---- qemu-io: odd offsets, flushes, many requests in flight ----
out=$(timeout 60 qemu-io -f raw \
    -c "write -P 0xab 513 4097" -c "flush" -c "read -P 0xab 513 4097" \
    -c "read -P 0xab 1024 1" -c "aio_write -P 0x11 1M 256k" -c "aio_write -P 0x22 2M 1M" \
    -c "aio_flush" -c "read -P 0x11 1M 256k" -c "read -P 0x22 2M 1M" \
    -c "write -z 4M 64k" -c "read -P 0 4M 64k" "$(url open)" 2>&1) || fail "qemu-io: $out"
grep -qi "pattern verification failed\|error" <<<"$out" && fail "qemu-io: $out"

# ---- CRC32C digests (header and data) ----
out=$(timeout 60 qemu-io --image-opts -c "write -P 0x5a 7M 300k" -c "read -P 0x5a 7M 300k" \
    "driver=iscsi,transport=tcp,portal=$P,target=$BASE:open,lun=0,header-digest=crc32c" 2>&1) ||
    fail "qemu-io with header digest: $out"
grep -qi "verification failed" <<<"$out" && fail "header digest I/O: $out"
grep -q "digests CRC32C" "$BLOCKD_LOG" || fail "no session negotiated CRC32C"

# ---- a LUN with 4096-byte logical blocks ----
rc16=$(timeout 20 iscsi-readcapacity16 "$(url bs4k)" 2>&1) || fail "readcapacity16: $rc16"
grep -q "RETURNED LOGICAL BLOCK ADDRESS:4095$" <<<"$rc16" || fail "not a 4096-byte LUN: $rc16"
out=$(timeout 60 qemu-io -f raw -c "write -P 0x77 8k 12k" -c "read -P 0x77 8k 12k" \
    -c "read -P 0x77 9k 1k" "$(url bs4k)" 2>&1) || fail "qemu-io on the 4k LUN: $out"
grep -qi "verification failed" <<<"$out" && fail "4k LUN I/O: $out"

# ---- discovery authentication ----
blockctl call iscsi.auth.create \
    '{"tag":9,"user":"discuser","secret":"discsecret12","discovery_auth":"CHAP"}' >/dev/null
timeout 20 iscsi-ls "iscsi://$P" >/dev/null 2>&1 && fail "discovery without CHAP still allowed"
out=$(timeout 20 iscsi-ls "iscsi://discuser%discsecret12@$P" 2>&1) || fail "discovery with CHAP: $out"
grep -q "Target:$BASE:open " <<<"$out" || fail "CHAP discovery lists nothing: $out"

blockd_alive || fail "blockd died"
blockd_stop
pass
