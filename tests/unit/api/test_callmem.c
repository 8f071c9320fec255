/*
 * The per-call memory budget (api/callmem.h) and how api.c answers a call
 * that goes past it:
 *   - inside a scope, jansson allocations past the budget fail, and keep
 *     failing for the rest of the call; outside a scope nothing is counted;
 *   - frees inside the scope give the room back (net growth is bounded);
 *   - a nested scope (core.bulk's calls) counts toward the outer one;
 *   - json_dumps text made in a scope can be released with free();
 *   - a method that builds a big result answers -32001 / ENOMEM naming
 *     --api-call-memory, and the next call works.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/callmem.h"

static json_t *grow(size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string("0123456789abcdef0123456789abcdef")) < 0)
            break;
    return a;
}

static void test_scope(void **state)
{
    (void)state;
    struct callmem_scope s, inner;

    json_t *outside = grow(10000); /* no scope: not counted */
    assert_int_equal(json_array_size(outside), 10000);

    callmem_begin(&s);
    assert_true(s.owner);
    json_t *a = grow(100);
    assert_int_equal(json_array_size(a), 100);
    assert_true(s.used > 0);
    json_decref(a); /* freed in the scope: the room comes back */
    assert_true(s.used <= 64);
    char *text = json_dumps(outside, JSON_COMPACT);
    assert_non_null(text);
    free(text); /* plain free() of jansson's text is fine */

    callmem_begin(&inner); /* nested: counts toward s */
    assert_false(inner.owner);
    json_t *b = grow(100000); /* ~ 10 MiB of JSON: past 1 MiB */
    assert_true(json_array_size(b) < 100000);
    assert_true(callmem_end(&inner)); /* reports the outer scope's state */
    assert_true(callmem_exceeded());
    assert_null(json_object()); /* every later allocation of the call fails */
    json_decref(b);
    assert_true(callmem_end(&s));
    assert_false(callmem_exceeded());

    json_t *after = json_object(); /* the next call starts afresh */
    assert_non_null(after);
    json_decref(after);
    json_decref(outside);
}

static int m_big(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = grow(100000);
    return 0;
}

static int m_small(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    (void)params;
    *result = json_string("small");
    return 0;
}

static const struct api_method methods[] = {
    {"test.big", "[]", "a big result", m_big, API_READ},
    {"test.small", "[]", "a small result", m_small, API_READ},
};

static void test_call(void **state)
{
    (void)state;
    const char *big = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"test.big\"}";
    char *r = api_handle_text(big, strlen(big), "unit");
    assert_non_null(r);
    json_t *resp = json_loads(r, 0, NULL);
    free(r);
    assert_non_null(resp);
    assert_int_equal(json_integer_value(json_object_get(resp, "id")), 7);
    json_t *e = json_object_get(resp, "error");
    assert_non_null(e);
    assert_null(json_object_get(resp, "result"));
    assert_int_equal(json_integer_value(json_object_get(e, "code")), -32001);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "data"), "error")), 12);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "--api-call-memory"));
    json_decref(resp);

    const char *small = "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"test.small\"}";
    r = api_handle_text(small, strlen(small), "unit");
    assert_non_null(strstr(r, "\"result\":\"small\""));
    free(r);
}

int main(void)
{
    callmem_init();
    callmem_set_budget(1u << 20);
    api_register(methods, sizeof(methods) / sizeof(methods[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scope),
        cmocka_unit_test(test_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
