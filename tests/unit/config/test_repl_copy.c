/* Replication's range copy (control/repl_copy.h) between two memory
 * bdevs: ranges merged and clipped; inside the ranges the target becomes
 * the source (data, holes and all-zero blocks alike), outside it keeps
 * what it had. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "control/repl_copy.h"

#define MiB ((uint64_t)1 << 20)
#define SIZE (8 * MiB)

static void test_merge(void **state)
{
    struct repl_ranges r = {0};
    (void)state;
    assert_int_equal(repl_ranges_add(5 * MiB, MiB, &r), 0);
    assert_int_equal(repl_ranges_add(0, 4096, &r), 0);
    assert_int_equal(repl_ranges_add(4096, 4096, &r), 0);          /* touches: merged */
    assert_int_equal(repl_ranges_add(5 * MiB + 512, 4096, &r), 0); /* inside */
    assert_int_equal(repl_ranges_add(7 * MiB, 2 * MiB, &r), 0);    /* clipped */
    assert_int_equal(repl_ranges_add(9 * MiB, MiB, &r), 0);        /* past the end */
    assert_int_equal(repl_ranges_add(3 * MiB, 0, &r), 0);          /* empty: ignored */
    repl_ranges_merge(&r, SIZE);
    assert_int_equal(r.n, 3);
    assert_true(r.v[0].off == 0 && r.v[0].len == 8192);
    assert_true(r.v[1].off == 5 * MiB && r.v[1].len == MiB);
    assert_true(r.v[2].off == 7 * MiB && r.v[2].len == MiB);
    assert_int_equal(repl_ranges_bytes(&r), 8192 + 2 * MiB);
    repl_ranges_free(&r);
}

static void fill(struct bdev *b, uint64_t off, uint64_t len, int byte)
{
    char *buf = malloc(len);
    assert_non_null(buf);
    memset(buf, byte, len);
    assert_int_equal(b->ops->write(b, buf, len, off), 0);
    free(buf);
}

static bool equal_at(struct bdev *a, struct bdev *b, uint64_t off, uint64_t len)
{
    char *x = malloc(len), *y = malloc(len);
    assert_true(x && y);
    assert_int_equal(a->ops->read(a, x, len, off), 0);
    assert_int_equal(b->ops->read(b, y, len, off), 0);
    bool same = memcmp(x, y, len) == 0;
    free(x);
    free(y);
    return same;
}

static void test_copy(void **state)
{
    struct bdev *src, *dst;
    struct repl_ranges r = {0};
    struct repl_copy_stats st = {0};
    (void)state;
    assert_int_equal(bdev_memory_open(SIZE, 0, &src), 0);
    assert_int_equal(bdev_memory_open(SIZE, 0, &dst), 0);
    fill(dst, 0, SIZE, 0xee); /* the target's old data everywhere */
    fill(src, 1 * MiB, MiB, 0x11);
    fill(src, 2 * MiB, 64 << 10, 0); /* all-zero data: zeroed on the target */
    fill(src, 6 * MiB, MiB, 0x66);   /* outside the ranges: not copied */
    /* [1M, 3M): data, zeroes and a hole; [4M, 5M): a hole only */
    assert_int_equal(repl_ranges_add(1 * MiB, 2 * MiB, &r), 0);
    assert_int_equal(repl_ranges_add(4 * MiB, MiB, &r), 0);
    repl_ranges_merge(&r, SIZE);
    assert_int_equal(repl_copy_ranges(src, dst, &r, false, NULL, NULL, &st), 0);
    assert_true(equal_at(src, dst, 1 * MiB, 2 * MiB));
    assert_true(equal_at(src, dst, 4 * MiB, MiB));
    assert_int_equal(st.copied, MiB);
    assert_true(st.zeroed >= 2 * MiB); /* the zero block, the holes */
    /* outside the ranges the old data stays */
    char b[4096];
    assert_int_equal(dst->ops->read(dst, b, sizeof(b), 6 * MiB), 0);
    assert_true(b[0] == (char)0xee && b[4095] == (char)0xee);
    assert_int_equal(dst->ops->read(dst, b, sizeof(b), 0), 0);
    assert_true(b[0] == (char)0xee);
    /* a fresh target: the whole volume, nothing zeroed, still equal */
    struct bdev *fresh;
    struct repl_ranges all = {0};
    struct repl_copy_stats fst = {0};
    assert_int_equal(bdev_memory_open(SIZE, 0, &fresh), 0);
    assert_int_equal(repl_ranges_add(0, SIZE, &all), 0);
    assert_int_equal(repl_copy_ranges(src, fresh, &all, true, NULL, NULL, &fst), 0);
    assert_true(equal_at(src, fresh, 0, SIZE));
    assert_int_equal(fst.zeroed, 0);
    assert_int_equal(fst.copied, 2 * MiB);
    repl_ranges_free(&all);
    bdev_close(fresh);
    repl_ranges_free(&r);
    bdev_close(src);
    bdev_close(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
