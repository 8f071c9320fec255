/* blockctl call METHOD [JSON-PARAMS]: a raw API call, JSON in and out. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static int call_run(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc < 2)
        return cli_usage(ctx, "missing METHOD");
    if (argc > 3)
        return cli_usage(ctx, "too many arguments (quote the JSON params as one argument)");
    json_t *params = NULL;
    if (argc == 3) {
        json_error_t err;
        json_t *v = json_loads(argv[2], JSON_DECODE_ANY, &err);
        if (!v)
            return cli_usage(ctx, "JSON-PARAMS is not valid JSON: %s (column %d)", err.text,
                             err.column);
        /* params are positional; a lone value is the first one */
        params = json_is_array(v) ? v : json_pack("[o]", v);
    }
    json_t *res, *error;
    int rc = cli_call_raw(ctx, argv[1], params, &res, &error);
    if (error) {
        cli_print_error(error);
        if (ctx->json)
            cli_print_json(error);
        json_decref(error);
        return rc;
    }
    if (rc)
        return rc;
    cli_print_json(res);
    json_decref(res);
    return CLI_OK;
}

static int methods_run(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *res;
    int rc = cli_call(ctx, "core.get_methods", NULL, &res);
    if (rc)
        return rc;
    if (ctx->json) {
        cli_print_json(res);
    } else {
        const char *name;
        json_t *m;
        json_object_foreach(res, name, m)
        {
            printf("%s %s\n    %s\n", name, json_string_value(json_object_get(m, "params")),
                   json_string_value(json_object_get(m, "summary")));
        }
    }
    json_decref(res);
    return CLI_OK;
}

static const struct cli_command call_commands[] = {
    {"", "call", "METHOD [JSON-PARAMS]",
     "Call any API method; params as a JSON array (a single value is wrapped)", call_run},
    {"", "methods", "", "List the daemon's API methods", methods_run},
};
CLI_COMMANDS(call_commands)
