/*
 * Query push-down (pool.dataset.query, zfs.snapshot.query and their
 * get_instance): for a set of filters and options, the answer with the
 * SQL narrowing on equals the answer built from every row
 * (ds_query_pushdown = false). "available" (the pool's free space, read at
 * each call) is left out of the comparison.
 *
 * With BLOCKD_PUSHDOWN_BENCH=1 it also creates 2,000 memory volumes and
 * times 100 queries by id both ways.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "api/api.h"
#include "control/datasets.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "testdb.h"

static struct testdb tdb; /* made by setup_group */

/* The whole response (result or error) with "available" removed. */
static void strip(json_t *j)
{
    const char *k;
    json_t *v;
    size_t i;

    if (json_is_object(j)) {
        json_object_del(j, "available");
        json_object_foreach(j, k, v) strip(v);
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) strip(v);
    }
}

static json_t *call(const char *method, const char *params)
{
    char *req = NULL, *resp;
    json_t *r;

    assert_true(asprintf(&req, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
                         method, params) > 0);
    resp = api_handle_text(req, strlen(req), "unit-test");
    free(req);
    assert_non_null(resp);
    r = json_loads(resp, 0, NULL);
    free(resp);
    assert_non_null(r);
    strip(r);
    return r;
}

static void ok(const char *method, const char *params)
{
    json_t *r = call(method, params);
    if (!json_object_get(r, "result"))
        fail_msg("%s %s failed", method, params);
    json_decref(r);
}

/* Narrowed and full answers must be equal; returns the result size. */
static size_t same(const char *method, const char *params)
{
    json_t *narrow, *full;
    size_t n;

    ds_query_pushdown = true;
    narrow = call(method, params);
    ds_query_pushdown = false;
    full = call(method, params);
    ds_query_pushdown = true;
    if (!json_equal(narrow, full)) {
        char *a = json_dumps(narrow, JSON_COMPACT), *b = json_dumps(full, JSON_COMPACT);
        fail_msg("%s %s:\nnarrowed %.600s\nfull     %.600s", method, params, a, b);
    }
    n = json_is_array(json_object_get(full, "result"))
            ? json_array_size(json_object_get(full, "result"))
            : 1;
    json_decref(narrow);
    json_decref(full);
    return n;
}

static int setup_group(void **st)
{
    assert_int_equal(testdb_make(&tdb, "/tmp/blockd-test-pushdown", "blockd.db"), 0);
    datasets_init(tdb.dir);
    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(datasets_ensure_default_pool("demo"), 0);
    /* names around the subtree range of "demo/a": "demo/a.b" sorts
     * before "demo/a/…" by bytes, "demo/a0" right after it */
    static const char *const vols[] = {"demo/a/b/vol", "demo/a/c", "demo/a.b",  "demo/a0",
                                       "demo/ab",      "demo/z",   "demo/a/b/w"};
    char p[256];
    for (size_t i = 0; i < sizeof(vols) / sizeof(vols[0]); i++) {
        snprintf(p, sizeof(p),
                 "[{\"name\":\"%s\",\"type\":\"VOLUME\",\"volsize\":1048576,"
                 "\"backend\":\"%s\",\"comments\":\"c%zu\"}]",
                 vols[i], i % 3 == 2 ? "memory" : "file", i);
        ok("pool.dataset.create", p);
    }
    ok("zfs.snapshot.create", "[{\"dataset\":\"demo/a/b/vol\",\"name\":\"s1\"}]");
    ok("zfs.snapshot.create", "[{\"dataset\":\"demo/a/b/vol\",\"name\":\"s2\"}]");
    ok("zfs.snapshot.create", "[{\"dataset\":\"demo/ab\",\"name\":\"s2\"}]");
    ok("zfs.snapshot.clone", "[{\"snapshot\":\"demo/ab@s2\",\"dataset_dst\":\"demo/a/clone\"}]");
    /* inherited values come from ancestors a narrowed query does not build */
    ok("pool.dataset.update", "[\"demo\",{\"atime\":\"OFF\",\"compression\":\"LZ4\"}]");
    ok("pool.dataset.update", "[\"demo/a\",{\"compression\":\"ZSTD\",\"copies\":2}]");
    return 0;
}

static int teardown_group(void **st)
{
    datasets_flush_all();
    datasets_shutdown();
    db_close();
    return testdb_remove(&tdb) == 0 ? 0 : -1;
}

static void test_datasets(void **st)
{
    static const char *const q[] = {
        "[[[\"id\",\"=\",\"demo/a\"]]]",
        "[[[\"name\",\"=\",\"demo/a/b/vol\"]]]",
        "[[[\"id\",\"=\",\"demo\"]]]",
        "[[[\"id\",\"=\",\"demo/nope\"]]]",
        "[[[\"id\",\"=\",5]]]",
        "[[[\"id\",\"in\",[\"demo/a\",\"demo/a.b\",\"demo/nope\"]]]]",
        "[[[\"id\",\"in\",[\"demo/a/b/vol\",\"demo/a\",\"demo/a/b\"]]]]",
        "[[[\"id\",\"in\",[]]]]",
        "[[[\"id\",\"in\",[\"demo/a\",7]]]]",
        "[[[\"id\",\"^\",\"demo/a\"]]]",
        "[[[\"name\",\"^\",\"demo/a/\"]]]",
        "[[[\"name\",\"^\",\"\"]]]",
        "[[[\"id\",\"^\",\"demo/a\"]],{\"order_by\":[\"-name\"],\"limit\":2,\"offset\":1}]",
        "[[[\"id\",\"=\",\"demo/a\"]],{\"extra\":{\"flat\":false}}]",
        "[[[\"id\",\"=\",\"demo\"]],{\"extra\":{\"flat\":false}}]",
        "[[[\"id\",\"=\",\"demo/a\"]],{\"extra\":{\"retrieve_children\":false}}]",
        "[[[\"name\",\"=\",\"demo/a/b/vol\"]],{\"extra\":{\"flat\":false}}]",
        "[[[\"name\",\"in\",[\"demo/a/b\",\"demo/z\"]]],{\"extra\":{\"flat\":false,"
        "\"properties\":[],\"retrieve_children\":false,\"user_properties\":false}}]",
        "[[[\"name\",\"^\",\"demo/a/\"]],{\"extra\":{\"flat\":false,"
        "\"properties\":[\"atime\",\"compression\",\"copies\",\"dedup\"]}}]",
        "[[[\"id\",\"=\",\"demo/a\"]],{\"get\":true}]",
        "[[[\"id\",\"=\",\"demo/nope\"]],{\"get\":true}]",
        "[[[\"id\",\"in\",[\"demo/a\"]]],{\"count\":true}]",
        "[[[\"id\",\"in\",[\"demo/a/b/vol\",\"demo/a\"]],[\"type\",\"=\",\"VOLUME\"]],"
        "{\"select\":[\"id\",\"used\",\"children\"]}]",
        "[[[\"OR\",[[\"id\",\"=\",\"demo/a\"],[\"id\",\"=\",\"demo/ab\"]]]]]",
        "[[[\"id\",\"=\",\"demo/a\"],[\"name\",\"=\",\"demo/ab\"]]]",
        "[[[\"name\",\"=\",\"demo/ab\"],[\"id\",\"^\",\"demo/a\"]]]",
        "[[[\"id\",\"=\",\"demo/a/clone\"]]]",
        "[[[\"id\",\"=\",[\"demo/a\"]]]]",
        "[[[\"id\",\"bogus\",\"demo/a\"]]]",
        "[[], {}]",
        "[]",
    };
    size_t total = 0;

    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
        total += same("pool.dataset.query", q[i]);
    assert_true(total > 20); /* the filters did select rows */
    same("pool.dataset.get_instance", "[\"demo/a\"]");
    same("pool.dataset.get_instance", "[\"demo\"]");
    same("pool.dataset.get_instance", "[\"demo/nope\"]");
    same("pool.dataset.get_instance", "[3]");
}

static void test_snapshots(void **st)
{
    static const char *const q[] = {
        "[[[\"id\",\"=\",\"demo/a/b/vol@s1\"]]]",
        "[[[\"name\",\"in\",[\"demo/a/b/vol@s1\",\"demo/ab@s2\",\"noat\"]]]]",
        "[[[\"dataset\",\"=\",\"demo/a/b/vol\"]]]",
        "[[[\"dataset\",\"in\",[\"demo/a/b/vol\",\"demo/ab\"]]],{\"select\":[\"name\"]}]",
        "[[[\"id\",\"=\",\"demo/a/b/vol@nope\"]]]",
        "[[[\"id\",\"=\",\"demo/ab@s2\"]],{\"get\":true}]",
        "[[[\"id\",\"=\",\"demo/ab@s2\"],[\"dataset\",\"=\",\"demo/a/b/vol\"]]]",
        "[[[\"dataset\",\"=\",\"demo/ab\"]],{\"count\":true}]",
        "[[[\"snapshot_name\",\"=\",\"s2\"]]]",
    };
    for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
        same("zfs.snapshot.query", q[i]);
    same("zfs.snapshot.get_instance", "[\"demo/ab@s2\"]");
    same("zfs.snapshot.get_instance", "[\"demo/ab@nope\"]");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double time_queries(const char *params, int n)
{
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        json_t *r = call("pool.dataset.query", params);
        assert_int_equal(json_array_size(json_object_get(r, "result")), 1);
        json_decref(r);
    }
    return now_s() - t0;
}

/* Only with BLOCKD_PUSHDOWN_BENCH=1: 2,000 volumes, 100 queries by id. */
static void bench_2000(void **st)
{
    char p[256];
    double narrow, full;

    for (int i = 0; i < 2000; i++) {
        snprintf(p, sizeof(p),
                 "[{\"name\":\"demo/bench/v%04d\",\"type\":\"VOLUME\",\"volsize\":1048576,"
                 "\"backend\":\"memory\"}]",
                 i);
        ok("pool.dataset.create", p);
    }
    const char *q = "[[[\"id\",\"=\",\"demo/bench/v1234\"]]]";
    ds_query_pushdown = true;
    narrow = time_queries(q, 100);
    ds_query_pushdown = false;
    full = time_queries(q, 100);
    ds_query_pushdown = true;
    printf("pushdown bench: 100 x pool.dataset.query by id, 2000 volumes: "
           "narrowed %.3f s (%.2f ms each), full %.3f s (%.1f ms each)\n",
           narrow, narrow * 10, full, full * 10);
    assert_true(narrow < full);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_datasets),
        cmocka_unit_test(test_snapshots),
    };
    const struct CMUnitTest bench[] = {
        cmocka_unit_test(bench_2000),
    };
    int rc = cmocka_run_group_tests(tests, setup_group, teardown_group);
    const char *b = getenv("BLOCKD_PUSHDOWN_BENCH");

    if (rc == 0 && b && strcmp(b, "1") == 0) {
        /* setup_group makes a fresh state directory */
        rc = cmocka_run_group_tests(bench, setup_group, teardown_group);
    }
    return rc;
}
