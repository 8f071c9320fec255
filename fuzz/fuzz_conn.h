/*
 * Shared by the connection fuzz targets: talk to a real server connection
 * over a socketpair the way a peer would.
 */
#ifndef BLOCKD_FUZZ_CONN_H
#define BLOCKD_FUZZ_CONN_H

#include <stddef.h>
#include <stdint.h>

/* fd is the client end of a socketpair whose other end the caller has
 * handed to a server connection. Sends data (never SIGPIPE: the server may
 * hang up first), reads and discards everything the server answers, and
 * returns once the server closed or both sides have gone quiet; closes fd.
 * The caller then waits until the server side is freed. */
void fuzz_conn_talk(int fd, const uint8_t *data, size_t len);

#endif
