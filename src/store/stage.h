/*
 * A new file staged beside its final name: the one way store/ creates a
 * file from another (clones, snapshots), so that a crash leaves either no
 * file at the final name or a complete, durable one.
 *
 *   store_stage_open     src opened, an empty temporary created in dst's
 *                        directory ("." + name + ".tmp.XXXXXX", mode 0)
 *   (the caller fills tmp_fd from src_fd)
 *   store_stage_publish  src's mode given, fsynced, renamed to dst without
 *                        replacing anything, directory fsynced
 *   store_stage_abort    instead of publishing: the temporary removed
 *
 * Synchronous, may block (fsync): API/control threads and I/O pool jobs
 * only, never a reactor. Every path goes through store/poolfs.h, so it
 * must lie beneath a registered pool root and no symlink is followed.
 * The struct lives on the caller's stack; after publish or abort its
 * descriptors are closed and nothing of it needs freeing.
 */
#ifndef BLOCKD_STORE_STAGE_H
#define BLOCKD_STORE_STAGE_H

#include <sys/stat.h>

struct store_stage {
    const char *op; /* names the operation in log lines: "copy", "snapshot" */
    const char *src, *dst;
    char dir[4096];      /* dst's directory */
    char tmp[4096 + 64]; /* the temporary file's path */
    int src_fd;          /* src, read-only */
    int tmp_fd;          /* the temporary, read-write */
    struct stat src_st;  /* src, a regular file */
};

/*
 * Open src (a regular file, else -EINVAL) and create the temporary beside
 * dst, which must not exist (-EEXIST). op, src and dst must outlive sg.
 * Returns 0, or -errno with nothing left open or created (failures to open
 * src or create the temporary are logged).
 */
int store_stage_open(struct store_stage *sg, const char *op, const char *src, const char *dst);

/*
 * Publish the filled temporary as dst (see above) and close both files.
 * Returns 0 or -errno, logged; on failure neither the temporary nor dst
 * is left behind, so a retry starts clean.
 */
int store_stage_publish(struct store_stage *sg);

/*
 * The fill failed at step what with rc (-errno): log it, close both files,
 * remove the temporary. Returns rc.
 */
int store_stage_abort(struct store_stage *sg, const char *what, int rc);

#endif
