#include "store/uring.h"

#include <errno.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"
#include "core/reactor.h"
#include "core/util.h"

#define RING_ENTRIES 256

struct uring_state {
    struct io_uring ring;
    bool tried, ok;
    bool kick_deferred;
    int efd;
    struct reactor *reactor;
    struct reactor_handler handler;
    struct reactor_msg kick;
};

static _Thread_local struct uring_state us;
static atomic_bool disabled;

void uring_disable(void)
{
    atomic_store(&disabled, true);
}

static void harvest(struct uring_state *s)
{
    struct io_uring_cqe *cqe;
    /* done() may queue new reads (a request completing frees a slot the
     * protocol refills): those go to the next kick, not this loop. */
    while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
        struct uring_op *op = io_uring_cqe_get_data(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&s->ring, cqe);
        op->done(op, res);
    }
}

static void submit(struct uring_state *s)
{
    /* Reads served from the page cache complete inside io_uring_enter and
     * are reaped right here, so the eventfd is muted meanwhile (it would
     * only cost a wake-up and a read); unmuted, then the CQ is checked
     * again, so nothing that completes in between is left behind. */
    (void)io_uring_cq_eventfd_toggle(&s->ring, false);
    /* -EBUSY (completions overflowed the CQ) clears once harvest() has
     * drained it; then the rest goes in. */
    for (int tries = 0; io_uring_sq_ready(&s->ring) && tries < 8; tries++) {
        int rc = io_uring_submit(&s->ring);
        if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN)
            log_error("store: io_uring_submit: %s", strerror(-rc));
        harvest(s);
    }
    (void)io_uring_cq_eventfd_toggle(&s->ring, true);
    harvest(s);
    unsigned left = io_uring_sq_ready(&s->ring);
    if (left) {
        log_error("store: io_uring: %u reads could not be submitted; retrying", left);
        if (!s->kick_deferred) {
            s->kick_deferred = true;
            reactor_post(s->reactor, &s->kick);
        }
    }
}

static void on_kick(struct reactor_msg *m)
{
    struct uring_state *s = container_of(m, struct uring_state, kick);
    s->kick_deferred = false;
    submit(s);
}

static void on_eventfd(struct reactor_handler *h, uint32_t events)
{
    struct uring_state *s = container_of(h, struct uring_state, handler);
    uint64_t v;
    (void)events;
    ssize_t n = read(s->efd, &v, sizeof(v));
    (void)n;
    harvest(s);
}

static bool setup(struct uring_state *s)
{
    s->tried = true;
    s->reactor = reactor_self();
    if (!s->reactor || atomic_load(&disabled))
        return false;
    const char *engine = getenv("BLOCKD_IO_ENGINE");
    if (engine && strcmp(engine, "uring") != 0) {
        if (strcmp(engine, "pread") != 0)
            log_warn("store: BLOCKD_IO_ENGINE=%s unknown (uring|pread): using pread", engine);
        return false;
    }
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    /* One thread submits and reaps. Not COOP_TASKRUN: a read that missed
     * the cache must interrupt the reactor's epoll_wait to complete. A CQ
     * larger than the default so that every read in flight fits. */
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_CQSIZE;
    p.cq_entries = 8192;
    int rc = io_uring_queue_init_params(RING_ENTRIES, &s->ring, &p);
    if (rc == -EINVAL) { /* kernels before 6.0 */
        memset(&p, 0, sizeof(p));
        p.flags = IORING_SETUP_CQSIZE;
        p.cq_entries = 8192;
        rc = io_uring_queue_init_params(RING_ENTRIES, &s->ring, &p);
    }
    if (rc < 0) {
        log_info("store: io_uring unavailable on reactor %u (%s): reads use preadv2",
                 reactor_index(s->reactor), strerror(-rc));
        return false;
    }
    s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->efd < 0 || io_uring_register_eventfd(&s->ring, s->efd) < 0) {
        log_info("store: io_uring eventfd setup failed: reads use preadv2");
        if (s->efd >= 0)
            close(s->efd);
        io_uring_queue_exit(&s->ring);
        return false;
    }
    s->handler.on_event = on_eventfd;
    if (reactor_add(s->reactor, s->efd, EPOLLIN, &s->handler) < 0) {
        close(s->efd);
        io_uring_queue_exit(&s->ring);
        return false;
    }
    s->kick.fn = on_kick;
    s->ok = true;
    return true;
}

int uring_read(int fd, void *buf, size_t len, uint64_t off, struct uring_op *op)
{
    struct uring_state *s = &us;
    if (!s->ok && (s->tried || !setup(s)))
        return -ENOSYS;
    if (len > UINT32_MAX)
        return -ENOSYS;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
    if (!sqe) {
        /* The SQ is full: hand it to the kernel now, but without reaping,
         * so that no other request's done() runs inside this call (the
         * contract in uring.h); their completions wait in the CQ for the
         * end of the iteration or the eventfd. If even that fails, the
         * caller takes its portable path for this read. */
        int rc = io_uring_submit(&s->ring);
        sqe = rc >= 0 ? io_uring_get_sqe(&s->ring) : NULL;
        if (!sqe)
            return -ENOSYS;
    }
    io_uring_prep_read(sqe, fd, buf, (unsigned)len, off);
    io_uring_sqe_set_data(sqe, op);
    if (!s->kick_deferred) {
        s->kick_deferred = true;
        reactor_defer(s->reactor, &s->kick);
    }
    return 0;
}
