/*
 * blockctl user set-password NAME | list | delete NAME: the local accounts
 * that may log in to the remote API with a password (account.* methods,
 * only served on the local Unix socket).
 *
 * The password is read from the terminal (twice, not echoed) or, when
 * stdin is not a terminal, as one line from stdin: never from the command
 * line, where other users could read it in /proc/PID/cmdline.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"

#define PASSWORD_MAX 1024

/* One line from f into buf without its newline; -1 on EOF/error, -2 if too long. */
static int read_line(FILE *f, char *buf, size_t len)
{
    if (!fgets(buf, (int)len, f))
        return -1;
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '\n')
        buf[--n] = 0;
    else if (!feof(f))
        return -2; /* no newline before the buffer ended */
    if (n && buf[n - 1] == '\r')
        buf[--n] = 0;
    return 0;
}

/* Prompt on stderr and read without echo from the terminal on stdin. */
static int read_hidden(const char *prompt, char *buf, size_t len)
{
    struct termios old, quiet;
    if (tcgetattr(STDIN_FILENO, &old) < 0)
        return -1;
    quiet = old;
    quiet.c_lflag &= ~(tcflag_t)ECHO;
    quiet.c_lflag |= ECHONL;
    fputs(prompt, stderr);
    fflush(stderr);
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) < 0)
        return -1;
    int rc = read_line(stdin, buf, len);
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
    return rc;
}

static int read_password(char *buf, size_t len)
{
    int rc;
    if (isatty(STDIN_FILENO)) {
        char again[PASSWORD_MAX + 2];
        rc = read_hidden("New password: ", buf, len);
        if (rc == 0)
            rc = read_hidden("Retype new password: ", again, sizeof(again));
        if (rc == 0 && strcmp(buf, again) != 0) {
            explicit_bzero(again, sizeof(again));
            return cli_fail("the passwords do not match");
        }
        explicit_bzero(again, sizeof(again));
    } else {
        rc = read_line(stdin, buf, len);
    }
    if (rc == -2)
        return cli_fail("password longer than %d bytes", PASSWORD_MAX);
    if (rc < 0)
        return cli_fail("no password given on standard input");
    if (!buf[0])
        return cli_fail("empty password");
    return CLI_OK;
}

static int user_set_password(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc != 2)
        return cli_usage(ctx, argc < 2 ? "missing NAME"
                                       : "too many arguments (the password is "
                                         "read from stdin, never from argv)");
    char pw[PASSWORD_MAX + 2];
    int rc = read_password(pw, sizeof(pw));
    if (rc != CLI_OK) {
        explicit_bzero(pw, sizeof(pw));
        return rc;
    }
    json_t *result = NULL;
    rc = cli_call(ctx, "account.set_password",
                  json_pack("[{s:s, s:s}]", "username", argv[1], "password", pw), &result);
    explicit_bzero(pw, sizeof(pw));
    if (rc != CLI_OK)
        return rc;
    if (ctx->json)
        cli_print_json(result);
    else
        printf("password set\t%s\n", argv[1]);
    json_decref(result);
    return CLI_OK;
}

static int user_list(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage(ctx, "too many arguments");
    json_t *rows = NULL;
    if (cli_call(ctx, "account.query", NULL, &rows) != CLI_OK)
        return CLI_ERROR;
    if (ctx->json) {
        cli_print_json(rows);
        json_decref(rows);
        return CLI_OK;
    }
    static const char *const headers[] = {">ID", "NAME"};
    struct cli_table *t = cli_table_new(2, headers);
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r)
    {
        char id[32];
        snprintf(id, sizeof(id), "%lld", (long long)json_integer_value(json_object_get(r, "id")));
        const char *cells[] = {id, json_string_value(json_object_get(r, "username"))};
        cli_table_add(t, cells);
    }
    cli_table_print(t, stdout);
    cli_table_free(t);
    json_decref(rows);
    return CLI_OK;
}

static int user_delete(struct cli_ctx *ctx, int argc, char **argv)
{
    if (argc != 2)
        return cli_usage(ctx, argc < 2 ? "missing NAME" : "too many arguments");
    json_t *result = NULL;
    if (cli_call(ctx, "account.delete", json_pack("[s]", argv[1]), &result) != CLI_OK)
        return CLI_ERROR;
    json_decref(result);
    if (!ctx->json)
        printf("deleted\t%s\n", argv[1]);
    return CLI_OK;
}

static const struct cli_command user_commands[] = {
    {"user", "set-password", "NAME",
     "Create a local API account or change its password (read from the terminal or stdin)",
     user_set_password},
    {"user", "list", "", "Local API accounts", user_list},
    {"user", "delete", "NAME", "Delete a local API account (its sessions log out)", user_delete},
};
CLI_COMMANDS(user_commands);
