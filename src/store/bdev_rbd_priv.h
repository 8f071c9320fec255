/*
 * The RBD backend's internals, shared by bdev_rbd.c (open, synchronous ops)
 * and bdev_rbd_aio.c (the asynchronous data path). Not for other modules:
 * they use bdev_rbd.h.
 */
#ifndef BLOCKD_STORE_BDEV_RBD_PRIV_H
#define BLOCKD_STORE_BDEV_RBD_PRIV_H

#include <errno.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "store/bdev.h"
#include "store/rbd_cluster.h"

/* How completions come back (bdev_rbd_aio.c). */
enum bdev_rbd_completion {
    BDEV_RBD_CALLBACK, /* librbd's callback posts to the owner reactor */
    BDEV_RBD_EVENTFD,  /* rbd_set_image_notification + rbd_poll_io_events on a reactor */
};
#define BDEV_RBD_COMPLETION_DEFAULT BDEV_RBD_CALLBACK

struct rbd_poller;

/* Whether an image handle may be used (bdev_rbd_enter). */
enum bdev_rbd_state {
    BDEV_RBD_OPEN,
    /* Its client was blocklisted (bdev_rbd_fence) or the handle is being
     * replaced (bdev_rbd_reopen_retired): every new request fails at once
     * with -ESHUTDOWN, never reaching the old handle. */
    BDEV_RBD_FENCED,
    /* Withdrawn (bdev_rbd_withdraw: its volume is being deleted with
     * force): the handle is closed, every new request fails at once with
     * -ENODEV until bdev_rbd_restore. */
    BDEV_RBD_WITHDRAWN,
};

struct bdev_rbd {
    struct bdev base;
    enum bdev_rbd_completion mode;
    struct rbd_poller *poller; /* BDEV_RBD_EVENTFD only */
    /* cluster, ioctx, image and poller change only while state is FENCED
     * and users is 0 (the handle is replaced after a fencing): whoever
     * uses them holds a use (bdev_rbd_enter). */
    struct rbd_cluster *cluster; /* a reference */
    rados_ioctx_t ioctx;
    rbd_image_t image;
    atomic_int state;                    /* enum bdev_rbd_state */
    atomic_uint users;                   /* requests in flight, synchronous calls and borrowers */
    char name[256];                      /* pool/[ns/]image[@snap], for logs */
    char *pool, *ns, *image_name, *snap; /* to reopen it (ns "", snap NULL: none) */
    bool readonly_open;                  /* opened with rbd_open_read_only */
    /* Compare-and-write is atomic only within one RADOS object: the
     * image's stripe unit (its object size unless fancy striping). */
    uint64_t caw_unit;
    /* rbd_update_watch on the image header (bdev_rbd_watch_updates):
     * registered again on the new handle by a reopen */
    void (*update_fn)(void *arg);
    void *update_arg;
    uint64_t update_handle;
    bool update_watching;
    /* The registry of open images (bdev_rbd.c): reopening them. */
    struct bdev_rbd *reg_next;
    bool reopening; /* the registry's lock: close waits */
    bool withdrawn; /* the registry's lock: no handle (BDEV_RBD_WITHDRAWN) */
};

/* Take a use of r's handle: false (nothing taken) while it is fenced.
 * Every use of cluster/ioctx/image/poller is inside enter..leave; a
 * request in flight holds its use until its completion. Lock-free:
 * reactors and librbd threads call it. */
static inline bool bdev_rbd_enter(struct bdev_rbd *r)
{
    /* seq_cst, like the fencer's store then load of users: one of the
     * two sees the other. */
    atomic_fetch_add(&r->users, 1);
    if (atomic_load(&r->state) == BDEV_RBD_OPEN)
        return true;
    atomic_fetch_sub(&r->users, 1);
    return false;
}
static inline void bdev_rbd_leave(struct bdev_rbd *r)
{
    atomic_fetch_sub(&r->users, 1);
}
/* Why bdev_rbd_enter refused: -ENODEV for a withdrawn image (its volume
 * is being deleted: SCSI LOGICAL UNIT NOT SUPPORTED), else -ESHUTDOWN
 * (a fenced client: retriable). */
static inline int bdev_rbd_refused(struct bdev_rbd *r)
{
    return atomic_load(&r->state) == BDEV_RBD_WITHDRAWN ? -ENODEV : -ESHUTDOWN;
}

/* librbd's result as the bdev contract's errno (bdev.h): the ways librbd
 * says the cluster did not answer (the op timeouts rbd_cluster.c sets
 * return -ETIMEDOUT; a dropped session -ENOTCONN/-ECONNRESET) all become
 * -ETIMEDOUT, which front-ends answer with a retriable error. Other
 * results pass through. The one place this mapping is made. */
int bdev_rbd_errno(ssize_t rc);
/* rbd_write_zeroes flags for enum bdev_zero_flags. */
int bdev_rbd_zero_flags(unsigned flags);
/* Set up completion delivery for a just-opened image (r->image valid).
 * Blocking (control thread). 0 or -errno. */
int bdev_rbd_aio_init(struct bdev_rbd *r);
/* Undo bdev_rbd_aio_init before rbd_close; no request may be in flight.
 * May wait for the poller reactor (never when called on it). */
void bdev_rbd_aio_fini(struct bdev_rbd *r);
/* bdev_ops.submit (bdev.h). */
int bdev_rbd_submit(struct bdev *b, struct bdev_io *io);

#endif
