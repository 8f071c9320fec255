/*
 * The stored iSCSI extents (table iscsi_extent): struct icfg_extent and
 * the SQL behind it. An extent is a LUN's source: a blockd volume or
 * snapshot (DISK, disk "zvol/<pool>/<volume>") or a file inside a pool
 * (FILE, path). The API (config_extent.c) decodes JSON into the struct
 * (extent_decode) and encodes the TrueNAS row (extent_encode); the
 * runtime builds an LU from it (config_lu.c icfg_lu_from_extent). Store
 * conventions (DB lock held, writes inside the caller's transaction):
 * store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_EXTENT_STORE_H
#define BLOCKD_CONFIG_ISCSI_EXTENT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/config/store.h"

enum icfg_extent_type { ICFG_EXTENT_DISK, ICFG_EXTENT_FILE };
extern const char *const icfg_extent_type_names[]; /* "DISK", "FILE", NULL */

/*
 * An extent. Strings are owned (icfg_extent_clear frees them).
 *   id               0 until stored
 *   disk             DISK: "zvol/<dataset>"; NULL for FILE
 *   path             FILE: absolute path inside a pool; NULL for DISK
 *   filesize         FILE: bytes (0: the file's size); 0 for DISK
 *   serial           the unit serial number; NULL or "" until stored (a
 *                    unique one is generated then)
 *   naa              the NAA identifier, generated at insert
 *   has_avail_threshold / avail_threshold   1..99, or none (JSON null)
 *   rpm              "UNKNOWN", "SSD", "5400", ... (the field table's enum)
 *   vendor           the INQUIRY vendor (stored default "BLOCKD")
 *   gen              the LU generation: bumped when a change needs a new LU
 *   filesize_invalid a request gave a filesize that is neither a
 *                    non-negative integer nor a decimal string (the API
 *                    refuses it; never stored)
 */
struct icfg_extent {
    int64_t id;
    char *name;
    enum icfg_extent_type type;
    char *disk, *path;
    int64_t filesize;
    char *serial;
    int64_t blocksize;
    bool pblocksize;
    bool has_avail_threshold;
    int64_t avail_threshold;
    char *comment, *naa, *rpm, *vendor;
    bool insecure_tpc, xen, ro, enabled;
    int64_t gen;
    bool filesize_invalid;
};

void icfg_extent_clear(struct icfg_extent *e);

/* Whether extent id exists: 0, -ENOENT or -errno. */
int icfg_extent_exists(int64_t id);
/* Extent id into *out (zeroed first; clear it). 0, -ENOENT or -errno. */
int icfg_extent_get(int64_t id, struct icfg_extent *out);
/* Its rows as structs, by id (store.h icfg_table_list; a key may narrow
 * them on the columns id, name, disk, path, serial,
 * naa). */
extern const struct icfg_table icfg_extent_table;
/* Insert e, generating its serial (when NULL or "") and NAA: e->id,
 * e->serial and e->naa are set. 0, -EEXIST (a UNIQUE column) or -errno. */
int icfg_extent_insert(struct icfg_extent *e);
/* Update extent e->id (a missing serial is generated, as on insert);
 * new_lu bumps gen, so the runtime builds a new LU. 0, -EEXIST or -errno. */
int icfg_extent_update(struct icfg_extent *e, bool new_lu);
/* Delete extent id's row (its mapping is the caller's). 0 or -errno. */
int icfg_extent_delete(int64_t id);

/* The id of another extent (not except_id) with this name / serial:
 * 0 with *id, -ENOENT or -errno. */
int icfg_extent_find_name(const char *name, int64_t except_id, int64_t *id);
int icfg_extent_find_serial(const char *serial, int64_t except_id, int64_t *id);
/* The extent of disk: 0 with *id, -ENOENT or -errno. */
int icfg_extent_find_disk(const char *disk, int64_t *id);
/* The target extent id is mapped to: 0 with *target, -ENOENT (not
 * mapped) or -errno. */
int icfg_extent_target(int64_t id, int64_t *target);
/* The size of volume dataset as stored (not a snapshot): 0 with *size,
 * -ENOENT (no such volume) or -errno. */
int icfg_volume_size(const char *dataset, uint64_t *size);

/* A volume no extent uses yet (iscsi.extent.disk_choices). */
struct icfg_volume_choice {
    char *name; /* "pool/volume" (owned) */
    uint64_t size;
};
/* Those volumes by name: a new array (icfg_volume_choices_free). 0 or -errno. */
int icfg_volume_choices(struct icfg_volume_choice **out, size_t *n);
void icfg_volume_choices_free(struct icfg_volume_choice *v, size_t n);

#endif
