/*
 * gwsync/gwconfig_rows.c: the group's local view. Its keys and the
 * gwc_dump of its values are the group's wire format (members of
 * different versions compare them), so the expected dumps below are the
 * ones blockd produced when it still read those rows with its own SQL
 * (before the reads moved into control/'s typed stores); they
 * must not change. The rows are made with SQL straight into the tables,
 * so that odd stored values (a NULL and an empty alias, an
 * auth_networks text that is not an array, a boolean stored as 5) are
 * covered as well. Also: which datasets are known and shared here.
 */
#include <errno.h>
#include <jansson.h>
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

#include "control/datasets.h"
#include "control/db.h"
#include "nbd/config/nbdstore.h"
#include "nvme/config/nvmet_store.h"
#include "gwsync/gwconfig_internal.h"
#include "testdb.h"

void iscsi_config_init(void);

static struct testdb tdb; /* made by main */

/* Pools rbdp and rbd2 are RBD pools; filep and rbdpX are not. */
static const char fixture[] =
    "INSERT INTO pools (id, name, path, created) VALUES (1, 'rbdp', 'rbd:ceph', 0), (2, 'filep', "
    "'/tmp/filep', 0), (3, 'rbd2', 'rbd:x/ns', 0), (4, 'rbdpX', '/tmp/rbdpX', 0);\n"
    "INSERT INTO pool_rbd (pool_id, rbd_pool, namespace, conf, ceph_id, keyring) VALUES (1, "
    "'ceph', '', '/etc/ceph/ceph.conf', 'admin', ''), (3, 'x', 'ns', '', '', '');\n"
    "INSERT INTO datasets (id, name, pool_id, type, created) VALUES (1, 'rbdp', 1, 'FILESYSTEM', "
    "0), (2, 'rbdp/v1', 1, 'VOLUME', 0), (3, 'rbdp/a', 1, 'FILESYSTEM', 0), (4, 'rbdp/a/b', 1, "
    "'VOLUME', 0), (5, 'filep/v', 2, 'VOLUME', 0);\n"
    "INSERT INTO iscsi_extent (id, name, type, disk, path, filesize, serial, blocksize, "
    "pblocksize, avail_threshold, comment, naa, insecure_tpc, xen, rpm, ro, enabled, vendor, gen) "
    "VALUES\n"
    " (1, 'e1', 'DISK', 'zvol/rbdp/v1', NULL, 0, 'ser1', 512, 0, NULL, '', 'naa1', 1, 0, 'SSD', 0, "
    "1, 'BLOCKD', 0),\n"
    " (2, 'e2', 'DISK', 'zvol/rbdp/a/b', NULL, 0, 'ser2', 4096, 1, 80, 'h\xc3"
    "\xa9"
    "llo \"q\" \\ /', 'naa2', 0, 1, '7200', 5, 0, 'BLOCKD', 3),\n"
    " (3, 'e3', 'FILE', NULL, '/tmp/filep/f', 1024, 'ser3', 512, 0, NULL, '', 'naa3', 1, 0, 'SSD', "
    "0, 1, 'BLOCKD', 0),\n"
    " (4, 'e4', 'DISK', 'zvol/filep/v', NULL, 0, 'ser4', 512, 0, NULL, '', 'naa4', 1, 0, 'SSD', 0, "
    "1, 'BLOCKD', 0),\n"
    " (5, 'e5', 'DISK', 'zvol/rbdp/v1@s', NULL, 0, 'ser5', 512, 0, NULL, '', 'naa5', 1, 0, 'SSD', "
    "0, 1, 'BLOCKD', 0),\n"
    " (6, 'e6', 'DISK', 'zvol/rbdp', NULL, 0, 'ser6', 512, 0, NULL, '', 'naa6', 1, 0, 'SSD', 0, 1, "
    "'BLOCKD', 0),\n"
    " (7, 'e7', 'DISK', 'zvol/rbdp/', NULL, 0, 'ser7', 512, 0, NULL, '', 'naa7', 1, 0, 'SSD', 0, "
    "1, 'BLOCKD', 0),\n"
    " (8, 'e8', 'DISK', 'zvol/rbd2/z', NULL, 0, 'ser8', 512, 0, 1, 'c', 'naa8', 1, 0, 'UNKNOWN', "
    "0, 1, 'BLOCKD', 0),\n"
    " (9, 'e9', 'FILE', 'zvol/rbdp/v9', '/x', 0, 'ser9', 512, 0, NULL, '', 'naa9', 1, 0, 'SSD', 0, "
    "1, 'BLOCKD', 0),\n"
    " (10, 'e10', 'DISK', 'zvol/rbdpX/v', NULL, 0, 'ser10', 512, 0, NULL, '', 'naa10', 1, 0, "
    "'SSD', 0, 1, 'BLOCKD', 0),\n"
    " (11, 'e11', 'DISK', 'zvol/rbd2/y', NULL, 0, 'ser11', 4096, 1, 99, '', 'naa11', 0, 0, 'HDD', "
    "1, 1, 'BLOCKD', 0),\n"
    " (12, 'e12', 'DISK', 'zvol/rbdp/v12', NULL, 0, 'ser12', 512, 0, NULL, '', 'naa12', 1, 0, "
    "'SSD', 0, 1, 'BLOCKD', 0),\n"
    " (13, 'e13', 'DISK', 'zvol/rbdp/v13', NULL, 0, 'ser13', 512, 0, NULL, '', 'naa13', 1, 0, "
    "'SSD', 0, 1, 'BLOCKD', 0),\n"
    " (14, 'e14', 'DISK', 'zvol/rbdp/v14', NULL, 0, 'ser14', 512, 0, NULL, '', 'naa14', 1, 0, "
    "'SSD', 0, 1, 'BLOCKD', 0);\n"
    "INSERT INTO iscsi_target (id, name, alias, mode, auth_networks, rel_tgt_id) VALUES\n"
    " (1, 'tgt1', NULL, 'ISCSI', '[]', 1),\n"
    " (2, 'tgt2', '', 'ISCSI', '[\"10.0.0.0/8\",\"192.168.1.0/24\"]', 2),\n"
    " (3, 'tgt3', 'al3', 'ISCSI', 'not json', 3),\n"
    " (4, 'tgt4', 'al4', 'ISCSI', '[]', 4),\n"
    " (5, 'tgt5', 'al5', 'ISCSI', '[\"::1/128\"]', 5),\n"
    " (6, 'tgt6', 'x \"y\"', 'ISCSI', '{\"a\":1}', 6);\n"
    "INSERT INTO iscsi_target_group (target_id, portal_id, initiator_id, authmethod, auth_tag) "
    "VALUES (2, 1, NULL, 'CHAP', 5), (2, 2, 3, 'NONE', NULL);\n"
    "INSERT INTO iscsi_targetextent (id, target_id, extent_id, lunid) VALUES\n"
    " (1, 1, 1, 0), (2, 1, 2, 1), (3, 2, 8, 0), (4, 3, 4, 0), (5, 4, 5, 0), (6, 5, 11, 3), (7, 6, "
    "12, 7), (8, 99, 13, 0), (9, 3, 999, 2), (10, 2, 14, 255), (11, 4, 3, 1);\n"
    "INSERT INTO nbd_export (id, name, dataset, path, readonly, description, multi_conn, tls, "
    "enabled) VALUES\n"
    " (1, 'n1', 'rbdp/v1', NULL, 0, '', 1, 'allow', 1),\n"
    " (2, 'n2', 'rbdp/a/b', NULL, 1, 'desc \xc3"
    "\xbc"
    " \"x\"', 0, 'require', 0),\n"
    " (3, 'n3', NULL, '/tmp/filep/f', 0, '', 1, 'allow', 1),\n"
    " (4, 'n4', 'filep/v', NULL, 0, '', 1, 'allow', 1),\n"
    " (5, 'n5', 'rbdp/v1@snap', NULL, 0, '', 1, 'allow', 1),\n"
    " (6, 'n6', 'rbd2/z', NULL, 2, 'd', 1, 'off', 1),\n"
    " (7, 'n7', 'rbdp/only-nbd', NULL, 0, '', 1, 'allow', 1),\n"
    " (8, 'n8', '', NULL, 0, '', 1, 'allow', 1);\n"
    "INSERT INTO iscsi_extent (id, name, type, disk, path, filesize, serial, blocksize, "
    "pblocksize, avail_threshold, comment, naa, insecure_tpc, xen, rpm, ro, enabled, vendor, gen) "
    "VALUES\n"
    " (15, 'e15', 'DISK', 'zvol/rbdp/v15', NULL, 0, 'ser15', 512, 0, NULL, '', 'naa15', 1, 0, "
    "'SSD', 0, 1, 'BLOCKD', 0);\n"
    "INSERT INTO iscsi_targetextent (id, target_id, extent_id, lunid) VALUES (12, 3, 15, 5);\n"
    /* nvmet: subsystem sg has namespaces on group volumes (one on a volume
     * nothing else shares), sl only a file pool's: sl, its host h2 and
     * their links stay local; ports are never the group's. */
    "INSERT INTO nvmet_subsys (id, name, subnqn, serial, allow_any_host) VALUES"
    " (1, 'sg', 'nqn.2026-01.x:sg', 'SER1', 1), (2, 'sl', 'nqn.2026-01.x:sl', 'SER2', 0);\n"
    "INSERT INTO nvmet_namespace (id, nsid, subsys_id, device_type, device_path, device_uuid,"
    " device_nguid, enabled) VALUES (1, 1, 1, 'ZVOL', 'zvol/rbdp/v1', 'u1', 'g1', 1),"
    " (2, 1, 2, 'ZVOL', 'zvol/filep/v', 'u2', 'g2', 1),"
    " (3, 2, 1, 'ZVOL', 'zvol/rbdp/only-nvme', 'u3', 'g3', 0);\n"
    "INSERT INTO nvmet_host (id, hostnqn) VALUES (1, 'nqn.h1'), (2, 'nqn.h2');\n"
    "INSERT INTO nvmet_host_subsys (id, host_id, subsys_id) VALUES (1, 1, 1), (2, 2, 2);\n"
    "INSERT INTO nvmet_port (id, \"index\", addr_trtype, addr_traddr, addr_trsvcid, addr_adrfam)"
    " VALUES (1, 3, 'TCP', '10.0.0.1', 4420, 'IPV4');\n"
    "INSERT INTO nvmet_port_subsys (id, port_id, subsys_id) VALUES (1, 1, 1), (2, 1, 2);\n";

/* key → gwc_dump of its value, as blockd wrote them with its own SQL. */
static const struct {
    const char *key, *dump;
} expected[] = {
    {"extent/e1",
     "{\"avail_threshold\":null,\"blocksize\":512,\"comment\":\"\",\"disk\":\"zvol/rbdp/"
     "v1\",\"enabled\":true,\"insecure_tpc\":true,\"name\":\"e1\",\"pblocksize\":false,\"ro\":"
     "false,\"rpm\":\"SSD\",\"serial\":\"ser1\",\"type\":\"DISK\",\"xen\":false}"},
    {"extent/e2",
     "{\"avail_threshold\":80,\"blocksize\":4096,\"comment\":\"h\xc3"
     "\xa9"
     "llo \\\"q\\\" \\\\ "
     "/\",\"disk\":\"zvol/rbdp/a/"
     "b\",\"enabled\":false,\"insecure_tpc\":false,\"name\":\"e2\",\"pblocksize\":true,\"ro\":true,"
     "\"rpm\":\"7200\",\"serial\":\"ser2\",\"type\":\"DISK\",\"xen\":true}"},
    {"extent/e8",
     "{\"avail_threshold\":1,\"blocksize\":512,\"comment\":\"c\",\"disk\":\"zvol/rbd2/"
     "z\",\"enabled\":true,\"insecure_tpc\":true,\"name\":\"e8\",\"pblocksize\":false,\"ro\":false,"
     "\"rpm\":\"UNKNOWN\",\"serial\":\"ser8\",\"type\":\"DISK\",\"xen\":false}"},
    {"extent/e11",
     "{\"avail_threshold\":99,\"blocksize\":4096,\"comment\":\"\",\"disk\":\"zvol/rbd2/"
     "y\",\"enabled\":true,\"insecure_tpc\":false,\"name\":\"e11\",\"pblocksize\":true,\"ro\":true,"
     "\"rpm\":\"HDD\",\"serial\":\"ser11\",\"type\":\"DISK\",\"xen\":false}"},
    {"extent/e12",
     "{\"avail_threshold\":null,\"blocksize\":512,\"comment\":\"\",\"disk\":\"zvol/rbdp/"
     "v12\",\"enabled\":true,\"insecure_tpc\":true,\"name\":\"e12\",\"pblocksize\":false,\"ro\":"
     "false,\"rpm\":\"SSD\",\"serial\":\"ser12\",\"type\":\"DISK\",\"xen\":false}"},
    {"extent/e13",
     "{\"avail_threshold\":null,\"blocksize\":512,\"comment\":\"\",\"disk\":\"zvol/rbdp/"
     "v13\",\"enabled\":true,\"insecure_tpc\":true,\"name\":\"e13\",\"pblocksize\":false,\"ro\":"
     "false,\"rpm\":\"SSD\",\"serial\":\"ser13\",\"type\":\"DISK\",\"xen\":false}"},
    {"extent/e14",
     "{\"avail_threshold\":null,\"blocksize\":512,\"comment\":\"\",\"disk\":\"zvol/rbdp/"
     "v14\",\"enabled\":true,\"insecure_tpc\":true,\"name\":\"e14\",\"pblocksize\":false,\"ro\":"
     "false,\"rpm\":\"SSD\",\"serial\":\"ser14\",\"type\":\"DISK\",\"xen\":false}"},
    {"extent/e15",
     "{\"avail_threshold\":null,\"blocksize\":512,\"comment\":\"\",\"disk\":\"zvol/rbdp/"
     "v15\",\"enabled\":true,\"insecure_tpc\":true,\"name\":\"e15\",\"pblocksize\":false,\"ro\":"
     "false,\"rpm\":\"SSD\",\"serial\":\"ser15\",\"type\":\"DISK\",\"xen\":false}"},
    {"lun/tgt1/0", "{\"extent\":\"e1\",\"lunid\":0,\"target\":\"tgt1\"}"},
    {"target/tgt1", "{\"alias\":null,\"auth_networks\":[],\"mode\":\"ISCSI\",\"name\":\"tgt1\"}"},
    {"lun/tgt1/1", "{\"extent\":\"e2\",\"lunid\":1,\"target\":\"tgt1\"}"},
    {"lun/tgt2/0", "{\"extent\":\"e8\",\"lunid\":0,\"target\":\"tgt2\"}"},
    {"target/tgt2", "{\"alias\":\"\",\"auth_networks\":[\"10.0.0.0/8\",\"192.168.1.0/"
                    "24\"],\"mode\":\"ISCSI\",\"name\":\"tgt2\"}"},
    {"lun/tgt5/3", "{\"extent\":\"e11\",\"lunid\":3,\"target\":\"tgt5\"}"},
    {"target/tgt5",
     "{\"alias\":\"al5\",\"auth_networks\":[\"::1/128\"],\"mode\":\"ISCSI\",\"name\":\"tgt5\"}"},
    {"lun/tgt6/7", "{\"extent\":\"e12\",\"lunid\":7,\"target\":\"tgt6\"}"},
    {"target/tgt6",
     "{\"alias\":\"x \\\"y\\\"\",\"auth_networks\":[],\"mode\":\"ISCSI\",\"name\":\"tgt6\"}"},
    {"lun/tgt2/255", "{\"extent\":\"e14\",\"lunid\":255,\"target\":\"tgt2\"}"},
    {"lun/tgt3/5", "{\"extent\":\"e15\",\"lunid\":5,\"target\":\"tgt3\"}"},
    {"target/tgt3",
     "{\"alias\":\"al3\",\"auth_networks\":[],\"mode\":\"ISCSI\",\"name\":\"tgt3\"}"},
    {"nbd/n1", "{\"dataset\":\"rbdp/"
               "v1\",\"description\":\"\",\"enabled\":true,\"multi_conn\":true,\"name\":\"n1\","
               "\"readonly\":false,\"tls\":\"allow\"}"},
    {"nbd/n2", "{\"dataset\":\"rbdp/a/b\",\"description\":\"desc \xc3"
               "\xbc"
               " \\\"x\\\"\",\"enabled\":false,\"multi_conn\":false,\"name\":\"n2\",\"readonly\":"
               "true,\"tls\":\"require\"}"},
    {"nbd/n6", "{\"dataset\":\"rbd2/"
               "z\",\"description\":\"d\",\"enabled\":true,\"multi_conn\":true,\"name\":\"n6\","
               "\"readonly\":true,\"tls\":\"off\"}"},
    {"nbd/n7", "{\"dataset\":\"rbdp/"
               "only-nbd\",\"description\":\"\",\"enabled\":true,\"multi_conn\":true,\"name\":"
               "\"n7\",\"readonly\":false,\"tls\":\"allow\"}"},
    {"nvmet/global", "{\"ana\":false,\"basenqn\":\"\",\"xport_referral\":false}"},
    {"nvmet/subsys/sg", "{\"allow_any_host\":true,\"ana\":null,\"ieee_oui\":null,\"name\":"
                        "\"sg\",\"pi_enable\":null,\"qid_max\":null,\"serial\":\"SER1\","
                        "\"subnqn\":\"nqn.2026-01.x:sg\"}"},
    {"nvmet/ns/sg/1", "{\"device_nguid\":\"g1\",\"device_path\":\"zvol/rbdp/v1\",\"device_type\":"
                      "\"ZVOL\",\"device_uuid\":\"u1\",\"enabled\":true,\"nsid\":1,\"subsys\":"
                      "\"sg\"}"},
    {"nvmet/ns/sg/2", "{\"device_nguid\":\"g3\",\"device_path\":\"zvol/rbdp/only-nvme\","
                      "\"device_type\":\"ZVOL\",\"device_uuid\":\"u3\",\"enabled\":false,"
                      "\"nsid\":2,\"subsys\":\"sg\"}"},
    {"nvmet/host/nqn.h1", "{\"hostnqn\":\"nqn.h1\"}"},
    {"nvmet/hostsubsys/sg/nqn.h1", "{\"host\":\"nqn.h1\",\"subsys\":\"sg\"}"},
    {"nvmet/portsubsys/sg/3", "{\"port_index\":3,\"subsys\":\"sg\"}"},
};

/* One DB for the group: the tests read it; test_no_rbd_pool, the last,
 * changes it. */
static int group_setup(void **state)
{
    (void)state;
    if (db_open(tdb.path) < 0)
        return -1;
    db_lock();
    int rc = db_exec(fixture);
    db_unlock();
    return rc;
}

static int group_teardown(void **state)
{
    (void)state;
    db_close();
    testdb_remove(&tdb);
    return 0;
}

static void test_view(void **state)
{
    (void)state;
    json_t *view = gwc_local_view();
    assert_non_null(view);
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++) {
        json_t *v = json_object_get(view, expected[i].key);
        if (!v)
            fail_msg("no %s in the view", expected[i].key);
        char *d = gwc_dump(v);
        assert_non_null(d);
        if (strcmp(d, expected[i].dump) != 0)
            fail_msg("%s: %s, expected %s", expected[i].key, d, expected[i].dump);
        free(d);
    }
    const char *key;
    json_t *v;
    json_object_foreach(view, key, v)
    {
        bool known = false;
        for (size_t i = 0; !known && i < sizeof(expected) / sizeof(expected[0]); i++)
            known = strcmp(key, expected[i].key) == 0;
        if (!known)
            fail_msg("%s is in the view, not expected", key);
    }
    json_decref(view);
}

/* Without RBD pools nothing is the group's. */
static void test_no_rbd_pool(void **state)
{
    (void)state;
    db_lock();
    assert_int_equal(db_exec("DELETE FROM pool_rbd;"), 0);
    db_unlock();
    json_t *view = gwc_local_view();
    assert_non_null(view);
    assert_int_equal(json_object_size(view), 0);
    json_decref(view);
}

static void test_datasets(void **state)
{
    (void)state;
    assert_int_equal(gwc_dataset_id("rbdp/v1"), 2);
    assert_int_equal(gwc_dataset_id("rbdp/a/b"), 4);
    assert_int_equal(gwc_dataset_id("nothing/x"), 0);
    assert_true(gwc_volume_shared_here("rbdp/v1"));        /* an extent and an export */
    assert_true(gwc_volume_shared_here("filep/v"));        /* an extent */
    assert_true(gwc_volume_shared_here("rbdp/only-nbd"));  /* an export */
    assert_true(gwc_volume_shared_here("rbdp/only-nvme")); /* an NVMe namespace */
    assert_false(gwc_volume_shared_here("rbdp/a"));
    assert_false(gwc_volume_shared_here("nothing/x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view),
        cmocka_unit_test(test_datasets),
        cmocka_unit_test(test_no_rbd_pool),
    };

    if (testdb_make(&tdb, "/tmp/blockd-test-gwrows", "test.db") < 0)
        return 1;
    datasets_init(tdb.dir);
    nbdstore_init();
    iscsi_config_init();
    nvs_init();
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
