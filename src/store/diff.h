/*
 * Changed blocks: which byte ranges of a volume may differ between an
 * older snapshot (the base) and a newer snapshot or the live volume (the
 * target), and which ranges of one snapshot hold data. For incremental
 * backup, replication and warm migration (docs/changed-blocks.md).
 *
 * The promise is one-sided: every byte that differs between base and
 * target lies in a reported range (never a false negative); a reported
 * range may also hold bytes that did not change (a bounded over-report,
 * per backend):
 *
 *  - RBD: rbd_diff_iterate2 from the base snapshot to the target (with the
 *    object map when fast-diff is enabled): exact to the RADOS object
 *    (4 MiB by default).
 *  - Files on a reflink filesystem (XFS, btrfs), where a snapshot shares
 *    the volume's extents: the two files' extent maps (FIEMAP with
 *    FIEMAP_FLAG_SYNC, so dirty pages are mapped first). A range is
 *    unchanged only where both files map it to the same physical extent at
 *    the same offset, or both have a hole; anything else (unknown,
 *    delalloc, inline, encoded, different extents) is reported: exact to
 *    the filesystem block, plus whatever the filesystem copied on write.
 *  - Files elsewhere (ext4, tmpfs: a snapshot is a sparse copy, so no
 *    extent is shared): the ranges the extent maps cannot prove equal
 *    (data in either file) are compared by content, STORE_DIFF_GRANULE at
 *    a time; a granule is reported when its bytes differ. Exact to the
 *    granule, but it reads both files' data.
 *
 * Where target is longer than base (a resize after the base snapshot),
 * everything past base's end is reported.
 *
 * Threads: every function here is synchronous and may block for long
 * (I/O, the cluster): API or I/O pool threads, never a reactor.
 */
#ifndef BLOCKD_STORE_DIFF_H
#define BLOCKD_STORE_DIFF_H

#include <stdint.h>

#include "store/bdev.h"

/* The content comparison's unit (files without shared extents). */
#define STORE_DIFF_GRANULE ((uint64_t)64 << 10)

/*
 * Called for each range in ascending order; ranges never overlap or touch
 * (adjacent ones are merged first). Return 0 to go on; anything else
 * stops the walk and is returned by the caller of the walk.
 */
typedef int (*store_range_fn)(uint64_t offset, uint64_t length, void *arg);

/*
 * The ranges of [offset, offset+length) of target that may differ from
 * base. base and target are borrowed and must be of the same kind:
 *  - file bdevs (bdev_file_open: read_fd) of the base snapshot's file and
 *    of the target's (a newer snapshot, or the live volume's);
 *  - an RBD bdev of the target (the image at the newer snapshot, or the
 *    head) with base_snap the name of the older snapshot of the same
 *    image (base is then NULL).
 * The range is clipped to target's size. Returns 0, fn's nonzero value,
 * or -errno (-EINVAL: kinds mismatch or the range is bad, -ENOTSUP: a
 * backend without a way to tell, like memory).
 */
int store_diff(struct bdev *base, const char *base_snap, struct bdev *target, uint64_t offset,
               uint64_t length, store_range_fn fn, void *arg);

/*
 * The ranges of [offset, offset+length) of b that hold data (its
 * extents that are not holes; reads elsewhere return zeros), merged.
 * Any backend with extents(); clipped to b's size. As store_diff.
 */
int store_allocated(struct bdev *b, uint64_t offset, uint64_t length, store_range_fn fn, void *arg);

#endif
