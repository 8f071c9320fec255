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
 * one serving). Borrowed until bdev_rbd_image_put, which the caller
 * must call on the same b when the result is not NULL (the handle is
 * not replaced meanwhile: keep it short). NULL: b is not an RBD bdev, or
 * its client was fenced and the handle is being replaced (the caller
 * fails with -ESHUTDOWN). Non-blocking. */
rbd_image_t bdev_rbd_image_get(struct bdev *b);
void bdev_rbd_image_put(struct bdev *b);
/* The image's I/O context (its pool, for identity: gateway/), borrowed
 * like the image: only between bdev_rbd_image_get and _put. */
rados_ioctx_t bdev_rbd_ioctx(struct bdev *b);
/*
 * Call fn(arg) whenever the image's header changes, whoever changed it
 * (another client's resize, `rbd resize`, a snapshot, new metadata):
 * librbd's rbd_update_watch. fn runs on a librbd thread: it must not block
 * nor call librbd (hand the work to another thread). Until bdev_close,
 * which unregisters it (waiting for a call in progress); a reopen after a
 * fencing moves it to the new handle and calls fn once. Once per bdev;
 * blocking (control threads). 0 or -errno (-ESHUTDOWN while fenced).
 */
int bdev_rbd_watch_updates(struct bdev *b, void (*fn)(void *arg), void *arg);
/* The image's size now, as the cluster has it (librbd rereads the header
 * when it changed). Blocking: control threads. 0 or -errno. */
int bdev_rbd_current_size(struct bdev *b, uint64_t *size);

/*
 * A fenced client (docs/ha.md "Rejoining after fencing"): its images are
 * replaced under the bdevs, so the volumes and front-ends that hold them
 * keep working.
 *
 * bdev_rbd_fence: every image opened on connection c fails each new
 * request at once with -ESHUTDOWN (front-ends: SCSI 02/04/0C, NBD
 * ESHUTDOWN) and never uses its handle again. Returns how many images
 * were fenced now. Non-blocking, any thread.
 *
 * bdev_rbd_reopen_retired: every image whose connection was retired
 * (rbd_cluster_retire) waits for its requests in flight to end (they
 * fail: the client is blocklisted), then gets a new handle on the
 * current connection for the same settings (rbd_cluster_get_like) and
 * serves again; the old handle is closed. Returns how many were
 * reopened; *failed gets how many could not be (they stay fenced: call
 * again later). Blocking (cluster calls): never on a reactor.
 */
unsigned bdev_rbd_fence(struct rbd_cluster *c);
unsigned bdev_rbd_reopen_retired(unsigned *failed);

/*
 * Deleting a served volume with force (docs/api-datasets.md): this
 * daemon's own handle must not keep the image from being removed.
 *
 * bdev_rbd_client_id: the cluster client b's handle uses (its global id,
 * the "client.N" of the image's watcher list), so that its own watch can
 * be told from another client's. 0 if b is not an RBD bdev. Non-blocking.
 *
 * bdev_rbd_withdraw: every new request on b fails at once with -ENODEV
 * (SCSI LOGICAL UNIT NOT SUPPORTED, NBD EIO), the requests in flight end
 * normally, then the image handle is closed (its header watch and
 * exclusive lock go with it). b stays valid for its holders until
 * bdev_close; a fencing leaves it alone.
 *
 * bdev_rbd_restore: undoes a withdraw (the image could not be removed):
 * a new handle on the same client, and b serves again.
 *
 * Both blocking (cluster calls): control threads. 0 or -errno (-EINVAL:
 * not an RBD bdev); a second call is a no-op.
 */
uint64_t bdev_rbd_client_id(struct bdev *b);
int bdev_rbd_withdraw(struct bdev *b);
int bdev_rbd_restore(struct bdev *b);

#endif
