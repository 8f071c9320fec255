/*
 * <ns>.get_instance [id, options?] as TrueNAS defines it: the query
 * [["id", "=", id]] with the caller's query options (extra.properties,
 * extra.retrieve_children, select, ...), answering the one row or ENOENT.
 */
#include "api/api.h"

#include <errno.h>
#include <stdio.h>

/* Options that ask for something other than one row: get_instance sets
 * them itself, as TrueNAS's CRUDService.get_instance does (get: true). */
static const char *const row_count_options[] = {"get", "count", "limit", "offset"};

static int not_found(struct api_call *call, json_t *id, const char *what)
{
    if (json_is_string(id))
        return api_error(call, ENOENT, "%s%s%s does not exist", what ? what : "", what ? " " : "",
                         json_string_value(id));
    if (json_is_integer(id))
        return api_error(call, ENOENT, "%s %" JSON_INTEGER_FORMAT " does not exist",
                         what ? what : "Object", json_integer_value(id));
    return api_error(call, ENOENT, "%s with this id does not exist", what ? what : "Object");
}

int api_get_instance(struct api_call *call, json_t *params, api_handler_fn query, const char *what,
                     json_t **result)
{
    json_t *id = api_param(params, 0), *opts = api_param(params, 1);
    char field[160];

    *result = NULL;
    if (opts && !json_is_object(opts)) {
        snprintf(field, sizeof(field), "%s.options", api_call_method(call));
        api_verr(call, field, EINVAL, "Input should be a valid dictionary");
        return api_invalid(call);
    }
    json_t *o = opts ? json_deep_copy(opts) : json_object();
    for (size_t i = 0; o && i < sizeof(row_count_options) / sizeof(row_count_options[0]); i++)
        json_object_del(o, row_count_options[i]);
    json_t *q = o ? json_pack("[[[s, s, O]], o]", "id", "=", id ? id : json_null(), o) : NULL;
    if (!q)
        return api_error(call, ENOMEM, "out of memory");
    json_t *rows = NULL;
    int rc = query(call, q, &rows);
    json_decref(q);
    if (rc < 0) {
        json_decref(rows);
        return -1;
    }
    if (!json_is_array(rows) || json_array_size(rows) == 0) {
        json_decref(rows);
        return not_found(call, id, what);
    }
    *result = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return 0;
}
