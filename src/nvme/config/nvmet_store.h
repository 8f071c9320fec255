/*
 * The stored NVMe-oF configuration: the tables of the nvmet.* objects
 * (nvmet_subsys, nvmet_namespace, nvmet_port, nvmet_host,
 * nvmet_host_subsys, nvmet_port_subsys) and the "nvmet.global.*"
 * settings, on the one transaction path (control/cfgtx.h).
 *
 * Each object is a C struct (below) described once by its api_field
 * table with codecs (api/fields.h): the same table validates the API's
 * body (its first ninput fields), decodes it over the defaults or the
 * stored object, encodes the API row, and names the table's columns, so
 * that the SQL of every read and write is made from it (a column is named
 * as its field; booleans and integers are INTEGER, the rest TEXT). A
 * field has one name from the database to the wire.
 *
 * Secrets (the hosts' DH-HMAC-CHAP keys) are sealed by the host module
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

#include "api/fields.h"
#include "control/cfgtx.h"

/* A nullable integer (TrueNAS's "int | None"). */
struct nvs_opt {
    bool set;
    int64_t v;
};
/* Codecs for nullable members: a bool stored in an int (-1 null, 0, 1),
 * a struct nvs_opt, an enum index in an int (-1 null). */
extern const struct api_codec nvs_codec_opt_bool, nvs_codec_opt_i64, nvs_codec_opt_enum;

/* Every object struct starts with its row id. */
struct nvmet_subsys {
    int64_t id;
    char *name, *subnqn, *ieee_oui, *serial;
    bool allow_any_host;
    int pi_enable, ana; /* -1: null */
    struct nvs_opt qid_max;
};
enum nvmet_device_type { NVMET_ZVOL, NVMET_FILE };
struct nvmet_namespace {
    int64_t id;
    struct nvs_opt nsid; /* set once stored */
    int64_t subsys_id;
    int device_type; /* enum nvmet_device_type */
    char *device_path;
    struct nvs_opt filesize;
    bool enabled;
    char *device_uuid, *device_nguid;
};
struct nvmet_port {
    int64_t id;
    int addr_trtype; /* 0 TCP, 1 RDMA, 2 FC */
    int64_t addr_trsvcid;
    char *addr_traddr;
    struct nvs_opt inline_data_size, max_queue_size;
    int pi_enable;
    bool enabled;
    int64_t index;
    char *addr_adrfam; /* "IPV4" / "IPV6" */
};
struct nvmet_host {
    int64_t id;
    char *hostnqn;
    /* sealed (control/pwenc.h) as stored; a body's new key is clear until
     * the host's check seals it; NULL: none */
    char *dhchap_key, *dhchap_ctrl_key;
    int dhchap_dhgroup; /* -1: null */
    int dhchap_hash;
};
/* nvmet_host_subsys (other_id = host_id) and nvmet_port_subsys (port_id). */
struct nvmet_link {
    int64_t id;
    int64_t other_id;
    int64_t subsys_id;
};

struct nvs_table {
    const char *name;   /* the SQL table */
    enum cfg_kind kind; /* recorded by writes and deletes */
    size_t size;        /* of the object struct */
    const struct api_field *fields;
    size_t nfields; /* every column */
    size_t ninput;  /* the first ninput: what create/update take */
};

extern const struct nvs_table nvs_subsys, nvs_namespace, nvs_port, nvs_host, nvs_host_subsys,
    nvs_port_subsys;
/* The field tables (nvmet_store.c) and how many of their first fields a
 * create/update body takes (the rest are made by the server). */
extern const struct api_field nvs_subsys_fields[], nvs_namespace_fields[], nvs_port_fields[],
    nvs_host_fields[], nvs_host_subsys_fields[], nvs_port_subsys_fields[];
#define NVS_SUBSYS_INPUT 7
#define NVS_NAMESPACE_INPUT 6
#define NVS_PORT_INPUT 7
#define NVS_HOST_INPUT 5
#define NVS_LINK_INPUT 2
extern const char *const nvs_device_types[], *const nvs_trtypes[], *const nvs_dhchap_hashes[],
                                                                       *const nvs_dhchap_dhgroups[];

/* Register the tables (before db_open). */
void nvs_init(void);

/* A new object of t with its fields' defaults (calloc'd; NULL without
 * memory), and its release (what it owns, secrets wiped, then itself). */
void *nvs_new(const struct nvs_table *t);
void nvs_free(const struct nvs_table *t, void *obj);

/*
 * The objects of t matching where (SQL after WHERE, NULL for all;
 * parameters bound from the arguments as db_run's types say), ordered by
 * id: a new array of *n structs in *objs (nvs_free_all). 0 or -errno.
 * Takes the DB lock.
 */
int nvs_load(const struct nvs_table *t, const char *where, void **objs, size_t *n,
             const char *types, ...);
void nvs_free_all(const struct nvs_table *t, void *objs, size_t n);
/* Object i of an nvs_load array. */
#define NVS_AT(t, objs, i) ((void *)((char *)(objs) + (i) * (t)->size))
/* Object id of t into a new object (nvs_free). 0, -ENOENT or -errno. */
int nvs_get(const struct nvs_table *t, int64_t id, void **obj);
/* How many rows of t match where (NULL: all). 0 or -errno. */
int nvs_count(const struct nvs_table *t, const char *where, int64_t *n, const char *types, ...);

/*
 * Inside a cfg_tx: write obj (its id 0 inserts and sets it, otherwise
 * updates). Records (t->kind, id). 0, -EEXIST (a unique column is taken)
 * or -errno.
 */
int nvs_write(const struct nvs_table *t, void *obj);
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
