/*
 * blockctl session list: who is connected. iSCSI sessions come from
 * iscsi.global.sessions, NBD connections from nbd.global.sessions, NVMe
 * controllers from nvmet.global.sessions: peer, target or export,
 * negotiated parameters and bytes moved.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char *str_or_dash(json_t *v)
{
    const char *s = json_string_value(v);
    return s && *s ? s : "-";
}

/* One table row: the byte counters of a session row as sizes ("1.5 MiB")
 * and count_key (commands or requests) as a number. */
static void add_row(struct cli_table *t, const char *proto, const char *peer, const char *name,
                    json_t *r, const char *count_key, const char *params)
{
    char rd[32], wr[32], n[32];
    json_int_t v = json_integer_value(json_object_get(r, "bytes_read"));
    cli_format_size(v > 0 ? (uint64_t)v : 0, rd, sizeof(rd));
    v = json_integer_value(json_object_get(r, "bytes_written"));
    cli_format_size(v > 0 ? (uint64_t)v : 0, wr, sizeof(wr));
    snprintf(n, sizeof(n), "%lld", (long long)json_integer_value(json_object_get(r, count_key)));
    const char *cells[] = {proto, peer, name, rd, wr, n, params};
    cli_table_add(t, cells);
}

static void iscsi_rows(struct cli_table *t, json_t *iscsi)
{
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
        add_row(t, "iscsi", peer, str_or_dash(json_object_get(r, "target")), r, "commands", params);
    }
}

static void nbd_rows(struct cli_table *t, json_t *nbd)
{
    size_t i;
    json_t *r;
    json_array_foreach(nbd, i, r)
    {
        char params[160];
        snprintf(params, sizeof(params), "%s tls=%s structured=%s base:allocation=%s readonly=%s",
                 str_or_dash(json_object_get(r, "state")),
                 json_is_true(json_object_get(r, "tls")) ? "yes" : "no",
                 json_is_true(json_object_get(r, "structured_replies")) ? "yes" : "no",
                 json_is_true(json_object_get(r, "base_allocation")) ? "yes" : "no",
                 json_is_true(json_object_get(r, "readonly")) ? "yes" : "no");
        add_row(t, "nbd", str_or_dash(json_object_get(r, "peer")),
                str_or_dash(json_object_get(r, "export")), r, "requests", params);
    }
}

/* NVMe controllers: the target counts bytes per volume (blockctl volume
 * stats, /metrics), not per controller. */
static void nvme_rows(struct cli_table *t, json_t *nvme)
{
    size_t i;
    json_t *r;
    json_array_foreach(nvme, i, r)
    {
        char peer[320], params[64];
        snprintf(peer, sizeof(peer), "%s@%s", str_or_dash(json_object_get(r, "hostnqn")),
                 str_or_dash(json_object_get(r, "host_traddr")));
        snprintf(params, sizeof(params), "cntlid=%lld%s",
                 (long long)json_integer_value(json_object_get(r, "ctrl")),
                 json_is_true(json_object_get(r, "discovery")) ? " discovery" : "");
        const char *cells[] = {"nvme", peer,  str_or_dash(json_object_get(r, "subnqn")), "-", "-",
                               "-",    params};
        cli_table_add(t, cells);
    }
}

static int session_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *iscsi = NULL, *nbd = NULL, *nvme = NULL;
    if (cli_call(ctx, "iscsi.global.sessions", NULL, &iscsi) != CLI_OK ||
        cli_call(ctx, "nbd.global.sessions", NULL, &nbd) != CLI_OK ||
        cli_call(ctx, "nvmet.global.sessions", NULL, &nvme) != CLI_OK) {
        json_decref(iscsi);
        json_decref(nbd);
        return CLI_ERROR;
    }
    if (ctx->json) {
        json_t *all = json_pack("{s:O, s:O, s:O}", "iscsi", iscsi, "nbd", nbd, "nvme", nvme);
        cli_print_json(all);
        json_decref(all);
    } else {
        static const char *const headers[] = {"PROTO",   "PEER",     "TARGET/EXPORT", "READ",
                                              "WRITTEN", "COMMANDS", "PARAMETERS"};
        struct cli_table *t = cli_table_new(7, headers);
        iscsi_rows(t, iscsi);
        nbd_rows(t, nbd);
        nvme_rows(t, nvme);
        cli_table_print(t, stdout);
        cli_table_free(t);
    }
    json_decref(iscsi);
    json_decref(nbd);
    json_decref(nvme);
    return CLI_OK;
}

static const struct cli_command session_commands[] = {
    {"session", "list", "",
     "iSCSI sessions, NBD connections and NVMe controllers: peer, target/export, bytes moved, "
     "parameters",
     session_list},
};
CLI_COMMANDS(session_commands);
