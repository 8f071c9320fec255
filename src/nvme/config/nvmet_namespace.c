/*
 * nvmet.namespace.*: the namespaces of a subsystem, as TrueNAS 25.10
 * shapes them. A ZVOL namespace names a volume ("zvol/POOL/VOL", or a
 * snapshot, served read-only) that must exist and be a volume; a FILE
 * namespace is a file inside a pool that blockd creates (the rules of
 * iSCSI FILE extents, docs/security.md: an existing file that is not the
 * namespace's own is refused). nsid is the next free one when not given;
 * device_uuid and device_nguid are made at create and never change.
 * Rows read back "subsys": {the subsystem's row} (TrueNAS expands the
 * foreign key), so clients filter on "subsys.id".
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "control/dataset_store.h"
#include "control/datasets.h"
#include "control/db.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"
#include "store/bdev.h"
#include "store/names.h"
#include "store/poolfs.h"

static const char *const device_types[] = {"ZVOL", "FILE", NULL};

static const struct api_field ns_fields[] = {
    {.name = "nsid",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 0xFFFFFFFE,
     .def = "null"},
    {.name = "subsys_id", .type = API_T_INT, .flags = API_REQUIRED},
    {.name = "device_type", .type = API_T_ENUM, .flags = API_REQUIRED, .choices = device_types},
    API_FIELD_STRING("device_path", API_REQUIRED, 1, 4095),
    {.name = "filesize",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = INT64_MAX,
     .def = "null"},
    {.name = "enabled", .type = API_T_BOOL, .def = "true"},
};

/* The lowest nsid not used in subsystem sid (TrueNAS searches 1..0xFFFF). */
static int64_t nsid_next(int64_t sid)
{
    for (int64_t i = 1; i < 0xFFFF; i++) {
        int64_t n = 1;
        if (nvs_count(&nvs_namespace, "subsys_id = ?1 AND nsid = ?2", &n, "ii", sid, i) < 0)
            return 0;
        if (n == 0)
            return i;
    }
    return 0;
}

/* A ZVOL namespace: an existing volume (or a snapshot of one). */
static void check_zvol(struct nvw *w, const char *path)
{
    const char *ds = nvmet_zvol_dataset(path);
    char why[256];
    if (!ds) {
        nvw_err(w, "device_path", EINVAL, "ZVOL device_path must start with \"zvol/\": %s", path);
        return;
    }
    if (name_check_dataset(ds, true, why, sizeof(why)) < 0) {
        nvw_err(w, "device_path", EINVAL, "Invalid dataset name: %s", why);
        return;
    }
    char base[DS_NAME_BUF];
    snprintf(base, sizeof(base), "%.*s", (int)strcspn(ds, "@"), ds);
    struct ds_row row;
    int rc = ds_dataset_get(base, &row);
    if (rc == -ENOENT)
        nvw_err(w, "device_path", ENOENT, "Volume %s does not exist", base);
    else if (rc < 0)
        nvw_err(w, "device_path", -rc, "Cannot read dataset %s: %s", base, strerror(-rc));
    else if (row.type != DS_VOLUME)
        nvw_err(w, "device_path", EINVAL,
                "ZVOL device_path must be a block device: %s is a FILESYSTEM dataset", base);
    else if (strchr(ds, '@')) {
        struct volume *v;
        rc = datasets_volume_open(ds, &v);
        if (rc == 0)
            volume_unref(v);
        else if (rc == -ENOENT)
            nvw_err(w, "device_path", ENOENT, "Snapshot %s does not exist", ds);
    }
}

/* A FILE namespace: a file inside a pool, made by blockd (as iSCSI FILE
 * extents: datasets_file_check, then no foreign existing file). */
static void check_file(struct nvw *w, json_t *row, json_t *old)
{
    const char *path = nvj_str(row, "device_path");
    char why[PATH_MAX + 256];
    struct stat sb;
    if (path[0] != '/' || strstr(path, "/../") || strstr(path, "/./")) {
        nvw_err(w, "device_path", EINVAL, "FILE device_path must be absolute, without '..'");
        return;
    }
    int rc = datasets_file_check(path, true, why, sizeof(why));
    if (rc < 0) {
        nvw_err(w, "device_path", rc == -EISDIR ? EISDIR : EINVAL, "%s", why);
        log_warn("nvmet: %s refused path %s (peer %s): %s", w->method, path, api_call_peer(w->call),
                 why);
        return;
    }
    bool own = old && strcmp(nvj_str(old, "device_path"), path) == 0;
    int64_t size = nvj_int(row, "filesize"), old_size = old ? nvj_int(old, "filesize") : 0;
    if (poolfs_stat(path, &sb) == 0 && !own) {
        nvw_err(w, "device_path", EEXIST,
                "%s exists: a FILE namespace's file is created by blockd (give a new path and a "
                "filesize); to serve a volume use a ZVOL namespace",
                path);
        log_warn("nvmet: %s refused existing file %s (peer %s)", w->method, path,
                 api_call_peer(w->call));
    } else if (!own && size <= 0) {
        nvw_err(w, "filesize", EINVAL, "Must supply filesize if device_path FILE does not exist.");
    } else if (size && size % 512) {
        nvw_err(w, "filesize", EINVAL, "filesize must be a multiple of 512");
    } else if (own && size && size < old_size) {
        nvw_err(w, "filesize", EINVAL,
                "Shrinking an namespace file is not allowed. This can lead to data loss.");
    }
}

/* Another namespace (or an iSCSI extent) already serving the device. */
static void check_unused(struct nvw *w, json_t *row, json_t *old)
{
    const char *path = nvj_str(row, "device_path");
    json_t *rows;
    if (nvs_select(&nvs_namespace, "device_path = ?1 AND id != ?2", &rows, "ti", path,
                   old ? nvj_int(old, "id") : 0) == 0 &&
        json_array_size(rows)) {
        json_t *sub = NULL;
        nvs_get(&nvs_subsys, nvj_int(json_array_get(rows, 0), "subsys_id"), &sub);
        nvw_err(w, "device_path", EEXIST, "This device_path already used by subsystem: %s",
                sub ? nvj_str(sub, "name") : "?");
        json_decref(sub);
    }
    json_decref(rows);
}

static int ns_check(struct nvw *w, json_t *row, json_t *old)
{
    int64_t sid = nvj_int(row, "subsys_id"), n = 0;
    json_t *sub = NULL;
    if (nvs_get(&nvs_subsys, sid, &sub) < 0)
        nvw_err(w, "subsys_id", ENOENT, "No subsystem with ID %" PRId64, sid);
    json_decref(sub);
    if (json_is_null(json_object_get(row, "nsid")) && !api_has_verrs(w->call)) {
        int64_t next = nsid_next(sid);
        if (!next)
            return api_error(w->call, ENOSPC, "Unable to determine namespace ID (NSID)");
        json_object_set_new(row, "nsid", json_integer(next));
    }
    if (nvs_count(&nvs_namespace, "subsys_id = ?1 AND nsid = ?2 AND id != ?3", &n, "iii", sid,
                  nvj_int(row, "nsid"), old ? nvj_int(old, "id") : 0) == 0 &&
        n)
        nvw_err(w, "nsid", EEXIST,
                "This record already exists (Subsystem ID: %" PRId64 "/NSID: %" PRId64 ")", sid,
                nvj_int(row, "nsid"));
    if (strcmp(nvj_str(row, "device_type"), "ZVOL") == 0) {
        check_zvol(w, nvj_str(row, "device_path"));
        json_object_set_new(row, "filesize", json_null());
    } else {
        check_file(w, row, old);
    }
    check_unused(w, row, old);
    for (int i = 0; i < 2; i++) {
        const char *k = i ? "device_nguid" : "device_uuid";
        char u[37];
        nvs_uuid(u);
        if (old)
            json_object_set(row, k, json_object_get(old, k));
        else
            json_object_set_new(row, k, json_string(u));
    }
    return 0;
}

/* A FILE namespace's file: created sparse, or grown. */
static int ns_saved(struct nvw *w, json_t *row, json_t *old)
{
    const char *path = nvj_str(row, "device_path");
    int64_t size = nvj_int(row, "filesize");
    struct stat sb;
    if (strcmp(nvj_str(row, "device_type"), "FILE") != 0)
        return 0;
    int err = poolfs_stat(path, &sb);
    if (err == -ENOENT) {
        err = poolfs_mkdir_parents(path);
        if (err == 0)
            err = bdev_file_create_in_pool(path, (uint64_t)size, false);
        if (err < 0)
            return api_error(w->call, -err, "Cannot create %s: %s", path, strerror(-err));
        log_info("nvmet: created sparse file %s (%" PRId64 " bytes)", path, size);
    } else if (err == 0 && S_ISREG(sb.st_mode) && size > sb.st_size) {
        err = poolfs_truncate(path, (uint64_t)size);
        if (err < 0)
            return api_error(w->call, -err, "Cannot grow %s: %s", path, strerror(-err));
        log_info("nvmet: grew %s to %" PRId64 " bytes", path, size);
    }
    (void)old;
    return 0;
}

static json_t *ns_context(json_t *params)
{
    (void)params;
    return nvmet_index(&nvmet_subsys_res);
}

static json_t *ns_encode(json_t *row, json_t *ctx)
{
    json_t *o = json_deep_copy(row);
    int64_t sid = nvj_int(row, "subsys_id");
    json_t *sub = ctx ? nvmet_index_get(ctx, sid) : NULL;
    if (!ctx) {
        json_t *idx = nvmet_index(&nvmet_subsys_res);
        sub = nvmet_index_get(idx, sid);
        json_decref(idx);
    }
    json_object_del(o, "subsys_id");
    json_object_set_new(o, "subsys", sub);
    json_object_set_new(o, "locked", json_false()); /* blockd does not encrypt datasets */
    return o;
}

/* delete {remove}: the file of a FILE namespace goes once the delete committed. */
static void ns_deleted(struct nvw *w, json_t *row, json_t *opts)
{
    const char *path = nvj_str(row, "device_path");
    if (!nvj_bool(opts, "remove") || strcmp(nvj_str(row, "device_type"), "FILE") != 0)
        return;
    int rc = poolfs_unlink(path);
    if (rc < 0 && rc != -ENOENT)
        log_error("nvmet: %s: cannot remove %s: %s", w->method, path, strerror(-rc));
    else
        log_info("nvmet: removed %s", path);
}

const struct nvmet_res nvmet_namespace_res = {
    .what = "namespace",
    .t = &nvs_namespace,
    .fields = ns_fields,
    .nfields = ARRAY_SIZE(ns_fields),
    .check = ns_check,
    .saved = ns_saved,
    .context = ns_context,
    .encode = ns_encode,
    .deleted = ns_deleted,
};

NVMET_CRUD_HANDLERS(ns, nvmet_namespace_res, "NVMe-oF namespace")

static const struct api_field del_fields[] = {
    {.name = "remove", .type = API_T_BOOL, .def = "false"},
};
static const struct api_arg create_args[] = {API_ARG_OBJECT("data", ns_fields, 0)};
static const struct api_arg update_args[] = {API_ARG_ID,
                                             API_ARG_OBJECT("data", ns_fields, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    API_ARG_ID, API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};

const struct api_method nvmet_namespace_methods[] = {
    NVMET_CRUD_METHODS("nvmet.namespace", ns, "namespace", create_args, update_args, delete_args),
};
const size_t nvmet_namespace_methods_n = ARRAY_SIZE(nvmet_namespace_methods);
