/*
 * NBD exports as the server sees them: immutable, refcounted objects in an
 * immutable, refcounted table, the NBD part (CONF_NBD) of the
 * configuration generation (control/confgen.h), that the config side
 * (nbd_config.c) rebuilds after every change. Connections look an export
 * up once, at option time (INFO/GO/EXPORT_NAME/LIST); the I/O path
 * touches no lock.
 *
 * Server-wide settings (limits, TLS credentials) are published the same way
 * and taken by each connection when it is accepted.
 */
#ifndef BLOCKD_NBD_EXPORT_H
#define BLOCKD_NBD_EXPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/confgen.h"
#include "core/util.h"
#include "store/volume.h"

enum nbd_tls_mode { NBD_TLS_OFF = 0, NBD_TLS_ALLOW = 1, NBD_TLS_REQUIRE = 2 };

struct nbd_export {
    atomic_int refs;
    int64_t id;
    char *name; /* "" is the default export */
    char *description;
    char *dataset; /* "pool/vol[@snap]" or NULL */
    char *path;    /* raw file/device or NULL */
    bool readonly; /* as configured, or forced by a snapshot */
    bool multi_conn;
    bool enabled;
    enum nbd_tls_mode tls;
    struct volume *vol; /* NULL when it could not be opened (logged) */
    /* Not opened because its RBD pool is not reachable yet (connecting at
     * start, or a lost cluster): listed, and a connection waits a bounded
     * time for it, then gets this reason. NULL otherwise. */
    char *unavailable;
    /* May the volume have holes? Reads consult extents only when true; set
     * by TRIM/WRITE_ZEROES through NBD and copied into the next generation. */
    atomic_bool maybe_sparse;
};

void nbd_export_ref(struct nbd_export *e);
void nbd_export_unref(struct nbd_export *e);

/* part.objs is objs (room for as many as exports, allocated with the
 * table): (id, export) sorted by id, for conf_apply, filled by
 * nbd_export_table_seal. */
struct nbd_export_table {
    struct conf_part part;
    struct conf_obj *objs;
    size_t count;
    struct nbd_export *exports[]; /* each holds a reference */
};

/* The current table (a new reference; an empty table before any was
 * published, never NULL). Thread-safe. */
struct nbd_export_table *nbd_exports_current(void);
void nbd_export_table_unref(struct nbd_export_table *t);
/* CLEANUP(nbd_export_table_unref) struct nbd_export_table *t = ... (core/util.h) */
DEFINE_CLEANUP(struct nbd_export_table, nbd_export_table_unref)
/* Find an enabled export by name in t (no reference taken). */
struct nbd_export *nbd_export_table_find(const struct nbd_export_table *t, const char *name,
                                         size_t len);
/* Index t for conf_apply (part.objs by id) once its exports are in. */
void nbd_export_table_seal(struct nbd_export_table *t);
/* Replace the published table (takes ownership of t), as a new
 * generation: conf_apply closes the connections of exports that left.
 * Any non-reactor thread. */
void nbd_exports_publish(struct nbd_export_table *t);

struct tls_creds;

struct nbd_settings {
    atomic_int refs;
    uint32_t max_request;  /* bytes per READ/WRITE */
    uint32_t max_inflight; /* requests per connection */
    uint32_t max_connections;
    struct tls_creds *tls; /* NULL: STARTTLS answered ERR_UNSUP */
};

struct nbd_settings *nbd_settings_current(void);
void nbd_settings_unref(struct nbd_settings *s);
void nbd_settings_publish(struct nbd_settings *s);

/* Connections currently using export name (any generation). Thread-safe. */
unsigned nbd_export_connections(const char *name);
/* Close every connection using export name (from any thread). */
void nbd_export_close_connections(const char *name);

#endif
