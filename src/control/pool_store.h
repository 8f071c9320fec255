/*
 * The stored pools (table pools): struct ds_pool and the SQL behind it.
 * The API (pools.c) decodes pool.create's params into a
 * request struct, checks it, records the pool through ds_pool_insert in
 * one transaction and encodes struct ds_pool back as the TrueNAS-shaped
 * row; nothing here sees JSON. An RBD pool's Ceph settings live in table
 * pool_rbd behind pool_rbd_store.h (ds_rbd_spec_get / _insert / _each);
 * other modules read them with the pool through ds_pool_get_rbd.
 *
 * Every function runs with the DB lock held (control/db.h db_lock, or
 * inside a struct cfg_tx, control/cfgtx.h); writes join the caller's
 * transaction, which records the change and commits it. Any API/worker
 * thread.
 */
#ifndef BLOCKD_CONFIG_POOL_STORE_H
#define BLOCKD_CONFIG_POOL_STORE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/pool_rbd_store.h"
#include "store/names.h"

/*
 * A pool as stored.
 *   id       0 until stored
 *   name     the pool's name, also the name of its root dataset
 *   path     its directory (absolute, canonical), or "rbd:POOL[/NS]" for
 *            an RBD pool
 *   created  ms since the epoch (whole seconds), set by ds_pool_insert
 */
struct ds_pool {
    int64_t id;
    char name[NAME_DATASET_MAX + 1];
    char path[PATH_MAX];
    int64_t created;
};

/* The pool called name into *out. 0, -ENOENT or -errno. */
int ds_pool_get(const char *name, struct ds_pool *out);
/* The pool whose directory (or "rbd:..." locator) is path into *out. 0,
 * -ENOENT or -errno. */
int ds_pool_get_by_path(const char *path, struct ds_pool *out);
/* Every pool, ordered by id (by_name false) or by name: a new array in
 * *out (free(); NULL when none) of *n pools. 0, -ENOMEM or -errno. */
int ds_pool_list(bool by_name, struct ds_pool **out, size_t *n);
/* The RBD pool called name into *out and its Ceph settings into *spec.
 * 0, -ENOENT (no such pool, or not an RBD pool) or -errno. */
int ds_pool_get_rbd(const char *name, struct ds_pool *out, struct ds_rbd_spec *spec);
/* Insert p (its name and path); sets p->id and p->created (now). Not its
 * root dataset: the caller inserts that in the same transaction. 0,
 * -EEXIST (the name or the path is taken) or -errno. */
int ds_pool_insert(struct ds_pool *p);

#endif
