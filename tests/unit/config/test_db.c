/*
 * control/db: open with registered schema, settings, transactions (nested
 * as savepoints), errno mapping, persistence across close/open.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/db.h"
#include "testdb.h"

static struct testdb tdb; /* made by main */

static const char schema[] = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY,"
                             " name TEXT NOT NULL UNIQUE);"
                             "CREATE TABLE IF NOT EXISTS child (id INTEGER PRIMARY KEY,"
                             " t_id INTEGER NOT NULL REFERENCES t(id));";

static int count_rows(const char *table)
{
    char sql[128];
    sqlite3_stmt *st;
    int n = -1;

    snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s", table);
    db_lock();
    if (db_prepare(sql, &st) == 0) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    db_unlock();
    return n;
}

static int insert_name(const char *name)
{
    sqlite3_stmt *st;
    int rc;

    rc = db_prepare("INSERT INTO t (name) VALUES (?)", &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = db_step_done(st);
    sqlite3_finalize(st);
    return rc;
}

static int setup(void **state)
{
    db_register_schema(schema);
    db_register_schema(schema); /* idempotent */
    assert_int_equal(db_open(tdb.path), 0);
    db_lock();
    db_exec("DELETE FROM child; DELETE FROM t; DELETE FROM settings;");
    db_unlock();
    return 0;
}

static int teardown(void **state)
{
    db_close();
    return 0;
}

static void test_open_twice(void **state)
{
    assert_int_equal(db_open(tdb.path), -EBUSY);
    assert_non_null(db_handle());
}

static void test_open_bad_path(void **state)
{
    db_close();
    assert_true(db_open("/nonexistent-dir/x/blockd.db") < 0);
    assert_null(db_handle());
    assert_int_equal(db_open(tdb.path), 0);
}

static void test_file_mode(void **state)
{
    struct stat sb;
    char wal[300];

    assert_int_equal(stat(tdb.path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    snprintf(wal, sizeof(wal), "%s-wal", tdb.path);
    if (stat(wal, &sb) == 0)
        assert_int_equal(sb.st_mode & 0077, 0);
}

static void test_wal_and_fk(void **state)
{
    sqlite3_stmt *st;

    db_lock();
    assert_int_equal(db_prepare("PRAGMA journal_mode", &st), 0);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    assert_int_equal(db_prepare("PRAGMA foreign_keys", &st), 0);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    db_unlock();
}

static void test_settings(void **state)
{
    char *v = NULL;

    assert_int_equal(db_setting_get("missing", &v), -ENOENT);
    assert_null(v);
    assert_int_equal(db_setting_set("k", "one"), 0);
    assert_int_equal(db_setting_get("k", &v), 0);
    assert_string_equal(v, "one");
    free(v);
    assert_int_equal(db_setting_set("k", "two"), 0);
    assert_int_equal(db_setting_get("k", &v), 0);
    assert_string_equal(v, "two");
    free(v);
    assert_int_equal(db_setting_set("empty", ""), 0);
    assert_int_equal(db_setting_get("empty", &v), 0);
    assert_string_equal(v, "");
    free(v);
}

static void test_transactions(void **state)
{
    db_lock();
    assert_int_equal(db_begin(), 0);
    assert_int_equal(insert_name("a"), 0);
    db_rollback();
    db_unlock();
    assert_int_equal(count_rows("t"), 0);

    db_lock();
    assert_int_equal(db_begin(), 0);
    assert_int_equal(insert_name("a"), 0);
    /* nested: a savepoint that is rolled back alone */
    assert_int_equal(db_begin(), 0);
    assert_int_equal(insert_name("b"), 0);
    db_rollback();
    /* nested and released */
    assert_int_equal(db_begin(), 0);
    assert_int_equal(insert_name("c"), 0);
    assert_int_equal(db_commit(), 0);
    assert_int_equal(db_commit(), 0);
    db_unlock();
    assert_int_equal(count_rows("t"), 2);

    /* commit without begin is an error, not a crash */
    db_lock();
    assert_int_equal(db_commit(), -EIO);
    db_unlock();
}

static void test_errno_mapping(void **state)
{
    sqlite3_stmt *st;

    db_lock();
    assert_int_equal(insert_name("dup"), 0);
    assert_int_equal(insert_name("dup"), -EEXIST);
    assert_int_equal(db_errno(), EEXIST);

    /* foreign key: a child pointing nowhere, and deleting a referenced row */
    assert_int_equal(db_prepare("INSERT INTO child (t_id) VALUES (9999)", &st), 0);
    assert_int_equal(db_step_done(st), -EBUSY);
    sqlite3_finalize(st);
    assert_int_equal(db_exec("INSERT INTO child (t_id) SELECT id FROM t WHERE name = 'dup'"), 0);
    assert_int_equal(db_prepare("DELETE FROM t WHERE name = 'dup'", &st), 0);
    assert_int_equal(db_step_done(st), -EBUSY);
    sqlite3_finalize(st);

    /* NOT NULL */
    assert_int_equal(db_prepare("INSERT INTO t (name) VALUES (NULL)", &st), 0);
    assert_int_equal(db_step_done(st), -EINVAL);
    sqlite3_finalize(st);

    /* bad SQL */
    assert_int_equal(db_exec("THIS IS NOT SQL"), -EIO);
    assert_true(db_prepare("SELECT nope FROM nothing", &st) < 0);
    db_unlock();

    assert_int_equal(db_errno_from(SQLITE_OK), 0);
    assert_int_equal(db_errno_from(SQLITE_DONE), 0);
    assert_int_equal(db_errno_from(SQLITE_BUSY), EBUSY);
    assert_int_equal(db_errno_from(SQLITE_LOCKED), EBUSY);
    assert_int_equal(db_errno_from(SQLITE_NOMEM), ENOMEM);
    assert_int_equal(db_errno_from(SQLITE_READONLY), EROFS);
    assert_int_equal(db_errno_from(SQLITE_FULL), ENOSPC);
    assert_int_equal(db_errno_from(SQLITE_CONSTRAINT_UNIQUE), EEXIST);
    assert_int_equal(db_errno_from(SQLITE_CONSTRAINT_PRIMARYKEY), EEXIST);
    assert_int_equal(db_errno_from(SQLITE_CONSTRAINT_CHECK), EINVAL);
    assert_int_equal(db_errno_from(SQLITE_IOERR_FSYNC), EIO);
    assert_int_equal(db_errno_from(SQLITE_CORRUPT), EIO);
}

static void test_persistence(void **state)
{
    char *v = NULL;

    db_lock();
    assert_int_equal(db_begin(), 0);
    assert_int_equal(insert_name("kept"), 0);
    assert_int_equal(db_commit(), 0);
    db_unlock();
    assert_int_equal(db_setting_set("persist", "yes"), 0);
    db_close();
    assert_null(db_handle());
    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(count_rows("t"), 1);
    assert_int_equal(db_setting_get("persist", &v), 0);
    assert_string_equal(v, "yes");
    free(v);
}

static void test_closed(void **state)
{
    char *v = NULL;

    db_close();
    assert_true(db_setting_get("x", &v) < 0);
    assert_true(db_setting_set("x", "y") < 0);
    db_lock();
    assert_true(db_begin() < 0);
    db_unlock();
    assert_int_equal(db_open(tdb.path), 0);
}

/* db_stmt: the same SQL gives the same statement back once returned; a
 * nested use gets its own; without the lock nothing is cached. */
static void test_stmt_cache(void **state)
{
    sqlite3_stmt *a, *b, *c;

    db_lock();
    assert_int_equal(db_stmt("SELECT COUNT(*) FROM t WHERE name = ?", &a), 0);
    sqlite3_bind_text(a, 1, "x", -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(a), SQLITE_ROW);
    /* nested: a is busy */
    assert_int_equal(db_stmt("SELECT COUNT(*) FROM t WHERE name = ?", &b), 0);
    assert_ptr_not_equal(a, b);
    db_stmt_done(b);
    db_stmt_done(a);
    assert_int_equal(db_stmt("SELECT COUNT(*) FROM t WHERE name = ?", &c), 0);
    assert_ptr_equal(a, c);
    /* reset and unbound: a NULL parameter matches nothing */
    assert_int_equal(sqlite3_step(c), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(c, 0), 0);
    db_stmt_done(c);
    assert_int_equal(insert_name("cached"), 0);
    db_unlock();
    /* not locked: a fresh statement each time, finalized by db_stmt_done */
    assert_int_equal(db_stmt("SELECT COUNT(*) FROM t WHERE name = ?", &b), 0);
    assert_ptr_not_equal(a, b);
    sqlite3_bind_text(b, 1, "cached", -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(b), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(b, 0), 1);
    db_stmt_done(b);
}

static int insert_tx(const char *name, bool nosync, uint64_t *seq)
{
    int rc;

    db_lock();
    rc = db_begin();
    if (rc == 0)
        rc = insert_name(name);
    if (rc == 0)
        rc = nosync ? db_commit_nosync(seq) : db_commit();
    else
        db_rollback();
    db_unlock();
    return rc;
}

/* Every commit is synced before it returns, unless the writer syncs itself;
 * then one fdatasync covers every commit made before it. */
static void test_durability(void **state)
{
    uint64_t c0, s0, c1, s1, seq[3];

    db_lock();
    sqlite3_stmt *st;
    assert_int_equal(db_prepare("PRAGMA synchronous", &st), 0);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1); /* NORMAL, plus our WAL hook */
    sqlite3_finalize(st);
    db_unlock();

    db_sync_stats(&c0, &s0);
    assert_int_equal(insert_tx("d1", false, NULL), 0);
    db_sync_stats(&c1, &s1);
    assert_int_equal(c1, c0 + 1);
    assert_int_equal(s1, s0 + 1);

    /* autocommit statements are synced too */
    db_lock();
    assert_int_equal(insert_name("d2"), 0);
    db_unlock();
    db_sync_stats(&c0, &s0);
    assert_int_equal(c0, c1 + 1);
    assert_int_equal(s0, s1 + 1);

    /* group commit: three commits, one sync */
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "g%d", i);
        assert_int_equal(insert_tx(name, true, &seq[i]), 0);
        assert_true(i == 0 || seq[i] == seq[i - 1] + 1);
    }
    db_sync_stats(&c1, &s1);
    assert_int_equal(c1, c0 + 3);
    assert_int_equal(s1, s0);
    assert_int_equal(db_sync(seq[2]), 0);
    assert_int_equal(db_sync(seq[0]), 0); /* covered already */
    db_sync_stats(&c0, &s0);
    assert_int_equal(s0, s1 + 1);

    /* a batch: db_sync only records; the end syncs once */
    db_sync_batch_begin();
    assert_int_equal(insert_tx("b1", true, &seq[0]), 0);
    assert_int_equal(db_sync(seq[0]), 0);
    assert_int_equal(insert_tx("b2", true, &seq[1]), 0);
    assert_int_equal(db_sync(seq[1]), 0);
    db_sync_stats(&c1, &s1);
    assert_int_equal(s1, s0);
    assert_int_equal(db_sync_batch_end(), 0);
    db_sync_stats(&c1, &s1);
    assert_int_equal(s1, s0 + 1);
    assert_int_equal(count_rows("t"), 7);
}

struct writer_arg {
    int id;
    int rc;
};

static void *writer(void *p)
{
    struct writer_arg *a = p;
    for (int i = 0; i < 50 && a->rc == 0; i++) {
        char name[32];
        uint64_t seq;
        snprintf(name, sizeof(name), "w%d-%d", a->id, i);
        a->rc = insert_tx(name, true, &seq);
        if (a->rc == 0)
            a->rc = db_sync(seq);
    }
    return NULL;
}

/* Concurrent writers: all commit, all synced, fewer syncs than commits is
 * allowed (never more). */
static void test_group_commit_threads(void **state)
{
    pthread_t t[8];
    struct writer_arg a[8];
    uint64_t c0, s0, c1, s1;

    db_sync_stats(&c0, &s0);
    for (int i = 0; i < 8; i++) {
        a[i] = (struct writer_arg){.id = i};
        assert_int_equal(pthread_create(&t[i], NULL, writer, &a[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(a[i].rc, 0);
    }
    db_sync_stats(&c1, &s1);
    assert_int_equal(c1 - c0, 400);
    assert_true(s1 - s0 <= 400);
    assert_true(s1 > s0);
    assert_int_equal(count_rows("t"), 400);
}

/* db_watch: the rowids written in one table, row by row (even for a
 * DELETE without WHERE), overflow past DB_WATCH_MAX. */
static void test_watch(void **state)
{
    static struct db_watch w = {.table = "t"};

    db_watch_register(&w);
    db_watch_register(&w); /* once */
    db_lock();
    assert_true(w.overflow); /* nothing known at first */
    w.overflow = false;
    w.n = 0;
    assert_int_equal(insert_name("w1"), 0);
    int64_t id = sqlite3_last_insert_rowid(db_handle());
    assert_int_equal(w.n, 1);
    assert_int_equal(w.ids[0], id);
    assert_int_equal(db_exec("UPDATE t SET name = 'w2'"), 0);
    assert_int_equal(w.n, 2);
    assert_int_equal(db_exec("DELETE FROM t"), 0);
    assert_int_equal(w.n, 3); /* reported row by row */
    assert_int_equal(w.ids[2], id);
    assert_false(w.overflow);
    for (int i = 0; i < DB_WATCH_MAX; i++) {
        char name[16];
        snprintf(name, sizeof(name), "o%d", i);
        assert_int_equal(insert_name(name), 0);
    }
    assert_true(w.overflow);
    db_unlock();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_bad_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wal_and_fk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transactions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errno_mapping, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stmt_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_durability, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watch, setup, teardown),
    };
    int rc;

    if (testdb_make(&tdb, "/tmp/blockd-test-db", "test.db") < 0)
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    testdb_remove(&tdb);
    return rc;
}
