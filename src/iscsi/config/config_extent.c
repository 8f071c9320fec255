/*
 * iscsi.extent.create|update|delete|query|get_instance|disk_choices: the
 * API of struct icfg_extent (extent_store.h holds its SQL). An extent is
 * a LUN source: a blockd volume (DISK, "zvol/<pool>/<volume>") or a file
 * (FILE). The field table the dispatcher checks, the one decoder
 * (extent_decode), the one encoder (extent_encode), the invariants
 * (extent_check) and handlers of one shape: decode → check → one
 * transaction → publish (its commit).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/datasets.h"
#include "control/db.h"
#include "iscsi/config/config_crud.h"
#include "iscsi/config/extent_store.h"
#include "core/log.h"
#include "core/util.h"
#include "store/bdev.h"
#include "store/names.h"
#include "store/poolfs.h"

/* ---- the field table: validation, decoder and encoder in one ---- */

#define AT(member, codec) API_AT(struct icfg_extent, member, codec)
_Static_assert(sizeof(enum icfg_extent_type) == sizeof(int), "api_codec_enum writes an int");
static const char *const rpm_enum[] = {"UNKNOWN", "SSD", "5400", "7200", "10000", "15000", NULL};
static const json_int_t blocksizes[] = {512, 1024, 2048, 4096};
/* filesize (an integer or a decimal string) and avail_threshold (a
 * nullable integer kept as has + value) have no codec: extent_decode and
 * extent_encode read and write them. */
static const struct api_field extent_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = ICFG_EXTENT_NAME_MAX,
     AT(name, api_codec_str)},
    {.name = "type",
     .type = API_T_ENUM,
     .choices = icfg_extent_type_names,
     .def = "\"DISK\"",
     AT(type, api_codec_enum)},
    {.name = "disk",
     .type = API_T_STRING,
     .flags = API_NULLABLE,
     .def = "null",
     AT(disk, api_codec_str_null)},
    {.name = "path",
     .type = API_T_STRING,
     .flags = API_NULLABLE,
     .def = "null",
     AT(path, api_codec_str_null)},
    {.name = "filesize", .type = API_T_ANY, .def = "0"},
    {.name = "serial",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = 20,
     .def = "null",
     AT(serial, api_codec_str)},
    {.name = "blocksize",
     .type = API_T_INT,
     .int_choices = blocksizes,
     .n_int_choices = ARRAY_SIZE(blocksizes),
     .def = "512",
     AT(blocksize, api_codec_i64)},
    {.name = "pblocksize", .type = API_T_BOOL, .def = "false", AT(pblocksize, api_codec_bool)},
    {.name = "avail_threshold",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 99,
     .def = "null"},
    {.name = "comment", .type = API_T_STRING, .def = "\"\"", AT(comment, api_codec_str)},
    {.name = "insecure_tpc", .type = API_T_BOOL, .def = "true", AT(insecure_tpc, api_codec_bool)},
    {.name = "xen", .type = API_T_BOOL, .def = "false", AT(xen, api_codec_bool)},
    {.name = "rpm",
     .type = API_T_ENUM,
     .choices = rpm_enum,
     .def = "\"SSD\"",
     AT(rpm, api_codec_str)},
    {.name = "ro", .type = API_T_BOOL, .def = "false", AT(ro, api_codec_bool)},
    {.name = "enabled", .type = API_T_BOOL, .def = "true", AT(enabled, api_codec_bool)},
    {.name = "defer", .type = API_T_BOOL},
};
#undef AT

/* The row iscsi.extent.* answers with: the table's fields, then what the
 * server sets (filesize, naa, vendor; gen is the runtime's, not shown). A
 * new reference, or NULL (ENOMEM). */
static json_t *extent_encode(const struct icfg_extent *e)
{
    json_t *r = api_fields_row(e->id, extent_fields, ARRAY_SIZE(extent_fields), e);
    if (r &&
        (json_object_set_new(r, "filesize", json_integer((json_int_t)e->filesize)) < 0 ||
         json_object_set_new(r, "avail_threshold",
                             icfg_int_or_null(e->has_avail_threshold, e->avail_threshold)) < 0 ||
         json_object_set_new(r, "naa", json_string(e->naa ? e->naa : "")) < 0 ||
         json_object_set_new(r, "vendor", json_string(e->vendor ? e->vendor : "")) < 0 ||
         json_object_set_new(r, "locked", json_false()) < 0)) {
        json_decref(r);
        r = NULL;
    }
    return r;
}

/* ---- decoder: a checked JSON body → struct ---- */

/* filesize: TrueNAS accepts an integer or a decimal string. */
static int filesize_value(json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return *out >= 0 ? 0 : -EINVAL;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!*s || strlen(s) > 19)
            return -EINVAL;
        int64_t n = 0;
        for (; *s; s++) {
            if (*s < '0' || *s > '9')
                return -EINVAL;
            n = n * 10 + (*s - '0');
        }
        *out = n;
        return 0;
    }
    return -EINVAL;
}

/*
 * The one decoder: apply the keys present in data (a body the dispatcher
 * checked against extent_fields: complete with its defaults on create,
 * partial on update) to e: the table, then the two fields without a
 * codec. 0 or -ENOMEM.
 */
static int extent_decode(json_t *data, struct icfg_extent *e)
{
    json_t *v;
    if ((v = json_object_get(data, "filesize")))
        e->filesize_invalid = filesize_value(v, &e->filesize) < 0;
    if ((v = json_object_get(data, "avail_threshold"))) {
        e->has_avail_threshold = json_is_integer(v);
        e->avail_threshold = json_integer_value(v);
    }
    return api_fields_decode(extent_fields, ARRAY_SIZE(extent_fields), data, e);
}

static int extent_decode_any(json_t *data, void *obj)
{
    return extent_decode(data, obj);
}

int icfg_extent_init(struct icfg_extent *e)
{
    memset(e, 0, sizeof(*e));
    return icfg_defaults(extent_fields, ARRAY_SIZE(extent_fields), extent_decode_any, e);
}

int iscsi_extent_decode(struct api_call *call, json_t *body, bool partial, struct icfg_extent *e)
{
    if (api_validate_object(call, api_call_method(call), body, extent_fields,
                            ARRAY_SIZE(extent_fields), partial ? API_PARTIAL : 0) < 0)
        return api_invalid(call);
    return extent_decode(body, e) < 0 ? api_error(call, ENOMEM, "out of memory") : 0;
}

/* ---- invariants ---- */

/* The name: no double quote (it ends up in ctl.conf-like output and
 * quoted keys), unique among the other extents. */
static void extent_check_name(struct icfg_write *w, const struct icfg_extent *e)
{
    struct api_call *call = w->call;
    char f[128];
    int64_t other;

    if (strchr(e->name, '"'))
        api_verr(call, icfg_wfield(w, "name", f, sizeof(f)), EINVAL,
                 "Double quotes are not allowed");
    else if (icfg_extent_find_name(e->name, e->id, &other) == 0)
        api_verr(call, icfg_wfield(w, "name", f, sizeof(f)), EEXIST, "Extent name must be unique");
}

/* A given serial: printable, without spaces or quotes (it is the unit
 * serial number VPD page's text), unique among the other extents. */
static void extent_check_serial(struct icfg_write *w, const struct icfg_extent *e)
{
    struct api_call *call = w->call;
    char f[128];
    int64_t other;
    bool ok = true;

    if (!e->serial || !*e->serial)
        return;
    for (const char *p = e->serial; *p; p++)
        if (*p <= ' ' || *p > '~' || *p == '"')
            ok = false;
    if (!ok)
        api_verr(call, icfg_wfield(w, "serial", f, sizeof(f)), EINVAL,
                 "Serial may contain printable characters only, without spaces or quotes");
    else if (icfg_extent_find_serial(e->serial, e->id, &other) == 0)
        api_verr(call, icfg_wfield(w, "serial", f, sizeof(f)), EEXIST,
                 "Serial number must be unique");
}

/* The size of a DISK extent's volume or snapshot. A volume's size is in
 * the datasets table: opening it here (and closing it again, since no LU
 * holds it yet) cost more than the rest of the call. Snapshots are opened
 * (their size is the volume's at snapshot time, kept by the store).
 * 0, or -1 with the error on field f. */
static int extent_disk_size(struct api_call *call, const char *f, const char *ds, uint64_t *vsize)
{
    struct volume *vol = NULL;
    int err = strchr(ds, '@') ? 1 : icfg_volume_size(ds, vsize);

    if (err == 0)
        return 0;
    if (err != -ENOENT)
        err = datasets_volume_open(ds, &vol);
    if (err == -ENOENT) {
        api_verr(call, f, ENOENT, "Volume %s does not exist", ds);
        return -1;
    }
    if (err < 0) {
        api_verr(call, f, -err, "Cannot open volume %s: %s", ds, strerror(-err));
        return -1;
    }
    *vsize = volume_size(vol);
    volume_unref(vol);
    return 0;
}

/* A DISK extent: "zvol/<dataset>" naming an existing volume (or a
 * snapshot, then read-only) whose size is whole blocks; path is for FILE
 * extents and is cleared, as is filesize. */
static void extent_check_disk(struct icfg_write *w, struct icfg_extent *e, bool update)
{
    struct api_call *call = w->call;
    const char *ds;
    char f[128], why[128];
    uint64_t vsize = 0;

    icfg_wfield(w, "disk", f, sizeof(f));
    if (!e->disk || !*e->disk) {
        api_verr(call, f, EINVAL, "This field is required for DISK extents");
        return;
    }
    ds = icfg_disk_dataset(e->disk);
    if (!ds) {
        api_verr(call, f, EINVAL, "Disk name must start with \"zvol/\"");
        return;
    }
    if (name_check_dataset(ds, true, why, sizeof(why)) < 0) {
        api_verr(call, f, EINVAL, "Invalid dataset name: %s", why);
        return;
    }
    if (strchr(ds, '@') && !e->ro) {
        api_verr(call, icfg_wfield(w, "ro", f, sizeof(f)), EINVAL,
                 "Must be set when disk is a ZFS Snapshot");
        return;
    }
    if (extent_disk_size(call, f, ds, &vsize) < 0)
        return;
    if (vsize % (uint64_t)e->blocksize != 0)
        api_verr(call, icfg_wfield(w, "blocksize", f, sizeof(f)), EINVAL,
                 "Volume size %llu is not a multiple of the block size %lld",
                 (unsigned long long)vsize, (long long)e->blocksize);
    if (e->path && !update)
        api_verr(call, icfg_wfield(w, "path", f, sizeof(f)), EINVAL,
                 "path is for FILE extents only");
    icfg_str_set(&e->path, NULL);
    e->filesize = 0;
}

/* A FILE extent's size against the file: an existing file is not a
 * directory, is grown only, in whole blocks; a missing one needs a
 * filesize to be created with; an update never shrinks the extent
 * (old_size: its size before, 0 on create). */
static void extent_check_file_size(struct icfg_write *w, const struct icfg_extent *e,
                                   int64_t old_size)
{
    struct api_call *call = w->call;
    char f[128];
    struct stat sb;
    int64_t size = e->filesize, bs = e->blocksize;

    icfg_wfield(w, "filesize", f, sizeof(f));
    if (poolfs_stat(e->path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            api_verr(call, icfg_wfield(w, "path", f, sizeof(f)), EISDIR,
                     "You need to specify a filepath not a directory.");
            return;
        }
        if (size == 0 && S_ISREG(sb.st_mode) && sb.st_size % bs != 0)
            api_verr(call, f, EINVAL, "File size %lld is not a multiple of the block size %lld",
                     (long long)sb.st_size, (long long)bs);
        if (size > 0 && S_ISREG(sb.st_mode) && size < sb.st_size)
            api_verr(call, f, EINVAL, "File size can only be increased");
    } else if (size == 0) {
        api_verr(call, f, EINVAL, "The file does not exist: give filesize to create it");
        return;
    }
    if (size % bs != 0)
        api_verr(call, f, EINVAL, "File size must be a multiple of block size");
    if (size > 0 && size < old_size)
        api_verr(call, f, EINVAL, "Shrinking an extent is not allowed");
}

/* Whether e names a file that exists and that this extent did not create:
 * blockd serves only files it made (a file planted in a pool directory,
 * by another local user or a restored backup, is never taken over). The
 * extent's own file (an update keeping its path) is its own. */
static bool extent_file_foreign(const struct icfg_extent *e, const struct icfg_extent *old)
{
    struct stat sb;

    if (old && old->type == ICFG_EXTENT_FILE && old->path && strcmp(old->path, e->path) == 0)
        return false;
    return poolfs_stat(e->path, &sb) != -ENOENT;
}

/* A FILE extent: an absolute path inside a pool, reached without any
 * symlink and not a blockd volume or snapshot file (datasets_file_check,
 * stricter than TrueNAS's check_path_resides_within_volume: the API
 * cannot export or grow arbitrary host files; a refusal is logged with
 * the peer); disk is for DISK extents and is cleared. */
static void extent_check_file(struct icfg_write *w, struct icfg_extent *e,
                              const struct icfg_extent *old)
{
    struct api_call *call = w->call;
    char f[128], problem[PATH_MAX + 256];
    int perr;

    icfg_wfield(w, "path", f, sizeof(f));
    if (!e->path || !*e->path) {
        api_verr(call, f, EINVAL, "This field is required for FILE extents");
        return;
    }
    if (e->path[0] != '/' || strstr(e->path, "/../") || strlen(e->path) >= 4096) {
        api_verr(call, f, EINVAL, "Path must be absolute and without '..'");
        return;
    }
    /* a missing file is reported below (filesize) */
    perr = datasets_file_check(e->path, true, problem, sizeof(problem));
    if (perr < 0) {
        api_verr(call, f, perr == -EISDIR ? EISDIR : EINVAL, "%s", problem);
        log_warn("iscsi config: %s refused path %s (peer %s): %s", w->method, e->path,
                 api_call_peer(call), problem);
        return;
    }
    if (extent_file_foreign(e, old)) {
        api_verr(call, f, EEXIST,
                 "%s exists: a FILE extent's file is created by blockd (give a new path and a "
                 "filesize); to share a volume use a DISK extent",
                 e->path);
        log_warn("iscsi config: %s refused existing file %s (peer %s)", w->method, e->path,
                 api_call_peer(call));
        return;
    }
    if (e->disk && !old)
        api_verr(call, icfg_wfield(w, "disk", f, sizeof(f)), EINVAL,
                 "disk is for DISK extents only");
    icfg_str_set(&e->disk, NULL);
    extent_check_file_size(w, e, old ? old->filesize : 0);
}

/* An enabled extent may not export a device an NVMe namespace exports:
 * SCSI persistent reservations and NVMe reservations are separate states,
 * so each host would believe it holds the volume (docs/nvme.md). */
static void extent_check_nvme(struct icfg_write *w, const struct icfg_extent *e)
{
    const char *device = e->type == ICFG_EXTENT_DISK ? e->disk : e->path;
    char f[128], why[512];
    if (!e->enabled || !device || !device[0])
        return;
    if (datasets_reserving_export("iscsi", device, why, sizeof(why)))
        api_verr(w->call,
                 icfg_wfield(w, e->type == ICFG_EXTENT_DISK ? "disk" : "path", f, sizeof(f)), EBUSY,
                 "%s: a device is exported over iSCSI or NVMe-oF, not both (their reservations "
                 "are separate)",
                 why);
}

/* The invariants of a complete extent; old is the stored one on update
 * (NULL on create). Clears the other type's field. Field errors are
 * collected on call. DB locked. */
static void extent_check(struct icfg_write *w, struct icfg_extent *e, const struct icfg_extent *old)
{
    struct api_call *call = w->call;
    char f[128];

    extent_check_name(w, e);
    extent_check_serial(w, e);
    if (e->filesize_invalid) {
        api_verr(call, icfg_wfield(w, "filesize", f, sizeof(f)), EINVAL,
                 "Input should be a non-negative integer (bytes)");
        return;
    }
    if (e->type == ICFG_EXTENT_DISK)
        extent_check_disk(w, e, old != NULL);
    else
        extent_check_file(w, e, old);
    extent_check_nvme(w, e);
}

/* Create the FILE extent's file if missing (sparse), or grow it. */
static int extent_prepare_file(struct api_call *call, const struct icfg_extent *e)
{
    if (e->type != ICFG_EXTENT_FILE)
        return 0;
    struct stat sb;
    int err = poolfs_stat(e->path, &sb);
    if (err == -ENOENT) {
        err = bdev_file_create_in_pool(e->path, (uint64_t)e->filesize, false);
        if (err < 0)
            return api_error(call, -err, "Cannot create %s: %s", e->path, strerror(-err));
        log_info("iscsi config: created sparse file %s (%lld bytes)", e->path,
                 (long long)e->filesize);
    } else if (err < 0) {
        return api_error(call, -err, "Cannot use %s: %s", e->path, strerror(-err));
    } else if (S_ISREG(sb.st_mode) && e->filesize > sb.st_size) {
        err = poolfs_truncate(e->path, (uint64_t)e->filesize);
        if (err < 0)
            return api_error(call, -err, "Cannot grow %s: %s", e->path, strerror(-err));
    }
    return 0;
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Whether the change from old to e needs a new LU: the fields the LU is
 * built from (sessions see it as a new device). ro and FILE growth apply
 * to the running LU, so sessions keep their state; a FILE extent's file
 * was opened read-only for ro, so ro needs a new one there. */
static bool extent_new_lu(const struct icfg_extent *old, const struct icfg_extent *e)
{
    return old->type != e->type || !str_same(old->disk, e->disk) || !str_same(old->path, e->path) ||
           !str_same(old->serial, e->serial) || old->blocksize != e->blocksize ||
           old->pblocksize != e->pblocksize || !str_same(old->rpm, e->rpm) ||
           old->insecure_tpc != e->insecure_tpc || !str_same(old->vendor, e->vendor) ||
           !str_same(old->naa, e->naa) || (e->type == ICFG_EXTENT_FILE && old->ro != e->ro);
}

/* ---- handlers: decode → check → one transaction → publish ---- */

/* The stored extent id encoded as the call's result. 0 or -1. */
static int extent_result(struct api_call *call, int64_t id, json_t **result)
{
    struct icfg_extent e;
    int rc = icfg_extent_get(id, &e);
    if (rc == 0 && !(*result = extent_encode(&e)))
        rc = -ENOMEM;
    icfg_extent_clear(&e);
    return rc < 0 ? icfg_db_fail(call, rc) : 0;
}

int icfg_extent_save(struct icfg_write *w, struct icfg_extent *e, const struct icfg_extent *old)
{
    struct api_call *call = w->call;
    int64_t target;
    extent_check(w, e, old);
    if (api_has_verrs(call))
        return api_invalid(call);
    int rc = extent_prepare_file(call, e);
    if (rc < 0)
        return rc;
    rc = old ? icfg_extent_update(e, w->defer || extent_new_lu(old, e)) : icfg_extent_insert(e);
    if (rc < 0)
        return icfg_db_fail(call, rc);
    /* Not mapped yet on create: nothing to publish (as TrueNAS: no reload).
     * On update the publisher drops the LU of a rebuilt extent (its gen
     * moved) and applies ro and size to the running one. */
    if (old && icfg_extent_target(e->id, &target) == 0)
        icfg_changed_target(w, target);
    cfg_tx_changed(&w->tx, CFG_ISCSI_EXTENT, e->id, old ? CFG_UPDATED : CFG_CREATED);
    return 0;
}

/* Save e and answer with the stored row. 0 or -1 (error set). */
static int extent_save(struct icfg_write *w, struct icfg_extent *e, const struct icfg_extent *old,
                       json_t **result)
{
    return icfg_extent_save(w, e, old) < 0 ? -1 : extent_result(w->call, e->id, result);
}

static int extent_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    struct icfg_extent e = {0};
    json_t *body;
    if (icfg_create_begin(&w, call, params, extent_fields, ARRAY_SIZE(extent_fields), &body) < 0)
        return -1;
    int rc = extent_decode(body, &e) < 0 ? api_error(call, ENOMEM, "out of memory")
                                         : extent_save(&w, &e, NULL, result);
    icfg_extent_clear(&e);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int extent_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    struct icfg_extent old, e = {0};
    json_t *body;
    if (icfg_update_begin(&w, call, params, extent_fields, ARRAY_SIZE(extent_fields), &id, &body) <
        0)
        return -1;
    int rc = icfg_extent_get(id, &old);
    if (rc == 0)
        rc = icfg_extent_get(id, &e);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Extent", id);
    else if (extent_decode(body, &e) < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    else
        rc = extent_save(&w, &e, &old, result);
    icfg_extent_clear(&old);
    icfg_extent_clear(&e);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

/* The FILE extent's file goes once the deletion is committed
 * (icfg_write_end). */
static void unlink_after_commit(struct icfg_write *w, const char *path)
{
    if (!w->unlink_after)
        w->unlink_after = json_array();
    json_array_append_new(w->unlink_after, json_string(path));
}

int icfg_extent_delete_row(struct icfg_write *w, int64_t extent_id, bool remove, bool force)
{
    struct icfg_extent e;
    int64_t target;
    int rc = icfg_extent_get(extent_id, &e);
    if (rc < 0)
        return icfg_missing(w->call, rc, "Extent", extent_id);
    if (icfg_extent_target(extent_id, &target) == 0)
        rc = icfg_target_check_sessions(w, target, force);
    if (rc == 0)
        rc = icfg_targetextent_remove(w, "extent_id", extent_id);
    int err = rc == 0 ? icfg_extent_delete(extent_id) : 0;
    if (err < 0)
        rc = icfg_db_fail(w->call, err);
    if (rc == 0) {
        cfg_tx_changed(&w->tx, CFG_ISCSI_EXTENT, extent_id, CFG_DELETED);
        if (remove && e.path && e.type == ICFG_EXTENT_FILE)
            unlink_after_commit(w, e.path);
    }
    icfg_extent_clear(&e);
    return rc;
}

static int extent_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    bool remove, force;
    struct icfg_write w;
    if (icfg_delete_begin_opts(&w, call, params, &id, "remove", &remove, "force", &force) < 0)
        return -1;
    int rc = icfg_extent_delete_row(&w, id, remove, force);
    if (rc == 0)
        *result = json_true();
    return icfg_write_end(&w, rc);
}

static json_t *extent_encode_elem(const void *elem)
{
    return extent_encode(elem);
}

static int extent_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"},         {"name", "name"},
                                             {"disk", "disk"},     {"path", "path"},
                                             {"serial", "serial"}, {"naa", "naa"}};
    static const struct icfg_typed type = {&icfg_extent_table, extent_encode_elem};
    return icfg_query_typed(call, params, result, &type, hints, ARRAY_SIZE(hints));
}

static int extent_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, extent_query, "Extent");
}

/* TrueNAS: {"zvol/pool/vol": "pool/vol (16.0 MiB)"} for the volumes no extent
 * uses yet. */
static int extent_disk_choices(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    struct icfg_volume_choice *v = NULL;
    size_t n = 0;
    json_t *r = json_object();
    db_lock();
    int rc = icfg_volume_choices(&v, &n);
    db_unlock();
    for (size_t i = 0; r && rc == 0 && i < n; i++) {
        char key[600], label[700], size[32];
        format_size(v[i].size, size, sizeof(size));
        snprintf(key, sizeof(key), "zvol/%s", v[i].name);
        snprintf(label, sizeof(label), "%s (%s)", v[i].name, size);
        json_object_set_new(r, key, json_string(label));
    }
    icfg_volume_choices_free(v, n);
    if (!r)
        return api_error(call, ENOMEM, "out of memory");
    *result = r;
    return 0;
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(extent_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(extent_fields)};
static const struct api_arg delete_args[] = {ICFG_ARG_ID, ICFG_ARG_BOOL("remove"),
                                             ICFG_ARG_BOOL("force"), ICFG_ARG_BOOL("defer")};
/* TrueNAS's exclude list: accepted, not used. */
static const struct api_arg disk_choices_args[] = {
    {.name = "exclude", .type = API_T_ANY, .flags = API_ARG_OPTIONAL}};

const struct api_method icfg_extent_methods[] = {
    {"iscsi.extent.create", NULL,
     "Create an extent: DISK (zvol/<pool>/<volume>) or FILE (path, created sparse)", extent_create,
     API_SHARE, API_ARGS(create_args)},
    {"iscsi.extent.update", NULL, "Change an extent (live for mapped LUNs)", extent_update,
     API_SHARE, API_ARGS(update_args)},
    {"iscsi.extent.delete", NULL,
     "Delete an extent and its mapping (remove: unlink a FILE extent's file)", extent_delete,
     API_SHARE, API_ARGS(delete_args)},
    {"iscsi.extent.query", NULL, "List extents", extent_query, API_READ, API_ARGS(icfg_query_args)},
    {"iscsi.extent.disk_choices", NULL, "Volumes not used by an extent yet (zvol/<pool>/<volume>)",
     extent_disk_choices, API_READ, API_ARGS(disk_choices_args)},
    {"iscsi.extent.get_instance", NULL, "One extent by id", extent_query_instance, API_READ,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_extent_methods_count = ARRAY_SIZE(icfg_extent_methods);
