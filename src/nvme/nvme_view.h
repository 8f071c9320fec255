/*
 * The NVMe-oF configuration as the target sees it: the CONF_NVME part of
 * the configuration generation (control/confgen.h). nvme/config/ builds it
 * from the nvmet.* objects after every change that touches them and
 * publishes it; the target (nvme/nvme_*.c) reads it at Connect, Identify
 * and discovery, and when conf_part_number(CONF_NVME) moves. Every object
 * here is immutable once published and freed with the last reference, so
 * a controller keeps the subsystem (and its volumes) it connected to
 * alive without a lock on the I/O path.
 *
 * Contract between the two halves:
 *  - nvme/config/ owns building (nvme_conf_new, filling, nvme_conf_seal)
 *    and the listening sockets of the ports (each accepted socket goes to
 *    nvme_target_accept, nvme_target.h);
 *  - its conf subscriber's gone/changed hooks call nvme_target_subsys_gone
 *    and nvme_target_subsys_changed, so that the target tears down or
 *    notifies (Asynchronous Event: namespace attribute changed) the
 *    controllers of a subsystem that left or changed.
 */
#ifndef BLOCKD_NVME_VIEW_H
#define BLOCKD_NVME_VIEW_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/confgen.h"
#include "core/util.h"

struct volume;

/* NVMe Qualified Names are at most 223 bytes (NVMe base 2.0, 4.5). */
#define NVME_NQN_MAX 223

/* One namespace of a subsystem: an enabled nvmet.namespace row. */
struct nvme_ns {
    uint32_t nsid;      /* 1..; unique in its subsystem */
    int64_t id;         /* the nvmet.namespace row */
    char *device_path;  /* as configured: "zvol/POOL/VOL" or a file path */
    char *dataset;      /* "pool/vol" for a ZVOL, NULL for a FILE */
    struct volume *vol; /* a reference; NULL when unavailable */
    char *unavailable;  /* why vol is NULL (logged once), else NULL */
    bool readonly;      /* a snapshot, or a read-only dataset */
    uint8_t uuid[16];   /* device_uuid: stable for the row's life */
    uint8_t nguid[16];  /* device_nguid: stable for the row's life */
    uint8_t eui64[8];   /* the first 8 bytes of nguid */
    /* Its reservations (nvme_resv.h: a reference, shared by the
     * generations that carry the row), or NULL: none (an RBD volume, or
     * vol NULL). */
    struct nvme_resv *resv;
};

/* A host that may connect to a subsystem (nvmet.host + nvmet.host_subsys).
 * The DH-HMAC-CHAP fields are NULL/0 when the host has no key. */
struct nvme_host {
    char *hostnqn;
    char *dhchap_key;      /* "DHHC-1:..." in clear (decrypted at build), or NULL */
    char *dhchap_ctrl_key; /* for bidirectional authentication, or NULL */
    int dhchap_hash;       /* 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512 */
    int dhchap_dhgroup;    /* 0 null, 1 ffdhe2048 ... 5 ffdhe8192 */
};

/* One subsystem: an nvmet.subsys row with its namespaces, hosts and ports. */
struct nvme_subsys {
    atomic_int refs;
    int64_t id; /* the nvmet.subsys row */
    char *name;
    char *nqn;       /* subnqn */
    char serial[21]; /* ASCII, NUL-terminated; the target pads it */
    char model[41];
    uint32_t ieee_oui; /* 24 bits */
    uint16_t qid_max;  /* I/O queues a controller may create (>= 1) */
    bool allow_any_host;
    bool ana;       /* ANA reporting on (subsystem's, or global's) */
    uint64_t build; /* unique per object (nvme_subsys_new): never reused */
    size_t nhosts;
    struct nvme_host *hosts; /* allowed hosts (any host when allow_any_host) */
    size_t nports;
    int64_t *port_ids; /* nvmet.port rows serving it, sorted */
    size_t nns;
    struct nvme_ns *ns; /* sorted by nsid */
};

/* One port: an enabled nvmet.port row of transport TCP. */
struct nvme_port {
    int64_t id;
    uint16_t index;  /* the port's number, portid in discovery */
    char traddr[64]; /* an IPv4 or IPv6 address, without brackets */
    uint16_t trsvcid;
    int adrfam;                /* 1 IPv4, 2 IPv6 (discovery log encoding) */
    uint32_t inline_data_size; /* in-capsule data the port accepts (bytes) */
    uint32_t max_queue_size;   /* entries per I/O queue */
    bool discovery;            /* the discovery-only port (8009) */
};

/* The published part: subsystems are the part's objects (by id), so that
 * conf_apply hands a subsystem that left or changed to the subscriber. */
struct nvme_conf {
    struct conf_part part;
    char *basenqn;
    size_t nports;
    struct nvme_port *ports;
    size_t nsubsys;
    struct conf_obj *objs;       /* (id, subsystem) sorted by id, for conf_apply */
    struct nvme_subsys **subsys; /* each holds a reference */
};

/* An empty part with room for nsubsys subsystems and nports ports (refs 1;
 * the caller fills subsys[] with references and ports[], then seals). NULL
 * without memory. */
struct nvme_conf *nvme_conf_new(size_t nsubsys, size_t nports);
/* Index c->objs by subsystem id for conf_apply. */
void nvme_conf_seal(struct nvme_conf *c);
/* The current part (a new reference; an empty part before any was
 * published, never NULL). Thread-safe. */
struct nvme_conf *nvme_conf_current(void);
void nvme_conf_unref(struct nvme_conf *c);
DEFINE_CLEANUP(struct nvme_conf, nvme_conf_unref)

/* A subsystem with every pointer NULL and refs 1; nvme_subsys_unref frees
 * what its fields point to (volume references included). */
struct nvme_subsys *nvme_subsys_new(void);
void nvme_subsys_ref(struct nvme_subsys *s);
void nvme_subsys_unref(struct nvme_subsys *s);

/* Lookups in c (no reference taken; valid while c is held). */
struct nvme_subsys *nvme_conf_find_nqn(const struct nvme_conf *c, const char *nqn);
const struct nvme_port *nvme_conf_find_port(const struct nvme_conf *c, int64_t port_id);
/* Whether s is served on port_id. */
bool nvme_subsys_on_port(const struct nvme_subsys *s, int64_t port_id);
/* The host entry of hostnqn in s, or NULL (allow_any_host does not make
 * one up: the caller checks allow_any_host first). */
const struct nvme_host *nvme_subsys_host(const struct nvme_subsys *s, const char *hostnqn);
/* The namespace nsid of s, or NULL. */
const struct nvme_ns *nvme_subsys_ns(const struct nvme_subsys *s, uint32_t nsid);

#endif
