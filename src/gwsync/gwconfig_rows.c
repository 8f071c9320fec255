/*
 * The local side of the group's shared configuration (gwconfig.h): which
 * rows of the local DB are the group's and their stored values, and
 * applying a remote value through the typed functions the iscsi.*, nbd.*
 * and pool.dataset.create handlers run after decoding (iscsi_write.h,
 * nbd_write.h, datasets_adopt_volume): the same checks and one
 * configuration transaction per applied change, never the JSON-RPC
 * dispatcher. The rows are read through the typed stores (no SQL here);
 * the values are encoded from their structs and decoded by each object's
 * one decoder, checked against its method's fields.
 */
#include <errno.h>
#include <inttypes.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "control/dataset_store.h"
#include "control/db.h"
#include "control/dsrbd.h"
#include "control/datasets.h"
#include "iscsi/config/extent_store.h"
#include "iscsi/config/iscsi_write.h"
#include "iscsi/config/target_store.h"
#include "iscsi/config/targetextent_store.h"
#include "nbd/config/nbd_write.h"
#include "nbd/config/nbdstore.h"
#include "control/pool_store.h"
#include "core/log.h"
#include "gwsync/gwconfig_internal.h"
#include "store/rbd_cluster.h"
#include "store/rbd_image.h"

char *gwc_dump(const json_t *value)
{
    return json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- the local view (DB locked) ---- */

/* What the view is built from (gwconfig_internal.h says which rows are
 * the group's and the values' shapes). */
struct view_ctx {
    char (*pools)[NAME_DATASET_MAX + 1]; /* the RBD pools' names */
    size_t n_pools;
    struct icfg_extent *extents; /* every extent, by id */
    size_t n_extents;
    const struct icfg_extent **group; /* the group's among them, by id */
    size_t n_group;
    json_t *targets; /* local id (text) → value, the group's targets read so far */
    json_t *view;
};

/* A dataset of the group: a volume (no snapshot) of one of the RBD pools. */
static bool group_dataset(const struct view_ctx *c, const char *ds)
{
    const char *slash = strchr(ds, '/');
    if (!slash || strchr(ds, '@') || slash == ds || !slash[1])
        return false;
    size_t len = (size_t)(slash - ds);
    for (size_t i = 0; i < c->n_pools; i++)
        if (strlen(c->pools[i]) == len && memcmp(c->pools[i], ds, len) == 0)
            return true;
    return false;
}

/* group_dataset for gwc_nvmet_view. */
static bool group_ds(const void *ctx, const char *ds)
{
    return group_dataset(ctx, ds);
}

/* ds_rbd_spec_each's step: the RBD pool's name into c->pools (only the
 * names matter: group_dataset looks a name up, in any order). */
static int view_pool_add(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec,
                         void *arg)
{
    struct view_ctx *c = arg;
    (void)pool_id;
    (void)spec;
    char(*v)[NAME_DATASET_MAX + 1] = realloc(c->pools, (c->n_pools + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    c->pools = v;
    snprintf(c->pools[c->n_pools++], sizeof(*v), "%s", name ? name : "");
    return 0;
}

/* The values. Their keys and types are the group's wire format: the
 * members compare gwc_dump of them, so a change here makes members of
 * different versions disagree. */
static json_t *extent_value(const struct icfg_extent *e)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:b, s:o, s:s, s:b, s:b, s:s, s:b, s:b}", "name",
                     e->name, "type", "DISK", "disk", e->disk, "serial", e->serial, "blocksize",
                     (json_int_t)e->blocksize, "pblocksize", e->pblocksize, "avail_threshold",
                     e->has_avail_threshold ? json_integer(e->avail_threshold) : json_null(),
                     "comment", e->comment, "insecure_tpc", e->insecure_tpc, "xen", e->xen, "rpm",
                     e->rpm, "ro", e->ro, "enabled", e->enabled);
}

static json_t *target_value(const struct icfg_target *t)
{
    json_t *nets = json_array();
    for (size_t i = 0; nets && i < t->auth_networks.n; i++)
        json_array_append_new(nets, json_string(t->auth_networks.v[i]));
    return json_pack("{s:s, s:o, s:s, s:o}", "name", t->name, "alias",
                     t->alias ? json_string(t->alias) : json_null(), "mode",
                     icfg_target_mode_names[t->mode], "auth_networks", nets);
}

static json_t *lun_value(const char *target, const char *extent, int64_t lunid)
{
    return json_pack("{s:s, s:s, s:I}", "target", target, "extent", extent, "lunid",
                     (json_int_t)lunid);
}

static json_t *nbd_value(const struct nbd_export_row *r)
{
    return json_pack("{s:s, s:s, s:b, s:s, s:b, s:s, s:b}", "name", r->name, "dataset", r->dataset,
                     "readonly", r->readonly, "description", r->description, "multi_conn",
                     r->multi_conn, "tls", r->tls, "enabled", r->enabled);
}

/* extent/<name> for each extent of a group volume. 0 or -errno. */
static int view_extents(struct view_ctx *c)
{
    void *v;
    int rc = icfg_table_list(&icfg_extent_table, NULL, &v, &c->n_extents);
    if (rc < 0)
        return rc;
    c->extents = v;
    c->group = calloc(c->n_extents ? c->n_extents : 1, sizeof(*c->group));
    if (!c->group)
        return -ENOMEM;
    for (size_t i = 0; i < c->n_extents; i++) {
        const struct icfg_extent *e = &c->extents[i];
        if (e->type != ICFG_EXTENT_DISK || !e->disk || strncmp(e->disk, "zvol/", 5) != 0 ||
            !group_dataset(c, e->disk + 5))
            continue;
        char key[128];
        snprintf(key, sizeof(key), "extent/%s", e->name);
        json_object_set_new(c->view, key, extent_value(e));
        c->group[c->n_group++] = e;
    }
    return 0;
}

static int extent_cmp(const void *key, const void *elem)
{
    int64_t id = *(const int64_t *)key, eid = (*(const struct icfg_extent *const *)elem)->id;
    return id < eid ? -1 : id > eid;
}

/* The value of target id (read once per view), NULL when there is no such
 * target or it has no value. 0 or -errno. */
static int view_target(struct view_ctx *c, int64_t id, json_t **value)
{
    char key[32];
    snprintf(key, sizeof(key), "%" PRId64, id);
    *value = json_object_get(c->targets, key);
    if (*value)
        return 0;
    struct icfg_target t;
    int rc = icfg_target_get(id, &t);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return rc;
    json_t *v = target_value(&t);
    icfg_target_clear(&t);
    if (v && json_object_set_new(c->targets, key, v) == 0)
        *value = v;
    return 0;
}

/* lun/<target>/<lunid> for each LUN of a group extent, which makes its
 * target (target/<name>) the group's too. 0 or -errno. */
static int view_luns(struct view_ctx *c)
{
    struct icfg_targetextent *te;
    size_t n;
    void *v;
    int rc = icfg_table_list(&icfg_targetextent_table, NULL, &v, &n);
    if (rc < 0)
        return rc;
    te = v;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct icfg_extent **e =
            bsearch(&te[i].extent, c->group, c->n_group, sizeof(*c->group), extent_cmp);
        json_t *tgt = NULL;
        if (!e || (rc = view_target(c, te[i].target, &tgt)) < 0 || !tgt)
            continue;
        const char *tname = json_string_value(json_object_get(tgt, "name"));
        json_t *lun = lun_value(tname, (*e)->name, te[i].lunid);
        if (!lun)
            continue;
        char key[200];
        snprintf(key, sizeof(key), "lun/%s/%" PRId64, tname, te[i].lunid);
        json_object_set_new(c->view, key, lun);
        snprintf(key, sizeof(key), "target/%s", tname);
        json_object_set(c->view, key, tgt);
    }
    free(te);
    return rc;
}

/* nbd/<name> for each export of a group volume. 0 or -errno. */
static int view_nbd(struct view_ctx *c)
{
    struct nbd_export_row *r;
    size_t n;
    int rc = nbd_export_rows_load(&r, &n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (!r[i].dataset || !group_dataset(c, r[i].dataset))
            continue;
        char key[200];
        snprintf(key, sizeof(key), "nbd/%s", r[i].name);
        json_object_set_new(c->view, key, nbd_value(&r[i]));
    }
    nbd_export_rows_free(r, n);
    return 0;
}

json_t *gwc_local_view(void)
{
    struct view_ctx c = {.targets = json_object(), .view = json_object()};
    db_lock();
    int rc = ds_rbd_spec_each(view_pool_add, &c);
    if (rc == 0 && c.n_pools) {
        rc = view_extents(&c);
        if (rc == 0)
            rc = view_luns(&c);
        if (rc == 0)
            rc = view_nbd(&c);
        if (rc == 0)
            rc = gwc_nvmet_view(c.view, group_ds, &c);
    }
    db_unlock();
    free(c.pools);
    icfg_table_free(&icfg_extent_table, c.extents, c.n_extents);
    free(c.group);
    json_decref(c.targets);
    if (rc < 0) {
        log_error("gateway config: cannot read the local shares: %s", strerror(-rc));
        json_decref(c.view);
        return NULL;
    }
    return c.view;
}

/* ---- adopting a volume ---- */

const char *gwc_value_volume(const char *key, const json_t *want)
{
    if (strncmp(key, "extent/", 7) == 0) {
        const char *disk = json_string_value(json_object_get(want, "disk"));
        return disk && strncmp(disk, "zvol/", 5) == 0 ? disk + 5 : NULL;
    }
    if (gwc_is_nbd(key))
        return json_string_value(json_object_get(want, "dataset"));
    return gwc_nvmet_volume(key, want);
}

int64_t gwc_dataset_id(const char *ds)
{
    struct ds_row row;
    db_lock();
    int rc = ds_dataset_get(ds, &row);
    db_unlock();
    return rc == 0 ? row.id : 0;
}

static bool dataset_exists(const char *ds)
{
    return gwc_dataset_id(ds) > 0;
}

bool gwc_volume_shared_here(const char *ds)
{
    char disk[8 + DS_NAME_BUF];
    int64_t id;
    if (snprintf(disk, sizeof(disk), "zvol/%s", ds) >= (int)sizeof(disk))
        return true; /* no such dataset name: keep it, as on a DB error */
    db_lock();
    int rc = icfg_extent_find_disk(disk, &id);
    if (rc == -ENOENT)
        rc = nbd_export_find_dataset(ds, &id);
    if (rc == -ENOENT && gwc_nvmet_uses(ds))
        rc = 0;
    db_unlock();
    return rc != -ENOENT; /* on a DB error: keep it */
}

/* The size of the RBD image of volume ds ("pool/a/b" → image "a%b" in the
 * pool's RBD pool and namespace). 0 or -errno with why. */
static int image_size(const char *ds, uint64_t *size, char *why, size_t len)
{
    const char *slash = strchr(ds, '/');
    if (!slash || slash == ds) {
        snprintf(why, len, "%s is not a volume of a pool", ds);
        return -EINVAL;
    }
    char pool[256];
    snprintf(pool, sizeof(pool), "%.*s", (int)(slash - ds), ds);
    struct ds_pool row;
    struct ds_rbd_spec rbd;
    db_lock();
    int rc = ds_pool_get_rbd(pool, &row, &rbd);
    db_unlock();
    if (rc < 0) {
        snprintf(why, len, "this member has no RBD pool named %s", pool);
        return rc;
    }
    char image[1024];
    snprintf(image, sizeof(image), "%s", slash + 1);
    for (char *p = image; *p; p++)
        if (*p == '/')
            *p = '%';
    struct rbd_cluster *c;
    char reason[512];
    rc = ds_rbd_connect(&rbd, 10, &c, reason, sizeof(reason));
    explicit_bzero(rbd.key, sizeof(rbd.key));
    if (rc < 0) {
        snprintf(why, len, "pool %s: %s", pool, reason);
        return rc;
    }
    rados_ioctx_t io;
    rc = rbd_cluster_ioctx(c, rbd.pool, rbd.ns, &io);
    if (rc == 0) {
        rbd_image_t img;
        rc = rbd_image_open_mgmt(io, image, NULL, true, &img);
        if (rc == 0) {
            rc = rbd_get_size(img, size);
            rbd_close(img);
        }
        rados_ioctx_destroy(io);
    }
    rbd_cluster_put(c);
    if (rc < 0)
        snprintf(why, len, "RBD image %s of %s: %s", image, ds, strerror(-rc));
    return rc;
}

/* A typed write's error (the JSON-RPC error object its call would answer
 * with) → -errno and its message into why. */
static int call_error(json_t *err, const char *method, char *why, size_t len)
{
    json_t *data = json_object_get(err, "data");
    int e = (int)json_integer_value(json_object_get(data, "error"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    /* a -32602 says "Invalid params": its first field error is the cause */
    json_t *field = json_array_get(json_object_get(data, "extra"), 0);
    if (json_is_array(field) && json_string_value(json_array_get(field, 1))) {
        snprintf(why, len, "%s: %s: %s", method, json_string_value(json_array_get(field, 0)),
                 json_string_value(json_array_get(field, 1)));
        return e > 0 ? -e : -EIO;
    }
    snprintf(why, len, "%s: %s", method, msg ? msg : "failed");
    return e > 0 ? -e : -EIO;
}

/* The call a typed write reports to: blockd applying its group's
 * configuration, as the internal identity (never the local
 * administrator's); method names the fields of its errors as the method's
 * own would. NULL when out of memory. */
struct api_call *gwc_call_new(const char *method)
{
    return api_call_internal_new(method, "gateway");
}

/* The outcome of the typed write that returned rc on call (freed here):
 * 0, or -errno with why. call NULL: -ENOMEM. */
int gwc_call_done(struct api_call *call, int rc, char *why, size_t len)
{
    if (!call) {
        snprintf(why, len, "out of memory");
        return -ENOMEM;
    }
    if (rc < 0) {
        json_t *err = api_call_error(call);
        rc = call_error(err, api_call_method(call), why, len);
        json_decref(err);
    }
    api_call_internal_free(call);
    return rc;
}

int gwc_ensure_volume(const char *key, const json_t *want, char *why, size_t len)
{
    const char *ds = want ? gwc_value_volume(key, want) : NULL;
    if (!ds || dataset_exists(ds))
        return 0;
    uint64_t size = 0;
    int rc = image_size(ds, &size, why, len);
    if (rc < 0)
        return rc;
    uint32_t vbs = size % 16384 == 0 ? 16384 : size % 4096 == 0 ? 4096 : 512;
    struct api_call *c = gwc_call_new("pool.dataset.create");
    rc = gwc_call_done(c, c ? datasets_adopt_volume(c, ds, size, vbs) : -1, why, len);
    if (rc < 0)
        return rc;
    log_info("gateway config: adopted the RBD volume %s (%" PRIu64 " bytes) for %s", ds, size, key);
    return 1;
}

/* ---- applying ---- */

int gwc_phase(const char *key, bool deleting)
{
    if (strncmp(key, "nvmet/", 6) == 0)
        return gwc_nvmet_phase(key, deleting);
    bool leaf = key[0] == 'l' || key[0] == 'n'; /* lun/, nbd/ */
    if (deleting)
        return leaf ? 0 : 3;
    return leaf ? 2 : 1;
}

/* The local id of the target / extent / NBD export called name: >0, or 0
 * when absent (or on a DB error). Takes the DB lock. */
static int64_t local_id(int (*find)(const char *, int64_t, int64_t *), const char *name)
{
    int64_t id = 0;
    db_lock();
    int rc = find(name, 0, &id);
    db_unlock();
    return rc == 0 ? id : 0;
}

/* nbd_export_find_name as a finder of local_id (exports have no except_id). */
static int nbd_find(const char *name, int64_t except_id, int64_t *id)
{
    (void)except_id;
    return nbd_export_find_name(name, id);
}

static int64_t count_luns(int64_t target_id)
{
    int64_t *extents = NULL;
    size_t n = 0;
    db_lock();
    if (icfg_target_extents(target_id, &extents, &n) < 0)
        n = 0;
    db_unlock();
    free(extents);
    return (int64_t)n;
}

/* The mapping of LUN lunid of target tid: its id and extent into *te
 * and *extent (0 and 0 when there is none, or on a DB error). */
static void lun_mapping(int64_t tid, int64_t lunid, int64_t *te, int64_t *extent)
{
    struct icfg_targetextent row;
    int64_t id = 0;
    *te = *extent = 0;
    db_lock();
    if (icfg_targetextent_find_lun(tid, lunid, 0, &id) == 0 &&
        icfg_targetextent_get(id, &row) == 0) {
        *te = row.id;
        *extent = row.extent;
    }
    db_unlock();
}

/* Create (id 0) or update target id from the group's value, through the
 * typed functions iscsi.target.create / update run after decoding. A new
 * target has no portal group: those are per member. Inside the caller's
 * transaction (DB lock held). */
static int target_put(struct api_call *c, int64_t id, json_t *want)
{
    struct icfg_target t;
    int rc = id ? icfg_target_get(id, &t) : icfg_target_init(&t);
    if (rc < 0)
        rc = api_error(c, -rc, "cannot read target %" PRId64 ": %s", id, strerror(-rc));
    if (rc == 0)
        rc = iscsi_target_decode(c, want, id != 0, &t);
    if (rc == 0) {
        t.id = id;
        if (!id)
            rc =
                icfg_target_set_groups(&t, NULL, 0) < 0 ? api_error(c, ENOMEM, "out of memory") : 0;
    }
    if (rc == 0)
        rc = iscsi_target_write(c, &t);
    icfg_target_clear(&t);
    return rc;
}

static int apply_target(const char *name, json_t *want, json_t *have, char *why, size_t len)
{
    int64_t id = local_id(icfg_target_find_name, name);
    if (!want) {
        if (!id)
            return 0;
        if (count_luns(id) > 0) {
            /* It maps this member's own LUNs as well: it stays, as a local
             * target. */
            log_info("gateway config: target %s left the group; kept here for its local LUNs",
                     name);
            return 0;
        }
        struct api_call *c = gwc_call_new("iscsi.target.delete");
        return gwc_call_done(c, c ? iscsi_target_remove(c, id, true, false) : -1, why, len);
    }
    if (id && have && json_equal(have, want))
        return 0;
    struct api_call *c = gwc_call_new(id ? "iscsi.target.update" : "iscsi.target.create");
    return gwc_call_done(c, c ? target_put(c, id, want) : -1, why, len);
}

/* As target_put, for extent id (iscsi.extent.create / update). */
static int extent_put(struct api_call *c, int64_t id, json_t *want)
{
    struct icfg_extent e;
    int rc = id ? icfg_extent_get(id, &e) : icfg_extent_init(&e);
    if (rc < 0)
        rc = api_error(c, -rc, "cannot read extent %" PRId64 ": %s", id, strerror(-rc));
    if (rc == 0)
        rc = iscsi_extent_decode(c, want, id != 0, &e);
    if (rc == 0) {
        e.id = id;
        rc = iscsi_extent_write(c, &e);
    }
    icfg_extent_clear(&e);
    return rc;
}

static int apply_extent(const char *name, json_t *want, json_t *have, char *why, size_t len)
{
    int64_t id = local_id(icfg_extent_find_name, name);
    if (!want) {
        if (!id)
            return 0;
        struct api_call *c = gwc_call_new("iscsi.extent.delete");
        return gwc_call_done(c, c ? iscsi_extent_remove(c, id, false, true) : -1, why, len);
    }
    if (id && have && json_equal(have, want))
        return 0;
    struct api_call *c = gwc_call_new(id ? "iscsi.extent.update" : "iscsi.extent.create");
    return gwc_call_done(c, c ? extent_put(c, id, want) : -1, why, len);
}

/* Map extent eid as LUN lunid of target tid: mapping te (0: a new one). */
static int lun_put(struct api_call *c, int64_t te, int64_t tid, int64_t eid, int64_t lunid)
{
    struct icfg_targetextent row;
    int rc = te ? icfg_targetextent_get(te, &row) : icfg_targetextent_init(&row);
    if (rc < 0)
        return api_error(c, -rc, "cannot read LUN mapping %" PRId64 ": %s", te, strerror(-rc));
    row.id = te;
    row.target = tid;
    row.extent = eid;
    row.has_lunid = true;
    row.lunid = lunid;
    return iscsi_targetextent_write(c, &row);
}

/* lun/<target>/<lunid> */
static int apply_lun(const char *key, json_t *want, char *why, size_t len)
{
    const char *t = key + 4, *slash = strrchr(key, '/');
    char tname[256];
    snprintf(tname, sizeof(tname), "%.*s", (int)(slash - t), t);
    int64_t lunid = strtoll(slash + 1, NULL, 10);
    int64_t tid = local_id(icfg_target_find_name, tname);
    int64_t te = 0, te_extent = 0;
    struct api_call *c;
    if (tid)
        lun_mapping(tid, lunid, &te, &te_extent);
    if (!want) {
        if (!te)
            return 0;
        c = gwc_call_new("iscsi.targetextent.delete");
        return gwc_call_done(c, c ? iscsi_targetextent_remove(c, te, true) : -1, why, len);
    }
    const char *ename = json_string_value(json_object_get(want, "extent"));
    int64_t eid = ename ? local_id(icfg_extent_find_name, ename) : 0;
    if (!tid || !eid) {
        snprintf(why, len, "%s %s is not here (yet)", tid ? "extent" : "target",
                 tid ? (ename ? ename : "?") : tname);
        return -ENOENT;
    }
    if (te && te_extent == eid)
        return 0;
    c = gwc_call_new(te ? "iscsi.targetextent.update" : "iscsi.targetextent.create");
    return gwc_call_done(c, c ? lun_put(c, te, tid, eid, lunid) : -1, why, len);
}

/* Create (id 0) or update export id from the group's value (a path
 * export is never the group's: the value has no path). */
static int nbd_put(struct api_call *c, int64_t id, json_t *want)
{
    struct nbd_export_row r;
    int rc = nbd_export_decode(c, want, id, &r);
    if (rc == 0)
        rc = nbd_export_save(c, &r);
    nbd_export_row_clear(&r);
    return rc;
}

static int apply_nbd(const char *name, json_t *want, json_t *have, char *why, size_t len)
{
    int64_t id = local_id(nbd_find, name);
    struct api_call *c;
    if (!want) {
        if (!id)
            return 0;
        c = gwc_call_new("nbd.export.delete");
        return gwc_call_done(c, c ? nbd_export_remove(c, id, true) : -1, why, len);
    }
    if (id && have && json_equal(have, want))
        return 0;
    c = gwc_call_new(id ? "nbd.export.update" : "nbd.export.create");
    return gwc_call_done(c, c ? nbd_put(c, id, want) : -1, why, len);
}

int gwc_apply(const char *key, json_t *want, json_t *local, char *why, size_t len)
{
    json_t *have = json_object_get(local, key);
    if (want && !json_is_object(want)) {
        snprintf(why, len, "the stored value is not a JSON object");
        return -EINVAL;
    }
    if (strncmp(key, "target/", 7) == 0)
        return apply_target(key + 7, want, have, why, len);
    if (strncmp(key, "extent/", 7) == 0)
        return apply_extent(key + 7, want, have, why, len);
    if (strncmp(key, "lun/", 4) == 0 && strrchr(key, '/') > key + 4)
        return apply_lun(key, want, why, len);
    if (strncmp(key, "nbd/", 4) == 0)
        return apply_nbd(key + 4, want, have, why, len);
    if (strncmp(key, "nvmet/", 6) == 0)
        return gwc_nvmet_apply(key, want, have, why, len);
    snprintf(why, len, "unknown key (a newer blockd's?): ignored");
    return -ENOTSUP;
}
