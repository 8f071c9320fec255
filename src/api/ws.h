/*
 * The remote JSON-RPC transport: WebSocket (RFC 6455) on TCP, optionally
 * over TLS (GnuTLS), at the paths /api/current, /api/vX.Y.Z and /websocket
 * (the TrueNAS endpoints). One JSON-RPC text per text message each way;
 * notifications (collection_update) are sent between responses.
 *
 * Framing, masking, fragmentation, ping/pong and close are libwslay's; the
 * HTTP/1.1 Upgrade handshake is ours (a small parser in ws.c).
 *
 * Threads: one accept thread; one I/O thread per connection (handshake,
 * reading frames, writing queued messages); each request runs on its own
 * short-lived worker thread (handlers may block), at most
 * API_WS_MAX_INFLIGHT per connection at once (the reader then waits, so TCP
 * pushes back), and responses go out as they finish, matched by id.
 *
 * Limits: API_WS_MAX_CLIENTS connections, of which those not yet
 * authenticated are capped in all and per address (core/admit.h: one more
 * from a full address gets HTTP 503; one more when the shared room is full
 * evicts the oldest pending connection of the busiest address); a message
 * over API_MAX_REQUEST gets a -32600 error text and the connection is
 * closed with status 1009; a client that lets more than API_WS_MAX_QUEUED
 * bytes of replies pile up is disconnected; the TLS and HTTP handshake and
 * then auth.login_with_api_key must complete within the handshake deadline
 * (--handshake-timeout) from accept.
 *
 * Authentication: connections start unauthenticated (only API_NO_AUTH
 * methods answer; see auth.h).
 */
#ifndef BLOCKD_API_WS_H
#define BLOCKD_API_WS_H

#include <sys/socket.h>

#include <stddef.h>

#define API_WS_MAX_CLIENTS 64
#define API_WS_MAX_INFLIGHT 20
#define API_WS_MAX_QUEUED (64u * 1024 * 1024)
#define API_WS_HANDSHAKE_MS 10000 /* drain after an oversized message */
#define API_WS_MAX_HEADER 8192

/*
 * Listen on "ADDR:PORT" ("[v6]:PORT", ":PORT"). With cert_file and
 * key_file (PEM) every connection is TLS (wss://). Call from the main
 * thread at start-up. 0 or -errno (logged).
 */
int api_ws_start(const char *listen, const char *cert_file, const char *key_file);

/* Stop accepting, close every connection (calls in progress finish first),
 * join the threads. Safe when not started. */
void api_ws_stop(void);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (exposed for tests):
 * base64(SHA-1(key + RFC 6455 GUID)) into out (29 bytes). 0 or -EIO. */
int ws_accept_key(const char *key, size_t keylen, char out[29]);

/*
 * Parse an HTTP/1.1 Upgrade request head (up to and including the blank
 * line). Returns 0 with the key copied into key (25 bytes), or the HTTP
 * status to answer with (400, 404, 405, 426). Exposed for tests.
 */
int ws_parse_upgrade(const char *head, size_t len, char key[25]);

/*
 * Plain HTTP routes on the WebSocket listener. fn sees each request head
 * (up to and including the blank line) before the upgrade is parsed; it
 * returns 1 with a complete HTTP response in *resp (malloc'd, the listener
 * writes it, frees it and closes the connection), or 0 to let the upgrade
 * proceed. peer_addr: the client's address (NULL if unknown). Runs on the
 * connection's API thread. Call before api_ws_start.
 */
typedef int (*api_http_handler_fn)(const char *head, size_t len, const char *peer,
                                   const struct sockaddr *peer_addr, char **resp, size_t *resp_len);
void api_ws_set_http_handler(api_http_handler_fn fn);

#endif
