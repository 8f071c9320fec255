/* A new file staged beside its final name; see stage.h for the contract. */
#include "store/stage.h"
#include "store/poolfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

/* dst's directory into out (".": a bare name) and its last component. */
static int dir_of(const char *path, char *out, size_t outlen, const char **base)
{
    const char *slash = strrchr(path, '/');
    size_t n;
    if (!slash) {
        n = 1;
        if (outlen < 2)
            return -ENAMETOOLONG;
        out[0] = '.';
        *base = path;
    } else {
        n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= outlen)
            return -ENAMETOOLONG;
        memcpy(out, path, n);
        *base = slash + 1;
    }
    out[n] = '\0';
    return **base ? 0 : -EINVAL;
}

static int stage_open_source(struct store_stage *sg)
{
    int rc;
    sg->src_fd = poolfs_open(sg->src, O_RDONLY, 0);
    if (sg->src_fd < 0) {
        rc = sg->src_fd;
        log_error("store: %s: open %s: %s", sg->op, sg->src, strerror(-rc));
        return rc;
    }
    if (fstat(sg->src_fd, &sg->src_st) < 0) {
        rc = -errno;
        close(sg->src_fd);
        return rc;
    }
    if (!S_ISREG(sg->src_st.st_mode)) {
        log_error("store: %s: %s is not a regular file", sg->op, sg->src);
        close(sg->src_fd);
        return -EINVAL;
    }
    return 0;
}

int store_stage_open(struct store_stage *sg, const char *op, const char *src, const char *dst)
{
    const char *base;
    struct stat dst_st;

    sg->op = op;
    sg->src = src;
    sg->dst = dst;
    sg->src_fd = sg->tmp_fd = -1;
    int rc = dir_of(dst, sg->dir, sizeof(sg->dir), &base);
    if (rc < 0)
        return rc;
    if (poolfs_stat(dst, &dst_st) == 0)
        return -EEXIST;
    int n = snprintf(sg->tmp, sizeof(sg->tmp), "%s/.%s.tmp.XXXXXX", sg->dir, base);
    if (n < 0 || (size_t)n >= sizeof(sg->tmp))
        return -ENAMETOOLONG;
    rc = stage_open_source(sg);
    if (rc < 0)
        return rc;
    sg->tmp_fd = poolfs_mkstemp(sg->tmp, 0);
    if (sg->tmp_fd < 0) {
        rc = sg->tmp_fd;
        log_error("store: %s: create temp in %s: %s", op, sg->dir, strerror(-rc));
        close(sg->src_fd);
        return rc;
    }
    return 0;
}

int store_stage_publish(struct store_stage *sg)
{
    if (fchmod(sg->tmp_fd, sg->src_st.st_mode & 07777) < 0)
        return store_stage_abort(sg, "fchmod", -errno);
    if (fsync(sg->tmp_fd) < 0)
        return store_stage_abort(sg, "fsync", -errno);
    int rc = poolfs_publish(sg->tmp, sg->dst);
    if (rc < 0)
        return store_stage_abort(sg, "rename", rc);
    close(sg->tmp_fd);
    close(sg->src_fd);
    rc = poolfs_fsync_parent(sg->dst);
    if (rc < 0) {
        /* The name may not survive a crash: report failure and leave
         * nothing behind, so a retry starts clean. */
        log_error("store: %s: fsync directory %s: %s", sg->op, sg->dir, strerror(-rc));
        poolfs_unlink(sg->dst);
    }
    return rc;
}

int store_stage_abort(struct store_stage *sg, const char *what, int rc)
{
    log_error("store: %s %s → %s: %s: %s", sg->op, sg->src, sg->dst, what, strerror(-rc));
    close(sg->tmp_fd);
    close(sg->src_fd);
    poolfs_unlink(sg->tmp);
    return rc;
}
