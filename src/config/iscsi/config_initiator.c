/* iscsi.initiator.create|update|delete|query: authorized-initiator groups.
 * An empty list allows every initiator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/db.h"
#include "core/util.h"
#include "config/iscsi/config_crud.h"
#include "iscsi/iscsi_runtime.h"

#define INITIATOR_SELECT "SELECT id, initiators, comment FROM iscsi_initiator"

static json_t *initiator_row(sqlite3_stmt *st)
{
    return json_pack("{s:I, s:o, s:s}", "id", (json_int_t)sqlite3_column_int64(st, 0), "initiators",
                     icfg_col_json(st, 1), "comment", icfg_col_text(st, 2));
}

static const struct api_field iqn_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = ISCSI_NAME_MAX - 1};
static const struct api_field initiator_fields[] = {
    {.name = "initiators", .type = API_T_ARRAY, .items = &iqn_item, .def = "[]"},
    {.name = "comment", .type = API_T_STRING, .def = "\"\""},
};

/* Initiator names are compared case-insensitively on the wire; printable
 * ASCII without spaces keeps them usable in logs and ACL lists. */
static void initiator_check(struct api_call *call, json_t *data)
{
    json_t *list = json_object_get(data, "initiators");
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item)
    {
        const char *s = json_string_value(item);
        for (const char *p = s; *p; p++) {
            if (*p <= ' ' || *p > '~') {
                char f[160], field[64];
                snprintf(field, sizeof(field), "initiators.%zu", i);
                api_verr(call, icfg_field(call, field, f, sizeof(f)), EINVAL,
                         "Value error, initiator names may not contain spaces or control "
                         "characters");
                break;
            }
        }
    }
}

static int initiator_store(struct api_call *call, json_t *data, int64_t id, int64_t *out_id)
{
    char *list = json_dumps(json_object_get(data, "initiators"), JSON_COMPACT);
    if (!list)
        return api_error(call, ENOMEM, "out of memory");
    const char *comment = json_string_value(json_object_get(data, "comment"));
    int err;
    if (id == 0) {
        err = icfg_run("INSERT INTO iscsi_initiator (initiators, comment) VALUES (?, ?)", "tt",
                       list, comment);
        *out_id = sqlite3_last_insert_rowid(db_handle());
    } else {
        err = icfg_run("UPDATE iscsi_initiator SET initiators = ?, comment = ? WHERE id = ?", "tti",
                       list, comment, id);
        *out_id = id;
    }
    free(list);
    return err < 0 ? icfg_db_fail(call, err) : 0;
}

static int initiator_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    json_t *data;
    if (icfg_create_begin(&w, call, params, initiator_fields, ARRAY_SIZE(initiator_fields), &data) <
        0)
        return -1;
    initiator_check(call, data);
    int64_t id = 0;
    int rc = api_has_verrs(call) ? api_invalid(call) : initiator_store(call, data, 0, &id);
    if (rc == 0)
        *result = icfg_get_by_id(initiator_row, INITIATOR_SELECT " WHERE id = ?", id);
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int initiator_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    json_t *data;
    if (icfg_update_begin(&w, call, params, initiator_fields, ARRAY_SIZE(initiator_fields), &id,
                          &data) < 0)
        return -1;
    initiator_check(call, data);
    json_t *old = NULL;
    int rc = api_has_verrs(call) ? api_invalid(call) : 0;
    if (rc == 0)
        old = icfg_get_by_id(initiator_row, INITIATOR_SELECT " WHERE id = ?", id);
    if (rc == 0 && !old) {
        rc = api_error(call, ENOENT, "Initiator group %lld does not exist", (long long)id);
    } else if (rc == 0) {
        json_object_update(old, data);
        int64_t out;
        rc = initiator_store(call, old, id, &out);
        if (rc == 0) {
            icfg_changed_targets(&w,
                                 "SELECT DISTINCT target_id FROM iscsi_target_group WHERE "
                                 "initiator_id = ?",
                                 id);
            *result = icfg_get_by_id(initiator_row, INITIATOR_SELECT " WHERE id = ?", id);
        }
    }
    json_decref(old);
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int initiator_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    if (icfg_delete_begin(&w, call, params, &id) < 0)
        return -1;
    int64_t found, target;
    int rc = 0;
    if (icfg_int(&found, "SELECT id FROM iscsi_initiator WHERE id = ?", "i", id) < 0) {
        rc = api_error(call, ENOENT, "Initiator group %lld does not exist", (long long)id);
    } else if (icfg_int(&target,
                        "SELECT target_id FROM iscsi_target_group WHERE initiator_id = ? LIMIT 1",
                        "i", id) == 0) {
        /* Dropping the group from the target would widen its access (a
         * target without groups admits everyone), so refuse instead. */
        rc = api_error(call, EBUSY, "Initiator group %lld is used by target %lld", (long long)id,
                       (long long)target);
    } else {
        int err = icfg_run("DELETE FROM iscsi_initiator WHERE id = ?", "i", id);
        if (err < 0)
            rc = icfg_db_fail(call, err);
        else
            *result = json_true();
    }
    return icfg_write_end(&w, rc);
}

static int initiator_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"comment", "comment"}};
    return icfg_query_hinted(call, params, result, initiator_row, INITIATOR_SELECT, hints,
                             ARRAY_SIZE(hints));
}

static int initiator_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, initiator_query, "Initiator group");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(initiator_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(initiator_fields)};

const struct api_method icfg_initiator_methods[] = {
    {"iscsi.initiator.create", NULL,
     "Create an authorized-initiator group (empty list = every initiator)", initiator_create, 0,
     API_ARGS(create_args)},
    {"iscsi.initiator.update", NULL, "Change an initiator group", initiator_update, 0,
     API_ARGS(update_args)},
    {"iscsi.initiator.delete", NULL, "Delete an initiator group not used by a target",
     initiator_delete, 0, API_ARGS(icfg_delete_args)},
    {"iscsi.initiator.query", NULL, "List initiator groups", initiator_query, 0,
     API_ARGS(icfg_query_args)},
    {"iscsi.initiator.get_instance", NULL, "One initiator group by id", initiator_query_instance, 0,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_initiator_methods_count = ARRAY_SIZE(icfg_initiator_methods);
