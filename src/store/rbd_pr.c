/*
 * The shared PR state object of an RBD image (see rbd_pr.h): one RADOS
 * object with a seq xattr, compare-and-swap updates and watch/notify.
 */
#include "store/rbd_pr.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "store/bdev_rbd.h"
#include "store/bdev_rbd_priv.h"

#define SEQ_XATTR "blockd.seq"

struct rbd_pr {
    /* cluster and io change only in rbd_pr_rewatch after the connection
     * was retired (a fenced gateway member rejoining): under io_lk
     * (write), which every other use of io holds (read). */
    pthread_rwlock_t io_lk;
    struct rbd_cluster *cluster; /* a reference */
    rados_ioctx_t io;            /* our own: watch callbacks and acks use it */
    char oid[384];               /* blockd.pr.<image id>[@<snapshot>], or blockd.nvme-resv.<...> */
    struct rbd_pr_listener l;
    pthread_mutex_t mu;         /* cookie / watching */
    pthread_mutex_t rewatch_mu; /* one rbd_pr_rewatch at a time */
    uint64_t cookie;
    bool watching;
};

static int pr_open(struct bdev_rbd *r, const char *prefix, const struct rbd_pr_listener *l,
                   unsigned *peers_out, struct rbd_pr **out);

static void pr_free(struct rbd_pr *p)
{
    pthread_rwlock_destroy(&p->io_lk);
    pthread_mutex_destroy(&p->rewatch_mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const char *rbd_pr_name(const struct rbd_pr *p)
{
    return p->oid;
}

/* Listener calls come only from the watch on the current io (a move
 * unwatches and flushes them before it changes io): they need no
 * io_lk. */
static void on_notify(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier_id,
                      void *data, size_t len)
{
    struct rbd_pr *p = arg;
    bool self = notifier_id == rados_get_instance_id(rbd_cluster_rados(p->cluster));
    if (len && p->l.changed)
        p->l.changed(p->l.arg, data, len, self);
    /* Acknowledge after the listener applied the change: the notifier's
     * PERSISTENT RESERVE OUT completes only when every daemon enforces it. */
    rados_notify_ack(p->io, p->oid, notify_id, handle, NULL, 0);
}

static void on_error(void *arg, uint64_t cookie, int err)
{
    struct rbd_pr *p = arg;
    log_warn("rbd pr: %s: watch %" PRIu64 " lost: %s", p->oid, cookie, strerror(-err));
    if (p->l.lost)
        p->l.lost(p->l.arg, err);
}

static int watch(struct rbd_pr *p)
{
    uint64_t cookie;
    int rc = rados_watch3(p->io, p->oid, &cookie, on_notify, on_error, RBD_PR_WATCH_TIMEOUT_S, p);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->mu);
    p->cookie = cookie;
    p->watching = true;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

static void unwatch(struct rbd_pr *p)
{
    pthread_mutex_lock(&p->mu);
    bool w = p->watching;
    uint64_t cookie = p->cookie;
    p->watching = false;
    pthread_mutex_unlock(&p->mu);
    if (w)
        rados_unwatch2(p->io, cookie);
}

/* The connection was retired (this daemon was fenced and is rejoining
 * with a new client): move to the current one. A blocklisted client can
 * neither watch nor write the object. Under rewatch_mu, unwatched. */
static int move_connection(struct rbd_pr *p)
{
    struct rbd_cluster *nc;
    rados_ioctx_t io;
    char ns[256];
    int rc = rbd_cluster_get_like(p->cluster, 10, &nc);
    if (rc < 0)
        return rc;
    rc = rados_ioctx_create2(rbd_cluster_rados(nc), rados_ioctx_get_id(p->io), &io);
    if (rc < 0) {
        rbd_cluster_put(nc);
        return rc;
    }
    int nl = rados_ioctx_get_namespace(p->io, ns, sizeof ns);
    if (nl > 0)
        rados_ioctx_set_namespace(io, ns);
    /* No listener call of the old watch runs after this. */
    rados_watch_flush(rbd_cluster_rados(p->cluster));
    pthread_rwlock_wrlock(&p->io_lk);
    rados_ioctx_t old_io = p->io;
    struct rbd_cluster *old = p->cluster;
    p->io = io;
    p->cluster = nc;
    pthread_rwlock_unlock(&p->io_lk);
    rados_ioctx_destroy(old_io);
    rbd_cluster_put(old);
    log_info("rbd pr: %s: now on client %s", p->oid, rbd_cluster_addr(nc));
    return 0;
}

int rbd_pr_rewatch(struct rbd_pr *p)
{
    pthread_mutex_lock(&p->rewatch_mu);
    unwatch(p);
    int rc = rbd_cluster_retired(p->cluster) ? move_connection(p) : 0;
    if (rc == 0)
        rc = watch(p);
    pthread_mutex_unlock(&p->rewatch_mu);
    return rc;
}

/* Create the object with seq 0 unless it exists. */
static int ensure_object(struct rbd_pr *p)
{
    rados_write_op_t op = rados_create_write_op();
    if (!op)
        return -ENOMEM;
    rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
    rados_write_op_setxattr(op, SEQ_XATTR, "0", 1);
    int rc = rados_write_op_operate(op, p->io, p->oid, NULL, 0);
    rados_release_write_op(op);
    return rc == -EEXIST ? 0 : rc;
}

/* Other watchers right now: notify with an empty payload and count who
 * answers (listeners ignore empty payloads) and who timed out. */
static int count_peers(struct rbd_pr *p, unsigned *peers)
{
    char *reply = NULL;
    size_t rlen = 0;
    /* A live daemon answers in milliseconds; one that does not (dead, its
     * watch not yet dropped) counts as serving, which is the safe answer,
     * so this need not wait long (LU creation holds the config lock). */
    int rc = rados_notify2(p->io, p->oid, NULL, 0, RBD_PR_COUNT_MS, &reply, &rlen);
    if (rc < 0 && rc != -ETIMEDOUT) {
        if (reply)
            rados_buffer_free(reply);
        return rc;
    }
    struct notify_ack_t *acks = NULL;
    struct notify_timeout_t *tos = NULL;
    size_t nacks = 0, ntos = 0;
    if (reply && rados_decode_notify_response(reply, rlen, &acks, &nacks, &tos, &ntos) == 0)
        rados_free_notify_response(acks, nacks, tos);
    if (reply)
        rados_buffer_free(reply);
    *peers = (unsigned)(nacks + ntos);
    return 0;
}

/* The object's name: one place, so open and remove cannot disagree. */
static int object_name(char *out, size_t cap, const char *prefix, const char *image_id,
                       const char *snap)
{
    int n = snprintf(out, cap, "%s%s%s%s", prefix, image_id, snap ? "@" : "", snap ? snap : "");
    /* never cut: two snapshots would share one object */
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int rbd_pr_remove(rados_ioctx_t io, const char *image_id, const char *snap)
{
    char oid[sizeof(((struct rbd_pr *)0)->oid)];
    int rc = object_name(oid, sizeof oid, RBD_PR_NVME, image_id, snap);
    if (rc == 0)
        rc = rados_remove(io, oid);
    if (rc == 0 || rc == -ENOENT)
        rc = object_name(oid, sizeof oid, RBD_PR_SCSI, image_id, snap);
    if (rc == 0)
        rc = rados_remove(io, oid);
    return rc == -ENOENT ? 0 : rc;
}

int rbd_pr_open(struct bdev *b, const struct rbd_pr_listener *l, unsigned *peers_out,
                struct rbd_pr **out)
{
    return rbd_pr_open_as(b, RBD_PR_SCSI, l, peers_out, out);
}

int rbd_pr_open_as(struct bdev *b, const char *prefix, const struct rbd_pr_listener *l,
                   unsigned *peers_out, struct rbd_pr **out)
{
    if (!bdev_is_rbd(b))
        return -ENOTSUP;
    struct bdev_rbd *r = (struct bdev_rbd *)b;
    /* The handle (and its connection) stays while we use it. */
    if (!bdev_rbd_enter(r))
        return -ESHUTDOWN;
    int rc = pr_open(r, prefix, l, peers_out, out);
    bdev_rbd_leave(r);
    return rc;
}

static int pr_open(struct bdev_rbd *r, const char *prefix, const struct rbd_pr_listener *l,
                   unsigned *peers_out, struct rbd_pr **out)
{
    char id[64];
    int rc = rbd_get_id(r->image, id, sizeof id);
    if (rc < 0)
        return rc;
    struct rbd_pr *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    /* A snapshot's LU is another LU than the image's: its own object. */
    const char *at = strchr(r->name, '@');
    rc = object_name(p->oid, sizeof p->oid, prefix, id, at ? at + 1 : NULL);
    if (rc < 0) {
        free(p);
        return rc;
    }
    p->l = *l;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->rewatch_mu, NULL);
    pthread_rwlock_init(&p->io_lk, NULL);
    rados_t rados = rbd_cluster_rados(r->cluster);
    rc = rados_ioctx_create2(rados, rados_ioctx_get_id(r->ioctx), &p->io);
    if (rc < 0) {
        pr_free(p);
        return rc;
    }
    char ns[256];
    int nl = rados_ioctx_get_namespace(r->ioctx, ns, sizeof ns);
    if (nl > 0)
        rados_ioctx_set_namespace(p->io, ns);
    rbd_cluster_ref(r->cluster);
    p->cluster = r->cluster;
    unsigned peers = 0;
    rc = ensure_object(p);
    if (rc == 0)
        rc = count_peers(p, &peers);
    if (rc == 0)
        rc = watch(p);
    if (rc < 0) {
        log_error("rbd pr: %s: cannot open the reservation object %s: %s", r->name, p->oid,
                  strerror(-rc));
        rados_ioctx_destroy(p->io);
        rbd_cluster_put(p->cluster);
        pr_free(p);
        return rc;
    }
    if (peers_out)
        *peers_out = peers;
    *out = p;
    return 0;
}

int rbd_pr_read(struct rbd_pr *p, char **blob, size_t *len, uint64_t *seq)
{
    char *buf = malloc(RBD_PR_MAX_BYTES + 1);
    if (!buf)
        return -ENOMEM;
    rados_read_op_t op = rados_create_read_op();
    if (!op) {
        free(buf);
        return -ENOMEM;
    }
    size_t got = 0;
    int rrc = 0, xrc = 0;
    rados_xattrs_iter_t it = NULL;
    /* One op, so the contents and the seq are from the same version. */
    rados_read_op_read(op, 0, RBD_PR_MAX_BYTES, buf, &got, &rrc);
    rados_read_op_getxattrs(op, &it, &xrc);
    pthread_rwlock_rdlock(&p->io_lk);
    int rc = rados_read_op_operate(op, p->io, p->oid, 0);
    pthread_rwlock_unlock(&p->io_lk);
    rados_release_read_op(op);
    if (rc == 0 && rrc < 0)
        rc = rrc;
    if (rc == 0 && xrc < 0)
        rc = xrc;
    bool found = false;
    uint64_t s = 0;
    if (rc == 0 && it) {
        const char *name, *val;
        size_t vlen;
        while (rados_getxattrs_next(it, &name, &val, &vlen) == 0 && name) {
            if (strcmp(name, SEQ_XATTR) == 0 && vlen < 24) {
                char tmp[24];
                memcpy(tmp, val, vlen);
                tmp[vlen] = 0;
                char *end;
                s = strtoull(tmp, &end, 10);
                found = end != tmp && *end == 0;
            }
        }
    }
    if (it)
        rados_getxattrs_end(it);
    if (rc == 0 && !found)
        rc = -EBADMSG;
    if (rc == 0 && got > RBD_PR_MAX_BYTES - 1)
        rc = -EFBIG;
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[got] = 0;
    *blob = buf;
    *len = got;
    *seq = s;
    return 0;
}

int rbd_pr_cas(struct rbd_pr *p, uint64_t seq, const void *blob, size_t len)
{
    if (len > RBD_PR_MAX_BYTES - 1)
        return -EFBIG;
    char old[24], next[24];
    int ol = snprintf(old, sizeof old, "%" PRIu64, seq);
    int nl = snprintf(next, sizeof next, "%" PRIu64, seq + 1);
    rados_write_op_t op = rados_create_write_op();
    if (!op)
        return -ENOMEM;
    int cmp = 0;
    rados_write_op_cmpxattr(op, SEQ_XATTR, LIBRADOS_CMPXATTR_OP_EQ, old, (size_t)ol);
    rados_write_op_write_full(op, blob, len);
    rados_write_op_setxattr(op, SEQ_XATTR, next, (size_t)nl);
    (void)cmp;
    pthread_rwlock_rdlock(&p->io_lk);
    int rc = rados_write_op_operate(op, p->io, p->oid, NULL, 0);
    pthread_rwlock_unlock(&p->io_lk);
    rados_release_write_op(op);
    /* A failed cmpxattr is -ECANCELED; keep that one meaning. */
    return rc;
}

int rbd_pr_notify(struct rbd_pr *p, const void *msg, size_t len, unsigned *missed)
{
    char *reply = NULL;
    size_t rlen = 0;
    pthread_rwlock_rdlock(&p->io_lk);
    int rc = rados_notify2(p->io, p->oid, msg, (int)len, RBD_PR_NOTIFY_MS, &reply, &rlen);
    pthread_rwlock_unlock(&p->io_lk);
    unsigned m = 0;
    if (rc == -ETIMEDOUT && reply) {
        struct notify_ack_t *acks = NULL;
        struct notify_timeout_t *tos = NULL;
        size_t nacks = 0, ntos = 0;
        if (rados_decode_notify_response(reply, rlen, &acks, &nacks, &tos, &ntos) == 0) {
            m = (unsigned)ntos;
            rados_free_notify_response(acks, nacks, tos);
        }
    }
    if (reply)
        rados_buffer_free(reply);
    if (missed)
        *missed = m;
    return rc;
}

void rbd_pr_close(struct rbd_pr *p)
{
    if (!p)
        return;
    unwatch(p);
    /* Wait for listener calls in flight: after this, none can touch the
     * caller's object. */
    rados_watch_flush(rbd_cluster_rados(p->cluster));
    rados_ioctx_destroy(p->io);
    rbd_cluster_put(p->cluster);
    pr_free(p);
}
