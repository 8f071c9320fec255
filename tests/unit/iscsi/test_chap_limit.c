/*
 * Failed-CHAP throttling (src/iscsi/iscsi_chap_limit.c): a block is per
 * source address and per initiator name; an IPv4-mapped IPv6 peer is its
 * IPv4 address; a success forgets earlier failures.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "iscsi/iscsi_chap.h"

static struct sockaddr_storage v4(const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    a->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a->sin_addr);
    return ss;
}

static struct sockaddr_storage v6(const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    a->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &a->sin6_addr);
    return ss;
}

static void test_per_address_and_name(void **state)
{
    struct sockaddr_storage a = v4("10.0.0.1"), b = v6("2001:db8::2"), a6 = v6("::ffff:10.0.0.1");
    const char *what;
    /* a success in between resets the count */
    for (int i = 0; i < ISCSI_CHAP_FAIL_MAX - 1; i++)
        assert_false(iscsi_chap_limit_failed("iqn.x:victim", &a));
    iscsi_chap_limit_succeeded("iqn.x:victim", &a);
    for (int i = 0; i < ISCSI_CHAP_FAIL_MAX - 1; i++)
        assert_false(iscsi_chap_limit_failed("iqn.x:victim", &a));
    assert_int_equal(iscsi_chap_limit_check("iqn.x:victim", &a, &what), 0);
    /* the fifth failure in the window blocks the name and the address */
    assert_true(iscsi_chap_limit_failed("iqn.x:victim", &a));
    assert_true(iscsi_chap_limit_check("iqn.x:victim", &a, &what) > 0);
    /* another name from the same address (also as a v4-mapped peer) */
    assert_true(iscsi_chap_limit_check("iqn.x:other", &a, &what) > 0);
    assert_string_equal(what, "address");
    assert_true(iscsi_chap_limit_check("iqn.x:other", &a6, &what) > 0);
    /* the same name from another address */
    uint64_t left = iscsi_chap_limit_check("iqn.x:victim", &b, &what);
    assert_true(left > 0 && left <= ISCSI_CHAP_BLOCK_MS);
    assert_string_equal(what, "initiator");
    /* another name from another address is free */
    assert_int_equal(iscsi_chap_limit_check("iqn.x:other", &b, &what), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_address_and_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
