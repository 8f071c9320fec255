/*
 * A small shared state object next to an RBD image: the home of the image's
 * SCSI persistent reservations, and of its NVMe reservations in an object
 * of their own (scsi/ and nvme/ serialize them; this module only stores
 * bytes). Every blockd daemon that serves the image opens the same
 * object, so a reservation made through one is seen by all.
 *
 *   - The object is "blockd.pr.<image id>" (NVMe: "blockd.nvme-resv.<image
 *     id>") in the image's pool and namespace (the id is librbd's, stable across renames; a deleted
 * and re-created image gets a new one); "blockd.pr.<image id>@<snapshot>" for an LU on a snapshot.
 *   - Its contents carry a sequence number in the xattr "blockd.seq". An
 *     update is a compare-and-swap: one RADOS write op asserts the seq it
 *     read (cmpxattr), replaces the contents and stores seq + 1, so two
 *     daemons updating at once cannot lose one another's change: the loser
 *     gets -ECANCELED and starts over from a fresh read.
 *   - Every opener watches the object. After an update the writer notifies
 *     (rados_notify2), which returns once every watcher has run its
 *     listener and acknowledged, or after RBD_PR_NOTIFY_MS.
 *
 * Threads: open, read, cas, notify, peers and close block (they talk to the
 * cluster): control threads and I/O pool jobs only, never a reactor. The
 * listener runs on a librados thread; it must not block or call back into
 * this module.
 */
#ifndef BLOCKD_STORE_RBD_PR_H
#define BLOCKD_STORE_RBD_PR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rados/librados.h>

#include "store/bdev.h"

/* How long a writer waits for the other daemons to acknowledge a change,
 * and how long the OSD keeps the watch of a daemon that stopped answering
 * (a killed gateway): the longest a survivor's PERSISTENT RESERVE OUT can
 * take right after a member died. */
#define RBD_PR_NOTIFY_MS 5000u
#define RBD_PR_WATCH_TIMEOUT_S 10u
/* How long rbd_pr_open waits for the other daemons to answer its count. */
#define RBD_PR_COUNT_MS 1000u
/* The largest state object accepted (64 registrations need ~20 KiB). */
#define RBD_PR_MAX_BYTES (256u * 1024u)

struct rbd_pr_listener {
    /* A peer (self: this process' own cluster connection) notified: msg is
     * its payload, valid for the call only. */
    void (*changed)(void *arg, const void *msg, size_t len, bool self);
    /* The watch broke (connection to the OSD lost, err < 0): notifies may
     * have been missed; re-watch with rbd_pr_rewatch and read again. */
    void (*lost)(void *arg, int err);
    void *arg;
};

struct rbd_pr;

/* The objects' name prefixes: SCSI's and NVMe's (separate states). */
#define RBD_PR_SCSI "blockd.pr."
#define RBD_PR_NVME "blockd.nvme-resv."

/* Open (creating it with seq 0 if absent) and watch the state object of the
 * RBD image behind b. *peers_out (may be NULL) gets the number of other
 * daemons watching it at open (a notify-and-count before our own watch is
 * registered; a dead daemon's watch counts until the OSD drops it).
 * -ENOTSUP: b is not an RBD bdev. 0 or -errno. */
int rbd_pr_open(struct bdev *b, const struct rbd_pr_listener *l, unsigned *peers_out,
                struct rbd_pr **out);
/* The same for the object named prefix (RBD_PR_SCSI or RBD_PR_NVME). */
int rbd_pr_open_as(struct bdev *b, const char *prefix, const struct rbd_pr_listener *l,
                   unsigned *peers_out, struct rbd_pr **out);
/* Read the contents (malloc'd in *blob, NUL-terminated, *len bytes without
 * the NUL; free() it) and their seq. */
int rbd_pr_read(struct rbd_pr *p, char **blob, size_t *len, uint64_t *seq);
/* Replace the contents with blob if the object's seq is still seq; it
 * becomes seq + 1. -ECANCELED: somebody else updated it first. */
int rbd_pr_cas(struct rbd_pr *p, uint64_t seq, const void *blob, size_t len);
/* Notify every watcher (this daemon's included) with msg and wait for their
 * acknowledgements. Returns 0, or -ETIMEDOUT with *missed (may be NULL) set
 * to the number of watchers that did not answer in RBD_PR_NOTIFY_MS. */
int rbd_pr_notify(struct rbd_pr *p, const void *msg, size_t len, unsigned *missed);
/* Register the watch again after listener.lost. */
int rbd_pr_rewatch(struct rbd_pr *p);
/* The object's name, for logs. */
const char *rbd_pr_name(const struct rbd_pr *p);
/* Unwatch, wait for listener calls in flight, free. */
void rbd_pr_close(struct rbd_pr *p);

/* Remove the state objects (SCSI's and NVMe's) of image image_id (of its
 * snapshot snap when not NULL) from io's pool and namespace: the image (snapshot) is gone and so
 * is its LU. 0 when removed or absent, else -errno (the caller logs it;
 * a stray object costs a few KiB, nothing else). Blocking. */
int rbd_pr_remove(rados_ioctx_t io, const char *image_id, const char *snap);

#endif
