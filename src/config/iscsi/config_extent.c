/* iscsi.extent.create|update|delete|query|disk_choices. An extent is a LUN
 * source: a blockd volume (DISK, "zvol/<pool>/<volume>") or a file (FILE). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/datasets.h"
#include "config/db.h"
#include "core/log.h"
#include "core/util.h"
#include "config/iscsi/config_crud.h"
#include "store/bdev.h"
#include "store/names.h"
#include "store/poolfs.h"

json_t *icfg_extent_row_internal(sqlite3_stmt *st)
{
    json_t *r = json_object();
    json_object_set_new(r, "id", json_integer(sqlite3_column_int64(st, 0)));
    json_object_set_new(r, "name", json_string(icfg_col_text(st, 1)));
    json_object_set_new(r, "type", json_string(icfg_col_text(st, 2)));
    json_object_set_new(r, "disk", icfg_col_text_or_null(st, 3));
    json_object_set_new(r, "path", icfg_col_text_or_null(st, 4));
    json_object_set_new(r, "filesize", json_integer(sqlite3_column_int64(st, 5)));
    json_object_set_new(r, "serial", json_string(icfg_col_text(st, 6)));
    json_object_set_new(r, "blocksize", json_integer(sqlite3_column_int64(st, 7)));
    json_object_set_new(r, "pblocksize", json_boolean(sqlite3_column_int(st, 8)));
    json_object_set_new(r, "avail_threshold", icfg_col_int_or_null(st, 9));
    json_object_set_new(r, "comment", json_string(icfg_col_text(st, 10)));
    json_object_set_new(r, "naa", json_string(icfg_col_text(st, 11)));
    json_object_set_new(r, "insecure_tpc", json_boolean(sqlite3_column_int(st, 12)));
    json_object_set_new(r, "xen", json_boolean(sqlite3_column_int(st, 13)));
    json_object_set_new(r, "rpm", json_string(icfg_col_text(st, 14)));
    json_object_set_new(r, "ro", json_boolean(sqlite3_column_int(st, 15)));
    json_object_set_new(r, "enabled", json_boolean(sqlite3_column_int(st, 16)));
    json_object_set_new(r, "vendor", json_string(icfg_col_text(st, 17)));
    json_object_set_new(r, "locked", json_false());
    json_object_set_new(r, "gen", json_integer(sqlite3_column_int64(st, 18)));
    return r;
}

static json_t *extent_row(sqlite3_stmt *st)
{
    json_t *r = icfg_extent_row_internal(st);
    json_object_del(r, "gen");
    return r;
}

#define EXTENT_BY_ID ICFG_EXTENT_SELECT " WHERE id = ?"

static const char *const type_enum[] = {"DISK", "FILE", NULL};
static const char *const rpm_enum[] = {"UNKNOWN", "SSD", "5400", "7200", "10000", "15000", NULL};
static const json_int_t blocksizes[] = {512, 1024, 2048, 4096};
static const struct api_field extent_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = ICFG_EXTENT_NAME_MAX},
    {.name = "type", .type = API_T_ENUM, .choices = type_enum, .def = "\"DISK\""},
    {.name = "disk", .type = API_T_STRING, .flags = API_NULLABLE, .def = "null"},
    {.name = "path", .type = API_T_STRING, .flags = API_NULLABLE, .def = "null"},
    {.name = "filesize", .type = API_T_ANY, .def = "0"},
    {.name = "serial",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = 20,
     .def = "null"},
    {.name = "blocksize",
     .type = API_T_INT,
     .int_choices = blocksizes,
     .n_int_choices = ARRAY_SIZE(blocksizes),
     .def = "512"},
    {.name = "pblocksize", .type = API_T_BOOL, .def = "false"},
    {.name = "avail_threshold",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 99,
     .def = "null"},
    {.name = "comment", .type = API_T_STRING, .def = "\"\""},
    {.name = "insecure_tpc", .type = API_T_BOOL, .def = "true"},
    {.name = "xen", .type = API_T_BOOL, .def = "false"},
    {.name = "rpm", .type = API_T_ENUM, .choices = rpm_enum, .def = "\"SSD\""},
    {.name = "ro", .type = API_T_BOOL, .def = "false"},
    {.name = "enabled", .type = API_T_BOOL, .def = "true"},
    {.name = "defer", .type = API_T_BOOL},
};

static void random_hex(char *out, size_t digits)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t raw[32];
    size_t need = (digits + 1) / 2;
    if (getrandom(raw, need, 0) != (ssize_t)need) {
        /* getrandom cannot fail for ≤256 bytes once the pool is ready;
         * fall back to something unique-ish rather than abort. */
        for (size_t i = 0; i < need; i++)
            raw[i] = (uint8_t)(rand() ^ (int)getpid());
    }
    for (size_t i = 0; i < digits; i++)
        out[i] = hex[(raw[i / 2] >> ((i & 1) ? 0 : 4)) & 0xf];
    out[digits] = '\0';
}

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

/* As TrueNAS (check_path_resides_within_volume), and stricter: a FILE
 * extent is a file or block device inside a pool, reached without any
 * symlink (datasets_file_check, store/poolfs.h), so the API cannot export
 * or grow arbitrary host files; and it is not a blockd volume or snapshot
 * file (those are DISK extents: a snapshot must stay read-only, a volume
 * must go through its shared open volume). The file may not exist yet
 * when may_create. 0 or -errno with the problem in why. */
static int file_path_problem(const char *path, bool may_create, char *why, size_t whylen)
{
    return datasets_file_check(path, may_create, why, whylen);
}

/* The name: no double quote (it ends up in ctl.conf-like output and
 * quoted keys), unique among the other extents. */
static void extent_check_name(struct api_call *call, json_t *d, int64_t self_id)
{
    const char *name = json_string_value(json_object_get(d, "name"));
    char f[128];
    int64_t other;

    if (strchr(name, '"'))
        api_verr(call, icfg_field(call, "name", f, sizeof(f)), EINVAL,
                 "Double quotes are not allowed");
    else if (icfg_int(&other, "SELECT id FROM iscsi_extent WHERE name = ? AND id != ?", "ti", name,
                      self_id) == 0)
        api_verr(call, icfg_field(call, "name", f, sizeof(f)), EEXIST,
                 "Extent name must be unique");
}

/* A given serial: printable, without spaces or quotes (it is the unit
 * serial number VPD page's text), unique among the other extents. */
static void extent_check_serial(struct api_call *call, json_t *d, int64_t self_id)
{
    json_t *serial = json_object_get(d, "serial");
    const char *s;
    char f[128];
    int64_t other;
    bool ok = true;

    if (!json_is_string(serial) || json_string_length(serial) == 0)
        return;
    s = json_string_value(serial);
    for (const char *p = s; *p; p++)
        if (*p <= ' ' || *p > '~' || *p == '"')
            ok = false;
    if (!ok)
        api_verr(call, icfg_field(call, "serial", f, sizeof(f)), EINVAL,
                 "Serial may contain printable characters only, without spaces or quotes");
    else if (icfg_int(&other, "SELECT id FROM iscsi_extent WHERE serial = ? AND id != ?", "ti", s,
                      self_id) == 0)
        api_verr(call, icfg_field(call, "serial", f, sizeof(f)), EEXIST,
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
    int64_t dbsize;
    int err = strchr(ds, '@') ? 1
                              : icfg_int(&dbsize,
                                         "SELECT volsize FROM datasets WHERE name = ? AND "
                                         "type = 'VOLUME'",
                                         "t", ds);

    if (err == 0) {
        *vsize = (uint64_t)dbsize;
        return 0;
    }
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
static void extent_check_disk(struct api_call *call, json_t *d, json_t *old)
{
    const char *disk = json_string_value(json_object_get(d, "disk"));
    int64_t bs = json_integer_value(json_object_get(d, "blocksize"));
    bool ro = json_is_true(json_object_get(d, "ro"));
    const char *ds;
    char f[128], why[128];
    uint64_t vsize = 0;
    json_t *p;

    icfg_field(call, "disk", f, sizeof(f));
    if (!disk || !*disk) {
        api_verr(call, f, EINVAL, "This field is required for DISK extents");
        return;
    }
    ds = icfg_disk_dataset(disk);
    if (!ds) {
        api_verr(call, f, EINVAL, "Disk name must start with \"zvol/\"");
        return;
    }
    if (name_check_dataset(ds, true, why, sizeof(why)) < 0) {
        api_verr(call, f, EINVAL, "Invalid dataset name: %s", why);
        return;
    }
    if (strchr(ds, '@') && !ro) {
        api_verr(call, icfg_field(call, "ro", f, sizeof(f)), EINVAL,
                 "Must be set when disk is a ZFS Snapshot");
        return;
    }
    if (extent_disk_size(call, f, ds, &vsize) < 0)
        return;
    if (vsize % (uint64_t)bs != 0)
        api_verr(call, icfg_field(call, "blocksize", f, sizeof(f)), EINVAL,
                 "Volume size %llu is not a multiple of the block size %lld",
                 (unsigned long long)vsize, (long long)bs);
    p = json_object_get(d, "path");
    if (p && !json_is_null(p) && !old)
        api_verr(call, icfg_field(call, "path", f, sizeof(f)), EINVAL,
                 "path is for FILE extents only");
    json_object_set_new(d, "path", json_null());
    json_object_set_new(d, "filesize", json_integer(0));
}

/* A FILE extent's size against the file: an existing file is not a
 * directory, is grown only, in whole blocks; a missing one needs a
 * filesize to be created with; an update never shrinks the extent. */
static void extent_check_file_size(struct api_call *call, const char *path, int64_t size,
                                   int64_t bs, json_t *old)
{
    char f[128];
    struct stat sb;

    if (poolfs_stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            api_verr(call, icfg_field(call, "path", f, sizeof(f)), EISDIR,
                     "You need to specify a filepath not a directory.");
            return;
        }
        if (size == 0 && S_ISREG(sb.st_mode) && sb.st_size % bs != 0)
            api_verr(call, icfg_field(call, "filesize", f, sizeof(f)), EINVAL,
                     "File size %lld is not a multiple of the block size %lld",
                     (long long)sb.st_size, (long long)bs);
        if (size > 0 && S_ISREG(sb.st_mode) && size < sb.st_size)
            api_verr(call, icfg_field(call, "filesize", f, sizeof(f)), EINVAL,
                     "File size can only be increased");
    } else if (size == 0) {
        api_verr(call, icfg_field(call, "filesize", f, sizeof(f)), EINVAL,
                 "The file does not exist: give filesize to create it");
        return;
    }
    if (size % bs != 0)
        api_verr(call, icfg_field(call, "filesize", f, sizeof(f)), EINVAL,
                 "File size must be a multiple of block size");
    if (old && size > 0) {
        int64_t oldsize = json_integer_value(json_object_get(old, "filesize"));
        if (size < oldsize)
            api_verr(call, icfg_field(call, "filesize", f, sizeof(f)), EINVAL,
                     "Shrinking an extent is not allowed");
    }
}

/* A FILE extent: an absolute path inside a pool (file_path_problem; a
 * refusal is logged with the peer); disk is for DISK extents and is
 * cleared. */
static void extent_check_file(struct api_call *call, json_t *d, int64_t size, json_t *old)
{
    const char *path = json_string_value(json_object_get(d, "path"));
    int64_t bs = json_integer_value(json_object_get(d, "blocksize"));
    char f[128], problem[PATH_MAX + 256];
    json_t *dk;
    int perr;

    icfg_field(call, "path", f, sizeof(f));
    if (!path || !*path) {
        api_verr(call, f, EINVAL, "This field is required for FILE extents");
        return;
    }
    if (path[0] != '/' || strstr(path, "/../") || strlen(path) >= 4096) {
        api_verr(call, f, EINVAL, "Path must be absolute and without '..'");
        return;
    }
    /* a missing file is reported below (filesize) */
    perr = file_path_problem(path, true, problem, sizeof(problem));
    if (perr < 0) {
        api_verr(call, f, perr == -EISDIR ? EISDIR : EINVAL, "%s", problem);
        log_warn("iscsi config: %s refused path %s (peer %s): %s", api_call_method(call), path,
                 api_call_peer(call), problem);
        return;
    }
    dk = json_object_get(d, "disk");
    if (dk && !json_is_null(dk) && !old)
        api_verr(call, icfg_field(call, "disk", f, sizeof(f)), EINVAL,
                 "disk is for DISK extents only");
    json_object_set_new(d, "disk", json_null());
    extent_check_file_size(call, path, size, bs, old);
}

/* Checks of the complete (defaults applied or merged) object. old is the
 * previous row on update (NULL on create). Normalizes filesize (and
 * clears the other type's field). Field errors are collected on call. */
static void extent_check(struct api_call *call, json_t *d, int64_t self_id, json_t *old)
{
    char f[128];
    int64_t size;

    extent_check_name(call, d, self_id);
    extent_check_serial(call, d, self_id);
    if (filesize_value(json_object_get(d, "filesize"), &size) < 0) {
        api_verr(call, icfg_field(call, "filesize", f, sizeof(f)), EINVAL,
                 "Input should be a non-negative integer (bytes)");
        return;
    }
    json_object_set_new(d, "filesize", json_integer(size));
    if (strcmp(json_string_value(json_object_get(d, "type")), "DISK") == 0)
        extent_check_disk(call, d, old);
    else
        extent_check_file(call, d, size, old);
}

/* Create the FILE extent's file if missing (sparse), or grow it. */
static int extent_prepare_file(struct api_call *call, json_t *d)
{
    if (strcmp(json_string_value(json_object_get(d, "type")), "FILE") != 0)
        return 0;
    const char *path = json_string_value(json_object_get(d, "path"));
    int64_t size = json_integer_value(json_object_get(d, "filesize"));
    struct stat sb;
    int err = poolfs_stat(path, &sb);
    if (err == -ENOENT) {
        err = bdev_file_create_in_pool(path, (uint64_t)size, false);
        if (err < 0)
            return api_error(call, -err, "Cannot create %s: %s", path, strerror(-err));
        log_info("iscsi config: created sparse file %s (%lld bytes)", path, (long long)size);
    } else if (err < 0) {
        return api_error(call, -err, "Cannot use %s: %s", path, strerror(-err));
    } else if (S_ISREG(sb.st_mode) && size > sb.st_size) {
        err = poolfs_truncate(path, (uint64_t)size);
        if (err < 0)
            return api_error(call, -err, "Cannot grow %s: %s", path, strerror(-err));
    }
    return 0;
}

static int extent_store(struct api_call *call, json_t *d, int64_t id, int64_t bump, int64_t *out_id)
{
    json_t *serial = json_object_get(d, "serial");
    char serialbuf[24];
    if (!json_is_string(serial) || json_string_length(serial) == 0) {
        int64_t dup;
        do
            random_hex(serialbuf, 15);
        while (icfg_int(&dup, "SELECT id FROM iscsi_extent WHERE serial = ?", "t", serialbuf) == 0);
        json_object_set_new(d, "serial", json_string(serialbuf));
    }
    json_t *th = json_object_get(d, "avail_threshold");
    int err;
#define EXTENT_VALUES                                                                              \
    json_string_value(json_object_get(d, "name")), json_string_value(json_object_get(d, "type")),  \
        json_string_value(json_object_get(d, "disk")),                                             \
        json_string_value(json_object_get(d, "path")),                                             \
        (int64_t)json_integer_value(json_object_get(d, "filesize")),                               \
        json_string_value(json_object_get(d, "serial")),                                           \
        (int64_t)json_integer_value(json_object_get(d, "blocksize")),                              \
        (int)json_is_true(json_object_get(d, "pblocksize")),                                       \
        (int64_t)(json_is_integer(th) ? json_integer_value(th) : 0),                               \
        json_string_value(json_object_get(d, "comment")),                                          \
        (int)json_is_true(json_object_get(d, "insecure_tpc")),                                     \
        (int)json_is_true(json_object_get(d, "xen")),                                              \
        json_string_value(json_object_get(d, "rpm")), (int)json_is_true(json_object_get(d, "ro")), \
        (int)json_is_true(json_object_get(d, "enabled"))
    if (id == 0) {
        char naa[40];
        int64_t dup;
        do {
            memcpy(naa, "0x6589cfc000000", 15);
            random_hex(naa + 15, 19);
        } while (icfg_int(&dup, "SELECT id FROM iscsi_extent WHERE naa = ?", "t", naa) == 0);
        err = icfg_run(json_is_integer(th)
                           ? "INSERT INTO iscsi_extent (name, type, disk, path, filesize, serial, "
                             "blocksize, pblocksize, avail_threshold, comment, insecure_tpc, xen, "
                             "rpm, ro, enabled, naa) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                             "?, ?, ?, ?)"
                           : "INSERT INTO iscsi_extent (name, type, disk, path, filesize, serial, "
                             "blocksize, pblocksize, avail_threshold, comment, insecure_tpc, xen, "
                             "rpm, ro, enabled, naa) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, "
                             "0), ?, ?, ?, ?, ?, ?, ?)",
                       "ttttitibitbbtbbt", EXTENT_VALUES, naa);
        *out_id = sqlite3_last_insert_rowid(db_handle());
    } else {
        err = icfg_run(json_is_integer(th)
                           ? "UPDATE iscsi_extent SET name = ?, type = ?, disk = ?, path = ?, "
                             "filesize = ?, serial = ?, blocksize = ?, pblocksize = ?, "
                             "avail_threshold = ?, comment = ?, insecure_tpc = ?, xen = ?, rpm = "
                             "?, ro = ?, enabled = ?, gen = gen + ? WHERE id = ?"
                           : "UPDATE iscsi_extent SET name = ?, type = ?, disk = ?, path = ?, "
                             "filesize = ?, serial = ?, blocksize = ?, pblocksize = ?, "
                             "avail_threshold = NULLIF(?, 0), comment = ?, insecure_tpc = ?, xen "
                             "= ?, rpm = ?, ro = ?, enabled = ?, gen = gen + ? WHERE id = ?",
                       "ttttitibitbbtbbii", EXTENT_VALUES, bump, id);
        *out_id = id;
    }
#undef EXTENT_VALUES
    return err < 0 ? icfg_db_fail(call, err) : 0;
}

#define TARGET_OF_EXTENT "SELECT target_id FROM iscsi_targetextent WHERE extent_id = ?"

static int extent_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    json_t *data;
    if (icfg_create_begin(&w, call, params, extent_fields, ARRAY_SIZE(extent_fields), &data) < 0)
        return -1;
    int rc = 0;
    extent_check(call, data, 0, NULL);
    int64_t id = 0;
    if (api_has_verrs(call))
        rc = api_invalid(call);
    else
        rc = extent_prepare_file(call, data);
    if (rc == 0)
        rc = extent_store(call, data, 0, 0, &id);
    if (rc == 0) {
        cfg_tx_changed(&w.tx, CFG_ISCSI_EXTENT, id, CFG_CREATED);
        *result = icfg_get_by_id(extent_row, EXTENT_BY_ID, id);
    }
    /* Not mapped yet: nothing to publish (as TrueNAS: no reload on create). */
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int extent_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    json_t *data;
    if (icfg_update_begin(&w, call, params, extent_fields, ARRAY_SIZE(extent_fields), &id, &data) <
        0)
        return -1;
    int rc = 0;
    json_t *old = icfg_get_by_id(icfg_extent_row_internal, EXTENT_BY_ID, id);
    json_t *merged = old ? json_deep_copy(old) : NULL;
    if (!old) {
        rc = api_error(call, ENOENT, "Extent %lld does not exist", (long long)id);
    } else {
        json_object_update(merged, data);
        extent_check(call, merged, id, old);
        if (api_has_verrs(call))
            rc = api_invalid(call);
        else
            rc = extent_prepare_file(call, merged);
        /* Fields the LU is built from need a new LU (sessions see it as a
         * new device); ro and FILE growth apply to the running LU, so
         * sessions keep their state (unless deferred: then at reload). */
        static const char *const lu_fields[] = {"type",      "disk",       "path", "serial",
                                                "blocksize", "pblocksize", "rpm",  "insecure_tpc",
                                                "vendor",    "naa"};
        bool rebuild = w.defer;
        for (size_t i = 0; i < ARRAY_SIZE(lu_fields); i++)
            if (!json_equal(json_object_get(old, lu_fields[i]),
                            json_object_get(merged, lu_fields[i])))
                rebuild = true;
        /* a FILE extent's file was opened read-only for ro */
        if (strcmp(json_string_value(json_object_get(merged, "type")), "FILE") == 0 &&
            !json_equal(json_object_get(old, "ro"), json_object_get(merged, "ro")))
            rebuild = true;
        int64_t out;
        if (rc == 0)
            rc = extent_store(call, merged, id, rebuild ? 1 : 0, &out);
        if (rc == 0) {
            icfg_changed_targets(&w, TARGET_OF_EXTENT, id);
            /* The publisher drops the LU of a rebuilt extent (its gen
             * moved) and applies ro and size to the running one. */
            cfg_tx_changed(&w.tx, CFG_ISCSI_EXTENT, id, CFG_UPDATED);
            *result = icfg_get_by_id(extent_row, EXTENT_BY_ID, id);
        }
    }
    json_decref(merged);
    json_decref(old);
    json_decref(data);
    return icfg_write_end(&w, rc);
}

int icfg_extent_delete_row(struct icfg_write *w, int64_t extent_id, bool remove, bool force)
{
    json_t *row = icfg_get_by_id(icfg_extent_row_internal, EXTENT_BY_ID, extent_id);
    if (!row)
        return api_error(w->call, ENOENT, "Extent %lld does not exist", (long long)extent_id);
    int64_t target;
    int rc = 0;
    if (icfg_int(&target, TARGET_OF_EXTENT, "i", extent_id) == 0)
        rc = icfg_target_check_sessions(w, target, force);
    if (rc == 0)
        rc = icfg_targetextent_delete_where(w, "extent_id = ?", extent_id);
    if (rc == 0) {
        int err = icfg_run("DELETE FROM iscsi_extent WHERE id = ?", "i", extent_id);
        if (err < 0)
            rc = icfg_db_fail(w->call, err);
    }
    if (rc == 0) {
        cfg_tx_changed(&w->tx, CFG_ISCSI_EXTENT, extent_id, CFG_DELETED);
        const char *path = json_string_value(json_object_get(row, "path"));
        /* The file goes once the deletion is committed (icfg_write_end). */
        if (remove && path &&
            strcmp(json_string_value(json_object_get(row, "type")), "FILE") == 0) {
            if (!w->unlink_after)
                w->unlink_after = json_array();
            json_array_append_new(w->unlink_after, json_string(path));
        }
    }
    json_decref(row);
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

static int extent_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"},         {"name", "name"},
                                             {"disk", "disk"},     {"path", "path"},
                                             {"serial", "serial"}, {"naa", "naa"}};
    return icfg_query_hinted(call, params, result, extent_row, ICFG_EXTENT_SELECT, hints,
                             ARRAY_SIZE(hints));
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
    json_t *r = json_object();
    sqlite3_stmt *st;
    db_lock();
    if (r && icfg_prepare("SELECT name, volsize FROM datasets WHERE type = 'VOLUME' AND 'zvol/' "
                          "|| name NOT IN (SELECT disk FROM iscsi_extent WHERE disk IS NOT NULL) "
                          "ORDER BY name",
                          &st) == 0) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            char key[600], label[700], size[32];
            format_size((uint64_t)sqlite3_column_int64(st, 1), size, sizeof(size));
            snprintf(key, sizeof(key), "zvol/%s", icfg_col_text(st, 0));
            snprintf(label, sizeof(label), "%s (%s)", icfg_col_text(st, 0), size);
            json_object_set_new(r, key, json_string(label));
        }
        icfg_finalize(st);
    }
    db_unlock();
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
     0, API_ARGS(create_args)},
    {"iscsi.extent.update", NULL, "Change an extent (live for mapped LUNs)", extent_update, 0,
     API_ARGS(update_args)},
    {"iscsi.extent.delete", NULL,
     "Delete an extent and its mapping (remove: unlink a FILE extent's file)", extent_delete, 0,
     API_ARGS(delete_args)},
    {"iscsi.extent.query", NULL, "List extents", extent_query, 0, API_ARGS(icfg_query_args)},
    {"iscsi.extent.disk_choices", NULL, "Volumes not used by an extent yet (zvol/<pool>/<volume>)",
     extent_disk_choices, 0, API_ARGS(disk_choices_args)},
    {"iscsi.extent.get_instance", NULL, "One extent by id", extent_query_instance, 0,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_extent_methods_count = ARRAY_SIZE(icfg_extent_methods);
