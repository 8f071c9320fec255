/* The field tables of api/fields.h: defaults, decoding only the keys
 * given (an update), encoding back, the codecs' edge cases (null, a char
 * array's bound, an enum's index, a list of strings, a nested object),
 * and the string list helpers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/fields.h"

static const char *const mode_values[] = {"READ", "WRITE", "BOTH", NULL};

struct inner {
    int port;
    char host[8];
};

struct obj {
    char *name;
    char *comment;
    bool on;
    int64_t size;
    uint32_t count;
    int mode;
    char tag[4];
    struct api_strv list;
    struct inner in;
    int untouched; /* no codec */
};

static const struct api_field inner_fields[] = {
    {.name = "port", .type = API_T_INT, .def = "3260", API_AT(struct inner, port, api_codec_int)},
    {.name = "host",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     API_AT_CHARS(struct inner, host)},
};

static const struct api_field fields[] = {
    {.name = "name", .type = API_T_STRING, API_AT(struct obj, name, api_codec_str)},
    {.name = "comment",
     .type = API_T_STRING,
     .flags = API_NULLABLE,
     API_AT(struct obj, comment, api_codec_str_null)},
    {.name = "on", .type = API_T_BOOL, .def = "true", API_AT(struct obj, on, api_codec_bool)},
    {.name = "size", .type = API_T_INT, API_AT(struct obj, size, api_codec_i64)},
    {.name = "count", .type = API_T_INT, API_AT(struct obj, count, api_codec_u32)},
    {.name = "mode",
     .type = API_T_ENUM,
     .choices = mode_values,
     .def = "\"BOTH\"",
     API_AT(struct obj, mode, api_codec_enum)},
    {.name = "tag",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     API_AT_CHARS(struct obj, tag)},
    {.name = "list", .type = API_T_ARRAY, API_AT(struct obj, list, api_codec_strv)},
    {.name = "in",
     .type = API_T_OBJECT,
     .fields = inner_fields,
     .nfields = 2,
     API_AT(struct obj, in, api_codec_object)},
    {.name = "untouched", .type = API_T_INT},
};
#define NFIELDS (sizeof(fields) / sizeof(fields[0]))

static void test_defaults(void **state)
{
    (void)state;
    struct obj o = {0};
    assert_int_equal(api_fields_defaults(fields, NFIELDS, &o), 0);
    assert_true(o.on);
    assert_int_equal(o.mode, 2);
    assert_int_equal(o.in.port, 3260); /* a nested object's own defaults */
    assert_null(o.name);
    api_fields_clear(fields, NFIELDS, &o);
}

static void test_decode_encode(void **state)
{
    (void)state;
    struct obj o = {.untouched = 7};
    json_t *in = json_loads("{\"name\": \"a\", \"comment\": null, \"on\": false, \"size\": "
                            "-5, \"count\": 4000000000, \"mode\": \"WRITE\", \"tag\": \"abc\", "
                            "\"list\": [\"x\", \"y\"], \"in\": {\"host\": \"h\"}, "
                            "\"untouched\": 1}",
                            0, NULL);
    assert_non_null(in);
    assert_int_equal(api_fields_decode(fields, NFIELDS, in, &o), 0);
    assert_string_equal(o.name, "a");
    assert_null(o.comment);
    assert_false(o.on);
    assert_int_equal(o.size, -5);
    assert_int_equal(o.count, 4000000000u);
    assert_int_equal(o.mode, 1);
    assert_string_equal(o.tag, "abc");
    assert_int_equal(o.list.n, 2);
    assert_string_equal(o.list.v[1], "y");
    assert_string_equal(o.in.host, "h");
    assert_int_equal(o.in.port, 0);   /* not given: unchanged */
    assert_int_equal(o.untouched, 7); /* no codec: the module's */

    json_t *row = api_fields_row(9, fields, NFIELDS, &o);
    char *text = json_dumps(row, JSON_COMPACT);
    assert_string_equal(text, "{\"id\":9,\"name\":\"a\",\"comment\":null,\"on\":false,\"size\":-5,"
                              "\"count\":4000000000,\"mode\":\"WRITE\",\"tag\":\"abc\",\"list\":"
                              "[\"x\",\"y\"],\"in\":{\"port\":0,\"host\":\"h\"}}");
    free(text);
    json_decref(row);
    json_decref(in);
    api_fields_clear(fields, NFIELDS, &o);
    assert_null(o.name);
    assert_int_equal(o.list.n, 0);
}

/* An update: only the keys given change; a replaced string is freed. */
static void test_partial(void **state)
{
    (void)state;
    struct obj o = {0};
    json_t *a = json_loads("{\"name\": \"first\", \"list\": [\"x\"], \"tag\": \"t\"}", 0, NULL);
    json_t *b = json_loads("{\"name\": \"second\", \"list\": []}", 0, NULL);
    assert_int_equal(api_fields_decode(fields, NFIELDS, a, &o), 0);
    assert_int_equal(api_fields_decode(fields, NFIELDS, b, &o), 0);
    assert_string_equal(o.name, "second");
    assert_int_equal(o.list.n, 0);
    assert_string_equal(o.tag, "t");
    /* null: a str field is NULL, encoded as "" */
    json_t *c = json_loads("{\"name\": null, \"tag\": null}", 0, NULL);
    assert_int_equal(api_fields_decode(fields, NFIELDS, c, &o), 0);
    assert_null(o.name);
    assert_string_equal(o.tag, "");
    json_t *row = json_object();
    assert_int_equal(api_fields_encode(fields, NFIELDS, &o, row), 0);
    assert_string_equal(json_string_value(json_object_get(row, "name")), "");
    json_decref(row);
    json_decref(a);
    json_decref(b);
    json_decref(c);
    api_fields_clear(fields, NFIELDS, &o);
}

static void test_strv(void **state)
{
    (void)state;
    struct api_strv sv = {0};
    assert_int_equal(api_strv_add(&sv, "one"), 0);
    assert_int_equal(api_strv_add(&sv, ""), 0);
    assert_int_equal(sv.n, 2);
    assert_string_equal(sv.v[0], "one");
    assert_string_equal(sv.v[1], "");
    api_strv_clear(&sv);
    assert_null(sv.v);
    assert_int_equal(sv.n, 0);
    api_strv_clear(&sv); /* twice is harmless */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_decode_encode),
        cmocka_unit_test(test_partial),
        cmocka_unit_test(test_strv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
