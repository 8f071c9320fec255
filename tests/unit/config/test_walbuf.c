/*
 * control/walbuf: commits written through the gathering VFS are in the WAL
 * file when the commit returns (a second connection on the default VFS,
 * which reads the file itself, sees them), a transaction larger than the
 * buffer (pages spilled before the commit) survives, a rolled-back one
 * leaves nothing, and after the connection is closed without a checkpoint
 * the WAL alone recovers every commit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "control/walbuf.h"
#include "testdb.h"

static struct testdb tdb; /* made by setup */

static sqlite3 *open_db(const char *vfs)
{
    sqlite3 *db = NULL;
    assert_int_equal(
        sqlite3_open_v2(tdb.path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs), SQLITE_OK);
    assert_int_equal(
        sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, NULL),
        SQLITE_OK);
    return db;
}

static long long count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(testdb_make(&tdb, "/tmp/blockd-walbuf", "t.db"), 0);
    assert_int_equal(walbuf_register(), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return testdb_remove(&tdb) == 0 ? 0 : -1;
}

static void test_commits_visible_to_other_connection(void **state)
{
    (void)state;
    sqlite3 *w = open_db(WALBUF_VFS);
    /* No automatic checkpoint: everything stays in the WAL. */
    sqlite3_wal_autocheckpoint(w, 0);
    assert_int_equal(
        sqlite3_exec(w, "CREATE TABLE t(k INTEGER PRIMARY KEY, v BLOB)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3 *r = open_db(NULL);
    for (int i = 0; i < 50; i++) {
        char sql[128];
        snprintf(sql, sizeof(sql), "INSERT INTO t(v) VALUES (randomblob(%d))", 100 + i * 97);
        assert_int_equal(sqlite3_exec(w, sql, NULL, NULL, NULL), SQLITE_OK);
        assert_int_equal(count(r, "SELECT count(*) FROM t"), i + 1);
    }
    /* Larger than the buffer: spilled in pieces before the commit. */
    assert_int_equal(sqlite3_exec(w,
                                  "BEGIN; WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n+1 "
                                  "FROM s WHERE n < 400) INSERT INTO t(v) SELECT randomblob(3000) "
                                  "FROM s; COMMIT;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(count(r, "SELECT count(*) FROM t"), 450);
    /* Rolled back: nothing of it is seen. */
    assert_int_equal(sqlite3_exec(w,
                                  "BEGIN; INSERT INTO t(v) SELECT randomblob(5000) FROM t; "
                                  "ROLLBACK;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(count(r, "SELECT count(*) FROM t"), 450);
    assert_int_equal(count(w, "SELECT count(*) FROM t"), 450);
    sqlite3_close(r);

    /* Keep the WAL as it is at close (no checkpoint into the main file),
     * then recover from it alone on the default VFS. */
    int persist = 1;
    sqlite3_file_control(w, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    sqlite3_db_config(w, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
    sqlite3_close(w);
    char wal[sizeof(tdb.path) + 8];
    snprintf(wal, sizeof(wal), "%s-wal", tdb.path);
    assert_int_equal(access(wal, F_OK), 0);
    r = open_db(NULL);
    assert_int_equal(count(r, "SELECT count(*) FROM t"), 450);
    assert_int_equal(count(r, "SELECT sum(length(v)) FROM t"),
                     400LL * 3000 + 50LL * 100 + 97LL * (49 * 50 / 2));
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(r, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commits_visible_to_other_connection),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
