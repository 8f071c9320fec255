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

/* Seconds before a monitor or OSD request that gets no answer fails, unless
 * the spec's op_timeout_s or the environment's BLOCKD_RBD_OP_TIMEOUT (a
 * positive number of seconds; tests make it short) says otherwise. */
#define RBD_CLUSTER_OP_TIMEOUT 30

struct rbd_cluster_spec {
    const char *conf;      /* ceph.conf path; NULL or "": librados' default search */
    const char *id;        /* client id without "client."; NULL or "": "admin" */
    const char *keyring;   /* keyring path; NULL or "": from ceph.conf */
    unsigned op_timeout_s; /* 0: BLOCKD_RBD_OP_TIMEOUT, else RBD_CLUSTER_OP_TIMEOUT */
};

struct rbd_cluster;

/* Connect, or share the connection already made for the same spec.
 * timeout_s bounds the connection attempt (0: 10 s). Returns 0 or -errno
 * (-ENOENT: the conf file does not exist; -ETIMEDOUT: no monitor answered;
 * other librados errors as they come). */
int rbd_cluster_get(const struct rbd_cluster_spec *spec, unsigned timeout_s,
                    struct rbd_cluster **out);
/* Take another reference on c. */
void rbd_cluster_ref(struct rbd_cluster *c);
/* Drop a reference; the last one shuts the connection down. */
void rbd_cluster_put(struct rbd_cluster *c);
/* The connection, for librados/librbd calls. Valid while a reference is held. */
rados_t rbd_cluster_rados(struct rbd_cluster *c);
/* "conf=… id=…", for log lines. */
const char *rbd_cluster_describe(const struct rbd_cluster *c);
/* A new I/O context on pool and namespace (NULL or "": the default
 * namespace); the caller destroys it with rados_ioctx_destroy. -ENOENT:
 * no such pool. */
int rbd_cluster_ioctx(struct rbd_cluster *c, const char *pool, const char *ns, rados_ioctx_t *out);

#endif
