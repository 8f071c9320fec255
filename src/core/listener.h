/*
 * Listening sockets. Accepts run on reactor 0; each accepted socket is
 * handed to the accept callback (on reactor 0's thread), which normally
 * picks reactor_next() and calls conn_adopt().
 */
#ifndef BLOCKD_CORE_LISTENER_H
#define BLOCKD_CORE_LISTENER_H

#include <sys/socket.h>

struct listener;

typedef void (*listener_accept_fn)(int fd, const struct sockaddr *peer, socklen_t peerlen,
                                   const struct sockaddr *local, socklen_t locallen, void *arg);

/* "ADDR:PORT" (IPv4, [IPv6], or ":PORT" for all). 0 or -errno (logged). */
int listener_open_tcp(const char *addr_port, listener_accept_fn fn, void *arg,
                      struct listener **out);
/* Unix stream socket at path, mode applied before anyone can connect.
 * Something already at path is replaced only if it is a socket nobody
 * listens on (connect gets ECONNREFUSED); else -EEXIST (not a socket, or
 * not answering for another reason) or -EADDRINUSE (alive), logged. */
int listener_open_unix(const char *path, unsigned mode, listener_accept_fn fn, void *arg,
                       struct listener **out);
/* Stop accepting and close. Thread-safe; waits until no accept callback runs. */
void listener_close(struct listener *l);
/* The bound port (for ":0" in tests). */
int listener_port(const struct listener *l);

#endif
