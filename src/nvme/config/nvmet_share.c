/*
 * share.nvme.create / delete / query: one volume shared over NVMe/TCP in
 * ONE configuration transaction, like share.iscsi.*: a subsystem named
 * after the dataset (lowercase; ':' '.' '_' become '-', '/' '@' become
 * ':'), the volume as its namespace 1, served on a port (the one given,
 * else the port at traddr:trsvcid, else the first port, else a new TCP
 * port at traddr:trsvcid, default 0.0.0.0:4420). Each step is the
 * nvmet.* object's own check and write (nvmet_save), joined into the one
 * transaction: a failure leaves nothing behind and publishes nothing.
 * delete removes the volume's namespaces and every subsystem left
 * without one (with its links).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/cfgtx.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"

static const struct api_field create_fields[] = {
    API_FIELD_STRING("name", API_REQUIRED, 1, 255),
    {.name = "port", .type = API_T_INT, .flags = API_NULLABLE, .def = "null"},
    API_FIELD_STRING("traddr", 0, 1, 63),
    {.name = "trsvcid", .type = API_T_INT, .flags = API_RANGE, .min = 1024, .max = 65535},
    {.name = "allow_any_host", .type = API_T_BOOL, .def = "true"},
};
static const struct api_field delete_fields[] = {
    API_FIELD_STRING("name", API_REQUIRED, 1, 255),
};

/* The subsystem name of dataset (as iSCSI share target names). */
static void share_name(const char *ds, char *out, size_t len)
{
    size_t n = 0;
    for (; *ds && n + 1 < len; ds++) {
        char c = (char)tolower((unsigned char)*ds);
        out[n++] = c == ':' || c == '.' || c == '_' ? '-' : c == '/' || c == '@' ? ':' : c;
    }
    out[n] = 0;
}

/* Save obj (a new object of r, fields set by the caller) in the caller's
 * transaction and free it; its id in *id. 0 or -1 (error set). */
static int save(const struct nvmet_res *r, struct nvw *w, void *obj, int64_t *id)
{
    int rc = obj ? nvmet_save(r, w, obj, NULL) : api_error(w->call, ENOMEM, "out of memory");
    if (rc == 0)
        *id = *(int64_t *)obj;
    nvs_free(r->t, obj);
    return rc;
}

static char *dup(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* The port to serve on (see the header comment); 0 or -1 with the error set. */
static int share_port(struct nvw *w, json_t *in, int64_t *port)
{
    const char *addr = nvj_str(in, "traddr");
    int64_t svc = nvj_int(in, "trsvcid") ? nvj_int(in, "trsvcid") : 4420, n = 0;
    void *rows;
    size_t count;
    if ((*port = nvj_int(in, "port"))) {
        if (nvs_count(&nvs_port, "id = ?1", &n, "i", *port) < 0 || n == 0) {
            nvw_err(w, "port", ENOENT, "No port with ID %" PRId64, *port);
            return api_invalid(w->call);
        }
        return 0;
    }
    bool given = addr || nvj_int(in, "trsvcid");
    if (nvs_load(&nvs_port, given ? "addr_traddr = ?1 AND addr_trsvcid = ?2" : NULL, &rows, &count,
                 given ? "ti" : NULL, addr ? addr : "0.0.0.0", svc) < 0)
        return api_error(w->call, EIO, "cannot read the ports");
    *port = count ? ((struct nvmet_port *)rows)->id : 0;
    nvs_free_all(&nvs_port, rows, count);
    if (*port)
        return 0;
    struct nvmet_port *p = nvs_new(&nvs_port);
    if (p) {
        p->addr_trtype = 0; /* TCP */
        p->addr_trsvcid = svc;
        p->addr_traddr = dup(addr ? addr : "0.0.0.0");
    }
    return save(&nvmet_port_res, w, p, port);
}

static int share_build(struct nvw *w, json_t *in, json_t **result)
{
    const char *ds = nvj_str(in, "name");
    char name[256], path[300];
    int64_t sid = 0, nsid = 0, port = 0, link = 0;
    share_name(ds, name, sizeof(name));
    snprintf(path, sizeof(path), "zvol/%s", ds);
    struct nvmet_subsys *s = nvs_new(&nvs_subsys);
    if (s) {
        s->name = dup(name);
        s->allow_any_host = !json_is_false(json_object_get(in, "allow_any_host"));
    }
    if (save(&nvmet_subsys_res, w, s, &sid) < 0)
        return -1;
    struct nvmet_namespace *ns = nvs_new(&nvs_namespace);
    if (ns) {
        ns->subsys_id = sid;
        ns->device_type = NVMET_ZVOL;
        ns->device_path = dup(path);
    }
    if (save(&nvmet_namespace_res, w, ns, &nsid) < 0 || share_port(w, in, &port) < 0)
        return -1;
    struct nvmet_link *l = nvs_new(&nvs_port_subsys);
    if (l) {
        l->other_id = port;
        l->subsys_id = sid;
    }
    if (save(&nvmet_port_subsys_res, w, l, &link) < 0)
        return -1;
    *result = json_pack("{s:s, s:o, s:o, s:o}", "dataset", ds, "subsys",
                        nvmet_encoded(&nvmet_subsys_res, sid), "namespace",
                        nvmet_encoded(&nvmet_namespace_res, nsid), "port",
                        nvmet_encoded(&nvmet_port_res, port));
    return *result ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

static int share_create(struct api_call *call, json_t *params, json_t **result)
{
    struct nvw w = {call, "share.nvme.create"};
    struct cfg_tx tx;
    json_t *in = api_param(params, 0);
    if (cfg_tx_begin(&tx) < 0)
        return api_error(call, EIO, "cannot write the configuration");
    if (share_build(&w, in, result) < 0) {
        cfg_tx_abort(&tx);
        return -1;
    }
    int rc = cfg_tx_commit(&tx);
    if (rc < 0 && !tx.committed) {
        json_decref(*result);
        *result = NULL;
        return api_error(call, -rc, "cannot store the share: %s", strerror(-rc));
    }
    log_info("nvmet: %s shared over NVMe/TCP (peer %s)", nvj_str(in, "name"), api_call_peer(call));
    return 0;
}

/* Delete namespace ns, and its subsystem when that was its last. */
static int share_remove(const struct nvmet_namespace *ns)
{
    int64_t sid = ns->subsys_id, left = 0;
    int rc = nvs_delete(&nvs_namespace, NULL, "id = ?1", "i", ns->id);
    if (rc == 0)
        rc = nvs_count(&nvs_namespace, "subsys_id = ?1", &left, "i", sid);
    if (rc < 0 || left)
        return rc;
    rc = nvs_delete(&nvs_port_subsys, NULL, "subsys_id = ?1", "i", sid);
    if (rc == 0)
        rc = nvs_delete(&nvs_host_subsys, NULL, "subsys_id = ?1", "i", sid);
    return rc == 0 ? nvs_delete(&nvs_subsys, NULL, "id = ?1", "i", sid) : rc;
}

static int share_delete(struct api_call *call, json_t *params, json_t **result)
{
    const char *ds = nvj_str(api_param(params, 0), "name");
    struct cfg_tx tx;
    void *rows;
    size_t n;
    if (cfg_tx_begin(&tx) < 0)
        return api_error(call, EIO, "cannot write the configuration");
    int rc = nvs_load(&nvs_namespace, "device_path = 'zvol/' || ?1", &rows, &n, "t", ds);
    if (rc == 0 && n == 0) {
        free(rows);
        cfg_tx_abort(&tx);
        return api_error(call, ENOENT, "%s is not shared over NVMe-oF", ds);
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = share_remove(&((struct nvmet_namespace *)rows)[i]);
    nvs_free_all(&nvs_namespace, rows, n);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return api_error(call, -rc, "cannot delete the share: %s", strerror(-rc));
    }
    rc = cfg_tx_commit(&tx);
    if (rc < 0 && !tx.committed)
        return api_error(call, -rc, "cannot delete the share: %s", strerror(-rc));
    log_info("nvmet: %s no longer shared over NVMe/TCP (peer %s)", ds, api_call_peer(call));
    *result = json_true();
    return 0;
}

/* One row per ZVOL namespace: {dataset, nsid, namespace_id, subsys_id, subnqn, ports}. */
static json_t *share_row(const struct nvmet_namespace *ns, json_t *subs, json_t *links)
{
    json_t *sub = nvmet_index_get(subs, ns->subsys_id);
    json_t *ports = json_array();
    size_t i;
    json_t *l;
    json_array_foreach(links, i, l)
    {
        json_t *s = json_object_get(l, "subsys"), *p = json_object_get(l, "port");
        if (nvj_int(s, "id") == ns->subsys_id && json_is_object(p))
            json_array_append_new(ports, json_sprintf("%s:%" PRId64, nvj_str(p, "addr_traddr"),
                                                      nvj_int(p, "addr_trsvcid")));
    }
    json_t *o = json_pack(
        "{s:s, s:I, s:I, s:I, s:O, s:o}", "dataset", nvmet_zvol_dataset(ns->device_path), "nsid",
        (json_int_t)ns->nsid.v, "namespace_id", (json_int_t)ns->id, "subsys_id",
        (json_int_t)ns->subsys_id, "subnqn", json_object_get(sub, "subnqn"), "ports", ports);
    json_decref(sub);
    return o;
}

static int share_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *subs = nvmet_index(&nvmet_subsys_res);
    json_t *links = nvmet_rows(&nvmet_port_subsys_res, NULL), *arr = json_array();
    void *rows;
    size_t n;
    int rc = nvs_load(&nvs_namespace, "device_type = 'ZVOL'", &rows, &n, NULL);
    for (size_t i = 0; rc == 0 && i < n; i++)
        json_array_append_new(arr, share_row(&((struct nvmet_namespace *)rows)[i], subs, links));
    if (rc == 0)
        nvs_free_all(&nvs_namespace, rows, n);
    json_decref(subs);
    json_decref(links);
    rc = rc < 0 ? api_error(call, -rc, "cannot read the shares")
                : api_query(call, arr, params, result);
    json_decref(arr);
    return rc;
}

static const struct api_arg create_args[] = {API_ARG_OBJECT("data", create_fields, 0)};
static const struct api_arg delete_args[] = {API_ARG_OBJECT("data", delete_fields, 0)};

const struct api_method nvmet_share_methods[] = {
    {"share.nvme.create", NULL,
     "Share a volume over NVMe/TCP (subsystem, namespace, port link) in one transaction",
     share_create, API_SHARE, API_ARGS(create_args)},
    {"share.nvme.delete", NULL,
     "Remove a volume's NVMe-oF namespaces and the subsystems left without one", share_delete,
     API_SHARE, API_ARGS(delete_args)},
    {"share.nvme.query", NULL, "Volumes shared over NVMe-oF (one row per namespace)", share_query,
     API_READ, API_ARGS(nvmet_query_args)},
};
const size_t nvmet_share_methods_n = ARRAY_SIZE(nvmet_share_methods);
