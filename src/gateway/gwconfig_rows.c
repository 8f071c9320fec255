/*
 * The local side of the group's shared configuration (gwconfig.h): which
 * rows of the local DB are the group's and their stored values, and
 * applying a remote value through the same API methods a client calls.
 */
#include <errno.h>
#include <inttypes.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "config/db.h"
#include "core/log.h"
#include "gateway/gwconfig_internal.h"
#include "store/rbd_cluster.h"
#include "store/rbd_image.h"

char *gwc_dump(const json_t *value)
{
    return json_dumps(value, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- the local view (DB locked) ---- */

static const char *col_text(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? (const char *)t : "";
}

static json_t *col_text_or_null(sqlite3_stmt *st, int col)
{
    if (sqlite3_column_type(st, col) == SQLITE_NULL)
        return json_null();
    return json_string(col_text(st, col));
}

/* A dataset of the group: a volume (no snapshot) of one of the RBD pools. */
static bool group_dataset(json_t *rbd_pools, const char *ds)
{
    const char *slash = strchr(ds, '/');
    if (!slash || strchr(ds, '@') || slash == ds || !slash[1])
        return false;
    char pool[256];
    snprintf(pool, sizeof(pool), "%.*s", (int)(slash - ds), ds);
    return json_object_get(rbd_pools, pool) != NULL;
}

/* Run sql (no parameters) and hand each row to fn; 0 or -errno. */
static int each_row(const char *sql, void (*fn)(sqlite3_stmt *st, void *arg), void *arg)
{
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);
    if (rc < 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        fn(st, arg);
    rc = rc == SQLITE_DONE ? 0 : -EIO;
    db_stmt_done(st);
    return rc;
}

struct view_ctx {
    json_t *pools;   /* RBD pool names (object used as a set) */
    json_t *extents; /* local id (text) → name, group extents only */
    json_t *targets; /* local id (text) → row, every target */
    json_t *view;
};

static void pool_row(sqlite3_stmt *st, void *arg)
{
    struct view_ctx *c = arg;
    json_object_set_new(c->pools, col_text(st, 0), json_true());
}

static void extent_row(sqlite3_stmt *st, void *arg)
{
    struct view_ctx *c = arg;
    const char *disk = col_text(st, 3);
    if (strcmp(col_text(st, 2), "DISK") != 0 || strncmp(disk, "zvol/", 5) != 0 ||
        !group_dataset(c->pools, disk + 5))
        return;
    const char *name = col_text(st, 1);
    json_t *v = json_pack("{s:s, s:s, s:s, s:s, s:I, s:b, s:o, s:s, s:b, s:b, s:s, s:b, s:b}",
                          "name", name, "type", "DISK", "disk", disk, "serial", col_text(st, 4),
                          "blocksize", (json_int_t)sqlite3_column_int64(st, 5), "pblocksize",
                          sqlite3_column_int(st, 6), "avail_threshold",
                          sqlite3_column_type(st, 7) == SQLITE_NULL
                              ? json_null()
                              : json_integer(sqlite3_column_int64(st, 7)),
                          "comment", col_text(st, 8), "insecure_tpc", sqlite3_column_int(st, 9),
                          "xen", sqlite3_column_int(st, 10), "rpm", col_text(st, 11), "ro",
                          sqlite3_column_int(st, 12), "enabled", sqlite3_column_int(st, 13));
    char key[128], id[32];
    snprintf(key, sizeof(key), "extent/%s", name);
    snprintf(id, sizeof(id), "%" PRId64, (int64_t)sqlite3_column_int64(st, 0));
    json_object_set_new(c->view, key, v);
    json_object_set_new(c->extents, id, json_string(name));
}

static void target_row(sqlite3_stmt *st, void *arg)
{
    struct view_ctx *c = arg;
    json_t *nets = json_loads(col_text(st, 4), 0, NULL);
    if (!json_is_array(nets)) {
        json_decref(nets);
        nets = json_array();
    }
    char id[32];
    snprintf(id, sizeof(id), "%" PRId64, (int64_t)sqlite3_column_int64(st, 0));
    json_object_set_new(c->targets, id,
                        json_pack("{s:s, s:o, s:s, s:o}", "name", col_text(st, 1), "alias",
                                  col_text_or_null(st, 2), "mode", col_text(st, 3), "auth_networks",
                                  nets));
}

/* A LUN of a group extent makes its target the group's too. */
static void lun_row(sqlite3_stmt *st, void *arg)
{
    struct view_ctx *c = arg;
    char tid[32], eid[32], key[200];
    snprintf(tid, sizeof(tid), "%" PRId64, (int64_t)sqlite3_column_int64(st, 0));
    snprintf(eid, sizeof(eid), "%" PRId64, (int64_t)sqlite3_column_int64(st, 1));
    json_t *ext = json_object_get(c->extents, eid);
    json_t *tgt = json_object_get(c->targets, tid);
    if (!ext || !tgt)
        return;
    const char *tname = json_string_value(json_object_get(tgt, "name"));
    int64_t lun = sqlite3_column_int64(st, 2);
    snprintf(key, sizeof(key), "lun/%s/%" PRId64, tname, lun);
    json_object_set_new(
        c->view, key,
        json_pack("{s:s, s:O, s:I}", "target", tname, "extent", ext, "lunid", (json_int_t)lun));
    snprintf(key, sizeof(key), "target/%s", tname);
    json_object_set(c->view, key, tgt);
}

static void nbd_row(sqlite3_stmt *st, void *arg)
{
    struct view_ctx *c = arg;
    const char *ds = col_text(st, 1);
    if (!group_dataset(c->pools, ds))
        return;
    char key[200];
    snprintf(key, sizeof(key), "nbd/%s", col_text(st, 0));
    json_object_set_new(c->view, key,
                        json_pack("{s:s, s:s, s:b, s:s, s:b, s:s, s:b}", "name", col_text(st, 0),
                                  "dataset", ds, "readonly", sqlite3_column_int(st, 2),
                                  "description", col_text(st, 3), "multi_conn",
                                  sqlite3_column_int(st, 4), "tls", col_text(st, 5), "enabled",
                                  sqlite3_column_int(st, 6)));
}

json_t *gwc_local_view(void)
{
    struct view_ctx c = {.pools = json_object(),
                         .extents = json_object(),
                         .targets = json_object(),
                         .view = json_object()};
    db_lock();
    int rc =
        each_row("SELECT p.name FROM pools p JOIN pool_rbd r ON r.pool_id = p.id", pool_row, &c);
    if (rc == 0 && json_object_size(c.pools)) {
        if (rc == 0)
            rc = each_row("SELECT id, name, type, disk, serial, blocksize, pblocksize, "
                          "avail_threshold, comment, insecure_tpc, xen, rpm, ro, enabled "
                          "FROM iscsi_extent",
                          extent_row, &c);
        if (rc == 0)
            rc = each_row("SELECT id, name, alias, mode, auth_networks FROM iscsi_target",
                          target_row, &c);
        if (rc == 0)
            rc =
                each_row("SELECT target_id, extent_id, lunid FROM iscsi_targetextent", lun_row, &c);
        if (rc == 0)
            rc = each_row("SELECT name, dataset, readonly, description, multi_conn, tls, enabled "
                          "FROM nbd_export WHERE dataset IS NOT NULL",
                          nbd_row, &c);
    }
    db_unlock();
    json_decref(c.pools);
    json_decref(c.extents);
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
    return NULL;
}

int64_t gwc_dataset_id(const char *ds)
{
    sqlite3_stmt *st;
    int64_t id = 0;
    db_lock();
    if (db_stmt("SELECT id FROM datasets WHERE name = ?", &st) == 0) {
        sqlite3_bind_text(st, 1, ds, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0);
        db_stmt_done(st);
    }
    db_unlock();
    return id;
}

static bool dataset_exists(const char *ds)
{
    return gwc_dataset_id(ds) > 0;
}

bool gwc_volume_shared_here(const char *ds)
{
    sqlite3_stmt *st;
    bool used = true; /* on a DB error: keep it */
    db_lock();
    if (db_stmt("SELECT (SELECT count(*) FROM iscsi_extent WHERE disk = 'zvol/' || ?1) + "
                "(SELECT count(*) FROM nbd_export WHERE dataset = ?1)",
                &st) == 0) {
        sqlite3_bind_text(st, 1, ds, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW)
            used = sqlite3_column_int64(st, 0) > 0;
        db_stmt_done(st);
    }
    db_unlock();
    return used;
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
    char pool[256], rbd_pool[256] = "", ns[256] = "", conf[1024] = "", id[128] = "", key[1024] = "";
    snprintf(pool, sizeof(pool), "%.*s", (int)(slash - ds), ds);
    sqlite3_stmt *st;
    int rc;
    db_lock();
    rc = db_stmt("SELECT r.rbd_pool, r.namespace, r.conf, r.ceph_id, r.keyring FROM pools p "
                 "JOIN pool_rbd r ON r.pool_id = p.id WHERE p.name = ?",
                 &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, pool, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW) {
            snprintf(rbd_pool, sizeof(rbd_pool), "%s", col_text(st, 0));
            snprintf(ns, sizeof(ns), "%s", col_text(st, 1));
            snprintf(conf, sizeof(conf), "%s", col_text(st, 2));
            snprintf(id, sizeof(id), "%s", col_text(st, 3));
            snprintf(key, sizeof(key), "%s", col_text(st, 4));
        } else {
            rc = -ENOENT;
        }
        db_stmt_done(st);
    }
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
    struct rbd_cluster_spec spec = {.conf = conf, .id = id, .keyring = key};
    struct rbd_cluster *c;
    rc = rbd_cluster_get(&spec, 10, &c);
    if (rc < 0) {
        snprintf(why, len, "cannot reach the Ceph cluster of pool %s: %s", pool, strerror(-rc));
        return rc;
    }
    rados_ioctx_t io;
    rc = rbd_cluster_ioctx(c, rbd_pool, ns, &io);
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

/* JSON-RPC error → -errno and its message into why. */
static int call_error(json_t *err, const char *method, char *why, size_t len)
{
    json_t *data = json_object_get(err, "data");
    int e = (int)json_integer_value(json_object_get(data, "errno"));
    const char *msg = json_string_value(json_object_get(err, "message"));
    snprintf(why, len, "%s: %s", method, msg ? msg : "failed");
    return e > 0 ? -e : -EIO;
}

/* Run method (params: a new reference, stolen); *res (may be NULL) gets
 * the result. 0 or -errno with why. */
static int call(const char *method, json_t *params, json_t **res, char *why, size_t len)
{
    json_t *r = NULL, *err = NULL;
    int rc = api_call_method_json(NULL, method, params, &r, &err);
    json_decref(params);
    if (rc < 0) {
        rc = call_error(err, method, why, len);
        json_decref(err);
        return rc;
    }
    if (res)
        *res = r;
    else
        json_decref(r);
    return 0;
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
    const char *vbs = size % 16384 == 0 ? "16K" : size % 4096 == 0 ? "4K" : "512";
    rc = call("pool.dataset.create",
              json_pack("[{s:s, s:s, s:I, s:s, s:b}]", "name", ds, "type", "VOLUME", "volsize",
                        (json_int_t)size, "volblocksize", vbs, "adopt", 1),
              NULL, why, len);
    if (rc < 0)
        return rc;
    log_info("gateway config: adopted the RBD volume %s (%" PRIu64 " bytes) for %s", ds, size, key);
    return 1;
}

/* ---- applying ---- */

int gwc_phase(const char *key, bool deleting)
{
    bool leaf = key[0] == 'l' || key[0] == 'n'; /* lun/, nbd/ */
    if (deleting)
        return leaf ? 0 : 3;
    return leaf ? 2 : 1;
}

/* The local id of the row whose column col is value (sql: one text
 * parameter). >0, or 0 when absent. DB lock taken. */
static int64_t local_id(const char *sql, const char *value)
{
    sqlite3_stmt *st;
    int64_t id = 0;
    db_lock();
    if (db_stmt(sql, &st) == 0) {
        sqlite3_bind_text(st, 1, value, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0);
        db_stmt_done(st);
    }
    db_unlock();
    return id;
}

static int64_t count_luns(int64_t target_id)
{
    sqlite3_stmt *st;
    int64_t n = 0;
    db_lock();
    if (db_stmt("SELECT count(*) FROM iscsi_targetextent WHERE target_id = ?", &st) == 0) {
        sqlite3_bind_int64(st, 1, target_id);
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        db_stmt_done(st);
    }
    db_unlock();
    return n;
}

#define TARGET_BY_NAME "SELECT id FROM iscsi_target WHERE name = ?"
#define EXTENT_BY_NAME "SELECT id FROM iscsi_extent WHERE name = ?"
#define NBD_BY_NAME "SELECT id FROM nbd_export WHERE name = ?"

/* The value without "name" (an update body). New reference. */
static json_t *body_of(json_t *want)
{
    json_t *b = json_deep_copy(want);
    json_object_del(b, "name");
    return b;
}

static int apply_target(const char *name, json_t *want, json_t *have, char *why, size_t len)
{
    int64_t id = local_id(TARGET_BY_NAME, name);
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
        return call("iscsi.target.delete", json_pack("[I, b]", (json_int_t)id, 1), NULL, why, len);
    }
    if (id && have && json_equal(have, want))
        return 0;
    if (id)
        return call("iscsi.target.update", json_pack("[I, o]", (json_int_t)id, body_of(want)), NULL,
                    why, len);
    json_t *body = json_deep_copy(want);
    json_object_set_new(body, "groups", json_array()); /* portal groups are per member */
    return call("iscsi.target.create", json_pack("[o]", body), NULL, why, len);
}

static int apply_extent(const char *name, json_t *want, json_t *have, char *why, size_t len)
{
    int64_t id = local_id(EXTENT_BY_NAME, name);
    if (!want) {
        if (!id)
            return 0;
        return call("iscsi.extent.delete", json_pack("[I, b, b]", (json_int_t)id, 0, 1), NULL, why,
                    len);
    }
    if (id && have && json_equal(have, want))
        return 0;
    if (id)
        return call("iscsi.extent.update", json_pack("[I, o]", (json_int_t)id, body_of(want)), NULL,
                    why, len);
    return call("iscsi.extent.create", json_pack("[O]", want), NULL, why, len);
}

/* lun/<target>/<lunid> */
static int apply_lun(const char *key, json_t *want, char *why, size_t len)
{
    const char *t = key + 4, *slash = strrchr(key, '/');
    char tname[256];
    snprintf(tname, sizeof(tname), "%.*s", (int)(slash - t), t);
    int64_t lunid = strtoll(slash + 1, NULL, 10);
    int64_t tid = local_id(TARGET_BY_NAME, tname);
    int64_t te = 0, te_extent = 0;
    if (tid) {
        sqlite3_stmt *st;
        db_lock();
        if (db_stmt("SELECT id, extent_id FROM iscsi_targetextent WHERE target_id = ? AND "
                    "lunid = ?",
                    &st) == 0) {
            sqlite3_bind_int64(st, 1, tid);
            sqlite3_bind_int64(st, 2, lunid);
            if (sqlite3_step(st) == SQLITE_ROW) {
                te = sqlite3_column_int64(st, 0);
                te_extent = sqlite3_column_int64(st, 1);
            }
            db_stmt_done(st);
        }
        db_unlock();
    }
    if (!want)
        return te ? call("iscsi.targetextent.delete", json_pack("[I, b]", (json_int_t)te, 1), NULL,
                         why, len)
                  : 0;
    const char *ename = json_string_value(json_object_get(want, "extent"));
    int64_t eid = ename ? local_id(EXTENT_BY_NAME, ename) : 0;
    if (!tid || !eid) {
        snprintf(why, len, "%s %s is not here (yet)", tid ? "extent" : "target",
                 tid ? (ename ? ename : "?") : tname);
        return -ENOENT;
    }
    if (te && te_extent == eid)
        return 0;
    if (te)
        return call("iscsi.targetextent.update",
                    json_pack("[I, {s:I}]", (json_int_t)te, "extent", (json_int_t)eid), NULL, why,
                    len);
    return call("iscsi.targetextent.create",
                json_pack("[{s:I, s:I, s:I}]", "target", (json_int_t)tid, "extent", (json_int_t)eid,
                          "lunid", (json_int_t)lunid),
                NULL, why, len);
}

static int apply_nbd(const char *name, json_t *want, json_t *have, char *why, size_t len)
{
    int64_t id = local_id(NBD_BY_NAME, name);
    if (!want)
        return id ? call("nbd.export.delete", json_pack("[I, {s:b}]", (json_int_t)id, "force", 1),
                         NULL, why, len)
                  : 0;
    if (id && have && json_equal(have, want))
        return 0;
    if (id) {
        json_t *b = body_of(want);
        json_object_set_new(b, "path", json_null());
        return call("nbd.export.update", json_pack("[I, o]", (json_int_t)id, b), NULL, why, len);
    }
    return call("nbd.export.create", json_pack("[O]", want), NULL, why, len);
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
    snprintf(why, len, "unknown key (a newer blockd's?): ignored");
    return -ENOTSUP;
}
