/*
 * The stored snapshots (table snapshots, and the rollback mark of the
 * datasets table): struct ds_snap and the SQL behind it. The
 * API (snapshots.c) decodes JSON into names and structs, checks them,
 * writes through these functions inside one transaction and encodes the
 * rows (struct ds_snap_view) as TrueNAS's zfs.snapshot rows; nothing here
 * sees JSON.
 *
 * Every function runs with the DB lock held (control/db.h db_lock, or
 * inside a struct cfg_tx, control/cfgtx.h); writes join the caller's
 * transaction, which records the change and commits it. Any API/worker
 * thread.
 */
#ifndef BLOCKD_CONFIG_SNAPSHOT_STORE_H
#define BLOCKD_CONFIG_SNAPSHOT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/pool_store.h"
#include "store/names.h"

/*
 * A snapshot as stored.
 *   id          0 until stored
 *   dataset_id  the volume it is a snapshot of; dataset its name
 *   name        the part after '@'
 *   volsize     the volume's size when it was taken
 *   created     ms since the epoch, set by ds_snapshot_insert
 */
struct ds_snap {
    int64_t id;
    int64_t dataset_id;
    char dataset[NAME_DATASET_MAX + 1];
    char name[NAME_DATASET_MAX + 1];
    uint64_t volsize;
    int64_t created;
};

/* A snapshot as its row shows it: the record, its pool (id, name, path)
 * and its clones' names joined by ',' ("" when none). Valid during the
 * callback that receives it. */
struct ds_snap_view {
    struct ds_snap snap;
    struct ds_pool pool;
    const char *clones;
};

/* What a list is narrowed to: every snapshot of dataset (snap NULL), or
 * the one dataset@snap. dataset_len: the length of the dataset name (it
 * may be the head of "dataset@snap"); -1 when NUL-terminated. Borrowed. */
struct ds_snap_key {
    const char *dataset;
    int dataset_len;
    const char *snap;
};
struct ds_snap_keys {
    const struct ds_snap_key *v;
    size_t n; /* 0: no snapshot */
};

/* Snapshot dataset@snap / snapshot id into *out. 0, -ENOENT or -errno. */
int ds_snapshot_get(const char *dataset, const char *snap, struct ds_snap *out);
int ds_snapshot_get_id(int64_t id, struct ds_snap *out);
/*
 * fn for each snapshot matching keys (NULL: every snapshot), ordered by
 * dataset name, then by id (the order they were taken). A nonzero return
 * of fn stops the walk and is returned. 0 or -errno.
 */
int ds_snapshot_each(const struct ds_snap_keys *keys,
                     int (*fn)(const struct ds_snap_view *v, void *arg), void *arg);
/*
 * fn for each snapshot of dataset_id taken after snapshot after_id, in
 * the order they were taken, with the name of one dataset cloned from it
 * (NULL when none). As ds_snapshot_each.
 */
int ds_snapshot_each_newer(int64_t dataset_id, int64_t after_id,
                           int (*fn)(const struct ds_snap *s, const char *clone, void *arg),
                           void *arg);
/* fn("dataset@snap", id) for each snapshot of dataset name and of its
 * descendants. As ds_snapshot_each. */
int ds_snapshot_each_in_subtree(const char *name,
                                int (*fn)(const char *full, int64_t id, void *arg), void *arg);
/* fn for each snapshot of dataset_id up to and including upto_id
 * (INT64_MAX: every one), in the order they were taken (all but dataset
 * set). As ds_snapshot_each. */
int ds_snapshot_each_upto(int64_t dataset_id, int64_t upto_id,
                          int (*fn)(const struct ds_snap *s, void *arg), void *arg);
/* fn for snapshot dataset@snap and, with recursive, the snapshot named
 * snap of each of dataset's descendants (by dataset name); id, dataset
 * and name set. As ds_snapshot_each. */
int ds_snapshot_each_named(const char *dataset, const char *snap, bool recursive,
                           int (*fn)(const struct ds_snap *s, void *arg), void *arg);
/* The first (by name) dataset cloned from snapshot id into name. 0,
 * -ENOENT (none) or -errno. */
int ds_snapshot_first_clone(int64_t id, char *name, size_t len);

/* Insert s (dataset_id, name, volsize); sets s->id (created is now). 0,
 * -EEXIST or -errno. */
int ds_snapshot_insert(struct ds_snap *s);
/* Delete snapshot id's row and its properties. 0 or -errno. */
int ds_snapshot_delete(int64_t id);
/* Rename snapshot id (the part after '@'). 0, -EEXIST or -errno. */
int ds_snapshot_rename(int64_t id, const char *name);
/* Set the creation time (ms since the epoch) of dataset_id's snapshot
 * name, as a received snapshot keeps its source's. 0 (also when there is
 * no such snapshot) or -errno. */
int ds_snapshot_set_created(int64_t dataset_id, const char *name, int64_t created);
/* The snapshots of dataset from up to and including upto_id become
 * dataset to's (a promote). 0 or -errno. */
int ds_snapshot_move(int64_t from, int64_t to, int64_t upto_id);

/*
 * A snapshot's properties (table snapshot_props): user properties
 * ("ns:name") and the deferred destroy mark (DS_SNAP_DEFER_DESTROY, value
 * "on"). They go with the snapshot's row (ds_snapshot_delete) and stay
 * with it through a rename or a promote.
 */
#define DS_SNAP_DEFER_DESTROY "defer_destroy"
/* A hold (TrueNAS's pool.snapshot.hold: the tag "truenas"): the
 * snapshot cannot be destroyed while it is there. */
#define DS_SNAP_HOLD "hold"
/* Set (insert or replace) / remove property name of snapshot id. 0 or
 * -errno (removing an absent one is 0). */
int ds_snapshot_prop_set(int64_t id, const char *name, const char *value);
int ds_snapshot_prop_remove(int64_t id, const char *name);
/* Property name of snapshot id into value (len bytes). 0, -ENOENT or
 * -errno. */
int ds_snapshot_prop_get(int64_t id, const char *name, char *value, size_t len);
/* fn(name, value) for each property of snapshot id, by name. As
 * ds_snapshot_each. */
int ds_snapshot_props_each(int64_t id, int (*fn)(const char *name, const char *value, void *arg),
                           void *arg);
/* fn for each snapshot marked for deferred destroy that no dataset is
 * cloned from any more and that has no hold (id, dataset_id, dataset and
 * name set). As
 * ds_snapshot_each. */
int ds_snapshot_each_deferred_free(int (*fn)(const struct ds_snap *s, void *arg), void *arg);

/*
 * A rollback's mark on its volume: set (snapshot snap_id is being copied
 * back) before the copy, so that a crash during it is finished by the
 * next start; cleared with the volume's new size once the copy is done.
 * 0 or -errno.
 */
int ds_snapshot_rollback_mark(int64_t dataset_id, int64_t snap_id);
int ds_snapshot_rollback_done(int64_t dataset_id, uint64_t volsize);
/* The marked rollbacks, at most max: dataset ids and snapshot ids into
 * the arrays, their count into *n. 0 or -errno. */
int ds_snapshot_rollbacks_pending(int64_t *dataset_ids, int64_t *snap_ids, size_t max, size_t *n);

#endif
