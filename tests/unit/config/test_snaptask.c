/* Snapshot task schedules (cron fields, the day rule, the begin/end
 * window), naming schemas and lifetimes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>
#include <time.h>

#include "control/snaptask.h"

static int parse(const char *min, const char *hour, const char *dom, const char *dow,
                 const char *begin, const char *end, struct snaptask_sched *s, const char **field)
{
    struct snaptask_cron c = {.minute = (char *)min,
                              .hour = (char *)hour,
                              .dom = (char *)dom,
                              .month = (char *)"*",
                              .dow = (char *)dow,
                              .begin = (char *)begin,
                              .end = (char *)end};
    char why[256];

    return snaptask_sched_parse(&c, s, field, why, sizeof(why));
}

static struct tm at(int mday, int wday, int hour, int min)
{
    struct tm tm = {.tm_mday = mday, .tm_wday = wday, .tm_hour = hour, .tm_min = min, .tm_mon = 11};
    return tm;
}

static void test_fields(void **state)
{
    struct snaptask_sched s;
    const char *field = NULL;
    struct tm tm;
    (void)state;

    assert_int_equal(parse("*/15", "1-3,7", "*", "*", "00:00", "23:59", &s, &field), 0);
    tm = at(7, 1, 2, 30);
    assert_true(snaptask_sched_match(&s, &tm));
    tm = at(7, 1, 2, 31);
    assert_false(snaptask_sched_match(&s, &tm));
    tm = at(7, 1, 4, 0);
    assert_false(snaptask_sched_match(&s, &tm));
    tm = at(7, 1, 7, 45);
    assert_true(snaptask_sched_match(&s, &tm));
    assert_int_equal(parse("10-20/5", "*", "*", "*", "00:00", "23:59", &s, &field), 0);
    assert_true(s.minute == ((1ull << 10) | (1ull << 15) | (1ull << 20)));

    assert_int_equal(parse("60", "*", "*", "*", "00:00", "23:59", &s, &field), -EINVAL);
    assert_string_equal(field, "minute");
    assert_int_equal(parse("*", "5-2", "*", "*", "00:00", "23:59", &s, &field), -EINVAL);
    assert_string_equal(field, "hour");
    assert_int_equal(parse("*", "*", "0", "*", "00:00", "23:59", &s, &field), -EINVAL);
    assert_string_equal(field, "dom");
    assert_int_equal(parse("*/0", "*", "*", "*", "00:00", "23:59", &s, &field), -EINVAL);
    assert_int_equal(parse("1,,2", "*", "*", "*", "00:00", "23:59", &s, &field), -EINVAL);
    assert_int_equal(parse("x", "*", "*", "*", "00:00", "23:59", &s, &field), -EINVAL);
    assert_int_equal(parse("5/9223372036854775807", "*", "*", "*", "00:00", "23:59", &s, &field),
                     0);
    assert_true(s.minute == 1ull << 5);
    assert_int_equal(parse("*", "*", "*", "*", "24:00", "23:59", &s, &field), -EINVAL);
    assert_string_equal(field, "begin");
    assert_int_equal(parse("*", "*", "*", "*", "00:00", "9:5x", &s, &field), -EINVAL);
    assert_string_equal(field, "end");
}

static void test_days_and_window(void **state)
{
    struct snaptask_sched s;
    const char *field;
    struct tm tm;
    (void)state;

    /* both restricted: either matches (cron) */
    assert_int_equal(parse("*", "*", "1", "7", "00:00", "23:59", &s, &field), 0);
    tm = at(1, 3, 0, 0);
    assert_true(snaptask_sched_match(&s, &tm));
    tm = at(9, 0, 0, 0); /* a Sunday: 7 is Sunday too */
    assert_true(snaptask_sched_match(&s, &tm));
    tm = at(9, 2, 0, 0);
    assert_false(snaptask_sched_match(&s, &tm));
    /* one restricted: that one decides */
    assert_int_equal(parse("*", "*", "*", "1-5", "00:00", "23:59", &s, &field), 0);
    tm = at(9, 6, 0, 0);
    assert_false(snaptask_sched_match(&s, &tm));
    /* a window across midnight */
    assert_int_equal(parse("*", "*", "*", "*", "22:00", "02:00", &s, &field), 0);
    tm = at(9, 2, 23, 10);
    assert_true(snaptask_sched_match(&s, &tm));
    tm = at(9, 2, 1, 59);
    assert_true(snaptask_sched_match(&s, &tm));
    tm = at(9, 2, 12, 0);
    assert_false(snaptask_sched_match(&s, &tm));
}

static void test_schema(void **state)
{
    char why[256];
    int64_t t, u;
    (void)state;

    assert_int_equal(snaptask_schema_check("auto-%Y-%m-%d_%H-%M", why, sizeof(why)), 0);
    assert_int_equal(snaptask_schema_check("auto-%Y-%m-%d", why, sizeof(why)), -EINVAL);
    assert_int_equal(snaptask_schema_check("a/%Y-%m-%d_%H-%M", why, sizeof(why)), -EINVAL);
    assert_int_equal(snaptask_schema_time("auto-%Y-%m-%d_%H-%M", "auto-2026-01-02_03-04", &t), 0);
    assert_int_equal(snaptask_schema_time("auto-%Y-%m-%d_%H-%M", "auto-2026-01-02_05-04", &u), 0);
    assert_int_equal(u - t, 7200);
    assert_int_equal(snaptask_schema_time("auto-%Y-%m-%d_%H-%M", "auto-2026-01-02_03-04x", &t),
                     -EINVAL);
    assert_int_equal(snaptask_schema_time("auto-%Y-%m-%d_%H-%M", "keep-me", &t), -EINVAL);
    assert_int_equal(snaptask_lifetime_s(2, "HOUR"), 7200);
    assert_int_equal(snaptask_lifetime_s(1, "WEEK"), 7 * 86400);
    assert_int_equal(snaptask_lifetime_s(1, "YEAR"), 365 * 86400);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_days_and_window),
        cmocka_unit_test(test_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
