/*
 * Group-commit correctness under many threads. A test-only bdev wraps the
 * real file backend and records:
 *   - for every write, the number of syncs that had *started* when the
 *     write returned (w_seen): a sync numbered > w_seen started after it;
 *   - for every sync, its number, and the highest number of a finished one.
 * Each thread writes a unique pattern, notes the highest w_seen of every
 * write acknowledged so far by any thread (M), then flushes. When the flush
 * is acknowledged, some sync numbered > M must have finished — else a write
 * acknowledged before the flush was not covered. The same check run on a
 * sync=disabled volume must report violations, which shows it can fail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/iopool.h"
#include "store/volume.h"

#define THREADS 16
#define ROUNDS 40
#define SLOT 4096
#define VOL_SIZE ((uint64_t)THREADS * SLOT * 4)

struct spy {
    struct bdev base;
    struct bdev *inner;
    atomic_uint_fast64_t syncs_started;
    atomic_uint_fast64_t max_sync_finished;
    atomic_uint_fast64_t w_seen[VOL_SIZE / SLOT];
    atomic_int fail_syncs; /* the next this many syncs fail with -ETIMEDOUT */
};

static struct spy *to_spy(struct bdev *b)
{
    return (struct spy *)b;
}

static void atomic_max(atomic_uint_fast64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);
    while (cur < v && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

static int spy_read(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    return to_spy(b)->inner->ops->read(to_spy(b)->inner, buf, len, off);
}

static int spy_write(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    struct spy *s = to_spy(b);
    int rc = s->inner->ops->write(s->inner, buf, len, off);
    if (rc == 0)
        atomic_store(&s->w_seen[off / SLOT], atomic_load(&s->syncs_started));
    return rc;
}

static int spy_sync(struct bdev *b)
{
    struct spy *s = to_spy(b);
    uint64_t n = atomic_fetch_add(&s->syncs_started, 1) + 1;
    if (atomic_load(&s->fail_syncs) > 0) {
        atomic_fetch_sub(&s->fail_syncs, 1);
        return -ETIMEDOUT; /* a remote backend that did not answer */
    }
    int rc = s->inner->ops->sync(s->inner);
    if (rc == 0)
        atomic_max(&s->max_sync_finished, n);
    return rc;
}

static void spy_close(struct bdev *b)
{
    struct spy *s = to_spy(b);
    bdev_close(s->inner);
    free(s);
}

/* "Would block" every time: every request takes the I/O pool path. */
static int spy_read_nowait(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    return -EAGAIN;
}

static int spy_write_nowait(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    return -EAGAIN;
}

static const struct bdev_ops spy_ops = {
    .name = "spy",
    .read = spy_read,
    .read_nowait = spy_read_nowait,
    .write = spy_write,
    .write_nowait = spy_write_nowait,
    .sync = spy_sync,
    .close = spy_close,
};

static char tmpdir[256];

static struct volume *spy_volume(enum volume_sync mode, struct spy **out)
{
    static int seq;
    char path[320];
    snprintf(path, sizeof(path), "%s/gc%d", tmpdir, seq++);
    struct spy *s = calloc(1, sizeof(*s));
    assert_int_equal(bdev_file_create(path, VOL_SIZE, false), 0);
    assert_int_equal(bdev_file_open(path, false, &s->inner), 0);
    unlink(path);
    s->base.ops = &spy_ops;
    s->base.size = VOL_SIZE;
    s->base.caps = s->inner->caps;
    struct volume *v;
    assert_int_equal(volume_new("t/gc", &s->base, 4096, mode, false, &v), 0);
    *out = s;
    return v;
}

struct run {
    struct volume *v;
    struct spy *s;
    atomic_uint_fast64_t acked_max; /* highest w_seen of any acknowledged write */
    atomic_int violations;
    atomic_int flushes;
    atomic_int errors;
    bool fua; /* FUA writes instead of write + flush */
};

struct worker {
    struct run *run;
    int id;
};

static void pattern(uint8_t *p, int id, int round)
{
    for (int i = 0; i < SLOT; i++)
        p[i] = (uint8_t)(id * 31 + round * 7 + i);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *run = w->run;
    uint8_t buf[SLOT];
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t off = (uint64_t)(w->id * 2 + (round & 1)) * SLOT;
        pattern(buf, w->id, round);
        struct vreq r = {.op = VREQ_WRITE,
                         .buf = buf,
                         .length = SLOT,
                         .offset = off,
                         .flags = run->fua ? VREQ_FUA : 0};
        if (volume_submit_wait(run->v, &r) != 0) {
            atomic_fetch_add(&run->errors, 1);
            continue;
        }
        uint64_t mine = atomic_load(&run->s->w_seen[off / SLOT]);
        if (run->fua) {
            /* The write itself must be durable by now. */
            if (atomic_load(&run->s->max_sync_finished) <= mine)
                atomic_fetch_add(&run->violations, 1);
            continue;
        }
        atomic_max(&run->acked_max, mine);
        uint64_t must_cover = atomic_load(&run->acked_max);
        struct vreq f = {.op = VREQ_FLUSH};
        if (volume_submit_wait(run->v, &f) != 0) {
            atomic_fetch_add(&run->errors, 1);
            continue;
        }
        atomic_fetch_add(&run->flushes, 1);
        if (atomic_load(&run->s->max_sync_finished) <= must_cover)
            atomic_fetch_add(&run->violations, 1);
    }
    return NULL;
}

static void run_threads(struct run *run)
{
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){.run = run, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
}

static void verify_data(struct volume *v)
{
    uint8_t got[SLOT], want[SLOT];
    for (int id = 0; id < THREADS; id++)
        for (int parity = 0; parity < 2; parity++) {
            int last = ROUNDS - 1; /* the last round that wrote this slot */
            if ((last & 1) != parity)
                last--;
            pattern(want, id, last);
            struct vreq r = {.op = VREQ_READ,
                             .buf = got,
                             .length = SLOT,
                             .offset = (uint64_t)(id * 2 + parity) * SLOT};
            assert_int_equal(volume_submit_wait(v, &r), 0);
            assert_memory_equal(got, want, SLOT);
        }
}

static void test_flush_covers_acked_writes(void **state)
{
    struct run run = {0};
    run.v = spy_volume(VOLUME_SYNC_STANDARD, &run.s);
    run_threads(&run);
    assert_int_equal(atomic_load(&run.errors), 0);
    assert_int_equal(atomic_load(&run.violations), 0);
    assert_int_equal(atomic_load(&run.flushes), THREADS * ROUNDS);
    /* A slot's sync may still be running when the last flush is answered
     * (its flushes were covered by another slot's sync meanwhile); the
     * volume counts it when it returns. */
    uint64_t started = atomic_load(&run.s->syncs_started);
    for (int i = 0; i < 500 && volume_sync_calls(run.v) != started; i++)
        usleep(10 * 1000);
    uint64_t syncs = volume_sync_calls(run.v);
    print_message("%d flushes shared %llu syncs\n", THREADS * ROUNDS, (unsigned long long)syncs);
    /* Sharing is the point: 16 threads flushing at once never need one
     * fdatasync each. */
    assert_true(syncs < (uint64_t)THREADS * ROUNDS);
    assert_int_equal(syncs, atomic_load(&run.s->syncs_started));
    verify_data(run.v);
    volume_unref(run.v);
}

static void test_fua_and_always(void **state)
{
    struct run run = {.fua = true};
    run.v = spy_volume(VOLUME_SYNC_STANDARD, &run.s);
    run_threads(&run);
    assert_int_equal(atomic_load(&run.errors), 0);
    assert_int_equal(atomic_load(&run.violations), 0);
    verify_data(run.v);
    volume_unref(run.v);

    struct run always = {0};
    always.v = spy_volume(VOLUME_SYNC_ALWAYS, &always.s);
    always.fua = true; /* same check: every write durable on completion */
    run_threads(&always);
    assert_int_equal(atomic_load(&always.violations), 0);
    volume_unref(always.v);
}

static void test_without_group_commit(void **state)
{
    struct run run = {0};
    run.v = spy_volume(VOLUME_SYNC_STANDARD, &run.s);
    volume_set_group_commit(run.v, false);
    run_threads(&run);
    assert_int_equal(atomic_load(&run.violations), 0);
    /* One sync per flush. */
    assert_int_equal(volume_sync_calls(run.v), THREADS * ROUNDS);
    volume_unref(run.v);
}

/* Negative control: sync=disabled acknowledges flushes without any sync,
 * and the checker must notice. */
static void test_checker_detects_missing_sync(void **state)
{
    struct run run = {0};
    run.v = spy_volume(VOLUME_SYNC_DISABLED, &run.s);
    run_threads(&run);
    assert_int_equal(atomic_load(&run.errors), 0);
    assert_int_equal(atomic_load(&run.violations), THREADS * ROUNDS);
    volume_unref(run.v);
}

/* A failed sync: sticky for a backend that may have dropped dirty data
 * (a file: fdatasync's error), only for the flushes it covered with
 * BDEV_SYNC_RETRIABLE (RBD with no client cache), whose next flush makes
 * the same write durable. Both with group commit on and off. */
static void sync_failure(bool retriable, bool group_commit)
{
    char buf[SLOT];
    struct spy *s;
    struct volume *v = spy_volume(VOLUME_SYNC_STANDARD, &s);

    if (retriable)
        s->base.caps |= BDEV_SYNC_RETRIABLE;
    volume_set_group_commit(v, group_commit);
    memset(buf, 0x5a, sizeof(buf));
    struct vreq w = {.op = VREQ_WRITE, .offset = 0, .length = SLOT, .buf = buf};
    assert_int_equal(volume_submit_wait(v, &w), 0);
    atomic_store(&s->fail_syncs, 1);
    assert_int_equal(volume_flush_wait(v), -ETIMEDOUT);
    if (retriable) {
        assert_int_equal(volume_flush_wait(v), 0);
        assert_true(atomic_load(&s->max_sync_finished) > atomic_load(&s->w_seen[0]));
        w = (struct vreq){.op = VREQ_WRITE, .offset = SLOT, .length = SLOT, .buf = buf};
        assert_int_equal(volume_submit_wait(v, &w), 0);
        assert_int_equal(volume_flush_wait(v), 0);
    } else {
        assert_int_equal(volume_flush_wait(v), -ETIMEDOUT);
    }
    volume_unref(v);
}

static void test_sync_failure_sticky(void **state)
{
    sync_failure(false, true);
    sync_failure(false, false);
}

static void test_sync_failure_retriable(void **state)
{
    sync_failure(true, true);
    sync_failure(true, false);
}

static int group_setup(void **state)
{
    return iopool_start(8) ? -1 : 0;
}

static int group_teardown(void **state)
{
    iopool_stop();
    return 0;
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/store-gc-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flush_covers_acked_writes),
        cmocka_unit_test(test_fua_and_always),
        cmocka_unit_test(test_without_group_commit),
        cmocka_unit_test(test_checker_detects_missing_sync),
        cmocka_unit_test(test_sync_failure_sticky),
        cmocka_unit_test(test_sync_failure_retriable),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    rmdir(tmpdir);
    return rc;
}
