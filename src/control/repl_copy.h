/*
 * The data step of replication.run_onetime (replication.c): make a target
 * volume hold a source snapshot's contents by copying byte ranges between
 * two bdevs of any backend (file or RBD, in either direction). Private to
 * src/control/.
 *
 * A receive copies a list of ranges: for an incremental receive, the
 * ranges that may differ between the common snapshot and the new one on
 * the source (store/diff.h through control/snapdiff.h), together with the
 * ranges where the target itself changed since its copy of the common
 * snapshot; for a full receive, the whole volume. Inside each range the
 * source's allocated parts (store_allocated) are read and written, all-zero
 * blocks and the source's holes become zeroes (punched where the target
 * can: BDEV_ZERO_MAY_TRIM), so a trimmed range never keeps old data.
 *
 * Threads: blocking (files, the cluster): the replication job's thread.
 */
#ifndef BLOCKD_CONFIG_REPL_COPY_H
#define BLOCKD_CONFIG_REPL_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/bdev.h"
#include "store/copy.h"

/* Sorted, non-overlapping byte ranges (repl_ranges_add then
 * repl_ranges_merge). */
struct repl_range {
    uint64_t off, len;
};
struct repl_ranges {
    struct repl_range *v;
    size_t n, cap;
};

/* Append [off, off+len); a store_range_fn (arg: the struct repl_ranges).
 * 0 or -ENOMEM. */
int repl_ranges_add(uint64_t off, uint64_t len, void *arg);
/* Sort and merge overlapping or touching ranges, clipping them to size. */
void repl_ranges_merge(struct repl_ranges *r, uint64_t size);
/* The bytes the ranges cover. */
uint64_t repl_ranges_bytes(const struct repl_ranges *r);
void repl_ranges_free(struct repl_ranges *r);

/* What one receive did. */
struct repl_copy_stats {
    uint64_t copied; /* bytes read from the source and written to the target */
    uint64_t zeroed; /* bytes of the target zeroed or punched */
};

/*
 * Copy the ranges r of src into dst at the same offsets: src's data is
 * read and written, its all-zero 64 KiB blocks and its holes within a
 * range are zeroed on dst, unless skip_holes (a freshly created target
 * reads zeroes there already: nothing is zeroed then). Then dst is
 * synced (fdatasync, or the RBD flush). progress (may be NULL) gets bytes
 * of the ranges done of their total. 0 or -errno; *st counts what was
 * done even on failure.
 */
int repl_copy_ranges(struct bdev *src, struct bdev *dst, const struct repl_ranges *r,
                     bool skip_holes, store_progress_fn progress, void *arg,
                     struct repl_copy_stats *st);

#endif
