#!/usr/bin/env bash
# NBD over TLS: X.509 (with client-certificate verification against a CA) and
# PSK (username:hexkey file), nbdinfo and nbdcopy over nbds://; plaintext
# refused with NBD_REP_ERR_TLS_REQD when tls=require; a wrong PSK and a
# client without a certificate refused; tls=off refuses TLS sessions.
. "$(dirname "$0")/lib.sh"
need certtool nbdinfo nbdcopy python3 md5sum
# --allow-dir: the API may name the TLS files in $TMP/pki (docs/security.md).
mkdir -p "$TMP/pki"
blockd_start --allow-dir "$TMP/pki"

pki=$TMP/pki
mkdir -p "$pki/client" "$pki/nocert"
cat >"$pki/ca.info" <<'T'
cn = blockd test CA
ca
cert_signing_key
expiration_days = 2
T
cat >"$pki/server.info" <<'T'
organization = blockd test
cn = localhost
dns_name = localhost
ip_address = 127.0.0.1
tls_www_server
encryption_key
signing_key
expiration_days = 2
T
cat >"$pki/client.info" <<'T'
organization = blockd test
cn = client
tls_www_client
encryption_key
signing_key
expiration_days = 2
T
q() { "$@" >/dev/null 2>&1 || fail "certtool: $*"; }
q certtool --generate-privkey --outfile "$pki/ca-key.pem"
q certtool --generate-self-signed --load-privkey "$pki/ca-key.pem" --template "$pki/ca.info" --outfile "$pki/ca-cert.pem"
q certtool --generate-privkey --outfile "$pki/server-key.pem"
q certtool --generate-certificate --load-ca-certificate "$pki/ca-cert.pem" --load-ca-privkey "$pki/ca-key.pem" \
    --load-privkey "$pki/server-key.pem" --template "$pki/server.info" --outfile "$pki/server-cert.pem"
q certtool --generate-privkey --outfile "$pki/client/client-key.pem"
q certtool --generate-certificate --load-ca-certificate "$pki/ca-cert.pem" --load-ca-privkey "$pki/ca-key.pem" \
    --load-privkey "$pki/client/client-key.pem" --template "$pki/client.info" --outfile "$pki/client/client-cert.pem"
cp "$pki/ca-cert.pem" "$pki/client/"
cp "$pki/ca-cert.pem" "$pki/nocert/"
echo "alice:$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$pki/keys.psk"
echo "alice:00112233445566778899aabbccddeeff" >"$pki/wrong.psk"

blockctl volume create demo/sec --size 16M >/dev/null || fail "volume create"
uri=$(blockctl share nbd create demo/sec --name sec --tls require) || fail "share create"
[ "$uri" = "nbds://127.0.0.1:$NBD_PORT/sec" ] || fail "create printed '$uri'"
head -c $((16 << 20)) /dev/urandom >"$TMP/data.img"

# Without credentials configured, STARTTLS is unsupported and the export unreachable.
if nbdinfo "nbd://127.0.0.1:$NBD_PORT/sec" >/dev/null 2>&1; then fail "plaintext served (no creds)"; fi

# --- X.509 with client certificates verified against the CA
blockctl call nbd.global.update "[{\"tls_cert\": \"$pki/server-cert.pem\", \"tls_key\": \"$pki/server-key.pem\",
    \"tls_ca\": \"$pki/ca-cert.pem\", \"tls_verify_peer\": true}]" >/dev/null || fail "global update x509"
X="nbds://localhost:$NBD_PORT/sec?tls-certificates=$pki/client"
nbdinfo "$X" >"$TMP/info" 2>&1 || fail "nbdinfo x509: $(cat "$TMP/info")"
grep -q "with TLS" "$TMP/info" || fail "not TLS: $(cat "$TMP/info")"
nbdcopy "$TMP/data.img" "$X" || fail "nbdcopy in over TLS"
nbdcopy --connections=2 "$X" "$TMP/back.img" || fail "nbdcopy out over TLS"
[ "$(md5sum <"$TMP/back.img")" = "$(md5sum <"$TMP/data.img")" ] || fail "TLS copy checksum"
if nbdinfo "nbds://localhost:$NBD_PORT/sec?tls-certificates=$pki/nocert" >/dev/null 2>&1; then
    fail "client without a certificate accepted"
fi

# Plaintext under tls=require: NBD_REP_ERR_TLS_REQD for GO/INFO, export hidden from LIST.
python3 - "$NBD_PORT" <<'PY' || fail "plaintext not refused with ERR_TLS_REQD"
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
def recvn(n):
    b = b""
    while len(b) < n:
        d = s.recv(n - len(b)); assert d, "EOF"; b += d
    return b
assert recvn(18)[:8] == b"NBDMAGIC"
s.sendall(struct.pack(">I", 3))
def opt(o, data=b""):
    s.sendall(b"IHAVEOPT" + struct.pack(">II", o, len(data)) + data)
    replies = []
    while True:
        magic, ro, rtype, ln = struct.unpack(">QIII", recvn(20))
        body = recvn(ln)
        replies.append((rtype, body))
        if rtype != 2 and rtype != 3 and rtype != 4:
            return replies
name = b"sec"
r = opt(7, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
assert r[-1][0] == 0x80000005, hex(r[-1][0])
r = opt(6, struct.pack(">I", len(name)) + name + struct.pack(">H", 0))
assert r[-1][0] == 0x80000005, hex(r[-1][0])
r = opt(3)
assert all(b"sec" not in body for t, body in r), r
PY

# --- PSK
blockctl call nbd.global.update "[{\"tls_cert\": \"\", \"tls_key\": \"\", \"tls_ca\": \"\",
    \"tls_psk_file\": \"$pki/keys.psk\"}]" >/dev/null || fail "global update psk"
P="nbds://alice@localhost:$NBD_PORT/sec?tls-psk-file=$pki/keys.psk"
nbdinfo "$P" >"$TMP/info" 2>&1 || fail "nbdinfo psk: $(cat "$TMP/info")"
grep -q "with TLS" "$TMP/info" || fail "psk not TLS"
nbdcopy "$P" "$TMP/back2.img" || fail "nbdcopy psk"
[ "$(md5sum <"$TMP/back2.img")" = "$(md5sum <"$TMP/data.img")" ] || fail "PSK copy checksum"
if nbdinfo "nbds://alice@localhost:$NBD_PORT/sec?tls-psk-file=$pki/wrong.psk" >/dev/null 2>&1; then
    fail "wrong PSK accepted"
fi
if nbdinfo "nbds://bob@localhost:$NBD_PORT/sec?tls-psk-file=$pki/keys.psk" >/dev/null 2>&1; then
    fail "unknown PSK user accepted"
fi

# tls=allow: both plaintext and TLS; tls=off: TLS sessions refused.
id=$(blockctl call nbd.export.query '[[["name","=","sec"]], {"get": true}]' | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
blockctl call nbd.export.update "[$id, {\"tls\": \"allow\"}]" >/dev/null || fail "tls allow"
nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/sec" >/dev/null || fail "plaintext under allow"
nbdinfo --size "$P" >/dev/null || fail "TLS under allow"
blockctl call nbd.export.update "[$id, {\"tls\": \"off\"}]" >/dev/null || fail "tls off"
nbdinfo --size "nbd://127.0.0.1:$NBD_PORT/sec" >/dev/null || fail "plaintext under off"
if nbdinfo --size "$P" >/dev/null 2>&1; then fail "TLS session served under tls=off"; fi

# A bad credential file is refused by the API and leaves TLS working.
echo "garbage" >"$pki/bad.psk"
if blockctl call nbd.global.update "[{\"tls_psk_file\": \"$pki/bad.psk\"}]" >/dev/null 2>&1; then
    fail "bad PSK file accepted"
fi
blockctl call nbd.export.update "[$id, {\"tls\": \"require\"}]" >/dev/null || fail "tls require"
nbdinfo --size "$P" >/dev/null || fail "TLS broken after a refused update"

blockd_stop
pass
