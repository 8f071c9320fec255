/*
 * api/jsonw: the response writer writes what json_dumps(JSON_COMPACT |
 * JSON_ENCODE_ANY) writes, byte for byte, fails where it fails, and writes
 * registered objects from their saved text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/jsonw.h"

/* Both writers on v: the same text, or both refuse. */
static void same_as_jansson(json_t *v)
{
    char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = 0;
    char *got = api_json_dumps(v, &len);
    if (!want) {
        assert_null(got);
        return;
    }
    assert_non_null(got);
    assert_string_equal(got, want);
    assert_int_equal(len, strlen(want));
    free(want);
    free(got);
}

static void test_scalars(void **state)
{
    (void)state;
    json_t *vals[] = {
        json_null(),
        json_true(),
        json_false(),
        json_integer(0),
        json_integer(-1),
        json_integer(42),
        json_integer(INT64_MAX),
        json_integer(INT64_MIN),
        json_real(0.0),
        json_real(-0.0),
        json_real(1.5),
        json_real(1e300),
        json_real(2.5e-300),
        json_real(100.0),
        json_real(1.0 / 3),
        json_real(123456789012345678.0),
        json_string(""),
        json_string("plain"),
    };
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        same_as_jansson(vals[i]);
        json_decref(vals[i]);
    }
}

static void test_strings(void **state)
{
    (void)state;
    const char *texts[] = {
        "quote \" backslash \\ slash /",
        "controls \b\f\n\r\t \x01\x1f \x7f",
        "utf-8: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe",
        "\xef\xbf\xbf edge",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        json_t *s = json_string(texts[i]);
        assert_non_null(s);
        same_as_jansson(s);
        json_decref(s);
    }
    /* an embedded NUL */
    json_t *nul = json_stringn("a\0b", 3);
    same_as_jansson(nul);
    json_decref(nul);
    /* invalid UTF-8 (only json_string_nocheck lets it in): both refuse */
    const char *bad[] = {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *s = json_string_nocheck(bad[i]);
        same_as_jansson(s);
        assert_null(api_json_dumps(s, NULL));
        json_decref(s);
    }
}

static void test_containers(void **state)
{
    (void)state;
    const char *docs[] = {
        "[]",
        "{}",
        "[[],{},[[]],{\"a\":{}}]",
        ("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":[{\"id\":1,\"target\":2,\"extent\":3,"
         "\"lunid\":0},{\"id\":2,\"name\":\"x\\ny\",\"ro\":false,\"z\":null,\"r\":0.25}]}"),
        "{\"z\":1,\"a\":2,\"m\":[1,\"two\",3.5,true]}", /* insertion order kept */
        "{\"k\\\"e\\ny\\u0001\":1}",
    };
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
        json_error_t err;
        json_t *v = json_loads(docs[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        assert_non_null(v);
        same_as_jansson(v);
        json_decref(v);
    }
}

static void test_deep(void **state)
{
    (void)state;
    json_t *root = json_array(), *cur = root;
    for (int i = 0; i < 3000; i++) {
        json_t *n = json_array();
        json_array_append_new(cur, n);
        cur = n;
    }
    assert_null(api_json_dumps(root, NULL)); /* deeper than 2048 */
    json_decref(root);
}

static void test_memo(void **state)
{
    (void)state;
    json_t *row = json_pack("{s:I, s:s}", "id", (json_int_t)5, "name", "lun");
    json_t *doc = json_pack("{s:[O, O]}", "result", row, row);
    assert_int_equal(api_json_memo_count(), 0);
    assert_int_equal(api_json_memo_set(row), 0);
    assert_int_equal(api_json_memo_set(row), 0); /* again: nothing new */
    assert_int_equal(api_json_memo_count(), 1);
    json_t *arr0 = json_array();
    assert_int_equal(api_json_memo_set(arr0), -22); /* objects only */
    json_decref(arr0);

    /* The saved text is what is written, not the object as it is now:
     * this shows the writer does not walk a registered object. */
    json_object_set_new(row, "name", json_string("changed"));
    char *s = api_json_dumps(doc, NULL);
    assert_string_equal(s,
                        "{\"result\":[{\"id\":5,\"name\":\"lun\"},{\"id\":5,\"name\":\"lun\"}]}");
    free(s);

    /* cleared: walked again */
    api_json_memo_clear(row);
    assert_int_equal(api_json_memo_count(), 0);
    api_json_memo_clear(row); /* unregistered: no-op */
    s = api_json_dumps(doc, NULL);
    assert_string_equal(s, "{\"result\":[{\"id\":5,\"name\":\"changed\"},"
                           "{\"id\":5,\"name\":\"changed\"}]}");
    free(s);
    json_decref(doc);
    json_decref(row);

    /* The registry keeps its object alive: dropping every other reference
     * leaves the saved text valid and no address can be reused. */
    json_t *many[300];
    for (int i = 0; i < 300; i++) {
        many[i] = json_pack("{s:i}", "n", i);
        assert_int_equal(api_json_memo_set(many[i]), 0);
    }
    assert_int_equal(api_json_memo_count(), 300);
    for (int i = 0; i < 300; i += 2)
        api_json_memo_clear(many[i]); /* tombstones amid live entries */
    json_t *arr = json_array();
    for (int i = 0; i < 300; i++)
        json_array_append(arr, many[i]);
    for (int i = 0; i < 300; i++)
        json_decref(many[i]); /* odd ones: only the registry and arr hold them */
    char *want = json_dumps(arr, JSON_COMPACT);
    s = api_json_dumps(arr, NULL);
    assert_string_equal(s, want);
    free(s);
    free(want);
    for (int i = 1; i < 300; i += 2)
        api_json_memo_clear(json_array_get(arr, (size_t)i));
    assert_int_equal(api_json_memo_count(), 0);
    json_decref(arr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),    cmocka_unit_test(test_strings),
        cmocka_unit_test(test_containers), cmocka_unit_test(test_deep),
        cmocka_unit_test(test_memo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
