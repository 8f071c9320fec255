/*
 * api/redact: secrets leave job records at any depth, by field name and
 * by position (auth.login's password, also inside core.bulk), and nothing
 * else changes; role names round-trip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/api.h"
#include "api/redact.h"

/* The text of v redacted as params of method (NULL: as a value). */
static char *redacted(const char *method, const char *text)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    json_t *r = method ? redact_params(method, v) : redact_value(v);
    assert_non_null(r);
    char *s = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(v);
    json_decref(r);
    return s;
}

static void check(const char *method, const char *in, const char *want)
{
    char *got = redacted(method, in);
    assert_string_equal(got, want);
    free(got);
}

static void test_fields(void **state)
{
    (void)state;
    check(NULL, "{\"id\":1,\"key\":\"1-abc\",\"name\":\"k\"}",
          "{\"id\":1,\"key\":\"********\",\"name\":\"k\"}");
    check("iscsi.auth.create", "[{\"tag\":1,\"secret\":\"s\",\"peersecret\":\"p\",\"user\":\"u\"}]",
          "[{\"peersecret\":\"********\",\"secret\":\"********\",\"tag\":1,\"user\":\"u\"}]");
    check(NULL, "[[{\"a\":{\"password\":\"x\",\"psk\":\"y\"}}]]",
          "[[{\"a\":{\"password\":\"********\",\"psk\":\"********\"}}]]");
    /* null stays null (no secret to hide); other fields are untouched */
    check(NULL, "{\"secret\":null,\"keyring\":\"/etc/ceph/k\"}",
          "{\"keyring\":\"/etc/ceph/k\",\"secret\":null}");
    check(NULL, "\"plain\"", "\"plain\"");
}

static void test_positional(void **state)
{
    (void)state;
    check("auth.login", "[\"root\",\"pw\"]", "[\"root\",\"********\"]");
    check("auth.login_with_api_key", "[\"1-abc\"]", "[\"********\"]");
    check("core.bulk", "[\"auth.login\",[[\"u\",\"pw1\"],[\"v\",\"pw2\"]],\"d\"]",
          "[\"auth.login\",[[\"u\",\"********\"],[\"v\",\"********\"]],\"d\"]");
    check("core.bulk", "[\"api_key.create\",[[{\"name\":\"n\",\"key\":\"k\"}]]]",
          "[\"api_key.create\",[[{\"key\":\"********\",\"name\":\"n\"}]]]");
    check("pool.query", "[]", "[]");
}

static void test_roles(void **state)
{
    (void)state;
    assert_int_equal(api_role_parse("READONLY_ADMIN"), API_ROLE_READONLY);
    assert_int_equal(api_role_parse("SHARING_ADMIN"), API_ROLE_SHARING);
    assert_int_equal(api_role_parse("FULL_ADMIN"), API_ROLE_FULL);
    assert_int_equal(api_role_parse("ROOT"), 0);
    assert_int_equal(api_role_parse(NULL), 0);
    char buf[64];
    api_roles_text(API_ROLE_READONLY | API_ROLE_SHARING, buf, sizeof(buf));
    assert_string_equal(buf, "READONLY_ADMIN,SHARING_ADMIN");
    api_roles_text(0, buf, sizeof(buf));
    assert_string_equal(buf, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fields),
        cmocka_unit_test(test_positional),
        cmocka_unit_test(test_roles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
