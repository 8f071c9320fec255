/*
 * share.iscsi.create / delete / query (see iscsi_share.h).
 *
 * create runs the ordinary iscsi.* methods (so every validation and id
 * allocation is theirs) inside one outer transaction (config/cfgtx.h):
 * their own transactions join it as savepoints and their changes are
 * published only when it commits (or deferred, when the caller deferred).
 * A failure rolls everything back: no portal, group, target or extent is
 * left behind, and nothing was published.
 */
#include "iscsi/iscsi_share.h"

#include <ctype.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/validate.h"
#include "config/db.h"
#include "core/log.h"
#include "core/util.h"
#include "config/iscsi/config_internal.h"

int iscsi_share_target_name(const char *prefix, const char *dataset, char *out, size_t len)
{
    size_t pl = prefix ? strlen(prefix) : 0;
    if (pl > ISCSI_SHARE_PREFIX_MAX)
        return -EINVAL;
    for (size_t i = 0; i < pl; i++) {
        char ch = prefix[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.'))
            return -EINVAL;
    }
    if (len < ISCSI_SHARE_NAME_MAX + 1 || !dataset || !*dataset)
        return -EINVAL;
    char buf[1024];
    size_t n = 0;
    if (pl) {
        memcpy(buf, prefix, pl);
        buf[pl] = ':';
        n = pl + 1;
    }
    for (const char *p = dataset; *p && n < sizeof(buf) - 1; p++) {
        char ch = (char)tolower((unsigned char)*p);
        if (ch == ':' || ch == '.' || ch == '_')
            ch = '-';
        else if (ch == '/' || ch == '@')
            ch = ':';
        buf[n++] = ch;
    }
    buf[n] = 0;
    if (n <= ISCSI_SHARE_NAME_MAX && strlen(dataset) < sizeof(buf) - pl - 2) {
        snprintf(out, len, "%s", buf);
        return 0;
    }
    unsigned char d[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, dataset, strlen(dataset), d) < 0)
        return -EIO;
    static const char b32[] = "abcdefghijklmnopqrstuvwxyz234567";
    char h[33];
    /* 32 base32 characters = the first 20 bytes (160 bits) of the digest */
    for (size_t i = 0, bit = 0; i < 32; i++, bit += 5) {
        size_t byte = bit / 8, off = bit % 8;
        unsigned v = ((unsigned)d[byte] << 8 | d[byte + 1]) >> (11 - off);
        h[i] = b32[v & 31];
    }
    h[32] = 0;
    snprintf(out, len, "%s%s-:%s", pl ? prefix : "", pl ? ":" : "", h);
    return 0;
}

/* Copy a nested call's error object onto call; returns -1. */
static int forward_error(struct api_call *call, json_t *err)
{
    json_t *data = json_object_get(err, "data");
    json_t *extra = json_object_get(data, "extra");
    if (json_integer_value(json_object_get(err, "code")) == API_INVALID_PARAMS &&
        json_is_array(extra) && json_array_size(extra) > 0) {
        size_t i;
        json_t *e;
        json_array_foreach(extra, i, e)
        {
            api_verr(call, json_string_value(json_array_get(e, 0)),
                     (int)json_integer_value(json_array_get(e, 2)), "%s",
                     json_string_value(json_array_get(e, 1)));
        }
        return api_invalid(call);
    }
    int errnum = (int)json_integer_value(json_object_get(data, "errno"));
    return api_error(call, errnum ? errnum : EFAULT, "%s",
                     json_string_value(json_object_get(err, "message")));
}

/* Run method with params (stolen); *id from the result's "id". 0 or -1. */
static int nested_create(struct api_call *call, const char *method, json_t *params, int64_t *id)
{
    json_t *res = NULL, *err = NULL;
    int rc = api_call_method_json(call, method, params, &res, &err);
    json_decref(params);
    if (rc < 0) {
        forward_error(call, err);
        json_decref(err);
        return -1;
    }
    *id = json_integer_value(json_object_get(res, "id"));
    json_decref(res);
    return 0;
}

static const struct api_field create_fields[] = {
    {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 255},
    {.name = "target_prefix",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = ISCSI_SHARE_PREFIX_MAX},
    {.name = "portal", .type = API_T_INT, .flags = API_NULLABLE},
    {.name = "initiator", .type = API_T_INT, .flags = API_NULLABLE},
    {.name = "readonly", .type = API_T_BOOL},
    {.name = "defer", .type = API_T_BOOL},
};

/* The share's target name from the validated body; -1 with a verr. */
static int share_name(struct api_call *call, json_t *data, char *tname, size_t len)
{
    const char *ds = json_string_value(json_object_get(data, "name"));
    const char *prefix = json_string_value(json_object_get(data, "target_prefix"));
    if (iscsi_share_target_name(prefix, ds, tname, len) < 0) {
        char f[96];
        snprintf(f, sizeof(f), "%s.target_prefix", api_call_method(call));
        api_verr(call, f, EINVAL, "must be up to %d characters of a-z 0-9 . -",
                 ISCSI_SHARE_PREFIX_MAX);
        return api_invalid(call);
    }
    return 0;
}

/* An id column lookup: 0 with *id, -ENOENT, or -errno. */
static int lookup(int64_t *id, const char *sql, const char *types, const char *s, int64_t i)
{
    if (types[0] == 't')
        return icfg_int(id, sql, "t", s);
    return icfg_int(id, sql, "i", i);
}

/* The portal and initiator group of a new share (created if need be). */
static int share_groups(struct api_call *call, json_t *data, int64_t *portal, int64_t *initiator)
{
    json_t *jp = json_object_get(data, "portal");
    json_t *ji = json_object_get(data, "initiator");
    int64_t id;
    if (json_is_integer(jp)) {
        if (lookup(&id, "SELECT id FROM iscsi_portal WHERE id = ?", "i", NULL,
                   json_integer_value(jp)) < 0) {
            api_verr(call, "share.iscsi.create.portal", ENOENT,
                     "Portal %" JSON_INTEGER_FORMAT " does not exist", json_integer_value(jp));
            return api_invalid(call);
        }
        *portal = id;
    } else if (icfg_int(&id, "SELECT MIN(id) FROM iscsi_portal", "") == 0) {
        *portal = id;
    } else if (nested_create(call, "iscsi.portal.create",
                             json_pack("[{s:[{s:s}], s:s}]", "listen", "ip", "0.0.0.0", "comment",
                                       "blockd default portal"),
                             portal) < 0) {
        return -1;
    }
    if (json_is_integer(ji)) {
        if (lookup(&id, "SELECT id FROM iscsi_initiator WHERE id = ?", "i", NULL,
                   json_integer_value(ji)) < 0) {
            api_verr(call, "share.iscsi.create.initiator", ENOENT,
                     "Initiator group %" JSON_INTEGER_FORMAT " does not exist",
                     json_integer_value(ji));
            return api_invalid(call);
        }
        *initiator = id;
    } else if (icfg_int(&id, "SELECT MIN(id) FROM iscsi_initiator WHERE initiators = '[]'", "") ==
               0) {
        *initiator = id; /* an allow-all group exists */
    } else if (nested_create(
                   call, "iscsi.initiator.create",
                   json_pack("[{s:[], s:s}]", "initiators", "comment", "blockd: allow all"),
                   initiator) < 0) {
        return -1;
    }
    return 0;
}

/* The target, extent and LUN mapping of a share, each created if missing
 * (*created then), inside the caller's transaction. 0 or -1 (error set). */
static int share_objects(struct api_call *call, const char *ds, const char *tname, const char *disk,
                         bool ro, int64_t portal, int64_t initiator, int64_t *target,
                         int64_t *extent, int64_t *te, bool *created)
{
    int rc = 0;
    if (lookup(target, "SELECT id FROM iscsi_target WHERE name = ?", "t", tname, 0) < 0) {
        *created = true;
        rc = nested_create(call, "iscsi.target.create",
                           json_pack("[{s:s, s:s, s:[{s:I, s:I}], s:b}]", "name", tname, "alias",
                                     ds, "groups", "portal", (json_int_t)portal, "initiator",
                                     (json_int_t)initiator, "defer", 1),
                           target);
    }
    if (rc == 0 && lookup(extent, "SELECT id FROM iscsi_extent WHERE disk = ?", "t", disk, 0) < 0) {
        *created = true;
        rc = nested_create(call, "iscsi.extent.create",
                           json_pack("[{s:s, s:s, s:s, s:b, s:b}]", "name", tname, "type", "DISK",
                                     "disk", disk, "ro", ro, "defer", 1),
                           extent);
    }
    if (rc == 0 && icfg_int(te,
                            "SELECT id FROM iscsi_targetextent WHERE target_id = ? AND "
                            "extent_id = ?",
                            "ii", *target, *extent) < 0) {
        *created = true;
        rc = nested_create(call, "iscsi.targetextent.create",
                           json_pack("[{s:I, s:I, s:i, s:b}]", "target", (json_int_t)*target,
                                     "extent", (json_int_t)*extent, "lunid", 0, "defer", 1),
                           te);
    }
    return rc;
}

/* Commit the share's transaction: its target (and whatever the nested
 * calls changed) is published, or deferred with the caller's defer.
 * 0 or -1 with the error set. */
static int share_commit(struct icfg_write *w, bool defer, const char *ds, int64_t target)
{
    if (target)
        icfg_changed_target(w, target);
    w->tx.defer = defer;
    if (cfg_tx_commit(&w->tx) == 0)
        return 0;
    if (!w->tx.committed)
        return api_error(w->call, EIO, "cannot commit the share of %s", ds);
    /* group commit: durable before the answer (config/db.h) */
    return api_error(w->call, EIO, "the share of %s was committed but could not be made durable",
                     ds);
}

/* Roll the share back: no portal, group, target or extent is left, and
 * nothing was published. */
static void share_abort(struct icfg_write *w)
{
    icfg_target_reset_hint(0);
    cfg_tx_abort(&w->tx);
}

static int share_create(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against create_fields by the dispatcher */
    char tname[ISCSI_SHARE_NAME_MAX + 1];
    if (share_name(call, data, tname, sizeof(tname)) < 0)
        return -1;
    const char *ds = json_string_value(json_object_get(data, "name"));
    bool ro = json_is_true(json_object_get(data, "readonly")) || strchr(ds, '@');
    bool defer = json_is_true(json_object_get(data, "defer"));
    char disk[300];
    if (snprintf(disk, sizeof(disk), "zvol/%s", ds) >= (int)sizeof(disk)) {
        api_verr(call, "share.iscsi.create.name", ENAMETOOLONG, "dataset name too long");
        return api_invalid(call);
    }

    /* One transaction: the nested iscsi.* calls join it (config/cfgtx.h),
     * and nothing is published before it commits. */
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int64_t portal = 0, initiator = 0, target = 0, extent = 0, te = 0;
    bool created = false;
    int rc = share_groups(call, data, &portal, &initiator);
    if (rc == 0)
        rc = share_objects(call, ds, tname, disk, ro, portal, initiator, &target, &extent, &te,
                           &created);
    int64_t lun = 0;
    if (rc == 0)
        icfg_int(&lun, "SELECT lunid FROM iscsi_targetextent WHERE id = ?", "i", te);
    char *basename = rc == 0 ? icfg_global_basename() : NULL;
    if (rc == 0)
        rc = share_commit(&w, defer, ds, target);
    else
        share_abort(&w);
    if (rc < 0) {
        free(basename);
        return -1;
    }
    char iqn[512];
    snprintf(iqn, sizeof(iqn), "%s:%s", basename ? basename : ICFG_DEFAULT_BASENAME, tname);
    free(basename);
    log_info("iscsi share: %s: %s %s as %s (target %" PRId64 ", extent %" PRId64 ")",
             api_call_peer(call), created ? "shared" : "already shared", ds, iqn, target, extent);
    *result = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b}", "dataset", ds,
                        "target_name", tname, "iqn", iqn, "target", (json_int_t)target, "extent",
                        (json_int_t)extent, "targetextent", (json_int_t)te, "lunid",
                        (json_int_t)lun, "portal", (json_int_t)portal, "initiator",
                        (json_int_t)initiator, "created", created, "readonly", ro);
    return 0;
}

static const struct api_field delete_fields[] = {
    {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 255},
    {.name = "target_prefix",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = ISCSI_SHARE_PREFIX_MAX},
    {.name = "force", .type = API_T_BOOL},
    {.name = "defer", .type = API_T_BOOL},
};

static int share_delete(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against delete_fields by the dispatcher */
    char tname[ISCSI_SHARE_NAME_MAX + 1];
    if (share_name(call, data, tname, sizeof(tname)) < 0)
        return -1;
    const char *ds = json_string_value(json_object_get(data, "name"));
    bool force = json_is_true(json_object_get(data, "force"));
    bool defer = json_is_true(json_object_get(data, "defer"));
    int64_t target;
    db_lock();
    int rc = lookup(&target, "SELECT id FROM iscsi_target WHERE name = ?", "t", tname, 0);
    db_unlock();
    if (rc < 0)
        return api_error(call, ENOENT, "%s is not shared over iSCSI (no target %s)", ds, tname);
    /* iscsi.target.delete is one transaction already: mappings, extents
     * (delete_extents) and the target, with the in-use rule. */
    json_t *res = NULL, *err = NULL;
    json_t *p = json_pack("[I, b, b, b]", (json_int_t)target, force, 1, defer);
    rc = api_call_method_json(call, "iscsi.target.delete", p, &res, &err);
    json_decref(p);
    if (rc < 0) {
        forward_error(call, err);
        json_decref(err);
        return -1;
    }
    json_decref(res);
    log_info("iscsi share: %s: unshared %s (target %s)", api_call_peer(call), ds, tname);
    *result = json_true();
    return 0;
}

/* Every target with its LUNs' datasets: [{dataset, target_name, iqn, lunid, readonly, ...}]. */
static json_t *share_rows(void)
{
    json_t *rows = json_array();
    char *basename = icfg_global_basename();
    sqlite3_stmt *st = NULL;
    if (icfg_prepare("SELECT t.id, t.name, t.alias, e.id, e.disk, e.path, e.ro, e.enabled, "
                     "te.lunid FROM iscsi_target t "
                     "LEFT JOIN iscsi_targetextent te ON te.target_id = t.id "
                     "LEFT JOIN iscsi_extent e ON e.id = te.extent_id ORDER BY t.name, te.lunid",
                     &st) == 0) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *disk = (const char *)sqlite3_column_text(st, 4);
            const char *path = (const char *)sqlite3_column_text(st, 5);
            const char *ds = disk ? icfg_disk_dataset(disk) : NULL;
            char iqn[512];
            snprintf(iqn, sizeof(iqn), "%s:%s", basename ? basename : ICFG_DEFAULT_BASENAME,
                     (const char *)sqlite3_column_text(st, 1));
            json_t *r = json_pack("{s:I, s:s, s:s, s:o, s:o, s:o}", "target",
                                  (json_int_t)sqlite3_column_int64(st, 0), "target_name",
                                  (const char *)sqlite3_column_text(st, 1), "iqn", iqn, "alias",
                                  sqlite3_column_type(st, 2) == SQLITE_NULL
                                      ? json_null()
                                      : json_string((const char *)sqlite3_column_text(st, 2)),
                                  "dataset", ds ? json_string(ds) : json_null(), "path",
                                  path ? json_string(path) : json_null());
            bool mapped = sqlite3_column_type(st, 3) != SQLITE_NULL;
            json_object_set_new(r, "extent",
                                mapped ? json_integer(sqlite3_column_int64(st, 3)) : json_null());
            json_object_set_new(r, "lunid",
                                mapped ? json_integer(sqlite3_column_int64(st, 8)) : json_null());
            json_object_set_new(r, "readonly", json_boolean(mapped && sqlite3_column_int(st, 6)));
            json_object_set_new(r, "enabled", json_boolean(!mapped || sqlite3_column_int(st, 7)));
            json_array_append_new(rows, r);
        }
        icfg_finalize(st);
    }
    free(basename);
    return rows;
}

static int share_query(struct api_call *call, json_t *params, json_t **result)
{
    db_lock();
    json_t *rows = share_rows();
    db_unlock();
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static const struct api_arg create_args[] = {API_ARG_OBJECT("data", create_fields, 0)};
static const struct api_arg delete_args[] = {API_ARG_OBJECT("data", delete_fields, 0)};
static const struct api_arg query_args[] = {API_ARG_QUERY};

static const struct api_method share_methods[] = {
    {"share.iscsi.create", NULL,
     "Share a volume (name: POOL/VOL) over iSCSI (target + extent + LUN 0, default portal and "
     "allow-all group if needed) in one transaction.",
     share_create, 0, API_ARGS(create_args)},
    {"share.iscsi.delete", NULL,
     "Remove a volume's iSCSI share (target, mapping and extent) in one transaction.", share_delete,
     0, API_ARGS(delete_args)},
    {"share.iscsi.query", NULL, "Targets with the datasets on their LUNs (one row per LUN).",
     share_query, 0, API_ARGS(query_args)},
};

void iscsi_share_init(void)
{
    api_register(share_methods, ARRAY_SIZE(share_methods));
}
