/*
 * volume_quiesce / volume_resume under load (file and memory volumes):
 *   - writer threads keep a window of WRITE / WRITE_ZEROES requests in
 *     flight (owner NULL) while quiescers repeatedly quiesce and resume;
 *     while quiesced the content cannot change (checked twice per window,
 *     with writers still submitting), no write submitted after the quiesce
 *     returned completes before the resume, writes do get parked, and in
 *     the end every request completed and every block holds its last write;
 *   - two quiescer threads at once (nesting through the counter);
 *   - requests from real reactors park without blocking the reactor and
 *     complete on their owner reactor after the resume, in order;
 *   - nested quiesce: parked until the last resume; reads, flushes keep
 *     flowing; a sync=disabled volume is synced by quiesce anyway.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "core/util.h"
#include "store/volume.h"

#define BS 4096
#define WRITERS 4
#define SLOTS 8
#define NBLOCKS (WRITERS * SLOTS)
#define VOL_SIZE ((uint64_t)8 << 20)

static char tmpdir[256];
static int seq_file;

struct fixture {
    struct volume *v;
    bool is_file;
    int rfd; /* file: an independent reader of the volume's file */
    char path[320];
};

static int open_file(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct bdev *b;

    snprintf(f->path, sizeof(f->path), "%s/vol%d", tmpdir, seq_file++);
    assert_int_equal(bdev_file_create(f->path, VOL_SIZE, false), 0);
    assert_int_equal(bdev_file_open(f->path, false, &b), 0);
    assert_int_equal(volume_new("q/file", b, BS, VOLUME_SYNC_STANDARD, false, &f->v), 0);
    f->is_file = true;
    f->rfd = open(f->path, O_RDONLY);
    assert_true(f->rfd >= 0);
    *state = f;
    return 0;
}

static int open_memory(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    struct bdev *b;

    assert_int_equal(bdev_memory_open(VOL_SIZE, 0, &b), 0);
    assert_int_equal(volume_new("q/mem", b, 512, VOLUME_SYNC_STANDARD, false, &f->v), 0);
    f->rfd = -1;
    *state = f;
    return 0;
}

static int close_vol(void **state)
{
    struct fixture *f = *state;

    volume_unref(f->v);
    if (f->rfd >= 0)
        close(f->rfd);
    if (f->is_file)
        unlink(f->path);
    free(f);
    return 0;
}

/* What the tracked blocks hold right now, read around the volume for a
 * file (the page cache is what a snapshot copy reads) or through it for
 * memory (reads must keep flowing while quiesced). */
static void read_content(struct fixture *f, uint8_t *out)
{
    if (f->is_file) {
        assert_int_equal(pread(f->rfd, out, (size_t)NBLOCKS * BS, 0), (ssize_t)NBLOCKS * BS);
        return;
    }
    struct vreq r = {.op = VREQ_READ, .buf = out, .length = (uint64_t)NBLOCKS * BS};
    assert_int_equal(volume_submit_wait(f->v, &r), 0);
}

static void fill_block(uint8_t *p, uint32_t block, uint32_t seq)
{
    for (size_t i = 0; i < BS; i += 8) {
        memcpy(p + i, &block, 4);
        memcpy(p + i + 4, &seq, 4);
    }
}

/* ---- the hammer ---- */

struct hammer;

struct slot {
    struct vreq r;
    struct hammer *h;
    struct writer *w;
    uint32_t block;
    uint32_t seq;       /* of the request in flight */
    bool zero;          /* the request in flight is a WRITE_ZEROES */
    unsigned sub_phase; /* hammer phase when it was submitted */
    struct slot *next_ready;
    uint8_t buf[BS];
};

struct writer {
    pthread_t th;
    struct hammer *h;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct slot *ready;
    struct slot slots[SLOTS];
    unsigned in_flight;
};

struct hammer {
    struct fixture *f;
    struct writer w[WRITERS];
    atomic_bool stop;
    /* Odd while the (single) quiescer holds the volume still. */
    atomic_uint phase;
    bool check_phase;
    atomic_uint_fast64_t submitted, completed, errors, early;
    atomic_uint_fast64_t parked_seen, windows;
    /* Last completed content of each block: seq, or 0 after a zeroing. */
    uint32_t last_seq[NBLOCKS];
    bool last_zero[NBLOCKS];
    /* The last 4 completed requests of each block, newest first, for the
     * report of a mismatch: seq, HIST_ZERO and HIST_FUA bits. */
    uint32_t hist[NBLOCKS][4];
};

#define HIST_ZERO (1u << 30)
#define HIST_FUA (1u << 31)

static void slot_done(struct vreq *r)
{
    struct slot *s = container_of(r, struct slot, r);
    struct hammer *h = s->h;
    struct writer *w = s->w;

    if (r->result != 0)
        atomic_fetch_add(&h->errors, 1);
    /* Submitted while quiesced and done before that window ended: the
     * request ran during the quiesce. */
    if (h->check_phase && (s->sub_phase & 1) && atomic_load(&h->phase) == s->sub_phase)
        atomic_fetch_add(&h->early, 1);
    h->last_seq[s->block] = s->seq;
    h->last_zero[s->block] = s->zero;
    memmove(&h->hist[s->block][1], &h->hist[s->block][0], 3 * sizeof(uint32_t));
    h->hist[s->block][0] =
        s->seq | (s->zero ? HIST_ZERO : 0) | (s->r.flags & VREQ_FUA ? HIST_FUA : 0);
    atomic_fetch_add(&h->completed, 1);
    pthread_mutex_lock(&w->lock);
    s->next_ready = w->ready;
    w->ready = s;
    w->in_flight--;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void slot_submit(struct hammer *h, struct slot *s)
{
    s->seq++;
    s->zero = s->seq % 7 == 0;
    fill_block(s->buf, s->block, s->seq);
    s->r = (struct vreq){.op = s->zero ? VREQ_WRITE_ZEROES : VREQ_WRITE,
                         .buf = s->zero ? NULL : s->buf,
                         .offset = (uint64_t)s->block * BS,
                         .length = BS,
                         .flags = s->seq % 5 == 0 ? VREQ_FUA : 0,
                         .owner = NULL,
                         .done = slot_done};
    s->sub_phase = atomic_load(&h->phase);
    atomic_fetch_add(&h->submitted, 1);
    volume_submit(h->f->v, &s->r);
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct hammer *h = w->h;

    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->ready && !(atomic_load(&h->stop) && w->in_flight == 0))
            pthread_cond_wait(&w->cond, &w->lock);
        if (atomic_load(&h->stop)) {
            if (w->in_flight == 0)
                break;
            w->ready = NULL; /* stop refilling; wait for the rest */
            continue;
        }
        struct slot *s = w->ready;
        w->ready = s->next_ready;
        w->in_flight++;
        pthread_mutex_unlock(&w->lock);
        slot_submit(h, s);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void hammer_start(struct hammer *h, struct fixture *f, bool check_phase)
{
    memset(h, 0, sizeof(*h));
    h->f = f;
    h->check_phase = check_phase;
    for (int i = 0; i < WRITERS; i++) {
        struct writer *w = &h->w[i];
        w->h = h;
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        for (int j = 0; j < SLOTS; j++) {
            struct slot *s = &w->slots[j];
            s->h = h;
            s->w = w;
            s->block = (uint32_t)(i * SLOTS + j);
            s->next_ready = w->ready;
            w->ready = s;
        }
    }
    for (int i = 0; i < WRITERS; i++)
        assert_int_equal(pthread_create(&h->w[i].th, NULL, writer_main, &h->w[i]), 0);
}

/* A block that does not hold its last write (seen under a loaded CI run:
 * a writer's slot had starved, so the block was never written): what it
 * holds, what the block's last requests were, whether a second read agrees, and the file's extents
 * (an unwritten extent reads as zeros). To stderr, before the assertion. */
static void report_block(struct hammer *h, const uint8_t *got, uint32_t b)
{
    uint32_t gb, gs, again_seq = 0;
    uint8_t again[BS];
    char cmd[400];

    memcpy(&gb, got, 4);
    memcpy(&gs, got + 4, 4);
    if (pread(h->f->rfd, again, BS, (off_t)b * BS) == BS)
        memcpy(&again_seq, again + 4, 4);
    fprintf(stderr,
            "block %u holds block %u seq %u (read again: seq %u); its last requests, newest "
            "first (seq | 0x40000000 zeroes | 0x80000000 FUA): %08x %08x %08x %08x\n",
            b, gb, gs, again_seq, h->hist[b][0], h->hist[b][1], h->hist[b][2], h->hist[b][3]);
    if (h->f->is_file) {
        snprintf(cmd, sizeof(cmd), "filefrag -v '%s' >&2", h->f->path);
        if (system(cmd) != 0)
            fprintf(stderr, "(filefrag failed)\n");
    }
}

static void hammer_finish(struct hammer *h)
{
    atomic_store(&h->stop, true);
    for (int i = 0; i < WRITERS; i++) {
        pthread_mutex_lock(&h->w[i].lock);
        pthread_cond_signal(&h->w[i].cond);
        pthread_mutex_unlock(&h->w[i].lock);
    }
    for (int i = 0; i < WRITERS; i++) {
        pthread_join(h->w[i].th, NULL);
        pthread_cond_destroy(&h->w[i].cond);
        pthread_mutex_destroy(&h->w[i].lock);
    }
    /* No request lost: every one submitted came back, successfully. */
    assert_int_equal(atomic_load(&h->submitted), atomic_load(&h->completed));
    assert_int_equal(atomic_load(&h->errors), 0);
    assert_int_equal(atomic_load(&h->early), 0);
    assert_int_equal(volume_parked_count(h->f->v), 0);

    /* And each block holds its last write. */
    uint8_t *got = malloc((size_t)NBLOCKS * BS), expect[BS];
    read_content(h->f, got);
    for (uint32_t b = 0; b < NBLOCKS; b++) {
        /* never written (a slot starved on a loaded machine) or zeroed last */
        if (h->last_zero[b] || h->last_seq[b] == 0)
            memset(expect, 0, BS);
        else
            fill_block(expect, b, h->last_seq[b]);
        if (memcmp(got + (size_t)b * BS, expect, BS) != 0)
            report_block(h, got + (size_t)b * BS, b);
        assert_memory_equal(got + (size_t)b * BS, expect, BS);
    }
    free(got);
    print_message("%llu requests, %llu quiesce windows, %llu parked seen\n",
                  (unsigned long long)atomic_load(&h->submitted),
                  (unsigned long long)atomic_load(&h->windows),
                  (unsigned long long)atomic_load(&h->parked_seen));
}

/* Wait until the writers have made progress (they are running). */
static void wait_progress(struct hammer *h, uint64_t n)
{
    uint64_t start = atomic_load(&h->completed);
    for (int i = 0; i < 5000 && atomic_load(&h->completed) < start + n; i++)
        usleep(1000);
}

/* One quiesce window: content still twice, writers parked meanwhile. */
static void quiesce_window(struct hammer *h, uint8_t *a, uint8_t *b, bool bump_phase)
{
    struct fixture *f = h->f;

    assert_int_equal(volume_quiesce(f->v), 0);
    if (bump_phase)
        atomic_fetch_add(&h->phase, 1);
    read_content(f, a);
    /* Let the writers come back and park; they are not blocked, just
     * not served. */
    for (int i = 0; i < 200 && volume_parked_count(f->v) < WRITERS; i++)
        usleep(500);
    size_t parked = volume_parked_count(f->v);
    usleep(2000);
    read_content(f, b);
    assert_memory_equal(a, b, (size_t)NBLOCKS * BS);
    atomic_fetch_add(&h->parked_seen, parked);
    atomic_fetch_add(&h->windows, 1);
    if (bump_phase)
        atomic_fetch_add(&h->phase, 1);
    volume_resume(f->v);
}

static void test_hammer(void **state)
{
    struct fixture *f = *state;
    struct hammer *h = calloc(1, sizeof(*h));
    uint8_t *a = malloc((size_t)NBLOCKS * BS), *b = malloc((size_t)NBLOCKS * BS);

    hammer_start(h, f, true);
    for (int round = 0; round < 30; round++) {
        wait_progress(h, 50);
        quiesce_window(h, a, b, true);
    }
    wait_progress(h, 50);
    hammer_finish(h);
    assert_true(atomic_load(&h->parked_seen) > 0);
    free(a);
    free(b);
    free(h);
}

struct quiescer {
    pthread_t th;
    struct hammer *h;
};

static void *quiescer_main(void *arg)
{
    struct quiescer *q = arg;
    uint8_t *a = malloc((size_t)NBLOCKS * BS), *b = malloc((size_t)NBLOCKS * BS);

    for (int round = 0; round < 20; round++) {
        wait_progress(q->h, 20);
        quiesce_window(q->h, a, b, false);
    }
    free(a);
    free(b);
    return NULL;
}

/* Two quiescers whose windows overlap: each one's window is still. */
static void test_hammer_two_quiescers(void **state)
{
    struct fixture *f = *state;
    struct hammer *h = calloc(1, sizeof(*h));
    struct quiescer q[2];

    hammer_start(h, f, false);
    for (int i = 0; i < 2; i++) {
        q[i].h = h;
        assert_int_equal(pthread_create(&q[i].th, NULL, quiescer_main, &q[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(q[i].th, NULL);
    wait_progress(h, 50);
    hammer_finish(h);
    free(h);
}

/* ---- reactors ---- */

#define RBATCH 32

struct rbatch {
    struct reactor_msg start, ping;
    struct reactor *owner;
    struct volume *v;
    struct vreq req[RBATCH];
    uint8_t data[RBATCH][BS];
    atomic_int left, wrong_thread, errors, order_breaks, last_index;
    sem_t done, pinged;
};

static void rbatch_done(struct vreq *r)
{
    struct rbatch *b = r->arg;
    int idx = (int)(r - b->req);

    if (reactor_self() != b->owner)
        atomic_fetch_add(&b->wrong_thread, 1);
    if (r->result != 0)
        atomic_fetch_add(&b->errors, 1);
    if (idx < atomic_load(&b->last_index))
        atomic_fetch_add(&b->order_breaks, 1);
    atomic_store(&b->last_index, idx);
    if (atomic_fetch_sub(&b->left, 1) == 1)
        sem_post(&b->done);
}

static void rbatch_start(struct reactor_msg *m)
{
    struct rbatch *b = container_of(m, struct rbatch, start);

    for (int i = 0; i < RBATCH; i++) {
        b->req[i] = (struct vreq){.op = VREQ_WRITE,
                                  .buf = b->data[i],
                                  .length = BS,
                                  .offset = (uint64_t)i * BS,
                                  .owner = b->owner,
                                  .done = rbatch_done,
                                  .arg = b};
        volume_submit(b->v, &b->req[i]);
    }
}

static void rbatch_ping(struct reactor_msg *m)
{
    struct rbatch *b = container_of(m, struct rbatch, ping);
    sem_post(&b->pinged);
}

static void test_reactor_writes_park(void **state)
{
    struct fixture *f = *state;
    struct rbatch *b = calloc(1, sizeof(*b));
    uint8_t *before = malloc((size_t)NBLOCKS * BS), *after = malloc((size_t)NBLOCKS * BS);

    sem_init(&b->done, 0, 0);
    sem_init(&b->pinged, 0, 0);
    b->owner = reactor_get(1);
    b->v = f->v;
    atomic_store(&b->left, RBATCH);
    for (int i = 0; i < RBATCH; i++)
        fill_block(b->data[i], (uint32_t)i, 1000u + (uint32_t)i);

    assert_int_equal(volume_quiesce(f->v), 0);
    read_content(f, before);
    b->start.fn = rbatch_start;
    reactor_post(b->owner, &b->start);
    for (int i = 0; i < 5000 && volume_parked_count(f->v) < RBATCH; i++)
        usleep(1000);
    assert_int_equal(volume_parked_count(f->v), RBATCH);
    /* The reactor is free: it runs another message meanwhile. */
    b->ping.fn = rbatch_ping;
    reactor_post(b->owner, &b->ping);
    sem_wait(&b->pinged);
    usleep(5000);
    assert_int_equal(atomic_load(&b->left), RBATCH);
    read_content(f, after);
    assert_memory_equal(before, after, (size_t)NBLOCKS * BS);

    volume_resume(f->v);
    sem_wait(&b->done);
    assert_int_equal(atomic_load(&b->wrong_thread), 0);
    assert_int_equal(atomic_load(&b->errors), 0);
    /* Released in arrival order; the memory backend completes inline, so
     * its completions keep that order too. */
    if (!f->is_file)
        assert_int_equal(atomic_load(&b->order_breaks), 0);
    read_content(f, after);
    for (int i = 0; i < RBATCH; i++)
        assert_memory_equal(after + (size_t)i * BS, b->data[i], BS);
    sem_destroy(&b->done);
    sem_destroy(&b->pinged);
    free(before);
    free(after);
    free(b);
}

/* ---- nesting, reads, flushes ---- */

struct one {
    sem_t done;
    atomic_int fired;
};

static void one_done(struct vreq *r)
{
    struct one *o = r->arg;
    atomic_fetch_add(&o->fired, 1);
    sem_post(&o->done);
}

static void test_nested(void **state)
{
    struct fixture *f = *state;
    uint8_t wbuf[BS], rbuf[BS];
    struct one o;
    struct vreq w = {
        .op = VREQ_WRITE, .buf = wbuf, .length = BS, .offset = 3 * BS, .done = one_done, .arg = &o};
    struct vreq t = {
        .op = VREQ_WRITE_ZEROES, .length = BS, .offset = 4 * BS, .done = one_done, .arg = &o};

    sem_init(&o.done, 0, 0);
    atomic_init(&o.fired, 0);
    fill_block(wbuf, 3, 77);
    assert_int_equal(volume_quiesce(f->v), 0);
    assert_int_equal(volume_quiesce(f->v), 0);
    volume_submit(f->v, &w);
    volume_submit(f->v, &t);
    assert_int_equal(volume_parked_count(f->v), 2);
    /* Reads and flushes are not held. */
    struct vreq r = {.op = VREQ_READ, .buf = rbuf, .length = BS, .offset = 3 * BS};
    assert_int_equal(volume_submit_wait(f->v, &r), 0);
    assert_int_equal(volume_flush_wait(f->v), 0);
    volume_resume(f->v);
    usleep(10000);
    assert_int_equal(atomic_load(&o.fired), 0);
    assert_int_equal(volume_parked_count(f->v), 2);
    volume_resume(f->v);
    sem_wait(&o.done);
    sem_wait(&o.done);
    assert_int_equal(w.result, 0);
    assert_int_equal(t.result, 0);
    assert_int_equal(volume_parked_count(f->v), 0);
    r.offset = 3 * BS;
    assert_int_equal(volume_submit_wait(f->v, &r), 0);
    assert_memory_equal(rbuf, wbuf, BS);
    /* Resubmission re-checks: a write parked on a volume made read-only
     * meanwhile fails with EPERM. */
    assert_int_equal(volume_quiesce(f->v), 0);
    volume_submit(f->v, &w);
    volume_set_readonly(f->v, true);
    volume_resume(f->v);
    sem_wait(&o.done);
    assert_int_equal(w.result, -EPERM);
    volume_set_readonly(f->v, false);
    sem_destroy(&o.done);
}

/* Quiesce syncs even when FLUSH would not (sync=disabled). */
static void test_sync_disabled_still_synced(void **state)
{
    struct fixture *f = *state;
    uint8_t buf[BS];
    struct vreq w = {.op = VREQ_WRITE, .buf = buf, .length = BS};

    memset(buf, 0x5a, sizeof(buf));
    volume_set_sync(f->v, VOLUME_SYNC_DISABLED);
    assert_int_equal(volume_submit_wait(f->v, &w), 0);
    uint64_t syncs = volume_sync_calls(f->v);
    assert_int_equal(volume_flush_wait(f->v), 0);
    assert_int_equal(volume_sync_calls(f->v), syncs);
    assert_int_equal(volume_quiesce(f->v), 0);
    assert_true(volume_sync_calls(f->v) > syncs);
    volume_resume(f->v);
    volume_set_sync(f->v, VOLUME_SYNC_STANDARD);
}

static int group_setup(void **state)
{
    (void)state;
    if (reactors_start(2) || iopool_start(4))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    reactors_stop();
    iopool_stop();
    return 0;
}

#define BOTH(fn)                                                                                   \
    cmocka_unit_test_setup_teardown(fn, open_file, close_vol),                                     \
        cmocka_unit_test_setup_teardown(fn, open_memory, close_vol)

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

    snprintf(tmpdir, sizeof(tmpdir), "%s/store-quiesce-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        BOTH(test_nested), BOTH(test_sync_disabled_still_synced), BOTH(test_reactor_writes_park),
        BOTH(test_hammer), BOTH(test_hammer_two_quiescers),
    };
    int rc = cmocka_run_group_tests(tests, group_setup, group_teardown);
    rmdir(tmpdir);
    return rc;
}
