/* Query plumbing shared by the dataset and snapshot rows (see dsquery.h). */
#include "control/dsquery.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "api/api.h"
#include "control/db.h"
#include "control/ds_internal.h"

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
