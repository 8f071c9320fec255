/* blockctl share nbd create|delete|list — NBD exports (nbd.export.*). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* "nbd://HOST:PORT/NAME" (nbds:// when TLS is required). */
static void export_uri(struct cli_ctx *ctx, json_t *exp, char *buf, size_t len)
{
    static char host[256];
    static long port = -1;
    if (port < 0) {
        json_t *g = NULL;
        port = 10809;
        snprintf(host, sizeof(host), "localhost");
        if (cli_call(ctx, "nbd.global.config", NULL, &g) == CLI_OK) {
            const char *l = json_string_value(json_object_get(g, "listen_active"));
            json_t *p = json_object_get(g, "port_active");
            if (l) {
                const char *colon = strrchr(l, ':');
                size_t hl = colon ? (size_t)(colon - l) : 0;
                if (hl && !(hl == 7 && strncmp(l, "0.0.0.0", 7) == 0) &&
                    !(hl == 4 && strncmp(l, "[::]", 4) == 0) && hl < sizeof(host))
                    snprintf(host, sizeof(host), "%.*s", (int)hl, l);
                if (colon)
                    port = strtol(colon + 1, NULL, 10);
            }
            if (json_integer_value(p) > 0)
                port = (long)json_integer_value(p);
            json_decref(g);
        }
    }
    const char *tls = json_string_value(json_object_get(exp, "tls"));
    const char *name = json_string_value(json_object_get(exp, "name"));
    snprintf(buf, len, "%s://%s:%ld/%s", tls && strcmp(tls, "require") == 0 ? "nbds" : "nbd", host,
             port, name ? name : "");
}

static int share_nbd_create(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"name", required_argument, NULL, 'n'},
        {"readonly", no_argument, NULL, 'r'},
        {"tls", required_argument, NULL, 't'},
        {"description", required_argument, NULL, 'd'},
        {"path", no_argument, NULL, 'p'},
        {"no-multi-conn", no_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    const char *name = NULL, *tls = NULL, *desc = NULL;
    int readonly = 0, is_path = 0, no_multi = 0, c;
    cli_opt_begin();
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        switch (c) {
        case 'n':
            name = optarg;
            break;
        case 'r':
            readonly = 1;
            break;
        case 't':
            tls = optarg;
            break;
        case 'd':
            desc = optarg;
            break;
        case 'p':
            is_path = 1;
            break;
        case 'm':
            no_multi = 1;
            break;
        default:
            return CLI_USAGE; /* reported by cli_opt_next */
        }
    }
    if (optind != argc - 1)
        return cli_usage(ctx, "expected one POOL/VOL (or a file with --path)");
    const char *src = argv[optind];
    json_t *data = json_pack("{s:s, s:b}", "name", name ? name : src, "readonly", readonly);
    json_object_set_new(data, is_path ? "path" : "dataset", json_string(src));
    if (tls)
        json_object_set_new(data, "tls", json_string(tls));
    if (desc)
        json_object_set_new(data, "description", json_string(desc));
    if (no_multi)
        json_object_set_new(data, "multi_conn", json_false());
    json_t *result;
    int rc = cli_call(ctx, "nbd.export.create", json_pack("[o]", data), &result);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json) {
        cli_print_json(result);
    } else {
        char uri[512];
        export_uri(ctx, result, uri, sizeof(uri));
        printf("%s\n", uri);
    }
    json_decref(result);
    return CLI_OK;
}

/* The export row named name, or NULL (error printed). */
static json_t *find_export(struct cli_ctx *ctx, const char *name)
{
    json_t *result;
    json_t *params = json_pack("[[[s, s, s]], {s:b}]", "name", "=", name, "get", 1);
    if (cli_call(ctx, "nbd.export.query", params, &result) != CLI_OK)
        return NULL;
    return result;
}

static int share_nbd_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"force", no_argument, NULL, 'f'},
        {NULL, 0, NULL, 0},
    };
    int force = 0, c;
    cli_opt_begin();
    while ((c = cli_opt_next(ctx, argc, argv, "", opts)) != -1) {
        if (c != 'f')
            return CLI_USAGE; /* reported by cli_opt_next */
        force = 1;
    }
    if (optind != argc - 1)
        return cli_usage(ctx, "expected one export NAME");
    json_t *exp = find_export(ctx, argv[optind]);
    if (!exp)
        return CLI_ERROR;
    json_int_t id = json_integer_value(json_object_get(exp, "id"));
    json_decref(exp);
    json_t *result;
    int rc =
        cli_call(ctx, "nbd.export.delete", json_pack("[I, {s:b}]", id, "force", force), &result);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json)
        cli_print_json(result);
    else
        printf("deleted\t%s\n", argv[optind]);
    json_decref(result);
    return CLI_OK;
}

static int share_nbd_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "unexpected argument");
    json_t *result;
    int rc = cli_call(ctx, "nbd.export.query", NULL, &result);
    if (rc != CLI_OK)
        return rc;
    if (ctx->json) {
        cli_print_json(result);
        json_decref(result);
        return CLI_OK;
    }
    static const char *const hdr[] = {"NAME", "SOURCE", "RO", "TLS", ">CONNS", "URI"};
    struct cli_table *t = cli_table_new(6, hdr);
    size_t i;
    json_t *e;
    json_array_foreach(result, i, e)
    {
        char uri[512], conns[16];
        export_uri(ctx, e, uri, sizeof(uri));
        snprintf(conns, sizeof(conns), "%lld",
                 (long long)json_integer_value(json_object_get(e, "connections")));
        const char *src = json_string_value(json_object_get(e, "dataset"));
        if (!src)
            src = json_string_value(json_object_get(e, "path"));
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *cells[] = {name && *name ? name : "\"\"",
                               src,
                               json_is_true(json_object_get(e, "readonly")) ? "yes" : "no",
                               json_string_value(json_object_get(e, "tls")),
                               conns,
                               uri};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(result);
    return CLI_OK;
}

static const struct cli_command share_nbd_commands[] = {
    {"share nbd", "create",
     "POOL/VOL|--path FILE [--name N] [--readonly] [--tls off|allow|require] [--description D] "
     "[--no-multi-conn]",
     "Export a volume (or a file) over NBD and print its URI", share_nbd_create},
    {"share nbd", "delete", "NAME [--force]",
     "Delete an NBD export (--force closes its open connections)", share_nbd_delete},
    {"share nbd", "list", "", "List NBD exports with their URIs", share_nbd_list},
};
CLI_COMMANDS(share_nbd_commands);
