/* Point-in-time snapshots of live volumes; see snapshot.h. */
#include "store/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/iopool.h"
#include "core/log.h"
#include "core/util.h"
#include "store/changes.h"
#include "store/cow.h"
#include "store/poolfs.h"
#include "store/stage.h"

#define PROGRESS_EVERY_NS 250000000ll

/* The background copier, as an I/O pool job: pool threads run at the data
 * path's priority, and writes may wait for the chunk it is copying (API
 * threads may be SCHED_IDLE). */
struct copier_job {
    struct io_job job;
    struct store_cow *cow;
    int rc;
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

static void copier_run(struct io_job *j)
{
    struct copier_job *cj = container_of(j, struct copier_job, job);
    cj->rc = store_cow_copy_rest(cj->cow);
}

/* The job's completion, the pool's last access to it: only once this has
 * signalled may the waiter's stack frame (which holds the job) go away. The
 * pool reads the job (owner, done.fn) after run() returns, so run() itself
 * must not wake the waiter (ASan saw that read land in a returned frame). */
static void copier_done(struct reactor_msg *m)
{
    struct copier_job *cj = container_of(m, struct copier_job, job.done);
    pthread_mutex_lock(&cj->lock);
    cj->done = true;
    pthread_cond_signal(&cj->cond);
    pthread_mutex_unlock(&cj->lock);
}

/* Run the copier and wait for it, reporting progress from this thread. */
static int copier_wait(struct store_cow *cow, store_progress_fn progress, void *arg)
{
    struct copier_job cj = {.cow = cow};
    pthread_condattr_t ca;

    pthread_mutex_init(&cj.lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cj.cond, &ca);
    pthread_condattr_destroy(&ca);
    cj.job.run = copier_run;
    cj.job.owner = NULL;
    cj.job.done.fn = copier_done;
    if (progress)
        progress(0, cow->size, arg);
    iopool_submit(&cj.job);
    pthread_mutex_lock(&cj.lock);
    while (!cj.done) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += PROGRESS_EVERY_NS;
        if (until.tv_nsec >= 1000000000l) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000l;
        }
        pthread_cond_timedwait(&cj.cond, &cj.lock, &until);
        if (!cj.done && progress) {
            pthread_mutex_unlock(&cj.lock);
            progress(atomic_load_explicit(&cow->progress, memory_order_relaxed), cow->size, arg);
            pthread_mutex_lock(&cj.lock);
        }
    }
    pthread_mutex_unlock(&cj.lock);
    /* The pool's last touch of cj was copier_done, under the lock just
     * taken: safe to destroy. */
    pthread_cond_destroy(&cj.cond);
    pthread_mutex_destroy(&cj.lock);
    if (progress)
        progress(cow->size, cow->size, arg);
    return cj.rc;
}

/* The copy-before-write path; dfd is the empty temporary file. */
static int snapshot_cow(struct volume *v, int dfd, uint32_t chunk, store_progress_fn progress,
                        void *arg, struct store_snapshot_stats *st, const char **what)
{
    struct store_cow *cow;

    *what = "ftruncate";
    if (ftruncate(dfd, (off_t)volume_size(v)) < 0)
        return -errno;
    *what = "attach";
    int rc = volume_cow_attach(v, dfd, chunk, &cow, &st->held_ns);
    if (rc < 0)
        return rc;
    *what = "ftruncate";
    if ((uint64_t)lseek(dfd, 0, SEEK_END) != cow->size && ftruncate(dfd, (off_t)cow->size) < 0)
        rc = -errno; /* resized before the instant; writes never go past cow->size */
    *what = "copy";
    if (rc == 0)
        rc = copier_wait(cow, progress, arg);
    else
        store_cow_cancel(cow);
    st->chunks_by_writes = atomic_load(&cow->copied_by_writes);
    st->chunks_by_copier = atomic_load(&cow->copied_by_copier);
    st->queue_waits = atomic_load(&cow->queue_waits);
    st->queue_wait_max_ns = atomic_load(&cow->queue_wait_max_ns);
    int drc = volume_cow_detach(v, cow);
    return rc < 0 ? rc : drc;
}

/* The reflink path: 1 if it was not possible (nothing done), 0, -errno. */
static int snapshot_reflink(struct volume *v, const char *dir, int sfd, int dfd,
                            struct store_snapshot_stats *st)
{
    /* The answer is remembered per filesystem: ext4 costs nothing here,
     * and nothing is flushed or held for a reflink that cannot be. */
    if (store_reflink_probe(dir) == 0)
        return 1;
    /* Flush first, writes going on, so the FICLONE under the hold (which
     * writes the file's dirty pages back itself) has little left to do. */
    int rc = volume_flush_wait(v);
    if (rc < 0)
        return rc;
    uint64_t t0 = time_now_ns();
    volume_hold(v);
    rc = store_reflink_fd(sfd, dfd);
    volume_resume(v);
    st->held_ns = time_now_ns() - t0;
    if (rc == -EOPNOTSUPP || rc == -ENOTTY || rc == -EINVAL || rc == -ENOSYS || rc == -EXDEV)
        return 1;
    if (rc == 0)
        st->reflinked = true;
    return rc;
}

/* Fill sg's empty temporary with the volume's contents at one instant: a
 * reflink where the filesystem can, else copy-before-write. *what names
 * the step that failed. */
static int snapshot_fill(struct volume *v, struct store_stage *sg, unsigned flags, uint32_t chunk,
                         store_progress_fn progress, void *arg, struct store_snapshot_stats *st,
                         const char **what)
{
    int rc = 1;
    if (!(flags & STORE_COPY_NO_REFLINK)) {
        *what = "reflink";
        rc = snapshot_reflink(v, sg->dir, sg->src_fd, sg->tmp_fd, st);
        if (rc == 0 && progress)
            progress(volume_size(v), volume_size(v), arg);
    }
    if (rc == 1)
        rc = snapshot_cow(v, sg->tmp_fd, chunk, progress, arg, st, what);
    return rc;
}

int store_snapshot_volume(struct volume *v, const char *src_path, const char *dst, unsigned flags,
                          uint32_t chunk, store_progress_fn progress, void *arg,
                          struct store_snapshot_stats *stats)
{
    struct store_snapshot_stats st = {0};
    struct store_stage sg;
    const char *what = "open";

    if (stats)
        *stats = st;
    int rc = store_stage_open(&sg, "snapshot", src_path, dst);
    if (rc < 0)
        return rc;
    /* the volume's change log: the epoch this snapshot ends (changes.h) */
    struct store_changes *log = bdev_file_changes(volume_bdev(v));
    if (log)
        store_changes_begin(log);
    rc = snapshot_fill(v, &sg, flags, chunk, progress, arg, &st, &what);
    rc = rc < 0 ? store_stage_abort(&sg, what, rc) : store_stage_publish(&sg);
    if (log)
        store_changes_end(log, rc == 0 ? dst : NULL);
    if (stats)
        *stats = st; /* also on failure: how far it got */
    return rc;
}
