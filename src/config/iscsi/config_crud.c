/* The parameter, transaction and query steps the iscsi.<object>.* handlers
 * share (see config_crud.h). */
#include "config/iscsi/config_crud.h"

#include "config/db.h"

const struct api_arg icfg_query_args[2] = {API_ARG_QUERY};
const struct api_arg icfg_get_instance_args[2] = {
    ICFG_ARG_ID, {.name = "options", .type = API_T_OBJECT, .flags = API_ARG_OPTIONAL}};
const struct api_arg icfg_delete_args[1] = {ICFG_ARG_ID};

int icfg_create_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, json_t **data)
{
    *data = NULL;
    json_t *obj = api_param(params, 0); /* ICFG_ARG_CREATE: checked by the dispatcher */
    obj = json_deep_copy(obj);
    bool defer = icfg_pop_defer(obj);
    api_apply_defaults(obj, fields, nfields);
    if (icfg_write_begin(w, call) < 0) {
        json_decref(obj);
        return -1;
    }
    w->defer = defer;
    *data = obj;
    return 0;
}

int icfg_update_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, int64_t *id, json_t **data)
{
    *data = NULL;
    (void)fields;
    (void)nfields;
    /* ICFG_ARGS_UPDATE: checked by the dispatcher; this only decodes. */
    if (icfg_param_id(call, params, 0, id) < 0)
        return api_invalid(call);
    json_t *obj = api_param(params, 1);
    obj = json_deep_copy(obj);
    bool defer = icfg_pop_defer(obj);
    if (icfg_write_begin(w, call) < 0) {
        json_decref(obj);
        return -1;
    }
    w->defer = defer;
    *data = obj;
    return 0;
}

int icfg_delete_begin(struct icfg_write *w, struct api_call *call, json_t *params, int64_t *id)
{
    if (icfg_param_id(call, params, 0, id) < 0) /* decodes: icfg_delete_args checked it */
        return api_invalid(call);
    return icfg_write_begin(w, call);
}

int icfg_delete_begin_opts(struct icfg_write *w, struct api_call *call, json_t *params, int64_t *id,
                           const char *name1, bool *value1, const char *name2, bool *value2)
{
    bool defer;
    /* Decodes: the method's args (ICFG_ARG_BOOL) were checked by the dispatcher. */
    if (icfg_param_id(call, params, 0, id) < 0 ||
        icfg_param_bool(call, params, 1, name1, false, value1) < 0 ||
        icfg_param_bool(call, params, 2, name2, false, value2) < 0 ||
        icfg_param_bool(call, params, 3, "defer", false, &defer) < 0)
        return api_invalid(call);
    if (icfg_write_begin(w, call) < 0)
        return -1;
    w->defer = defer;
    return 0;
}

int icfg_query_hinted(struct api_call *call, json_t *params, json_t **result, icfg_row_fn fn,
                      const char *select_sql, const struct icfg_hint *hints, size_t n_hints)
{
    db_lock();
    json_t *rows = icfg_rows_hinted(fn, select_sql, "ORDER BY id", params, hints, n_hints);
    db_unlock();
    return icfg_query_rows(call, rows, params, result);
}

json_t *icfg_col_text_or_null(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL ? json_null()
                                                       : json_string(icfg_col_text(st, col));
}

json_t *icfg_col_int_or_null(sqlite3_stmt *st, int col)
{
    return sqlite3_column_type(st, col) == SQLITE_NULL
               ? json_null()
               : json_integer(sqlite3_column_int64(st, col));
}
