/*
 * Pools and datasets (volumes, filesystems, snapshots): the config side of
 * store/. Owns the mapping from dataset names to their storage (files in a
 * pool directory, or RBD images in a Ceph pool: control/dsbackend.h) and the
 * cache of open volumes shared by every front-end.
 */
#ifndef BLOCKD_CONFIG_DATASETS_H
#define BLOCKD_CONFIG_DATASETS_H

#include <stdbool.h>
#include <stddef.h>

#include "store/volume.h"

/*
 * Register the pool.* / zfs.snapshot.* API methods and DB schema. Call
 * order in the daemon: datasets_init(STATE) (before db_open, since it
 * registers the schema) → db_open("STATE/blockd.db") →
 * datasets_ensure_default_pool("demo") → serve → datasets_flush_all() →
 * datasets_shutdown() → db_close().
 * Volumes with backend "memory" keep their configuration in the database
 * but their data only while the daemon runs: after a restart they come back
 * empty (allocated on first open).
 */
void datasets_init(const char *state_dir);
/* Create the default pool if it does not exist (first start). Also
 * finishes rollbacks a crash interrupted and removes the temporary files of
 * interrupted copies, so call it once at start-up after db_open. */
int datasets_ensure_default_pool(const char *name);

/* Open (or share the cached) volume for "pool/vol" or "pool/vol@snap"
 * (snapshots are read-only). Returns a new reference. 0, -ENOENT, -errno. */
int datasets_volume_open(const char *name, struct volume **out);

/*
 * A stand-in for volume (or snapshot) name of an RBD pool that cannot be
 * reached yet (datasets_volume_open failed with -EHOSTUNREACH: the pool
 * is still connecting, or its cluster does not answer): the dataset's
 * size and block size on an offline bdev (store/bdev.h) that fails every
 * request. Not cached. For front-ends that keep the share visible as
 * "becoming ready" (an iSCSI LU answering NOT READY) until
 * DATASETS_POOL_ONLINE, when they open the real volume. New reference in
 * *out. 0, -ENOENT, -EINVAL (a file pool: never offline), -errno. Takes
 * the DB lock briefly.
 */
int datasets_volume_offline(const char *name, struct volume **out);

/* Close the cached volume of name once no share uses it (no in-use check
 * claims it): the cache keeps volumes open until their dataset goes, but
 * an RBD image kept open holds a watch, and a gateway group member whose
 * last share of an image was withdrawn must let the member that deletes
 * the dataset remove the image (rbd_remove refuses while it is watched).
 * Front-ends still holding a reference close it when they let go. True if
 * an entry was dropped. Control threads. */
bool datasets_volume_release_unused(const char *name);

/*
 * Drop the dataset row of volume name without touching its storage: a
 * gateway group member letting go of a volume it adopted for a group
 * share that was withdrawn (the RBD image is the group's, never removed
 * here). Refused while a share uses it (-EBUSY, checked under the DB
 * lock, so none can be made meanwhile), when it has snapshots or children
 * here (-ENOTEMPTY), -ENOENT, -EINVAL (not a volume); a reason in why.
 * Closes the cached volume and sends EV_DATASET DATASETS_DELETED.
 * Control threads (takes ds_ops_lock and the DB lock). 0 or -errno.
 */
int datasets_forget(const char *name, char *why, size_t len);

/*
 * Adopt the existing RBD image of volume name ("pool/vol", size bytes,
 * volblocksize in bytes) as a new dataset: what pool.dataset.create
 * {name, type: "VOLUME", volsize, volblocksize, adopt: true} does after
 * decoding (the same checks, one transaction, log line), for the gateway
 * group's sync (gwsync/: another member's volume, docs/ha.md). Errors go
 * to call (api_call_internal_new). 0, or -1 with the error set on call.
 * Control threads, no DB lock held.
 */
struct api_call;
int datasets_adopt_volume(struct api_call *call, const char *name, uint64_t size,
                          uint32_t volblocksize);

/* A front-end that uses datasets registers a check so that deleting or
 * rolling back a dataset in use is refused (EBUSY) with its reason. The
 * check returns true and fills why when name (or a child) is in use. */
typedef bool (*datasets_in_use_fn)(const char *name, char *why, size_t len);
void datasets_register_in_use(datasets_in_use_fn fn);

/*
 * Exports whose protocol keeps reservations of its own: an iSCSI extent
 * (SCSI persistent reservations) and an NVMe namespace (NVMe
 * reservations). Their states are separate, so one device is exported
 * through one of them at a time (docs/nvme.md, "Reservations"). Each such
 * front-end registers, under its protocol's name, a function that returns
 * true and names its enabled export of device ("zvol/POOL/VOL" or a file
 * path) in why; before enabling an export of device a front-end asks the
 * others with datasets_reserving_export, which returns true with the
 * other export named in why. Called with the DB lock held (the functions
 * may take it again); register at start-up, up to 16.
 */
typedef bool (*datasets_export_fn)(const char *device, char *why, size_t len);
void datasets_register_reserving_export(const char *proto, datasets_export_fn fn);
bool datasets_reserving_export(const char *proto, const char *device, char *why, size_t len);

/*
 * Clients connected to the shares of one volume (exactly name, not its
 * snapshots or children): a rollback needs force while any are. The
 * function returns how many clients are connected and, when any, a reason
 * in why ("exported over NBD as 'x' with 1 connected client"). Called on
 * the API thread with ds_ops_lock and db_lock() held; must not take other
 * config locks. Register at start-up; up to 16.
 */
typedef unsigned (*datasets_clients_fn)(const char *name, char *why, size_t len);
void datasets_register_clients(datasets_clients_fn fn);

/*
 * Renames: front-ends whose configuration names datasets (NBD export rows,
 * iSCSI DISK extents "zvol/<name>", FILE extents under a pool directory)
 * follow a rename, so shares keep serving under the new name: they
 * subscribe to EV_RENAME_LOCK, EV_RENAME_UPDATE and EV_RENAME_DONE
 * (control/events.h says when each comes). A rename of old → new covers
 * old itself and, with subtree, every "old/…" and "old@…" (a dataset
 * rename); without, old alone (a snapshot). Open volumes are not
 * reopened: an open file descriptor survives the file's rename, and the
 * volume cache is re-keyed under the new name.
 *
 * Dataset events (EV_DATASET, control/events.h): front-ends learn about
 * dataset changes made through the API that their published configuration
 * does not carry. Delivered on the thread that made the change, after the
 * change is committed and applied to the open volume, with no config lock
 * held; a subscriber must not block for long. name is "pool/vol" (or
 * "pool/vol@snap" for a deleted snapshot); v is the open volume (borrowed,
 * valid for the call) or NULL when it is not open. A change of sync or
 * read-only needs no event: the open volume has it
 * (volume_set_sync/readonly) and SCSI raises MODE PARAMETERS CHANGED on
 * the next command by itself.
 *   DATASETS_RESIZED          volsize changed (pool.dataset.update, a
 *                             rollback, replication, or another client of
 *                             an RBD image): the open volume already has
 *                             the new size and a new volume_size_generation,
 *                             from which SCSI raises CAPACITY DATA HAS
 *                             CHANGED on each nexus's next command; NBD
 *                             connections keep their negotiated size
 *                             (NBD cannot tell a client) and the NBD
 *                             front-end logs those that must reconnect
 *   DATASETS_DELETED          dataset or snapshot removed
 *   DATASETS_ROLLED_BACK      contents replaced by a snapshot's
 *   DATASETS_ROLLING_BACK     (the one event sent BEFORE the change, with
 *                             ds_ops_lock held but no DB lock) a rollback
 *                             is about to replace name's contents: drop
 *                             clients that must not see the switch (NBD)
 *   DATASETS_POOL_ONLINE      a pool became usable (an RBD pool whose cluster
 *                             answered: at start-up the connection is made in
 *                             the background, and a lost cluster comes back);
 *                             name is the pool. Sent from the RBD connector
 *                             thread, no lock held: front-ends open now the
 *                             shares they could not open before.
 */
enum datasets_event {
    DATASETS_RESIZED,
    DATASETS_DELETED,
    DATASETS_ROLLED_BACK,
    DATASETS_ROLLING_BACK,
    DATASETS_POOL_ONLINE,
};

/*
 * Whether a host file may back an iSCSI FILE extent: it must lie inside a
 * pool directory (store/poolfs.h: resolved
 * beneath the pool root, no symlink anywhere on the way), be a regular
 * file or a block device, and not be a dataset's volume or snapshot file.
 * may_create: a missing file is fine if its directory exists (FILE extents
 * with a filesize). 0, or -errno with a reason for the client in why.
 * Blocking (filesystem, DB); API threads.
 */
int datasets_file_check(const char *path, bool may_create, char *why, size_t whylen);

/*
 * An NBD export's "path": it must be the file of a volume dataset of a
 * directory pool (never a file blockd did not create, nor a snapshot's
 * file: those are exported by dataset name). The volume's dataset name
 * goes to name, and the export serves that dataset (one shared handle).
 * 0, or -EINVAL / -ENAMETOOLONG with the reason for the client in why.
 * Takes the DB lock; API threads and the NBD config's loader.
 */
int datasets_file_volume(const char *path, char *name, size_t len, char *why, size_t whylen);

/* Flush every open volume (shutdown). */
/* Every pool's name and directory, by name (metrics): a new array in
 * *out (free()). Takes the DB lock briefly. 0 or -errno. */
struct datasets_pool_path {
    char name[256];
    char path[4096];
};
int datasets_pool_paths(struct datasets_pool_path **out, size_t *n);
void datasets_flush_all(void);
void datasets_shutdown(void);

#endif
