/*
 * Volumes: async dispatch of block requests and group-commit flush.
 *
 * Dispatch: reads and writes are tried inline with the backend's *_nowait
 * call when the caller is a reactor (a page-cache hit never leaves the
 * reactor); on -EAGAIN, or off a reactor, they go to the I/O pool. Backends
 * that never block (memory) run inline everywhere. Flush, trim, zeroing,
 * cache and extents always go to the pool. Completion runs done() on
 * r->owner (posted if we are elsewhere), or on any thread when owner is NULL.
 *
 * Group commit: writes_done counts completed modifying requests (it is
 * bumped before the request's done() runs). A flush records that count as
 * its target; a sync job that read the count as `start` *before* calling
 * bdev sync covers every write counted up to start, so when it returns,
 * every waiting flush with target <= start is complete. A flush waits for a
 * running sync whose start already covers it, and only launches a new one
 * if none does (at most VOLUME_SYNC_PARALLEL at once), so concurrent
 * flushes share fdatasync calls. FUA writes and sync=always writes wait the
 * same way with their own count as target.
 *
 * Quiesce (snapshots): modifying requests check quiesce_count once, after
 * registering as in flight (mod_enter). The quiescer raises the count
 * first and then drains the in-flight ones, so each request either sees
 * the count and parks, or is seen by the drain (both sides are seq_cst:
 * a Dekker handshake). Parked requests wait on a FIFO, holding no thread;
 * the last volume_resume resubmits them.
 *
 * Snapshot copies (store/cow.h): while one is attached, v->cow is set and
 * every modifying request loads it (seq_cst, after registering as in
 * flight, like quiesce_count): none attached costs one load and one
 * predictable branch. A write whose chunks are all copied goes on as usual
 * (lock-free bitmap loads); otherwise it skips the reactor's inline
 * attempt and the write queue and runs as its own I/O pool job, where
 * vreq_execute copies the old data first. Attach happens under a brief hold (no sync) so that every
 * request that may modify the file after it has seen the pointer; detach clears it and drains the
 * requests that may still use it, like a shrink.
 */
#include "store/volume.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "store/cow.h"

/* Syncs that may run at once on one volume. One would be enough to share
 * fdatasync calls, but then a flush arriving just after a sync started
 * waits for two; letting a few overlap keeps latency near one sync while
 * the kernel still merges the device cache flushes. */
#define VOLUME_SYNC_PARALLEL 4

struct sync_slot {
    struct io_job job;  /* synchronous backends: the sync on the I/O pool */
    struct bdev_io bio; /* backends with submit(): an asynchronous FLUSH */
    struct volume *vol;
    uint64_t start; /* writes_done when this sync was launched */
    bool busy;
};

/* A log line at most once per period, counting the events it leaves out
 * (note_due). */
struct note_limit {
    _Atomic uint64_t count, logged_ns;
};

struct volume {
    atomic_uint refs;
    struct bdev *bdev;
    _Atomic uint64_t size;
    _Atomic uint64_t size_gen;
    uint32_t block_size;
    atomic_int sync_mode;
    atomic_bool readonly;
    atomic_bool group_commit;

    /* Group commit. writes_done and sync_calls are atomics so the hot path
     * never takes the lock; the rest is protected by gc_lock. */
    _Atomic uint64_t writes_done;
    _Atomic uint64_t sync_calls;
    pthread_mutex_t gc_lock;
    uint64_t synced;      /* every write counted up to here is durable */
    uint64_t started_max; /* highest start of any sync launched */
    int sync_error;       /* sticky: after a failed fdatasync nothing is durable */
    bool sync_failing;    /* BDEV_SYNC_RETRIABLE: the last sync failed (logged once) */
    unsigned syncs_running;
    struct vreq *waiters;
    struct sync_slot slots[VOLUME_SYNC_PARALLEL];

    /* Modifying requests in flight, per resize epoch parity: a shrink
     * waits for the ones that may have seen the old size. */
    atomic_uint resize_epoch;
    atomic_uint_fast64_t inflight_mod[2];
    pthread_mutex_t resize_lock; /* also serializes the drains of quiesce */

    /* Quiesce: the count is read lock-free on the hot path but changed
     * only under quiesce_lock, which also guards the FIFO of parked
     * requests (linked through next_waiter). */
    atomic_uint quiesce_count;
    pthread_mutex_t quiesce_lock;
    struct vreq *parked_head, **parked_tail;
    size_t parked;

    /* Slow writes (slow_write_note) and failed requests (io_error_note):
     * rate-limited log lines (note_due). */
    struct note_limit slow_notes, error_notes;

    /* The snapshot being copied out of this volume, or NULL. */
    _Atomic(struct store_cow *) cow;

    /* Pool-bound writes (write_queue_add), linked through batch_next. */
    pthread_mutex_t wq_lock;
    struct vreq *wq_head, *wq_tail;
    bool wq_running;
    struct io_job wq_job;
    struct io_job final_job; /* volume_free_on_pool */
    char name[];
};

static void sync_job_run(struct io_job *j);
static void sync_job_done(struct reactor_msg *m);
static void sync_slot_go(struct volume *v, struct sync_slot *s);
static void write_queue_run(struct io_job *j);
static void write_queue_done(struct reactor_msg *m);

/* ---- properties ---- */

int volume_sync_parse(const char *s, enum volume_sync *out)
{
    if (!s)
        return -EINVAL;
    if (!strcasecmp(s, "standard"))
        *out = VOLUME_SYNC_STANDARD;
    else if (!strcasecmp(s, "always"))
        *out = VOLUME_SYNC_ALWAYS;
    else if (!strcasecmp(s, "disabled"))
        *out = VOLUME_SYNC_DISABLED;
    else
        return -EINVAL;
    return 0;
}

const char *volume_sync_name(enum volume_sync s)
{
    switch (s) {
    case VOLUME_SYNC_STANDARD:
        return "STANDARD";
    case VOLUME_SYNC_ALWAYS:
        return "ALWAYS";
    case VOLUME_SYNC_DISABLED:
        return "DISABLED";
    }
    return "UNKNOWN";
}

static bool block_size_ok(uint32_t bs)
{
    return bs >= 512 && bs <= 128 * 1024 && (bs & (bs - 1)) == 0;
}

int volume_new(const char *name, struct bdev *b, uint32_t block_size, enum volume_sync sync,
               bool readonly, struct volume **out)
{
    *out = NULL;
    if (!b || !block_size_ok(block_size) || (unsigned)sync > VOLUME_SYNC_DISABLED)
        return -EINVAL;
    if (!name)
        name = "";
    size_t nlen = strlen(name);
    struct volume *v = calloc(1, sizeof(*v) + nlen + 1);
    if (!v)
        return -ENOMEM;
    memcpy(v->name, name, nlen + 1);
    atomic_init(&v->refs, 1);
    v->bdev = b;
    atomic_init(&v->size, b->size);
    atomic_init(&v->size_gen, 0);
    v->block_size = block_size;
    atomic_init(&v->sync_mode, (int)sync);
    atomic_init(&v->readonly, readonly || b->readonly);
    atomic_init(&v->group_commit, true);
    /* writes_done starts ahead of synced so the first flush always syncs:
     * writes from before this open may still sit in the page cache. */
    atomic_init(&v->writes_done, 1);
    atomic_init(&v->sync_calls, 0);
    v->synced = 0;
    pthread_mutex_init(&v->gc_lock, NULL);
    pthread_mutex_init(&v->resize_lock, NULL);
    pthread_mutex_init(&v->quiesce_lock, NULL);
    pthread_mutex_init(&v->wq_lock, NULL);
    v->wq_job.run = write_queue_run;
    v->wq_job.done.fn = write_queue_done;
    atomic_init(&v->quiesce_count, 0);
    atomic_init(&v->cow, NULL);
    v->parked_head = NULL;
    v->parked_tail = &v->parked_head;
    /* Set once: a job is resubmitted while the pool may still be reading
     * these fields from its previous run. */
    for (unsigned i = 0; i < VOLUME_SYNC_PARALLEL; i++) {
        v->slots[i].vol = v;
        v->slots[i].job.run = sync_job_run;
        v->slots[i].job.owner = NULL;
        v->slots[i].job.done.fn = sync_job_done;
    }
    *out = v;
    return 0;
}

void volume_ref(struct volume *v)
{
    atomic_fetch_add_explicit(&v->refs, 1, memory_order_relaxed);
}

static void volume_free(struct volume *v)
{
    bdev_close(v->bdev);
    pthread_mutex_destroy(&v->gc_lock);
    pthread_mutex_destroy(&v->resize_lock);
    pthread_mutex_destroy(&v->quiesce_lock);
    pthread_mutex_destroy(&v->wq_lock);
    free(v);
}

static void volume_final_run(struct io_job *j)
{
}

/* After the job: the pool no longer touches it. */
static void volume_final_done(struct reactor_msg *m)
{
    volume_free(container_of(m, struct volume, final_job.done));
}

/* Close v on the I/O pool: closing an RBD image blocks (a reactor must
 * not), and from a librbd completion thread it would deadlock. */
static void volume_free_on_pool(struct volume *v)
{
    v->final_job = (struct io_job){.run = volume_final_run, .done.fn = volume_final_done};
    iopool_submit(&v->final_job);
}

void volume_unref(struct volume *v)
{
    if (!v || atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (v->bdev->ops->submit && reactor_self())
        volume_free_on_pool(v);
    else
        volume_free(v);
}

/* volume_unref from a backend's completion (bdev_io.done with no owner):
 * the last reference never closes the backend on that thread. */
static void volume_unref_from_backend(struct volume *v)
{
    if (atomic_fetch_sub_explicit(&v->refs, 1, memory_order_acq_rel) == 1)
        volume_free_on_pool(v);
}

const char *volume_name(const struct volume *v)
{
    return v->name;
}

struct bdev *volume_bdev(struct volume *v)
{
    return v->bdev;
}

uint64_t volume_size(const struct volume *v)
{
    return atomic_load_explicit(&v->size, memory_order_acquire);
}

uint32_t volume_block_size(const struct volume *v)
{
    return v->block_size;
}

enum volume_sync volume_sync_mode(const struct volume *v)
{
    return (enum volume_sync)atomic_load_explicit(&v->sync_mode, memory_order_relaxed);
}

bool volume_readonly(const struct volume *v)
{
    return atomic_load_explicit(&v->readonly, memory_order_relaxed);
}

unsigned volume_caps(const struct volume *v)
{
    return v->bdev->caps;
}

uint64_t volume_size_generation(const struct volume *v)
{
    return atomic_load_explicit(&v->size_gen, memory_order_acquire);
}

void volume_set_sync(struct volume *v, enum volume_sync s)
{
    atomic_store(&v->sync_mode, (int)s);
}

void volume_set_readonly(struct volume *v, bool ro)
{
    atomic_store(&v->readonly, ro || v->bdev->readonly);
}

void volume_set_group_commit(struct volume *v, bool enabled)
{
    atomic_store(&v->group_commit, enabled);
}

uint64_t volume_sync_calls(const struct volume *v)
{
    return atomic_load(&v->sync_calls);
}

/* Wait until no modifying request that registered before the epoch bump
 * made here is still running (a shrink: none that may have seen the old
 * size; a quiesce: none that missed the raised count). Control thread
 * only, with resize_lock held. */
static void mod_drain(struct volume *v, const char *why)
{
    unsigned old = atomic_fetch_add(&v->resize_epoch, 1);
    uint64_t t0 = time_now_ns();
    bool warned = false;
    while (atomic_load(&v->inflight_mod[old & 1]) != 0) {
        usleep(200);
        if (!warned && time_now_ns() - t0 > 5000000000ull) {
            log_warn("store: volume %s: %s still waiting for in-flight writes", v->name, why);
            warned = true;
        }
    }
}

int volume_resize(struct volume *v, uint64_t new_size)
{
    if (new_size == 0 || new_size % v->block_size)
        return -EINVAL;
    pthread_mutex_lock(&v->resize_lock);
    uint64_t old_size = volume_size(v);
    if (new_size < old_size && atomic_load(&v->cow)) {
        /* The copier still reads the old end from the volume's file. */
        pthread_mutex_unlock(&v->resize_lock);
        log_error("store: volume %s: cannot shrink while a snapshot is being copied", v->name);
        return -EBUSY;
    }
    if (new_size < old_size) {
        /* Refuse new requests past the new end first, then let the ones
         * in flight land, so nothing re-extends the file afterwards. */
        atomic_store_explicit(&v->size, new_size, memory_order_seq_cst);
        mod_drain(v, "resize");
    }
    int rc = v->bdev->ops->resize(v->bdev, new_size);
    if (rc == 0) {
        atomic_store_explicit(&v->size, new_size, memory_order_release);
        atomic_fetch_add_explicit(&v->size_gen, 1, memory_order_acq_rel);
        log_info("store: volume %s resized to %llu bytes", v->name, (unsigned long long)new_size);
    } else {
        atomic_store_explicit(&v->size, old_size, memory_order_release);
        log_error("store: volume %s resize to %llu: %s", v->name, (unsigned long long)new_size,
                  strerror(-rc));
    }
    pthread_mutex_unlock(&v->resize_lock);
    return rc;
}

int volume_size_changed(struct volume *v, uint64_t new_size)
{
    new_size -= new_size % v->block_size; /* the volume serves whole blocks */
    if (new_size == 0)
        return -EINVAL;
    pthread_mutex_lock(&v->resize_lock);
    uint64_t old_size = volume_size(v);
    if (new_size == old_size) {
        pthread_mutex_unlock(&v->resize_lock);
        return 0;
    }
    atomic_store_explicit(&v->size, new_size, memory_order_seq_cst);
    if (new_size < old_size)
        mod_drain(v, "shrink by another client"); /* they fail past the end: let them land */
    v->bdev->size = new_size;
    atomic_fetch_add_explicit(&v->size_gen, 1, memory_order_acq_rel);
    pthread_mutex_unlock(&v->resize_lock);
    log_info("store: volume %s is now %llu bytes (was %llu): resized by another client", v->name,
             (unsigned long long)new_size, (unsigned long long)old_size);
    return 1;
}

/* ---- completion ---- */

static void vreq_msg_done(struct reactor_msg *m)
{
    struct vreq *r = container_of(m, struct vreq, msg);
    r->done(r);
}

static void vreq_timer_done(struct reactor_timer *t)
{
    struct vreq *r = container_of(t, struct vreq, timer);
    r->done(r);
}

static void vreq_msg_start_timer(struct reactor_msg *m)
{
    struct vreq *r = container_of(m, struct vreq, msg);
    reactor_timer_init(&r->timer, vreq_timer_done);
    reactor_timer_start(r->owner, &r->timer, (uint64_t)r->vol->bdev->latency_us * 1000u);
}

/* Final step: simulated latency (memory backend), then done() on owner. */
static void vreq_deliver(struct vreq *r)
{
    struct reactor *self = reactor_self();
    uint32_t latency = r->vol ? r->vol->bdev->latency_us : 0;
    if (latency) {
        if (!r->owner) {
            usleep(latency);
        } else if (r->owner == self) {
            reactor_timer_init(&r->timer, vreq_timer_done);
            reactor_timer_start(self, &r->timer, (uint64_t)latency * 1000u);
            return;
        } else {
            r->msg.fn = vreq_msg_start_timer;
            reactor_post(r->owner, &r->msg);
            return;
        }
    }
    if (r->owner && r->owner != self) {
        r->msg.fn = vreq_msg_done;
        reactor_post(r->owner, &r->msg);
        return;
    }
    r->done(r);
}

static void vreq_fail(struct vreq *r, int rc)
{
    r->result = rc;
    vreq_deliver(r);
}

/* ---- group commit ---- */

/* Launch a sync in slot i covering every write counted so far. Called with
 * gc_lock held; the caller submits the returned job after unlocking. */
static struct sync_slot *sync_slot_launch(struct volume *v, unsigned i)
{
    struct sync_slot *s = &v->slots[i];
    /* Read under the lock and before the sync can begin: every write
     * counted by now has returned from the backend, so the sync covers it. */
    s->start = atomic_load(&v->writes_done);
    s->busy = true;
    v->started_max = s->start;
    v->syncs_running++;
    volume_ref(v); /* the job may outlive every request; dropped in done */
    return s;
}

static int sync_slot_free(const struct volume *v)
{
    for (unsigned i = 0; i < VOLUME_SYNC_PARALLEL; i++)
        if (!v->slots[i].busy)
            return (int)i;
    return -1;
}

/* Complete r once a sync that started after `target` writes returns. */
static void flush_wait(struct volume *v, struct vreq *r, uint64_t target)
{
    pthread_mutex_lock(&v->gc_lock);
    if (v->sync_error) {
        int e = v->sync_error;
        pthread_mutex_unlock(&v->gc_lock);
        vreq_fail(r, e);
        return;
    }
    /* Every write counted up to target completed, and on such a backend a
     * completed write is already durable. */
    if (v->synced >= target || (v->bdev->caps & BDEV_WRITES_STABLE)) {
        pthread_mutex_unlock(&v->gc_lock);
        vreq_deliver(r);
        return;
    }
    r->flush_target = target;
    r->next_waiter = v->waiters;
    v->waiters = r;
    struct sync_slot *job = NULL;
    /* A running sync that started late enough covers r: just wait for it.
     * Otherwise start one now if a slot is free; if none is, the first
     * sync to finish goes again for everybody still uncovered. */
    if (v->started_max < target) {
        int i = sync_slot_free(v);
        if (i >= 0)
            job = sync_slot_launch(v, (unsigned)i);
    }
    pthread_mutex_unlock(&v->gc_lock);
    if (job)
        sync_slot_go(v, job);
}

/* Record a sync's result rc under gc_lock. Returns the error the flushes
 * it covered get when it is not sticky (BDEV_SYNC_RETRIABLE), else 0 (a
 * sticky error is in v->sync_error). Logs the first failure and the
 * recovery, not every retry against a lost cluster. */
static int sync_note_result(struct volume *v, int rc)
{
    if (rc == 0) {
        if (v->sync_failing)
            log_info("store: volume %s: sync works again", v->name);
        v->sync_failing = false;
        return 0;
    }
    if (v->bdev->caps & BDEV_SYNC_RETRIABLE) {
        if (!v->sync_failing)
            log_error("store: volume %s: sync failed (%s); the flushes it covered fail, the "
                      "next one tries again",
                      v->name, strerror(-rc));
        v->sync_failing = true;
        return rc;
    }
    if (!v->sync_error) {
        v->sync_error = rc;
        log_error("store: volume %s: sync failed (%s); flushes fail from now on", v->name,
                  strerror(-rc));
    }
    return 0;
}

/* A sync of slot s returned rc: complete every flush it covers. Returns
 * true if the slot must sync again (for waiters that came while every
 * slot was busy); false if the slot is free again, and then s must not be
 * touched any more (another flush may be relaunching it). */
static bool sync_slot_finish(struct volume *v, struct sync_slot *s, int rc)
{
    atomic_fetch_add(&v->sync_calls, 1);
    pthread_mutex_lock(&v->gc_lock);
    /* A retriable failure fails only the flushes this sync covered. */
    int failed = sync_note_result(v, rc);
    if (rc == 0 && s->start > v->synced)
        v->synced = s->start;
    struct vreq *ready = NULL, **pp = &v->waiters;
    bool uncovered = false;
    while (*pp) {
        struct vreq *w = *pp;
        if (v->sync_error || w->flush_target <= v->synced ||
            (failed && w->flush_target <= s->start)) {
            *pp = w->next_waiter;
            w->result = v->sync_error ? v->sync_error : w->flush_target <= v->synced ? 0 : failed;
            w->next_waiter = ready;
            ready = w;
        } else {
            if (w->flush_target > v->started_max)
                uncovered = true;
            pp = &w->next_waiter;
        }
    }
    /* Waiters no running sync covers (they came while every slot was
     * busy): this slot goes again for them. */
    bool again = uncovered && !v->sync_error;
    if (again) {
        s->start = atomic_load(&v->writes_done);
        v->started_max = s->start;
    } else {
        s->busy = false;
        v->syncs_running--;
        if (failed) {
            /* This sync covers nobody any more: started_max is again the
             * latest start of a sync still running (or of the last one that
             * made writes durable), so the next flush launches its own. */
            v->started_max = v->synced;
            for (unsigned i = 0; i < VOLUME_SYNC_PARALLEL; i++)
                if (v->slots[i].busy && v->slots[i].start > v->started_max)
                    v->started_max = v->slots[i].start;
        }
    }
    pthread_mutex_unlock(&v->gc_lock);
    while (ready) {
        struct vreq *w = ready;
        ready = w->next_waiter;
        vreq_deliver(w);
    }
    return again;
}

static void sync_job_run(struct io_job *j)
{
    struct sync_slot *s = container_of(j, struct sync_slot, job);
    struct volume *v = s->vol;
    while (sync_slot_finish(v, s, v->bdev->ops->sync(v->bdev)))
        ;
}

/* The asynchronous FLUSH of slot s completed (on the backend's thread). */
static void sync_bio_done(struct bdev_io *io)
{
    struct sync_slot *s = container_of(io, struct sync_slot, bio);
    struct volume *v = s->vol;
    if (sync_slot_finish(v, s, io->result)) {
        sync_slot_go(v, s);
        return;
    }
    volume_unref_from_backend(v); /* the launch's reference */
}

/* Run the sync of a launched slot: an asynchronous FLUSH where the backend
 * has one (no thread waits for it; with RBD, rbd_aio_flush on the shared
 * image handle covers every write completed before it is issued, which is
 * after s->start was read), else the blocking sync on the I/O pool. */
static void sync_slot_go(struct volume *v, struct sync_slot *s)
{
    if (!v->bdev->ops->submit) {
        iopool_submit(&s->job);
        return;
    }
    s->bio = (struct bdev_io){.op = BDEV_IO_FLUSH, .owner = NULL, .done = sync_bio_done};
    int rc = v->bdev->ops->submit(v->bdev, &s->bio);
    if (rc < 0) {
        s->bio.result = rc;
        sync_bio_done(&s->bio);
    }
}

static void sync_job_done(struct reactor_msg *m)
{
    struct sync_slot *s = container_of(m, struct sync_slot, job.done);
    volume_unref(s->vol);
}

/* ---- request execution ---- */

static bool op_modifies(enum vreq_op op)
{
    return op == VREQ_WRITE || op == VREQ_TRIM || op == VREQ_WRITE_ZEROES ||
           op == VREQ_COMPARE_WRITE;
}

static bool needs_durable(const struct volume *v, const struct vreq *r)
{
    switch (volume_sync_mode(v)) {
    case VOLUME_SYNC_DISABLED:
        return false; /* FUA is ignored too: the volume says it has no durability */
    case VOLUME_SYNC_ALWAYS:
        return true;
    default:
        return r->flags & VREQ_FUA;
    }
}

/* The blocking form of every op. */
static int vreq_execute(struct volume *v, struct vreq *r)
{
    struct bdev *b = v->bdev;
    if (op_modifies(r->op)) {
        /* Valid while r is in flight: detach drains before freeing it. */
        struct store_cow *cow = atomic_load(&v->cow);
        if (__builtin_expect(cow != NULL, 0)) {
            store_cow_before_write(cow, r->offset, r->length);
            if (r->t_submit)
                r->t_cow = time_now_ns();
        }
    }
    switch (r->op) {
    case VREQ_READ:
        return b->ops->read(b, r->buf, (size_t)r->length, r->offset);
    case VREQ_WRITE:
        return b->ops->write(b, r->buf, (size_t)r->length, r->offset);
    case VREQ_TRIM:
        return b->ops->trim(b, r->offset, r->length);
    case VREQ_WRITE_ZEROES: {
        unsigned f = 0;
        if (r->flags & VREQ_MAY_TRIM)
            f |= BDEV_ZERO_MAY_TRIM;
        if (r->flags & VREQ_FAST_ZERO)
            f |= BDEV_ZERO_FAST;
        return b->ops->write_zeroes(b, r->offset, r->length, f);
    }
    case VREQ_CACHE:
        return (b->caps & BDEV_CAN_CACHE) ? b->ops->cache(b, r->offset, r->length) : 0;
    case VREQ_COMPARE_WRITE:
        /* No blocking form: here only when a snapshot copy is attached;
         * the caller falls back to its own compare and write. */
        return -ENOTSUP;
    case VREQ_EXTENTS:
        return b->ops->extents(b, r->offset, r->length, r->extents, r->extents_max,
                               &r->extents_count);
    case VREQ_FLUSH: { /* group commit off: one sync per flush */
        int rc = b->ops->sync(b);
        atomic_fetch_add(&v->sync_calls, 1);
        pthread_mutex_lock(&v->gc_lock);
        int failed = sync_note_result(v, rc);
        rc = v->sync_error ? v->sync_error : failed; /* as in the group-commit path */
        pthread_mutex_unlock(&v->gc_lock);
        return rc;
    }
    }
    return -EINVAL;
}

/* Count a successful modification; returns its own count (a flush target). */
static uint64_t count_write(struct volume *v)
{
    return atomic_fetch_add(&v->writes_done, 1) + 1;
}

static const char *const op_names[] = {
    [VREQ_READ] = "read",
    [VREQ_WRITE] = "write",
    [VREQ_FLUSH] = "flush",
    [VREQ_TRIM] = "trim",
    [VREQ_WRITE_ZEROES] = "write zeroes",
    [VREQ_CACHE] = "cache",
    [VREQ_EXTENTS] = "extents",
    [VREQ_COMPARE_WRITE] = "compare and write",
};

/* A request the backend failed is logged (at most one line per
 * IO_ERROR_LOG_EVERY_NS per volume, with the count of the others): the
 * client only sees EIO or a sense code, the operator sees why (a lost
 * cluster, a full disk). A miscompare and a compare-and-write the backend
 * leaves to the caller are answers, not failures. */
#define IO_ERROR_LOG_EVERY_NS 10000000000ull

/* Count one event at now; true if this one is to be logged (none was for
 * every_ns), with *others the events left out since the last line. */
static bool note_due(struct note_limit *n, uint64_t now, uint64_t every_ns, uint64_t *others)
{
    atomic_fetch_add_explicit(&n->count, 1, memory_order_relaxed);
    uint64_t last = atomic_load_explicit(&n->logged_ns, memory_order_relaxed);
    if (last && now - last < every_ns)
        return false;
    if (!atomic_compare_exchange_strong(&n->logged_ns, &last, now))
        return false;
    *others = atomic_exchange(&n->count, 0) - 1;
    return true;
}

static void io_error_note(struct volume *v, const struct vreq *r)
{
    uint64_t others;
    if (r->result == -EILSEQ || (r->op == VREQ_COMPARE_WRITE && r->result == -ENOTSUP))
        return;
    if (!note_due(&v->error_notes, time_now_ns(), IO_ERROR_LOG_EVERY_NS, &others))
        return;
    log_warn("store: volume %s: %s of %llu bytes at %llu failed: %s (%llu other failed "
             "request(s) since the last such line)",
             v->name,
             (unsigned)r->op < sizeof(op_names) / sizeof(op_names[0]) ? op_names[r->op] : "?",
             (unsigned long long)r->length, (unsigned long long)r->offset, strerror(-r->result),
             (unsigned long long)others);
}

/* After the op ran (result in r->result, modification already counted):
 * durability wait if needed, then completion. */
static void vreq_after(struct volume *v, struct vreq *r)
{
    if (r->result < 0)
        io_error_note(v, r);
    if (r->result == 0 && op_modifies(r->op) && needs_durable(v, r)) {
        flush_wait(v, r, r->flush_target);
        return;
    }
    vreq_deliver(r);
}

/* Modifying requests register in the current resize epoch before their
 * range check, and leave once the backend call returned. */
static void mod_enter(struct volume *v, struct vreq *r)
{
    for (;;) {
        unsigned e = atomic_load(&v->resize_epoch);
        atomic_fetch_add(&v->inflight_mod[e & 1], 1);
        if (atomic_load(&v->resize_epoch) == e) {
            r->resize_epoch = e;
            return;
        }
        atomic_fetch_sub(&v->inflight_mod[e & 1], 1);
    }
}

static void mod_leave(struct volume *v, struct vreq *r)
{
    atomic_fetch_sub(&v->inflight_mod[r->resize_epoch & 1], 1);
}

/* A modifying request that took SLOW_WRITE_NS from volume_submit to its
 * return to the owner is logged with where it waited (at most one line per
 * SLOW_WRITE_LOG_EVERY_NS per volume, with the count of the others): a
 * stall inside blockd says where it was, not just that it was. */
#define SLOW_WRITE_NS 100000000ull
#define SLOW_WRITE_LOG_EVERY_NS 10000000000ull

static double ms_between(uint64_t a, uint64_t b)
{
    return a && b && b > a ? (double)(b - a) / 1e6 : 0.0;
}

static void slow_write_note(struct volume *v, struct vreq *r)
{
    uint64_t now = time_now_ns(), others;
    if (now - r->t_submit < SLOW_WRITE_NS)
        return;
    if (!note_due(&v->slow_notes, now, SLOW_WRITE_LOG_EVERY_NS, &others))
        return;
    uint64_t cow_end = r->t_cow ? r->t_cow : r->t_run;
    log_warn("store: volume %s: a write of %llu bytes at %llu took %.1f ms in the volume: "
             "parked %.1f, queued %.1f, snapshot copy %.1f, backend %.1f, return to "
             "the front-end %.1f ms (%llu other slow write(s) since the last such line)",
             v->name, (unsigned long long)r->length, (unsigned long long)r->offset,
             ms_between(r->t_submit, now), ms_between(r->t_submit, r->t_start),
             ms_between(r->t_queued, r->t_run), ms_between(r->t_run, r->t_cow),
             ms_between(cow_end, r->t_exec), ms_between(r->t_exec, now),
             (unsigned long long)others);
}

static void vreq_job_run(struct io_job *j)
{
    struct vreq *r = container_of(j, struct vreq, job);
    struct volume *v = r->vol;
    if (r->t_submit)
        r->t_run = time_now_ns();
    r->result = vreq_execute(v, r);
    if (r->t_submit)
        r->t_exec = time_now_ns();
    if (op_modifies(r->op)) {
        if (r->result == 0)
            r->flush_target = count_write(v);
        mod_leave(v, r);
    }
}

static void vreq_job_done(struct reactor_msg *m)
{
    struct vreq *r = container_of(m, struct vreq, job.done);
    if (r->t_submit)
        slow_write_note(r->vol, r);
    vreq_after(r->vol, r);
}

static void vreq_to_pool(struct vreq *r)
{
    if (r->t_submit)
        r->t_queued = time_now_ns();
    r->job.run = vreq_job_run;
    r->job.owner = r->owner;
    r->job.done.fn = vreq_job_done;
    iopool_submit(&r->job);
}

/*
 * Pool-bound writes. A buffered write to a file holds the inode lock for its
 * whole copy (ext4 and XFS both), so writes to one volume never run in
 * parallel in the kernel: a pool job per write only adds a futex wake-up, a
 * context switch and lock contention per request (the costliest part of a
 * write, measured with perf during bench/nbd.sh). So each volume has a write queue
 * drained, in order, by at most one pool job at a time; completions go back
 * in groups, so a reactor wakes once for many. Reads are not queued: cache
 * misses do run in parallel.
 */
#define WQ_POST_EVERY 16
/* Large writes: a group is posted at the latest every 8 MiB. 2 MiB (every
 * second 1 MiB write) cost 1 MiB QD8 writes 4-10% against 8 MiB (fio nbd,
 * 6 alternating runs each): each post may wake a sleeping reactor. */
#define WQ_POST_BYTES (8u << 20)

static void wq_post(struct vreq *list)
{
    while (list) {
        struct vreq *next = list->batch_next;
        if (list->owner)
            reactor_post(list->owner, &list->job.done);
        else
            list->job.done.fn(&list->job.done);
        list = next;
    }
}

static void write_queue_run(struct io_job *j)
{
    struct volume *v = container_of(j, struct volume, wq_job);
    for (;;) {
        pthread_mutex_lock(&v->wq_lock);
        struct vreq *r = v->wq_head;
        v->wq_head = v->wq_tail = NULL;
        if (!r)
            v->wq_running = false;
        pthread_mutex_unlock(&v->wq_lock);
        if (!r)
            return;
        struct vreq *done = NULL, **done_tail = &done;
        unsigned n = 0;
        uint64_t bytes = 0;
        while (r) {
            struct vreq *next = r->batch_next;
            vreq_job_run(&r->job);
            r->batch_next = NULL;
            *done_tail = r;
            done_tail = &r->batch_next;
            bytes += r->length;
            if (++n >= WQ_POST_EVERY || bytes >= WQ_POST_BYTES || !next) {
                wq_post(done);
                done = NULL;
                done_tail = &done;
                n = 0;
                bytes = 0;
            }
            r = next;
        }
    }
}

static void write_queue_done(struct reactor_msg *m)
{
    volume_unref(container_of(m, struct volume, wq_job.done));
}

/* Volumes whose queue a reactor filled in this loop iteration and whose
 * drain job it starts at the end of it, so that the job takes every write
 * of the iteration at once instead of racing the reactor for the first. */
#define WQ_KICK_MAX 8

struct wq_kick {
    struct volume *vols[WQ_KICK_MAX]; /* each holds a reference */
    unsigned n;
    bool deferred;
    struct reactor_msg msg;
};

static _Thread_local struct wq_kick wq_kick;

static void write_queue_start(struct volume *v)
{
    pthread_mutex_lock(&v->wq_lock);
    bool start = !v->wq_running && v->wq_head;
    if (start)
        v->wq_running = true;
    pthread_mutex_unlock(&v->wq_lock);
    if (start)
        iopool_submit(&v->wq_job); /* takes over the caller's reference */
    else
        volume_unref(v);
}

static void wq_kick_run(struct reactor_msg *m)
{
    struct wq_kick *k = container_of(m, struct wq_kick, msg);
    k->deferred = false;
    unsigned n = k->n;
    k->n = 0;
    for (unsigned i = 0; i < n; i++)
        write_queue_start(k->vols[i]);
}

/* Called on a reactor thread: start v's drain job at the end of the loop
 * iteration (now, if the list of volumes to start is full). */
static void wq_kick_later(struct volume *v)
{
    struct wq_kick *k = &wq_kick;
    for (unsigned i = 0; i < k->n; i++)
        if (k->vols[i] == v)
            return;
    volume_ref(v);
    if (k->n == WQ_KICK_MAX) {
        write_queue_start(v);
        return;
    }
    k->vols[k->n++] = v;
    if (!k->deferred) {
        k->deferred = true;
        k->msg.fn = wq_kick_run;
        reactor_defer(reactor_self(), &k->msg);
    }
}

static void write_queue_add(struct volume *v, struct vreq *r)
{
    r->t_queued = time_now_ns();
    r->job.done.fn = vreq_job_done;
    r->batch_next = NULL;
    pthread_mutex_lock(&v->wq_lock);
    if (v->wq_tail)
        v->wq_tail->batch_next = r;
    else
        v->wq_head = r;
    v->wq_tail = r;
    bool idle = !v->wq_running;
    pthread_mutex_unlock(&v->wq_lock);
    if (!idle)
        return; /* the running job picks it up */
    if (reactor_self()) {
        wq_kick_later(v);
    } else {
        volume_ref(v); /* dropped by write_queue_done, the job's last access */
        write_queue_start(v);
    }
}

static void vreq_inline_done(struct volume *v, struct vreq *r, int rc)
{
    r->result = rc;
    if (op_modifies(r->op)) {
        if (rc == 0)
            r->flush_target = count_write(v);
        mod_leave(v, r);
    }
    vreq_after(v, r);
}

static int vreq_check(struct volume *v, struct vreq *r)
{
    uint64_t size = volume_size(v);
    switch (r->op) {
    case VREQ_FLUSH:
        return 0;
    case VREQ_READ:
    case VREQ_CACHE:
    case VREQ_EXTENTS:
        if (r->offset > size || r->length > size - r->offset)
            return -EINVAL;
        if (r->op == VREQ_READ && (r->length > SIZE_MAX || (r->length && !r->buf)))
            return -EINVAL;
        if (r->op == VREQ_EXTENTS && (!r->extents || r->extents_max == 0))
            return -EINVAL;
        return 0;
    case VREQ_WRITE:
    case VREQ_TRIM:
    case VREQ_WRITE_ZEROES:
    case VREQ_COMPARE_WRITE:
        if (volume_readonly(v))
            return -EPERM;
        if (r->offset + r->length < r->offset)
            return -EINVAL;
        if (r->offset > size || r->length > size - r->offset)
            return -ENOSPC;
        if ((r->op == VREQ_WRITE || r->op == VREQ_COMPARE_WRITE) &&
            (r->length > SIZE_MAX / 2 || (r->length && !r->buf)))
            return -EINVAL;
        if (r->op == VREQ_COMPARE_WRITE && !(v->bdev->caps & BDEV_CAN_COMPARE_WRITE))
            return -ENOTSUP;
        if (r->op == VREQ_TRIM && !(v->bdev->caps & BDEV_CAN_TRIM))
            return -EOPNOTSUPP;
        if (r->op == VREQ_WRITE_ZEROES && (r->flags & VREQ_FAST_ZERO) &&
            !(v->bdev->caps & BDEV_CAN_FAST_ZERO))
            return -ENOTSUP;
        return 0;
    }
    return -EINVAL;
}

static void vreq_reset(struct volume *v, struct vreq *r)
{
    r->vol = v;
    r->t_start = r->t_queued = r->t_run = r->t_cow = r->t_exec = 0;
    r->result = 0;
    r->extents_count = 0;
    r->miscompare = 0;
    r->next_waiter = NULL;
    r->flush_target = 0;
}

/* Park r (already out of flight) if the volume is still quiesced. false:
 * a resume came in between, the caller goes on. */
static bool vreq_park(struct volume *v, struct vreq *r)
{
    bool parked = false;

    pthread_mutex_lock(&v->quiesce_lock);
    if (atomic_load(&v->quiesce_count) != 0) {
        r->next_waiter = NULL;
        *v->parked_tail = r;
        v->parked_tail = &r->next_waiter;
        v->parked++;
        parked = true;
    }
    pthread_mutex_unlock(&v->quiesce_lock);
    return parked;
}

/* Reads on a reactor go through its io_uring (store/uring.h): one system
 * call for all the reads of a loop iteration. Anything but a full read is
 * redone by the blocking path in the pool, which zero-fills past the end of
 * a short file and logs errors. */
static void vreq_uring_done(struct uring_op *op, int res)
{
    struct vreq *r = container_of(op, struct vreq, uop);
    if (res >= 0 && (uint64_t)res == r->length)
        vreq_inline_done(r->vol, r, 0);
    else
        vreq_to_pool(r);
}

static int vreq_uring_read(struct volume *v, struct vreq *r)
{
    r->uop.done = vreq_uring_done;
    return uring_read(v->bdev->ops->read_fd(v->bdev), r->buf, (size_t)r->length, r->offset,
                      &r->uop);
}

static void vreq_start(struct volume *v, struct vreq *r, bool modifies);

/* A write that must copy old data for a snapshot first (never inline on a
 * reactor: the copy blocks). The one cost of snapshots on the hot path
 * when none is being copied: this load and branch. */
static inline bool cow_pending(struct volume *v, const struct vreq *r)
{
    struct store_cow *cow = atomic_load(&v->cow);
    return __builtin_expect(cow != NULL, 0) && !store_cow_range_copied(cow, r->offset, r->length);
}

void volume_submit(struct volume *v, struct vreq *r)
{
    vreq_reset(v, r);
    bool modifies = op_modifies(r->op);
    r->t_submit = 0;
    if (modifies) {
        r->t_submit = time_now_ns();
        for (;;) {
            mod_enter(v, r);
            /* The one extra hot-path cost of quiesce: seq_cst after the
             * registration in mod_enter (see the top of this file). */
            if (atomic_load(&v->quiesce_count) == 0)
                break;
            mod_leave(v, r);
            if (vreq_park(v, r))
                return;
        }
    }
    vreq_start(v, r, modifies);
}

/* An asynchronous backend request completed, on r's owner (or on the
 * backend's thread when r has none). */
static void vreq_bio_done(struct bdev_io *io)
{
    struct vreq *r = container_of(io, struct vreq, bio);
    r->miscompare = io->miscompare;
    vreq_inline_done(r->vol, r, io->result);
}

static const enum bdev_io_op bio_op[] = {
    [VREQ_READ] = BDEV_IO_READ,
    [VREQ_WRITE] = BDEV_IO_WRITE,
    [VREQ_FLUSH] = BDEV_IO_FLUSH,
    [VREQ_TRIM] = BDEV_IO_TRIM,
    [VREQ_WRITE_ZEROES] = BDEV_IO_WRITE_ZEROES,
    [VREQ_COMPARE_WRITE] = BDEV_IO_COMPARE_WRITE,
};

/* Backends with submit(): hand r over; no thread waits for it. */
static void vreq_submit_bio(struct volume *v, struct vreq *r)
{
    struct bdev_io *io = &r->bio;
    bool flush = r->op == VREQ_FLUSH;
    unsigned f = 0;
    if (r->flags & VREQ_MAY_TRIM)
        f |= BDEV_ZERO_MAY_TRIM;
    if (r->flags & VREQ_FAST_ZERO)
        f |= BDEV_ZERO_FAST;
    *io = (struct bdev_io){
        .op = bio_op[r->op],
        .flags = r->op == VREQ_WRITE_ZEROES ? f : 0,
        .offset = flush ? 0 : r->offset,
        .length = flush ? 0 : r->length,
        .buf = r->buf,
        .owner = r->owner,
        .done = vreq_bio_done,
    };
    int rc = v->bdev->ops->submit(v->bdev, io);
    if (rc < 0)
        vreq_inline_done(v, r, rc);
}

/* The asynchronous path of a backend with submit(): true if it took r.
 * Requests of no length complete here (librbd asserts on them); extents
 * stay on the I/O pool (rbd_diff_iterate2 has no asynchronous form), and
 * so do writes that must first copy old data out for a snapshot (cow). */
static bool vreq_try_bio(struct volume *v, struct vreq *r, bool modifies)
{
    switch (r->op) {
    case VREQ_READ:
    case VREQ_WRITE:
    case VREQ_TRIM:
    case VREQ_WRITE_ZEROES:
    case VREQ_COMPARE_WRITE:
        if (modifies && atomic_load(&v->cow)) {
            vreq_to_pool(r); /* the copy and the synchronous op block */
            return true;
        }
        if (r->length == 0) {
            vreq_inline_done(v, r, 0);
            return true;
        }
        vreq_submit_bio(v, r);
        return true;
    case VREQ_CACHE:
        if (v->bdev->caps & BDEV_CAN_CACHE)
            return false;
        vreq_deliver(r); /* nothing to prefetch: no pool round trip */
        return true;
    case VREQ_FLUSH:
        /* Group commit on: flush_wait issues the asynchronous FLUSHes
         * itself (sync_slot_go). Off: one FLUSH per request. */
        if (volume_sync_mode(v) == VOLUME_SYNC_DISABLED ||
            atomic_load_explicit(&v->group_commit, memory_order_relaxed))
            return false;
        vreq_submit_bio(v, r);
        return true;
    default:
        return false;
    }
}

/* Everything after registration; modifying requests are in flight. */
static void vreq_start(struct volume *v, struct vreq *r, bool modifies)
{
    if (modifies)
        r->t_start = time_now_ns();
    int rc = vreq_check(v, r);
    if (rc < 0) {
        if (modifies)
            mod_leave(v, r);
        vreq_fail(r, rc);
        return;
    }
    const struct bdev_ops *ops = v->bdev->ops;
    if (ops->submit && vreq_try_bio(v, r, modifies))
        return;
    switch (r->op) {
    case VREQ_READ:
    case VREQ_WRITE: {
        if (r->length == 0) {
            if (r->op == VREQ_WRITE)
                mod_leave(v, r);
            vreq_deliver(r);
            return;
        }
        bool rd = r->op == VREQ_READ;
        if (rd ? !ops->read_nowait : !ops->write_nowait) { /* the backend never blocks */
            vreq_inline_done(v, r, vreq_execute(v, r));
            return;
        }
        if (rd && ops->read_fd && reactor_self() && vreq_uring_read(v, r) == 0)
            return;
        if (reactor_self() && (rd || !cow_pending(v, r))) {
            rc = rd ? ops->read_nowait(v->bdev, r->buf, (size_t)r->length, r->offset)
                    : ops->write_nowait(v->bdev, r->buf, (size_t)r->length, r->offset);
            if (rc != -EAGAIN) {
                vreq_inline_done(v, r, rc);
                return;
            }
        }
        if (!rd) {
            /* A write that must capture old data for a snapshot runs as
             * its own pool job: its chunk read (20-90 ms when the loaded
             * VM's disk or CPU is slow) must not hold up the writes
             * queued behind it, nor the replies of the writes drained
             * with it. Writes in flight together have no order among
             * them (NBD, SCSI simple tasks); captures of one chunk are
             * ordered by its lock (store/cow.c). */
            if (cow_pending(v, r))
                vreq_to_pool(r);
            else
                write_queue_add(v, r);
            return;
        }
        vreq_to_pool(r);
        return;
    }
    case VREQ_FLUSH:
        if (volume_sync_mode(v) == VOLUME_SYNC_DISABLED) {
            vreq_deliver(r);
            return;
        }
        if (!atomic_load_explicit(&v->group_commit, memory_order_relaxed)) {
            vreq_to_pool(r);
            return;
        }
        flush_wait(v, r, atomic_load(&v->writes_done));
        return;
    default:
        vreq_to_pool(r);
        return;
    }
}

/* ---- quiesce ---- */

static int quiesce_sync(struct volume *v);

void volume_hold(struct volume *v)
{
    pthread_mutex_lock(&v->quiesce_lock);
    atomic_fetch_add(&v->quiesce_count, 1);
    pthread_mutex_unlock(&v->quiesce_lock);
    /* From here on new modifying requests park; let the rest land. */
    pthread_mutex_lock(&v->resize_lock);
    mod_drain(v, "quiesce");
    pthread_mutex_unlock(&v->resize_lock);
}

int volume_cow_attach(struct volume *v, int dst_fd, uint32_t chunk, struct store_cow **out,
                      uint64_t *held_ns)
{
    *out = NULL;
    for (;;) {
        uint64_t size = volume_size(v);
        struct store_cow *cow;
        int rc = store_cow_new(v->bdev, dst_fd, size, chunk, &cow);
        if (rc < 0)
            return rc;
        uint64_t t0 = time_now_ns();
        volume_hold(v);
        /* A resize between the size read and the hold: size it again. */
        bool resized = volume_size(v) != size;
        struct store_cow *none = NULL;
        bool ok = !resized && atomic_compare_exchange_strong(&v->cow, &none, cow);
        volume_resume(v);
        if (held_ns)
            *held_ns = time_now_ns() - t0;
        if (ok) {
            *out = cow;
            return 0;
        }
        store_cow_free(cow);
        if (!resized) {
            log_error("store: volume %s: a snapshot is already being copied", v->name);
            return -EBUSY;
        }
    }
}

int volume_cow_detach(struct volume *v, struct store_cow *cow)
{
    struct store_cow *expected = cow;
    if (!cow)
        return 0;
    if (atomic_compare_exchange_strong(&v->cow, &expected, NULL)) {
        /* Requests that registered before this point may still hold the
         * pointer (vreq_execute): let them land before it is freed. New
         * ones see NULL (seq_cst, as for quiesce). Nothing is held. */
        pthread_mutex_lock(&v->resize_lock);
        mod_drain(v, "snapshot copy end");
        pthread_mutex_unlock(&v->resize_lock);
    }
    int rc = store_cow_error(cow);
    store_cow_free(cow);
    return rc;
}

int volume_quiesce(struct volume *v)
{
    volume_hold(v);
    int rc = quiesce_sync(v);
    if (rc < 0) {
        log_error("store: volume %s: quiesce: sync failed (%s)", v->name, strerror(-rc));
        volume_resume(v);
        return rc;
    }
    log_debug("store: volume %s quiesced", v->name);
    return 0;
}

void volume_resume(struct volume *v)
{
    struct vreq *list;

    pthread_mutex_lock(&v->quiesce_lock);
    unsigned n = atomic_load(&v->quiesce_count);
    if (n == 0) {
        pthread_mutex_unlock(&v->quiesce_lock);
        log_error("store: volume %s: resume without quiesce", v->name);
        return;
    }
    atomic_store(&v->quiesce_count, n - 1);
    if (n > 1) {
        pthread_mutex_unlock(&v->quiesce_lock);
        return;
    }
    list = v->parked_head;
    v->parked_head = NULL;
    v->parked_tail = &v->parked_head;
    size_t released = v->parked;
    v->parked = 0;
    pthread_mutex_unlock(&v->quiesce_lock);
    if (released)
        log_debug("store: volume %s resumed, releasing %zu parked request(s)", v->name, released);

    while (list) {
        struct vreq *r = list;
        pthread_mutex_lock(&v->quiesce_lock);
        if (atomic_load(&v->quiesce_count) != 0) {
            /* A new quiesce began: the rest go back, ahead of whatever
             * parked since, to keep arrival order. */
            struct vreq **tail = &list;
            size_t k = 0;
            while (*tail) {
                tail = &(*tail)->next_waiter;
                k++;
            }
            *tail = v->parked_head;
            if (!v->parked_head)
                v->parked_tail = tail;
            v->parked_head = list;
            v->parked += k;
            pthread_mutex_unlock(&v->quiesce_lock);
            return;
        }
        list = r->next_waiter;
        vreq_reset(v, r);
        /* Registered under the lock: a quiescer that raises the count
         * after this drains r (its epoch bump comes later). */
        mod_enter(v, r);
        pthread_mutex_unlock(&v->quiesce_lock);
        vreq_start(v, r, true);
    }
}

size_t volume_parked_count(struct volume *v)
{
    pthread_mutex_lock(&v->quiesce_lock);
    size_t n = v->parked;
    pthread_mutex_unlock(&v->quiesce_lock);
    return n;
}

/* ---- blocking wrappers ---- */

struct vreq_waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
};

static void vreq_wait_done(struct vreq *r)
{
    struct vreq_waiter *w = r->arg;
    pthread_mutex_lock(&w->lock);
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static int vreq_wait(struct volume *v, struct vreq *r,
                     void (*start)(struct volume *v, struct vreq *r))
{
    struct vreq_waiter w = {.done = false};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    r->owner = NULL;
    r->done = vreq_wait_done;
    r->arg = &w;
    start(v, r);
    pthread_mutex_lock(&w.lock);
    while (!w.done)
        pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    pthread_cond_destroy(&w.cond);
    pthread_mutex_destroy(&w.lock);
    return r->result;
}

int volume_submit_wait(struct volume *v, struct vreq *r)
{
    return vreq_wait(v, r, volume_submit);
}

/* A group-commit flush whatever the sync mode and group-commit setting:
 * quiesce promises a stable file, sync=disabled or not. */
static void quiesce_flush_start(struct volume *v, struct vreq *r)
{
    vreq_reset(v, r);
    flush_wait(v, r, atomic_load(&v->writes_done));
}

static int quiesce_sync(struct volume *v)
{
    struct vreq r = {.op = VREQ_FLUSH};
    return vreq_wait(v, &r, quiesce_flush_start);
}

int volume_flush_wait(struct volume *v)
{
    struct vreq r = {.op = VREQ_FLUSH};
    return volume_submit_wait(v, &r);
}
