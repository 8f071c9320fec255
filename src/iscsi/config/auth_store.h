/*
 * The stored CHAP credentials (table iscsi_auth): struct icfg_auth and
 * the SQL behind it. Credentials are grouped by tag; a target's portal
 * group names a tag. Secrets are stored sealed (control/pwenc.h:
 * AES-256-GCM with a key kept outside the DB): the struct holds them in
 * clear, icfg_auth_seal seals them for a write, and reads open them. They
 * are never logged. The API (config_auth.c) decodes JSON into the struct
 * and encodes the TrueNAS row; the runtime reads credentials through
 * config_read.c. Store conventions (DB lock held, writes inside the
 * caller's transaction): store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_AUTH_STORE_H
#define BLOCKD_CONFIG_ISCSI_AUTH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "iscsi/config/store.h"
#include "iscsi/config/target_store.h"
#include "control/pwenc.h"

/*
 * A credential. Owned strings (icfg_auth_clear zeroes the secrets).
 *   id              0 until stored
 *   tag             0..65535: the auth group targets name
 *   secret, peersecret   in clear; NULL when the stored value cannot be
 *                   decrypted (the key file was lost or replaced, or the
 *                   row altered: logged when read); peersecret "" : none
 *   peeruser        "" : no mutual CHAP
 *   discovery_auth  whether (and how) it authenticates discovery sessions
 */
struct icfg_auth {
    int64_t id;
    int64_t tag;
    char *user, *secret, *peeruser, *peersecret;
    enum icfg_authmethod discovery_auth;
};

/* A credential's secrets as stored (sealed). */
struct icfg_auth_sealed {
    char secret[PWENC_SEALED_MAX];
    char peersecret[PWENC_SEALED_MAX];
};

void icfg_auth_clear(struct icfg_auth *a);
/* Credential id into *out (zeroed first; clear it). 0, -ENOENT or -errno. */
int icfg_auth_get(int64_t id, struct icfg_auth *out);
/* Its rows as structs, by id (store.h icfg_table_list; a key may narrow
 * them on the columns id, tag, user). */
extern const struct icfg_table icfg_auth_table;
/* Seal a's secrets for icfg_auth_insert/_update (zero *out after use).
 * 0 or the -errno of pwenc_seal. */
int icfg_auth_seal(const struct icfg_auth *a, struct icfg_auth_sealed *out);
/* Insert a with its sealed secrets (a->id set) / update a->id. 0 or -errno. */
int icfg_auth_insert(struct icfg_auth *a, const struct icfg_auth_sealed *sealed);
int icfg_auth_update(const struct icfg_auth *a, const struct icfg_auth_sealed *sealed);
int icfg_auth_delete(int64_t id);
/* The credential (not except_id) with CHAP_MUTUAL discovery: 0 with *id,
 * -ENOENT or -errno. */
int icfg_auth_find_mutual_discovery(int64_t except_id, int64_t *id);
/* How many credentials other than except_id have tag. 0 or -errno. */
int icfg_auth_tag_others(int64_t tag, int64_t except_id, int64_t *count);
/* The targets whose groups name tag, by first use: a new array (free()).
 * 0 or -errno. */
int icfg_auth_tag_targets(int64_t tag, int64_t **targets, size_t *n);

#endif
