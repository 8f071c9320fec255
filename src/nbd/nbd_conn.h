/* NBD connections (nbd_conn.c). */
#ifndef BLOCKD_NBD_CONN_H
#define BLOCKD_NBD_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Take an accepted socket (listener callback, reactor 0's thread): admit it
 * (max_connections in all, and the pending caps of core/admit.h), then hand
 * it to the next reactor, where the handshake deadline starts. Owns fd. */
void nbd_conn_accept(int fd, const struct sockaddr *peer, socklen_t peerlen);
/* NBD connections alive now (any state). Thread-safe. */
unsigned nbd_conn_live(void);
/* Shutdown, step 1: refuse new connections; close those still in their
 * handshake; the others stop reading requests, finish the ones started,
 * send their replies, then close. Asynchronous (posted to each owner
 * reactor); wait with nbd_conn_live(). Once only. Thread: control. */
void nbd_conn_drain_all(void);
/* Shutdown, step 2 (after the drain deadline): close every connection now.
 * Asynchronous. Thread: any. */
void nbd_conn_close_all(void);
/* Payload bytes all connections hold now (see nbd_set_payload_budget). */
size_t nbd_payload_held(void);

/* One NBD connection as seen now (a copy; for nbd.global.sessions and
 * `blockctl session list`). Counters are logical bytes: a read hole counts
 * as read, though no data crosses the wire for it. */
struct nbd_session_info {
    char peer[80];     /* "addr:port" or "unix" */
    char export[256];  /* "" before the client chose one (or the default) */
    bool transmission; /* past the handshake */
    bool tls;
    bool structured;      /* structured replies negotiated */
    bool base_allocation; /* the base:allocation meta context */
    bool readonly;
    bool multi_conn;
    uint64_t size;
    uint64_t connected_at; /* Unix seconds */
    uint64_t requests;     /* commands received */
    uint64_t bytes_read;
    uint64_t bytes_written;
};

/* Snapshot of every live connection. *out is malloc'd (caller frees);
 * returns the count or -errno. Thread-safe. */
int nbd_sessions_list(struct nbd_session_info **out);

#endif
