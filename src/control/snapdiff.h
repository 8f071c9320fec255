/*
 * Changed blocks between two snapshots of a volume (or a snapshot and the
 * live volume), and a snapshot's allocated blocks, by dataset names: the
 * names resolved and checked against the stored snapshots, the storage
 * opened through the pool's backend, the walk done by store/diff.h (which
 * says what each pool type guarantees). Used by the API
 * (pool.snapshot.changed_blocks / allocated_blocks, snapdiff_api.c) and by
 * NBD's qemu:dirty-bitmap meta contexts (nbd/nbd_dirty.c).
 *
 * Threads: every function blocks (the database, files, the cluster): API
 * or I/O pool threads, never a reactor. They take db_lock only while
 * resolving names; the walk runs without any lock.
 */
#ifndef BLOCKD_CONFIG_SNAPDIFF_H
#define BLOCKD_CONFIG_SNAPDIFF_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "control/dataset_store.h"
#include "store/diff.h"
#include "store/volume.h"

/* An open pair (or, for allocated blocks, one snapshot: base unused). */
struct ds_diff {
    char dataset[DS_NAME_BUF];
    char base_snap[DS_NAME_BUF];   /* "" for allocated blocks */
    char target_snap[DS_NAME_BUF]; /* "": the live volume */
    uint64_t size;                 /* the target's size in bytes */
    struct bdev *base;             /* file pools: the base snapshot (owned) */
    struct bdev *target;           /* owned, or live's (borrowed) */
    struct volume *live;           /* the live volume (a reference) or NULL */
    /* file pools: the files of base and of each snapshot after it up to
     * target (the latest one for the live volume), for the change logs */
    char **chain;
    size_t nchain;
    bool from_log; /* the last ds_diff_changed came from the change logs */
};

/*
 * Resolve base ("pool/vol@snap") and target ("pool/vol@snap" or the live
 * "pool/vol") and open them. Errors, each with a sentence for the client
 * in why and, where one parameter is at fault, its name ("base",
 * "target") in *field (else NULL):
 *   -EINVAL   base is not a snapshot name; a name is malformed; base was
 *             taken after target
 *   -ENOENT   no such volume or snapshot
 *   -EXDEV    base and target belong to different volumes
 *   -ENOTSUP  a memory-backed volume (no snapshots)
 *   other -errno from the backend (opening the storage)
 * Close with ds_diff_close (also after an error: then a no-op).
 */
int ds_diff_open(const char *base, const char *target, struct ds_diff *d, const char **field,
                 char *why, size_t whylen);
/* One snapshot alone (for its allocated blocks); as ds_diff_open. */
int ds_diff_open_one(const char *snapshot, struct ds_diff *d, const char **field, char *why,
                     size_t whylen);
void ds_diff_close(struct ds_diff *d);

/* The changed ranges of [offset, offset+length): from the volume's change
 * logs where they are trusted (store/changes.h), else store_diff; or for
 * ds_diff_open_one the allocated ones (store_allocated). */
int ds_diff_changed(struct ds_diff *d, uint64_t offset, uint64_t length, store_range_fn fn,
                    void *arg);
int ds_diff_allocated(struct ds_diff *d, uint64_t offset, uint64_t length, store_range_fn fn,
                      void *arg);

/*
 * fn(name) for each snapshot of the volume of dataset ("pool/vol" or
 * "pool/vol@snap") taken before it (every snapshot for the live volume),
 * oldest first: the bases a diff to it may start from. A nonzero return
 * of fn stops the walk and is returned. 0, -ENOENT or -errno.
 */
int ds_diff_bases(const char *dataset, int (*fn)(const char *snap, void *arg), void *arg);

/* pool.snapshot.changed_blocks and pool.snapshot.allocated_blocks
 * (snapdiff_api.c), registered by datasets_init. */
extern const struct api_method ds_snapdiff_methods[];
extern const size_t ds_snapdiff_method_count;

#endif
