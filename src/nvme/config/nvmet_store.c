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
                             " UNIQUE (port_id, subsys_id));"
                             /* runtime state, not configuration: a namespace's
                              * reservations while their PTPL is on (nvmet_resv.c) */
                             "CREATE TABLE IF NOT EXISTS nvmet_resv ("
                             " ns_id INTEGER PRIMARY KEY,"
                             " state TEXT NOT NULL);";

/* ---- codecs of nullable members ---- */

static int opt_bool_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(int *)field = json_is_boolean(v) ? json_is_true(v) : -1;
    return 0;
}

static json_t *opt_bool_encode(const struct api_field *f, const void *field)
{
    (void)f;
    int b = *(const int *)field;
    return b < 0 ? json_null() : json_boolean(b);
}

static int opt_i64_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    struct nvs_opt *o = field;
    o->set = json_is_integer(v);
    o->v = o->set ? json_integer_value(v) : 0;
    return 0;
}

static json_t *opt_i64_encode(const struct api_field *f, const void *field)
{
    (void)f;
    const struct nvs_opt *o = field;
    return o->set ? json_integer(o->v) : json_null();
}

static int opt_enum_decode(const struct api_field *f, json_t *v, void *field)
{
    const char *s = json_string_value(v);
    *(int *)field = -1;
    for (int i = 0; s && f->choices[i]; i++)
        if (strcmp(f->choices[i], s) == 0)
            *(int *)field = i;
    return 0;
}

static json_t *opt_enum_encode(const struct api_field *f, const void *field)
{
    int i = *(const int *)field;
    for (int k = 0; i >= 0 && f->choices[k]; k++)
        if (k == i)
            return json_string(f->choices[k]);
    return json_null();
}

const struct api_codec nvs_codec_opt_bool = {opt_bool_decode, opt_bool_encode, NULL};
const struct api_codec nvs_codec_opt_i64 = {opt_i64_decode, opt_i64_encode, NULL};
const struct api_codec nvs_codec_opt_enum = {opt_enum_decode, opt_enum_encode, NULL};

/* ---- the objects: one table each (the first ninput fields are the body's) ---- */

const char *const nvs_device_types[] = {"ZVOL", "FILE", NULL};
const char *const nvs_trtypes[] = {"TCP", "RDMA", "FC", NULL};
const char *const nvs_dhchap_hashes[] = {"SHA-256", "SHA-384", "SHA-512", NULL};
const char *const nvs_dhchap_dhgroups[] = {"2048-BIT", "3072-BIT", "4096-BIT",
                                           "6144-BIT", "8192-BIT", NULL};

#define S struct nvmet_subsys
const struct api_field nvs_subsys_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NVS_NQN_MAX,
     API_AT(S, name, api_codec_str)},
    {.name = "subnqn",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = NVS_NQN_MAX,
     .def = "null",
     API_AT(S, subnqn, api_codec_str_null)},
    {.name = "allow_any_host",
     .type = API_T_BOOL,
     .def = "false",
     API_AT(S, allow_any_host, api_codec_bool)},
    {.name = "pi_enable",
     .type = API_T_BOOL,
     .flags = API_NULLABLE,
     .def = "null",
     API_AT(S, pi_enable, nvs_codec_opt_bool)},
    {.name = "qid_max",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 65535,
     .def = "null",
     API_AT(S, qid_max, nvs_codec_opt_i64)},
    {.name = "ieee_oui",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = 8,
     .def = "null",
     API_AT(S, ieee_oui, api_codec_str_null)},
    {.name = "ana",
     .type = API_T_BOOL,
     .flags = API_NULLABLE,
     .def = "null",
     API_AT(S, ana, nvs_codec_opt_bool)},
    /* made by the server */
    {.name = "serial", API_AT(S, serial, api_codec_str)},
};
#undef S

#define N struct nvmet_namespace
const struct api_field nvs_namespace_fields[] = {
    {.name = "nsid",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 0xFFFFFFFE,
     .def = "null",
     API_AT(N, nsid, nvs_codec_opt_i64)},
    {.name = "subsys_id",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(N, subsys_id, api_codec_i64)},
    {.name = "device_type",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = nvs_device_types,
     API_AT(N, device_type, api_codec_enum)},
    {.name = "device_path",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 4095,
     API_AT(N, device_path, api_codec_str)},
    {.name = "filesize",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = INT64_MAX,
     .def = "null",
     API_AT(N, filesize, nvs_codec_opt_i64)},
    {.name = "enabled", .type = API_T_BOOL, .def = "true", API_AT(N, enabled, api_codec_bool)},
    /* made by the server */
    {.name = "device_uuid", API_AT(N, device_uuid, api_codec_str)},
    {.name = "device_nguid", API_AT(N, device_nguid, api_codec_str)},
};
#undef N

#define P struct nvmet_port
const struct api_field nvs_port_fields[] = {
    {.name = "addr_trtype",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = nvs_trtypes,
     API_AT(P, addr_trtype, api_codec_enum)},
    {.name = "addr_trsvcid",
     .type = API_T_INT,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1024,
     .max = 65535,
     API_AT(P, addr_trsvcid, api_codec_i64)},
    {.name = "addr_traddr",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 63,
     API_AT(P, addr_traddr, api_codec_str)},
    {.name = "inline_data_size",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = 1 << 20,
     .def = "null",
     API_AT(P, inline_data_size, nvs_codec_opt_i64)},
    {.name = "max_queue_size",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 2,
     .max = 65535,
     .def = "null",
     API_AT(P, max_queue_size, nvs_codec_opt_i64)},
    {.name = "pi_enable",
     .type = API_T_BOOL,
     .flags = API_NULLABLE,
     .def = "null",
     API_AT(P, pi_enable, nvs_codec_opt_bool)},
    {.name = "enabled", .type = API_T_BOOL, .def = "true", API_AT(P, enabled, api_codec_bool)},
    /* made by the server */
    {.name = "index", API_AT(P, index, api_codec_i64)},
    {.name = "addr_adrfam", API_AT(P, addr_adrfam, api_codec_str)},
};
#undef P

#define H struct nvmet_host
const struct api_field nvs_host_fields[] = {
    {.name = "hostnqn",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NVS_NQN_MAX,
     API_AT(H, hostnqn, api_codec_str)},
    {.name = "dhchap_key",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 200,
     .def = "null",
     API_AT(H, dhchap_key, api_codec_secret)},
    {.name = "dhchap_ctrl_key",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 200,
     .def = "null",
     API_AT(H, dhchap_ctrl_key, api_codec_secret)},
    {.name = "dhchap_dhgroup",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = nvs_dhchap_dhgroups,
     .def = "null",
     API_AT(H, dhchap_dhgroup, nvs_codec_opt_enum)},
    {.name = "dhchap_hash",
     .type = API_T_ENUM,
     .choices = nvs_dhchap_hashes,
     .def = "\"SHA-256\"",
     API_AT(H, dhchap_hash, api_codec_enum)},
};
#undef H

#define L struct nvmet_link
const struct api_field nvs_host_subsys_fields[] = {
    {.name = "host_id",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(L, other_id, api_codec_i64)},
    {.name = "subsys_id",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(L, subsys_id, api_codec_i64)},
};
const struct api_field nvs_port_subsys_fields[] = {
    {.name = "port_id",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(L, other_id, api_codec_i64)},
    {.name = "subsys_id",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(L, subsys_id, api_codec_i64)},
};
#undef L

#define TABLE(var, sql, k, T, f, input)                                                            \
    const struct nvs_table var = {sql, k, sizeof(T), f, sizeof(f) / sizeof(f[0]), input}
TABLE(nvs_subsys, "nvmet_subsys", CFG_NVME_SUBSYS, struct nvmet_subsys, nvs_subsys_fields,
      NVS_SUBSYS_INPUT);
TABLE(nvs_namespace, "nvmet_namespace", CFG_NVME_NAMESPACE, struct nvmet_namespace,
      nvs_namespace_fields, NVS_NAMESPACE_INPUT);
TABLE(nvs_port, "nvmet_port", CFG_NVME_PORT, struct nvmet_port, nvs_port_fields, NVS_PORT_INPUT);
TABLE(nvs_host, "nvmet_host", CFG_NVME_HOST, struct nvmet_host, nvs_host_fields, NVS_HOST_INPUT);
TABLE(nvs_host_subsys, "nvmet_host_subsys", CFG_NVME_HOST_SUBSYS, struct nvmet_link,
      nvs_host_subsys_fields, 2);
TABLE(nvs_port_subsys, "nvmet_port_subsys", CFG_NVME_PORT_SUBSYS, struct nvmet_link,
      nvs_port_subsys_fields, 2);
#undef TABLE

void nvs_init(void)
{
    db_register_schema(schema);
}

/* How a field's column is read: booleans and integers are INTEGER. */
enum col_kind { COL_TEXT, COL_INT, COL_BOOL };
static enum col_kind col_kind(const struct api_field *f)
{
    if (f->codec == &api_codec_bool || f->codec == &nvs_codec_opt_bool)
        return COL_BOOL;
    if (f->codec == &api_codec_i64 || f->codec == &nvs_codec_opt_i64 ||
        f->codec == &api_codec_int || f->codec == &api_codec_u32)
        return COL_INT;
    return COL_TEXT;
}

void *nvs_new(const struct nvs_table *t)
{
    void *obj = calloc(1, t->size);
    if (obj && api_fields_defaults(t->fields, t->nfields, obj) < 0) {
        nvs_free(t, obj);
        return NULL;
    }
    return obj;
}

void nvs_free(const struct nvs_table *t, void *obj)
{
    if (!obj)
        return;
    api_fields_clear(t->fields, t->nfields, obj);
    free(obj);
}

void nvs_free_all(const struct nvs_table *t, void *objs, size_t n)
{
    for (size_t i = 0; objs && i < n; i++)
        api_fields_clear(t->fields, t->nfields, NVS_AT(t, objs, i));
    free(objs);
}

/* "SELECT id, "c1", "c2" ... FROM t" into buf. */
static int select_sql(const struct nvs_table *t, const char *where, char *buf, size_t len)
{
    size_t n = (size_t)snprintf(buf, len, "SELECT id");
    for (size_t i = 0; i < t->nfields && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, ", \"%s\"", t->fields[i].name);
    if (n < len)
        n += (size_t)snprintf(buf + n, len - n, " FROM %s%s%s ORDER BY id", t->name,
                              where ? " WHERE " : "", where ? where : "");
    return n < len ? 0 : -ENAMETOOLONG;
}

/* The row at st (select_sql's columns) into obj (zeroed). 0 or -ENOMEM. */
static int row_decode(const struct nvs_table *t, sqlite3_stmt *st, void *obj)
{
    *(int64_t *)obj = sqlite3_column_int64(st, 0);
    for (size_t i = 0; i < t->nfields; i++) {
        const struct api_field *f = &t->fields[i];
        int c = (int)i + 1;
        json_t *v;
        if (sqlite3_column_type(st, c) == SQLITE_NULL)
            v = json_null();
        else if (col_kind(f) == COL_TEXT)
            v = json_string((const char *)sqlite3_column_text(st, c));
        else if (col_kind(f) == COL_BOOL)
            v = json_boolean(sqlite3_column_int64(st, c) != 0);
        else
            v = json_integer(sqlite3_column_int64(st, c));
        int rc = v ? f->codec->decode(f, v, (char *)obj + f->off) : -ENOMEM;
        json_decref(v);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int load_v(const struct nvs_table *t, const char *where, void **objs, size_t *count,
                  const char *types, va_list ap)
{
    char sql[1024];
    sqlite3_stmt *st;
    char *arr = NULL;
    size_t n = 0;
    int rc = select_sql(t, where, sql, sizeof(sql));
    *objs = NULL;
    *count = 0;
    if (rc < 0)
        return rc;
    db_lock();
    rc = db_stmt(sql, &st);
    if (rc == 0) {
        rc = types ? db_bindv(st, types, ap) : 0;
        while (rc == 0 && db_stmt_next(st, &rc)) {
            char *grown = realloc(arr, (n + 1) * t->size);
            if (!grown) {
                rc = -ENOMEM;
                break;
            }
            arr = grown;
            memset(arr + n * t->size, 0, t->size);
            rc = row_decode(t, st, arr + n++ * t->size);
        }
        db_stmt_done(st);
    }
    db_unlock();
    if (rc < 0) {
        nvs_free_all(t, arr, n);
        return rc;
    }
    *objs = arr;
    *count = n;
    return 0;
}

int nvs_load(const struct nvs_table *t, const char *where, void **objs, size_t *n,
             const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = load_v(t, where, objs, n, types, ap);
    va_end(ap);
    return rc;
}

int nvs_get(const struct nvs_table *t, int64_t id, void **obj)
{
    void *objs;
    size_t n;
    int rc = nvs_load(t, "id = ?1", &objs, &n, "i", id);
    if (rc < 0)
        return rc;
    if (n == 0) {
        free(objs);
        return -ENOENT;
    }
    *obj = objs; /* one struct: the array is the object */
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
    for (size_t i = 0; i < t->nfields && n < len; i++)
        n += update
                 ? (size_t)snprintf(buf + n, len - n, "%s\"%s\" = ?%zu", i ? ", " : "",
                                    t->fields[i].name, i + 1)
                 : (size_t)snprintf(buf + n, len - n, "%s\"%s\"", i ? ", " : "", t->fields[i].name);
    if (update && n < len)
        n += (size_t)snprintf(buf + n, len - n, " WHERE id = ?%zu", t->nfields + 1);
    for (size_t i = 0; !update && i < t->nfields && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s?%zu", i ? ", " : ") VALUES (", i + 1);
    if (!update && n < len)
        n += (size_t)snprintf(buf + n, len - n, ")");
    return n < len ? 0 : -ENAMETOOLONG;
}

/* Bind column i from field f of obj (its encoding: null, string, bool or integer). */
static int bind_field(sqlite3_stmt *st, int i, const struct api_field *f, const void *obj)
{
    json_t *v = f->codec->encode(f, (const char *)obj + f->off);
    int rc;
    if (!v)
        return -ENOMEM;
    if (json_is_null(v))
        rc = sqlite3_bind_null(st, i);
    else if (json_is_string(v))
        rc = sqlite3_bind_text(st, i, json_string_value(v), -1, SQLITE_TRANSIENT);
    else if (json_is_boolean(v))
        rc = sqlite3_bind_int(st, i, json_is_true(v));
    else
        rc = sqlite3_bind_int64(st, i, json_integer_value(v));
    json_decref(v);
    return rc == SQLITE_OK ? 0 : -EIO;
}

int nvs_write(const struct nvs_table *t, void *obj)
{
    char sql[1024];
    sqlite3_stmt *st;
    struct cfg_tx *tx = cfg_tx_current();
    int64_t *id = obj;
    bool create = *id == 0;
    int rc = write_sql(t, !create, sql, sizeof(sql));
    if (rc < 0 || !tx)
        return rc < 0 ? rc : -EINVAL;
    if ((rc = db_stmt(sql, &st)) < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < t->nfields; i++)
        rc = bind_field(st, (int)i + 1, &t->fields[i], obj);
    if (rc == 0 && !create)
        rc = sqlite3_bind_int64(st, (int)t->nfields + 1, *id) == SQLITE_OK ? 0 : -EIO;
    if (rc == 0)
        rc = db_step_done(st);
    if (rc == 0 && create)
        *id = sqlite3_last_insert_rowid(db_handle());
    db_stmt_done(st);
    if (rc < 0)
        return rc;
    cfg_tx_changed(tx, t->kind, *id, create ? CFG_CREATED : CFG_UPDATED);
    return 0;
}

int nvs_delete(const struct nvs_table *t, size_t *n, const char *where, const char *types, ...)
{
    struct cfg_tx *tx = cfg_tx_current();
    void *objs;
    size_t count;
    va_list ap;
    if (n)
        *n = 0;
    if (!tx)
        return -EINVAL;
    va_start(ap, types);
    int rc = load_v(t, where, &objs, &count, types, ap);
    va_end(ap);
    if (rc < 0)
        return rc;
    char sql[128];
    snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE id = ?", t->name);
    for (size_t i = 0; i < count; i++) {
        int64_t id = *(int64_t *)NVS_AT(t, objs, i);
        if ((rc = db_run(sql, "i", id)) < 0)
            break;
        cfg_tx_changed(tx, t->kind, id, CFG_DELETED);
        if (n)
            (*n)++;
    }
    nvs_free_all(t, objs, count);
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
