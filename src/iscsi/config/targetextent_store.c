/* The stored LUN mappings (targetextent_store.h). */
#include "iscsi/config/targetextent_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"

#define TE_SELECT "SELECT id, target_id, extent_id, lunid FROM iscsi_targetextent"

static int te_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_targetextent *te = elem;
    te->id = sqlite3_column_int64(st, 0);
    te->target = sqlite3_column_int64(st, 1);
    te->extent = sqlite3_column_int64(st, 2);
    te->has_lunid = true;
    te->lunid = sqlite3_column_int64(st, 3);
    return 0;
}

const struct icfg_table icfg_targetextent_table = {
    TE_SELECT, "ORDER BY id", sizeof(struct icfg_targetextent), te_decode_row, NULL};

int icfg_targetextent_get(int64_t id, struct icfg_targetextent *out)
{
    return icfg_table_get(&icfg_targetextent_table, id, out);
}

int icfg_targetextent_insert(struct icfg_targetextent *te)
{
    int rc = icfg_run("INSERT INTO iscsi_targetextent (target_id, extent_id, lunid) VALUES (?, ?, "
                      "?)",
                      "iii", te->target, te->extent, te->lunid);
    if (rc == 0)
        te->id = sqlite3_last_insert_rowid(db_handle());
    return rc;
}

int icfg_targetextent_update(const struct icfg_targetextent *te)
{
    return icfg_run("UPDATE iscsi_targetextent SET target_id = ?, extent_id = ?, lunid = ? WHERE "
                    "id = ?",
                    "iiii", te->target, te->extent, te->lunid, te->id);
}

int icfg_targetextent_delete(int64_t id)
{
    return icfg_run("DELETE FROM iscsi_targetextent WHERE id = ?", "i", id);
}

int icfg_targetextent_find_extent(int64_t extent, int64_t except_id, int64_t *id)
{
    return icfg_int(id, "SELECT id FROM iscsi_targetextent WHERE extent_id = ? AND id != ?", "ii",
                    extent, except_id);
}

int icfg_targetextent_find_lun(int64_t target, int64_t lun, int64_t except_id, int64_t *id)
{
    return icfg_int(id,
                    "SELECT id FROM iscsi_targetextent WHERE target_id = ? AND lunid = ? AND id "
                    "!= ?",
                    "iii", target, lun, except_id);
}

int icfg_targetextent_free_lun(int64_t target, int64_t except_id, int64_t *lun)
{
    /* Inside the transaction, so the LUN stays free until the commit. */
    int rc = icfg_int(lun,
                      "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM iscsi_targetextent WHERE "
                      "target_id = ?1 AND lunid = 0 AND id != ?3) THEN 0 ELSE (SELECT "
                      "MIN(a.lunid + 1) FROM iscsi_targetextent a WHERE a.target_id = ?1 AND "
                      "a.id != ?3 AND a.lunid + 1 <= ?2 AND NOT EXISTS (SELECT 1 FROM "
                      "iscsi_targetextent b WHERE b.target_id = ?1 AND b.id != ?3 AND b.lunid = "
                      "a.lunid + 1)) END",
                      "iii", target, (int64_t)ICFG_LUN_MAX, except_id);
    return rc == -ENOENT ? -ENOSPC : rc;
}

int icfg_targetextent_find(int64_t target, int64_t extent, struct icfg_targetextent *out)
{
    int64_t id;
    int rc =
        icfg_int(&id, "SELECT id FROM iscsi_targetextent WHERE target_id = ? AND extent_id = ?",
                 "ii", target, extent);
    return rc < 0 ? rc : icfg_targetextent_get(id, out);
}

static int share_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_lun_share *r = elem;
    r->target = sqlite3_column_int64(st, 0);
    r->target_name = icfg_col_dup(st, 1, false);
    r->alias = icfg_col_dup(st, 2, true);
    r->mapped = sqlite3_column_type(st, 3) != SQLITE_NULL;
    r->extent = sqlite3_column_int64(st, 3);
    r->disk = icfg_col_dup(st, 4, true);
    r->path = icfg_col_dup(st, 5, true);
    r->ro = r->mapped && sqlite3_column_int(st, 6);
    r->enabled = !r->mapped || sqlite3_column_int(st, 7);
    r->lunid = sqlite3_column_int64(st, 8);
    bool ok = r->target_name && (r->alias || sqlite3_column_type(st, 2) == SQLITE_NULL) &&
              (r->disk || sqlite3_column_type(st, 4) == SQLITE_NULL) &&
              (r->path || sqlite3_column_type(st, 5) == SQLITE_NULL);
    return ok ? 0 : -ENOMEM;
}

static void share_clear(void *elem)
{
    struct icfg_lun_share *r = elem;
    free(r->target_name);
    free(r->alias);
    free(r->disk);
    free(r->path);
}

int icfg_lun_shares(struct icfg_lun_share **out, size_t *n)
{
    void *v;
    int rc = icfg_list("SELECT t.id, t.name, t.alias, e.id, e.disk, e.path, e.ro, e.enabled, "
                       "te.lunid FROM iscsi_target t "
                       "LEFT JOIN iscsi_targetextent te ON te.target_id = t.id "
                       "LEFT JOIN iscsi_extent e ON e.id = te.extent_id",
                       "ORDER BY t.name, te.lunid", NULL, sizeof(struct icfg_lun_share),
                       share_decode_row, share_clear, &v, n);
    *out = v;
    return rc;
}

void icfg_lun_shares_free(struct icfg_lun_share *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        share_clear(&v[i]);
    free(v);
}
