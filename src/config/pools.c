/* Pools: a named directory that holds datasets. pool.query, pool.create. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "api/validate.h"
#include "config/cfgtx.h"
#include "config/db.h"
#include "config/ds_internal.h"
#include "config/dsbackend.h"
#include "config/dsrbd.h"
#include "core/log.h"
#include "core/util.h"
#include "store/copy.h"

static json_t *pool_row_build(int64_t id, const char *name, const char *path, int64_t created)
{
    struct statvfs sv;
    struct stat st;
    uint64_t size = 0, allocated = 0, avail = 0;
    /* poolfs: the registered root, reached without symlinks. */
    bool online = poolfs_stat(path, &st) == 0 && S_ISDIR(st.st_mode) && statvfs(path, &sv) == 0;
    char guid[32];

    if (online) {
        size = (uint64_t)sv.f_blocks * sv.f_frsize;
        avail = (uint64_t)sv.f_bavail * sv.f_frsize;
        allocated = size - (uint64_t)sv.f_bfree * sv.f_frsize;
    }
    snprintf(guid, sizeof(guid), "%lld", (long long)id);
    return json_pack("{s:I, s:s, s:s, s:s, s:s, s:b, s:b, s:s, s:n, s:I, s:I, s:I, s:I, s:s, "
                     "s:b, s:n, s:I}",
                     "id", (json_int_t)id, "name", name, "guid", guid, "path", path, "status",
                     online ? "ONLINE" : "UNAVAIL", "healthy", online, "warning", false,
                     "status_code", online ? "" : "POOL_DIRECTORY_MISSING", "status_detail", "size",
                     (json_int_t)size, "allocated", (json_int_t)allocated, "free",
                     (json_int_t)avail, "freeing", (json_int_t)0, "fragmentation", "0",
                     "is_upgraded", true, "scan", "created", (json_int_t)created);
}

/* An RBD pool's row: its state as the connector last saw it (never a
 * call to the cluster here), and its Ceph settings under "rbd". Locked by
 * caller. */
static json_t *pool_row_rbd(int64_t id, const char *name, const char *path, int64_t created)
{
    struct ds_rbd_spec spec;
    char guid[32], why[256];
    uint64_t size, avail;
    bool online;
    json_t *row;

    memset(&spec, 0, sizeof(spec));
    ds_rbd_spec_get(id, &spec);
    ds_rbd_status(id, &online, why, sizeof(why), &size, &avail);
    snprintf(guid, sizeof(guid), "%lld", (long long)id);
    row = json_pack("{s:I, s:s, s:s, s:s, s:s, s:b, s:b, s:s, s:s, s:I, s:I, s:I, s:I, s:s, "
                    "s:b, s:n, s:I, s:b, s:{s:s, s:s, s:s, s:s, s:s}}",
                    "id", (json_int_t)id, "name", name, "guid", guid, "path", path, "status",
                    online ? "ONLINE" : "UNAVAIL", "healthy", online, "warning", false,
                    "status_code", online ? "" : "RBD_CLUSTER_UNAVAILABLE", "status_detail", why,
                    "size", (json_int_t)size, "allocated", (json_int_t)(size - avail), "free",
                    (json_int_t)avail, "freeing", (json_int_t)0, "fragmentation", "0",
                    "is_upgraded", true, "scan", "created", (json_int_t)created, "snapshot_o1",
                    true, "rbd", "pool", spec.pool, "namespace", spec.ns, "conf", spec.conf, "id",
                    spec.id, "keyring", spec.keyring);
    if (row && online)
        json_object_set_new(row, "status_detail", json_null());
    return row;
}

/* The row plus snapshot_o1: O(1) snapshots and clones need reflink
 * (probed once per filesystem); without it they copy (store/snapshot.h).
 * null: cannot tell. */
static json_t *pool_row_full(int64_t id, const char *name, const char *path, int64_t created)
{
    if (strncmp(path, "rbd:", 4) == 0)
        return pool_row_rbd(id, name, path, created);
    json_t *row = pool_row_build(id, name, path, created);
    struct stat st;
    int o1 = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? store_reflink_probe(path) : -ENOENT;

    if (row)
        json_object_set_new(row, "snapshot_o1", o1 < 0 ? json_null() : json_boolean(o1 == 1));
    return row;
}

json_t *ds_pool_rows(void)
{
    json_t *rows = json_array();
    sqlite3_stmt *st;

    if (!rows || db_stmt("SELECT id, name, path, created FROM pools ORDER BY id", &st) < 0) {
        json_decref(rows);
        return NULL;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_array_append_new(rows, pool_row_full(sqlite3_column_int64(st, 0),
                                                  (const char *)sqlite3_column_text(st, 1),
                                                  (const char *)sqlite3_column_text(st, 2),
                                                  sqlite3_column_int64(st, 3)));
    }
    db_stmt_done(st);
    return rows;
}

json_t *ds_pool_row(const char *name)
{
    struct ds_pool p;

    if (ds_pool_get(name, &p) < 0)
        return NULL;
    return pool_row_full(p.id, p.name, p.path, p.created);
}

/* Insert the pool and its root dataset (a FILESYSTEM named like the pool).
 * Locked by caller (ds_ops_lock). 0 or -errno; EEXIST for a duplicate. */
static int pool_insert(const char *name, const char *path, const struct ds_rbd_spec *rbd,
                       int64_t *id_out)
{
    struct cfg_tx tx;
    struct ds_row root;
    sqlite3_stmt *st;
    int rc;

    db_lock();
    rc = cfg_tx_begin(&tx);
    if (rc < 0)
        goto out;
    rc = db_stmt("INSERT INTO pools (name, path, created) VALUES (?, ?,"
                 " CAST(strftime('%s','now') AS INTEGER) * 1000)",
                 &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
        rc = db_step_done(st);
        db_stmt_done(st);
    }
    if (rc == 0) {
        memset(&root, 0, sizeof(root));
        snprintf(root.name, sizeof(root.name), "%s", name);
        root.pool_id = sqlite3_last_insert_rowid(db_handle());
        root.type = DS_FILESYSTEM;
        root.sparse = true;
        *id_out = root.pool_id;
        cfg_tx_changed(&tx, CFG_POOL, root.pool_id, CFG_CREATED);
        rc = ds_dataset_insert(&root);
    }
    if (rc == 0 && rbd)
        rc = ds_rbd_spec_insert(root.pool_id, rbd);
    if (rc == 0)
        rc = cfg_tx_commit(&tx);
    else
        cfg_tx_abort(&tx);
out:
    db_unlock();
    return rc;
}

/* Two pools must not nest: a dataset of one would be a file in the other. */
static bool path_within(const char *outer, const char *inner)
{
    size_t n = strlen(outer);

    return strncmp(outer, inner, n) == 0 && (inner[n] == '/' || inner[n] == '\0' || n == 1);
}

static int pool_path_overlap(const char *path, char *why, size_t whylen)
{
    sqlite3_stmt *st;
    int rc = 0;

    db_lock();
    if (db_stmt("SELECT name, path FROM pools", &st) < 0) {
        db_unlock();
        snprintf(why, whylen, "cannot read pools");
        return -EIO;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *n = (const char *)sqlite3_column_text(st, 0);
        const char *p = (const char *)sqlite3_column_text(st, 1);

        if (path_within(p, path) || path_within(path, p)) {
            snprintf(why, whylen, "directory %s overlaps pool %s at %s", path, n, p);
            rc = strcmp(p, path) == 0 ? -EEXIST : -EINVAL;
            break;
        }
    }
    db_stmt_done(st);
    db_unlock();
    return rc;
}

/*
 * Check the path (poolfs_root_check: absolute, canonical, no symlink, not a
 * system or state directory, not a pseudo filesystem), create the
 * directory without following symlinks, check again now that it exists,
 * register it with poolfs, insert. why gets a message on failure.
 */
static int pool_create(const char *name, const char *path_in, char *resolved, size_t rlen,
                       char *why, size_t whylen)
{
    char path[PATH_MAX];
    int rc;

    if (path_in)
        snprintf(path, sizeof(path), "%s", path_in);
    else if (snprintf(path, sizeof(path), "%s/pools/%s", ds_state_dir, name) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    /* Before mkdir too, so a refused path leaves no directory behind. */
    rc = poolfs_root_check(path, ds_state_dir, why, whylen);
    if (rc < 0)
        return rc == -ELOOP || rc == -ENOTDIR ? -EINVAL : rc;
    rc = pool_path_overlap(path, why, whylen);
    if (rc < 0)
        return rc;
    rc = poolfs_root_make(path);
    if (rc < 0) {
        snprintf(why, whylen, "cannot create directory %s: %s", path, strerror(-rc));
        return rc == -ELOOP ? -EINVAL : rc;
    }
    rc = poolfs_root_check(path, ds_state_dir, why, whylen);
    if (rc < 0)
        return rc == -ELOOP || rc == -ENOTDIR ? -EINVAL : rc;
    snprintf(resolved, rlen, "%s", path);
    rc = poolfs_root_add(resolved);
    if (rc < 0) {
        snprintf(why, whylen, "cannot open pool directory %s: %s", resolved, strerror(-rc));
        return rc == -EEXIST ? -EINVAL : rc;
    }
    int64_t id;
    rc = pool_insert(name, resolved, NULL, &id);
    if (rc < 0)
        poolfs_root_remove(resolved);
    if (rc == -EEXIST)
        snprintf(why, whylen, "a pool named %s or using directory %s already exists", name,
                 resolved);
    else if (rc < 0)
        snprintf(why, whylen, "cannot record pool %s: %s", name, strerror(-rc));
    return rc;
}

/* Start-up: register every pool directory with poolfs. A pool whose path
 * no longer passes the checks (made by an older version, or a directory
 * replaced by a symlink) stays UNAVAILABLE: none of its files is opened. */
static void pools_register_all(void)
{
    char why[PATH_MAX + 128];
    sqlite3_stmt *st;

    db_lock();
    if (db_stmt("SELECT name, path FROM pools", &st) < 0) {
        db_unlock();
        return;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *n = (const char *)sqlite3_column_text(st, 0);
        const char *p = (const char *)sqlite3_column_text(st, 1);

        if (strncmp(p, "rbd:", 4) == 0)
            continue; /* no directory: ds_rbd_start connects it */
        int rc = poolfs_root_check(p, ds_state_dir, why, sizeof(why));

        if (rc == -ENOENT || (rc == 0 && access(p, F_OK) < 0)) {
            rc = poolfs_root_make(p);
            if (rc == 0)
                log_warn("datasets: pool %s: directory %s was missing, created it empty", n, p);
            if (rc == 0)
                rc = poolfs_root_check(p, ds_state_dir, why, sizeof(why));
            else
                snprintf(why, sizeof(why), "cannot create %s: %s", p, strerror(-rc));
        }
        if (rc == 0) {
            rc = poolfs_root_add(p);
            if (rc < 0)
                snprintf(why, sizeof(why), "cannot open %s: %s", p, strerror(-rc));
        }
        if (rc < 0)
            log_error("datasets: pool %s is unavailable (its files are not opened): %s", n, why);
    }
    db_stmt_done(st);
    db_unlock();
}

int datasets_ensure_default_pool(const char *name)
{
    char resolved[PATH_MAX], why[PATH_MAX + 128];
    struct ds_pool p;
    int rc;

    ds_ops_lock();
    pools_register_all();
    ds_rbd_start();
    db_lock();
    rc = ds_pool_get(name, &p);
    db_unlock();
    if (rc == -ENOENT) {
        rc = pool_create(name, NULL, resolved, sizeof(resolved), why, sizeof(why));
        if (rc < 0)
            log_error("datasets: default pool %s: %s", name, why);
        else
            log_info("datasets: created default pool %s at %s", name, resolved);
    }
    ds_ops_unlock();
    if (rc == 0)
        ds_rollback_recover();
    return rc;
}

static const struct api_field pool_rbd_fields[] = {
    {.name = "pool",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = DS_RBD_NAME_MAX - 1},
    {.name = "namespace",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = DS_RBD_NAME_MAX - 1},
    {.name = "conf",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = PATH_MAX - 1},
    {.name = "id",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = DS_RBD_NAME_MAX - 1},
    {.name = "keyring",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = PATH_MAX - 1},
};

static const struct api_field pool_create_fields[] = {
    {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED},
    {.name = "path",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = PATH_MAX - 1},
    /* blockd extension: a pool on a Ceph RBD pool instead of a directory */
    {.name = "rbd",
     .type = API_T_OBJECT,
     .flags = API_NULLABLE,
     .fields = pool_rbd_fields,
     .nfields = ARRAY_SIZE(pool_rbd_fields)},
};

/* A Ceph name or file path from the rbd object: no NUL, no control
 * characters; names also no '/' or '@'. */
static void rbd_str(struct api_call *call, json_t *rbd, const char *key, bool path, char *dst,
                    size_t len)
{
    json_t *v = json_object_get(rbd, key);
    const char *s = json_string_value(v);
    char field[64];

    dst[0] = '\0';
    if (!s)
        return;
    snprintf(field, sizeof(field), "pool.create.rbd.%s", key);
    if (strlen(s) != json_string_length(v)) {
        api_verr(call, field, EINVAL, "contains a NUL byte");
        return;
    }
    for (const char *c = s; *c; c++) {
        if ((unsigned char)*c < 0x20 || (!path && (*c == '/' || *c == '@'))) {
            api_verr(call, field, EINVAL, "invalid character in %s", path ? "path" : "name");
            return;
        }
    }
    if (path && s[0] && s[0] != '/') {
        api_verr(call, field, EINVAL, "must be an absolute path");
        return;
    }
    snprintf(dst, len, "%s", s);
}

/* pool.create with rbd: connect (bounded), check, record. */
static int pool_create_rbd(struct api_call *call, const char *name, const struct ds_rbd_spec *spec,
                           json_t **result)
{
    struct rbd_cluster *c = NULL;
    char path[DS_RBD_NAME_MAX * 2 + 8], why[512];
    int64_t id = 0;
    int rc;

    snprintf(path, sizeof(path), "rbd:%s%s%s", spec->pool, spec->ns[0] ? "/" : "", spec->ns);
    rc = ds_rbd_probe(spec, &c, why, sizeof(why));
    if (rc < 0) {
        log_warn("datasets: pool %s on %s: %s (peer %s)", name, path, why, api_call_peer(call));
        return api_error(call, -rc, "cannot create pool %s: %s", name, why);
    }
    rc = pool_insert(name, path, spec, &id);
    if (rc < 0) {
        rbd_cluster_put(c);
        if (rc == -EEXIST) {
            api_verr(call, "pool.create.rbd.pool", EEXIST,
                     "a pool named %s or using %s already exists", name, path);
            return api_invalid(call);
        }
        return api_error(call, -rc, "cannot record pool %s: %s", name, strerror(-rc));
    }
    /* before handing c over: the connector may drop it at any time after */
    log_info("datasets: created pool %s on %s (%s; peer %s)", name, path, rbd_cluster_describe(c),
             api_call_peer(call));
    ds_rbd_pool_add(id, name, spec, c);
    db_lock();
    *result = ds_pool_row(name);
    db_unlock();
    return *result ? 0 : api_error(call, EIO, "pool %s vanished", name);
}

static int m_pool_create(struct api_call *call, json_t *params, json_t **result)
{
    char resolved[PATH_MAX], why[PATH_MAX + 128];
    json_t *data, *jpath, *jrbd;
    const char *name, *path = NULL;
    struct ds_pool existing;
    struct ds_rbd_spec spec;
    int rc;

    data = api_param(params, 0); /* checked against pool_create_fields by the dispatcher */
    name = json_string_value(json_object_get(data, "name"));
    if (strlen(name) != json_string_length(json_object_get(data, "name")) ||
        name_check_pool(name, why, sizeof(why)) < 0)
        api_verr(call, "pool.create.name", EINVAL, "%s",
                 strlen(name) != json_string_length(json_object_get(data, "name"))
                     ? "name contains a NUL byte"
                     : why);
    jpath = json_object_get(data, "path");
    if (jpath && json_is_string(jpath)) {
        path = json_string_value(jpath);
        if (path[0] != '/')
            api_verr(call, "pool.create.path", EINVAL, "must be an absolute path");
        else if (strlen(path) != json_string_length(jpath))
            api_verr(call, "pool.create.path", EINVAL, "path contains a NUL byte");
    }
    jrbd = json_object_get(data, "rbd");
    if (json_is_object(jrbd)) {
        memset(&spec, 0, sizeof(spec));
        rbd_str(call, jrbd, "pool", false, spec.pool, sizeof(spec.pool));
        rbd_str(call, jrbd, "namespace", false, spec.ns, sizeof(spec.ns));
        rbd_str(call, jrbd, "conf", true, spec.conf, sizeof(spec.conf));
        rbd_str(call, jrbd, "id", false, spec.id, sizeof(spec.id));
        rbd_str(call, jrbd, "keyring", true, spec.keyring, sizeof(spec.keyring));
        if (path)
            api_verr(call, "pool.create.path", EINVAL,
                     "a pool has either a directory (path) or an RBD pool (rbd), not both");
    }
    if (api_has_verrs(call))
        return api_invalid(call);

    ds_ops_lock();
    db_lock();
    rc = ds_pool_get(name, &existing);
    db_unlock();
    if (rc == 0) {
        ds_ops_unlock();
        api_verr(call, "pool.create.name", EEXIST, "pool %s already exists", name);
        return api_invalid(call);
    }
    if (json_is_object(jrbd)) {
        rc = pool_create_rbd(call, name, &spec, result);
        ds_ops_unlock();
        return rc;
    }
    rc = pool_create(name, path, resolved, sizeof(resolved), why, sizeof(why));
    ds_ops_unlock();
    if (rc == -EEXIST || rc == -EINVAL) {
        api_verr(call, path ? "pool.create.path" : "pool.create.name", -rc, "%s", why);
        return api_invalid(call);
    }
    if (rc < 0)
        return api_error(call, -rc, "%s", why);
    log_info("datasets: created pool %s at %s (peer %s)", name, resolved, api_call_peer(call));
    db_lock();
    *result = ds_pool_row(name);
    db_unlock();
    if (*result && json_is_false(json_object_get(*result, "snapshot_o1"))) {
        static const char warn[] =
            "the filesystem has no reflink: snapshots and clones copy the volume's data "
            "(writes are not held: copy-before-write), taking time and space in proportion";
        log_warn("datasets: pool %s at %s: %s", name, resolved, warn);
        json_object_set_new(*result, "warnings", json_pack("[s]", warn));
    }
    return *result ? 0 : api_error(call, EIO, "pool %s vanished", name);
}

static int m_pool_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows;
    int rc;

    db_lock();
    rows = ds_pool_rows();
    db_unlock();
    if (!rows)
        return api_error(call, EIO, "cannot read pools");
    rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static int m_pool_get_instance(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows;
    int rc;

    db_lock();
    rows = ds_pool_rows();
    db_unlock();
    if (!rows)
        return api_error(call, EIO, "cannot read pools");
    rc = ds_get_instance(call, params, rows, result);
    json_decref(rows);
    return rc;
}

static const struct api_arg pool_create_args[] = {API_ARG_OBJECT("data", pool_create_fields, 0)};

const struct api_method ds_pool_methods[] = {
    {"pool.get_instance", NULL, "One pool by its numeric id", m_pool_get_instance, 0,
     API_ARGS(ds_get_instance_args)},
    {"pool.create", NULL,
     "Create a pool: a directory (default STATE/pools/NAME) or a Ceph RBD pool holding datasets",
     m_pool_create, 0, API_ARGS(pool_create_args)},
    {"pool.query", NULL, "List pools with their space usage", m_pool_query, 0,
     API_ARGS(ds_query_args)},
};
const size_t ds_pool_method_count = ARRAY_SIZE(ds_pool_methods);

int datasets_pool_paths(struct datasets_pool_path **out, size_t *n)
{
    struct datasets_pool_path *p = NULL;
    size_t cnt = 0;
    sqlite3_stmt *st;
    int rc = 0;
    *out = NULL;
    *n = 0;
    db_lock();
    if (db_stmt("SELECT name, path FROM pools ORDER BY name", &st) < 0) {
        db_unlock();
        return -EIO;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        struct datasets_pool_path *np = realloc(p, (cnt + 1) * sizeof(*np));
        if (!np) {
            rc = -ENOMEM;
            break;
        }
        p = np;
        snprintf(p[cnt].name, sizeof(p[cnt].name), "%s", (const char *)sqlite3_column_text(st, 0));
        snprintf(p[cnt].path, sizeof(p[cnt].path), "%s", (const char *)sqlite3_column_text(st, 1));
        cnt++;
    }
    db_stmt_done(st);
    db_unlock();
    *out = p;
    *n = cnt;
    return rc;
}
