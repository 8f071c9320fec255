/* The typed writes of the nvmet.* objects (nvmet_write.h). */
#include "nvme/config/nvmet_write.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "control/cfgtx.h"
#include "core/log.h"
#include "nvme/config/nvmet_internal.h"

static const struct nvmet_res *res_of(enum nvmet_object o)
{
    switch (o) {
    case NVMET_OBJ_SUBSYS:
        return &nvmet_subsys_res;
    case NVMET_OBJ_NAMESPACE:
        return &nvmet_namespace_res;
    case NVMET_OBJ_HOST:
        return &nvmet_host_res;
    case NVMET_OBJ_HOST_SUBSYS:
        return &nvmet_host_subsys_res;
    default:
        return &nvmet_port_subsys_res;
    }
}

/* A string field of made over the object's field of that name. */
static int made_set(const struct nvmet_res *r, void *obj, json_t *made, const char *name)
{
    json_t *v = json_object_get(made, name);
    if (!json_is_string(v))
        return 0;
    json_t *one = json_pack("{s:O}", name, v);
    int rc = one ? api_fields_decode(r->t->fields, r->t->nfields, one, obj) : -ENOMEM;
    json_decref(one);
    return rc;
}

/* The group's identity of a new object over the one its check made. */
static int made_apply(const struct nvmet_res *r, void *obj, json_t *made)
{
    int rc = 0;
    if (!made)
        return 0;
    if (r == &nvmet_subsys_res)
        rc = made_set(r, obj, made, "serial");
    else if (r == &nvmet_namespace_res) {
        rc = made_set(r, obj, made, "device_uuid");
        if (rc == 0)
            rc = made_set(r, obj, made, "device_nguid");
    }
    return rc < 0 ? rc : nvs_write(r->t, obj);
}

static int put_in_tx(const struct nvmet_res *r, struct nvw *w, int64_t id, json_t *body,
                     json_t *made, void **objp, void **oldp)
{
    int rc = 0;
    if (id) {
        rc = nvs_get(r->t, id, oldp);
        if (rc == 0)
            rc = nvs_get(r->t, id, objp);
    } else {
        *objp = nvs_new(r->t);
        rc = *objp ? 0 : -ENOMEM;
    }
    if (rc == 0)
        rc = api_fields_decode(r->t->fields, r->t->ninput, body, *objp);
    if (rc == -ENOENT)
        return api_error(w->call, ENOENT, "%s %" PRId64 " does not exist", r->what, id);
    if (rc < 0)
        return api_error(w->call, -rc, "cannot read the %s", r->what);
    if (nvmet_save(r, w, *objp, *oldp) < 0)
        return -1;
    if (!id && (rc = made_apply(r, *objp, made)) < 0)
        return api_error(w->call, -rc, "cannot store the %s: %s", r->what, strerror(-rc));
    return 0;
}

int nvmet_object_put(struct api_call *call, enum nvmet_object o, int64_t id, json_t *body,
                     json_t *made, int64_t *id_out)
{
    const struct nvmet_res *r = res_of(o);
    struct nvw w = {call, api_call_method(call)};
    if (api_validate_object(call, w.method, body, r->t->fields, r->t->ninput,
                            id ? API_PARTIAL : 0) < 0)
        return api_invalid(call);
    json_t *full = json_deep_copy(body);
    if (!full || (!id && api_apply_defaults(full, r->t->fields, r->t->ninput) < 0)) {
        json_decref(full);
        return api_error(call, ENOMEM, "out of memory");
    }
    struct cfg_tx tx;
    void *obj = NULL, *old = NULL;
    int rc = 0;
    if (cfg_tx_begin(&tx) < 0) {
        rc = api_error(call, EIO, "cannot write the configuration");
    } else if (put_in_tx(r, &w, id, full, made, &obj, &old) < 0) {
        cfg_tx_abort(&tx);
        rc = -1;
    } else {
        int c = cfg_tx_commit(&tx);
        if (c < 0 && !tx.committed)
            rc = api_error(call, -c, "cannot store the %s: %s", r->what, strerror(-c));
        else if (id_out)
            *id_out = *(int64_t *)obj;
    }
    json_decref(full);
    nvs_free(r->t, obj);
    nvs_free(r->t, old);
    return rc < 0 ? -1 : 0;
}

int nvmet_object_remove(struct api_call *call, enum nvmet_object o, int64_t id, json_t *options)
{
    json_t *params = options ? json_pack("[I, O]", (json_int_t)id, options)
                             : json_pack("[I, {}]", (json_int_t)id);
    json_t *result = NULL;
    if (!params)
        return api_error(call, ENOMEM, "out of memory");
    int rc = nvmet_delete(res_of(o), call, params, &result);
    json_decref(params);
    json_decref(result);
    return rc < 0 ? -1 : 0;
}
