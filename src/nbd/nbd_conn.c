/*
 * One NBD connection: the fixed-newstyle handshake, option haggling, and the
 * transmission phase. Runs entirely on the connection's reactor thread.
 *
 * Transmission: every complete request in the input buffer is parsed per
 * wake-up, validated in one place (nbd_request_validate), and submitted to
 * the volume at once; replies are queued as each request completes (out of
 * order) and leave with the connection's one writev per loop iteration.
 * Request slots come from a per-connection free list and payload buffers
 * from core/bufpool, so steady state allocates nothing per request. A WRITE
 * payload is copied from the input buffer into its pool buffer as it
 * arrives, so the input buffer never has to grow to hold a large write.
 */
#include "nbd/nbd_conn.h"

#include <errno.h>
#include <linux/sockios.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "core/admit.h"
#include "core/bufpool.h"
#include "core/conn.h"
#include "core/iostats.h"
#include "core/log.h"
#include "core/registry.h"
#include "core/tls.h"
#include "core/util.h"
#include "nbd/nbd_export.h"
#include "nbd/nbd_proto.h"
#include "nbd/nbd_server.h"

#define NBD_OPT_MAX_LEN (64u * 1024) /* longer options get ERR_TOO_BIG */
#define NBD_SKIP_MAX (256u << 20)    /* longer ignored payloads disconnect */
#define NBD_READ_CHUNK (1u << 20)    /* structured reads stream in chunks of this */
#define NBD_HOLE_MIN (64u * 1024)    /* smaller reads never look for holes */
#define NBD_EXTENTS_MAX 128          /* per BLOCK_STATUS / hole-aware read */
/* Payload bytes a connection holds: reads waiting to be sent, writes
 * waiting to be written. Past that, requests wait in the socket. 4 MiB keeps
 * loopback TCP and a disk busy (at 1 ms per request, 4 GB/s); holding more
 * only pushes the buffers out of the CPU caches, and makes the reactor
 * receive write payloads in more, smaller pieces, each recv sending the
 * client a TCP window update. Against 64 MiB, alternating runs (fio nbd,
 * nbdcopy): 1 MiB QD8 writes 3,368 -> 3,607 IOPS (median of 4, with 3 MiB),
 * 1 MiB QD8 reads 2,590 -> 2,768 (median of 6), nbdcopy on one connection
 * 1,675 -> 1,915 MiB/s (median of 5; nbdkit 1,915). */
#define NBD_HELD_MAX (4u << 20)
#define NBD_MAX_OPTIONS 4096    /* options per connection before we give up */
#define NBD_OUT_MAX (16u << 20) /* queued reply bytes before we stop parsing */
#define NBD_OUT_ENTRIES_MAX 8192u
#define NBD_BACKLOG_RETRY_NS (5u * 1000 * 1000) /* re-check a reply backlog every 5 ms */
#define NBD_DIRECT_RX_MIN (64u * 1024)          /* payloads this big bypass the input buffer */
/* Over the global payload budget, a connection that holds nothing and whose
 * peer has read everything sent to it may still start one request of up to
 * this much payload: a client that reads its replies is never starved by
 * clients that do not (those hold their payload until they read). */
#define NBD_HELD_FLOOR (1u << 20)
#define NBD_BUDGET_RETRY_NS (20u * 1000 * 1000) /* re-check the payload budget every 20 ms */

enum nbd_state { ST_CLIENT_FLAGS, ST_OPTIONS, ST_TRANSMISSION };

struct nbd_req;

/* One chunk of a structured read (a data range read separately). */
struct nbd_sub {
    struct vreq vr;
    struct nbd_req *req;
    uint8_t hdr[NBD_CHUNK_HEADER_LEN + 8];
};

struct nbd_req {
    struct vreq vr;
    struct nbd_conn *nc;
    struct nbd_req *next_free;
    struct nbd_request rq;
    void *buf;
    size_t buf_size;
    struct extent *ext; /* hole-aware reads and BLOCK_STATUS (in buf2) */
    void *buf2;
    size_t buf2_size;
    struct nbd_sub *subs;
    unsigned subs_left; /* chunk completions still to come */
    unsigned pending;   /* sends + completions before the slot is free */
    uint64_t mt0;       /* iostats_start time; 0: not counted */
    bool mfailed;       /* the client got an error (for the metrics) */
    uint8_t hdr[NBD_CHUNK_HEADER_LEN + 16];
};

struct nbd_conn {
    struct conn *c;
    enum nbd_state state;
    bool no_zeroes;
    bool structured;
    bool meta_alloc;
    bool tls;
    bool starttls_pending;
    bool disconnecting;
    bool paused;
    bool in_input;
    bool kick_posted;
    unsigned options;
    struct nbd_settings *settings;
    struct nbd_export *exp; /* transmission: the export in use (ref) */
    struct volume *vol;
    int mslot; /* iostats slot of vol, -1 none */
    struct nbd_session_caps caps;
    struct nbd_req *free_reqs;
    unsigned inflight;
    size_t held;
    struct nbd_req *rx_req; /* WRITE whose payload is arriving */
    uint32_t rx_got;
    uint64_t skip; /* bytes of input to discard */
    /* A refused WRITE is answered only after its payload has been skipped:
     * clients (libnbd) match replies only to fully sent requests. */
    bool skip_reply;
    uint32_t skip_error;
    uint64_t skip_cookie;
    struct reactor_msg kick;
    /* Retries parsing while replies the client has not read pile up. */
    struct reactor_timer backlog_timer;
    /* in the registry of live connections (nbd_export_connections) */
    struct registry_entry reg;
    /* nbd.global.sessions: written by the reactor only (counter_add), read
     * by API threads under the registry's lock */
    uint64_t connected_at;
    _Atomic uint64_t st_requests, st_read, st_written;
    /* admission (pending until the handshake ends) and its deadline */
    struct admit_ticket ticket;
    struct reactor_timer handshake_timer;
    /* shutdown: no new requests; close once replies are sent */
    bool draining;
    struct reactor_msg drain_msg;
};

/* ---- registry (for EBUSY on delete, and forced close) ---- */

static struct registry conns = REGISTRY_INIT(0);
static atomic_uint nbd_conn_count;
static atomic_bool draining_all; /* shutdown: refuse new connections */

/* Admission: max_connections (nbd.global) in all, fewer still in their
 * handshake (core/admit.h). */
static struct admit_gate nbd_gate = ADMIT_GATE_INIT("nbd", NBD_DEFAULT_MAX_CONNECTIONS);

/* Payload bytes held by every connection together (read data waiting to be
 * sent, write data waiting to be written), and the budget past which
 * connections stop reading new requests. */
static _Atomic size_t held_total;
static _Atomic size_t held_budget = NBD_DEFAULT_PAYLOAD_BUDGET;

void nbd_set_payload_budget(size_t bytes)
{
    if (bytes)
        atomic_store(&held_budget, bytes);
}

size_t nbd_payload_held(void)
{
    return atomic_load(&held_total);
}

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
            s->size = volume_size(nc->exp->vol);
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

/* ---- request slots ---- */

static struct nbd_req *req_get(struct nbd_conn *nc)
{
    struct nbd_req *r = nc->free_reqs;
    if (r) {
        nc->free_reqs = r->next_free;
    } else {
        r = calloc(1, sizeof(*r));
        if (!r)
            return NULL;
        r->nc = nc;
    }
    nc->inflight++;
    conn_get(nc->c);
    return r;
}

/* Payload bytes the request at the head of the input will hold (0: none,
 * or not all of its header has arrived). */
static size_t next_request_payload(const struct nbd_conn *nc)
{
    const struct conn *c = nc->c;
    struct nbd_request rq;
    if (nc->state != ST_TRANSMISSION || conn_input_len(c) < NBD_REQUEST_LEN ||
        nbd_request_parse(conn_input(c), &rq) < 0)
        return 0;
    if (rq.type != NBD_CMD_READ && rq.type != NBD_CMD_WRITE)
        return 0;
    return MIN(rq.length, nc->settings->max_request);
}

/* The global budget lets this connection take need more bytes. Past it, a
 * connection that holds nothing and whose peer has read everything sent to
 * it (nothing queued here or in the kernel) may take one small request. */
static bool budget_allows(const struct nbd_conn *nc, size_t need)
{
    if (need == 0 || atomic_load(&held_total) + need <= atomic_load(&held_budget))
        return true;
    if (nc->held != 0 || need > NBD_HELD_FLOOR || conn_output_queued(nc->c) != 0)
        return false;
    int unsent = 0;
    return ioctl(nc->c->fd, SIOCOUTQ, &unsent) == 0 && unsent == 0;
}

/* Room for one more request's payload (and a request slot). */
static bool payload_room(const struct nbd_conn *nc)
{
    return nc->inflight < nc->settings->max_inflight && nc->held < NBD_HELD_MAX &&
           budget_allows(nc, next_request_payload(nc));
}

static void drain_check(struct nbd_conn *nc);
static void paused_poll_start(struct nbd_conn *nc);

static void conn_kick_run(struct reactor_msg *m)
{
    struct nbd_conn *nc = container_of(m, struct nbd_conn, kick);
    struct conn *c = nc->c;
    nc->kick_posted = false;
    if (!c->closing) {
        if (nc->draining)
            drain_check(nc);
        else if (nc->disconnecting && nc->inflight == 0)
            conn_close(c);
        else if (nc->paused && payload_room(nc)) {
            nc->paused = false;
            conn_pause_input(c, false);
        } else if (nc->paused) {
            paused_poll_start(nc); /* now waiting on the budget, say */
        }
    }
    conn_put(c);
}

/* Wake the parser (or finish a DISC) from a completion, outside any
 * output-queue callback. */
static void conn_kick(struct nbd_conn *nc)
{
    if (nc->kick_posted || nc->c->closing)
        return;
    nc->kick_posted = true;
    conn_get(nc->c);
    nc->kick.fn = conn_kick_run;
    reactor_post(nc->c->reactor, &nc->kick);
}

/* The metrics operation of an NBD command. */
static enum iostats_op nbd_iostats_op(uint16_t type)
{
    switch (type) {
    case NBD_CMD_READ:
        return IOSTATS_READ;
    case NBD_CMD_WRITE:
        return IOSTATS_WRITE;
    case NBD_CMD_FLUSH:
        return IOSTATS_FLUSH;
    case NBD_CMD_TRIM:
        return IOSTATS_UNMAP;
    default:
        return IOSTATS_OTHER;
    }
}

static void req_free(struct nbd_req *r)
{
    struct nbd_conn *nc = r->nc;
    struct conn *c = nc->c;
    if (r->mt0) {
        enum iostats_op op = nbd_iostats_op(r->rq.type);
        uint64_t bytes = op == IOSTATS_FLUSH || op == IOSTATS_OTHER ? 0 : r->rq.length;
        iostats_done(nc->mslot, IOSTATS_NBD, op, bytes, r->mfailed, r->mt0);
        r->mt0 = 0;
    }
    if (r->buf) {
        nc->held -= r->buf_size;
        atomic_fetch_sub(&held_total, r->buf_size);
        bufpool_put(r->buf, r->buf_size);
        r->buf = NULL;
    }
    if (r->buf2) {
        bufpool_put(r->buf2, r->buf2_size);
        r->buf2 = NULL;
    }
    r->subs = NULL;
    r->ext = NULL;
    r->next_free = nc->free_reqs;
    nc->free_reqs = r;
    nc->inflight--;
    if (nc->paused || (nc->disconnecting && nc->inflight == 0))
        conn_kick(nc);
    conn_put(c);
}

static void req_release(void *arg)
{
    struct nbd_req *r = arg;
    if (--r->pending == 0)
        req_free(r);
}

static int req_buf(struct nbd_req *r, size_t size)
{
    r->buf = bufpool_get(size);
    if (!r->buf)
        return -ENOMEM;
    r->buf_size = size;
    r->nc->held += size;
    atomic_fetch_add(&held_total, size);
    return 0;
}

/* ---- replies ---- */

static void send_simple(struct nbd_conn *nc, uint64_t cookie, uint32_t error)
{
    uint8_t b[NBD_SIMPLE_REPLY_LEN];
    nbd_simple_reply(b, error, cookie);
    conn_send_copy(nc->c, b, sizeof(b));
}

/* An error for READ/BLOCK_STATUS in structured mode (ERROR_OFFSET when the
 * offset is known), else a simple error reply. */
static void send_error(struct nbd_conn *nc, const struct nbd_request *rq, uint32_t error,
                       bool has_offset, uint64_t offset, bool done)
{
    if (!nc->structured || (rq->type != NBD_CMD_READ && rq->type != NBD_CMD_BLOCK_STATUS)) {
        send_simple(nc, rq->cookie, error);
        return;
    }
    uint8_t b[NBD_CHUNK_HEADER_LEN + 14];
    uint32_t plen = has_offset ? 14 : 6;
    nbd_chunk_header(b, done ? NBD_REPLY_FLAG_DONE : 0,
                     has_offset ? NBD_REPLY_TYPE_ERROR_OFFSET : NBD_REPLY_TYPE_ERROR, rq->cookie,
                     plen);
    be32_store(b + 20, error);
    be16_store(b + 24, 0);
    if (has_offset)
        be64_store(b + 26, offset);
    conn_send_copy(nc->c, b, NBD_CHUNK_HEADER_LEN + plen);
}

static void send_opt_reply(struct nbd_conn *nc, uint32_t opt, uint32_t type, const void *data,
                           uint32_t len)
{
    uint8_t b[NBD_OPT_REPLY_HEADER_LEN + 8 + NBD_MAX_STRING + 8];
    if (len > sizeof(b) - NBD_OPT_REPLY_HEADER_LEN)
        len = (uint32_t)(sizeof(b) - NBD_OPT_REPLY_HEADER_LEN);
    nbd_opt_reply_header(b, opt, type, len);
    if (len)
        memcpy(b + NBD_OPT_REPLY_HEADER_LEN, data, len);
    conn_send_copy(nc->c, b, NBD_OPT_REPLY_HEADER_LEN + len);
}

/* ---- transmission: completions ---- */

static void read_done(struct vreq *vr)
{
    struct nbd_req *r = container_of(vr, struct nbd_req, vr);
    struct nbd_conn *nc = r->nc;
    if (vr->result < 0) {
        r->mfailed = true;
        send_error(nc, &r->rq, nbd_errno_to_wire(vr->result), true, r->rq.offset, true);
        req_free(r);
        return;
    }
    struct iovec iov[2];
    if (nc->structured) {
        nbd_chunk_header(r->hdr, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_DATA, r->rq.cookie,
                         8 + r->rq.length);
        be64_store(r->hdr + NBD_CHUNK_HEADER_LEN, r->rq.offset);
        iov[0] = (struct iovec){r->hdr, NBD_CHUNK_HEADER_LEN + 8};
    } else {
        nbd_simple_reply(r->hdr, 0, r->rq.cookie);
        iov[0] = (struct iovec){r->hdr, NBD_SIMPLE_REPLY_LEN};
    }
    iov[1] = (struct iovec){r->buf, r->rq.length};
    r->pending = 1;
    counter_add(&nc->st_read, r->rq.length);
    conn_send(nc->c, iov, 2, req_release, r);
}

static void sub_done(struct vreq *vr)
{
    struct nbd_sub *s = container_of(vr, struct nbd_sub, vr);
    struct nbd_req *r = s->req;
    struct nbd_conn *nc = r->nc;
    bool last = --r->subs_left == 0;
    if (vr->result < 0) {
        r->mfailed = true;
        send_error(nc, &r->rq, nbd_errno_to_wire(vr->result), true, vr->offset, last);
        req_release(r);
        return;
    }
    nbd_chunk_header(s->hdr, last ? NBD_REPLY_FLAG_DONE : 0, NBD_REPLY_TYPE_OFFSET_DATA,
                     r->rq.cookie, (uint32_t)(8 + vr->length));
    be64_store(s->hdr + NBD_CHUNK_HEADER_LEN, vr->offset);
    struct iovec iov[2] = {{s->hdr, sizeof(s->hdr)}, {vr->buf, (size_t)vr->length}};
    counter_add(&nc->st_read, vr->length);
    /* The completion's pending count becomes the send's. */
    conn_send(nc->c, iov, 2, req_release, r);
}

static void send_hole(struct nbd_conn *nc, const struct nbd_request *rq, uint64_t off, uint32_t len,
                      bool done)
{
    uint8_t b[NBD_CHUNK_HEADER_LEN + 12];
    nbd_chunk_header(b, done ? NBD_REPLY_FLAG_DONE : 0, NBD_REPLY_TYPE_OFFSET_HOLE, rq->cookie, 12);
    be64_store(b + 20, off);
    be32_store(b + 28, len);
    counter_add(&nc->st_read, len);
    conn_send_copy(nc->c, b, sizeof(b));
}

/* Plan a structured read from the extents of its range: holes become
 * OFFSET_HOLE chunks, data is read in chunks of NBD_READ_CHUNK, each sent
 * as it completes; the last completion carries the DONE flag. */
static void read_plan(struct nbd_req *r, const struct extent *ext, size_t n)
{
    struct nbd_conn *nc = r->nc;
    const struct nbd_request *rq = &r->rq;
    uint64_t end = rq->offset + rq->length;
    bool df = rq->flags & NBD_CMD_FLAG_DF;
    /* Coalesce into (offset, length, hole) ranges covering the request. */
    struct range {
        uint64_t off, len;
        bool hole;
    } ranges[NBD_EXTENTS_MAX + 1];
    size_t nr = 0;
    uint64_t pos = rq->offset;
    for (size_t i = 0; i < n && pos < end; i++) {
        uint64_t eoff = MAX(ext[i].offset, pos);
        uint64_t eend = MIN(ext[i].offset + ext[i].length, end);
        if (eend <= eoff || eoff != pos)
            break;
        bool hole = ext[i].type != EXTENT_DATA;
        if (nr && ranges[nr - 1].hole == hole)
            ranges[nr - 1].len += eend - eoff;
        else
            ranges[nr++] = (struct range){eoff, eend - eoff, hole};
        pos = eend;
    }
    if (pos < end) {
        if (nr && !ranges[nr - 1].hole)
            ranges[nr - 1].len += end - pos;
        else
            ranges[nr++] = (struct range){pos, end - pos, false};
    }
    if (df && nr > 1) {
        nr = 1;
        ranges[0] = (struct range){rq->offset, rq->length, false};
    }
    unsigned nsubs = 0;
    for (size_t i = 0; i < nr; i++)
        if (!ranges[i].hole)
            nsubs += df ? 1 : (unsigned)((ranges[i].len + NBD_READ_CHUNK - 1) / NBD_READ_CHUNK);
    if (nsubs == 0) {
        for (size_t i = 0; i < nr; i++)
            send_hole(nc, rq, ranges[i].off, (uint32_t)ranges[i].len, i + 1 == nr);
        req_free(r);
        return;
    }
    if (req_buf(r, rq->length) < 0) {
        send_error(nc, rq, NBD_ENOMEM, false, 0, true);
        req_free(r);
        return;
    }
    /* Reuse buf2 (the extents) only after we are done reading ext. */
    size_t subs_bytes = nsubs * sizeof(struct nbd_sub);
    void *subs_mem = bufpool_get(subs_bytes);
    if (!subs_mem) {
        send_error(nc, rq, NBD_ENOMEM, false, 0, true);
        req_free(r);
        return;
    }
    for (size_t i = 0; i < nr; i++)
        if (ranges[i].hole)
            send_hole(nc, rq, ranges[i].off, (uint32_t)ranges[i].len, false);
    bufpool_put(r->buf2, r->buf2_size);
    r->buf2 = subs_mem;
    r->buf2_size = subs_bytes;
    r->ext = NULL;
    r->subs = subs_mem;
    r->subs_left = nsubs;
    r->pending = nsubs;
    unsigned k = 0;
    for (size_t i = 0; i < nr; i++) {
        if (ranges[i].hole)
            continue;
        uint64_t off = ranges[i].off, left = ranges[i].len;
        while (left) {
            uint64_t len = df ? left : MIN(left, NBD_READ_CHUNK);
            struct nbd_sub *s = &r->subs[k++];
            memset(&s->vr, 0, sizeof(s->vr));
            s->req = r;
            s->vr.op = VREQ_READ;
            s->vr.offset = off;
            s->vr.length = len;
            s->vr.buf = (uint8_t *)r->buf + (off - rq->offset);
            s->vr.owner = nc->c->reactor;
            s->vr.done = sub_done;
            off += len;
            left -= len;
        }
    }
    /* Submit after every sub is initialised: completions may be inline. */
    struct volume *vol = nc->vol;
    for (unsigned i = 0; i < nsubs; i++)
        volume_submit(vol, &r->subs[i].vr);
}

static void read_extents_done(struct vreq *vr)
{
    struct nbd_req *r = container_of(vr, struct nbd_req, vr);
    if (vr->result < 0) {
        /* No extents: read it all as data. */
        read_plan(r, NULL, 0);
        return;
    }
    read_plan(r, r->ext, vr->extents_count);
}

static void reply_done(struct vreq *vr)
{
    struct nbd_req *r = container_of(vr, struct nbd_req, vr);
    struct nbd_conn *nc = r->nc;
    if (vr->result == 0 && (r->rq.type == NBD_CMD_TRIM || r->rq.type == NBD_CMD_WRITE_ZEROES))
        atomic_store_explicit(&nc->exp->maybe_sparse, true, memory_order_relaxed);
    if (vr->result == 0 && r->rq.type == NBD_CMD_WRITE)
        counter_add(&nc->st_written, r->rq.length);
    r->mfailed = vr->result < 0;
    /* The reply lives in the slot, so queued replies stay bounded by
     * max_inflight even for a client that does not read them. */
    nbd_simple_reply(r->hdr, nbd_errno_to_wire(vr->result), r->rq.cookie);
    struct iovec iov = {r->hdr, NBD_SIMPLE_REPLY_LEN};
    r->pending = 1;
    conn_send(nc->c, &iov, 1, req_release, r);
}

static void block_status_done(struct vreq *vr)
{
    struct nbd_req *r = container_of(vr, struct nbd_req, vr);
    struct nbd_conn *nc = r->nc;
    if (vr->result < 0) {
        send_error(nc, &r->rq, nbd_errno_to_wire(vr->result), false, 0, true);
        req_free(r);
        return;
    }
    /* Descriptors go right after the extents in buf2. */
    uint8_t *out = (uint8_t *)r->buf2 + NBD_EXTENTS_MAX * sizeof(struct extent);
    uint8_t *d = out + NBD_CHUNK_HEADER_LEN + 4;
    uint32_t nd = 0, last_flags = UINT32_MAX;
    uint64_t pos = r->rq.offset, end = r->rq.offset + r->rq.length;
    bool one = r->rq.flags & NBD_CMD_FLAG_REQ_ONE;
    for (size_t i = 0; i < vr->extents_count && pos < end; i++) {
        const struct extent *e = &r->ext[i];
        uint64_t eend = MIN(e->offset + e->length, end);
        if (e->offset != pos || eend <= pos)
            break;
        uint32_t flags = e->type == EXTENT_HOLE   ? (NBD_STATE_HOLE | NBD_STATE_ZERO)
                         : e->type == EXTENT_ZERO ? NBD_STATE_ZERO
                                                  : 0;
        uint32_t len = (uint32_t)(eend - pos);
        if (nd && flags == last_flags) {
            be32_store(d + 8 * (nd - 1), be32_load(d + 8 * (nd - 1)) + len);
        } else {
            if (one && nd == 1)
                break;
            be32_store(d + 8 * nd, len);
            be32_store(d + 8 * nd + 4, flags);
            nd++;
            last_flags = flags;
        }
        pos = eend;
    }
    if (nd == 0) {
        /* The backend described nothing: report the range as data. */
        be32_store(d, r->rq.length);
        be32_store(d + 4, 0);
        nd = 1;
    }
    nbd_chunk_header(out, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, r->rq.cookie,
                     4 + 8 * nd);
    be32_store(out + NBD_CHUNK_HEADER_LEN, NBD_META_ID_BASE_ALLOCATION);
    struct iovec iov = {out, NBD_CHUNK_HEADER_LEN + 4 + 8 * nd};
    r->pending = 1;
    conn_send(nc->c, &iov, 1, req_release, r);
}

/* ---- transmission: dispatch ---- */

static void vreq_init(struct nbd_req *r, enum vreq_op op, void (*done)(struct vreq *))
{
    memset(&r->vr, 0, sizeof(r->vr));
    r->vr.op = op;
    r->vr.offset = r->rq.offset;
    r->vr.length = r->rq.length;
    r->vr.owner = r->nc->c->reactor;
    r->vr.done = done;
}

static void submit_read(struct nbd_conn *nc, struct nbd_req *r)
{
    const struct nbd_request *rq = &r->rq;
    bool big = rq->length > NBD_READ_CHUNK && !(rq->flags & NBD_CMD_FLAG_DF);
    bool holes = rq->length >= NBD_HOLE_MIN &&
                 atomic_load_explicit(&nc->exp->maybe_sparse, memory_order_relaxed) &&
                 (volume_caps(nc->vol) & BDEV_CAN_EXTENTS);
    if (nc->structured && (big || holes)) {
        size_t sz = NBD_EXTENTS_MAX * sizeof(struct extent);
        r->buf2 = bufpool_get(sz);
        if (!r->buf2) {
            send_error(nc, rq, NBD_ENOMEM, false, 0, true);
            req_free(r);
            return;
        }
        r->buf2_size = sz;
        r->ext = r->buf2;
        if (!holes) {
            read_plan(r, NULL, 0);
            return;
        }
        vreq_init(r, VREQ_EXTENTS, read_extents_done);
        r->vr.extents = r->ext;
        r->vr.extents_max = NBD_EXTENTS_MAX;
        volume_submit(nc->vol, &r->vr);
        return;
    }
    if (req_buf(r, rq->length) < 0) {
        send_error(nc, rq, NBD_ENOMEM, false, 0, true);
        req_free(r);
        return;
    }
    vreq_init(r, VREQ_READ, read_done);
    r->vr.buf = r->buf;
    volume_submit(nc->vol, &r->vr);
}

static void submit_block_status(struct nbd_conn *nc, struct nbd_req *r)
{
    size_t sz =
        NBD_EXTENTS_MAX * sizeof(struct extent) + NBD_CHUNK_HEADER_LEN + 4 + 8 * NBD_EXTENTS_MAX;
    r->buf2 = bufpool_get(sz);
    if (!r->buf2) {
        send_error(nc, &r->rq, NBD_ENOMEM, false, 0, true);
        req_free(r);
        return;
    }
    r->buf2_size = sz;
    r->ext = r->buf2;
    vreq_init(r, VREQ_EXTENTS, block_status_done);
    r->vr.extents = r->ext;
    r->vr.extents_max = (r->rq.flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : NBD_EXTENTS_MAX;
    volume_submit(nc->vol, &r->vr);
}

static void submit_write(struct nbd_conn *nc, struct nbd_req *r)
{
    vreq_init(r, VREQ_WRITE, reply_done);
    r->vr.buf = r->buf;
    if (r->rq.flags & NBD_CMD_FLAG_FUA)
        r->vr.flags |= VREQ_FUA;
    volume_submit(nc->vol, &r->vr);
}

static void submit_other(struct nbd_conn *nc, struct nbd_req *r)
{
    const struct nbd_request *rq = &r->rq;
    switch (rq->type) {
    case NBD_CMD_FLUSH:
        vreq_init(r, VREQ_FLUSH, reply_done);
        r->vr.offset = r->vr.length = 0;
        break;
    case NBD_CMD_TRIM:
        vreq_init(r, VREQ_TRIM, reply_done);
        break;
    case NBD_CMD_CACHE:
        vreq_init(r, VREQ_CACHE, reply_done);
        break;
    case NBD_CMD_WRITE_ZEROES:
        vreq_init(r, VREQ_WRITE_ZEROES, reply_done);
        if (!(rq->flags & NBD_CMD_FLAG_NO_HOLE))
            r->vr.flags |= VREQ_MAY_TRIM;
        if (rq->flags & NBD_CMD_FLAG_FAST_ZERO)
            r->vr.flags |= VREQ_FAST_ZERO;
        break;
    default:
        send_simple(nc, rq->cookie, NBD_EINVAL);
        req_free(r);
        return;
    }
    if (rq->flags & NBD_CMD_FLAG_FUA)
        r->vr.flags |= VREQ_FUA;
    volume_submit(nc->vol, &r->vr);
}

/* Move arriving WRITE payload into its buffer: first what the input buffer
 * holds, then straight from the transport into the payload buffer (no copy
 * through the connection's input buffer, one recv for the rest of a large
 * payload). 0 done, 1 need more input, <0 close. */
static int rx_payload(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    struct nbd_req *r = nc->rx_req;
    size_t avail = conn_input_len(c);
    size_t want = r->rq.length - nc->rx_got;
    size_t n = MIN(avail, want);
    memcpy((uint8_t *)r->buf + nc->rx_got, conn_input(c), n);
    conn_consume(c, n);
    nc->rx_got += (uint32_t)n;
    while (nc->rx_got < r->rq.length && conn_input_len(c) == 0 && want >= NBD_DIRECT_RX_MIN) {
        ssize_t got =
            c->transport->recv(c, (uint8_t *)r->buf + nc->rx_got, r->rq.length - nc->rx_got);
        if (got == -EAGAIN || got == -EINTR)
            break;
        if (got <= 0) {
            log_debug("%s: nbd: connection lost in a write payload", c->peer);
            return got < 0 ? (int)got : -ECONNRESET;
        }
        nc->rx_got += (uint32_t)got;
    }
    /* The rest of a large payload is received by the loop above on the
     * next readable event, not copied through the input buffer. */
    c->input_direct = nc->rx_got < r->rq.length && want >= NBD_DIRECT_RX_MIN;
    if (nc->rx_got < r->rq.length)
        return 1;
    nc->rx_req = NULL;
    submit_write(nc, r);
    return 0;
}

static void skip_then_reply(struct nbd_conn *nc, const struct nbd_request *rq, uint32_t err)
{
    nc->skip = rq->length;
    nc->skip_reply = true;
    nc->skip_error = err;
    nc->skip_cookie = rq->cookie;
}

static bool reply_backlog(const struct conn *c)
{
    return conn_output_queued(c) >= NBD_OUT_MAX || conn_output_entries(c) >= NBD_OUT_ENTRIES_MAX;
}

static bool can_accept_request(struct nbd_conn *nc)
{
    return payload_room(nc) && !reply_backlog(nc->c);
}

/* How long to wait before looking again at a paused connection, or 0 when
 * a completion of its own will wake it: nothing signals that the client
 * has read its replies, or that other connections released payload. */
static uint64_t paused_poll_ns(const struct nbd_conn *nc)
{
    if (reply_backlog(nc->c))
        return NBD_BACKLOG_RETRY_NS;
    if (nc->inflight < nc->settings->max_inflight && nc->held < NBD_HELD_MAX &&
        !budget_allows(nc, next_request_payload(nc)))
        return NBD_BUDGET_RETRY_NS;
    return 0;
}

static void paused_poll_start(struct nbd_conn *nc)
{
    uint64_t ns = paused_poll_ns(nc);
    if (ns && !reactor_timer_armed(&nc->backlog_timer)) {
        conn_get(nc->c);
        reactor_timer_start(nc->c->reactor, &nc->backlog_timer, ns);
    }
}

static void backlog_retry(struct reactor_timer *t)
{
    struct nbd_conn *nc = container_of(t, struct nbd_conn, backlog_timer);
    struct conn *c = nc->c;
    if (!c->closing && nc->paused && !nc->disconnecting && !nc->draining) {
        if (can_accept_request(nc)) {
            nc->paused = false;
            conn_pause_input(c, false);
        } else {
            paused_poll_start(nc);
        }
    }
    conn_put(c); /* the timer's reference */
}

/* One request from the input. 0 progress, 1 need more/stop, <0 close. */
static int handle_request(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    if (conn_input_len(c) < NBD_REQUEST_LEN)
        return 1;
    if (!can_accept_request(nc)) {
        nc->paused = true;
        conn_pause_input(c, true);
        /* Completions wake us for slots; poll for the rest. */
        paused_poll_start(nc);
        return 1;
    }
    struct nbd_request rq;
    if (nbd_request_parse(conn_input(c), &rq) < 0) {
        log_warn("%s: nbd: bad request magic 0x%08x, closing", c->peer, be32_load(conn_input(c)));
        return -EPROTO;
    }
    conn_consume(c, NBD_REQUEST_LEN);
    counter_add(&nc->st_requests, 1);
    const char *why = NULL;
    uint32_t err = nbd_request_validate(&rq, &nc->caps, &why);
    if (err) {
        log_debug("%s: nbd: %s %s offset %llu length %u flags 0x%x: %s", c->peer,
                  nbd_cmd_name(rq.type), "refused", (unsigned long long)rq.offset, rq.length,
                  rq.flags, why);
        if (rq.type == NBD_CMD_WRITE && rq.length > 0) {
            if (rq.length > NBD_SKIP_MAX) {
                log_warn("%s: nbd: write payload of %u bytes refused and too large to skip, "
                         "closing",
                         c->peer, rq.length);
                return -EPROTO;
            }
            skip_then_reply(nc, &rq, err);
            return 0;
        }
        send_error(nc, &rq, err, false, 0, true);
        return 0;
    }
    if (rq.type == NBD_CMD_DISC) {
        log_debug("%s: nbd: disconnect requested", c->peer);
        nc->disconnecting = true;
        nc->paused = true;
        conn_pause_input(c, true);
        if (nc->inflight == 0)
            return -ECONNRESET;
        return 1;
    }
    struct nbd_req *r = req_get(nc);
    if (!r) {
        send_error(nc, &rq, NBD_ENOMEM, false, 0, true);
        return 0;
    }
    r->rq = rq;
    r->pending = 0;
    r->mfailed = false;
    r->mt0 = iostats_start(nc->mslot, IOSTATS_NBD);
    switch (rq.type) {
    case NBD_CMD_READ:
        submit_read(nc, r);
        break;
    case NBD_CMD_WRITE:
        if (req_buf(r, rq.length) < 0) {
            req_free(r);
            skip_then_reply(nc, &rq, NBD_ENOMEM);
            break;
        }
        nc->rx_req = r;
        nc->rx_got = 0;
        return rx_payload(nc);
    case NBD_CMD_BLOCK_STATUS:
        submit_block_status(nc, r);
        break;
    default:
        submit_other(nc, r);
        break;
    }
    return 0;
}

/* ---- handshake and options ---- */

static uint16_t export_eflags(struct nbd_conn *nc, const struct nbd_export *e)
{
    unsigned caps = volume_caps(e->vol);
    bool ro = e->readonly || volume_readonly(e->vol);
    uint16_t f = NBD_FLAG_HAS_FLAGS;
    if (ro)
        f |= NBD_FLAG_READ_ONLY;
    if (caps & BDEV_CAN_FLUSH) {
        f |= NBD_FLAG_SEND_FLUSH;
        if (!ro)
            f |= NBD_FLAG_SEND_FUA;
    }
    if (caps & BDEV_ROTATIONAL)
        f |= NBD_FLAG_ROTATIONAL;
    if (!ro) {
        if (caps & BDEV_CAN_TRIM)
            f |= NBD_FLAG_SEND_TRIM;
        f |= NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    }
    if (nc->structured)
        f |= NBD_FLAG_SEND_DF;
    if (e->multi_conn && (caps & BDEV_CAN_MULTI_CONN))
        f |= NBD_FLAG_CAN_MULTI_CONN;
    if (caps & BDEV_CAN_CACHE)
        f |= NBD_FLAG_SEND_CACHE;
    return f;
}

/* NBD_REP_ERR_* for an export this connection may not use, or 0. */
static uint32_t export_refusal(struct nbd_conn *nc, const struct nbd_export *e)
{
    if (!e || !e->enabled || !e->vol)
        return NBD_REP_ERR_UNKNOWN;
    if (e->tls == NBD_TLS_REQUIRE && !nc->tls)
        return NBD_REP_ERR_TLS_REQD;
    if (e->tls == NBD_TLS_OFF && nc->tls)
        return NBD_REP_ERR_POLICY;
    return 0;
}

static void enter_transmission(struct nbd_conn *nc, struct nbd_export *e)
{
    nbd_export_ref(e);
    nc->vol = e->vol;
    nc->mslot = iostats_slot(volume_name(e->vol));
    iostats_bind(nc->mslot, IOSTATS_NBD);
    nc->caps.eflags = export_eflags(nc, e);
    nc->caps.structured = nc->structured;
    nc->caps.meta_alloc = nc->meta_alloc;
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

static int opt_export_name(struct nbd_conn *nc, const uint8_t *data, uint32_t len)
{
    struct conn *c = nc->c;
    struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e =
        len <= NBD_MAX_STRING ? nbd_export_table_find(t, (const char *)data, len) : NULL;
    uint32_t why = export_refusal(nc, e);
    if (why) {
        log_info("%s: nbd: EXPORT_NAME '%.*s' refused (%s), closing", c->peer, (int)MIN(len, 256u),
                 (const char *)data,
                 why == NBD_REP_ERR_TLS_REQD ? "TLS required" : "no such export");
        nbd_export_table_unref(t);
        return -ENOENT;
    }
    enter_transmission(nc, e);
    nbd_export_table_unref(t);
    uint8_t b[8 + 2 + 124] = {0};
    be64_store(b, nc->caps.size);
    be16_store(b + 8, nc->caps.eflags);
    conn_send_copy(c, b, nc->no_zeroes ? 10 : sizeof(b));
    return 0;
}

static void opt_list(struct nbd_conn *nc, uint32_t opt, uint32_t len)
{
    if (len != 0) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        return;
    }
    struct nbd_export_table *t = nbd_exports_current();
    uint8_t b[4 + 2 * NBD_MAX_STRING];
    for (size_t i = 0; i < t->count; i++) {
        struct nbd_export *e = t->exports[i];
        /* Exports this session may not open (e.g. TLS required) are not
         * even named to it. */
        if (export_refusal(nc, e))
            continue;
        size_t nl = MIN(strlen(e->name), (size_t)NBD_MAX_STRING);
        size_t dl = MIN(strlen(e->description), (size_t)NBD_MAX_STRING - 8);
        be32_store(b, (uint32_t)nl);
        memcpy(b + 4, e->name, nl);
        memcpy(b + 4 + nl, e->description, dl);
        send_opt_reply(nc, opt, NBD_REP_SERVER, b, (uint32_t)(4 + nl + dl));
    }
    nbd_export_table_unref(t);
    send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
}

static void send_info(struct nbd_conn *nc, uint32_t opt, uint16_t type, const void *data,
                      size_t len)
{
    uint8_t b[2 + NBD_MAX_STRING];
    len = MIN(len, (size_t)NBD_MAX_STRING);
    be16_store(b, type);
    memcpy(b + 2, data, len);
    send_opt_reply(nc, opt, NBD_REP_INFO, b, (uint32_t)(2 + len));
}

static void opt_info_go(struct nbd_conn *nc, uint32_t opt, const uint8_t *data, uint32_t len)
{
    struct nbd_opt_go go;
    if (nbd_opt_go_parse(data, len, &go) < 0) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        return;
    }
    struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e = nbd_export_table_find(t, go.name, go.name_len);
    uint32_t why = export_refusal(nc, e);
    if (why) {
        log_debug("%s: nbd: %s '%.*s' refused (0x%x)", nc->c->peer, nbd_opt_name(opt),
                  (int)go.name_len, go.name, why);
        send_opt_reply(nc, opt, why, NULL, 0);
        nbd_export_table_unref(t);
        return;
    }
    uint8_t b[12];
    be64_store(b, volume_size(e->vol));
    be16_store(b + 8, export_eflags(nc, e));
    send_info(nc, opt, NBD_INFO_EXPORT, b, 10);
    for (unsigned i = 0; i < go.nreqs; i++) {
        uint16_t type = be16_load(go.reqs + 2 * i);
        if (type == NBD_INFO_NAME)
            send_info(nc, opt, NBD_INFO_NAME, e->name, strlen(e->name));
        else if (type == NBD_INFO_DESCRIPTION && e->description[0])
            send_info(nc, opt, NBD_INFO_DESCRIPTION, e->description, strlen(e->description));
    }
    uint8_t bs[12];
    uint32_t pref = MAX(4096u, volume_block_size(e->vol));
    be32_store(bs, 1);
    be32_store(bs + 4, pref);
    be32_store(bs + 8, nc->settings->max_request);
    send_info(nc, opt, NBD_INFO_BLOCK_SIZE, bs, 12);
    send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
    if (opt == NBD_OPT_GO)
        enter_transmission(nc, e);
    nbd_export_table_unref(t);
}

static void opt_meta(struct nbd_conn *nc, uint32_t opt, const uint8_t *data, uint32_t len)
{
    bool listing = opt == NBD_OPT_LIST_META_CONTEXT;
    struct nbd_opt_meta m;
    if ((!listing && !nc->structured) || nbd_opt_meta_parse(data, len, &m) < 0) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        return;
    }
    struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e = nbd_export_table_find(t, m.name, m.name_len);
    uint32_t why = export_refusal(nc, e);
    nbd_export_table_unref(t);
    if (why) {
        send_opt_reply(nc, opt, why, NULL, 0);
        return;
    }
    bool match = listing && m.nqueries == 0;
    uint32_t pos = 0, qlen;
    const char *q;
    while (!match && nbd_opt_meta_next(&m, &pos, &q, &qlen) == 1)
        match = nbd_meta_query_matches(q, qlen, listing);
    if (match) {
        uint8_t b[4 + sizeof(NBD_META_BASE_ALLOCATION)];
        be32_store(b, NBD_META_ID_BASE_ALLOCATION);
        memcpy(b + 4, NBD_META_BASE_ALLOCATION, sizeof(NBD_META_BASE_ALLOCATION) - 1);
        send_opt_reply(nc, opt, NBD_REP_META_CONTEXT, b, sizeof(b) - 1);
    }
    if (!listing)
        nc->meta_alloc = match;
    send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
}

/* One option. 0 progress, 1 need more input, <0 close. */
static int handle_option(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    size_t avail = conn_input_len(c);
    if (avail < NBD_OPT_HEADER_LEN)
        return 1;
    const uint8_t *p = conn_input(c);
    if (be64_load(p) != NBD_IHAVEOPT) {
        log_warn("%s: nbd: bad option magic, closing", c->peer);
        return -EPROTO;
    }
    uint32_t opt = be32_load(p + 8), len = be32_load(p + 12);
    if (++nc->options > NBD_MAX_OPTIONS) {
        log_warn("%s: nbd: more than %u options, closing", c->peer, NBD_MAX_OPTIONS);
        return -EPROTO;
    }
    if (len > NBD_OPT_MAX_LEN) {
        if (opt == NBD_OPT_EXPORT_NAME || len > NBD_SKIP_MAX) {
            log_warn("%s: nbd: option %s with %u bytes of data, closing", c->peer,
                     nbd_opt_name(opt), len);
            return -EPROTO;
        }
        conn_consume(c, NBD_OPT_HEADER_LEN);
        nc->skip = len;
        send_opt_reply(nc, opt, NBD_REP_ERR_TOO_BIG, NULL, 0);
        return 0;
    }
    if (avail < NBD_OPT_HEADER_LEN + len) {
        if (conn_input_reserve(c, NBD_OPT_HEADER_LEN + len) < 0)
            return -ENOMEM;
        return 1;
    }
    const uint8_t *data = p + NBD_OPT_HEADER_LEN;
    int rc = 0;
    log_debug("%s: nbd: option %s (%u bytes)", c->peer, nbd_opt_name(opt), len);
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        rc = opt_export_name(nc, data, len);
        break;
    case NBD_OPT_ABORT:
        send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
        rc = -ECONNABORTED;
        break;
    case NBD_OPT_LIST:
        opt_list(nc, opt, len);
        break;
    case NBD_OPT_STARTTLS:
        if (len != 0 || nc->tls)
            send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        else if (!nc->settings->tls)
            send_opt_reply(nc, opt, NBD_REP_ERR_UNSUP, NULL, 0);
        else {
            send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
            nc->starttls_pending = true;
        }
        break;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        opt_info_go(nc, opt, data, len);
        break;
    case NBD_OPT_STRUCTURED_REPLY:
        if (len != 0 || nc->structured) {
            send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        } else {
            nc->structured = true;
            send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
        }
        break;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        opt_meta(nc, opt, data, len);
        break;
    default:
        send_opt_reply(nc, opt, NBD_REP_ERR_UNSUP, NULL, 0);
        break;
    }
    conn_consume(c, NBD_OPT_HEADER_LEN + len);
    if (rc < 0)
        return rc;
    if (nc->starttls_pending) {
        nc->starttls_pending = false;
        if (conn_input_len(c) != 0) {
            log_warn("%s: nbd: data after STARTTLS before the TLS handshake, closing", c->peer);
            return -EPROTO;
        }
        if (conn_flush_now(c) < 0) {
            log_warn("%s: nbd: could not send the STARTTLS reply, closing", c->peer);
            return -EIO;
        }
        rc = tls_conn_start(c, nc->settings->tls);
        if (rc < 0)
            return rc;
        nc->tls = true;
        /* Negotiation starts over under TLS (the spec forbids carrying
         * anything across). */
        nc->structured = false;
        nc->meta_alloc = false;
        return 1;
    }
    return 0;
}

static int handle_client_flags(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    if (conn_input_len(c) < 4)
        return 1;
    uint32_t f = be32_load(conn_input(c));
    conn_consume(c, 4);
    if (f & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        log_warn("%s: nbd: unknown client flags 0x%x, closing", c->peer, f);
        return -EPROTO;
    }
    if (!(f & NBD_FLAG_C_FIXED_NEWSTYLE)) {
        log_warn("%s: nbd: client does not support fixed newstyle, closing", c->peer);
        return -EPROTO;
    }
    nc->no_zeroes = f & NBD_FLAG_C_NO_ZEROES;
    nc->state = ST_OPTIONS;
    return 0;
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
            if (nc->skip == 0 && nc->skip_reply) {
                nc->skip_reply = false;
                send_simple(nc, nc->skip_cookie, nc->skip_error);
            }
            continue;
        }
        if (nc->draining) {
            rc = 1; /* shutdown: no new requests, nor the rest of a payload */
            break;
        }
        if (nc->rx_req) {
            rc = rx_payload(nc);
            continue;
        }
        switch (nc->state) {
        case ST_CLIENT_FLAGS:
            rc = handle_client_flags(nc);
            break;
        case ST_OPTIONS:
            rc = handle_option(nc);
            break;
        case ST_TRANSMISSION:
            if (nc->disconnecting)
                rc = 1;
            else
                rc = handle_request(nc);
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
    if (reactor_timer_armed(&nc->backlog_timer)) {
        reactor_timer_cancel(c->reactor, &nc->backlog_timer);
        conn_put(c); /* the timer's reference; the socket's is still held */
    }
    if (reactor_timer_armed(&nc->handshake_timer)) {
        reactor_timer_cancel(c->reactor, &nc->handshake_timer);
        conn_put(c);
    }
    if (nc->rx_req) {
        struct nbd_req *r = nc->rx_req;
        nc->rx_req = NULL;
        req_free(r);
    }
    log_debug("%s: nbd: connection closed", c->peer);
}

static void nbd_on_free(struct conn *c)
{
    struct nbd_conn *nc = c->proto;
    if (!nc)
        return;
    while (nc->free_reqs) {
        struct nbd_req *r = nc->free_reqs;
        nc->free_reqs = r->next_free;
        free(r);
    }
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
    if (!c->closing && nc->state != ST_TRANSMISSION) {
        admit_log(&nbd_gate, "%s: nbd: handshake not finished within %u s, closing", c->peer,
                  admit_handshake_timeout_s());
        conn_close(c);
    }
    conn_put(c); /* the timer's reference */
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
    uint8_t hello[NBD_OLD_HELLO_LEN];
    be64_store(hello, NBD_MAGIC);
    be64_store(hello + 8, NBD_IHAVEOPT);
    be16_store(hello + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    return conn_send_copy(c, hello, sizeof(hello));
}

void nbd_conn_accept(int fd, const struct sockaddr *peer, socklen_t peerlen)
{
    char name[80];
    format_sockaddr(peer, peerlen, name, sizeof(name));
    struct nbd_settings *s = nbd_settings_current();
    if (atomic_load(&draining_all)) {
        nbd_settings_unref(s);
        close(fd);
        return;
    }
    admit_set_max_total(&nbd_gate, s->max_connections);
    struct nbd_conn *nc = calloc(1, sizeof(*nc));
    if (!nc) {
        log_error("%s: nbd: out of memory for a connection", name);
        nbd_settings_unref(s);
        close(fd);
        return;
    }
    if (admit_try(&nbd_gate, peer, peerlen, name, &nc->ticket) < 0) {
        nbd_settings_unref(s);
        free(nc);
        close(fd);
        return;
    }
    atomic_fetch_add(&nbd_conn_count, 1);
    nc->state = ST_CLIENT_FLAGS;
    nc->mslot = -1;
    nc->settings = s;
    nc->connected_at = (uint64_t)time(NULL);
    reactor_timer_init(&nc->backlog_timer, backlog_retry);
    reactor_timer_init(&nc->handshake_timer, handshake_expired);
    /* On failure before init runs, conn_adopt closes fd; the rest is
     * released here. Once init has run, on_free releases it. */
    if (conn_adopt(reactor_next(), fd, peer, peerlen, &nbd_conn_ops, nbd_conn_init, nc) < 0) {
        atomic_fetch_sub(&nbd_conn_count, 1);
        admit_release(&nc->ticket);
        nbd_settings_unref(s);
        free(nc);
    }
}

/* ---- shutdown drain ---- */

/* A draining connection reads nothing more; once every request it had
 * started has completed and its reply has been written, it closes
 * gracefully (conn_finish: FIN after the last reply). */
static void drain_check(struct nbd_conn *nc)
{
    unsigned started = nc->inflight - (nc->rx_req ? 1u : 0u);
    if (started == 0 && !nc->c->closing)
        conn_finish(nc->c);
}

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
            drain_check(nc);
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
