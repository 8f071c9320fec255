/* blockctl volume diff: the changed blocks between two snapshots (or a
 * snapshot and the live volume), page by page of
 * pool.snapshot.changed_blocks. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* Print one page's ranges (or append them to all for --json); add them
 * to the totals; *next: where the next page starts, -1 when done. */
static void page_take(struct cli_ctx *ctx, json_t *res, json_t *all, uint64_t *bytes,
                      uint64_t *count, int64_t *next)
{
    json_t *ranges = json_object_get(res, "ranges"), *r;
    json_t *jn = json_object_get(res, "next_offset");
    size_t i;

    json_array_foreach(ranges, i, r)
    {
        uint64_t off = (uint64_t)json_integer_value(json_object_get(r, "offset"));
        uint64_t len = (uint64_t)json_integer_value(json_object_get(r, "length"));
        if (ctx->json)
            json_array_append(all, r);
        else
            printf("%" PRIu64 "\t%" PRIu64 "\n", off, len);
        *bytes += len;
        (*count)++;
    }
    *next = json_is_integer(jn) ? (int64_t)json_integer_value(jn) : -1;
}

static int volume_diff(struct cli_ctx *ctx, int argc, char **argv)
{
    cli_opt_begin();
    if (cli_opt_next(ctx, argc, argv, "", (const struct option[]){{0}}) == '?')
        return CLI_USAGE;
    if (argc - optind != 2)
        return cli_usage(ctx, "expected POOL/VOL@SNAP1 and POOL/VOL@SNAP2 or POOL/VOL");
    const char *base = argv[optind], *target = argv[optind + 1];
    json_t *all = json_array();
    uint64_t bytes = 0, count = 0, size = 0;
    int64_t next = 0;

    if (!ctx->json)
        printf("OFFSET\tLENGTH\n");
    while (next >= 0) {
        json_t *res;
        int rc = cli_call(ctx, "pool.snapshot.changed_blocks",
                          json_pack("[{s:s, s:s, s:I}]", "base", base, "target", target, "offset",
                                    (json_int_t)next),
                          &res);
        if (rc) {
            json_decref(all);
            return rc;
        }
        size = (uint64_t)json_integer_value(json_object_get(res, "volume_size"));
        page_take(ctx, res, all, &bytes, &count, &next);
        json_decref(res);
    }
    if (ctx->json) {
        json_t *out = json_pack("{sOsIsIsI}", "ranges", all, "changed_bytes", (json_int_t)bytes,
                                "range_count", (json_int_t)count, "volume_size", (json_int_t)size);
        cli_print_json(out);
        json_decref(out);
    } else {
        printf("total\t%" PRIu64 " bytes in %" PRIu64 " ranges (of %" PRIu64 ")\n", bytes, count,
               size);
    }
    json_decref(all);
    return CLI_OK;
}

static const struct cli_command diff_commands[] = {
    {"volume", "diff", "POOL/VOL@SNAP1 POOL/VOL@SNAP2|POOL/VOL",
     "The byte ranges that may differ between a snapshot and a newer one or the live volume",
     volume_diff},
};
CLI_COMMANDS(diff_commands)
