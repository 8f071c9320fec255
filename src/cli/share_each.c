/*
 * What the `blockctl share <protocol>` command groups have in common: a
 * numeric option's value, and one share.<protocol>.* call per POOL/VOL
 * operand.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

int cli_parse_int(struct cli_ctx *ctx, const char *opt, const char *s, long long lo, long long hi,
                  json_int_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi)
        return cli_usage(ctx, "%s wants a number from %lld to %lld, not '%s'", opt, lo, hi, s);
    *out = v;
    return 0;
}

int cli_share_each(struct cli_ctx *ctx, int argc, char **argv, const char *method, json_t *args,
                   const char *verb, const char *(*extra)(json_t *result))
{
    if (optind >= argc) {
        json_decref(args);
        return cli_usage(ctx, "missing POOL/VOL");
    }
    int rc = CLI_OK;
    for (int i = optind; i < argc; i++) {
        json_t *body = json_pack("{s:s}", "name", argv[i]);
        json_object_update(body, args);
        json_t *res = NULL;
        if (cli_call(ctx, method, json_pack("[o]", body), &res) != CLI_OK) {
            rc = CLI_ERROR;
            continue;
        }
        const char *more = extra ? extra(res) : NULL;
        if (ctx->json)
            cli_print_json(res);
        else if (more)
            printf("%s\t%s\t%s\n", verb, argv[i], more);
        else
            printf("%s\t%s\n", verb, argv[i]);
        json_decref(res);
    }
    json_decref(args);
    return rc;
}
