/*
 * pool.create|query|get_instance: the API of struct ds_pool (pool_store.h
 * holds its SQL): the field table the dispatcher checks, the one decoder
 * of pool.create's params (pool_create_decode: JSON → struct
 * pool_create_req), the one encoder (pool_encode: struct ds_pool and the
 * state of its storage → the TrueNAS-shaped row), the invariants a table
 * cannot state (pool_create_check), and a handler of one shape: decode →
 * check → one transaction (pool_record) → publish (its commit; an RBD
 * pool's connection handed to the connector). Also the pools' directories:
 * their checks and creation, their registration with poolfs at start-up
 * and the default pool.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "api/fields.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsrbd.h"
#include "control/pool_rbd_store.h"
#include "control/pool_store.h"
#include "control/rbd_creds.h"
#include "core/allowdir.h"
#include "control/holdings.h"
#include "core/log.h"
#include "core/util.h"
#include "store/copy.h"

/* ---- encoder: struct → the TrueNAS-shaped row ---- */

/* What a pool's row shows beyond its record: the state of its storage,
 * read when the row is built (never stored). */
struct pool_state {
    bool rbd;
    bool online;
    uint64_t size, allocated, free;
    /* O(1) snapshots and clones: 1, 0 (they copy, store/snapshot.h), -1
     * cannot tell (null) */
    int snapshot_o1;
    struct ds_rbd_spec spec; /* rbd: its Ceph settings */
    char why[256];           /* rbd: why it is not online */
};

/* A directory pool: its filesystem's space, and whether it has reflink
 * (probed once per filesystem). */
static void pool_state_dir(const struct ds_pool *p, struct pool_state *s)
{
    struct statvfs sv;
    struct stat st;

    /* poolfs: the registered root, reached without symlinks. */
    s->online = poolfs_stat(p->path, &st) == 0 && S_ISDIR(st.st_mode) && statvfs(p->path, &sv) == 0;
    if (s->online) {
        s->size = (uint64_t)sv.f_blocks * sv.f_frsize;
        s->free = (uint64_t)sv.f_bavail * sv.f_frsize;
        s->allocated = s->size - (uint64_t)sv.f_bfree * sv.f_frsize;
    }
    int o1 =
        stat(p->path, &st) == 0 && S_ISDIR(st.st_mode) ? store_reflink_probe(p->path) : -ENOENT;
    s->snapshot_o1 = o1 < 0 ? -1 : o1 == 1;
}

/* An RBD pool: its state as the connector last saw it (never a call to
 * the cluster here) and its Ceph settings. */
static void pool_state_rbd(const struct ds_pool *p, struct pool_state *s)
{
    uint64_t avail;

    s->rbd = true;
    ds_rbd_spec_get(p->id, &s->spec);
    ds_rbd_status(p->id, &s->online, s->why, sizeof(s->why), &s->size, &avail);
    s->allocated = s->size - avail;
    s->free = avail;
    s->snapshot_o1 = 1;
}

/* The state of pool p's storage into *s. DB locked (an RBD pool's
 * settings are read from it). */
static void pool_state_read(const struct ds_pool *p, struct pool_state *s)
{
    memset(s, 0, sizeof(*s));
    if (ds_pool_is_rbd(p))
        pool_state_rbd(p, s);
    else
        pool_state_dir(p, s);
}

static const char *pool_status_code(const struct pool_state *s)
{
    if (s->online)
        return "";
    return s->rbd ? "RBD_CLUSTER_UNAVAILABLE" : "POOL_DIRECTORY_MISSING";
}

/* properties.{size, allocated, free, capacity} as ZFS property objects
 * ({parsed, rawvalue, value, source}): fenio/tns-csi reads a pool's
 * capacity from their parsed values. A new reference, or NULL. */
static json_t *pool_properties(const struct pool_state *s)
{
    /* in double: allocated * 100 overflows 64 bits past 184 PB */
    double used = s->size ? (double)s->allocated * 100.0 / (double)s->size + 0.5 : 0;
    unsigned pct = used > 100 ? 100 : (unsigned)used;
    char raw[16], val[16];

    snprintf(raw, sizeof(raw), "%u", pct);
    snprintf(val, sizeof(val), "%u%%", pct);
    return json_pack("{s:o, s:o, s:o, s:o}", "size", ds_prop_size(s->size, "NONE"), "allocated",
                     ds_prop_size(s->allocated, "NONE"), "free", ds_prop_size(s->free, "NONE"),
                     "capacity", ds_prop(json_integer(pct), raw, val, "NONE"));
}

/* The row pool.* answers with (keys in TrueNAS's order, then blockd's:
 * properties, snapshot_o1, and rbd for an RBD pool). A new reference, or
 * NULL. */
static json_t *pool_encode(const struct ds_pool *p, const struct pool_state *s)
{
    char guid[32];
    json_t *row;

    snprintf(guid, sizeof(guid), "%lld", (long long)p->id);
    row = json_pack("{s:I, s:s, s:s, s:s, s:s, s:b, s:b, s:s, s:o, s:I, s:I, s:I, s:I, s:s, "
                    "s:b, s:n, s:I, s:o}",
                    "id", (json_int_t)p->id, "name", p->name, "guid", guid, "path", p->path,
                    "status", s->online ? "ONLINE" : "UNAVAIL", "healthy", s->online, "warning",
                    false, "status_code", pool_status_code(s), "status_detail",
                    s->rbd && !s->online ? json_string(s->why) : json_null(), "size",
                    (json_int_t)s->size, "allocated", (json_int_t)s->allocated, "free",
                    (json_int_t)s->free, "freeing", (json_int_t)0, "fragmentation", "0",
                    "is_upgraded", true, "scan", "created", (json_int_t)p->created, "snapshot_o1",
                    s->snapshot_o1 < 0 ? json_null() : json_boolean(s->snapshot_o1 == 1));
    if (row && json_object_set_new(row, "properties", pool_properties(s)) < 0) {
        json_decref(row);
        return NULL;
    }
    if (row && s->rbd &&
        json_object_set_new(row, "rbd",
                            json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:b}", "pool", s->spec.pool,
                                      "namespace", s->spec.ns, "mon_host", s->spec.mon_host, "conf",
                                      s->spec.conf, "id", s->spec.id, "keyring", s->spec.keyring,
                                      "key_set", s->spec.key[0] != '\0')) < 0) {
        json_decref(row);
        row = NULL;
    }
    return row;
}

/* Every pool encoded, by id: a new array, or NULL. DB locked. */
static json_t *pool_rows(void)
{
    struct ds_pool *pools;
    struct pool_state s;
    size_t n;
    json_t *rows;

    if (ds_pool_list(false, &pools, &n) < 0)
        return NULL;
    rows = json_array();
    for (size_t i = 0; rows && i < n; i++) {
        pool_state_read(&pools[i], &s);
        json_array_append_new(rows, pool_encode(&pools[i], &s));
        explicit_bzero(s.spec.key, sizeof(s.spec.key));
    }
    free(pools);
    return rows;
}

/* ---- the one transaction ---- */

/* The rows of a new pool p: the pool, its root dataset (a FILESYSTEM
 * named like the pool) and an RBD pool's Ceph settings. */
static int pool_record_rows(struct cfg_tx *tx, struct ds_pool *p, const struct ds_rbd_spec *rbd)
{
    struct ds_row root = {.type = DS_FILESYSTEM, .sparse = true};
    int rc = ds_pool_insert(p);

    if (rc < 0)
        return rc;
    snprintf(root.name, sizeof(root.name), "%s", p->name);
    root.pool_id = p->id;
    cfg_tx_changed(tx, CFG_POOL, p->id, CFG_CREATED);
    rc = ds_dataset_insert(&root);
    if (rc == 0 && rbd)
        rc = ds_rbd_spec_insert(p->id, rbd);
    return rc;
}

/* Record the new pool p (name and path set; p->id and p->created are
 * filled) in one transaction, published (CFG_POOL created) on commit. The
 * DB lock is held around it, so the commit itself syncs (cfgtx.h).
 * ds_ops_lock held. 0 or -errno; -EEXIST for a duplicate. */
static int pool_record(struct ds_pool *p, const struct ds_rbd_spec *rbd)
{
    struct cfg_tx tx;
    int rc;

    db_lock();
    rc = cfg_tx_begin(&tx);
    if (rc == 0) {
        rc = pool_record_rows(&tx, p, rbd);
        if (rc == 0)
            rc = cfg_tx_commit(&tx);
        else
            cfg_tx_abort(&tx);
    }
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
    struct ds_pool *pools;
    size_t n;
    int rc;

    db_lock();
    rc = ds_pool_list(false, &pools, &n);
    db_unlock();
    if (rc < 0) {
        snprintf(why, whylen, "cannot read pools");
        return -EIO;
    }
    for (size_t i = 0; i < n; i++) {
        const char *p = pools[i].path;

        if (path_within(p, path) || path_within(path, p)) {
            str_printf(why, whylen, "directory %s overlaps pool %s at %s", path, pools[i].name, p);
            rc = strcmp(p, path) == 0 ? -EEXIST : -EINVAL;
            break;
        }
    }
    free(pools);
    return rc;
}

/*
 * Host paths come from the operator: a pool directory lies below
 * STATE/pools or below a directory given with blockd --allow-dir (not the
 * state directory's other folders, which hold the DB and sockets). An API
 * client can therefore not turn /var/spool/cron or /home into a pool and
 * write files there. 0, or -EINVAL with the reason in why.
 */
static int pool_dir_allowed(const char *path, char *why, size_t whylen)
{
    char pools[PATH_MAX + 8], list[1024];

    snprintf(pools, sizeof(pools), "%s/pools", ds_state_dir);
    if (path_within(pools, path) && strcmp(pools, path) != 0)
        return 0;
    if (!path_within(ds_state_dir, path) && allowdir_below(path, ds_state_dir))
        return 0;
    allowdir_list(list, sizeof(list));
    str_printf(why, whylen,
               "%s: a pool directory must lie below %s (omit path for %s/NAME) or below a "
               "directory the operator allows with blockd --allow-dir (allowed: %s)",
               path, pools, pools, list);
    return -EINVAL;
}

/* A new pool takes a new or empty directory: files already there were not
 * made by blockd and must never be served or overwritten as volumes. The
 * path was checked canonical (poolfs_root_check), and is opened without
 * following a symlink. 0 (missing or empty), or -errno with why. */
static int pool_dir_empty(const char *path, char *why, size_t whylen)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct dirent *d;
    DIR *dir;
    int rc = 0;

    if (fd < 0 && errno == ENOENT)
        return 0;
    if (fd < 0 || !(dir = fdopendir(fd))) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        str_printf(why, whylen, "cannot read directory %s: %s", path, strerror(-rc));
        return rc == -ELOOP || rc == -ENOTDIR ? -EINVAL : rc;
    }
    while ((d = readdir(dir))) {
        if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0) {
            str_printf(why, whylen,
                       "directory %s is not empty (it holds %s): a pool takes a new or empty "
                       "directory",
                       path, d->d_name);
            rc = -EINVAL;
            break;
        }
    }
    closedir(dir);
    return rc;
}

/*
 * A directory pool: check the path (poolfs_root_check: absolute,
 * canonical, no symlink, not a system or state directory, not a pseudo
 * filesystem), create the directory without following symlinks, check
 * again now that it exists, register it with poolfs, record it
 * (pool_record). *p is the stored pool; why gets a message on failure.
 * ds_ops_lock held.
 */
static int pool_create(const char *name, const char *path_in, struct ds_pool *p, char *why,
                       size_t whylen)
{
    char path[PATH_MAX];
    int rc;

    memset(p, 0, sizeof(*p));
    if (path_in)
        snprintf(path, sizeof(path), "%s", path_in);
    else if (snprintf(path, sizeof(path), "%s/pools/%s", ds_state_dir, name) >= (int)sizeof(path))
        return -ENAMETOOLONG;
    /* Before mkdir too, so a refused path leaves no directory behind. */
    rc = poolfs_root_check(path, ds_state_dir, why, whylen);
    if (rc == 0)
        rc = pool_dir_allowed(path, why, whylen);
    if (rc == 0)
        rc = pool_dir_empty(path, why, whylen);
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
    snprintf(p->name, sizeof(p->name), "%s", name);
    snprintf(p->path, sizeof(p->path), "%s", path);
    rc = poolfs_root_add(p->path);
    if (rc < 0) {
        snprintf(why, whylen, "cannot open pool directory %s: %s", p->path, strerror(-rc));
        return rc == -EEXIST ? -EINVAL : rc;
    }
    rc = pool_record(p, NULL);
    if (rc < 0)
        poolfs_root_remove(p->path);
    if (rc == -EEXIST)
        snprintf(why, whylen, "a pool named %s or using directory %s already exists", name,
                 p->path);
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
    struct ds_pool *pools;
    size_t count;

    db_lock();
    int err = ds_pool_list(false, &pools, &count);
    db_unlock();
    if (err < 0)
        return;
    for (size_t i = 0; i < count; i++) {
        const char *n = pools[i].name;
        const char *p = pools[i].path;

        if (strncmp(p, "rbd:", 4) == 0)
            continue; /* no directory: ds_rbd_start connects it */
        int rc = poolfs_root_check(p, ds_state_dir, why, sizeof(why));

        /* A pool an older version let a client place anywhere is not
         * opened: the operator moves it or allows its parent. */
        if (rc == 0 || rc == -ENOENT) {
            int arc = pool_dir_allowed(p, why, sizeof(why));
            rc = arc < 0 ? arc : rc;
        }
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
    free(pools);
}

int datasets_ensure_default_pool(const char *name)
{
    char why[PATH_MAX + 128];
    struct ds_pool p;
    int rc;

    ds_ops_lock();
    pools_register_all();
    ds_rbd_start();
    db_lock();
    rc = ds_pool_get(name, &p);
    db_unlock();
    if (rc == -ENOENT) {
        rc = pool_create(name, NULL, &p, why, sizeof(why));
        if (rc < 0)
            log_error("datasets: default pool %s: %s", name, why);
        else
            log_info("datasets: created default pool %s at %s", name, p.path);
    }
    ds_ops_unlock();
    if (rc == 0) {
        ds_rollback_recover();
        /* a clone deleted just before a stop leaves its deferred origin */
        ds_snapshot_reap_deferred(true, "start-up");
    }
    return rc;
}

#define RBD_NAME(nm, member, fl)                                                                   \
    {                                                                                              \
        .name = (nm), .type = API_T_STRING, .flags = (fl) | API_RANGE, .min = (fl) ? 1 : 0,        \
        API_AT_CHARS(struct ds_rbd_spec, member)                                                   \
    }
/* rbd: its settings decode straight into the spec's buffers ("" for absent
 * or null); each field's length bound is its buffer's. */
static const struct api_field pool_rbd_fields[] = {
    RBD_NAME("pool", pool, API_REQUIRED),
    RBD_NAME("namespace", ns, API_NULLABLE),
    RBD_NAME("conf", conf, API_NULLABLE),
    RBD_NAME("id", id, API_NULLABLE),
    RBD_NAME("keyring", keyring, API_NULLABLE),
    /* the cluster as data: no file at all */
    RBD_NAME("mon_host", mon_host, API_NULLABLE),
    RBD_NAME("key", key, API_NULLABLE),
};
#undef RBD_NAME

/* ---- decoder: pool.create's checked params → struct ---- */

/* pool.create's params as C sees them (owned: pool_create_req_clear). */
struct pool_create_req {
    char *name;
    char *path;              /* NULL (absent or null): STATE/pools/NAME */
    bool rbd;                /* an RBD pool ("rbd" is an object) */
    struct ds_rbd_spec spec; /* rbd: its settings, "" for absent or null */
};

static const struct api_field pool_create_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED,
     API_AT(struct pool_create_req, name, api_codec_str)},
    {.name = "path",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = PATH_MAX - 1,
     API_AT(struct pool_create_req, path, api_codec_str_null)},
    /* blockd extension: a pool on a Ceph RBD pool instead of a directory */
    {.name = "rbd",
     .type = API_T_OBJECT,
     .flags = API_NULLABLE,
     .fields = pool_rbd_fields,
     .nfields = ARRAY_SIZE(pool_rbd_fields),
     API_AT(struct pool_create_req, spec, api_codec_object)},
};

/* The one decoder: the field table over data (checked against it by the
 * dispatcher: types, lengths that fit the spec's buffers). 0 or -ENOMEM. */
static int pool_create_decode(json_t *data, struct pool_create_req *req)
{
    memset(req, 0, sizeof(*req));
    req->rbd = json_is_object(json_object_get(data, "rbd"));
    return api_fields_decode(pool_create_fields, ARRAY_SIZE(pool_create_fields), data, req);
}

static void pool_create_req_clear(struct pool_create_req *req)
{
    api_fields_clear(pool_create_fields, ARRAY_SIZE(pool_create_fields), req);
    explicit_bzero(req->spec.key, sizeof(req->spec.key));
}

/* ---- invariants ---- */

/* A Ceph name or file path of the rbd object: no control characters;
 * names also no '/' or '@'; a path is absolute. */
static void rbd_str_check(struct api_call *call, const char *key, const char *s, bool path)
{
    char field[64];

    snprintf(field, sizeof(field), "pool.create.rbd.%s", key);
    for (const char *c = s; *c; c++) {
        if ((unsigned char)*c < 0x20 || (!path && (*c == '/' || *c == '@'))) {
            api_verr(call, field, EINVAL, "invalid character in %s", path ? "path" : "name");
            return;
        }
    }
    if (path && s[0] && s[0] != '/') {
        api_verr(call, field, EINVAL, "must be an absolute path");
    } else if (path && s[0]) {
        char why[PATH_MAX + 256];

        /* Files librados would otherwise read as root: config/rbd_creds.h */
        if (rbd_creds_path_check(s, why, sizeof(why)) < 0) {
            api_verr(call, field, EACCES, "%s", why);
            log_warn("datasets: pool.create refused %s %s (peer %s): %s", key, s,
                     api_call_peer(call), why);
        }
    }
}

/* mon_host and key: data with a syntax of their own. */
static void rbd_data_check(struct api_call *call, const struct ds_rbd_spec *spec)
{
    char why[256];

    if (rbd_creds_mon_host_check(spec->mon_host, why, sizeof(why)) < 0)
        api_verr(call, "pool.create.rbd.mon_host", EINVAL, "%s", why);
    if (rbd_creds_key_check(spec->key, why, sizeof(why)) < 0)
        api_verr(call, "pool.create.rbd.key", EINVAL, "%s", why);
}

/* What the field table cannot state, in the order the errors are
 * reported. 0, or -1 with field errors on call. */
static int pool_create_check(struct api_call *call, const struct pool_create_req *req)
{
    char why[PATH_MAX + 128];

    if (name_check_pool(req->name, why, sizeof(why)) < 0)
        api_verr(call, "pool.create.name", EINVAL, "%s", why);
    if (req->path && req->path[0] != '/')
        api_verr(call, "pool.create.path", EINVAL, "must be an absolute path");
    if (req->rbd) {
        rbd_str_check(call, "pool", req->spec.pool, false);
        rbd_str_check(call, "namespace", req->spec.ns, false);
        rbd_str_check(call, "conf", req->spec.conf, true);
        rbd_str_check(call, "id", req->spec.id, false);
        rbd_str_check(call, "keyring", req->spec.keyring, true);
        rbd_data_check(call, &req->spec);
        if (req->path)
            api_verr(call, "pool.create.path", EINVAL,
                     "a pool has either a directory (path) or an RBD pool (rbd), not both");
    }
    return api_has_verrs(call) ? -1 : 0;
}

/* The name is free and the pool cap not reached. ds_ops_lock held. 0 or
 * -1 (error set). */
static int pool_check_free(struct api_call *call, const char *name)
{
    struct ds_pool existing;
    int rc;

    db_lock();
    rc = ds_pool_get(name, &existing);
    int cap =
        rc < 0 ? holdings_check(call, LIMIT_POOLS, NULL, "SELECT COUNT(*) FROM pools", "") : 0;
    db_unlock();
    if (cap < 0)
        return -1;
    if (rc < 0)
        return 0;
    api_verr(call, "pool.create.name", EEXIST, "pool %s already exists", name);
    return api_invalid(call);
}

/* ---- handlers: decode → check → one transaction → publish ---- */

/* The stored pool name encoded as the call's result; a pool whose
 * snapshots and clones copy (no reflink) says so in "warnings". 0 or -1
 * (error set). */
static int pool_result(struct api_call *call, const char *name, json_t **result)
{
    static const char warn[] =
        "the filesystem has no reflink: snapshots and clones copy the volume's data "
        "(writes are not held: copy-before-write), taking time and space in proportion";
    struct ds_pool p = {0};
    struct pool_state s = {.snapshot_o1 = -1};

    *result = NULL;
    db_lock();
    if (ds_pool_get(name, &p) == 0) {
        pool_state_read(&p, &s);
        *result = pool_encode(&p, &s);
        explicit_bzero(s.spec.key, sizeof(s.spec.key));
    }
    db_unlock();
    if (!*result)
        return api_error(call, EIO, "pool %s vanished", name);
    if (s.snapshot_o1 == 0) {
        log_warn("datasets: pool %s at %s: %s", name, p.path, warn);
        json_object_set_new(*result, "warnings", json_pack("[s]", warn));
    }
    return 0;
}

/* pool.create with rbd: connect (bounded), record, hand the connection
 * to the connector. ds_ops_lock held. */
static int pool_create_rbd(struct api_call *call, const struct pool_create_req *req,
                           json_t **result)
{
    struct rbd_cluster *c = NULL;
    const struct ds_rbd_spec *spec = &req->spec;
    struct ds_pool p = {0};
    char why[512];
    int rc;

    snprintf(p.name, sizeof(p.name), "%s", req->name);
    snprintf(p.path, sizeof(p.path), "rbd:%s%s%s", spec->pool, spec->ns[0] ? "/" : "", spec->ns);
    rc = ds_rbd_probe(spec, &c, why, sizeof(why));
    if (rc < 0) {
        log_warn("datasets: pool %s on %s: %s (peer %s)", p.name, p.path, why, api_call_peer(call));
        return api_error(call, -rc, "cannot create pool %s: %s", p.name, why);
    }
    rc = pool_record(&p, spec);
    if (rc < 0) {
        rbd_cluster_put(c);
        if (rc == -EEXIST) {
            api_verr(call, "pool.create.rbd.pool", EEXIST,
                     "a pool named %s or using %s already exists", p.name, p.path);
            return api_invalid(call);
        }
        return api_error(call, -rc, "cannot record pool %s: %s", p.name, strerror(-rc));
    }
    /* before handing c over: the connector may drop it at any time after */
    log_info("datasets: created pool %s on %s (%s; peer %s)", p.name, p.path,
             rbd_cluster_describe(c), api_call_peer(call));
    ds_rbd_pool_add(p.id, p.name, spec, c);
    return pool_result(call, p.name, result);
}

/* pool.create of a directory pool. ds_ops_lock held. */
static int pool_create_dir(struct api_call *call, const struct pool_create_req *req,
                           json_t **result)
{
    char why[PATH_MAX + 128];
    struct ds_pool p;
    int rc = pool_create(req->name, req->path, &p, why, sizeof(why));

    if (rc == -EEXIST || rc == -EINVAL) {
        api_verr(call, req->path ? "pool.create.path" : "pool.create.name", -rc, "%s", why);
        return api_invalid(call);
    }
    if (rc < 0)
        return api_error(call, -rc, "%s", why);
    log_info("datasets: created pool %s at %s (peer %s)", p.name, p.path, api_call_peer(call));
    return pool_result(call, p.name, result);
}

static int m_pool_create(struct api_call *call, json_t *params, json_t **result)
{
    struct pool_create_req req;
    int rc;

    if (pool_create_decode(api_param(params, 0), &req) < 0) {
        pool_create_req_clear(&req);
        return api_error(call, ENOMEM, "out of memory");
    }
    if (pool_create_check(call, &req) < 0) {
        pool_create_req_clear(&req);
        return api_invalid(call);
    }
    ds_ops_lock();
    rc = pool_check_free(call, req.name);
    if (rc == 0)
        rc = req.rbd ? pool_create_rbd(call, &req, result) : pool_create_dir(call, &req, result);
    ds_ops_unlock();
    pool_create_req_clear(&req);
    return rc;
}

/* pool.query and pool.get_instance: the same rows, filtered (one: by id). */
static int pool_answer(struct api_call *call, json_t *params, json_t **result, bool one)
{
    json_t *rows;
    int rc;

    db_lock();
    rows = pool_rows();
    db_unlock();
    if (!rows)
        return api_error(call, EIO, "cannot read pools");
    rc = one ? ds_get_instance(call, params, rows, result) : api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static int m_pool_query(struct api_call *call, json_t *params, json_t **result)
{
    return pool_answer(call, params, result, false);
}

static int m_pool_get_instance(struct api_call *call, json_t *params, json_t **result)
{
    return api_get_instance(call, params, m_pool_query, "Pool", result);
}

static const struct api_arg pool_create_args[] = {API_ARG_OBJECT("data", pool_create_fields, 0)};

const struct api_method ds_pool_methods[] = {
    {"pool.get_instance", NULL, "One pool by its numeric id", m_pool_get_instance, API_READ,
     API_ARGS(ds_get_instance_args)},
    {"pool.create", NULL,
     "Create a pool: a directory (default STATE/pools/NAME) or a Ceph RBD pool holding datasets",
     m_pool_create, API_ADMIN, API_ARGS(pool_create_args)},
    {"pool.query", NULL, "List pools with their space usage", m_pool_query, API_READ,
     API_ARGS(ds_query_args)},
};
const size_t ds_pool_method_count = ARRAY_SIZE(ds_pool_methods);

int datasets_pool_paths(struct datasets_pool_path **out, size_t *n)
{
    struct datasets_pool_path *v = NULL;
    struct ds_pool *pools;
    size_t count;
    int rc;

    *out = NULL;
    *n = 0;
    db_lock();
    rc = ds_pool_list(true, &pools, &count);
    db_unlock();
    if (rc < 0)
        return rc == -ENOMEM ? rc : -EIO;
    if (count && !(v = calloc(count, sizeof(*v))))
        rc = -ENOMEM;
    for (size_t i = 0; v && i < count; i++) {
        snprintf(v[i].name, sizeof(v[i].name), "%.*s", (int)sizeof(v[i].name) - 1, pools[i].name);
        snprintf(v[i].path, sizeof(v[i].path), "%s", pools[i].path);
    }
    free(pools);
    *out = v;
    *n = v ? count : 0;
    return rc;
}
