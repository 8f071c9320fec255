/* The generic nvmet.<object>.* handlers (nvmet_crud.h). */
#include "nvme/config/nvmet_crud.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "control/cfgtx.h"
#include "control/holdings.h"
#include "core/log.h"
#include "nvme/config/nvmet_internal.h"

const struct api_arg nvmet_query_args[2] = {API_ARG_QUERY};
const struct api_arg nvmet_get_instance_args[2] = {
    API_ARG_ID, {.name = "options", .type = API_T_OBJECT, .flags = API_ARG_OPTIONAL}};

const char *nvj_str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int64_t nvj_int(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

bool nvj_bool(json_t *o, const char *k)
{
    return json_is_true(json_object_get(o, k));
}

const char *nvw_field(const struct nvw *w, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s.%s", w->method, name);
    return buf;
}

void nvw_err(const struct nvw *w, const char *name, int errnum, const char *fmt, ...)
{
    char field[128], msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    api_verr(w->call, nvw_field(w, name, field, sizeof(field)), errnum, "%s", msg);
}

bool nvs_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

json_t *nvmet_row(const struct nvmet_res *r, const void *obj)
{
    return api_fields_row(*(const int64_t *)obj, r->t->fields, r->t->nfields, obj);
}

static json_t *encode(const struct nvmet_res *r, const void *obj, json_t *ctx)
{
    return r->encode ? r->encode(obj, ctx) : nvmet_row(r, obj);
}

json_t *nvmet_encoded(const struct nvmet_res *r, int64_t id)
{
    void *obj;
    if (nvs_get(r->t, id, &obj) < 0)
        return NULL;
    json_t *ctx = r->context ? r->context(NULL) : NULL;
    json_t *out = encode(r, obj, ctx);
    json_decref(ctx);
    nvs_free(r->t, obj);
    return out;
}

/* A failed store's error: a taken unique column is a field error. */
static int store_failed(const struct nvmet_res *r, struct nvw *w, int rc)
{
    if (rc == -EEXIST) {
        api_verr(w->call, w->method, EEXIST, "This %s already exists (a unique field is taken)",
                 r->what);
        return api_invalid(w->call);
    }
    return api_error(w->call, -rc, "cannot store the %s: %s", r->what, strerror(-rc));
}

int nvmet_save(const struct nvmet_res *r, struct nvw *w, void *obj, const void *old)
{
    if (!old) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", r->t->name);
        if (holdings_check(w->call, LIMIT_SHARE_OBJECTS, r->t->name, sql, "") < 0)
            return -1;
    }
    if (r->check(w, obj, old) < 0)
        return -1;
    if (api_has_verrs(w->call))
        return api_invalid(w->call);
    int rc = nvs_write(r->t, obj);
    if (rc < 0)
        return store_failed(r, w, rc);
    if (r->saved && r->saved(w, obj, old) < 0)
        return -1;
    return 0;
}

/* Save obj in a transaction of its own and answer with the stored row. */
static int save_one(const struct nvmet_res *r, struct nvw *w, void *obj, const void *old,
                    json_t **result)
{
    struct cfg_tx tx;
    if (cfg_tx_begin(&tx) < 0)
        return api_error(w->call, EIO, "cannot write the configuration");
    if (nvmet_save(r, w, obj, old) < 0) {
        cfg_tx_abort(&tx);
        return -1;
    }
    int rc = cfg_tx_commit(&tx);
    if (rc < 0 && !tx.committed)
        return api_error(w->call, -rc, "cannot store the %s: %s", r->what, strerror(-rc));
    *result = nvmet_encoded(r, *(int64_t *)obj);
    return *result ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

int nvmet_create(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, api_call_method(call)};
    void *obj = nvs_new(r->t);
    if (!obj || api_fields_decode(r->t->fields, r->t->ninput, api_param(params, 0), obj) < 0) {
        nvs_free(r->t, obj);
        return api_error(call, ENOMEM, "out of memory");
    }
    int rc = save_one(r, &w, obj, NULL, result);
    nvs_free(r->t, obj);
    return rc;
}

int nvmet_update(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, api_call_method(call)};
    int64_t id = json_integer_value(api_param(params, 0));
    void *old = NULL, *obj = NULL;
    int rc = nvs_get(r->t, id, &old);
    if (rc == 0)
        rc = nvs_get(r->t, id, &obj);
    if (rc == 0)
        rc = api_fields_decode(r->t->fields, r->t->ninput, api_param(params, 1), obj);
    if (rc == -ENOENT)
        rc = api_error(call, ENOENT, "%s %" PRId64 " does not exist", r->what, id);
    else if (rc < 0)
        rc = api_error(call, -rc, "cannot read the %s", r->what);
    else
        rc = save_one(r, &w, obj, old, result);
    nvs_free(r->t, obj);
    nvs_free(r->t, old);
    return rc;
}

int nvmet_delete(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, api_call_method(call)};
    int64_t id = json_integer_value(api_param(params, 0));
    struct cfg_tx tx;
    void *obj;
    if (cfg_tx_begin(&tx) < 0)
        return api_error(call, EIO, "cannot write the configuration");
    int rc = nvs_get(r->t, id, &obj);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc == -ENOENT ? api_error(call, ENOENT, "%s %" PRId64 " does not exist", r->what, id)
                             : api_error(call, -rc, "cannot read the %s", r->what);
    }
    rc = r->remove ? r->remove(&w, obj, api_param(params, 1)) : 0;
    if (rc == 0 && api_has_verrs(call))
        rc = api_invalid(call);
    if (rc == 0 && (rc = nvs_delete(r->t, NULL, "id = ?1", "i", id)) < 0)
        rc = api_error(call, -rc, "cannot delete the %s: %s", r->what, strerror(-rc));
    if (rc < 0) {
        nvs_free(r->t, obj);
        cfg_tx_abort(&tx);
        return -1;
    }
    rc = cfg_tx_commit(&tx);
    if (rc < 0 && !tx.committed) {
        nvs_free(r->t, obj);
        return api_error(call, -rc, "cannot delete the %s: %s", r->what, strerror(-rc));
    }
    if (r->deleted)
        r->deleted(&w, obj, api_param(params, 1));
    nvs_free(r->t, obj);
    log_info("nvmet: %s %" PRId64 " deleted (peer %s)", r->what, id, api_call_peer(call));
    *result = json_true();
    return 0;
}

json_t *nvmet_rows(const struct nvmet_res *r, json_t *params)
{
    void *objs;
    size_t n;
    json_t *out = json_array();
    if (!out || nvs_load(r->t, NULL, &objs, &n, NULL) < 0) {
        json_decref(out);
        return NULL;
    }
    json_t *ctx = r->context ? r->context(params) : NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *e = encode(r, NVS_AT(r->t, objs, i), ctx);
        if (!e || json_array_append_new(out, e) < 0) {
            json_decref(out);
            out = NULL;
            break;
        }
    }
    json_decref(ctx);
    nvs_free_all(r->t, objs, n);
    return out;
}

int nvmet_query(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    json_t *arr = nvmet_rows(r, params);
    if (!arr)
        return api_error(call, EIO, "cannot read the %s objects", r->what);
    int rc = api_query(call, arr, params, result);
    json_decref(arr);
    return rc;
}

json_t *nvmet_index(const struct nvmet_res *r)
{
    json_t *rows = nvmet_rows(r, NULL), *idx = json_object();
    size_t i;
    json_t *row;
    if (!rows || !idx) {
        json_decref(rows);
        json_decref(idx);
        return NULL;
    }
    json_array_foreach(rows, i, row)
    {
        char key[24];
        snprintf(key, sizeof(key), "%" PRId64, nvj_int(row, "id"));
        json_object_set(idx, key, row);
    }
    json_decref(rows);
    return idx;
}

json_t *nvmet_index_get(json_t *index, int64_t id)
{
    char key[24];
    snprintf(key, sizeof(key), "%" PRId64, id);
    json_t *v = json_object_get(index, key);
    return v ? json_incref(v) : json_null();
}

const char *nvmet_zvol_dataset(const char *device_path)
{
    if (!device_path || strncmp(device_path, "zvol/", 5) != 0 || !device_path[5])
        return NULL;
    return device_path + 5;
}
