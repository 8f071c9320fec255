/*
 * The stored authorized-initiator groups (table iscsi_initiator): struct
 * icfg_initiator and the SQL behind it. A target's portal group names one
 * (or none); an empty list admits every initiator. The API
 * (config_initiator.c) decodes JSON into the struct and encodes the
 * TrueNAS row; the runtime reads the names with a target's groups
 * (config_read.c). Store conventions (DB lock held, writes inside the
 * caller's transaction): store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_INITIATOR_STORE_H
#define BLOCKD_CONFIG_ISCSI_INITIATOR_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "iscsi/config/store.h"

/* A group. Owned: initiators and comment (icfg_initiator_clear). id 0
 * until stored; initiators empty: everyone. */
struct icfg_initiator {
    int64_t id;
    struct api_strv initiators;
    char *comment;
};

void icfg_initiator_clear(struct icfg_initiator *g);
/* Group id into *out (zeroed first; clear it). 0, -ENOENT or -errno. */
int icfg_initiator_get(int64_t id, struct icfg_initiator *out);
/* Its rows as structs, by id (store.h icfg_table_list; a key may narrow
 * them on the columns id, comment). */
extern const struct icfg_table icfg_initiator_table;
/* Insert g (g->id set) / update g->id / delete group id. 0 or -errno. */
int icfg_initiator_insert(struct icfg_initiator *g);
int icfg_initiator_update(const struct icfg_initiator *g);
int icfg_initiator_delete(int64_t id);
/* The targets whose groups name group id, by id: a new array (free()).
 * 0 or -errno. */
int icfg_initiator_targets(int64_t id, int64_t **targets, size_t *n);
/* The lowest id of a group that admits everyone (an empty list): 0 with
 * *id, -ENOENT or -errno. */
int icfg_initiator_find_allow_all(int64_t *id);

#endif
