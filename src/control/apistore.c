/*
 * The API's stored objects (api/store.h): tables api_key and account and
 * the "service.<name>.enable" settings, with their SQL, on the one
 * transaction path. Installed by apistore_init() (control/apistore.h).
 */
#include "control/apistore.h"
#include "control/holdings.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/store.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "core/log.h"

static const char key_schema[] = "CREATE TABLE IF NOT EXISTS api_key ("
                                 " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                                 " name TEXT NOT NULL UNIQUE,"
                                 " username TEXT NOT NULL DEFAULT 'root',"
                                 " keyhash TEXT NOT NULL UNIQUE,"
                                 " created_at INTEGER NOT NULL,"
                                 " expires_at INTEGER);";

/* A key's roles (enum api_role bits), kept beside api_key so that a DB
 * from before roles needs no migration: a key without a row is a
 * FULL_ADMIN, which is what every key was then. */
static const char key_role_schema[] = "CREATE TABLE IF NOT EXISTS api_key_role ("
                                      " key_id INTEGER PRIMARY KEY,"
                                      " roles INTEGER NOT NULL);";

static const char account_schema[] = "CREATE TABLE IF NOT EXISTS account ("
                                     " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                                     " username TEXT NOT NULL UNIQUE,"
                                     " pwhash TEXT NOT NULL,"
                                     " pwgen INTEGER NOT NULL DEFAULT 1,"
                                     " created_at INTEGER NOT NULL,"
                                     " password_changed_at INTEGER NOT NULL);";

static int64_t now_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void text_col(sqlite3_stmt *st, int col, char *buf, size_t len)
{
    const char *s = (const char *)sqlite3_column_text(st, col);
    snprintf(buf, len, "%s", s ? s : "");
}

/* ---- keys ---- */

#define KEY_SELECT                                                                                 \
    "SELECT id, name, username, created_at, expires_at, keyhash, roles FROM api_key"               \
    " LEFT JOIN api_key_role ON key_id = id"

static void key_decode(sqlite3_stmt *st, struct api_key_rec *r)
{
    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(st, 0);
    text_col(st, 1, r->name, sizeof(r->name));
    text_col(st, 2, r->username, sizeof(r->username));
    r->created_at = sqlite3_column_int64(st, 3);
    r->has_expiry = sqlite3_column_type(st, 4) != SQLITE_NULL;
    r->expires_at = r->has_expiry ? sqlite3_column_int64(st, 4) : 0;
    r->roles = sqlite3_column_type(st, 6) == SQLITE_NULL ? API_ROLE_FULL
                                                         : (unsigned)sqlite3_column_int64(st, 6);
}

/* Every row of st (prepared under db_lock, which the caller holds) into a
 * growing array of elem-sized records filled by decode; finalizes st.
 * 0 with *out and *n set (the caller frees *out), or -ENOMEM/-EIO with nothing returned. */
static int list_rows(sqlite3_stmt *st, int rc, size_t elem, void (*decode)(sqlite3_stmt *, void *),
                     const char *table, void **out, size_t *n)
{
    size_t cap = 0;
    int step = SQLITE_DONE;
    *out = NULL;
    *n = 0;
    while (rc == 0 && (step = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            void *v = realloc(*out, cap * elem);
            if (!v) {
                rc = -ENOMEM;
                break;
            }
            *out = v;
        }
        decode(st, (char *)*out + (*n)++ * elem);
    }
    if (rc == 0 && step != SQLITE_DONE) {
        log_error("auth: reading %s: %s", table, sqlite3_errmsg(db_handle()));
        rc = -EIO;
    }
    sqlite3_finalize(st);
    if (rc < 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

static void key_decode_any(sqlite3_stmt *st, void *r)
{
    key_decode(st, r);
}

static int key_list(int64_t id, struct api_key_rec **out, size_t *n)
{
    sqlite3_stmt *st = NULL;
    db_lock();
    int rc =
        db_prepare(id ? KEY_SELECT " WHERE id = ? ORDER BY id" : KEY_SELECT " ORDER BY id", &st);
    if (rc == 0 && id)
        sqlite3_bind_int64(st, 1, id);
    void *v;
    rc = list_rows(st, rc, sizeof(**out), key_decode_any, "api_key", &v, n);
    db_unlock();
    *out = v;
    return rc;
}

static int key_create(struct api_key_rec *r, api_key_hash_fn make_hash, void *arg)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    /* Counted in the transaction, so that two creates cannot both pass. */
    int64_t n = 0;
    rc = holdings_count(&n, "SELECT COUNT(*) FROM api_key", "");
    if (rc == 0 && n >= (int64_t)limit_get(LIMIT_API_KEYS))
        rc = -EDQUOT;
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    r->created_at = now_wall_ms();
    /* A unique value until the real hash (which needs the id) replaces it. */
    unsigned char rnd[16];
    char placeholder[2 * sizeof(rnd) + 1];
    if (gnutls_rnd(GNUTLS_RND_NONCE, rnd, sizeof(rnd)) < 0)
        memset(rnd, 0, sizeof(rnd)); /* the UPDATE below still replaces it */
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(placeholder + 2 * i, 3, "%02x", rnd[i]);
    /* expires_at: 'n' (NULL) takes no argument, so the last one is unused */
    rc = db_run("INSERT INTO api_key (name, username, keyhash, created_at, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                r->has_expiry ? "tttii" : "tttin", r->name, r->username, placeholder, r->created_at,
                r->expires_at);
    char hash[API_KEY_HASH_LEN + 1];
    if (rc == 0) {
        r->id = sqlite3_last_insert_rowid(db_handle());
        rc = make_hash(r->id, hash, arg);
    }
    if (rc == 0)
        rc = db_run("UPDATE api_key SET keyhash = ? WHERE id = ?", "ti", hash, r->id);
    if (rc == 0)
        rc = db_run("INSERT OR REPLACE INTO api_key_role (key_id, roles) VALUES (?, ?)", "ii",
                    r->id, (int64_t)r->roles);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_API_KEY, r->id, CFG_CREATED);
    return cfg_tx_commit(&tx);
}

/* DELETE sql with its one parameter (types "i" or "t", as db_bindv) in
 * one transaction recording (kind, id). */
static int delete_one(enum cfg_kind kind, int64_t id, bool *existed, const char *sql,
                      const char *types, ...)
{
    struct cfg_tx tx;
    va_list ap;
    *existed = false;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    va_start(ap, types);
    rc = db_runv(sql, types, ap);
    va_end(ap);
    *existed = rc == 0 && sqlite3_changes(db_handle()) > 0;
    cfg_tx_changed(&tx, kind, id, CFG_DELETED);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    return cfg_tx_commit(&tx);
}

static int key_delete(int64_t id, bool *existed)
{
    int rc = delete_one(CFG_API_KEY, id, existed, "DELETE FROM api_key WHERE id = ?", "i", id);
    if (rc == 0) {
        bool had_roles;
        rc = delete_one(CFG_API_KEY, id, &had_roles, "DELETE FROM api_key_role WHERE key_id = ?",
                        "i", id);
    }
    return rc;
}

static int key_update(int64_t id, const char *name, unsigned roles)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    /* (name = name: the row count still tells whether the key exists) */
    if (name)
        rc = db_run("UPDATE api_key SET name = ? WHERE id = ?", "ti", name, id);
    else
        rc = db_run("UPDATE api_key SET name = name WHERE id = ?", "i", id);
    if (rc == 0 && sqlite3_changes(db_handle()) == 0)
        rc = -ENOENT;
    if (rc == 0 && roles)
        rc = db_run("INSERT OR REPLACE INTO api_key_role (key_id, roles) VALUES (?, ?)", "ii", id,
                    (int64_t)roles);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_API_KEY, id, CFG_UPDATED);
    return cfg_tx_commit(&tx);
}

static int key_by_hash(const char *hash, struct api_key_rec *out, char *stored)
{
    sqlite3_stmt *st = NULL;
    db_lock();
    int rc = db_prepare(KEY_SELECT " WHERE keyhash = ?", &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, hash, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st) == SQLITE_ROW;
        if (rc == 1) {
            key_decode(st, out);
            text_col(st, 5, stored, API_KEY_HASH_LEN + 1);
        }
        sqlite3_finalize(st);
    }
    db_unlock();
    return rc;
}

/* Whether the one-row query sql (parameters as db_bindv) finds a row. */
static bool row_exists(const char *sql, const char *types, ...)
{
    bool found = false;
    sqlite3_stmt *st = NULL;
    va_list ap;
    db_lock();
    if (db_stmt(sql, &st) == 0) {
        va_start(ap, types);
        found = db_bindv(st, types, ap) == 0 && sqlite3_step(st) == SQLITE_ROW;
        va_end(ap);
        db_stmt_done(st);
    }
    db_unlock();
    return found;
}

static bool key_exists(int64_t id)
{
    return row_exists("SELECT 1 FROM api_key WHERE id = ?", "i", id);
}

/* ---- accounts ---- */

static int account_get(const char *username, struct api_account_rec *out, char *hash, size_t len)
{
    sqlite3_stmt *st = NULL;
    db_lock();
    int rc = db_prepare("SELECT id, pwgen, pwhash FROM account WHERE username = ?", &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, username, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st) == SQLITE_ROW;
        if (rc == 1) {
            memset(out, 0, sizeof(*out));
            out->id = sqlite3_column_int64(st, 0);
            out->pwgen = sqlite3_column_int64(st, 1);
            text_col(st, 2, hash, len);
            snprintf(out->username, sizeof(out->username), "%s", username);
        }
        sqlite3_finalize(st);
    }
    db_unlock();
    return rc;
}

static bool account_current(int64_t id, int64_t pwgen)
{
    return row_exists("SELECT 1 FROM account WHERE id = ? AND pwgen = ?", "ii", id, pwgen);
}

static void account_decode(sqlite3_stmt *st, void *rec)
{
    struct api_account_rec *r = rec;
    r->id = sqlite3_column_int64(st, 0);
    text_col(st, 1, r->username, sizeof(r->username));
    r->created_at = sqlite3_column_int64(st, 2);
    r->password_changed_at = sqlite3_column_int64(st, 3);
    r->pwgen = sqlite3_column_int64(st, 4);
}

static int account_list(struct api_account_rec **out, size_t *n)
{
    sqlite3_stmt *st = NULL;
    db_lock();
    int rc = db_prepare("SELECT id, username, created_at, password_changed_at, pwgen FROM account "
                        "ORDER BY id",
                        &st);
    void *v;
    rc = list_rows(st, rc, sizeof(**out), account_decode, "account", &v, n);
    db_unlock();
    *out = v;
    return rc;
}

/* The id of account username into *id (0: none). Inside a transaction. */
static int account_id(const char *username, int64_t *id)
{
    sqlite3_stmt *st = NULL;
    *id = 0;
    int rc = db_prepare("SELECT id FROM account WHERE username = ?", &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, username, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW)
        *id = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return 0;
}

static int account_set_hash(const char *username, const char *hash, int64_t now, int64_t *id,
                            bool *created)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    int64_t old_id;
    rc = account_id(username, &old_id);
    *created = old_id == 0;
    if (rc == 0 && *created)
        rc = db_run("INSERT INTO account (pwhash, password_changed_at, created_at, username) "
                    "VALUES (?, ?, ?, ?)",
                    "tiit", hash, now, now, username);
    else if (rc == 0)
        rc = db_run("UPDATE account SET pwhash = ?, password_changed_at = ?, pwgen = pwgen + 1 "
                    "WHERE id = ?",
                    "tii", hash, now, old_id);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    *id = *created ? sqlite3_last_insert_rowid(db_handle()) : old_id;
    cfg_tx_changed(&tx, CFG_USER, *id, *created ? CFG_CREATED : CFG_UPDATED);
    return cfg_tx_commit(&tx);
}

static int account_delete(const char *username, bool *existed)
{
    return delete_one(CFG_USER, 0, existed, "DELETE FROM account WHERE username = ?", "t",
                      username);
}

/* ---- service settings ---- */

static int service_enable_get(const char *name)
{
    char key[64];
    snprintf(key, sizeof(key), "service.%s.enable", name);
    char *v = NULL;
    db_lock();
    int rc = db_setting_get(key, &v);
    db_unlock();
    if (rc == 0 && v)
        rc = strcmp(v, "0") != 0 && strcmp(v, "false") != 0;
    else if (rc == 0)
        rc = -ENOENT;
    free(v);
    return rc;
}

static int service_enable_put(const char *name, int64_t id, bool on)
{
    char key[64];
    snprintf(key, sizeof(key), "service.%s.enable", name);
    return cfg_setting_put(key, on ? "1" : "0", CFG_SERVICE, id);
}

static const struct api_store_ops ops = {
    .key_list = key_list,
    .key_create = key_create,
    .key_update = key_update,
    .key_delete = key_delete,
    .key_by_hash = key_by_hash,
    .key_exists = key_exists,
    .account_get = account_get,
    .account_current = account_current,
    .account_list = account_list,
    .account_set_hash = account_set_hash,
    .account_delete = account_delete,
    .service_enable_get = service_enable_get,
    .service_enable_put = service_enable_put,
};

void apistore_init(void)
{
    db_register_schema(key_schema);
    db_register_schema(key_role_schema);
    db_register_schema(account_schema);
    api_store_set(&ops);
}
