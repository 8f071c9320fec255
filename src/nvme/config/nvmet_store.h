/*
 * The stored NVMe-oF configuration: the tables of the nvmet.* objects
 * (nvmet_subsys, nvmet_namespace, nvmet_port, nvmet_host,
 * nvmet_host_subsys, nvmet_port_subsys) and the "nvmet.global.*"
 * settings, on the one transaction path (control/cfgtx.h).
 *
 * Each table is described once by its columns (struct nvs_table): the SQL
 * of every read and write is made from that description, and rows travel
 * as JSON objects whose keys are the column names (plus "id"), typed as
 * the columns say (TEXT a string, INT an integer, BOOL true/false, null
 * for a nullable column without a value). The API layer (nvmet_*.c) and
 * the CONF_NVME publisher (nvmet_publish.c) read the same rows, so a
 * field has one name from the database to the wire.
 *
 * Secrets (the hosts' DH-HMAC-CHAP keys) are sealed by the caller
 * (control/pwenc.h) before nvs_write and opened after reading.
 *
 * Threads: any control thread; reads take the DB lock themselves; writes
 * run inside the caller's cfg_tx.
 */
#ifndef BLOCKD_NVME_CONFIG_NVMET_STORE_H
#define BLOCKD_NVME_CONFIG_NVMET_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/cfgtx.h"

enum nvs_type { NVS_TEXT, NVS_INT, NVS_BOOL };

struct nvs_col {
    const char *name;
    enum nvs_type type;
    bool nullable;
};

struct nvs_table {
    const char *name;   /* the SQL table */
    enum cfg_kind kind; /* recorded by writes and deletes */
    const struct nvs_col *cols;
    size_t ncols;
};

extern const struct nvs_table nvs_subsys, nvs_namespace, nvs_port, nvs_host, nvs_host_subsys,
    nvs_port_subsys;

/* Register the tables (before db_open). */
void nvs_init(void);

/*
 * Rows of t matching where (SQL after WHERE, NULL for all; parameters
 * bound from the arguments as db_run's types say), ordered by id: a new
 * JSON array in *rows. 0 or -errno. Takes the DB lock.
 */
int nvs_select(const struct nvs_table *t, const char *where, json_t **rows, const char *types, ...);
/* Row id of t into *row (new reference). 0, -ENOENT or -errno. */
int nvs_get(const struct nvs_table *t, int64_t id, json_t **row);
/* How many rows of t match where (NULL: all). 0 or -errno. */
int nvs_count(const struct nvs_table *t, const char *where, int64_t *n, const char *types, ...);

/*
 * Inside a cfg_tx: write the columns of t found in row (a missing column
 * is stored as NULL, or its SQL default on insert): id 0 inserts (the new
 * id in *id_out), otherwise updates. Records (t->kind, id). 0, -EEXIST
 * (a unique column is taken), -EINVAL (a value of the wrong type) or
 * -errno.
 */
int nvs_write(const struct nvs_table *t, int64_t id, json_t *row, int64_t *id_out);
/* Inside a cfg_tx: delete the rows of t matching where, recording each
 * deleted id; *n (may be NULL) gets how many. 0 or -errno. */
int nvs_delete(const struct nvs_table *t, size_t *n, const char *where, const char *types, ...);

/*
 * nvmet.global: one settings key per field, "nvmet.global.<name>".
 * basenqn is made once (nvs_global_ensure, "nqn.2011-06.com.truenas:uuid:"
 * and a random UUID, as TrueNAS makes it) and stored.
 * discovery_listen is blockd's: where the discovery-only listener binds
 * ("ADDR:PORT"; "" for none).
 */
#define NVS_NQN_MAX 223
struct nvmet_global {
    char basenqn[NVS_NQN_MAX + 1];
    bool kernel, ana, rdma, xport_referral;
    char discovery_listen[257];
};
/* The stored settings over the defaults. 0 or -errno. */
int nvs_global_load(struct nvmet_global *g);
/* Store every field in one transaction (joins the caller's), recording
 * CFG_NVME_GLOBAL. 0 or -errno. */
int nvs_global_store(const struct nvmet_global *g);
/* Store a basenqn if there is none yet (first start). 0 or -errno. */
int nvs_global_ensure(void);

/* A random RFC 4122 version 4 UUID as text (37 bytes with the NUL). */
void nvs_uuid(char out[37]);

#endif
