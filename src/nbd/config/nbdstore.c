/* The stored NBD configuration: SQL of nbd_export and the "nbd.global.*" settings (nbdstore.h). */
#include "nbd/config/nbdstore.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/cfgtx.h"
#include "control/db.h"
#include "core/log.h"

static const char nbd_schema[] =
    "CREATE TABLE IF NOT EXISTS nbd_export ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL UNIQUE,"
    " dataset TEXT,"
    " path TEXT,"
    " readonly INTEGER NOT NULL DEFAULT 0,"
    " description TEXT NOT NULL DEFAULT '',"
    " multi_conn INTEGER NOT NULL DEFAULT 1,"
    " tls TEXT NOT NULL DEFAULT 'allow',"
    " enabled INTEGER NOT NULL DEFAULT 1);"
    /* An older version's "nbd.global" JSON text,
     * one key per field now (once: it is deleted). */
    "INSERT OR IGNORE INTO settings(key, value)"
    " SELECT 'nbd.global.' || j.key,"
    "  CASE j.type WHEN 'true' THEN '1' WHEN 'false' THEN '0'"
    "  ELSE CAST(j.value AS TEXT) END"
    " FROM settings s, json_each(s.value) j"
    " WHERE s.key = 'nbd.global' AND json_valid(s.value)"
    "  AND j.type IN ('text', 'integer', 'true', 'false')"
    "  AND j.key IN ('listen', 'unix_socket', 'tls_cert', 'tls_key',"
    "   'tls_ca', 'tls_verify_peer', 'tls_psk_file', 'max_connections',"
    "   'max_request_size', 'max_inflight');"
    "DELETE FROM settings WHERE key = 'nbd.global';";

#define EXPORT_SELECT                                                                              \
    "SELECT id, name, dataset, path, readonly, description, multi_conn, tls, enabled FROM "        \
    "nbd_export"

void nbdstore_init(void)
{
    db_register_schema(nbd_schema);
}

void nbd_export_row_clear(struct nbd_export_row *r)
{
    free(r->name);
    free(r->dataset);
    free(r->path);
    free(r->description);
    free(r->tls);
    memset(r, 0, sizeof(*r));
}

void nbd_export_rows_free(struct nbd_export_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        nbd_export_row_clear(&rows[i]);
    free(rows);
}

static char *col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

/* The row at st (EXPORT_SELECT's columns). 0 or -ENOMEM. */
static int row_decode(sqlite3_stmt *st, struct nbd_export_row *r)
{
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(st, 0);
    r->name = col_dup(st, 1);
    r->dataset = col_dup(st, 2);
    r->path = col_dup(st, 3);
    r->readonly = sqlite3_column_int(st, 4);
    r->description = col_dup(st, 5);
    r->multi_conn = sqlite3_column_int(st, 6);
    r->tls = col_dup(st, 7);
    r->enabled = sqlite3_column_int(st, 8);
    if (!r->description)
        r->description = strdup("");
    if (!r->tls)
        r->tls = strdup("allow");
    return r->name && r->description && r->tls ? 0 : -ENOMEM;
}

/* Rows of sql (no parameters, or one id): a new array. 0 or -errno. */
static int rows_select(const char *sql, int64_t id, struct nbd_export_row **out, size_t *count)
{
    sqlite3_stmt *st;
    struct nbd_export_row *rows = NULL;
    size_t n = 0;
    *out = NULL;
    *count = 0;
    db_lock();
    int rc = db_stmt(sql, &st);
    if (rc < 0) {
        db_unlock();
        return -EIO;
    }
    if (id)
        sqlite3_bind_int64(st, 1, id);
    int s;
    while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW) {
        struct nbd_export_row *nr = realloc(rows, (n + 1) * sizeof(*rows));
        if (!nr) {
            rc = -ENOMEM;
            break;
        }
        rows = nr;
        rc = row_decode(st, &rows[n++]);
    }
    if (rc == 0 && s != SQLITE_DONE)
        rc = -EIO;
    db_stmt_done(st);
    db_unlock();
    if (rc < 0) {
        nbd_export_rows_free(rows, n);
        return rc;
    }
    *out = rows;
    *count = n;
    return 0;
}

int nbd_export_rows_load(struct nbd_export_row **out, size_t *n)
{
    return rows_select(EXPORT_SELECT " ORDER BY id", 0, out, n);
}

int nbd_export_row_get(int64_t id, struct nbd_export_row *out)
{
    struct nbd_export_row *rows;
    size_t n;
    int rc = rows_select(EXPORT_SELECT " WHERE id = ?", id ? id : -1, &rows, &n);
    if (rc < 0)
        return rc;
    if (n == 0) {
        free(rows);
        return -ENOENT;
    }
    *out = rows[0];
    free(rows);
    return 0;
}

/* The first id sql (one text parameter) returns. 0, -ENOENT or -errno. */
static int find_id(const char *sql, const char *value, int64_t *id)
{
    sqlite3_stmt *st;
    db_lock();
    int rc = db_stmt(sql, &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, value, -1, SQLITE_TRANSIENT);
        rc = db_step_row(st);
        if (rc == 0)
            *id = sqlite3_column_int64(st, 0);
        db_stmt_done(st);
    }
    db_unlock();
    return rc;
}

int nbd_export_find_name(const char *name, int64_t *id)
{
    return find_id("SELECT id FROM nbd_export WHERE name = ?", name, id);
}

int nbd_export_find_dataset(const char *dataset, int64_t *id)
{
    return find_id("SELECT id FROM nbd_export WHERE dataset = ? ORDER BY id LIMIT 1", dataset, id);
}

static void bind_text_or_null(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* The INSERT or UPDATE of r. In a transaction. 0 or -errno. */
static int row_write(const struct nbd_export_row *r, int64_t *id_out)
{
    sqlite3_stmt *st;
    const char *sql = r->id ? "UPDATE nbd_export SET name=?1, dataset=?2, path=?3, readonly=?4,"
                              " description=?5, multi_conn=?6, tls=?7, enabled=?8 WHERE id=?9"
                            : "INSERT INTO nbd_export (name, dataset, path, readonly, description,"
                              " multi_conn, tls, enabled) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)";
    if (db_stmt(sql, &st) < 0)
        return -EIO;
    sqlite3_bind_text(st, 1, r->name, -1, SQLITE_TRANSIENT);
    bind_text_or_null(st, 2, r->dataset);
    bind_text_or_null(st, 3, r->path);
    sqlite3_bind_int(st, 4, r->readonly);
    sqlite3_bind_text(st, 5, r->description ? r->description : "", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 6, r->multi_conn);
    sqlite3_bind_text(st, 7, r->tls ? r->tls : "allow", -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 8, r->enabled);
    if (r->id)
        sqlite3_bind_int64(st, 9, r->id);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -db_errno();
    *id_out = r->id ? r->id : sqlite3_last_insert_rowid(db_handle());
    db_stmt_done(st);
    return rc;
}

int nbd_export_row_store(const struct nbd_export_row *r, int64_t *id_out)
{
    struct cfg_tx tx;
    int64_t id = 0;
    if (cfg_tx_begin(&tx) < 0)
        return -EIO;
    int rc = row_write(r, &id);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, id, r->id ? CFG_UPDATED : CFG_CREATED);
    rc = cfg_tx_commit(&tx);
    if (rc == 0 && id_out)
        *id_out = id;
    return rc;
}

int nbd_export_row_delete(int64_t id)
{
    struct cfg_tx tx;
    if (cfg_tx_begin(&tx) < 0)
        return -EIO;
    int rc = db_run("DELETE FROM nbd_export WHERE id = ?", "i", id);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, id, CFG_DELETED);
    return cfg_tx_commit(&tx);
}

int nbd_export_rows_delete_dataset(const char *dataset, size_t *n)
{
    struct cfg_tx tx;
    sqlite3_stmt *st;
    int64_t *ids = NULL;
    size_t cap = 0;

    *n = 0;
    if (cfg_tx_begin(&tx) < 0)
        return -EIO;
    int rc = db_stmt("SELECT id FROM nbd_export WHERE dataset = ?", &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, dataset, -1, SQLITE_STATIC);
        while (db_stmt_next(st, &rc)) {
            if (*n == cap) {
                cap = cap ? cap * 2 : 4;
                int64_t *grown = realloc(ids, cap * sizeof(*ids));
                if (!grown) {
                    rc = -ENOMEM;
                    break;
                }
                ids = grown;
            }
            ids[(*n)++] = sqlite3_column_int64(st, 0);
        }
        db_stmt_done(st);
    }
    for (size_t i = 0; rc == 0 && i < *n; i++) {
        rc = db_run("DELETE FROM nbd_export WHERE id = ?", "i", ids[i]);
        if (rc == 0)
            cfg_tx_changed(&tx, CFG_NBD_EXPORT, ids[i], CFG_DELETED);
    }
    free(ids);
    if (rc < 0 || *n == 0) {
        cfg_tx_abort(&tx);
        if (rc < 0)
            *n = 0;
        return rc;
    }
    return cfg_tx_commit(&tx);
}

/* Run a rename UPDATE with text parameters a, b (and c if not NULL);
 * records the change when a row moved. 0 or -errno. */
static int rename_run(const char *sql, const char *a, const char *b, const char *c)
{
    int rc = db_run(sql, c ? "ttt" : "tt", a, b, c);
    struct cfg_tx *tx = cfg_tx_current();
    if (rc == 0 && tx && sqlite3_changes(db_handle()) > 0)
        cfg_tx_changed(tx, CFG_NBD_EXPORT, CFG_ID_ALL, CFG_UPDATED);
    return rc;
}

int nbd_export_rows_rename(const char *old_name, const char *new_name, bool subtree)
{
    int rc = rename_run(subtree ? "UPDATE nbd_export SET dataset = ?2 || substr(dataset, "
                                  "length(?1) + 1) WHERE dataset = ?1 OR substr(dataset, 1, "
                                  "length(?1) + 1) IN (?1 || '/', ?1 || '@')"
                                : "UPDATE nbd_export SET dataset = ?2 WHERE dataset = ?1",
                        old_name, new_name, NULL);
    /* path exports of files inside a renamed filesystem's directory (a
     * rename never leaves its pool) */
    const char *so = strchr(old_name, '/'), *sn = strchr(new_name, '/');
    if (rc < 0 || !subtree || !so || !sn)
        return rc;
    char pool[256];
    snprintf(pool, sizeof(pool), "%.*s", (int)(so - old_name), old_name);
    return rename_run("UPDATE nbd_export SET path = (SELECT p.path FROM pools p WHERE p.name = ?1) "
                      "|| ?3 || substr(path, length((SELECT p.path FROM pools p WHERE p.name = ?1) "
                      "|| ?2) + 1) WHERE substr(path, 1, length((SELECT p.path FROM pools p WHERE "
                      "p.name = ?1) || ?2 || '/')) = (SELECT p.path FROM pools p WHERE p.name = "
                      "?1) || ?2 || '/'",
                      pool, so, sn);
}

#define GF(n, t)                                                                                   \
    {                                                                                              \
#n, t, offsetof(struct nbd_global, n), sizeof(((struct nbd_global *)0)->n)                 \
    }
const struct nbd_global_field nbd_global_fields[] = {
    GF(listen, NBD_GLOBAL_STR),           GF(unix_socket, NBD_GLOBAL_STR),
    GF(tls_cert, NBD_GLOBAL_STR),         GF(tls_key, NBD_GLOBAL_STR),
    GF(tls_ca, NBD_GLOBAL_STR),           GF(tls_verify_peer, NBD_GLOBAL_BOOL),
    GF(tls_psk_file, NBD_GLOBAL_STR),     GF(max_connections, NBD_GLOBAL_U32),
    GF(max_request_size, NBD_GLOBAL_U32), GF(max_inflight, NBD_GLOBAL_U32),
};
#undef GF
const size_t nbd_global_nfields = sizeof(nbd_global_fields) / sizeof(nbd_global_fields[0]);

/* One stored value into its field: false when it does not fit. */
static bool field_decode(const struct nbd_global_field *f, const char *v, struct nbd_global *g)
{
    char *at = (char *)g + f->off, *end;
    unsigned long long n;

    switch (f->type) {
    case NBD_GLOBAL_STR:
        if (strlen(v) >= f->size)
            return false;
        memcpy(at, v, strlen(v) + 1);
        return true;
    case NBD_GLOBAL_BOOL:
        if (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
            return false;
        *(bool *)(void *)at = v[0] == '1';
        return true;
    case NBD_GLOBAL_U32:
        errno = 0;
        n = strtoull(v, &end, 10);
        if (errno || end == v || *end || n > UINT32_MAX)
            return false;
        *(uint32_t *)(void *)at = (uint32_t)n;
        return true;
    }
    return false;
}

int nbd_global_load(struct nbd_global *g)
{
    char key[64];

    for (size_t i = 0; i < nbd_global_nfields; i++) {
        const struct nbd_global_field *f = &nbd_global_fields[i];
        char *v = NULL;
        snprintf(key, sizeof(key), "nbd.global.%s", f->name);
        int rc = db_setting_get(key, &v);
        if (rc == -ENOENT)
            continue;
        if (rc < 0)
            return rc;
        if (v && !field_decode(f, v, g))
            log_warn("nbd: the stored setting %s (%.64s) is not valid: keeping the default", key,
                     v);
        free(v);
    }
    return 0;
}

int nbd_global_store(const struct nbd_global *g)
{
    struct cfg_tx tx;
    char key[64], num[24];
    int rc = cfg_tx_begin(&tx);

    if (rc < 0)
        return rc;
    for (size_t i = 0; rc == 0 && i < nbd_global_nfields; i++) {
        const struct nbd_global_field *f = &nbd_global_fields[i];
        const char *at = (const char *)g + f->off, *v = num;
        snprintf(key, sizeof(key), "nbd.global.%s", f->name);
        if (f->type == NBD_GLOBAL_STR)
            v = at;
        else if (f->type == NBD_GLOBAL_BOOL)
            v = *(const bool *)(const void *)at ? "1" : "0";
        else
            snprintf(num, sizeof(num), "%u", *(const uint32_t *)(const void *)at);
        rc = db_setting_set(key, v);
    }
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_NBD_GLOBAL, 0, CFG_UPDATED);
    return cfg_tx_commit(&tx);
}
