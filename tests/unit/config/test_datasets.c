/*
 * Pools, datasets and snapshots through the registered API methods
 * (api_handle_text), against a temporary state directory: validation
 * errors with field names, create/query/update/delete, snapshots, clones,
 * rollback seen by an open volume, memory volumes, in-use refusals,
 * observers, and persistence across db_close/db_open.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "control/events.h"
#include "control/dsrbd.h"
#include "core/allowdir.h"
#include "testdb.h"

#define MiB (1024 * 1024)

static struct testdb tdb;
/* A directory outside the state directory that the "operator" allows
 * (blockd --allow-dir): pools and Ceph files may be named below it. */
static struct testdb tallow;

/* Call a method; returns the result (new ref) or NULL with *err set to
 * the error object (new ref). */
static json_t *rpc(const char *method, const char *params, json_t **err)
{
    char *req = NULL, *resp;
    json_t *r, *out = NULL;

    assert_true(asprintf(&req, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"%s\",\"params\":%s}",
                         method, params) > 0);
    resp = api_handle_text(req, strlen(req), "unit-test");
    free(req);
    assert_non_null(resp);
    r = json_loads(resp, 0, NULL);
    assert_non_null(r);
    if (err)
        *err = NULL;
    if (json_object_get(r, "result")) {
        out = json_incref(json_object_get(r, "result"));
    } else {
        if (err)
            *err = json_incref(json_object_get(r, "error"));
        else
            fail_msg("%s %s failed: %s", method, params, resp);
    }
    free(resp);
    json_decref(r);
    return out;
}

static json_t *ok(const char *method, const char *params)
{
    json_t *r = rpc(method, params, NULL);
    assert_non_null(r);
    return r;
}

/* Expect an invalid-params error naming field. */
static void expect_field_error(const char *method, const char *params, const char *field)
{
    json_t *err = NULL, *r = rpc(method, params, &err), *extra, *e;
    size_t i;
    bool found = false;

    if (r)
        fail_msg("%s %s unexpectedly succeeded", method, params);
    assert_non_null(err);
    if (json_integer_value(json_object_get(err, "code")) != -32602)
        fail_msg("%s %s: code %lld (%s), wanted -32602", method, params,
                 (long long)json_integer_value(json_object_get(err, "code")),
                 json_string_value(json_object_get(err, "message")));
    extra = json_object_get(json_object_get(err, "data"), "extra");
    json_array_foreach(extra, i, e)
    {
        if (strcmp(json_string_value(json_array_get(e, 0)), field) == 0)
            found = true;
    }
    if (!found)
        fail_msg("%s %s: no error for %s in %s", method, params, field,
                 json_string_value(json_object_get(err, "message")));
    json_decref(err);
}

/* Expect a call error with errno. */
static void expect_errno(const char *method, const char *params, int errnum)
{
    json_t *err = NULL, *r = rpc(method, params, &err);

    if (r)
        fail_msg("%s %s unexpectedly succeeded", method, params);
    if (json_integer_value(json_object_get(json_object_get(err, "data"), "error")) != errnum)
        fail_msg(
            "%s %s: errno %lld (%s), wanted %d", method, params,
            (long long)json_integer_value(json_object_get(json_object_get(err, "data"), "error")),
            json_string_value(json_object_get(err, "message")), errnum);
    json_decref(err);
}

static json_t *get_dataset(const char *name)
{
    char params[512];

    snprintf(params, sizeof(params), "[[[\"id\",\"=\",\"%s\"]],{\"get\":true}]", name);
    return ok("pool.dataset.query", params);
}

static json_int_t prop_parsed_int(json_t *row, const char *key)
{
    return json_integer_value(json_object_get(json_object_get(row, key), "parsed"));
}

static const char *prop_value(json_t *row, const char *key)
{
    return json_string_value(json_object_get(json_object_get(row, key), "value"));
}

static void vol_path(const char *rel, char *buf, size_t len)
{
    snprintf(buf, len, "%s/pools/demo/%s", tdb.dir, rel);
}

static int io(struct volume *v, enum vreq_op op, void *buf, size_t len, uint64_t off)
{
    struct vreq r;

    memset(&r, 0, sizeof(r));
    r.op = op;
    r.buf = buf;
    r.length = len;
    r.offset = off;
    return volume_submit_wait(v, &r);
}

/* ---- observers and in-use checks ---- */

static int ev_counts[8];
static char ev_last[256];

static int observer(const struct event *ev, void *arg)
{
    ev_counts[ev->dataset.what]++;
    snprintf(ev_last, sizeof(ev_last), "%s", ev->dataset.name);
    return 0;
}

static bool busy_check(const char *name, char *why, size_t len)
{
    if (strcmp(name, "demo/busy") == 0 || strcmp(name, "demo/busy@s") == 0) {
        snprintf(why, len, "exported over NBD as 'busy'");
        return true;
    }
    return false;
}

/* A rollback needs force only while clients are connected. */
static unsigned busy_clients(const char *name, char *why, size_t len)
{
    if (strcmp(name, "demo/busy") == 0) {
        snprintf(why, len, "exported over NBD as 'busy' with 1 connected client");
        return 1;
    }
    return 0;
}

static int setup_group(void **st)
{
    assert_int_equal(testdb_make(&tdb, "/tmp/blockd-test-datasets", "blockd.db"), 0);
    assert_int_equal(testdb_make(&tallow, "/tmp/blockd-test-allow", "unused"), 0);
    datasets_init(tdb.dir);
    datasets_register_in_use(busy_check);
    datasets_register_clients(busy_clients);
    events_subscribe(
        &(struct event_subscriber){.name = "test", .types = EV_BIT(EV_DATASET), .fn = observer});
    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(datasets_ensure_default_pool("demo"), 0);
    return 0;
}

static int teardown_group(void **st)
{
    datasets_flush_all();
    datasets_shutdown();
    db_close();
    allowdir_clear();
    return testdb_remove(&tdb) == 0 && testdb_remove(&tallow) == 0 ? 0 : -1;
}

static void test_default_pool(void **st)
{
    json_t *p = ok("pool.query", "[[[\"name\",\"=\",\"demo\"]],{\"get\":true}]");
    char want[512];
    struct stat sb;

    snprintf(want, sizeof(want), "%s/pools/demo", tdb.dir);
    assert_string_equal(json_string_value(json_object_get(p, "status")), "ONLINE");
    assert_true(strstr(json_string_value(json_object_get(p, "path")), "/pools/demo") != NULL);
    assert_true(json_integer_value(json_object_get(p, "size")) > 0);
    assert_true(json_is_integer(json_object_get(p, "free")));
    assert_int_equal(stat(want, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    json_decref(p);
    /* a second call is a no-op */
    assert_int_equal(datasets_ensure_default_pool("demo"), 0);
    /* the root dataset exists as a FILESYSTEM */
    p = get_dataset("demo");
    assert_string_equal(json_string_value(json_object_get(p, "type")), "FILESYSTEM");
    json_decref(p);
}

static void test_pool_create(void **st)
{
    char params[600], dir[512];
    struct stat sb;
    json_t *p = ok("pool.create", "[{\"name\":\"p2\"}]");

    assert_string_equal(json_string_value(json_object_get(p, "name")), "p2");
    json_decref(p);
    snprintf(dir, sizeof(dir), "%s/pools/p2", tdb.dir);
    assert_int_equal(stat(dir, &sb), 0);

    /* outside STATE/pools: only below a directory the operator allows,
     * and only new or empty */
    snprintf(dir, sizeof(dir), "%s/p3", tallow.dir);
    snprintf(params, sizeof(params), "[{\"name\":\"p3\",\"path\":\"%s\"}]", dir);
    expect_field_error("pool.create", params, "pool.create.path");
    assert_int_equal(stat(dir, &sb), -1);
    snprintf(params, sizeof(params), "[{\"name\":\"p3\",\"path\":\"%s/elsewhere\"}]", tdb.dir);
    expect_field_error("pool.create", params, "pool.create.path");
    assert_int_equal(allowdir_add(tallow.dir), 0);
    snprintf(dir, sizeof(dir), "%s/full", tallow.dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(dir, sizeof(dir), "%s/full/planted", tallow.dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(params, sizeof(params), "[{\"name\":\"p3\",\"path\":\"%s/full\"}]", tallow.dir);
    expect_field_error("pool.create", params, "pool.create.path");
    snprintf(dir, sizeof(dir), "%s/p3", tallow.dir);
    snprintf(params, sizeof(params), "[{\"name\":\"p3\",\"path\":\"%s\"}]", dir);
    p = ok("pool.create", params);
    assert_string_equal(json_string_value(json_object_get(p, "path")), dir);
    json_decref(p);
    assert_int_equal(stat(dir, &sb), 0);

    expect_field_error("pool.create", "[{\"name\":\"p2\"}]", "pool.create.name");
    /* pools may not nest or share a directory */
    snprintf(params, sizeof(params), "[{\"name\":\"p4\",\"path\":\"%s/pools/demo/sub\"}]", tdb.dir);
    expect_field_error("pool.create", params, "pool.create.path");
    snprintf(dir, sizeof(dir), "%s/pools/demo/sub", tdb.dir);
    assert_int_equal(stat(dir, &sb), -1);
    snprintf(params, sizeof(params), "[{\"name\":\"p4\",\"path\":\"%s/pools\"}]", tdb.dir);
    expect_field_error("pool.create", params, "pool.create.path");
    snprintf(params, sizeof(params), "[{\"name\":\"p4\",\"path\":\"%s/pools/p2\"}]", tdb.dir);
    expect_field_error("pool.create", params, "pool.create.path");
    p = ok("pool.get_instance", "[1]");
    assert_string_equal(json_string_value(json_object_get(p, "name")), "demo");
    json_decref(p);
    expect_errno("pool.get_instance", "[99]", ENOENT);
    expect_field_error("pool.create", "[{\"name\":\"a/b\"}]", "pool.create.name");
    expect_field_error("pool.create", "[{\"name\":\"..\"}]", "pool.create.name");
    expect_field_error("pool.create", "[{\"name\":\"x\",\"path\":\"relative\"}]",
                       "pool.create.path");
    expect_field_error("pool.create", "[{\"name\":\"x\",\"bogus\":1}]", "pool.create.bogus");
    expect_field_error("pool.create", "[{}]", "pool.create.name");

    p = ok("pool.query", "[[], {\"count\":true}]");
    assert_int_equal(json_integer_value(p), 3);
    json_decref(p);
}

static void test_create_validation(void **st)
{
    char longname[400];
    char params[600];

    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":1000}]",
                       "pool.dataset.create.volsize");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"volblocksize\":\"3K\"}]",
                       "pool.dataset.create.volblocksize");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"volblocksize\":16384}]",
                       "pool.dataset.create.volblocksize");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"sync\":\"sometimes\"}]",
                       "pool.dataset.create.sync");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"readonly\":true}]",
                       "pool.dataset.create.readonly");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,\"foo\":1}]",
                       "pool.dataset.create.foo");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":\"16M\"}]",
                       "pool.dataset.create.volsize");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":-16384}]",
                       "pool.dataset.create.volsize");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"sparse\":\"yes\"}]",
                       "pool.dataset.create.sparse");
    expect_field_error("pool.dataset.create", "[{\"name\":\"demo/x\",\"type\":\"VOLUME\"}]",
                       "pool.dataset.create.volsize");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"DISK\",\"volsize\":16384}]",
                       "pool.dataset.create.type");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/x\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"latency_us\":5}]",
                       "pool.dataset.create.latency_us");
    expect_field_error("pool.dataset.create", "[{\"name\":\"demo/x\",\"volsize\":16384}]",
                       "pool.dataset.create.volsize");
    expect_field_error("pool.dataset.create", "[{\"type\":\"VOLUME\",\"volsize\":16384}]",
                       "pool.dataset.create.name");
    expect_field_error("pool.dataset.create", "[\"demo/x\"]", "pool.dataset.create");

    static const char *const bad_names[] = {
        "demo/../x", "../x",        "/demo/x",  "demo//x", "demo/x/", "demo/./x",
        "demo/a b",  "demo/x@snap", "nopool/x", "demo",    "",
    };
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        snprintf(params, sizeof(params),
                 "[{\"name\":\"%s\",\"type\":\"VOLUME\",\"volsize\":16384}]", bad_names[i]);
        expect_field_error("pool.dataset.create", params, "pool.dataset.create.name");
    }
    memset(longname, 'a', 256);
    longname[256] = '\0';
    snprintf(params, sizeof(params),
             "[{\"name\":\"demo/%s\",\"type\":\"VOLUME\",\"volsize\":16384}]", longname);
    expect_field_error("pool.dataset.create", params, "pool.dataset.create.name");
    /* several errors at once */
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/../x\",\"type\":\"VOLUME\",\"volsize\":1000}]",
                       "pool.dataset.create.volsize");
    expect_errno("pool.dataset.nothing", "[]", 0);
}

static void test_create_query(void **st)
{
    char path[512];
    struct stat sb;
    json_t *r = ok("pool.dataset.create",
                   "[{\"name\":\"demo/vm1\",\"type\":\"VOLUME\",\"volsize\":16777216,"
                   "\"comments\":\"first\"}]");

    assert_string_equal(json_string_value(json_object_get(r, "id")), "demo/vm1");
    json_decref(r);
    r = get_dataset("demo/vm1");
    assert_string_equal(json_string_value(json_object_get(r, "name")), "demo/vm1");
    assert_string_equal(json_string_value(json_object_get(r, "pool")), "demo");
    assert_string_equal(json_string_value(json_object_get(r, "type")), "VOLUME");
    assert_int_equal(prop_parsed_int(r, "volsize"), 16 * MiB);
    assert_string_equal(prop_value(r, "volsize"), "16M");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "volsize"), "rawvalue")), "16777216");
    assert_int_equal(prop_parsed_int(r, "volblocksize"), 16384);
    assert_string_equal(prop_value(r, "volblocksize"), "16K");
    assert_string_equal(prop_value(r, "sync"), "STANDARD");
    assert_string_equal(prop_value(r, "readonly"), "OFF");
    assert_string_equal(prop_value(r, "comments"), "first");
    assert_true(json_is_true(json_object_get(r, "sparse")));
    assert_int_equal(prop_parsed_int(r, "refreservation"), 0);
    assert_string_equal(json_string_value(json_object_get(r, "backend")), "file");
    json_decref(r);

    vol_path("vm1", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 16 * MiB);
    assert_true(sb.st_blocks * 512 < 16 * MiB); /* sparse */

    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/vm1\",\"type\":\"VOLUME\",\"volsize\":16384}]",
                       "pool.dataset.create.name");
    /* a volume cannot have children */
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/vm1/c\",\"type\":\"VOLUME\",\"volsize\":16384}]",
                       "pool.dataset.create.name");

    /* thick, other block size and sync, read-only */
    r = ok("pool.dataset.create", "[{\"name\":\"demo/thick\",\"type\":\"VOLUME\",\"volsize\":"
                                  "1048576,\"sparse\":false,\"volblocksize\":\"4K\","
                                  "\"sync\":\"ALWAYS\",\"readonly\":\"ON\"}]");
    assert_int_equal(prop_parsed_int(r, "refreservation"), MiB);
    assert_string_equal(prop_value(r, "volblocksize"), "4K");
    assert_string_equal(prop_value(r, "sync"), "ALWAYS");
    assert_string_equal(prop_value(r, "readonly"), "ON");
    json_decref(r);
    vol_path("thick", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_blocks * 512 >= MiB);

    /* implicit ancestors become FILESYSTEM datasets (directories) */
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/a/b/vol\",\"type\":\"VOLUME\",\"volsize\":65536}]"));
    r = get_dataset("demo/a");
    assert_string_equal(json_string_value(json_object_get(r, "type")), "FILESYSTEM");
    assert_int_equal(json_array_size(json_object_get(r, "children")), 1);
    json_decref(r);
    r = get_dataset("demo/a/b");
    assert_int_equal(json_array_size(json_object_get(r, "children")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(r, "children"), 0), "name")),
                        "demo/a/b/vol");
    json_decref(r);
    vol_path("a/b/vol", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));

    /* a FILESYSTEM explicitly */
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/fs\",\"type\":\"FILESYSTEM\"}]"));
    vol_path("fs", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));

    /* managedby and user properties (what the Incus TrueNAS driver sets) */
    r = ok("pool.dataset.create",
           "[{\"name\":\"demo/inc\",\"type\":\"VOLUME\",\"volsize\":16384,\"sparse\":true,"
           "\"force_size\":true,\"managedby\":\"incus.truenas\","
           "\"user_properties\":[{\"key\":\"incus:content_type\",\"value\":\"block\"}]}]");
    assert_string_equal(prop_value(r, "managedby"), "incus.truenas");
    assert_string_equal(prop_value(json_object_get(r, "user_properties"), "incus:content_type"),
                        "block");
    json_decref(r);
    r = ok("pool.dataset.update",
           "[\"demo/inc\",{\"user_properties_update\":[{\"key\":\"incus:content_type\","
           "\"remove\":true},{\"key\":\"a:b\",\"value\":\"c\"}]}]");
    assert_null(json_object_get(json_object_get(r, "user_properties"), "incus:content_type"));
    assert_string_equal(prop_value(json_object_get(r, "user_properties"), "a:b"), "c");
    json_decref(r);
    r = ok("pool.dataset.query",
           "[[[\"user_properties.a:b.value\",\"=\",\"c\"]],{\"count\":true}]");
    assert_int_equal(json_integer_value(r), 1);
    json_decref(r);
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/inc2\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"user_properties\":[{\"key\":\"nocolon\",\"value\":\"x\"}]}]",
                       "pool.dataset.create.user_properties.0.key");
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/inc2\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"user_properties\":[{\"key\":\"a:b\"}]}]",
                       "pool.dataset.create.user_properties.0.value");
    expect_field_error("pool.dataset.update",
                       "[\"demo/inc\",{\"user_properties_update\":[{\"key\":\"a:b\","
                       "\"value\":\"x\",\"remove\":true}]}]",
                       "pool.dataset.update.user_properties_update.0");
    json_decref(ok("pool.dataset.delete", "[\"demo/inc\"]"));

    /* query filters and options go through the shared engine */
    r = ok("pool.dataset.query", "[[[\"type\",\"=\",\"VOLUME\"],[\"name\",\"^\",\"demo/a\"]]]");
    assert_int_equal(json_array_size(r), 1);
    json_decref(r);
    r = ok("pool.dataset.query", "[[[\"volsize.parsed\",\">\",1048576]],{\"count\":true}]");
    assert_int_equal(json_integer_value(r), 1);
    json_decref(r);
    r = ok("pool.dataset.query", "[[], {\"extra\":{\"flat\":false}}]");
    assert_int_equal(json_array_size(r), 3); /* demo, p2, p3 roots */
    json_decref(r);
    expect_errno("pool.dataset.query", "[[[\"id\",\"=\",\"demo/none\"]],{\"get\":true}]", ENOENT);
    r = ok("pool.dataset.get_instance", "[\"demo/vm1\"]");
    assert_string_equal(json_string_value(json_object_get(r, "name")), "demo/vm1");
    json_decref(r);
    expect_errno("pool.dataset.get_instance", "[\"demo/none\"]", ENOENT);
}

static void test_update(void **st)
{
    struct volume *v;
    json_t *r;
    char path[512];
    struct stat sb;
    int resized = ev_counts[DATASETS_RESIZED];

    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/up\",\"type\":\"VOLUME\",\"volsize\":1048576}]"));
    assert_int_equal(datasets_volume_open("demo/up", &v), 0);
    assert_int_equal(volume_size(v), MiB);

    r = ok("pool.dataset.update", "[\"demo/up\",{\"volsize\":2097152}]");
    assert_int_equal(prop_parsed_int(r, "volsize"), 2 * MiB);
    json_decref(r);
    assert_int_equal(volume_size(v), 2 * MiB);
    assert_int_equal(ev_counts[DATASETS_RESIZED], resized + 1);
    assert_string_equal(ev_last, "demo/up");
    vol_path("up", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 2 * MiB);

    /* shrink */
    json_decref(ok("pool.dataset.update", "[\"demo/up\",{\"volsize\":524288}]"));
    assert_int_equal(volume_size(v), 512 * 1024);

    r = ok("pool.dataset.update",
           "[\"demo/up\",{\"sync\":\"DISABLED\",\"readonly\":\"ON\",\"comments\":\"c\"}]");
    assert_string_equal(prop_value(r, "sync"), "DISABLED");
    assert_string_equal(prop_value(r, "readonly"), "ON");
    json_decref(r);
    assert_int_equal(volume_sync_mode(v), VOLUME_SYNC_DISABLED);
    assert_true(volume_readonly(v));
    /* no event for sync/readonly: the open volume carries them */
    assert_int_equal(volume_size_generation(v), 2);
    json_decref(ok("pool.dataset.update", "[\"demo/up\",{\"readonly\":\"OFF\"}]"));
    assert_false(volume_readonly(v));

    expect_field_error("pool.dataset.update", "[\"demo/up\",{\"volsize\":1000}]",
                       "pool.dataset.update.volsize");
    expect_field_error("pool.dataset.update", "[\"demo/up\",{\"volblocksize\":\"4K\"}]",
                       "pool.dataset.update.volblocksize");
    expect_field_error("pool.dataset.update", "[\"demo/up\",{\"sync\":\"standard\"}]",
                       "pool.dataset.update.sync");
    expect_field_error("pool.dataset.update", "[42,{}]", "pool.dataset.update.id");
    expect_field_error("pool.dataset.update", "[\"demo/fs\",{\"volsize\":16384}]",
                       "pool.dataset.update.volsize");
    expect_errno("pool.dataset.update", "[\"demo/none\",{\"volsize\":16384}]", ENOENT);
    volume_unref(v);
}

static void test_snapshots_clone_rollback(void **st)
{
    struct volume *v, *c, *s;
    char buf[4096], path[512];
    json_t *r;
    struct stat sb;

    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/sv\",\"type\":\"VOLUME\",\"volsize\":4194304,"
                   "\"volblocksize\":\"4K\"}]"));
    assert_int_equal(datasets_volume_open("demo/sv", &v), 0);
    memset(buf, 'A', sizeof(buf));
    assert_int_equal(io(v, VREQ_WRITE, buf, sizeof(buf), 1 * MiB), 0);

    r = ok("zfs.snapshot.create", "[{\"dataset\":\"demo/sv\",\"name\":\"s1\"}]");
    assert_string_equal(json_string_value(json_object_get(r, "id")), "demo/sv@s1");
    assert_string_equal(json_string_value(json_object_get(r, "snapshot_name")), "s1");
    assert_string_equal(json_string_value(json_object_get(r, "dataset")), "demo/sv");
    assert_non_null(json_object_get(json_object_get(r, "properties"), "creation"));
    json_decref(r);
    vol_path("sv@s1", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0);

    /* the other accepted shape */
    json_decref(ok("zfs.snapshot.create", "[{\"name\":\"demo/sv@s2\"}]"));
    expect_field_error("zfs.snapshot.create", "[{\"dataset\":\"demo/sv\",\"name\":\"s1\"}]",
                       "zfs.snapshot.create.name");
    expect_field_error("zfs.snapshot.create", "[{\"dataset\":\"demo/sv\",\"name\":\"a/b\"}]",
                       "zfs.snapshot.create.name");
    expect_field_error("zfs.snapshot.create", "[{\"dataset\":\"demo/none\",\"name\":\"s\"}]",
                       "zfs.snapshot.create.dataset");
    expect_field_error("zfs.snapshot.create", "[{\"name\":\"demo/sv\"}]",
                       "zfs.snapshot.create.name");
    expect_field_error("zfs.snapshot.create",
                       "[{\"dataset\":\"demo/sv\",\"name\":\"s9\",\"vmware\":true}]",
                       "zfs.snapshot.create.vmware");
    expect_errno("zfs.snapshot.create", "[{\"dataset\":\"demo/fs\",\"name\":\"s\"}]", ENOTSUP);
    json_decref(ok("zfs.snapshot.create",
                   "[{\"dataset\":\"demo/sv\",\"name\":\"opts\",\"recursive\":false,"
                   "\"vmware_sync\":false,\"suspend_vms\":false,\"exclude\":[],"
                   "\"properties\":{}}]"));
    r = ok("zfs.snapshot.get_instance", "[\"demo/sv@opts\"]");
    assert_true(json_integer_value(json_object_get(
                    json_object_get(json_object_get(r, "properties"), "createtxg"), "parsed")) > 0);
    json_decref(r);
    json_decref(ok("zfs.snapshot.delete", "[\"demo/sv@opts\",{\"defer\":false}]"));
    expect_errno("zfs.snapshot.create",
                 "[{\"dataset\":\"demo/sv\",\"name\":\"x\",\"vmware_sync\":true}]", ENOTSUP);

    r = ok("zfs.snapshot.get_instance", "[\"demo/sv@s2\"]");
    assert_string_equal(json_string_value(json_object_get(r, "snapshot_name")), "s2");
    json_decref(r);
    r = ok("zfs.snapshot.query", "[[[\"dataset\",\"=\",\"demo/sv\"]]]");
    assert_int_equal(json_array_size(r), 2);
    json_decref(r);

    /* snapshots open read-only and hold the old data */
    assert_int_equal(datasets_volume_open("demo/sv@s1", &s), 0);
    assert_true(volume_readonly(s));
    memset(buf, 0, sizeof(buf));
    assert_int_equal(io(s, VREQ_READ, buf, sizeof(buf), 1 * MiB), 0);
    assert_int_equal(buf[0], 'A');
    assert_int_equal(io(s, VREQ_WRITE, buf, sizeof(buf), 0), -EPERM);
    volume_unref(s);

    /* change the volume (data and size), then roll back: the open
     * volume sees the snapshot's contents and size */
    memset(buf, 'B', sizeof(buf));
    assert_int_equal(io(v, VREQ_WRITE, buf, sizeof(buf), 1 * MiB), 0);
    json_decref(ok("pool.dataset.update", "[\"demo/sv\",{\"volsize\":8388608}]"));
    assert_int_equal(volume_size(v), 8 * MiB);
    int rolled = ev_counts[DATASETS_ROLLED_BACK];
    r = ok("zfs.snapshot.rollback", "[\"demo/sv@s1\"]");
    json_decref(r);
    assert_int_equal(ev_counts[DATASETS_ROLLED_BACK], rolled + 1);
    assert_int_equal(volume_size(v), 4 * MiB);
    memset(buf, 0, sizeof(buf));
    assert_int_equal(io(v, VREQ_READ, buf, sizeof(buf), 1 * MiB), 0);
    assert_int_equal(buf[0], 'A');
    assert_int_equal(buf[4095], 'A');
    r = get_dataset("demo/sv");
    assert_int_equal(prop_parsed_int(r, "volsize"), 4 * MiB);
    assert_int_equal(json_integer_value(json_object_get(r, "snapshot_count")), 2);
    json_decref(r);
    expect_errno("zfs.snapshot.rollback", "[\"demo/sv@nope\"]", ENOENT);
    /* recursive: the snapshots newer than the target are destroyed */
    json_decref(ok("zfs.snapshot.create", "[{\"name\":\"demo/sv@s3\"}]"));
    json_decref(ok("zfs.snapshot.rollback", "[\"demo/sv@s2\",{\"recursive\":true}]"));
    expect_errno("zfs.snapshot.get_instance", "[\"demo/sv@s3\"]", ENOENT);
    vol_path("sv@s3", path, sizeof(path));
    assert_int_equal(stat(path, &sb), -1);
    json_decref(ok("zfs.snapshot.get_instance", "[\"demo/sv@s2\"]"));
    json_decref(ok("zfs.snapshot.rollback", "[\"demo/sv@s1\"]"));
    expect_field_error("zfs.snapshot.rollback", "[\"demo/sv\"]", "zfs.snapshot.rollback.id");

    /* clone */
    json_decref(ok("zfs.snapshot.clone",
                   "[{\"snapshot\":\"demo/sv@s1\",\"dataset_dst\":\"demo/clones/c1\"}]"));
    r = get_dataset("demo/clones/c1");
    assert_string_equal(prop_value(r, "origin"), "demo/sv@s1");
    assert_int_equal(prop_parsed_int(r, "volsize"), 4 * MiB);
    assert_int_equal(prop_parsed_int(r, "volblocksize"), 4096);
    json_decref(r);
    assert_int_equal(datasets_volume_open("demo/clones/c1", &c), 0);
    memset(buf, 0, sizeof(buf));
    assert_int_equal(io(c, VREQ_READ, buf, sizeof(buf), 1 * MiB), 0);
    assert_int_equal(buf[100], 'A');
    volume_unref(c);
    expect_field_error("zfs.snapshot.clone",
                       "[{\"snapshot\":\"demo/sv@s1\",\"dataset_dst\":\"demo/clones/c1\"}]",
                       "zfs.snapshot.clone.dataset_dst");
    expect_field_error("zfs.snapshot.clone",
                       "[{\"snapshot\":\"demo/sv@zz\",\"dataset_dst\":\"demo/c2\"}]",
                       "zfs.snapshot.clone.snapshot");

    /* a snapshot with a clone cannot be deleted; a volume with snapshots
     * needs recursive, and then still refuses while a clone depends */
    expect_errno("zfs.snapshot.delete", "[\"demo/sv@s1\"]", EBUSY);
    expect_errno("pool.dataset.delete", "[\"demo/sv\"]", ENOTEMPTY);
    expect_errno("pool.dataset.delete", "[\"demo/sv\",{\"recursive\":true}]", EBUSY);
    /* with defer it is marked instead, and goes with its last clone */
    json_decref(ok("zfs.snapshot.delete", "[\"demo/sv@s1\",{\"defer\":true}]"));
    json_decref(ok("zfs.snapshot.clone",
                   "[{\"snapshot\":\"demo/sv@s2\",\"dataset_dst\":\"demo/clones/c2\"}]"));
    expect_errno("zfs.snapshot.rollback", "[\"demo/sv@s1\",{\"recursive\":true}]", EBUSY);
    json_decref(ok("pool.dataset.delete", "[\"demo/clones/c2\"]"));

    json_decref(ok("pool.dataset.delete", "[\"demo/clones/c1\"]"));
    vol_path("sv@s1", path, sizeof(path));
    assert_int_equal(stat(path, &sb), -1);
    expect_errno("zfs.snapshot.delete", "[\"demo/sv@s1\"]", ENOENT);

    volume_unref(v);
    json_decref(ok("pool.dataset.delete", "[\"demo/sv\",{\"recursive\":true}]"));
    vol_path("sv", path, sizeof(path));
    assert_int_equal(stat(path, &sb), -1);
    vol_path("sv@s2", path, sizeof(path));
    assert_int_equal(stat(path, &sb), -1);
    r = ok("zfs.snapshot.query", "[[[\"dataset\",\"=\",\"demo/sv\"]],{\"count\":true}]");
    assert_int_equal(json_integer_value(r), 0);
    json_decref(r);
}

static void test_delete(void **st)
{
    char path[512];
    struct stat sb;
    int deleted = ev_counts[DATASETS_DELETED];

    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/busy\",\"type\":\"VOLUME\",\"volsize\":65536}]"));
    expect_errno("pool.dataset.delete", "[\"demo/busy\"]", EBUSY);
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"demo/busy\",\"name\":\"s\"}]"));
    expect_errno("zfs.snapshot.delete", "[\"demo/busy@s\"]", EBUSY);
    expect_errno("zfs.snapshot.rollback", "[\"demo/busy@s\"]", EBUSY);
    json_decref(ok("zfs.snapshot.rollback", "[\"demo/busy@s\",{\"force\":true}]"));
    json_decref(ok("pool.dataset.delete", "[\"demo/busy\",{\"recursive\":true,\"force\":true}]"));

    /* a filesystem with children needs recursive */
    expect_errno("pool.dataset.delete", "[\"demo/a\"]", ENOTEMPTY);
    json_decref(ok("pool.dataset.delete", "[\"demo/a\",{\"recursive\":true}]"));
    vol_path("a", path, sizeof(path));
    assert_int_equal(stat(path, &sb), -1);
    assert_true(ev_counts[DATASETS_DELETED] >= deleted + 3);
    expect_errno("pool.dataset.delete", "[\"demo/a\"]", ENOENT);
    expect_errno("pool.dataset.delete", "[\"demo\"]", EINVAL);
    expect_field_error("pool.dataset.delete", "[\"demo/fs\",{\"recursive\":1}]",
                       "pool.dataset.delete.options.recursive");
    json_decref(ok("pool.dataset.delete", "[\"demo/fs\"]"));
}

/* datasets_forget: the row goes, the storage stays; refused while in use,
 * with snapshots, for a filesystem or an unknown name. */
static void test_forget(void **st)
{
    char path[512], why[256];
    struct stat sb;
    json_t *r;

    (void)st;
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/fgt\",\"type\":\"VOLUME\",\"volsize\":65536}]"));
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/busy\",\"type\":\"VOLUME\",\"volsize\":65536}]"));
    assert_int_equal(datasets_forget("demo/busy", why, sizeof(why)), -EBUSY);
    assert_non_null(strstr(why, "NBD"));
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"demo/fgt\",\"name\":\"s\"}]"));
    assert_int_equal(datasets_forget("demo/fgt", why, sizeof(why)), -ENOTEMPTY);
    json_decref(ok("zfs.snapshot.delete", "[\"demo/fgt@s\"]"));
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/fgtfs\"}]"));
    assert_int_equal(datasets_forget("demo/fgtfs", why, sizeof(why)), -EINVAL);
    assert_int_equal(datasets_forget("demo/nothere", why, sizeof(why)), -ENOENT);
    assert_int_equal(datasets_forget("demo/fgt", why, sizeof(why)), 0);
    r = ok("pool.dataset.query", "[[[\"id\",\"=\",\"demo/fgt\"]]]");
    assert_int_equal(json_array_size(r), 0);
    json_decref(r);
    vol_path("fgt", path, sizeof(path));
    assert_int_equal(stat(path, &sb), 0); /* the storage stays */
    json_decref(ok("pool.dataset.delete", "[\"demo/busy\",{\"force\":true}]"));
    json_decref(ok("pool.dataset.delete", "[\"demo/fgtfs\"]"));
}

static void test_memory_backend(void **st)
{
    struct volume *v, *v2;
    char buf[512], path[512];
    struct stat sb;
    json_t *r;

    r = ok("pool.dataset.create", "[{\"name\":\"demo/mem\",\"type\":\"VOLUME\",\"volsize\":"
                                  "1048576,\"backend\":\"memory\",\"latency_us\":0}]");
    assert_string_equal(json_string_value(json_object_get(r, "backend")), "memory");
    json_decref(r);
    vol_path("mem", path, sizeof(path));
    assert_int_equal(stat(path, &sb), -1);
    assert_int_equal(datasets_volume_open("demo/mem", &v), 0);
    assert_int_equal(datasets_volume_open("demo/mem", &v2), 0);
    assert_ptr_equal(v, v2); /* shared */
    volume_unref(v2);
    memset(buf, 'M', sizeof(buf));
    assert_int_equal(io(v, VREQ_WRITE, buf, sizeof(buf), 4096), 0);
    volume_unref(v);
    /* still cached: the data lives while the daemon runs */
    assert_int_equal(datasets_volume_open("demo/mem", &v), 0);
    memset(buf, 0, sizeof(buf));
    assert_int_equal(io(v, VREQ_READ, buf, sizeof(buf), 4096), 0);
    assert_int_equal(buf[0], 'M');
    volume_unref(v);
    json_decref(ok("pool.dataset.update", "[\"demo/mem\",{\"volsize\":2097152}]"));
    assert_int_equal(datasets_volume_open("demo/mem", &v), 0);
    assert_int_equal(volume_size(v), 2 * MiB);
    volume_unref(v);
    expect_errno("zfs.snapshot.create", "[{\"dataset\":\"demo/mem\",\"name\":\"s\"}]", ENOTSUP);
    expect_field_error("pool.dataset.create",
                       "[{\"name\":\"demo/mem2\",\"type\":\"VOLUME\",\"volsize\":16384,"
                       "\"backend\":\"memory\",\"sparse\":false}]",
                       "pool.dataset.create.sparse");
    /* sizes the memory backend refuses fail the call, not a later open */
    expect_errno("pool.dataset.create",
                 "[{\"name\":\"demo/huge\",\"type\":\"VOLUME\",\"volsize\":"
                 "1152921504606846976,\"backend\":\"memory\"}]",
                 EFBIG);
    expect_errno("pool.dataset.get_instance", "[\"demo/huge\"]", ENOENT);
    expect_errno("pool.dataset.update", "[\"demo/mem\",{\"volsize\":1152921504606846976}]", EFBIG);
    assert_int_equal(datasets_volume_open("demo/mem", &v), 0);
    assert_int_equal(volume_size(v), 2 * MiB);
    volume_unref(v);
    assert_int_equal(datasets_volume_open("demo/nothing", &v), -ENOENT);
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/fs2\",\"type\":\"FILESYSTEM\"}]"));
    assert_int_equal(datasets_volume_open("demo/fs2", &v), -EISDIR);
}

static void test_persistence(void **st)
{
    json_t *r;
    struct volume *v;

    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/keep\",\"type\":\"VOLUME\",\"volsize\":131072,"
                   "\"sync\":\"ALWAYS\"}]"));
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"demo/keep\",\"name\":\"k1\"}]"));
    datasets_flush_all();
    datasets_shutdown();
    db_close();

    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(datasets_ensure_default_pool("demo"), 0);
    r = get_dataset("demo/keep");
    assert_int_equal(prop_parsed_int(r, "volsize"), 131072);
    assert_string_equal(prop_value(r, "sync"), "ALWAYS");
    json_decref(r);
    r = ok("zfs.snapshot.query", "[[[\"id\",\"=\",\"demo/keep@k1\"]],{\"get\":true}]");
    json_decref(r);
    r = ok("pool.query", "[[[\"name\",\"=\",\"p3\"]],{\"get\":true}]");
    json_decref(r);
    /* memory volumes come back empty, with their configuration */
    assert_int_equal(datasets_volume_open("demo/mem", &v), 0);
    assert_int_equal(volume_size(v), 2 * MiB);
    char buf[512];
    assert_int_equal(io(v, VREQ_READ, buf, sizeof(buf), 4096), 0);
    assert_int_equal(buf[0], 0);
    volume_unref(v);
    assert_int_equal(datasets_volume_open("demo/keep", &v), 0);
    assert_int_equal(volume_sync_mode(v), VOLUME_SYNC_ALWAYS);
    volume_unref(v);
}

/* A rollback interrupted by a crash is finished at the next start. */
static void test_rollback_recovery(void **st)
{
    char path[512], snap[512], buf[4096];
    int fd;

    vol_path("keep", path, sizeof(path));
    vol_path("keep@k1", snap, sizeof(snap));
    datasets_shutdown();
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    memset(buf, 'Z', sizeof(buf));
    assert_int_equal(pwrite(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
    assert_int_equal(ftruncate(fd, 262144), 0);
    close(fd);
    db_lock();
    assert_int_equal(db_exec("UPDATE datasets SET rollback_pending = (SELECT s.id FROM snapshots s"
                             " JOIN datasets d ON d.id = s.dataset_id WHERE d.name = 'demo/keep'"
                             " AND s.name = 'k1') WHERE name = 'demo/keep'"),
                     0);
    db_unlock();
    /* a temp file of an interrupted copy, and a dataset that only looks like one */
    char stale[512], lookalike[512];
    vol_path(".keep2.tmp.Ab12Cd", stale, sizeof(stale));
    fd = open(stale, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/.v.tmp.Zz9Zz9\",\"type\":\"VOLUME\",\"volsize\":16384}]"));
    vol_path(".v.tmp.Zz9Zz9", lookalike, sizeof(lookalike));
    db_close();
    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(datasets_ensure_default_pool("demo"), 0);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(lookalike, F_OK), 0);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
    close(fd);
    assert_int_equal(buf[0], 0); /* the snapshot was all zeros */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 131072);
    json_t *r = get_dataset("demo/keep");
    assert_int_equal(prop_parsed_int(r, "volsize"), 131072);
    json_decref(r);
    db_lock();
    sqlite3_stmt *q;
    assert_int_equal(
        db_prepare("SELECT COUNT(*) FROM datasets WHERE rollback_pending IS NOT NULL", &q), 0);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 0);
    sqlite3_finalize(q);
    db_unlock();
}

/* Every method, every odd parameter shape: a well-formed error or result,
 * never a crash (and nothing created by accident). */
static void test_bad_inputs(void **st)
{
    static const char *const methods[] = {
        "pool.create",
        "pool.query",
        "pool.get_instance",
        "pool.dataset.create",
        "pool.dataset.query",
        "pool.dataset.get_instance",
        "pool.dataset.update",
        "pool.dataset.delete",
        "zfs.snapshot.create",
        "zfs.snapshot.query",
        "zfs.snapshot.get_instance",
        "zfs.snapshot.delete",
        "zfs.snapshot.clone",
        "zfs.snapshot.rollback",
    };
    static const char *const params[] = {
        "[]",
        "[null]",
        "[1]",
        "[\"x\"]",
        "[{}]",
        "[[]]",
        "[true, false, 1]",
        "[\"demo\", 5]",
        "[\"demo/keep@\", {}]",
        "[\"@\"]",
        "[\"demo/keep@k1@k2\"]",
        "[{\"name\":123}]",
        "[{\"name\":\"demo/q\",\"type\":\"VOLUME\",\"volsize\":1e3}]",
        "[{\"name\":\"demo/q\",\"type\":\"VOLUME\",\"volsize\":9223372036854775807}]",
        "[{\"dataset\":\"demo/keep\",\"name\":\"\"}]",
        "[{\"snapshot\":\"demo/keep@k1\",\"dataset_dst\":\"demo/keep\"}]",
        "[\"demo/keep\", {\"volsize\": 0}]",
        "[[[\"name\",\"~\",\"(\"]]]",
        "[[], {\"extra\": 5}]",
        "[\"demo/../../etc\"]",
        "[{\"name\":\"demo/../../etc/x\"}]",
    };
    char longp[4200];

    for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
        for (size_t p = 0; p < sizeof(params) / sizeof(params[0]); p++) {
            json_t *err = NULL, *r = rpc(methods[m], params[p], &err);
            if (r) {
                /* only queries and lookups may succeed on these */
                assert_true(strstr(methods[m], "query") || strstr(methods[m], "get_instance"));
                json_decref(r);
            } else {
                assert_non_null(json_object_get(err, "code"));
                assert_non_null(json_object_get(err, "message"));
                json_decref(err);
            }
        }
        /* a name far over the limits */
        memcpy(longp, "[\"demo/", 7);
        memset(longp + 7, 'a', 4100);
        memcpy(longp + 4107, "\"]", 3);
        json_t *err = NULL, *r = rpc(methods[m], longp, &err);
        if (r)
            json_decref(r);
        json_decref(err);
    }
    expect_errno("pool.dataset.get_instance", "[\"demo/q\"]", ENOENT);
}

/* Renames move rows, files and snapshot files, and re-key open volumes;
 * promote moves the origin's older snapshots to the clone. */
static void test_rename_promote(void **st)
{
    struct volume *v, *again;
    char path[PATH_MAX];
    json_t *row;
    uint8_t buf[4096];

    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/rn\",\"type\":\"FILESYSTEM\"}]"));
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/rn/v\",\"type\":\"VOLUME\",\"volsize\":65536}]"));
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"demo/rn/v\",\"name\":\"s1\"}]"));
    assert_int_equal(datasets_volume_open("demo/rn/v", &v), 0);
    json_decref(ok("zfs.dataset.rename", "[\"demo/rn\",{\"new_name\":\"demo/rn2\"}]"));
    assert_int_equal(datasets_volume_open("demo/rn2/v", &again), 0);
    assert_ptr_equal(v, again); /* the same open volume, under its new name */
    volume_unref(again);
    vol_path("rn2/v@s1", path, sizeof(path));
    assert_int_equal(access(path, F_OK), 0);
    vol_path("rn", path, sizeof(path));
    assert_int_not_equal(access(path, F_OK), 0);
    expect_errno("pool.dataset.get_instance", "[\"demo/rn/v\"]", ENOENT);
    /* the open volume writes the renamed file */
    memset(buf, 0x5a, sizeof(buf));
    assert_int_equal(io(v, VREQ_WRITE, buf, sizeof(buf), 0), 0);
    volume_unref(v);
    vol_path("rn2/v", path, sizeof(path));
    {
        FILE *f = fopen(path, "rb");
        uint8_t back[4096];
        assert_non_null(f);
        assert_int_equal(fread(back, 1, sizeof(back), f), sizeof(back));
        fclose(f);
        assert_memory_equal(back, buf, sizeof(buf));
    }
    expect_errno("zfs.dataset.rename", "[\"demo/rn2/v\",{\"new_name\":\"demo/rn2\"}]", EEXIST);
    expect_errno("zfs.dataset.rename", "[\"demo/rn2/v\",{\"new_name\":\"demo/x/v\"}]", ENOENT);
    expect_errno("zfs.dataset.rename", "[\"demo/rn2\",{\"new_name\":\"demo/rn2/in\"}]", EINVAL);
    json_decref(ok("zfs.snapshot.rename", "[\"demo/rn2/v@s1\",\"demo/rn2/v@t1\"]"));
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"demo/rn2/v\",\"name\":\"t2\"}]"));

    /* promote */
    json_decref(ok("zfs.snapshot.clone",
                   "[{\"snapshot\":\"demo/rn2/v@t1\",\"dataset_dst\":\"demo/rn2/c\"}]"));
    expect_errno("pool.dataset.promote", "[\"demo/rn2/v\"]", EINVAL);
    json_decref(ok("pool.dataset.promote", "[\"demo/rn2/c\"]"));
    row = get_dataset("demo/rn2/v");
    assert_string_equal(prop_value(row, "origin"), "demo/rn2/c@t1");
    json_decref(row);
    row = get_dataset("demo/rn2/c");
    assert_string_equal(prop_value(row, "origin"), "");
    json_decref(row);
    vol_path("rn2/c@t1", path, sizeof(path));
    assert_int_equal(access(path, F_OK), 0);
    json_decref(ok("pool.dataset.delete", "[\"demo/rn2/v\",{\"recursive\":true}]"));
    json_decref(ok("pool.dataset.delete", "[\"demo/rn2\",{\"recursive\":true}]"));
}

/* pool.create {rbd: …}: field errors, and a cluster that cannot be
 * reached refuses the pool without recording anything (no Ceph needed:
 * the conf file does not exist). The image-name encoding of datasets. */
static void test_rbd_pool_refusals(void **st)
{
    struct ds_pool p = {.name = "tank", .path = "rbd:vms"};
    char image[64];
    json_t *r;

    (void)st;
    expect_field_error("pool.create", "[{\"name\":\"r\",\"rbd\":{}}]", "pool.create.rbd.pool");
    expect_field_error("pool.create", "[{\"name\":\"r\",\"rbd\":{\"pool\":\"a/b\"}}]",
                       "pool.create.rbd.pool");
    expect_field_error("pool.create",
                       "[{\"name\":\"r\",\"rbd\":{\"pool\":\"rbd\",\"conf\":\"rel.conf\"}}]",
                       "pool.create.rbd.conf");
    expect_field_error("pool.create", "[{\"name\":\"r\",\"rbd\":{\"pool\":\"rbd\",\"bogus\":1}}]",
                       "pool.create.rbd.bogus");
    expect_field_error("pool.create",
                       "[{\"name\":\"r\",\"path\":\"/tmp/x\",\"rbd\":{\"pool\":\"rbd\"}}]",
                       "pool.create.path");
    /* a conf outside /etc/ceph and the allowed directories: refused
     * before anything is opened; a missing one in an allowed directory */
    expect_field_error(
        "pool.create",
        "[{\"name\":\"r\",\"rbd\":{\"pool\":\"rbd\",\"conf\":\"/nonexistent/c.conf\"}}]",
        "pool.create.rbd.conf");
    char params[700], dir[512];
    snprintf(dir, sizeof(dir), "%s/ceph-etc", tallow.dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(params, sizeof(params),
             "[{\"name\":\"r\",\"rbd\":{\"pool\":\"rbd\",\"conf\":\"%s/c.conf\"}}]", dir);
    expect_errno("pool.create", params, ENOENT);
    expect_field_error("pool.create",
                       "[{\"name\":\"r\",\"rbd\":{\"pool\":\"rbd\",\"mon_host\":\"a\\nb\"}}]",
                       "pool.create.rbd.mon_host");
    expect_field_error("pool.create",
                       "[{\"name\":\"r\",\"rbd\":{\"pool\":\"rbd\",\"key\":\"not base64!\"}}]",
                       "pool.create.rbd.key");
    r = ok("pool.query", "[[[\"name\",\"=\",\"r\"]], {\"count\":true}]");
    assert_int_equal(json_integer_value(r), 0);
    json_decref(r);

    assert_int_equal(ds_rbd_image_name(&p, "tank/vms/disk0", image, sizeof(image)), 0);
    assert_string_equal(image, "vms%disk0");
    assert_int_equal(ds_rbd_image_name(&p, "tank/v", image, sizeof(image)), 0);
    assert_string_equal(image, "v");
    assert_int_equal(ds_rbd_image_name(&p, "tank/a/b/c", image, 4), -ENAMETOOLONG);
    assert_int_equal(ds_rbd_image_name(&p, "tank", image, sizeof(image)), -EINVAL);
    assert_int_equal(ds_rbd_image_name(&p, "other/v", image, sizeof(image)), -EINVAL);
}

/* ds_snapshot_each's callback: count the rows, remember the last. */
struct snap_seen {
    size_t n;
    struct ds_snap last;
    char clones[64];
};

static int snap_seen_add(const struct ds_snap_view *v, void *arg)
{
    struct snap_seen *s = arg;

    s->n++;
    s->last = v->snap;
    snprintf(s->clones, sizeof(s->clones), "%s", v->clones);
    return 0;
}

static int row_seen_add(const struct ds_row_view *v, void *arg)
{
    struct ds_row_view *out = arg;

    out->row = v->row;
    out->pool = v->pool;
    out->snapshot_count = v->snapshot_count;
    return strcmp(v->origin, "") == 0 ? 0 : -EINVAL;
}

/* The typed stores (pool_store.h, snapshot_store.h, dataset_store.h)
 * answer what the API rows are built from. */
static void test_stores(void **st)
{
    struct ds_pool *pools, p;
    struct ds_row_view view;
    struct snap_seen seen = {0};
    size_t n;
    char clone[DS_NAME_BUF];

    json_decref(ok("pool.create", "[{\"name\":\"ps\"}]"));
    json_decref(
        ok("pool.dataset.create", "[{\"name\":\"ps/v\",\"type\":\"VOLUME\",\"volsize\":1048576}]"));
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"ps/v\",\"name\":\"a\"}]"));
    json_decref(ok("zfs.snapshot.create", "[{\"dataset\":\"ps/v\",\"name\":\"b\"}]"));
    db_lock();
    assert_int_equal(ds_pool_list(false, &pools, &n), 0);
    assert_true(n >= 2);
    for (size_t i = 1; i < n; i++)
        assert_true(pools[i - 1].id < pools[i].id);
    assert_string_equal(pools[n - 1].name, "ps");
    assert_int_equal(ds_pool_get_by_path(pools[n - 1].path, &p), 0);
    assert_int_equal(p.id, pools[n - 1].id);
    free(pools);
    assert_int_equal(ds_pool_list(true, &pools, &n), 0);
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(pools[i - 1].name, pools[i].name) < 0);
    free(pools);

    /* one dataset@snap (the dataset given as the head of "ps/v@b") */
    struct ds_snap_key one = {.dataset = "ps/v@b", .dataset_len = 4, .snap = "b"};
    struct ds_snap_keys keys = {.v = &one, .n = 1};
    assert_int_equal(ds_snapshot_each(&keys, snap_seen_add, &seen), 0);
    assert_int_equal(seen.n, 1);
    int64_t b_id = seen.last.id;
    assert_string_equal(seen.last.dataset, "ps/v");
    assert_string_equal(seen.last.name, "b");
    assert_string_equal(seen.clones, "");
    /* every snapshot of the dataset, in the order they were taken */
    one = (struct ds_snap_key){.dataset = "ps/v", .dataset_len = -1};
    seen = (struct snap_seen){0};
    assert_int_equal(ds_snapshot_each(&keys, snap_seen_add, &seen), 0);
    assert_int_equal(seen.n, 2);
    assert_string_equal(seen.last.name, "b");
    keys.n = 0; /* no key: no snapshot */
    seen = (struct snap_seen){0};
    assert_int_equal(ds_snapshot_each(&keys, snap_seen_add, &seen), 0);
    assert_int_equal(seen.n, 0);
    assert_int_equal(ds_snapshot_first_clone(b_id, clone, sizeof(clone)), -ENOENT);

    const char *names[] = {"ps/v"};
    struct ds_row_keys rk = {.kind = DS_KEYS_SUBTREES, .names = names, .n = 1};
    memset(&view, 0, sizeof(view));
    assert_int_equal(ds_dataset_each(&rk, row_seen_add, &view), 0);
    assert_string_equal(view.row.name, "ps/v");
    assert_int_equal(view.row.type, DS_VOLUME);
    assert_int_equal(view.row.volsize, 1048576);
    assert_string_equal(view.pool.name, "ps");
    assert_int_equal(view.snapshot_count, 2);
    db_unlock();
    (void)st;
}

static int snap_prop_join(const char *name, const char *value, void *arg)
{
    char *out = arg;
    size_t n = strlen(out);

    snprintf(out + n, 256 - n, "%s%s=%s", n ? " " : "", name, value);
    return 0;
}

static int deferred_count(const struct ds_snap *s, void *arg)
{
    (void)s;
    (*(int *)arg)++;
    return 0;
}

/* The properties of "pu/v@a" joined ("name=value ..."), by name. */
static void snap_props_of(const char *snap, char out[256])
{
    struct ds_snap s;

    out[0] = '\0';
    db_lock();
    assert_int_equal(ds_snapshot_get("pu/v", snap, &s), 0);
    assert_int_equal(ds_snapshot_props_each(s.id, snap_prop_join, out), 0);
    db_unlock();
}

/* pool.snapshot.*: user properties set at create and by update (bad
 * names refused, nothing changed), rows with integers for used; delete
 * with defer marks a snapshot with clones, and it goes with its last
 * clone. */
static void test_pool_snapshot(void **st)
{
    char props[256];
    int n = 0;
    json_t *row;

    json_decref(ok("pool.create", "[{\"name\":\"pu\"}]"));
    json_decref(
        ok("pool.dataset.create", "[{\"name\":\"pu/v\",\"type\":\"VOLUME\",\"volsize\":1048576}]"));
    expect_field_error("pool.snapshot.create",
                       "[{\"dataset\":\"pu/v\",\"name\":\"a\",\"properties\":{\"nocolon\":\"x\"}}]",
                       "pool.snapshot.create.properties.nocolon");
    expect_field_error("pool.snapshot.create", "[{\"dataset\":\"pu/v\"}]",
                       "pool.snapshot.create.name");
    row =
        ok("pool.snapshot.create",
           "[{\"dataset\":\"pu/v\",\"name\":\"a\",\"properties\":{\"k:a\":\"1\",\"k:b\":\"2\"}}]");
    assert_true(json_is_integer(json_object_get(row, "used")));
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(row, "properties"), "k:a"), "value")),
                        "1");
    json_decref(row);
    snap_props_of("a", props);
    assert_string_equal(props, "k:a=1 k:b=2");
    expect_field_error(
        "pool.snapshot.update",
        "[\"pu/v@a\",{\"user_properties_update\":[{\"key\":\"k:c\",\"value\":\"3\"}],"
        "\"user_properties_remove\":[\"k:c\"]}]",
        "pool.snapshot.update.user_properties_remove.0");
    expect_errno("pool.snapshot.update", "[\"pu/v@none\",{\"user_properties_remove\":[\"k:a\"]}]",
                 ENOENT);
    json_decref(ok("pool.snapshot.update",
                   "[\"pu/v@a\",{\"user_properties_update\":[{\"key\":\"k:c\",\"value\":\"3\"},"
                   "{\"key\":\"k:a\",\"remove\":true}],\"user_properties_remove\":[\"k:b\"]}]"));
    snap_props_of("a", props);
    assert_string_equal(props, "k:c=3");
    /* zfs.snapshot.* rows keep used as a property object */
    row = ok("zfs.snapshot.get_instance", "[\"pu/v@a\"]");
    assert_true(json_is_object(json_object_get(row, "used")));
    json_decref(row);

    json_decref(ok("pool.snapshot.clone", "[{\"snapshot\":\"pu/v@a\",\"dataset_dst\":\"pu/c\"}]"));
    expect_errno("pool.snapshot.delete", "[\"pu/v@a\"]", EBUSY);
    json_decref(ok("pool.snapshot.delete", "[\"pu/v@a\",{\"defer\":true}]"));
    snap_props_of("a", props);
    assert_string_equal(props, "defer_destroy=on k:c=3");
    db_lock();
    assert_int_equal(ds_snapshot_each_deferred_free(deferred_count, &n), 0);
    db_unlock();
    assert_int_equal(n, 0); /* its clone is still there */
    json_decref(ok("pool.dataset.delete", "[\"pu/c\"]"));
    expect_errno("pool.snapshot.get_instance", "[\"pu/v@a\"]", ENOENT);

    /* a hold keeps a snapshot; with defer it goes once released */
    json_decref(ok("pool.snapshot.create", "[{\"dataset\":\"pu/v\",\"name\":\"h\"}]"));
    expect_errno("pool.snapshot.release", "[\"pu/v@h\"]", ESRCH);
    json_decref(ok("pool.snapshot.hold", "[\"pu/v@h\"]"));
    row = ok("pool.snapshot.get_instance", "[\"pu/v@h\"]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(row, "holds"), "truenas")),
                     1);
    json_decref(row);
    expect_errno("pool.snapshot.delete", "[\"pu/v@h\"]", EBUSY);
    json_decref(ok("pool.snapshot.delete", "[\"pu/v@h\",{\"defer\":true}]"));
    snap_props_of("h", props);
    assert_string_equal(props, "defer_destroy=on hold=truenas");
    json_decref(ok("pool.snapshot.release", "[\"pu/v@h\"]"));
    expect_errno("pool.snapshot.get_instance", "[\"pu/v@h\"]", ENOENT);
    (void)st;
}

/* A walk's names, joined by ' '. */
static int name_join(const char *name, void *arg)
{
    char *out = arg;
    size_t n = strlen(out);

    snprintf(out + n, 256 - n, "%s%s", n ? " " : "", name);
    return 0;
}

static int snap_upto_last(const struct ds_snap *s, void *arg)
{
    *(struct ds_snap *)arg = *s;
    return 0;
}

static int rbd_spec_count(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec,
                          void *arg)
{
    (void)pool_id;
    if (strcmp(name, "ps") == 0 && strcmp(spec->pool, "rbdp") == 0)
        (*(int *)arg)++;
    return 0;
}

/* The store functions that replication, the backends and the RBD pools
 * use instead of their own SQL: volsize and snapshot times
 * set by id, a dataset's descendants in plain name order, every field of
 * ds_snapshot_each_upto, and table pool_rbd. Runs after test_stores. */
static void test_stores_more(void **st)
{
    struct ds_row row;
    struct ds_snap s, last = {0};
    struct ds_rbd_spec spec = {.pool = "rbdp", .ns = "n1", .id = "admin"}, got;
    struct ds_pool p;
    char names[256] = "";
    int count = 0;

    (void)st;
    json_decref(ok("pool.dataset.create", "[{\"name\":\"ps/d\",\"type\":\"FILESYSTEM\"}]"));
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"ps/d/x\",\"type\":\"VOLUME\",\"volsize\":1048576}]"));
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"ps/d-y\",\"type\":\"VOLUME\",\"volsize\":1048576}]"));
    db_lock();
    assert_int_equal(ds_dataset_each_descendant("ps", name_join, names), 0);
    assert_string_equal(names, "ps/d ps/d-y ps/d/x ps/v");
    names[0] = '\0';
    assert_int_equal(ds_dataset_each_descendant("ps/d", name_join, names), 0);
    assert_string_equal(names, "ps/d/x");

    assert_int_equal(ds_dataset_get("ps/v", &row), 0);
    assert_int_equal(ds_snapshot_each_upto(row.id, INT64_MAX, snap_upto_last, &last), 0);
    assert_string_equal(last.name, "b");
    assert_int_equal(last.volsize, 1048576);
    assert_true(last.created > 0);
    assert_int_equal(ds_snapshot_set_created(row.id, "b", 1234000), 0);
    assert_int_equal(ds_snapshot_get("ps/v", "b", &s), 0);
    assert_int_equal(s.created, 1234000);
    assert_int_equal(ds_dataset_set_volsize(row.id, 2 * 1048576), 0);
    assert_int_equal(ds_dataset_get_id(row.id, &row), 0);
    assert_int_equal(row.volsize, 2 * 1048576);

    /* pool_rbd, rolled back: ps stays a file pool */
    assert_int_equal(ds_pool_get("ps", &p), 0);
    assert_int_equal(db_begin(), 0);
    assert_int_equal(ds_rbd_spec_get(p.id, &got), -ENOENT);
    assert_int_equal(ds_rbd_spec_insert(p.id, &spec), 0);
    assert_int_equal(ds_rbd_spec_insert(p.id, &spec), -EEXIST);
    assert_int_equal(ds_rbd_spec_get(p.id, &got), 0);
    assert_string_equal(got.pool, "rbdp");
    assert_string_equal(got.ns, "n1");
    assert_string_equal(got.conf, "");
    assert_string_equal(got.id, "admin");
    assert_int_equal(ds_rbd_spec_each(rbd_spec_count, &count), 0);
    assert_int_equal(count, 1);
    db_rollback();
    assert_int_equal(ds_rbd_spec_get(p.id, &got), -ENOENT);
    db_unlock();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_pool),
        cmocka_unit_test(test_pool_create),
        cmocka_unit_test(test_create_validation),
        cmocka_unit_test(test_create_query),
        cmocka_unit_test(test_update),
        cmocka_unit_test(test_snapshots_clone_rollback),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_forget),
        cmocka_unit_test(test_memory_backend),
        cmocka_unit_test(test_persistence),
        cmocka_unit_test(test_rollback_recovery),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_rename_promote),
        cmocka_unit_test(test_rbd_pool_refusals),
        cmocka_unit_test(test_stores),
        cmocka_unit_test(test_stores_more),
        cmocka_unit_test(test_pool_snapshot),
    };

    return cmocka_run_group_tests(tests, setup_group, teardown_group);
}
