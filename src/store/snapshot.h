/*
 * Point-in-time snapshots of a live volume into a new file, never holding
 * its writes for more than the requests already in flight.
 *
 *  - Reflink filesystems (XFS, btrfs): the volume is flushed (writes go
 *    on), then writes are held (volume_hold, no fdatasync) for one FICLONE:
 *    O(1), milliseconds.
 *  - Otherwise (ext4, tmpfs): copy-before-write (store/cow.h). The instant
 *    is a brief hold to attach the copy state; then an I/O pool thread
 *    copies the volume's data chunk by chunk while writes go on, each
 *    write to a chunk not copied yet copying its old data first.
 *
 * Either way the snapshot is written to a temporary file in dst's
 * directory ("." + name + ".tmp.XXXXXX"), fsynced, renamed into place
 * without replacing anything and the directory fsynced, so a crash leaves
 * no dst (plus a temporary file that the start-up sweep removes), never a
 * partial one. The origin's own data need not be synced: the snapshot's
 * fsync makes what it holds durable.
 */
#ifndef BLOCKD_STORE_SNAPSHOT_H
#define BLOCKD_STORE_SNAPSHOT_H

#include <stdbool.h>
#include <stdint.h>

#include "store/copy.h"
#include "store/volume.h"

struct store_snapshot_stats {
    bool reflinked;
    uint64_t held_ns;          /* how long the volume's writes were held */
    uint64_t chunks_by_writes; /* copy-before-write: chunks copied by writes */
    uint64_t chunks_by_copier; /* ... and by the background copier */
    uint64_t queue_waits;      /* writes that waited for a free copier queue slot */
    uint64_t queue_wait_max_ns;
};

/*
 * Snapshot the open volume v (whose file is src_path) to the new file dst
 * (-EEXIST if it exists). flags: enum store_copy_flags
 * (STORE_COPY_NO_REFLINK forces copy-before-write). chunk: the
 * copy-before-write chunk size in bytes (0: default). progress (may be
 * NULL) is called on the calling thread at least every 0.25 s while the
 * copy runs, and at the end. stats may be NULL. Synchronous and long:
 * API/control thread; the copy itself runs on an I/O pool thread (at the
 * data path's priority: writes may wait for it). Returns 0 or -errno (the
 * copy's first error; then no dst exists).
 */
int store_snapshot_volume(struct volume *v, const char *src_path, const char *dst, unsigned flags,
                          uint32_t chunk, store_progress_fn progress, void *arg,
                          struct store_snapshot_stats *stats);

#endif
