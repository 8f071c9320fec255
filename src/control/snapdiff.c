/*
 * Changed and allocated blocks by dataset names; see snapdiff.h. The
 * names are checked against the stored snapshots under db_lock; the
 * storage is opened through the pool's backend (dsbackend.h) after it:
 * a snapshot deleted in between makes the open fail (-ENOENT), never a
 * walk over the wrong data. The live volume is the serving one
 * (datasets_volume_open), so its writes are the ones the walk sees.
 */
#include "control/snapdiff.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsrbd.h"
#include "store/changes.h"

/* name → dataset and (after '@', if any) snapshot. */
static int split_name(const char *name, char *dataset, char *snap, char *why, size_t whylen)
{
    const char *at = strchr(name, '@');
    size_t dlen = at ? (size_t)(at - name) : strlen(name);

    snap[0] = '\0';
    if (dlen == 0 || dlen >= DS_NAME_BUF || (at && (!at[1] || strlen(at + 1) >= DS_NAME_BUF))) {
        snprintf(why, whylen,
                 "'%.200s' is not a volume (POOL/VOLUME) or snapshot "
                 "(POOL/VOLUME@SNAPSHOT) name",
                 name);
        return -EINVAL;
    }
    memcpy(dataset, name, dlen);
    dataset[dlen] = '\0';
    if (at)
        snprintf(snap, DS_NAME_BUF, "%s", at + 1);
    return 0;
}

/* A stored snapshot of dataset, or -ENOENT with why. db_lock held. */
static int snap_lookup(const char *dataset, const char *snap, struct ds_snap *s, char *why,
                       size_t whylen)
{
    int rc = ds_snapshot_get(dataset, snap, s);
    if (rc == -ENOENT)
        snprintf(why, whylen, "snapshot %.200s@%.200s does not exist", dataset, snap);
    else if (rc < 0)
        snprintf(why, whylen, "cannot read snapshot %.200s@%.200s: %s", dataset, snap,
                 strerror(-rc));
    return rc;
}

/* Collecting the chain: the names of the snapshots from base to upto. */
struct chain_walk {
    struct ds_diff *d;
    const struct ds_pool *pool;
    int64_t from, upto;
    int rc;
};

static int chain_add(const struct ds_snap *s, void *arg)
{
    struct chain_walk *w = arg;
    char path[PATH_MAX];
    if (s->id < w->from || s->id > w->upto)
        return 0;
    char **c = realloc(w->d->chain, (w->d->nchain + 1) * sizeof(*c));
    if (!c || ds_path(w->pool, w->d->dataset, s->name, path, sizeof(path)) < 0)
        return w->rc = -ENOMEM, 1;
    w->d->chain = c;
    c[w->d->nchain] = strdup(path);
    if (!c[w->d->nchain])
        return w->rc = -ENOMEM, 1;
    w->d->nchain++;
    return 0;
}

/* File pools: the chain of snapshot files from bs to ts (0: the live
 * volume, every later one). db_lock held. Without it the diff only
 * compares the files, so a failure is not an error. */
static void chain_collect(struct ds_diff *d, const struct ds_pool *pool, int64_t dataset_id,
                          const struct ds_snap *bs, const struct ds_snap *ts)
{
    struct chain_walk w = {
        .d = d, .pool = pool, .from = bs->id, .upto = ts->id ? ts->id : INT64_MAX};
    if (ds_pool_is_rbd(pool) || !bs->id)
        return;
    if (ds_snapshot_each_upto(dataset_id, w.upto, chain_add, &w) < 0 || w.rc < 0) {
        for (size_t i = 0; i < d->nchain; i++)
            free(d->chain[i]);
        free(d->chain);
        d->chain = NULL;
        d->nchain = 0;
    }
}

/* The volume d->dataset, its pool, and the snapshots named in d: their
 * order checked. db_lock held. */
static int resolve(struct ds_diff *d, struct ds_pool *pool, const char **field, char *why,
                   size_t whylen)
{
    struct ds_row row;
    struct ds_snap bs = {0}, ts = {0};
    char poolname[DS_NAME_BUF];
    int rc = ds_dataset_get(d->dataset, &row);

    if (rc < 0) {
        snprintf(why, whylen, rc == -ENOENT ? "volume %.200s does not exist" : "cannot read %.200s",
                 d->dataset);
        return rc;
    }
    if (row.type != DS_VOLUME) {
        snprintf(why, whylen, "%.200s is a FILESYSTEM; only volumes have blocks", d->dataset);
        return -EINVAL;
    }
    if (row.memory) {
        snprintf(why, whylen, "%.200s is memory-backed: it has no snapshots", d->dataset);
        return -ENOTSUP;
    }
    *field = "base";
    if (d->base_snap[0] && (rc = snap_lookup(d->dataset, d->base_snap, &bs, why, whylen)) < 0)
        return rc;
    *field = "target";
    if (d->target_snap[0] && (rc = snap_lookup(d->dataset, d->target_snap, &ts, why, whylen)) < 0)
        return rc;
    if (d->base_snap[0] && d->target_snap[0] && bs.id > ts.id) {
        *field = "base";
        snprintf(why, whylen, "base %.200s@%.200s was taken after target %.200s@%.200s", d->dataset,
                 d->base_snap, d->dataset, d->target_snap);
        return -EINVAL;
    }
    *field = NULL;
    ds_pool_of(d->dataset, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, pool);
    if (rc < 0)
        snprintf(why, whylen, "cannot read pool %.200s", poolname);
    else
        chain_collect(d, pool, row.id, &bs, &ts);
    return rc;
}

/* Open what resolve found: the base snapshot (file pools only: RBD diffs
 * by the base's name) and the target. */
static int open_storage(struct ds_diff *d, const struct ds_pool *pool, char *why, size_t whylen)
{
    const struct ds_backend *be = ds_backend_of(pool);
    bool rbd = ds_pool_is_rbd(pool);
    int rc = 0;

    ds_backend_why[0] = '\0';
    if (!rbd && d->base_snap[0])
        rc = be->open(pool, d->dataset, d->base_snap, true, &d->base);
    if (rc == 0 && d->target_snap[0])
        rc = be->open(pool, d->dataset, d->target_snap, true, &d->target);
    else if (rc == 0) {
        rc = datasets_volume_open(d->dataset, &d->live);
        if (rc == 0)
            d->target = volume_bdev(d->live);
    }
    if (rc < 0) {
        snprintf(why, whylen, "cannot open %.200s: %s", d->dataset,
                 ds_backend_why[0] ? ds_backend_why : strerror(-rc));
        return rc;
    }
    d->size = d->live ? volume_size(d->live) : d->target->size;
    return 0;
}

static int diff_open(struct ds_diff *d, const char **field, char *why, size_t whylen)
{
    struct ds_pool pool;
    db_lock();
    int rc = resolve(d, &pool, field, why, whylen);
    db_unlock();
    return rc < 0 ? rc : open_storage(d, &pool, why, whylen);
}

int ds_diff_open(const char *base, const char *target, struct ds_diff *d, const char **field,
                 char *why, size_t whylen)
{
    char other[DS_NAME_BUF];

    *d = (struct ds_diff){0};
    *field = "base";
    if (split_name(base, d->dataset, d->base_snap, why, whylen) < 0)
        return -EINVAL;
    if (!d->base_snap[0]) {
        snprintf(why, whylen, "base must be a snapshot (POOL/VOLUME@SNAPSHOT), not %.200s", base);
        return -EINVAL;
    }
    *field = "target";
    if (split_name(target, other, d->target_snap, why, whylen) < 0)
        return -EINVAL;
    if (strcmp(other, d->dataset) != 0) {
        snprintf(why, whylen, "base %.200s and target %.200s are not of the same volume", base,
                 target);
        return -EXDEV;
    }
    *field = NULL;
    return diff_open(d, field, why, whylen);
}

int ds_diff_open_one(const char *snapshot, struct ds_diff *d, const char **field, char *why,
                     size_t whylen)
{
    *d = (struct ds_diff){0};
    *field = "snapshot";
    if (split_name(snapshot, d->dataset, d->target_snap, why, whylen) < 0)
        return -EINVAL;
    if (!d->target_snap[0]) {
        snprintf(why, whylen, "%.200s is not a snapshot (POOL/VOLUME@SNAPSHOT)", snapshot);
        return -EINVAL;
    }
    int rc = diff_open(d, field, why, whylen);
    if (rc < 0 && *field)
        *field = "snapshot";
    return rc;
}

void ds_diff_close(struct ds_diff *d)
{
    for (size_t i = 0; i < d->nchain; i++)
        free(d->chain[i]);
    free(d->chain);
    bdev_close(d->base);
    if (d->live)
        volume_unref(d->live);
    else
        bdev_close(d->target);
    *d = (struct ds_diff){0};
}

int ds_diff_changed(struct ds_diff *d, uint64_t offset, uint64_t length, store_range_fn fn,
                    void *arg)
{
    /* the change logs (pools without reflink), when every epoch from base
     * to target is trusted; they say nothing (-ESTALE) before calling fn */
    struct store_changes *live = d->live ? bdev_file_changes(d->target) : NULL;
    d->from_log = false;
    if (d->nchain && (!d->live || live)) {
        int rc = store_changes_diff((const char *const *)d->chain, d->nchain, live, d->size, offset,
                                    length, fn, arg);
        if (rc != -ESTALE) {
            d->from_log = rc >= 0;
            return rc;
        }
    }
    return store_diff(d->base, d->base ? NULL : d->base_snap, d->target, offset, length, fn, arg);
}

int ds_diff_allocated(struct ds_diff *d, uint64_t offset, uint64_t length, store_range_fn fn,
                      void *arg)
{
    return store_allocated(d->target, offset, length, fn, arg);
}

struct bases_walk {
    int64_t upto; /* the target's id; INT64_MAX for the live volume */
    int (*fn)(const char *snap, void *arg);
    void *arg;
    char (*names)[DS_NAME_BUF];
    size_t n, cap;
};

static int bases_add(const struct ds_snap *s, void *arg)
{
    struct bases_walk *w = arg;
    if (s->id >= w->upto || w->n == w->cap)
        return 0;
    snprintf(w->names[w->n++], DS_NAME_BUF, "%s", s->name);
    return 0;
}

int ds_diff_bases(const char *dataset, int (*fn)(const char *snap, void *arg), void *arg)
{
    char name[DS_NAME_BUF], snap[DS_NAME_BUF], why[256];
    struct ds_row row;
    struct ds_snap ts = {.id = INT64_MAX};
    char names[64][DS_NAME_BUF];
    struct bases_walk w = {.fn = fn, .arg = arg, .names = names, .cap = 64};

    if (split_name(dataset, name, snap, why, sizeof(why)) < 0)
        return -EINVAL;
    /* names are copied out so fn runs without db_lock */
    db_lock();
    int rc = ds_dataset_get(name, &row);
    if (rc == 0 && snap[0])
        rc = ds_snapshot_get(name, snap, &ts);
    w.upto = ts.id;
    if (rc == 0)
        rc = ds_snapshot_each_upto(row.id, INT64_MAX, bases_add, &w);
    db_unlock();
    for (size_t i = 0; rc == 0 && i < w.n; i++)
        rc = fn(names[i], arg);
    return rc;
}
