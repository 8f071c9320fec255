/*
 * The RBD backend (see bdev_rbd.h): one librbd image handle per bdev,
 * shared by every connection and thread that uses the volume.
 *
 * Synchronous ops (the bdev_ops of every backend) call librbd's blocking
 * functions: they serve the control plane, tools and the fallback paths
 * of struct volume. The data path uses submit() (bdev.h), which hands each
 * request to librbd's asynchronous calls and completes it on the owning
 * reactor, so neither a reactor nor an I/O pool thread waits on the
 * cluster.
 *
 * Durability: sync() and an asynchronous FLUSH are rbd_flush /
 * rbd_aio_flush on the one shared handle. librbd completes a flush only
 * once every write that completed before the flush was issued is on the
 * OSDs (it writes back its cache first when rbd_cache is on), so one flush
 * covers the writes of every connection: BDEV_CAN_MULTI_CONN. With the
 * cache off (our default), no journal and no write-log cache, a write
 * completes only once the OSDs committed it, and librbd's flush merely
 * waits for writes still in flight, which no flush has to cover: such an
 * image is BDEV_WRITES_STABLE and the volume does not call it at all.
 */
#include "store/bdev_rbd.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include <rbd/features.h>

#include "core/log.h"
#include "core/util.h"
#include "store/bdev_rbd_priv.h"

static const struct bdev_ops rbd_ops;

static struct bdev_rbd *to_rbd(struct bdev *b)
{
    return (struct bdev_rbd *)b;
}

/* Every open image (reopened after a fencing). reg_lock is taken alone,
 * never across a cluster call. */
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cond = PTHREAD_COND_INITIALIZER;
static struct bdev_rbd *reg_head;

bool bdev_is_rbd(const struct bdev *b)
{
    return b && b->ops == &rbd_ops;
}

rbd_image_t bdev_rbd_image_get(struct bdev *b)
{
    if (!bdev_is_rbd(b) || !bdev_rbd_enter(to_rbd(b)))
        return NULL;
    return to_rbd(b)->image;
}

void bdev_rbd_image_put(struct bdev *b)
{
    bdev_rbd_leave(to_rbd(b));
}

rados_ioctx_t bdev_rbd_ioctx(struct bdev *b)
{
    return bdev_is_rbd(b) ? to_rbd(b)->ioctx : NULL;
}

/* A synchronous call's use of the handle (-ESHUTDOWN while fenced,
 * -ENODEV while withdrawn) and its result (a blocklisted client is noted:
 * the gateway replaces it). */
#define RBD_ENTER(r)                                                                               \
    do {                                                                                           \
        if (!bdev_rbd_enter(r))                                                                    \
            return bdev_rbd_refused(r);                                                            \
    } while (0)

static int rbd_leave_rc(struct bdev_rbd *r, int rc)
{
    if (rc == -ESHUTDOWN)
        rbd_cluster_note_error(r->cluster, rc);
    bdev_rbd_leave(r);
    return rc;
}

int bdev_rbd_watch_updates(struct bdev *b, void (*fn)(void *arg), void *arg)
{
    struct bdev_rbd *r = to_rbd(b);
    if (!bdev_is_rbd(b) || r->update_fn)
        return -EINVAL;
    RBD_ENTER(r);
    int rc = rbd_update_watch(r->image, &r->update_handle, fn, arg);
    if (rc == 0) {
        r->update_fn = fn;
        r->update_arg = arg;
        r->update_watching = true;
    }
    return rbd_leave_rc(r, rc);
}

int bdev_rbd_current_size(struct bdev *b, uint64_t *size)
{
    if (!bdev_is_rbd(b))
        return -EINVAL;
    struct bdev_rbd *r = to_rbd(b);
    RBD_ENTER(r);
    return rbd_leave_rc(r, bdev_rbd_errno(rbd_get_size(r->image, size)));
}

int bdev_rbd_errno(ssize_t rc)
{
    switch (rc) {
    case -ETIMEDOUT:
    case -ENOTCONN:
    case -ECONNRESET:
        return -ETIMEDOUT;
    default:
        return rc < 0 ? (int)rc : 0;
    }
}

/* librbd's byte counts are ssize_t; volume never passes more than SIZE_MAX,
 * but a single call must also fit in ssize_t. Longer ranges are split. */
#define RBD_CHUNK ((uint64_t)1 << 30)

static int rbd_read_locked(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    char *p = buf;
    while (len > 0) {
        size_t n = len > RBD_CHUNK ? (size_t)RBD_CHUNK : len;
        ssize_t rc = rbd_read(to_rbd(b)->image, off, n, p);
        if (rc < 0)
            return bdev_rbd_errno(rc);
        if ((size_t)rc < n) /* past the end of a shrunk image: reads as zeros */
            memset(p + rc, 0, n - (size_t)rc);
        p += n;
        off += n;
        len -= n;
    }
    return 0;
}

static int rbd_read_sync(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    RBD_ENTER(to_rbd(b));
    return rbd_leave_rc(to_rbd(b), rbd_read_locked(b, buf, len, off));
}

static int rbd_write_locked(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;
    while (len > 0) {
        size_t n = len > RBD_CHUNK ? (size_t)RBD_CHUNK : len;
        ssize_t rc = rbd_write(to_rbd(b)->image, off, n, p);
        if (rc < 0)
            return bdev_rbd_errno(rc);
        if ((size_t)rc != n)
            return -EIO;
        p += n;
        off += n;
        len -= n;
    }
    return 0;
}

static int rbd_write_sync(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    RBD_ENTER(to_rbd(b));
    return rbd_leave_rc(to_rbd(b), rbd_write_locked(b, buf, len, off));
}

static int rbd_sync_sync(struct bdev *b)
{
    RBD_ENTER(to_rbd(b));
    return rbd_leave_rc(to_rbd(b), bdev_rbd_errno(rbd_flush(to_rbd(b)->image)));
}

static int rbd_trim_locked(struct bdev *b, uint64_t off, uint64_t len)
{
    while (len > 0) {
        uint64_t n = len > RBD_CHUNK ? RBD_CHUNK : len;
        int rc = rbd_discard(to_rbd(b)->image, off, n);
        if (rc < 0)
            return bdev_rbd_errno(rc);
        off += n;
        len -= n;
    }
    return 0;
}

static int rbd_trim_sync(struct bdev *b, uint64_t off, uint64_t len)
{
    RBD_ENTER(to_rbd(b));
    return rbd_leave_rc(to_rbd(b), rbd_trim_locked(b, off, len));
}

/* rbd_write_zeroes without flags may deallocate whole objects (reads as
 * zeros either way); THICK_PROVISION writes real zeros, for callers that
 * asked for an allocated range. */
int bdev_rbd_zero_flags(unsigned flags)
{
    return (flags & BDEV_ZERO_MAY_TRIM) ? 0 : RBD_WRITE_ZEROES_FLAG_THICK_PROVISION;
}

static int rbd_write_zeroes_locked(struct bdev *b, uint64_t off, uint64_t len, unsigned flags)
{
    if (flags & BDEV_ZERO_FAST)
        return -ENOTSUP; /* not advertised (BDEV_CAN_FAST_ZERO): librbd may copy up */
    while (len > 0) {
        uint64_t n = len > RBD_CHUNK ? RBD_CHUNK : len;
        ssize_t rc =
            rbd_write_zeroes(to_rbd(b)->image, off, (size_t)n, bdev_rbd_zero_flags(flags), 0);
        if (rc < 0)
            return bdev_rbd_errno(rc);
        off += n;
        len -= n;
    }
    return 0;
}

static int rbd_write_zeroes_sync(struct bdev *b, uint64_t off, uint64_t len, unsigned flags)
{
    RBD_ENTER(to_rbd(b));
    return rbd_leave_rc(to_rbd(b), rbd_write_zeroes_locked(b, off, len, flags));
}

static int rbd_cache_sync(struct bdev *b, uint64_t off, uint64_t len)
{
    return 0; /* not advertised (BDEV_CAN_CACHE) */
}

struct extents_ctx {
    struct extent *out;
    size_t max, n;
    uint64_t cursor, end;
    bool full;
};

/* Append [off, off+len) of type t, merging with the previous extent. */
static bool extents_add(struct extents_ctx *x, uint64_t off, uint64_t len, enum extent_type t)
{
    if (len == 0)
        return true;
    if (x->n > 0 && x->out[x->n - 1].type == t &&
        x->out[x->n - 1].offset + x->out[x->n - 1].length == off) {
        x->out[x->n - 1].length += len;
        return true;
    }
    if (x->n == x->max) {
        x->full = true;
        return false;
    }
    x->out[x->n++] = (struct extent){.offset = off, .length = len, .type = t};
    return true;
}

/* rbd_diff_iterate2 reports the allocated ranges in ascending order; the
 * gaps between them are holes. A non-existing range (exists == 0) is a
 * hole too. */
static int extents_cb(uint64_t off, size_t len, int exists, void *arg)
{
    struct extents_ctx *x = arg;
    uint64_t end = off + len;
    if (end > x->end)
        end = x->end;
    if (off < x->cursor) /* overlaps what was reported: keep the new tail */
        off = x->cursor;
    if (off >= end)
        return 0;
    if (!extents_add(x, x->cursor, off - x->cursor, EXTENT_HOLE) ||
        !extents_add(x, off, end - off, exists ? EXTENT_DATA : EXTENT_HOLE))
        return -ECANCELED;
    x->cursor = end;
    return 0;
}

static int rbd_extents_locked(struct bdev *b, uint64_t off, uint64_t len, struct extent *out,
                              size_t max, size_t *n)
{
    struct extents_ctx x = {.out = out, .max = max, .cursor = off, .end = off + len};
    *n = 0;
    if (max == 0)
        return -EINVAL;
    if (len == 0)
        return 0;
    /* whole_object = false: byte ranges, not 4 MiB objects (object-map and
     * fast-diff still spare the objects that do not exist). include_parent:
     * a clone's data inherited from its parent is data. */
    int rc = rbd_diff_iterate2(to_rbd(b)->image, NULL, off, len, 1, 0, extents_cb, &x);
    if (rc < 0 && !(rc == -ECANCELED && x.full))
        return bdev_rbd_errno(rc);
    if (!x.full)
        extents_add(&x, x.cursor, x.end - x.cursor, EXTENT_HOLE);
    *n = x.n;
    return 0;
}

static int rbd_extents_sync(struct bdev *b, uint64_t off, uint64_t len, struct extent *out,
                            size_t max, size_t *n)
{
    *n = 0;
    RBD_ENTER(to_rbd(b));
    return rbd_leave_rc(to_rbd(b), rbd_extents_locked(b, off, len, out, max, n));
}

static int rbd_resize_sync(struct bdev *b, uint64_t new_size)
{
    RBD_ENTER(to_rbd(b));
    int rc = rbd_resize(to_rbd(b)->image, new_size);
    if (rc == 0)
        b->size = new_size;
    return rbd_leave_rc(to_rbd(b), rc);
}

static void free_names(struct bdev_rbd *r)
{
    free(r->pool), free(r->ns), free(r->image_name), free(r->snap);
}

static void rbd_close_bdev(struct bdev *b)
{
    struct bdev_rbd *r = to_rbd(b);
    /* Out of the registry first; a reopen working on it finishes first
     * (it holds no volume reference: the volume may go meanwhile). */
    pthread_mutex_lock(&reg_lock);
    while (r->reopening)
        pthread_cond_wait(&reg_cond, &reg_lock);
    for (struct bdev_rbd **pp = &reg_head; *pp; pp = &(*pp)->reg_next) {
        if (*pp == r) {
            *pp = r->reg_next;
            break;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (!r->withdrawn) { /* else bdev_rbd_withdraw closed the handle */
        if (r->update_watching)
            rbd_update_unwatch(r->image, r->update_handle); /* waits for a call in progress */
        bdev_rbd_aio_fini(r);
        rbd_close(r->image);
        rados_ioctx_destroy(r->ioctx);
    }
    rbd_cluster_put(r->cluster);
    free_names(r);
    free(r);
}

static const struct bdev_ops rbd_ops = {
    .name = "rbd",
    .read = rbd_read_sync,
    .read_nowait = NULL, /* never called: submit() serves the data path */
    .write = rbd_write_sync,
    .write_nowait = NULL,
    .sync = rbd_sync_sync,
    .trim = rbd_trim_sync,
    .write_zeroes = rbd_write_zeroes_sync,
    .cache = rbd_cache_sync,
    .extents = rbd_extents_sync,
    .resize = rbd_resize_sync,
    .close = rbd_close_bdev,
    .submit = bdev_rbd_submit,
};

/* An image may override the client's settings in its metadata
 * ("conf_<option>"): true when it sets the boolean option to true. */
static bool image_sets(rbd_image_t image, const char *key)
{
    char val[16];
    size_t len = sizeof(val);

    if (rbd_metadata_get(image, key, val, &len) < 0)
        return false;
    return strcmp(val, "true") == 0 || strcmp(val, "1") == 0;
}

/* Whether librbd caches writes for this image: the connection turns
 * rbd_cache off (rbd_cluster.c) unless the image's metadata turns it on. */
static bool image_caches_writes(struct rbd_cluster *c, rbd_image_t image)
{
    char val[16];

    if (image_sets(image, "conf_rbd_cache"))
        return true;
    if (rados_conf_get(rbd_cluster_rados(c), "rbd_cache", val, sizeof(val)) < 0)
        return true; /* unknown: assume the worst */
    return strcmp(val, "true") == 0 || strcmp(val, "1") == 0;
}

/* Whether a completed write may still sit in something volatile on our
 * side: the write cache, or the journal or persistent write-log cache
 * (those complete writes before the image's objects have them). */
static bool image_buffers_writes(struct rbd_cluster *c, rbd_image_t image)
{
    char val[256];
    size_t len = sizeof(val);
    uint64_t features = 0;

    if (image_caches_writes(c, image))
        return true;
    if (rbd_get_features(image, &features) < 0 || (features & RBD_FEATURE_JOURNALING))
        return true;
    if (rbd_metadata_get(image, "conf_rbd_plugins", val, &len) == 0 && strstr(val, "pwl"))
        return true;
    if (rados_conf_get(rbd_cluster_rados(c), "rbd_plugins", val, sizeof(val)) == 0 &&
        strstr(val, "pwl"))
        return true;
    return false;
}

/* What an open image offers (bdev.h's BDEV_* caps); *caw_unit: its
 * stripe unit, the granularity of COMPARE AND WRITE. */
static unsigned image_caps(struct rbd_cluster *c, rbd_image_t image, bool readonly,
                           uint64_t *caw_unit)
{
    /* BDEV_TRIM_ZEROES: the cluster connection turns rbd_skip_partial_discard
     * off (rbd_cluster.c), so a discard zeroes the parts of its range that
     * it cannot deallocate, unless the image's own metadata turns skipping
     * back on. Not FAST_ZERO: zeroing a clone's range may copy the parent's
     * object up. */
    unsigned caps =
        BDEV_CAN_FLUSH | BDEV_CAN_TRIM | BDEV_CAN_ZERO | BDEV_CAN_EXTENTS | BDEV_CAN_MULTI_CONN;
    if (!image_sets(image, "conf_rbd_skip_partial_discard"))
        caps |= BDEV_TRIM_ZEROES;
    if (!readonly && rbd_get_stripe_unit(image, caw_unit) == 0 && *caw_unit)
        caps |= BDEV_CAN_COMPARE_WRITE;
    /* A completed write is on the OSDs: a failed flush loses none. */
    if (!image_caches_writes(c, image))
        caps |= BDEV_SYNC_RETRIABLE;
    if (!image_buffers_writes(c, image))
        caps |= BDEV_WRITES_STABLE;
    return caps;
}

int bdev_rbd_open(struct rbd_cluster *c, const char *pool, const char *ns, const char *image,
                  const char *snap, bool readonly, struct bdev **out)
{
    struct bdev_rbd *r;
    uint64_t size;
    int rc;

    *out = NULL;
    if (!c || !pool || !pool[0] || !image || !image[0])
        return -EINVAL;
    if (snap && !snap[0])
        snap = NULL;
    readonly = readonly || snap;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->pool = strdup(pool);
    r->ns = strdup(ns ? ns : "");
    r->image_name = strdup(image);
    r->snap = snap ? strdup(snap) : NULL;
    r->readonly_open = readonly;
    if (!r->pool || !r->ns || !r->image_name || (snap && !r->snap)) {
        rc = -ENOMEM;
        goto fail_names;
    }
    rc = rbd_cluster_ioctx(c, pool, ns, &r->ioctx);
    if (rc < 0)
        goto fail_names;
    rc = readonly ? rbd_open_read_only(r->ioctx, image, &r->image, snap)
                  : rbd_open(r->ioctx, image, &r->image, NULL);
    if (rc < 0)
        goto fail_ioctx;
    rc = rbd_get_size(r->image, &size);
    if (rc < 0)
        goto fail_image;
    rc = bdev_rbd_aio_init(r);
    if (rc < 0)
        goto fail_image;
    snprintf(r->name, sizeof(r->name), "%s/%s%s%s%s%s", pool, ns && ns[0] ? ns : "",
             ns && ns[0] ? "/" : "", image, snap ? "@" : "", snap ? snap : "");
    rbd_cluster_ref(c);
    r->cluster = c;
    r->base.ops = &rbd_ops;
    r->base.size = size;
    r->base.readonly = readonly;
    r->base.caps = image_caps(c, r->image, readonly, &r->caw_unit);
    if (image_caches_writes(c, r->image))
        log_warn("rbd: %s: rbd_cache is on for this image: a failed flush fails every later "
                 "one until it is reopened",
                 r->name);
    atomic_init(&r->state, BDEV_RBD_OPEN);
    atomic_init(&r->users, 0);
    pthread_mutex_lock(&reg_lock);
    r->reg_next = reg_head;
    reg_head = r;
    pthread_mutex_unlock(&reg_lock);
    *out = &r->base;
    return 0;
fail_image:
    rbd_close(r->image);
fail_ioctx:
    rados_ioctx_destroy(r->ioctx);
fail_names:
    free_names(r);
    free(r);
    return rc;
}

/* ---- replacing a fenced client's handles ---- */

unsigned bdev_rbd_fence(struct rbd_cluster *c)
{
    unsigned n = 0;

    pthread_mutex_lock(&reg_lock);
    for (struct bdev_rbd *r = reg_head; r; r = r->reg_next)
        if (r->cluster == c) {
            /* only an open handle: a withdrawn one has none to replace */
            int open = BDEV_RBD_OPEN;
            n += atomic_compare_exchange_strong(&r->state, &open, BDEV_RBD_FENCED);
        }
    pthread_mutex_unlock(&reg_lock);
    return n;
}

/* Wait until nothing uses r's handle (r is fenced: nothing new can).
 * Requests in flight on a blocklisted client end with -EBLOCKLISTED, or
 * at worst after the op timeout (rbd_cluster.c): this does not wait
 * forever, but says so every 10 s. */
static void drain_users(struct bdev_rbd *r)
{
    unsigned waited_ms = 0;

    while (atomic_load(&r->users) > 0) {
        nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
        waited_ms += 5;
        if (waited_ms % 10000 == 0)
            log_warn("rbd: %s: still waiting for %u request(s) on the fenced client to end "
                     "(%u s)",
                     r->name, atomic_load(&r->users), waited_ms / 1000);
    }
}

/* A new handle on r's image through cluster c, for r's settings. 0 or
 * -errno (nothing held). Blocking. */
static int handle_open(struct bdev_rbd *r, struct rbd_cluster *c, rados_ioctx_t *io,
                       rbd_image_t *img)
{
    int rc = rbd_cluster_ioctx(c, r->pool, r->ns, io);

    if (rc < 0)
        return rc;
    rc = r->readonly_open ? rbd_open_read_only(*io, r->image_name, img, r->snap)
                          : rbd_open(*io, r->image_name, img, NULL);
    if (rc < 0)
        rados_ioctx_destroy(*io);
    return rc;
}

/* r (not OPEN, no users, aio finished) serves through img/io from now:
 * completions, the header watch (an in-process registration), then
 * requests. Returns the handle it had before. */
static rbd_image_t handle_install(struct bdev_rbd *r, rados_ioctx_t io, rbd_image_t img,
                                  rados_ioctx_t *old_io)
{
    rbd_image_t old_img = r->image;

    *old_io = r->ioctx;
    r->image = img;
    r->ioctx = io;
    if (bdev_rbd_aio_init(r) < 0) {
        log_warn("rbd: %s: completion notification on the new handle failed; using callbacks",
                 r->name);
        r->mode = BDEV_RBD_CALLBACK;
    }
    if (r->update_watching && old_img)
        rbd_update_unwatch(old_img, r->update_handle);
    r->update_watching =
        r->update_fn && rbd_update_watch(img, &r->update_handle, r->update_fn, r->update_arg) == 0;
    atomic_store(&r->state, BDEV_RBD_OPEN);
    return old_img;
}

/* Give r a handle on the current connection for its settings. r is
 * marked reopening (close waits). 0 or -errno (r stays fenced). */
static int reopen_one(struct bdev_rbd *r)
{
    struct rbd_cluster *nc, *old;
    rados_ioctx_t io, old_io;
    rbd_image_t img, old_img;
    int rc;

    atomic_store(&r->state, BDEV_RBD_FENCED);
    drain_users(r);
    rc = rbd_cluster_get_like(r->cluster, 10, &nc);
    if (rc < 0) {
        log_warn("rbd: %s: cannot connect a new client to reopen it: %s", r->name, strerror(-rc));
        return rc;
    }
    rc = handle_open(r, nc, &io, &img);
    if (rc < 0) {
        log_warn("rbd: %s: cannot reopen it on client %s: %s", r->name, rbd_cluster_addr(nc),
                 strerror(-rc));
        rbd_cluster_put(nc);
        return rc;
    }
    /* Nothing uses the old handle (fenced, no users): swap, then close
     * the old one after I/O resumed (closing a blocklisted handle may
     * wait for the cluster's answers). The image may have been resized
     * meanwhile: one check (update_fn). */
    bdev_rbd_aio_fini(r);
    old = r->cluster;
    pthread_mutex_lock(&reg_lock);
    r->cluster = nc; /* bdev_rbd_fence reads it under reg_lock */
    pthread_mutex_unlock(&reg_lock);
    old_img = handle_install(r, io, img, &old_io);
    log_info("rbd: %s reopened on client %s", r->name, rbd_cluster_addr(nc));
    if (r->update_fn)
        r->update_fn(r->update_arg);
    rbd_close(old_img);
    rados_ioctx_destroy(old_io);
    rbd_cluster_put(old);
    return 0;
}

unsigned bdev_rbd_reopen_retired(unsigned *failed)
{
    struct bdev_rbd **todo = NULL;
    size_t n = 0, cap = 0;
    unsigned ok = 0;

    *failed = 0;
    pthread_mutex_lock(&reg_lock);
    for (struct bdev_rbd *r = reg_head; r; r = r->reg_next)
        cap++;
    todo = cap ? calloc(cap, sizeof(*todo)) : NULL;
    for (struct bdev_rbd *r = reg_head; todo && r; r = r->reg_next) {
        if (!r->reopening && !r->withdrawn && rbd_cluster_retired(r->cluster)) {
            r->reopening = true;
            todo[n++] = r;
        }
    }
    pthread_mutex_unlock(&reg_lock);
    if (cap && !todo) {
        *failed = 1;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (reopen_one(todo[i]) == 0)
            ok++;
        else
            (*failed)++;
        pthread_mutex_lock(&reg_lock);
        todo[i]->reopening = false;
        pthread_cond_broadcast(&reg_cond);
        pthread_mutex_unlock(&reg_lock);
    }
    free(todo);
    return ok;
}

/* ---- withdrawing an image whose volume is deleted ---- */

uint64_t bdev_rbd_client_id(struct bdev *b)
{
    if (!bdev_is_rbd(b))
        return 0;
    pthread_mutex_lock(&reg_lock); /* the cluster changes under it (reopen_one) */
    uint64_t id = rados_get_instance_id(rbd_cluster_rados(to_rbd(b)->cluster));
    pthread_mutex_unlock(&reg_lock);
    return id;
}

/* Take r for a withdraw or restore: wait for a reopen in progress, then
 * mark it (close and reopens wait). False: r is already as wanted. */
static bool take_for(struct bdev_rbd *r, bool withdrawn)
{
    pthread_mutex_lock(&reg_lock);
    while (r->reopening)
        pthread_cond_wait(&reg_cond, &reg_lock);
    bool go = r->withdrawn != withdrawn;
    if (go)
        r->reopening = true;
    pthread_mutex_unlock(&reg_lock);
    return go;
}

static void release_as(struct bdev_rbd *r, bool withdrawn)
{
    pthread_mutex_lock(&reg_lock);
    r->withdrawn = withdrawn;
    r->reopening = false;
    pthread_cond_broadcast(&reg_cond);
    pthread_mutex_unlock(&reg_lock);
}

int bdev_rbd_withdraw(struct bdev *b)
{
    struct bdev_rbd *r = to_rbd(b);

    if (!bdev_is_rbd(b))
        return -EINVAL;
    if (!take_for(r, true))
        return 0;
    atomic_store(&r->state, BDEV_RBD_WITHDRAWN);
    drain_users(r); /* what is in flight ends normally */
    if (r->update_watching)
        rbd_update_unwatch(r->image, r->update_handle);
    r->update_watching = false;
    bdev_rbd_aio_fini(r);
    rbd_close(r->image); /* its header watch goes with it */
    rados_ioctx_destroy(r->ioctx);
    r->image = NULL;
    r->ioctx = NULL;
    release_as(r, true);
    log_info("rbd: %s withdrawn: its handle is closed", r->name);
    return 0;
}

int bdev_rbd_restore(struct bdev *b)
{
    struct bdev_rbd *r = to_rbd(b);
    rados_ioctx_t io, old_io;
    rbd_image_t img;

    if (!bdev_is_rbd(b))
        return -EINVAL;
    if (!take_for(r, false))
        return 0;
    int rc = handle_open(r, r->cluster, &io, &img);
    if (rc == 0) {
        handle_install(r, io, img, &old_io);
        log_info("rbd: %s serves again", r->name);
        if (r->update_fn)
            r->update_fn(r->update_arg); /* a size changed meanwhile */
    } else {
        log_error("rbd: %s: cannot reopen the withdrawn image: %s", r->name, strerror(-rc));
    }
    release_as(r, rc < 0);
    return rc;
}
