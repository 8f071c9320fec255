/*
 * The NBD fixed-newstyle handshake (nbd_handshake.c): the server's hello,
 * the client flags, and option haggling (EXPORT_NAME, ABORT, LIST,
 * STARTTLS, INFO, GO, STRUCTURED_REPLY, LIST/SET_META_CONTEXT) until the
 * client picks an export.
 *
 * Contract: each function works on the connection's input buffer and
 * queues its answers on the connection; it consumes what it has handled.
 * It leaves the connection in ST_OPTIONS (more options) or, after GO or
 * EXPORT_NAME, in ST_TRANSMISSION (nbd_conn_enter_transmission). An option
 * too long to read (but short enough to skip) is answered ERR_TOO_BIG and
 * its data skipped through nc->skip. Every refusal that ends the
 * connection is logged with the peer. Thread: the owner reactor only.
 */
#ifndef BLOCKD_NBD_HANDSHAKE_H
#define BLOCKD_NBD_HANDSHAKE_H

#include "nbd/nbd_conn_internal.h"

/* Queue the server's greeting (magic, IHAVEOPT, handshake flags). 0 or
 * -errno. */
int nbd_handshake_hello(struct nbd_conn *nc);
/* Read the client's 4-byte flags. 0 progress (now ST_OPTIONS), 1 need more
 * input, <0 close (unknown flags, no fixed newstyle). */
int nbd_handshake_client_flags(struct nbd_conn *nc);
/* Read and answer one option. 0 progress, 1 need more input (or the TLS
 * handshake started after STARTTLS), -ECONNABORTED after ABORT (orderly),
 * other <0 close. */
int nbd_handshake_option(struct nbd_conn *nc);

#endif
