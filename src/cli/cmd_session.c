/*
 * blockctl session list: who is connected. iSCSI sessions come from
 * iscsi.global.sessions (peer, target, negotiated parameters); NBD from
 * nbd.export.query (the daemon reports a connection count per export, not
 * per-connection peers).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char *str_or_dash(json_t *v)
{
    const char *s = json_string_value(v);
    return s && *s ? s : "-";
}

static int session_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *iscsi = NULL, *nbd = NULL;
    if (cli_call(ctx, "iscsi.global.sessions", NULL, &iscsi) != CLI_OK)
        return CLI_ERROR;
    if (cli_call(ctx, "nbd.export.query", NULL, &nbd) != CLI_OK) {
        json_decref(iscsi);
        return CLI_ERROR;
    }
    if (ctx->json) {
        json_t *all = json_pack("{s:O, s:O}", "iscsi", iscsi, "nbd", nbd);
        cli_print_json(all);
        json_decref(all);
        json_decref(iscsi);
        json_decref(nbd);
        return CLI_OK;
    }
    static const char *const headers[] = {"PROTO", "PEER", "TARGET/EXPORT", "PARAMETERS"};
    struct cli_table *t = cli_table_new(4, headers);
    size_t i;
    json_t *r;
    json_array_foreach(iscsi, i, r)
    {
        char params[256];
        snprintf(params, sizeof(params),
                 "hd=%s dd=%s immediate=%s initial_r2t=%s mrdsl=%lld mbl=%lld fbl=%lld conns=%lld",
                 str_or_dash(json_object_get(r, "header_digest")),
                 str_or_dash(json_object_get(r, "data_digest")),
                 json_is_true(json_object_get(r, "immediate_data")) ? "yes" : "no",
                 json_is_true(json_object_get(r, "initial_r2t")) ? "yes" : "no",
                 (long long)json_integer_value(json_object_get(r, "max_recv_data_segment_length")),
                 (long long)json_integer_value(json_object_get(r, "max_burst_length")),
                 (long long)json_integer_value(json_object_get(r, "first_burst_length")),
                 (long long)json_integer_value(json_object_get(r, "connections")));
        char peer[320];
        snprintf(peer, sizeof(peer), "%s@%s", str_or_dash(json_object_get(r, "initiator")),
                 str_or_dash(json_object_get(r, "initiator_addr")));
        const char *target = str_or_dash(json_object_get(r, "target"));
        const char *cells[] = {"iscsi", peer, target, params};
        cli_table_add(t, cells);
    }
    json_array_foreach(nbd, i, r)
    {
        json_int_t n = json_integer_value(json_object_get(r, "connections"));
        if (n <= 0)
            continue;
        char params[128], peer[64];
        snprintf(params, sizeof(params), "readonly=%s multi_conn=%s tls=%s",
                 json_is_true(json_object_get(r, "readonly")) ? "yes" : "no",
                 json_is_true(json_object_get(r, "multi_conn")) ? "yes" : "no",
                 str_or_dash(json_object_get(r, "tls")));
        snprintf(peer, sizeof(peer), "%lld connection%s", (long long)n, n == 1 ? "" : "s");
        const char *cells[] = {"nbd", peer, str_or_dash(json_object_get(r, "name")), params};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(iscsi);
    json_decref(nbd);
    return CLI_OK;
}

static const struct cli_command session_commands[] = {
    {"session", "list", "", "iSCSI sessions and NBD connections with their parameters",
     session_list},
};
CLI_COMMANDS(session_commands);
