/*
 * The stored LUN mappings (table iscsi_targetextent): struct
 * icfg_targetextent and the SQL behind it. A mapping makes an extent LUN
 * lunid of a target; an extent maps to one target only and LUN ids are
 * unique per target. The API (config_targetextent.c) decodes JSON into
 * the struct and encodes the TrueNAS row; the runtime reads a target's
 * LUNs through config_read.c. Store conventions (DB lock held, writes
 * inside the caller's transaction): store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_TARGETEXTENT_STORE_H
#define BLOCKD_CONFIG_ISCSI_TARGETEXTENT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/config/store.h"

/* A mapping (no owned memory). id 0 until stored; has_lunid false (JSON
 * null) asks for the lowest free LUN, which the API's check assigns. */
struct icfg_targetextent {
    int64_t id;
    int64_t target; /* iscsi_target id */
    int64_t extent; /* iscsi_extent id */
    bool has_lunid;
    int64_t lunid; /* 0..ICFG_LUN_MAX */
};

/* Mapping id into *out. 0, -ENOENT or -errno. */
int icfg_targetextent_get(int64_t id, struct icfg_targetextent *out);
/* Its rows as structs, by id (store.h icfg_table_list; a key may narrow
 * them on the columns id, target_id, extent_id). */
extern const struct icfg_table icfg_targetextent_table;
/* Insert te (has_lunid must be set); te->id is set. 0, -EEXIST or -errno. */
int icfg_targetextent_insert(struct icfg_targetextent *te);
/* Update mapping te->id. 0, -EEXIST or -errno. */
int icfg_targetextent_update(const struct icfg_targetextent *te);
/* Delete mapping id. 0 or -errno. */
int icfg_targetextent_delete(int64_t id);

/* The mapping (not except_id) of extent / of LUN lun on target: 0 with
 * *id, -ENOENT or -errno. */
int icfg_targetextent_find_extent(int64_t extent, int64_t except_id, int64_t *id);
int icfg_targetextent_find_lun(int64_t target, int64_t lun, int64_t except_id, int64_t *id);
/* The mapping of extent on target: 0 with *out, -ENOENT or -errno. */
int icfg_targetextent_find(int64_t target, int64_t extent, struct icfg_targetextent *out);
/* The lowest LUN of target in 0..ICFG_LUN_MAX no other mapping (than
 * except_id) uses: 0 with *lun, -ENOSPC or -errno. */
int icfg_targetextent_free_lun(int64_t target, int64_t except_id, int64_t *lun);

/*
 * One LUN of a target as share.iscsi.query shows it: every target, with
 * each of its mappings (a target without any: one row, mapped false).
 * Owned strings (icfg_lun_shares_free).
 */
struct icfg_lun_share {
    int64_t target;
    char *target_name, *alias; /* alias NULL: none */
    bool mapped;
    int64_t extent, lunid;
    char *disk, *path; /* the extent's (NULL: none) */
    bool ro, enabled;
};
/* Those rows by target name and LUN: a new array. 0 or -errno. */
int icfg_lun_shares(struct icfg_lun_share **out, size_t *n);
void icfg_lun_shares_free(struct icfg_lun_share *v, size_t n);

#endif
