/*
 * Whole-file copies for snapshots, clones and rollback.
 *
 * Every function here is synchronous and may take a long time (a sparse
 * copy of a big volume): call it from the API/control thread or an I/O pool
 * job, never from a reactor.
 *
 * Strategy (probe, remember, fall back): try a reflink (ioctl FICLONE) —
 * instant and space-sharing on XFS/btrfs; the answer "this filesystem cannot
 * reflink" is remembered per device. Otherwise a sparse copy: SEEK_DATA/
 * SEEK_HOLE walk the source, copy_file_range copies only the data (falling
 * back to read/write, which also leaves all-zero blocks as holes), so holes
 * stay holes.
 *
 * Consistency: the copy sees whatever is in the file while it runs: use it
 * for files that do not change (a snapshot to clone). A point-in-time
 * snapshot of a live volume is store_snapshot_volume (store/snapshot.h),
 * which never holds the volume's writes for a copy.
 *
 * Confinement: every path given here must lie beneath a pool root
 * registered with store/poolfs.h; the files are opened, created, renamed
 * and removed through poolfs, so no symlink is ever followed (-ELOOP) and
 * nothing outside the pool is touched (-EXDEV).
 */
#ifndef BLOCKD_STORE_COPY_H
#define BLOCKD_STORE_COPY_H

#include <stdbool.h>
#include <stdint.h>

#include "store/volume.h"

/* Called from the copying thread: done bytes of total (both in file
 * offsets), at start, every ≤64 MiB, and at the end. May be NULL. */
typedef void (*store_progress_fn)(uint64_t done, uint64_t total, void *arg);

enum store_copy_flags {
    STORE_COPY_NO_REFLINK = 1u << 0,    /* never try FICLONE (tests, forced fallback) */
    STORE_COPY_NO_COPY_RANGE = 1u << 1, /* read/write instead of copy_file_range */
};

/*
 * Create dst as a copy of src (snapshot creation, clone). dst must not
 * exist (-EEXIST). The copy is written to a temporary file in dst's
 * directory ("." + name + ".tmp.XXXXXX"), fsynced, renamed into place
 * without replacing anything, and the directory is fsynced, so a crash
 * leaves either no dst or a complete one (plus possibly a stale temp file).
 * *reflinked (may be NULL) tells whether FICLONE was used.
 * Returns 0 or -errno.
 */
int store_clone_file(const char *src, const char *dst, store_progress_fn progress, void *arg,
                     bool *reflinked);
/* Same with enum store_copy_flags. */
int store_clone_file_flags(const char *src, const char *dst, unsigned flags,
                           store_progress_fn progress, void *arg, bool *reflinked);

/*
 * Rollback IN PLACE: make the file at vol_path hold exactly the contents
 * (and size) of snap_path, keeping the same inode. Because the inode stays,
 * an open bdev/volume on vol_path keeps working and sees the new contents
 * at once — no re-open is needed. Reflink (FICLONE into the truncated file)
 * when possible, else: truncate to the snapshot's size, copy its data
 * ranges and punch its holes, then fdatasync.
 * Not crash-atomic: a crash in the middle of a non-reflink rollback leaves
 * a mix of old and snapshot blocks; the caller (config) should record the
 * rollback as pending and run it again after a restart until it returns 0.
 * *new_size (may be NULL) receives the snapshot's size.
 */
int store_rollback_file(const char *snap_path, const char *vol_path, unsigned flags,
                        store_progress_fn progress, void *arg, bool *reflinked, uint64_t *new_size);

/*
 * What the config layer calls for zfs.snapshot.rollback: v is the open
 * volume on vol_path, or NULL if it is not open. Flushes v, rolls back in
 * place (store_rollback_file), then, if the size changed, updates v's size
 * (volume_resize: bumps volume_size_generation so front-ends report the
 * capacity change). In-flight I/O during a rollback sees old or new data;
 * callers that care pause the volume's front-ends first.
 */
int store_rollback_volume(struct volume *v, const char *vol_path, const char *snap_path,
                          unsigned flags, store_progress_fn progress, void *arg, bool *reflinked);

/* FICLONE src_fd into dst_fd (whole file), remembering per filesystem a
 * "cannot" (then -EOPNOTSUPP at once, without asking the kernel again).
 * 0 or -errno. Blocking. */
int store_reflink_fd(int src_fd, int dst_fd);
/* Can the filesystem holding directory dir reflink (O(1) snapshots)?
 * Asked once per filesystem with two small temporary files in dir, then
 * remembered. 1 yes, 0 no, -errno if it cannot tell. Blocking. */
int store_reflink_probe(const char *dir);

/*
 * Incremental receive IN PLACE (replication): make the file at dst_path
 * hold exactly the contents (and size) of src_path, keeping its inode, and
 * write as little as possible. dst normally already holds an older state
 * of the same data (the newest snapshot both sides share). Reflink of the
 * whole file (FICLONE) when both are on one reflink filesystem. Otherwise
 * a compare-and-write: dst is truncated to src's size; where src has a
 * hole, dst's data (if any) is punched; src's data ranges are read with
 * the same ranges of dst and compared in 64 KiB blocks, and only the
 * blocks that differ are written (all-zero ones punched). Whatever dst
 * held, the result equals src; when dst held the common snapshot, only
 * what changed since it is written. Ends with fdatasync(dst).
 * Synchronous; API/job thread. stats may be NULL.
 */
struct store_update_stats {
    uint64_t size;     /* src's size */
    uint64_t compared; /* bytes of src data read and compared */
    uint64_t written;  /* bytes written to dst (differing blocks) */
    uint64_t punched;  /* bytes of dst turned into holes */
    bool reflinked;    /* FICLONE did it all */
};
int store_update_file(const char *src_path, const char *dst_path, unsigned flags,
                      store_progress_fn progress, void *arg, struct store_update_stats *stats);

/* Forget what was learned about reflink support (tests). */
void store_copy_reset_probes(void);

#endif
