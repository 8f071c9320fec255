/*
 * core.subscribe over the Unix socket transport: the client subscribes to
 * core.get_jobs, runs core.bulk of core.ping (a job) and receives the
 * job's collection_update events on the same connection; after it
 * disconnects, more jobs run without sending to the closed client.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/api.h"
#include "api/jobs.h"
#include "api/server.h"

static char dir[64];
static char path[96];

static int connect_sock(void)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void send_line(int fd, const char *s)
{
    size_t len = strlen(s);
    while (len) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        s += n;
        len -= (size_t)n;
    }
    assert_int_equal(send(fd, "\n", 1, MSG_NOSIGNAL), 1);
}

/* One JSON line; fails on EOF or timeout. */
static json_t *read_json(int fd)
{
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        char ch;
        ssize_t n = recv(fd, &ch, 1, 0);
        if (n <= 0)
            fail_msg("connection closed or timed out after %zu bytes", len);
        if (ch == '\n')
            break;
        if (len + 2 > cap) {
            buf = realloc(buf, cap *= 2);
            assert_non_null(buf);
        }
        buf[len++] = ch;
    }
    buf[len] = 0;
    json_t *j = json_loads(buf, 0, NULL);
    if (!j)
        fail_msg("not JSON: %s", buf);
    free(buf);
    return j;
}

/* The reply to request id, counting the job events seen on the way. */
struct seen {
    json_int_t job;
    bool added, success;
};

static void note_event(json_t *m, struct seen *s)
{
    json_t *pr = json_object_get(m, "params");
    assert_string_equal(json_string_value(json_object_get(m, "method")), "collection_update");
    assert_string_equal(json_string_value(json_object_get(pr, "collection")), "core.get_jobs");
    if (s->job && json_integer_value(json_object_get(pr, "id")) != s->job)
        return;
    const char *msg = json_string_value(json_object_get(pr, "msg"));
    const char *state = json_string_value(json_object_get(json_object_get(pr, "fields"), "state"));
    if (strcmp(msg, "added") == 0)
        s->added = true;
    if (strcmp(msg, "changed") == 0 && state && strcmp(state, "SUCCESS") == 0)
        s->success = true;
}

static json_t *reply_to(int fd, json_int_t id, struct seen *s, json_t *early)
{
    for (int i = 0; i < 64; i++) {
        json_t *m = read_json(fd);
        if (json_object_get(m, "id") && json_integer_value(json_object_get(m, "id")) == id)
            return m;
        note_event(m, s);
        json_array_append_new(early, m); /* may belong to a job id not known yet */
    }
    fail_msg("no reply to request %lld", (long long)id);
    return NULL;
}

static void test_subscribe_unix(void **state)
{
    int fd = connect_sock();
    struct seen s = {0};
    json_t *early = json_array();

    send_line(fd, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.subscribe\","
                  "\"params\":[\"core.get_jobs\"]}");
    json_t *r = reply_to(fd, 1, &s, early);
    if (!json_is_string(json_object_get(r, "result"))) {
        char *d = json_dumps(r, JSON_COMPACT);
        fail_msg("core.subscribe over the Unix socket: %s", d);
    }
    json_decref(r);

    send_line(fd, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"core.bulk\","
                  "\"params\":[\"core.ping\",[[],[]]]}");
    r = reply_to(fd, 2, &s, early);
    json_t *res = json_object_get(r, "result");
    assert_non_null(res);
    /* a job id, or (jobs_wait) the per-call results; the job id is
     * then the one of the events */
    s.job = json_is_integer(res) ? json_integer_value(res) : 0;
    json_decref(r);
    s.added = s.success = false;
    size_t i;
    json_t *m;
    json_array_foreach(early, i, m) note_event(m, &s);

    /* wait for the job to finish (its SUCCESS event) */
    for (int k = 0; k < 32 && !s.success; k++) {
        m = read_json(fd);
        note_event(m, &s);
        json_decref(m);
    }
    assert_true(s.added);
    assert_true(s.success);
    json_decref(early);
    close(fd);

    /* the closed client is forgotten: new jobs run, another client still
     * gets answers */
    usleep(100 * 1000);
    fd = connect_sock();
    send_line(fd, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"core.bulk\","
                  "\"params\":[\"core.ping\",[[]]]}");
    early = json_array();
    r = reply_to(fd, 3, &s, early);
    assert_non_null(json_object_get(r, "result"));
    assert_int_equal(json_array_size(early), 0); /* not subscribed: no events */
    json_decref(r);
    json_decref(early);
    close(fd);
}

int main(void)
{
    jobs_init();
    snprintf(dir, sizeof(dir), "/tmp/blockd-apiev.XXXXXX");
    if (!mkdtemp(dir))
        return 1;
    snprintf(path, sizeof(path), "%s/api.sock", dir);
    if (api_server_start(path) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_subscribe_unix),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    api_server_stop();
    jobs_stop();
    unlink(path);
    rmdir(dir);
    return rc;
}
