/*
 * blockctl gateway list: the members of the daemon's gateway group
 * (gateway.query): id (= target port group), name, state, portals, when
 * each was last heard of, and which one is this daemon.
 */
#include <stdio.h>
#include <time.h>

#include "cli/cli.h"

static int gateway_list(struct cli_ctx *ctx, int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *rows = NULL;
    if (cli_call(ctx, "gateway.query", NULL, &rows) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json) {
        cli_print_json(rows);
        json_decref(rows);
        return CLI_OK;
    }
    static const char *const headers[] = {"ID", "NAME", "STATE", "PORTALS", "LAST SEEN", "LOCAL"};
    struct cli_table *t = cli_table_new(6, headers);
    size_t i;
    json_t *r;
    time_t now = time(NULL);
    json_array_foreach(rows, i, r)
    {
        char id[16], seen[32];
        snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(r, "id")));
        long long ago = (long long)(now - json_integer_value(json_object_get(r, "last_seen")));
        snprintf(seen, sizeof(seen), "%llds ago", ago < 0 ? 0 : ago);
        const char *portals = json_string_value(json_object_get(r, "portals"));
        const char *cells[] = {id,
                               json_string_value(json_object_get(r, "name")),
                               json_string_value(json_object_get(r, "state")),
                               portals && *portals ? portals : "-",
                               seen,
                               json_is_true(json_object_get(r, "local")) ? "yes" : ""};
        cli_table_add(t, cells);
    }
    if (json_array_size(rows) == 0)
        fprintf(stderr, "blockctl: this daemon is in no gateway group (--gateway-group)\n");
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(rows);
    return CLI_OK;
}

static const struct cli_command gateway_commands[] = {
    {"gateway", "list", "", "Members of this daemon's gateway group (docs/ha.md)", gateway_list},
};
CLI_COMMANDS(gateway_commands);
