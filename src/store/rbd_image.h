/*
 * Management of RBD images (librbd), synchronous: the control plane's side
 * of RBD pools (create, remove, resize, rename, snapshots, clones,
 * flatten, usage). The data path is store/bdev_rbd.h.
 *
 * Calls that change an image take an open rbd_image_t. Where blockd
 * already serves the image (an open volume), pass the handle that serves
 * it (bdev_rbd_image): a second handle in this process would pull the
 * image's exclusive lock away from the one doing I/O, and the lock would
 * move back and forth at every write. Otherwise open one for the call
 * with rbd_image_open_mgmt.
 *
 * Threads: every function blocks (it talks to the cluster; a lost cluster
 * makes it fail with -ETIMEDOUT after RBD_CLUSTER_OP_TIMEOUT seconds):
 * API/control threads and I/O pool jobs only, never a reactor. Returns 0
 * or -errno as librbd gives it (-ENOENT: no such image or snapshot,
 * -EEXIST: the name is taken, -EBUSY: the image has watchers or
 * snapshots, -ENOTEMPTY: it has children).
 */
#ifndef BLOCKD_STORE_RBD_IMAGE_H
#define BLOCKD_STORE_RBD_IMAGE_H

#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Progress of a long call (rollback, flatten, remove): done of total
 * units, from librbd's thread that runs the call. */
typedef void (*rbd_image_progress_fn)(uint64_t done, uint64_t total, void *arg);

/* Create a format 2 image of size bytes with the features layering,
 * exclusive-lock, object-map, fast-diff and deep-flatten (whatever the
 * cluster's defaults are). */
int rbd_image_create(rados_ioctx_t io, const char *name, uint64_t size);
/* Remove an image (it must have no snapshots: remove them first), then
 * the objects blockd keeps beside it (its reservation object, rbd_pr.h).
 * While another client still watches the image (librbd: -EBUSY) it tries
 * again for up to RBD_IMAGE_REMOVE_WAIT_MS: a gateway group's other
 * members close a withdrawn share's image within about a second of the
 * change. Blocks: control threads only. */
#define RBD_IMAGE_REMOVE_WAIT_MS 10000
int rbd_image_remove(rados_ioctx_t io, const char *name);
/* Wait up to wait_ms until no client watches image name (every client
 * holding it open writable watches its header: another gateway member
 * closing a withdrawn share, a VM, `rbd bench`), polling every 100 ms.
 * The watches of client `mine` (its global id, "client.N"; 0: none) do
 * not count: this daemon's own handle, about to be withdrawn. 0 when no
 * other does; -EBUSY when some still does, with who ("client.4170 at
 * 10.0.0.2:0/123..., 1 watcher") for the caller's message; -ENOENT or
 * another -errno. Blocks: control threads only. */
int rbd_image_wait_unwatched(rados_ioctx_t io, const char *name, uint64_t mine, int wait_ms,
                             char *who, size_t wholen);
/* Image name (id, at snapshot snap if not NULL) was removed: remove
 * blockd's objects beside it; a failure is logged, not returned (the
 * image is gone either way). */
void rbd_image_forget(rados_ioctx_t io, const char *name, const char *id, const char *snap);
/* Rename an image within io's pool and namespace. */
int rbd_image_rename(rados_ioctx_t io, const char *from, const char *to);
/* 1 if the image exists, 0 if not, or -errno. */
int rbd_image_exists(rados_ioctx_t io, const char *name);
/* The names of the images in io's pool and namespace: *names is a
 * malloc'd array of malloc'd strings (rbd_image_list_free). */
int rbd_image_list(rados_ioctx_t io, char ***names, size_t *n);
void rbd_image_list_free(char **names, size_t n);

/* Open name (at snapshot snap if not NULL, then read-only) for management
 * calls; close with rbd_close. */
int rbd_image_open_mgmt(rados_ioctx_t io, const char *name, const char *snap, bool readonly,
                        rbd_image_t *out);

/* Resize (shrinking allowed) to size bytes. */
int rbd_image_resize(rbd_image_t img, uint64_t size);
/* Snapshots of an open image. */
int rbd_image_snap_create(rbd_image_t img, const char *snap);
int rbd_image_snap_remove(rbd_image_t img, const char *snap);
int rbd_image_snap_rename(rbd_image_t img, const char *from, const char *to);
/* Roll the image back to snap (its size included), with progress. */
int rbd_image_snap_rollback(rbd_image_t img, const char *snap, rbd_image_progress_fn fn, void *arg);
/* Clone parent@snap into a new image child (clone format 2: the snapshot
 * need not be protected), with the features of rbd_image_create. O(1). */
int rbd_image_clone(rados_ioctx_t parent_io, const char *parent, const char *snap,
                    rados_ioctx_t child_io, const char *child);
/* Copy the parent's data into the clone and cut the link, with progress. */
int rbd_image_flatten(rbd_image_t img, rbd_image_progress_fn fn, void *arg);
/* Bytes allocated in the open image (or the snapshot it was opened at),
 * from the object map (fast-diff): *used counts the image's own objects,
 * *referenced also what it reads from its parent (a clone). Either may be
 * NULL. */
int rbd_image_usage(rbd_image_t img, uint64_t *used, uint64_t *referenced);

#endif
