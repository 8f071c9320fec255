/*
 * blockctl: the command-line client of blockd's JSON-RPC API.
 *
 *   blockctl [--socket PATH] [--json] COMMAND [ARGS…]
 *
 * Commands live in tables registered by each cmd_*.c file (see cli.h);
 * this file parses the global options, finds the command and prints help.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

#define MAX_TABLES 32

static const struct cli_command *tables[MAX_TABLES];
static size_t table_len[MAX_TABLES];
static size_t ntables;

void cli_register(const struct cli_command *cmds, size_t n)
{
    if (ntables == MAX_TABLES) {
        fprintf(stderr, "blockctl: too many command tables\n");
        abort();
    }
    tables[ntables] = cmds;
    table_len[ntables] = n;
    ntables++;
}

/* Number of argv words the group name spans if argv starts with it. */
static size_t group_match(const char *group, int argc, char **argv)
{
    if (!*group)
        return 0;
    size_t words = 0;
    const char *p = group;
    while (*p) {
        const char *sp = strchr(p, ' ');
        size_t l = sp ? (size_t)(sp - p) : strlen(p);
        if ((int)words >= argc || strlen(argv[words]) != l || strncmp(argv[words], p, l) != 0)
            return SIZE_MAX;
        words++;
        p += l;
        while (*p == ' ')
            p++;
    }
    return words;
}

/* The command argv names, and how many words (group + name) it used. */
static const struct cli_command *command_find(int argc, char **argv, int *used)
{
    const struct cli_command *best = NULL;
    size_t best_words = 0;
    for (size_t t = 0; t < ntables; t++) {
        for (size_t i = 0; i < table_len[t]; i++) {
            const struct cli_command *c = &tables[t][i];
            size_t g = group_match(c->group, argc, argv);
            if (g == SIZE_MAX || (int)g >= argc || strcmp(argv[g], c->name) != 0)
                continue;
            if (!best || g + 1 > best_words) {
                best = c;
                best_words = g + 1;
            }
        }
    }
    *used = (int)best_words;
    return best;
}

/* Is there a command group named exactly by these words? */
static bool group_exists(int argc, char **argv)
{
    for (size_t t = 0; t < ntables; t++)
        for (size_t i = 0; i < table_len[t]; i++)
            if (*tables[t][i].group && group_match(tables[t][i].group, argc, argv) == (size_t)argc)
                return true;
    return false;
}

static void print_command(FILE *out, const struct cli_command *c, bool with_summary)
{
    fprintf(out, "  blockctl %s%s%s%s%s\n", c->group, *c->group ? " " : "", c->name,
            *c->usage ? " " : "", c->usage);
    if (with_summary && c->summary)
        fprintf(out, "      %s\n", c->summary);
}

static void usage_all(FILE *out)
{
    fprintf(out, "Usage: blockctl [--socket PATH] [--json] COMMAND [ARGS…]\n\n"
                 "Manage blockd volumes, snapshots and shares through its JSON-RPC API.\n\n"
                 "Options:\n"
                 "  --socket PATH  the daemon's API socket (default: $BLOCKD_SOCKET, else\n"
                 "                 ./var/blockd.sock or /run/blockd/blockd.sock if it\n"
                 "                 exists, else /var/lib/blockd/blockd.sock)\n"
                 "  --json         print the API's JSON instead of tables\n"
                 "  --version      print blockctl's version\n"
                 "  -h, --help     this help; `blockctl help COMMAND` for one command\n\n"
                 "Commands:\n");
    /* Group by group name in registration order. */
    const char *seen[128];
    size_t nseen = 0;
    for (size_t t = 0; t < ntables; t++) {
        for (size_t i = 0; i < table_len[t]; i++) {
            const char *g = tables[t][i].group;
            bool done = false;
            for (size_t k = 0; k < nseen && !done; k++)
                done = strcmp(seen[k], g) == 0;
            if (done)
                continue;
            if (nseen < 128)
                seen[nseen++] = g;
            for (size_t t2 = t; t2 < ntables; t2++)
                for (size_t j = t2 == t ? i : 0; j < table_len[t2]; j++)
                    if (strcmp(tables[t2][j].group, g) == 0)
                        print_command(out, &tables[t2][j], true);
        }
    }
    fprintf(out, "\nSizes take K, M, G, T suffixes (binary). Exit status: 0 ok, 1 error "
                 "reported by the daemon, 2 usage error.\n");
}

/* Help for the commands matching argv (a group or one command). */
static int help_for(int argc, char **argv)
{
    int used;
    const struct cli_command *c = command_find(argc, argv, &used);
    if (c) {
        printf("Usage:\n");
        print_command(stdout, c, true);
        return CLI_OK;
    }
    bool any = false;
    for (size_t t = 0; t < ntables; t++) {
        for (size_t i = 0; i < table_len[t]; i++) {
            const struct cli_command *k = &tables[t][i];
            size_t g = group_match(k->group, argc, argv);
            bool whole = g != SIZE_MAX && (int)g == argc && *k->group;
            if (whole) {
                if (!any)
                    printf("Usage:\n");
                any = true;
                print_command(stdout, k, true);
            }
        }
    }
    if (!any) {
        fprintf(stderr, "blockctl: no such command: %s (try blockctl --help)\n", argv[0]);
        return CLI_USAGE;
    }
    return CLI_OK;
}

void cli_opt_begin(void)
{
    optind = 0; /* glibc: full re-initialisation */
    opterr = 0; /* we report bad options ourselves, with the usage */
}

int cli_opt_next(struct cli_ctx *ctx, int argc, char **argv, const char *shortopts,
                 const struct option *opts)
{
    int c = getopt_long(argc, argv, shortopts, opts, NULL);
    if (c == '?' || c == ':') {
        cli_usage(ctx, "bad option %s", argv[optind - 1]);
        return '?';
    }
    return c;
}

int cli_usage(struct cli_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_vmessage(fmt, ap);
    va_end(ap);
    if (ctx && ctx->command) {
        fprintf(stderr, "Usage:\n");
        print_command(stderr, ctx->command, false);
    }
    return CLI_USAGE;
}

static const char *default_socket(void)
{
    const char *env = getenv("BLOCKD_SOCKET");
    if (env && *env)
        return env;
    struct stat st;
    if (stat("./var/blockd.sock", &st) == 0)
        return "./var/blockd.sock";
    /* the systemd unit's RuntimeDirectory=blockd */
    if (stat("/run/blockd/blockd.sock", &st) == 0)
        return "/run/blockd/blockd.sock";
    return "/var/lib/blockd/blockd.sock";
}

/* The command reference for docs/blockctl.md, from the same tables. */
static void usage_markdown(void)
{
    printf("# blockctl\n\n"
           "Generated by `blockctl help --markdown > docs/blockctl.md`.\n\n"
           "```\nblockctl [--socket PATH] [--json] COMMAND [ARGS…]\n```\n\n"
           "- `--socket PATH`: the daemon's API socket (default: `$BLOCKD_SOCKET`, else\n"
           "  `./var/blockd.sock` or `/run/blockd/blockd.sock` if it exists, else\n"
           "  `/var/lib/blockd/blockd.sock`).\n"
           "- `--json`: print the API's JSON result instead of tables.\n"
           "- Sizes take K, M, G, T suffixes (binary: 1K = 1024).\n"
           "- Exit status: 0 ok; 1 the daemon reported an error (message on stderr,\n"
           "  e.g. `blockctl: pool.dataset.create.volsize: must be a multiple of\n"
           "  volblocksize`) or could not be reached; 2 usage error.\n"
           "- Long calls (clone, rollback) show a spinner, or a progress bar when the\n"
           "  daemon reports progress, on stderr when it is a terminal.\n\n"
           "## Commands\n\n"
           "| command | what it does |\n|---|---|\n");
    for (size_t t = 0; t < ntables; t++) {
        for (size_t i = 0; i < table_len[t]; i++) {
            const struct cli_command *c = &tables[t][i];
            char line[1024];
            snprintf(line, sizeof(line), "`blockctl %s%s%s%s%s` | %s", c->group,
                     *c->group ? " " : "", c->name, *c->usage ? " " : "", c->usage,
                     c->summary ? c->summary : "");
            /* a table cell: '|' must be escaped (the first " | " separates the cells) */
            char *sep = strstr(line, "` | ");
            fputs("| ", stdout);
            for (char *p = line; *p; p++) {
                if (*p == '|' && !(sep && p == sep + 2))
                    fputs("\\|", stdout);
                else
                    fputc(*p, stdout);
            }
            fputs(" |\n", stdout);
        }
    }
}

static int help_cmd(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
        usage_markdown();
        return CLI_OK;
    }
    if (argc < 2) {
        usage_all(stdout);
        return CLI_OK;
    }
    return help_for(argc - 1, argv + 1);
}

static const struct cli_command help_commands[] = {
    {"", "help", "[COMMAND…]", "Show help for all commands or one command", help_cmd},
};
CLI_COMMANDS(help_commands)

static bool is_help(const char *a)
{
    return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
}

int main(int argc, char **argv)
{
    struct cli_ctx ctx = {.fd = -1};
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--socket") == 0) {
            if (i + 1 >= argc)
                return cli_usage(NULL, "--socket needs a PATH");
            ctx.socket_path = argv[++i];
        } else if (strncmp(a, "--socket=", 9) == 0) {
            ctx.socket_path = a + 9;
        } else if (strcmp(a, "--json") == 0) {
            ctx.json = true;
        } else if (is_help(a)) {
            usage_all(stdout);
            return CLI_OK;
        } else if (strcmp(a, "--version") == 0) {
            printf("blockctl %s\n", BLOCKD_VERSION);
            return CLI_OK;
        } else if (strcmp(a, "--") == 0) {
            i++;
            break;
        } else if (a[0] == '-') {
            return cli_usage(NULL, "unknown option %s (try blockctl --help)", a);
        } else {
            break;
        }
    }
    if (i >= argc) {
        usage_all(stderr);
        return CLI_USAGE;
    }
    if (!ctx.socket_path)
        ctx.socket_path = default_socket();

    int rest = argc - i;
    char **rargv = argv + i;
    int used;
    const struct cli_command *c = command_find(rest, rargv, &used);
    if (!c) {
        int words = 0; /* the longest prefix of argv naming a group */
        for (int k = 1; k <= rest; k++)
            if (group_exists(k, rargv))
                words = k;
        if (words > 0) {
            /* "blockctl volume" or "blockctl volume frob": show the group */
            bool asked = words < rest && is_help(rargv[words]);
            if (words < rest && !asked)
                fprintf(stderr, "blockctl: unknown command: %s %s\n", rargv[0], rargv[words]);
            help_for(words, rargv);
            return asked ? CLI_OK : CLI_USAGE;
        }
        fprintf(stderr, "blockctl: unknown command: %s (try blockctl --help)\n", rargv[0]);
        return CLI_USAGE;
    }
    /* `blockctl volume create --help` */
    for (int k = used; k < rest; k++) {
        if (strcmp(rargv[k], "--") == 0)
            break;
        if (is_help(rargv[k]))
            return help_for(used, rargv);
    }
    ctx.command = c;
    /* The command sees argv[0] = its name, then its arguments. */
    int rc = c->run(&ctx, rest - used + 1, rargv + used - 1);
    if (ctx.fd >= 0)
        close(ctx.fd);
    fflush(stdout);
    if (ferror(stdout)) {
        fprintf(stderr, "blockctl: error writing output\n");
        return CLI_ERROR;
    }
    return rc;
}
