/* The stored iSCSI targets and their portal groups (target_store.h). */
#include "iscsi/config/target_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"

const char *const icfg_authmethod_names[] = {"NONE", "CHAP", "CHAP_MUTUAL", NULL};
const char *const icfg_target_mode_names[] = {"ISCSI", "FC", "BOTH", NULL};

#define TARGET_SELECT "SELECT id, name, alias, mode, auth_networks, rel_tgt_id FROM iscsi_target"

/* Every rel_tgt_id below this is in use (DB lock). Reset to 1 whenever a
 * transaction rolls back or a target is deleted below it. */
static int64_t rel_hint = 1;

void icfg_target_reset_hint(int64_t rel_tgt_id)
{
    if (rel_tgt_id < rel_hint)
        rel_hint = rel_tgt_id < 1 ? 1 : rel_tgt_id;
}

enum icfg_authmethod icfg_authmethod_parse(const char *name)
{
    return (enum icfg_authmethod)icfg_name_index(icfg_authmethod_names, name, ICFG_AUTH_NONE);
}

void icfg_target_clear(struct icfg_target *t)
{
    free(t->name);
    free(t->alias);
    free(t->groups);
    api_strv_clear(&t->auth_networks);
    memset(t, 0, sizeof(*t));
}

int icfg_target_set_groups(struct icfg_target *t, const struct icfg_target_group *g, size_t n)
{
    struct icfg_target_group *copy = n ? malloc(n * sizeof(*copy)) : NULL;
    if (n && !copy)
        return -ENOMEM;
    if (n)
        memcpy(copy, g, n * sizeof(*copy));
    free(t->groups);
    t->groups = copy;
    t->n_groups = n;
    return 0;
}

static int group_decode(sqlite3_stmt *st, void *elem)
{
    struct icfg_target_group *g = elem;
    g->portal = sqlite3_column_int64(st, 0);
    g->has_initiator = sqlite3_column_type(st, 1) != SQLITE_NULL;
    g->initiator = sqlite3_column_int64(st, 1);
    g->authmethod = icfg_authmethod_parse((const char *)sqlite3_column_text(st, 2));
    g->has_auth = sqlite3_column_type(st, 3) != SQLITE_NULL;
    g->auth = sqlite3_column_int64(st, 3);
    return 0;
}

static int groups_load(struct icfg_target *t)
{
    struct icfg_key key = {.column = "target_id",
                           .values = &(struct icfg_key_value){.is_int = true, .i = t->id},
                           .n = 1};
    void *groups;
    int rc = icfg_list("SELECT portal_id, initiator_id, authmethod, auth_tag FROM "
                       "iscsi_target_group",
                       "ORDER BY id", &key, sizeof(struct icfg_target_group), group_decode, NULL,
                       &groups, &t->n_groups);
    t->groups = groups;
    return rc;
}

/* The row at st (TARGET_SELECT's columns) with its groups. */
static int target_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_target *t = elem;
    t->id = sqlite3_column_int64(st, 0);
    t->name = icfg_col_dup(st, 1, false);
    t->alias = icfg_col_dup(st, 2, true);
    t->mode = (enum icfg_target_mode)icfg_name_index(
        icfg_target_mode_names, (const char *)sqlite3_column_text(st, 3), ICFG_MODE_ISCSI);
    t->rel_tgt_id = sqlite3_column_int64(st, 5);
    if (!t->name || (!t->alias && sqlite3_column_type(st, 2) != SQLITE_NULL))
        return -ENOMEM;
    int rc = icfg_strv_from_text((const char *)sqlite3_column_text(st, 4), &t->auth_networks);
    return rc < 0 ? rc : groups_load(t);
}

static void target_clear_elem(void *elem)
{
    icfg_target_clear(elem);
}

const struct icfg_table icfg_target_table = {
    TARGET_SELECT, "ORDER BY id", sizeof(struct icfg_target), target_decode_row, target_clear_elem};

int icfg_target_exists(int64_t id)
{
    int64_t found;
    return icfg_int(&found, "SELECT id FROM iscsi_target WHERE id = ?", "i", id);
}

int icfg_target_get(int64_t id, struct icfg_target *out)
{
    return icfg_table_get(&icfg_target_table, id, out);
}

static int groups_store(int64_t id, const struct icfg_target_group *groups, size_t n)
{
    int rc = icfg_run("DELETE FROM iscsi_target_group WHERE target_id = ?", "i", id);
    sqlite3_stmt *st;
    if (rc < 0 || (rc = icfg_prepare("INSERT INTO iscsi_target_group (target_id, portal_id, "
                                     "initiator_id, authmethod, auth_tag) VALUES (?, ?, ?, ?, ?)",
                                     &st)) < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct icfg_target_group *g = &groups[i];
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, g->portal);
        if (g->has_initiator)
            sqlite3_bind_int64(st, 3, g->initiator);
        else
            sqlite3_bind_null(st, 3);
        sqlite3_bind_text(st, 4, icfg_authmethod_names[g->authmethod], -1, SQLITE_STATIC);
        if (g->has_auth)
            sqlite3_bind_int64(st, 5, g->auth);
        else
            sqlite3_bind_null(st, 5);
        rc = icfg_step(st, "INSERT INTO iscsi_target_group");
    }
    icfg_finalize(st);
    return rc;
}

/* The lowest free rel_tgt_id in 1..ICFG_REL_TGT_ID_MAX. The search starts
 * at a hint below which every value is known to be taken, so a create
 * costs O(log n), not a scan of every target. 0 or -ENOSPC / -errno. */
static int rel_tgt_id_alloc(int64_t *rel)
{
    int rc = icfg_int(rel,
                      "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM iscsi_target WHERE rel_tgt_id "
                      "= ?1) THEN ?1 ELSE (SELECT t.rel_tgt_id + 1 FROM iscsi_target t WHERE "
                      "t.rel_tgt_id >= ?1 AND t.rel_tgt_id + 1 <= ?2 AND NOT EXISTS (SELECT 1 "
                      "FROM iscsi_target u WHERE u.rel_tgt_id = t.rel_tgt_id + 1) ORDER BY "
                      "t.rel_tgt_id LIMIT 1) END",
                      "ii", rel_hint, (int64_t)ICFG_REL_TGT_ID_MAX);
    if (rc == 0 && *rel > ICFG_REL_TGT_ID_MAX)
        rc = -ENOENT;
    if (rc == -ENOENT)
        return -ENOSPC;
    if (rc == 0)
        rel_hint = *rel + 1;
    return rc;
}

int icfg_target_insert(struct icfg_target *t)
{
    char *nets = icfg_strv_to_text(&t->auth_networks);
    if (!nets)
        return -ENOMEM;
    int64_t rel = 0;
    int rc = rel_tgt_id_alloc(&rel);
    if (rc == 0)
        rc = icfg_run("INSERT INTO iscsi_target (name, alias, mode, auth_networks, rel_tgt_id) "
                      "VALUES (?, ?, ?, ?, ?)",
                      "tttti", t->name, t->alias, icfg_target_mode_names[t->mode], nets, rel);
    free(nets);
    if (rc < 0)
        return rc;
    t->id = sqlite3_last_insert_rowid(db_handle());
    t->rel_tgt_id = rel;
    return groups_store(t->id, t->groups, t->n_groups);
}

int icfg_target_update(const struct icfg_target *t)
{
    char *nets = icfg_strv_to_text(&t->auth_networks);
    if (!nets)
        return -ENOMEM;
    int rc = icfg_run("UPDATE iscsi_target SET name = ?, alias = ?, mode = ?, auth_networks = ? "
                      "WHERE id = ?",
                      "tttti", t->name, t->alias, icfg_target_mode_names[t->mode], nets, t->id);
    free(nets);
    return rc < 0 ? rc : groups_store(t->id, t->groups, t->n_groups);
}

int icfg_target_delete(int64_t id)
{
    int64_t rel;
    if (icfg_int(&rel, "SELECT rel_tgt_id FROM iscsi_target WHERE id = ?", "i", id) == 0)
        icfg_target_reset_hint(rel);
    int rc = icfg_run("DELETE FROM iscsi_target_group WHERE target_id = ?", "i", id);
    return rc < 0 ? rc : icfg_run("DELETE FROM iscsi_target WHERE id = ?", "i", id);
}

int icfg_target_find_name(const char *name, int64_t except_id, int64_t *id)
{
    return icfg_int(id, "SELECT id FROM iscsi_target WHERE name = ? AND id != ?", "ti", name,
                    except_id);
}

int icfg_target_find_alias(const char *alias, int64_t except_id, int64_t *id)
{
    return icfg_int(id, "SELECT id FROM iscsi_target WHERE alias = ? AND id != ?", "ti", alias,
                    except_id);
}

int icfg_target_extents(int64_t id, int64_t **extents, size_t *n)
{
    struct icfg_key key = {
        .column = "target_id", .values = &(struct icfg_key_value){.is_int = true, .i = id}, .n = 1};
    void *v;
    int rc = icfg_list("SELECT extent_id FROM iscsi_targetextent", "ORDER BY extent_id", &key,
                       sizeof(int64_t), icfg_decode_id, NULL, &v, n);
    *extents = v;
    return rc;
}

int icfg_portal_exists(int64_t id)
{
    int64_t found;
    return icfg_int(&found, "SELECT id FROM iscsi_portal WHERE id = ?", "i", id);
}

int icfg_initiator_exists(int64_t id)
{
    int64_t found;
    return icfg_int(&found, "SELECT id FROM iscsi_initiator WHERE id = ?", "i", id);
}

int icfg_auth_tag_exists(int64_t tag, bool peer)
{
    int64_t found;
    return icfg_int(&found,
                    peer ? "SELECT id FROM iscsi_auth WHERE tag = ? AND peeruser != '' LIMIT 1"
                         : "SELECT id FROM iscsi_auth WHERE tag = ? LIMIT 1",
                    "i", tag);
}
