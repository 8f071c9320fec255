/*
 * Ceph cluster connections (librados) for RBD pools.
 *
 * One rados_t per distinct (ceph.conf, client id, keyring), shared and
 * refcounted: every image of a pool, and every pool on the same cluster
 * with the same credentials, use one connection (one set of messenger
 * threads, one session with the monitors). The connection is made with
 * bounded timeouts, so that neither connecting nor a request to a lost
 * cluster waits forever:
 *   - client_mount_timeout = the timeout given to rbd_cluster_get;
 *   - rados_mon_op_timeout and rados_osd_op_timeout = RBD_CLUSTER_OP_TIMEOUT
 *     seconds (or the spec's op_timeout_s): a request the cluster does not answer ends with
 * -ETIMEDOUT (front-ends report a retriable error), the daemon never hangs.
 *
 * Threads: every function is thread-safe. rbd_cluster_get blocks (it
 * talks to the monitors): API/control threads or I/O pool jobs only,
 * never a reactor.
 */
#ifndef BLOCKD_STORE_RBD_CLUSTER_H
#define BLOCKD_STORE_RBD_CLUSTER_H

#include <rados/librados.h>
#include <stdbool.h>

/* Seconds before a monitor or OSD request that gets no answer fails, unless
 * the spec's op_timeout_s or the environment's BLOCKD_RBD_OP_TIMEOUT (a
 * positive number of seconds; tests make it short) says otherwise. */
#define RBD_CLUSTER_OP_TIMEOUT 30

/*
 * What librados is given. An RBD pool's cluster (config/rbd_creds.h) is
 * data: mon_host, id and key, and librados reads no file at all. conf and
 * keyring are for files the operator names (the gateway's
 * --gateway-ceph-conf), read by librados. In both cases blockd then pins
 * every option that makes librados write or load files (log_file,
 * log_to_file, admin_socket, plugin_dir, erasure_code_dir, run_dir,
 * rbd_plugins, the persistent cache, tracing, OpenSSL engines, ...):
 * values set with rados_conf_set take precedence over a ceph.conf, the
 * environment and the configuration the monitors send.
 */
struct rbd_cluster_spec {
    const char *conf;      /* operator's ceph.conf path; NULL or "": none read */
    const char *mon_host;  /* the monitors; NULL or "": from conf */
    const char *id;        /* client id without "client."; NULL or "": "admin" */
    const char *key;       /* cephx key; NULL or "": keyring, or no cephx */
    const char *keyring;   /* operator's keyring path; NULL or "": none */
    unsigned op_timeout_s; /* 0: BLOCKD_RBD_OP_TIMEOUT, else RBD_CLUSTER_OP_TIMEOUT */
};

struct rbd_cluster;

/* Connect, or share the connection already made for the same spec.
 * timeout_s bounds the connection attempt (0: 10 s). Returns 0 or -errno
 * (-ENOENT: the conf file does not exist; -ETIMEDOUT: no monitor answered;
 * other librados errors as they come). */
int rbd_cluster_get(const struct rbd_cluster_spec *spec, unsigned timeout_s,
                    struct rbd_cluster **out);
/*
 * The gateway group's Ceph client (docs/ha.md): the operator's conf and id
 * that the group's membership connects with (--gateway-ceph-conf,
 * --gateway-ceph-id). A member is fenced by blocklisting that client, so an
 * RBD pool a member serves must do its I/O through it: a pool created with
 * conf naming this same file gets exactly this spec
 * (rbd_cluster_group_spec) and so shares the connection. Set at start-up,
 * before API threads run; read from any thread.
 */
void rbd_cluster_set_group(const char *conf, const char *id);
/* If conf (a pool's conf path) is the group's, fill spec with the group's
 * conf and id (borrowed, static) and return true; else false. */
bool rbd_cluster_group_spec(const char *conf, struct rbd_cluster_spec *spec);
/* The admin socket every Ceph client of blockd opens (librados' admin_socket
 * with its $name/$pid/$cluster metavariables): the operator's
 * --ceph-admin-socket; "" or NULL (the default): none. Start-up only. */
void rbd_cluster_set_admin_socket(const char *path);
/* Take another reference on c. */
void rbd_cluster_ref(struct rbd_cluster *c);
/* Drop a reference; the last one shuts the connection down. */
void rbd_cluster_put(struct rbd_cluster *c);
/* The connection, for librados/librbd calls. Valid while a reference is held. */
rados_t rbd_cluster_rados(struct rbd_cluster *c);
/* "mon_host=… id=…" or "conf=… id=…", for log lines (never the key). */
const char *rbd_cluster_describe(const struct rbd_cluster *c);
/* A new I/O context on pool and namespace (NULL or "": the default
 * namespace); the caller destroys it with rados_ioctx_destroy. -ENOENT:
 * no such pool. */
int rbd_cluster_ioctx(struct rbd_cluster *c, const char *pool, const char *ns, rados_ioctx_t *out);

/*
 * Blocklisting and replacement (a fenced gateway member rejoining,
 * docs/ha.md "Rejoining after fencing").
 *
 * A client the cluster blocklisted can never write again (every OSD op
 * returns -EBLOCKLISTED, which is -ESHUTDOWN): only a new client (a new
 * rados_t, with a new address) can. The connection is not replaced in
 * place (every I/O context, image and watch made on it belongs to it);
 * instead it is retired: rbd_cluster_get stops sharing it and connects a
 * new one for the same settings, and each holder moves to the new one on
 * its own (the RBD backend's images, the reservation objects, the RBD
 * pools, the gateway), dropping its reference on the old one, which shuts
 * down with the last.
 */
/* Some call on c returned rc: -ESHUTDOWN (EBLOCKLISTED) marks c
 * blocklisted and calls the hook (once per connection). Thread-safe,
 * non-blocking: librados completion threads and reactors call it. */
void rbd_cluster_note_error(struct rbd_cluster *c, int rc);
/* c was seen blocklisted (rbd_cluster_note_error). */
bool rbd_cluster_blocklisted(const struct rbd_cluster *c);
/* Called (from any thread, must not block) when a connection is first
 * seen blocklisted. One hook; NULL removes it. */
void rbd_cluster_set_blocklist_hook(void (*fn)(struct rbd_cluster *c));
/* Retire every connection seen blocklisted: they stay valid for their
 * holders, but are no longer shared. Returns how many were retired now. */
unsigned rbd_cluster_retire_blocklisted(void);
/* Retire c (idempotent). */
void rbd_cluster_retire(struct rbd_cluster *c);
bool rbd_cluster_retired(const struct rbd_cluster *c);
/* The current connection for c's settings (c itself unless it was
 * retired; a new one connected within timeout_s otherwise), with a new
 * reference. Blocking when it connects: never on a reactor. 0 or -errno
 * like rbd_cluster_get. */
int rbd_cluster_get_like(struct rbd_cluster *c, unsigned timeout_s, struct rbd_cluster **out);
/* This connection's client address (what lock owners and blocklists
 * name), "" if unknown. */
const char *rbd_cluster_addr(const struct rbd_cluster *c);

#endif
