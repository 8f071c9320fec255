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

/* Save r's row data (defaults applied) in the caller's transaction. */
static int save(const struct nvmet_res *r, struct nvw *w, json_t *data, int64_t *id)
{
    int rc = api_apply_defaults(data, r->fields, r->nfields) < 0
                 ? api_error(w->call, ENOMEM, "out of memory")
                 : nvmet_save(r, w, data, NULL, id);
    json_decref(data);
    return rc;
}

/* The port to serve on (see the header comment); 0 or -1 with the error set. */
static int share_port(struct nvw *w, json_t *in, int64_t *port)
{
    json_t *rows, *row = NULL;
    const char *addr = nvj_str(in, "traddr");
    int64_t svc = nvj_int(in, "trsvcid") ? nvj_int(in, "trsvcid") : 4420;
    if ((*port = nvj_int(in, "port"))) {
        if (nvs_get(&nvs_port, *port, &row) < 0) {
            nvw_err(w, "port", ENOENT, "No port with ID %" PRId64, *port);
            return api_invalid(w->call);
        }
        json_decref(row);
        return 0;
    }
    if (nvs_select(&nvs_port, addr ? "addr_traddr = ?1 AND addr_trsvcid = ?2" : NULL, &rows,
                   addr ? "ti" : NULL, addr, svc) < 0)
        return api_error(w->call, EIO, "cannot read the ports");
    if (json_array_size(rows) && (addr || !nvj_int(in, "trsvcid"))) {
        *port = nvj_int(json_array_get(rows, 0), "id");
        json_decref(rows);
        return 0;
    }
    json_decref(rows);
    return save(&nvmet_port_res, w,
                json_pack("{s:s, s:s, s:I}", "addr_trtype", "TCP", "addr_traddr",
                          addr ? addr : "0.0.0.0", "addr_trsvcid", (json_int_t)svc),
                port);
}

static int share_build(struct nvw *w, json_t *in, json_t **result)
{
    const char *ds = nvj_str(in, "name");
    char name[256], path[300];
    int64_t sid, nsid, port, link;
    share_name(ds, name, sizeof(name));
    snprintf(path, sizeof(path), "zvol/%s", ds);
    if (save(&nvmet_subsys_res, w,
             json_pack("{s:s, s:O}", "name", name, "allow_any_host",
                       json_object_get(in, "allow_any_host")),
             &sid) < 0 ||
        save(&nvmet_namespace_res, w,
             json_pack("{s:I, s:s, s:s}", "subsys_id", (json_int_t)sid, "device_type", "ZVOL",
                       "device_path", path),
             &nsid) < 0 ||
        share_port(w, in, &port) < 0 ||
        save(&nvmet_port_subsys_res, w,
             json_pack("{s:I, s:I}", "port_id", (json_int_t)port, "subsys_id", (json_int_t)sid),
             &link) < 0)
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

/* Delete namespace row ns, and its subsystem when that was its last. */
static int share_remove(json_t *ns)
{
    int64_t sid = nvj_int(ns, "subsys_id"), left = 0;
    int rc = nvs_delete(&nvs_namespace, NULL, "id = ?1", "i", nvj_int(ns, "id"));
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
    json_t *rows;
    if (cfg_tx_begin(&tx) < 0)
        return api_error(call, EIO, "cannot write the configuration");
    int rc = nvs_select(&nvs_namespace, "device_path = 'zvol/' || ?1", &rows, "t", ds);
    if (rc == 0 && json_array_size(rows) == 0) {
        json_decref(rows);
        cfg_tx_abort(&tx);
        return api_error(call, ENOENT, "%s is not shared over NVMe-oF", ds);
    }
    size_t i;
    json_t *ns;
    json_array_foreach(rows, i, ns) if (rc == 0) rc = share_remove(ns);
    json_decref(rows);
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
static json_t *share_row(json_t *ns, json_t *subs, json_t *links)
{
    json_t *sub = nvmet_index_get(subs, nvj_int(ns, "subsys_id"));
    json_t *ports = json_array();
    size_t i;
    json_t *l;
    json_array_foreach(links, i, l)
    {
        json_t *s = json_object_get(l, "subsys"), *p = json_object_get(l, "port");
        if (nvj_int(s, "id") == nvj_int(ns, "subsys_id") && p)
            json_array_append_new(ports, json_sprintf("%s:%" PRId64, nvj_str(p, "addr_traddr"),
                                                      nvj_int(p, "addr_trsvcid")));
    }
    json_t *o = json_pack(
        "{s:s, s:O, s:O, s:O, s:O, s:o}", "dataset", nvmet_zvol_dataset(nvj_str(ns, "device_path")),
        "nsid", json_object_get(ns, "nsid"), "namespace_id", json_object_get(ns, "id"), "subsys_id",
        json_object_get(ns, "subsys_id"), "subnqn", json_object_get(sub, "subnqn"), "ports", ports);
    json_decref(sub);
    return o;
}

static int share_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows, *subs = nvmet_index(&nvmet_subsys_res);
    json_t *links = nvmet_rows(&nvmet_port_subsys_res, NULL), *arr = json_array();
    size_t i;
    json_t *ns;
    int rc = nvs_select(&nvs_namespace, "device_type = 'ZVOL'", &rows, NULL);
    if (rc == 0)
        json_array_foreach(rows, i, ns) json_array_append_new(arr, share_row(ns, subs, links));
    json_decref(rows);
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
