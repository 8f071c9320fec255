/*
 * The configuration database (SQLite), the source of truth. One connection,
 * guarded by one recursive lock: API handlers take db_lock() for the
 * duration of a read or of a transaction. Modules register their schema
 * (CREATE TABLE IF NOT EXISTS …) before db_open().
 */
#ifndef BLOCKD_CONFIG_DB_H
#define BLOCKD_CONFIG_DB_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void db_register_schema(const char *sql);
int db_open(const char *path);
void db_close(void);

void db_lock(void);
void db_unlock(void);
/* How many db_lock() the calling thread holds (0: not locked by it). */
unsigned db_lock_depth(void);
sqlite3 *db_handle(void); /* only while locked */

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK; take db_lock() first. 0 or -EIO. */
int db_begin(void);
int db_commit(void);
void db_rollback(void);
/* A read snapshot: the SELECTs until db_read_end share one WAL read lock
 * instead of taking and dropping it per statement (2 fcntl calls each).
 * Under db_lock(); no db_begin() inside. Inside a transaction both are
 * no-ops. db_read_begin returns 0 or -EIO. */
int db_read_begin(void);
void db_read_end(void);
/* Run SQL with no result rows (locked by caller). 0 or -EIO (logged). */
int db_exec(const char *sql);
/* Map the last SQLite error to an errno (UNIQUE → EEXIST, BUSY → EBUSY, …). */
int db_errno(void);

/* Key/value settings table for singletons (global configs). */
int db_setting_get(const char *key, char **value); /* -ENOENT if absent */
int db_setting_set(const char *key, const char *value);

/* Additions for statement-level work (locked by caller):
 * db_prepare: sqlite3_prepare_v2, logged; 0 or -errno (caller finalizes).
 * db_step_done: one sqlite3_step expecting DONE (or a first ROW); 0 or
 *   -errno per db_errno() (constraint failures are not logged: callers turn
 *   them into API errors).
 * db_errno_from: the errno for an (extended) SQLite result code.
 * Transactions nest: a db_begin() inside another becomes a SAVEPOINT. */
int db_prepare(const char *sql, sqlite3_stmt **out);
int db_step_done(sqlite3_stmt *st);
int db_errno_from(int sqlite_code);

/*
 * Cached statements (addition, control-plane performance): preparing SQL
 * costs more than running most of our statements, so hot paths keep them.
 * db_stmt() returns a prepared statement for sql, reset and with no
 * bindings, or a freshly prepared one when the cached one is in use
 * (nested use of the same SQL) or the cache is full; give it back with
 * db_stmt_done() (never sqlite3_finalize). Only while db_lock() is held by
 * the calling thread (otherwise an uncached statement is returned, which
 * db_stmt_done() finalizes). 0 or -errno (logged).
 */
int db_stmt(const char *sql, sqlite3_stmt **out);
void db_stmt_done(sqlite3_stmt *st);

/*
 * Statement helpers (db_run.c), locked by caller, for the stores'
 * statements: one way to bind, run, look up and walk.
 * db_bindv: bind ?1, ?2, ... from ap, one letter of types each: 'i' an
 *   int64_t (cast narrower or unsigned values), 'b' a bool (passed as
 *   int), 't' a const char * (copied; NULL binds NULL), 'n' NULL (takes no
 *   argument). 0, -EINVAL (an unknown letter) or -EIO (a bind failed).
 * db_run: a statement with no result rows: db_stmt(sql), bind the
 *   arguments (types as db_bindv), step once (db_step_done), give it back.
 *   0 or -errno. db_runv: the same with a va_list.
 * db_step_row: step st once for a lookup: 0 (a row: read its columns
 *   now), -ENOENT (no row) or -errno per db_errno() (not logged).
 * db_stmt_next: the step of a walk over st. True on a row; false when *rc
 *   is nonzero (the walk's body stopped it) or at the end, where a failed
 *   step sets *rc to -errno (per db_errno(), not logged):
 *       int rc = 0;
 *       while (db_stmt_next(st, &rc))
 *           rc = use(st);
 * db_stmt_each: that walk with row(st, arg) as its body: 0, row's nonzero
 *   return, or -errno.
 * The statement (st) is prepared and bound by the caller, who also gives
 * it back, except in db_run.
 */
int db_bindv(sqlite3_stmt *st, const char *types, va_list ap);
int db_run(const char *sql, const char *types, ...);
int db_runv(const char *sql, const char *types, va_list ap);
int db_step_row(sqlite3_stmt *st);
bool db_stmt_next(sqlite3_stmt *st, int *rc);
int db_stmt_each(sqlite3_stmt *st, int (*row)(sqlite3_stmt *st, void *arg), void *arg);

/*
 * Durability and group commit (addition).
 *
 * Every acknowledged write must survive a power cut. The connection runs
 * with PRAGMA synchronous=NORMAL, but a WAL hook syncs the WAL
 * (fdatasync) after each commit before the committing statement returns,
 * which is what synchronous=FULL does in WAL mode: db_commit() and
 * autocommit statements are durable when they return, as before.
 *
 * A writer that acknowledges its caller itself may instead commit with
 * db_commit_nosync(&seq), release the DB lock and call db_sync(seq) before
 * answering: writers that committed meanwhile share one fdatasync (group
 * commit), and nothing is acknowledged before the sync that covers it.
 * The WAL is a single log, so a sync covers every earlier commit.
 * Other threads may read a committed change before its sync (for well
 * under a millisecond); it is never acknowledged before it.
 *
 * db_sync_batch_begin()/_end() (per thread): db_sync() calls in between
 * only record their sequence number; _end() syncs once for all of them
 * (core.bulk: one sync before the bulk result is returned). _end() returns
 * 0 or -EIO.
 * A failed fdatasync is sticky: every later db_sync() fails with -EIO
 * (the kernel may have dropped the dirty pages; only a restart, which
 * replays the WAL, tells what is on disk).
 */
int db_commit_nosync(uint64_t *seq);
int db_sync(uint64_t seq);
void db_sync_batch_begin(void);
int db_sync_batch_end(void);
/* Counters for tests and benchmarks: commits, and fdatasync calls made. */
void db_sync_stats(uint64_t *commits, uint64_t *syncs);
/* Wall-clock time (ms since the epoch) of the last commit, 0 if none since
 * start. Any thread (metrics: when the configuration last changed). */
int64_t db_last_commit_ms(void);

/*
 * Row-change watches (addition): through SQLite's update hook, the rowids
 * INSERTed, UPDATEd or DELETEd in one table on our connection since the
 * watcher last looked (changes later rolled back included: re-reading such
 * a row is harmless). After DB_WATCH_MAX rowids, or a change SQLite does
 * not report row by row (a DELETE without WHERE), overflow is set: the
 * watcher must reread everything. Register once (db_watch_register, any
 * time, DB locked or not); read and clear the fields only with db_lock()
 * held. Not for changes made by other processes.
 */
#define DB_WATCH_MAX 256
struct db_watch {
    const char *table;
    int64_t ids[DB_WATCH_MAX];
    size_t n;
    bool overflow;
    struct db_watch *next; /* db.c's */
};
void db_watch_register(struct db_watch *w);

#endif
