/*
 * --metrics-allow (daemon/metrics_allow.h): IPv4 and IPv6 networks, hosts
 * without a prefix, IPv4-mapped IPv6 peers, prefixes that are not byte
 * aligned; malformed lists (host bits, /33, garbage, empty items) are
 * refused whole; at most METRICS_ALLOW_MAX networks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "daemon/metrics_allow.h"

static bool match(const char *addr)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1)
        s4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1)
        s6->sin6_family = AF_INET6;
    else
        fail();
    return metrics_allow_match((struct sockaddr *)&ss);
}

static void test_allow(void **state)
{
    (void)state;
    assert_false(match("127.0.0.1")); /* nothing configured */
    assert_false(metrics_allow_match(NULL));
    assert_int_equal(metrics_allow_add("10.1.2.3/8"), -EINVAL); /* host bits */
    assert_int_equal(metrics_allow_add("127.0.0.1/33"), -EINVAL);
    assert_int_equal(metrics_allow_add("nonsense"), -EINVAL);
    assert_int_equal(metrics_allow_add("10.0.0.0/8,"), -EINVAL); /* empty item */
    assert_int_equal(metrics_allow_add("10.0.0.0/8,bad"), -EINVAL);
    assert_int_equal(metrics_allow_count(), 0); /* nothing of a bad list */

    assert_int_equal(metrics_allow_add("10.0.0.0/8, 192.0.2.7,172.16.0.0/12"), 0);
    assert_int_equal(metrics_allow_add("fd00::/8,::1"), 0);
    assert_int_equal(metrics_allow_count(), 5);
    assert_true(match("10.200.3.4"));
    assert_false(match("11.0.0.1"));
    assert_true(match("192.0.2.7"));
    assert_false(match("192.0.2.8"));
    assert_true(match("172.31.255.255")); /* /12: not byte aligned */
    assert_false(match("172.32.0.1"));
    assert_true(match("::1"));
    assert_false(match("::2"));
    assert_true(match("fdab::1"));
    assert_false(match("fe80::1"));
    assert_true(match("::ffff:10.9.8.7")); /* IPv4-mapped: as IPv4 */
    assert_false(match("::ffff:11.9.8.7"));

    char many[METRICS_ALLOW_MAX * 24];
    size_t at = 0;
    for (int i = 0; i < METRICS_ALLOW_MAX; i++)
        at += (size_t)snprintf(many + at, sizeof(many) - at, "%s198.51.100.%d", i ? "," : "", i);
    assert_int_equal(metrics_allow_add(many), -ENOSPC);
    assert_int_equal(metrics_allow_count(), 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_allow)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
