/*
 * The size of an open RBD volume follows its image (dsrbd.h,
 * ds_rbd_follow). librbd calls us on its own thread when the image's
 * header changed; that thread must not call librbd back (a header refresh
 * from an update callback can wait for the very thread it runs on), so
 * the callback only queues the bdev and wakes the follower thread, which
 * reads the size through the volume's own handle and, when it differs,
 * gives the open volume, the dataset row and EV_DATASET the new size.
 *
 * The queue holds bdev pointers, compared with the cache's entries and
 * never dereferenced before the cache gave us a reference on their volume
 * (ds_cache_find_bdev): a volume closed meanwhile is simply skipped.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/dsrbd.h"
#include "core/log.h"
#include "store/bdev_rbd.h"

#define FOLLOW_QUEUE_MAX 1024 /* distinct volumes waiting; more: logged, the rest dropped */

static pthread_mutex_t fq_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fq_cond = PTHREAD_COND_INITIALIZER;
static const struct bdev *fq[FOLLOW_QUEUE_MAX]; /* fq_lock */
static size_t fq_n;                             /* fq_lock */
static bool fq_full_logged, fq_stop, fq_running;
static pthread_t fq_thread;

/* librbd's thread: queue b once (a burst of header updates is one check). */
static void on_update(void *arg)
{
    const struct bdev *b = arg;
    bool full = false;

    pthread_mutex_lock(&fq_lock);
    size_t i = 0;
    while (i < fq_n && fq[i] != b)
        i++;
    if (i == fq_n) {
        if (fq_n < FOLLOW_QUEUE_MAX)
            fq[fq_n++] = b;
        else if (!fq_full_logged)
            full = fq_full_logged = true;
    }
    pthread_cond_signal(&fq_cond);
    pthread_mutex_unlock(&fq_lock);
    if (full)
        log_warn("datasets: %d RBD volumes wait for a size check: the others are checked at their "
                 "next header change",
                 FOLLOW_QUEUE_MAX);
}

void ds_rbd_follow(struct bdev *b, const char *name)
{
    int rc = bdev_rbd_watch_updates(b, on_update, b);
    if (rc < 0)
        log_warn("datasets: %s: cannot watch its RBD image for resizes by other clients: %s", name,
                 strerror(-rc));
}

/* The dataset row follows (no cfg_tx: the size is what the cluster says,
 * not a configuration change of this member's). */
static void row_size(const char *name, uint64_t size)
{
    struct ds_row row;
    int rc;

    db_lock();
    rc = ds_dataset_get(name, &row);
    if (rc == 0 && row.type == DS_VOLUME)
        rc = ds_dataset_set_volsize(row.id, size);
    else if (rc == -ENOENT)
        rc = 0; /* deleted meanwhile: nothing to record */
    db_unlock();
    if (rc < 0)
        log_error("datasets: %s: cannot record its new volsize %llu: %s", name,
                  (unsigned long long)size, strerror(-rc));
}

static void check_one(const struct bdev *qb)
{
    char name[DS_NAME_BUF];
    struct volume *v = ds_cache_find_bdev(qb, name, sizeof(name));
    uint64_t size = 0, old;
    int rc;

    if (!v)
        return; /* closed meanwhile */
    old = volume_size(v);
    rc = bdev_rbd_current_size(volume_bdev(v), &size);
    if (rc == 0)
        rc = volume_size_changed(v, size);
    if (rc < 0)
        log_warn("datasets: %s: cannot follow its RBD image's size (%llu bytes): %s", name,
                 (unsigned long long)size, strerror(-rc));
    if (rc == 1) {
        log_info("datasets: %s resized %llu -> %llu bytes by another client of its RBD image", name,
                 (unsigned long long)old, (unsigned long long)volume_size(v));
        row_size(name, volume_size(v));
        ds_notify(DATASETS_RESIZED, name, v);
    }
    volume_unref(v);
}

static void *follow_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fq_lock);
    while (!fq_stop) {
        if (fq_n == 0) {
            pthread_cond_wait(&fq_cond, &fq_lock);
            continue;
        }
        const struct bdev *b = fq[0];
        memmove(fq, fq + 1, (fq_n - 1) * sizeof(fq[0]));
        fq_n--;
        pthread_mutex_unlock(&fq_lock);
        check_one(b);
        pthread_mutex_lock(&fq_lock);
    }
    pthread_mutex_unlock(&fq_lock);
    return NULL;
}

void ds_rbd_follow_start(void)
{
    pthread_mutex_lock(&fq_lock);
    if (!fq_running) {
        fq_stop = false;
        fq_running = pthread_create(&fq_thread, NULL, follow_main, NULL) == 0;
        if (!fq_running)
            log_error("datasets: cannot start the RBD size follower thread");
    }
    pthread_mutex_unlock(&fq_lock);
}

void ds_rbd_follow_stop(void)
{
    pthread_mutex_lock(&fq_lock);
    bool join = fq_running;
    fq_running = false;
    fq_stop = true;
    pthread_cond_signal(&fq_cond);
    pthread_mutex_unlock(&fq_lock);
    if (join)
        pthread_join(fq_thread, NULL);
    pthread_mutex_lock(&fq_lock);
    fq_n = 0; /* closed volumes' bdevs: never looked at */
    pthread_mutex_unlock(&fq_lock);
}
