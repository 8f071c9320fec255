/*
 * control/confgen: the configuration generation. A commit of a subscribed
 * kind builds the next generation from the previous part and the change
 * list (one build per commit, other facets shared); conf_apply, after the
 * DB lock is released, reports each object gone, replaced or new and the
 * part as a whole; readers keep an old part alive after a swap; a
 * rollback publishes nothing; deferred changes wait for conf_reload and
 * a change published at once supersedes the same object's deferred one.
 *
 * The fake front-end serves "objects" 1..N: its part lists the ids of the
 * rows of table t, each object a fresh allocation when its row changed.
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
#include "control/confgen.h"
#include "control/db.h"
#include "testdb.h"

static struct testdb tdb; /* made by setup */

static const char schema[] = "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY,"
                             " name TEXT NOT NULL);";

struct obj {
    int refs;
    int64_t id;
    char name[32];
};

static void obj_unref(struct obj *o)
{
    if (--o->refs == 0)
        free(o);
}

struct part {
    struct conf_part part;
    struct conf_obj objs[16];
    size_t n;
};

static int n_destroyed, n_builds, n_gone, n_changed, n_added, n_applied, n_after;
static bool lock_free_in_apply, saw_defer;

static void part_destroy(struct conf_part *p)
{
    struct part *x = (struct part *)p;
    for (size_t i = 0; i < x->n; i++)
        obj_unref(x->objs[i].obj);
    free(x);
    n_destroyed++;
}

/* An object of prev with this id and name (reused, as a real front-end
 * reuses unchanged objects), or NULL. */
static struct obj *reuse(const struct part *old, int64_t id, const char *name)
{
    for (size_t k = 0; old && k < old->n; k++) {
        struct obj *a = old->objs[k].obj;
        if (a->id == id && strcmp(a->name, name) == 0) {
            a->refs++;
            return a;
        }
    }
    return NULL;
}

/* The objects as stored now (new ones only for changed rows). */
static int fake_build(struct conf_part *prev, const struct cfg_changes *ch, struct conf_part **next)
{
    n_builds++;
    saw_defer = ch->defer;
    if (ch->defer)
        return 0;
    struct part *p = calloc(1, sizeof(*p));
    atomic_init(&p->part.refs, 1);
    p->part.destroy = part_destroy;
    sqlite3_stmt *st;
    assert_int_equal(db_prepare("SELECT id, name FROM t ORDER BY id", &st), 0);
    while (sqlite3_step(st) == SQLITE_ROW && p->n < 16) {
        int64_t id = sqlite3_column_int64(st, 0);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        struct obj *o = reuse((const struct part *)prev, id, name);
        if (!o) {
            o = calloc(1, sizeof(*o));
            o->refs = 1;
            o->id = id;
            snprintf(o->name, sizeof(o->name), "%s", name);
        }
        p->objs[p->n++] = (struct conf_obj){.id = id, .obj = o};
    }
    sqlite3_finalize(st);
    p->part.objs = p->objs;
    p->part.n_objs = p->n;
    *next = &p->part;
    return 0;
}

static void fake_gone(void *o)
{
    n_gone++;
    lock_free_in_apply = db_lock_depth() == 0;
}
static void fake_changed(void *o, void *n)
{
    n_changed++;
}
static void fake_added(void *n)
{
    n_added++;
}
static void fake_applied(struct conf_part *o, struct conf_part *n)
{
    n_applied++;
}
static void fake_after(void)
{
    n_after++;
}

static const struct conf_subscriber fake = {
    .name = "fake",
    .kinds = CFG_KIND_BIT(CFG_NBD_EXPORT),
    .build = fake_build,
    .gone = fake_gone,
    .changed = fake_changed,
    .added = fake_added,
    .applied = fake_applied,
    .after = fake_after,
};

static void reset(void)
{
    n_builds = n_gone = n_changed = n_added = n_applied = n_after = 0;
    lock_free_in_apply = saw_defer = false;
}

/* Run sql in one transaction recording (CFG_NBD_EXPORT, id, op). */
static int write_tx(const char *sql, int64_t id, enum cfg_op op, bool defer, bool commit)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    tx.defer = defer;
    rc = db_exec(sql);
    cfg_tx_changed(&tx, CFG_NBD_EXPORT, id, op);
    if (rc < 0 || !commit) {
        cfg_tx_abort(&tx);
        return rc;
    }
    return cfg_tx_commit(&tx);
}

static size_t part_n(void)
{
    struct conf_part *p = conf_part_get(CONF_NBD);
    size_t n = p ? p->n_objs : 0;
    conf_part_unref(p);
    return n;
}

static int setup(void **state)
{
    (void)state;
    if (testdb_make(&tdb, "/tmp/blockd-test-confgen", "config.db") < 0)
        return -1;
    db_register_schema(schema);
    if (conf_subscribe(CONF_NBD, &fake) < 0)
        return -1;
    return db_open(tdb.path);
}

static int teardown(void **state)
{
    (void)state;
    db_close();
    return testdb_remove(&tdb) == 0 ? 0 : -1;
}

static void test_subscribe_rules(void **state)
{
    static const struct conf_subscriber other = {.name = "other",
                                                 .kinds = CFG_KIND_BIT(CFG_ISCSI_TARGET)};
    assert_int_equal(conf_subscribe(CONF_NBD, &other), -EEXIST);
    static const struct conf_subscriber wrong = {.name = "wrong",
                                                 .kinds = CFG_KIND_BIT(CFG_DATASET)};
    assert_int_equal(conf_subscribe(CONF_ISCSI, &wrong), -EINVAL);
}

static void test_commit_builds_and_applies(void **state)
{
    reset();
    uint64_t before = conf_gen_number();
    assert_int_equal(write_tx("INSERT INTO t VALUES (1, 'a')", 1, CFG_CREATED, false, true), 0);
    assert_int_equal(n_builds, 1);
    assert_true(conf_gen_number() > before);
    assert_int_equal(part_n(), 1);
    assert_int_equal(n_added, 1);
    assert_int_equal(n_applied, 1);
    assert_int_equal(n_after, 1);

    /* a reader keeps its part across a swap */
    struct conf_part *held = conf_part_get(CONF_NBD);
    assert_non_null(held);
    reset();
    assert_int_equal(write_tx("INSERT INTO t VALUES (2, 'b')", 2, CFG_CREATED, false, true), 0);
    assert_int_equal(n_added, 1);
    assert_int_equal(n_changed, 0); /* object 1 kept its identity */
    assert_int_equal(n_gone, 0);
    assert_int_equal(held->n_objs, 1);
    int destroyed = n_destroyed;
    conf_part_unref(held);
    assert_int_equal(n_destroyed, destroyed + 1);

    reset();
    assert_int_equal(write_tx("UPDATE t SET name = 'b2' WHERE id = 2", 2, CFG_UPDATED, false, true),
                     0);
    assert_int_equal(n_changed, 1);
    reset();
    assert_int_equal(write_tx("DELETE FROM t WHERE id = 1", 1, CFG_DELETED, false, true), 0);
    assert_int_equal(n_gone, 1);
    assert_true(lock_free_in_apply);
    assert_int_equal(part_n(), 1);
}

static void test_rollback_and_other_kinds(void **state)
{
    reset();
    uint64_t before = conf_gen_number();
    assert_int_equal(write_tx("INSERT INTO t VALUES (3, 'c')", 3, CFG_CREATED, false, false), 0);
    assert_int_equal(n_builds, 0);
    assert_int_equal(conf_gen_number(), before);
    /* a kind nobody subscribed to builds nothing */
    struct cfg_tx tx;
    assert_int_equal(cfg_tx_begin(&tx), 0);
    cfg_tx_changed(&tx, CFG_ISCSI_TARGET, 7, CFG_UPDATED);
    assert_int_equal(cfg_tx_commit(&tx), 0);
    assert_int_equal(n_builds, 0);
    assert_int_equal(conf_gen_number(), before);
}

static void test_defer_and_reload(void **state)
{
    reset();
    size_t n0 = part_n();
    uint64_t before = conf_gen_number();
    assert_int_equal(write_tx("INSERT INTO t VALUES (4, 'd')", 4, CFG_CREATED, true, true), 0);
    assert_int_equal(n_builds, 1); /* told, with defer, and kept its part */
    assert_true(saw_defer);
    assert_int_equal(conf_gen_number(), before);
    assert_int_equal(part_n(), n0);
    db_lock();
    struct cfg_changes p = conf_pending();
    assert_int_equal(p.n, 1);
    assert_int_equal(p.v[0].id, 4);
    db_unlock();
    reset();
    assert_int_equal(conf_reload(), 0);
    assert_false(saw_defer);
    assert_int_equal(part_n(), n0 + 1);
    assert_int_equal(n_added, 1);
    db_lock();
    assert_int_equal(conf_pending().n, 0);
    db_unlock();

    /* published at once: the same object's deferred change is superseded */
    assert_int_equal(write_tx("UPDATE t SET name = 'd2' WHERE id = 4", 4, CFG_UPDATED, true, true),
                     0);
    assert_int_equal(write_tx("UPDATE t SET name = 'd3' WHERE id = 4", 4, CFG_UPDATED, false, true),
                     0);
    db_lock();
    assert_int_equal(conf_pending().n, 0);
    db_unlock();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subscribe_rules),
        cmocka_unit_test(test_commit_builds_and_applies),
        cmocka_unit_test(test_rollback_and_other_kinds),
        cmocka_unit_test(test_defer_and_reload),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
