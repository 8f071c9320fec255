/*
 * Query engine: every operator (plain and case-insensitive), OR, dotted
 * paths with indexes and "*", every option, and the errors. Runs through
 * a registered test method so the error shapes are the real ones.
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
#include "api/query_regex.h"

static const char *rows_text =
    "["
    "{\"id\":1,\"name\":\"demo/vm1\",\"size\":100,\"tags\":[\"a\",\"b\"],"
    " \"props\":{\"sync\":\"STANDARD\",\"n\":1},"
    " \"listen\":[{\"ip\":\"0.0.0.0\",\"port\":3260}],\"comment\":null,\"ro\":false},"
    "{\"id\":2,\"name\":\"demo/vm2\",\"size\":200,\"tags\":[\"b\"],"
    " \"props\":{\"sync\":\"ALWAYS\",\"n\":2},"
    " \"listen\":[{\"ip\":\"::\",\"port\":3260},{\"ip\":\"10.0.0.1\",\"port\":3261}],"
    " \"comment\":\"hello\",\"ro\":true},"
    "{\"id\":3,\"name\":\"tank/Data\",\"size\":50,\"tags\":[],"
    " \"props\":{\"sync\":\"DISABLED\",\"n\":3},"
    " \"listen\":[],\"comment\":\"World\",\"ro\":false,\"a.b\":\"dotted-key\"},"
    "{\"id\":4,\"name\":\"tank/vol.x\",\"size\":200.5,\"tags\":[\"c\"],"
    " \"props\":{\"sync\":\"STANDARD\",\"n\":null},\"listen\":[{\"ip\":\"10.0.0.2\",\"port\":1}],"
    " \"ro\":true}"
    "]";

static json_t *rows;

static int test_query_fn(struct api_call *call, json_t *params, json_t **result)
{
    return api_query(call, rows, params, result);
}

static const struct api_method methods[] = {
    {"test.query", "[filters, options]", "query the fixture", test_query_fn, API_READ},
};

static int setup(void **state)
{
    (void)state;
    json_error_t err;
    rows = json_loads(rows_text, 0, &err);
    if (!rows) {
        fprintf(stderr, "fixture: %s\n", err.text);
        return -1;
    }
    static bool registered;
    if (!registered) {
        api_register(methods, 1);
        registered = true;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    json_decref(rows);
    return 0;
}

/* Run test.query with params (JSON text); returns the whole response. */
static json_t *call(const char *params)
{
    char *req = NULL;
    assert_true(asprintf(&req,
                         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.query\",\"params\":%s}",
                         params) > 0);
    char *resp = api_handle_text(req, strlen(req), "test");
    free(req);
    assert_non_null(resp);
    json_t *r = json_loads(resp, 0, NULL);
    free(resp);
    assert_non_null(r);
    return r;
}

/* Ids of the result list, "1,2,4"; fails on an error response. */
static char *ids(const char *params)
{
    json_t *r = call(params);
    json_t *res = json_object_get(r, "result");
    if (!json_is_array(res)) {
        char *d = json_dumps(r, 0);
        fail_msg("expected a list for %s, got %s", params, d);
    }
    static char buf[256];
    buf[0] = 0;
    size_t i;
    json_t *row;
    json_array_foreach(res, i, row)
    {
        char one[32];
        snprintf(one, sizeof(one), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_object_get(row, "id")));
        strncat(buf, one, sizeof(buf) - strlen(buf) - 1);
    }
    json_decref(r);
    return buf;
}

#define F(filters) "[" filters ", {}]"
#define ASSERT_IDS(params, expect) assert_string_equal(ids(params), expect)

/* The error object of a failed call (new reference). */
static json_t *error_of(const char *params)
{
    json_t *r = call(params);
    json_t *e = json_incref(json_object_get(r, "error"));
    if (!e)
        fail_msg("expected an error for %s", params);
    json_decref(r);
    return e;
}

static void assert_invalid(const char *params, const char *field_part, const char *msg_part)
{
    json_t *e = error_of(params);
    assert_int_equal(json_integer_value(json_object_get(e, "code")), API_INVALID_PARAMS);
    json_t *extra = json_object_get(json_object_get(e, "data"), "extra");
    assert_true(json_array_size(extra) >= 1);
    json_t *first = json_array_get(extra, 0);
    const char *field = json_string_value(json_array_get(first, 0));
    const char *msg = json_string_value(json_array_get(first, 1));
    if (!strstr(field, field_part) || !strstr(msg, msg_part))
        fail_msg("for %s: got [%s, %s], want field ~ %s, msg ~ %s", params, field, msg, field_part,
                 msg_part);
    assert_int_equal(json_integer_value(json_array_get(first, 2)), 22);
    json_decref(e);
}

static void test_no_filters(void **state)
{
    (void)state;
    ASSERT_IDS("[]", "1,2,3,4");
    ASSERT_IDS("[[]]", "1,2,3,4");
    ASSERT_IDS("[[], {}]", "1,2,3,4");
    ASSERT_IDS("[null, null]", "1,2,3,4");
}

static void test_eq_ne(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"name\", \"=\", \"demo/vm1\"]]"), "1");
    ASSERT_IDS(F("[[\"id\", \"=\", 2]]"), "2");
    ASSERT_IDS(F("[[\"id\", \"=\", 2.0]]"), "2");  /* numbers compare by value */
    ASSERT_IDS(F("[[\"id\", \"=\", \"2\"]]"), ""); /* no coercion */
    ASSERT_IDS(F("[[\"ro\", \"=\", true]]"), "2,4");
    ASSERT_IDS(F("[[\"comment\", \"=\", null]]"), "1");
    ASSERT_IDS(F("[[\"tags\", \"=\", [\"b\"]]]"), "2");
    ASSERT_IDS(F("[[\"name\", \"!=\", \"demo/vm1\"]]"), "2,3,4");
    /* a missing field never matches, not even != */
    ASSERT_IDS(F("[[\"comment\", \"!=\", \"hello\"]]"), "1,3");
    ASSERT_IDS(F("[[\"nosuch\", \"!=\", 1]]"), "");
    /* a list of filters is AND */
    ASSERT_IDS(F("[[\"ro\", \"=\", true], [\"size\", \">\", 200]]"), "4");
}

static void test_order_ops(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"size\", \">\", 100]]"), "2,4");
    ASSERT_IDS(F("[[\"size\", \">=\", 100]]"), "1,2,4");
    ASSERT_IDS(F("[[\"size\", \"<\", 200]]"), "1,3");
    ASSERT_IDS(F("[[\"size\", \"<=\", 200]]"), "1,2,3");
    ASSERT_IDS(F("[[\"size\", \">\", 200.25]]"), "4");
    ASSERT_IDS(F("[[\"name\", \">\", \"demo/vm1\"]]"), "2,3,4");
    ASSERT_IDS(F("[[\"name\", \"<\", \"tank\"]]"), "1,2");
    /* null and mismatched types are not ordered: no match, no error */
    ASSERT_IDS(F("[[\"comment\", \">\", \"a\"]]"), "2"); /* "World" < "a" bytewise */
    ASSERT_IDS(F("[[\"size\", \">\", \"a\"]]"), "");
    ASSERT_IDS(F("[[\"props.n\", \"<\", 3]]"), "1,2");
}

static void test_in_nin(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"id\", \"in\", [1, 3, 9]]]"), "1,3");
    ASSERT_IDS(F("[[\"id\", \"in\", []]]"), "");
    ASSERT_IDS(F("[[\"name\", \"in\", \"xx demo/vm2 yy\"]]"), "2"); /* substring of a string */
    ASSERT_IDS(F("[[\"comment\", \"in\", [null, \"hello\"]]]"), "1,2");
    ASSERT_IDS(F("[[\"id\", \"nin\", [1, 3]]]"), "2,4");
    ASSERT_IDS(F("[[\"id\", \"nin\", []]]"), "1,2,3,4");
    /* nin on null is false (middleware op_nin) */
    ASSERT_IDS(F("[[\"comment\", \"nin\", [\"hello\"]]]"), "3");
}

static void test_rin_rnin(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"tags\", \"rin\", \"b\"]]"), "1,2");
    ASSERT_IDS(F("[[\"tags\", \"rnin\", \"b\"]]"), "3,4");
    ASSERT_IDS(F("[[\"name\", \"rin\", \"vm\"]]"), "1,2"); /* substring of the field */
    ASSERT_IDS(F("[[\"name\", \"rnin\", \"vm\"]]"), "3,4");
    ASSERT_IDS(F("[[\"comment\", \"rin\", \"x\"]]"), ""); /* null: false */
    ASSERT_IDS(F("[[\"comment\", \"rnin\", \"x\"]]"), "2,3");
    ASSERT_IDS(F("[[\"size\", \"rin\", 1]]"), ""); /* not a container */
}

static void test_prefix_suffix(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"name\", \"^\", \"demo/\"]]"), "1,2");
    ASSERT_IDS(F("[[\"name\", \"!^\", \"demo/\"]]"), "3,4");
    ASSERT_IDS(F("[[\"name\", \"$\", \"2\"]]"), "2");
    ASSERT_IDS(F("[[\"name\", \"!$\", \"2\"]]"), "1,3,4");
    ASSERT_IDS(F("[[\"name\", \"^\", \"\"]]"), "1,2,3,4");
    ASSERT_IDS(F("[[\"comment\", \"^\", \"h\"]]"), "2");
    ASSERT_IDS(F("[[\"comment\", \"!^\", \"h\"]]"), "3"); /* null: false */
    ASSERT_IDS(F("[[\"comment\", \"!$\", \"o\"]]"), "3");
    ASSERT_IDS(F("[[\"size\", \"^\", \"1\"]]"), ""); /* numbers are not strings */
}

static void test_regex(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"name\", \"~\", \"demo/vm[0-9]+$\"]]"), "1,2");
    /* re.match: anchored at the start, not the end */
    ASSERT_IDS(F("[[\"name\", \"~\", \"vm\"]]"), "");
    ASSERT_IDS(F("[[\"name\", \"~\", \".*vm\"]]"), "1,2");
    ASSERT_IDS(F("[[\"name\", \"~\", \"tank/(Data|vol\\\\.x)\"]]"), "3,4");
    ASSERT_IDS(F("[[\"name\", \"~\", \"(demo|tank)/v\"]]"), "1,2,4");
    /* null is matched as "" */
    ASSERT_IDS(F("[[\"comment\", \"~\", \"^$\"]]"), "1");
    ASSERT_IDS(F("[[\"size\", \"~\", \"1\"]]"), "");
}

static void test_casefold(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"name\", \"C=\", \"TANK/data\"]]"), "3");
    ASSERT_IDS(F("[[\"name\", \"=\", \"TANK/data\"]]"), "");
    ASSERT_IDS(F("[[\"comment\", \"C^\", \"WOR\"]]"), "3");
    ASSERT_IDS(F("[[\"comment\", \"C$\", \"LO\"]]"), "2");
    ASSERT_IDS(F("[[\"comment\", \"Cin\", [\"WORLD\", \"x\"]]]"), "3");
    ASSERT_IDS(F("[[\"comment\", \"C!=\", \"WORLD\"]]"), "1,2");
    ASSERT_IDS(F("[[\"tags\", \"Crin\", \"A\"]]"), "1");
    assert_invalid(F("[[\"name\", \"C~\", \"x\"]]"), "query-filters.0",
                   "Invalid case-insensitive operation");
}

static void test_or(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"OR\", [[\"id\", \"=\", 1], [\"id\", \"=\", 3]]]]"), "1,3");
    /* a branch that is a list of filters is a conjunction */
    ASSERT_IDS(
        F("[[\"OR\", [[[\"ro\", \"=\", true], [\"size\", \"<\", 200.25]], [\"id\", \"=\", 3]]]]"),
        "2,3");
    /* OR combined (AND) with a plain filter */
    ASSERT_IDS(
        F("[[\"name\", \"^\", \"tank\"], [\"OR\", [[\"id\", \"=\", 1], [\"id\", \"=\", 4]]]]"),
        "4");
    /* nested OR */
    ASSERT_IDS(
        F("[[\"OR\", [[\"OR\", [[\"id\", \"=\", 1], [\"id\", \"=\", 2]]], [\"id\", \"=\", 4]]]]"),
        "1,2,4");
    ASSERT_IDS(F("[[\"OR\", [[\"id\", \"=\", 9]]]]"), "");
    assert_invalid(F("[[\"OR\", []]]"), "query-filters.0", "at least one branch");
    assert_invalid(F("[[\"AND\", [[\"id\", \"=\", 1]]]]"), "query-filters.0",
                   "Invalid operation: AND");
    assert_invalid(F("[[\"OR\", [[\"id\", \"=\", 1], [\"id\", \"bad\", 1]]]]"),
                   "query-filters.0.1.1", "Invalid operation: bad");
    /* depth limit (TrueNAS: 3) */
    assert_invalid(F("[[\"OR\", [[\"OR\", [[\"OR\", [[\"OR\", [[\"id\", \"=\", 1]]]]]]]]]]"),
                   "query-filters", "max recursion depth");
    ASSERT_IDS(F("[[\"OR\", [[\"OR\", [[\"OR\", [[\"id\", \"=\", 1]]]]]]]]"), "1");
}

static void test_dotted(void **state)
{
    (void)state;
    ASSERT_IDS(F("[[\"props.sync\", \"=\", \"STANDARD\"]]"), "1,4");
    ASSERT_IDS(F("[[\"listen.0.ip\", \"=\", \"::\"]]"), "2");
    ASSERT_IDS(F("[[\"listen.1.port\", \"=\", 3261]]"), "2");
    /* an index past the end is null */
    ASSERT_IDS(F("[[\"listen.5.ip\", \"=\", null]]"), "1,2,3,4");
    /* "*" fans out over a list: any element matching */
    ASSERT_IDS(F("[[\"listen.*.ip\", \"=\", \"10.0.0.1\"]]"), "2");
    ASSERT_IDS(F("[[\"listen.*.ip\", \"^\", \"10.\"]]"), "2,4");
    ASSERT_IDS(F("[[\"tags.*\", \"=\", \"c\"]]"), "4");
    /* a missing intermediate key never matches */
    ASSERT_IDS(F("[[\"props.nosuch.x\", \"=\", null]]"), "");
    /* "\\." escapes a dot inside a key */
    ASSERT_IDS(F("[[\"a\\\\.b\", \"=\", \"dotted-key\"]]"), "3");
    ASSERT_IDS(F("[[\"listen\", \"=\", [{\"ip\":\"0.0.0.0\",\"port\":3260}]]]"), "1");
}

static void test_filter_errors(void **state)
{
    (void)state;
    assert_invalid("[{}]", "test.query.query-filters", "valid list");
    assert_invalid(F("[\"id\"]"), "query-filters.0", "must be a list");
    assert_invalid(F("[[\"id\", \"=\"]]"), "query-filters.0", "Invalid operation");
    assert_invalid(F("[[\"id\", \"=\", 1, 2]]"), "query-filters.0", "Invalid filter");
    assert_invalid(F("[[1, \"=\", 1]]"), "query-filters.0", "field name");
    assert_invalid(F("[[\"id\", 5, 1]]"), "query-filters.0", "operation must be a string");
    assert_invalid(F("[[\"id\", \"==\", 1]]"), "query-filters.0", "Invalid operation: ==");
    assert_invalid(F("[[\"id\", \"=\", 1], [\"id\", \"like\", 1]]"), "query-filters.1",
                   "Invalid operation: like");
    assert_invalid(F("[[\"id\", \"in\", 5]]"), "query-filters.0", "needs a list");
    assert_invalid(F("[[\"name\", \"^\", 5]]"), "query-filters.0", "needs a string");
    assert_invalid(F("[[\"name\", \"~\", \"(\"]]"), "query-filters.0", "regular expression");
    assert_invalid("[[], {}, 3]", "test.query", "Too many arguments");
}

static void test_get(void **state)
{
    (void)state;
    json_t *r = call("[[[\"name\", \"=\", \"demo/vm2\"]], {\"get\": true}]");
    json_t *res = json_object_get(r, "result");
    assert_true(json_is_object(res));
    assert_int_equal(json_integer_value(json_object_get(res, "id")), 2);
    json_decref(r);

    /* more than one match: the first */
    r = call("[[[\"name\", \"^\", \"demo\"]], {\"get\": true}]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "result"), "id")), 1);
    json_decref(r);
    /* with order_by, the first after sorting */
    r = call("[[[\"name\", \"^\", \"demo\"]], {\"get\": true, \"order_by\": [\"-id\"]}]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "result"), "id")), 2);
    json_decref(r);

    /* no match: -32001 ENOENT */
    json_t *e = error_of("[[[\"name\", \"=\", \"nope\"]], {\"get\": true}]");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), API_CALL_ERROR);
    json_t *data = json_object_get(e, "data");
    assert_string_equal(json_string_value(json_object_get(data, "errname")), "ENOENT");
    assert_int_equal(json_integer_value(json_object_get(data, "error")), 2);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "does not exist"));
    json_decref(e);

    assert_invalid("[[], {\"get\": true, \"limit\": 2}]", "query-options.get", "single result");
    assert_invalid("[[], {\"get\": true, \"offset\": 1}]", "query-options.get", "single result");
    /* limit 1 with get is fine */
    r = call("[[], {\"get\": true, \"limit\": 1}]");
    assert_non_null(json_object_get(r, "result"));
    json_decref(r);
}

static void test_count(void **state)
{
    (void)state;
    json_t *r = call("[[[\"ro\", \"=\", true]], {\"count\": true}]");
    assert_true(json_is_integer(json_object_get(r, "result")));
    assert_int_equal(json_integer_value(json_object_get(r, "result")), 2);
    json_decref(r);
    r = call("[[], {\"count\": true, \"limit\": 1}]"); /* count ignores paging */
    assert_int_equal(json_integer_value(json_object_get(r, "result")), 4);
    json_decref(r);
    r = call("[[[\"id\", \"=\", 99]], {\"count\": true}]");
    assert_int_equal(json_integer_value(json_object_get(r, "result")), 0);
    json_decref(r);
}

static void test_limit_offset(void **state)
{
    (void)state;
    ASSERT_IDS("[[], {\"limit\": 2}]", "1,2");
    ASSERT_IDS("[[], {\"offset\": 1}]", "2,3,4");
    ASSERT_IDS("[[], {\"offset\": 1, \"limit\": 2}]", "2,3");
    ASSERT_IDS("[[], {\"offset\": 3, \"limit\": 5}]", "4");
    ASSERT_IDS("[[], {\"offset\": 10}]", "");
    ASSERT_IDS("[[], {\"limit\": 0}]", "1,2,3,4"); /* 0 = no limit */
    ASSERT_IDS("[[], {\"order_by\": [\"-id\"], \"offset\": 1, \"limit\": 2}]", "3,2");
    assert_invalid("[[], {\"limit\": -1}]", "query-options.limit", "non-negative");
    assert_invalid("[[], {\"offset\": \"1\"}]", "query-options.offset", "non-negative");
}

static void test_order_by(void **state)
{
    (void)state;
    ASSERT_IDS("[[], {\"order_by\": [\"size\"]}]", "3,1,2,4");
    ASSERT_IDS("[[], {\"order_by\": [\"-size\"]}]", "4,2,1,3");
    ASSERT_IDS("[[], {\"order_by\": [\"name\"]}]", "1,2,3,4");
    ASSERT_IDS("[[], {\"order_by\": [\"-name\"]}]", "4,3,2,1");
    /* first key is primary, second breaks ties */
    ASSERT_IDS("[[], {\"order_by\": [\"ro\", \"-size\"]}]", "1,3,4,2");
    ASSERT_IDS("[[], {\"order_by\": [\"-ro\", \"size\"]}]", "2,4,3,1");
    /* equal keys keep the original order (stable) */
    ASSERT_IDS("[[], {\"order_by\": [\"props.sync\"]}]", "2,3,1,4");
    /* dotted names */
    ASSERT_IDS("[[], {\"order_by\": [\"-props.n\"]}]", "3,2,1,4");
    ASSERT_IDS("[[], {\"order_by\": [\"listen.0.port\"]}]", "3,4,1,2");
    /* nulls: smallest by default; explicit placement either way */
    ASSERT_IDS("[[], {\"order_by\": [\"comment\"]}]", "1,4,3,2");
    ASSERT_IDS("[[], {\"order_by\": [\"-comment\"]}]", "2,3,1,4");
    ASSERT_IDS("[[], {\"order_by\": [\"nulls_last:comment\"]}]", "3,2,1,4");
    ASSERT_IDS("[[], {\"order_by\": [\"nulls_first:-comment\"]}]", "1,4,2,3");
    ASSERT_IDS("[[], {\"order_by\": [\"nulls_last:-props.n\"]}]", "3,2,1,4");
    ASSERT_IDS("[[], {\"order_by\": [\"nulls_first:props.n\"]}]", "4,1,2,3");
    ASSERT_IDS("[[], {\"order_by\": []}]", "1,2,3,4");
    assert_invalid("[[], {\"order_by\": \"id\"}]", "query-options.order_by", "valid list");
    assert_invalid("[[], {\"order_by\": [1]}]", "query-options.order_by", "string");
    assert_invalid("[[], {\"order_by\": [\"-\"]}]", "query-options.order_by", "empty field");
}

static void test_select(void **state)
{
    (void)state;
    json_t *r = call("[[[\"id\", \"=\", 2]], {\"select\": [\"name\", \"props.sync\", "
                     "[\"size\", \"bytes\"], \"nosuch\", \"props.nosuch\"]}]");
    json_t *res = json_array_get(json_object_get(r, "result"), 0);
    json_t *want = json_loads("{\"name\":\"demo/vm2\",\"props\":{\"sync\":\"ALWAYS\"},"
                              "\"bytes\":200}",
                              0, NULL);
    if (!json_equal(res, want)) {
        char *got = json_dumps(res, 0);
        fail_msg("select gave %s", got);
    }
    json_decref(want);
    json_decref(r);

    /* select with get returns the reduced object */
    r = call("[[[\"id\", \"=\", 1]], {\"get\": true, \"select\": [\"id\", \"listen\"]}]");
    res = json_object_get(r, "result");
    assert_int_equal(json_object_size(res), 2);
    assert_true(json_is_array(json_object_get(res, "listen")));
    json_decref(r);

    /* select and order_by together: sort keys must be selected (as TrueNAS) */
    r = call("[[], {\"select\": [\"id\", \"size\"], \"order_by\": [\"-size\"]}]");
    res = json_object_get(r, "result");
    assert_int_equal(json_array_size(res), 4);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(res, 0), "id")), 4);
    assert_int_equal(json_object_size(json_array_get(res, 0)), 2);
    json_decref(r);

    assert_invalid("[[], {\"select\": \"name\"}]", "query-options.select", "valid list");
    assert_invalid("[[], {\"select\": [[\"name\"]]}]", "query-options.select", "selectors");
    assert_invalid("[[], {\"select\": [5]}]", "query-options.select", "selectors");
    assert_invalid("[[], {\"select\": [\"listen.0.ip\"]}]", "query-options.select",
                   "list index is not supported");
}

static void test_options_misc(void **state)
{
    (void)state;
    /* extra and the other TrueNAS options are accepted */
    ASSERT_IDS("[[], {\"extra\": {\"flat\": false, \"properties\": [\"volsize\"], "
               "\"retrieve_children\": false, \"user_properties\": false}, "
               "\"force_sql_filters\": true, \"relationships\": true, \"prefix\": null}]",
               "1,2,3,4");
    assert_invalid("[[], {\"frobnicate\": 1}]", "query-options.frobnicate",
                   "Extra inputs are not permitted");
    assert_invalid("[[], {\"get\": 1}]", "query-options.get", "boolean");
    assert_invalid("[[], {\"count\": \"yes\"}]", "query-options.count", "boolean");
    assert_invalid("[[], {\"extra\": []}]", "query-options.extra", "dictionary");
    assert_invalid("[[], []]", "query-options", "dictionary");
}

/* Bounded regular expressions: the size estimate, the
 * refusals, and that accepted patterns still mean re.match. */
static void expect_cost(const char *pat, uint64_t want)
{
    uint64_t c = 0;
    char why[160] = "";
    if (query_regex_cost(pat, strlen(pat), &c, why, sizeof(why)) != 0)
        fail_msg("'%s' refused: %s", pat, why);
    if (c != want)
        fail_msg("'%s': cost %llu, want %llu", pat, (unsigned long long)c,
                 (unsigned long long)want);
}

static void expect_refused(const char *pat, const char *why_part)
{
    uint64_t c = 0;
    char why[160] = "";
    if (query_regex_cost(pat, strlen(pat), &c, why, sizeof(why)) != -EINVAL)
        fail_msg("'%s' accepted (cost %llu)", pat, (unsigned long long)c);
    if (!strstr(why, why_part))
        fail_msg("'%s': reason '%s' lacks '%s'", pat, why, why_part);
}

static void test_regex_bounds(void **state)
{
    (void)state;
    expect_cost("abc", 3);
    expect_cost("a*", 2);
    expect_cost("a+", 3);
    expect_cost("(ab)", 4);
    expect_cost("a|b", 3);
    expect_cost("a{10}", 11);
    expect_cost("a{2,5}", 6);
    expect_cost("a{3,}", 5);
    expect_cost("(a{10}){10}", 131);
    expect_cost("[a-z]{4}", 5);
    expect_cost("[]a]", 1);
    expect_cost("[[:alpha:]_]+", 3);
    expect_cost("a{", 2);    /* a literal '{' */
    expect_cost("x{,3}", 4); /* glibc: {0,3} */
    expect_cost("x{,}", 2);  /* glibc: {0,} */
    expect_cost("\\(", 1);   /* an escaped parenthesis is a literal */
    expect_refused("(a{32767}){32767}", "too complex");
    expect_refused("(((a{10}){10}){10})", "too complex");
    expect_refused("a{1001}", "too complex");
    expect_refused("(a{,32767}){,32767}", "too complex");
    expect_refused("(.*){400}", "too complex");
    expect_refused("(a)\\1", "back-references");
    expect_refused("(a", "unbalanced");
    expect_refused("a)|(b", "unbalanced");
    expect_refused("[abc", "unterminated");
    expect_refused("a{5,2}", "repetition count");
    expect_refused("a\\", "trailing backslash");
    char deep[80] = "";
    for (int i = 0; i < 33; i++)
        strcat(deep, "(");
    expect_refused(deep, "nested too deeply");

    /* Through the query engine: the exact pattern of the report is an
     * EINVAL validation error (at once, nothing expanded), anchoring is
     * re.match's, alternation at the top level stays anchored. */
    assert_invalid(F("[[\"name\", \"~\", \"(a{32767}){32767}\"]]"), "query-filters.0",
                   "too complex");
    assert_invalid(F("[[\"name\", \"~\", \"(a)\\\\1\"]]"), "query-filters.0", "back-references");
    ASSERT_IDS(F("[[\"name\", \"~\", \"vm|demo\"]]"), "1,2");
    ASSERT_IDS(F("[[\"name\", \"~\", \"x|tank/Data\"]]"), "3");
    /* Several patterns that are each fine but too much together. */
    assert_invalid(F("[[\"name\", \"~\", \"a{900}\"], [\"name\", \"~\", \"a{900}\"], "
                     "[\"name\", \"~\", \"a{900}\"], [\"name\", \"~\", \"a{900}\"], "
                     "[\"name\", \"~\", \"a{900}\"]]"),
                   "query-filters.4", "in all");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_no_filters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eq_ne, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_ops, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_nin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rin_rnin, setup, teardown),
        cmocka_unit_test_setup_teardown(test_prefix_suffix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regex, setup, teardown),
        cmocka_unit_test_setup_teardown(test_casefold, setup, teardown),
        cmocka_unit_test_setup_teardown(test_or, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dotted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_filter_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limit_offset, setup, teardown),
        cmocka_unit_test_setup_teardown(test_order_by, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options_misc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_regex_bounds, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
