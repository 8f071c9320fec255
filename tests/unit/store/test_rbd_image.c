/* store/rbd_image (librbd management wrappers) against a real throwaway
 * Ceph cluster (run through scripts/with-ceph.sh, which exports
 * CEPH_CONF): create with blockd's features, exists/list, resize,
 * rename, snapshots (create/rename/rollback with progress/remove), clone
 * v2 without protection, flatten with progress, usage from the object map,
 * remove refused while snapshots exist. Without a cluster the test fails:
 * it never skips. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <rbd/features.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/rbd_cluster.h"
#include "store/rbd_image.h"

#define MiB ((uint64_t)1 << 20)

static struct rbd_cluster *cluster;
static rados_ioctx_t ioctx;
static int seq;

static void name_new(char *name, size_t n)
{
    snprintf(name, n, "ri%d-%d", (int)getpid(), seq++);
}

static void write_byte(rbd_image_t img, uint64_t off, size_t len, char c)
{
    char *buf = malloc(len);
    assert_non_null(buf);
    memset(buf, c, len);
    assert_int_equal(rbd_write(img, off, len, buf), (ssize_t)len);
    assert_int_equal(rbd_flush(img), 0);
    free(buf);
}

static char read_byte(rbd_image_t img, uint64_t off)
{
    char c = 0;
    assert_int_equal(rbd_read(img, off, 1, &c), 1);
    return c;
}

struct progress {
    unsigned calls;
    uint64_t last_done, last_total;
};

static void on_progress(uint64_t done, uint64_t total, void *arg)
{
    struct progress *p = arg;
    p->calls++;
    p->last_done = done;
    p->last_total = total;
}

/* The parent of img into pname/psnap; 0 or -ENOENT (none). */
static int parent_of(rbd_image_t img, char *pname, size_t plen, char *psnap, size_t slen)
{
    rbd_linked_image_spec_t image;
    rbd_snap_spec_t snap;
    int rc = rbd_get_parent(img, &image, &snap);

    if (rc < 0)
        return rc;
    snprintf(pname, plen, "%s", image.image_name);
    snprintf(psnap, slen, "%s", snap.name);
    rbd_linked_image_spec_cleanup(&image);
    rbd_snap_spec_cleanup(&snap);
    return 0;
}

static void test_create_list_remove(void **state)
{
    char name[64], other[64];
    rbd_image_t img;
    uint64_t features = 0, size = 0;
    char **names;
    size_t n;
    bool found = false;

    (void)state;
    name_new(name, sizeof(name));
    assert_int_equal(rbd_image_exists(ioctx, name), 0);
    assert_int_equal(rbd_image_create(ioctx, name, 32 * MiB), 0);
    assert_int_equal(rbd_image_create(ioctx, name, 32 * MiB), -EEXIST);
    assert_int_equal(rbd_image_exists(ioctx, name), 1);
    assert_int_equal(rbd_image_open_mgmt(ioctx, name, NULL, false, &img), 0);
    assert_int_equal(rbd_get_features(img, &features), 0);
    assert_int_equal(features & (RBD_FEATURE_LAYERING | RBD_FEATURE_EXCLUSIVE_LOCK |
                                 RBD_FEATURE_OBJECT_MAP | RBD_FEATURE_FAST_DIFF |
                                 RBD_FEATURE_DEEP_FLATTEN),
                     RBD_FEATURE_LAYERING | RBD_FEATURE_EXCLUSIVE_LOCK | RBD_FEATURE_OBJECT_MAP |
                         RBD_FEATURE_FAST_DIFF | RBD_FEATURE_DEEP_FLATTEN);
    assert_int_equal(rbd_image_resize(img, 48 * MiB), 0);
    assert_int_equal(rbd_get_size(img, &size), 0);
    assert_int_equal(size, 48 * MiB);
    assert_int_equal(rbd_image_resize(img, 16 * MiB), 0); /* shrinking is allowed */
    assert_int_equal(rbd_get_size(img, &size), 0);
    assert_int_equal(size, 16 * MiB);
    rbd_close(img);

    assert_int_equal(rbd_image_list(ioctx, &names, &n), 0);
    for (size_t i = 0; i < n; i++)
        found |= strcmp(names[i], name) == 0;
    rbd_image_list_free(names, n);
    assert_true(found);

    name_new(other, sizeof(other));
    assert_int_equal(rbd_image_rename(ioctx, name, other), 0);
    assert_int_equal(rbd_image_exists(ioctx, name), 0);
    assert_int_equal(rbd_image_exists(ioctx, other), 1);
    assert_int_equal(rbd_image_remove(ioctx, other), 0);
    assert_int_equal(rbd_image_exists(ioctx, other), 0);
    assert_int_equal(rbd_image_remove(ioctx, other), -ENOENT);
}

static void test_snapshots(void **state)
{
    char name[64];
    rbd_image_t img;
    struct progress pr = {0};
    uint64_t size = 0;

    (void)state;
    name_new(name, sizeof(name));
    assert_int_equal(rbd_image_create(ioctx, name, 16 * MiB), 0);
    assert_int_equal(rbd_image_open_mgmt(ioctx, name, NULL, false, &img), 0);
    write_byte(img, 0, 4096, 'a');
    assert_int_equal(rbd_image_snap_create(img, "s1"), 0);
    assert_int_equal(rbd_image_snap_create(img, "s1"), -EEXIST);
    write_byte(img, 0, 4096, 'b');
    assert_int_equal(rbd_image_resize(img, 32 * MiB), 0);
    assert_int_equal(rbd_image_snap_rename(img, "s1", "s2"), 0);
    assert_int_equal(rbd_image_snap_rollback(img, "s1", on_progress, &pr), -ENOENT);
    assert_int_equal(rbd_image_snap_rollback(img, "s2", on_progress, &pr), 0);
    assert_true(pr.calls > 0);
    assert_int_equal(pr.last_done, pr.last_total);
    assert_int_equal(read_byte(img, 0), 'a');
    assert_int_equal(rbd_get_size(img, &size), 0);
    assert_int_equal(size, 16 * MiB); /* the snapshot's size came back */
    rbd_close(img);
    /* an image with snapshots cannot be removed */
    assert_int_not_equal(rbd_image_remove(ioctx, name), 0);
    assert_int_equal(rbd_image_open_mgmt(ioctx, name, NULL, false, &img), 0);
    assert_int_equal(rbd_image_snap_remove(img, "s2"), 0);
    assert_int_equal(rbd_image_snap_remove(img, "s2"), -ENOENT);
    rbd_close(img);
    assert_int_equal(rbd_image_remove(ioctx, name), 0);
}

static void test_clone_flatten_usage(void **state)
{
    char parent[64], child[64], pname[64] = "", psnap[64] = "";
    rbd_image_t img, cimg;
    struct progress pr = {0};
    uint64_t used = 0, ref = 0;

    (void)state;
    name_new(parent, sizeof(parent));
    name_new(child, sizeof(child));
    assert_int_equal(rbd_image_create(ioctx, parent, 16 * MiB), 0);
    assert_int_equal(rbd_image_open_mgmt(ioctx, parent, NULL, false, &img), 0);
    write_byte(img, 0, 4 * MiB, 'p');
    write_byte(img, 8 * MiB, 4096, 'q');
    assert_int_equal(rbd_image_usage(img, &used, &ref), 0);
    assert_int_equal(used, 8 * MiB); /* two whole objects */
    assert_int_equal(ref, 8 * MiB);
    assert_int_equal(rbd_image_snap_create(img, "base"), 0);
    /* clone v2: no protection needed */
    assert_int_equal(rbd_image_clone(ioctx, parent, "base", ioctx, child), 0);
    assert_int_equal(rbd_image_open_mgmt(ioctx, child, NULL, false, &cimg), 0);
    assert_int_equal(parent_of(cimg, pname, sizeof(pname), psnap, sizeof(psnap)), 0);
    assert_string_equal(pname, parent);
    assert_string_equal(psnap, "base");
    assert_int_equal(read_byte(cimg, 0), 'p');
    assert_int_equal(rbd_image_usage(cimg, &used, &ref), 0);
    assert_int_equal(used, 0); /* nothing of its own yet */
    assert_int_equal(ref, 8 * MiB);
    write_byte(cimg, 12 * MiB, 4096, 'c');
    assert_int_equal(rbd_image_usage(cimg, &used, &ref), 0);
    assert_int_equal(used, 4 * MiB);
    assert_int_equal(ref, 12 * MiB);
    /* the parent's snapshot has a child: removing the parent fails */
    assert_int_not_equal(rbd_image_remove(ioctx, parent), 0);
    assert_int_equal(rbd_image_flatten(cimg, on_progress, &pr), 0);
    assert_true(pr.calls > 0);
    assert_int_equal(parent_of(cimg, pname, sizeof(pname), psnap, sizeof(psnap)), -ENOENT);
    assert_int_equal(rbd_image_usage(cimg, &used, &ref), 0);
    assert_int_equal(used, 12 * MiB); /* the parent's data is its own now */
    assert_int_equal(read_byte(cimg, 8 * MiB), 'q');
    rbd_close(cimg);
    /* flattened: the parent and its snapshot can go */
    assert_int_equal(rbd_image_snap_remove(img, "base"), 0);
    rbd_close(img);
    assert_int_equal(rbd_image_remove(ioctx, parent), 0);
    assert_int_equal(rbd_image_remove(ioctx, child), 0);
}

static int setup(void **state)
{
    const char *conf = getenv("CEPH_CONF");
    (void)state;
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
    (void)state;
    if (ioctx)
        rados_ioctx_destroy(ioctx);
    rbd_cluster_put(cluster);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_list_remove),
        cmocka_unit_test(test_snapshots),
        cmocka_unit_test(test_clone_flatten_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
