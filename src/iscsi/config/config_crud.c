/* The parameter, transaction and query steps the iscsi.<object>.* handlers
 * share (see config_crud.h). */
#include "iscsi/config/config_crud.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/holdings.h"

const struct api_arg icfg_query_args[2] = {API_ARG_QUERY};
const struct api_arg icfg_get_instance_args[2] = {
    ICFG_ARG_ID, {.name = "options", .type = API_T_OBJECT, .flags = API_ARG_OPTIONAL}};
const struct api_arg icfg_delete_args[1] = {ICFG_ARG_ID};

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

json_t *icfg_body(json_t *params, size_t index, const struct api_field *fields, size_t nfields,
                  bool defaults, bool *defer)
{
    json_t *in = api_param(params, index);
    json_t *obj = in ? json_deep_copy(in) : json_object();
    *defer = icfg_pop_defer(obj);
    if (obj && defaults && api_apply_defaults(obj, fields, nfields) < 0) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* The body params[index] (as icfg_body) and the write w begun on it. 0, or
 * -1 with the error set and *data NULL. */
static int icfg_body_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                           size_t index, const struct api_field *fields, size_t nfields,
                           bool defaults, json_t **data)
{
    bool defer;
    *data = icfg_body(params, index, fields, nfields, defaults, &defer);
    if (!*data)
        return api_error(call, ENOMEM, "out of memory");
    if (icfg_write_begin(w, call) < 0) {
        json_decref(*data);
        *data = NULL;
        return -1;
    }
    w->defer = defer;
    return 0;
}

int icfg_cap_check(struct icfg_write *w, const char *create_method)
{
    static const struct {
        const char *method, *count;
    } kinds[] = {
        {"iscsi.portal.create", "SELECT COUNT(*) FROM iscsi_portal"},
        {"iscsi.initiator.create", "SELECT COUNT(*) FROM iscsi_initiator"},
        {"iscsi.auth.create", "SELECT COUNT(*) FROM iscsi_auth"},
        {"iscsi.target.create", "SELECT COUNT(*) FROM iscsi_target"},
        {"iscsi.extent.create", "SELECT COUNT(*) FROM iscsi_extent"},
        {"iscsi.targetextent.create", "SELECT COUNT(*) FROM iscsi_targetextent"},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(create_method, kinds[i].method) == 0)
            return holdings_check(w->call, LIMIT_SHARE_OBJECTS, create_method, kinds[i].count, "") <
                           0
                       ? -1
                       : 0;
    return 0;
}

int icfg_create_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, json_t **data)
{
    if (icfg_body_begin(w, call, params, 0, fields, nfields, true, data) < 0)
        return -1;
    if (icfg_cap_check(w, api_call_method(call)) == 0)
        return 0;
    icfg_write_end(w, -1); /* rolls back: nothing was written */
    json_decref(*data);
    *data = NULL;
    return -1;
}

int icfg_update_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, int64_t *id, json_t **data)
{
    *data = NULL;
    /* ICFG_ARGS_UPDATE: checked by the dispatcher; this only decodes. */
    if (icfg_param_id(call, params, 0, id) < 0)
        return api_invalid(call);
    return icfg_body_begin(w, call, params, 1, fields, nfields, false, data);
}

int icfg_missing(struct api_call *call, int err, const char *what, int64_t id)
{
    if (err == -ENOENT)
        return api_error(call, ENOENT, "%s %lld does not exist", what, (long long)id);
    return icfg_db_fail(call, err);
}

int icfg_defaults(const struct api_field *fields, size_t nfields,
                  int (*decode)(json_t *data, void *obj), void *obj)
{
    bool defer;
    json_t *body = icfg_body(NULL, 0, fields, nfields, true, &defer);
    int rc = body ? decode(body, obj) : -ENOMEM;
    json_decref(body);
    return rc;
}

json_t *icfg_str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *icfg_int_or_null(bool has, int64_t v)
{
    return has ? json_integer((json_int_t)v) : json_null();
}

static bool key_scalar(json_t *v)
{
    return json_is_string(v) || json_is_integer(v);
}

static void key_value(json_t *v, struct icfg_key_value *out)
{
    out->is_int = json_is_integer(v);
    out->i = out->is_int ? (int64_t)json_integer_value(v) : 0;
    out->s = out->is_int ? NULL : json_string_value(v);
}

/* The key of the first of hints a query's filters name with "=" (one
 * string or integer) or "in" (at most 512 of them): the store narrows
 * its SELECT with it (store.h icfg_list); *values is malloc'd (free()),
 * its strings borrowed from params. No such filter: key->column NULL.
 * 0 or -ENOMEM. */
static int key_from_query(json_t *params, const struct icfg_hint *hints, size_t n_hints,
                          struct icfg_key *key, struct icfg_key_value **values)
{
    memset(key, 0, sizeof(*key));
    *values = NULL;
    for (size_t i = 0; i < n_hints; i++) {
        const char *op;
        json_t *v = api_query_hint(params, hints[i].field, &op);
        bool in = v && strcmp(op, "in") == 0 && json_array_size(v) <= 512;
        bool ok = v && ((strcmp(op, "=") == 0 && key_scalar(v)) || in);
        for (size_t k = 0; ok && in && k < json_array_size(v); k++)
            ok = key_scalar(json_array_get(v, k));
        if (!ok)
            continue;
        size_t n = in ? json_array_size(v) : 1;
        *values = calloc(n ? n : 1, sizeof(**values));
        if (!*values)
            return -ENOMEM;
        for (size_t k = 0; k < n; k++)
            key_value(in ? json_array_get(v, k) : v, &(*values)[k]);
        key->column = hints[i].column;
        key->values = *values;
        key->n = n;
        return 0;
    }
    return 0;
}

/* The rows of n structs at v, encoded: a new array or NULL. */
static json_t *typed_rows(const struct icfg_typed *type, const char *v, size_t n)
{
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < n; i++) {
        json_t *row = type->encode(v + i * type->table->elem_size);
        if (!row || json_array_append_new(rows, row) < 0) {
            json_decref(rows);
            rows = NULL;
        }
    }
    return rows;
}

json_t *icfg_typed_rows(const struct icfg_typed *type, const struct icfg_key *key)
{
    void *v = NULL;
    size_t n = 0;
    json_t *rows = icfg_table_list(type->table, key, &v, &n) == 0 ? typed_rows(type, v, n) : NULL;
    icfg_table_free(type->table, v, n);
    return rows;
}

int icfg_query_typed(struct api_call *call, json_t *params, json_t **result,
                     const struct icfg_typed *type, const struct icfg_hint *hints, size_t n_hints)
{
    struct icfg_key key;
    struct icfg_key_value *values;
    json_t *rows = NULL;
    if (key_from_query(params, hints, n_hints, &key, &values) == 0) {
        db_lock();
        rows = icfg_typed_rows(type, &key);
        db_unlock();
    }
    free(values);
    return icfg_query_rows(call, rows, params, result);
}
