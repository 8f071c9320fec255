/* Replication snapshot selection: naming schemas checked and parsed as
 * TrueNAS (zettarepl) does, whole-name regex matching. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <time.h>

#include "control/repl_select.h"

static void test_schema_check(void **state)
{
    char why[256];
    (void)state;
    assert_int_equal(repl_schema_check("auto-%Y-%m-%d_%H-%M", why, sizeof(why)), 0);
    assert_int_equal(repl_schema_check("snap-%Y%m%d.%H%M%S", why, sizeof(why)), 0);
    assert_int_equal(repl_schema_check("s-%s", why, sizeof(why)), 0);
    assert_int_equal(repl_schema_check("a-%Y-%m-%d_%H-%M%z", why, sizeof(why)), 0);
    assert_int_equal(repl_schema_check("auto-%Y-%m-%d", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "%H must be present"));
    assert_int_equal(repl_schema_check("a/%Y-%m-%d_%H-%M", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "/ is not an allowed character"));
    assert_int_equal(repl_schema_check("a%%-%Y-%m-%d_%H-%M", why, sizeof(why)), -EINVAL);
    assert_int_equal(repl_schema_check("%s-%Y", why, sizeof(why)), -EINVAL);
    assert_int_equal(repl_schema_check("%Y-%m-%d_%H:%M%z", why, sizeof(why)), -EINVAL);
    assert_int_equal(repl_schema_check("%Y-%m-%d_%H-%M-%b", why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "%b is not supported"));
}

static void test_schema_parse(void **state)
{
    int64_t t = 0, u = 0;
    (void)state;
    assert_int_equal(repl_schema_parse("auto-%Y-%m-%d_%H-%M", "auto-2026-01-02_03-04", &t), 0);
    assert_int_equal(t, 1767323040); /* 2026-01-02 03:04 as naive UTC seconds */
    /* whole name only, literal characters exact */
    assert_int_equal(repl_schema_parse("auto-%Y-%m-%d_%H-%M", "auto-2026-01-02_03-04x", &t),
                     -EINVAL);
    assert_int_equal(repl_schema_parse("auto-%Y-%m-%d_%H-%M", "xauto-2026-01-02_03-04", &t),
                     -EINVAL);
    assert_int_equal(repl_schema_parse("auto-%Y-%m-%d_%H-%M", "manual-1", &t), -EINVAL);
    /* one-digit fields, as strptime takes them */
    assert_int_equal(repl_schema_parse("a-%Y-%m-%d_%H-%M", "a-2026-1-2_3-4", &u), 0);
    assert_int_equal(u, 1767323040);
    /* impossible dates are no match */
    assert_int_equal(repl_schema_parse("a-%Y-%m-%d_%H-%M", "a-2026-02-30_00-00", &t), -EINVAL);
    assert_int_equal(repl_schema_parse("a-%Y-%m-%d_%H-%M", "a-2026-13-01_00-00", &t), -EINVAL);
    /* ordering follows time */
    assert_int_equal(repl_schema_parse("a-%Y%m%d%H%M", "a-202601020304", &t), 0);
    assert_int_equal(repl_schema_parse("a-%Y%m%d%H%M", "a-202601020305", &u), 0);
    assert_true(u == t + 60);
    /* %z: the '+' is written ':' in ZFS names */
    assert_int_equal(repl_schema_parse("a-%Y-%m-%d_%H-%M%z", "a-2026-01-02_03-04:0100", &t), 0);
    assert_int_equal(repl_schema_parse("a-%Y-%m-%d_%H-%M%z", "a-2026-01-02_03-04-0130", &t), 0);
    /* %s */
    assert_int_equal(repl_schema_parse("s-%s", "s-1700000000", &t), 0);
    assert_int_equal(repl_schema_parse("s-%s", "s-", &t), -EINVAL);
}

static void test_regex(void **state)
{
    regex_t re;
    char why[256];
    (void)state;
    assert_int_equal(repl_regex_compile("(snapshot-.*|copy-1234)", &re, why, sizeof(why)), 0);
    assert_true(repl_regex_match(&re, "snapshot-a"));
    assert_true(repl_regex_match(&re, "copy-1234"));
    assert_false(repl_regex_match(&re, "copy-12345")); /* whole name */
    assert_false(repl_regex_match(&re, "xsnapshot-a"));
    assert_false(repl_regex_match(&re, "other"));
    regfree(&re);
    /* alternation binds inside the group: "a|b" is (a|b), whole name */
    assert_int_equal(repl_regex_compile("a|b", &re, why, sizeof(why)), 0);
    assert_true(repl_regex_match(&re, "b"));
    assert_false(repl_regex_match(&re, "ab"));
    regfree(&re);
    assert_int_equal(repl_regex_compile("(unclosed", &re, why, sizeof(why)), -EINVAL);
    assert_non_null(strstr(why, "Invalid regex"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_check),
        cmocka_unit_test(test_schema_parse),
        cmocka_unit_test(test_regex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
