/* The RBD backend against a real throwaway Ceph cluster (run through
 * scripts/with-ceph.sh, which exports CEPH_CONF): open errors, data
 * round trips across object boundaries, flush, discard, zeroing, block
 * status from rbd_diff_iterate2, resize, read-only and snapshot opens;
 * then the asynchronous path through struct volume (both completion
 * modes, with every I/O pool thread blocked, so nothing may wait on one),
 * and last the cluster stopped under I/O: requests end with -ETIMEDOUT in
 * bounded time. Without a cluster the test fails: it never skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <semaphore.h>
#include <stdatomic.h>
#include <time.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "core/util.h"
#include "store/bdev_rbd.h"
#include "store/rbd_image.h"
#include "store/cow.h"
#include "store/volume.h"

#define MiB ((uint64_t)1 << 20)
#define IMG_SIZE (64 * MiB)
#define OBJ (4 * MiB) /* the default RBD object size */

static struct rbd_cluster *cluster;
static rados_ioctx_t ioctx;
static int seq;

static void image_create(char *name, size_t n, uint64_t size)
{
    snprintf(name, n, "t%d-%d", (int)getpid(), seq++);
    int order = 0;
    /* librbd's defaults: layering, exclusive-lock, object-map, fast-diff,
     * deep-flatten (what the RBD pools create). */
    assert_int_equal(rbd_create2(ioctx, name, size, 61, &order), 0);
}

static void fill(char *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (char)(seed + i * 7 + (i >> 12));
}

static void assert_zeros(const char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != 0)
            fail_msg("byte %zu is %d, not 0", i, buf[i]);
}

static struct bdev *open_new(char *name, size_t n)
{
    struct bdev *b;
    image_create(name, n, IMG_SIZE);
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, name, NULL, false, &b), 0);
    return b;
}

static void test_open_errors(void **state)
{
    struct bdev *b = (struct bdev *)1;
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, "no-such-image", NULL, false, &b),
                     -ENOENT);
    assert_null(b);
    assert_int_equal(bdev_rbd_open(cluster, "no-such-pool", NULL, "x", NULL, false, &b), -ENOENT);
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, "", NULL, false, &b), -EINVAL);
    char name[64];
    image_create(name, sizeof(name), IMG_SIZE);
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, name, "no-such-snap", false, &b), -ENOENT);
    assert_false(bdev_is_rbd(NULL));
}

static void test_open_caps(void **state)
{
    char name[64];
    struct bdev *b = open_new(name, sizeof(name));
    assert_true(bdev_is_rbd(b));
    assert_non_null(bdev_rbd_image_get(b));
    bdev_rbd_image_put(b);
    assert_int_equal(b->size, IMG_SIZE);
    assert_false(b->readonly);
    assert_string_equal(b->ops->name, "rbd");
    /* TRIM_ZEROES: our connection turns rbd_skip_partial_discard off. */
    unsigned want = BDEV_CAN_FLUSH | BDEV_CAN_TRIM | BDEV_CAN_ZERO | BDEV_CAN_EXTENTS |
                    BDEV_CAN_MULTI_CONN | BDEV_TRIM_ZEROES | BDEV_SYNC_RETRIABLE |
                    BDEV_WRITES_STABLE;
    assert_int_equal(b->caps & want, want);
    assert_int_equal(b->caps & (BDEV_CAN_FAST_ZERO | BDEV_CAN_CACHE), 0);
    /* A file bdev is not RBD. */
    struct bdev *m;
    assert_int_equal(bdev_memory_open(MiB, 0, &m), 0);
    assert_false(bdev_is_rbd(m));
    assert_null(bdev_rbd_image_get(m));
    bdev_close(m);
    bdev_close(b);
}

static void test_read_write(void **state)
{
    char name[64];
    struct bdev *b = open_new(name, sizeof(name));
    size_t len = 9 * MiB + 4096; /* crosses two object boundaries */
    uint64_t off = OBJ - 8192;
    char *w = malloc(len), *r = malloc(len);
    fill(w, len, 3);
    /* Never written: zeros. */
    assert_int_equal(b->ops->read(b, r, len, off), 0);
    assert_zeros(r, len);
    assert_int_equal(b->ops->write(b, w, len, off), 0);
    assert_int_equal(b->ops->sync(b), 0);
    memset(r, 0x55, len);
    assert_int_equal(b->ops->read(b, r, len, off), 0);
    assert_memory_equal(r, w, len);
    /* The data is in the cluster, not only in this handle: reopen. */
    bdev_close(b);
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, name, NULL, true, &b), 0);
    assert_true(b->readonly);
    memset(r, 0, len);
    assert_int_equal(b->ops->read(b, r, 4096, off + 5 * MiB), 0);
    assert_memory_equal(r, w + 5 * MiB, 4096);
    /* Read-only handle: librbd refuses writes. */
    assert_int_equal(b->ops->write(b, w, 4096, 0), -EROFS);
    /* Zero-length requests never reach librbd (it asserts on them). */
    assert_int_equal(b->ops->read(b, r, 0, 0), 0);
    bdev_close(b);
    free(w);
    free(r);
}

/* Does [off, off+len) lie within extents of type t? */
static bool covered(const struct extent *e, size_t n, uint64_t off, uint64_t len,
                    enum extent_type t)
{
    for (size_t i = 0; i < n && len > 0; i++) {
        if (e[i].offset + e[i].length <= off || e[i].offset > off)
            continue;
        if (e[i].type != t)
            return false;
        uint64_t end = e[i].offset + e[i].length;
        uint64_t take = end - off < len ? end - off : len;
        off += take;
        len -= take;
    }
    return len == 0;
}

static void check_contiguous(const struct extent *e, size_t n, uint64_t off, uint64_t len)
{
    assert_true(n > 0);
    assert_int_equal(e[0].offset, off);
    for (size_t i = 1; i < n; i++) {
        assert_int_equal(e[i].offset, e[i - 1].offset + e[i - 1].length);
        assert_int_not_equal(e[i].type, e[i - 1].type); /* merged */
    }
    assert_int_equal(e[n - 1].offset + e[n - 1].length, off + len);
}

static void test_extents(void **state)
{
    char name[64];
    struct bdev *b = open_new(name, sizeof(name));
    struct extent e[64];
    size_t n;
    char *buf = malloc(MiB);
    fill(buf, MiB, 9);

    /* A fresh image is one hole. */
    assert_int_equal(b->ops->extents(b, 0, IMG_SIZE, e, 64, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    assert_int_equal(e[0].length, IMG_SIZE);

    /* Data in objects 2 and 5; everything else holes. */
    assert_int_equal(b->ops->write(b, buf, 65536, 2 * OBJ + 65536), 0);
    assert_int_equal(b->ops->write(b, buf, MiB, 5 * OBJ + MiB), 0);
    assert_int_equal(b->ops->extents(b, 0, IMG_SIZE, e, 64, &n), 0);
    check_contiguous(e, n, 0, IMG_SIZE);
    assert_true(covered(e, n, 2 * OBJ + 65536, 65536, EXTENT_DATA));
    assert_true(covered(e, n, 5 * OBJ + MiB, MiB, EXTENT_DATA));
    assert_true(covered(e, n, 0, 2 * OBJ, EXTENT_HOLE));
    assert_true(covered(e, n, 3 * OBJ, 2 * OBJ, EXTENT_HOLE));
    assert_true(covered(e, n, 6 * OBJ, IMG_SIZE - 6 * OBJ, EXTENT_HOLE));

    /* A sub-range is clipped to it. */
    assert_int_equal(b->ops->extents(b, 2 * OBJ + 65536 + 4096, 8192, e, 64, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].type, EXTENT_DATA);
    assert_int_equal(e[0].offset, 2 * OBJ + 65536 + 4096);
    assert_int_equal(e[0].length, 8192);

    /* max reached: what fits, in order, ending early. */
    assert_int_equal(b->ops->extents(b, 0, IMG_SIZE, e, 2, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    assert_int_equal(e[1].type, EXTENT_DATA);
    assert_true(e[1].offset + e[1].length < IMG_SIZE);

    /* Discarding whole objects makes them holes again; they read as zeros. */
    assert_int_equal(b->ops->trim(b, 5 * OBJ, OBJ), 0);
    assert_int_equal(b->ops->extents(b, 0, IMG_SIZE, e, 64, &n), 0);
    check_contiguous(e, n, 0, IMG_SIZE);
    assert_true(covered(e, n, 3 * OBJ, IMG_SIZE - 3 * OBJ, EXTENT_HOLE));
    assert_true(covered(e, n, 2 * OBJ + 65536, 65536, EXTENT_DATA));
    assert_int_equal(b->ops->read(b, buf, MiB, 5 * OBJ + MiB), 0);
    assert_zeros(buf, MiB);

    /* A discard of part of an object (512 bytes inside written data) reads
     * back as zeros too (BDEV_TRIM_ZEROES): librbd zeroes what it cannot
     * deallocate. Its neighbours keep their data. */
    char want[8192];
    fill(want, sizeof(want), 7);
    assert_int_equal(b->ops->write(b, want, sizeof(want), 7 * OBJ), 0);
    assert_int_equal(b->ops->trim(b, 7 * OBJ + 4096 + 512, 512), 0);
    memset(want + 4096 + 512, 0, 512);
    assert_int_equal(b->ops->read(b, buf, sizeof(want), 7 * OBJ), 0);
    assert_memory_equal(buf, want, sizeof(want));
    bdev_close(b);
    free(buf);
}

static void test_write_zeroes(void **state)
{
    char name[64];
    struct bdev *b = open_new(name, sizeof(name));
    size_t len = 2 * MiB;
    char *buf = malloc(len);
    fill(buf, len, 1);
    assert_int_equal(b->ops->write(b, buf, len, OBJ - MiB), 0);
    /* Deallocating zeroes of a partial range, then thick ones. */
    assert_int_equal(b->ops->write_zeroes(b, OBJ - 4096, 8192, BDEV_ZERO_MAY_TRIM), 0);
    assert_int_equal(b->ops->write_zeroes(b, OBJ + 65536, 4096, 0), 0);
    char *r = malloc(len);
    assert_int_equal(b->ops->read(b, r, len, OBJ - MiB), 0);
    memset(buf + MiB - 4096, 0, 8192);
    memset(buf + MiB + 65536, 0, 4096);
    assert_memory_equal(r, buf, len);
    /* Fast zeroing is not advertised, and refused. */
    assert_int_equal(b->ops->write_zeroes(b, 0, OBJ, BDEV_ZERO_FAST | BDEV_ZERO_MAY_TRIM),
                     -ENOTSUP);
    /* Zeroing a whole object with MAY_TRIM deallocates it. */
    assert_int_equal(b->ops->write_zeroes(b, 0, 2 * OBJ, BDEV_ZERO_MAY_TRIM), 0);
    struct extent e[8];
    size_t n;
    assert_int_equal(b->ops->extents(b, 0, 2 * OBJ, e, 8, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    bdev_close(b);
    free(buf);
    free(r);
}

static void test_resize(void **state)
{
    char name[64];
    struct bdev *b = open_new(name, sizeof(name));
    char buf[4096];
    fill(buf, sizeof(buf), 5);
    assert_int_equal(b->ops->resize(b, 2 * IMG_SIZE), 0);
    assert_int_equal(b->size, 2 * IMG_SIZE);
    assert_int_equal(b->ops->write(b, buf, sizeof(buf), 2 * IMG_SIZE - 4096), 0);
    assert_int_equal(b->ops->resize(b, IMG_SIZE), 0);
    assert_int_equal(b->size, IMG_SIZE);
    assert_int_equal(b->ops->resize(b, 2 * IMG_SIZE), 0);
    /* Growing again after a shrink reads zeros. */
    assert_int_equal(b->ops->read(b, buf, sizeof(buf), 2 * IMG_SIZE - 4096), 0);
    assert_zeros(buf, sizeof(buf));
    uint64_t size;
    assert_int_equal(rbd_get_size(bdev_rbd_image_get(b), &size), 0);
    bdev_rbd_image_put(b);
    assert_int_equal(size, 2 * IMG_SIZE);
    bdev_close(b);
}

static void test_snapshot_open(void **state)
{
    char name[64];
    struct bdev *b = open_new(name, sizeof(name));
    char a[4096], c[4096], r[4096];
    fill(a, sizeof(a), 11);
    fill(c, sizeof(c), 12);
    assert_int_equal(b->ops->write(b, a, sizeof(a), OBJ), 0);
    /* Management calls go through the handle serving I/O. */
    assert_int_equal(rbd_snap_create(bdev_rbd_image_get(b), "s1"), 0);
    bdev_rbd_image_put(b);
    assert_int_equal(b->ops->write(b, c, sizeof(c), OBJ), 0);
    struct bdev *s;
    assert_int_equal(bdev_rbd_open(cluster, "rbd", "", name, "s1", false, &s), 0);
    assert_true(s->readonly); /* snapshots are always read-only */
    assert_int_equal(s->ops->read(s, r, sizeof(r), OBJ), 0);
    assert_memory_equal(r, a, sizeof(a));
    assert_int_equal(b->ops->read(b, r, sizeof(r), OBJ), 0);
    assert_memory_equal(r, c, sizeof(c));
    assert_int_not_equal(s->ops->write(s, c, sizeof(c), 0), 0);
    bdev_close(s);
    bdev_close(b);
}

/* ---- the asynchronous path, through struct volume ---- */

#define NREQ 64
#define POOL_THREADS 2

/* Jobs that hold every I/O pool thread until released: the data path must
 * complete without any. */
struct pool_block {
    struct io_job job[POOL_THREADS];
    sem_t go, running;
};

static struct pool_block *blocker;

static void blocker_run(struct io_job *j)
{
    sem_post(&blocker->running);
    while (sem_wait(&blocker->go) < 0)
        ;
}

static void pool_hold(void)
{
    blocker = calloc(1, sizeof(*blocker));
    sem_init(&blocker->go, 0, 0);
    sem_init(&blocker->running, 0, 0);
    for (int i = 0; i < POOL_THREADS; i++) {
        blocker->job[i].run = blocker_run;
        iopool_submit(&blocker->job[i]);
    }
    for (int i = 0; i < POOL_THREADS; i++)
        sem_wait(&blocker->running);
}

static void pool_release(void)
{
    for (int i = 0; i < POOL_THREADS; i++)
        sem_post(&blocker->go);
    while (iopool_busy())
        usleep(1000);
    free(blocker);
    blocker = NULL;
}

struct batch {
    struct volume *v;
    struct reactor *owner;
    enum vreq_op op;
    unsigned flags;
    uint64_t len;
    struct vreq req[NREQ];
    char *data[NREQ];
    atomic_int left, wrong_thread, errors;
    int first_error;
    sem_t done;
    struct reactor_msg start;
};

static void batch_done(struct vreq *r)
{
    struct batch *b = r->arg;
    if (reactor_self() != b->owner)
        atomic_fetch_add(&b->wrong_thread, 1);
    if (r->result != 0 && atomic_fetch_add(&b->errors, 1) == 0)
        b->first_error = r->result;
    if (atomic_fetch_sub(&b->left, 1) == 1)
        sem_post(&b->done);
}

static void batch_start(struct reactor_msg *m)
{
    struct batch *b = container_of(m, struct batch, start);
    for (int i = 0; i < NREQ; i++) {
        struct vreq *r = &b->req[i];
        *r = (struct vreq){.op = b->op,
                           .buf = b->data[i],
                           .length = b->op == VREQ_FLUSH ? 0 : b->len,
                           .offset = (uint64_t)i * 2 * b->len,
                           .flags = b->flags,
                           .owner = b->owner,
                           .done = batch_done,
                           .arg = b};
        volume_submit(b->v, r);
    }
}

/* NREQ requests of len bytes at i*2*len, submitted on reactor ridx. */
static void run_batch(struct batch *b, enum vreq_op op, unsigned flags, unsigned ridx)
{
    b->owner = reactor_get(ridx);
    b->op = op;
    b->flags = flags;
    atomic_store(&b->left, NREQ);
    atomic_store(&b->wrong_thread, 0);
    atomic_store(&b->errors, 0);
    b->start.fn = batch_start;
    reactor_post(b->owner, &b->start);
    assert_int_equal(sem_wait(&b->done), 0);
    assert_int_equal(atomic_load(&b->wrong_thread), 0);
    if (atomic_load(&b->errors))
        fail_msg("%d of %d failed, first with %s", atomic_load(&b->errors), NREQ,
                 strerror(-b->first_error));
}

static int vreq_sync(struct volume *v, enum vreq_op op, uint64_t off, uint64_t len, void *buf,
                     unsigned flags)
{
    struct vreq r = {.op = op, .offset = off, .length = len, .buf = buf, .flags = flags};
    return volume_submit_wait(v, &r);
}

/* cached: the image's metadata turns librbd's write cache on, so a
 * completed write is not yet durable and flushes must reach librbd. */
static void async_volume(const char *mode, bool cached)
{
    char name[64];
    struct bdev *bd;
    struct volume *v;
    struct batch *b = calloc(1, sizeof(*b));
    sem_init(&b->done, 0, 0);
    b->len = 4096;
    for (int i = 0; i < NREQ; i++) {
        b->data[i] = malloc(MiB);
        fill(b->data[i], MiB, (unsigned)i);
    }
    setenv("BLOCKD_RBD_COMPLETION", mode, 1);
    image_create(name, sizeof(name), 2 * IMG_SIZE); /* NREQ MiB writes at 2 MiB steps */
    if (cached) {
        rbd_image_t img;
        assert_int_equal(rbd_open(ioctx, name, &img, NULL), 0);
        assert_int_equal(rbd_metadata_set(img, "conf_rbd_cache", "true"), 0);
        rbd_close(img);
    }
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, name, NULL, false, &bd), 0);
    unsetenv("BLOCKD_RBD_COMPLETION");
    /* Without a cache a completed write is on the OSDs: flushes complete
     * at once and never call librbd. */
    assert_int_equal(!(bd->caps & BDEV_WRITES_STABLE), cached);
    assert_int_equal(volume_new("t/rbd", bd, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    b->v = v;

    pool_hold();
    /* 4 KiB writes (half FUA) from one reactor, flushes from another,
     * reads back from a third thread's view: all without a pool thread. */
    run_batch(b, VREQ_WRITE, 0, 0);
    run_batch(b, VREQ_WRITE, VREQ_FUA, 1);
    uint64_t syncs = volume_sync_calls(v);
    if (cached)
        assert_true(syncs >= 1); /* the FUA writes waited for a flush */
    else
        assert_int_equal(syncs, 0);
    run_batch(b, VREQ_FLUSH, 0, 0);
    if (!cached)
        assert_int_equal(volume_sync_calls(v), 0);
    char **expect = malloc(sizeof(char *) * NREQ);
    for (int i = 0; i < NREQ; i++) {
        expect[i] = b->data[i];
        b->data[i] = calloc(1, MiB);
    }
    run_batch(b, VREQ_READ, 0, 1);
    for (int i = 0; i < NREQ; i++)
        assert_memory_equal(b->data[i], expect[i], 4096);
    /* 1 MiB requests, crossing object boundaries (i*2 MiB). */
    b->len = MiB;
    for (int i = 0; i < NREQ; i++)
        memcpy(b->data[i], expect[i], MiB);
    run_batch(b, VREQ_WRITE, 0, 0);
    for (int i = 0; i < NREQ; i++)
        memset(b->data[i], 0, MiB);
    run_batch(b, VREQ_READ, 0, 1);
    for (int i = 0; i < NREQ; i++)
        assert_memory_equal(b->data[i], expect[i], MiB);
    b->len = 4096;

    /* sync=always: every write is followed by a flush before its ack. */
    volume_set_sync(v, VOLUME_SYNC_ALWAYS);
    syncs = volume_sync_calls(v);
    run_batch(b, VREQ_WRITE, 0, 1);
    if (cached)
        assert_true(volume_sync_calls(v) > syncs);
    else
        assert_int_equal(volume_sync_calls(v), syncs);
    volume_set_sync(v, VOLUME_SYNC_STANDARD);
    /* Group commit off: one FLUSH per request, still asynchronous. */
    volume_set_group_commit(v, false);
    syncs = volume_sync_calls(v);
    assert_int_equal(vreq_sync(v, VREQ_FLUSH, 0, 0, NULL, 0), 0);
    volume_set_group_commit(v, true);

    /* Discard, zeroing, and requests of no length (never reach librbd). */
    char *buf = malloc(OBJ);
    assert_int_equal(vreq_sync(v, VREQ_TRIM, 0, OBJ, NULL, 0), 0);
    assert_int_equal(vreq_sync(v, VREQ_READ, 0, OBJ, buf, 0), 0);
    assert_zeros(buf, OBJ);
    assert_int_equal(vreq_sync(v, VREQ_WRITE_ZEROES, 8 * OBJ, 4 * MiB, NULL, VREQ_MAY_TRIM), 0);
    assert_int_equal(vreq_sync(v, VREQ_WRITE_ZEROES, 9 * OBJ, 8192, NULL, VREQ_FUA), 0);
    assert_int_equal(vreq_sync(v, VREQ_READ, 8 * OBJ, OBJ, buf, 0), 0);
    assert_zeros(buf, OBJ);
    assert_int_equal(vreq_sync(v, VREQ_WRITE_ZEROES, 0, 4096, NULL, VREQ_FAST_ZERO), -ENOTSUP);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, 4096, 0, buf, 0), 0);
    assert_int_equal(vreq_sync(v, VREQ_READ, 4096, 0, buf, 0), 0);
    assert_int_equal(vreq_sync(v, VREQ_TRIM, 4096, 0, NULL, 0), 0);
    assert_int_equal(vreq_sync(v, VREQ_WRITE_ZEROES, 4096, 0, NULL, 0), 0);
    assert_int_equal(vreq_sync(v, VREQ_CACHE, 0, 4096, NULL, 0), 0);
    assert_int_equal(vreq_sync(v, VREQ_READ, 2 * IMG_SIZE, 4096, buf, 0), -EINVAL);
    pool_release();

    /* Block status goes through the pool (rbd_diff_iterate2 is blocking). */
    struct extent e[16];
    struct vreq x = {
        .op = VREQ_EXTENTS, .offset = 0, .length = OBJ, .extents = e, .extents_max = 16};
    assert_int_equal(volume_submit_wait(v, &x), 0);
    assert_true(x.extents_count == 1 && e[0].type == EXTENT_HOLE);
    volume_unref(v);
    for (int i = 0; i < NREQ; i++) {
        free(b->data[i]);
        free(expect[i]);
    }
    free(expect);
    free(buf);
    free(b);
}

/* The volume's own group-commit flush may hold the last reference when
 * the owner drops its own right after the flush completed: the close must
 * not then run on librbd's completion thread (rbd_close deadlocks there),
 * nor on a reactor. */
static void close_after_flush(const char *mode)
{
    char name[64];
    char buf[4096] = {1};
    image_create(name, sizeof(name), IMG_SIZE);
    setenv("BLOCKD_RBD_COMPLETION", mode, 1);
    for (int i = 0; i < 20; i++) {
        struct bdev *bd;
        struct volume *v;
        assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, name, NULL, false, &bd), 0);
        assert_int_equal(volume_new("t/close", bd, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
        assert_int_equal(vreq_sync(v, VREQ_WRITE, 0, 4096, buf, 0), 0);
        assert_int_equal(volume_flush_wait(v), 0);
        volume_unref(v);
    }
    unsetenv("BLOCKD_RBD_COMPLETION");
    while (iopool_busy()) /* a close handed to the pool */
        usleep(1000);
}

static void test_async_callback(void **state)
{
    async_volume("callback", false);
    close_after_flush("callback");
}

static void test_async_eventfd(void **state)
{
    async_volume("eventfd", false);
    async_volume("eventfd", true);
    close_after_flush("eventfd");
}

/* A snapshot copied out of an RBD volume by copy-before-write
 * (volume_cow_attach): a write after the instant takes the pool path,
 * which copies the old data first; the copy holds the volume as it was. */
static void test_cow_on_rbd(void **state)
{
    char name[64], path[] = "/tmp/blockd-rbd-cow.XXXXXX";
    struct bdev *bd;
    struct volume *v;
    struct store_cow *c;
    char old[4096], new[4096], got[4096];
    image_create(name, sizeof(name), 8 * MiB);
    assert_int_equal(bdev_rbd_open(cluster, "rbd", NULL, name, NULL, false, &bd), 0);
    assert_int_equal(volume_new("t/cow", bd, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    fill(old, sizeof(old), 21);
    fill(new, sizeof(new), 22);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, MiB, 4096, old, 0), 0);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(volume_cow_attach(v, fd, 0, &c, NULL), 0);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, MiB, 4096, new, 0), 0);
    assert_int_equal(store_cow_copy_rest(c), 0);
    assert_int_equal(volume_cow_detach(v, c), 0);
    assert_int_equal(pread(fd, got, sizeof(got), MiB), (ssize_t)sizeof(got));
    assert_memory_equal(got, old, sizeof(old));
    assert_int_equal(vreq_sync(v, VREQ_READ, MiB, 4096, got, 0), 0);
    assert_memory_equal(got, new, sizeof(new));
    close(fd);
    volume_unref(v);
}

/* ---- the cluster lost under I/O (the last test: it stops the cluster) ---- */

/* A fenced client (docs/ha.md "Rejoining after fencing"): the cluster
 * blocklists the connection an open image uses; its requests end with
 * -ESHUTDOWN (never acknowledged), bdev_rbd_fence makes the next ones fail
 * without reaching librbd, another client writes meanwhile, and after
 * rbd_cluster_retire + bdev_rbd_reopen_retired the same bdev and volume
 * serve again on a new client: they read the other client's data and
 * write. */
#define FENCE_TIMEOUT 13 /* seconds: an op timeout no other test uses (own connection) */

static void test_fenced_reopen(void **state)
{
    struct rbd_cluster_spec spec = {.conf = getenv("CEPH_CONF"), .op_timeout_s = FENCE_TIMEOUT};
    struct rbd_cluster *c;
    assert_int_equal(rbd_cluster_get(&spec, 10, &c), 0);
    assert_ptr_not_equal(c, cluster);
    char name[64], addr[128], buf[4096], want[4096];
    snprintf(addr, sizeof(addr), "%s", rbd_cluster_addr(c));
    assert_true(addr[0] != 0);
    struct bdev *bd;
    struct volume *v;
    image_create(name, sizeof(name), IMG_SIZE);
    assert_int_equal(bdev_rbd_open(c, "rbd", NULL, name, NULL, false, &bd), 0);
    assert_int_equal(volume_new("t/fenced", bd, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    fill(want, sizeof(want), 1);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, 0, 4096, want, VREQ_FUA), 0); /* takes the lock */

    assert_int_equal(rados_blocklist_add(rbd_cluster_rados(cluster), addr, 600), 0);
    /* The OSDs refuse it once they have the new map: within seconds. */
    int rc = 0;
    for (int i = 0; i < 100 && rc != -ESHUTDOWN; i++) {
        rc = vreq_sync(v, VREQ_WRITE, 4096, 4096, want, VREQ_FUA);
        assert_true(rc == 0 || rc == -ESHUTDOWN || rc == -ETIMEDOUT);
        if (rc != -ESHUTDOWN)
            usleep(100000);
    }
    assert_int_equal(rc, -ESHUTDOWN);
    assert_true(rbd_cluster_blocklisted(c));
    assert_int_equal(bdev_rbd_fence(c), 1);
    /* Answered from the fenced state (no cluster round trip; not timed:
     * a loaded machine makes any bound a coin toss). */
    assert_int_equal(vreq_sync(v, VREQ_READ, 0, 4096, buf, 0), -ESHUTDOWN);
    assert_int_equal(bd->ops->read(bd, buf, 4096, 0), -ESHUTDOWN);
    assert_null(bdev_rbd_image_get(bd));

    /* Another client takes over the image (breaking the fenced client's
     * lock, as a gateway survivor does) and writes. */
    rbd_image_t other;
    assert_int_equal(rbd_open(ioctx, name, &other, NULL), 0);
    rbd_lock_mode_t mode;
    char *owners[4];
    size_t n = 4;
    if (rbd_lock_get_owners(other, &mode, owners, &n) == 0) {
        for (size_t i = 0; i < n; i++)
            rbd_lock_break(other, RBD_LOCK_MODE_EXCLUSIVE, owners[i]);
        rbd_lock_get_owners_cleanup(owners, n);
    }
    fill(want, sizeof(want), 2);
    assert_int_equal(rbd_write(other, 0, 4096, want), 4096);
    assert_int_equal(rbd_flush(other), 0);

    rbd_cluster_retire(c);
    assert_true(rbd_cluster_retired(c));
    unsigned failed = 9;
    assert_int_equal(bdev_rbd_reopen_retired(&failed), 1);
    assert_int_equal(failed, 0);
    struct bdev *same = volume_bdev(v);
    assert_ptr_equal(same, bd); /* the volume keeps its bdev */
    memset(buf, 0, sizeof(buf));
    assert_int_equal(vreq_sync(v, VREQ_READ, 0, 4096, buf, 0), 0);
    assert_memory_equal(buf, want, 4096);
    fill(want, sizeof(want), 3);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, 8192, 4096, want, VREQ_FUA), 0);
    memset(buf, 0, sizeof(buf));
    assert_int_equal(rbd_read(other, 8192, 4096, buf), 4096);
    assert_memory_equal(buf, want, 4096);
    rbd_close(other);
    /* A new connection for the same settings: the retired one is not
     * handed out again. */
    struct rbd_cluster *now;
    assert_int_equal(rbd_cluster_get_like(c, 10, &now), 0);
    assert_ptr_not_equal(now, c);
    assert_string_not_equal(rbd_cluster_addr(now), addr);
    rbd_cluster_put(now);
    volume_unref(v);
    rbd_cluster_put(c);
}

/* A volume deleted with force (docs/api-datasets.md "Deleting a shared
 * volume with force"): its own watch is told from another client's
 * (bdev_rbd_client_id); withdrawn, the image has no watcher left (it can
 * be removed), requests fail with -ENODEV without reaching librbd and a
 * fencing leaves it alone; restored, the same volume reads what it wrote
 * and writes; withdrawn again, the image removed, a restore fails and the
 * last unref closes nothing twice. */
#define WITHDRAW_TIMEOUT 17 /* seconds: an op timeout no other test uses (own connection) */

static void test_withdraw(void **state)
{
    struct rbd_cluster_spec spec = {.conf = getenv("CEPH_CONF"), .op_timeout_s = WITHDRAW_TIMEOUT};
    struct rbd_cluster *c;
    char name[64], who[256] = "", buf[4096], want[4096];
    struct bdev *bd;
    struct volume *v;

    assert_int_equal(rbd_cluster_get(&spec, 10, &c), 0);
    image_create(name, sizeof(name), IMG_SIZE);
    assert_int_equal(bdev_rbd_open(c, "rbd", NULL, name, NULL, false, &bd), 0);
    assert_int_equal(volume_new("t/withdrawn", bd, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    fill(want, sizeof(want), 4);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, 0, 4096, want, VREQ_FUA), 0);
    assert_int_equal(rbd_image_wait_unwatched(ioctx, name, 0, 0, who, sizeof(who)), -EBUSY);
    uint64_t mine = bdev_rbd_client_id(bd);
    assert_true(mine != 0);
    assert_int_equal(rbd_image_wait_unwatched(ioctx, name, mine, 0, who, sizeof(who)), 0);

    assert_int_equal(bdev_rbd_withdraw(bd), 0);
    assert_int_equal(bdev_rbd_withdraw(bd), 0); /* a no-op */
    assert_int_equal(rbd_image_wait_unwatched(ioctx, name, 0, 0, who, sizeof(who)), 0);
    assert_int_equal(vreq_sync(v, VREQ_READ, 0, 4096, buf, 0), -ENODEV);
    assert_int_equal(bd->ops->read(bd, buf, 4096, 0), -ENODEV);
    assert_null(bdev_rbd_image_get(bd));
    assert_int_equal(bdev_rbd_fence(c), 0);

    assert_int_equal(bdev_rbd_restore(bd), 0);
    memset(buf, 0, sizeof(buf));
    assert_int_equal(vreq_sync(v, VREQ_READ, 0, 4096, buf, 0), 0);
    assert_memory_equal(buf, want, 4096);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, 4096, 4096, want, VREQ_FUA), 0);

    assert_int_equal(bdev_rbd_withdraw(bd), 0);
    assert_int_equal(rbd_remove(ioctx, name), 0); /* nothing of ours holds it */
    assert_int_equal(bdev_rbd_restore(bd), -ENOENT);
    assert_int_equal(vreq_sync(v, VREQ_READ, 0, 4096, buf, 0), -ENODEV);
    volume_unref(v);
    rbd_cluster_put(c);
}

#define LOST_TIMEOUT 3 /* seconds: the connection's op timeout */
#define LOST_QD 8

struct stream {
    struct volume *v;
    struct reactor *owner;
    struct vreq req[LOST_QD];
    char buf[LOST_QD][4096];
    atomic_bool stop;
    atomic_int running, ok, timedout, other;
    int other_rc;
    uint64_t next;
    sem_t done;
    struct reactor_msg start;
};

static void stream_submit(struct stream *s, struct vreq *r)
{
    r->op = (s->next & 1) ? VREQ_READ : VREQ_WRITE;
    r->offset = (s->next * 4096) % (IMG_SIZE / 2);
    s->next++;
    volume_submit(s->v, r);
}

static void stream_done(struct vreq *r)
{
    struct stream *s = r->arg;
    if (r->result == 0)
        atomic_fetch_add(&s->ok, 1);
    else if (r->result == -ETIMEDOUT)
        atomic_fetch_add(&s->timedout, 1);
    else {
        s->other_rc = r->result;
        atomic_fetch_add(&s->other, 1);
    }
    if (r->result == 0 && !atomic_load(&s->stop)) {
        stream_submit(s, r);
        return;
    }
    if (atomic_fetch_sub(&s->running, 1) == 1)
        sem_post(&s->done);
}

static void stream_start(struct reactor_msg *m)
{
    struct stream *s = container_of(m, struct stream, start);
    for (int i = 0; i < LOST_QD; i++) {
        s->req[i] = (struct vreq){
            .buf = s->buf[i], .length = 4096, .owner = s->owner, .done = stream_done, .arg = s};
        stream_submit(s, &s->req[i]);
    }
}

static void test_cluster_lost(void **state)
{
    const char *script = getenv("BLOCKD_CEPH_CLUSTER"), *dir = getenv("BLOCKD_CEPH_DIR");
    if (!script || !dir)
        fail_msg("BLOCKD_CEPH_CLUSTER/BLOCKD_CEPH_DIR unset: run through scripts/with-ceph.sh");
    struct rbd_cluster_spec spec = {.conf = getenv("CEPH_CONF"), .op_timeout_s = LOST_TIMEOUT};
    struct rbd_cluster *c;
    assert_int_equal(rbd_cluster_get(&spec, 10, &c), 0);
    assert_ptr_not_equal(c, cluster); /* its own connection, short timeouts */
    char name[64];
    struct bdev *bd;
    struct volume *v;
    image_create(name, sizeof(name), IMG_SIZE);
    assert_int_equal(bdev_rbd_open(c, "rbd", NULL, name, NULL, false, &bd), 0);
    assert_int_equal(volume_new("t/lost", bd, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);

    struct stream *s = calloc(1, sizeof(*s));
    s->v = v;
    s->owner = reactor_get(0);
    sem_init(&s->done, 0, 0);
    atomic_store(&s->running, LOST_QD);
    s->start.fn = stream_start;
    reactor_post(s->owner, &s->start);
    usleep(500000);
    assert_true(atomic_load(&s->ok) > 0);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "'%s' stop '%s' >/dev/null 2>&1", script, dir);
    uint64_t t0 = time_now_ns();
    assert_int_equal(system(cmd), 0);
    /* Every request in flight ends, with -ETIMEDOUT, in bounded time: the
     * op timeout after the stop, plus librbd's own retries. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    int rc;
    while ((rc = sem_timedwait(&s->done, &until)) < 0 && errno == EINTR)
        ;
    double secs = (double)(time_now_ns() - t0) / 1e9;
    fprintf(stderr,
            "cluster stopped: in-flight requests ended after %.1f s (ok %d, timed out %d, "
            "other %d: %s)\n",
            secs, atomic_load(&s->ok), atomic_load(&s->timedout), atomic_load(&s->other),
            atomic_load(&s->other) ? strerror(-s->other_rc) : "-");
    if (rc < 0)
        fail_msg("requests still in flight 60 s after the cluster stopped");
    assert_true(atomic_load(&s->timedout) > 0);
    assert_int_equal(atomic_load(&s->other), 0);
    atomic_store(&s->stop, true);

    /* New requests too, each within the bound. Reads may still succeed:
     * from librbd's cache, or as zeros where the object map says no
     * object exists; writes cannot. */
    char buf[4096] = {0};
    t0 = time_now_ns();
    int rrc = vreq_sync(v, VREQ_READ, 8192, 4096, buf, 0);
    assert_true(rrc == 0 || rrc == -ETIMEDOUT);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, IMG_SIZE - 8192, 4096, buf, 0), -ETIMEDOUT);
    assert_int_equal(vreq_sync(v, VREQ_WRITE, 4096, 4096, buf, VREQ_FUA), -ETIMEDOUT);
    int frc = vreq_sync(v, VREQ_FLUSH, 0, 0, NULL, 0);
    assert_true(frc == -ETIMEDOUT || frc == 0); /* nothing new to flush: may succeed */
    /* rbd_cache is off (rbd_cluster.c): no write is taken into a client
     * cache, so none completes against a lost cluster, and a failed sync
     * loses nothing acknowledged (BDEV_SYNC_RETRIABLE). */
    assert_true(bd->caps & BDEV_SYNC_RETRIABLE);
    int wrc = bd->ops->write(bd, buf, 4096, 0);
    assert_int_equal(wrc, -ETIMEDOUT);
    secs = (double)(time_now_ns() - t0) / 1e9;
    fprintf(stderr,
            "requests to the lost cluster: %.1f s for 5 (read %d, flush %d, sync write %d)\n", secs,
            rrc, frc, wrc);
    assert_true(secs < 4 * 4 * LOST_TIMEOUT + 10);
    volume_unref(v);
    rbd_cluster_put(c);
    free(s);
}

static int setup(void **state)
{
    if (reactors_start(3) || iopool_start(POOL_THREADS))
        return -1;
    const char *conf = getenv("CEPH_CONF");
    if (!conf || !conf[0]) {
        fprintf(stderr, "CEPH_CONF is not set: run this test through scripts/with-ceph.sh\n");
        return -1;
    }
    struct rbd_cluster_spec spec = {.conf = conf};
    int rc = rbd_cluster_get(&spec, 20, &cluster);
    if (rc < 0) {
        fprintf(stderr, "cannot connect to the cluster of %s: %s\n", conf, strerror(-rc));
        return -1;
    }
    rc = rbd_cluster_ioctx(cluster, "rbd", NULL, &ioctx);
    if (rc < 0) {
        fprintf(stderr, "no pool rbd: %s\n", strerror(-rc));
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    if (ioctx)
        rados_ioctx_destroy(ioctx);
    rbd_cluster_put(cluster);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_open_caps),
        cmocka_unit_test(test_read_write),
        cmocka_unit_test(test_extents),
        cmocka_unit_test(test_write_zeroes),
        cmocka_unit_test(test_resize),
        cmocka_unit_test(test_snapshot_open),
        cmocka_unit_test(test_async_callback),
        cmocka_unit_test(test_async_eventfd),
        cmocka_unit_test(test_cow_on_rbd),
        cmocka_unit_test(test_fenced_reopen),
        cmocka_unit_test(test_withdraw),     /* a forced delete (datasets.c) */
        cmocka_unit_test(test_cluster_lost), /* last: it stops the cluster */
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
