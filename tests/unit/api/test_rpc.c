/*
 * JSON-RPC handling: valid calls, every invalid request shape, parse
 * errors, notifications, batches, unknown methods, the error shapes
 * (-32602 with data.extra, -32001 with errno/error/reason), the built-in
 * core methods, auth gating and the size limit.
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

static int echo_calls;

static int t_echo(struct api_call *call, json_t *params, json_t **result)
{
    echo_calls++;
    *result = json_incref(params);
    return 0;
}

static int t_busy(struct api_call *call, json_t *params, json_t **result)
{
    return api_error(call, EBUSY, "Target %s is in use", "iqn.x:t1");
}

static int t_invalid(struct api_call *call, json_t *params, json_t **result)
{
    api_verr(call, "test.invalid.volsize", EINVAL, "must be a multiple of volblocksize");
    api_verr(call, "test.invalid.name", EINVAL, "bad name");
    return api_invalid(call);
}

static int t_silent_fail(struct api_call *call, json_t *params, json_t **result)
{
    return -1; /* a bug: no error set */
}

static int t_verr_but_ok(struct api_call *call, json_t *params, json_t **result)
{
    api_verr(call, "test.verr_ok.x", EINVAL, "forgotten");
    *result = json_true();
    return 0;
}

static int t_null(struct api_call *call, json_t *params, json_t **result)
{
    return 0; /* no result: null */
}

static int t_peer(struct api_call *call, json_t *params, json_t **result)
{
    *result = json_pack("{s:s, s:s}", "peer", api_call_peer(call), "method", api_call_method(call));
    return 0;
}

static int t_nested(struct api_call *call, json_t *params, json_t **result)
{
    json_t *res = NULL, *err = NULL;
    json_t *p = json_pack("[s]", "x");
    int rc = api_call_method_json(call, "test.busy", p, &res, &err);
    json_decref(p);
    assert_int_equal(rc, -1);
    assert_null(res);
    *result = err;
    return 0;
}

static const struct api_method methods[] = {
    {"test.echo", "[any…]", "returns its params", t_echo, API_READ},
    {"test.busy", "[]", "fails with EBUSY", t_busy, API_READ},
    {"test.invalid", "[]", "fails validation", t_invalid, API_READ},
    {"test.silent_fail", "[]", "fails without error", t_silent_fail, API_READ},
    {"test.verr_ok", "[]", "adds an error but returns 0", t_verr_but_ok, API_READ},
    {"test.null", "[]", "returns nothing", t_null, API_READ},
    {"test.peer", "[]", "returns the peer", t_peer, API_NO_AUTH | API_READ},
    {"test.nested", "[]", "calls test.busy", t_nested, API_READ},
    {"test.share", "[]", "needs SHARING_ADMIN", t_null, API_SHARE},
    {"test.echo", "[]", "duplicate: ignored", t_null, API_READ},
};

static int setup(void **state)
{
    static bool done;
    if (!done) {
        api_register(methods, sizeof(methods) / sizeof(methods[0]));
        done = true;
    }
    return 0;
}

/* Send text, parse the reply (NULL if none). */
static json_t *rpc(const char *text)
{
    char *resp = api_handle_text(text, strlen(text), "unit");
    if (!resp)
        return NULL;
    json_error_t err;
    json_t *r = json_loads(resp, JSON_DECODE_ANY, &err);
    if (!r)
        fail_msg("reply is not JSON: %s", resp);
    free(resp);
    return r;
}

static int err_code(json_t *r)
{
    return (int)json_integer_value(json_object_get(json_object_get(r, "error"), "code"));
}

static const char *err_msg(json_t *r)
{
    return json_string_value(json_object_get(json_object_get(r, "error"), "message"));
}

/* data.reason: where a -32602's causes are (its message is "Invalid params"). */
static const char *err_reason(json_t *r)
{
    json_t *d = json_object_get(json_object_get(r, "error"), "data");
    return json_string_value(json_object_get(d, "reason"));
}

static void test_ping(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"core.ping\"}");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 7);
    assert_string_equal(json_string_value(json_object_get(r, "jsonrpc")), "2.0");
    assert_null(json_object_get(r, "error"));
    json_decref(r);
    /* params [] and a string id */
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"core.ping\",\"params\":[]}");
    assert_string_equal(json_string_value(json_object_get(r, "id")), "abc");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    json_decref(r);
    /* id null is echoed as null and answered */
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"core.ping\"}");
    assert_true(json_is_null(json_object_get(r, "id")));
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    json_decref(r);
    /* too many args */
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\",\"params\":[1]}");
    assert_int_equal(err_code(r), API_INVALID_PARAMS);
    assert_non_null(strstr(err_reason(r), "Too many arguments (expected 0, found 1)"));
    json_decref(r);
}

static void test_get_methods(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.get_methods\"}");
    json_t *res = json_object_get(r, "result");
    assert_true(json_is_object(res));
    json_t *ping = json_object_get(res, "core.ping");
    assert_non_null(ping);
    assert_non_null(json_string_value(json_object_get(ping, "summary")));
    assert_true(json_is_true(json_object_get(ping, "no_auth")));
    assert_non_null(json_object_get(res, "test.echo"));
    /* the duplicate registration kept the first handler */
    json_decref(r);
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":[1]}");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(r, "result"), 0)), 1);
    json_decref(r);

    /* api_methods is sorted and api_find finds each */
    const struct api_method **all;
    size_t n = api_methods(&all);
    assert_true(n >= 10);
    for (size_t i = 1; i < n; i++)
        assert_true(strcmp(all[i - 1]->name, all[i]->name) < 0);
    for (size_t i = 0; i < n; i++)
        assert_ptr_equal(api_find(all[i]->name), all[i]);
    assert_null(api_find("nope"));
    assert_null(api_find(""));
    assert_null(api_find("zzzz"));
}

static void test_params_shapes(void **state)
{
    /* absent → [] */
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\"}");
    assert_true(json_is_array(json_object_get(r, "result")));
    assert_int_equal(json_array_size(json_object_get(r, "result")), 0);
    json_decref(r);
    /* object → [object] (by-name params as one positional) */
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":{\"a\":1}}");
    json_t *res = json_object_get(r, "result");
    assert_int_equal(json_array_size(res), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(res, 0), "a")), 1);
    json_decref(r);
    /* scalar params → invalid request */
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":5}");
    assert_int_equal(err_code(r), API_INVALID_REQUEST);
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 1);
    json_decref(r);
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\",\"params\":\"x\"}");
    assert_int_equal(err_code(r), API_INVALID_REQUEST);
    json_decref(r);
}

static void test_invalid_requests(void **state)
{
    static const char *bad[] = {
        "5",
        "\"str\"",
        "null",
        "true",
        "{}",
        "{\"id\":1,\"method\":\"core.ping\"}",                        /* no jsonrpc */
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"core.ping\"}",    /* wrong version */
        "{\"jsonrpc\":2.0,\"id\":1,\"method\":\"core.ping\"}",        /* version not a string */
        "{\"jsonrpc\":\"2.0\",\"id\":1}",                             /* no method */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}",                /* method not a string */
        "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"core.ping\"}",   /* id an object */
        "{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"core.ping\"}",  /* id a list */
        "{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"core.ping\"}", /* id a bool */
        "[]",                                                         /* empty batch */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *r = rpc(bad[i]);
        if (!r)
            fail_msg("no reply to %s", bad[i]);
        if (err_code(r) != API_INVALID_REQUEST)
            fail_msg("%s: code %d", bad[i], err_code(r));
        assert_non_null(strstr(err_msg(r), "Invalid Request"));
        json_decref(r);
    }
    /* an invalid request keeps its id when the id itself is valid */
    json_t *r = rpc("{\"jsonrpc\":\"1.0\",\"id\":9,\"method\":\"core.ping\"}");
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 9);
    json_decref(r);
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"core.ping\"}");
    assert_true(json_is_null(json_object_get(r, "id")));
    json_decref(r);
}

static void test_parse_errors(void **state)
{
    static const char *bad[] = {
        "{", "{\"jsonrpc\":\"2.0\",", "nonsense", "{\"a\":1} trailing", "", "[1,2", "{'a':1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *r = rpc(bad[i]);
        if (!r)
            fail_msg("no reply to %s", bad[i]);
        assert_int_equal(err_code(r), API_PARSE_ERROR);
        assert_true(json_is_null(json_object_get(r, "id")));
        assert_non_null(strstr(err_msg(r), "Parse error"));
        json_decref(r);
    }
    /* invalid UTF-8 is a parse error, not a crash */
    const char raw[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}";
    char *resp = api_handle_text(raw, sizeof(raw) - 1, "unit");
    assert_non_null(strstr(resp, "-32700"));
    free(resp);
    /* an embedded NUL cannot smuggle a second document */
    const char nul[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\"}\0garbage";
    resp = api_handle_text(nul, sizeof(nul) - 1, "unit");
    assert_non_null(strstr(resp, "-32700"));
    free(resp);
}

static void test_method_not_found(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"pool.frobnicate\"}");
    assert_int_equal(err_code(r), API_METHOD_NOT_FOUND);
    assert_non_null(strstr(err_msg(r), "pool.frobnicate"));
    assert_int_equal(json_integer_value(json_object_get(r, "id")), 3);
    json_decref(r);
}

static void test_notifications(void **state)
{
    echo_calls = 0;
    /* no id: run, no reply */
    assert_null(rpc("{\"jsonrpc\":\"2.0\",\"method\":\"test.echo\",\"params\":[1]}"));
    assert_int_equal(echo_calls, 1);
    /* a failing notification gets no reply either */
    assert_null(rpc("{\"jsonrpc\":\"2.0\",\"method\":\"test.busy\"}"));
    assert_null(rpc("{\"jsonrpc\":\"2.0\",\"method\":\"no.such\"}"));
    /* but an invalid request is still answered (spec: id null) */
    json_t *r = rpc("{\"jsonrpc\":\"1.0\",\"method\":\"test.echo\"}");
    assert_int_equal(err_code(r), API_INVALID_REQUEST);
    json_decref(r);
}

static void test_batch(void **state)
{
    echo_calls = 0;
    json_t *r = rpc("["
                    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\"},"
                    "{\"jsonrpc\":\"2.0\",\"method\":\"test.echo\"},"
                    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"no.such\"},"
                    "5,"
                    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"test.busy\"}"
                    "]");
    assert_true(json_is_array(r));
    assert_int_equal(json_array_size(r), 4); /* the notification has no reply */
    assert_int_equal(echo_calls, 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(r, 0), "result")), "pong");
    assert_int_equal(err_code(json_array_get(r, 1)), API_METHOD_NOT_FOUND);
    assert_int_equal(err_code(json_array_get(r, 2)), API_INVALID_REQUEST);
    assert_int_equal(err_code(json_array_get(r, 3)), API_CALL_ERROR);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(r, 3), "id")), 3);
    json_decref(r);
    /* a batch of notifications only: no reply at all */
    assert_null(rpc("[{\"jsonrpc\":\"2.0\",\"method\":\"test.echo\"},"
                    "{\"jsonrpc\":\"2.0\",\"method\":\"core.ping\"}]"));
}

static void test_call_error_shape(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.busy\"}");
    json_t *e = json_object_get(r, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), API_CALL_ERROR);
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "Target iqn.x:t1 is in use");
    json_t *d = json_object_get(e, "data");
    assert_true(json_is_integer(json_object_get(d, "error")));
    assert_int_equal(json_integer_value(json_object_get(d, "error")), EBUSY);
    assert_string_equal(json_string_value(json_object_get(d, "errname")), "EBUSY");
    assert_true(json_is_null(json_object_get(d, "trace")));
    assert_null(json_object_get(d, "errno"));
    assert_string_equal(json_string_value(json_object_get(d, "reason")),
                        "[EBUSY] Target iqn.x:t1 is in use");
    assert_null(json_object_get(r, "result"));
    json_decref(r);
}

static void test_invalid_params_shape(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.invalid\"}");
    json_t *e = json_object_get(r, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), API_INVALID_PARAMS);
    assert_string_equal(json_string_value(json_object_get(e, "message")), "Invalid params");
    json_t *d = json_object_get(e, "data");
    json_t *extra = json_object_get(d, "extra");
    assert_int_equal(json_array_size(extra), 2);
    json_t *x = json_array_get(extra, 0);
    assert_string_equal(json_string_value(json_array_get(x, 0)), "test.invalid.volsize");
    assert_string_equal(json_string_value(json_array_get(x, 1)),
                        "must be a multiple of volblocksize");
    assert_int_equal(json_integer_value(json_array_get(x, 2)), EINVAL);
    assert_int_equal(json_integer_value(json_object_get(d, "error")), EINVAL);
    assert_string_equal(json_string_value(json_object_get(d, "errname")), "EINVAL");
    assert_string_equal(json_string_value(json_object_get(d, "reason")),
                        "[EINVAL] test.invalid.volsize: must be a multiple of volblocksize\n"
                        "[EINVAL] test.invalid.name: bad name\n");
    json_decref(r);

    /* verrs added but 0 returned: still a -32602 (never a silent success) */
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.verr_ok\"}");
    assert_int_equal(err_code(r), API_INVALID_PARAMS);
    json_decref(r);
}

static void test_internal_error(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.silent_fail\"}");
    assert_int_equal(err_code(r), API_INTERNAL_ERROR);
    json_decref(r);
    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.null\"}");
    assert_true(json_is_null(json_object_get(r, "result")));
    assert_non_null(json_object_get(r, "result")); /* present, as null */
    json_decref(r);
}

static void test_peer_and_nested(void **state)
{
    json_t *r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.peer\"}");
    json_t *res = json_object_get(r, "result");
    assert_string_equal(json_string_value(json_object_get(res, "peer")), "unit");
    assert_string_equal(json_string_value(json_object_get(res, "method")), "test.peer");
    json_decref(r);

    r = rpc("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.nested\"}");
    res = json_object_get(r, "result");
    assert_int_equal(json_integer_value(json_object_get(res, "code")), API_CALL_ERROR);
    assert_string_equal(json_string_value(json_object_get(json_object_get(res, "data"), "errname")),
                        "EBUSY");
    json_decref(r);
}

static void test_auth_gate(void **state)
{
    struct api_client c = {.peer = "ws:1.2.3.4:5", .authenticated = false};
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\"}";
    const char *echo = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.echo\"}";
    char *s = api_handle_text_client(ping, strlen(ping), &c);
    assert_non_null(strstr(s, "pong"));
    free(s);
    s = api_handle_text_client(echo, strlen(echo), &c);
    assert_non_null(strstr(s, "Not authenticated"));
    json_t *r = json_loads(s, 0, NULL);
    json_t *d = json_object_get(json_object_get(r, "error"), "data");
    assert_int_equal(json_integer_value(json_object_get(d, "error")), API_ENOTAUTHENTICATED);
    assert_string_equal(json_string_value(json_object_get(d, "errname")), "ENOTAUTHENTICATED");
    json_decref(r);
    free(s);
    /* authenticated without a login that gave it roles: still refused */
    c.authenticated = true;
    s = api_handle_text_client(echo, strlen(echo), &c);
    assert_non_null(strstr(s, "EACCES"));
    assert_non_null(strstr(s, "role none"));
    free(s);
    c.local = true; /* the local administrator */
    s = api_handle_text_client(echo, strlen(echo), &c);
    assert_non_null(strstr(s, "\"result\""));
    free(s);
}

static void test_too_large(void **state)
{
    size_t len = API_MAX_REQUEST + 1;
    char *big = malloc(len);
    assert_non_null(big);
    memset(big, ' ', len);
    char *s = api_handle_text(big, len, "unit");
    assert_non_null(strstr(s, "request too large (max 16 MiB)"));
    assert_non_null(strstr(s, "-32600"));
    free(s);
    /* exactly at the limit is parsed (here: a ping padded with spaces) */
    const char *ping = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\"}";
    memcpy(big, ping, strlen(ping));
    s = api_handle_text(big, API_MAX_REQUEST, "unit");
    assert_non_null(strstr(s, "pong"));
    free(s);
    free(big);
}

static void test_query_hint(void **state)
{
    const char *op = NULL;
    json_t *p = json_loads("[[[\"alias\", \"in\", [\"a\", \"b\"]], [\"name\", \"=\", \"x\"],"
                           "[\"OR\", [[\"id\", \"=\", 1]]]], {}]",
                           0, NULL);
    json_t *v = api_query_hint(p, "name", &op);
    assert_string_equal(json_string_value(v), "x");
    assert_string_equal(op, "=");
    v = api_query_hint(p, "alias", &op);
    assert_int_equal(json_array_size(v), 2);
    assert_string_equal(op, "in");
    assert_null(api_query_hint(p, "id", &op)); /* only inside an OR */
    assert_null(api_query_hint(p, "nosuch", &op));
    json_decref(p);
    p = json_loads("[[[\"name\", \"^\", \"x\"], [\"alias\", \"in\", \"abc\"]]]", 0, NULL);
    assert_null(api_query_hint(p, "name", &op));
    assert_null(api_query_hint(p, "alias", &op)); /* "in" a string is a substring test */
    json_decref(p);
    assert_null(api_query_hint(NULL, "name", &op));
}

static void test_api_param(void **state)
{
    json_t *p = json_loads("[1, null]", 0, NULL);
    assert_int_equal(json_integer_value(api_param(p, 0)), 1);
    assert_null(api_param(p, 1));
    assert_null(api_param(p, 2));
    assert_null(api_param(NULL, 0));
    json_decref(p);
    json_t *q = json_loads("[[], {\"extra\": {\"flat\": true}}]", 0, NULL);
    assert_true(json_is_true(json_object_get(api_query_extra(q), "flat")));
    json_decref(q);
    q = json_loads("[[]]", 0, NULL);
    assert_null(api_query_extra(q));
    json_decref(q);
}

/* Work done below the API on a job's behalf: api_call_authorize checks
 * the identity the way the dispatcher checks a call of the method. */
static void test_authorize(void **state)
{
    struct api_identity ro = {.kind = API_CALLER_INTERNAL, .roles = API_ROLE_READONLY};
    struct api_call *call;

    snprintf(ro.name, sizeof(ro.name), "reader");
    call = api_call_as_new(&ro, "test.echo", "job");
    assert_int_equal(api_call_authorize(call), 0);
    api_call_internal_free(call);
    call = api_call_as_new(&ro, "test.share", "job");
    assert_int_equal(api_call_authorize(call), -1);
    assert_int_equal(api_call_errno(call), EACCES);
    json_t *e = api_call_error(call);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "test.share"));
    json_decref(e);
    api_call_internal_free(call);
    call = api_call_as_new(&api_identity_internal, "test.share", NULL);
    assert_int_equal(api_call_authorize(call), 0);
    assert_int_equal(api_call_identity(call)->kind, API_CALLER_INTERNAL);
    api_call_internal_free(call);
    call = api_call_as_new(&api_identity_internal, "test.nope", NULL);
    assert_int_equal(api_call_authorize(call), -1);
    api_call_internal_free(call);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ping, setup),
        cmocka_unit_test_setup(test_get_methods, setup),
        cmocka_unit_test_setup(test_params_shapes, setup),
        cmocka_unit_test_setup(test_invalid_requests, setup),
        cmocka_unit_test_setup(test_parse_errors, setup),
        cmocka_unit_test_setup(test_method_not_found, setup),
        cmocka_unit_test_setup(test_notifications, setup),
        cmocka_unit_test_setup(test_batch, setup),
        cmocka_unit_test_setup(test_call_error_shape, setup),
        cmocka_unit_test_setup(test_invalid_params_shape, setup),
        cmocka_unit_test_setup(test_internal_error, setup),
        cmocka_unit_test_setup(test_peer_and_nested, setup),
        cmocka_unit_test_setup(test_auth_gate, setup),
        cmocka_unit_test_setup(test_too_large, setup),
        cmocka_unit_test_setup(test_api_param, setup),
        cmocka_unit_test_setup(test_query_hint, setup),
        cmocka_unit_test_setup(test_authorize, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
