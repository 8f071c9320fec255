/*
 * The TrueNAS dataset properties of control/dsprops.h: the pure helpers
 * (recordsize values, the {parsed, rawvalue, value, source} shapes,
 * extra.properties selection), then through the API against a temporary
 * state directory: validation per type, inheritance down a tree and its
 * sources, "INHERIT" on update, nested flat=false queries, user_properties
 * on update, and persistence across db_close/db_open.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/api.h"
#include "control/datasets.h"
#include "control/db.h"
#include "testdb.h"
#include "control/dsprops.h"
#include "store/volume.h"

static struct testdb tdb;

static void test_recordsize(void **st)
{
    (void)st;
    assert_int_equal(ds_recordsize_parse("512"), 512);
    assert_int_equal(ds_recordsize_parse("512B"), 512);
    assert_int_equal(ds_recordsize_parse("4K"), 4096);
    assert_int_equal(ds_recordsize_parse("128K"), 131072);
    assert_int_equal(ds_recordsize_parse("1M"), 1048576);
    assert_int_equal(ds_recordsize_parse("16M"), 16777216);
    assert_int_equal(ds_recordsize_parse("32M"), 0);
    assert_int_equal(ds_recordsize_parse("3K"), 0);
    assert_int_equal(ds_recordsize_parse("256"), 0);
    assert_int_equal(ds_recordsize_parse("128k"), 0);
    assert_int_equal(ds_recordsize_parse("K"), 0);
    assert_int_equal(ds_recordsize_parse(""), 0);
    assert_int_equal(ds_recordsize_parse("0"), 0);
    assert_int_equal(ds_recordsize_parse("-4K"), 0);
    assert_int_equal(ds_recordsize_parse("99999999999999999999K"), 0);
}

static void expect_prop(json_t *p, const char *value, const char *raw, json_t *parsed,
                        const char *source)
{
    assert_non_null(p);
    if (value)
        assert_string_equal(json_string_value(json_object_get(p, "value")), value);
    else
        assert_true(json_is_null(json_object_get(p, "value")));
    assert_string_equal(json_string_value(json_object_get(p, "rawvalue")), raw);
    assert_string_equal(json_string_value(json_object_get(p, "source")), source);
    assert_true(json_equal(json_object_get(p, "parsed"), parsed));
    json_decref(parsed);
    json_decref(p);
}

static void test_render(void **st)
{
    (void)st;
    expect_prop(ds_props_render("atime", "off", "LOCAL"), "OFF", "off", json_false(), "LOCAL");
    expect_prop(ds_props_render("checksum", "sha256", "INHERITED"), "SHA256", "sha256", json_null(),
                "INHERITED");
    expect_prop(ds_props_render("acltype", "posix", "LOCAL"), "POSIX", "posix",
                json_string("posix"), "LOCAL");
    expect_prop(ds_props_render("dedup", "verify", "LOCAL"), "VERIFY", "verify",
                json_string("verify"), "LOCAL");
    expect_prop(ds_props_render("quota", "0", "DEFAULT"), NULL, "0", json_null(), "DEFAULT");
    expect_prop(ds_props_render("quota", "2147483648", "LOCAL"), "2G", "2147483648",
                json_integer(2147483648LL), "LOCAL");
    expect_prop(ds_props_render("recordsize", "1048576", "LOCAL"), "1M", "1048576",
                json_integer(1048576), "LOCAL");
    expect_prop(ds_props_render("copies", "3", "LOCAL"), "3", "3", json_integer(3), "LOCAL");
    expect_prop(ds_props_render("special_small_blocks", "0", "DEFAULT"), "0", "0", json_string("0"),
                "DEFAULT");
    expect_prop(ds_props_render("quota_warning", "80", "DEFAULT"), "80", "80", json_string("80"),
                "DEFAULT");
    assert_null(ds_props_render("relatime", "on", "LOCAL"));
    assert_null(ds_props_render("volsize", "1", "LOCAL"));
}

static void test_select(void **st)
{
    json_t *row =
        json_pack("{s:s, s:[], s:{s:s}, s:{s:s}, s:{s:s}, s:{}, s:s}", "name", "p/a", "children",
                  "atime", "rawvalue", "off", "deduplication", "rawvalue", "off", "sync",
                  "rawvalue", "standard", "user_properties", "mountpoint", "/x");
    json_t *names = json_pack("[sss]", "atime", "dedup", "relatime");

    (void)st;
    ds_props_select(row, names);
    assert_non_null(json_object_get(row, "atime"));
    assert_non_null(json_object_get(row, "deduplication")); /* by its ZFS name */
    assert_null(json_object_get(row, "sync"));
    assert_non_null(json_object_get(row, "name"));
    assert_non_null(json_object_get(row, "children"));
    assert_non_null(json_object_get(row, "user_properties"));
    assert_non_null(json_object_get(row, "mountpoint"));
    json_decref(names);
    names = json_array();
    ds_props_select(row, names);
    assert_null(json_object_get(row, "atime"));
    assert_non_null(json_object_get(row, "name"));
    json_decref(names);
    json_decref(row);
}

/* The decoder: each property's state and raw value, the share_type
 * presets (create, not for a volume, overriding what was given). */
static void test_decode(void **st)
{
    json_t *data = json_pack("{s:s, s:s, s:s, s:n, s:i, s:i, s:s, s:s, s:o}", "atime", "OFF",
                             "compression", "INHERIT", "recordsize", "3K", "quota", "reservation",
                             0, "copies", 2, "special_small_block_size", "x", "acltype", "POSIX",
                             "quota_warning", json_real(1.5));
    struct ds_propset set;

    (void)st;
    assert_int_equal(ds_propset_decode(data, false, DS_FILESYSTEM, &set), 0);
    assert_int_equal(ds_propset_given(&set, "atime"), DS_PROP_SET);
    assert_int_equal(ds_propset_given(&set, "compression"), DS_PROP_INHERIT);
    assert_int_equal(ds_propset_given(&set, "recordsize"), DS_PROP_BAD_SIZE);
    assert_int_equal(ds_propset_given(&set, "quota"), DS_PROP_NONE);
    assert_int_equal(ds_propset_given(&set, "reservation"), DS_PROP_NONE);
    assert_int_equal(ds_propset_given(&set, "copies"), DS_PROP_SET);
    assert_int_equal(ds_propset_given(&set, "special_small_block_size"), DS_PROP_NOT_INT);
    assert_int_equal(ds_propset_given(&set, "quota_warning"), DS_PROP_NOT_INT);
    assert_int_equal(ds_propset_given(&set, "sync"), DS_PROP_ABSENT);
    assert_int_equal(ds_propset_given(&set, "no_such_property"), DS_PROP_ABSENT);
    for (size_t i = 0; i < DS_PROPS_COUNT; i++) {
        if (set.v[i].given == DS_PROP_BAD_SIZE)
            assert_string_equal(set.v[i].bad, "3K");
        if (set.v[i].given == DS_PROP_SET && set.v[i].num == 2)
            assert_string_equal(set.v[i].raw, "2");
    }
    ds_propset_free(&set);

    /* share_type SMB on create: presets win over the acltype given */
    json_object_set_new(data, "share_type", json_string("SMB"));
    json_object_set_new(data, "recordsize", json_string("1M"));
    assert_int_equal(ds_propset_decode(data, true, DS_FILESYSTEM, &set), 0);
    assert_string_equal(set.share_type, "SMB");
    assert_int_equal(ds_propset_given(&set, "casesensitivity"), DS_PROP_SET);
    assert_int_equal(ds_propset_given(&set, "aclmode"), DS_PROP_SET);
    for (size_t i = 0; i < DS_PROPS_COUNT; i++)
        if (set.v[i].given == DS_PROP_SET)
            assert_true(
                strcmp(set.v[i].raw, "nfsv4") == 0 || strcmp(set.v[i].raw, "restricted") == 0 ||
                strcmp(set.v[i].raw, "insensitive") == 0 || strcmp(set.v[i].raw, "off") == 0 ||
                strcmp(set.v[i].raw, "1048576") == 0 || strcmp(set.v[i].raw, "2") == 0);
    ds_propset_free(&set);

    /* a volume gets no presets (it refuses share_type) */
    json_object_del(data, "acltype");
    assert_int_equal(ds_propset_decode(data, true, DS_VOLUME, &set), 0);
    assert_int_equal(ds_propset_given(&set, "casesensitivity"), DS_PROP_ABSENT);
    assert_int_equal(ds_propset_given(&set, "acltype"), DS_PROP_ABSENT);
    ds_propset_free(&set);
    json_decref(data);
}

/* ---- through the API ---- */

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
    *err = NULL;
    if (json_object_get(r, "result"))
        out = json_incref(json_object_get(r, "result"));
    else
        *err = json_incref(json_object_get(r, "error"));
    free(resp);
    json_decref(r);
    return out;
}

static json_t *ok(const char *method, const char *params)
{
    json_t *err, *r = rpc(method, params, &err);

    if (!r)
        fail_msg("%s %s: %s", method, params, json_string_value(json_object_get(err, "message")));
    return r;
}

static void field_error(const char *method, const char *params, const char *field)
{
    json_t *err, *r = rpc(method, params, &err), *e;
    size_t i;
    bool found = false;

    if (r)
        fail_msg("%s %s unexpectedly succeeded", method, params);
    assert_int_equal(json_integer_value(json_object_get(err, "code")), -32602);
    json_array_foreach(json_object_get(json_object_get(err, "data"), "extra"), i, e) found |=
        strcmp(json_string_value(json_array_get(e, 0)), field) == 0;
    if (!found)
        fail_msg("%s %s: no error for %s in %s", method, params, field,
                 json_string_value(json_object_get(err, "message")));
    json_decref(err);
}

static json_t *row_of(const char *name)
{
    char q[256];
    json_t *rows, *row;

    snprintf(q, sizeof(q), "[[[\"name\",\"=\",\"%s\"]],{\"extra\":{\"flat\":false}}]", name);
    rows = ok("pool.dataset.query", q);
    assert_int_equal(json_array_size(rows), 1);
    row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return row;
}

static void expect_source(const char *name, const char *key, const char *value, const char *source)
{
    json_t *row = row_of(name), *p = json_object_get(row, key);

    if (!p)
        fail_msg("%s has no %s", name, key);
    if (strcmp(json_string_value(json_object_get(p, "value")), value) != 0 ||
        strcmp(json_string_value(json_object_get(p, "source")), source) != 0)
        fail_msg("%s %s: %s/%s, wanted %s/%s", name, key,
                 json_string_value(json_object_get(p, "value")),
                 json_string_value(json_object_get(p, "source")), value, source);
    json_decref(row);
}

static int setup_api(void **st)
{
    (void)st;
    assert_int_equal(testdb_make(&tdb, "/tmp/blockd-test-dsprops", "blockd.db"), 0);
    datasets_init(tdb.dir);
    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(datasets_ensure_default_pool("demo"), 0);
    return 0;
}

static int teardown_api(void **st)
{
    (void)st;
    datasets_flush_all();
    datasets_shutdown();
    db_close();
    return testdb_remove(&tdb) == 0 ? 0 : -1;
}

static void test_tree(void **st)
{
    json_t *r;

    (void)st;
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/t/fs\",\"create_ancestors\":true,\"atime\":\"OFF\","
                   "\"acltype\":\"POSIX\",\"aclmode\":\"DISCARD\",\"compression\":\"LZ4\","
                   "\"recordsize\":\"1M\",\"quota\":1073741824,\"copies\":2}]"));
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/t/fs/sub/deep\","
                                          "\"create_ancestors\":true}]"));
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/t/fs/sub/vol\",\"type\":\"VOLUME\","
                                          "\"volsize\":1048576,\"checksum\":\"BLAKE3\"}]"));
    expect_source("demo/t/fs", "atime", "OFF", "LOCAL");
    expect_source("demo/t/fs/sub/deep", "atime", "OFF", "INHERITED");
    expect_source("demo/t/fs/sub/deep", "recordsize", "1M", "INHERITED");
    expect_source("demo/t/fs/sub/deep", "exec", "ON", "DEFAULT");
    expect_source("demo/t/fs/sub/vol", "compression", "LZ4", "INHERITED");
    expect_source("demo/t/fs/sub/vol", "copies", "2", "INHERITED");
    expect_source("demo/t/fs/sub/vol", "checksum", "BLAKE3", "LOCAL");
    expect_source("demo/t", "atime", "ON", "DEFAULT"); /* parents do not inherit up */
    /* the nearest local value wins */
    json_decref(ok("pool.dataset.update", "[\"demo/t/fs/sub\",{\"compression\":\"GZIP-9\"}]"));
    expect_source("demo/t/fs/sub/vol", "compression", "GZIP-9", "INHERITED");
    json_decref(ok("pool.dataset.update", "[\"demo/t/fs/sub\",{\"compression\":\"INHERIT\"}]"));
    expect_source("demo/t/fs/sub/vol", "compression", "LZ4", "INHERITED");
    /* quota is not inherited; null removes it */
    r = row_of("demo/t/fs/sub");
    assert_true(json_is_null(json_object_get(json_object_get(r, "quota"), "parsed")));
    json_decref(r);
    json_decref(ok("pool.dataset.update", "[\"demo/t/fs\",{\"quota\":null}]"));
    r = row_of("demo/t/fs");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "quota"), "source")),
                        "DEFAULT");
    json_decref(r);
    /* a volume row has only the properties a volume has */
    r = row_of("demo/t/fs/sub/vol");
    assert_null(json_object_get(r, "atime"));
    assert_null(json_object_get(r, "recordsize"));
    assert_non_null(json_object_get(r, "snapdev"));
    json_decref(r);
}

static void test_validation(void **st)
{
    (void)st;
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"atime\":\"off\"}]",
                "pool.dataset.create.atime");
    field_error("pool.dataset.create",
                "[{\"name\":\"demo/v1\",\"type\":\"VOLUME\",\"volsize\":1048576,\"exec\":\"ON\"}]",
                "pool.dataset.create.exec");
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"quota\":1073741823}]",
                "pool.dataset.create.quota");
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"refquota\":\"1G\"}]",
                "pool.dataset.create.refquota");
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"copies\":0}]",
                "pool.dataset.create.copies");
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"quota_warning\":101}]",
                "pool.dataset.create.quota_warning");
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"reservation\":\"INHERIT\"}]",
                "pool.dataset.create.reservation");
    field_error("pool.dataset.create", "[{\"name\":\"demo/v1\",\"recordsize\":\"INHERITED\"}]",
                "pool.dataset.create.recordsize");
    /* aclmode inherited from the parent makes the pair invalid */
    json_decref(ok("pool.dataset.create",
                   "[{\"name\":\"demo/acl\",\"acltype\":\"POSIX\",\"aclmode\":\"DISCARD\"}]"));
    field_error("pool.dataset.create", "[{\"name\":\"demo/acl/c\",\"acltype\":\"NFSV4\"}]",
                "pool.dataset.create.aclmode");
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/acl/c\",\"acltype\":\"NFSV4\","
                                          "\"aclmode\":\"PASSTHROUGH\"}]"));
    field_error("pool.dataset.update", "[\"demo/acl/c\",{\"aclmode\":\"INHERIT\"}]",
                "pool.dataset.update.aclmode");
    field_error("pool.dataset.update", "[\"demo/acl/c\",{\"share_type\":\"SMB\"}]",
                "pool.dataset.update.share_type");
}

static void test_user_properties_update(void **st)
{
    json_t *r, *u;

    (void)st;
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/u\",\"user_properties\":"
                                          "[{\"key\":\"a:x\",\"value\":\"1\"},"
                                          "{\"key\":\"a:y\",\"value\":\"2\"}],"
                                          "\"managedby\":\"m\"}]"));
    r = ok("pool.dataset.update", "[\"demo/u\",{\"user_properties\":[{\"key\":\"a:y\","
                                  "\"value\":\"3\"},{\"key\":\"a:z\",\"remove\":true}]}]");
    u = json_object_get(r, "user_properties");
    assert_int_equal(json_object_size(u), 1);
    assert_string_equal(json_string_value(json_object_get(json_object_get(u, "a:y"), "value")),
                        "3");
    /* managedby is not a user property: it stays */
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "managedby"), "value")), "m");
    json_decref(r);
}

/* sync and readonly act on volumes and are inherited: the open volume
 * below a filesystem follows its parent's changes. */
static void test_sync_readonly(void **st)
{
    struct volume *v;
    json_t *r;

    (void)st;
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/sr/vol\",\"type\":\"VOLUME\","
                                          "\"volsize\":1048576,\"create_ancestors\":true}]"));
    assert_int_equal(datasets_volume_open("demo/sr/vol", &v), 0);
    assert_false(volume_readonly(v));
    json_decref(ok("pool.dataset.update", "[\"demo/sr\",{\"readonly\":\"ON\","
                                          "\"sync\":\"ALWAYS\"}]"));
    assert_true(volume_readonly(v));
    assert_int_equal(volume_sync_mode(v), VOLUME_SYNC_ALWAYS);
    expect_source("demo/sr/vol", "readonly", "ON", "INHERITED");
    expect_source("demo/sr/vol", "sync", "ALWAYS", "INHERITED");
    expect_source("demo/sr", "readonly", "ON", "LOCAL");
    /* TrueNAS refuses children under a read-only parent */
    field_error("pool.dataset.create",
                "[{\"name\":\"demo/sr/v2\",\"type\":\"VOLUME\","
                "\"volsize\":1048576}]",
                "pool.dataset.create.readonly");
    /* a local value on the volume wins over the parent's */
    json_decref(ok("pool.dataset.update", "[\"demo/sr/vol\",{\"sync\":\"DISABLED\"}]"));
    assert_int_equal(volume_sync_mode(v), VOLUME_SYNC_DISABLED);
    json_decref(ok("pool.dataset.update", "[\"demo/sr\",{\"sync\":\"STANDARD\"}]"));
    assert_int_equal(volume_sync_mode(v), VOLUME_SYNC_DISABLED);
    expect_source("demo/sr/vol", "sync", "DISABLED", "LOCAL");
    json_decref(ok("pool.dataset.update", "[\"demo/sr/vol\",{\"sync\":\"INHERIT\"}]"));
    expect_source("demo/sr/vol", "sync", "STANDARD", "INHERITED");
    /* INHERIT on the parent: back to the default */
    r = ok("pool.dataset.update", "[\"demo/sr\",{\"readonly\":\"INHERIT\",\"sync\":\"INHERIT\"}]");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "readonly"), "source")), "DEFAULT");
    json_decref(r);
    assert_false(volume_readonly(v));
    assert_int_equal(volume_sync_mode(v), VOLUME_SYNC_STANDARD);
    expect_source("demo/sr/vol", "readonly", "OFF", "DEFAULT");
    volume_unref(v);
    /* a new child takes the parent's value as inherited */
    json_decref(ok("pool.dataset.update", "[\"demo/sr\",{\"sync\":\"ALWAYS\"}]"));
    json_decref(
        ok("pool.dataset.create", "[{\"name\":\"demo/sr/a/b\",\"create_ancestors\":true}]"));
    expect_source("demo/sr/a", "sync", "ALWAYS", "INHERITED");
    expect_source("demo/sr/a/b", "sync", "ALWAYS", "INHERITED");
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/sr/a/c\",\"sync\":\"ALWAYS\"}]"));
    expect_source("demo/sr/a/c", "sync", "ALWAYS", "LOCAL"); /* given explicitly */
}

static void test_persist(void **st)
{
    (void)st;
    /* A database from before sync/readonly were inherited: only the
     * columns, no local rows. At open, values that differ from the
     * parent's become local; equal ones are inherited. */
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/mig/v\",\"type\":\"VOLUME\","
                                          "\"volsize\":1048576,\"create_ancestors\":true}]"));
    json_decref(ok("pool.dataset.create", "[{\"name\":\"demo/mig/w\",\"type\":\"VOLUME\","
                                          "\"volsize\":1048576}]"));
    db_lock();
    assert_int_equal(db_exec("DELETE FROM dataset_props WHERE name IN ('sync', 'readonly');"
                             "DELETE FROM ds_migrations;"
                             "UPDATE datasets SET sync = 'ALWAYS' WHERE name IN ('demo/mig',"
                             " 'demo/mig/v');"
                             "UPDATE datasets SET readonly = 1 WHERE name = 'demo/mig/w';"),
                     0);
    db_unlock();
    datasets_flush_all();
    db_close();
    assert_int_equal(db_open(tdb.path), 0);
    expect_source("demo/mig", "sync", "ALWAYS", "LOCAL");
    expect_source("demo/mig/v", "sync", "ALWAYS", "INHERITED");
    expect_source("demo/mig/w", "sync", "STANDARD", "LOCAL");
    expect_source("demo/mig/w", "readonly", "ON", "LOCAL");
    expect_source("demo/mig/v", "readonly", "OFF", "DEFAULT");
    expect_source("demo/t/fs", "recordsize", "1M", "LOCAL");
    expect_source("demo/t/fs/sub/deep", "acltype", "POSIX", "INHERITED");
    expect_source("demo/sr/a/b", "sync", "ALWAYS", "INHERITED");
}

int main(void)
{
    const struct CMUnitTest pure[] = {
        cmocka_unit_test(test_recordsize),
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_decode),
    };
    const struct CMUnitTest api[] = {
        cmocka_unit_test(test_tree),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_user_properties_update),
        cmocka_unit_test(test_sync_readonly),
        cmocka_unit_test(test_persist),
    };
    int rc = cmocka_run_group_tests_name("dsprops-pure", pure, NULL, NULL);

    return rc | cmocka_run_group_tests_name("dsprops-api", api, setup_api, teardown_api);
}
