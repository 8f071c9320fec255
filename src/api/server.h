/*
 * The local JSON-RPC transport: a Unix stream socket, one JSON text per
 * line in each direction, many requests per connection answered in order.
 *
 * Threads: api_server_start() starts one accept thread; every client
 * connection gets its own thread, which reads a line, runs the handler
 * (handlers may block: SQLite, file copies) and writes the reply. Calls
 * from different connections run in parallel.
 *
 * Limits: a line longer than API_MAX_REQUEST (16 MiB) is answered with a
 * -32600 "request too large (max 16 MiB)" error and skipped up to its
 * newline; the connection keeps working. At most API_SERVER_MAX_CLIENTS
 * connections are served at once; one more is sent an error line and
 * closed.
 *
 * Peers are named "unix:pid=N,uid=U" (SO_PEERCRED) in log lines.
 */
#ifndef BLOCKD_API_SERVER_H
#define BLOCKD_API_SERVER_H

#define API_SERVER_MAX_CLIENTS 256

/*
 * Listen on path (mode 0600). A stale socket file (nobody answers) is
 * replaced; if a live daemon answers on it, or path exists and is not a
 * socket, start fails with -EADDRINUSE / -EEXIST (logged). One server per
 * process. Call from the main thread at start-up. 0 or -errno.
 */
int api_server_start(const char *path);

/*
 * Stop accepting, close every client connection (a call in progress
 * finishes first and its reply is dropped if the peer is gone), join the
 * threads and remove the socket file. Safe to call when not started.
 */
void api_server_stop(void);

#endif
