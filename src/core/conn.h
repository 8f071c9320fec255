/*
 * A stream connection owned by one reactor: socket, pluggable transport
 * (plain or TLS), input buffer, and an output queue that is written with one
 * writev per loop iteration (reactor_defer). All functions must be called on
 * the owning reactor's thread unless stated otherwise.
 *
 * Lifetime: a conn starts with one reference, owned by the socket. conn_close()
 * (or EOF / error) stops I/O, calls ops->on_close once and drops that
 * reference. Protocol code takes conn_get() for each request in flight (e.g.
 * in the I/O pool) and conn_put()s it on completion; when the count reaches
 * zero ops->on_free releases the protocol state, then the conn is freed.
 */
#ifndef BLOCKD_CORE_CONN_H
#define BLOCKD_CORE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/reactor.h"

struct conn;

struct conn_ops {
    /* Input is available in conn_input(). Consume what you parsed with
     * conn_consume(). Return 0, or -errno to close the connection. */
    int (*on_input)(struct conn *c);
    /* The connection is closing (peer EOF, error, or conn_close). Called once. */
    void (*on_close)(struct conn *c);
    /* Last reference dropped: free c->proto. May be NULL. */
    void (*on_free)(struct conn *c);
};

/* A byte transport under the connection (plain socket by default, TLS). */
struct conn_transport {
    /* >0 bytes, 0 at EOF, -EAGAIN when nothing is ready, other -errno. */
    ssize_t (*recv)(struct conn *c, void *buf, size_t len);
    /* bytes written (may be short), -EAGAIN, or -errno. */
    ssize_t (*sendv)(struct conn *c, const struct iovec *iov, int iovcnt);
    /* Bytes already decrypted and buffered inside the transport. */
    size_t (*pending)(struct conn *c);
    void (*destroy)(struct conn *c);
};

/* Called when queued output has been written (or dropped at close). */
typedef void (*conn_release_fn)(void *arg);

struct conn {
    struct reactor_handler handler; /* private */
    struct reactor *reactor;
    int fd;
    char peer[80]; /* "addr:port" or "unix" — name it in every log line */
    void *proto;   /* protocol state */
    const struct conn_ops *ops;
    const struct conn_transport *transport;
    void *transport_ctx;
    /* Set by the protocol while it waits for a large payload that it
     * receives straight into its own buffer (transport->recv): while the
     * input buffer is empty, readable events go to on_input without a read
     * into the input buffer, so the payload is not copied twice. */
    bool input_direct;
    /* private below */
    int refs;
    bool closing;
    bool flush_deferred;
    bool reading_paused;
    bool finishing;                    /* conn_finish: closing once output is written */
    bool write_shut;                   /* FIN sent */
    struct reactor_timer finish_timer; /* polls until the peer has our FIN */
    struct reactor_msg release_msg;    /* drops the socket's reference after close */
    uint32_t events;
    uint8_t *in_buf;
    size_t in_start, in_end, in_cap, in_max;
    struct conn_out *out_head, *out_tail;
    struct conn_out *out_free; /* recycled queue nodes */
    unsigned out_free_count;
    size_t out_bytes;
    size_t out_count;
    struct reactor_msg flush_msg;
    uint64_t bytes_in, bytes_out;
};

/* Adopt an accepted, connected socket on reactor r. Thread-safe: the conn is
 * registered by a message posted to r; ops->on_input etc. run there. The
 * optional init callback runs first on r's thread (to set proto). */
typedef int (*conn_init_fn)(struct conn *c, void *arg);
int conn_adopt(struct reactor *r, int fd, const struct sockaddr *peer, socklen_t peerlen,
               const struct conn_ops *ops, conn_init_fn init, void *init_arg);

/* Unread input. */
static inline const uint8_t *conn_input(const struct conn *c)
{
    return c->in_buf + c->in_start;
}
static inline size_t conn_input_len(const struct conn *c)
{
    return c->in_end - c->in_start;
}
void conn_consume(struct conn *c, size_t n);
/* Allow the input buffer to grow to hold at least n unread bytes (so a
 * protocol can wait for a whole PDU/payload). Capped by the caller's limits. */
int conn_input_reserve(struct conn *c, size_t n);

/* Queue bytes for sending; the iov data must stay valid until release(arg)
 * is called. Output is written at the end of the loop iteration. */
int conn_send(struct conn *c, const struct iovec *iov, int iovcnt, conn_release_fn release,
              void *arg);
/* Queue a private copy of small data (headers). */
int conn_send_copy(struct conn *c, const void *data, size_t len);
/* Write queued output now (e.g. before switching the transport to TLS).
 * Returns 0 when everything is written, -EAGAIN if some remains queued. */
int conn_flush_now(struct conn *c);
size_t conn_output_queued(const struct conn *c);
/* Number of queued output entries (each conn_send/conn_send_copy adds at
 * least one), for protocols that bound their reply backlog. (added by nbd) */
static inline size_t conn_output_entries(const struct conn *c)
{
    return c->out_count;
}

/* Replace the transport (e.g. after STARTTLS). ctx is passed back via
 * c->transport_ctx and destroyed by transport->destroy at free. */
void conn_set_transport(struct conn *c, const struct conn_transport *t, void *ctx);

/* Stop reading input (back-pressure) or resume. */
void conn_pause_input(struct conn *c, bool pause);

/* Graceful close: stop delivering input to the protocol (what still arrives
 * is read and dropped), write everything queued, send FIN after it, and
 * close when the peer closes its side (or on error). A peer that neither
 * reads nor closes keeps the connection until conn_close(). Idempotent.
 * Thread: owner only. */
void conn_finish(struct conn *c);

void conn_get(struct conn *c);
void conn_put(struct conn *c);
/* Close: flush what can be flushed without blocking, shut the socket down,
 * call on_close. Safe to call more than once. Thread: owner only. */
void conn_close(struct conn *c);
/* Post a close to the owner reactor from any thread (takes its own ref). */
void conn_close_async(struct conn *c);

/* Number of live connections (all reactors), for limits. Thread-safe. */
unsigned conn_live_count(void);

#endif
