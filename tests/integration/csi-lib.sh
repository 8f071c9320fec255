# Shared by t-csi-truenas.sh and t-csi-tns.sh (after lib.sh): a blockd
# serving the API over wss:// with a certtool-made certificate, an API
# key, iSCSI portal 1 and an open initiator group (what the drivers
# expect to find), and csi_replay to run a driver's replay (csireplay.py).
need /usr/bin/python3 certtool qemu-io iscsi-readcapacity16
/usr/bin/python3 -c 'import websocket' 2>/dev/null || fail "python3-websocket is not installed"

csi_cert() {
    cat >"$TMP/cert.cfg" <<CFG
cn = "localhost"
ip_address = "127.0.0.1"
expiration_days = 2
tls_www_server
encryption_key
signing_key
ca
cert_signing_key
CFG
    certtool --generate-privkey --key-type=ecdsa --outfile "$TMP/key.pem" 2>/dev/null ||
        fail "certtool could not make a key"
    certtool --generate-self-signed --load-privkey "$TMP/key.pem" --template "$TMP/cert.cfg" \
        --outfile "$TMP/cert.pem" 2>/dev/null || fail "certtool could not make a certificate"
}

# csi_start: blockd with the TLS API (WS_PORT kept across restarts).
csi_start() {
    WS_PORT=${WS_PORT:-$(free_port)}
    blockd_start --api-listen "127.0.0.1:$WS_PORT" --api-tls-cert "$TMP/cert.pem" \
        --api-tls-key "$TMP/key.pem"
}

# csi_setup: the certificate, the daemon, the key and the iSCSI basics.
csi_setup() {
    csi_cert
    csi_start
    export URL="wss://127.0.0.1:$WS_PORT/api/current" CA="$TMP/cert.pem" ISCSI_PORT
    KEY=$(blockctl call api_key.create '{"name":"csi"}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])') || fail "no API key"
    export KEY
    local portal
    portal=$(blockctl call iscsi.portal.create '{"listen":[{"ip":"127.0.0.1"}]}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
    [ "$portal" = 1 ] || fail "the first portal is not 1 (the drivers assume it): $portal"
    blockctl call iscsi.initiator.create '{"comment":"any"}' >/dev/null || fail "initiator group"
    BASE=$(blockctl call iscsi.global.config |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["basename"])')
    export BASE
}

# csi_replay DRIVER POOL [--snapshots-only]: one replay; its output on failure.
csi_replay() {
    local out
    out=$(POOL=$2 timeout 600 /usr/bin/python3 "$(dirname "$0")/csireplay.py" "$1" ${3:-} 2>&1) ||
        fail "$1 replay on pool $2: $out"
    grep -q "^OK " <<<"$out" || fail "$1 replay on pool $2 did not finish: $out"
}

# csi_rbd_pool NAME: an RBD pool of the test's Ceph cluster (ceph_start).
csi_rbd_pool() {
    blockctl call pool.create \
        "{\"name\":\"$1\",\"rbd\":{\"pool\":\"$CEPH_POOL\",\"mon_host\":\"$CEPH_MON_HOST\"}}" >/dev/null ||
        fail "cannot create the RBD pool $1"
}
