/*
 * Failed-CHAP throttling (src/iscsi/iscsi_chap_limit.c): a block is per
 * source address and per initiator name, each for one target; an
 * IPv4-mapped IPv6 peer is its IPv4 address; a success forgets earlier
 * failures against its own target only.
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
        assert_false(iscsi_chap_limit_failed("iqn.x:victim", "iqn.t:one", &a));
    iscsi_chap_limit_succeeded("iqn.x:victim", "iqn.t:one", &a);
    for (int i = 0; i < ISCSI_CHAP_FAIL_MAX - 1; i++)
        assert_false(iscsi_chap_limit_failed("iqn.x:victim", "iqn.t:one", &a));
    assert_int_equal(iscsi_chap_limit_check("iqn.x:victim", "iqn.t:one", &a, &what), 0);
    /* the fifth failure in the window blocks the name and the address */
    assert_true(iscsi_chap_limit_failed("iqn.x:victim", "iqn.t:one", &a));
    assert_true(iscsi_chap_limit_check("iqn.x:victim", "iqn.t:one", &a, &what) > 0);
    /* another name from the same address (also as a v4-mapped peer) */
    assert_true(iscsi_chap_limit_check("iqn.x:other", "iqn.t:one", &a, &what) > 0);
    assert_string_equal(what, "address");
    assert_true(iscsi_chap_limit_check("iqn.x:other", "iqn.t:one", &a6, &what) > 0);
    /* the same name from another address */
    uint64_t left = iscsi_chap_limit_check("iqn.x:victim", "iqn.t:one", &b, &what);
    assert_true(left > 0 && left <= ISCSI_CHAP_BLOCK_MS);
    assert_string_equal(what, "initiator");
    /* another name from another address is free */
    assert_int_equal(iscsi_chap_limit_check("iqn.x:other", "iqn.t:one", &b, &what), 0);
}

/* A right response for one target does not reset the guesses against
 * another; a block on one target leaves the others open. */
static void test_per_target(void **state)
{
    (void)state;
    iscsi_chap_limit_reset();
    struct sockaddr_storage a = v4("10.0.0.9");
    const char *what;
    for (int i = 0; i < ISCSI_CHAP_FAIL_MAX - 1; i++)
        assert_false(iscsi_chap_limit_failed("iqn.x:a", "iqn.t:victim", &a));
    iscsi_chap_limit_succeeded("iqn.x:a", "iqn.t:mine", &a);
    assert_true(iscsi_chap_limit_failed("iqn.x:a", "iqn.t:victim", &a));
    assert_true(iscsi_chap_limit_check("iqn.x:a", "iqn.t:victim", &a, &what) > 0);
    assert_int_equal(iscsi_chap_limit_check("iqn.x:a", "iqn.t:mine", &a, &what), 0);
    assert_int_equal(iscsi_chap_limit_check("iqn.x:a", "", &a, &what), 0);
    /* names longer than the table's keys still tell targets apart */
    char longname[224];
    memset(longname, 'n', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = 0;
    for (int i = 0; i < ISCSI_CHAP_FAIL_MAX; i++)
        iscsi_chap_limit_failed(longname, "iqn.t:victim2", &a);
    assert_true(iscsi_chap_limit_check(longname, "iqn.t:victim2", &a, &what) > 0);
    struct sockaddr_storage b = v4("10.0.0.10");
    assert_int_equal(iscsi_chap_limit_check(longname, "iqn.t:other2", &b, &what), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_address_and_name),
        cmocka_unit_test(test_per_target),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
