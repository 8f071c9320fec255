/*
 * The steps every iscsi.<object>.create|update|delete|query handler shares
 * (config_auth, config_portal, config_initiator, config_extent,
 * config_target): reading and validating the parameters, beginning the
 * write transaction, and running a query over the object's rows. Each
 * object keeps its own checks, SQL and error wording. Private to
 * src/iscsi/config_*.c; every function runs on the API thread.
 */
#ifndef BLOCKD_ISCSI_CONFIG_CRUD_H
#define BLOCKD_ISCSI_CONFIG_CRUD_H

#include "config/iscsi/config_internal.h"

/*
 * The args of the iscsi.* methods (api/validate.h): the dispatcher checks
 * them before a handler runs, so the helpers below only decode. An id is
 * "<method>.id: Field required" / "Input should be a valid integer"; a
 * boolean argument is optional ("<method>.<name>: Input should be a valid
 * boolean").
 */
#define ICFG_ARG_ID                                                                                \
    {                                                                                              \
        .name = "id", .type = API_T_INT                                                            \
    }
#define ICFG_ARG_BOOL(nm)                                                                          \
    {                                                                                              \
        .name = (nm), .type = API_T_BOOL, .flags = API_ARG_OPTIONAL                                \
    }
#define ICFG_ARG_CREATE(fields) API_ARG_OBJECT("data", fields, 0)
#define ICFG_ARGS_UPDATE(fields) ICFG_ARG_ID, API_ARG_OBJECT("data", fields, API_PARTIAL)
extern const struct api_arg icfg_query_args[2];        /* [filters?, options?] */
extern const struct api_arg icfg_get_instance_args[2]; /* [id, options?] */
extern const struct api_arg icfg_delete_args[1];       /* [id] */

/*
 * <ns>.create [{...}]: the object (checked by the dispatcher against the
 * same fields); *data is a
 * deep copy with the defaults applied and a "defer" key removed (its value
 * goes to w->defer), then icfg_write_begin(). Returns 0 with the lock held
 * (the caller json_decref()s *data and ends with icfg_write_end()), or -1
 * with the error set on call and nothing held.
 */
int icfg_create_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, json_t **data);

/* <ns>.update [id, {...}]: the same for a partial object (no defaults
 * applied); the id goes to *id. */
int icfg_update_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, int64_t *id, json_t **data);

/* <ns>.delete [id]: the id, then icfg_write_begin(). 0 with the lock held,
 * or -1 with the error set on call. */
int icfg_delete_begin(struct icfg_write *w, struct api_call *call, json_t *params, int64_t *id);

/* <ns>.delete [id, <name1>?, <name2>?, defer?] (extents, targets): the id,
 * two optional booleans (false when absent or null) and defer into
 * w->defer, then icfg_write_begin(). As icfg_delete_begin(). */
int icfg_delete_begin_opts(struct icfg_write *w, struct api_call *call, json_t *params, int64_t *id,
                           const char *name1, bool *value1, const char *name2, bool *value2);

/*
 * <ns>.query [filters?, options?]: the rows of select_sql (ORDER BY id, a
 * WHERE from the first matching hint, see icfg_rows_hinted) through fn,
 * then api_query. Takes the DB lock itself; the handler's return value.
 */
int icfg_query_hinted(struct api_call *call, json_t *params, json_t **result, icfg_row_fn fn,
                      const char *select_sql, const struct icfg_hint *hints, size_t n_hints);

/* Row helpers: a column as a JSON string / integer, or JSON null when the
 * column is SQL NULL. New references. */
json_t *icfg_col_text_or_null(sqlite3_stmt *st, int col);
json_t *icfg_col_int_or_null(sqlite3_stmt *st, int col);

#endif
