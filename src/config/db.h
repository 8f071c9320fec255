/*
 * The configuration database (SQLite), the source of truth. One connection,
 * guarded by one recursive lock: API handlers take db_lock() for the
 * duration of a read or of a transaction. Modules register their schema
 * (CREATE TABLE IF NOT EXISTS …) before db_open().
 */
#ifndef BLOCKD_CONFIG_DB_H
#define BLOCKD_CONFIG_DB_H

#include <sqlite3.h>
#include <stdint.h>

void db_register_schema(const char *sql);
int db_open(const char *path);
void db_close(void);

void db_lock(void);
void db_unlock(void);
sqlite3 *db_handle(void); /* only while locked */

/* BEGIN IMMEDIATE / COMMIT / ROLLBACK; take db_lock() first. 0 or -EIO. */
int db_begin(void);
int db_commit(void);
void db_rollback(void);
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

#endif
