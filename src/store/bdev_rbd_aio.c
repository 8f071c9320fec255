/*
 * The RBD backend's asynchronous data path (bdev_ops.submit): every request
 * goes to librbd's rbd_aio_* calls and its completion is handed back to the
 * owning reactor, so no reactor and no I/O pool thread waits on the cluster.
 *
 * Two ways to learn of completions, chosen per image at open
 * (BLOCKD_RBD_COMPLETION=callback|eventfd; see bdev_rbd_priv.h for the
 * measured default):
 *   - callback: librbd runs our callback on its own completion thread (its
 *     API strand, one at a time per image); the callback posts the request
 *     to its owner reactor (reactor_post: a queue push and an eventfd write
 *     when the reactor sleeps);
 *   - eventfd: rbd_set_image_notification makes librbd queue completions and
 *     write an eventfd that one reactor polls (the image's poller, picked
 *     at open); its handler drains rbd_poll_io_events and hands each request
 *     to its owner (inline when that is the poller, else reactor_post).
 * Requests with no owner complete on whichever thread saw the completion.
 *
 * Zero-length requests are refused before librbd sees them (it asserts).
 */
#include <errno.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "store/bdev_rbd_priv.h"

/* Completions drained per rbd_poll_io_events call. */
#define POLL_BATCH 64

static void io_msg_done(struct reactor_msg *m)
{
    struct bdev_io *io = container_of(m, struct bdev_io, msg);
    io->done(io);
}

/* librbd's result for io is rc: finish it and hand it to its owner. */
static void io_finish(struct bdev_io *io, ssize_t rc)
{
    if (rc >= 0 && io->op == BDEV_IO_READ && (uint64_t)rc < io->length)
        /* Past the end of an image shrunk behind our back: zeros, like a
         * short file read. */
        memset((char *)io->buf + rc, 0, (size_t)(io->length - (uint64_t)rc));
    io->result = bdev_rbd_errno(rc);
    if (io->op == BDEV_IO_COMPARE_WRITE) {
        if (rc == -EILSEQ && io->miscompare >= io->offset)
            io->miscompare -= io->offset; /* librbd: an image offset */
        else if (rc == -EINVAL)
            io->result = -ENOTSUP; /* a range librbd cannot do atomically */
    }
    if (io->owner && io->owner != reactor_self()) {
        io->msg.fn = io_msg_done;
        reactor_post(io->owner, &io->msg);
        return;
    }
    io->done(io);
}

/* A request's librbd completion was released: give its use of the
 * handle back (a blocklisted client noted first: the gateway replaces
 * it), then finish it. The use ends before done() runs, since after it
 * the bdev may be closed. */
static void io_complete(struct bdev_io *io, ssize_t rc)
{
    struct bdev_rbd *r = (struct bdev_rbd *)io->bdev;
    if (rc == -ESHUTDOWN)
        rbd_cluster_note_error(r->cluster, (int)rc);
    bdev_rbd_leave(r);
    io_finish(io, rc);
}

/* callback mode: on librbd's completion thread. */
static void io_callback(rbd_completion_t c, void *arg)
{
    struct bdev_io *io = arg;
    ssize_t rc = rbd_aio_get_return_value(c);
    rbd_aio_release(c);
    io_complete(io, rc);
}

/* eventfd mode: the image's poller. Allocated apart from the bdev so that
 * an event already fetched by the reactor's epoll_wait when the bdev
 * closes finds it still there, marked dead. */
struct rbd_poller {
    struct reactor_handler handler;
    struct bdev_rbd *r; /* NULL once the bdev is closing */
    struct reactor *reactor;
    int efd;
    sem_t stopped;
    struct reactor_msg msg;
};

/* On the poller reactor. */
static void poller_event(struct reactor_handler *h, uint32_t events)
{
    struct rbd_poller *p = container_of(h, struct rbd_poller, handler);
    rbd_completion_t comps[POLL_BATCH];
    uint64_t v;
    int n;

    if (!p->r)
        return;
    /* Reset the counter first: a completion queued after the drain below
     * writes it again and brings us back. */
    if (read(p->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        log_warn("rbd: %s: eventfd read: %s", p->r->name, strerror(errno));
    do {
        n = rbd_poll_io_events(p->r->image, comps, POLL_BATCH);
        for (int i = 0; i < n; i++) {
            struct bdev_io *io = rbd_aio_get_arg(comps[i]);
            ssize_t rc = rbd_aio_get_return_value(comps[i]);
            rbd_aio_release(comps[i]);
            io_complete(io, rc);
        }
    } while (n == POLL_BATCH);
}

static enum bdev_rbd_completion completion_mode(void)
{
    const char *s = getenv("BLOCKD_RBD_COMPLETION");
    if (s && !strcmp(s, "eventfd"))
        return BDEV_RBD_EVENTFD;
    if (s && !strcmp(s, "callback"))
        return BDEV_RBD_CALLBACK;
    if (s && s[0])
        log_warn("rbd: ignoring BLOCKD_RBD_COMPLETION=%s (callback or eventfd)", s);
    return BDEV_RBD_COMPLETION_DEFAULT;
}

int bdev_rbd_aio_init(struct bdev_rbd *r)
{
    struct rbd_poller *p;
    int rc;

    r->mode = completion_mode();
    if (r->mode == BDEV_RBD_CALLBACK)
        return 0;
    /* The eventfd needs a reactor to poll it: without reactors (tools,
     * tests), callbacks. */
    struct reactor *reactor = reactor_next();
    if (!reactor) {
        r->mode = BDEV_RBD_CALLBACK;
        return 0;
    }
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    p->r = r;
    p->reactor = reactor;
    p->handler.on_event = poller_event;
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->efd < 0) {
        rc = -errno;
        free(p);
        return rc;
    }
    rc = rbd_set_image_notification(r->image, p->efd, EVENT_TYPE_EVENTFD);
    if (rc == 0)
        rc = reactor_add(reactor, p->efd, EPOLLIN, &p->handler);
    if (rc < 0) {
        close(p->efd);
        free(p);
        return rc;
    }
    sem_init(&p->stopped, 0, 0);
    r->poller = p;
    return 0;
}

static void poller_stopped(struct reactor_msg *m)
{
    sem_post(&container_of(m, struct rbd_poller, msg)->stopped);
}

static void poller_free(struct reactor_msg *m)
{
    struct rbd_poller *p = container_of(m, struct rbd_poller, msg);
    close(p->efd);
    sem_destroy(&p->stopped);
    free(p);
}

/* On the poller: unregister; the rest of this loop iteration (an event of
 * ours may be in its batch) runs before `then`. */
static void poller_unregister(struct rbd_poller *p, void (*then)(struct reactor_msg *m))
{
    p->r = NULL;
    reactor_remove(p->reactor, p->efd);
    p->msg.fn = then;
    reactor_defer(p->reactor, &p->msg);
}

static void poller_stop_msg(struct reactor_msg *m)
{
    poller_unregister(container_of(m, struct rbd_poller, msg), poller_stopped);
}

void bdev_rbd_aio_fini(struct bdev_rbd *r)
{
    struct rbd_poller *p = r->poller;

    if (!p)
        return;
    r->poller = NULL;
    if (reactor_self() == p->reactor) {
        /* Between two of the poller's events: no handler of ours runs. */
        poller_unregister(p, poller_free);
        return;
    }
    /* Wait until the poller can no longer be inside rbd_poll_io_events on
     * this image (it is closed next). */
    p->msg.fn = poller_stop_msg;
    reactor_post(p->reactor, &p->msg);
    while (sem_wait(&p->stopped) < 0 && errno == EINTR)
        ;
    poller_free(&p->msg);
}

int bdev_rbd_submit(struct bdev *b, struct bdev_io *io)
{
    struct bdev_rbd *r = (struct bdev_rbd *)b;
    rbd_completion_t c;
    int rc;

    if (io->op != BDEV_IO_FLUSH && io->length == 0)
        return -EINVAL; /* librbd asserts on zero-length requests */
    if (io->length > SIZE_MAX / 2)
        return -EINVAL;
    /* A fenced client's handle is never used again: the request fails
     * at once (retriable: SCSI 02/04/0C, NBD ESHUTDOWN) until the handle
     * is replaced (bdev_rbd_reopen_retired); a withdrawn image's with
     * -ENODEV (its volume is being deleted). */
    if (!bdev_rbd_enter(r))
        return bdev_rbd_refused(r);
    io->bdev = b;
    rc = rbd_aio_create_completion(io, r->mode == BDEV_RBD_CALLBACK ? io_callback : NULL, &c);
    if (rc < 0) {
        bdev_rbd_leave(r);
        return rc;
    }
    switch (io->op) {
    case BDEV_IO_READ:
        /* librbd keeps the iovec until completion: it lives in io. */
        io->iov = (struct iovec){.iov_base = io->buf, .iov_len = (size_t)io->length};
        rc = rbd_aio_readv(r->image, &io->iov, 1, io->offset, c);
        break;
    case BDEV_IO_WRITE:
        io->iov = (struct iovec){.iov_base = io->buf, .iov_len = (size_t)io->length};
        rc = rbd_aio_writev(r->image, &io->iov, 1, io->offset, c);
        break;
    case BDEV_IO_FLUSH:
        rc = rbd_aio_flush(r->image, c);
        break;
    case BDEV_IO_TRIM:
        rc = rbd_aio_discard(r->image, io->offset, io->length, c);
        break;
    case BDEV_IO_WRITE_ZEROES:
        if (io->flags & BDEV_ZERO_FAST) {
            rc = -ENOTSUP; /* not advertised: see bdev_rbd_open */
            break;
        }
        rc = rbd_aio_write_zeroes(r->image, io->offset, (size_t)io->length, c,
                                  bdev_rbd_zero_flags(io->flags), 0);
        break;
    case BDEV_IO_COMPARE_WRITE:
        /* One RADOS object's compare-extent + write: atomic on the OSD,
         * so for every gateway and client of the image. Ranges across an
         * object boundary cannot be (librbd refuses them). */
        if (!r->caw_unit ||
            io->offset / r->caw_unit != (io->offset + io->length - 1) / r->caw_unit) {
            rc = -ENOTSUP;
            break;
        }
        io->miscompare = 0;
        rc = (int)rbd_aio_compare_and_write(r->image, io->offset, (size_t)io->length, io->buf,
                                            (const char *)io->buf + io->length, c, &io->miscompare,
                                            0);
        break;
    default:
        rc = -EINVAL;
    }
    if (rc < 0) { /* not started: the completion never fires */
        rbd_aio_release(c);
        bdev_rbd_leave(r);
    }
    return rc < 0 ? rc : 0;
}
