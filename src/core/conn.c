/*
 * Connections: input is read into one growable buffer and handed to the
 * protocol once per wake-up; output is queued and written with one writev
 * per loop iteration (the flush is deferred to the end of the iteration so
 * every reply produced by that wake-up goes out together).
 */
#include "core/conn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <linux/sockios.h>

#include "core/log.h"
#include "core/util.h"

#define IN_INITIAL (64 * 1024)
#define IN_DEFAULT_MAX (256 * 1024)
#define OUT_INLINE 64
#define OUT_IOVS 4
#define MAX_WRITEV_IOVS 256
#define READS_PER_WAKEUP 4
#define FINISH_POLL_NS (5u * 1000 * 1000)

struct conn_out {
    struct conn_out *next;
    struct iovec iov[OUT_IOVS];
    int iovcnt;
    int iovidx; /* first iov not fully written */
    conn_release_fn release;
    void *arg;
    uint8_t inline_data[OUT_INLINE];
};

static atomic_uint live_conns;

/* ---- plain socket transport ---- */

static ssize_t plain_recv(struct conn *c, void *buf, size_t len)
{
    ssize_t n = recv(c->fd, buf, len, 0);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return n;
}

static ssize_t plain_sendv(struct conn *c, const struct iovec *iov, int iovcnt)
{
    struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)iovcnt};
    ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return n;
}

static size_t plain_pending(struct conn *c)
{
    return 0;
}

static void plain_destroy(struct conn *c)
{
}

static const struct conn_transport plain_transport = {
    .recv = plain_recv,
    .sendv = plain_sendv,
    .pending = plain_pending,
    .destroy = plain_destroy,
};

/* ---- output queue ---- */

/* Queue nodes are recycled per connection (only its reactor touches them),
 * so a reply costs no malloc once the connection has warmed up. */
#define OUT_FREE_MAX 64

static struct conn_out *out_alloc(struct conn *c)
{
    struct conn_out *o = c->out_free;
    if (o) {
        c->out_free = o->next;
        c->out_free_count--;
    } else {
        o = malloc(sizeof(*o));
    }
    if (o) {
        o->next = NULL;
        o->iovcnt = 0;
        o->iovidx = 0;
        o->release = NULL;
        o->arg = NULL;
    }
    return o;
}

static void out_release(struct conn *c, struct conn_out *o)
{
    if (o->release)
        o->release(o->arg);
    if (c->out_free_count < OUT_FREE_MAX) {
        o->next = c->out_free;
        c->out_free = o;
        c->out_free_count++;
    } else {
        free(o);
    }
}

static void update_events(struct conn *c)
{
    if (c->closing)
        return;
    uint32_t ev = 0;
    if (!c->reading_paused)
        ev |= EPOLLIN | EPOLLRDHUP;
    if (c->out_head)
        ev |= EPOLLOUT;
    if (ev != c->events) {
        c->events = ev;
        reactor_modify(c->reactor, c->fd, ev, &c->handler);
    }
}

int conn_flush_now(struct conn *c)
{
    while (c->out_head) {
        struct iovec iov[MAX_WRITEV_IOVS];
        int n = 0;
        for (struct conn_out *o = c->out_head; o && n < MAX_WRITEV_IOVS; o = o->next) {
            for (int i = o->iovidx; i < o->iovcnt && n < MAX_WRITEV_IOVS; i++)
                iov[n++] = o->iov[i];
        }
        ssize_t w = c->transport->sendv(c, iov, n);
        if (w == -EAGAIN || w == -EINTR)
            break;
        if (w < 0) {
            if (!c->closing)
                log_info("%s: send failed: %s", c->peer, strerror((int)-w));
            return (int)w;
        }
        c->bytes_out += (uint64_t)w;
        size_t left = (size_t)w;
        c->out_bytes -= left;
        while (c->out_head && left) {
            struct conn_out *o = c->out_head;
            struct iovec *v = &o->iov[o->iovidx];
            if (left >= v->iov_len) {
                left -= v->iov_len;
                o->iovidx++;
            } else {
                v->iov_base = (uint8_t *)v->iov_base + left;
                v->iov_len -= left;
                left = 0;
            }
            if (o->iovidx == o->iovcnt) {
                c->out_head = o->next;
                if (!c->out_head)
                    c->out_tail = NULL;
                c->out_count--;
                out_release(c, o);
            }
        }
        /* Zero-length entries at the head are complete too. */
        while (c->out_head && c->out_head->iovidx == c->out_head->iovcnt) {
            struct conn_out *o = c->out_head;
            c->out_head = o->next;
            if (!c->out_head)
                c->out_tail = NULL;
            c->out_count--;
            out_release(c, o);
        }
    }
    if (c->finishing && !c->out_head && !c->write_shut) {
        /* Everything is written: the FIN follows the last reply; close once
         * the peer has it all (finish_poll). */
        shutdown(c->fd, SHUT_WR);
        c->write_shut = true;
        conn_get(c);
        reactor_timer_start(c->reactor, &c->finish_timer, FINISH_POLL_NS);
    }
    update_events(c);
    return c->out_head ? -EAGAIN : 0;
}

static void release_run(struct reactor_msg *m)
{
    conn_put(container_of(m, struct conn, release_msg));
}

static void deferred_flush(struct reactor_msg *m)
{
    struct conn *c = (struct conn *)((char *)m - offsetof(struct conn, flush_msg));
    c->flush_deferred = false;
    if (!c->closing) {
        int rc = conn_flush_now(c);
        if (rc < 0 && rc != -EAGAIN)
            conn_close(c);
    }
    conn_put(c);
}

static void schedule_flush(struct conn *c)
{
    if (c->flush_deferred)
        return;
    c->flush_deferred = true;
    conn_get(c);
    reactor_defer(c->reactor, &c->flush_msg);
}

static void out_append(struct conn *c, struct conn_out *o, size_t bytes)
{
    if (c->out_tail)
        c->out_tail->next = o;
    else
        c->out_head = o;
    c->out_tail = o;
    c->out_bytes += bytes;
    c->out_count++;
    schedule_flush(c);
}

int conn_send(struct conn *c, const struct iovec *iov, int iovcnt, conn_release_fn release,
              void *arg)
{
    if (c->closing) {
        if (release)
            release(arg);
        return -EPIPE;
    }
    int done = 0;
    /* Split into nodes of OUT_IOVS; the release runs with the last node. */
    while (done < iovcnt || iovcnt == 0) {
        struct conn_out *o = out_alloc(c);
        if (!o) {
            if (release)
                release(arg);
            return -ENOMEM;
        }
        int k = MIN(OUT_IOVS, iovcnt - done);
        size_t bytes = 0;
        for (int i = 0; i < k; i++) {
            o->iov[i] = iov[done + i];
            bytes += iov[done + i].iov_len;
        }
        o->iovcnt = k;
        done += k;
        if (done >= iovcnt) {
            o->release = release;
            o->arg = arg;
        }
        out_append(c, o, bytes);
        if (iovcnt == 0)
            break;
    }
    return 0;
}

int conn_send_copy(struct conn *c, const void *data, size_t len)
{
    if (c->closing)
        return -EPIPE;
    struct conn_out *o = out_alloc(c);
    if (!o)
        return -ENOMEM;
    void *dst = o->inline_data;
    if (len > OUT_INLINE) {
        dst = malloc(len);
        if (!dst) {
            out_release(c, o);
            return -ENOMEM;
        }
        o->release = free;
        o->arg = dst;
    }
    memcpy(dst, data, len);
    o->iov[0].iov_base = dst;
    o->iov[0].iov_len = len;
    o->iovcnt = 1;
    out_append(c, o, len);
    return 0;
}

size_t conn_output_queued(const struct conn *c)
{
    return c->out_bytes;
}

/* ---- input ---- */

void conn_consume(struct conn *c, size_t n)
{
    c->in_start += n;
    if (c->in_start > c->in_end)
        c->in_start = c->in_end;
    if (c->in_start == c->in_end)
        c->in_start = c->in_end = 0;
}

int conn_input_reserve(struct conn *c, size_t n)
{
    if (n > c->in_max)
        c->in_max = n;
    if (n <= c->in_cap)
        return 0;
    size_t cap = c->in_cap ? c->in_cap : IN_INITIAL;
    while (cap < n)
        cap *= 2;
    uint8_t *b = realloc(c->in_buf, cap);
    if (!b)
        return -ENOMEM;
    c->in_buf = b;
    c->in_cap = cap;
    return 0;
}

/* Make room at the end of the input buffer; returns free bytes. */
static size_t input_room(struct conn *c)
{
    if (c->in_start > 0 && (c->in_end == c->in_cap || c->in_start >= c->in_cap / 2)) {
        memmove(c->in_buf, c->in_buf + c->in_start, c->in_end - c->in_start);
        c->in_end -= c->in_start;
        c->in_start = 0;
    }
    if (c->in_end == c->in_cap && c->in_cap < c->in_max) {
        size_t cap = c->in_cap * 2;
        if (cap > c->in_max)
            cap = c->in_max;
        uint8_t *b = realloc(c->in_buf, cap);
        if (b) {
            c->in_buf = b;
            c->in_cap = cap;
        }
    }
    return c->in_cap - c->in_end;
}

/* Give the protocol what arrived (or the chance to receive a payload
 * itself); -1 when that closed the connection. */
static int input_deliver(struct conn *c)
{
    if (c->closing || (conn_input_len(c) == 0 && !c->input_direct))
        return 0;
    if (c->ops->on_input(c) < 0) {
        conn_close(c);
        return -1;
    }
    return c->closing ? -1 : 0;
}

/* A finishing connection reads and drops what the peer still sends (so
 * that closing with unread input does not reset the connection and discard
 * replies not yet delivered), until the peer closes. */
static void discard_input(struct conn *c)
{
    for (int i = 0; i < READS_PER_WAKEUP && !c->closing; i++) {
        c->in_start = c->in_end = 0;
        ssize_t n = c->transport->recv(c, c->in_buf, c->in_cap);
        if (n == -EAGAIN || n == -EINTR)
            return;
        if (n <= 0) {
            conn_close(c);
            return;
        }
    }
    c->in_start = c->in_end = 0;
}

/* The protocol sees the input after every read, so that once it has parsed
 * a request header announcing a large payload it receives the rest into the
 * request's buffer itself (input_direct) instead of it landing here first. */
static void handle_input(struct conn *c)
{
    if (c->finishing) {
        discard_input(c);
        return;
    }
    bool delivered = false; /* the protocol has seen the latest input */
    for (int i = 0; i < READS_PER_WAKEUP && !c->closing && !c->reading_paused; i++) {
        if (c->input_direct && conn_input_len(c) == 0) {
            if (input_deliver(c) < 0 || c->input_direct)
                return; /* closed, or the socket is drained */
            delivered = true;
            continue;
        }
        size_t room = input_room(c);
        if (room == 0)
            break; /* the protocol must consume before we read more */
        ssize_t n = c->transport->recv(c, c->in_buf + c->in_end, room);
        if (n == -EAGAIN || n == -EINTR)
            break;
        if (n <= 0) {
            if (n < 0)
                log_info("%s: receive failed: %s", c->peer, strerror((int)-n));
            conn_close(c);
            return;
        }
        c->in_end += (size_t)n;
        c->bytes_in += (uint64_t)n;
        bool drained = (size_t)n < room && c->transport->pending(c) == 0;
        if (input_deliver(c) < 0 || drained)
            return;
        delivered = true;
    }
    /* Input left from before (reading was paused) and nothing read now. */
    if (!delivered)
        input_deliver(c);
}

static void on_event(struct reactor_handler *h, uint32_t events)
{
    struct conn *c = (struct conn *)h;
    if (c->closing)
        return;
    conn_get(c);
    if (events & EPOLLOUT) {
        int rc = conn_flush_now(c);
        if (rc < 0 && rc != -EAGAIN)
            conn_close(c);
    }
    if (!c->closing && (events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)))
        handle_input(c);
    /* TLS may hold decrypted bytes that epoll cannot see. */
    while (!c->closing && !c->reading_paused && c->transport->pending(c) > 0) {
        size_t before = conn_input_len(c);
        handle_input(c);
        if (conn_input_len(c) == before && input_room(c) == 0)
            break;
    }
    conn_put(c);
}

/* After the FIN: close when the kernel holds nothing more for the peer
 * (everything acknowledged), so that a close with unread input (which
 * resets the connection) cannot discard replies still on their way. */
static void finish_poll(struct reactor_timer *t)
{
    struct conn *c = container_of(t, struct conn, finish_timer);
    if (!c->closing) {
        int unsent = 0;
        if (ioctl(c->fd, SIOCOUTQ, &unsent) < 0 || unsent == 0) {
            conn_close(c);
        } else {
            conn_get(c);
            reactor_timer_start(c->reactor, &c->finish_timer, FINISH_POLL_NS);
        }
    }
    conn_put(c);
}

void conn_finish(struct conn *c)
{
    if (c->closing || c->finishing)
        return;
    c->finishing = true;
    c->reading_paused = false; /* read, to discard (handle_input) */
    c->input_direct = false;
    int rc = conn_flush_now(c);
    if (rc < 0 && rc != -EAGAIN)
        conn_close(c);
}

void conn_pause_input(struct conn *c, bool pause)
{
    if (c->finishing || c->reading_paused == pause)
        return;
    c->reading_paused = pause;
    update_events(c);
    if (!pause && !c->closing && conn_input_len(c) > 0) {
        /* Input already buffered will not raise an event: process it soon. */
        int rc = c->ops->on_input(c);
        if (rc < 0)
            conn_close(c);
    }
}

void conn_set_transport(struct conn *c, const struct conn_transport *t, void *ctx)
{
    if (c->transport && c->transport->destroy)
        c->transport->destroy(c);
    c->transport = t ? t : &plain_transport;
    c->transport_ctx = ctx;
}

/* ---- lifetime ---- */

void conn_get(struct conn *c)
{
    atomic_fetch_add((atomic_int *)&c->refs, 1);
}

static void conn_free(struct conn *c)
{
    if (c->ops->on_free)
        c->ops->on_free(c);
    while (c->out_head) {
        struct conn_out *o = c->out_head;
        c->out_head = o->next;
        out_release(c, o);
    }
    if (c->transport && c->transport->destroy)
        c->transport->destroy(c);
    if (c->fd >= 0)
        close(c->fd);
    while (c->out_free) {
        struct conn_out *o = c->out_free;
        c->out_free = o->next;
        free(o);
    }
    free(c->in_buf);
    free(c);
    atomic_fetch_sub(&live_conns, 1);
}

void conn_put(struct conn *c)
{
    if (atomic_fetch_sub((atomic_int *)&c->refs, 1) == 1)
        conn_free(c);
}

void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    /* Best effort: let queued replies (e.g. an error) reach the peer. */
    conn_flush_now(c);
    c->closing = true;
    if (reactor_timer_armed(&c->finish_timer)) {
        reactor_timer_cancel(c->reactor, &c->finish_timer);
        conn_put(c); /* the timer's; the socket's reference is still held */
    }
    reactor_remove(c->reactor, c->fd);
    shutdown(c->fd, SHUT_RDWR);
    while (c->out_head) {
        struct conn_out *o = c->out_head;
        c->out_head = o->next;
        out_release(c, o);
    }
    c->out_tail = NULL;
    c->out_bytes = 0;
    c->out_count = 0;
    if (c->ops->on_close)
        c->ops->on_close(c);
    /* The socket's reference goes at the end of the loop iteration: the
     * epoll batch being handled may still hold an event for this conn
     * (e.g. a timer closed it), and on_event must find it, closed. */
    if (reactor_self() == c->reactor)
        reactor_defer(c->reactor, &c->release_msg);
    else
        conn_put(c);
}

struct close_req {
    struct reactor_msg msg;
    struct conn *c;
};

static void close_req_run(struct reactor_msg *m)
{
    struct close_req *req = (struct close_req *)m;
    struct conn *c = req->c;
    free(req);
    conn_close(c);
    conn_put(c);
}

void conn_close_async(struct conn *c)
{
    struct close_req *req = malloc(sizeof(*req));
    if (!req) {
        log_error("%s: out of memory closing connection", c->peer);
        return;
    }
    conn_get(c);
    req->c = c;
    req->msg.fn = close_req_run;
    reactor_post(c->reactor, &req->msg);
}

unsigned conn_live_count(void)
{
    return atomic_load(&live_conns);
}

/* ---- adoption ---- */

struct adopt_msg {
    struct reactor_msg msg;
    struct conn *c;
    conn_init_fn init;
    void *init_arg;
};

static void adopt_run(struct reactor_msg *m)
{
    struct adopt_msg *a = (struct adopt_msg *)m;
    struct conn *c = a->c;
    int rc = 0;
    if (a->init)
        rc = a->init(c, a->init_arg);
    free(a);
    if (rc == 0) {
        c->events = EPOLLIN | EPOLLRDHUP;
        rc = reactor_add(c->reactor, c->fd, c->events, &c->handler);
    }
    if (rc < 0) {
        log_warn("%s: connection setup failed: %s", c->peer, strerror(-rc));
        c->closing = true;
        if (c->ops->on_close)
            c->ops->on_close(c);
        conn_put(c);
        return;
    }
    /* The protocol may have queued a greeting in init. */
    if (c->out_head)
        schedule_flush(c);
}

int conn_adopt(struct reactor *r, int fd, const struct sockaddr *peer, socklen_t peerlen,
               const struct conn_ops *ops, conn_init_fn init, void *init_arg)
{
    struct conn *c = calloc(1, sizeof(*c));
    struct adopt_msg *a = malloc(sizeof(*a));
    if (!c || !a) {
        free(c);
        free(a);
        close(fd);
        return -ENOMEM;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    if (peer && (peer->sa_family == AF_INET || peer->sa_family == AF_INET6)) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    c->handler.on_event = on_event;
    c->reactor = r;
    c->fd = fd;
    format_sockaddr(peer, peerlen, c->peer, sizeof(c->peer));
    c->ops = ops;
    c->transport = &plain_transport;
    c->refs = 1;
    c->in_max = IN_DEFAULT_MAX;
    c->in_buf = malloc(IN_INITIAL);
    c->in_cap = c->in_buf ? IN_INITIAL : 0;
    c->flush_msg.fn = deferred_flush;
    reactor_timer_init(&c->finish_timer, finish_poll);
    c->release_msg.fn = release_run;
    atomic_fetch_add(&live_conns, 1);
    a->msg.fn = adopt_run;
    a->c = c;
    a->init = init;
    a->init_arg = init_arg;
    reactor_post(r, &a->msg);
    return 0;
}
