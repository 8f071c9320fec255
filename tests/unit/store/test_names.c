/* Dataset and pool name rules: every rule, accepted and rejected, and the
 * reason text for each rejection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "store/names.h"

static void expect_ok(const char *name, bool snap)
{
    char why[256] = "";
    int rc = name_check_dataset(name, snap, why, sizeof(why));
    if (rc != 0)
        fail_msg("'%s' rejected: %s", name, why);
}

static void expect_bad(const char *name, bool snap, const char *reason_part)
{
    char why[256] = "";
    int rc = name_check_dataset(name, snap, why, sizeof(why));
    if (rc != -EINVAL)
        fail_msg("'%s' accepted (rc %d)", name, rc);
    if (!strstr(why, reason_part))
        fail_msg("'%s': reason '%s' lacks '%s'", name, why, reason_part);
}

static void test_dataset_valid(void **state)
{
    expect_ok("demo/vm1", false);
    expect_ok("demo/a/b/c", false);
    expect_ok("p/A-Z_a.z:0-9", false);
    expect_ok("pool/.hidden", false);
    expect_ok("pool/...", false); /* three dots is an ordinary name */
    expect_ok("pool/a..b", false);
    expect_ok("pool/-x", false);
    expect_ok("demo/vm1@snap1", true);
    expect_ok("demo/a/b@2024-01-01T00:00", true);
}

static void test_dataset_structure(void **state)
{
    expect_bad("", false, "empty");
    expect_bad("demo", false, "pool/name");
    expect_bad("/demo/vm1", false, "absolute");
    expect_bad("/etc/passwd", false, "absolute");
    expect_bad("demo//vm1", false, "empty component");
    expect_bad("demo/vm1/", false, "end with '/'");
    expect_bad("demo/", false, "end with '/'");
    expect_bad("/", false, "absolute");
}

static void test_dataset_dots(void **state)
{
    expect_bad("demo/..", false, "'..' is not allowed");
    expect_bad("demo/../etc", false, "'..' is not allowed");
    expect_bad("../demo/x", false, "'..' is not allowed");
    expect_bad("demo/./x", false, "'.' is not allowed");
    expect_bad("./x", false, "'.' is not allowed");
    expect_bad("demo/a/..", false, "'..' is not allowed");
}

static void test_dataset_chars(void **state)
{
    expect_bad("demo/vm 1", false, "invalid byte 0x20");
    expect_bad("demo/vm*", false, "invalid character '*'");
    expect_bad("demo/a\\b", false, "invalid character '\\'");
    expect_bad("demo/é", false, "invalid byte 0xc3");
    expect_bad("demo/a\nb", false, "invalid byte 0x0a");
    expect_bad("demo/a$b", false, "invalid character '$'");
    expect_bad("demo/a,b", false, "invalid character ','");
    expect_bad("de mo/x", false, "invalid byte 0x20");
}

static void test_dataset_lengths(void **state)
{
    char name[2048];
    memcpy(name, "demo/", 5);
    memset(name + 5, 'a', 255);
    name[5 + 255] = '\0';
    expect_ok(name, false);
    memset(name + 5, 'a', 256);
    name[5 + 256] = '\0';
    expect_bad(name, false, "256 bytes long");
    /* Many short components: total length limit. */
    size_t n = 0;
    memcpy(name, "demo", 4);
    n = 4;
    while (n + 2 < sizeof(name) - 1) {
        name[n++] = '/';
        name[n++] = 'x';
    }
    name[n] = '\0';
    expect_bad(name, false, "longer than 1024");
}

static void test_snapshot_rules(void **state)
{
    expect_bad("demo/vm1@snap", false, "not allowed here");
    expect_bad("demo/vm1@", true, "empty");
    expect_bad("demo/vm1@a@b", true, "more than one '@'");
    expect_bad("demo/vm1@a/b", true, "must not contain '/'");
    expect_bad("demo/vm1@..", true, "snapshot name: name component '..'");
    expect_bad("demo/vm1@a b", true, "snapshot name: invalid byte 0x20");
    expect_bad("@snap", true, "empty");
    expect_bad("demo@snap", true, "pool/name");
    expect_bad("demo/a@b/c", true, "must not contain '/'");
}

static void test_component_explicit_len(void **state)
{
    char why[128];
    assert_int_equal(name_check_component("abc", 3, why, sizeof(why)), 0);
    assert_int_equal(name_check_component("a\0c", 3, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "NUL"));
    assert_int_equal(name_check_component("abc", 0, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "empty"));
    assert_int_equal(name_check_component("ab/c", 4, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "'/'"));
    /* why may be NULL or tiny without harm */
    assert_int_equal(name_check_component("..", 2, NULL, 0), -EINVAL);
    char tiny[4];
    assert_int_equal(name_check_component("..", 2, tiny, sizeof(tiny)), -EINVAL);
    assert_int_equal(strlen(tiny), 3);
}

static void test_pool_names(void **state)
{
    char why[256];
    assert_int_equal(name_check_pool("demo", why, sizeof(why)), 0);
    assert_int_equal(name_check_pool("tank-1.fast:ssd_0", why, sizeof(why)), 0);
    assert_int_equal(name_check_pool("", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "empty"));
    assert_int_equal(name_check_pool("a/b", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "single component"));
    assert_int_equal(name_check_pool("a@b", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "'@'"));
    assert_int_equal(name_check_pool("..", why, sizeof(why)), -EINVAL);
    assert_int_equal(name_check_pool(".", why, sizeof(why)), -EINVAL);
    assert_int_equal(name_check_pool("/demo", why, sizeof(why)), -EINVAL);
    assert_int_equal(name_check_pool("de mo", why, sizeof(why)), -EINVAL);
    char big[300];
    memset(big, 'p', 256);
    big[256] = '\0';
    assert_int_equal(name_check_pool(big, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "255"));
    big[255] = '\0';
    assert_int_equal(name_check_pool(big, why, sizeof(why)), 0);
    assert_int_equal(name_check_pool(NULL, why, sizeof(why)), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dataset_valid),          cmocka_unit_test(test_dataset_structure),
        cmocka_unit_test(test_dataset_dots),           cmocka_unit_test(test_dataset_chars),
        cmocka_unit_test(test_dataset_lengths),        cmocka_unit_test(test_snapshot_rules),
        cmocka_unit_test(test_component_explicit_len), cmocka_unit_test(test_pool_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
