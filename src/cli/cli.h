/*
 * blockctl internals: a table-driven command dispatcher, the JSON-RPC
 * client, and output helpers.
 *
 * Adding a command group (e.g. `blockctl share nbd create …`) in its own
 * file, without touching the others:
 *
 *   // src/cli/cmd_share.c
 *   #include "cli/cli.h"
 *
 *   static int share_nbd_create(struct cli_ctx *ctx, int argc, char **argv)
 *   {
 *       // argv[0] is the command name ("create"); options via
 *       // cli_opt_begin()/cli_opt_next() (below), operands from optind.
 *       if (argc < 2)
 *           return cli_usage(ctx, "missing POOL/VOL");
 *       json_t *result;
 *       int rc = cli_call(ctx, "share.nbd.create", json_pack("[{s:s}]", "name", argv[1]),
 *                         &result);
 *       if (rc != 0)
 *           return rc;          // error already printed; exit code 1
 *       if (ctx->json)
 *           cli_print_json(result);
 *       else
 *           printf("created\t%s\n", argv[1]);
 *       json_decref(result);
 *       return 0;
 *   }
 *
 *   static const struct cli_command share_commands[] = {
 *       {"share nbd", "create", "POOL/VOL…", "Export volumes over NBD", share_nbd_create},
 *   };
 *   CLI_COMMANDS(share_commands);
 *
 * and add 'cmd_share.c' to the blockctl sources in src/cli/meson.build.
 * The group may have several words ("share nbd"); the dispatcher matches
 * the longest group, then the command name. `blockctl --help` and
 * `blockctl help share nbd create` come from the same table.
 *
 * Exit codes: a run function returns CLI_OK (0), CLI_ERROR (1: the daemon
 * reported an error or could not be reached; message already on stderr)
 * or CLI_USAGE (2: bad command line; use cli_usage()).
 */
#ifndef BLOCKD_CLI_CLI_H
#define BLOCKD_CLI_CLI_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_ERROR = 1, CLI_USAGE = 2 };

struct cli_command;

struct cli_ctx {
    const char *socket_path;
    bool json; /* --json: print the API's JSON */
    int fd;    /* connection, -1 until the first call */
    uint64_t next_id;
    const struct cli_command *command; /* the command running */
    const char *progress_label;        /* set: show a spinner on slow calls */
    bool subscribed;                   /* to core.get_jobs, for progress */
};

typedef int (*cli_run_fn)(struct cli_ctx *ctx, int argc, char **argv);

struct cli_command {
    const char *group;   /* "volume", "share iscsi"; "" for a top-level command */
    const char *name;    /* "create" */
    const char *usage;   /* arguments after the name: "POOL/NAME --size SIZE [--thick]" */
    const char *summary; /* one line */
    cli_run_fn run;
};

/* Register a table; use CLI_COMMANDS() rather than calling this. */
void cli_register(const struct cli_command *cmds, size_t n);

#define CLI_COMMANDS(table)                                                                        \
    __attribute__((constructor)) static void cli_register_##table(void)                            \
    {                                                                                              \
        cli_register(table, sizeof(table) / sizeof(table[0]));                                     \
    }

/*
 * Call a method on the daemon and wait for its reply. Steals params (an
 * array, or NULL for []). On success *result is the result (new
 * reference) and CLI_OK is returned; on a daemon error the error is
 * printed ("blockctl: pool.dataset.create.volsize: must be …") and
 * CLI_ERROR returned. If ctx->progress_label is set and stderr is a
 * terminal, a spinner with the elapsed time is shown after one second.
 */
int cli_call(struct cli_ctx *ctx, const char *method, json_t *params, json_t **result);
/* As cli_call, but on a daemon error returns CLI_ERROR with *error set
 * (the JSON-RPC error object, new reference) and prints nothing. */
int cli_call_raw(struct cli_ctx *ctx, const char *method, json_t *params, json_t **result,
                 json_t **error);
/* Print a JSON-RPC error object the way cli_call does. */
void cli_print_error(json_t *error);

/* Print "blockctl: <msg>" and the command's usage line; returns CLI_USAGE. */
int cli_usage(struct cli_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "blockctl: <msg>" to stderr; returns CLI_ERROR. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The line both print: "blockctl: <msg>\n" to stderr. */
void cli_vmessage(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

struct option; /* <getopt.h> */
/* A command's options, with getopt_long: call cli_opt_begin() once, then
 * cli_opt_next() until it returns -1 (operands then start at optind).
 * Returns the option's value (opts[].val, or the letter of shortopts); an
 * unknown option or a missing argument is reported as "bad option X" with
 * the command's usage and returned as '?' (return CLI_USAGE then). Uses
 * getopt's globals (optind, optarg): one command at a time. */
void cli_opt_begin(void);
int cli_opt_next(struct cli_ctx *ctx, int argc, char **argv, const char *shortopts,
                 const struct option *opts);

/* A numeric option's value within [lo, hi]: 0, or CLI_USAGE reported
 * ("OPT wants a number from LO to HI, not 'S'"). */
int cli_parse_int(struct cli_ctx *ctx, const char *opt, const char *s, long long lo, long long hi,
                  json_int_t *out);
/* Call method once per POOL/VOL operand (argv from optind) with
 * {"name": POOL/VOL} and the members of args (consumed). Prints the JSON
 * answer (--json) or "VERB<TAB>POOL/VOL", followed by "<TAB>X" when extra
 * gives an X for the answer. Continues past a failed volume: CLI_OK, or
 * CLI_ERROR if any failed. */
int cli_share_each(struct cli_ctx *ctx, int argc, char **argv, const char *method, json_t *args,
                   const char *verb, const char *(*extra)(json_t *result));

/* Indented JSON on stdout with a newline. */
void cli_print_json(json_t *v);

/* Sizes: "10G" → bytes (K/M/G/T/P suffixes, binary); 0 or -EINVAL. */
int cli_parse_size(const char *s, uint64_t *out);
/* "1.0 GiB" style. */
void cli_format_size(uint64_t v, char *buf, size_t len);

/*
 * A property of a dataset row as either shape the API may use: a plain
 * value ("volsize": 1073741824) or a TrueNAS property object
 * ("volsize": {"parsed": 1073741824, "value": "1G", "rawvalue": …}).
 */
bool cli_prop_int(json_t *row, const char *key, uint64_t *out);
const char *cli_prop_str(json_t *row, const char *key); /* NULL if absent */

/* Aligned text tables. A header starting with '>' is right-aligned. */
struct cli_table;
struct cli_table *cli_table_new(size_t ncols, const char *const *headers);
/* Add a row of ncols strings (copied; NULL prints as "-"). */
void cli_table_add(struct cli_table *t, const char *const *cells);
void cli_table_print(struct cli_table *t, FILE *out);
void cli_table_free(struct cli_table *t);

#endif
