/*
 * One NBD connection's life (nbd_conn.h, nbd_conn_internal.h): admission,
 * the registry of live connections, the input loop that hands the bytes
 * to the phase the connection is in (nbd_handshake.c, then
 * nbd_transmission.c), the handshake deadline, close, and the shutdown
 * drain. Runs on the connection's reactor thread, except the registry
 * walks (API and main threads).
 */
#include "nbd/nbd_conn.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/iostats.h"
#include "core/log.h"
#include "core/util.h"
#include "nbd/nbd_conn_internal.h"
#include "nbd/nbd_dirty.h"
#include "nbd/nbd_handshake.h"
#include "nbd/nbd_server.h"
#include "nbd/nbd_transmission.h"

/* ---- registry (for EBUSY on delete, and forced close) ---- */

static struct registry conns = REGISTRY_INIT(0);
static atomic_uint nbd_conn_count;
static atomic_bool draining_all; /* shutdown: refuse new connections */

/* Admission: max_connections (nbd.global) in all, fewer still in their
 * handshake (core/admit.h). */
static struct admit_gate nbd_gate = ADMIT_GATE_INIT("nbd", NBD_DEFAULT_MAX_CONNECTIONS);

static struct nbd_conn *conn_of(struct registry_entry *e)
{
    return container_of(e, struct nbd_conn, reg);
}

static void reg_set_export(struct nbd_conn *nc, struct nbd_export *e)
{
    registry_lock(&conns);
    nc->exp = e;
    registry_unlock(&conns);
}

int nbd_sessions_list(struct nbd_session_info **out)
{
    registry_lock(&conns);
    size_t n = conns.count;
    struct nbd_session_info *a = calloc(n ? n : 1, sizeof(*a));
    if (!a) {
        registry_unlock(&conns);
        return -ENOMEM;
    }
    size_t i = 0;
    REGISTRY_FOREACH (&conns, reg) {
        struct nbd_conn *nc = conn_of(reg);
        struct nbd_session_info *s = &a[i++];
        snprintf(s->peer, sizeof(s->peer), "%s", nc->c->peer);
        /* Once exp is set (under the lock, at the end of the handshake)
         * the negotiated flags no longer change: safe to read here. */
        if (nc->exp) {
            snprintf(s->export, sizeof(s->export), "%s", nc->exp->name);
            /* the size this connection negotiated: it keeps it across
             * a resize (NBD cannot tell a client), see nbd_config.c */
            s->size = nc->caps.size;
            s->transmission = true;
            s->tls = nc->tls;
            s->structured = nc->structured;
            s->base_allocation = nc->meta_alloc;
            s->readonly = (nc->caps.eflags & NBD_FLAG_READ_ONLY) != 0;
            s->multi_conn = (nc->caps.eflags & NBD_FLAG_CAN_MULTI_CONN) != 0;
        }
        s->connected_at = nc->connected_at;
        s->requests = atomic_load_explicit(&nc->st_requests, memory_order_relaxed);
        s->bytes_read = atomic_load_explicit(&nc->st_read, memory_order_relaxed);
        s->bytes_written = atomic_load_explicit(&nc->st_written, memory_order_relaxed);
    }
    registry_unlock(&conns);
    *out = a;
    return (int)n;
}

unsigned nbd_export_connections(const char *name)
{
    unsigned n = 0;
    registry_lock(&conns);
    REGISTRY_FOREACH (&conns, reg) {
        struct nbd_conn *nc = conn_of(reg);
        if (nc->exp && strcmp(nc->exp->name, name) == 0)
            n++;
    }
    registry_unlock(&conns);
    return n;
}

void nbd_export_close_connections(const char *name)
{
    registry_lock(&conns);
    REGISTRY_FOREACH (&conns, reg) {
        struct nbd_conn *nc = conn_of(reg);
        if (nc->exp && strcmp(nc->exp->name, name) == 0)
            conn_close_async(nc->c);
    }
    registry_unlock(&conns);
}

unsigned nbd_conn_live(void)
{
    return atomic_load(&nbd_conn_count);
}

void nbd_conn_enter_transmission(struct nbd_conn *nc, struct nbd_export *e, uint16_t eflags)
{
    nbd_export_ref(e);
    nc->vol = e->vol;
    nc->mslot = iostats_slot(volume_name(e->vol));
    iostats_bind(nc->mslot, IOSTATS_NBD);
    nc->caps.eflags = eflags;
    nc->caps.structured = nc->structured;
    /* BLOCK_STATUS is valid with any meta context selected */
    nc->caps.meta_alloc = nc->meta_alloc || nc->dirty;
    nc->caps.size = volume_size(e->vol);
    nc->caps.max_length = nc->settings->max_request;
    /* Last: from here nbd_sessions_list reads the negotiated state. */
    reg_set_export(nc, e);
    nc->state = ST_TRANSMISSION;
    admit_promote(&nc->ticket);
    if (reactor_timer_armed(&nc->handshake_timer)) {
        reactor_timer_cancel(nc->c->reactor, &nc->handshake_timer);
        conn_put(nc->c); /* the timer's reference */
    }
    log_debug("%s: nbd: export '%s' (flags 0x%x%s%s)", nc->c->peer, e->name, nc->caps.eflags,
              nc->structured ? ", structured" : "", nc->tls ? ", tls" : "");
}

static int nbd_on_input(struct conn *c)
{
    struct nbd_conn *nc = c->proto;
    int rc = 0;
    nc->in_input = true;
    while (rc == 0 && !c->closing && (conn_input_len(c) > 0 || c->input_direct)) {
        if (nc->skip) {
            size_t n = (size_t)MIN((uint64_t)conn_input_len(c), nc->skip);
            conn_consume(c, n);
            nc->skip -= n;
            if (nc->skip == 0 && nc->skip_reply)
                nbd_transmission_skipped(nc);
            continue;
        }
        if (nc->draining) {
            rc = 1; /* shutdown: no new requests, nor the rest of a payload */
            break;
        }
        if (nc->rx_req) {
            rc = nbd_transmission_payload(nc);
            continue;
        }
        switch (nc->state) {
        case ST_CLIENT_FLAGS:
            rc = nbd_handshake_client_flags(nc);
            break;
        case ST_OPTIONS:
            rc = nbd_handshake_option(nc);
            break;
        case ST_TRANSMISSION:
            if (nc->disconnecting)
                rc = 1;
            else
                rc = nbd_transmission_request(nc);
            break;
        }
    }
    nc->in_input = false;
    if (rc == -ECONNRESET || rc == -ECONNABORTED)
        return rc; /* orderly: DISC or ABORT */
    return rc < 0 ? rc : 0;
}

static void nbd_on_close(struct conn *c)
{
    struct nbd_conn *nc = c->proto;
    if (!nc)
        return;
    registry_remove(&conns, &nc->reg);
    if (reactor_timer_armed(&nc->handshake_timer)) {
        reactor_timer_cancel(c->reactor, &nc->handshake_timer);
        conn_put(c); /* the timer's reference; the socket's is still held */
    }
    if (reactor_timer_armed(&nc->unavail_timer)) {
        reactor_timer_cancel(c->reactor, &nc->unavail_timer);
        conn_put(c);
    }
    nbd_transmission_close(nc);
    log_debug("%s: nbd: connection closed", c->peer);
}

static void nbd_on_free(struct conn *c)
{
    struct nbd_conn *nc = c->proto;
    if (!nc)
        return;
    nbd_transmission_free(nc);
    nbd_dirty_put(nc->dirty);
    nbd_dirty_put(nc->dirty_lookup);
    if (nc->exp)
        nbd_export_unref(nc->exp);
    nbd_settings_unref(nc->settings);
    admit_release(&nc->ticket);
    free(nc);
    c->proto = NULL;
    atomic_fetch_sub(&nbd_conn_count, 1);
}

static const struct conn_ops nbd_conn_ops = {
    .on_input = nbd_on_input,
    .on_close = nbd_on_close,
    .on_free = nbd_on_free,
};

static void handshake_expired(struct reactor_timer *t)
{
    struct nbd_conn *nc = container_of(t, struct nbd_conn, handshake_timer);
    struct conn *c = nc->c;
    /* A dirty-bitmap lookup the client asked for (an RBD diff or a file
     * compare, on the I/O pool) is the server's work, not a client that
     * stalls: the deadline waits for it, NBD_DIRTY_WAITS times at most. */
    if (!c->closing && nc->state != ST_TRANSMISSION && nc->dirty_lookup &&
        !nbd_dirty_done(nc->dirty_lookup) && nc->dirty_waits < NBD_DIRTY_WAITS) {
        if (nc->dirty_waits++ == 0)
            log_info("%s: nbd: handshake waits for its dirty-bitmap lookup (up to %u s more)",
                     c->peer, NBD_DIRTY_WAITS * admit_handshake_timeout_s());
        reactor_timer_start(c->reactor, &nc->handshake_timer, admit_handshake_timeout_ns());
        return; /* the timer keeps its reference */
    }
    if (!c->closing && nc->state != ST_TRANSMISSION) {
        admit_log(&nbd_gate, "%s: nbd: handshake not finished within %u s, closing", c->peer,
                  admit_handshake_timeout_s());
        conn_close(c);
    }
    conn_put(c); /* the timer's reference */
}

static void unavail_retry(struct reactor_timer *t)
{
    struct nbd_conn *nc = container_of(t, struct nbd_conn, unavail_timer);
    struct conn *c = nc->c;
    if (!c->closing)
        conn_pause_input(c, false); /* processes the kept option again */
    conn_put(c);                    /* the timer's reference */
}

void nbd_conn_retry_input(struct nbd_conn *nc, uint64_t ns)
{
    conn_pause_input(nc->c, true);
    if (!reactor_timer_armed(&nc->unavail_timer)) {
        conn_get(nc->c);
        reactor_timer_start(nc->c->reactor, &nc->unavail_timer, ns);
    }
}

/* On the owner reactor: nc was allocated by nbd_conn_accept. */
static int nbd_conn_init(struct conn *c, void *arg)
{
    struct nbd_conn *nc = arg;
    nc->c = c;
    c->proto = nc;
    registry_add(&conns, &nc->reg); /* no cap: cannot fail */
    conn_get(c);
    reactor_timer_start(c->reactor, &nc->handshake_timer, admit_handshake_timeout_ns());
    return nbd_handshake_hello(nc);
}

void nbd_conn_accept(int fd, const struct sockaddr *peer, socklen_t peerlen)
{
    char name[80];
    format_sockaddr(peer, peerlen, name, sizeof(name));
    struct nbd_settings *s = nbd_settings_current();
    struct nbd_conn *nc = NULL;
    if (atomic_load(&draining_all))
        goto refuse;
    admit_set_max_total(&nbd_gate, s->max_connections);
    nc = calloc(1, sizeof(*nc));
    if (!nc) {
        log_error("%s: nbd: out of memory for a connection", name);
        goto refuse;
    }
    if (admit_try(&nbd_gate, fd, peer, peerlen, name, &nc->ticket) < 0)
        goto refuse; /* logged by admit */
    atomic_fetch_add(&nbd_conn_count, 1);
    nc->state = ST_CLIENT_FLAGS;
    nc->mslot = -1;
    nc->settings = s;
    nc->connected_at = (uint64_t)time(NULL);
    nbd_transmission_init(nc);
    reactor_timer_init(&nc->handshake_timer, handshake_expired);
    reactor_timer_init(&nc->unavail_timer, unavail_retry);
    /* On failure before init runs, conn_adopt closes fd; the rest is
     * released here. Once init has run, on_free releases it. */
    if (conn_adopt(reactor_next(), fd, peer, peerlen, &nbd_conn_ops, nbd_conn_init, nc) == 0)
        return;
    atomic_fetch_sub(&nbd_conn_count, 1);
    admit_release(&nc->ticket);
    fd = -1; /* conn_adopt closed it */
refuse:
    nbd_settings_unref(s);
    free(nc);
    if (fd >= 0)
        close(fd);
}

/* ---- shutdown drain ---- */

static void drain_run(struct reactor_msg *m)
{
    struct nbd_conn *nc = container_of(m, struct nbd_conn, drain_msg);
    struct conn *c = nc->c;
    if (!c->closing) {
        nc->draining = true;
        if (nc->state != ST_TRANSMISSION) {
            conn_close(c);
        } else {
            nc->paused = true;
            conn_pause_input(c, true);
            nbd_transmission_drain_check(nc);
        }
    }
    conn_put(c);
}

void nbd_conn_drain_all(void)
{
    atomic_store(&draining_all, true);
    registry_lock(&conns);
    REGISTRY_FOREACH (&conns, reg) {
        struct nbd_conn *nc = conn_of(reg);
        conn_get(nc->c);
        nc->drain_msg.fn = drain_run;
        reactor_post(nc->c->reactor, &nc->drain_msg);
    }
    registry_unlock(&conns);
}

void nbd_conn_close_all(void)
{
    registry_lock(&conns);
    REGISTRY_FOREACH (&conns, reg)
        conn_close_async(conn_of(reg)->c);
    registry_unlock(&conns);
}
