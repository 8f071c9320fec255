/* Query plumbing shared by the dataset and snapshot rows (see dsquery.h). */
#include "config/dsquery.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/api.h"
#include "config/db.h"
#include "config/ds_internal.h"

int ds_select_where(const char *select, const char *where, const char *order, json_t *binds,
                    sqlite3_stmt **st)
{
    char *sql = NULL;
    int rc;

    *st = NULL;
    if (asprintf(&sql, "%s%s%s %s", select, where ? " WHERE " : "", where ? where : "", order) < 0)
        return -ENOMEM;
    rc = db_stmt(sql, st);
    free(sql);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < json_array_size(binds); k++)
        sqlite3_bind_text(*st, (int)k + 1, json_string_value(json_array_get(binds, k)), -1,
                          SQLITE_STATIC);
    return 0;
}

int ds_get_instance_hinted(struct api_call *call, json_t *params, json_t **result,
                           json_t *(*rows_hinted)(json_t *params), const char *what)
{
    json_t *rows;
    int rc;

    /* only the rows an "id =" query would build */
    json_t *q = json_pack("[[[s, s, O]]]", "id", "=",
                          api_param(params, 0) ? api_param(params, 0) : json_null());

    db_lock();
    rows = q ? rows_hinted(q) : NULL;
    db_unlock();
    json_decref(q);
    if (!rows)
        return api_error(call, EIO, "cannot read %s", what);
    rc = ds_get_instance(call, params, rows, result);
    json_decref(rows);
    return rc;
}
