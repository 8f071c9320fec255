/*
 * Shared between the files of src/config that implement datasets.h
 * (pools.c, datasets.c, dscreate.c, snapshots.c, volcache.c, dsutil.c). Not a public
 * interface. The stored objects and their SQL are the stores':
 * pool_store.h, dataset_store.h, snapshot_store.h.
 *
 * Locking (outermost first): ds_ops_lock() serializes every operation that
 * changes datasets, pools, snapshots or their files, and may be held across
 * long copies; db_lock() is taken only around SQL; the volume cache has its
 * own mutex (innermost) so that datasets_volume_open() of an already open
 * volume never waits for a copy or the database.
 */
#ifndef BLOCKD_CONFIG_DS_INTERNAL_H
#define BLOCKD_CONFIG_DS_INTERNAL_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/api.h"
#include "api/fields.h"
#include "api/validate.h"
#include "control/dataset_store.h"
#include "control/datasets.h"
#include "control/pool_store.h"
#include "control/snapshot_store.h"
#include "store/names.h"
#include "store/poolfs.h"
#include "store/volume.h"

extern char ds_state_dir[PATH_MAX];

void ds_ops_lock(void);
void ds_ops_unlock(void);

/* Insert a FILESYSTEM row for every missing ancestor of name (below the
 * pool root) and create its directory. Fails -ENOTDIR if an ancestor is a
 * volume. Locked by caller inside a transaction. */
int ds_create_ancestors(const struct ds_pool *pool, const char *name);

/* "<pool path>/<name below the pool>[@snap]" into buf. snap may be NULL.
 * 0 or -ENAMETOOLONG. */
int ds_path(const struct ds_pool *pool, const char *name, const char *snap, char *buf, size_t len);
/* mkdir -p (mode 0755) below the pool root that contains path, confined
 * (poolfs_mkdir_parents). 0 or -errno. */
int ds_mkdir_parents(const char *path);
/* Split "pool/a/b" into the pool name. */
void ds_pool_of(const char *name, char *pool, size_t len);

/* Property object {"parsed":…, "rawvalue":"…", "value":"…", "source":"…"}
 * (steals parsed). */
json_t *ds_prop(json_t *parsed, const char *rawvalue, const char *value, const char *source);
json_t *ds_prop_size(uint64_t v, const char *source);
/* ZFS-style human number: 16384 → "16K", 1610612736 → "1.50G". */
void ds_nicenum(uint64_t v, char *buf, size_t len);
/* "512", "512B", "1K" … "128K" → bytes; 0 if not a valid volblocksize. */
uint32_t ds_volblocksize_parse(const char *s);
/* Validate a new dataset name (create, clone) of len bytes as given (a
 * NUL inside is refused): syntax, pool exists, name free, no volume
 * ancestor. Adds field errors on call; fills pool. Caller holds
 * db_lock(). */
int ds_check_new_name(struct api_call *call, const char *field, const char *name, size_t len,
                      struct ds_pool *pool);

/* Request decoding helpers: obj's string / boolean at key, else def
 * (obj was checked against its schema). */
const char *ds_str_or(json_t *obj, const char *key, const char *def);
bool ds_bool_or(json_t *obj, const char *key, bool def);

/* managedby as pool.dataset.create/update give it (at most
 * DS_MANAGEDBY_MAX bytes, the schemas say). */
#define DS_MANAGEDBY_MAX 256
struct ds_managedby {
    bool given;
    bool inherit; /* "INHERIT": no value of its own */
    char value[DS_MANAGEDBY_MAX + 1];
};
/* The field codec (api/fields.h) of a struct ds_managedby member: given
 * set when the request names it, inherit for "INHERIT". */
extern const struct api_codec ds_codec_managedby;

/* One item of a user_properties / user_properties_update list, decoded:
 * {key, value} sets, {key, remove: true} removes. */
struct ds_user_prop {
    char *key;        /* owned; NULL if the item had none (the schema says so) */
    size_t key_len;   /* as given: a NUL inside makes strlen differ */
    char *value;      /* owned; NULL if not a string */
    size_t value_len; /* as given */
    bool has_value;   /* the item had a value */
    bool remove;      /* remove: true */
};

/* A decoded list (n == 0: not given or empty). */
struct ds_user_props {
    struct ds_user_prop *v;
    size_t n;
};

/* Decode list (a JSON array checked against the schema, or NULL) into
 * *out, once, in the handler. 0 or -ENOMEM (nothing to free then); else
 * free with ds_user_props_free. */
int ds_user_props_decode(json_t *list, struct ds_user_props *out);
void ds_user_props_free(struct ds_user_props *props);
/* The field codec of a struct ds_user_props member (ds_user_props_decode
 * of the list; cleared with ds_user_props_free). */
extern const struct api_codec ds_codec_user_props;
/* Semantic checks of a decoded user_properties (create) or
 * user_properties_update (update) list; field errors "<field>.<i>[.key]"
 * added on call. 0 or -EINVAL. */
int ds_check_user_props(struct api_call *call, const char *field, const struct ds_user_props *props,
                        bool update);
/* Store such a list (checked) for the dataset: sets and removes. Inside
 * a transaction. 0 or -errno. */
int ds_apply_user_props(int64_t dataset_id, const struct ds_user_props *props);
#define DS_USER_PROP_VALUE_MAX 8192
#define DS_USER_PROP_KEY_MAX 256
/* The "managedby" field of T's member (dataset create and update). */
#define DS_MANAGEDBY_FIELD(T, member)                                                              \
    {                                                                                              \
        .name = "managedby", .type = API_T_STRING, .flags = API_RANGE, .min = 0,                   \
        .max = DS_MANAGEDBY_MAX, API_AT(T, member, ds_codec_managedby)                             \
    }
/* A user-properties list field: at most 256 items, each checked against
 * item (create's {key, value} or ds_user_prop_update_item), decoded into
 * the struct ds_user_props member of T (ds_codec_user_props). */
#define DS_USER_PROPS_FIELD(field, item, T, member)                                                \
    {                                                                                              \
        .name = field, .type = API_T_ARRAY, .flags = API_RANGE, .min = 0, .max = 256,              \
        .items = item, API_AT(T, member, ds_codec_user_props)                                      \
    }
/* An item of a user_properties_update list (datasets and snapshots):
 * {key, value} sets, {key, remove: true} removes. */
extern const struct api_field ds_user_prop_update_item;
/* pool.snapshot.update's data (snapshot_props.c): user_properties_update
 * and user_properties_remove. */
#define DS_SNAP_UPDATE_NFIELDS 2
extern const struct api_field ds_snap_update_fields[DS_SNAP_UPDATE_NFIELDS];

/* <ns>.get_instance [id, options?]: the row of rows whose "id" equals
 * params[0] (new reference), or ENOENT; query options (select, ...) are
 * applied as api_query does. Takes no ownership of rows. */
int ds_get_instance(struct api_call *call, json_t *params, json_t *rows, json_t **result);
/* The args of the get_instance methods ([id, options?], id checked present) and of the
 * query methods ([filters?, options?], checked by api_query). */
extern const struct api_arg ds_get_instance_args[2];
extern const struct api_arg ds_query_args[2];
/* Convert an errno to an API error on call: -1. */
int ds_api_errno(struct api_call *call, int err, const char *what, const char *name);

/* volcache.c */
/* The cached volume of name if open (new reference) or NULL. */
struct volume *ds_cache_peek(const char *name);
/* The same, with the bdev it serves through (borrowed, valid while the
 * reference is held; NULL if unknown, e.g. a memory volume). */
struct volume *ds_cache_peek_bdev(const char *name, struct bdev **b);
/* The cached volume served through bdev b (new reference) and its name,
 * or NULL: b is compared, never dereferenced, so a bdev closed meanwhile
 * is simply not found. */
struct volume *ds_cache_find_bdev(const struct bdev *b, char *name, size_t len);
/* Remove name (and, with children, every "name/…" and "name@…") from the
 * cache, dropping the cache's reference. */
void ds_cache_drop(const char *name, bool children);
/* Open a volume for a just-created memory dataset and keep it cached. */
int ds_cache_insert(const char *name, struct volume *v);
/* Cache v (serving through b) under name again, unless name is cached
 * already (opened meanwhile): a delete with force that withdrew it and
 * then could not remove its storage. The cache takes its own reference. */
void ds_cache_put_back(const char *name, struct volume *v, struct bdev *b);
/* Re-key every cached volume covered by old_name (with subtree: also
 * "old/…" and "old@…") under new_name; the volumes stay open. Call with
 * db_lock() held, right after the rename is committed, so that no opener
 * looks between the two. Returns how many entries moved. */
int ds_cache_rename(const char *old_name, const char *new_name, bool subtree);
/* Clients connected to the shares of exactly name (the registered
 * datasets_clients_fn summed); reasons joined into why. */
unsigned ds_clients(const char *name, char *why, size_t len);
/* A rename's EV_RENAME_LOCK, _UPDATE and _DONE (control/events.h). */
void ds_rename_event_lock(void);
int ds_rename_event_update(const char *old_name, const char *new_name, bool subtree);
void ds_rename_event_done(bool committed);
/* Ask every registered in-use check about name (a dataset or snapshot). */
bool ds_in_use(const char *name, char *why, size_t len);
/* EV_DATASET (control/events.h) for name. */
void ds_notify(enum datasets_event ev, const char *name, struct volume *v);

/* Copy src to the new file dst (store_clone_file: reflink, else a sparse
 * copy) as a job with progress, like a clone's copy; what/name describe it
 * ("promote", "pool/c@s"). Call with ds_ops_lock() held and db_lock() not
 * held. 0, or -1 with the error set on call. */
int ds_copy_file_job(struct api_call *call, json_t *params, const char *what, const char *name,
                     const char *src, const char *dst, bool *reflinked);

/* Flatten the RBD clone name (the storage step of its promote,
 * dsbackend.h) as a job with progress. Same locking as ds_copy_file_job. */
int ds_flatten_job(struct api_call *call, json_t *params, const struct ds_pool *pool,
                   const char *name);

/* pool.dataset.create (dscreate.c) and its args, for datasets.c's
 * method table. */
int ds_dataset_create(struct api_call *call, json_t *params, json_t **result);
extern const struct api_arg ds_dataset_create_args[1];
/*
 * The typed entry points of pool.dataset.create / delete / update for
 * blockd's own work below the API (replication): the same checks, locks,
 * transaction, log lines and notifications as the methods, with call's
 * identity and peer. 0, or -1 with the error set on call.
 * ds_volume_create: a VOLUME with its missing ancestors (create_ancestors);
 * readonly is inherited, sync too unless sync_given; user_props borrowed
 * (NULL: none), comments / managedby NULL: none.
 */
struct ds_volume_new {
    const char *name;
    uint64_t volsize;
    uint32_t volblocksize; /* bytes */
    bool sparse;
    bool sync_given;
    enum volume_sync sync;
    const char *comments;
    const char *managedby;
    const struct ds_user_props *user_props;
    bool adopt; /* take the existing RBD image (datasets_adopt_volume) */
};
int ds_volume_create(struct api_call *call, const struct ds_volume_new *nv);
/* pool.dataset.delete name {recursive, force} (datasets.c). */
int ds_dataset_destroy(struct api_call *call, const char *name, bool recursive, bool force);
/* pool.dataset.update name {readonly: ON / OFF} (datasets.c). */
int ds_dataset_set_readonly(struct api_call *call, const char *name, bool on);

/* snapshots.c / datasets.c / pools.c method tables */
extern const struct api_method ds_resource_methods[]; /* zfs_resource.c */
extern const size_t ds_resource_method_count;
extern const struct api_method ds_pool_methods[];
extern const size_t ds_pool_method_count;
extern const struct api_method ds_dataset_methods[];
extern const size_t ds_dataset_method_count;
extern const struct api_method ds_snapshot_methods[];
extern const struct api_method ds_pool_snapshot_methods[];
extern const size_t ds_pool_snapshot_method_count;

/* snapshots.c, for snapshot_props.c. DB locked. */
/* params[0] as "pool/vol@snap": the existing snapshot, its pool and its
 * full name. 0 or the call's error (field "<method>.id", ENOENT). */
int ds_snapshot_id_param(struct api_call *call, json_t *params, struct ds_snap *snap,
                         struct ds_pool *pool, char full[static DS_NAME_BUF * 2]);
/* The row of dataset@snap (a new reference), or NULL; pool_shape: as
 * pool.snapshot.* returns it (top-level used/referenced as integers),
 * else as zfs.snapshot.* does. */
json_t *ds_snapshot_row(const char *dataset, const char *snap, bool pool_shape);

/* snapshot_props.c: a snapshot's user properties and deferred destroy. */
/* pool.snapshot.create's properties ({"ns:name": "value"}) into *out:
 * 0, or -1 with the call's field errors / error set (*out then empty). */
int ds_snap_props_decode(struct api_call *call, json_t *props, struct ds_user_props *out);
/* Store (or, items with remove, delete) props for snapshot id, inside
 * the caller's transaction. 0 or -errno. */
int ds_snap_props_store(int64_t id, const struct ds_user_props *props);
/* Add snapshot id's properties to row: defer_destroy, userrefs and the
 * user properties in row.properties, and row.user_properties ({name:
 * {value, rawvalue, parsed, source}}). DB locked. */
void ds_snap_props_encode(int64_t id, json_t *row);
/* pool.snapshot.update [id, {user_properties_update, user_properties_remove}]. */
int ds_snapshot_update_method(struct api_call *call, json_t *params, json_t **result);
/*
 * What pool.snapshot.create and pool.snapshot.delete do, for callers below
 * the API (the snapshot task scheduler, with api_call_internal_new):
 * take snapshot dataset@name of a volume / delete snapshot full
 * ("pool/vol@snap"; refused while held, cloned or in use, never
 * deferred). Same checks, locks, log lines and notifications as the
 * methods. 0, or -1 with the error set on call.
 */
int ds_snapshot_take(struct api_call *call, const char *dataset, const char *name);
int ds_snapshot_destroy(struct api_call *call, const char *full);
/* pool.snapshot.hold / release [id, {recursive?}]. */
int ds_snapshot_hold_method(struct api_call *call, json_t *params, json_t **result);
int ds_snapshot_release_method(struct api_call *call, json_t *params, json_t **result);
/* DB locked: 0 if snap has no hold, else the call's error (EBUSY). */
int ds_snapshot_held(struct api_call *call, const struct ds_snap *snap, const char *full);
/* DB locked: mark snap (full: its name) for deferred destroy in one
 * transaction. 0 or the call's error. */
int ds_snapshot_defer_destroy(struct api_call *call, const struct ds_snap *snap, const char *full);
/* Destroy every snapshot marked for deferred destroy whose last clone is
 * gone (rows, storage, then EV_DATASET); one still exported stays
 * marked. at_start: RBD pools are left for a later call (start-up does
 * not wait for a cluster). Takes ds_ops_lock and the DB lock: call with
 * neither held. peer names the caller in the log. */
void ds_snapshot_reap_deferred(bool at_start, const char *peer);
extern const size_t ds_snapshot_method_count;
extern const struct api_method ds_rename_methods[];
extern const size_t ds_rename_method_count;
extern const struct api_method ds_promote_methods[];
extern const size_t ds_promote_method_count;
extern const char ds_schema_sql[];

/* Build rows (for queries and create/update results). Locked by caller. */
json_t *ds_dataset_rows(void);
/*
 * Query push-down: build only the rows a query's top-level filters can
 * match; the caller still runs api_query over them, so the answer is the
 * one the full rows would give. ds_dataset_rows_hinted narrows on
 * id/name "=", "in" (each dataset with its descendants, which its
 * children and used need) or "^"; the snapshot rows (snapshots.c,
 * through snapshot_store.h's keys) on id/name and dataset "=" / "in".
 * Locked by caller.
 */
json_t *ds_dataset_rows_hinted(json_t *params);
/* Off only in tests comparing the narrowed and full paths. */
extern bool ds_query_pushdown;
#define DS_HINT_MAX 512
/* The strings of the first top-level [f, "=", s] / [f, "in", [s…]] over
 * fields (new reference), or NULL. */
json_t *ds_query_hint_names(json_t *params, const char *const *fields, size_t n);
/* The value of a top-level [f, "^", "non-empty"] over fields (borrowed). */
const char *ds_query_hint_prefix(json_t *params, const char *const *fields, size_t n);
/* The least string above all those starting with prefix, into buf. */
int ds_prefix_end(const char *prefix, char *buf, size_t len);
/* The single row of a dataset (NULL if absent). */
json_t *ds_dataset_row(const char *name);
/* Start-up, after db_open: redo rollbacks a crash interrupted and remove
 * the temporary files of interrupted copies. */
void ds_rollback_recover(void);

#endif
