/*
 * The JSON side every iscsi.<object>.* handler shares (config_auth,
 * config_portal, config_initiator, config_extent, config_target,
 * config_targetextent, config_global): the method args, the decoded
 * parameters (icfg_body: the input of an object's one decoder), JSON
 * helpers of the decoders and encoders, and the query over an object's
 * structs (icfg_query_typed). Each object keeps its own struct and SQL
 * (<object>_store.h), checks and error wording. Private to
 * src/iscsi/config/; every function runs on an API thread.
 */
#ifndef BLOCKD_ISCSI_CONFIG_CRUD_H
#define BLOCKD_ISCSI_CONFIG_CRUD_H

#include "api/fields.h"
#include "iscsi/config/config_internal.h"
#include "iscsi/config/store.h"

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
 * <ns>.create [{...}]: *data is the body (icfg_body: defaults applied,
 * "defer" removed into w->defer) for the object's decoder, then
 * icfg_write_begin(). 0 with the transaction open (the caller
 * json_decref()s *data and ends with icfg_write_end()), or -1 with the
 * error set on call and nothing open.
 */
int icfg_create_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, json_t **data);
/* <ns>.update [id, {...}]: the same for a partial body (no defaults); the
 * id goes to *id. */
int icfg_update_begin(struct icfg_write *w, struct api_call *call, json_t *params,
                      const struct api_field *fields, size_t nfields, int64_t *id, json_t **data);
/* The cap on one more object of the kind create_method makes
 * ("iscsi.target.create", ...; --max-share-objects), counted inside w's
 * transaction so that two creates cannot both pass. 0, or -1 with the
 * EDQUOT error set on w's call (logged with the peer). */
int icfg_cap_check(struct icfg_write *w, const char *create_method);
/* The error of a failed read of object id: -ENOENT is "<what> <id> does
 * not exist" (ENOENT), anything else a database error. Returns -1. */
int icfg_missing(struct api_call *call, int err, const char *what, int64_t id);

/* <ns>.delete [id]: the id, then icfg_write_begin(). 0 with the lock held,
 * or -1 with the error set on call. */
int icfg_delete_begin(struct icfg_write *w, struct api_call *call, json_t *params, int64_t *id);

/* <ns>.delete [id, <name1>?, <name2>?, defer?] (extents, targets): the id,
 * two optional booleans (false when absent or null) and defer into
 * w->defer, then icfg_write_begin(). As icfg_delete_begin(). */
int icfg_delete_begin_opts(struct icfg_write *w, struct api_call *call, json_t *params, int64_t *id,
                           const char *name1, bool *value1, const char *name2, bool *value2);

/* ---- typed objects (store.h): the JSON side of their decoders and
 * encoders ---- */

/*
 * params[index], a body the dispatcher checked against fields, as a deep
 * copy with its "defer" key removed (its value in *defer) and, with
 * defaults, the fields' defaults applied: the input of an object's
 * decoder. A new reference, or NULL (ENOMEM; params[index] absent is an
 * empty object).
 */
json_t *icfg_body(json_t *params, size_t index, const struct api_field *fields, size_t nfields,
                  bool defaults, bool *defer);
/* obj as its create's defaults make it: decode applied to an object of
 * the fields' def texts (the defaults stay in the field table only). For
 * the icfg_<object>_init functions. 0 or -ENOMEM. */
int icfg_defaults(const struct api_field *fields, size_t nfields,
                  int (*decode)(json_t *data, void *obj), void *obj);
/* A string (NULL: JSON null) / an optional integer as JSON (new refs). */
json_t *icfg_str_or_null(const char *s);
json_t *icfg_int_or_null(bool has, int64_t v);

/* A typed object as its query sees it: its store's table (the structs)
 * and its encoder (one struct → its row). */
struct icfg_typed {
    const struct icfg_table *table;
    json_t *(*encode)(const void *elem);
};
/*
 * <ns>.query [filters?, options?] over a typed object: the structs the
 * first matching hint (struct icfg_hint) narrows the list to, each
 * encoded, then api_query. Takes the DB lock itself; the handler's
 * return value.
 */
int icfg_query_typed(struct api_call *call, json_t *params, json_t **result,
                     const struct icfg_typed *type, const struct icfg_hint *hints, size_t n_hints);

/* The rows of a typed object narrowed by key (NULL: all), encoded: a
 * new array, or NULL (logged). DB locked. */
json_t *icfg_typed_rows(const struct icfg_typed *type, const struct icfg_key *key);

/*
 * Every row of one typed object, kept between calls and brought up to
 * date from the rows that changed since (control/db.h db_watch), instead
 * of rebuilt: TrueNAS clients list every mapping before each create. The
 * rows (encoded by type, each with an integer "id", depending on nothing
 * but their own table row) are shared and never modified (a refresh
 * builds a new array). Inside a transaction the cache is not used.
 * Returns a new reference or NULL. DB locked.
 */
struct icfg_rows_cache {
    struct db_watch watch; /* .table set by the owner */
    json_t *rows;
    bool registered;
};
json_t *icfg_rows_cached(struct icfg_rows_cache *c, const struct icfg_typed *type);

#endif
