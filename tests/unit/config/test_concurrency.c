/*
 * The config layer under concurrent API workers: many threads opening the
 * same volume share one struct volume; creates, snapshots, queries,
 * resizes and deletes from several threads at once leave a consistent
 * database and pool directory.
 */
#include <errno.h>
#include <pthread.h>
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

#include "api/api.h"
#include "control/datasets.h"
#include "control/db.h"
#include "testdb.h"

#define THREADS 8
#define ROUNDS 12

static struct testdb tdb; /* made by setup_group */

/* true if the call succeeded; the response is checked to be well formed. */
static bool call(const char *method, const char *params)
{
    char req[1024], *resp;
    json_t *r;
    bool okay;

    snprintf(req, sizeof(req), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
             method, params);
    resp = api_handle_text(req, strlen(req), "conc-test");
    if (!resp)
        return false;
    r = json_loads(resp, 0, NULL);
    free(resp);
    if (!r)
        return false;
    okay = json_object_get(r, "result") != NULL;
    json_decref(r);
    return okay;
}

static struct volume *opened[THREADS];

static void *open_same(void *arg)
{
    size_t i = (size_t)(uintptr_t)arg;

    if (datasets_volume_open("demo/shared", &opened[i]) < 0)
        opened[i] = NULL;
    return NULL;
}

static void test_shared_open(void **st)
{
    pthread_t t[THREADS];

    assert_true(call("pool.dataset.create",
                     "[{\"name\":\"demo/shared\",\"type\":\"VOLUME\",\"volsize\":65536}]"));
    for (size_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, open_same, (void *)(uintptr_t)i);
    for (size_t i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (size_t i = 0; i < THREADS; i++) {
        assert_non_null(opened[i]);
        assert_ptr_equal(opened[i], opened[0]);
    }
    for (size_t i = 0; i < THREADS; i++)
        volume_unref(opened[i]);
}

static int failures;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

static void bad(const char *what)
{
    pthread_mutex_lock(&fail_lock);
    failures++;
    fprintf(stderr, "concurrency failure: %s\n", what);
    pthread_mutex_unlock(&fail_lock);
}

static void *worker(void *arg)
{
    size_t id = (size_t)(uintptr_t)arg;
    char p[512];

    for (int r = 0; r < ROUNDS; r++) {
        snprintf(p, sizeof(p),
                 "[{\"name\":\"demo/t%zu/v%d\",\"type\":\"VOLUME\",\"volsize\":131072}]", id, r);
        if (!call("pool.dataset.create", p))
            bad("create");
        snprintf(p, sizeof(p), "[{\"dataset\":\"demo/t%zu/v%d\",\"name\":\"s\"}]", id, r);
        if (!call("zfs.snapshot.create", p))
            bad("snapshot");
        snprintf(p, sizeof(p), "[\"demo/t%zu/v%d\",{\"volsize\":262144}]", id, r);
        if (!call("pool.dataset.update", p))
            bad("update");
        if (!call("pool.dataset.query", "[[[\"type\",\"=\",\"VOLUME\"]],{\"count\":true}]"))
            bad("query");
        if (!call("zfs.snapshot.query", "[]"))
            bad("snapshot query");
        snprintf(p, sizeof(p), "[\"demo/t%zu/v%d@s\"]", id, r);
        if (!call("zfs.snapshot.rollback", p))
            bad("rollback");
        if (r % 2) {
            snprintf(p, sizeof(p), "[\"demo/t%zu/v%d\",{\"recursive\":true}]", id, r);
            if (!call("pool.dataset.delete", p))
                bad("delete");
        }
        /* the same name from two threads: exactly one create wins */
        snprintf(p, sizeof(p), "[{\"name\":\"demo/race%d\",\"type\":\"VOLUME\",\"volsize\":16384}]",
                 r);
        call("pool.dataset.create", p);
    }
    return NULL;
}

static int count(const char *sql)
{
    sqlite3_stmt *st;
    int n = -1;

    db_lock();
    if (db_prepare(sql, &st) == 0) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
    }
    db_unlock();
    return n;
}

static void test_parallel_api(void **st)
{
    pthread_t t[THREADS];
    char path[512];
    struct stat sb;

    for (size_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    for (size_t i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(failures, 0);
    /* per thread: ROUNDS/2 volumes kept with one snapshot each */
    assert_int_equal(count("SELECT COUNT(*) FROM datasets WHERE name LIKE 'demo/t%/v%'"),
                     THREADS * ROUNDS / 2);
    assert_int_equal(count("SELECT COUNT(*) FROM snapshots"), THREADS * ROUNDS / 2);
    assert_int_equal(count("SELECT COUNT(*) FROM datasets WHERE name LIKE 'demo/race%'"), ROUNDS);
    for (size_t i = 0; i < THREADS; i++) {
        for (int r = 0; r < ROUNDS; r++) {
            snprintf(path, sizeof(path), "%s/pools/demo/t%zu/v%d", tdb.dir, i, r);
            assert_int_equal(stat(path, &sb) == 0, r % 2 == 0);
            if (r % 2 == 0)
                assert_int_equal(sb.st_size, 131072); /* rolled back to the snapshot */
        }
    }
}

static int setup_group(void **st)
{
    assert_int_equal(testdb_make(&tdb, "/tmp/blockd-test-conc", "blockd.db"), 0);
    datasets_init(tdb.dir);
    assert_int_equal(db_open(tdb.path), 0);
    return datasets_ensure_default_pool("demo");
}

static int teardown_group(void **st)
{
    datasets_flush_all();
    datasets_shutdown();
    db_close();
    return testdb_remove(&tdb) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_open),
        cmocka_unit_test(test_parallel_api),
    };

    return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
