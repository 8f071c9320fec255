/* Validation helpers: types, required/extra keys, enums, ranges, nesting,
 * partial updates, arity and defaults, with pydantic-style messages. */
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

static const char *const sync_values[] = {"STANDARD", "ALWAYS", "DISABLED", NULL};
static const json_int_t block_sizes[] = {512, 1024, 2048, 4096};

static const struct api_field group_fields[] = {
    {.name = "portal", .type = API_T_INT, .flags = API_REQUIRED},
    {.name = "initiator", .type = API_T_INT, .flags = API_NULLABLE},
};
static const struct api_field group_item = {
    .type = API_T_OBJECT, .fields = group_fields, .nfields = 2};
static const struct api_field string_item = {.type = API_T_STRING};

static const struct api_field fields[] = {
    {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 8},
    {.name = "volsize",
     .type = API_T_INT,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 1000},
    {.name = "sync", .type = API_T_ENUM, .choices = sync_values, .def = "\"STANDARD\""},
    {.name = "sparse", .type = API_T_BOOL, .def = "false"},
    {.name = "comments", .type = API_T_STRING, .flags = API_NULLABLE},
    {.name = "blocksize",
     .type = API_T_INT,
     .int_choices = block_sizes,
     .n_int_choices = 4,
     .def = "512"},
    {.name = "ratio", .type = API_T_NUMBER},
    {.name = "groups", .type = API_T_ARRAY, .items = &group_item},
    {.name = "names",
     .type = API_T_ARRAY,
     .items = &string_item,
     .flags = API_RANGE,
     .min = 1,
     .max = 2},
    {.name = "props", .type = API_T_OBJECT},
    {.name = "anything", .type = API_T_ANY},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static const char *input;
static unsigned vflags;

static int t_validate(struct api_call *call, json_t *params, json_t **result)
{
    json_t *obj = json_loads(input, JSON_DECODE_ANY, NULL);
    if (api_check_arity(call, params, 1) < 0) {
        json_decref(obj);
        return api_invalid(call);
    }
    int rc = api_validate_object(call, NULL, obj, fields, NFIELDS, vflags);
    if (rc < 0) {
        assert_int_equal(rc, -EINVAL);
        assert_true(api_has_verrs(call));
        json_decref(obj);
        return api_invalid(call);
    }
    assert_false(api_has_verrs(call));
    assert_int_equal(api_apply_defaults(obj, fields, NFIELDS), 0);
    *result = obj;
    return 0;
}

static const struct api_method methods[] = {
    {"pool.dataset.create", "[data]", "validation test", t_validate, API_READ},
};

static int setup(void **state)
{
    static bool done;
    if (!done) {
        api_register(methods, 1);
        done = true;
    }
    vflags = 0;
    return 0;
}

static json_t *run(const char *obj, const char *params)
{
    input = obj;
    char *req = NULL;
    assert_true(asprintf(&req,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pool.dataset.create\","
                         "\"params\":%s}",
                         params ? params : "[]") > 0);
    char *resp = api_handle_text(req, strlen(req), "unit");
    free(req);
    json_t *r = json_loads(resp, 0, NULL);
    free(resp);
    return r;
}

/* errors as "field: message|field: message" */
static const char *errors(const char *obj)
{
    static char buf[2048];
    json_t *r = run(obj, NULL);
    buf[0] = 0;
    json_t *extra = json_object_get(json_object_get(json_object_get(r, "error"), "data"), "extra");
    size_t i;
    json_t *e;
    json_array_foreach(extra, i, e)
    {
        char one[512];
        snprintf(one, sizeof(one), "%s%s: %s", i ? "|" : "",
                 json_string_value(json_array_get(e, 0)), json_string_value(json_array_get(e, 1)));
        strncat(buf, one, sizeof(buf) - strlen(buf) - 1);
    }
    json_decref(r);
    return buf;
}

#define P "pool.dataset.create."

static void test_ok_and_defaults(void **state)
{
    json_t *r = run("{\"name\":\"vm1\",\"volsize\":10}", NULL);
    json_t *res = json_object_get(r, "result");
    assert_non_null(res);
    assert_string_equal(json_string_value(json_object_get(res, "sync")), "STANDARD");
    assert_true(json_is_false(json_object_get(res, "sparse")));
    assert_int_equal(json_integer_value(json_object_get(res, "blocksize")), 512);
    assert_null(json_object_get(res, "comments")); /* no default: stays absent */
    json_decref(r);

    r = run("{\"name\":\"vm1\",\"volsize\":1000,\"sync\":\"ALWAYS\",\"sparse\":true,"
            "\"comments\":null,\"blocksize\":4096,\"ratio\":1.5,"
            "\"groups\":[{\"portal\":1},{\"portal\":2,\"initiator\":null}],"
            "\"names\":[\"a\"],\"props\":{\"x\":1},\"anything\":[1,\"2\"]}",
            NULL);
    res = json_object_get(r, "result");
    assert_non_null(res);
    assert_string_equal(json_string_value(json_object_get(res, "sync")), "ALWAYS");
    json_decref(r);
}

static void test_required_and_extra(void **state)
{
    assert_string_equal(errors("{}"), P "name: Field required|" P "volsize: Field required");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"volmode\":\"dev\"}"),
                        P "volmode: Extra inputs are not permitted");
    assert_string_equal(errors("[1]"), "pool.dataset.create: Input should be a valid dictionary");
    assert_string_equal(errors("null"), "pool.dataset.create: Input should be a valid dictionary");
}

static void test_types_strict(void **state)
{
    assert_string_equal(errors("{\"name\":5,\"volsize\":\"10\"}"),
                        P "name: Input should be a valid string|" P
                          "volsize: Input should be a valid integer");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1.0}"),
                        P "volsize: Input should be a valid integer");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":true}"),
                        P "volsize: Input should be a valid integer");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"sparse\":1}"),
                        P "sparse: Input should be a valid boolean");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"sparse\":\"true\"}"),
                        P "sparse: Input should be a valid boolean");
    assert_string_equal(errors("{\"name\":null,\"volsize\":1}"),
                        P "name: Input should be a valid string");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"ratio\":\"1\"}"),
                        P "ratio: Input should be a valid number");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"props\":[]}"),
                        P "props: Input should be a valid dictionary");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"groups\":{}}"),
                        P "groups: Input should be a valid list");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"anything\":null}"),
                        P "anything: Input should not be null");
}

static void test_enum_and_ranges(void **state)
{
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"sync\":\"standard\"}"),
                        P "sync: Input should be 'STANDARD', 'ALWAYS' or 'DISABLED'");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"sync\":1}"),
                        P "sync: Input should be a valid string");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":0}"),
                        P "volsize: Input should be greater than or equal to 1");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1001}"),
                        P "volsize: Input should be less than or equal to 1000");
    assert_string_equal(errors("{\"name\":\"\",\"volsize\":1}"),
                        P "name: String should have at least 1 character");
    assert_string_equal(errors("{\"name\":\"123456789\",\"volsize\":1}"),
                        P "name: String should have at most 8 characters");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"blocksize\":8192}"),
                        P "blocksize: Input should be 512, 1024, 2048 or 4096");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"names\":[]}"),
                        P "names: List should have at least 1 item");
    assert_string_equal(errors("{\"name\":\"a\",\"volsize\":1,\"names\":[\"a\",\"b\",\"c\"]}"),
                        P "names: List should have at most 2 items");
}

static void test_nested(void **state)
{
    assert_string_equal(
        errors("{\"name\":\"a\",\"volsize\":1,\"groups\":[{\"portal\":1},{\"initiator\":\"x\","
               "\"auth\":1}],\"names\":[\"a\",5]}"),
        P "groups.1.auth: Extra inputs are not permitted|" P "groups.1.portal: Field required|" P
          "groups.1.initiator: Input should be a valid integer|" P
          "names.1: Input should be a valid string");
}

static void test_partial(void **state)
{
    vflags = API_PARTIAL;
    json_t *r = run("{\"sync\":\"DISABLED\"}", NULL);
    assert_non_null(json_object_get(r, "result"));
    json_decref(r);
    /* still strict about what is present */
    assert_string_equal(errors("{\"volsize\":\"1\",\"x\":1}"),
                        P "x: Extra inputs are not permitted|" P
                          "volsize: Input should be a valid integer");
}

static void test_arity(void **state)
{
    json_t *r = run("{\"name\":\"a\",\"volsize\":1}", "[{}, true]");
    json_t *e = json_object_get(r, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), API_INVALID_PARAMS);
    assert_string_equal(json_string_value(json_object_get(e, "message")), "Invalid params");
    assert_string_equal(json_string_value(json_object_get(json_object_get(e, "data"), "reason")),
                        "[EINVAL] pool.dataset.create: Too many arguments (expected 1, found 2)\n");
    json_decref(r);
}

static void test_bad_default(void **state)
{
    static const struct api_field bad[] = {{.name = "x", .type = API_T_INT, .def = "{oops"}};
    json_t *o = json_object();
    assert_int_equal(api_apply_defaults(o, bad, 1), -EINVAL);
    assert_int_equal(api_apply_defaults(NULL, bad, 1), -EINVAL);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ok_and_defaults, setup),
        cmocka_unit_test_setup(test_required_and_extra, setup),
        cmocka_unit_test_setup(test_types_strict, setup),
        cmocka_unit_test_setup(test_enum_and_ranges, setup),
        cmocka_unit_test_setup(test_nested, setup),
        cmocka_unit_test_setup(test_partial, setup),
        cmocka_unit_test_setup(test_arity, setup),
        cmocka_unit_test_setup(test_bad_default, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
