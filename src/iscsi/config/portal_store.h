/*
 * The stored iSCSI portals (tables iscsi_portal and iscsi_portal_ip):
 * struct icfg_portal and the SQL behind it. A portal is a set of listen
 * addresses (at iscsi.global.listen_port) with a tag that TrueNAS keeps
 * numbered 1..n. The API (config_portal.c) decodes JSON into the struct
 * and encodes the TrueNAS row; the runtime reads the addresses through
 * config_read.c. Store conventions (DB lock held, writes inside the
 * caller's transaction): store.h.
 */
#ifndef BLOCKD_CONFIG_ISCSI_PORTAL_STORE_H
#define BLOCKD_CONFIG_ISCSI_PORTAL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/config/store.h"

/*
 * A portal. Owned memory: comment and listen (icfg_portal_clear).
 *   id      0 until stored
 *   tag     1..n, assigned by icfg_portal_insert, renumbered on delete
 *   listen  the IP addresses, in the order given
 *   port    iscsi.global.listen_port when read (every address listens
 *           on it; not stored per portal)
 */
struct icfg_portal {
    int64_t id;
    int64_t tag;
    char *comment;
    struct api_strv listen;
    int port;
};

void icfg_portal_clear(struct icfg_portal *p);
/* Portal id into *out (zeroed first; clear it). 0, -ENOENT or -errno. */
int icfg_portal_get(int64_t id, struct icfg_portal *out);
/* Its rows as structs, by id (store.h icfg_table_list; a key may narrow
 * them on the columns id, tag). */
extern const struct icfg_table icfg_portal_table;
/* Insert p with its addresses as the last tag: p->id and p->tag are set.
 * 0, -EEXIST (an address is taken) or -errno. */
int icfg_portal_insert(struct icfg_portal *p);
/* Update p->id's comment and, with addresses, its addresses. 0, -EEXIST
 * or -errno. */
int icfg_portal_update(const struct icfg_portal *p, bool addresses);
/* Delete portal id, the target groups on it and its addresses; the tags
 * above its own move down by one. 0 or -errno. */
int icfg_portal_delete(int64_t id);
/* The lowest portal id: 0 with *id, -ENOENT (none) or -errno. */
int icfg_portal_first(int64_t *id);
/* The portal (other than except_id, or exactly portal_id when own) that
 * has address ip: 0 with *id, -ENOENT or -errno. */
int icfg_portal_find_ip(const char *ip, int64_t except_id, int64_t *id);
int icfg_portal_has_ip(int64_t portal_id, const char *ip);

#endif
