/*
 * The accept thread both API transports use (server.c: the Unix socket,
 * ws.c: WebSocket): a plain thread that polls a listening socket and a wake
 * pipe and hands every accepted connection to the transport. Each
 * transport keeps its own clients; only the listening loop is shared.
 */
#ifndef BLOCKD_API_ACCEPTOR_H
#define BLOCKD_API_ACCEPTOR_H

#include <pthread.h>
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

#endif
