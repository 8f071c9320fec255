/*
 * The stored NBD configuration (table nbd_export, settings "nbd.global.*"):
 * the SQL of the NBD exports behind functions that take and return a
 * struct, on the one transaction path (control/cfgtx.h). The API layer
 * (nbd/config/nbd_config.c) decodes JSON into struct nbd_export_row and encodes
 * rows back; the NBD server's publisher rebuilds its export table when a
 * CFG_NBD_EXPORT change commits. Any thread; each call takes the DB lock.
 */
#ifndef BLOCKD_CONFIG_NBDSTORE_H
#define BLOCKD_CONFIG_NBDSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One export as stored. Strings are owned (nbd_export_row_clear frees
 * them); dataset XOR path is set; tls is "off", "allow" or "require". */
struct nbd_export_row {
    int64_t id;
    char *name, *dataset, *path, *description, *tls;
    bool readonly, multi_conn, enabled;
};

/* Register the nbd_export table (before db_open). */
void nbdstore_init(void);
void nbd_export_row_clear(struct nbd_export_row *r);
void nbd_export_rows_free(struct nbd_export_row *rows, size_t n);
/* Every export, ordered by id: a new array in *out. 0 or -EIO/-ENOMEM. */
int nbd_export_rows_load(struct nbd_export_row **out, size_t *n);
/* Export id into *out (cleared by the caller). 0, -ENOENT or -errno. */
int nbd_export_row_get(int64_t id, struct nbd_export_row *out);
/* The id of the export called name / of an export of dataset (exactly
 * that name; the lowest id when several): 0 with *id, -ENOENT or -errno. */
int nbd_export_find_name(const char *name, int64_t *id);
int nbd_export_find_dataset(const char *dataset, int64_t *id);
/* Store r in one transaction: r->id 0 inserts (the new id in *id_out),
 * otherwise updates. Publishes CFG_NBD_EXPORT on commit. 0, -EEXIST (the
 * name is taken) or -errno. */
int nbd_export_row_store(const struct nbd_export_row *r, int64_t *id_out);
/* Delete export id in one transaction (CFG_NBD_EXPORT deleted). 0 or -errno. */
int nbd_export_row_delete(int64_t id);
/* Delete every export of dataset (exactly that name) in one transaction
 * (CFG_NBD_EXPORT deleted, each); *n gets how many. 0 or -errno. */
int nbd_export_rows_delete_dataset(const char *dataset, size_t *n);
/*
 * Inside a dataset rename's transaction: exports of old_name (with
 * subtree, of its children and snapshots, and path exports of files in
 * its directory) follow to new_name; records CFG_NBD_EXPORT (all) in the
 * thread's transaction when a row moved. DB locked. 0 or -errno.
 */
int nbd_export_rows_rename(const char *old_name, const char *new_name, bool subtree);

/*
 * The NBD server's settings (nbd.global.config/update): one settings key
 * per field, "nbd.global.<name>" (booleans "1"/"0", numbers in decimal).
 * A database of an older version kept them as one JSON text under
 * "nbd.global": the schema moves it into the keys at the first start.
 * The string bounds are the API's (nbd/config/nbd_config.c checks them first).
 */
struct nbd_global {
    char listen[257];
    char unix_socket[108];
    char tls_cert[4097], tls_key[4097], tls_ca[4097], tls_psk_file[4097];
    bool tls_verify_peer;
    uint32_t max_connections, max_request_size, max_inflight;
};

/* The fields, for the stores and the API's encoder/decoder alike. */
enum nbd_global_type { NBD_GLOBAL_STR, NBD_GLOBAL_BOOL, NBD_GLOBAL_U32 };
struct nbd_global_field {
    const char *name;
    enum nbd_global_type type;
    size_t off, size; /* in struct nbd_global */
};
extern const struct nbd_global_field nbd_global_fields[];
extern const size_t nbd_global_nfields;

/* The stored fields over what g holds (the caller's defaults); a stored
 * value that does not fit its field is left out (logged). 0 or -errno. */
int nbd_global_load(struct nbd_global *g);
/* Store every field of g in one transaction (CFG_NBD_GLOBAL). 0 or -errno. */
int nbd_global_store(const struct nbd_global *g);

#endif
