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

json_t *nvmet_encoded(const struct nvmet_res *r, int64_t id)
{
    json_t *row, *out;
    if (nvs_get(r->t, id, &row) < 0)
        return NULL;
    json_t *ctx = r->context ? r->context(NULL) : NULL;
    out = r->encode(row, ctx);
    json_decref(ctx);
    json_decref(row);
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

int nvmet_save(const struct nvmet_res *r, struct nvw *w, json_t *data, json_t *old, int64_t *id)
{
    if (!old) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", r->t->name);
        if (holdings_check(w->call, LIMIT_NVMET, r->t->name, sql, "") < 0)
            return -1;
    }
    if (r->check(w, data, old) < 0)
        return -1;
    if (api_has_verrs(w->call))
        return api_invalid(w->call);
    *id = old ? nvj_int(old, "id") : 0;
    int rc = nvs_write(r->t, *id, data, id);
    if (rc < 0)
        return store_failed(r, w, rc);
    json_object_set_new(data, "id", json_integer(*id));
    if (r->saved && r->saved(w, data, old) < 0)
        return -1;
    return 0;
}

/* Save data in a transaction of its own and answer with the stored row. */
static int save_one(const struct nvmet_res *r, struct nvw *w, json_t *data, json_t *old,
                    json_t **result)
{
    struct cfg_tx tx;
    int64_t id = 0;
    if (cfg_tx_begin(&tx) < 0)
        return api_error(w->call, EIO, "cannot write the configuration");
    if (nvmet_save(r, w, data, old, &id) < 0) {
        cfg_tx_abort(&tx);
        return -1;
    }
    int rc = cfg_tx_commit(&tx);
    if (rc < 0 && !tx.committed)
        return api_error(w->call, -rc, "cannot store the %s: %s", r->what, strerror(-rc));
    *result = nvmet_encoded(r, id);
    return *result ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

int nvmet_create(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, api_call_method(call)};
    json_t *data = json_deep_copy(api_param(params, 0));
    if (!data || api_apply_defaults(data, r->fields, r->nfields) < 0) {
        json_decref(data);
        return api_error(call, ENOMEM, "out of memory");
    }
    int rc = save_one(r, &w, data, NULL, result);
    json_decref(data);
    return rc;
}

int nvmet_update(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, api_call_method(call)};
    int64_t id = json_integer_value(api_param(params, 0));
    json_t *old;
    int rc = nvs_get(r->t, id, &old);
    if (rc == -ENOENT)
        return api_error(call, ENOENT, "%s %" PRId64 " does not exist", r->what, id);
    if (rc < 0)
        return api_error(call, -rc, "cannot read the %s", r->what);
    json_t *data = json_deep_copy(old);
    json_object_update(data, api_param(params, 1));
    rc = save_one(r, &w, data, old, result);
    json_decref(data);
    json_decref(old);
    return rc;
}

int nvmet_delete(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, api_call_method(call)};
    int64_t id = json_integer_value(api_param(params, 0));
    struct cfg_tx tx;
    json_t *row;
    if (cfg_tx_begin(&tx) < 0)
        return api_error(call, EIO, "cannot write the configuration");
    int rc = nvs_get(r->t, id, &row);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc == -ENOENT ? api_error(call, ENOENT, "%s %" PRId64 " does not exist", r->what, id)
                             : api_error(call, -rc, "cannot read the %s", r->what);
    }
    rc = r->remove ? r->remove(&w, row, api_param(params, 1)) : 0;
    if (rc == 0 && api_has_verrs(call))
        rc = api_invalid(call);
    if (rc == 0 && (rc = nvs_delete(r->t, NULL, "id = ?1", "i", id)) < 0)
        rc = api_error(call, -rc, "cannot delete the %s: %s", r->what, strerror(-rc));
    if (rc < 0) {
        json_decref(row);
        cfg_tx_abort(&tx);
        return -1;
    }
    rc = cfg_tx_commit(&tx);
    if (rc < 0 && !tx.committed) {
        json_decref(row);
        return api_error(call, -rc, "cannot delete the %s: %s", r->what, strerror(-rc));
    }
    if (r->deleted)
        r->deleted(&w, row, api_param(params, 1));
    json_decref(row);
    log_info("nvmet: %s %" PRId64 " deleted (peer %s)", r->what, id, api_call_peer(call));
    *result = json_true();
    return 0;
}

json_t *nvmet_rows(const struct nvmet_res *r, json_t *params)
{
    json_t *rows, *out = json_array();
    if (!out || nvs_select(r->t, NULL, &rows, NULL) < 0) {
        json_decref(out);
        return NULL;
    }
    json_t *ctx = r->context ? r->context(params) : NULL;
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        json_t *e = r->encode(row, ctx);
        if (!e || json_array_append_new(out, e) < 0) {
            json_decref(out);
            out = NULL;
            break;
        }
    }
    json_decref(ctx);
    json_decref(rows);
    return out;
}

/* The secrets of every row replaced, for a caller that may only read. */
static void redact_rows(const struct nvmet_res *r, struct api_call *call, json_t *arr)
{
    const struct api_identity *who = api_call_identity(call);
    if (!r->secrets || who->kind != API_CALLER_REMOTE ||
        (who->roles & (API_ROLE_SHARING | API_ROLE_FULL)))
        return;
    size_t i;
    json_t *row;
    json_array_foreach(arr, i, row) for (const char *const *f = r->secrets; *f;
                                         f++) if (!json_is_null(json_object_get(row, *f)))
        json_object_set_new(row, *f, json_string("********"));
}

int nvmet_query(const struct nvmet_res *r, struct api_call *call, json_t *params, json_t **result)
{
    json_t *arr = nvmet_rows(r, params);
    if (!arr)
        return api_error(call, EIO, "cannot read the %s objects", r->what);
    redact_rows(r, call, arr);
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
