/*
 * WebSocket transport (see ws.h).
 *
 * Per connection, one mutex guards the wslay context, the TLS session's
 * send side, the reply queue and the work queue: the I/O thread reads and
 * writes under it; workers and event senders queue a message under it and
 * write it out at once when the socket takes it, poking the I/O thread's
 * eventfd only when part of it is left for POLLOUT. Handlers never run
 * under it.
 *
 * Workers are per connection and kept between requests (a thread per
 * request cost a clone, an 8 MiB stack madvise and an exit per call, a
 * third of a short call's time): a request goes to an idle worker, or to
 * a new one while fewer than API_WS_MAX_INFLIGHT exist; a worker idle for
 * WS_WORKER_IDLE_S ends. A call that arrives alone while none is running,
 * and cannot wait on other calls or jobs, runs on the I/O thread itself
 * (request_inline): a message the client sends meanwhile is read when it
 * returns.
 */
#include "api/ws.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "api/acceptor.h"
#include "api/api.h"
#include "api/auth.h"
#include "api/jobs.h"
#include "api/jsonw.h"
#include "core/admit.h"
#include "core/listener.h"
#include "core/log.h"
#include "core/util.h"

static struct admit_gate ws_gate = ADMIT_GATE_INIT("api-ws", API_WS_MAX_CLIENTS);

static const char ws_guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

#define WS_WORKER_IDLE_S 30

struct rx_msg {
    struct rx_msg *next;
    size_t len;
    char text[];
};

struct ws_client {
    struct api_conn conn;
    int fd;
    int wake_fd;
    gnutls_session_t tls; /* NULL: plain TCP */
    wslay_event_context_ptr ws;
    pthread_mutex_t lock;
    pthread_cond_t idle; /* inflight or nworkers dropped */
    unsigned inflight;   /* requests queued or running */
    pthread_cond_t work; /* work queued, or workers_stop */
    struct rx_msg *work_head, *work_tail;
    unsigned nworkers, idle_workers;
    bool workers_stop;
    bool closing;
    /* bytes read with the HTTP head that belong to the first frames */
    char *pre;
    size_t pre_len, pre_off;
    /* size of the message being received (for the too-large reply) */
    uint64_t msg_len;
    bool too_big;  /* the current message is over API_MAX_REQUEST */
    bool draining; /* close queued; discard input until the peer is done */
    struct rx_msg *rx_head, *rx_tail;
    /* A frame header held back to go out with its payload (cb_send). */
    uint8_t tx_hdr[14];
    size_t tx_hdr_len;
    /* The last recv of this wake-up returned less than asked: the socket
     * is drained, so the next recv would only say EAGAIN (cb_recv). */
    bool rx_drained;
    char peer[80];
    struct api_client api;
    /* admission: pending until authenticated, which must happen by then */
    struct admit_ticket ticket;
    int64_t auth_deadline_ms;
};

static struct {
    bool running;
    struct api_acceptor acceptor;
    char addr[80];
    gnutls_certificate_credentials_t x509;
    gnutls_priority_t prio;
    struct api_conns conns; /* the client threads */
} srv = {
    .acceptor = {.listen_fd = -1, .wake_pipe = {-1, -1}},
    .conns = API_CONNS_INIT,
};

/* ---- pure helpers ---- */

static void base64_encode(const unsigned char *in, size_t len, char *out)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    out[o] = 0;
}

int ws_accept_key(const char *key, size_t keylen, char out[29])
{
    char buf[128];
    if (keylen > sizeof(buf) - sizeof(ws_guid))
        return -EINVAL;
    memcpy(buf, key, keylen);
    memcpy(buf + keylen, ws_guid, sizeof(ws_guid) - 1);
    unsigned char digest[20];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA1, buf, keylen + sizeof(ws_guid) - 1, digest) < 0)
        return -EIO;
    base64_encode(digest, sizeof(digest), out);
    return 0;
}

/* Does a comma-separated header value contain token (case-insensitive)? */
static bool header_has_token(const char *v, size_t len, const char *token)
{
    size_t tl = strlen(token);
    size_t i = 0;
    while (i < len) {
        while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
            i++;
        size_t start = i;
        while (i < len && v[i] != ',')
            i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
            end--;
        if (end - start == tl && strncasecmp(v + start, token, tl) == 0)
            return true;
    }
    return false;
}

static bool path_allowed(const char *p, size_t len)
{
    const char *q = memchr(p, '?', len);
    if (q)
        len = (size_t)(q - p);
    if ((len == 12 && memcmp(p, "/api/current", 12) == 0) ||
        (len == 10 && memcmp(p, "/websocket", 10) == 0))
        return true;
    /* versioned TrueNAS endpoints: /api/v25.04.0 */
    if (len > 6 && memcmp(p, "/api/v", 6) == 0) {
        for (size_t i = 6; i < len; i++)
            if (!((p[i] >= '0' && p[i] <= '9') || p[i] == '.'))
                return false;
        return true;
    }
    return false;
}

int ws_parse_upgrade(const char *head, size_t len, char key[25])
{
    const char *end = head + len;
    const char *eol = memmem(head, len, "\r\n", 2);
    if (!eol)
        return 400;
    /* request line: METHOD SP PATH SP HTTP/1.x */
    const char *sp1 = memchr(head, ' ', (size_t)(eol - head));
    if (!sp1)
        return 400;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (!sp2 || (size_t)(eol - sp2 - 1) < 8 || memcmp(sp2 + 1, "HTTP/1.", 7) != 0)
        return 400;
    if (sp1 - head != 3 || memcmp(head, "GET", 3) != 0)
        return 405;
    if (!path_allowed(sp1 + 1, (size_t)(sp2 - sp1 - 1)))
        return 404;
    bool upgrade = false, connection = false, version = false;
    bool have_key = false;
    for (const char *line = eol + 2; line < end;) {
        const char *le = memmem(line, (size_t)(end - line), "\r\n", 2);
        if (!le || le == line)
            break;
        const char *colon = memchr(line, ':', (size_t)(le - line));
        if (colon) {
            size_t nlen = (size_t)(colon - line);
            const char *v = colon + 1;
            while (v < le && (*v == ' ' || *v == '\t'))
                v++;
            size_t vlen = (size_t)(le - v);
            while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
                vlen--;
            if (nlen == 7 && strncasecmp(line, "Upgrade", 7) == 0)
                upgrade = header_has_token(v, vlen, "websocket");
            else if (nlen == 10 && strncasecmp(line, "Connection", 10) == 0)
                connection = connection || header_has_token(v, vlen, "upgrade");
            else if (nlen == 21 && strncasecmp(line, "Sec-WebSocket-Version", 21) == 0)
                version = vlen == 2 && memcmp(v, "13", 2) == 0;
            else if (nlen == 17 && strncasecmp(line, "Sec-WebSocket-Key", 17) == 0) {
                /* 16 random bytes, base64: 24 characters */
                if (vlen != 24)
                    return 400;
                memcpy(key, v, 24);
                key[24] = 0;
                have_key = true;
            }
        }
        line = le + 2;
    }
    if (!upgrade || !connection || !have_key)
        return 400;
    if (!version)
        return 426;
    return 0;
}

/* ---- raw I/O (plain or TLS), non-blocking socket ---- */

static ssize_t io_recv(struct ws_client *c, void *buf, size_t len)
{
    if (c->tls) {
        ssize_t n = gnutls_record_recv(c->tls, buf, len);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
            return -EAGAIN;
        if (n < 0) {
            log_info("api: %s: TLS receive: %s", c->peer, gnutls_strerror((int)n));
            return -EIO;
        }
        return n;
    }
    ssize_t n = recv(c->fd, buf, len, 0);
    if (n < 0)
        return errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return n;
}

static ssize_t io_send(struct ws_client *c, const void *buf, size_t len, bool more)
{
    if (c->tls) {
        ssize_t n = gnutls_record_send(c->tls, buf, len);
        if (n == GNUTLS_E_AGAIN || n == GNUTLS_E_INTERRUPTED)
            return -EAGAIN;
        if (n < 0) {
            log_info("api: %s: TLS send: %s", c->peer, gnutls_strerror((int)n));
            return -EIO;
        }
        return n;
    }
    /* MSG_MORE: a frame header goes out with its payload in one segment
     * (TCP_NODELAY would otherwise send the 2-4 header bytes alone). */
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    if (n < 0)
        return errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return n;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for fd to become readable/writable until deadline. 0 or -ETIMEDOUT. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -errno;
    }
}

/* Write all of buf during the handshake (before wslay). */
static int write_all_until(struct ws_client *c, const char *buf, size_t len, int64_t deadline)
{
    while (len > 0) {
        ssize_t n = io_send(c, buf, len, false);
        if (n == -EAGAIN) {
            int rc = wait_fd(c->fd, POLLOUT, deadline);
            if (rc < 0)
                return rc;
            continue;
        }
        if (n < 0)
            return (int)n;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int tls_handshake(struct ws_client *c, int64_t deadline)
{
    int rc;
    if ((rc = gnutls_init(&c->tls, GNUTLS_SERVER | GNUTLS_NONBLOCK)) < 0) {
        log_error("api: %s: gnutls_init: %s", c->peer, gnutls_strerror(rc));
        c->tls = NULL;
        return -ENOMEM;
    }
    gnutls_priority_set(c->tls, srv.prio);
    gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, srv.x509);
    gnutls_certificate_server_set_request(c->tls, GNUTLS_CERT_IGNORE);
    gnutls_transport_set_int(c->tls, c->fd);
    for (;;) {
        rc = gnutls_handshake(c->tls);
        if (rc == 0)
            return 0;
        if (rc != GNUTLS_E_AGAIN && rc != GNUTLS_E_INTERRUPTED) {
            log_info("api: %s: TLS handshake failed: %s", c->peer, gnutls_strerror(rc));
            return -EPROTO;
        }
        short ev = gnutls_record_get_direction(c->tls) ? POLLOUT : POLLIN;
        if (wait_fd(c->fd, ev, deadline) < 0) {
            log_info("api: %s: TLS handshake timed out", c->peer);
            return -ETIMEDOUT;
        }
    }
}

static const char *status_text(int status)
{
    switch (status) {
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 426:
        return "Upgrade Required";
    case 503:
        return "Service Unavailable";
    default:
        return "Error";
    }
}

static void http_reply_error(struct ws_client *c, int status, const char *why, int64_t deadline)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf),
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "%sConnection: close\r\n\r\n%s\n",
                     status, status_text(status), strlen(why) + 1,
                     status == 426 ? "Sec-WebSocket-Version: 13\r\n" : "", why);
    if (n > 0 && (size_t)n < sizeof(buf))
        write_all_until(c, buf, (size_t)n, deadline);
}

static api_http_handler_fn http_handler; /* set at start-up (api_ws_set_http_handler) */

void api_ws_set_http_handler(api_http_handler_fn fn)
{
    http_handler = fn;
}

/* Read until the end of the HTTP head (bounded by API_WS_MAX_HEADER, and
 * by the handshake deadline). *len: what was read; *head_len: the head
 * with its blank line. 0 or -errno (logged, a 400 sent when too large). */
static int http_read_head(struct ws_client *c, char *buf, size_t *len, size_t *head_len,
                          int64_t deadline)
{
    char *head_end = NULL;

    while (!head_end) {
        if (*len == API_WS_MAX_HEADER) {
            log_info("api: %s: HTTP request head over %d bytes", c->peer, API_WS_MAX_HEADER);
            http_reply_error(c, 400, "request head too large", deadline);
            return -EMSGSIZE;
        }
        ssize_t n = io_recv(c, buf + *len, API_WS_MAX_HEADER - *len);
        if (n == -EAGAIN) {
            if (wait_fd(c->fd, POLLIN, deadline) < 0) {
                admit_log(&ws_gate, "api: %s: no complete HTTP request within %u s, closing",
                          c->peer, admit_handshake_timeout_s());
                return -ETIMEDOUT;
            }
            continue;
        }
        if (n <= 0)
            return n == 0 ? -ECONNRESET : (int)n;
        *len += (size_t)n;
        head_end = memmem(buf, *len, "\r\n\r\n", 4);
    }
    *head_len = (size_t)(head_end - buf) + 4;
    return 0;
}

/* A plain HTTP route (/metrics, /ui) answered by the registered handler:
 * one response, then the connection closes. True when it answered. */
static bool http_route(struct ws_client *c, const char *buf, size_t head_len, int64_t deadline)
{
    CLEANUP_FREE char *page = NULL;
    size_t page_len = 0;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    bool have_addr = getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0;

    if (!http_handler ||
        http_handler(buf, head_len, c->peer, have_addr ? (const struct sockaddr *)&ss : NULL, &page,
                     &page_len) <= 0)
        return false;
    write_all_until(c, page, page_len, deadline);
    return true;
}

/* Check the upgrade request and send 101 Switching Protocols (or the
 * HTTP error, logged with the request line). 0 or -errno. */
static int ws_answer_upgrade(struct ws_client *c, const char *buf, size_t head_len,
                             int64_t deadline)
{
    char key[25], accept[29], resp[256];
    int status = ws_parse_upgrade(buf, head_len, key), n;

    if (status != 0) {
        const char *eol = memmem(buf, head_len, "\r\n", 2);
        log_info("api: %s: HTTP %d for \"%.*s\"", c->peer, status,
                 (int)(eol ? MIN(eol - buf, 200) : 0), buf);
        http_reply_error(c, status,
                         status == 404 ? "use /api/current or /websocket"
                                       : "this is a WebSocket JSON-RPC endpoint",
                         deadline);
        return -EPROTO;
    }
    if (ws_accept_key(key, 24, accept) < 0)
        return -EIO;
    n = snprintf(resp, sizeof(resp),
                 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                 "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                 accept);
    return write_all_until(c, resp, (size_t)n, deadline);
}

/* Read the HTTP head and answer the upgrade. 0 when the WebSocket is open. */
static int http_upgrade(struct ws_client *c, int64_t deadline)
{
    CLEANUP_FREE char *buf = malloc(API_WS_MAX_HEADER);
    size_t len = 0, head_len = 0;
    int rc;

    if (!buf)
        return -ENOMEM;
    rc = http_read_head(c, buf, &len, &head_len, deadline);
    if (rc < 0)
        return rc;
    if (http_route(c, buf, head_len, deadline))
        return -ECONNRESET;
    rc = ws_answer_upgrade(c, buf, head_len, deadline);
    if (rc < 0)
        return rc;
    /* A client may send its first frames right behind the head: they are
     * kept (c->pre takes the buffer). */
    if (len > head_len) {
        c->pre_len = len - head_len;
        memmove(buf, buf + head_len, c->pre_len);
        c->pre = buf;
        buf = NULL;
    }
    return 0;
}

/* ---- wslay callbacks (called under c->lock, on the I/O thread) ---- */

static ssize_t cb_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
    struct ws_client *c = user;
    if (c->too_big) {
        /* Stop feeding wslay: the rest of the message is discarded. */
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (c->pre) {
        size_t n = MIN(len, c->pre_len - c->pre_off);
        memcpy(buf, c->pre + c->pre_off, n);
        c->pre_off += n;
        if (c->pre_off == c->pre_len) {
            free(c->pre);
            c->pre = NULL;
        }
        return (ssize_t)n;
    }
    /* Plain TCP only: GnuTLS may hold decrypted bytes that poll() does not
     * see. Level-triggered poll() reports anything that arrives later. */
    if (c->rx_drained && !c->tls) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    ssize_t n = io_recv(c, buf, len);
    if (n == -EAGAIN) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    c->rx_drained = (size_t)n < len;
    if (n <= 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

/* n bytes went out of a send that began with the held header: drop the
 * part of the header they cover; returns how many of them were the data's. */
static size_t tx_hdr_sent(struct ws_client *c, size_t n)
{
    size_t h = MIN(n, c->tx_hdr_len);
    memmove(c->tx_hdr, c->tx_hdr + h, c->tx_hdr_len - h);
    c->tx_hdr_len -= h;
    return n - h;
}

static ssize_t cb_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
                       void *user)
{
    struct ws_client *c = user;
    bool more = (flags & WSLAY_MSG_MORE) != 0;
    /* wslay hands over a frame's header alone, then its payload: keep the
     * header and send both with one sendmsg (one system call per reply
     * instead of two). It counts as sent; tx_hdr_flush covers a header
     * that no payload follows. */
    if (!c->tls && more && !c->tx_hdr_len && len <= sizeof(c->tx_hdr)) {
        memcpy(c->tx_hdr, data, len);
        c->tx_hdr_len = len;
        return (ssize_t)len;
    }
    ssize_t n;
    if (c->tx_hdr_len) {
        struct iovec iov[2] = {{c->tx_hdr, c->tx_hdr_len}, {(void *)(uintptr_t)data, len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
        if (n < 0)
            n = errno == EINTR || errno == EWOULDBLOCK ? -EAGAIN : -errno;
        else if ((n = (ssize_t)tx_hdr_sent(c, (size_t)n)) == 0)
            n = -EAGAIN; /* none of data went */
    } else {
        n = io_send(c, data, len, more);
    }
    if (n == -EAGAIN) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (n < 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return n;
}

/* After wslay_event_send: a held header whose payload did not follow (wslay
 * has nothing more to write) goes out alone. Under c->lock. 0, -EAGAIN
 * (the rest waits for POLLOUT) or -errno. */
static int tx_hdr_flush(struct ws_client *c)
{
    while (c->tx_hdr_len && !wslay_event_want_write(c->ws)) {
        ssize_t n = io_send(c, c->tx_hdr, c->tx_hdr_len, false);
        if (n < 0)
            return (int)n;
        tx_hdr_sent(c, (size_t)n);
    }
    return 0;
}

/* wslay_event_send plus tx_hdr_flush. 0 or non-zero on a failure. */
static int send_locked(struct ws_client *c)
{
    int rc = wslay_event_send(c->ws);
    if (rc == 0) {
        int f = tx_hdr_flush(c);
        if (f < 0 && f != -EAGAIN)
            rc = WSLAY_ERR_CALLBACK_FAILURE;
    }
    return rc;
}

/* Anything left to write: wslay's queue or a held header. */
static bool want_write_locked(struct ws_client *c)
{
    return wslay_event_want_write(c->ws) || c->tx_hdr_len;
}

static void queue_text_locked(struct ws_client *c, const char *text, size_t len)
{
    struct wslay_event_msg m = {
        .opcode = WSLAY_TEXT_FRAME, .msg = (const uint8_t *)text, .msg_length = len};
    if (wslay_event_queue_msg(c->ws, &m) != 0)
        log_info("api: %s: reply dropped (connection closing)", c->peer);
}

static void cb_frame_start(wslay_event_context_ptr ctx,
                           const struct wslay_event_on_frame_recv_start_arg *arg, void *user)
{
    struct ws_client *c = user;
    if (arg->opcode & 0x8)
        return; /* control frames are small and separate */
    if (arg->opcode != WSLAY_CONTINUATION_FRAME) {
        c->msg_len = 0;
        c->too_big = false;
    }
    c->msg_len += arg->payload_length;
    if (c->msg_len > API_MAX_REQUEST && !c->too_big) {
        c->too_big = true;
        log_info("api: %s: message over %u bytes; closing", c->peer, API_MAX_REQUEST);
        json_t *e = api_error_response(API_INVALID_REQUEST, "request too large (max 16 MiB)", NULL);
        char *s = json_dumps(e, JSON_COMPACT);
        json_decref(e);
        if (s) {
            queue_text_locked(c, s, strlen(s));
            free(s);
        }
    }
}

static void cb_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
                   void *user)
{
    struct ws_client *c = user;
    if (arg->opcode != WSLAY_TEXT_FRAME && arg->opcode != WSLAY_BINARY_FRAME)
        return; /* ping/pong/close: wslay answers them */
    struct rx_msg *m = malloc(sizeof(*m) + arg->msg_length + 1);
    if (!m) {
        log_error("api: %s: out of memory for a %zu-byte message", c->peer, arg->msg_length);
        wslay_event_queue_close(ctx, WSLAY_CODE_INTERNAL_SERVER_ERROR, NULL, 0);
        return;
    }
    m->next = NULL;
    m->len = arg->msg_length;
    memcpy(m->text, arg->msg, arg->msg_length);
    m->text[m->len] = 0;
    if (c->rx_tail)
        c->rx_tail->next = m;
    else
        c->rx_head = m;
    c->rx_tail = m;
}

static const struct wslay_event_callbacks callbacks = {
    .recv_callback = cb_recv,
    .send_callback = cb_send,
    .on_frame_recv_start_callback = cb_frame_start,
    .on_msg_recv_callback = cb_msg,
};

/* ---- sending from any thread ---- */

static void wake(struct ws_client *c)
{
    uint64_t one = 1;
    ssize_t w;
    do {
        w = write(c->wake_fd, &one, sizeof(one));
    } while (w < 0 && errno == EINTR);
}

static int client_queue(struct ws_client *c, const char *text, size_t len)
{
    pthread_mutex_lock(&c->lock);
    if (c->closing || !wslay_event_get_write_enabled(c->ws)) {
        pthread_mutex_unlock(&c->lock);
        return -EPIPE;
    }
    if (wslay_event_get_queued_msg_length(c->ws) + len > API_WS_MAX_QUEUED) {
        log_warn("api: %s: over %u bytes of replies not read; disconnecting", c->peer,
                 API_WS_MAX_QUEUED);
        c->closing = true;
        pthread_mutex_unlock(&c->lock);
        shutdown(c->fd, SHUT_RDWR);
        wake(c);
        return -ENOBUFS;
    }
    queue_text_locked(c, text, len);
    /* Write it now from this thread (the socket is non-blocking): saves
     * waking the I/O thread for every reply. What the socket does not take
     * is left to the I/O thread (POLLOUT); an error is its to handle too. */
    bool pending = true;
    if (!c->pre && !c->too_big && !c->draining && send_locked(c) == 0)
        pending = want_write_locked(c);
    pthread_mutex_unlock(&c->lock);
    if (pending)
        wake(c);
    return 0;
}

static int client_send(struct api_client *ac, json_t *msg)
{
    struct ws_client *c = ac->transport;
    size_t len = 0;
    char *s = api_json_dumps(msg, &len);
    if (!s)
        return errno == E2BIG ? -E2BIG : -ENOMEM;
    int rc = client_queue(c, s, len);
    free(s);
    return rc;
}

/* ---- requests ---- */

/* Runs m. req: m's text already parsed (taken over), or NULL to parse it
 * here. */
static void request_run(struct ws_client *c, struct rx_msg *m, json_t *req)
{
    api_auth_client_check(&c->api);
    if (req) {
        json_t *resp = api_handle_request_client(req, &c->api);
        json_decref(req);
        if (resp && client_send(&c->api, resp) == -E2BIG) {
            json_t *e = api_response_too_big(resp, c->peer);
            client_send(&c->api, e);
            json_decref(e);
        }
        json_decref(resp);
        return;
    }
    char *resp = api_handle_text_client(m->text, m->len, &c->api);
    if (resp) {
        client_queue(c, resp, strlen(resp));
        free(resp);
    }
}

/* Called and returns with c->lock held: runs m (a counted call; req as for
 * request_run) without the lock, frees it and counts it done. */
static void request_finish_locked(struct ws_client *c, struct rx_msg *m, json_t *req)
{
    pthread_mutex_unlock(&c->lock);
    request_run(c, m, req);
    free(m);
    pthread_mutex_lock(&c->lock);
    c->inflight--;
    pthread_cond_broadcast(&c->idle);
}

/* A connection's worker: runs queued requests until idle for
 * WS_WORKER_IDLE_S or told to stop. */
static void *worker_thread(void *p)
{
    struct ws_client *c = p;
    api_thread_background();
    pthread_mutex_lock(&c->lock);
    for (;;) {
        if (!c->work_head && !c->workers_stop) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += WS_WORKER_IDLE_S;
            c->idle_workers++;
            int rc = 0;
            while (!c->work_head && !c->workers_stop && rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&c->work, &c->lock, &until);
            c->idle_workers--;
        }
        struct rx_msg *m = c->work_head;
        if (!m)
            break; /* idle too long, or stopping */
        c->work_head = m->next;
        if (!c->work_head)
            c->work_tail = NULL;
        request_finish_locked(c, m, NULL);
    }
    c->nworkers--;
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* Run m on the I/O thread when it is the connection's only call and cannot
 * wait on anything (api_request_runs_briefly): the usual sequential client
 * then costs no hand-off to a worker and back (two context switches per
 * call, a tenth of a short call's CPU on a paravirtualized guest). The text
 * is parsed once, here. Takes ownership of m when it returns true. */
static bool request_inline(struct ws_client *c, struct rx_msg *m)
{
    json_t *req = json_loadb(m->text, m->len, JSON_DECODE_ANY, NULL);
    bool alone = false;
    if (api_request_runs_briefly(req, &c->api)) {
        pthread_mutex_lock(&c->lock);
        alone = c->inflight == 0;
        if (alone) {
            c->inflight++;
            request_finish_locked(c, m, req);
        }
        pthread_mutex_unlock(&c->lock);
    }
    if (!alone)
        json_decref(req); /* the worker path parses it again and answers errors */
    return alone;
}

/* Queue m for a worker (takes ownership), waiting while the connection has
 * API_WS_MAX_INFLIGHT calls queued or running. */
static void request_dispatch(struct ws_client *c, struct rx_msg *m)
{
    pthread_mutex_lock(&c->lock);
    while (c->inflight >= API_WS_MAX_INFLIGHT)
        pthread_cond_wait(&c->idle, &c->lock);
    c->inflight++;
    m->next = NULL;
    if (c->work_tail)
        c->work_tail->next = m;
    else
        c->work_head = m;
    c->work_tail = m;
    /* A worker per request at most: count the ones already free. */
    unsigned queued = 0;
    for (struct rx_msg *q = c->work_head; q; q = q->next)
        queued++;
    bool spawn = queued > c->idle_workers && c->nworkers < API_WS_MAX_INFLIGHT;
    if (spawn)
        c->nworkers++;
    else
        pthread_cond_signal(&c->work);
    pthread_mutex_unlock(&c->lock);
    if (!spawn)
        return;
    int rc = thread_start_detached(worker_thread, c);
    if (rc == 0)
        return;
    /* No thread: run the queue here rather than drop calls. */
    log_warn("api: %s: cannot start a worker: %s; running the call inline", c->peer, strerror(-rc));
    pthread_mutex_lock(&c->lock);
    c->nworkers--;
    while (c->nworkers == 0 && c->work_head) {
        struct rx_msg *q = c->work_head;
        c->work_head = q->next;
        if (!c->work_head)
            c->work_tail = NULL;
        request_finish_locked(c, q, NULL);
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- the connection ---- */

/* Poll timeout for the connection: until its authentication deadline while
 * it has not logged in (then -2: drop it), forever after. */
static int auth_wait_ms(struct ws_client *c)
{
    if (!c->ticket.pending)
        return -1;
    if (__atomic_load_n(&c->api.authenticated, __ATOMIC_ACQUIRE)) {
        admit_promote(&c->ticket);
        return -1;
    }
    int64_t left = c->auth_deadline_ms - mono_ms();
    if (left <= 0) {
        admit_log(&ws_gate, "api: %s: not authenticated within %u s, closing", c->peer,
                  admit_handshake_timeout_s());
        return -2;
    }
    return (int)left;
}

static void client_loop(struct ws_client *c)
{
    for (;;) {
        int wait_ms = auth_wait_ms(c);
        if (wait_ms == -2)
            break;
        pthread_mutex_lock(&c->lock);
        if (c->too_big && !c->draining && wslay_event_get_queued_msg_count(c->ws) == 0) {
            /* The error text (queued by cb_frame_start) is out: now close
             * with 1009. wslay sends control frames ahead of messages, so
             * queuing the close earlier would overtake the text. */
            static const char why[] = "message too big";
            wslay_event_queue_close(c->ws, WSLAY_CODE_MESSAGE_TOO_BIG, (const uint8_t *)why,
                                    sizeof(why) - 1);
            wslay_event_shutdown_read(c->ws);
            c->draining = true;
        }
        bool want_read = wslay_event_want_read(c->ws) && !c->closing && !c->too_big;
        bool want_write = want_write_locked(c);
        bool closing = c->closing;
        pthread_mutex_unlock(&c->lock);
        if (closing || (!want_read && !want_write))
            break;
        struct pollfd fds[2] = {
            {.fd = c->fd, .events = (short)((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0))},
            {.fd = c->wake_fd, .events = POLLIN},
        };
        int n = 1;
        if (c->pre)
            fds[0].revents = POLLIN; /* buffered bytes: no need to wait */
        else if ((n = poll(fds, 2, wait_ms)) < 0) {
            if (errno == EINTR)
                continue;
            log_error("api: %s: poll: %s", c->peer, strerror(errno));
            break;
        }
        if (n == 0)
            continue; /* the authentication deadline: auth_wait_ms decides */
        if (fds[1].revents & POLLIN) {
            uint64_t v;
            ssize_t r = read(c->wake_fd, &v, sizeof(v));
            (void)r;
        }
        int rc = 0;
        struct rx_msg *got = NULL;
        pthread_mutex_lock(&c->lock);
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            c->rx_drained = false;
            rc = wslay_event_recv(c->ws);
        }
        if (rc == 0 && want_write_locked(c))
            rc = send_locked(c);
        got = c->rx_head;
        c->rx_head = c->rx_tail = NULL;
        pthread_mutex_unlock(&c->lock);
        /* One message alone may run here; several at once were pipelined
         * by the client, which wants them to run side by side. */
        if (got && !got->next && request_inline(c, got))
            got = NULL;
        while (got) {
            struct rx_msg *next = got->next;
            request_dispatch(c, got);
            got = next;
        }
        if (rc != 0)
            break;
    }
}

/*
 * After refusing an oversized message: read and drop what the peer is
 * still sending (it reads our error and close only once its send is
 * done), up to twice the limit or the handshake timeout; then close.
 */
static void client_drain(struct ws_client *c)
{
    int64_t deadline = mono_ms() + API_WS_HANDSHAKE_MS;
    uint64_t total = 0;
    char buf[16384];
    while (total < 2ull * API_MAX_REQUEST) {
        ssize_t n = io_recv(c, buf, sizeof(buf));
        if (n == -EAGAIN) {
            if (wait_fd(c->fd, POLLIN, deadline) < 0)
                break;
            continue;
        }
        if (n <= 0)
            break;
        total += (uint64_t)n;
    }
}

static void client_free(struct ws_client *c)
{
    if (c->ws)
        wslay_event_context_free(c->ws);
    if (c->tls)
        gnutls_deinit(c->tls);
    for (struct rx_msg *m = c->rx_head; m;) {
        struct rx_msg *n = m->next;
        free(m);
        m = n;
    }
    free(c->pre);
    if (c->wake_fd >= 0)
        close(c->wake_fd);
    close(c->fd);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->idle);
    pthread_cond_destroy(&c->work);
    free(c);
}

static void client_remove(struct ws_client *c)
{
    api_conns_remove(&srv.conns, &c->conn);
    admit_release(&c->ticket);
}

static void *client_thread(void *arg)
{
    struct ws_client *c = arg;
    api_thread_background();
    int64_t deadline = c->auth_deadline_ms;
    int rc = 0;
    if (srv.x509)
        rc = tls_handshake(c, deadline);
    if (rc == 0)
        rc = http_upgrade(c, deadline);
    if (rc == 0 && wslay_event_context_server_init(&c->ws, &callbacks, c) != 0) {
        log_error("api: %s: out of memory for the WebSocket", c->peer);
        c->ws = NULL;
        rc = -ENOMEM;
    }
    if (rc == 0) {
        /* wslay's own limit stays above ours, so that an oversized message
         * is seen by cb_frame_start and answered with a JSON-RPC error. */
        wslay_event_config_set_max_recv_msg_length(c->ws, 4ull * API_MAX_REQUEST);
        log_info("api: %s: WebSocket connected", c->peer);
        client_loop(c);
        if (c->draining)
            client_drain(c);
        pthread_mutex_lock(&c->lock);
        c->closing = true;
        pthread_mutex_unlock(&c->lock);
        jobs_client_closed(&c->api);
        /* Calls queued or running finish (their replies are dropped);
         * then the workers end. */
        pthread_mutex_lock(&c->lock);
        while (c->inflight > 0)
            pthread_cond_wait(&c->idle, &c->lock);
        c->workers_stop = true;
        pthread_cond_broadcast(&c->work);
        while (c->nworkers > 0)
            pthread_cond_wait(&c->idle, &c->lock);
        pthread_mutex_unlock(&c->lock);
        api_auth_client_release(&c->api);
        if (c->tls)
            gnutls_bye(c->tls, GNUTLS_SHUT_WR); /* best effort; non-blocking */
        log_info("api: %s: WebSocket disconnected", c->peer);
    }
    client_remove(c);
    client_free(c);
    return NULL;
}

static void reject_busy(int fd, const char *peer)
{
    static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                              "Connection: close\r\n\r\n";
    /* Plain text even on a TLS port: the peer sees a failed handshake. */
    ssize_t w = send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(fd);
}

/* On the accept thread (acceptor.h). */
static void accept_one(int fd, const struct sockaddr *sa, socklen_t sl)
{
    char addr[64];
    format_sockaddr(sa, sl, addr, sizeof(addr));
    char peer[80];
    snprintf(peer, sizeof(peer), "%s:%s", srv.x509 ? "wss" : "ws", addr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    struct admit_ticket ticket;
    if (admit_try(&ws_gate, fd, sa, sl, peer, &ticket) < 0) {
        reject_busy(fd, peer);
        return;
    }
    pthread_mutex_lock(&srv.conns.lock);
    if (srv.conns.stopping) {
        pthread_mutex_unlock(&srv.conns.lock);
        admit_release(&ticket);
        reject_busy(fd, peer);
        return;
    }
    struct ws_client *c = calloc(1, sizeof(*c));
    if (!c) {
        pthread_mutex_unlock(&srv.conns.lock);
        admit_release(&ticket);
        log_error("api: %s: out of memory", peer);
        close(fd);
        return;
    }
    c->ticket = ticket;
    c->auth_deadline_ms = mono_ms() + (int64_t)admit_handshake_timeout_s() * 1000;
    c->fd = fd;
    c->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->idle, NULL);
    pthread_cond_init(&c->work, NULL);
    memcpy(c->peer, peer, sizeof(c->peer));
    c->api.peer = c->peer;
    c->api.authenticated = false;
    c->api.transport = c;
    c->api.send = client_send;
    c->api.closes_notified = true;
    int rc = c->wake_fd < 0 ? -errno : thread_start_detached(client_thread, c);
    if (rc != 0) {
        pthread_mutex_unlock(&srv.conns.lock);
        log_error("api: %s: cannot start a connection thread: %s", peer, strerror(-rc));
        admit_release(&c->ticket);
        client_free(c);
        return;
    }
    api_conns_add(&srv.conns, &c->conn);
    pthread_mutex_unlock(&srv.conns.lock);
}

static int tls_setup(const char *cert, const char *key)
{
    int rc = gnutls_certificate_allocate_credentials(&srv.x509);
    if (rc < 0) {
        log_error("api: TLS credentials: %s", gnutls_strerror(rc));
        return -ENOMEM;
    }
    rc = gnutls_certificate_set_x509_key_file(srv.x509, cert, key, GNUTLS_X509_FMT_PEM);
    if (rc < 0) {
        log_error("api: cannot load TLS certificate %s / key %s: %s", cert, key,
                  gnutls_strerror(rc));
        gnutls_certificate_free_credentials(srv.x509);
        srv.x509 = NULL;
        return -EINVAL;
    }
    rc = gnutls_priority_init(&srv.prio, "NORMAL", NULL);
    if (rc < 0) {
        log_error("api: TLS priorities: %s", gnutls_strerror(rc));
        gnutls_certificate_free_credentials(srv.x509);
        srv.x509 = NULL;
        return -EINVAL;
    }
    return 0;
}

static void tls_teardown(void)
{
    if (srv.x509) {
        gnutls_certificate_free_credentials(srv.x509);
        gnutls_priority_deinit(srv.prio);
        srv.x509 = NULL;
    }
}

int api_ws_start(const char *listen_addr, const char *cert_file, const char *key_file)
{
    if (srv.running)
        return -EALREADY;
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_host_port(listen_addr, &ss, &sl) < 0) {
        log_error("api: bad --api-listen address %s (want ADDR:PORT)", listen_addr);
        return -EINVAL;
    }
    if ((cert_file && *cert_file) != (key_file && *key_file)) {
        log_error("api: --api-tls-cert and --api-tls-key go together");
        return -EINVAL;
    }
    if (cert_file && *cert_file) {
        int rc = tls_setup(cert_file, key_file);
        if (rc < 0)
            return rc;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        int e = errno;
        log_error("api: socket: %s", strerror(e));
        tls_teardown();
        return -e;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || listen(fd, 128) < 0) {
        int e = errno;
        log_error("api: cannot listen on %s: %s", listen_addr, strerror(e));
        close(fd);
        tls_teardown();
        return -e;
    }
    snprintf(srv.addr, sizeof(srv.addr), "%s", listen_addr);
    srv.conns.stopping = false;
    srv.acceptor.name = srv.addr;
    srv.acceptor.accept_flags = SOCK_CLOEXEC | SOCK_NONBLOCK;
    srv.acceptor.on_accept = accept_one;
    int rc = api_acceptor_start(&srv.acceptor, fd);
    if (rc < 0) {
        close(fd);
        tls_teardown();
        return rc;
    }
    srv.running = true;
    /* The bound address: for ":0" the port the kernel chose. */
    char bound[LISTENER_ADDR_MAX];
    if (sock_bound_addr(fd, bound, sizeof(bound)) < 0)
        snprintf(bound, sizeof(bound), "%s", listen_addr);
    log_info("api: WebSocket JSON-RPC on %s://%s/api/current", srv.x509 ? "wss" : "ws", bound);
    return 0;
}

static void client_wake(struct api_conn *conn)
{
    struct ws_client *c = container_of(conn, struct ws_client, conn);
    shutdown(c->fd, SHUT_RDWR);
    wake(c);
}

void api_ws_stop(void)
{
    if (!srv.running)
        return;
    api_acceptor_stop(&srv.acceptor);
    api_conns_stop(&srv.conns, client_wake);
    tls_teardown();
    srv.running = false;
    log_info("api: WebSocket listener on %s stopped", srv.addr);
}
