/*
 * The NBD transmission phase (nbd_transmission.h): every complete request
 * in the input buffer is parsed per wake-up, validated in one place
 * (nbd_request_validate), and submitted to the volume at once; replies are
 * queued as each request completes (out of order) and leave with the
 * connection's one writev per loop iteration. Request slots come from a
 * per-connection free list and payload buffers from core/bufpool, so
 * steady state allocates nothing per request. A WRITE payload is copied
 * from the input buffer into its pool buffer as it arrives, so the input
 * buffer never has to grow to hold a large write.
 */
#include "nbd/nbd_transmission.h"

#include <errno.h>
#include <linux/sockios.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "core/bufpool.h"
#include "core/iostats.h"
#include "core/log.h"
#include "core/util.h"
#include "nbd/nbd.h"
#include "nbd/nbd_conn.h"
#include "nbd/nbd_dirty.h"
#include "nbd/nbd_server.h"

#define NBD_READ_CHUNK (1u << 20) /* structured reads stream in chunks of this */
#define NBD_HOLE_MIN (64u * 1024) /* smaller reads never look for holes */
#define NBD_EXTENTS_MAX 128       /* per BLOCK_STATUS / hole-aware read */
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

static void paused_poll_start(struct nbd_conn *nc);

static void conn_kick_run(struct reactor_msg *m)
{
    struct nbd_conn *nc = container_of(m, struct nbd_conn, kick);
    struct conn *c = nc->c;
    nc->kick_posted = false;
    if (!c->closing) {
        if (nc->draining)
            nbd_transmission_drain_check(nc);
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

/* Answer r with an error (its whole reply) and free its slot. */
static void req_fail(struct nbd_req *r, uint32_t error, bool has_offset, uint64_t offset)
{
    send_error(r->nc, &r->rq, error, has_offset, offset, true);
    req_free(r);
}

/* ---- completions ---- */

static void read_done(struct vreq *vr)
{
    struct nbd_req *r = container_of(vr, struct nbd_req, vr);
    struct nbd_conn *nc = r->nc;
    if (vr->result < 0) {
        r->mfailed = true;
        req_fail(r, nbd_errno_to_wire(vr->result), true, r->rq.offset);
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

/* A stretch of a structured read: data to read, or a hole to report. */
struct read_range {
    uint64_t off, len;
    bool hole;
};

/* Coalesce the extents into ranges covering the whole request: what they
 * do not describe is read as data. With DF (don't fragment) the reply must
 * be one chunk, so a mix becomes one data range. Returns how many ranges
 * were written to ranges[NBD_EXTENTS_MAX + 1]. */
static size_t read_ranges(const struct nbd_request *rq, const struct extent *ext, size_t n, bool df,
                          struct read_range *ranges)
{
    uint64_t end = rq->offset + rq->length;
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
            ranges[nr++] = (struct read_range){eoff, eend - eoff, hole};
        pos = eend;
    }
    if (pos < end) {
        if (nr && !ranges[nr - 1].hole)
            ranges[nr - 1].len += end - pos;
        else
            ranges[nr++] = (struct read_range){pos, end - pos, false};
    }
    if (df && nr > 1) {
        nr = 1;
        ranges[0] = (struct read_range){rq->offset, rq->length, false};
    }
    return nr;
}

/* How many reads the data ranges take: NBD_READ_CHUNK each, one per range
 * with DF. */
static unsigned read_sub_count(const struct read_range *ranges, size_t nr, bool df)
{
    unsigned nsubs = 0;
    for (size_t i = 0; i < nr; i++)
        if (!ranges[i].hole)
            nsubs += df ? 1 : (unsigned)((ranges[i].len + NBD_READ_CHUNK - 1) / NBD_READ_CHUNK);
    return nsubs;
}

/* Set up r->subs (read_sub_count of them) to read the data ranges into
 * r->buf, each completing in sub_done. */
static void read_subs_init(struct nbd_req *r, const struct read_range *ranges, size_t nr, bool df)
{
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
            s->vr.buf = (uint8_t *)r->buf + (off - r->rq.offset);
            s->vr.owner = r->nc->c->reactor;
            s->vr.done = sub_done;
            off += len;
            left -= len;
        }
    }
}

/* Plan a structured read from the extents of its range: holes become
 * OFFSET_HOLE chunks, data is read in chunks of NBD_READ_CHUNK, each sent
 * as it completes; the last completion carries the DONE flag. */
static void read_plan(struct nbd_req *r, const struct extent *ext, size_t n)
{
    struct nbd_conn *nc = r->nc;
    const struct nbd_request *rq = &r->rq;
    bool df = rq->flags & NBD_CMD_FLAG_DF;
    struct read_range ranges[NBD_EXTENTS_MAX + 1];
    size_t nr = read_ranges(rq, ext, n, df, ranges);
    unsigned nsubs = read_sub_count(ranges, nr, df);
    if (nsubs == 0) {
        /* Only holes: the last hole chunk carries DONE. */
        for (size_t i = 0; i < nr; i++)
            send_hole(nc, rq, ranges[i].off, (uint32_t)ranges[i].len, i + 1 == nr);
        req_free(r);
        return;
    }
    if (req_buf(r, rq->length) < 0) {
        req_fail(r, NBD_ENOMEM, false, 0);
        return;
    }
    /* Reuse buf2 (the extents) only after we are done reading ext. */
    size_t subs_bytes = nsubs * sizeof(struct nbd_sub);
    void *subs_mem = bufpool_get(subs_bytes);
    if (!subs_mem) {
        req_fail(r, NBD_ENOMEM, false, 0);
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
    read_subs_init(r, ranges, nr, df);
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

/* A BLOCK_STATUS chunk's most bytes: header, context id, descriptors. */
#define BLOCK_STATUS_CHUNK_MAX (NBD_CHUNK_HEADER_LEN + 4 + 8 * NBD_EXTENTS_MAX)

/* The qemu:dirty-bitmap chunk of r (the reply's last) at out, from the
 * connection's map (nbd_dirty.h); its size. */
static size_t dirty_chunk(struct nbd_req *r, uint8_t *out)
{
    uint32_t max = (r->rq.flags & NBD_CMD_FLAG_REQ_ONE) ? 1 : NBD_EXTENTS_MAX;
    uint32_t nd = nbd_dirty_describe(r->nc->dirty, r->rq.offset, r->rq.length, max,
                                     out + NBD_CHUNK_HEADER_LEN + 4);
    nbd_chunk_header(out, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS, r->rq.cookie,
                     4 + 8 * nd);
    be32_store(out + NBD_CHUNK_HEADER_LEN, NBD_META_ID_DIRTY);
    return NBD_CHUNK_HEADER_LEN + 4 + 8 * nd;
}

static void block_status_done(struct vreq *vr)
{
    struct nbd_req *r = container_of(vr, struct nbd_req, vr);
    struct nbd_conn *nc = r->nc;
    if (vr->result < 0) {
        req_fail(r, nbd_errno_to_wire(vr->result), false, 0);
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
    /* the dirty-bitmap chunk, if selected, comes last and ends the reply */
    nbd_chunk_header(out, nc->dirty ? 0 : NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_BLOCK_STATUS,
                     r->rq.cookie, 4 + 8 * nd);
    be32_store(out + NBD_CHUNK_HEADER_LEN, NBD_META_ID_BASE_ALLOCATION);
    struct iovec iov[2] = {{out, NBD_CHUNK_HEADER_LEN + 4 + 8 * nd}};
    uint8_t *dout = out + BLOCK_STATUS_CHUNK_MAX;
    if (nc->dirty)
        iov[1] = (struct iovec){dout, dirty_chunk(r, dout)};
    r->pending = 1;
    conn_send(nc->c, iov, nc->dirty ? 2 : 1, req_release, r);
}

/* ---- dispatch ---- */

static void vreq_init(struct nbd_req *r, enum vreq_op op, void (*done)(struct vreq *))
{
    memset(&r->vr, 0, sizeof(r->vr));
    r->vr.op = op;
    r->vr.offset = r->rq.offset;
    r->vr.length = r->rq.length;
    r->vr.owner = r->nc->c->reactor;
    r->vr.done = done;
}

/* Give r a buffer of size bytes in buf2, the extents at its start. 0, or
 * -ENOMEM after answering r with NBD_ENOMEM and freeing its slot. */
static int req_extents_buf(struct nbd_req *r, size_t size)
{
    r->buf2 = bufpool_get(size);
    if (!r->buf2) {
        req_fail(r, NBD_ENOMEM, false, 0);
        return -ENOMEM;
    }
    r->buf2_size = size;
    r->ext = r->buf2;
    return 0;
}

static void submit_read(struct nbd_conn *nc, struct nbd_req *r)
{
    const struct nbd_request *rq = &r->rq;
    bool big = rq->length > NBD_READ_CHUNK && !(rq->flags & NBD_CMD_FLAG_DF);
    bool holes = rq->length >= NBD_HOLE_MIN &&
                 atomic_load_explicit(&nc->exp->maybe_sparse, memory_order_relaxed) &&
                 (volume_caps(nc->vol) & BDEV_CAN_EXTENTS);
    if (nc->structured && (big || holes)) {
        if (req_extents_buf(r, NBD_EXTENTS_MAX * sizeof(struct extent)) < 0)
            return;
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
        req_fail(r, NBD_ENOMEM, false, 0);
        return;
    }
    vreq_init(r, VREQ_READ, read_done);
    r->vr.buf = r->buf;
    volume_submit(nc->vol, &r->vr);
}

static void submit_block_status(struct nbd_conn *nc, struct nbd_req *r)
{
    /* The extents, then the reply built from them (block_status_done):
     * the base:allocation chunk, then the dirty-bitmap one. */
    if (req_extents_buf(r, NBD_EXTENTS_MAX * sizeof(struct extent) + 2 * BLOCK_STATUS_CHUNK_MAX) <
        0)
        return;
    if (!nc->meta_alloc) {
        /* only the dirty bitmap: from memory, no request to the volume */
        uint8_t *out = (uint8_t *)r->buf2 + NBD_EXTENTS_MAX * sizeof(struct extent);
        struct iovec iov = {out, dirty_chunk(r, out)};
        r->pending = 1;
        conn_send(nc->c, &iov, 1, req_release, r);
        return;
    }
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
int nbd_transmission_payload(struct nbd_conn *nc)
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
int nbd_transmission_request(struct nbd_conn *nc)
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
        return nbd_transmission_payload(nc);
    case NBD_CMD_BLOCK_STATUS:
        submit_block_status(nc, r);
        break;
    default:
        submit_other(nc, r);
        break;
    }
    return 0;
}

/* ---- the connection's life (nbd_conn.c) ---- */

/* A draining connection reads nothing more; once every request it had
 * started has completed and its reply has been written, it closes
 * gracefully (conn_finish: FIN after the last reply). */
void nbd_transmission_drain_check(struct nbd_conn *nc)
{
    unsigned started = nc->inflight - (nc->rx_req ? 1u : 0u);
    if (started == 0 && !nc->c->closing)
        conn_finish(nc->c);
}

void nbd_transmission_init(struct nbd_conn *nc)
{
    reactor_timer_init(&nc->backlog_timer, backlog_retry);
}

void nbd_transmission_skipped(struct nbd_conn *nc)
{
    nc->skip_reply = false;
    send_simple(nc, nc->skip_cookie, nc->skip_error);
}

void nbd_transmission_close(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    if (reactor_timer_armed(&nc->backlog_timer)) {
        reactor_timer_cancel(c->reactor, &nc->backlog_timer);
        conn_put(c); /* the timer's reference; the socket's is still held */
    }
    if (nc->rx_req) {
        struct nbd_req *r = nc->rx_req;
        nc->rx_req = NULL;
        req_free(r);
    }
}

void nbd_transmission_free(struct nbd_conn *nc)
{
    while (nc->free_reqs) {
        struct nbd_req *r = nc->free_reqs;
        nc->free_reqs = r->next_free;
        free(r);
    }
}
