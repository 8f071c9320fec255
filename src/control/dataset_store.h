/*
 * The stored datasets (table datasets, and the read of their
 * dataset_props rows a query row shows): struct ds_row and the SQL
 * behind it. The query rows of pool.dataset.* (dsrows.c) are
 * encoded from struct ds_row_view, which this store walks; the
 * properties' own table and inheritance are dsprops.h's.
 *
 * Every function runs with the DB lock held (control/db.h db_lock, or
 * inside a struct cfg_tx, control/cfgtx.h); writes join the caller's
 * transaction. Any API/worker thread.
 */
#ifndef BLOCKD_CONFIG_DATASET_STORE_H
#define BLOCKD_CONFIG_DATASET_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/pool_store.h"
#include "store/names.h"
#include "store/volume.h"

#define DS_NAME_BUF (NAME_DATASET_MAX + 1)
#define DS_COMMENTS_MAX 1024

enum ds_type { DS_FILESYSTEM = 0, DS_VOLUME = 1 };

/* A dataset as stored. */
struct ds_row {
    int64_t id;
    char name[DS_NAME_BUF];
    int64_t pool_id;
    enum ds_type type;
    uint64_t volsize;
    uint32_t volblocksize;
    bool sparse;
    enum volume_sync sync;
    bool readonly;
    bool memory; /* backend "memory" */
    uint32_t latency_us;
    int64_t origin_id; /* snapshot this dataset was cloned from, 0 if none */
    int64_t created;
    char comments[DS_COMMENTS_MAX + 1];
};

/* Dataset name / id into *out. 0, -ENOENT or -errno. */
int ds_dataset_get(const char *name, struct ds_row *out);
int ds_dataset_get_id(int64_t id, struct ds_row *out);
/* Insert a dataset row (created now when 0, and the sync / readonly it
 * does not inherit as its own properties); sets row->id. 0, -EEXIST if
 * the name is taken, or -errno. */
int ds_dataset_insert(struct ds_row *row);

/* Set dataset id's volsize and comments. 0 or -errno. */
int ds_dataset_update_size(int64_t id, uint64_t volsize, const char *comments);
/* Set dataset id's volsize (the size of a volume received or resized
 * outside an update). 0 or -errno. */
int ds_dataset_set_volsize(int64_t id, uint64_t volsize);
/* Set dataset id's origin: the snapshot it is a clone of (0: none). 0
 * or -errno. */
int ds_dataset_set_origin(int64_t id, int64_t origin_id);
/* Delete dataset id's row and its dataset_props rows; with_snapshots:
 * its snapshots' rows first. 0 or -errno. */
int ds_dataset_delete(int64_t id, bool with_snapshots);
/* dataset_props rows: "managedby", user properties ("ns:name", always
 * with a ':') and the local values of the ZFS properties of dsprops.h
 * (by ZFS name, raw value). value NULL removes. Inside a transaction.
 * 0 or -errno. */
int ds_prop_set(int64_t dataset_id, const char *name, const char *value);
/* Remove every user property ("ns:name") of a dataset. Inside a
 * transaction. 0 or -errno. */
int ds_clear_user_props(int64_t dataset_id);
/* fn(dataset, property, value) for each local ZFS property (a
 * dataset_props row whose name has no ':') of the datasets names[0..n).
 * 0 or -errno. */
int ds_dataset_zfs_props_of(char names[][DS_NAME_BUF], size_t n,
                            void (*fn)(const char *dataset, const char *prop, const char *value,
                                       void *arg),
                            void *arg);
/*
 * fn for dataset name and each of its descendants, a parent right before
 * its subtree, with r's id, name, type, sync and readonly set and the
 * values of its local "sync" and "readonly" properties (NULL: not set).
 * A nonzero return of fn stops the walk and is returned. 0 or -errno.
 */
int ds_dataset_each_local_sync(const char *name,
                               int (*fn)(const struct ds_row *r, const char *local_sync,
                                         const char *local_readonly, void *arg),
                               void *arg);
/* Set dataset id's effective sync and readonly. 0 or -errno. */
int ds_dataset_set_effective(int64_t id, enum volume_sync sync, bool readonly);
/*
 * fn(name, id, is_volume) for dataset name and each of its descendants,
 * deepest first (a child before its parent). A nonzero return of fn
 * stops the walk and is returned. 0 or -errno.
 */
int ds_dataset_each_in_subtree(const char *name,
                               int (*fn)(const char *name, int64_t id, bool is_volume, void *arg),
                               void *arg);
/*
 * fn(name) for each descendant of dataset name (not name itself), in
 * plain name order (a parent before its children, but "a/b-c" before
 * "a/b/c"). A nonzero return of fn stops the walk and is returned. 0 or
 * -errno.
 */
int ds_dataset_each_descendant(const char *name, int (*fn)(const char *name, void *arg), void *arg);
/* Rename dataset old_name and everything below it to new_name (snapshot
 * rows follow through their dataset_id). 0, -EEXIST or -errno. */
int ds_dataset_rename_subtree(const char *old_name, const char *new_name);
/* fn(name) for each volume of name's subtree a backend stores (not a
 * memory volume). A nonzero return of fn stops the walk and is returned.
 * 0 or -errno. */
int ds_dataset_each_stored_volume(const char *name, int (*fn)(const char *name, void *arg),
                                  void *arg);
/* A dataset outside name's subtree cloned from a snapshot inside it: 1
 * with its name in clone and the snapshot ("dataset@snap") in origin, 0
 * when there is none, or -errno. */
int ds_dataset_outside_clone(const char *name, char *clone, size_t clen, char *origin, size_t olen);

/* A dataset as its query row shows it: the record, its pool (id, name,
 * path), its number of snapshots and its origin ("pool/vol@snap", ""
 * when none). Valid during the callback that receives it. */
struct ds_row_view {
    struct ds_row row;
    struct ds_pool pool;
    int64_t snapshot_count;
    const char *origin;
};

/* What a walk is narrowed to: every dataset; the subtrees (each dataset
 * with its descendants) of names[0..n) (n 0: none); or the names in
 * [lo, hi). A row's children and used come from its descendants, so
 * every kind takes in the descendants of what it takes in. Borrowed. */
enum ds_row_keys_kind { DS_KEYS_ALL, DS_KEYS_SUBTREES, DS_KEYS_RANGE };
struct ds_row_keys {
    enum ds_row_keys_kind kind;
    const char *const *names;
    size_t n;
    const char *lo, *hi;
};
/*
 * fn for each dataset keys selects, in name order with '/' sorting
 * lowest (a dataset's descendants follow it, contiguous). A nonzero
 * return of fn stops the walk and is returned. 0 or -errno.
 */
int ds_dataset_each(const struct ds_row_keys *keys,
                    int (*fn)(const struct ds_row_view *v, void *arg), void *arg);
/* fn(name, value) for each dataset_props row of dataset id, by name. 0
 * or -errno. */
int ds_dataset_props_each(int64_t id, void (*fn)(const char *name, const char *value, void *arg),
                          void *arg);

#endif
