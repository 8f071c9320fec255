/*
 * Listening sockets. Accepts run on reactor 0; each accepted socket is
 * handed to the accept callback (on reactor 0's thread), which normally
 * picks reactor_next() and calls conn_adopt().
 */
#ifndef BLOCKD_CORE_LISTENER_H
#define BLOCKD_CORE_LISTENER_H

#include <stddef.h>
#include <sys/socket.h>

struct listener;

typedef void (*listener_accept_fn)(int fd, const struct sockaddr *peer, socklen_t peerlen,
                                   const struct sockaddr *local, socklen_t locallen, void *arg);

/* "ADDR:PORT" (IPv4, [IPv6], or ":PORT" for all). 0 or -errno (logged). */
int listener_open_tcp(const char *addr_port, listener_accept_fn fn, void *arg,
                      struct listener **out);
/* listener_open_tcp_opts / listener_probe_tcp options. LISTENER_REUSEPORT
 * sets SO_REUSEPORT, so that sockets of this process on the same port may
 * overlap (a wildcard address and a specific one both listening: the
 * kernel hands each connection to the most specific). Only sockets of the
 * same user that also set it can share the address. */
#define LISTENER_REUSEPORT 0x1u
/* listener_open_tcp with options. 0 or -errno (logged). Any thread. */
int listener_open_tcp_opts(const char *addr_port, unsigned opts, listener_accept_fn fn, void *arg,
                           struct listener **out);
/* Whether addr_port can be bound now with opts: binds a throwaway socket
 * (not listening, so no connection can reach it) and closes it. 0, or the
 * bind's -errno (-EADDRINUSE, -EADDRNOTAVAIL, -EACCES, -EINVAL for a bad
 * address); nothing is logged. Any thread; does not block. */
int listener_probe_tcp(const char *addr_port, unsigned opts);
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
/* Room for "[IPv6]:PORT" and its NUL. */
#define LISTENER_ADDR_MAX 64
/* The address a TCP listener is actually bound to, as "IP:PORT" (IPv6 as
 * "[IP]:PORT"): the port the kernel chose for ":0", so that log lines name
 * what a client can connect to. Writes at most len bytes, NUL-terminated;
 * 0 or -errno (buf then holds ""). */
int listener_bound_addr(const struct listener *l, char *buf, size_t len);
/* The same for any bound socket fd (getsockname). */
int sock_bound_addr(int fd, char *buf, size_t len);

#endif
