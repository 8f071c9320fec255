/* NBD connections (nbd_conn.c). */
#ifndef BLOCKD_NBD_CONN_H
#define BLOCKD_NBD_CONN_H

#include <sys/socket.h>

/* Take an accepted socket (listener callback, reactor 0's thread): enforce
 * max_connections, then hand it to the next reactor. Owns fd. */
void nbd_conn_accept(int fd, const struct sockaddr *peer, socklen_t peerlen);
/* NBD connections alive now (any state). Thread-safe. */
unsigned nbd_conn_live(void);

#endif
