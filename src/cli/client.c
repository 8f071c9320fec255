/* blockctl's JSON-RPC client over the daemon's Unix socket. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/util.h"

/* Replies can be large (a query over thousands of rows) but are bounded. */
#define REPLY_MAX (256u * 1024 * 1024)

static int cli_connect(struct cli_ctx *ctx)
{
    if (ctx->fd >= 0)
        return 0;
    size_t len = strlen(ctx->socket_path);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (len >= sizeof(sa.sun_path))
        return cli_fail("socket path too long: %s", ctx->socket_path);
    memcpy(sa.sun_path, ctx->socket_path, len + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return cli_fail("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        close(fd);
        return cli_fail("cannot connect to %s: %s (is blockd running? see --socket)",
                        ctx->socket_path, strerror(e));
    }
    ctx->fd = fd;
    /* Job methods (TrueNAS @job: core.bulk, long deletes and copies) answer
     * with their result rather than a job id, so every command sees the
     * outcome; a daemon without core.set_options just says so. */
    json_t *res, *err;
    cli_call_raw(ctx, "core.set_options", json_pack("[{s:b}]", "legacy_jobs", 0), &res, &err);
    json_decref(res);
    json_decref(err);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct spinner {
    bool enabled, shown;
    double start;
    int frame;
    double percent; /* < 0: unknown */
};

static void spinner_draw(struct cli_ctx *ctx, struct spinner *s)
{
    static const char frames[] = "|/-\\";
    double el = now_s() - s->start;
    if (!s->enabled || el < 1.0)
        return;
    s->shown = true;
    if (s->percent >= 0) {
        /* the daemon reports progress: a bar */
        char bar[21];
        int fill = (int)(s->percent / 5.0);
        for (int i = 0; i < 20; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[20] = 0;
        fprintf(stderr, "\r%s [%s] %5.1f%%  %.1fs\033[K", ctx->progress_label, bar, s->percent, el);
    } else {
        fprintf(stderr, "\r%c %s  %.1fs\033[K", frames[s->frame++ % 4], ctx->progress_label, el);
    }
    fflush(stderr);
}

static void spinner_clear(struct spinner *s)
{
    if (s->shown) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

/* A daemon notification between replies: progress updates feed the
 * spinner ({"params": {"progress": {"percent": N}}}, {"params":
 * {"percent": N}}, or a core.get_jobs collection_update whose job runs
 * our method); anything else is ignored. */
static void note_event(json_t *msg, struct spinner *s, const char *method)
{
    json_t *p = json_object_get(msg, "params");
    json_t *fields = json_object_get(p, "fields");
    if (fields) {
        /* a job update (core.get_jobs subscription): only our method's */
        const char *m = json_string_value(json_object_get(fields, "method"));
        if (!m || strcmp(m, method) != 0)
            return;
        p = fields;
    }
    json_t *prog = json_object_get(p, "progress");
    json_t *pct = json_object_get(prog ? prog : p, "percent");
    if (json_is_number(pct))
        s->percent = json_number_value(pct);
}

/* Read lines until the reply with this id; returns it or NULL (printed). */
static json_t *read_reply(struct cli_ctx *ctx, uint64_t id, struct spinner *sp, const char *method)
{
    static char *buf;
    static size_t cap, len;
    for (;;) {
        char *nl = len ? memchr(buf, '\n', len) : NULL;
        if (nl) {
            size_t l = (size_t)(nl - buf);
            json_error_t err;
            json_t *msg = json_loadb(buf, l, JSON_DECODE_ANY, &err);
            memmove(buf, nl + 1, len - l - 1);
            len -= l + 1;
            if (!msg) {
                cli_fail("daemon sent invalid JSON: %s", err.text);
                return NULL;
            }
            json_t *jid = json_object_get(msg, "id");
            if (json_is_integer(jid) && (uint64_t)json_integer_value(jid) == id)
                return msg;
            if (json_is_null(jid) && json_object_get(msg, "error"))
                return msg; /* an error the daemon could not tie to our id */
            note_event(msg, sp, method);
            json_decref(msg);
            continue;
        }
        if (cap - len < 65536) {
            size_t ncap = cap ? cap * 2 : 65536;
            if (ncap > REPLY_MAX) {
                cli_fail("reply from the daemon larger than %u bytes", REPLY_MAX);
                return NULL;
            }
            char *n = realloc(buf, ncap);
            if (!n) {
                cli_fail("out of memory");
                return NULL;
            }
            buf = n;
            cap = ncap;
        }
        struct pollfd pfd = {.fd = ctx->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, sp->enabled ? 100 : -1);
        if (pr < 0 && errno != EINTR) {
            cli_fail("poll: %s", strerror(errno));
            return NULL;
        }
        if (pr <= 0) {
            spinner_draw(ctx, sp);
            continue;
        }
        ssize_t n = recv(ctx->fd, buf + len, cap - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            cli_fail("the daemon closed the connection%s%s", n < 0 ? ": " : "",
                     n < 0 ? strerror(errno) : "");
            return NULL;
        }
        len += (size_t)n;
        spinner_draw(ctx, sp);
    }
}

int cli_call_raw(struct cli_ctx *ctx, const char *method, json_t *params, json_t **result,
                 json_t **error)
{
    *result = NULL;
    *error = NULL;
    if (!params)
        params = json_array();
    if (cli_connect(ctx) != 0) {
        json_decref(params);
        return CLI_ERROR;
    }
    if (ctx->progress_label && isatty(STDERR_FILENO) && !ctx->subscribed) {
        /* Job progress of a long call arrives as core.get_jobs events;
         * an older daemon without them just gets the plain spinner. */
        const char *label = ctx->progress_label;
        json_t *sub, *suberr;
        ctx->progress_label = NULL;
        ctx->subscribed = true;
        cli_call_raw(ctx, "core.subscribe", json_pack("[s]", "core.get_jobs"), &sub, &suberr);
        json_decref(sub);
        json_decref(suberr);
        ctx->progress_label = label;
    }
    uint64_t id = ++ctx->next_id;
    json_t *req = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id,
                            "method", method, "params", params);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!text)
        return cli_fail("cannot encode the request (invalid UTF-8?)");
    size_t tl = strlen(text);
    text[tl] = 0;
    int rc = send_all(ctx->fd, text, tl);
    if (rc == 0)
        rc = send_all(ctx->fd, "\n", 1);
    free(text);
    if (rc < 0)
        return cli_fail("sending to the daemon: %s", strerror(-rc));

    struct spinner sp = {
        .enabled = ctx->progress_label && isatty(STDERR_FILENO), .start = now_s(), .percent = -1};
    json_t *reply = read_reply(ctx, id, &sp, method);
    spinner_clear(&sp);
    if (!reply)
        return CLI_ERROR;
    json_t *err = json_object_get(reply, "error");
    if (err) {
        *error = json_incref(err);
        json_decref(reply);
        return CLI_ERROR;
    }
    json_t *res = json_object_get(reply, "result");
    *result = json_incref(res ? res : json_null());
    json_decref(reply);
    return CLI_OK;
}

void cli_print_error(json_t *error)
{
    json_t *data = json_object_get(error, "data");
    json_t *extra = json_object_get(data, "extra");
    int code = (int)json_integer_value(json_object_get(error, "code"));
    if (code == -32602 && json_array_size(extra) > 0) {
        size_t i;
        json_t *e;
        json_array_foreach(extra, i, e)
        {
            fprintf(stderr, "blockctl: %s: %s\n", json_string_value(json_array_get(e, 0)),
                    json_string_value(json_array_get(e, 1)));
        }
        return;
    }
    const char *msg = json_string_value(json_object_get(error, "message"));
    fprintf(stderr, "blockctl: %s\n", msg ? msg : "error from the daemon");
}

int cli_call(struct cli_ctx *ctx, const char *method, json_t *params, json_t **result)
{
    json_t *error;
    int rc = cli_call_raw(ctx, method, params, result, &error);
    if (error) {
        cli_print_error(error);
        json_decref(error);
    }
    return rc;
}
