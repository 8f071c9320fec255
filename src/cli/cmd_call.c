/* blockctl call METHOD [JSON-PARAMS]: a raw API call, JSON in and out. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli/api_coverage.h"
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

static const char doc_intro[] =
    "# blockd API reference\n\n"
    "Generated from a running daemon with `blockctl methods --markdown > docs/api.md`\n"
    "(the method list comes from `core.get_methods`, i.e. from the same method\n"
    "tables the daemon dispatches with).\n\n"
    "## Transport\n\n"
    "JSON-RPC 2.0. Locally over the Unix socket (`STATE_DIR/blockd.sock`, mode 0600,\n"
    "no login): one JSON text per line in each direction, many requests per\n"
    "connection, answered in order. `params` is an array of positional arguments\n"
    "(an object is taken as the single first argument; absent means `[]`).\n"
    "Requests without `id` are notifications (no reply); a JSON array is a batch\n"
    "(an array of replies, notifications omitted). A line over 16 MiB is answered\n"
    "with -32600 \"request too large (max 16 MiB)\" and skipped; the connection\n"
    "stays usable.\n\n"
    "Remotely over WebSocket (`blockd --api-listen`, `/api/current`): the same\n"
    "JSON-RPC after a login with an API key or a local account's password\n"
    "(`auth.login_with_api_key`, `auth.login`, `auth.login_ex`); failed logins\n"
    "are throttled per address. Account management (`account.*`) is only served\n"
    "on the Unix socket. See docs/api-control.md (Authentication).\n\n"
    "## Errors\n\n"
    "| code | meaning | `data` |\n"
    "|---|---|---|\n"
    "| -32700 | parse error (not JSON) | |\n"
    "| -32600 | invalid request (not JSON-RPC 2.0, bad `id`/`params`, too large) | |\n"
    "| -32601 | method not found (the message names it) | |\n"
    "| -32602 | invalid params (message \"Invalid params\") | `{error: 22, errname: "
    "\"EINVAL\", reason: \"[EINVAL] field: message\\n…\", trace: null, extra: [[field, "
    "message, errno], …]}` |\n"
    "| -32001 | the call failed (message: the cause) | `{error: errno (integer), errname: "
    "\"EBUSY\", reason: \"[EBUSY] message\", trace: null, extra: null}` |\n"
    "| -32603 | internal error | |\n\n"
    "A call made before login fails with errno 207, errname `ENOTAUTHENTICATED`\n"
    "(TrueNAS's value): log in again and retry. Drivers match message fragments:\n"
    "a missing object \"does not exist\" (ENOENT), a duplicate \"already exists\"\n"
    "(EEXIST), a snapshot with clones \"has dependent clones\" (EBUSY), a full pool\n"
    "\"insufficient space\" (ENOSPC), an object in use \"busy\" (EBUSY).\n\n"
    "Field names are `<method>.<field>` (`pool.dataset.create.volsize`); objects\n"
    "are validated strictly like the TrueNAS middleware (unknown keys: \"Extra\n"
    "inputs are not permitted\"; no type coercion; too many positional\n"
    "arguments: \"Too many arguments (expected N, found M)\").\n\n"
    "## Queries (`*.query`)\n\n"
    "`[filters, options]`, both optional.\n\n"
    "Filters: a list of `[field, op, value]` that must all hold, or\n"
    "`[\"OR\", [branch, …]]` where a branch is one filter or a list of filters (all\n"
    "must hold); OR nests up to 3 deep. Fields may be dotted (`properties.sync.value`,\n"
    "`listen.0.ip`; `listen.*.ip` matches if any element does; `\\.` is a literal\n"
    "dot). A missing field never matches.\n\n"
    "| op | matches when |\n|---|---|\n"
    "| `=` `!=` | equal / not equal (numbers by value, lists and objects deeply) |\n"
    "| `<` `<=` `>` `>=` | ordered comparison of two numbers, two strings (bytewise) or two "
    "booleans; other pairs never match |\n"
    "| `in` `nin` | field is (not) in the value list (or a substring of a value string); "
    "`nin` on null is false |\n"
    "| `rin` `rnin` | the value is (not) in the field's list (or a substring of the field); "
    "false on null |\n"
    "| `^` `!^` `$` `!$` | string field starts / does not start / ends / does not end with "
    "the value |\n"
    "| `~` | POSIX extended regex matching at the start of the field (null as \"\"); "
    "bounded, see below |\n"
    "| `C`+op | case-insensitive form of any op except `~` (`C=`, `C^`, `Cin`, …) |\n\n"
    "Regular expressions are bounded (docs/security.md): a pattern whose expanded\n"
    "size (a `{m,n}` repetition copies its operand, nested ones multiply) exceeds\n"
    "1,000 nodes, or whose query's patterns exceed 4,000 in all, is refused before\n"
    "it is compiled, as are back-references (`\\1`…`\\9`) and unbalanced\n"
    "parentheses: a `-32602` error with errno `EINVAL` on\n"
    "`METHOD.query-filters.N`. Matching runs without submatch registers (linear\n"
    "time) and has a budget per call (subject bytes × pattern size, 64 Mi units);\n"
    "a query over its budget gets the same kind of error (\"would take too long\")\n"
    "and should narrow the rows with other filters first (filters are ANDed left\n"
    "to right).\n\n"
    "Options: `get` (the first match as an object; -32001 ENOENT if none;\n"
    "not with `limit` > 1 or `offset`), `count` (the number of matches),\n"
    "`order_by` (list of fields, `-field` descending, `nulls_first:`/`nulls_last:`\n"
    "prefixes; the first key is the primary one; nulls sort lowest otherwise),\n"
    "`offset`, `limit` (0 = all), `select` (fields or `[field, alias]`; dotted\n"
    "fields keep their nesting), `extra` (per-method; e.g. `pool.dataset.query`),\n"
    "and `force_sql_filters`, `relationships`, `extend`, `extend_context`, `prefix`\n"
    "(accepted for compatibility). Unknown options are rejected.\n\n"
    "## Roles\n\n"
    "A remote caller has the roles of its API key (`api_key.create {name, roles}`;\n"
    "`FULL_ADMIN` when none is given, as every key was before roles) or, logged\n"
    "in with a password, `FULL_ADMIN`. The column *role* below is the least role\n"
    "that may call a method: `READONLY_ADMIN` (reads, its own session and jobs),\n"
    "`SHARING_ADMIN` (also datasets, snapshots, iSCSI targets, extents, CHAP and\n"
    "initiator groups, NBD exports), `FULL_ADMIN` (also pools, keys, portals,\n"
    "services and global settings). *local* methods are served on the Unix socket\n"
    "only. A call outside the caller's role is `-32001` `EACCES` naming the\n"
    "method, whether made directly or through `core.bulk`. See docs/security.md.\n\n"
    "## Methods\n\n"
    "| method | params | role | summary |\n|---|---|---|---|\n";

static void md_cell(const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            fputs("\\|", stdout);
        else if (*s == '\n')
            fputc(' ', stdout);
        else
            fputc(*s, stdout);
    }
}

static int methods_run(struct cli_ctx *ctx, int argc, char **argv)
{
    bool markdown = argc == 2 && strcmp(argv[1], "--markdown") == 0;
    if (argc > 2 || (argc == 2 && !markdown))
        return cli_usage(ctx, "unexpected argument %s", argv[1]);
    json_t *res;
    int rc = cli_call(ctx, "core.get_methods", NULL, &res);
    if (rc)
        return rc;
    const char *name;
    json_t *m;
    if (markdown) {
        fputs(doc_intro, stdout);
        json_object_foreach(res, name, m)
        {
            const char *params = json_string_value(json_object_get(m, "params"));
            printf("| `%s` | ", name);
            if (params && *params) {
                fputc('`', stdout);
                md_cell(params);
                fputc('`', stdout);
            }
            printf(" | %s%s | ", json_string_value(json_object_get(m, "role")),
                   json_is_true(json_object_get(m, "local_only")) ? ", local" : "");
            md_cell(json_string_value(json_object_get(m, "summary")));
            if (json_is_true(json_object_get(m, "no_auth")))
                printf(" (no login needed)");
            printf(" |\n");
        }
        fputs(cli_api_coverage_md, stdout);
    } else if (ctx->json) {
        cli_print_json(res);
    } else {
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
    {"", "methods", "[--markdown]", "List the daemon's API methods (--markdown: docs/api.md)",
     methods_run},
};
CLI_COMMANDS(call_commands)
