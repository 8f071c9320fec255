/*
 * TLS for core connections (GnuTLS): a struct conn_transport that encrypts a
 * conn's byte stream after a protocol's STARTTLS. Server side only.
 *
 * Credentials: X.509 (certificate + key, and optionally a CA to verify client
 * certificates against) and/or PSK from a file in the nbdkit/libnbd format:
 * one "username:hexkey" per line. Credentials are immutable and refcounted, so
 * a reload builds new ones while sessions keep the old.
 *
 * The handshake is non-blocking: tls_conn_start() switches the transport, and
 * the handshake then advances inside the transport's recv as input arrives
 * (recv returns -EAGAIN until it is done and application data is readable).
 */
#ifndef BLOCKD_CORE_TLS_H
#define BLOCKD_CORE_TLS_H

#include <stdbool.h>
#include <stddef.h>

struct conn;
struct tls_creds;

struct tls_config {
    const char *cert_file; /* PEM; NULL/"" for none */
    const char *key_file;
    const char *ca_file;  /* verify client certificates against this CA */
    bool verify_peer;     /* with ca_file: require a valid client certificate */
    const char *psk_file; /* "username:hexkey" lines; NULL/"" for none */
};

/* Load credentials. Thread: any (reads files; blocking). 0, -ENOENT (nothing
 * configured), -EINVAL / -errno (logged with the file name). */
int tls_creds_new(const struct tls_config *cfg, struct tls_creds **out);
void tls_creds_ref(struct tls_creds *cr);
void tls_creds_unref(struct tls_creds *cr);
bool tls_creds_has_x509(const struct tls_creds *cr);
bool tls_creds_has_psk(const struct tls_creds *cr);

/* Parse one PSK file line ("user:hex"). Writes the key (binary) into key and
 * its length into *keylen; user points into line. 0, 1 for blank/comment, or
 * -EINVAL. Exposed for unit tests. */
int tls_psk_parse_line(const char *line, size_t len, const char **user, size_t *userlen,
                       unsigned char *key, size_t keymax, size_t *keylen);

/* Switch c to TLS (server side). Everything queued must already be written
 * (conn_flush_now) and no plaintext input may be pending. Thread: owner. */
int tls_conn_start(struct conn *c, struct tls_creds *cr);
/* True once the handshake has completed on c's transport. */
bool tls_conn_established(const struct conn *c);
/* The PSK username or X.509 subject DN of the peer ("" if none), for logs. */
const char *tls_conn_peer_identity(const struct conn *c);

#endif
