/*
 * The configuration database: one SQLite connection in WAL mode, serialized
 * by one recursive mutex so that a handler can call helpers that lock again.
 * Nested db_begin() calls become SAVEPOINTs, so a helper that runs its own
 * transaction composes with a caller that already has one open.
 *
 * Durability (db.h): synchronous=NORMAL plus our own WAL hook that
 * fdatasyncs the WAL after every commit unless the committing thread asked
 * to sync later (db_commit_nosync + db_sync, group commit). The hook also
 * takes over SQLite's automatic checkpoint (sqlite3_wal_hook replaces it),
 * so nothing else may call sqlite3_wal_autocheckpoint / PRAGMA
 * wal_autocheckpoint on this connection.
 */
#include "control/db.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <fcntl.h>

#include "control/walbuf.h"
#include "core/log.h"

#define DB_MAX_SCHEMAS 64
#define DB_BUSY_TIMEOUT_MS 10000
#define DB_STMT_CACHE 256
#define DB_CHECKPOINT_PAGES 1000 /* SQLite's default auto-checkpoint */

static pthread_mutex_t db_mutex;
static pthread_once_t db_mutex_once = PTHREAD_ONCE_INIT;
static sqlite3 *db_conn;
static const char *db_schemas[DB_MAX_SCHEMAS];
static size_t db_schema_count;
static unsigned db_tx_depth;             /* protected by db_mutex */
static unsigned db_read_depth;           /* db_read_begin nesting (db_mutex) */
static __thread unsigned tls_lock_depth; /* db_lock() depth of this thread */

/* ---- statement cache (db_mutex) ---- */
struct stmt_entry {
    char *sql;
    uint32_t hash;
    bool busy; /* handed out, not yet given back */
    sqlite3_stmt *st;
};
static struct stmt_entry stmt_cache[DB_STMT_CACHE];
static size_t stmt_n;

/* ---- durability (db.h) ---- */
static pthread_mutex_t sync_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_cond = PTHREAD_COND_INITIALIZER;
static uint64_t commit_seq;    /* commits whose WAL frames are written (atomic) */
static uint64_t synced_seq;    /* commits known durable (sync_mutex) */
static int64_t last_commit_ms; /* wall clock of the last commit (atomic; metrics) */
static bool sync_running;      /* a leader is in fdatasync (sync_mutex) */
static bool sync_failed;       /* sticky (sync_mutex) */
static uint64_t sync_count;    /* fdatasync calls (sync_mutex) */
static int wal_fd = -1;        /* the leader's only (sync_running) */
static char wal_path[PATH_MAX];
static char main_path[PATH_MAX];
static __thread bool tls_nosync;     /* inside db_commit_nosync */
static __thread uint64_t tls_commit; /* seq of this thread's last commit */
static __thread bool tls_batch;      /* between db_sync_batch_begin/_end */
static __thread uint64_t tls_batch_seq;

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
    tls_lock_depth++;
}

void db_unlock(void)
{
    tls_lock_depth--;
    pthread_mutex_unlock(&db_mutex);
}

unsigned db_lock_depth(void)
{
    return tls_lock_depth;
}

/* ---- durability ---- */

/* fdatasync the WAL (the leader only). The WAL is persistent
 * (SQLITE_FCNTL_PERSIST_WAL, set in db_open): SQLite truncates it but never
 * deletes it while blockd runs, so one descriptor opened the first time it
 * exists stays valid. No stat() per sync: on this kernel a stat makes the
 * next write take a fine-grained mtime, which makes every fdatasync write
 * the inode too (3 device writes instead of 2; measured with
 * /proc/diskstats). Until the WAL exists, the main file is synced. */
static int wal_fdatasync(void)
{
    if (wal_fd < 0)
        wal_fd = open(wal_path, O_RDONLY | O_CLOEXEC);
    int fd = wal_fd;
    if (fd < 0) {
        if (errno != ENOENT) {
            log_error("db: cannot open %s to sync it: %s", wal_path, strerror(errno));
            return -EIO;
        }
        fd = open(main_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            log_error("db: cannot open %s to sync it: %s", main_path, strerror(errno));
            return -EIO;
        }
    }
    int rc = fdatasync(fd);
    int err = errno;
    if (fd != wal_fd)
        close(fd);
    if (rc < 0) {
        log_error("db: fdatasync %s: %s; configuration changes since the last sync may be "
                  "lost; restart blockd",
                  fd == wal_fd ? wal_path : main_path, strerror(err));
        return -EIO;
    }
    return 0;
}

/* Make every commit up to seq durable; one caller syncs for all waiting. */
static int sync_to(uint64_t seq)
{
    pthread_mutex_lock(&sync_mutex);
    for (;;) {
        if (sync_failed) {
            pthread_mutex_unlock(&sync_mutex);
            return -EIO;
        }
        if (synced_seq >= seq) {
            pthread_mutex_unlock(&sync_mutex);
            return 0;
        }
        if (!sync_running)
            break;
        pthread_cond_wait(&sync_cond, &sync_mutex);
    }
    sync_running = true;
    /* Every commit counted here has its frames written (the WAL hook
     * counts after the write), so this one fdatasync covers them all. */
    uint64_t target = __atomic_load_n(&commit_seq, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&sync_mutex);
    int rc = wal_fdatasync();
    pthread_mutex_lock(&sync_mutex);
    sync_running = false;
    sync_count++;
    if (rc < 0)
        sync_failed = true;
    else if (target > synced_seq)
        synced_seq = target;
    pthread_cond_broadcast(&sync_cond);
    pthread_mutex_unlock(&sync_mutex);
    return rc;
}

int db_sync(uint64_t seq)
{
    if (seq == 0)
        return 0;
    if (tls_batch) {
        if (seq > tls_batch_seq)
            tls_batch_seq = seq;
        return 0;
    }
    return sync_to(seq);
}

void db_sync_batch_begin(void)
{
    tls_batch = true;
    tls_batch_seq = 0;
}

int db_sync_batch_end(void)
{
    tls_batch = false;
    uint64_t seq = tls_batch_seq;
    tls_batch_seq = 0;
    return seq ? sync_to(seq) : 0;
}

void db_sync_stats(uint64_t *commits, uint64_t *syncs)
{
    pthread_mutex_lock(&sync_mutex);
    *commits = __atomic_load_n(&commit_seq, __ATOMIC_ACQUIRE);
    *syncs = sync_count;
    pthread_mutex_unlock(&sync_mutex);
}

int64_t db_last_commit_ms(void)
{
    return __atomic_load_n(&last_commit_ms, __ATOMIC_RELAXED);
}

/* Called by SQLite after each commit on our connection, on the committing
 * thread, once the commit's WAL frames are written. */
static int db_wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)arg;
    uint64_t seq = __atomic_add_fetch(&commit_seq, 1, __ATOMIC_ACQ_REL);
    tls_commit = seq;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    __atomic_store_n(&last_commit_ms, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                     __ATOMIC_RELAXED);
    if (pages >= DB_CHECKPOINT_PAGES) {
        /* What SQLite's auto-checkpoint would do (PASSIVE: syncs the WAL,
         * copies, syncs the database). A busy result is not an error. */
        int rc = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY)
            log_warn("db: checkpoint: %s", sqlite3_errstr(rc));
    }
    if (tls_nosync)
        return SQLITE_OK; /* the caller syncs before it acknowledges */
    /* An error here makes the committing statement fail (the commit stays
     * in the WAL, but its caller is told it may not be durable). */
    return sync_to(seq) == 0 ? SQLITE_OK : SQLITE_IOERR_FSYNC;
}

/* ---- row-change watches (db.h) ---- */

static struct db_watch *watches; /* db_mutex */

void db_watch_register(struct db_watch *w)
{
    db_lock();
    for (struct db_watch *x = watches; x; x = x->next)
        if (x == w) {
            db_unlock();
            return;
        }
    w->n = 0;
    w->overflow = true; /* nothing known yet */
    w->next = watches;
    watches = w;
    db_unlock();
}

/* Called by SQLite for each row changed on our connection (under the
 * connection's mutex, by the thread holding db_mutex). */
static void db_update_hook(void *arg, int op, const char *dbname, const char *table,
                           sqlite3_int64 rowid)
{
    (void)arg;
    (void)op;
    (void)dbname;
    for (struct db_watch *w = watches; w; w = w->next) {
        if (strcmp(w->table, table) != 0 || w->overflow)
            continue;
        if (w->n == DB_WATCH_MAX)
            w->overflow = true;
        else
            w->ids[w->n++] = rowid;
    }
}

/* A DELETE without WHERE would empty a table without row-by-row reports
 * (the truncate optimization); SQLITE_IGNORE for SQLITE_DELETE keeps the
 * DELETE but turns that optimization off, so the update hook sees every
 * row. */
static int db_authorizer(void *arg, int action, const char *a, const char *b, const char *c,
                         const char *d)
{
    (void)arg;
    (void)a;
    (void)b;
    (void)c;
    (void)d;
    return action == SQLITE_DELETE ? SQLITE_IGNORE : SQLITE_OK;
}

/* ---- statement cache ---- */

static uint32_t sql_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

int db_stmt(const char *sql, sqlite3_stmt **out)
{
    *out = NULL;
    if (!db_conn)
        return -EIO;
    if (tls_lock_depth == 0)
        return db_prepare(sql, out); /* not ours to cache: finalized by db_stmt_done */
    uint32_t h = sql_hash(sql);
    size_t i;
    for (i = 0; i < stmt_n; i++) {
        struct stmt_entry *e = &stmt_cache[i];
        if (e->hash == h && strcmp(e->sql, sql) == 0) {
            if (e->busy)
                return db_prepare(sql, out); /* nested use of the same SQL */
            e->busy = true;
            *out = e->st;
            return 0;
        }
    }
    int rc = sqlite3_prepare_v3(db_conn, sql, -1, SQLITE_PREPARE_PERSISTENT, out, NULL);
    if (rc != SQLITE_OK) {
        log_error("db: prepare: %s (in \"%.80s\")", sqlite3_errmsg(db_conn), sql);
        *out = NULL;
        return -db_errno();
    }
    if (stmt_n < DB_STMT_CACHE) {
        char *copy = strdup(sql);
        if (copy)
            stmt_cache[stmt_n++] =
                (struct stmt_entry){.sql = copy, .hash = h, .busy = true, .st = *out};
    }
    return 0;
}

void db_stmt_done(sqlite3_stmt *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < stmt_n; i++) {
        if (stmt_cache[i].st == st) {
            sqlite3_reset(st);
            sqlite3_clear_bindings(st);
            stmt_cache[i].busy = false;
            return;
        }
    }
    sqlite3_finalize(st);
}

static void stmt_cache_clear(void)
{
    for (size_t i = 0; i < stmt_n; i++) {
        sqlite3_finalize(stmt_cache[i].st);
        free(stmt_cache[i].sql);
    }
    memset(stmt_cache, 0, sizeof(stmt_cache));
    stmt_n = 0;
}

/* One statement through the cache, no result rows wanted. */
static int db_exec_cached(const char *sql)
{
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);
    if (rc < 0)
        return -EIO;
    int s = sqlite3_step(st);
    db_stmt_done(st);
    if (s != SQLITE_DONE && s != SQLITE_ROW) {
        log_error("db: %s (in \"%.80s\")", sqlite3_errmsg(db_conn), sql);
        return -EIO;
    }
    return 0;
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

/* The database holds secrets (CHAP, API keys): the file is made
 * owner-only before SQLite opens it (SQLite gives the -wal and -shm files
 * the database file's mode). 0 or -errno. */
static int db_file_prepare(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600), ret;

    if (fd < 0) {
        ret = -errno;
        log_error("db: cannot open %s: %s", path, strerror(-ret));
        return ret;
    }
    if (fchmod(fd, 0600) < 0)
        log_warn("db: chmod 0600 %s: %s", path, strerror(errno));
    close(fd);
    return 0;
}

/* db_conn through walbuf's VFS (one pwrite per commit instead of two per
 * changed page) when it registers. 0 or -errno. */
static int db_connect(const char *path)
{
    const char *vfs = walbuf_register() == 0 ? WALBUF_VFS : NULL;
    int rc = sqlite3_open_v2(
        path, &db_conn, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, vfs);

    if (rc != SQLITE_OK) {
        log_error("db: cannot open %s: %s", path,
                  db_conn ? sqlite3_errmsg(db_conn) : sqlite3_errstr(rc));
        return rc == SQLITE_CANTOPEN ? -EACCES : -EIO;
    }
    sqlite3_extended_result_codes(db_conn, 1);
    sqlite3_busy_timeout(db_conn, DB_BUSY_TIMEOUT_MS);
    return 0;
}

/* WAL keeps readers (other processes, sqlite3 CLI) from blocking us.
 * Every API write must survive a power cut: synchronous=NORMAL writes the
 * WAL without syncing at commit, and db_wal_hook syncs it after each
 * commit (or the writer does, db_sync, before acknowledging), so a commit
 * is never acknowledged before its fdatasync. Then the hooks, and foreign
 * keys checked to be on. 0 or -errno. */
static int db_configure(const char *path)
{
    int persist = 1; /* wal_fdatasync keeps one descriptor of the WAL */

    if (snprintf(wal_path, sizeof(wal_path), "%s-wal", path) >= (int)sizeof(wal_path) ||
        snprintf(main_path, sizeof(main_path), "%s", path) >= (int)sizeof(main_path))
        return -ENAMETOOLONG;
    pthread_mutex_lock(&sync_mutex);
    sync_failed = false;
    pthread_mutex_unlock(&sync_mutex);
    if (db_pragma_expect("PRAGMA journal_mode=WAL", "wal") < 0)
        return -EIO;
    if (sqlite3_file_control(db_conn, "main", SQLITE_FCNTL_PERSIST_WAL, &persist) != SQLITE_OK) {
        log_error("db: cannot make the WAL of %s persistent", path);
        return -EIO;
    }
    if (db_exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;") < 0)
        return -EIO;
    sqlite3_wal_hook(db_conn, db_wal_hook, NULL);
    sqlite3_update_hook(db_conn, db_update_hook, NULL);
    sqlite3_set_authorizer(db_conn, db_authorizer, NULL);
    if (db_pragma_expect("PRAGMA foreign_keys", "1") < 0)
        return -EIO;
    return 0;
}

/* The base schema and every module's (db_register_schema), in one
 * transaction: all of them or none. 0 or -EIO. */
static int db_schema_apply(void)
{
    if (db_begin() < 0)
        return -EIO;
    if (db_exec(db_base_schema) < 0) {
        db_rollback();
        return -EIO;
    }
    for (size_t i = 0; i < db_schema_count; i++) {
        if (db_exec(db_schemas[i]) < 0) {
            db_rollback();
            return -EIO;
        }
    }
    return db_commit() < 0 ? -EIO : 0;
}

/* Locked: open, configure and create the schema; on failure nothing stays
 * open. */
static int db_open_locked(const char *path)
{
    int ret;

    if (db_conn) {
        log_error("db: %s: already open", path);
        return -EBUSY;
    }
    ret = db_file_prepare(path);
    if (ret < 0)
        return ret;
    ret = db_connect(path);
    if (ret == 0)
        ret = db_configure(path);
    if (ret == 0)
        ret = db_schema_apply();
    if (ret < 0) {
        stmt_cache_clear();
        if (db_conn)
            sqlite3_close_v2(db_conn);
        db_conn = NULL;
        db_tx_depth = 0;
        db_read_depth = 0;
        return ret;
    }
    log_debug("db: opened %s", path);
    return 0;
}

int db_open(const char *path)
{
    int ret;

    db_lock();
    ret = db_open_locked(path);
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
        stmt_cache_clear();
        if (sqlite3_close_v2(db_conn) != SQLITE_OK)
            log_warn("db: close: %s", sqlite3_errmsg(db_conn));
        db_conn = NULL;
    }
    db_tx_depth = 0;
    db_read_depth = 0;
    pthread_mutex_lock(&sync_mutex);
    while (sync_running)
        pthread_cond_wait(&sync_cond, &sync_mutex);
    if (wal_fd >= 0)
        close(wal_fd);
    wal_fd = -1;
    /* closing checkpointed and synced everything */
    synced_seq = __atomic_load_n(&commit_seq, __ATOMIC_ACQUIRE);
    pthread_mutex_unlock(&sync_mutex);
    db_unlock();
}

int db_begin(void)
{
    char sql[48];

    if (!db_conn)
        return -EIO;
    if (db_tx_depth == 0) {
        if (db_read_depth) {
            log_error("db: a write transaction inside a read snapshot");
            return -EIO;
        }
        if (db_exec_cached("BEGIN IMMEDIATE") < 0)
            return -EIO;
    } else {
        snprintf(sql, sizeof(sql), "SAVEPOINT sp%u", db_tx_depth);
        if (db_exec_cached(sql) < 0)
            return -EIO;
    }
    db_tx_depth++;
    return 0;
}

int db_read_begin(void)
{
    if (!db_conn)
        return -EIO;
    if (db_tx_depth == 0 && db_read_depth == 0 && db_exec_cached("BEGIN") < 0)
        return -EIO;
    db_read_depth++;
    return 0;
}

void db_read_end(void)
{
    if (db_read_depth == 0 || --db_read_depth > 0 || db_tx_depth > 0)
        return;
    if (!sqlite3_get_autocommit(db_conn) && db_exec_cached("COMMIT") < 0)
        sqlite3_exec(db_conn, "ROLLBACK", NULL, NULL, NULL);
}

int db_commit(void)
{
    char sql[48];

    if (!db_conn || db_tx_depth == 0) {
        log_error("db: commit without a transaction");
        return -EIO;
    }
    if (db_tx_depth == 1) {
        if (db_exec_cached("COMMIT") < 0) {
            /* A failed COMMIT may leave the transaction open; end it so the
             * connection stays usable. */
            if (!sqlite3_get_autocommit(db_conn))
                sqlite3_exec(db_conn, "ROLLBACK", NULL, NULL, NULL);
            db_tx_depth = 0;
            return -EIO;
        }
    } else {
        snprintf(sql, sizeof(sql), "RELEASE sp%u", db_tx_depth - 1);
        if (db_exec_cached(sql) < 0)
            return -EIO;
    }
    db_tx_depth--;
    return 0;
}

int db_commit_nosync(uint64_t *seq)
{
    *seq = 0;
    if (db_tx_depth != 1)
        return db_commit(); /* a savepoint: the outer commit syncs */
    tls_nosync = true;
    tls_commit = 0;
    int rc = db_commit();
    tls_nosync = false;
    /* A transaction that wrote nothing may still have read commits not yet
     * synced: wait for the latest. */
    *seq = tls_commit ? tls_commit : __atomic_load_n(&commit_seq, __ATOMIC_ACQUIRE);
    return rc;
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
    /* cached: the iSCSI basename is read on every configuration change */
    ret = db_stmt("SELECT value FROM settings WHERE key = ?", &st);
    if (ret < 0)
        goto out;
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
    db_stmt_done(st);
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
    ret = db_stmt("INSERT INTO settings(key, value) VALUES(?, ?)"
                  " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                  &st);
    if (ret < 0)
        goto out;
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
    db_stmt_done(st);
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
