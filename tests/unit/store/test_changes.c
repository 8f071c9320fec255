/* The change log (store/changes.h): an epoch ends at each snapshot and is
 * saved beside it; a diff ORs the trusted epochs from base to target (and
 * the live one); an epoch that did not start at a snapshot, saw an
 * invalidation, or whose snapshot file changed, is not trusted (-ESTALE);
 * writes around the instant land in both epochs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/changes.h"
#include "store/poolfs.h"

#define G STORE_CHANGES_GRANULE
#define SIZE ((uint64_t)4 << 20)

static char dir[PATH_MAX], s1[PATH_MAX + 8], s2[PATH_MAX + 8], s3[PATH_MAX + 8];

struct got {
    uint64_t off[32], len[32];
    size_t n;
};

static int take(uint64_t off, uint64_t len, void *arg)
{
    struct got *g = arg;
    assert_true(g->n < 32);
    g->off[g->n] = off;
    g->len[g->n++] = len;
    return 0;
}

/* A snapshot file of SIZE bytes (its content does not matter here). */
static void snap_file(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)SIZE), 0);
    close(fd);
}

/* A snapshot: begin, the file, end. */
static void snapshot(struct store_changes *c, const char *path)
{
    store_changes_begin(c);
    snap_file(path);
    assert_int_equal(store_changes_end(c, path), 0);
}

static int diff(const char *const *snaps, size_t n, struct store_changes *live, struct got *g)
{
    *g = (struct got){0};
    return store_changes_diff(snaps, n, live, SIZE, 0, SIZE, take, g);
}

static void test_epochs(void **state)
{
    (void)state;
    struct store_changes *c;
    struct got g;
    assert_int_equal(store_changes_new(SIZE, &c), 0);
    store_changes_mark(c, 0, 1); /* before any snapshot: not trusted */
    snapshot(c, s1);
    store_changes_mark(c, G + 10, 100);  /* granule 1 */
    store_changes_mark(c, 3 * G - 1, 2); /* granules 2 and 3 */
    const char *live1[] = {s1};
    assert_int_equal(diff(live1, 1, c, &g), 0);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.off[0], G);
    assert_int_equal(g.len[0], 3 * G);
    /* around the instant: in both epochs */
    store_changes_begin(c);
    store_changes_mark(c, 10 * G, 1);
    snap_file(s2);
    assert_int_equal(store_changes_end(c, s2), 0);
    store_changes_mark(c, 20 * G, 1);
    const char *s12[] = {s1, s2}, *live2[] = {s2}, *s0[] = {s2, s1};
    assert_int_equal(diff(s12, 2, NULL, &g), 0);
    assert_int_equal(g.n, 2);
    assert_int_equal(g.off[1], 10 * G);
    assert_int_equal(diff(live2, 1, c, &g), 0);
    assert_int_equal(g.n, 2); /* 10 (both epochs) and 20 */
    assert_int_equal(g.off[0], 10 * G);
    assert_int_equal(g.off[1], 20 * G);
    /* the first epoch did not start at a snapshot; a wrong order neither */
    const char *from_nothing[] = {s2, s1, s2};
    assert_int_equal(diff(from_nothing, 3, NULL, &g), -ESTALE);
    assert_int_equal(diff(s0, 2, NULL, &g), -ESTALE);
    /* a failed snapshot: the epochs become one again */
    store_changes_begin(c);
    store_changes_mark(c, 30 * G, 1);
    assert_int_equal(store_changes_end(c, NULL), 0);
    assert_int_equal(diff(live2, 1, c, &g), 0);
    assert_int_equal(g.n, 3);
    /* an invalidation: the live epoch, and the next snapshot's, are not trusted */
    store_changes_invalidate(c);
    assert_int_equal(diff(live2, 1, c, &g), -ESTALE);
    snapshot(c, s3);
    const char *s23[] = {s2, s3};
    assert_int_equal(diff(s23, 2, NULL, &g), -ESTALE);
    const char *live3[] = {s3};
    assert_int_equal(diff(live3, 1, c, &g), 0); /* from s3 on, trusted again */
    assert_int_equal(g.n, 0);
    /* a snapshot file that changed is not the one the epoch ended at */
    usleep(10000);
    snap_file(s2);
    assert_int_equal(diff(s12, 2, NULL, &g), -ESTALE);
    store_changes_remove(s2);
    store_changes_remove(s3);
    store_changes_free(c);
}

static void test_past_the_end(void **state)
{
    (void)state;
    struct store_changes *c;
    struct got g;
    assert_int_equal(store_changes_new(SIZE, &c), 0);
    snapshot(c, s1);
    store_changes_mark(c, SIZE, 4096); /* past the size the log was made for */
    const char *live1[] = {s1};
    assert_int_equal(diff(live1, 1, c, &g), -ESTALE);
    snapshot(c, s2); /* broken for good */
    const char *live2[] = {s2};
    assert_int_equal(diff(live2, 1, c, &g), -ESTALE);
    store_changes_remove(s2);
    store_changes_free(c);
}

int main(void)
{
    char tmpl[] = "/tmp/blockd-test-changes.XXXXXX";
    if (!mkdtemp(tmpl) || !realpath(tmpl, dir) || poolfs_root_add(dir) < 0)
        return 1;
    snprintf(s1, sizeof(s1), "%s/v@s1", dir);
    snprintf(s2, sizeof(s2), "%s/v@s2", dir);
    snprintf(s3, sizeof(s3), "%s/v@s3", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_past_the_end),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
