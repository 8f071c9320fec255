/*
 * Unix socket transport (see server.h). Plain threads rather than the
 * reactors: API handlers block on SQLite and copies, and a handful of
 * local management connections do not need an event loop.
 */
#include "api/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/acceptor.h"
#include "api/api.h"
#include "api/jobs.h"
#include "api/jsonw.h"
#include "core/log.h"
#include "core/util.h"

#define READ_CHUNK (64 * 1024)

struct client {
    struct api_conn conn;
    int fd;
    pthread_mutex_t write_lock; /* replies vs events from other threads */
    char peer[64];
    struct api_client api;
};

static struct {
    bool running;
    struct api_acceptor acceptor;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    struct api_conns conns; /* the client threads */
} srv = {
    .acceptor = {.listen_fd = -1, .wake_pipe = {-1, -1}},
    .conns = API_CONNS_INIT,
};

static int client_write_line(struct client *c, const char *text, size_t len)
{
    pthread_mutex_lock(&c->write_lock);
    int rc = send_all(c->fd, text, len);
    if (rc == 0)
        rc = send_all(c->fd, "\n", 1);
    pthread_mutex_unlock(&c->write_lock);
    return rc;
}

static int client_send(struct api_client *ac, json_t *msg)
{
    struct client *c = ac->transport;
    size_t len = 0;
    char *s = api_json_dumps(msg, &len);
    if (!s)
        return -ENOMEM;
    int rc = client_write_line(c, s, len);
    free(s);
    return rc;
}

static void peer_name(int fd, char *buf, size_t len)
{
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
        snprintf(buf, len, "unix:pid=%d,uid=%u", (int)cred.pid, (unsigned)cred.uid);
    else
        snprintf(buf, len, "unix:fd=%d", fd);
}

static bool blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* Handle one complete line; 0, or -errno when the reply could not be sent. */
static int client_line(struct client *c, char *line, size_t len)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (blank(line, len))
        return 0;
    char *resp = api_handle_text_client(line, len, &c->api);
    if (!resp)
        return 0;
    int rc = client_write_line(c, resp, strlen(resp));
    free(resp);
    return rc;
}

static void client_too_large(struct client *c)
{
    log_info("api: %s: request line over %u bytes; skipping it", c->peer, API_MAX_REQUEST);
    json_t *e = api_error_response(API_INVALID_REQUEST, "request too large (max 16 MiB)", NULL);
    client_send(&c->api, e);
    json_decref(e);
}

static void client_serve(struct client *c)
{
    size_t cap = READ_CHUNK, len = 0;
    char *buf = malloc(cap);
    bool discarding = false; /* inside an over-long line */
    if (!buf) {
        log_error("api: %s: out of memory", c->peer);
        return;
    }
    for (;;) {
        if (cap - len < READ_CHUNK / 2 && !discarding) {
            size_t ncap = cap * 2;
            if (ncap > API_MAX_REQUEST + READ_CHUNK)
                ncap = API_MAX_REQUEST + READ_CHUNK;
            if (ncap > cap) {
                char *n = realloc(buf, ncap);
                if (!n) {
                    log_error("api: %s: out of memory for a %zu-byte request", c->peer, ncap);
                    break;
                }
                buf = n;
                cap = ncap;
            }
        }
        ssize_t n = recv(c->fd, buf + len, cap - len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n < 0 && errno != ECONNRESET)
                log_info("api: %s: read: %s", c->peer, strerror(errno));
            break;
        }
        size_t start = len;
        len += (size_t)n;
        size_t consumed = 0;
        bool failed = false;
        for (;;) {
            char *nl = memchr(buf + start, '\n', len - start);
            if (!nl)
                break;
            size_t end = (size_t)(nl - buf);
            if (discarding) {
                discarding = false;
            } else if (client_line(c, buf + consumed, end - consumed) < 0) {
                failed = true;
                break;
            }
            consumed = end + 1;
            start = consumed;
        }
        if (failed)
            break;
        memmove(buf, buf + consumed, len - consumed);
        len -= consumed;
        if (discarding) {
            len = 0; /* still inside the over-long line */
        } else if (len > API_MAX_REQUEST) {
            client_too_large(c);
            discarding = true;
            len = 0;
        }
        /* Give back the memory of a large request once it is done. */
        if (len == 0 && cap > 4 * READ_CHUNK) {
            char *small = realloc(buf, READ_CHUNK);
            if (small) {
                buf = small;
                cap = READ_CHUNK;
            }
        }
    }
    if (len > 0 && !discarding && !blank(buf, len))
        client_line(c, buf, len); /* a last request without newline */
    free(buf);
}

static void *client_thread(void *arg)
{
    struct client *c = arg;
    api_thread_background();
    log_debug("api: %s: connected", c->peer);
    client_serve(c);
    log_debug("api: %s: disconnected", c->peer);
    jobs_client_closed(&c->api); /* no event is sent to it after this */
    api_conns_remove(&srv.conns, &c->conn);
    close(c->fd);
    pthread_mutex_destroy(&c->write_lock);
    free(c);
    return NULL;
}

static void reject_busy(int fd)
{
    json_t *e = api_error_response(API_INVALID_REQUEST, "too many API connections", NULL);
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    if (s) {
        send_all(fd, s, strlen(s));
        send_all(fd, "\n", 1);
        free(s);
    }
    close(fd);
}

/* On the accept thread (acceptor.h). */
static void accept_one(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)addr;
    (void)addrlen;
    char peer[64];
    peer_name(fd, peer, sizeof(peer));
    pthread_mutex_lock(&srv.conns.lock);
    if (srv.conns.n >= API_SERVER_MAX_CLIENTS || srv.conns.stopping) {
        pthread_mutex_unlock(&srv.conns.lock);
        log_warn("api: %s: refused: %d connections already", peer, API_SERVER_MAX_CLIENTS);
        reject_busy(fd);
        return;
    }
    struct client *c = calloc(1, sizeof(*c));
    if (!c) {
        pthread_mutex_unlock(&srv.conns.lock);
        log_error("api: %s: out of memory", peer);
        close(fd);
        return;
    }
    c->fd = fd;
    pthread_mutex_init(&c->write_lock, NULL);
    memcpy(c->peer, peer, sizeof(c->peer));
    c->api.peer = c->peer;
    c->api.authenticated = true; /* the socket is 0600: local admin only */
    c->api.local = true;
    c->api.transport = c;
    c->api.send = client_send;
    c->api.closes_notified = true; /* jobs_client_closed() on disconnect: may subscribe */

    int rc = thread_start_detached(client_thread, c);
    if (rc != 0) {
        pthread_mutex_unlock(&srv.conns.lock);
        log_error("api: %s: cannot start a thread: %s", peer, strerror(-rc));
        pthread_mutex_destroy(&c->write_lock);
        free(c);
        close(fd);
        return;
    }
    /* (the thread cannot remove it before we unlock) */
    api_conns_add(&srv.conns, &c->conn);
    pthread_mutex_unlock(&srv.conns.lock);
}

/* Is somebody answering on path? */
static bool socket_alive(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    bool alive = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return alive;
}

int api_server_start(const char *path)
{
    if (srv.running)
        return -EALREADY;
    size_t plen = strlen(path);
    if (plen == 0 || plen >= sizeof(srv.path)) {
        log_error("api: socket path too long (max %zu bytes): %s", sizeof(srv.path) - 1, path);
        return -ENAMETOOLONG;
    }
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            log_error("api: %s exists and is not a socket; refusing to replace it", path);
            return -EEXIST;
        }
        if (socket_alive(path)) {
            log_error("api: another daemon is answering on %s", path);
            return -EADDRINUSE;
        }
        unlink(path); /* stale: its daemon is gone */
    }

    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        log_error("api: socket: %s", strerror(e));
        return -e;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, plen + 1);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        log_error("api: bind %s: %s", path, strerror(e));
        close(fd);
        return -e;
    }
    /* chmod before listen(): nobody can connect in between */
    if (chmod(path, 0600) < 0 || listen(fd, 64) < 0) {
        int e = errno;
        log_error("api: chmod/listen %s: %s", sa.sun_path, strerror(e));
        close(fd);
        unlink(path);
        return -e;
    }
    memcpy(srv.path, path, plen + 1);
    srv.conns.stopping = false;
    srv.acceptor.name = srv.path;
    srv.acceptor.accept_flags = SOCK_CLOEXEC;
    srv.acceptor.on_accept = accept_one;
    int rc = api_acceptor_start(&srv.acceptor, fd);
    if (rc < 0) {
        close(fd);
        unlink(path);
        return rc;
    }
    srv.running = true;
    log_info("api: listening on %s", path);
    return 0;
}

/* Wake a client thread out of recv(); each closes its own fd. */
static void client_wake(struct api_conn *conn)
{
    shutdown(container_of(conn, struct client, conn)->fd, SHUT_RDWR);
}

void api_server_stop(void)
{
    if (!srv.running)
        return;
    api_acceptor_stop(&srv.acceptor);
    unlink(srv.path);

    api_conns_stop(&srv.conns, client_wake);

    srv.running = false;
    log_info("api: stopped listening on %s", srv.path);
}
