/* The RBD backend against a real throwaway Ceph cluster (run through
 * scripts/with-ceph.sh, which exports CEPH_CONF): open errors, data
 * round trips across object boundaries, flush, discard, zeroing, block
 * status from rbd_diff_iterate2, resize, read-only and snapshot opens.
 * Without a cluster the test fails: it never skips. */
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

#include "core/util.h"
#include "store/bdev_rbd.h"

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
    assert_non_null(bdev_rbd_image(b));
    assert_int_equal(b->size, IMG_SIZE);
    assert_false(b->readonly);
    assert_string_equal(b->ops->name, "rbd");
    unsigned want =
        BDEV_CAN_FLUSH | BDEV_CAN_TRIM | BDEV_CAN_ZERO | BDEV_CAN_EXTENTS | BDEV_CAN_MULTI_CONN;
    assert_int_equal(b->caps & want, want);
    assert_int_equal(b->caps & (BDEV_TRIM_ZEROES | BDEV_CAN_FAST_ZERO | BDEV_CAN_CACHE), 0);
    /* A file bdev is not RBD. */
    struct bdev *m;
    assert_int_equal(bdev_memory_open(MiB, 0, &m), 0);
    assert_false(bdev_is_rbd(m));
    assert_null(bdev_rbd_image(m));
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
    assert_int_equal(rbd_get_size(bdev_rbd_image(b), &size), 0);
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
    assert_int_equal(rbd_snap_create(bdev_rbd_image(b), "s1"), 0);
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

static int setup(void **state)
{
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
        cmocka_unit_test(test_open_errors),   cmocka_unit_test(test_open_caps),
        cmocka_unit_test(test_read_write),    cmocka_unit_test(test_extents),
        cmocka_unit_test(test_write_zeroes),  cmocka_unit_test(test_resize),
        cmocka_unit_test(test_snapshot_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
