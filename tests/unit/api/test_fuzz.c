/*
 * Randomized robustness test of the request path (parser, validation,
 * dispatch, query engine): mutated requests must always produce either
 * no reply (a notification) or one valid JSON-RPC reply, never a crash
 * or leak (run under ASan in the sanitizer build). Deterministic seed.
 */
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
#include "core/log.h"

static json_t *rows;

static int t_query(struct api_call *call, json_t *params, json_t **result)
{
    return api_query(call, rows, params, result);
}

static const struct api_field sub_fields[] = {
    {.name = "portal", .type = API_T_INT, .flags = API_REQUIRED},
};
static const struct api_field sub_item = {.type = API_T_OBJECT, .fields = sub_fields, .nfields = 1};
static const char *const choices[] = {"A", "B", NULL};
static const struct api_field fields[] = {
    {.name = "name", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 64},
    {.name = "size", .type = API_T_INT, .flags = API_RANGE, .min = 0, .max = 1 << 30},
    {.name = "mode", .type = API_T_ENUM, .choices = choices},
    {.name = "groups", .type = API_T_ARRAY, .items = &sub_item},
    {.name = "flag", .type = API_T_BOOL, .flags = API_NULLABLE},
};

static int t_create(struct api_call *call, json_t *params, json_t **result)
{
    if (api_check_arity(call, params, 1) < 0)
        return api_invalid(call);
    json_t *o = api_param(params, 0);
    if (api_validate_object(call, NULL, o, fields, sizeof(fields) / sizeof(fields[0]), 0) < 0)
        return api_invalid(call);
    *result = json_deep_copy(o);
    api_apply_defaults(*result, fields, sizeof(fields) / sizeof(fields[0]));
    return 0;
}

static const struct api_method methods[] = {
    {"f.query", "", "", t_query, API_READ},
    {"f.create", "", "", t_create, API_READ},
};

static const char *const seeds[] = {
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"f.query\",\"params\":[[[\"name\",\"=\",\"a\"],"
    "[\"OR\",[[\"size\",\">\",3],[[\"tags\",\"rin\",\"x\"],[\"name\",\"~\",\"^a.*\"]]]]],"
    "{\"order_by\":[\"-size\",\"nulls_last:name\"],\"select\":[\"name\",[\"size\",\"s\"],"
    "\"p.q\"],\"limit\":2,\"offset\":1}]}",
    "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"method\":\"f.query\",\"params\":[[[\"listen.*.ip\","
    "\"Cin\",[\"A\",\"b\"]],[\"p.q\",\"!^\",\"z\"]],{\"get\":true,\"count\":false}]}",
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"f.create\",\"params\":[{\"name\":\"n\",\"size\":5,"
    "\"mode\":\"A\",\"groups\":[{\"portal\":1}],\"flag\":null}]}",
    "[{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"core.ping\"},{\"jsonrpc\":\"2.0\","
    "\"method\":\"core.get_methods\"}]",
};

static const char *const tokens[] = {
    "[",       "]",         "{",           "}",       ",",
    ":",       "\"",        "null",        "true",    "-1",
    "1e999",   "\"OR\"",    "\"~\"",       "\"(\"",   "\"in\"",
    "[]",      "{}",        "\"a.b.0.*\"", "\\u0000", "9223372036854775808",
    "\"get\"", "\"\\\\.\"",
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static char *mutate(const char *seed, size_t *len)
{
    size_t n = strlen(seed);
    size_t cap = n * 2 + 256;
    char *s = malloc(cap);
    memcpy(s, seed, n);
    int edits = 1 + (int)(next_rand() % 4);
    for (int e = 0; e < edits; e++) {
        size_t pos = n ? next_rand() % n : 0;
        switch (next_rand() % 4) {
        case 0: /* flip a byte */
            if (n)
                s[pos] = (char)(next_rand() & 0xff);
            break;
        case 1: /* delete a span */
            if (n) {
                size_t l = 1 + next_rand() % 8;
                if (pos + l > n)
                    l = n - pos;
                memmove(s + pos, s + pos + l, n - pos - l);
                n -= l;
            }
            break;
        default: { /* insert a token */
            const char *t = tokens[next_rand() % (sizeof(tokens) / sizeof(tokens[0]))];
            size_t tl = strlen(t);
            if (n + tl < cap) {
                memmove(s + pos + tl, s + pos, n - pos);
                memcpy(s + pos, t, tl);
                n += tl;
            }
            break;
        }
        }
    }
    *len = n;
    return s;
}

static void test_mutations(void **state)
{
    rows = json_loads("[{\"name\":\"a\",\"size\":5,\"tags\":[\"x\"],\"p\":{\"q\":\"y\"},"
                      "\"listen\":[{\"ip\":\"a\"}]},{\"name\":\"b\",\"size\":null},{}]",
                      0, NULL);
    assert_non_null(rows);
    log_set_level(LOG_WARN); /* one info line per failed call otherwise */
    api_register(methods, 2);
    size_t replies = 0, silent = 0;
    for (int i = 0; i < 30000; i++) {
        size_t len;
        char *req = mutate(seeds[(size_t)i % (sizeof(seeds) / sizeof(seeds[0]))], &len);
        char *resp = api_handle_text(req, len, "fuzz");
        if (resp) {
            json_error_t err;
            json_t *r = json_loads(resp, JSON_DECODE_ANY, &err);
            if (!r)
                fail_msg("reply is not JSON: %s", resp);
            json_t *one = json_is_array(r) ? json_array_get(r, 0) : r;
            if (!json_is_array(r) || json_array_size(r) > 0) {
                assert_string_equal(json_string_value(json_object_get(one, "jsonrpc")), "2.0");
                assert_true(json_object_get(one, "result") || json_object_get(one, "error"));
            }
            json_decref(r);
            free(resp);
            replies++;
        } else {
            silent++;
        }
        free(req);
    }
    assert_true(replies > 20000);
    json_decref(rows);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
