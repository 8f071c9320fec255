/*
 * How blockd reaches an RBD pool's cluster: the monitors' addresses, the
 * client id and the cephx key, as data. An API client names a cluster,
 * never a file librados reads: librados is given no configuration file
 * and no keyring path for an RBD pool (store/rbd_cluster.h sets only
 * mon_host, key and blockd's own options, and pins every option that
 * makes librados write or load files). When a pool names a ceph.conf or
 * a keyring, blockd opens it itself, under the rules of
 * rbd_creds_file_open, and takes from it only
 *   ceph.conf: mon_host (or "mon host"), keyring, key;
 *   keyring:   the key of [client.ID].
 * Every other line of such a file is ignored: nothing in it reaches
 * librados.
 *
 * Threads: any (no shared state). Blocking (files): API threads and the
 * RBD connector, never a reactor.
 */
#ifndef BLOCKD_CONFIG_RBD_CREDS_H
#define BLOCKD_CONFIG_RBD_CREDS_H

#include <stddef.h>

#include "control/pool_rbd_store.h"
#include "store/rbd_cluster.h"

/* The directory a pool's conf or keyring may always be in. */
#define RBD_CREDS_ETC "/etc/ceph"
/* The largest conf or keyring file blockd reads. */
#define RBD_CREDS_FILE_MAX (64 * 1024)

/* A cluster as librados will be given it. */
struct rbd_creds {
    char mon_host[DS_RBD_MON_HOST_MAX];
    char id[DS_RBD_NAME_MAX];
    char key[DS_RBD_KEY_MAX];
};

/*
 * Open a conf or keyring file named by a pool: an absolute path whose
 * directory is canonical (no symlink on the way) and is /etc/ceph or a
 * directory the operator allows (blockd --allow-dir, core/allowdir.h),
 * never inside the state directory or a pool (where clients write); the
 * file opened with O_NOFOLLOW and checked with fstat on that descriptor:
 * a regular file owned by root (or the daemon's user), not writable by
 * group or others, at most RBD_CREDS_FILE_MAX bytes. Returns the
 * descriptor or -errno (-EINVAL/-EPERM: the rule, explained in why).
 */
int rbd_creds_file_open(const char *path, char *why, size_t whylen);

/* The path rule of rbd_creds_file_open without opening (pool.create's
 * field check). 0 or -EINVAL with why. */
int rbd_creds_path_check(const char *path, char *why, size_t whylen);

/* Whether s is a valid mon_host (addresses: letters, digits, and . : , [ ]
 * / - _ and spaces) or key (base64). 0 or -EINVAL with why. */
int rbd_creds_mon_host_check(const char *s, char *why, size_t whylen);
int rbd_creds_key_check(const char *s, char *why, size_t whylen);

/*
 * The cluster of pool spec s: mon_host and key as given, else read from
 * its conf (s->conf, or /etc/ceph/ceph.conf when neither mon_host nor
 * conf is set) and keyring (s->keyring, the conf's keyring, or Ceph's
 * default names /etc/ceph/ceph.client.ID.keyring, /etc/ceph/ceph.keyring,
 * /etc/ceph/keyring when they exist, if a conf was read: a pool given as
 * mon_host alone reads no file). No key found is not an error (a cluster
 * without cephx). 0 or -errno with the reason in why; clear *out
 * with rbd_creds_clear.
 */
int rbd_creds_resolve(const struct ds_rbd_spec *s, struct rbd_creds *out, char *why, size_t whylen);
/* Zero *c (the key). */
void rbd_creds_clear(struct rbd_creds *c);
/* The connection spec for c (pointers into c: keep c alive). */
void rbd_creds_cluster_spec(const struct rbd_creds *c, struct rbd_cluster_spec *cs);

#endif
