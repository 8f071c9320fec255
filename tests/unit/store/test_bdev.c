/* Both backends through the ops table: read/write/trim/zero/extents at odd
 * offsets, resize, plus file-only (create, thick, nowait) and memory-only
 * (concurrent first writes into one chunk) cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/bdev.h"

#define DEV_SIZE ((uint64_t)8 << 20)

static char tmpdir[256];
static int file_seq;

struct fixture {
    struct bdev *b;
    bool is_file;
    char path[320];
};

static int open_file(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    snprintf(f->path, sizeof(f->path), "%s/vol%d", tmpdir, file_seq++);
    assert_int_equal(bdev_file_create(f->path, DEV_SIZE, false), 0);
    assert_int_equal(bdev_file_open(f->path, false, &f->b), 0);
    f->is_file = true;
    *state = f;
    return 0;
}

static int open_memory(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    assert_int_equal(bdev_memory_open(DEV_SIZE, 0, &f->b), 0);
    *state = f;
    return 0;
}

static int close_dev(void **state)
{
    struct fixture *f = *state;
    bdev_close(f->b);
    if (f->is_file)
        unlink(f->path);
    free(f);
    return 0;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed) >> 13) | 1; /* never zero */
}

static bool is_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static void test_read_write_odd(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    assert_int_equal(b->size, DEV_SIZE);
    size_t n = 200003;
    uint64_t off = 65536 - 777; /* straddles chunk and page boundaries */
    uint8_t *w = malloc(n), *r = malloc(n + 2000);
    fill(w, n, 7);
    assert_int_equal(b->ops->write(b, w, n, off), 0);
    assert_int_equal(b->ops->read(b, r, n, off), 0);
    assert_memory_equal(r, w, n);
    /* Around it: zeros, then the data. */
    assert_int_equal(b->ops->read(b, r, n + 2000, off - 1000), 0);
    assert_true(is_zero(r, 1000));
    assert_memory_equal(r + 1000, w, n);
    assert_true(is_zero(r + 1000 + n, 1000));
    /* Unwritten area far away reads zeros. */
    assert_int_equal(b->ops->read(b, r, 4096, DEV_SIZE - 4096), 0);
    assert_true(is_zero(r, 4096));
    /* Overwrite a middle piece. */
    uint8_t piece[513];
    fill(piece, sizeof(piece), 99);
    assert_int_equal(b->ops->write(b, piece, sizeof(piece), off + 100000), 0);
    memcpy(w + 100000, piece, sizeof(piece));
    assert_int_equal(b->ops->read(b, r, n, off), 0);
    assert_memory_equal(r, w, n);
    free(w);
    free(r);
}

static void test_trim_odd(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    assert_true(b->caps & BDEV_CAN_TRIM);
    assert_true(b->caps & BDEV_TRIM_ZEROES);
    size_t n = 1 << 20;
    uint8_t *w = malloc(n), *r = malloc(n);
    fill(w, n, 3);
    assert_int_equal(b->ops->write(b, w, n, 0), 0);
    uint64_t toff = 5000, tlen = 300001; /* partial at both ends, whole chunks inside */
    assert_int_equal(b->ops->trim(b, toff, tlen), 0);
    memset(w + toff, 0, tlen);
    assert_int_equal(b->ops->read(b, r, n, 0), 0);
    assert_memory_equal(r, w, n);
    /* The whole chunks/blocks inside the range are now holes. */
    struct extent e[16];
    size_t ne = 0;
    assert_int_equal(b->ops->extents(b, 65536, 65536 * 3, e, 16, &ne), 0);
    assert_int_equal(ne, 1);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    assert_int_equal(e[0].offset, 65536);
    assert_int_equal(e[0].length, 65536 * 3);
    /* Writing into the trimmed range works again. */
    assert_int_equal(b->ops->write(b, w + 10, 100, 70000), 0);
    assert_int_equal(b->ops->read(b, r, 100, 70000), 0);
    assert_memory_equal(r, w + 10, 100);
    free(w);
    free(r);
}

static void test_write_zeroes(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    assert_true(b->caps & BDEV_CAN_ZERO);
    assert_true(b->caps & BDEV_CAN_FAST_ZERO);
    size_t n = 1 << 20;
    uint8_t *w = malloc(n), *r = malloc(n);
    fill(w, n, 11);
    assert_int_equal(b->ops->write(b, w, n, 0), 0);
    /* Allocate-zeros (no trim), odd range. */
    assert_int_equal(b->ops->write_zeroes(b, 1234, 200000, 0), 0);
    memset(w + 1234, 0, 200000);
    /* May-trim, odd range. */
    assert_int_equal(b->ops->write_zeroes(b, 400001, 300000, BDEV_ZERO_MAY_TRIM), 0);
    memset(w + 400001, 0, 300000);
    /* Fast: both backends have a fast path. */
    assert_int_equal(b->ops->write_zeroes(b, 800000, 7, BDEV_ZERO_FAST), 0);
    memset(w + 800000, 0, 7);
    assert_int_equal(b->ops->read(b, r, n, 0), 0);
    assert_memory_equal(r, w, n);
    /* Without MAY_TRIM the range stays allocated (data), with it whole
     * blocks become holes. */
    struct extent e[8];
    size_t ne;
    assert_int_equal(b->ops->extents(b, 65536, 65536, e, 8, &ne), 0);
    assert_int_equal(ne, 1);
    assert_int_equal(e[0].type, EXTENT_DATA);
    assert_int_equal(b->ops->extents(b, 458752, 131072, e, 8, &ne), 0);
    assert_int_equal(ne, 1);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    free(w);
    free(r);
}

static void test_extents(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    assert_true(b->caps & BDEV_CAN_EXTENTS);
    uint8_t buf[65536];
    fill(buf, sizeof(buf), 5);
    assert_int_equal(b->ops->write(b, buf, sizeof(buf), 1 << 20), 0);
    assert_int_equal(b->ops->write(b, buf, sizeof(buf), 3 << 20), 0);
    struct extent e[8];
    size_t ne = 0;
    assert_int_equal(b->ops->extents(b, 0, DEV_SIZE, e, 8, &ne), 0);
    assert_int_equal(ne, 5);
    uint64_t expect[5][3] = {{0, 1 << 20, EXTENT_HOLE},
                             {1 << 20, 65536, EXTENT_DATA},
                             {(1 << 20) + 65536, (2 << 20) - 65536, EXTENT_HOLE},
                             {3 << 20, 65536, EXTENT_DATA},
                             {(3 << 20) + 65536, DEV_SIZE - (3 << 20) - 65536, EXTENT_HOLE}};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(e[i].offset, expect[i][0]);
        assert_int_equal(e[i].length, expect[i][1]);
        assert_int_equal(e[i].type, expect[i][2]);
    }
    /* Odd start and end: clipped to the query. */
    assert_int_equal(b->ops->extents(b, 1000, (1 << 20) - 1000 + 17, e, 8, &ne), 0);
    assert_int_equal(ne, 2);
    assert_int_equal(e[0].offset, 1000);
    assert_int_equal(e[0].length, (1 << 20) - 1000);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    assert_int_equal(e[1].offset, 1 << 20);
    assert_int_equal(e[1].length, 17);
    assert_int_equal(e[1].type, EXTENT_DATA);
    /* max reached: the last extent ends early, in order. */
    assert_int_equal(b->ops->extents(b, 0, DEV_SIZE, e, 2, &ne), 0);
    assert_int_equal(ne, 2);
    assert_int_equal(e[1].offset + e[1].length, (1 << 20) + 65536);
}

static void test_resize(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    uint8_t buf[8192];
    fill(buf, sizeof(buf), 1);
    assert_int_equal(b->ops->write(b, buf, sizeof(buf), DEV_SIZE - sizeof(buf)), 0);
    assert_int_equal(b->ops->resize(b, DEV_SIZE / 2), 0);
    assert_int_equal(b->size, DEV_SIZE / 2);
    assert_int_equal(b->ops->resize(b, DEV_SIZE * 2), 0);
    assert_int_equal(b->size, DEV_SIZE * 2);
    uint8_t r[8192];
    /* Shrinking dropped the data: growing back reads zeros there. */
    assert_int_equal(b->ops->read(b, r, sizeof(r), DEV_SIZE - sizeof(r)), 0);
    assert_true(is_zero(r, sizeof(r)));
    assert_int_equal(b->ops->write(b, buf, sizeof(buf), DEV_SIZE * 2 - sizeof(buf)), 0);
    assert_int_equal(b->ops->read(b, r, sizeof(r), DEV_SIZE * 2 - sizeof(r)), 0);
    assert_memory_equal(r, buf, sizeof(r));
    if (f->is_file) {
        struct stat st;
        assert_int_equal(stat(f->path, &st), 0);
        assert_int_equal(st.st_size, DEV_SIZE * 2);
    }
}

static void test_sync_cache(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    assert_true(b->caps & BDEV_CAN_FLUSH);
    assert_true(b->caps & BDEV_CAN_MULTI_CONN);
    assert_int_equal(b->ops->sync(b), 0);
    assert_int_equal(b->ops->cache(b, 0, 65536), 0);
}

/* Random writes, trims and zeroings at random odd offsets against a model;
 * every read matches the model and every reported hole reads as zeros. */
static void test_random_model(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    const size_t span = 1 << 20;
    uint8_t *model = calloc(1, span), *buf = malloc(span), *data = malloc(span);
    fill(data, span, 4242);
    unsigned seed = 12345;
    for (int op = 0; op < 1500; op++) {
        seed = seed * 1103515245u + 12345u;
        unsigned kind = (seed >> 16) % 5;
        seed = seed * 1103515245u + 12345u;
        uint64_t off = (seed >> 8) % span;
        seed = seed * 1103515245u + 12345u;
        uint64_t len = (seed >> 8) % 200000;
        if (off + len > span)
            len = span - off;
        switch (kind) {
        case 0:
        case 1:
            assert_int_equal(b->ops->write(b, data + (op % 1000), len, off), 0);
            memcpy(model + off, data + (op % 1000), len);
            break;
        case 2:
            assert_int_equal(b->ops->trim(b, off, len), 0);
            memset(model + off, 0, len);
            break;
        case 3:
            assert_int_equal(b->ops->write_zeroes(b, off, len, op & 1 ? BDEV_ZERO_MAY_TRIM : 0), 0);
            memset(model + off, 0, len);
            break;
        default:
            assert_int_equal(b->ops->read(b, buf, len, off), 0);
            if (memcmp(buf, model + off, len))
                fail_msg("op %d: read %llu+%llu differs from the model", op,
                         (unsigned long long)off, (unsigned long long)len);
        }
    }
    assert_int_equal(b->ops->read(b, buf, span, 0), 0);
    assert_memory_equal(buf, model, span);
    struct extent e[512];
    size_t ne;
    assert_int_equal(b->ops->extents(b, 0, span, e, 512, &ne), 0);
    uint64_t pos = 0;
    for (size_t i = 0; i < ne; i++) {
        assert_int_equal(e[i].offset, pos);
        if (e[i].type == EXTENT_HOLE)
            assert_true(is_zero(model + e[i].offset, e[i].length));
        pos += e[i].length;
    }
    assert_int_equal(pos, span);
    free(model);
    free(buf);
    free(data);
}

/* ---- file only ---- */

static void test_file_create(void **state)
{
    char p[320];
    snprintf(p, sizeof(p), "%s/created", tmpdir);
    assert_int_equal(bdev_file_create(p, 16 << 20, false), 0);
    assert_int_equal(bdev_file_create(p, 16 << 20, false), -EEXIST);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 16 << 20);
    assert_true(st.st_blocks * 512 < (1 << 20)); /* sparse */
    assert_int_equal(st.st_mode & 0777, 0600);
    unlink(p);
    assert_int_equal(bdev_file_create(p, 16 << 20, true), 0);
    assert_int_equal(stat(p, &st), 0);
    assert_true(st.st_blocks * 512 >= (16 << 20)); /* thick */
    struct bdev *b;
    assert_int_equal(bdev_file_open(p, true, &b), 0);
    assert_true(b->readonly);
    assert_false(b->caps & BDEV_CAN_TRIM);
    assert_int_equal(b->ops->write(b, "x", 1, 0), -EBADF);
    bdev_close(b);
    unlink(p);
    assert_int_equal(bdev_file_open(p, false, &b), -ENOENT);
    assert_int_equal(bdev_file_open(tmpdir, false, &b), -EISDIR);
    snprintf(p, sizeof(p), "%s/no/such/dir/x", tmpdir);
    assert_int_equal(bdev_file_create(p, 4096, false), -ENOENT);
}

/* Probe results are kept per filesystem: a read-only open must not pass
 * its unknown hole punching on to later writable opens, nor a writable open
 * its write features to read-only ones. */
static void test_file_probe_cache(void **state)
{
    (void)state;
    const unsigned write_caps =
        BDEV_CAN_TRIM | BDEV_TRIM_ZEROES | BDEV_CAN_ZERO | BDEV_CAN_FAST_ZERO;
    char p1[320], p2[320];
    snprintf(p1, sizeof(p1), "%s/probe1", tmpdir);
    snprintf(p2, sizeof(p2), "%s/probe2", tmpdir);
    assert_int_equal(bdev_file_create(p1, 1 << 20, false), 0);
    assert_int_equal(bdev_file_create(p2, 1 << 20, false), 0);
    struct bdev *ro1, *rw1, *rw2, *ro2;
    assert_int_equal(bdev_file_open(p1, true, &ro1), 0);
    assert_int_equal(ro1->caps & write_caps, 0);
    assert_int_equal(bdev_file_open(p1, false, &rw1), 0);
    assert_true(rw1->caps & BDEV_CAN_TRIM); /* as the file fixtures above */
    assert_int_equal(bdev_file_open(p2, false, &rw2), 0);
    assert_int_equal(rw2->caps, rw1->caps);
    assert_int_equal(bdev_file_open(p2, true, &ro2), 0);
    assert_int_equal(ro2->caps & write_caps, 0);
    assert_int_equal(ro2->caps, rw1->caps & ~write_caps);
    assert_int_equal(ro1->caps, ro2->caps);
    /* what the cached caps promise works on the second file */
    assert_int_equal(rw2->ops->trim(rw2, 0, 4096), 0);
    bdev_close(ro1);
    bdev_close(rw1);
    bdev_close(rw2);
    bdev_close(ro2);
    unlink(p1);
    unlink(p2);
}

static void test_file_nowait(void **state)
{
    struct fixture *f = *state;
    struct bdev *b = f->b;
    uint8_t w[4096], r[4096];
    fill(w, sizeof(w), 42);
    assert_int_equal(b->ops->write(b, w, sizeof(w), 8192), 0);
    /* Just written: in the page cache. Kernels without RWF_NOWAIT say
     * -EAGAIN every time, which is also a correct answer. */
    int rc = b->ops->read_nowait(b, r, sizeof(r), 8192);
    assert_true(rc == 0 || rc == -EAGAIN);
    if (rc == 0)
        assert_memory_equal(r, w, sizeof(w));
    rc = b->ops->write_nowait(b, w, sizeof(w), 8192);
    assert_true(rc == 0 || rc == -EAGAIN);
    assert_int_equal(b->ops->read(b, r, sizeof(r), 8192), 0);
    assert_memory_equal(r, w, sizeof(w));
}

static void test_file_fast_zero_fallback(void **state)
{
    /* A read-only open has no fast zero path: FAST must say -ENOTSUP,
     * never pretend. (Volumes refuse writes to read-only earlier.) */
    struct fixture *f = *state;
    struct bdev *b;
    assert_int_equal(bdev_file_open(f->path, true, &b), 0);
    assert_false(b->caps & BDEV_CAN_FAST_ZERO);
    assert_int_equal(b->ops->write_zeroes(b, 0, 4096, BDEV_ZERO_FAST), -ENOTSUP);
    bdev_close(b);
}

/* ---- memory only ---- */

struct race_arg {
    struct bdev *b;
    int id;
};

static void *race_writer(void *p)
{
    struct race_arg *a = p;
    uint8_t buf[512];
    /* Every thread writes its own 512-byte slots of the same fresh chunks,
     * so they all race to install the chunk pointers. */
    for (int round = 0; round < 64; round++) {
        uint64_t off = (uint64_t)round * 65536 + (uint64_t)a->id * 512;
        memset(buf, a->id + 1, sizeof(buf));
        if (a->b->ops->write(a->b, buf, sizeof(buf), off) != 0)
            return (void *)1;
    }
    return NULL;
}

static void test_memory_concurrent_install(void **state)
{
    struct fixture *f = *state;
    pthread_t th[8];
    struct race_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct race_arg){.b = f->b, .id = i};
        pthread_create(&th[i], NULL, race_writer, &args[i]);
    }
    for (int i = 0; i < 8; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
    uint8_t buf[512];
    for (int round = 0; round < 64; round++)
        for (int i = 0; i < 8; i++) {
            assert_int_equal(f->b->ops->read(f->b, buf, 512, (uint64_t)round * 65536 + i * 512), 0);
            for (int k = 0; k < 512; k++)
                assert_int_equal(buf[k], i + 1);
        }
}

static void test_memory_limits(void **state)
{
    struct bdev *b;
    assert_int_equal(bdev_memory_open((uint64_t)1 << 50, 0, &b), -EFBIG);
    assert_int_equal(bdev_memory_open((uint64_t)1 << 40, 250, &b), 0); /* 1 TiB sparse */
    assert_int_equal(b->latency_us, 250);
    uint8_t x = 0x5a, y = 0;
    assert_int_equal(b->ops->write(b, &x, 1, ((uint64_t)1 << 40) - 1), 0);
    assert_int_equal(b->ops->read(b, &y, 1, ((uint64_t)1 << 40) - 1), 0);
    assert_int_equal(y, 0x5a);
    /* Block status over the whole sparse TiB: quick, exact. */
    struct extent e[4];
    size_t ne = 0;
    uint64_t t0 = time(NULL);
    assert_int_equal(b->ops->extents(b, 0, (uint64_t)1 << 40, e, 4, &ne), 0);
    assert_true(time(NULL) - t0 < 2);
    assert_int_equal(ne, 2);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    assert_int_equal(e[0].length, ((uint64_t)1 << 40) - 65536);
    assert_int_equal(e[1].type, EXTENT_DATA);
    assert_int_equal(e[1].offset + e[1].length, (uint64_t)1 << 40);
    /* Zeroing the whole TiB without may-trim: quick, allocates nothing new,
     * and the one written chunk stays allocated but reads zeros. */
    t0 = time(NULL);
    assert_int_equal(b->ops->write_zeroes(b, 0, (uint64_t)1 << 40, 0), 0);
    assert_true(time(NULL) - t0 < 2);
    assert_int_equal(b->ops->read(b, &y, 1, ((uint64_t)1 << 40) - 1), 0);
    assert_int_equal(y, 0);
    assert_int_equal(b->ops->extents(b, 0, (uint64_t)1 << 40, e, 4, &ne), 0);
    assert_int_equal(ne, 2);
    assert_int_equal(e[1].type, EXTENT_DATA);
    assert_int_equal(b->ops->trim(b, 0, (uint64_t)1 << 40), 0);
    assert_int_equal(b->ops->extents(b, 0, (uint64_t)1 << 40, e, 4, &ne), 0);
    assert_int_equal(ne, 1);
    assert_int_equal(e[0].type, EXTENT_HOLE);
    assert_int_equal(b->ops->resize(b, (uint64_t)1 << 50), -EFBIG);
    bdev_close(b);
}

/* ---- a real block device (loop) when the machine allows ---- */

static char loop_dev[64], loop_img[320];

static int loop_teardown(void **state)
{
    if (loop_dev[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "losetup -d %s >/dev/null 2>&1", loop_dev);
        if (system(cmd) != 0)
            fprintf(stderr, "warning: %s failed\n", cmd);
        loop_dev[0] = '\0';
    }
    if (loop_img[0])
        unlink(loop_img);
    return 0;
}

static void test_block_device(void **state)
{
    snprintf(loop_img, sizeof(loop_img), "%s/loop.img", tmpdir);
    int fd = open(loop_img, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 64 << 20), 0);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", loop_img);
    FILE *p = geteuid() == 0 ? popen(cmd, "r") : NULL;
    if (!p || !fgets(loop_dev, sizeof(loop_dev), p)) {
        if (p)
            pclose(p);
        loop_dev[0] = '\0';
        print_message("SKIP block device backend: %s\n",
                      geteuid() ? "not root" : "losetup failed (no loop devices?)");
        skip();
    }
    pclose(p);
    loop_dev[strcspn(loop_dev, "\n")] = '\0';

    struct bdev *b;
    assert_int_equal(bdev_file_open(loop_dev, false, &b), 0);
    assert_int_equal(b->size, 64 << 20);
    assert_false(b->caps & BDEV_CAN_EXTENTS); /* no SEEK_HOLE on block devices */
    size_t n = 300001;
    uint8_t *w = malloc(n), *r = malloc(n);
    fill(w, n, 77);
    assert_int_equal(b->ops->write(b, w, n, 12345), 0);
    assert_int_equal(b->ops->sync(b), 0);
    assert_int_equal(b->ops->read(b, r, n, 12345), 0);
    assert_memory_equal(r, w, n);
    /* Trim and zeroing on a loop device: discard / zero-out, read as zeros. */
    if (b->caps & BDEV_CAN_TRIM) {
        int rc = b->ops->trim(b, 65536, 131072);
        assert_true(rc == 0 || rc == -EOPNOTSUPP);
        if (rc == 0)
            memset(w + 65536 - 12345, 0, 131072);
    }
    assert_int_equal(b->ops->write_zeroes(b, 200000, 4096, 0), 0);
    memset(w + 200000 - 12345, 0, 4096);
    assert_int_equal(b->ops->read(b, r, n, 12345), 0);
    assert_memory_equal(r, w, n);
    struct extent e[2];
    size_t ne;
    assert_int_equal(b->ops->extents(b, 0, 64 << 20, e, 2, &ne), 0);
    assert_int_equal(ne, 1);
    assert_int_equal(e[0].type, EXTENT_DATA);
    assert_int_equal(b->ops->resize(b, 128 << 20), -ENOTSUP);
    bdev_close(b);
    free(w);
    free(r);
}

#define BOTH(fn)                                                                                   \
    cmocka_unit_test_setup_teardown(fn, open_file, close_dev),                                     \
        cmocka_unit_test_setup_teardown(fn, open_memory, close_dev)

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/store-bdev-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        BOTH(test_read_write_odd),
        BOTH(test_trim_odd),
        BOTH(test_write_zeroes),
        BOTH(test_extents),
        BOTH(test_resize),
        BOTH(test_sync_cache),
        BOTH(test_random_model),
        cmocka_unit_test(test_file_create),
        cmocka_unit_test(test_file_probe_cache),
        cmocka_unit_test_setup_teardown(test_file_nowait, open_file, close_dev),
        cmocka_unit_test_setup_teardown(test_file_fast_zero_fallback, open_file, close_dev),
        cmocka_unit_test_setup_teardown(test_memory_concurrent_install, open_memory, close_dev),
        cmocka_unit_test(test_memory_limits),
        cmocka_unit_test_teardown(test_block_device, loop_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}
