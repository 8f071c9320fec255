/* GnuTLS transport for core connections (server side). */
#include "core/tls.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conn.h"
#include "core/log.h"
#include "core/util.h"

#define TLS_PSK_MAX_KEY 256
#define TLS_RECORD_CHUNK 16384

struct tls_psk_entry {
    char *user;
    unsigned char *key;
    size_t keylen;
};

struct tls_creds {
    atomic_int refs;
    gnutls_certificate_credentials_t x509;
    gnutls_psk_server_credentials_t psk;
    gnutls_priority_t prio;
    bool verify_peer;
    struct tls_psk_entry *psk_entries;
    size_t psk_count;
};

struct tls_session {
    gnutls_session_t s;
    struct tls_creds *cr;
    bool established;
    size_t send_pending; /* bytes of a record gnutls holds after E_AGAIN */
    char identity[128];
};

int tls_psk_parse_line(const char *line, size_t len, const char **user, size_t *userlen,
                       unsigned char *key, size_t keymax, size_t *keylen)
{
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0 || line[0] == '#')
        return 1;
    const char *colon = memchr(line, ':', len);
    if (!colon || colon == line)
        return -EINVAL;
    size_t ulen = (size_t)(colon - line);
    const char *hex = colon + 1;
    size_t hlen = len - ulen - 1;
    if (hlen == 0 || hlen % 2 != 0 || hlen / 2 > keymax)
        return -EINVAL;
    if (hex_decode(hex, hlen, key, keymax) < 0)
        return -EINVAL;
    *user = line;
    *userlen = ulen;
    *keylen = hlen / 2;
    return 0;
}

static int psk_load(struct tls_creds *cr, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int err = errno;
        log_error("tls: cannot open PSK file %s: %s", path, strerror(err));
        return -err;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    unsigned lineno = 0;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        const char *user;
        size_t ulen, klen;
        unsigned char key[TLS_PSK_MAX_KEY];
        int r = tls_psk_parse_line(line, (size_t)n, &user, &ulen, key, sizeof(key), &klen);
        if (r == 1)
            continue;
        if (r < 0) {
            log_error("tls: %s:%u: expected username:hexkey", path, lineno);
            rc = -EINVAL;
            break;
        }
        struct tls_psk_entry *ne =
            realloc(cr->psk_entries, (cr->psk_count + 1) * sizeof(*cr->psk_entries));
        if (!ne) {
            rc = -ENOMEM;
            break;
        }
        cr->psk_entries = ne;
        struct tls_psk_entry *e = &ne[cr->psk_count];
        e->user = strndup(user, ulen);
        e->key = malloc(klen);
        if (!e->user || !e->key) {
            free(e->user);
            free(e->key);
            rc = -ENOMEM;
            break;
        }
        memcpy(e->key, key, klen);
        e->keylen = klen;
        cr->psk_count++;
    }
    free(line);
    fclose(f);
    if (rc == 0 && cr->psk_count == 0) {
        log_error("tls: PSK file %s has no keys", path);
        rc = -EINVAL;
    }
    return rc;
}

static int psk_lookup(gnutls_session_t s, const char *username, gnutls_datum_t *key)
{
    struct tls_session *ts = gnutls_session_get_ptr(s);
    struct tls_creds *cr = ts->cr;
    for (size_t i = 0; i < cr->psk_count; i++) {
        if (strcmp(cr->psk_entries[i].user, username) == 0) {
            key->data = gnutls_malloc(cr->psk_entries[i].keylen);
            if (!key->data)
                return -1;
            memcpy(key->data, cr->psk_entries[i].key, cr->psk_entries[i].keylen);
            key->size = (unsigned)cr->psk_entries[i].keylen;
            return 0;
        }
    }
    return -1;
}

static void creds_free(struct tls_creds *cr)
{
    if (cr->x509)
        gnutls_certificate_free_credentials(cr->x509);
    if (cr->psk)
        gnutls_psk_free_server_credentials(cr->psk);
    if (cr->prio)
        gnutls_priority_deinit(cr->prio);
    for (size_t i = 0; i < cr->psk_count; i++) {
        free(cr->psk_entries[i].user);
        if (cr->psk_entries[i].key)
            memset(cr->psk_entries[i].key, 0, cr->psk_entries[i].keylen);
        free(cr->psk_entries[i].key);
    }
    free(cr->psk_entries);
    free(cr);
}

static bool set(const char *s)
{
    return s && *s;
}

int tls_creds_new(const struct tls_config *cfg, struct tls_creds **out)
{
    bool want_x509 = set(cfg->cert_file) || set(cfg->key_file);
    bool want_psk = set(cfg->psk_file);
    if (!want_x509 && !want_psk)
        return -ENOENT;
    static atomic_bool inited;
    if (!atomic_exchange(&inited, true))
        gnutls_global_init();
    struct tls_creds *cr = calloc(1, sizeof(*cr));
    if (!cr)
        return -ENOMEM;
    atomic_init(&cr->refs, 1);
    int rc = 0, g;
    if (want_x509) {
        if (!set(cfg->cert_file) || !set(cfg->key_file)) {
            log_error("tls: both a certificate and a key file are needed");
            rc = -EINVAL;
            goto fail;
        }
        gnutls_certificate_allocate_credentials(&cr->x509);
        g = gnutls_certificate_set_x509_key_file(cr->x509, cfg->cert_file, cfg->key_file,
                                                 GNUTLS_X509_FMT_PEM);
        if (g < 0) {
            log_error("tls: loading %s / %s: %s", cfg->cert_file, cfg->key_file,
                      gnutls_strerror(g));
            rc = -EINVAL;
            goto fail;
        }
        if (set(cfg->ca_file)) {
            g = gnutls_certificate_set_x509_trust_file(cr->x509, cfg->ca_file, GNUTLS_X509_FMT_PEM);
            if (g < 0) {
                log_error("tls: loading CA %s: %s", cfg->ca_file, gnutls_strerror(g));
                rc = -EINVAL;
                goto fail;
            }
            cr->verify_peer = cfg->verify_peer;
        }
    }
    if (want_psk) {
        rc = psk_load(cr, cfg->psk_file);
        if (rc < 0)
            goto fail;
        gnutls_psk_allocate_server_credentials(&cr->psk);
        gnutls_psk_set_server_credentials_function(cr->psk, psk_lookup);
    }
    g = gnutls_priority_init(&cr->prio, want_psk ? "NORMAL:+ECDHE-PSK:+DHE-PSK:+PSK" : "NORMAL",
                             NULL);
    if (g < 0) {
        log_error("tls: priority: %s", gnutls_strerror(g));
        rc = -EINVAL;
        goto fail;
    }
    *out = cr;
    return 0;
fail:
    creds_free(cr);
    return rc;
}

void tls_creds_ref(struct tls_creds *cr)
{
    atomic_fetch_add(&cr->refs, 1);
}

void tls_creds_unref(struct tls_creds *cr)
{
    if (cr && atomic_fetch_sub(&cr->refs, 1) == 1)
        creds_free(cr);
}

bool tls_creds_has_x509(const struct tls_creds *cr)
{
    return cr->x509 != NULL;
}

bool tls_creds_has_psk(const struct tls_creds *cr)
{
    return cr->psk != NULL;
}

static void session_identity(struct tls_session *ts)
{
    const char *u = gnutls_psk_server_get_username(ts->s);
    if (u && *u) {
        snprintf(ts->identity, sizeof(ts->identity), "psk:%s", u);
        return;
    }
    if (gnutls_certificate_type_get(ts->s) == GNUTLS_CRT_X509) {
        unsigned n = 0;
        const gnutls_datum_t *certs = gnutls_certificate_get_peers(ts->s, &n);
        snprintf(ts->identity, sizeof(ts->identity), "%s",
                 certs && n ? "x509-client-cert" : "x509");
    }
}

static ssize_t tls_recv(struct conn *c, void *buf, size_t len)
{
    struct tls_session *ts = c->transport_ctx;
    if (!ts->established) {
        int g = gnutls_handshake(ts->s);
        if (g == GNUTLS_E_AGAIN || g == GNUTLS_E_INTERRUPTED)
            return -EAGAIN;
        if (g < 0) {
            if (!gnutls_error_is_fatal(g))
                return -EAGAIN;
            log_warn("%s: TLS handshake failed: %s", c->peer, gnutls_strerror(g));
            return -ECONNRESET;
        }
        ts->established = true;
        session_identity(ts);
        log_debug("%s: TLS established (%s) %s", c->peer, ts->identity,
                  gnutls_protocol_get_name(gnutls_protocol_get_version(ts->s)));
    }
    ssize_t n = gnutls_record_recv(ts->s, buf, len);
    if (n >= 0)
        return n;
    switch (n) {
    case GNUTLS_E_AGAIN:
    case GNUTLS_E_INTERRUPTED:
    case GNUTLS_E_REHANDSHAKE:
        return -EAGAIN;
    case GNUTLS_E_PREMATURE_TERMINATION:
        return 0;
    default:
        log_debug("%s: TLS receive: %s", c->peer, gnutls_strerror((int)n));
        return -ECONNRESET;
    }
}

static ssize_t tls_sendv(struct conn *c, const struct iovec *iov, int iovcnt)
{
    struct tls_session *ts = c->transport_ctx;
    if (!ts->established)
        return -EAGAIN;
    size_t total = 0;
    if (ts->send_pending) {
        /* gnutls already holds the encrypted record for the first
         * send_pending bytes of this same data: flush it, then skip them. */
        ssize_t r = gnutls_record_send(ts->s, NULL, 0);
        if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED)
            return -EAGAIN;
        if (r < 0)
            return -EIO;
        total = ts->send_pending;
        ts->send_pending = 0;
    }
    size_t skip = total;
    for (int i = 0; i < iovcnt; i++) {
        const uint8_t *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        if (skip >= n) {
            skip -= n;
            continue;
        }
        p += skip;
        n -= skip;
        skip = 0;
        while (n > 0) {
            size_t chunk = n < TLS_RECORD_CHUNK ? n : TLS_RECORD_CHUNK;
            ssize_t r = gnutls_record_send(ts->s, p, chunk);
            if (r == GNUTLS_E_AGAIN || r == GNUTLS_E_INTERRUPTED) {
                ts->send_pending = chunk;
                return total ? (ssize_t)total : -EAGAIN;
            }
            if (r < 0) {
                log_debug("%s: TLS send: %s", c->peer, gnutls_strerror((int)r));
                return total ? (ssize_t)total : -EIO;
            }
            total += (size_t)r;
            p += r;
            n -= (size_t)r;
        }
    }
    return (ssize_t)total;
}

static size_t tls_pending(struct conn *c)
{
    struct tls_session *ts = c->transport_ctx;
    return ts->established ? gnutls_record_check_pending(ts->s) : 0;
}

static void tls_destroy(struct conn *c)
{
    struct tls_session *ts = c->transport_ctx;
    if (!ts)
        return;
    gnutls_deinit(ts->s);
    tls_creds_unref(ts->cr);
    free(ts);
    c->transport_ctx = NULL;
}

static const struct conn_transport tls_transport = {
    .recv = tls_recv,
    .sendv = tls_sendv,
    .pending = tls_pending,
    .destroy = tls_destroy,
};

int tls_conn_start(struct conn *c, struct tls_creds *cr)
{
    struct tls_session *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return -ENOMEM;
    int g = gnutls_init(&ts->s, GNUTLS_SERVER | GNUTLS_NONBLOCK);
    if (g < 0) {
        free(ts);
        return -ENOMEM;
    }
    ts->cr = cr;
    tls_creds_ref(cr);
    gnutls_session_set_ptr(ts->s, ts);
    gnutls_priority_set(ts->s, cr->prio);
    if (cr->x509) {
        gnutls_credentials_set(ts->s, GNUTLS_CRD_CERTIFICATE, cr->x509);
        if (cr->verify_peer) {
            gnutls_certificate_server_set_request(ts->s, GNUTLS_CERT_REQUIRE);
            gnutls_session_set_verify_cert(ts->s, NULL, 0);
        }
    }
    if (cr->psk)
        gnutls_credentials_set(ts->s, GNUTLS_CRD_PSK, cr->psk);
    gnutls_transport_set_int(ts->s, c->fd);
    gnutls_handshake_set_timeout(ts->s, 0);
    conn_set_transport(c, &tls_transport, ts);
    return 0;
}

bool tls_conn_established(const struct conn *c)
{
    return c->transport == &tls_transport && ((struct tls_session *)c->transport_ctx)->established;
}

const char *tls_conn_peer_identity(const struct conn *c)
{
    if (c->transport != &tls_transport)
        return "";
    return ((struct tls_session *)c->transport_ctx)->identity;
}
