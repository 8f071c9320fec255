/*
 * The stored settings of RBD pools (table pool_rbd, one row per pool of
 * table pools whose path is "rbd:POOL[/NS]"): struct ds_rbd_spec and the
 * SQL behind it. pool.create (pools.c) records a new pool's
 * settings; the RBD connector (dsrbd.c) loads every pool's at start-up,
 * and the gateway (gwconfig_rows.c) walks them to know the group's pools:
 * ds_rbd_spec_each is the one list of RBD pools. Nothing here sees JSON
 * or talks to Ceph.
 *
 * Every function runs with the DB lock held (control/db.h db_lock, or
 * inside a struct cfg_tx, control/cfgtx.h); writes join the caller's
 * transaction. Any API/worker thread.
 */
#ifndef BLOCKD_CONFIG_POOL_RBD_STORE_H
#define BLOCKD_CONFIG_POOL_RBD_STORE_H

#include <limits.h>
#include <stdint.h>

#define DS_RBD_NAME_MAX 128     /* Ceph pool and namespace names */
#define DS_RBD_MON_HOST_MAX 512 /* the monitors' addresses */
#define DS_RBD_KEY_MAX 128      /* a cephx key (base64 of 28 bytes is 40) */

/*
 * An RBD pool's Ceph settings.
 *   pool     the Ceph pool its images live in
 *   ns       the RADOS namespace in it ("": none)
 *   mon_host the monitors' addresses ("": from conf)
 *   key      the cephx key, in cleartext in memory only: stored sealed
 *            (config/pwenc.h, table pool_rbd_auth), never returned by a
 *            query ("": from the keyring, or no cephx)
 *   conf     a ceph.conf blockd reads mon_host and keyring from ("":
 *            /etc/ceph/ceph.conf when mon_host is ""); config/rbd_creds.h
 *            says which files may be named
 *   id       the Ceph client id ("": "admin")
 *   keyring  the keyring's path ("": as conf says, or Ceph's default
 *            names in /etc/ceph)
 */
struct ds_rbd_spec {
    char pool[DS_RBD_NAME_MAX];
    char ns[DS_RBD_NAME_MAX];
    char conf[PATH_MAX];
    char id[DS_RBD_NAME_MAX];
    char keyring[PATH_MAX];
    char mon_host[DS_RBD_MON_HOST_MAX];
    char key[DS_RBD_KEY_MAX];
};

/* The settings of RBD pool pool_id into *out. 0, -ENOENT (not an RBD
 * pool) or -errno. */
int ds_rbd_spec_get(int64_t pool_id, struct ds_rbd_spec *out);
/* Record the new pool pool_id's settings (inside the transaction that
 * creates the pool), the key sealed. 0, -EEXIST or -errno. A stored key
 * that cannot be unsealed (pwenc.key lost) reads back as "" with a log
 * line: the pool then fails to authenticate, with the reason. */
int ds_rbd_spec_insert(int64_t pool_id, const struct ds_rbd_spec *spec);
/* fn(pool id, pool name, settings) for each RBD pool, in no particular
 * order; the arguments are valid during the call. A nonzero return of
 * fn stops the walk and is returned. 0 or -errno. */
int ds_rbd_spec_each(int (*fn)(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec,
                               void *arg),
                     void *arg);

#endif
