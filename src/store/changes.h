/*
 * The change log of a file volume on a filesystem without reflink (ext4,
 * tmpfs), where a snapshot is a sparse copy and the two files share no
 * extent to compare: which STORE_CHANGES_GRANULE-sized granules were
 * written since the volume's last snapshot, so that changed blocks
 * (store/diff.h) come from metadata instead of from reading both files.
 *
 * In memory, a bit per granule, set by the file backend (bdev_file.c) in
 * every write, trim and zeroing before it reaches the file: an atomic OR,
 * skipped when the bit is set already. An *epoch* runs from one snapshot to
 * the next. When a snapshot is taken (store/snapshot.c), the volume's epoch
 * is saved beside the snapshot's file ("<dir>/.<file>.changes", fsynced)
 * with the identity (inode, size, mtime) of the snapshot it started from
 * and of its own snapshot, and a new epoch starts. Around the snapshot's
 * instant writes are recorded in both epochs, so neither misses one (a
 * write in flight at the instant lands before it: volume_hold).
 *
 * Never a false negative: an epoch is trusted only if it started at a
 * snapshot taken by this process and nothing escaped it. It is not (and
 * diffs across it fall back to comparing contents, store/diff.h) after a
 * start or restart (a crash may have lost writes the kernel wrote back
 * before it), a rollback or resize (store_changes_invalidate), a write
 * past the size the log was made for, a snapshot renamed or replaced (the
 * identities no longer match), or a missing or damaged file.
 *
 * BLOCKD_CHANGE_LOG=0 in the environment disables the log (benchmarks:
 * bench/changed.sh measures its cost).
 *
 * Threads: store_changes_mark from any thread (reactors included: no
 * lock, no allocation); the rest block (files): control or I/O threads.
 */
#ifndef BLOCKD_STORE_CHANGES_H
#define BLOCKD_STORE_CHANGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/diff.h"

#define STORE_CHANGES_GRANULE STORE_DIFF_GRANULE

struct store_changes;

/* Is the log enabled (BLOCKD_CHANGE_LOG not "0")? Read once. */
bool store_changes_enabled(void);

/* A log for a volume of size bytes; its first epoch is not trusted (it
 * did not start at a snapshot). 0 or -ENOMEM. */
int store_changes_new(uint64_t size, struct store_changes **out);
void store_changes_free(struct store_changes *c);

/* Before [off, off+len) of the volume changes. Any thread, lock-free. */
void store_changes_mark(struct store_changes *c, uint64_t off, uint64_t len);
/* The volume changed behind the log (rollback, resize): no epoch of now
 * is trusted. */
void store_changes_invalidate(struct store_changes *c);

/* A snapshot of the volume is about to be taken: writes go to a new
 * epoch too. Pairs with store_changes_end. */
void store_changes_begin(struct store_changes *c);
/* The snapshot is in place at snap_path (fsynced): save the epoch it
 * ends beside it, start the next one from it. snap_path NULL: it failed,
 * the epochs become one again. 0, or -errno if the epoch could not be
 * saved (then the next one is not trusted either; logged). */
int store_changes_end(struct store_changes *c, const char *snap_path);

/* The log of a file bdev (bdev_file.c: writable, in a pool, on a
 * filesystem without reflink), or NULL. Borrowed: lives as long as b. */
struct bdev;
struct store_changes *bdev_file_changes(struct bdev *b);

/* Remove the saved epoch of snapshot file snap_path, if any. */
void store_changes_remove(const char *snap_path);

/*
 * The granules changed from snapshot file snaps[0] to snaps[n-1], or to
 * the live volume whose log is live (then snaps[n-1] is its latest
 * snapshot), from the saved epochs of snaps[1..n-1] (and live's current
 * one): fn for each merged range of [offset, offset+length) in ascending
 * order, clipped to target_size; past snaps[0]'s size all is reported.
 * -ESTALE: an epoch is missing or not trusted (the caller compares the
 * files instead); else 0, fn's nonzero value, or -errno.
 */
int store_changes_diff(const char *const *snaps, size_t n, struct store_changes *live,
                       uint64_t target_size, uint64_t offset, uint64_t length, store_range_fn fn,
                       void *arg);

#endif
