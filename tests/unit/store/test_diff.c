/* store_diff and store_allocated on files: every changed byte is in a
 * reported range, ranges come merged and in order, a hole equals zeros
 * where contents are compared, the tail past the base's end is reported,
 * the window is honoured and fn's stop value comes back; the allocated
 * ranges of a sparse file. (On a reflink filesystem the copies below share
 * nothing, so only the covering promise is checked there.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "store/bdev.h"
#include "store/diff.h"

#define SIZE ((uint64_t)4 << 20)
#define G STORE_DIFF_GRANULE

static char dir[256], base_path[300], target_path[300];

struct got {
    uint64_t off[64], len[64];
    size_t n;
    int stop_after; /* return 7 once this many were taken (0: never) */
};

static int take(uint64_t off, uint64_t len, void *arg)
{
    struct got *g = arg;
    assert_true(g->n < 64);
    if (g->n) /* ascending, never touching */
        assert_true(g->off[g->n - 1] + g->len[g->n - 1] < off);
    g->off[g->n] = off;
    g->len[g->n++] = len;
    return g->stop_after && (int)g->n == g->stop_after ? 7 : 0;
}

static bool reported(const struct got *g, uint64_t off)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->off[i] <= off && off < g->off[i] + g->len[i])
            return true;
    return false;
}

static void write_at(const char *path, uint64_t off, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, n, (off_t)off), (ssize_t)n);
    close(fd);
}

/* Change the byte at off (whatever it held). */
static void flip(const char *path, uint64_t off)
{
    uint8_t x;
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, &x, 1, (off_t)off), 1);
    x ^= 0x80;
    assert_int_equal(pwrite(fd, &x, 1, (off_t)off), 1);
    close(fd);
}

static void make(const char *path, uint64_t size)
{
    static uint8_t buf[1 << 20];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 31 + 7);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    assert_int_equal(pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
    assert_int_equal(pwrite(fd, buf, 4096, 2 << 20), 4096);
    close(fd);
}

static bool compared(void)
{
    struct statfs sf;
    assert_int_equal(statfs(dir, &sf), 0);
    return sf.f_type != XFS_SUPER_MAGIC && sf.f_type != BTRFS_SUPER_MAGIC;
}

static int diff(uint64_t off, uint64_t len, struct got *g)
{
    struct bdev *b, *t;
    assert_int_equal(bdev_file_open(base_path, true, &b), 0);
    assert_int_equal(bdev_file_open(target_path, true, &t), 0);
    int rc = store_diff(b, NULL, t, off, len, take, g);
    bdev_close(b);
    bdev_close(t);
    return rc;
}

static void test_changes_covered(void **state)
{
    (void)state;
    make(base_path, SIZE);
    make(target_path, SIZE);
    struct got g = {0};
    assert_int_equal(diff(0, SIZE, &g), 0);
    if (compared())
        assert_int_equal(g.n, 0); /* same contents: nothing */
    uint8_t zeros[8192] = {0};
    flip(target_path, 12345);                            /* one byte */
    flip(target_path, 3 * G - 1);                        /* the last byte of a granule */
    flip(target_path, 3 * G);                            /* and the next one's first */
    write_at(target_path, (3 << 20) + 100, zeros, 8192); /* zeros over a hole */
    write_at(target_path, (2 << 20) + 4000, zeros, 10);  /* zeros over data */
    g = (struct got){0};
    assert_int_equal(diff(0, SIZE, &g), 0);
    assert_true(reported(&g, 12345));
    assert_true(reported(&g, 3 * G - 1) && reported(&g, 3 * G));
    assert_true(reported(&g, (2 << 20) + 4000));
    if (compared()) {
        assert_false(reported(&g, (3 << 20) + 100)); /* a hole reads as zeros */
        assert_int_equal(g.n, 3);                    /* granules 0, 2-3 merged, 32 */
        assert_int_equal(g.off[0], 0);
        assert_int_equal(g.len[0], G);
        assert_int_equal(g.off[1], 2 * G);
        assert_int_equal(g.len[1], 2 * G);
    }
    /* a window: only what lies in it */
    g = (struct got){0};
    assert_int_equal(diff(2 * G, 2 * G, &g), 0);
    for (size_t i = 0; i < g.n; i++)
        assert_true(g.off[i] >= 2 * G && g.off[i] + g.len[i] <= 4 * G);
    assert_true(reported(&g, 3 * G));
    /* fn's stop value comes back */
    g = (struct got){.stop_after = 1};
    assert_int_equal(diff(0, SIZE, &g), 7);
    assert_int_equal(g.n, 1);
}

static void test_tail_reported(void **state)
{
    (void)state;
    make(base_path, SIZE);
    make(target_path, SIZE + (1 << 20)); /* grown: the new MiB is a hole */
    struct got g = {0};
    assert_int_equal(diff(0, SIZE + (1 << 20), &g), 0);
    assert_true(g.n >= 1);
    assert_int_equal(g.off[g.n - 1] + g.len[g.n - 1], SIZE + (1 << 20));
    assert_true(reported(&g, SIZE));
}

static void test_allocated(void **state)
{
    (void)state;
    make(base_path, SIZE);
    struct bdev *b;
    struct got g = {0};
    assert_int_equal(bdev_file_open(base_path, true, &b), 0);
    assert_int_equal(store_allocated(b, 0, SIZE, take, &g), 0);
    bdev_close(b);
    assert_true(reported(&g, 0) && reported(&g, (1 << 20) - 1) && reported(&g, 2 << 20));
    assert_false(reported(&g, 3 << 20));
}

static void test_bad_input(void **state)
{
    (void)state;
    struct got g = {0};
    make(base_path, SIZE);
    struct bdev *b;
    assert_int_equal(bdev_file_open(base_path, true, &b), 0);
    assert_int_equal(store_diff(NULL, NULL, b, 0, SIZE, take, &g), -EINVAL);
    assert_int_equal(store_diff(b, NULL, b, UINT64_MAX, 2, take, &g), -EINVAL);
    bdev_close(b);
}

int main(void)
{
    snprintf(dir, sizeof(dir), "/tmp/blockd-test-diff.XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(base_path, sizeof(base_path), "%s/base", dir);
    snprintf(target_path, sizeof(target_path), "%s/target", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changes_covered),
        cmocka_unit_test(test_tail_reported),
        cmocka_unit_test(test_allocated),
        cmocka_unit_test(test_bad_input),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(base_path);
    unlink(target_path);
    rmdir(dir);
    return rc;
}
