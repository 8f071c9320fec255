/*
 * RBD pools (config side): their Ceph connection settings (stored in
 * table pool_rbd behind control/pool_rbd_store.h), their state (ONLINE,
 * or UNAVAIL with the reason) and the connector thread that brings them
 * online and notices a lost cluster. Internal to src/config.
 *
 * Start-up never waits for a cluster: ds_rbd_start() records every RBD
 * pool as UNAVAIL ("connecting") and a thread connects them (each attempt
 * bounded by DS_RBD_CONNECT_TIMEOUT), then checks every
 * DS_RBD_CHECK_INTERVAL seconds that each cluster still answers; a pool
 * whose cluster does not becomes UNAVAIL with the reason, and ONLINE again
 * on its own when it answers. File pools never wait for any of this.
 */
#ifndef BLOCKD_CONFIG_DSRBD_H
#define BLOCKD_CONFIG_DSRBD_H

#include <limits.h>
#include <rados/librados.h>
#include <stdbool.h>
#include <stdint.h>

#include "control/ds_internal.h"
#include "control/pool_rbd_store.h"
#include "store/rbd_cluster.h"

#define DS_RBD_CONNECT_TIMEOUT 5 /* seconds per connection attempt */
#define DS_RBD_CHECK_INTERVAL 5  /* seconds between checks/retries */
#define DS_RBD_STOP_WAIT 3       /* seconds shutdown waits for the connector */

/* pool.create: connect (bounded), check the Ceph pool exists and make the
 * namespace if missing. On success *out is a cluster reference for
 * ds_rbd_pool_add. 0 or -errno with a reason in why. API thread. */
int ds_rbd_probe(const struct ds_rbd_spec *spec, struct rbd_cluster **out, char *why,
                 size_t whylen);
/* Connect to the cluster of pool settings s (config/rbd_creds.h: the
 * conf and keyring files it names are checked and read by blockd, never
 * by librados), within timeout_s. 0 with a reference in *out, or -errno
 * with the reason (never the key) in why. Blocking. */
int ds_rbd_connect(const struct ds_rbd_spec *s, unsigned timeout_s, struct rbd_cluster **out,
                   char *why, size_t whylen);
/* Add a just-created pool, ONLINE on cluster c (the reference is taken
 * over). */
void ds_rbd_pool_add(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec,
                     struct rbd_cluster *c);

/* Start-up (after db_open): load the RBD pools, start the connector. */
void ds_rbd_start(void);
/* Shutdown: stop the connector, drop the connections it holds. */
void ds_rbd_stop(void);

/* State for pool.query: online, or the reason in why; size/avail in bytes
 * as last seen (0 if never). */
void ds_rbd_status(int64_t pool_id, bool *online, char *why, size_t whylen, uint64_t *size,
                   uint64_t *avail);

/* The RBD image name of a dataset: its name below the pool with '/'
 * written '%' ('%' cannot occur in dataset names, and RBD image names
 * cannot hold '/'): "tank/vms/disk0" → "vms%disk0". 0, -ENAMETOOLONG, or
 * -EINVAL for a name not below the pool's root. */
int ds_rbd_image_name(const struct ds_pool *p, const char *name, char *buf, size_t len);

/*
 * The size of an open RBD volume follows its image (dsrbd_size.c): a
 * resize made by another client (another gateway member's
 * pool.dataset.update, `rbd resize` behind blockd's back) is noticed
 * through librbd's header watch (bdev_rbd_watch_updates) and taken by the
 * open volume (volume_size_changed: iSCSI raises CAPACITY DATA HAS
 * CHANGED, new NBD connections see the new size), the dataset row's
 * volsize and EV_DATASET DATASETS_RESIZED. The work runs on one
 * thread of its own, never on librbd's.
 *   ds_rbd_follow: after opening the bdev of a volume (not a snapshot);
 *   a failure to watch is logged (the size is then only read at open).
 *   start/stop: with the RBD connector (ds_rbd_start / datasets_shutdown,
 *   before the cached volumes are dropped).
 */
void ds_rbd_follow(struct bdev *b, const char *name);
void ds_rbd_follow_start(void);
void ds_rbd_follow_stop(void);

/* A reason for the client of the last backend failure on this thread
 * ("" if none); ds_api_errno uses and clears it. */
extern _Thread_local char ds_backend_why[640];

#endif
