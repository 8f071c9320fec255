/*
 * The NBD front-end: exports (config + API methods nbd.export.* and
 * nbd.global.*) and the server. Call order in the daemon:
 *
 *   nbd_init();                      before db_open() (registers the schema
 *                                    and the API methods)
 *   ... db_open(), datasets ready, reactors and iopool started ...
 *   nbd_server_start(listen_arg);    loads exports and settings from the DB,
 *                                    opens the listeners (listen_arg, e.g.
 *                                    from --nbd-listen, overrides the
 *                                    configured TCP address; NULL: config)
 *   ...
 *   nbd_server_stop();               closes listeners and connections and
 *                                    releases the exports (before reactors stop)
 */
#ifndef BLOCKD_NBD_NBD_H
#define BLOCKD_NBD_NBD_H

#include <stddef.h>

void nbd_init(void);
int nbd_server_start(const char *listen_override);
void nbd_server_stop(void);
/* Graceful shutdown, before nbd_server_stop(): close the listeners, let
 * every connection finish the requests it has started and send their
 * replies (no new requests are read), waiting up to timeout_ms; then close
 * what is left. Returns the number of connections that had to be closed at
 * the deadline. Thread: control (the main thread at SIGTERM). */
unsigned nbd_server_drain(unsigned timeout_ms);
/* Global budget of payload bytes held by all NBD connections together (read
 * data not yet sent, write data not yet written); past it connections stop
 * reading new requests until others release some. 0 keeps the current
 * value (default 256 MiB). Thread-safe. */
void nbd_set_payload_budget(size_t bytes);

#endif
