/*
 * share.iscsi.create / delete / query (see iscsi_share.h).
 *
 * create calls the typed writes of the iscsi.* objects (icfg_portal_save,
 * icfg_initiator_save, icfg_target_save, icfg_extent_save,
 * icfg_targetextent_save: every validation and id allocation is theirs,
 * with their error field names) directly, inside its one transaction
 * (control/cfgtx.h): nothing re-enters the JSON dispatcher, and the
 * changes are published only when it commits (or deferred, when the
 * caller deferred). A failure rolls everything back: no portal, group,
 * target or extent is left behind, and nothing was published. delete
 * runs iscsi.target.delete's C function (icfg_target_remove) the same way.
 */
#include "iscsi/config/iscsi_share.h"

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
#include "control/db.h"
#include "core/log.h"
#include "core/util.h"
#include "iscsi/config/config_crud.h"

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

/* Save a new object inside w with the rules (and error field names) of
 * its create method, as if that method had been called. */
#define SHARE_SAVE(w, name, save)                                                                  \
    ((w)->method = (name), share_saved((w), icfg_cap_check((w), (name)) < 0 ? -1 : (save)))

/* After a SHARE_SAVE: the share's own method names errors again. */
static int share_saved(struct icfg_write *w, int rc)
{
    w->method = api_call_method(w->call);
    return rc;
}

/* jv, the call's field share.iscsi.create.<key>, when it gives an id: 0
 * with *id when that exists, -1 (error set: "<what> N does not exist")
 * when it does not; 1 when no id is given. */
static int share_given(struct icfg_write *w, json_t *jv, int (*exists)(int64_t id), const char *key,
                       const char *what, int64_t *id)
{
    if (!json_is_integer(jv))
        return 1;
    *id = json_integer_value(jv);
    if (exists(*id) == 0)
        return 0;
    char f[64];
    snprintf(f, sizeof(f), "share.iscsi.create.%s", key);
    api_verr(w->call, f, ENOENT, "%s %" JSON_INTEGER_FORMAT " does not exist", what,
             json_integer_value(jv));
    return api_invalid(w->call);
}

/* The share's portal: the given one, else the first, else a new portal
 * listening on every IPv4 address. 0 or -1 (error set). */
static int share_portal(struct icfg_write *w, json_t *jp, int64_t *portal)
{
    struct icfg_portal p;
    int rc = share_given(w, jp, icfg_portal_exists, "portal", "Portal", portal);
    if (rc <= 0)
        return rc;
    if (icfg_portal_first(portal) == 0)
        return 0;
    rc = icfg_portal_init(&p);
    if (rc == 0)
        rc = api_strv_add(&p.listen, "0.0.0.0");
    if (rc == 0)
        rc = icfg_str_set(&p.comment, "blockd default portal");
    if (rc < 0)
        rc = api_error(w->call, ENOMEM, "out of memory");
    else
        rc = SHARE_SAVE(w, "iscsi.portal.create", icfg_portal_save(w, &p, true));
    *portal = p.id;
    icfg_portal_clear(&p);
    return rc;
}

/* The share's initiator group: the given one, else one that admits
 * everyone (created if need be). 0 or -1 (error set). */
static int share_initiator(struct icfg_write *w, json_t *ji, int64_t *initiator)
{
    struct icfg_initiator g;
    int rc = share_given(w, ji, icfg_initiator_exists, "initiator", "Initiator group", initiator);
    if (rc <= 0)
        return rc;
    if (icfg_initiator_find_allow_all(initiator) == 0)
        return 0;
    rc = icfg_initiator_init(&g);
    if (rc == 0)
        rc = icfg_str_set(&g.comment, "blockd: allow all");
    if (rc < 0)
        rc = api_error(w->call, ENOMEM, "out of memory");
    else
        rc = SHARE_SAVE(w, "iscsi.initiator.create", icfg_initiator_save(w, &g));
    *initiator = g.id;
    icfg_initiator_clear(&g);
    return rc;
}

/* What a share is made of (ids; created: one was made by this call). */
struct share {
    const char *ds, *tname, *disk;
    bool ro, created;
    int64_t portal, initiator, target, extent, te, lunid;
};

/* The share's target (named tname, alias the dataset, one group: its
 * portal and initiator group), created if missing. 0 or -1. */
static int share_target(struct icfg_write *w, struct share *sh)
{
    if (icfg_target_find_name(sh->tname, 0, &sh->target) == 0)
        return 0;
    struct icfg_target t;
    struct icfg_target_group g = {.portal = sh->portal,
                                  .has_initiator = true,
                                  .initiator = sh->initiator,
                                  .authmethod = ICFG_AUTH_NONE};
    sh->created = true;
    int rc = icfg_target_init(&t);
    if (rc == 0)
        rc = icfg_str_set(&t.name, sh->tname);
    if (rc == 0)
        rc = icfg_str_set(&t.alias, sh->ds);
    if (rc == 0)
        rc = icfg_target_set_groups(&t, &g, 1);
    if (rc < 0)
        rc = api_error(w->call, ENOMEM, "out of memory");
    else
        rc = SHARE_SAVE(w, "iscsi.target.create", icfg_target_save(w, &t));
    sh->target = t.id;
    icfg_target_clear(&t);
    return rc;
}

/* The share's DISK extent (named tname) and its LUN mapping (LUN 0),
 * each created if missing. 0 or -1. */
static int share_lun(struct icfg_write *w, struct share *sh)
{
    int rc = 0;
    if (icfg_extent_find_disk(sh->disk, &sh->extent) < 0) {
        struct icfg_extent e;
        sh->created = true;
        rc = icfg_extent_init(&e);
        if (rc == 0)
            rc = icfg_str_set(&e.name, sh->tname);
        if (rc == 0)
            rc = icfg_str_set(&e.disk, sh->disk);
        e.ro = sh->ro;
        rc = rc < 0 ? api_error(w->call, ENOMEM, "out of memory")
                    : SHARE_SAVE(w, "iscsi.extent.create", icfg_extent_save(w, &e, NULL));
        sh->extent = e.id;
        icfg_extent_clear(&e);
    }
    struct icfg_targetextent te = {0};
    if (rc == 0 && icfg_targetextent_find(sh->target, sh->extent, &te) < 0) {
        sh->created = true;
        icfg_targetextent_init(&te);
        te.target = sh->target;
        te.extent = sh->extent;
        te.has_lunid = true;
        te.lunid = 0;
        rc = SHARE_SAVE(w, "iscsi.targetextent.create", icfg_targetextent_save(w, &te));
    }
    if (rc == 0) {
        sh->te = te.id;
        sh->lunid = te.lunid;
    }
    return rc;
}

/* Commit the share's transaction: its target (and whatever else it
 * wrote) is published, or deferred with the caller's defer.
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
    /* group commit: durable before the answer (control/db.h) */
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

/* The share of sh->ds inside w: its portal and group, target, extent and
 * LUN, each created if missing, as the iscsi.*.create methods would
 * (their checks, their id allocation: the same C functions, called
 * directly in this one transaction). 0 or -1 (error set). */
static int share_build(struct icfg_write *w, json_t *data, struct share *sh)
{
    int rc = share_portal(w, json_object_get(data, "portal"), &sh->portal);
    if (rc == 0)
        rc = share_initiator(w, json_object_get(data, "initiator"), &sh->initiator);
    if (rc == 0)
        rc = share_target(w, sh);
    if (rc == 0)
        rc = share_lun(w, sh);
    return rc;
}

static int share_create(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against create_fields by the dispatcher */
    char tname[ISCSI_SHARE_NAME_MAX + 1], disk[300];
    if (share_name(call, data, tname, sizeof(tname)) < 0)
        return -1;
    struct share sh = {
        .ds = json_string_value(json_object_get(data, "name")), .tname = tname, .disk = disk};
    sh.ro = json_is_true(json_object_get(data, "readonly")) || strchr(sh.ds, '@');
    bool defer = json_is_true(json_object_get(data, "defer"));
    if (snprintf(disk, sizeof(disk), "zvol/%s", sh.ds) >= (int)sizeof(disk)) {
        api_verr(call, "share.iscsi.create.name", ENAMETOOLONG, "dataset name too long");
        return api_invalid(call);
    }
    /* One transaction: nothing is published before it commits. */
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = share_build(&w, data, &sh);
    char *basename = rc == 0 ? icfg_global_basename() : NULL;
    if (rc == 0)
        rc = share_commit(&w, defer, sh.ds, sh.target);
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
             api_call_peer(call), sh.created ? "shared" : "already shared", sh.ds, iqn, sh.target,
             sh.extent);
    *result = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b}", "dataset", sh.ds,
                        "target_name", tname, "iqn", iqn, "target", (json_int_t)sh.target, "extent",
                        (json_int_t)sh.extent, "targetextent", (json_int_t)sh.te, "lunid",
                        (json_int_t)sh.lunid, "portal", (json_int_t)sh.portal, "initiator",
                        (json_int_t)sh.initiator, "created", sh.created, "readonly", sh.ro);
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
    /* One transaction: the mappings, the extents and the target, with
     * iscsi.target.delete's in-use rule (the same C function). */
    int64_t target;
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    w.defer = defer;
    int rc = icfg_target_find_name(tname, 0, &target);
    if (rc < 0)
        rc = api_error(call, ENOENT, "%s is not shared over iSCSI (no target %s)", ds, tname);
    else
        rc = icfg_target_remove(&w, target, force, true);
    if (icfg_write_end(&w, rc) < 0)
        return -1;
    log_info("iscsi share: %s: unshared %s (target %s)", api_call_peer(call), ds, tname);
    *result = json_true();
    return 0;
}

/* share.iscsi.query's row of one LUN (or of a target without any). */
static json_t *share_encode(const struct icfg_lun_share *r, const char *basename)
{
    const char *ds = r->disk ? icfg_disk_dataset(r->disk) : NULL;
    char iqn[512];
    snprintf(iqn, sizeof(iqn), "%s:%s", basename ? basename : ICFG_DEFAULT_BASENAME,
             r->target_name);
    json_t *row = json_pack(
        "{s:I, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:b, s:b}", "target", (json_int_t)r->target,
        "target_name", r->target_name, "iqn", iqn, "alias", icfg_str_or_null(r->alias), "dataset",
        icfg_str_or_null(ds), "path", icfg_str_or_null(r->path), "extent",
        icfg_int_or_null(r->mapped, r->extent), "lunid", icfg_int_or_null(r->mapped, r->lunid),
        "readonly", r->ro, "enabled", r->enabled);
    return row;
}

/* Every target with its LUNs' datasets: [{dataset, target_name, iqn, lunid, readonly, ...}]. */
static json_t *share_rows(void)
{
    json_t *rows = json_array();
    struct icfg_lun_share *v = NULL;
    size_t n = 0;
    char *basename = icfg_global_basename();
    if (icfg_lun_shares(&v, &n) < 0)
        n = 0;
    for (size_t i = 0; rows && i < n; i++)
        json_array_append_new(rows, share_encode(&v[i], basename));
    icfg_lun_shares_free(v, n);
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
     share_create, API_SHARE, API_ARGS(create_args)},
    {"share.iscsi.delete", NULL,
     "Remove a volume's iSCSI share (target, mapping and extent) in one transaction.", share_delete,
     API_SHARE, API_ARGS(delete_args)},
    {"share.iscsi.query", NULL, "Targets with the datasets on their LUNs (one row per LUN).",
     share_query, API_READ, API_ARGS(query_args)},
};

void iscsi_share_init(void)
{
    api_register(share_methods, ARRAY_SIZE(share_methods));
}
