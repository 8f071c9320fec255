/*
 * The Unix socket transport: line framing, pipelined requests answered in
 * order, malformed JSON, an over-long line skipped while the connection
 * keeps working, parallel connections with a blocking handler, socket
 * mode, stale-socket replacement, refusing a live socket, clean stop.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/api.h"
#include "api/server.h"

static char dir[64];
static char path[96];

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;

/* Blocks until the test opens the gate: proves connections run in parallel. */
static int t_wait(struct api_call *call, json_t *params, json_t **result)
{
    pthread_mutex_lock(&gate_lock);
    while (!gate_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    *result = json_string("opened");
    return 0;
}

static int t_echo(struct api_call *call, json_t *params, json_t **result)
{
    *result = json_incref(params);
    return 0;
}

static int t_peer(struct api_call *call, json_t *params, json_t **result)
{
    *result = json_string(api_call_peer(call));
    return 0;
}

static int t_event(struct api_call *call, json_t *params, json_t **result)
{
    struct api_client *c = api_call_client(call);
    assert_non_null(c);
    assert_non_null(c->send);
    json_t *ev = json_pack("{s:s, s:s, s:{s:s}}", "jsonrpc", "2.0", "method", "collection_update",
                           "params", "msg", "added");
    assert_int_equal(c->send(c, ev), 0);
    json_decref(ev);
    *result = json_true();
    return 0;
}

static const struct api_method methods[] = {
    {"test.wait", "[]", "blocks until released", t_wait, API_READ},
    {"test.echo", "[…]", "echo", t_echo, API_READ},
    {"test.peer", "[]", "peer name", t_peer, API_READ},
    {"test.event", "[]", "sends an event first", t_event, API_READ},
};

static int group_setup(void **state)
{
    api_register(methods, sizeof(methods) / sizeof(methods[0]));
    snprintf(dir, sizeof(dir), "/tmp/blockd-apitest.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof(path), "%s/api.sock", dir);
    return 0;
}

static int group_teardown(void **state)
{
    unlink(path);
    rmdir(dir);
    return 0;
}

static int start(void **state)
{
    return api_server_start(path) == 0 ? 0 : -1;
}

static int stop(void **state)
{
    api_server_stop();
    return 0;
}

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

static void send_all(int fd, const char *s, size_t len)
{
    while (len) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        assert_true(n > 0);
        s += n;
        len -= (size_t)n;
    }
}

/* Read one line (without the newline), malloc'd; NULL on EOF. */
static char *read_line(int fd)
{
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        char ch;
        ssize_t n = recv(fd, &ch, 1, 0);
        if (n <= 0) {
            free(buf);
            return NULL;
        }
        if (ch == '\n') {
            buf[len] = 0;
            return buf;
        }
        if (len + 2 > cap)
            buf = realloc(buf, cap *= 2);
        buf[len++] = ch;
    }
}

static json_t *read_json(int fd)
{
    char *l = read_line(fd);
    assert_non_null(l);
    json_t *j = json_loads(l, 0, NULL);
    if (!j)
        fail_msg("not JSON: %s", l);
    free(l);
    return j;
}

static void test_mode_and_ping(void **state)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);

    int fd = connect_sock();
    const char *req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\"}\n";
    send_all(fd, req, strlen(req));
    json_t *r = read_json(fd);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    json_decref(r);

    req = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"test.peer\"}\r\n";
    send_all(fd, req, strlen(req));
    r = read_json(fd);
    char want[64];
    snprintf(want, sizeof(want), "unix:pid=%d,", (int)getpid());
    assert_non_null(strstr(json_string_value(json_object_get(r, "result")), want));
    json_decref(r);
    close(fd);
}

static void test_pipelined_in_order(void **state)
{
    int fd = connect_sock();
    char *all = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&all, &len);
    for (int i = 0; i < 200; i++)
        fprintf(f, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"test.echo\",\"params\":[%d]}\n", i,
                i);
    /* blank lines and notifications produce no output */
    fprintf(f, "\n   \n{\"jsonrpc\":\"2.0\",\"method\":\"test.echo\"}\n");
    fprintf(f, "{\"jsonrpc\":\"2.0\",\"id\":\"last\",\"method\":\"core.ping\"}\n");
    fclose(f);
    send_all(fd, all, len);
    free(all);
    for (int i = 0; i < 200; i++) {
        json_t *r = read_json(fd);
        assert_int_equal(json_integer_value(json_object_get(r, "id")), i);
        assert_int_equal(json_integer_value(json_array_get(json_object_get(r, "result"), 0)), i);
        json_decref(r);
    }
    json_t *r = read_json(fd);
    assert_string_equal(json_string_value(json_object_get(r, "id")), "last");
    json_decref(r);
    close(fd);
}

static void test_malformed_keeps_connection(void **state)
{
    int fd = connect_sock();
    const char *req = "{not json\n{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"no.such\"}\n"
                      "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"core.ping\"}\n";
    send_all(fd, req, strlen(req));
    json_t *r = read_json(fd);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                     -32700);
    json_decref(r);
    r = read_json(fd);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                     -32601);
    json_decref(r);
    r = read_json(fd);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    json_decref(r);
    close(fd);
}

struct sender {
    int fd;
    size_t bytes;
};

static void *send_big(void *arg)
{
    struct sender *s = arg;
    size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    memset(buf, 'x', chunk);
    buf[0] = '[';
    size_t sent = 0;
    while (sent < s->bytes) {
        size_t n = s->bytes - sent < chunk ? s->bytes - sent : chunk;
        send_all(s->fd, buf, n);
        buf[0] = 'x';
        sent += n;
    }
    const char *tail = "\n{\"jsonrpc\":\"2.0\",\"id\":\"after\",\"method\":\"core.ping\"}\n";
    send_all(s->fd, tail, strlen(tail));
    free(buf);
    return NULL;
}

static void test_too_large_line(void **state)
{
    int fd = connect_sock();
    struct sender s = {.fd = fd, .bytes = 40u << 20}; /* 40 MiB, one line */
    pthread_t t;
    pthread_create(&t, NULL, send_big, &s);
    json_t *r = read_json(fd);
    json_t *e = json_object_get(r, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), -32600);
    assert_string_equal(json_string_value(json_object_get(e, "message")),
                        "request too large (max 16 MiB)");
    json_decref(r);
    r = read_json(fd);
    assert_string_equal(json_string_value(json_object_get(r, "id")), "after");
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    json_decref(r);
    pthread_join(t, NULL);
    close(fd);
}

static void test_parallel_connections(void **state)
{
    gate_open = false;
    int a = connect_sock();
    const char *w = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.wait\"}\n";
    send_all(a, w, strlen(w));
    /* while a's handler blocks, b is served */
    int b = connect_sock();
    const char *p = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"core.ping\"}\n";
    send_all(b, p, strlen(p));
    json_t *r = read_json(b);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "pong");
    json_decref(r);
    struct pollfd pfd = {.fd = a, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 100), 0); /* a still waiting */
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    r = read_json(a);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "opened");
    json_decref(r);
    close(a);
    close(b);
}

static void test_event_send(void **state)
{
    int fd = connect_sock();
    const char *req = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"test.event\"}\n";
    send_all(fd, req, strlen(req));
    json_t *ev = read_json(fd);
    assert_string_equal(json_string_value(json_object_get(ev, "method")), "collection_update");
    json_decref(ev);
    json_t *r = read_json(fd);
    assert_true(json_is_true(json_object_get(r, "result")));
    json_decref(r);
    close(fd);
}

struct worker {
    int index;
    int ok;
};

/* One connection per thread, requests pipelined in bursts, replies checked. */
static void *worker_run(void *arg)
{
    struct worker *w = arg;
    int fd = connect_sock();
    for (int burst = 0; burst < 10; burst++) {
        char *all = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&all, &len);
        for (int i = 0; i < 30; i++)
            fprintf(f, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"test.echo\",\"params\":[%d]}\n",
                    burst * 100 + i, w->index);
        fclose(f);
        send_all(fd, all, len);
        free(all);
        for (int i = 0; i < 30; i++) {
            json_t *r = read_json(fd);
            if (json_integer_value(json_object_get(r, "id")) == burst * 100 + i &&
                json_integer_value(json_array_get(json_object_get(r, "result"), 0)) == w->index)
                w->ok++;
            json_decref(r);
        }
    }
    close(fd);
    return NULL;
}

static void test_many_clients(void **state)
{
    enum { N = 16 };
    pthread_t t[N];
    struct worker w[N];
    for (int i = 0; i < N; i++) {
        w[i] = (struct worker){.index = i};
        pthread_create(&t[i], NULL, worker_run, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(w[i].ok, 300);
    }
}

static void test_refuse_live_socket(void **state)
{
    /* the server from setup is live on path */
    assert_int_equal(api_server_start(path), -EALREADY);
}

static void test_stale_and_not_socket(void **state)
{
    api_server_stop();
    struct stat st;
    assert_int_equal(stat(path, &st), -1); /* removed on stop */

    /* a stale socket (bound, nobody listening) is replaced */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(fd);
    assert_int_equal(api_server_start(path), 0);
    int c = connect_sock();
    close(c);
    api_server_stop();

    /* a live socket of somebody else is not taken over */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(fd, 1), 0);
    assert_int_equal(api_server_start(path), -EADDRINUSE);
    close(fd);
    unlink(path);

    /* a regular file is never replaced */
    FILE *f = fopen(path, "w");
    fclose(f);
    assert_int_equal(api_server_start(path), -EEXIST);
    unlink(path);

    assert_int_equal(api_server_start(path), 0); /* for teardown */
}

static void test_stop_with_idle_clients(void **state)
{
    int a = connect_sock();
    int b = connect_sock();
    /* make sure both are accepted (a backlog entry would just be reset) */
    const char *p = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.ping\"}\n";
    send_all(a, p, strlen(p));
    send_all(b, p, strlen(p));
    json_decref(read_json(a));
    json_decref(read_json(b));
    api_server_stop(); /* must not hang on idle connections */
    char ch;
    assert_int_equal(recv(a, &ch, 1, 0), 0);
    assert_int_equal(recv(b, &ch, 1, 0), 0);
    close(a);
    close(b);
    assert_int_equal(api_server_start(path), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mode_and_ping, start, stop),
        cmocka_unit_test_setup_teardown(test_pipelined_in_order, start, stop),
        cmocka_unit_test_setup_teardown(test_malformed_keeps_connection, start, stop),
        cmocka_unit_test_setup_teardown(test_too_large_line, start, stop),
        cmocka_unit_test_setup_teardown(test_parallel_connections, start, stop),
        cmocka_unit_test_setup_teardown(test_event_send, start, stop),
        cmocka_unit_test_setup_teardown(test_many_clients, start, stop),
        cmocka_unit_test_setup_teardown(test_refuse_live_socket, start, stop),
        cmocka_unit_test_setup_teardown(test_stale_and_not_socket, start, stop),
        cmocka_unit_test_setup_teardown(test_stop_with_idle_clients, start, stop),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
