/* Internal to src/nbd: published state and listeners (nbd_server.c). */
#ifndef BLOCKD_NBD_SERVER_H
#define BLOCKD_NBD_SERVER_H

#include <stddef.h>

#include "nbd/nbd_export.h"

#define NBD_DEFAULT_LISTEN "0.0.0.0:10809"
/* The NBD Unix socket: the daemon's user and group may connect, others not
 * (NBD has no authentication of its own; docs/nbd.md, docs/security.md). */
#define NBD_UNIX_SOCKET_MODE 0660
#define NBD_DEFAULT_MAX_REQUEST (32u << 20)
#define NBD_DEFAULT_MAX_INFLIGHT 64u
#define NBD_DEFAULT_MAX_CONNECTIONS 1024u
#define NBD_DEFAULT_PAYLOAD_BUDGET (256u << 20)

struct nbd_export_table *nbd_export_table_new(size_t count);

/* Open/replace listeners; NULL or "" closes that one. Thread: control. */
int nbd_listen_apply(const char *tcp, const char *unix_sock);
void nbd_listen_close(void);
int nbd_listen_port(void);

#endif
