/*
 * Copy-before-write snapshots (store/cow.h, volume_cow_*, store/snapshot.h):
 *   - the chunk bitmap: ranges, chunk edges, the snapshot's end, parameters;
 *   - copy-before-write saves a chunk's old data before a write changes it,
 *     the copier copies the rest, holes stay holes, copied chunks are not
 *     copied again;
 *   - through a volume: writes after attach leave the snapshot file equal
 *     to the volume at the instant; a second attach is refused; a shrink
 *     is refused while attached; after detach writes no longer copy;
 *   - a snapshot file that cannot be written fails the snapshot, never the
 *     volume's writes;
 *   - store_snapshot_volume on a file volume (no reflink here: ext4 /tmp, or
 *     forced) while a writer thread writes sequence-numbered blocks: the
 *     snapshot holds exactly writes 1..M for one M, the hold is short, and
 *     a crash-left temporary file never looks like a snapshot.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "store/cow.h"
#include "store/poolfs.h"
#include "store/snapshot.h"
#include "store/volume.h"

#define CHUNK (64u << 10)
#define SIZE ((uint64_t)16 * CHUNK + 4096) /* a short last chunk */

static char tmpdir[256];
static int seq;

static int dst_file(uint64_t size, char *path, size_t plen)
{
    snprintf(path, plen, "%s/dst%d", tmpdir, seq++);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    return fd;
}

static void fill(char *buf, size_t n, unsigned char tag)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(tag ^ (i * 7));
}

static void bwrite(struct bdev *b, uint64_t off, size_t len, unsigned char tag)
{
    char *buf = malloc(len);
    fill(buf, len, tag);
    assert_int_equal(b->ops->write(b, buf, len, off), 0);
    free(buf);
}

static void expect_file(int fd, uint64_t off, size_t len, int tag) /* tag < 0: zeros */
{
    char *want = malloc(len), *got = malloc(len);
    if (tag < 0)
        memset(want, 0, len);
    else
        fill(want, len, (unsigned char)tag);
    assert_int_equal(pread(fd, got, len, (off_t)off), (ssize_t)len);
    assert_memory_equal(got, want, len);
    free(want);
    free(got);
}

static void test_bitmap(void **state)
{
    (void)state;
    struct bdev *b;
    struct store_cow *c;
    char path[300];
    int fd = dst_file(SIZE, path, sizeof(path));

    assert_int_equal(bdev_memory_open(SIZE, 0, &b), 0);
    assert_int_equal(store_cow_new(b, fd, SIZE, 3000, &c), -EINVAL); /* not a power of two */
    assert_int_equal(store_cow_new(b, fd, SIZE, 2048, &c), -EINVAL); /* too small */
    assert_int_equal(store_cow_new(b, -1, SIZE, CHUNK, &c), -EINVAL);
    assert_int_equal(store_cow_new(b, fd, SIZE, 0, &c), 0);
    assert_int_equal(c->chunk, STORE_COW_CHUNK_DEFAULT);
    store_cow_free(c);

    assert_int_equal(store_cow_new(b, fd, SIZE, CHUNK, &c), 0);
    assert_int_equal(c->nchunks, 17);
    assert_false(store_cow_range_copied(c, 0, 1));
    assert_true(store_cow_range_copied(c, 0, 0));       /* empty */
    assert_true(store_cow_range_copied(c, SIZE, 4096)); /* past the end */

    store_cow_before_write(c, CHUNK + 100, 10); /* chunk 1 only */
    assert_true(store_cow_range_copied(c, CHUNK, CHUNK));
    assert_false(store_cow_range_copied(c, CHUNK - 1, 2)); /* straddles 0 and 1 */
    assert_false(store_cow_range_copied(c, 2 * CHUNK, 1));
    assert_int_equal(store_cow_copied_count(c), 1);

    store_cow_before_write(c, CHUNK - 1, CHUNK + 2); /* 0, 1 (done), 2 */
    assert_true(store_cow_range_copied(c, 0, 3 * CHUNK));
    assert_int_equal(store_cow_copied_count(c), 3);

    store_cow_before_write(c, SIZE - 10, 4096); /* the short last chunk, clipped */
    assert_true(store_cow_range_copied(c, SIZE - 4096, 4096 * 4));
    assert_int_equal(store_cow_copied_count(c), 4);
    /* A copied chunk is never copied again. */
    store_cow_before_write(c, 0, 3 * CHUNK);
    assert_int_equal(store_cow_copied_count(c), 4);
    assert_int_equal(store_cow_error(c), 0);
    store_cow_free(c);
    bdev_close(b);
    close(fd);
    unlink(path);
}

static void test_copy_before_write(void **state)
{
    (void)state;
    struct bdev *b;
    struct store_cow *c;
    char path[300];
    int fd = dst_file(SIZE, path, sizeof(path));
    struct stat st;

    assert_int_equal(bdev_memory_open(SIZE, 0, &b), 0);
    /* Data in chunks 0, 3 and the last; the rest is a hole. */
    bwrite(b, 0, CHUNK, 0xA0);
    bwrite(b, 3 * CHUNK, CHUNK, 0xA3);
    bwrite(b, 16 * CHUNK, 4096, 0xAF);
    assert_int_equal(store_cow_new(b, fd, SIZE, CHUNK, &c), 0);

    /* A write to chunk 3 and one into the hole at chunk 7 (as volume.c
     * does: copy first, then modify). */
    store_cow_before_write(c, 3 * CHUNK + 4096, 4096);
    bwrite(b, 3 * CHUNK + 4096, 4096, 0xB3);
    store_cow_before_write(c, 7 * CHUNK, 8192);
    bwrite(b, 7 * CHUNK, 8192, 0xB7);
    /* Captured for the copier to store: a write never writes the file. */
    expect_file(fd, 3 * CHUNK, CHUNK, -1);
    assert_int_equal(c->q_bytes, 2 * CHUNK);

    assert_int_equal(store_cow_copy_rest(c), 0);
    assert_int_equal(c->q_bytes, 0);
    expect_file(fd, 3 * CHUNK, CHUNK, 0xA3); /* the old data, saved */
    expect_file(fd, 7 * CHUNK, CHUNK, -1);   /* a hole then */
    assert_int_equal(c->progress, SIZE);
    assert_int_equal(atomic_load(&c->copied_by_writes), 2);
    /* Only the data chunks not copied by writes: 0 and the last. */
    assert_int_equal(atomic_load(&c->copied_by_copier), 2);
    expect_file(fd, 0, CHUNK, 0xA0);
    expect_file(fd, CHUNK, 2 * CHUNK, -1);
    expect_file(fd, 3 * CHUNK, CHUNK, 0xA3);
    expect_file(fd, 7 * CHUNK, CHUNK, -1);
    expect_file(fd, 16 * CHUNK, 4096, 0xAF);
    /* Holes stay holes: at most the 3 data chunks are allocated. */
    assert_int_equal(fstat(fd, &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 <= 3 * CHUNK + 4 * 4096);
    store_cow_free(c);
    bdev_close(b);
    close(fd);
    unlink(path);
}

static void vwrite(struct volume *v, uint64_t off, size_t len, unsigned char tag)
{
    char *buf = malloc(len);
    fill(buf, len, tag);
    struct vreq r = {.op = VREQ_WRITE, .offset = off, .length = len, .buf = buf};
    assert_int_equal(volume_submit_wait(v, &r), 0);
    free(buf);
}

static void vzero(struct volume *v, enum vreq_op op, uint64_t off, uint64_t len)
{
    struct vreq r = {.op = op, .offset = off, .length = len, .flags = VREQ_MAY_TRIM};
    assert_int_equal(volume_submit_wait(v, &r), 0);
}

static void test_volume_attach(void **state)
{
    (void)state;
    struct bdev *b;
    struct volume *v;
    struct store_cow *c, *c2;
    char path[300];
    uint64_t held = 1;
    int fd = dst_file(SIZE + 4096 * 3, path, sizeof(path));

    assert_int_equal(bdev_memory_open(SIZE + 4096 * 3, 0, &b), 0); /* 16 chunks + 16 KiB */
    assert_int_equal(volume_new("cow/mem", b, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    vwrite(v, 0, 4 * CHUNK, 0x10);
    assert_int_equal(volume_cow_attach(v, fd, CHUNK, &c, &held), 0);
    assert_true(held < 1000000000ull);
    assert_int_equal(c->size, volume_size(v));
    assert_int_equal(volume_cow_attach(v, fd, CHUNK, &c2, NULL), -EBUSY);
    assert_null(c2);
    assert_int_equal(volume_resize(v, CHUNK), -EBUSY); /* shrink: refused */
    assert_int_equal(volume_size(v), SIZE + 4096 * 3);
    /* Writes, a trim and write-zeroes after the instant. */
    vwrite(v, 4096, 4096, 0x20);
    vzero(v, VREQ_TRIM, CHUNK, CHUNK);
    vzero(v, VREQ_WRITE_ZEROES, 2 * CHUNK + 4096, 4096);
    assert_int_equal(atomic_load(&c->copied_by_writes), 3);
    assert_int_equal(store_cow_copy_rest(c), 0);
    assert_int_equal(atomic_load(&c->copied_by_copier), 1); /* chunk 3 */
    assert_int_equal(volume_cow_detach(v, c), 0);
    /* The snapshot file: the volume at the instant. */
    expect_file(fd, 0, 4 * CHUNK, 0x10);
    expect_file(fd, 4 * CHUNK, CHUNK, -1);
    /* After detach: nothing is copied any more, a grow/shrink works. */
    assert_int_equal(volume_resize(v, 8 * CHUNK), 0);
    vwrite(v, 0, 4096, 0x30);
    expect_file(fd, 0, 4096, 0x10);
    assert_int_equal(volume_cow_detach(v, NULL), 0);
    volume_unref(v);
    close(fd);
    unlink(path);
}

static void test_snapshot_file_fails(void **state)
{
    (void)state;
    struct bdev *b;
    struct volume *v;
    struct store_cow *c;
    char path[300];
    int fd = dst_file(SIZE, path, sizeof(path));
    close(fd);
    fd = open(path, O_RDONLY); /* every write to it fails: EBADF */
    assert_true(fd >= 0);

    assert_int_equal(bdev_memory_open(SIZE, 0, &b), 0);
    assert_int_equal(volume_new("cow/bad", b, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    vwrite(v, 0, 2 * CHUNK, 0x40);
    assert_int_equal(volume_cow_attach(v, fd, CHUNK, &c, NULL), 0);
    vwrite(v, 0, 4096, 0x41);                               /* the volume's write still succeeds */
    assert_int_equal(atomic_load(&c->copied_by_writes), 1); /* captured for the copier */
    assert_int_equal(store_cow_copy_rest(c), -EBADF);
    assert_int_equal(store_cow_error(c), -EBADF);
    vwrite(v, CHUNK, 4096, 0x42); /* later writes do not try again */
    assert_int_equal(atomic_load(&c->copied_by_writes), 1);
    assert_int_equal(volume_cow_detach(v, c), -EBADF);
    char got[4096], want[4096];
    struct vreq r = {.op = VREQ_READ, .offset = CHUNK, .length = 4096, .buf = got};
    assert_int_equal(volume_submit_wait(v, &r), 0);
    fill(want, sizeof(want), 0x42);
    assert_memory_equal(got, want, sizeof(want));
    volume_unref(v);
    close(fd);
    unlink(path);
}

/* ---- the copier's queue: bounded, writes wait for a slot, cancel frees them ---- */

#define QCHUNKS (STORE_COW_QUEUE_BYTES / CHUNK)
#define QSIZE ((QCHUNKS + 2) * CHUNK)

struct qwriter {
    struct store_cow *c;
    uint64_t off;
    atomic_bool done;
};

static void *qwriter_main(void *arg)
{
    struct qwriter *w = arg;
    store_cow_before_write(w->c, w->off, 4096);
    atomic_store(&w->done, true);
    return NULL;
}

static void test_queue_bound(void **state)
{
    (void)state;
    struct bdev *b;
    struct store_cow *c;
    char path[300];
    pthread_t th;

    assert_int_equal(bdev_memory_open(QSIZE, 0, &b), 0);
    for (uint64_t i = 0; i < QCHUNKS + 2; i++)
        bwrite(b, i * CHUNK, CHUNK, (unsigned char)i);
    for (int round = 0; round < 2; round++) {
        int fd = dst_file(QSIZE, path, sizeof(path));
        assert_int_equal(store_cow_new(b, fd, QSIZE, CHUNK, &c), 0);
        for (uint64_t i = 0; i < QCHUNKS; i++) /* fills the queue exactly */
            store_cow_before_write(c, i * CHUNK, 4096);
        assert_int_equal(c->q_bytes, STORE_COW_QUEUE_BYTES);
        assert_int_equal(atomic_load(&c->queue_waits), 0);
        /* One more chunk: the write waits for the copier. */
        struct qwriter w = {.c = c, .off = QCHUNKS * CHUNK};
        assert_int_equal(pthread_create(&th, NULL, qwriter_main, &w), 0);
        usleep(200000);
        assert_false(atomic_load(&w.done));
        if (round == 0) {
            assert_int_equal(store_cow_copy_rest(c), 0); /* frees slots, then stops */
            pthread_join(th, NULL);
            assert_true(atomic_load(&w.done));
            assert_int_equal(atomic_load(&c->queue_waits), 1);
            assert_int_equal(c->q_bytes, 0);
            /* Every chunk, captured by writes or copied, holds the old data. */
            expect_file(fd, 0, CHUNK, 0);
            expect_file(fd, QCHUNKS * CHUNK, CHUNK, (unsigned char)QCHUNKS);
            expect_file(fd, (QCHUNKS + 1) * CHUNK, CHUNK, (unsigned char)(QCHUNKS + 1));
        } else {
            store_cow_cancel(c); /* abandoned: the waiting write goes on */
            pthread_join(th, NULL);
            assert_true(atomic_load(&w.done));
        }
        store_cow_free(c);
        close(fd);
        unlink(path);
    }
    bdev_close(b);
}

/* ---- store_snapshot_volume on a file volume under a writer ---- */

#define K 256
#define BS 4096
#define VOL ((uint64_t)64 << 20)

struct writer {
    struct volume *v;
    atomic_bool stop;
    _Atomic uint64_t done; /* last write acknowledged */
    _Atomic uint64_t started;
};

static uint64_t slot_off(unsigned slot)
{
    return (uint64_t)slot * (VOL / K) + BS;
}

static void seq_block(char *buf, uint64_t n, unsigned slot)
{
    memset(buf, 0, BS);
    memcpy(buf, &n, sizeof(n));
    memcpy(buf + 8, &slot, sizeof(slot));
    for (size_t i = 16; i < BS; i += 8)
        memcpy(buf + i, &n, sizeof(n));
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char buf[BS];
    for (uint64_t n = 1; !atomic_load(&w->stop); n++) {
        seq_block(buf, n, (unsigned)(n % K));
        atomic_store(&w->started, n);
        struct vreq r = {.op = VREQ_WRITE, .offset = slot_off(n % K), .length = BS, .buf = buf};
        assert_int_equal(volume_submit_wait(w->v, &r), 0);
        atomic_store(&w->done, n);
    }
    return NULL;
}

static uint64_t expected_seq(unsigned slot, uint64_t m)
{
    if (m < 1)
        return 0;
    uint64_t n = m - ((m - slot) % K);
    return n >= 1 && n <= m ? n : 0;
}

static void snapshot_under_writer(unsigned flags)
{
    char vpath[300], spath[320], buf[BS];
    struct bdev *b;
    struct volume *v;
    struct writer w = {0};
    pthread_t th;
    struct store_snapshot_stats st;

    snprintf(vpath, sizeof(vpath), "%s/vol%d", tmpdir, seq++);
    snprintf(spath, sizeof(spath), "%s@snap", vpath);
    assert_int_equal(bdev_file_create(vpath, VOL, false), 0);
    assert_int_equal(bdev_file_open(vpath, false, &b), 0);
    assert_int_equal(volume_new("cow/file", b, BS, VOLUME_SYNC_STANDARD, false, &v), 0);
    /* Prefill half the volume (so the copier has data to copy), then
     * every slot with sequence 0. */
    char *big = malloc(1 << 20);
    for (uint64_t off = 0; off < VOL / 2; off += 1 << 20) {
        fill(big, 1 << 20, (unsigned char)(off >> 20));
        struct vreq r = {.op = VREQ_WRITE, .offset = off, .length = 1 << 20, .buf = big};
        assert_int_equal(volume_submit_wait(v, &r), 0);
    }
    free(big);
    for (unsigned s = 0; s < K; s++) {
        seq_block(buf, 0, s);
        struct vreq r = {.op = VREQ_WRITE, .offset = slot_off(s), .length = BS, .buf = buf};
        assert_int_equal(volume_submit_wait(v, &r), 0);
    }
    w.v = v;
    assert_int_equal(pthread_create(&th, NULL, writer_main, &w), 0);
    while (atomic_load(&w.done) < 500)
        usleep(1000);
    uint64_t lo = atomic_load(&w.done);
    assert_int_equal(store_snapshot_volume(v, vpath, spath, flags, 16u << 10, NULL, NULL, &st), 0);
    uint64_t hi = atomic_load(&w.started);
    while (atomic_load(&w.done) < hi + 500) /* writes go on after it */
        usleep(1000);
    atomic_store(&w.stop, true);
    pthread_join(th, NULL);
    assert_int_equal(store_snapshot_volume(v, vpath, spath, flags, 0, NULL, NULL, NULL), -EEXIST);

    assert_false(st.reflinked);
    assert_true(st.held_ns < 2000000000ull); /* the writes in flight only, not the copy */
    assert_true(st.chunks_by_copier > 0);
    int fd = open(spath, O_RDONLY);
    assert_true(fd >= 0);
    uint64_t seqs[K], m = 0;
    for (unsigned s = 0; s < K; s++) {
        assert_int_equal(pread(fd, buf, BS, (off_t)slot_off(s)), BS);
        unsigned slot;
        memcpy(&seqs[s], buf, 8);
        memcpy(&slot, buf + 8, sizeof(slot));
        assert_int_equal(slot, s);
        char want[BS];
        seq_block(want, seqs[s], s);
        assert_memory_equal(buf, want, BS); /* not torn */
        if (seqs[s] > m)
            m = seqs[s];
    }
    for (unsigned s = 0; s < K; s++)
        assert_int_equal(seqs[s], expected_seq(s, m)); /* point in time */
    assert_true(m >= lo && m <= hi);
    /* Outside the slots: the prefill, and the unwritten half reads zeros. */
    char *got = malloc(1 << 20), *want = malloc(1 << 20);
    for (uint64_t off = 0; off < VOL / 2; off += 1 << 20) {
        fill(want, 1 << 20, (unsigned char)(off >> 20));
        assert_int_equal(pread(fd, got, 1 << 20, (off_t)off), 1 << 20);
        for (unsigned s = 0; s < K; s++)
            if (slot_off(s) >= off && slot_off(s) < off + (1 << 20))
                memcpy(got + (slot_off(s) - off), want + (slot_off(s) - off), BS);
        assert_memory_equal(got, want, 1 << 20);
    }
    memset(want, 0, 1 << 20);
    assert_int_equal(pread(fd, got, 1 << 20, (off_t)(VOL - (1 << 20))), 1 << 20);
    for (unsigned s = 0; s < K; s++)
        if (slot_off(s) >= VOL - (1 << 20))
            memset(got + (slot_off(s) - (VOL - (1 << 20))), 0, BS);
    assert_memory_equal(got, want, 1 << 20);
    free(got);
    free(want);
    close(fd);
    volume_unref(v);
    unlink(spath);
    unlink(vpath);
}

static void test_snapshot_volume_forced(void **state)
{
    (void)state;
    snapshot_under_writer(STORE_COPY_NO_REFLINK);
}

static void test_snapshot_volume_auto(void **state)
{
    (void)state;
    /* Whatever the filesystem of TMPDIR: reflink or copy-before-write. */
    char vpath[300], spath[320];
    struct bdev *b;
    struct volume *v;
    struct store_snapshot_stats st;
    snprintf(vpath, sizeof(vpath), "%s/vol%d", tmpdir, seq++);
    snprintf(spath, sizeof(spath), "%s@snap", vpath);
    assert_int_equal(bdev_file_create(vpath, VOL, false), 0);
    assert_int_equal(bdev_file_open(vpath, false, &b), 0);
    assert_int_equal(volume_new("cow/auto", b, BS, VOLUME_SYNC_STANDARD, false, &v), 0);
    vwrite(v, 0, 8192, 0x55);
    assert_int_equal(store_snapshot_volume(v, vpath, spath, 0, 0, NULL, NULL, &st), 0);
    assert_int_equal(st.reflinked, store_reflink_probe(tmpdir) == 1);
    vwrite(v, 0, 8192, 0x66);
    int fd = open(spath, O_RDONLY);
    assert_true(fd >= 0);
    expect_file(fd, 0, 8192, 0x55);
    close(fd);
    volume_unref(v);
    unlink(spath);
    unlink(vpath);
    if (store_reflink_probe(tmpdir) == 0)
        snapshot_under_writer(0);
}

static int group_setup(void **state)
{
    (void)state;
    return reactors_start(2) || iopool_start(4) ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    reactors_stop();
    iopool_stop();
    return 0;
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    char made[256], real[4096];
    snprintf(made, sizeof(made), "%s/store-cow-XXXXXX", base);
    if (!mkdtemp(made)) {
        perror("mkdtemp");
        return 1;
    }
    /* Snapshots are made through poolfs: the directory is a pool root
     * (canonical, as pool paths are). */
    if (!realpath(made, real) || strlen(real) >= sizeof(tmpdir) || poolfs_root_add(real) < 0) {
        perror("poolfs_root_add");
        return 1;
    }
    memcpy(tmpdir, real, strlen(real) + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitmap),
        cmocka_unit_test(test_copy_before_write),
        cmocka_unit_test(test_volume_attach),
        cmocka_unit_test(test_snapshot_file_fails),
        cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_snapshot_volume_forced),
        cmocka_unit_test(test_snapshot_volume_auto),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    rmdir(tmpdir);
    return rc;
}
