/*
 * Pools and datasets (volumes, filesystems, snapshots): the config side of
 * store/. Owns the mapping from dataset names to files and the cache of
 * open volumes shared by every front-end.
 */
#ifndef BLOCKD_CONFIG_DATASETS_H
#define BLOCKD_CONFIG_DATASETS_H

#include <stdbool.h>
#include <stddef.h>

#include "store/volume.h"

/* Register the pool.* / zfs.snapshot.* API methods and DB schema. */
void datasets_init(const char *state_dir);
/* Create the default pool if it does not exist (first start). */
int datasets_ensure_default_pool(const char *name);

/* Open (or share the cached) volume for "pool/vol" or "pool/vol@snap"
 * (snapshots are read-only). Returns a new reference. 0, -ENOENT, -errno. */
int datasets_volume_open(const char *name, struct volume **out);

/* A front-end that uses datasets registers a check so that deleting or
 * rolling back a dataset in use is refused (EBUSY) with its reason. The
 * check returns true and fills why when name (or a child) is in use. */
typedef bool (*datasets_in_use_fn)(const char *name, char *why, size_t len);
void datasets_register_in_use(datasets_in_use_fn fn);

/* Flush every open volume (shutdown). */
void datasets_flush_all(void);
void datasets_shutdown(void);

#endif
