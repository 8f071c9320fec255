/*
 * The configuration database: one SQLite connection in WAL mode, serialized
 * by one recursive mutex so that a handler can call helpers that lock again.
 * Nested db_begin() calls become SAVEPOINTs, so a helper that runs its own
 * transaction composes with a caller that already has one open.
 */
#include "config/db.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include "core/log.h"

#define DB_MAX_SCHEMAS 64
#define DB_BUSY_TIMEOUT_MS 10000

static pthread_mutex_t db_mutex;
static pthread_once_t db_mutex_once = PTHREAD_ONCE_INIT;
static sqlite3 *db_conn;
static const char *db_schemas[DB_MAX_SCHEMAS];
static size_t db_schema_count;
static unsigned db_tx_depth; /* protected by db_mutex */

static const char db_base_schema[] = "CREATE TABLE IF NOT EXISTS settings ("
                                     " key TEXT PRIMARY KEY NOT NULL,"
                                     " value TEXT NOT NULL);";

static void db_mutex_init(void)
{
    pthread_mutexattr_t attr;

    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&db_mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

void db_lock(void)
{
    pthread_once(&db_mutex_once, db_mutex_init);
    pthread_mutex_lock(&db_mutex);
}

void db_unlock(void)
{
    pthread_mutex_unlock(&db_mutex);
}

sqlite3 *db_handle(void)
{
    return db_conn;
}

void db_register_schema(const char *sql)
{
    size_t i;

    /* Idempotent so that a module initialised twice (tests) registers once. */
    for (i = 0; i < db_schema_count; i++)
        if (db_schemas[i] == sql)
            return;
    if (db_schema_count == DB_MAX_SCHEMAS) {
        log_error("db: too many schemas registered (max %d)", DB_MAX_SCHEMAS);
        abort();
    }
    db_schemas[db_schema_count++] = sql;
}

int db_exec(const char *sql)
{
    char *err = NULL;
    int rc;

    rc = sqlite3_exec(db_conn, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        log_error("db: %s (in \"%.80s\")", err ? err : sqlite3_errstr(rc), sql);
        sqlite3_free(err);
        return -EIO;
    }
    return 0;
}

/* A pragma whose result row we only want to check. */
static int db_pragma_expect(const char *sql, const char *expect)
{
    sqlite3_stmt *st = NULL;
    int rc, ret = -EIO;

    rc = sqlite3_prepare_v2(db_conn, sql, -1, &st, NULL);
    if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);
        if (!expect || (v && strcmp(v, expect) == 0))
            ret = 0;
        else
            log_error("db: %s returned %s, wanted %s", sql, v ? v : "NULL", expect);
    } else {
        log_error("db: %s: %s", sql, sqlite3_errmsg(db_conn));
    }
    sqlite3_finalize(st);
    return ret;
}

int db_open(const char *path)
{
    int rc, ret, fd;
    size_t i;

    db_lock();
    if (db_conn) {
        db_unlock();
        log_error("db: %s: already open", path);
        return -EBUSY;
    }
    /* The database holds secrets (CHAP, API keys): owner-only. SQLite gives
     * the -wal and -shm files the database file's mode. */
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        ret = -errno;
        log_error("db: cannot open %s: %s", path, strerror(-ret));
        db_unlock();
        return ret;
    }
    if (fchmod(fd, 0600) < 0)
        log_warn("db: chmod 0600 %s: %s", path, strerror(errno));
    close(fd);
    rc = sqlite3_open_v2(path, &db_conn,
                         SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        log_error("db: cannot open %s: %s", path,
                  db_conn ? sqlite3_errmsg(db_conn) : sqlite3_errstr(rc));
        ret = rc == SQLITE_CANTOPEN ? -EACCES : -EIO;
        goto fail;
    }
    sqlite3_extended_result_codes(db_conn, 1);
    sqlite3_busy_timeout(db_conn, DB_BUSY_TIMEOUT_MS);
    ret = -EIO;
    /* WAL keeps readers (other processes, sqlite3 CLI) from blocking us;
     * synchronous=FULL because every API write must survive a power cut. */
    if (db_pragma_expect("PRAGMA journal_mode=WAL", "wal") < 0)
        goto fail;
    if (db_exec("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;") < 0)
        goto fail;
    if (db_pragma_expect("PRAGMA foreign_keys", "1") < 0)
        goto fail;
    if (db_begin() < 0)
        goto fail;
    if (db_exec(db_base_schema) < 0) {
        db_rollback();
        goto fail;
    }
    for (i = 0; i < db_schema_count; i++) {
        if (db_exec(db_schemas[i]) < 0) {
            db_rollback();
            goto fail;
        }
    }
    if (db_commit() < 0)
        goto fail;
    db_unlock();
    log_debug("db: opened %s", path);
    return 0;

fail:
    if (db_conn)
        sqlite3_close_v2(db_conn);
    db_conn = NULL;
    db_tx_depth = 0;
    db_unlock();
    return ret;
}

void db_close(void)
{
    db_lock();
    if (db_conn) {
        if (db_tx_depth) {
            log_warn("db: closing with an open transaction; rolling back");
            sqlite3_exec(db_conn, "ROLLBACK", NULL, NULL, NULL);
        }
        if (sqlite3_close_v2(db_conn) != SQLITE_OK)
            log_warn("db: close: %s", sqlite3_errmsg(db_conn));
        db_conn = NULL;
    }
    db_tx_depth = 0;
    db_unlock();
}

int db_begin(void)
{
    char sql[48];

    if (!db_conn)
        return -EIO;
    if (db_tx_depth == 0) {
        if (db_exec("BEGIN IMMEDIATE") < 0)
            return -EIO;
    } else {
        snprintf(sql, sizeof(sql), "SAVEPOINT sp%u", db_tx_depth);
        if (db_exec(sql) < 0)
            return -EIO;
    }
    db_tx_depth++;
    return 0;
}

int db_commit(void)
{
    char sql[48];

    if (!db_conn || db_tx_depth == 0) {
        log_error("db: commit without a transaction");
        return -EIO;
    }
    if (db_tx_depth == 1) {
        if (db_exec("COMMIT") < 0) {
            /* A failed COMMIT may leave the transaction open; end it so the
             * connection stays usable. */
            if (!sqlite3_get_autocommit(db_conn))
                sqlite3_exec(db_conn, "ROLLBACK", NULL, NULL, NULL);
            db_tx_depth = 0;
            return -EIO;
        }
    } else {
        snprintf(sql, sizeof(sql), "RELEASE sp%u", db_tx_depth - 1);
        if (db_exec(sql) < 0)
            return -EIO;
    }
    db_tx_depth--;
    return 0;
}

void db_rollback(void)
{
    char sql[80];

    if (!db_conn || db_tx_depth == 0)
        return;
    if (db_tx_depth == 1) {
        if (!sqlite3_get_autocommit(db_conn))
            db_exec("ROLLBACK");
    } else {
        snprintf(sql, sizeof(sql), "ROLLBACK TO sp%u; RELEASE sp%u", db_tx_depth - 1,
                 db_tx_depth - 1);
        db_exec(sql);
    }
    db_tx_depth--;
}

int db_errno_from(int code)
{
    switch (code) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return 0;
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
        return EEXIST;
    case SQLITE_CONSTRAINT_FOREIGNKEY:
        /* Almost always: deleting a row others still reference. */
        return EBUSY;
    case SQLITE_CONSTRAINT_NOTNULL:
    case SQLITE_CONSTRAINT_CHECK:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
        return EINVAL;
    }
    switch (code & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return EBUSY;
    case SQLITE_NOMEM:
        return ENOMEM;
    case SQLITE_READONLY:
        return EROFS;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return EPERM;
    case SQLITE_FULL:
        return ENOSPC;
    case SQLITE_CANTOPEN:
        return EACCES;
    case SQLITE_NOTFOUND:
        return ENOENT;
    case SQLITE_TOOBIG:
        return E2BIG;
    case SQLITE_CONSTRAINT:
        return EINVAL;
    case SQLITE_INTERRUPT:
    case SQLITE_ABORT:
        return EINTR;
    default:
        return EIO;
    }
}

int db_errno(void)
{
    if (!db_conn)
        return EIO;
    return db_errno_from(sqlite3_extended_errcode(db_conn));
}

int db_setting_get(const char *key, char **value)
{
    sqlite3_stmt *st = NULL;
    int rc, ret;

    *value = NULL;
    db_lock();
    if (!db_conn) {
        db_unlock();
        return -EIO;
    }
    rc = sqlite3_prepare_v2(db_conn, "SELECT value FROM settings WHERE key = ?", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        log_error("db: settings: %s", sqlite3_errmsg(db_conn));
        ret = -db_errno();
        goto out;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(st, 0);
        *value = strdup(v ? v : "");
        ret = *value ? 0 : -ENOMEM;
    } else if (rc == SQLITE_DONE) {
        ret = -ENOENT;
    } else {
        log_error("db: settings get %s: %s", key, sqlite3_errmsg(db_conn));
        ret = -db_errno();
    }
out:
    sqlite3_finalize(st);
    db_unlock();
    return ret;
}

int db_setting_set(const char *key, const char *value)
{
    sqlite3_stmt *st = NULL;
    int rc, ret;

    db_lock();
    if (!db_conn) {
        db_unlock();
        return -EIO;
    }
    rc = sqlite3_prepare_v2(db_conn,
                            "INSERT INTO settings(key, value) VALUES(?, ?)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) {
        log_error("db: settings: %s", sqlite3_errmsg(db_conn));
        ret = -db_errno();
        goto out;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        ret = 0;
    } else {
        log_error("db: settings set %s: %s", key, sqlite3_errmsg(db_conn));
        ret = -db_errno();
    }
out:
    sqlite3_finalize(st);
    db_unlock();
    return ret;
}

int db_prepare(const char *sql, sqlite3_stmt **out)
{
    int rc;

    *out = NULL;
    if (!db_conn)
        return -EIO;
    rc = sqlite3_prepare_v2(db_conn, sql, -1, out, NULL);
    if (rc != SQLITE_OK) {
        log_error("db: prepare: %s (in \"%.80s\")", sqlite3_errmsg(db_conn), sql);
        return -db_errno();
    }
    return 0;
}

int db_step_done(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);

    if (rc == SQLITE_DONE || rc == SQLITE_ROW)
        return 0;
    if ((rc & 0xff) != SQLITE_CONSTRAINT)
        log_error("db: %s (in \"%.80s\")", sqlite3_errmsg(db_conn), sqlite3_sql(st));
    return -db_errno_from(sqlite3_extended_errcode(db_conn));
}
