/*
 * nbd/config/nbdstore: the NBD server settings as one settings key per field
 * (round trip, defaults kept for what is not stored or not valid), and the
 * move of an older version's "nbd.global" JSON text into those keys when
 * the database opens.
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

#include "control/db.h"
#include "nbd/config/nbdstore.h"
#include "testdb.h"

static struct testdb tdb; /* made by main */

static void defaults(struct nbd_global *g)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->listen, sizeof(g->listen), "0.0.0.0:10809");
    g->tls_verify_peer = true;
    g->max_connections = 1024;
    g->max_request_size = 32u << 20;
    g->max_inflight = 64;
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(db_open(tdb.path), 0);
    db_lock();
    db_exec("DELETE FROM settings;");
    db_unlock();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    db_close();
    return 0;
}

static void test_nothing_stored(void **state)
{
    (void)state;
    struct nbd_global g, d;
    defaults(&g);
    defaults(&d);
    assert_int_equal(nbd_global_load(&g), 0);
    assert_memory_equal(&g, &d, sizeof(g));
}

static void test_round_trip(void **state)
{
    (void)state;
    struct nbd_global g, back;
    defaults(&g);
    snprintf(g.listen, sizeof(g.listen), "127.0.0.1:10900");
    snprintf(g.unix_socket, sizeof(g.unix_socket), "/run/blockd/nbd.sock");
    snprintf(g.tls_cert, sizeof(g.tls_cert), "/etc/blockd/cert.pem");
    g.tls_verify_peer = false;
    g.max_connections = 65536;
    g.max_request_size = 4096;
    g.max_inflight = 1;
    assert_int_equal(nbd_global_store(&g), 0);
    defaults(&back);
    assert_int_equal(nbd_global_load(&back), 0);
    assert_memory_equal(&g, &back, sizeof(g));

    char *v = NULL;
    assert_int_equal(db_setting_get("nbd.global.tls_verify_peer", &v), 0);
    assert_string_equal(v, "0");
    free(v);
    assert_int_equal(db_setting_get("nbd.global.max_connections", &v), 0);
    assert_string_equal(v, "65536");
    free(v);
}

static void test_invalid_value_keeps_default(void **state)
{
    (void)state;
    struct nbd_global g;
    assert_int_equal(db_setting_set("nbd.global.max_inflight", "many"), 0);
    assert_int_equal(db_setting_set("nbd.global.max_connections", "4294967296"), 0);
    assert_int_equal(db_setting_set("nbd.global.tls_verify_peer", "yes"), 0);
    assert_int_equal(db_setting_set("nbd.global.max_request_size", "8192"), 0);
    defaults(&g);
    assert_int_equal(nbd_global_load(&g), 0);
    assert_int_equal(g.max_inflight, 64);
    assert_int_equal(g.max_connections, 1024);
    assert_true(g.tls_verify_peer);
    assert_int_equal(g.max_request_size, 8192);
}

static void test_old_json_moved(void **state)
{
    (void)state;
    assert_int_equal(db_setting_set("nbd.global",
                                    "{\"id\":1,\"listen\":\"127.0.0.1:10999\",\"max_inflight\":7,"
                                    "\"tls_verify_peer\":false,\"tls_key\":\"/k.pem\","
                                    "\"unknown\":\"x\",\"max_connections\":[1]}"),
                     0);
    db_close();
    assert_int_equal(db_open(tdb.path), 0); /* the schema moves it */

    char *v = NULL;
    assert_int_equal(db_setting_get("nbd.global", &v), -ENOENT);
    assert_int_equal(db_setting_get("nbd.global.unknown", &v), -ENOENT);
    assert_int_equal(db_setting_get("nbd.global.max_connections", &v), -ENOENT);
    struct nbd_global g;
    defaults(&g);
    assert_int_equal(nbd_global_load(&g), 0);
    assert_string_equal(g.listen, "127.0.0.1:10999");
    assert_int_equal(g.max_inflight, 7);
    assert_false(g.tls_verify_peer);
    assert_string_equal(g.tls_key, "/k.pem");
    assert_int_equal(g.max_connections, 1024);

    /* Opening again changes nothing (the old key is gone). */
    db_close();
    assert_int_equal(db_open(tdb.path), 0);
    struct nbd_global again;
    defaults(&again);
    assert_int_equal(nbd_global_load(&again), 0);
    assert_memory_equal(&g, &again, sizeof(g));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nothing_stored, setup, teardown),
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_value_keeps_default, setup, teardown),
        cmocka_unit_test_setup_teardown(test_old_json_moved, setup, teardown),
    };
    int rc;

    if (testdb_make(&tdb, "/tmp/blockd-test-nbdstore", "test.db") < 0)
        return 1;
    nbdstore_init();
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    testdb_remove(&tdb);
    return rc;
}
