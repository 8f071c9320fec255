/* The stored authorized-initiator groups (initiator_store.h). */
#include "iscsi/config/initiator_store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"

#define INITIATOR_SELECT "SELECT id, initiators, comment FROM iscsi_initiator"

void icfg_initiator_clear(struct icfg_initiator *g)
{
    api_strv_clear(&g->initiators);
    free(g->comment);
    memset(g, 0, sizeof(*g));
}

static int initiator_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_initiator *g = elem;
    g->id = sqlite3_column_int64(st, 0);
    g->comment = icfg_col_dup(st, 2, false);
    if (!g->comment)
        return -ENOMEM;
    return icfg_strv_from_text((const char *)sqlite3_column_text(st, 1), &g->initiators);
}

static void initiator_clear_elem(void *elem)
{
    icfg_initiator_clear(elem);
}

const struct icfg_table icfg_initiator_table = {INITIATOR_SELECT, "ORDER BY id",
                                                sizeof(struct icfg_initiator), initiator_decode_row,
                                                initiator_clear_elem};

int icfg_initiator_get(int64_t id, struct icfg_initiator *out)
{
    return icfg_table_get(&icfg_initiator_table, id, out);
}

int icfg_initiator_insert(struct icfg_initiator *g)
{
    char *list = icfg_strv_to_text(&g->initiators);
    if (!list)
        return -ENOMEM;
    int rc = icfg_run("INSERT INTO iscsi_initiator (initiators, comment) VALUES (?, ?)", "tt", list,
                      g->comment ? g->comment : "");
    free(list);
    if (rc == 0)
        g->id = sqlite3_last_insert_rowid(db_handle());
    return rc;
}

int icfg_initiator_update(const struct icfg_initiator *g)
{
    char *list = icfg_strv_to_text(&g->initiators);
    if (!list)
        return -ENOMEM;
    int rc = icfg_run("UPDATE iscsi_initiator SET initiators = ?, comment = ? WHERE id = ?", "tti",
                      list, g->comment ? g->comment : "", g->id);
    free(list);
    return rc;
}

int icfg_initiator_delete(int64_t id)
{
    return icfg_run("DELETE FROM iscsi_initiator WHERE id = ?", "i", id);
}

int icfg_initiator_targets(int64_t id, int64_t **targets, size_t *n)
{
    struct icfg_key key = {.column = "initiator_id",
                           .values = &(struct icfg_key_value){.is_int = true, .i = id},
                           .n = 1};
    void *v;
    int rc = icfg_list("SELECT target_id FROM iscsi_target_group",
                       "GROUP BY target_id ORDER BY "
                       "MIN(id)",
                       &key, sizeof(int64_t), icfg_decode_id, NULL, &v, n);
    *targets = v;
    return rc;
}

int icfg_initiator_find_allow_all(int64_t *id)
{
    return icfg_int(id, "SELECT MIN(id) FROM iscsi_initiator WHERE initiators = '[]'", "");
}
