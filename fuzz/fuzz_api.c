/*
 * libFuzzer target for the JSON-RPC request path: framing checks, method
 * dispatch, error building, and the query engine (filters and options) over
 * a fixed set of rows, through api_handle_text like a transport calls it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "api/api.h"

static int fuzz_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = json_pack("[{s:s, s:i, s:{s:s}, s:[{s:s}]}, {s:s, s:n, s:{s:s}, s:[]},"
                             " {s:s, s:i, s:b, s:[{s:s}]}]",
                             "name", "demo/a", "size", 10, "nested", "x", "1", "list", "ip",
                             "1.2.3.4", "name", "demo/b", "size", "nested", "x", "2", "list",
                             "name", "other/c", "size", 30, "flag", 1, "list", "ip", "::1");
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static const struct api_method fuzz_methods[] = {
    {"fuzz.query", "[filters, options]", "query over fixed rows", fuzz_query, 0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int registered;
    if (!registered) {
        api_register(fuzz_methods, 1);
        registered = 1;
    }
    char *resp = api_handle_text((const char *)data, size, "fuzz");
    free(resp);
    return 0;
}
