/*
 * blockctl share nvme create|delete|list: one-transaction NVMe/TCP shares
 * through share.nvme.* (src/nvme/config/nvmet_share.c): a subsystem per
 * volume with the volume as namespace 1, served on a port. One call per
 * volume; prints "created<TAB>POOL/VOL<TAB>NQN" / "deleted<TAB>POOL/VOL",
 * continues past a failed volume and exits 1 if any failed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

/* The subsystem NQN of a share.nvme.create answer (none for delete). */
static const char *subnqn(json_t *res)
{
    return json_string_value(json_object_get(json_object_get(res, "subsys"), "subnqn"));
}

static int share_create(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"port", required_argument, NULL, 'p'},
        {"address", required_argument, NULL, 'a'},
        {"tcp-port", required_argument, NULL, 't'},
        {"hosts-only", no_argument, NULL, 'H'},
        {NULL, 0, NULL, 0},
    };
    json_int_t port = 0, tcp = 0;
    const char *addr = NULL;
    bool hosts_only = false;
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "p:a:t:H", opts)) != -1) {
        switch (c) {
        case 'p':
            if (cli_parse_int(ctx, "--port", optarg, 1, INT32_MAX, &port) != 0)
                return CLI_USAGE;
            break;
        case 'a':
            addr = optarg;
            break;
        case 't':
            if (cli_parse_int(ctx, "--tcp-port", optarg, 1024, 65535, &tcp) != 0)
                return CLI_USAGE;
            break;
        case 'H':
            hosts_only = true;
            break;
        default:
            return CLI_USAGE; /* reported by cli_opt_next */
        }
    }
    json_t *args = json_pack("{s:b}", "allow_any_host", !hosts_only);
    if (port)
        json_object_set_new(args, "port", json_integer(port));
    if (addr)
        json_object_set_new(args, "traddr", json_string(addr));
    if (tcp)
        json_object_set_new(args, "trsvcid", json_integer(tcp));
    return cli_share_each(ctx, argc, argv, "share.nvme.create", args, "created", subnqn);
}

static int share_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    cli_opt_begin();
    if (cli_opt_next(ctx, argc, argv, "", NULL) != -1)
        return CLI_USAGE;
    return cli_share_each(ctx, argc, argv, "share.nvme.delete", json_object(), "deleted", subnqn);
}

static int share_list(struct cli_ctx *ctx, int argc, char **argv)
{
    (void)argv;
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *rows = NULL;
    if (cli_call(ctx, "share.nvme.query", NULL, &rows) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json) {
        cli_print_json(rows);
        json_decref(rows);
        return CLI_OK;
    }
    static const char *const headers[] = {"DATASET", ">NSID", "SUBNQN", "PORTS"};
    struct cli_table *t = cli_table_new(4, headers);
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char nsid[24], ports[256] = "";
        size_t k, n = 0;
        json_t *p;
        snprintf(nsid, sizeof(nsid), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(json_object_get(r, "nsid")));
        json_array_foreach(json_object_get(r, "ports"), k, p) if (n < sizeof(ports)) n +=
            (size_t)snprintf(ports + n, sizeof(ports) - n, "%s%s", k ? "," : "",
                             json_string_value(p));
        const char *ds = json_string_value(json_object_get(r, "dataset"));
        const char *nqn = json_string_value(json_object_get(r, "subnqn"));
        const char *cells[] = {ds ? ds : "-", nsid, nqn ? nqn : "-", n ? ports : "-"};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(rows);
    return CLI_OK;
}

static const struct cli_command share_nvme_commands[] = {
    {"share nvme", "create", "[--port ID | --address IP [--tcp-port N]] [--hosts-only] POOL/VOL…",
     "Share volumes over NVMe/TCP: one subsystem each, namespace 1, one transaction per volume",
     share_create},
    {"share nvme", "delete", "POOL/VOL…",
     "Remove volumes' NVMe-oF namespaces (and subsystems left without one)", share_delete},
    {"share nvme", "list", "", "List the volumes shared over NVMe-oF", share_list},
};
CLI_COMMANDS(share_nvme_commands);
