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

void nbd_init(void);
int nbd_server_start(const char *listen_override);
void nbd_server_stop(void);

#endif
