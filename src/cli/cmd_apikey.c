/*
 * blockctl api key create NAME [--role ROLE]... | list | update ID --role
 * ROLE... | delete ID: API keys for the remote API (api_key.* methods).
 *
 * A key is shown once, by create. Roles are TrueNAS's: FULL_ADMIN (the
 * default), READONLY_ADMIN (reads, events, /metrics: what a Prometheus
 * server needs) and SHARING_ADMIN (datasets, snapshots and shares, no
 * pools, keys, accounts or global settings); docs/security.md.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* --role options into a JSON list (a new reference; empty when none). */
static int role_opts(struct cli_ctx *ctx, int argc, char **argv, json_t *roles)
{
    static const struct option opts[] = {{"role", required_argument, NULL, 'r'}, {0}};
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        if (c != 'r')
            return CLI_USAGE;
        json_array_append_new(roles, json_string(optarg));
    }
    return 0;
}

/* "READONLY_ADMIN,SHARING_ADMIN" of a key row into buf. */
static const char *roles_text(json_t *row, char *buf, size_t len)
{
    size_t used = 0, i;
    json_t *r;
    buf[0] = 0;
    json_array_foreach(json_object_get(row, "roles"), i, r)
    {
        int w = snprintf(buf + used, len - used, "%s%s", used ? "," : "", json_string_value(r));
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
    return buf;
}

static int key_create(struct cli_ctx *ctx, int argc, char **argv)
{
    json_t *roles = json_array();
    if (role_opts(ctx, argc, argv, roles) != 0 || optind != argc - 1) {
        json_decref(roles);
        return cli_usage(ctx, optind >= argc ? "missing NAME" : "too many arguments");
    }
    json_t *data = json_pack("{s:s}", "name", argv[optind]);
    if (json_array_size(roles))
        json_object_set_new(data, "roles", roles);
    else
        json_decref(roles);
    json_t *row = NULL;
    if (cli_call(ctx, "api_key.create", json_pack("[o]", data), &row) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json) {
        cli_print_json(row);
    } else {
        char buf[64];
        printf("id\t%lld\nname\t%s\nroles\t%s\nkey\t%s\n",
               (long long)json_integer_value(json_object_get(row, "id")),
               json_string_value(json_object_get(row, "name")), roles_text(row, buf, sizeof(buf)),
               json_string_value(json_object_get(row, "key")));
    }
    json_decref(row);
    return CLI_OK;
}

static int key_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *rows = NULL;
    if (cli_call(ctx, "api_key.query", NULL, &rows) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json) {
        cli_print_json(rows);
        json_decref(rows);
        return CLI_OK;
    }
    static const char *const headers[] = {">ID", "NAME", "ROLES"};
    struct cli_table *t = cli_table_new(3, headers);
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char id[32], roles[64];
        snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(r, "id")));
        const char *cells[] = {id, json_string_value(json_object_get(r, "name")),
                               roles_text(r, roles, sizeof(roles))};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(rows);
    return CLI_OK;
}

/* ID as a positive integer, or -1. */
static long long key_id(const char *s)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    return *s && !*end && v > 0 ? v : -1;
}

static int key_update(struct cli_ctx *ctx, int argc, char **argv)
{
    json_t *roles = json_array();
    if (role_opts(ctx, argc, argv, roles) != 0 || optind != argc - 1 || !json_array_size(roles) ||
        key_id(argv[optind]) < 0) {
        json_decref(roles);
        return cli_usage(ctx, "ID and at least one --role");
    }
    json_t *row = NULL;
    if (cli_call(ctx, "api_key.update",
                 json_pack("[I, {s:o}]", (json_int_t)key_id(argv[optind]), "roles", roles),
                 &row) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json)
        cli_print_json(row);
    json_decref(row);
    return CLI_OK;
}

static int key_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc != 2 || key_id(argv[1]) < 0)
        return cli_usage(ctx, argc < 2 ? "missing ID" : "ID must be a key's number");
    json_t *result = NULL;
    if (cli_call(ctx, "api_key.delete", json_pack("[I]", (json_int_t)key_id(argv[1])), &result) !=
        CLI_OK)
        return CLI_ERROR;
    json_decref(result);
    if (!ctx->json)
        printf("deleted\t%s\n", argv[1]);
    return CLI_OK;
}

static const struct cli_command key_commands[] = {
    {"api key", "create", "NAME [--role FULL_ADMIN|READONLY_ADMIN|SHARING_ADMIN]...",
     "Create an API key (shown once); default role FULL_ADMIN, READONLY_ADMIN for Prometheus",
     key_create},
    {"api key", "list", "", "API keys with their roles (never the key)", key_list},
    {"api key", "update", "ID --role ROLE...", "Replace a key's roles (its sessions end)",
     key_update},
    {"api key", "delete", "ID", "Delete an API key (its sessions and subscriptions end)",
     key_delete},
};
CLI_COMMANDS(key_commands);
