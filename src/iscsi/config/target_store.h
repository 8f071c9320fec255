/*
 * The stored iSCSI targets (tables iscsi_target and iscsi_target_group):
 * struct icfg_target and the SQL behind it. The API (config_target.c)
 * decodes JSON into the struct (target_decode) and encodes it back as the
 * TrueNAS-shaped row (target_encode); the runtime reads targets through
 * config_read.c. Store conventions (DB lock held, writes inside the
 * caller's transaction): store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_TARGET_STORE_H
#define BLOCKD_CONFIG_ISCSI_TARGET_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/config/store.h"

/* A group's authentication method (stored and shown by its name). */
enum icfg_authmethod { ICFG_AUTH_NONE, ICFG_AUTH_CHAP, ICFG_AUTH_CHAP_MUTUAL };
/* "NONE", "CHAP", "CHAP_MUTUAL", NULL: indexed by enum icfg_authmethod. */
extern const char *const icfg_authmethod_names[];
/* The name's method, ICFG_AUTH_NONE for an unknown one. */
enum icfg_authmethod icfg_authmethod_parse(const char *name);

/* The target's mode; only ISCSI is served (the others are refused by the
 * API's checks and never stored). */
enum icfg_target_mode { ICFG_MODE_ISCSI, ICFG_MODE_FC, ICFG_MODE_BOTH };
extern const char *const icfg_target_mode_names[]; /* "ISCSI", "FC", "BOTH", NULL */

/* One portal group of a target: who may log in through which portal. */
struct icfg_target_group {
    int64_t portal;     /* iscsi_portal id */
    bool has_initiator; /* false: no initiator group (JSON null) */
    int64_t initiator;  /* iscsi_initiator id, when has_initiator */
    enum icfg_authmethod authmethod;
    bool has_auth; /* false: no CHAP credentials (JSON null) */
    int64_t auth;  /* iscsi_auth tag, when has_auth */
};

/*
 * A target. Strings and arrays are owned by the struct (icfg_target_clear
 * frees them).
 *   id                0 until stored
 *   name              the IQN's suffix (IQN = basename:name)
 *   alias             NULL: none ("" is stored as none)
 *   groups            in the order given (the rows' order)
 *   auth_networks     CIDR strings; empty: every address
 *   rel_tgt_id        1..ICFG_REL_TGT_ID_MAX, assigned by icfg_target_insert
 *   iscsi_parameters  a request gave non-null per-target parameters (the
 *                     API refuses them; never stored)
 */
struct icfg_target {
    int64_t id;
    char *name;
    char *alias;
    enum icfg_target_mode mode;
    struct icfg_target_group *groups;
    size_t n_groups;
    struct api_strv auth_networks;
    int64_t rel_tgt_id;
    bool iscsi_parameters;
};

void icfg_target_clear(struct icfg_target *t);
/* Replace t's groups with a copy of the n groups of g. 0 or -ENOMEM. */
int icfg_target_set_groups(struct icfg_target *t, const struct icfg_target_group *g, size_t n);

/* Whether target id exists: 0, -ENOENT or -errno. */
int icfg_target_exists(int64_t id);
/* Target id into *out (zeroed first; clear it). 0, -ENOENT or -errno. */
int icfg_target_get(int64_t id, struct icfg_target *out);
/* Its rows as structs, by id (store.h icfg_table_list; a key may narrow
 * them on the columns id, name, alias). */
extern const struct icfg_table icfg_target_table;
/* Insert t with its groups: the lowest free rel_tgt_id is allocated
 * inside the transaction; t->id and t->rel_tgt_id are set. 0, -ENOSPC (no
 * free rel_tgt_id), -EEXIST (a UNIQUE column) or -errno. */
int icfg_target_insert(struct icfg_target *t);
/* Update target t->id (its name, alias, mode, auth_networks and groups;
 * rel_tgt_id never changes). 0, -EEXIST or -errno. */
int icfg_target_update(const struct icfg_target *t);
/* Delete target id and its groups (not its LUN mappings: the caller
 * deletes those first). 0 or -errno. */
int icfg_target_delete(int64_t id);
/* Lower the rel_tgt_id search hint (a value may have become free); 0
 * resets it to 1 (after a rollback). */
void icfg_target_reset_hint(int64_t rel_tgt_id);

/* The id of another target (not except_id) whose name / alias is this:
 * 0 with *id, -ENOENT or -errno. */
int icfg_target_find_name(const char *name, int64_t except_id, int64_t *id);
int icfg_target_find_alias(const char *alias, int64_t except_id, int64_t *id);
/* The extents mapped to target id: a new array (free()). 0 or -errno. */
int icfg_target_extents(int64_t id, int64_t **extents, size_t *n);

/* What a group refers to. 0 when it exists, -ENOENT or -errno. */
int icfg_portal_exists(int64_t id);
int icfg_initiator_exists(int64_t id);
/* An auth tag with any credential (peer false) / one with a peer user
 * (peer true, CHAP_MUTUAL). */
int icfg_auth_tag_exists(int64_t tag, bool peer);

#endif
