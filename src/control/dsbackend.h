/*
 * Pool backends: where a pool keeps its datasets' data. The one dispatch
 * point by pool type: the dataset and snapshot methods (datasets.c,
 * snapshots.c, dsrename.c, dspromote.c, dsrows.c, volcache.c) do their
 * checks and database work the same way for every pool, and call the
 * pool's backend for the storage side.
 *
 *   file  a directory; a volume is a sparse (or preallocated) file, a
 *         FILESYSTEM a directory, a snapshot a reflinked or copied file
 *         "<volume>@<snap>" (store/snapshot.h, store/copy.h).
 *   rbd   a Ceph RBD pool (and namespace); a volume is an RBD image, a
 *         snapshot an RBD snapshot, a clone an RBD clone v2; FILESYSTEM
 *         datasets exist only in the database: they are prefixes of image
 *         names (control/dsrbd.c: the image name of "pool/a/b/vol" is
 *         "a%b%vol").
 *
 * All ops are synchronous and may block (files, the cluster): API threads
 * with ds_ops_lock() held, never a reactor. Names are full dataset names
 * ("pool/a/vol"); snap is the part after '@'. Return 0 or -errno; why
 * (when given) gets a reason for the client.
 */
#ifndef BLOCKD_CONFIG_DSBACKEND_H
#define BLOCKD_CONFIG_DSBACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "control/ds_internal.h"
#include "store/bdev.h"
#include "store/snapshot.h"
#include "store/volume.h"

/* Progress of a long op: done of total bytes (or units). */
typedef void (*ds_progress_fn)(uint64_t done, uint64_t total, void *arg);

struct ds_backend {
    const char *name; /* "file", "rbd" */
    /* Make the storage of a new VOLUME (sparse: thin) or FILESYSTEM. Inside
     * the creating transaction (db_lock held). */
    int (*volume_create)(const struct ds_pool *p, const char *name, uint64_t size, bool sparse,
                         char *why, size_t whylen);
    int (*filesystem_create)(const struct ds_pool *p, const char *name);
    /* pool.dataset.create {adopt: true}: take a VOLUME whose storage already
     * exists (an RBD image another gateway created) instead of making it;
     * its size must be size. NULL: the pool type has nothing to adopt. */
    int (*volume_adopt)(const struct ds_pool *p, const char *name, uint64_t size, char *why,
                        size_t whylen);
    /* Remove a dataset's storage (after its rows are gone: a failure only
     * leaves a stray, logged). is_volume: a volume, else a FILESYSTEM. */
    int (*dataset_remove)(const struct ds_pool *p, const char *name, bool is_volume);
    /* Before a delete removes anything (no DB lock held): the storage of
     * the volume name can go, i.e. no other client holds it open (an RBD
     * image another gateway member or a VM still has open cannot be
     * removed; its snapshots must not go first). May wait a bounded time
     * for that client to close it. own: this daemon's serving bdev of the
     * volume (a delete with force withdraws it next), whose own use does
     * not count; NULL: every use counts. 0, or -errno (-EBUSY) with a
     * reason in ds_backend_why. NULL: always (files can be unlinked while
     * open). */
    int (*volume_remove_check)(const struct ds_pool *p, const char *name, struct bdev *own);
    /* pool.dataset.delete with force, on pools with volume_remove_check:
     * end this daemon's own use of a volume's or snapshot's storage, b
     * being its serving bdev, so that the storage can be removed (its
     * I/O fails from then on with -ENODEV); restore undoes it when the
     * removal failed. 0 or -errno. */
    int (*handle_withdraw)(struct bdev *b);
    int (*handle_restore)(struct bdev *b);
    int (*snapshot_remove)(const struct ds_pool *p, const char *name, const char *snap);
    /* Resize a volume's storage from old_size to new_size; v is the open
     * volume (resized through it) or NULL. sparse=false keeps it
     * preallocated. */
    int (*volume_resize)(const struct ds_pool *p, const char *name, struct volume *v,
                         uint64_t old_size, uint64_t new_size, bool sparse);
    /* Open the bdev of a volume or (snap != NULL, read-only) a snapshot. */
    int (*open)(const struct ds_pool *p, const char *name, const char *snap, bool readonly,
                struct bdev **out);
    /* Bytes used by a volume's own data and by its snapshots (dataset id
     * id); v is its open volume or NULL. */
    void (*volume_usage)(const struct ds_pool *p, const char *name, int64_t id, struct volume *v,
                         uint64_t *used, uint64_t *snapused);
    /* Bytes a snapshot holds. */
    uint64_t (*snapshot_usage)(const struct ds_pool *p, const char *name, const char *snap);
    /* Bytes free for new data; 0 if unknown. */
    uint64_t (*available)(const struct ds_pool *p);
    /* "<where the dataset lives>" for the "path"/"mountpoint" fields. */
    int (*locator)(const struct ds_pool *p, const char *name, const char *snap, char *buf,
                   size_t len);
    /* Long ops, run inside a job (progress): a snapshot of the open volume
     * v; a clone of name@snap into the new volume dst of pool dp (*o1: it
     * took no copy); a rollback of name (v open or NULL) to snap; a
     * promote's storage step for the clone name (detach it from its
     * origin's data). */
    int (*snapshot_create)(const struct ds_pool *p, const char *name, const char *snap,
                           struct volume *v, ds_progress_fn fn, void *arg,
                           struct store_snapshot_stats *stats);
    int (*clone)(const struct ds_pool *p, const char *name, const char *snap,
                 const struct ds_pool *dp, const char *dst, ds_progress_fn fn, void *arg, bool *o1);
    int (*rollback)(const struct ds_pool *p, const char *name, const char *snap, struct volume *v,
                    ds_progress_fn fn, void *arg, bool *o1);
    /* Renames of the storage (inside the rename's transaction): one
     * volume, one snapshot; the caller walks a subtree. NULL: the caller
     * renames files and directories by path (file pools, dsrename.c). */
    int (*volume_rename)(const struct ds_pool *p, const char *from, const char *to);
    int (*snapshot_rename)(const struct ds_pool *p, const char *name, const char *from,
                           const char *to);
    /* A promote's storage step (a job): copy the origin's data into the
     * clone name so that it no longer depends on it; the origin's
     * snapshots stay where they are. NULL: the origin's older snapshots
     * move to the clone (file pools, dspromote.c). */
    int (*flatten)(const struct ds_pool *p, const char *name, ds_progress_fn fn, void *arg);
};

/* The backend of a pool. */
const struct ds_backend *ds_backend_of(const struct ds_pool *p);
bool ds_pool_is_rbd(const struct ds_pool *p);

extern const struct ds_backend ds_backend_file;
extern const struct ds_backend ds_backend_rbd;

#endif
