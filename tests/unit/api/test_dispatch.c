/*
 * The one check point: the dispatcher validates a method's positional
 * parameters against the args table of its registration before the
 * handler runs (arity, object fields, partial updates, optional trailing
 * arguments, scalar ids), and the synopsis is generated from that table.
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
#include "api/validate.h"

static int calls;

/* Counts the calls that reached it; the tests say when one may. */
static int t_handler(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    calls++;
    *result = json_incref(params);
    return 0;
}

static const struct api_field rbd_fields[] = {
    {.name = "pool", .type = API_T_STRING, .flags = API_REQUIRED},
    {.name = "conf", .type = API_T_STRING},
};
static const struct api_field item_fields[] = {
    {.name = "portal", .type = API_T_INT, .flags = API_REQUIRED},
};
static const struct api_field item = {.type = API_T_OBJECT, .fields = item_fields, .nfields = 1};
static const struct api_field create_fields[] = {
    {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED},
    {.name = "size", .type = API_T_INT, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 100},
    {.name = "rbd", .type = API_T_OBJECT, .fields = rbd_fields, .nfields = 2},
    {.name = "groups", .type = API_T_ARRAY, .items = &item},
};
static const struct api_field del_fields[] = {
    {.name = "force", .type = API_T_BOOL},
};

static const struct api_arg create_args[] = {API_ARG_OBJECT("data", create_fields, 0)};
static const struct api_arg update_args[] = {API_ARG_ID,
                                             API_ARG_OBJECT("data", create_fields, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    API_ARG_ID, API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};
static const struct api_arg query_args[] = {API_ARG_QUERY};
static const struct api_arg self_args[] = {
    API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL | API_ARG_SELF_CHECKED)};

static const struct api_method methods[] = {
    {"t.create", NULL, "create", t_handler, API_READ, API_ARGS(create_args)},
    {"t.update", NULL, "update", t_handler, API_READ, API_ARGS(update_args)},
    {"t.delete", NULL, "delete", t_handler, API_READ, API_ARGS(delete_args)},
    {"t.query", NULL, "query", t_handler, API_READ, API_ARGS(query_args)},
    {"t.none", NULL, "no parameters", t_handler, API_READ},
    {"t.self", NULL, "checks its options itself", t_handler, API_READ, API_ARGS(self_args)},
    {"t.legacy", "[anything…]", "checks its own", t_handler, API_READ},
};

static int setup(void **state)
{
    (void)state;
    static bool done;
    if (!done)
        api_register(methods, sizeof(methods) / sizeof(methods[0]));
    done = true;
    calls = 0;
    return 0;
}

/* Call method with params (JSON text); returns the response. */
static json_t *call(const char *method, const char *params)
{
    char req[1024];
    snprintf(req, sizeof(req), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
             method, params);
    char *out = api_handle_text(req, strlen(req), "test");
    assert_non_null(out);
    json_t *r = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(r);
    return r;
}

/* The response's data.extra as compact JSON text (malloc'd), after
 * asserting -32602. */
static char *extra(json_t *r)
{
    json_t *err = json_object_get(r, "error");
    assert_non_null(err);
    assert_int_equal(json_integer_value(json_object_get(err, "code")), API_INVALID_PARAMS);
    json_t *x = json_object_get(json_object_get(err, "data"), "extra");
    assert_true(json_is_array(x));
    return json_dumps(x, JSON_COMPACT);
}

static void expect_invalid(const char *method, const char *params, const char *want)
{
    json_t *r = call(method, params);
    char *got = extra(r);
    assert_string_equal(got, want);
    free(got);
    json_decref(r);
}

static void expect_ok(const char *method, const char *params)
{
    json_t *r = call(method, params);
    assert_non_null(json_object_get(r, "result"));
    json_decref(r);
}

static void test_rejected_before_handler(void **state)
{
    (void)state;
    expect_invalid("t.create", "[{\"name\":\"a\",\"size\":0,\"x\":1}]",
                   "[[\"t.create.x\",\"Extra inputs are not permitted\",22],"
                   "[\"t.create.size\",\"Input should be greater than or equal to 1\",22]]");
    expect_invalid("t.create", "[]", "[[\"t.create\",\"Field required\",22]]");
    expect_invalid("t.create", "[{\"name\":\"a\",\"size\":\"5\"}]",
                   "[[\"t.create.size\",\"Input should be a valid integer\",22]]");
    expect_invalid("t.create", "[{\"name\":\"a\",\"size\":5,\"groups\":[{\"portal\":true}]}]",
                   "[[\"t.create.groups.0.portal\",\"Input should be a valid integer\",22]]");
    expect_invalid("t.create", "[{\"name\":\"a\",\"size\":5}, 1]",
                   "[[\"t.create\",\"Too many arguments (expected 1, found 2)\",22]]");
    expect_invalid("t.none", "[1]",
                   "[[\"t.none\",\"Too many arguments (expected 0, found 1)\",22]]");
    assert_int_equal(calls, 0);
    expect_ok("t.create", "[{\"name\":\"a\",\"size\":5,\"rbd\":{\"pool\":\"p\"}}]");
    expect_ok("t.none", "[]");
    assert_int_equal(calls, 2);
}

static void test_partial_update(void **state)
{
    (void)state;
    expect_ok("t.update", "[3, {\"size\":7}]"); /* name may be absent */
    expect_ok("t.update", "[3, {}]");
    assert_int_equal(calls, 2);
    expect_invalid("t.update", "[3, {\"size\":700}]",
                   "[[\"t.update.size\",\"Input should be less than or equal to 100\",22]]");
    /* the first bad argument stops the check, as handlers returned at it */
    expect_invalid("t.update", "[\"3\", {\"size\":700}]",
                   "[[\"t.update.id\",\"Input should be a valid integer\",22]]");
    expect_invalid("t.update", "[]", "[[\"t.update.id\",\"Field required\",22]]");
    expect_invalid("t.update", "[3]", "[[\"t.update\",\"Field required\",22]]");
    assert_int_equal(calls, 2);
}

static void test_optional_trailing(void **state)
{
    (void)state;
    expect_ok("t.delete", "[3]");
    expect_ok("t.delete", "[3, null]");
    expect_ok("t.delete", "[3, {\"force\":true}]");
    expect_ok("t.query", "[]");
    expect_ok("t.query", "[[[\"id\",\"=\",1]], {\"get\":true}]"); /* the handler checks these */
    assert_int_equal(calls, 5);
    expect_invalid("t.delete", "[3, {\"force\":1}]",
                   "[[\"t.delete.force\",\"Input should be a valid boolean\",22]]");
    expect_invalid("t.query", "[[], {}, 1]",
                   "[[\"t.query\",\"Too many arguments (expected 2, found 3)\",22]]");
    /* a method with a hand-written synopsis checks its own parameters */
    expect_ok("t.legacy", "[1, 2, 3]");
    /* so does a self-checked argument (its arity is still checked) */
    expect_ok("t.self", "[{\"force\":1}]");
    assert_int_equal(calls, 7);
    expect_invalid("t.self", "[{}, 2]",
                   "[[\"t.self\",\"Too many arguments (expected 1, found 2)\",22]]");
}

static void test_synopsis(void **state)
{
    (void)state;
    const char *want[][2] = {
        {"t.create", "[data: {name, size, rbd?: {pool, conf?}, groups?: [{portal}]}]"},
        {"t.update", "[id, data: {name?, size?, rbd?: {pool, conf?}, groups?: [{portal}]}]"},
        {"t.delete", "[id, options?: {force?}]"},
        {"t.query", "[filters?, options?]"},
        {"t.none", "[]"},
        {"t.self", "[options?: {force?}]"},
        {"t.legacy", "[anything…]"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char *s = api_method_synopsis(api_find(want[i][0]));
        assert_non_null(s);
        assert_string_equal(s, want[i][1]);
        free(s);
    }
    /* core.get_methods shows the same text */
    json_t *r = call("core.get_methods", "[]");
    json_t *m = json_object_get(json_object_get(r, "result"), "t.delete");
    assert_string_equal(json_string_value(json_object_get(m, "params")),
                        "[id, options?: {force?}]");
    json_decref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_rejected_before_handler, setup),
        cmocka_unit_test_setup(test_partial_update, setup),
        cmocka_unit_test_setup(test_optional_trailing, setup),
        cmocka_unit_test_setup(test_synopsis, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
