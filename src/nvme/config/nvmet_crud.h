/*
 * The steps every nvmet.<object>.create|update|delete|query|get_instance
 * shares (private to nvme/config/). An object is described by a struct
 * nvmet_res: its table, its field table and its hooks; the generic
 * handlers run them in one order:
 *
 *   create/update: body (defaults on create; on update the stored row
 *     with the body over it) → cfg_tx_begin → cap (create) → check (field
 *     errors, DB locked) → nvs_write → saved → commit → the stored row,
 *     encoded, is the result.
 *   delete: cfg_tx_begin → remove (refuse, or take dependents along) →
 *     delete → commit → true.
 *   query: every row encoded (context first), then api_query's filters
 *     and options.
 *
 * The checks run inside the transaction, so that two calls cannot both
 * pass a uniqueness or existence check. share.nvme.* calls nvmet_save in
 * its own outer transaction (the writes join it).
 */
#ifndef BLOCKD_NVME_CONFIG_NVMET_CRUD_H
#define BLOCKD_NVME_CONFIG_NVMET_CRUD_H

#include <jansson.h>
#include <stdint.h>

#include "api/api.h"
#include "api/validate.h"
#include "nvme/config/nvmet_store.h"

/* One write in progress: the call and the method its field errors name. */
struct nvw {
    struct api_call *call;
    const char *method;
};

/* "<method>.<name>" in buf. */
const char *nvw_field(const struct nvw *w, const char *name, char *buf, size_t len);
/* A field error on "<method>.<name>". */
void nvw_err(const struct nvw *w, const char *name, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

struct nvmet_res {
    const char *what; /* "subsystem": ENOENT messages */
    const struct nvs_table *t;
    /* The object to store (old: the stored one on update, else NULL):
     * fill server-made fields, report field errors with nvw_err. 0, or
     * -1 after api_error (not a field error). Required. */
    int (*check)(struct nvw *w, void *obj, const void *old);
    /* After the object was written (its id set): work in the same
     * transaction (a FILE namespace's file). 0 or -1 (error set). */
    int (*saved)(struct nvw *w, const void *obj, const void *old);
    /* For query: what encode needs of other tables (may be NULL). */
    json_t *(*context)(json_t *params);
    /* The API row of a stored object (a new reference; ctx may be NULL).
     * NULL: the field table's row. */
    json_t *(*encode)(const void *obj, json_t *ctx);
    /* Before a delete, in its transaction: refuse (field error or
     * api_error, then -1) or delete the rows that depend on it. opts is
     * the options object (NULL when absent). May be NULL. */
    int (*remove)(struct nvw *w, const void *obj, json_t *opts);
    /* After the delete committed (a FILE namespace's file with remove). */
    void (*deleted)(struct nvw *w, const void *obj, json_t *opts);
};

int nvmet_create(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result);
int nvmet_update(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result);
int nvmet_delete(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result);
int nvmet_query(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result);

/* Inside the caller's transaction: check and store obj (old NULL:
 * create; obj from nvs_new with the body decoded over it), its id set.
 * 0, or -1 with the call's error set (field errors: api_invalid). */
int nvmet_save(const struct nvmet_res *r, struct nvw *w, void *obj, const void *old);
/* The encoded row of object id (new reference) or NULL. */
json_t *nvmet_encoded(const struct nvmet_res *r, int64_t id);
/* The API row of obj: its field table's row (nvmet_res.encode's default). */
json_t *nvmet_row(const struct nvmet_res *r, const void *obj);

/* Every encoded row of r (a new array), or NULL. */
json_t *nvmet_rows(const struct nvmet_res *r, json_t *params);

/* The wrappers a method table names: pfx_create, pfx_update, pfx_delete,
 * pfx_query, pfx_get_instance for resource res. */
#define NVMET_CRUD_HANDLERS(pfx, res, what)                                                        \
    static int pfx##_create(struct api_call *c, json_t *p, json_t **out)                           \
    {                                                                                              \
        return nvmet_create(&res, c, p, out);                                                      \
    }                                                                                              \
    static int pfx##_update(struct api_call *c, json_t *p, json_t **out)                           \
    {                                                                                              \
        return nvmet_update(&res, c, p, out);                                                      \
    }                                                                                              \
    static int pfx##_delete(struct api_call *c, json_t *p, json_t **out)                           \
    {                                                                                              \
        return nvmet_delete(&res, c, p, out);                                                      \
    }                                                                                              \
    static int pfx##_query(struct api_call *c, json_t *p, json_t **out)                            \
    {                                                                                              \
        return nvmet_query(&res, c, p, out);                                                       \
    }                                                                                              \
    static int pfx##_get_instance(struct api_call *c, json_t *p, json_t **out)                     \
    {                                                                                              \
        return api_get_instance(c, p, pfx##_query, what, out);                                     \
    }

extern const struct api_arg nvmet_query_args[2];
/* The body argument: the first n fields of a table. */
#define NVMET_ARG_DATA(tbl, n, fl)                                                                 \
    {                                                                                              \
        .name = "data", .type = API_T_OBJECT, .flags = (fl), .fields = (tbl), .nfields = (n)       \
    }
extern const struct api_arg nvmet_get_instance_args[2];

/* The five method entries of an object (ns "nvmet.subsys"). */
#define NVMET_CRUD_METHODS(ns, pfx, what, create_args, update_args, delete_args)                   \
    {                                                                                              \
        ns ".create", NULL,      "Create an NVMe-oF " what,                                        \
        pfx##_create, API_SHARE, API_ARGS(create_args)},                                           \
        {ns ".update", NULL,      "Change an NVMe-oF " what,                                       \
         pfx##_update, API_SHARE, API_ARGS(update_args)},                                          \
        {ns ".delete", NULL,      "Delete an NVMe-oF " what,                                       \
         pfx##_delete, API_SHARE, API_ARGS(delete_args)},                                          \
        {ns ".query", NULL,     "List NVMe-oF " what " objects",                                   \
         pfx##_query, API_READ, API_ARGS(nvmet_query_args)},                                       \
    {                                                                                              \
        ns ".get_instance", NULL, "One NVMe-oF " what " by id", pfx##_get_instance, API_READ,      \
            API_ARGS(nvmet_get_instance_args)                                                      \
    }

/* Small helpers for options and embedded rows. */
const char *nvj_str(json_t *o, const char *k); /* a string member or NULL */
int64_t nvj_int(json_t *o, const char *k);     /* an integer member or 0 */
bool nvj_bool(json_t *o, const char *k);       /* true only for JSON true */
/* Whether two owned strings (either may be NULL) are equal. */
bool nvs_same(const char *a, const char *b);

#endif
