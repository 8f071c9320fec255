/*
 * control/cfgtx: the one transaction path. Publishers see the changes of a
 * committed transaction (after COMMIT: the rows are visible and durable),
 * never those of a rolled-back one; nested transactions join the outer
 * one (their changes are published with it, or dropped with their
 * savepoint); after hooks run once the DB lock is released; kinds filter
 * which publisher runs.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "control/cfgtx.h"
#include "control/events.h"
#include "control/db.h"
#include "testdb.h"

static struct testdb tdb; /* made by setup */

static const char schema[] = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY,"
                             " name TEXT NOT NULL UNIQUE);";

/* What the test publishers saw. */
static struct cfg_change seen[32];
static size_t n_seen, n_publish, n_after, n_other;
static bool seen_defer, row_visible, lock_free_in_after;
/* The after hook rejects the commit with this (0: it does not). */
static int after_reject;
static bool after_commits; /* the after hook commits a transaction itself */

static int count_rows(void)
{
    sqlite3_stmt *st;
    int n = -1;
    db_lock();
    if (db_prepare("SELECT COUNT(*) FROM t", &st) == 0) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    db_unlock();
    return n;
}

static void publish(const struct cfg_changes *ch, void *arg)
{
    (void)arg;
    n_publish++;
    seen_defer = ch->defer;
    for (size_t i = 0; i < ch->n && n_seen < 32; i++)
        seen[n_seen++] = ch->v[i];
    /* committed: no transaction open, the rows are there */
    row_visible = sqlite3_get_autocommit(db_handle()) && count_rows() > 0;
}

static void after(void *arg)
{
    (void)arg;
    n_after++;
    lock_free_in_after = db_lock_depth() == 0;
    if (after_reject)
        cfg_tx_after_fail(after_reject, "taken by another member");
    /* the gateway sync saves its bookkeeping from its after hook */
    if (after_commits)
        assert_int_equal(cfg_setting_put("test.after", "x", CFG_SERVICE, 0), 0);
}

static void other_publish(const struct cfg_changes *ch, void *arg)
{
    (void)ch;
    (void)arg;
    n_other++;
}

static int on_event(const struct event *ev, void *arg)
{
    if (ev->type == EV_CONFIG_COMMITTED)
        publish(ev->config, arg);
    else
        after(arg);
    return 0;
}

static int on_other(const struct event *ev, void *arg)
{
    other_publish(ev->config, arg);
    return 0;
}

static void reset(void)
{
    n_seen = n_publish = n_after = n_other = 0;
    seen_defer = row_visible = lock_free_in_after = false;
}

static int insert(const char *name)
{
    sqlite3_stmt *st;
    int rc = db_prepare("INSERT INTO t (name) VALUES (?)", &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = db_step_done(st);
    sqlite3_finalize(st);
    return rc;
}

static int setup(void **state)
{
    (void)state;
    if (testdb_make(&tdb, "/tmp/blockd-test-cfgtx", "config.db") < 0)
        return -1;
    db_register_schema(schema);
    if (events_subscribe(&(struct event_subscriber){.name = "test",
                                                    .types = EV_BIT(EV_CONFIG_COMMITTED) |
                                                             EV_BIT(EV_CONFIG_AFTER),
                                                    .config_kinds = CFG_KIND_BIT(CFG_NBD_EXPORT),
                                                    .fn = on_event}) < 0 ||
        events_subscribe(&(struct event_subscriber){.name = "other",
                                                    .types = EV_BIT(EV_CONFIG_COMMITTED),
                                                    .config_kinds = CFG_KIND_BIT(CFG_ISCSI_TARGET),
                                                    .fn = on_other}) < 0)
        return -1;
    return db_open(tdb.path);
}

static int teardown(void **state)
{
    (void)state;
    db_close();
    testdb_remove(&tdb);
    return 0;
}

static void test_commit_publishes(void **state)
{
    (void)state;
    reset();
    struct cfg_tx tx;
    assert_int_equal(cfg_tx_begin(&tx), 0);
    assert_ptr_equal(cfg_tx_current(), &tx);
    assert_int_equal(insert("a"), 0);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, 7, CFG_CREATED);
    assert_int_equal(n_publish, 0); /* nothing before the commit */
    assert_int_equal(cfg_tx_commit(&tx), 0);
    assert_true(tx.committed);
    assert_null(cfg_tx_current());
    assert_int_equal(n_publish, 1);
    assert_int_equal(n_seen, 1);
    assert_int_equal(seen[0].kind, CFG_NBD_EXPORT);
    assert_int_equal(seen[0].id, 7);
    assert_int_equal(seen[0].op, CFG_CREATED);
    assert_true(row_visible);
    assert_int_equal(n_after, 1);
    assert_true(lock_free_in_after);
    assert_int_equal(n_other, 0); /* kinds filter */
    assert_int_equal(db_lock_depth(), 0);
}

static void test_abort_publishes_nothing(void **state)
{
    (void)state;
    reset();
    int before = count_rows();
    struct cfg_tx tx;
    assert_int_equal(cfg_tx_begin(&tx), 0);
    assert_int_equal(insert("b"), 0);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, 8, CFG_CREATED);
    cfg_tx_abort(&tx);
    assert_int_equal(n_publish, 0);
    assert_int_equal(n_after, 0);
    assert_int_equal(count_rows(), before);
    assert_int_equal(db_lock_depth(), 0);
}

static void test_failed_commit_publishes_nothing(void **state)
{
    (void)state;
    reset();
    /* A nested transaction whose work failed (UNIQUE) rolls back its
     * savepoint; the outer one then aborts: nothing published. */
    struct cfg_tx outer, inner;
    assert_int_equal(cfg_tx_begin(&outer), 0);
    assert_int_equal(cfg_tx_begin(&inner), 0);
    assert_int_equal(insert("a"), -EEXIST);
    cfg_tx_changed(&inner, CFG_NBD_EXPORT, 9, CFG_CREATED);
    cfg_tx_abort(&inner);
    assert_ptr_equal(cfg_tx_current(), &outer);
    cfg_tx_abort(&outer);
    assert_int_equal(n_publish, 0);
    assert_int_equal(db_lock_depth(), 0);
}

static void test_nested_joins_outer(void **state)
{
    (void)state;
    reset();
    struct cfg_tx outer, inner, dropped;
    assert_int_equal(cfg_tx_begin(&outer), 0);
    outer.defer = true;
    assert_int_equal(cfg_tx_begin(&inner), 0);
    assert_ptr_equal(inner.outer, &outer);
    assert_int_equal(insert("c"), 0);
    cfg_tx_changed(&inner, CFG_NBD_EXPORT, 10, CFG_CREATED);
    inner.defer = false; /* only the outermost decides */
    assert_int_equal(cfg_tx_commit(&inner), 0);
    assert_int_equal(n_publish, 0); /* joined: published with the outer one */
    assert_int_equal(cfg_tx_begin(&dropped), 0);
    assert_int_equal(insert("d"), 0);
    cfg_tx_changed(&dropped, CFG_NBD_EXPORT, 11, CFG_CREATED);
    cfg_tx_abort(&dropped); /* its row and its change go */
    cfg_tx_changed(&outer, CFG_ISCSI_TARGET, 3, CFG_UPDATED);
    assert_int_equal(cfg_tx_commit(&outer), 0);
    assert_int_equal(n_publish, 1);
    assert_int_equal(n_other, 1);
    assert_int_equal(n_seen, 2); /* every change, the other kind included */
    assert_int_equal(seen[0].id, 10);
    assert_int_equal(seen[1].kind, CFG_ISCSI_TARGET);
    assert_true(seen_defer);
    assert_int_equal(db_lock_depth(), 0);
    db_lock();
    sqlite3_stmt *st;
    assert_int_equal(db_prepare("SELECT COUNT(*) FROM t WHERE name IN ('c', 'd')", &st), 0);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    db_unlock();
}

static void test_caller_locked_defers_after(void **state)
{
    (void)state;
    reset();
    /* A writer holding the DB lock around its transaction (datasets): the
     * publisher runs at the commit, the after hook does not run under the
     * caller's lock. */
    db_lock();
    struct cfg_tx tx;
    assert_int_equal(cfg_tx_begin(&tx), 0);
    assert_int_equal(insert("e"), 0);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, 12, CFG_UPDATED);
    assert_int_equal(cfg_tx_commit(&tx), 0);
    assert_int_equal(db_lock_depth(), 1);
    db_unlock();
    assert_int_equal(n_publish, 1);
    assert_int_equal(n_after, 0);
}

/* An after hook that finds the change refused elsewhere (gateway/
 * gwconfig.c: a name another member took) makes the commit return its
 * error, committed all the same; the next commit is not affected. */
static void test_after_fail(void **state)
{
    (void)state;
    reset();
    struct cfg_tx tx;
    assert_int_equal(cfg_tx_begin(&tx), 0);
    assert_int_equal(insert("rejected"), 0);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, 40, CFG_CREATED);
    after_reject = -EEXIST;
    assert_int_equal(cfg_tx_commit(&tx), -EEXIST);
    after_reject = 0;
    assert_true(tx.committed);
    assert_string_equal(cfg_tx_after_message(), "taken by another member");
    assert_int_equal(n_after, 1);
    assert_int_equal(db_lock_depth(), 0);
    assert_int_equal(cfg_tx_begin(&tx), 0);
    assert_int_equal(insert("accepted"), 0);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, 41, CFG_CREATED);
    assert_int_equal(cfg_tx_commit(&tx), 0);
    assert_int_equal(n_after, 2);
    /* a transaction the hook commits after rejecting keeps the rejection */
    assert_int_equal(cfg_tx_begin(&tx), 0);
    assert_int_equal(insert("rejected too"), 0);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, 42, CFG_CREATED);
    after_reject = -EEXIST;
    after_commits = true;
    assert_int_equal(cfg_tx_commit(&tx), -EEXIST);
    after_reject = 0;
    after_commits = false;
    assert_int_equal(n_after, 3);
}

static void test_setting_put(void **state)
{
    (void)state;
    reset();
    assert_int_equal(cfg_setting_put("test.key", "v1", CFG_NBD_GLOBAL, 0), 0);
    char *v = NULL;
    assert_int_equal(db_setting_get("test.key", &v), 0);
    assert_string_equal(v, "v1");
    free(v);
    assert_int_equal(n_publish, 0); /* no publisher for CFG_NBD_GLOBAL */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commit_publishes),
        cmocka_unit_test(test_abort_publishes_nothing),
        cmocka_unit_test(test_failed_commit_publishes_nothing),
        cmocka_unit_test(test_nested_joins_outer),
        cmocka_unit_test(test_caller_locked_defers_after),
        cmocka_unit_test(test_after_fail),
        cmocka_unit_test(test_setting_put),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
