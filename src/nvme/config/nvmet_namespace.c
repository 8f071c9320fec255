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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control/dataset_store.h"
#include "control/datasets.h"
#include "control/db.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"
#include "nvme/nvme_resv.h"
#include "store/bdev.h"
#include "store/names.h"
#include "store/poolfs.h"

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
static void check_file(struct nvw *w, const struct nvmet_namespace *ns,
                       const struct nvmet_namespace *old)
{
    const char *path = ns->device_path;
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
    bool own = old && old->device_type == NVMET_FILE && strcmp(old->device_path, path) == 0;
    int64_t size = ns->filesize.set ? ns->filesize.v : 0;
    int64_t old_size = own && old->filesize.set ? old->filesize.v : 0;
    if (poolfs_stat(path, &sb) == 0 && !own) {
        nvw_err(w, "device_path", EEXIST,
                "%s exists: a FILE namespace's file is created by blockd (give a new path and a "
                "filesize); to serve a volume use a ZVOL namespace",
                path);
        log_warn("nvmet: %s refused existing file %s (peer %s)", w->method, path,
                 api_call_peer(w->call));
    } else if (!own && size <= 0) {
        nvw_err(w, "filesize", EINVAL, "Must supply filesize if device_path FILE does not exist.");
    } else if (size % 512) {
        nvw_err(w, "filesize", EINVAL, "filesize must be a multiple of 512");
    } else if (own && ns->filesize.set && size < old_size) {
        nvw_err(w, "filesize", EINVAL,
                "Shrinking an namespace file is not allowed. This can lead to data loss.");
    }
}

/* Another namespace already serving the device. */
static void check_unused(struct nvw *w, const struct nvmet_namespace *ns)
{
    void *rows;
    size_t n;
    if (nvs_load(&nvs_namespace, "device_path = ?1 AND id != ?2", &rows, &n, "ti", ns->device_path,
                 ns->id) < 0)
        return;
    if (n) {
        struct nvmet_subsys *sub = NULL;
        nvs_get(&nvs_subsys, ((struct nvmet_namespace *)rows)->subsys_id, (void **)&sub);
        nvw_err(w, "device_path", EEXIST, "This device_path already used by subsystem: %s",
                sub ? sub->name : "?");
        nvs_free(&nvs_subsys, sub);
    }
    nvs_free_all(&nvs_namespace, rows, n);
}

/* An enabled namespace may not export a device an iSCSI extent exports:
 * NVMe reservations and SCSI persistent reservations are separate states,
 * so each host would believe it holds the volume (docs/nvme.md). */
static void check_iscsi(struct nvw *w, const struct nvmet_namespace *ns)
{
    char why[512];
    if (ns->enabled && ns->device_path &&
        datasets_reserving_export("nvme", ns->device_path, why, sizeof(why)))
        nvw_err(w, "device_path", EBUSY,
                "%s: a device is exported over iSCSI or NVMe-oF, not both (their reservations are "
                "separate)",
                why);
}

/* The nsid: the next free one when not given; unique in the subsystem. */
static int check_nsid(struct nvw *w, struct nvmet_namespace *ns)
{
    int64_t n = 0;
    if (!ns->nsid.set) {
        int64_t next = nsid_next(ns->subsys_id);
        if (!next)
            return api_error(w->call, ENOSPC, "Unable to determine namespace ID (NSID)");
        ns->nsid = (struct nvs_opt){true, next};
    }
    if (nvs_count(&nvs_namespace, "subsys_id = ?1 AND nsid = ?2 AND id != ?3", &n, "iii",
                  ns->subsys_id, ns->nsid.v, ns->id) == 0 &&
        n)
        nvw_err(w, "nsid", EEXIST,
                "This record already exists (Subsystem ID: %" PRId64 "/NSID: %" PRId64 ")",
                ns->subsys_id, ns->nsid.v);
    return 0;
}

static int ns_check(struct nvw *w, void *obj, const void *prev)
{
    struct nvmet_namespace *ns = obj;
    const struct nvmet_namespace *old = prev;
    int64_t n = 0;
    if (nvs_count(&nvs_subsys, "id = ?1", &n, "i", ns->subsys_id) < 0 || n == 0) {
        nvw_err(w, "subsys_id", ENOENT, "No subsystem with ID %" PRId64, ns->subsys_id);
        return 0;
    }
    if (check_nsid(w, ns) < 0)
        return -1;
    if (ns->device_type == NVMET_ZVOL) {
        check_zvol(w, ns->device_path);
        ns->filesize.set = false;
    } else {
        check_file(w, ns, old);
    }
    check_unused(w, ns);
    check_iscsi(w, ns);
    if (old)
        return 0; /* device_uuid and device_nguid stay (read from the stored row) */
    char u[37], g[37];
    nvs_uuid(u);
    nvs_uuid(g);
    free(ns->device_uuid);
    free(ns->device_nguid);
    ns->device_uuid = strdup(u);
    ns->device_nguid = strdup(g);
    return ns->device_uuid && ns->device_nguid ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

/* A FILE namespace's file: created sparse, or grown. */
static int ns_saved(struct nvw *w, const void *obj, const void *old)
{
    const struct nvmet_namespace *ns = obj;
    const char *path = ns->device_path;
    int64_t size = ns->filesize.v;
    struct stat sb;
    (void)old;
    if (ns->device_type != NVMET_FILE)
        return 0;
    int err = poolfs_stat(path, &sb);
    if (err == -ENOENT) {
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
    return 0;
}

static json_t *ns_context(json_t *params)
{
    (void)params;
    return nvmet_index(&nvmet_subsys_res);
}

/* The row with "subsys": {the subsystem's row} instead of subsys_id. */
static json_t *ns_encode(const void *obj, json_t *ctx)
{
    const struct nvmet_namespace *ns = obj;
    json_t *o = nvmet_row(&nvmet_namespace_res, ns);
    json_t *idx = ctx ? json_incref(ctx) : nvmet_index(&nvmet_subsys_res);
    json_object_del(o, "subsys_id");
    json_object_set_new(o, "subsys", nvmet_index_get(idx, ns->subsys_id));
    json_object_set_new(o, "locked", json_false()); /* blockd does not encrypt datasets */
    json_decref(idx);
    return o;
}

/* delete {remove}: the file of a FILE namespace goes once the delete committed. */
static void ns_deleted(struct nvw *w, const void *obj, json_t *opts)
{
    const struct nvmet_namespace *ns = obj;
    nvme_resv_forget(ns->id);
    if (!nvj_bool(opts, "remove") || ns->device_type != NVMET_FILE)
        return;
    int rc = poolfs_unlink(ns->device_path);
    if (rc < 0 && rc != -ENOENT)
        log_error("nvmet: %s: cannot remove %s: %s", w->method, ns->device_path, strerror(-rc));
    else
        log_info("nvmet: removed %s", ns->device_path);
}

const struct nvmet_res nvmet_namespace_res = {
    .what = "namespace",
    .t = &nvs_namespace,
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
static const struct api_arg create_args[] = {
    NVMET_ARG_DATA(nvs_namespace_fields, NVS_NAMESPACE_INPUT, 0)};
static const struct api_arg update_args[] = {
    API_ARG_ID, NVMET_ARG_DATA(nvs_namespace_fields, NVS_NAMESPACE_INPUT, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    API_ARG_ID, API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};

const struct api_method nvmet_namespace_methods[] = {
    NVMET_CRUD_METHODS("nvmet.namespace", ns, "namespace", create_args, update_args, delete_args),
};
const size_t nvmet_namespace_methods_n = ARRAY_SIZE(nvmet_namespace_methods);
