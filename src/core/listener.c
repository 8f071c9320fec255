#include "core/listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "core/log.h"
#include "core/reactor.h"
#include "core/util.h"

struct listener {
    struct reactor_handler handler;
    struct reactor *reactor;
    int fd;
    int port;
    char name[128];
    listener_accept_fn fn;
    void *arg;
};

static void on_accept(struct reactor_handler *h, uint32_t events)
{
    struct listener *l = (struct listener *)h;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage peer, local;
        socklen_t plen = sizeof(peer), llen = sizeof(local);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                return;
            /* EMFILE etc.: log and keep the listener; the client sees a reset later. */
            log_warn("%s: accept: %s", l->name, strerror(errno));
            return;
        }
        if (getsockname(fd, (struct sockaddr *)&local, &llen) < 0)
            llen = 0;
        l->fn(fd, (struct sockaddr *)&peer, plen, (struct sockaddr *)&local, llen, l->arg);
    }
}

/* Add the listening l to reactor 0 and hand it out in *out; on failure
 * its socket is closed and l freed. 0 or -errno. */
static int listener_register(struct listener *l, struct listener **out)
{
    int rc = -ENXIO;
    l->reactor = reactor_get(0);
    if (l->reactor) {
        l->handler.on_event = on_accept;
        rc = reactor_add(l->reactor, l->fd, EPOLLIN, &l->handler);
    }
    if (rc) {
        close(l->fd);
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* A TCP socket bound to addr_port with the options of opts (not yet
 * listening): 0 with *fdp, or -errno (not logged: callers decide). */
static int tcp_bind(const char *addr_port, unsigned opts, int *fdp)
{
    struct sockaddr_storage ss;
    socklen_t len;

    *fdp = -1; /* set on every path: errno may read as 0 to the compiler */
    if (parse_host_port(addr_port, &ss, &len) < 0)
        return -EINVAL;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if ((opts & LISTENER_REUSEPORT) &&
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (ss.ss_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    *fdp = fd;
    return 0;
}

int listener_open_tcp(const char *addr_port, listener_accept_fn fn, void *arg,
                      struct listener **out)
{
    return listener_open_tcp_opts(addr_port, 0, fn, arg, out);
}

int listener_open_tcp_opts(const char *addr_port, unsigned opts, listener_accept_fn fn, void *arg,
                           struct listener **out)
{
    struct listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->fn = fn;
    l->arg = arg;
    snprintf(l->name, sizeof(l->name), "%s", addr_port);
    int rc = tcp_bind(addr_port, opts, &l->fd);
    if (rc == -EINVAL) {
        log_error("listen address '%s' is not ADDR:PORT", addr_port);
        free(l);
        return rc;
    }
    if (rc == 0 && listen(l->fd, 1024) < 0) {
        rc = -errno;
        close(l->fd);
    }
    if (rc < 0) {
        log_error("cannot listen on %s: %s", addr_port, strerror(-rc));
        free(l);
        return rc;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(l->fd, (struct sockaddr *)&bound, &blen) == 0)
        l->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                                   : ((struct sockaddr_in6 *)&bound)->sin6_port);
    return listener_register(l, out);
}

int listener_probe_tcp(const char *addr_port, unsigned opts)
{
    int fd;
    int rc = tcp_bind(addr_port, opts, &fd);
    if (rc == 0)
        close(fd);
    return rc;
}

/* Only a socket that nobody listens on may be replaced: a regular file,
 * a directory or a live socket at path is an error, not something to
 * unlink. */
static int unix_remove_stale(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        log_error("cannot listen on %s: it exists and is not a socket; not replacing it", path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    memcpy(sun.sun_path, path, strlen(path) + 1);
    int rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0 ? -EADDRINUSE : -errno;
    close(fd);
    if (rc != -ECONNREFUSED) {
        log_error("cannot listen on %s: %s", path,
                  rc == -EADDRINUSE ? "something is listening on it" : strerror(-rc));
        return rc == -EADDRINUSE ? rc : -EEXIST;
    }
    if (unlink(path) < 0 && errno != ENOENT)
        return -errno;
    log_info("removed the stale socket %s", path);
    return 0;
}

int listener_open_unix(const char *path, unsigned mode, listener_accept_fn fn, void *arg,
                       struct listener **out)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(sun.sun_path))
        return -ENAMETOOLONG;
    memcpy(sun.sun_path, path, strlen(path) + 1);
    struct listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->fn = fn;
    l->arg = arg;
    snprintf(l->name, sizeof(l->name), "unix:%s", path);
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        int e = errno;
        free(l);
        return -e;
    }
    int rc = unix_remove_stale(path);
    if (rc < 0) {
        close(l->fd);
        free(l);
        return rc;
    }
    /* chmod between bind and listen: until listen() nobody can connect
     * (ECONNREFUSED), so no one gets in under the umask's mode. (Not a
     * umask change: that is process-wide and races with other threads.) */
    const char *what = "bind";
    int brc = bind(l->fd, (struct sockaddr *)&sun, sizeof(sun));
    if (brc == 0) {
        what = "chmod";
        brc = chmod(path, mode);
    }
    if (brc == 0) {
        what = "listen";
        brc = listen(l->fd, 1024);
    }
    if (brc < 0) {
        int e = errno;
        log_error("cannot listen on %s: %s: %s", path, what, strerror(e));
        if (strcmp(what, "bind") != 0)
            unlink(path);
        close(l->fd);
        free(l);
        return -e;
    }
    return listener_register(l, out);
}

struct close_msg {
    struct reactor_msg msg;
    struct listener *l;
    sem_t done;
};

static void close_on_reactor(struct reactor_msg *m)
{
    struct close_msg *cm = (struct close_msg *)m;
    reactor_remove(cm->l->reactor, cm->l->fd);
    sem_post(&cm->done);
}

void listener_close(struct listener *l)
{
    if (!l)
        return;
    struct reactor *r = l->reactor;
    if (reactor_self() == r) {
        reactor_remove(r, l->fd);
    } else {
        /* Remove on the owning thread so no accept callback is running. */
        struct close_msg cm = {.msg.fn = close_on_reactor, .l = l};
        sem_init(&cm.done, 0, 0);
        reactor_post(r, &cm.msg);
        while (sem_wait(&cm.done) < 0 && errno == EINTR)
            ;
        sem_destroy(&cm.done);
    }
    close(l->fd);
    free(l);
}

int listener_port(const struct listener *l)
{
    return l->port;
}

int sock_bound_addr(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char ip[INET6_ADDRSTRLEN];
    if (len)
        buf[0] = '\0';
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return -errno;
    const void *a;
    unsigned port;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)&ss;
        a = &s4->sin_addr;
        port = ntohs(s4->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)&ss;
        a = &s6->sin6_addr;
        port = ntohs(s6->sin6_port);
    } else {
        return -EAFNOSUPPORT;
    }
    if (!inet_ntop(ss.ss_family, a, ip, sizeof(ip)))
        return -errno;
    int n = snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int listener_bound_addr(const struct listener *l, char *buf, size_t len)
{
    return sock_bound_addr(l->fd, buf, len);
}
