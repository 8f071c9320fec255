/*
 * The accept thread both API transports use (server.c: the Unix socket,
 * ws.c: WebSocket): a plain thread that polls a listening socket and a wake
 * pipe and hands every accepted connection to the transport. Each
 * transport keeps its own clients, listed in a struct api_conns (below)
 * so that its stop can wake them all and wait for their threads to end.
 */
#ifndef BLOCKD_API_ACCEPTOR_H
#define BLOCKD_API_ACCEPTOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct api_acceptor {
    /* Set by the transport before api_acceptor_start(): */
    const char *name; /* the socket path or address, for logs; outlives the acceptor */
    int accept_flags; /* accept4() flags, e.g. SOCK_CLOEXEC */
    /* Called on the accept thread with each new connection, which it owns
     * from then on (closes it on refusal). */
    void (*on_accept)(int fd, const struct sockaddr *addr, socklen_t addrlen);
    /* Owned by the acceptor: */
    int listen_fd;
    int wake_pipe[2];
    pthread_t thread;
};

/*
 * Start the accept thread on listen_fd (bound and listening). 0, or -errno
 * (logged) with listen_fd left open for the caller to close. Start-up only.
 */
int api_acceptor_start(struct api_acceptor *a, int listen_fd);

/*
 * Wake and join the accept thread (no on_accept runs after), then close the
 * listening socket and the wake pipe. The caller stops its clients
 * afterwards. Shutdown only.
 */
void api_acceptor_stop(struct api_acceptor *a);

/*
 * A transport's open connections: each client struct holds a struct
 * api_conn (container_of gets back to it). lock guards the list, n and
 * stopping; the transport holds it around its own checks on accepting.
 */
struct api_conn {
    struct api_conn *next;
};

struct api_conns {
    pthread_mutex_t lock;
    pthread_cond_t idle; /* signalled when a connection is removed */
    struct api_conn *head;
    size_t n;
    bool stopping; /* api_conns_stop has begun: accept no more */
};

#define API_CONNS_INIT                                                                             \
    {                                                                                              \
        .lock = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER                        \
    }

/* Add c, whose thread has started. The caller holds conns->lock. */
void api_conns_add(struct api_conns *conns, struct api_conn *c);

/* Remove c as its thread ends (takes conns->lock); wakes api_conns_stop. */
void api_conns_remove(struct api_conns *conns, struct api_conn *c);

/*
 * Set stopping, call wake(c) on every connection (with conns->lock held:
 * it only shuts the socket down or signals the thread), then wait until
 * every connection is removed. Shutdown only, after api_acceptor_stop.
 */
void api_conns_stop(struct api_conns *conns, void (*wake)(struct api_conn *c));

#endif
