/*
 * The RBD backend: a Ceph RBD image (or one of its snapshots) as a bdev.
 *
 * Contract for the rest of blockd (store/bdev.h gives the ops table):
 *   - bdev_rbd_open opens the image with librbd on the shared cluster
 *     connection (store/rbd_cluster.h; the bdev holds a reference on it
 *     until closed). snap != NULL opens that snapshot, always read-only.
 *   - The data path never blocks a reactor: requests go to librbd's
 *     asynchronous calls and complete on the owning reactor.
 *   - Zero-length requests never reach librbd (it asserts on them).
 *   - sync() is rbd_flush: every write acknowledged before it is on the
 *     OSDs' stable storage when it returns (also with rbd_cache on).
 *   - extents() comes from rbd_diff_iterate2 (object-map/fast-diff):
 *     unallocated ranges are EXTENT_HOLE.
 *   - A lost cluster makes requests fail with -ETIMEDOUT after
 *     RBD_CLUSTER_OP_TIMEOUT seconds, never hang.
 * Thread-safe like every bdev.
 */
#ifndef BLOCKD_STORE_BDEV_RBD_H
#define BLOCKD_STORE_BDEV_RBD_H

#include <rbd/librbd.h>
#include <stdbool.h>

#include "store/bdev.h"
#include "store/rbd_cluster.h"

/* Open pool[/ns]/image[@snap]. Blocking (talks to the cluster): API/control
 * threads only. 0 or -errno (-ENOENT: no such pool, image or snapshot). */
int bdev_rbd_open(struct rbd_cluster *c, const char *pool, const char *ns, const char *image,
                  const char *snap, bool readonly, struct bdev **out);
/* True if b was opened by bdev_rbd_open. */
bool bdev_is_rbd(const struct bdev *b);
/* The open librbd image behind b, for management calls that must go
 * through the handle already serving I/O (snapshot create, resize,
 * rollback: a second handle would take the exclusive lock away from the
 * one serving). Borrowed: valid until bdev_close. */
rbd_image_t bdev_rbd_image(struct bdev *b);
/* The image's I/O context (its pool, for identity: gateway/). Borrowed
 * like bdev_rbd_image. */
rados_ioctx_t bdev_rbd_ioctx(struct bdev *b);
/*
 * Call fn(arg) whenever the image's header changes, whoever changed it
 * (another client's resize, `rbd resize`, a snapshot, new metadata):
 * librbd's rbd_update_watch. fn runs on a librbd thread: it must not block
 * nor call librbd (hand the work to another thread). Until bdev_close,
 * which unregisters it (waiting for a call in progress). Once per bdev;
 * blocking (control threads). 0 or -errno.
 */
int bdev_rbd_watch_updates(struct bdev *b, void (*fn)(void *arg), void *arg);
/* The image's size now, as the cluster has it (librbd rereads the header
 * when it changed). Blocking: control threads. 0 or -errno. */
int bdev_rbd_current_size(struct bdev *b, uint64_t *size);

#endif
