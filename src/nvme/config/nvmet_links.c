/*
 * nvmet.host_subsys.* and nvmet.port_subsys.*: which hosts may connect to
 * a subsystem, and which ports serve it. Created from {host_id|port_id,
 * subsys_id}; read back as {id, host|port: {...}, subsys: {...}} with the
 * linked rows embedded (TrueNAS expands the foreign keys), so clients
 * filter on "subsys.id" and "port.id". A link's "update" moves it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "nvme/config/nvmet_internal.h"

/* Both ends exist, and the pair is new. */
static void link_check(struct nvw *w, const struct nvmet_link *l, const struct nvs_table *other,
                       const char *key, const char *what, const struct nvs_table *links)
{
    int64_t n = 0;
    char where[64];
    if (nvs_count(other, "id = ?1", &n, "i", l->other_id) < 0 || n == 0)
        nvw_err(w, key, ENOENT, "No %s with ID %" PRId64, what, l->other_id);
    n = 0;
    if (nvs_count(&nvs_subsys, "id = ?1", &n, "i", l->subsys_id) < 0 || n == 0)
        nvw_err(w, "subsys_id", ENOENT, "No subsystem with ID %" PRId64, l->subsys_id);
    n = 0;
    snprintf(where, sizeof(where), "%s = ?1 AND subsys_id = ?2 AND id != ?3", key);
    if (nvs_count(links, where, &n, "iii", l->other_id, l->subsys_id, l->id) == 0 && n)
        nvw_err(w, "subsys_id", EEXIST,
                "This record already exists (%s ID: %" PRId64 "/Subsystem ID: %" PRId64 ")", what,
                l->other_id, l->subsys_id);
}

static int host_subsys_check(struct nvw *w, void *obj, const void *old)
{
    (void)old;
    link_check(w, obj, &nvs_host, "host_id", "host", &nvs_host_subsys);
    return 0;
}

static int port_subsys_check(struct nvw *w, void *obj, const void *old)
{
    (void)old;
    link_check(w, obj, &nvs_port, "port_id", "port", &nvs_port_subsys);
    return 0;
}

/* {subsys: index, host|port: index} */
static json_t *link_context(const struct nvmet_res *other, const char *name)
{
    json_t *c = json_object();
    json_object_set_new(c, "subsys", nvmet_index(&nvmet_subsys_res));
    json_object_set_new(c, name, nvmet_index(other));
    return c;
}

static json_t *host_subsys_context(json_t *params)
{
    (void)params;
    json_t *c = link_context(&nvmet_host_res, "host");
    /* a link shows which host, never its keys */
    const char *k;
    json_t *h;
    json_object_foreach(json_object_get(c, "host"), k, h)
    {
        json_object_del(h, "dhchap_key");
        json_object_del(h, "dhchap_ctrl_key");
    }
    return c;
}

static json_t *port_subsys_context(json_t *params)
{
    (void)params;
    return link_context(&nvmet_port_res, "port");
}

static json_t *link_encode(const struct nvmet_link *l, json_t *ctx, const char *name,
                           json_t *(*context)(json_t *))
{
    json_t *own = ctx ? NULL : context(NULL);
    json_t *c = ctx ? ctx : own;
    json_t *o = json_pack("{s:I}", "id", (json_int_t)l->id);
    json_object_set_new(o, name, nvmet_index_get(json_object_get(c, name), l->other_id));
    json_object_set_new(o, "subsys", nvmet_index_get(json_object_get(c, "subsys"), l->subsys_id));
    json_decref(own);
    return o;
}

static json_t *host_subsys_encode(const void *obj, json_t *ctx)
{
    return link_encode(obj, ctx, "host", host_subsys_context);
}

static json_t *port_subsys_encode(const void *obj, json_t *ctx)
{
    return link_encode(obj, ctx, "port", port_subsys_context);
}

const struct nvmet_res nvmet_host_subsys_res = {
    .what = "host_subsys",
    .t = &nvs_host_subsys,
    .check = host_subsys_check,
    .context = host_subsys_context,
    .encode = host_subsys_encode,
};

const struct nvmet_res nvmet_port_subsys_res = {
    .what = "port_subsys",
    .t = &nvs_port_subsys,
    .check = port_subsys_check,
    .context = port_subsys_context,
    .encode = port_subsys_encode,
};

NVMET_CRUD_HANDLERS(hs, nvmet_host_subsys_res, "NVMe-oF host_subsys")
NVMET_CRUD_HANDLERS(ps, nvmet_port_subsys_res, "NVMe-oF port_subsys")

static const struct api_arg hs_create_args[] = {
    NVMET_ARG_DATA(nvs_host_subsys_fields, NVS_LINK_INPUT, 0)};
static const struct api_arg hs_update_args[] = {
    API_ARG_ID, NVMET_ARG_DATA(nvs_host_subsys_fields, NVS_LINK_INPUT, API_PARTIAL)};
static const struct api_arg ps_create_args[] = {
    NVMET_ARG_DATA(nvs_port_subsys_fields, NVS_LINK_INPUT, 0)};
static const struct api_arg ps_update_args[] = {
    API_ARG_ID, NVMET_ARG_DATA(nvs_port_subsys_fields, NVS_LINK_INPUT, API_PARTIAL)};
static const struct api_arg delete_args[] = {API_ARG_ID};

const struct api_method nvmet_link_methods[] = {
    NVMET_CRUD_METHODS("nvmet.host_subsys", hs, "host-to-subsystem link", hs_create_args,
                       hs_update_args, delete_args),
    NVMET_CRUD_METHODS("nvmet.port_subsys", ps, "port-to-subsystem link", ps_create_args,
                       ps_update_args, delete_args),
};
const size_t nvmet_link_methods_n = ARRAY_SIZE(nvmet_link_methods);
