/* The stored nvmet.* objects: tables described by their columns (nvmet_store.h). */
#include "nvme/config/nvmet_store.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "control/db.h"
#include "core/log.h"
#include "core/util.h"

/* Column names are quoted in SQL ("index" is a keyword). */
static const char schema[] = "CREATE TABLE IF NOT EXISTS nvmet_subsys ("
                             " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " name TEXT NOT NULL UNIQUE,"
                             " subnqn TEXT NOT NULL UNIQUE,"
                             " serial TEXT NOT NULL UNIQUE,"
                             " allow_any_host INTEGER NOT NULL DEFAULT 0,"
                             " pi_enable INTEGER, qid_max INTEGER, ieee_oui TEXT, ana INTEGER);"
                             "CREATE TABLE IF NOT EXISTS nvmet_namespace ("
                             " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " nsid INTEGER NOT NULL,"
                             " subsys_id INTEGER NOT NULL REFERENCES nvmet_subsys(id),"
                             " device_type TEXT NOT NULL,"
                             " device_path TEXT NOT NULL UNIQUE,"
                             " filesize INTEGER,"
                             " device_uuid TEXT NOT NULL UNIQUE,"
                             " device_nguid TEXT NOT NULL UNIQUE,"
                             " enabled INTEGER NOT NULL DEFAULT 1,"
                             " UNIQUE (subsys_id, nsid));"
                             "CREATE TABLE IF NOT EXISTS nvmet_port ("
                             " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " \"index\" INTEGER NOT NULL UNIQUE,"
                             " addr_trtype TEXT NOT NULL,"
                             " addr_traddr TEXT NOT NULL,"
                             " addr_trsvcid INTEGER NOT NULL,"
                             " addr_adrfam TEXT NOT NULL,"
                             " inline_data_size INTEGER, max_queue_size INTEGER, pi_enable INTEGER,"
                             " enabled INTEGER NOT NULL DEFAULT 1,"
                             " UNIQUE (addr_trtype, addr_traddr, addr_trsvcid));"
                             "CREATE TABLE IF NOT EXISTS nvmet_host ("
                             " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " hostnqn TEXT NOT NULL UNIQUE,"
                             " dhchap_key TEXT, dhchap_ctrl_key TEXT, dhchap_dhgroup TEXT,"
                             " dhchap_hash TEXT NOT NULL DEFAULT 'SHA-256');"
                             "CREATE TABLE IF NOT EXISTS nvmet_host_subsys ("
                             " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " host_id INTEGER NOT NULL REFERENCES nvmet_host(id),"
                             " subsys_id INTEGER NOT NULL REFERENCES nvmet_subsys(id),"
                             " UNIQUE (host_id, subsys_id));"
                             "CREATE TABLE IF NOT EXISTS nvmet_port_subsys ("
                             " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                             " port_id INTEGER NOT NULL REFERENCES nvmet_port(id),"
                             " subsys_id INTEGER NOT NULL REFERENCES nvmet_subsys(id),"
                             " UNIQUE (port_id, subsys_id));";

static const struct nvs_col subsys_cols[] = {
    {"name", NVS_TEXT, false},           {"subnqn", NVS_TEXT, false},   {"serial", NVS_TEXT, false},
    {"allow_any_host", NVS_BOOL, false}, {"pi_enable", NVS_BOOL, true}, {"qid_max", NVS_INT, true},
    {"ieee_oui", NVS_TEXT, true},        {"ana", NVS_BOOL, true},
};
static const struct nvs_col namespace_cols[] = {
    {"nsid", NVS_INT, false},          {"subsys_id", NVS_INT, false},
    {"device_type", NVS_TEXT, false},  {"device_path", NVS_TEXT, false},
    {"filesize", NVS_INT, true},       {"device_uuid", NVS_TEXT, false},
    {"device_nguid", NVS_TEXT, false}, {"enabled", NVS_BOOL, false},
};
static const struct nvs_col port_cols[] = {
    {"index", NVS_INT, false},         {"addr_trtype", NVS_TEXT, false},
    {"addr_traddr", NVS_TEXT, false},  {"addr_trsvcid", NVS_INT, false},
    {"addr_adrfam", NVS_TEXT, false},  {"inline_data_size", NVS_INT, true},
    {"max_queue_size", NVS_INT, true}, {"pi_enable", NVS_BOOL, true},
    {"enabled", NVS_BOOL, false},
};
static const struct nvs_col host_cols[] = {
    {"hostnqn", NVS_TEXT, false},        {"dhchap_key", NVS_TEXT, true},
    {"dhchap_ctrl_key", NVS_TEXT, true}, {"dhchap_dhgroup", NVS_TEXT, true},
    {"dhchap_hash", NVS_TEXT, false},
};
static const struct nvs_col host_subsys_cols[] = {
    {"host_id", NVS_INT, false},
    {"subsys_id", NVS_INT, false},
};
static const struct nvs_col port_subsys_cols[] = {
    {"port_id", NVS_INT, false},
    {"subsys_id", NVS_INT, false},
};

#define TABLE(var, sql, k, cols)                                                                   \
    const struct nvs_table var = {sql, k, cols, sizeof(cols) / sizeof(cols[0])}
TABLE(nvs_subsys, "nvmet_subsys", CFG_NVME_SUBSYS, subsys_cols);
TABLE(nvs_namespace, "nvmet_namespace", CFG_NVME_NAMESPACE, namespace_cols);
TABLE(nvs_port, "nvmet_port", CFG_NVME_PORT, port_cols);
TABLE(nvs_host, "nvmet_host", CFG_NVME_HOST, host_cols);
TABLE(nvs_host_subsys, "nvmet_host_subsys", CFG_NVME_HOST_SUBSYS, host_subsys_cols);
TABLE(nvs_port_subsys, "nvmet_port_subsys", CFG_NVME_PORT_SUBSYS, port_subsys_cols);
#undef TABLE

void nvs_init(void)
{
    db_register_schema(schema);
}

/* "SELECT id, "c1", "c2" ... FROM t" into buf. */
static int select_sql(const struct nvs_table *t, const char *where, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "SELECT id");
    for (size_t i = 0; i < t->ncols && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, ", \"%s\"", t->cols[i].name);
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, " FROM %s%s%s ORDER BY id", t->name,
                              where ? " WHERE " : "", where ? where : "");
    return n < len ? 0 : -ENAMETOOLONG;
}

/* The row at st (select_sql's columns) as a JSON object; NULL without memory. */
static json_t *row_decode(const struct nvs_table *t, sqlite3_stmt *st)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "id", json_integer(sqlite3_column_int64(st, 0)));
    for (size_t i = 0; i < t->ncols; i++) {
        int c = (int)i + 1;
        json_t *v;
        if (sqlite3_column_type(st, c) == SQLITE_NULL)
            v = json_null();
        else if (t->cols[i].type == NVS_TEXT)
            v = json_string((const char *)sqlite3_column_text(st, c));
        else if (t->cols[i].type == NVS_BOOL)
            v = json_boolean(sqlite3_column_int64(st, c) != 0);
        else
            v = json_integer(sqlite3_column_int64(st, c));
        if (!v || json_object_set_new(o, t->cols[i].name, v) < 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static int select_v(const struct nvs_table *t, const char *where, json_t **rows, const char *types,
                    va_list ap)
{
    char sql[1024];
    sqlite3_stmt *st;
    int rc = select_sql(t, where, sql, sizeof(sql));
    *rows = NULL;
    if (rc < 0)
        return rc;
    json_t *arr = json_array();
    if (!arr)
        return -ENOMEM;
    db_lock();
    rc = db_stmt(sql, &st);
    if (rc == 0) {
        rc = types ? db_bindv(st, types, ap) : 0;
        while (rc == 0 && db_stmt_next(st, &rc)) {
            json_t *o = row_decode(t, st);
            if (!o || json_array_append_new(arr, o) < 0)
                rc = -ENOMEM;
        }
        db_stmt_done(st);
    }
    db_unlock();
    if (rc < 0) {
        json_decref(arr);
        return rc;
    }
    *rows = arr;
    return 0;
}

int nvs_select(const struct nvs_table *t, const char *where, json_t **rows, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = select_v(t, where, rows, types, ap);
    va_end(ap);
    return rc;
}

int nvs_get(const struct nvs_table *t, int64_t id, json_t **row)
{
    json_t *rows;
    int rc = nvs_select(t, "id = ?1", &rows, "i", id);
    if (rc < 0)
        return rc;
    if (json_array_size(rows) == 0) {
        json_decref(rows);
        return -ENOENT;
    }
    *row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return 0;
}

int nvs_count(const struct nvs_table *t, const char *where, int64_t *n, const char *types, ...)
{
    char sql[512];
    sqlite3_stmt *st;
    va_list ap;
    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s%s%s", t->name, where ? " WHERE " : "",
             where ? where : "");
    db_lock();
    int rc = db_stmt(sql, &st);
    if (rc == 0) {
        va_start(ap, types);
        rc = types ? db_bindv(st, types, ap) : 0;
        va_end(ap);
        if (rc == 0 && (rc = db_step_row(st)) == 0)
            *n = sqlite3_column_int64(st, 0);
        db_stmt_done(st);
    }
    db_unlock();
    return rc;
}

/* The INSERT or UPDATE of t's columns into buf. */
static int write_sql(const struct nvs_table *t, bool update, char *buf, size_t len)
{
    size_t n = update ? (size_t)snprintf(buf, len, "UPDATE %s SET ", t->name)
                      : (size_t)snprintf(buf, len, "INSERT INTO %s (", t->name);
    for (size_t i = 0; i < t->ncols && n < len; i++)
        n += update
                 ? (size_t)snprintf(buf + n, len - n, "%s\"%s\" = ?%zu", i ? ", " : "",
                                    t->cols[i].name, i + 1)
                 : (size_t)snprintf(buf + n, len - n, "%s\"%s\"", i ? ", " : "", t->cols[i].name);
    if (update && n < len)
        n += (size_t)snprintf(buf + n, len - n, " WHERE id = ?%zu", t->ncols + 1);
    for (size_t i = 0; !update && i < t->ncols && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s?%zu", i ? ", " : ") VALUES (", i + 1);
    if (!update && n < len)
        n += (size_t)snprintf(buf + n, len - n, ")");
    return n < len ? 0 : -ENAMETOOLONG;
}

/* Bind column i of t from v (NULL or JSON null: NULL). 0 or -EINVAL. */
static int bind_col(sqlite3_stmt *st, int i, const struct nvs_col *c, json_t *v)
{
    if (!v || json_is_null(v))
        return sqlite3_bind_null(st, i) == SQLITE_OK ? 0 : -EIO;
    if (c->type == NVS_TEXT && json_is_string(v))
        return sqlite3_bind_text(st, i, json_string_value(v), -1, SQLITE_TRANSIENT) == SQLITE_OK
                   ? 0
                   : -EIO;
    if (c->type == NVS_BOOL && json_is_boolean(v))
        return sqlite3_bind_int(st, i, json_is_true(v)) == SQLITE_OK ? 0 : -EIO;
    if (c->type == NVS_INT && json_is_integer(v))
        return sqlite3_bind_int64(st, i, json_integer_value(v)) == SQLITE_OK ? 0 : -EIO;
    log_error("nvmet: column %s: a value of the wrong type", c->name);
    return -EINVAL;
}

int nvs_write(const struct nvs_table *t, int64_t id, json_t *row, int64_t *id_out)
{
    char sql[1024];
    sqlite3_stmt *st;
    struct cfg_tx *tx = cfg_tx_current();
    bool create = id == 0;
    int rc = write_sql(t, !create, sql, sizeof(sql));
    if (rc < 0 || !tx)
        return rc < 0 ? rc : -EINVAL;
    if ((rc = db_stmt(sql, &st)) < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < t->ncols; i++)
        rc = bind_col(st, (int)i + 1, &t->cols[i], json_object_get(row, t->cols[i].name));
    if (rc == 0 && id)
        rc = sqlite3_bind_int64(st, (int)t->ncols + 1, id) == SQLITE_OK ? 0 : -EIO;
    if (rc == 0)
        rc = db_step_done(st);
    if (rc == 0 && !id)
        id = sqlite3_last_insert_rowid(db_handle());
    db_stmt_done(st);
    if (rc < 0)
        return rc;
    cfg_tx_changed(tx, t->kind, id, create ? CFG_CREATED : CFG_UPDATED);
    if (id_out)
        *id_out = id;
    return 0;
}

int nvs_delete(const struct nvs_table *t, size_t *n, const char *where, const char *types, ...)
{
    struct cfg_tx *tx = cfg_tx_current();
    json_t *rows;
    va_list ap;
    if (n)
        *n = 0;
    if (!tx)
        return -EINVAL;
    va_start(ap, types);
    int rc = select_v(t, where, &rows, types, ap);
    va_end(ap);
    if (rc < 0)
        return rc;
    char sql[128];
    snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE id = ?", t->name);
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        int64_t id = json_integer_value(json_object_get(r, "id"));
        if ((rc = db_run(sql, "i", id)) < 0)
            break;
        cfg_tx_changed(tx, t->kind, id, CFG_DELETED);
        if (n)
            (*n)++;
    }
    json_decref(rows);
    return rc;
}

/* ---- nvmet.global ---- */

void nvs_uuid(char out[37])
{
    uint8_t b[16];
    if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
        memset(b, 0x5a, sizeof(b)); /* cannot fail for 16 bytes; never uninitialised */
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

static const struct {
    const char *name;
    bool is_bool;
    size_t off, size;
} gfields[] = {
#define GS(n)                                                                                      \
    {                                                                                              \
#n, false, offsetof(struct nvmet_global, n), sizeof(((struct nvmet_global *)0)->n)         \
    }
#define GB(n)                                                                                      \
    {                                                                                              \
#n, true, offsetof(struct nvmet_global, n), sizeof(bool)                                   \
    }
    GS(basenqn), GB(kernel), GB(ana), GB(rdma), GB(xport_referral), GS(discovery_listen),
#undef GS
#undef GB
};

int nvs_global_load(struct nvmet_global *g)
{
    char key[64];
    memset(g, 0, sizeof(*g));
    g->kernel = true; /* TrueNAS's default; blockd has one backend, reported as the kernel's */
    snprintf(g->discovery_listen, sizeof(g->discovery_listen), ":8009");
    for (size_t i = 0; i < ARRAY_SIZE(gfields); i++) {
        char *v = NULL;
        char *at = (char *)g + gfields[i].off;
        snprintf(key, sizeof(key), "nvmet.global.%s", gfields[i].name);
        int rc = db_setting_get(key, &v);
        if (rc == -ENOENT)
            continue;
        if (rc < 0)
            return rc;
        if (gfields[i].is_bool)
            *(bool *)(void *)at = v && strcmp(v, "1") == 0;
        else if (v && strlen(v) < gfields[i].size)
            memcpy(at, v, strlen(v) + 1);
        else
            log_warn("nvmet: the stored setting %s does not fit: keeping the default", key);
        free(v);
    }
    return 0;
}

int nvs_global_store(const struct nvmet_global *g)
{
    struct cfg_tx tx;
    char key[64];
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < ARRAY_SIZE(gfields); i++) {
        const char *at = (const char *)g + gfields[i].off;
        snprintf(key, sizeof(key), "nvmet.global.%s", gfields[i].name);
        rc = db_setting_set(key, gfields[i].is_bool ? (*(const bool *)(const void *)at ? "1" : "0")
                                                    : at);
    }
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_NVME_GLOBAL, 0, CFG_UPDATED);
    return cfg_tx_commit(&tx);
}

int nvs_global_ensure(void)
{
    char *v = NULL;
    int rc = db_setting_get("nvmet.global.basenqn", &v);
    free(v);
    if (rc != -ENOENT)
        return rc;
    struct nvmet_global g;
    char uuid[37];
    if ((rc = nvs_global_load(&g)) < 0)
        return rc;
    nvs_uuid(uuid);
    snprintf(g.basenqn, sizeof(g.basenqn), "nqn.2011-06.com.truenas:uuid:%s", uuid);
    log_info("nvmet: basenqn %s", g.basenqn);
    return nvs_global_store(&g);
}
