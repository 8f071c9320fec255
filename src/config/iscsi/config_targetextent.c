/* iscsi.targetextent.create|update|delete|query: LUN mappings. An extent
 * maps to one target only; LUN ids are unique per target. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config/db.h"
#include "core/util.h"
#include "config/iscsi/config_crud.h"
#include "config/iscsi/config_internal.h"

#define TE_SELECT "SELECT id, target_id, extent_id, lunid FROM iscsi_targetextent"
#define TE_BY_ID TE_SELECT " WHERE id = ?"

static json_t *te_row(sqlite3_stmt *st)
{
    return json_pack("{s:I, s:I, s:I, s:I}", "id", (json_int_t)sqlite3_column_int64(st, 0),
                     "target", (json_int_t)sqlite3_column_int64(st, 1), "extent",
                     (json_int_t)sqlite3_column_int64(st, 2), "lunid",
                     (json_int_t)sqlite3_column_int64(st, 3));
}

static const struct api_field te_fields[] = {
    {.name = "target", .type = API_T_INT, .flags = API_REQUIRED},
    {.name = "extent", .type = API_T_INT, .flags = API_REQUIRED},
    {.name = "lunid",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = ICFG_LUN_MAX,
     .def = "null"},
    {.name = "defer", .type = API_T_BOOL},
};

/* Checks and lunid allocation on the complete object. */
static void te_check(struct api_call *call, json_t *d, int64_t self_id)
{
    char f[128];
    int64_t target = json_integer_value(json_object_get(d, "target"));
    int64_t extent = json_integer_value(json_object_get(d, "extent"));
    int64_t found;
    if (icfg_int(&found, "SELECT id FROM iscsi_target WHERE id = ?", "i", target) < 0)
        api_verr(call, icfg_field(call, "target", f, sizeof(f)), ENOENT,
                 "Target %lld does not exist", (long long)target);
    if (icfg_int(&found, "SELECT id FROM iscsi_extent WHERE id = ?", "i", extent) < 0)
        api_verr(call, icfg_field(call, "extent", f, sizeof(f)), ENOENT,
                 "Extent %lld does not exist", (long long)extent);
    else if (icfg_int(&found, "SELECT id FROM iscsi_targetextent WHERE extent_id = ? AND id != ?",
                      "ii", extent, self_id) == 0)
        api_verr(call, icfg_field(call, "extent", f, sizeof(f)), EEXIST,
                 "Extent is already in use.");
    if (api_has_verrs(call))
        return;
    json_t *lun = json_object_get(d, "lunid");
    if (json_is_integer(lun)) {
        if (icfg_int(&found,
                     "SELECT id FROM iscsi_targetextent WHERE target_id = ? AND lunid = ? AND id "
                     "!= ?",
                     "iii", target, (int64_t)json_integer_value(lun), self_id) == 0)
            api_verr(call, icfg_field(call, "lunid", f, sizeof(f)), EEXIST,
                     "LUN ID is already being used for this target.");
        return;
    }
    /* Lowest free LUN in 0..16382, inside the transaction. */
    int64_t free_lun;
    int rc = icfg_int(&free_lun,
                      "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM iscsi_targetextent WHERE "
                      "target_id = ?1 AND lunid = 0 AND id != ?3) THEN 0 ELSE (SELECT "
                      "MIN(a.lunid + 1) FROM iscsi_targetextent a WHERE a.target_id = ?1 AND "
                      "a.id != ?3 AND a.lunid + 1 <= ?2 AND NOT EXISTS (SELECT 1 FROM "
                      "iscsi_targetextent b WHERE b.target_id = ?1 AND b.id != ?3 AND b.lunid = "
                      "a.lunid + 1)) END",
                      "iii", target, (int64_t)ICFG_LUN_MAX, self_id);
    if (rc < 0)
        api_verr(call, icfg_field(call, "lunid", f, sizeof(f)), ENOSPC,
                 "No free LUN ID in this target");
    else
        json_object_set_new(d, "lunid", json_integer(free_lun));
}

int icfg_targetextent_delete_where(struct icfg_write *w, const char *where_sql, int64_t arg)
{
    char sql[160];
    snprintf(sql, sizeof(sql), "SELECT DISTINCT target_id FROM iscsi_targetextent WHERE %s",
             where_sql);
    int err = icfg_changed_targets(w, sql, arg);
    snprintf(sql, sizeof(sql), "DELETE FROM iscsi_targetextent WHERE %s", where_sql);
    if (err == 0)
        err = icfg_run(sql, "i", arg);
    return err < 0 ? icfg_db_fail(w->call, err) : 0;
}

static int te_write(struct api_call *call, json_t *data, int64_t id, json_t **result, bool defer)
{
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    w.defer = defer;
    int rc = 0;
    json_t *merged;
    if (id) {
        merged = icfg_get_by_id(te_row, TE_BY_ID, id);
        if (!merged)
            return icfg_write_end(&w, api_error(call, ENOENT,
                                                "Target-extent mapping %lld does not exist",
                                                (long long)id));
        /* the old target loses the LUN */
        icfg_changed_target(&w, json_integer_value(json_object_get(merged, "target")));
        json_object_update(merged, data);
    } else {
        merged = json_deep_copy(data);
        api_apply_defaults(merged, te_fields, ARRAY_SIZE(te_fields));
    }
    te_check(call, merged, id);
    if (api_has_verrs(call)) {
        rc = api_invalid(call);
    } else {
        int64_t target = json_integer_value(json_object_get(merged, "target"));
        int64_t extent = json_integer_value(json_object_get(merged, "extent"));
        int64_t lun = json_integer_value(json_object_get(merged, "lunid"));
        int err = id ? icfg_run("UPDATE iscsi_targetextent SET target_id = ?, extent_id = ?, "
                                "lunid = ? WHERE id = ?",
                                "iiii", target, extent, lun, id)
                     : icfg_run("INSERT INTO iscsi_targetextent (target_id, extent_id, lunid) "
                                "VALUES (?, ?, ?)",
                                "iii", target, extent, lun);
        if (err < 0) {
            rc = icfg_db_fail(call, err);
        } else {
            if (!id)
                id = sqlite3_last_insert_rowid(db_handle());
            icfg_changed_target(&w, target);
            *result = icfg_get_by_id(te_row, TE_BY_ID, id);
        }
    }
    json_decref(merged);
    return icfg_write_end(&w, rc);
}

static int te_create(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against te_fields by the dispatcher */
    data = json_deep_copy(data);
    bool defer = icfg_pop_defer(data);
    int rc = te_write(call, data, 0, result, defer);
    json_decref(data);
    return rc;
}

static int te_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    if (icfg_param_id(call, params, 0, &id) < 0) /* decodes: update_args checked it */
        return api_invalid(call);
    json_t *data = api_param(params, 1);
    data = json_deep_copy(data);
    bool defer = icfg_pop_defer(data);
    int rc = te_write(call, data, id, result, defer);
    json_decref(data);
    return rc;
}

static int te_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    bool force, defer;
    /* Decodes: delete_args were checked by the dispatcher. */
    if (icfg_param_id(call, params, 0, &id) < 0 ||
        icfg_param_bool(call, params, 1, "force", false, &force) < 0 ||
        icfg_param_bool(call, params, 2, "defer", false, &defer) < 0)
        return api_invalid(call);
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    w.defer = defer;
    int64_t target;
    int rc = 0;
    if (icfg_int(&target, "SELECT target_id FROM iscsi_targetextent WHERE id = ?", "i", id) < 0)
        return icfg_write_end(
            &w,
            api_error(call, ENOENT, "Target-extent mapping %lld does not exist", (long long)id));
    rc = icfg_target_check_sessions(&w, target, force);
    if (rc == 0)
        rc = icfg_targetextent_delete_where(&w, "id = ?", id);
    if (rc == 0)
        *result = json_true();
    return icfg_write_end(&w, rc);
}

static int te_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {
        {"id", "id"}, {"target", "target_id"}, {"extent", "extent_id"}};
    /* TrueNAS clients list every mapping before each create: without a
     * hint, the whole table comes from the cache (rebuilt after changes). */
    static struct icfg_rows_cache all = {.watch.table = "iscsi_targetextent"};
    bool hinted = false;
    const char *op;
    for (size_t i = 0; i < ARRAY_SIZE(hints) && !hinted; i++)
        hinted = api_query_hint(params, hints[i].field, &op) != NULL;
    db_lock();
    json_t *rows = hinted ? icfg_rows_hinted(te_row, TE_SELECT, "ORDER BY id", params, hints,
                                             ARRAY_SIZE(hints))
                          : icfg_rows_cached(&all, te_row, TE_SELECT " ORDER BY id", TE_BY_ID);
    db_unlock();
    return icfg_query_rows(call, rows, params, result);
}

static int te_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, te_query, "Target-extent mapping");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(te_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(te_fields)};
static const struct api_arg delete_args[] = {ICFG_ARG_ID, ICFG_ARG_BOOL("force"),
                                             ICFG_ARG_BOOL("defer")};

const struct api_method icfg_targetextent_methods[] = {
    {"iscsi.targetextent.create", NULL,
     "Map an extent to a target as a LUN (lunid null: lowest free)", te_create, 0,
     API_ARGS(create_args)},
    {"iscsi.targetextent.update", NULL, "Change a LUN mapping", te_update, 0,
     API_ARGS(update_args)},
    {"iscsi.targetextent.delete", NULL, "Remove a LUN mapping", te_delete, 0,
     API_ARGS(delete_args)},
    {"iscsi.targetextent.query", NULL, "List LUN mappings", te_query, 0, API_ARGS(icfg_query_args)},
    {"iscsi.targetextent.get_instance", NULL, "One target-extent mapping by id", te_query_instance,
     0, API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_targetextent_methods_count = ARRAY_SIZE(icfg_targetextent_methods);
