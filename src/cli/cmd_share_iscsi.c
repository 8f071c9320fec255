/*
 * blockctl share iscsi create|delete|list: one-transaction iSCSI shares
 * through share.iscsi.* (src/iscsi/config/config_share.c). One call per volume;
 * prints "created<TAB>POOL/VOL" / "deleted<TAB>POOL/VOL" like
 * truenas_incus_ctl, continues past a failed volume and exits 1 if any
 * failed.
 */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int share_create(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"target-prefix", required_argument, NULL, 't'},
        {"portal", required_argument, NULL, 'p'},
        {"initiator", required_argument, NULL, 'i'},
        {"readonly", no_argument, NULL, 'r'},
        {"defer", no_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    const char *prefix = NULL;
    json_int_t portal = 0, initiator = 0;
    bool readonly = false, defer = false;
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "t:p:i:r", opts)) != -1) {
        switch (c) {
        case 't':
            prefix = optarg;
            break;
        case 'p':
            if (cli_parse_int(ctx, "--portal", optarg, 1, INT32_MAX, &portal) != 0)
                return CLI_USAGE;
            break;
        case 'i':
            if (cli_parse_int(ctx, "--initiator", optarg, 1, INT32_MAX, &initiator) != 0)
                return CLI_USAGE;
            break;
        case 'r':
            readonly = true;
            break;
        case 'd':
            defer = true;
            break;
        default:
            return CLI_USAGE; /* reported by cli_opt_next */
        }
    }
    json_t *args = json_object();
    if (prefix)
        json_object_set_new(args, "target_prefix", json_string(prefix));
    if (portal)
        json_object_set_new(args, "portal", json_integer(portal));
    if (initiator)
        json_object_set_new(args, "initiator", json_integer(initiator));
    if (readonly)
        json_object_set_new(args, "readonly", json_true());
    if (defer)
        json_object_set_new(args, "defer", json_true());
    return cli_share_each(ctx, argc, argv, "share.iscsi.create", args, "created", NULL);
}

static int share_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    static const struct option opts[] = {
        {"target-prefix", required_argument, NULL, 't'},
        {"force", no_argument, NULL, 'f'},
        {"defer", no_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    const char *prefix = NULL;
    bool force = false, defer = false;
    cli_opt_begin();
    int c;
    while ((c = cli_opt_next(ctx, argc, argv, "t:f", opts)) != -1) {
        switch (c) {
        case 't':
            prefix = optarg;
            break;
        case 'f':
            force = true;
            break;
        case 'd':
            defer = true;
            break;
        default:
            return CLI_USAGE; /* reported by cli_opt_next */
        }
    }
    json_t *args = json_pack("{s:b, s:b}", "force", force, "defer", defer);
    if (prefix)
        json_object_set_new(args, "target_prefix", json_string(prefix));
    return cli_share_each(ctx, argc, argv, "share.iscsi.delete", args, "deleted", NULL);
}

static const char *str_or_dash(json_t *v)
{
    const char *s = json_string_value(v);
    return s ? s : "-";
}

static int share_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *rows = NULL;
    if (cli_call(ctx, "share.iscsi.query", NULL, &rows) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json) {
        cli_print_json(rows);
        json_decref(rows);
        return CLI_OK;
    }
    static const char *const headers[] = {"DATASET", ">LUN", "RO", "TARGET"};
    struct cli_table *t = cli_table_new(4, headers);
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char lun[24] = "-";
        json_t *jl = json_object_get(r, "lunid");
        if (json_is_integer(jl))
            snprintf(lun, sizeof(lun), "%" JSON_INTEGER_FORMAT, json_integer_value(jl));
        const char *cells[] = {str_or_dash(json_object_get(r, "dataset")), lun,
                               json_is_true(json_object_get(r, "readonly")) ? "yes" : "no",
                               str_or_dash(json_object_get(r, "iqn"))};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(rows);
    return CLI_OK;
}

static const struct cli_command share_iscsi_commands[] = {
    {"share iscsi", "create",
     "[--target-prefix P] [--portal ID] [--initiator ID] [--readonly] [--defer] POOL/VOL…",
     "Share volumes over iSCSI: one target each, LUN 0, one transaction per volume", share_create},
    {"share iscsi", "delete", "[--target-prefix P] [--force] [--defer] POOL/VOL…",
     "Remove volumes' iSCSI shares (--force: even with sessions logged in)", share_delete},
    {"share iscsi", "list", "", "List iSCSI targets and the datasets on their LUNs", share_list},
};
CLI_COMMANDS(share_iscsi_commands);
