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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <rbd/features.h>

#include "core/log.h"
#include "core/util.h"
#include "store/bdev_rbd_priv.h"

static const struct bdev_ops rbd_ops;

static struct bdev_rbd *to_rbd(struct bdev *b)
{
    return (struct bdev_rbd *)b;
}

bool bdev_is_rbd(const struct bdev *b)
{
    return b && b->ops == &rbd_ops;
}

rbd_image_t bdev_rbd_image(struct bdev *b)
{
    return bdev_is_rbd(b) ? to_rbd(b)->image : NULL;
}

rados_ioctx_t bdev_rbd_ioctx(struct bdev *b)
{
    return bdev_is_rbd(b) ? to_rbd(b)->ioctx : NULL;
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

static int rbd_read_sync(struct bdev *b, void *buf, size_t len, uint64_t off)
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

static int rbd_write_sync(struct bdev *b, const void *buf, size_t len, uint64_t off)
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

static int rbd_sync_sync(struct bdev *b)
{
    return bdev_rbd_errno(rbd_flush(to_rbd(b)->image));
}

static int rbd_trim_sync(struct bdev *b, uint64_t off, uint64_t len)
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

/* rbd_write_zeroes without flags may deallocate whole objects (reads as
 * zeros either way); THICK_PROVISION writes real zeros, for callers that
 * asked for an allocated range. */
int bdev_rbd_zero_flags(unsigned flags)
{
    return (flags & BDEV_ZERO_MAY_TRIM) ? 0 : RBD_WRITE_ZEROES_FLAG_THICK_PROVISION;
}

static int rbd_write_zeroes_sync(struct bdev *b, uint64_t off, uint64_t len, unsigned flags)
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

static int rbd_extents_sync(struct bdev *b, uint64_t off, uint64_t len, struct extent *out,
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

static int rbd_resize_sync(struct bdev *b, uint64_t new_size)
{
    int rc = rbd_resize(to_rbd(b)->image, new_size);
    if (rc == 0)
        b->size = new_size;
    return rc;
}

static void rbd_close_bdev(struct bdev *b)
{
    struct bdev_rbd *r = to_rbd(b);
    bdev_rbd_aio_fini(r);
    rbd_close(r->image);
    rados_ioctx_destroy(r->ioctx);
    rbd_cluster_put(r->cluster);
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
    rc = rbd_cluster_ioctx(c, pool, ns, &r->ioctx);
    if (rc < 0) {
        free(r);
        return rc;
    }
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
    /* BDEV_TRIM_ZEROES: the cluster connection turns rbd_skip_partial_discard
     * off (rbd_cluster.c), so a discard zeroes the parts of its range that
     * it cannot deallocate, unless the image's own metadata turns skipping
     * back on. Not FAST_ZERO: zeroing a clone's range may copy the parent's
     * object up. */
    r->base.caps =
        BDEV_CAN_FLUSH | BDEV_CAN_TRIM | BDEV_CAN_ZERO | BDEV_CAN_EXTENTS | BDEV_CAN_MULTI_CONN;
    if (!image_sets(r->image, "conf_rbd_skip_partial_discard"))
        r->base.caps |= BDEV_TRIM_ZEROES;
    if (!readonly && rbd_get_stripe_unit(r->image, &r->caw_unit) == 0 && r->caw_unit)
        r->base.caps |= BDEV_CAN_COMPARE_WRITE;
    /* A completed write is on the OSDs: a failed flush loses none. */
    if (!image_caches_writes(c, r->image))
        r->base.caps |= BDEV_SYNC_RETRIABLE;
    if (!image_buffers_writes(c, r->image))
        r->base.caps |= BDEV_WRITES_STABLE;
    if (image_caches_writes(c, r->image))
        log_warn("rbd: %s: rbd_cache is on for this image: a failed flush fails every later "
                 "one until it is reopened",
                 r->name);
    *out = &r->base;
    return 0;
fail_image:
    rbd_close(r->image);
fail_ioctx:
    rados_ioctx_destroy(r->ioctx);
    free(r);
    return rc;
}
