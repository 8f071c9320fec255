/* The API transports' accept thread (see acceptor.h). */
#include "api/acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

static void accept_one(struct api_acceptor *a)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = accept4(a->listen_fd, (struct sockaddr *)&ss, &sl, a->accept_flags);
    if (fd < 0) {
        if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED) {
            log_warn("api: accept on %s: %s", a->name, strerror(errno));
            if (errno == EMFILE || errno == ENFILE)
                usleep(100 * 1000); /* let descriptors free up */
        }
        return;
    }
    a->on_accept(fd, (struct sockaddr *)&ss, sl);
}

static void *accept_thread(void *arg)
{
    struct api_acceptor *a = arg;
    struct pollfd fds[2] = {
        {.fd = a->listen_fd, .events = POLLIN},
        {.fd = a->wake_pipe[0], .events = POLLIN},
    };
    for (;;) {
        int n = poll(fds, 2, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            log_error("api: poll: %s", strerror(errno));
            break;
        }
        if (fds[1].revents)
            break;
        if (fds[0].revents & POLLIN)
            accept_one(a);
    }
    return NULL;
}

int api_acceptor_start(struct api_acceptor *a, int listen_fd)
{
    if (pipe2(a->wake_pipe, O_CLOEXEC) < 0) {
        int e = errno;
        log_error("api: pipe: %s", strerror(e));
        a->wake_pipe[0] = a->wake_pipe[1] = -1;
        return -e;
    }
    a->listen_fd = listen_fd;
    int rc = pthread_create(&a->thread, NULL, accept_thread, a);
    if (rc != 0) {
        log_error("api: cannot start the accept thread for %s: %s", a->name, strerror(rc));
        close(a->wake_pipe[0]);
        close(a->wake_pipe[1]);
        a->listen_fd = a->wake_pipe[0] = a->wake_pipe[1] = -1;
        return -rc;
    }
    return 0;
}

void api_acceptor_stop(struct api_acceptor *a)
{
    ssize_t w;
    do {
        w = write(a->wake_pipe[1], "x", 1);
    } while (w < 0 && errno == EINTR);
    pthread_join(a->thread, NULL);
    close(a->listen_fd);
    close(a->wake_pipe[0]);
    close(a->wake_pipe[1]);
    a->listen_fd = a->wake_pipe[0] = a->wake_pipe[1] = -1;
}

void api_conns_add(struct api_conns *conns, struct api_conn *c)
{
    c->next = conns->head;
    conns->head = c;
    conns->n++;
}

void api_conns_remove(struct api_conns *conns, struct api_conn *c)
{
    pthread_mutex_lock(&conns->lock);
    for (struct api_conn **p = &conns->head; *p; p = &(*p)->next) {
        if (*p == c) {
            *p = c->next;
            break;
        }
    }
    conns->n--;
    pthread_cond_broadcast(&conns->idle);
    pthread_mutex_unlock(&conns->lock);
}

void api_conns_stop(struct api_conns *conns, void (*wake)(struct api_conn *c))
{
    pthread_mutex_lock(&conns->lock);
    conns->stopping = true;
    for (struct api_conn *c = conns->head; c; c = c->next)
        wake(c);
    while (conns->n > 0)
        pthread_cond_wait(&conns->idle, &conns->lock);
    pthread_mutex_unlock(&conns->lock);
}
