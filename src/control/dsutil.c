/* Row access, paths and property objects shared by the dataset methods. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsprops.h"
#include "control/dsrbd.h"
#include "core/log.h"
#include "core/util.h"

char ds_state_dir[PATH_MAX];

static pthread_mutex_t ds_ops_mutex = PTHREAD_MUTEX_INITIALIZER;

void ds_ops_lock(void)
{
    pthread_mutex_lock(&ds_ops_mutex);
    ds_backend_why[0] = '\0'; /* a reason left by an earlier operation */
}

void ds_ops_unlock(void)
{
    pthread_mutex_unlock(&ds_ops_mutex);
}

/* p is d's parent: "p/" starts d's name and the rest has no '/'. */
#define DS_PARENT_SQL                                                                              \
    "substr(d.name, 1, length(p.name) + 1) = p.name || '/'"                                        \
    " AND instr(substr(d.name, length(p.name) + 2), '/') = 0"

const char ds_schema_sql[] =
    "CREATE TABLE IF NOT EXISTS pools ("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL UNIQUE,"
    " path TEXT NOT NULL UNIQUE,"
    " created INTEGER NOT NULL);"
    "CREATE TABLE IF NOT EXISTS datasets ("
    " id INTEGER PRIMARY KEY,"
    " name TEXT NOT NULL UNIQUE,"
    " pool_id INTEGER NOT NULL REFERENCES pools(id),"
    " type TEXT NOT NULL CHECK (type IN ('FILESYSTEM', 'VOLUME')),"
    " volsize INTEGER NOT NULL DEFAULT 0,"
    " volblocksize INTEGER NOT NULL DEFAULT 0,"
    " sparse INTEGER NOT NULL DEFAULT 1,"
    " sync TEXT NOT NULL DEFAULT 'STANDARD' CHECK (sync IN ('STANDARD', 'ALWAYS', 'DISABLED')),"
    " readonly INTEGER NOT NULL DEFAULT 0,"
    " backend TEXT NOT NULL DEFAULT 'file' CHECK (backend IN ('file', 'memory')),"
    " latency_us INTEGER NOT NULL DEFAULT 0,"
    " origin_id INTEGER REFERENCES snapshots(id) DEFERRABLE INITIALLY DEFERRED,"
    " comments TEXT NOT NULL DEFAULT '',"
    " created INTEGER NOT NULL,"
    /* A rollback that had started when the daemon stopped: redone at start. */
    " rollback_pending INTEGER REFERENCES snapshots(id) DEFERRABLE INITIALLY DEFERRED);"
    "CREATE TABLE IF NOT EXISTS snapshots ("
    " id INTEGER PRIMARY KEY,"
    " dataset_id INTEGER NOT NULL REFERENCES datasets(id),"
    " name TEXT NOT NULL,"
    " volsize INTEGER NOT NULL,"
    " created INTEGER NOT NULL,"
    " UNIQUE (dataset_id, name));"
    /* A snapshot's user properties ("ns:name" keys) and its deferred
     * destroy mark (name "defer_destroy", which has no ':'): by id, so a
     * rename or a promote carries them. */
    "CREATE TABLE IF NOT EXISTS snapshot_props ("
    " snapshot_id INTEGER NOT NULL REFERENCES snapshots(id) ON DELETE CASCADE,"
    " name TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY (snapshot_id, name));"
    /* managedby and ZFS-style user properties ("ns:name" keys). */
    "CREATE TABLE IF NOT EXISTS dataset_props ("
    " dataset_id INTEGER NOT NULL REFERENCES datasets(id) ON DELETE CASCADE,"
    " name TEXT NOT NULL,"
    " value TEXT NOT NULL,"
    " PRIMARY KEY (dataset_id, name));"
    /* a snapshot row's clones, without scanning every dataset */
    "CREATE INDEX IF NOT EXISTS datasets_origin ON datasets(origin_id);"
    /* Once, for databases from before sync/readonly were inherited: every
     * value that differs from the parent's was set on the dataset itself,
     * so record it as local (dataset_props). */
    "CREATE TABLE IF NOT EXISTS ds_migrations (name TEXT PRIMARY KEY);"
    "INSERT OR IGNORE INTO dataset_props (dataset_id, name, value)"
    " SELECT d.id, 'sync', lower(d.sync) FROM datasets d"
    " WHERE (SELECT COUNT(*) FROM ds_migrations WHERE name = 'local_sync_readonly') = 0"
    " AND d.sync <> IFNULL((SELECT p.sync FROM datasets p WHERE " DS_PARENT_SQL "), 'STANDARD');"
    "INSERT OR IGNORE INTO dataset_props (dataset_id, name, value)"
    " SELECT d.id, 'readonly', CASE d.readonly WHEN 0 THEN 'off' ELSE 'on' END FROM datasets d"
    " WHERE (SELECT COUNT(*) FROM ds_migrations WHERE name = 'local_sync_readonly') = 0"
    " AND d.readonly <> IFNULL((SELECT p.readonly FROM datasets p WHERE " DS_PARENT_SQL "), 0);"
    "INSERT OR IGNORE INTO ds_migrations (name) VALUES ('local_sync_readonly');"
    /* RBD pools (added after the first release: a table of its own, so
     * databases from before gain it on open and their pools stay file
     * pools). pools.path of an RBD pool is "rbd:POOL[/NAMESPACE]". */
    "CREATE TABLE IF NOT EXISTS pool_rbd ("
    " pool_id INTEGER PRIMARY KEY REFERENCES pools(id) ON DELETE CASCADE,"
    " rbd_pool TEXT NOT NULL,"
    " namespace TEXT NOT NULL DEFAULT '',"
    " conf TEXT NOT NULL DEFAULT '',"
    " ceph_id TEXT NOT NULL DEFAULT '',"
    " keyring TEXT NOT NULL DEFAULT '');"
    /* An RBD pool's cluster as data (added later: a table of its own, so
     * older databases gain it and their pools keep conf/keyring). The key
     * is sealed (config/pwenc.h). */
    "CREATE TABLE IF NOT EXISTS pool_rbd_auth ("
    " pool_id INTEGER PRIMARY KEY REFERENCES pools(id) ON DELETE CASCADE,"
    " mon_host TEXT NOT NULL DEFAULT '',"
    " key TEXT NOT NULL DEFAULT '');";

void ds_pool_of(const char *name, char *pool, size_t len)
{
    size_t n = strcspn(name, "/@");

    snprintf(pool, len, "%.*s", (int)n, name);
}

int ds_path(const struct ds_pool *pool, const char *name, const char *snap, char *buf, size_t len)
{
    size_t plen = strlen(pool->name);
    const char *rest = name;
    int n;

    if (strncmp(name, pool->name, plen) == 0 && (name[plen] == '/' || name[plen] == '\0'))
        rest = name[plen] == '/' ? name + plen + 1 : name + plen;
    n = snprintf(buf, len, "%s%s%s%s%s", pool->path, *rest ? "/" : "", rest, snap ? "@" : "",
                 snap ? snap : "");
    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    return 0;
}

int ds_create_ancestors(const struct ds_pool *pool, const char *name)
{
    char anc[DS_NAME_BUF];
    size_t plen = strlen(pool->name);
    const char *p;
    int rc;

    /* Walk "pool/a", "pool/a/b", … up to (not including) name itself. */
    for (p = strchr(name + plen + 1, '/'); p; p = strchr(p + 1, '/')) {
        struct ds_row row;

        snprintf(anc, sizeof(anc), "%.*s", (int)(p - name), name);
        rc = ds_dataset_get(anc, &row);
        if (rc == 0) {
            if (row.type == DS_VOLUME)
                return -ENOTDIR;
            continue;
        }
        if (rc != -ENOENT)
            return rc;
        memset(&row, 0, sizeof(row));
        snprintf(row.name, sizeof(row.name), "%s", anc);
        row.pool_id = pool->id;
        row.type = DS_FILESYSTEM;
        row.sparse = true;
        ds_props_parent_effective(anc, &row.sync, &row.readonly); /* inherited */
        rc = ds_dataset_insert(&row);
        if (rc < 0)
            return rc;
        rc = ds_backend_of(pool)->filesystem_create(pool, anc);
        if (rc < 0 && rc != -EEXIST)
            return rc;
    }
    return 0;
}

int ds_mkdir_parents(const char *path)
{
    return poolfs_mkdir_parents(path);
}

json_t *ds_prop(json_t *parsed, const char *rawvalue, const char *value, const char *source)
{
    return json_pack("{s:o, s:s, s:s, s:s}", "parsed", parsed ? parsed : json_null(), "rawvalue",
                     rawvalue, "value", value, "source", source);
}

void ds_nicenum(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "BKMGTPE";
    unsigned u = 0;
    uint64_t div = 1;

    while (u + 1 < sizeof(units) - 1 && v >= div * 1024) {
        div *= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu", (unsigned long long)v);
    else if (v % div == 0)
        snprintf(buf, len, "%llu%c", (unsigned long long)(v / div), units[u]);
    else
        snprintf(buf, len, "%.2f%c", (double)v / (double)div, units[u]);
}

json_t *ds_prop_size(uint64_t v, const char *source)
{
    char raw[32], val[32];

    snprintf(raw, sizeof(raw), "%llu", (unsigned long long)v);
    ds_nicenum(v, val, sizeof(val));
    return ds_prop(json_integer((json_int_t)v), raw, val, source);
}

uint32_t ds_volblocksize_parse(const char *s)
{
    static const struct {
        const char *name;
        uint32_t bytes;
    } sizes[] = {
        {"512", 512}, {"512B", 512},  {"1K", 1024},   {"2K", 2048},   {"4K", 4096},
        {"8K", 8192}, {"16K", 16384}, {"32K", 32768}, {"64K", 65536}, {"128K", 131072},
    };

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        if (strcmp(s, sizes[i].name) == 0)
            return sizes[i].bytes;
    return 0;
}

int ds_api_errno(struct api_call *call, int err, const char *what, const char *name)
{
    if (err < 0)
        err = -err;
    if (ds_backend_why[0]) {
        /* the backend said why (an RBD pool UNAVAIL, sparse: false, …) */
        int rc = api_error(call, err, "%s %s: %s", what, name, ds_backend_why);
        ds_backend_why[0] = '\0';
        return rc;
    }
    /* the words both TrueNAS CSI drivers look for besides the errno name */
    if (err == ENOSPC || err == EDQUOT)
        return api_error(call, err, "%s %s: insufficient space (%s)", what, name, strerror(err));
    if (err == ENOENT)
        return api_error(call, err, "%s %s: it does not exist (%s)", what, name, strerror(err));
    return api_error(call, err, "%s %s: %s", what, name, strerror(err));
}

/* The get_instance id: any JSON value (it is compared with the rows' ids),
 * but not absent or null. */
static int id_present_check(struct api_call *call, json_t *id)
{
    char field[128];

    if (id && !json_is_null(id))
        return 0;
    snprintf(field, sizeof(field), "%s.id", api_call_method(call));
    api_verr(call, field, EINVAL, "Field required");
    return -1;
}

const struct api_arg ds_get_instance_args[2] = {
    {.name = "id", .type = API_T_ANY, .check = id_present_check},
    {.name = "options", .type = API_T_OBJECT, .flags = API_ARG_OPTIONAL}};
const struct api_arg ds_query_args[2] = {API_ARG_QUERY};

int ds_get_instance(struct api_call *call, json_t *params, json_t *rows, json_t **result)
{
    json_t *id = api_param(params, 0), *row; /* ds_get_instance_args */
    size_t i;

    if (api_param(params, 1)) {
        /* query options (select, ...): the generic query over these rows */
        json_t *q =
            json_pack("[[[s, s, O]], O]", "id", "=", id ? id : json_null(), api_param(params, 1));
        json_t *one = NULL;
        int rc = q ? api_query(call, rows, q, &one) : api_error(call, ENOMEM, "out of memory");
        json_decref(q);
        if (rc == 0 && json_array_size(one) > 0) {
            *result = json_incref(json_array_get(one, 0));
            json_decref(one);
            return 0;
        }
        json_decref(one);
        if (rc < 0)
            return -1;
        rows = NULL; /* no match: the not-found error below */
    }

    json_array_foreach(rows, i, row)
    {
        if (json_equal(json_object_get(row, "id"), id)) {
            *result = json_incref(row);
            return 0;
        }
    }
    if (json_is_string(id))
        return api_error(call, ENOENT, "%s does not exist", json_string_value(id));
    return api_error(call, ENOENT, "Object with this id does not exist");
}

const char *ds_str_or(json_t *obj, const char *key, const char *def)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : def;
}

bool ds_bool_or(json_t *obj, const char *key, bool def)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static const struct api_field user_prop_update_fields[] = {
    API_FIELD_STRING("key", API_REQUIRED, 3, DS_USER_PROP_KEY_MAX),
    API_FIELD_STRING("value", 0, 0, DS_USER_PROP_VALUE_MAX),
    {.name = "remove", .type = API_T_BOOL},
};
const struct api_field ds_user_prop_update_item = {.type = API_T_OBJECT,
                                                   .fields = user_prop_update_fields,
                                                   .nfields = ARRAY_SIZE(user_prop_update_fields)};

/* managedby: "INHERIT" drops the dataset's own value. */
static int managedby_decode(const struct api_field *f, json_t *v, void *field)
{
    struct ds_managedby *m = field;
    const char *s = json_is_string(v) ? json_string_value(v) : "";

    (void)f;
    m->given = true;
    m->inherit = strcmp(s, "INHERIT") == 0;
    snprintf(m->value, sizeof(m->value), "%s", s);
    return 0;
}

static json_t *managedby_encode(const struct api_field *f, const void *field)
{
    const struct ds_managedby *m = field;

    (void)f;
    return json_string(m->inherit ? "INHERIT" : m->value);
}

const struct api_codec ds_codec_managedby = {managedby_decode, managedby_encode, NULL};

/* A copy of the JSON string v with all its bytes (a NUL inside stays, so
 * that the check can refuse it); *len its length. NULL if v is not a
 * string (*len 0) or on ENOMEM (*nomem). */
static char *string_copy(json_t *v, size_t *len, bool *nomem)
{
    char *s;

    *len = 0;
    if (!json_is_string(v))
        return NULL;
    *len = json_string_length(v);
    s = malloc(*len + 1);
    if (!s) {
        *nomem = true;
        return NULL;
    }
    memcpy(s, json_string_value(v), *len);
    s[*len] = '\0';
    return s;
}

int ds_user_props_decode(json_t *list, struct ds_user_props *out)
{
    size_t n = json_array_size(list);
    bool nomem = false;

    out->v = n ? calloc(n, sizeof(*out->v)) : NULL;
    out->n = out->v ? n : 0;
    if (n && !out->v)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *item = json_array_get(list, i), *value = json_object_get(item, "value");
        struct ds_user_prop *p = &out->v[i];

        p->key = string_copy(json_object_get(item, "key"), &p->key_len, &nomem);
        p->value = string_copy(value, &p->value_len, &nomem);
        p->has_value = value != NULL;
        p->remove = json_is_true(json_object_get(item, "remove"));
    }
    if (nomem) {
        ds_user_props_free(out);
        return -ENOMEM;
    }
    return 0;
}

void ds_user_props_free(struct ds_user_props *props)
{
    for (size_t i = 0; i < props->n; i++) {
        free(props->v[i].key);
        free(props->v[i].value);
    }
    free(props->v);
    props->v = NULL;
    props->n = 0;
}

static int user_props_field_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    ds_user_props_free(field);
    return ds_user_props_decode(v, field);
}

/* [{key, value} or {key, remove: true}, ...] as given */
static json_t *user_props_field_encode(const struct api_field *f, const void *field)
{
    const struct ds_user_props *props = field;
    json_t *a = json_array();

    (void)f;
    for (size_t i = 0; a && i < props->n; i++) {
        const struct ds_user_prop *p = &props->v[i];
        json_t *o = json_pack("{s:s?}", "key", p->key);

        if (o && p->has_value)
            json_object_set_new(o, "value", p->value ? json_string(p->value) : json_null());
        if (o && p->remove)
            json_object_set_new(o, "remove", json_true());
        if (!o || json_array_append_new(a, o) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    return a;
}

static void user_props_field_clear(const struct api_field *f, void *field)
{
    (void)f;
    ds_user_props_free(field);
}

const struct api_codec ds_codec_user_props = {user_props_field_decode, user_props_field_encode,
                                              user_props_field_clear};

int ds_check_user_props(struct api_call *call, const char *field, const struct ds_user_props *props,
                        bool update)
{
    char f[160];

    for (size_t i = 0; i < props->n; i++) {
        const struct ds_user_prop *p = &props->v[i];

        snprintf(f, sizeof(f), "%s.%zu.key", field, i);
        if (!p->key)
            continue; /* reported by the schema check */
        if (!strchr(p->key, ':') || strlen(p->key) != p->key_len)
            api_verr(call, f, EINVAL, "a user property name must contain ':' (e.g. \"org:name\")");
        else if (strncmp(p->key, "blockd:", 7) == 0)
            api_verr(call, f, EINVAL, "the \"blockd:\" namespace is reserved");
        snprintf(f, sizeof(f), "%s.%zu", field, i);
        if (update && p->remove == p->has_value)
            api_verr(call, f, EINVAL, "give exactly one of value and remove: true");
        if (p->value && strlen(p->value) != p->value_len)
            api_verr(call, f, EINVAL, "value contains a NUL byte");
    }
    return api_has_verrs(call) ? -EINVAL : 0;
}

int ds_apply_user_props(int64_t dataset_id, const struct ds_user_props *props)
{
    for (size_t i = 0; i < props->n; i++) {
        int rc = ds_prop_set(dataset_id, props->v[i].key, props->v[i].value);
        if (rc < 0)
            return rc;
    }
    return 0;
}
