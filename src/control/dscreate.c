/*
 * pool.dataset.create (ds_internal.h): decode the request once into a
 * struct create_req, check it, then one transaction writes the rows and
 * makes the storage, so a failure on either side leaves neither behind.
 * Also ds_check_new_name, which zfs.snapshot.clone shares.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/fields.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsprops.h"
#include "control/dsrbd.h" /* ds_backend_why */
#include "control/holdings.h"
#include "core/log.h"
#include "core/util.h"

static const char *const type_values[] = {"VOLUME", "FILESYSTEM", NULL};
enum { TYPE_VOLUME, TYPE_FILESYSTEM };
static const char *const vbs_values[] = {"512", "512B", "1K",  "2K",   "4K", "8K",
                                         "16K", "32K",  "64K", "128K", NULL};
static const char *const backend_values[] = {"file", "memory", NULL};
enum { BACKEND_FILE, BACKEND_MEMORY };
/* Indexes in ds_choices_sync_inherit (the first three are enum
 * volume_sync's) and ds_choices_onoff_inherit. */
enum { SYNC_INHERIT = 3 };
enum { ONOFF_ON, ONOFF_OFF, ONOFF_INHERIT };

#define LATENCY_MAX_US 10000000

/* The fields only a VOLUME takes (create_check_fields). */
enum { VO_VOLSIZE, VO_VOLBLOCKSIZE, VO_SPARSE, VO_BACKEND, VO_LATENCY, VO_COUNT };
static const char *const vol_only_fields[VO_COUNT] = {[VO_VOLSIZE] = "volsize",
                                                      [VO_VOLBLOCKSIZE] = "volblocksize",
                                                      [VO_SPARSE] = "sparse",
                                                      [VO_BACKEND] = "backend",
                                                      [VO_LATENCY] = "latency_us"};

/* A pool.dataset.create request, decoded once by create_fields
 * (create_decode): the steps after it take only this, never the
 * request's JSON. */
struct create_req {
    struct ds_row row;       /* the new row, TrueNAS' defaults filled in */
    int type;                /* TYPE_* */
    int sync;                /* index in ds_choices_sync_inherit */
    int readonly;            /* ONOFF_* */
    int backend;             /* BACKEND_* */
    bool vol_only[VO_COUNT]; /* which of vol_only_fields were given */
    bool sync_inherit;       /* sync not given or "INHERIT": the parent's */
    bool readonly_inherit;   /* the same for readonly */
    char volblocksize[8];    /* as given ("16K" if not), for errors and the log */
    bool adopt;              /* adopt the existing image (RBD, docs/ha.md) */
    struct ds_managedby managedby;
    struct ds_user_props user_props;
    struct ds_propset props; /* the ZFS properties, share_type presets applied */
};

static const struct api_field user_prop_fields[] = {
    API_FIELD_STRING("key", API_REQUIRED, 3, DS_USER_PROP_KEY_MAX),
    API_FIELD_STRING("value", API_REQUIRED, 0, DS_USER_PROP_VALUE_MAX),
};
static const struct api_field user_prop_item = {
    .type = API_T_OBJECT, .fields = user_prop_fields, .nfields = ARRAY_SIZE(user_prop_fields)};

#define AT(member, codec) API_AT(struct create_req, member, codec)
/* One table validates and decodes the request, TrueNAS' defaults stated
 * once (.def). The ZFS properties have no codec here: dsprops' table
 * decodes them (ds_propset_decode), sync and readonly included. */
static const struct api_field create_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     AT(row.name, api_codec_chars)},
    {.name = "type",
     .type = API_T_ENUM,
     .choices = type_values,
     .def = "\"FILESYSTEM\"",
     AT(type, api_codec_enum)},
    /* uint64_t, given as a positive int64 (the range) */
    {.name = "volsize",
     .type = API_T_INT,
     .flags = API_RANGE,
     .min = 1,
     .max = INT64_MAX,
     AT(row.volsize, api_codec_i64)},
    {.name = "volblocksize",
     .type = API_T_ENUM,
     .choices = vbs_values,
     .def = "\"16K\"",
     API_AT_CHARS(struct create_req, volblocksize)},
    {.name = "sparse", .type = API_T_BOOL, .def = "true", AT(row.sparse, api_codec_bool)},
    {.name = "sync",
     .type = API_T_ENUM,
     .choices = ds_choices_sync_inherit,
     .def = "\"STANDARD\"",
     AT(sync, api_codec_enum)},
    {.name = "readonly",
     .type = API_T_ENUM,
     .choices = ds_choices_onoff_inherit,
     .def = "\"OFF\"",
     AT(readonly, api_codec_enum)},
    {.name = "comments",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = DS_COMMENTS_MAX,
     AT(row.comments, api_codec_chars)},
    {.name = "create_ancestors", .type = API_T_BOOL},
    /* Only disables TrueNAS' "volsize over 80% of free space" check, which
     * blockd does not make (sparse files are the norm here). */
    {.name = "force_size", .type = API_T_BOOL},
    /* blockd extension (docs/ha.md): a VOLUME of an RBD pool whose image
     * already exists (made by another gateway of the group) is adopted. */
    {.name = "adopt", .type = API_T_BOOL, AT(adopt, api_codec_bool)},
    DS_MANAGEDBY_FIELD(struct create_req, managedby),
    DS_USER_PROPS_FIELD("user_properties", &user_prop_item, struct create_req, user_props),
    {.name = "backend",
     .type = API_T_ENUM,
     .choices = backend_values,
     .def = "\"file\"",
     AT(backend, api_codec_enum)},
    {.name = "latency_us",
     .type = API_T_INT,
     .flags = API_RANGE,
     .min = 0,
     .max = LATENCY_MAX_US,
     AT(row.latency_us, api_codec_u32)},
    DS_PROP_FIELDS_COMMON,
    DS_PROP_FIELDS_CREATE,
};
#undef AT

/* Field-level name checks shared by create and clone. field is the full
 * field name for errors. On success fills pool. */
int ds_check_new_name(struct api_call *call, const char *field, const char *name, size_t len,
                      struct ds_pool *pool)
{
    char why[256], poolname[DS_NAME_BUF], anc[DS_NAME_BUF];
    struct ds_row row;
    const char *p;
    int rc;

    if (strlen(name) != len) {
        api_verr(call, field, EINVAL, "name contains a NUL byte");
        return -EINVAL;
    }
    if (name_check_dataset(name, false, why, sizeof(why)) < 0) {
        api_verr(call, field, EINVAL, "%s", why);
        return -EINVAL;
    }
    if (!strchr(name, '/')) {
        api_verr(call, field, EINVAL, "must be POOL/NAME (a pool's root dataset exists already)");
        return -EINVAL;
    }
    ds_pool_of(name, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, pool);
    if (rc == -ENOENT) {
        api_verr(call, field, ENOENT, "pool %s does not exist", poolname);
        return rc;
    }
    if (rc < 0)
        return rc;
    rc = ds_dataset_get(name, &row);
    if (rc == 0) {
        api_verr(call, field, EEXIST, "dataset %s already exists", name);
        return -EEXIST;
    }
    if (rc != -ENOENT)
        return rc;
    /* ds_ops_lock and the DB lock are held: no other create can pass */
    rc = holdings_check(call, LIMIT_DATASETS, NULL, "SELECT COUNT(*) FROM datasets", "");
    if (rc < 0)
        return rc;
    for (p = strchr(name, '/'); p; p = strchr(p + 1, '/')) {
        snprintf(anc, sizeof(anc), "%.*s", (int)(p - name), name);
        if (ds_dataset_get(anc, &row) == 0 && row.type == DS_VOLUME) {
            api_verr(call, field, ENOTDIR, "parent %s is a volume and cannot have children", anc);
            return -ENOTDIR;
        }
    }
    return 0;
}

/* The request (checked against create_fields by the dispatcher) into
 * *req: the table's defaults, the keys given, then the choices into the
 * row. 0 or -ENOMEM; either way create_req_free may be called. */
static int create_decode(json_t *data, struct create_req *req)
{
    struct ds_row *row = &req->row;
    enum ds_prop_given sync, ro;
    int rc;

    memset(req, 0, sizeof(*req));
    rc = api_fields_defaults(create_fields, ARRAY_SIZE(create_fields), req);
    if (rc == 0)
        rc = api_fields_decode(create_fields, ARRAY_SIZE(create_fields), data, req);
    row->type = req->type == TYPE_VOLUME ? DS_VOLUME : DS_FILESYSTEM;
    if (row->type == DS_VOLUME)
        row->volblocksize = ds_volblocksize_parse(req->volblocksize);
    else
        row->volsize = 0;
    /* "INHERIT": the parent's, later (create_resolve) */
    row->sync = req->sync < SYNC_INHERIT ? (enum volume_sync)req->sync : VOLUME_SYNC_STANDARD;
    row->readonly = req->readonly == ONOFF_ON;
    /* TrueNAS' default for comments is "INHERIT": no comment of its own */
    if (strcmp(row->comments, "INHERIT") == 0)
        row->comments[0] = '\0';
    row->memory = req->backend == BACKEND_MEMORY;
    /* the presence of a volume's fields, for a filesystem's errors */
    for (size_t i = 0; i < VO_COUNT; i++)
        req->vol_only[i] = json_object_get(data, vol_only_fields[i]) != NULL;
    if (rc == 0)
        rc = ds_propset_decode(data, true, row->type, &req->props);
    sync = ds_propset_given(&req->props, "sync");
    ro = ds_propset_given(&req->props, "readonly");
    req->sync_inherit = sync == DS_PROP_ABSENT || sync == DS_PROP_INHERIT;
    req->readonly_inherit = ro == DS_PROP_ABSENT || ro == DS_PROP_INHERIT;
    return rc;
}

static void create_req_free(struct create_req *req)
{
    api_fields_clear(create_fields, ARRAY_SIZE(create_fields), req);
    ds_propset_free(&req->props);
}

/* The invariants between fields the table cannot express: a volume has a
 * size in whole blocks and memory-only options only with that backend; a
 * filesystem has none of a volume's fields. Errors are collected. */
static void create_check_fields(struct api_call *call, const struct create_req *req)
{
    const struct ds_row *row = &req->row;

    if (row->type != DS_VOLUME) {
        for (size_t i = 0; i < VO_COUNT; i++) {
            if (req->vol_only[i]) {
                char field[64];
                snprintf(field, sizeof(field), "pool.dataset.create.%s", vol_only_fields[i]);
                api_verr(call, field, EINVAL, "only valid for type VOLUME");
            }
        }
        return;
    }
    if (!req->vol_only[VO_VOLSIZE])
        api_verr(call, "pool.dataset.create.volsize", EINVAL,
                 "Field required (a VOLUME needs volsize in bytes)");
    else if (row->volsize % row->volblocksize)
        api_verr(call, "pool.dataset.create.volsize", EINVAL,
                 "must be a multiple of volblocksize (%s = %u bytes)", req->volblocksize,
                 row->volblocksize);
    if (!row->memory && req->vol_only[VO_LATENCY])
        api_verr(call, "pool.dataset.create.latency_us", EINVAL,
                 "only valid with backend \"memory\"");
    if (row->memory && !row->sparse)
        api_verr(call, "pool.dataset.create.sparse", EINVAL,
                 "a memory-backed volume is always sparse");
}

/* Locked: the checks that need the database (name free, pool there,
 * parent not a volume, the ZFS properties) and the values inherited from
 * the parent. 0 (field errors collected on call) or -errno. */
static int create_resolve(struct api_call *call, struct create_req *req, struct ds_pool *pool)
{
    struct ds_row *row = &req->row;
    enum volume_sync psync;
    bool pro;
    int rc =
        ds_check_new_name(call, "pool.dataset.create.name", row->name, strlen(row->name), pool);

    if (rc < 0)
        return rc;
    ds_props_check(call, "pool.dataset.create", &req->props, row->type, row->name, false);
    /* not given (or "INHERIT"): what the parent has */
    ds_props_parent_effective(row->name, &psync, &pro);
    if (req->sync_inherit)
        row->sync = psync;
    if (req->readonly_inherit)
        row->readonly = pro;
    return 0;
}

/* Inside the transaction: the missing ancestors, the row, managedby, the
 * user and ZFS properties. 0 or -errno. */
static int create_rows(struct cfg_tx *tx, struct create_req *req, struct ds_pool *pool)
{
    struct ds_row *row = &req->row;
    int rc = ds_create_ancestors(pool, row->name);

    if (rc == 0)
        rc = ds_dataset_insert(row);
    if (rc == 0)
        cfg_tx_changed(tx, CFG_DATASET, row->id, CFG_CREATED);
    if (rc == 0 && req->managedby.given && !req->managedby.inherit)
        rc = ds_prop_set(row->id, "managedby", req->managedby.value);
    if (rc == 0)
        rc = ds_apply_user_props(row->id, &req->user_props);
    if (rc == 0)
        rc = ds_props_apply(row->id, &req->props, row->type, false);
    return rc;
}

/* Inside the transaction, after the rows: the backend's storage, so a
 * failure on either side leaves neither behind. *created: there is
 * something to remove if the commit fails (never an adopted image: it is
 * not ours). 0 or -errno. */
static int create_storage(struct api_call *call, const struct create_req *req, struct ds_pool *pool,
                          bool *created)
{
    const struct ds_backend *be = ds_backend_of(pool);
    const struct ds_row *row = &req->row;
    char why[256] = "";
    struct volume *mv;
    int rc;

    *created = false;
    if (row->type != DS_VOLUME) {
        rc = be->filesystem_create(pool, row->name);
        if (rc < 0)
            log_error("datasets: create filesystem %s: %s (peer %s)", row->name, strerror(-rc),
                      api_call_peer(call));
    } else if (!row->memory && req->adopt) {
        rc = be->volume_adopt ? be->volume_adopt(pool, row->name, row->volsize, why, sizeof(why))
                              : -ENOTSUP;
        if (rc == -ENOTSUP && !be->volume_adopt)
            snprintf(ds_backend_why, sizeof(ds_backend_why),
                     "adopt: only RBD pools hold volumes to adopt");
        if (rc < 0)
            log_error("datasets: adopt volume %s in %s pool %s: %s (peer %s)", row->name, be->name,
                      pool->name, why[0] ? why : strerror(-rc), api_call_peer(call));
        return rc;
    } else if (!row->memory) {
        rc = be->volume_create(pool, row->name, row->volsize, row->sparse, why, sizeof(why));
        if (rc < 0)
            log_error("datasets: create volume %s in %s pool %s: %s (peer %s)", row->name, be->name,
                      pool->name, why[0] ? why : strerror(-rc), api_call_peer(call));
    } else {
        /* Allocate it now (this connection sees the uncommitted row), so
         * a size the memory backend refuses fails the create. */
        rc = datasets_volume_open(row->name, &mv);
        if (rc == 0)
            volume_unref(mv);
    }
    *created = rc == 0;
    return rc;
}

/* Locked: the one transaction (rows, then storage); on failure the memory
 * volume is dropped and the file or directory made is removed. */
static int create_commit(struct api_call *call, struct create_req *req, struct ds_pool *pool)
{
    struct ds_row *row = &req->row;
    bool is_volume = row->type == DS_VOLUME, created = false;
    struct cfg_tx tx;
    int rc;

    row->pool_id = pool->id;
    rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    rc = create_rows(&tx, req, pool);
    if (rc == 0)
        rc = create_storage(call, req, pool, &created);
    if (rc == 0)
        rc = cfg_tx_commit(&tx);
    else
        cfg_tx_abort(&tx);
    if (rc < 0 && row->memory)
        ds_cache_drop(row->name, false);
    if (rc < 0 && created && (is_volume ? !row->memory : true))
        ds_backend_of(pool)->dataset_remove(pool, row->name, is_volume);
    return rc;
}

static void create_log(struct api_call *call, const struct create_req *req)
{
    const struct ds_row *row = &req->row;

    if (row->type == DS_VOLUME)
        log_info("datasets: created volume %s (%llu bytes, volblocksize %s, %s%s; peer %s)",
                 row->name, (unsigned long long)row->volsize, req->volblocksize,
                 row->memory   ? "memory"
                 : row->sparse ? "sparse"
                               : "thick",
                 row->readonly ? ", read-only" : "", api_call_peer(call));
    else
        log_info("datasets: created filesystem %s (peer %s)", row->name, api_call_peer(call));
}

/* Unlocked: the call's answer once the locked part returned rc (*result
 * is the new row when rc is 0 and no field error was found). */
static int create_answer(struct api_call *call, const struct create_req *req, int rc,
                         json_t **result)
{
    if (api_has_verrs(call))
        return api_invalid(call);
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot create dataset", req->row.name);
    create_log(call, req);
    return *result ? 0 : api_error(call, EIO, "dataset %s vanished", req->row.name);
}

/* The decoded request: check fields -> (locked) check against the
 * database -> one transaction -> the new row into *result (may be NULL). */
static int create_run(struct api_call *call, struct create_req *req, json_t **result)
{
    struct ds_pool pool;
    json_t *row = NULL;
    int rc;

    create_check_fields(call, req);
    ds_check_user_props(call, "pool.dataset.create.user_properties", &req->user_props, false);
    ds_ops_lock();
    db_lock();
    rc = create_resolve(call, req, &pool);
    if (rc == 0 && !api_has_verrs(call)) {
        rc = create_commit(call, req, &pool);
        if (rc == 0)
            row = ds_dataset_row(req->row.name);
    }
    db_unlock();
    ds_ops_unlock();
    rc = create_answer(call, req, rc, &row);
    if (result)
        *result = row;
    else
        json_decref(row);
    return rc;
}

/* pool.dataset.create: decode once, then create_run. The parameter
 * shapes were checked by the dispatcher against create_fields. */
int ds_dataset_create(struct api_call *call, json_t *params, json_t **result)
{
    struct create_req req;
    int rc = create_decode(api_param(params, 0), &req);

    if (rc < 0) {
        create_req_free(&req);
        return ds_api_errno(call, rc, "cannot create dataset", req.row.name);
    }
    rc = create_run(call, &req, result);
    create_req_free(&req);
    return rc;
}

int ds_volume_create(struct api_call *call, const struct ds_volume_new *nv)
{
    struct create_req req;
    struct ds_row *row = &req.row;
    int rc;

    memset(&req, 0, sizeof(req));
    snprintf(row->name, sizeof(row->name), "%s", nv->name);
    row->type = DS_VOLUME;
    row->volsize = nv->volsize;
    row->volblocksize = nv->volblocksize;
    row->sparse = nv->sparse;
    row->sync = nv->sync;
    req.sync_inherit = !nv->sync_given;
    req.readonly_inherit = true;
    snprintf(row->comments, sizeof(row->comments), "%s", nv->comments ? nv->comments : "");
    req.vol_only[VO_VOLSIZE] = req.vol_only[VO_VOLBLOCKSIZE] = req.vol_only[VO_SPARSE] = true;
    /* as pool.dataset.create names it, for the log (at most "128K") */
    str_printf(req.volblocksize, sizeof(req.volblocksize), "%u%s",
               nv->volblocksize >= 1024 ? nv->volblocksize / 1024 : nv->volblocksize,
               nv->volblocksize >= 1024 ? "K" : "");
    if (nv->managedby) {
        req.managedby.given = true;
        snprintf(req.managedby.value, sizeof(req.managedby.value), "%s", nv->managedby);
    }
    req.adopt = nv->adopt;
    if (nv->user_props)
        req.user_props = *nv->user_props; /* borrowed: not freed below */
    rc = create_run(call, &req, NULL);
    req.user_props = (struct ds_user_props){0};
    create_req_free(&req);
    return rc;
}

int datasets_adopt_volume(struct api_call *call, const char *name, uint64_t size,
                          uint32_t volblocksize)
{
    struct ds_volume_new nv = {
        .name = name, .volsize = size, .volblocksize = volblocksize, .sparse = true, .adopt = true};
    return ds_volume_create(call, &nv);
}

const struct api_arg ds_dataset_create_args[1] = {API_ARG_OBJECT("data", create_fields, 0)};
