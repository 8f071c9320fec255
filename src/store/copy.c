/* Reflink or sparse copies of volume files; see copy.h for the contract. */
#include "store/copy.h"

#include "store/changes.h"
#include "store/poolfs.h"
#include "store/stage.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"

#ifndef FICLONE
#define FICLONE _IOW(0x94, 9, int)
#endif

#define COPY_PIECE ((uint64_t)64 << 20) /* progress granularity */
#define RW_BUF_SIZE ((size_t)1 << 20)
#define ZERO_BLOCK 4096

/* ---- reflink probe memory, per filesystem (st_dev) ---- */

enum reflink_state { REFLINK_UNKNOWN = 0, REFLINK_YES, REFLINK_NO };

static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    dev_t dev;
    enum reflink_state state;
} probes[32];
static size_t nprobes;

static enum reflink_state probe_get(dev_t dev)
{
    enum reflink_state s = REFLINK_UNKNOWN;
    pthread_mutex_lock(&probe_lock);
    for (size_t i = 0; i < nprobes; i++)
        if (probes[i].dev == dev)
            s = probes[i].state;
    pthread_mutex_unlock(&probe_lock);
    return s;
}

static void probe_set(dev_t dev, enum reflink_state s)
{
    pthread_mutex_lock(&probe_lock);
    size_t i;
    for (i = 0; i < nprobes; i++)
        if (probes[i].dev == dev)
            break;
    if (i == nprobes) {
        if (nprobes == sizeof(probes) / sizeof(probes[0]))
            i = 0; /* full: forget the oldest answer, it is only an optimisation */
        else
            nprobes++;
    }
    probes[i].dev = dev;
    probes[i].state = s;
    pthread_mutex_unlock(&probe_lock);
}

void store_copy_reset_probes(void)
{
    pthread_mutex_lock(&probe_lock);
    nprobes = 0;
    pthread_mutex_unlock(&probe_lock);
}

/* 0 on success, -errno otherwise; remembers a "cannot" per filesystem. */
static int try_reflink(int src_fd, int dst_fd, dev_t src_dev, dev_t dst_dev)
{
    if (src_dev != dst_dev)
        return -EXDEV;
    if (probe_get(src_dev) == REFLINK_NO)
        return -EOPNOTSUPP;
    if (ioctl(dst_fd, FICLONE, src_fd) == 0) {
        probe_set(src_dev, REFLINK_YES);
        return 0;
    }
    int e = errno;
    if (e == EOPNOTSUPP || e == ENOTTY || e == EINVAL || e == ENOSYS)
        probe_set(src_dev, REFLINK_NO);
    return -e;
}

/* ---- sparse copy ---- */

struct copier {
    int src, dst;
    uint64_t size;
    bool in_place; /* dst has old contents: holes must be punched, zeros written */
    bool use_copy_range;
    char *buf;
    store_progress_fn progress;
    void *arg;
    uint64_t last_report;
};

static void report(struct copier *c, uint64_t done)
{
    if (!c->progress)
        return;
    if (done != c->size && done != 0 && done - c->last_report < COPY_PIECE)
        return;
    c->last_report = done;
    c->progress(done, c->size, c->arg);
}

static bool all_zero(const char *p, size_t n)
{
    static const char zeros[ZERO_BLOCK];
    while (n >= ZERO_BLOCK) {
        if (memcmp(p, zeros, ZERO_BLOCK))
            return false;
        p += ZERO_BLOCK;
        n -= ZERO_BLOCK;
    }
    return n == 0 || memcmp(p, zeros, n) == 0;
}

static int copy_rw(struct copier *c, uint64_t off, uint64_t len)
{
    if (!c->buf) {
        c->buf = malloc(RW_BUF_SIZE);
        if (!c->buf)
            return -ENOMEM;
    }
    while (len > 0) {
        size_t want = len < RW_BUF_SIZE ? (size_t)len : RW_BUF_SIZE;
        ssize_t n = pread(c->src, c->buf, want, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return 0; /* the source shrank under us: the rest stays a hole */
        /* Keep the copy sparse: a fresh file already reads zeros there. */
        for (size_t at = 0; at < (size_t)n; at += ZERO_BLOCK) {
            size_t bn = (size_t)n - at < ZERO_BLOCK ? (size_t)n - at : ZERO_BLOCK;
            if (!c->in_place && all_zero(c->buf + at, bn))
                continue;
            int rc = pwrite_all(c->dst, c->buf + at, bn, off + at);
            if (rc < 0)
                return rc;
        }
        off += (uint64_t)n;
        len -= (uint64_t)n;
        report(c, off);
    }
    return 0;
}

static int copy_data(struct copier *c, uint64_t off, uint64_t len)
{
    while (len > 0 && c->use_copy_range) {
        loff_t in = (loff_t)off, out = (loff_t)off;
        size_t want = len < COPY_PIECE ? (size_t)len : (size_t)COPY_PIECE;
        ssize_t n = copy_file_range(c->src, &in, c->dst, &out, want, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
                c->use_copy_range = false;
                break;
            }
            return -errno;
        }
        if (n == 0)
            return 0;
        off += (uint64_t)n;
        len -= (uint64_t)n;
        report(c, off);
    }
    return len > 0 ? copy_rw(c, off, len) : 0;
}

static int punch(struct copier *c, uint64_t off, uint64_t len)
{
    if (fallocate(c->dst, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) == 0)
        return 0;
    if (errno != EOPNOTSUPP)
        return -errno;
    /* No hole punching here: write the zeros. */
    if (!c->buf) {
        c->buf = malloc(RW_BUF_SIZE);
        if (!c->buf)
            return -ENOMEM;
    }
    memset(c->buf, 0, RW_BUF_SIZE);
    while (len > 0) {
        size_t n = len < RW_BUF_SIZE ? (size_t)len : RW_BUF_SIZE;
        int rc = pwrite_all(c->dst, c->buf, n, off);
        if (rc < 0)
            return rc;
        off += n;
        len -= n;
    }
    return 0;
}

/* The source's next data range at or after pos, within c->size:
 * [*dstart, *dend); *dstart == *dend == c->size when only a hole remains.
 * A filesystem without SEEK_DATA has all of the rest as data. */
static int next_data(struct copier *c, uint64_t pos, uint64_t *dstart, uint64_t *dend)
{
    off_t data = lseek(c->src, (off_t)pos, SEEK_DATA);
    if (data < 0) {
        if (errno == ENXIO) {
            *dstart = *dend = c->size;
            return 0;
        }
        if (errno != EINVAL)
            return -errno;
        *dstart = pos;
        *dend = c->size;
        return 0;
    }
    *dstart = (uint64_t)data < c->size ? (uint64_t)data : c->size;
    off_t hole = lseek(c->src, (off_t)*dstart, SEEK_HOLE);
    if (hole < 0 && errno != ENXIO)
        return -errno;
    *dend = hole < 0 || (uint64_t)hole > c->size ? c->size : (uint64_t)hole;
    if (*dend <= *dstart)
        *dend = c->size;
    return 0;
}

/* What a walk over the source does with a hole or a data range: 0 or -errno. */
typedef int (*extent_fn)(struct copier *c, uint64_t off, uint64_t len);

/* Walk the source from 0 to c->size: hole() on each hole, data() on each
 * data range, reporting progress after each. 0 or the first error. */
static int walk_extents(struct copier *c, extent_fn hole, extent_fn data)
{
    uint64_t pos = 0;
    report(c, 0);
    while (pos < c->size) {
        uint64_t dstart = c->size, dend = c->size; /* (set by next_data) */
        int rc = next_data(c, pos, &dstart, &dend);
        if (rc < 0)
            return rc;
        if (dstart > pos)
            rc = hole(c, pos, dstart - pos);
        if (rc == 0 && dend > dstart)
            rc = data(c, dstart, dend - dstart);
        if (rc < 0)
            return rc;
        pos = dend;
        report(c, pos);
    }
    report(c, c->size);
    return 0;
}

/* A fresh destination already reads zeros in a hole; one copied over in
 * place must have the hole punched. */
static int copy_hole(struct copier *c, uint64_t off, uint64_t len)
{
    return c->in_place ? punch(c, off, len) : 0;
}

static int copy_sparse(struct copier *c)
{
    return walk_extents(c, copy_hole, copy_data);
}

/* ---- public ---- */

/* Fill sg's empty temporary with src's contents: a reflink where the
 * filesystem can (remembered per device), else a sparse copy. *what names
 * the step that failed. */
static int clone_fill(struct store_stage *sg, unsigned flags, store_progress_fn progress, void *arg,
                      bool *cloned, const char **what)
{
    struct stat dst_st;
    struct copier c = {.src = sg->src_fd,
                       .dst = sg->tmp_fd,
                       .size = (uint64_t)sg->src_st.st_size,
                       .use_copy_range = !(flags & STORE_COPY_NO_COPY_RANGE),
                       .progress = progress,
                       .arg = arg};

    *what = "copy";
    if (fstat(sg->tmp_fd, &dst_st) < 0)
        return -errno;
    if (!(flags & STORE_COPY_NO_REFLINK) &&
        try_reflink(sg->src_fd, sg->tmp_fd, sg->src_st.st_dev, dst_st.st_dev) == 0) {
        *cloned = true;
        if (progress)
            progress(c.size, c.size, arg);
        return 0;
    }
    *what = "ftruncate";
    if (ftruncate(sg->tmp_fd, (off_t)c.size) < 0)
        return -errno;
    *what = "sparse copy";
    int rc = copy_sparse(&c);
    free(c.buf);
    return rc;
}

int store_clone_file_flags(const char *src, const char *dst, unsigned flags,
                           store_progress_fn progress, void *arg, bool *reflinked)
{
    struct store_stage sg;
    const char *what;
    bool cloned = false;

    if (reflinked)
        *reflinked = false;
    int rc = store_stage_open(&sg, "copy", src, dst);
    if (rc < 0)
        return rc;
    rc = clone_fill(&sg, flags, progress, arg, &cloned, &what);
    if (rc < 0)
        return store_stage_abort(&sg, what, rc);
    rc = store_stage_publish(&sg);
    if (rc == 0 && reflinked)
        *reflinked = cloned;
    return rc;
}

int store_clone_file(const char *src, const char *dst, store_progress_fn progress, void *arg,
                     bool *reflinked)
{
    return store_clone_file_flags(src, dst, 0, progress, arg, reflinked);
}

int store_rollback_file(const char *snap_path, const char *vol_path, unsigned flags,
                        store_progress_fn progress, void *arg, bool *reflinked, uint64_t *new_size)
{
    if (reflinked)
        *reflinked = false;
    int rc;
    int sfd = poolfs_open(snap_path, O_RDONLY, 0);
    if (sfd < 0) {
        rc = sfd;
        log_error("store: rollback: open %s: %s", snap_path, strerror(-rc));
        return rc;
    }
    int dfd = poolfs_open(vol_path, O_RDWR, 0);
    if (dfd < 0) {
        rc = dfd;
        log_error("store: rollback: open %s: %s", vol_path, strerror(-rc));
        close(sfd);
        return rc;
    }
    struct stat sst, dst_st;
    const char *what = "fstat";
    struct copier c = {.src = sfd,
                       .dst = dfd,
                       .in_place = true,
                       .use_copy_range = !(flags & STORE_COPY_NO_COPY_RANGE),
                       .progress = progress,
                       .arg = arg};
    if (fstat(sfd, &sst) < 0 || fstat(dfd, &dst_st) < 0) {
        rc = -errno;
        goto out;
    }
    if (!S_ISREG(sst.st_mode) || !S_ISREG(dst_st.st_mode)) {
        rc = -EINVAL;
        goto out;
    }
    c.size = (uint64_t)sst.st_size;
    /* Truncate first: FICLONE leaves anything past the source's end, and
     * the copy path then only has to deal with [0, size). */
    what = "ftruncate";
    if (ftruncate(dfd, (off_t)c.size) < 0) {
        rc = -errno;
        goto out;
    }
    bool cloned = false;
    if (!(flags & STORE_COPY_NO_REFLINK) && try_reflink(sfd, dfd, sst.st_dev, dst_st.st_dev) == 0) {
        cloned = true;
        if (progress)
            progress(c.size, c.size, arg);
    } else {
        what = "copy";
        rc = copy_sparse(&c);
        if (rc < 0)
            goto out;
    }
    what = "fdatasync";
    if (fdatasync(dfd) < 0) {
        rc = -errno;
        goto out;
    }
    rc = 0;
    if (reflinked)
        *reflinked = cloned;
    if (new_size)
        *new_size = c.size;
out:
    if (rc < 0)
        log_error("store: rollback %s ← %s: %s: %s", vol_path, snap_path, what, strerror(-rc));
    close(dfd);
    close(sfd);
    free(c.buf);
    return rc;
}

int store_rollback_volume(struct volume *v, const char *vol_path, const char *snap_path,
                          unsigned flags, store_progress_fn progress, void *arg, bool *reflinked)
{
    if (v) {
        int rc = volume_flush_wait(v);
        if (rc < 0)
            return rc;
        /* the file changes behind its backend: its change log cannot say how */
        struct store_changes *log = bdev_file_changes(volume_bdev(v));
        if (log)
            store_changes_invalidate(log);
    }
    uint64_t size = 0;
    int rc = store_rollback_file(snap_path, vol_path, flags, progress, arg, reflinked, &size);
    if (rc < 0 || !v)
        return rc;
    if (size != volume_size(v)) {
        rc = volume_resize(v, size);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int store_reflink_fd(int src_fd, int dst_fd)
{
    struct stat s, d;
    if (fstat(src_fd, &s) < 0 || fstat(dst_fd, &d) < 0)
        return -errno;
    return try_reflink(src_fd, dst_fd, s.st_dev, d.st_dev);
}

int store_reflink_probe(const char *dir)
{
    struct stat st;
    char a[4096], b[4096];
    static const char block[4096] = {1};

    if (stat(dir, &st) < 0)
        return -errno;
    enum reflink_state s = probe_get(st.st_dev);
    if (s != REFLINK_UNKNOWN)
        return s == REFLINK_YES;
    /* Names the start-up sweep of interrupted copies recognises. */
    if (snprintf(a, sizeof(a), "%s/.reflink-probe.tmp.XXXXXX", dir) >= (int)sizeof(a))
        return -ENAMETOOLONG;
    memcpy(b, a, sizeof(b));
    int fa = poolfs_mkstemp(a, 0);
    if (fa < 0)
        return fa;
    int fb = poolfs_mkstemp(b, 0);
    int rc = fb < 0 ? fb : 0;
    if (rc == 0 && pwrite_all(fa, block, sizeof(block), 0) < 0)
        rc = -EIO;
    if (rc == 0) {
        rc = try_reflink(fa, fb, st.st_dev, st.st_dev);
        if (rc == 0)
            rc = 1;
        else if (probe_get(st.st_dev) == REFLINK_NO)
            rc = 0;
    }
    close(fa);
    poolfs_unlink(a);
    if (fb >= 0) {
        close(fb);
        poolfs_unlink(b);
    }
    return rc;
}

/* ---- incremental update (replication) ---- */

#define UPDATE_BLOCK ((size_t)64 << 10) /* compare granularity */

struct updater {
    struct copier c; /* src, dst, size, buf (src data), progress */
    char *dbuf;      /* dst data */
    struct store_update_stats *st;
};

/* Does dst hold any data in [off, off + len)? */
static int dst_has_data(int fd, uint64_t off, uint64_t len)
{
    off_t d = lseek(fd, (off_t)off, SEEK_DATA);
    if (d < 0)
        return errno == ENXIO ? 0 : (errno == EINVAL ? 1 : -errno);
    return (uint64_t)d < off + len;
}

static int read_full(int fd, char *p, size_t n, uint64_t off, size_t *got)
{
    size_t done = 0;

    *got = 0; /* set on every path, the error ones included */
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    *got = done;
    return 0;
}

/* Compare src's data range [off, off + len) with dst and write what differs. */
static int update_data(struct updater *u, uint64_t off, uint64_t len)
{
    struct copier *c = &u->c;
    while (len > 0) {
        size_t want = len < RW_BUF_SIZE ? (size_t)len : RW_BUF_SIZE, sgot, dgot = 0;
        int rc = read_full(c->src, c->buf, want, off, &sgot);
        if (rc < 0)
            return rc;
        if (sgot == 0)
            return 0; /* the source shrank under us */
        /* A dst without data here reads as zeros: skip reading it. */
        int has = dst_has_data(c->dst, off, sgot);
        if (has < 0)
            return has;
        if (has) {
            rc = read_full(c->dst, u->dbuf, sgot, off, &dgot);
            if (rc < 0)
                return rc;
        }
        memset(u->dbuf + dgot, 0, sgot - dgot);
        u->st->compared += sgot;
        for (size_t at = 0; at < sgot; at += UPDATE_BLOCK) {
            size_t bn = sgot - at < UPDATE_BLOCK ? sgot - at : UPDATE_BLOCK;
            if (memcmp(c->buf + at, u->dbuf + at, bn) == 0)
                continue;
            if (all_zero(c->buf + at, bn) &&
                fallocate(c->dst, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(off + at),
                          (off_t)bn) == 0) {
                /* (not punch(): its fallback would reuse c->buf) */
                u->st->punched += bn;
            } else {
                rc = pwrite_all(c->dst, c->buf + at, bn, off + at);
                u->st->written += bn;
            }
            if (rc < 0)
                return rc;
        }
        off += sgot;
        len -= sgot;
        report(c, off);
    }
    return 0;
}

/* A hole in src: dst must read zeros there too. */
static int update_hole(struct copier *c, uint64_t off, uint64_t len)
{
    struct updater *u = container_of(c, struct updater, c);
    int has = dst_has_data(c->dst, off, len);
    if (has <= 0)
        return has;
    int rc = punch(c, off, len);
    if (rc == 0)
        u->st->punched += len;
    return rc;
}

static int update_extent(struct copier *c, uint64_t off, uint64_t len)
{
    return update_data(container_of(c, struct updater, c), off, len);
}

static int update_sparse(struct updater *u)
{
    return walk_extents(&u->c, update_hole, update_extent);
}

int store_update_file(const char *src_path, const char *dst_path, unsigned flags,
                      store_progress_fn progress, void *arg, struct store_update_stats *stats)
{
    struct store_update_stats local;
    struct updater u = {.st = stats ? stats : &local};
    struct stat sst, dst_st;
    const char *what = "open";
    int rc;

    memset(u.st, 0, sizeof(*u.st));
    u.c.src = poolfs_open(src_path, O_RDONLY, 0);
    if (u.c.src < 0) {
        rc = u.c.src;
        log_error("store: update: open %s: %s", src_path, strerror(-rc));
        return rc;
    }
    u.c.dst = poolfs_open(dst_path, O_RDWR, 0);
    if (u.c.dst < 0) {
        rc = u.c.dst;
        log_error("store: update: open %s: %s", dst_path, strerror(-rc));
        close(u.c.src);
        return rc;
    }
    u.c.in_place = true;
    u.c.progress = progress;
    u.c.arg = arg;
    what = "fstat";
    if (fstat(u.c.src, &sst) < 0 || fstat(u.c.dst, &dst_st) < 0) {
        rc = -errno;
        goto out;
    }
    if (!S_ISREG(sst.st_mode) || !S_ISREG(dst_st.st_mode)) {
        rc = -EINVAL;
        goto out;
    }
    u.c.size = u.st->size = (uint64_t)sst.st_size;
    what = "ftruncate";
    if (ftruncate(u.c.dst, (off_t)u.c.size) < 0) {
        rc = -errno;
        goto out;
    }
    if (!(flags & STORE_COPY_NO_REFLINK) &&
        try_reflink(u.c.src, u.c.dst, sst.st_dev, dst_st.st_dev) == 0) {
        u.st->reflinked = true;
        if (progress)
            progress(u.c.size, u.c.size, arg);
    } else {
        what = "compare-and-write";
        u.c.buf = malloc(RW_BUF_SIZE);
        u.dbuf = malloc(RW_BUF_SIZE);
        if (!u.c.buf || !u.dbuf) {
            rc = -ENOMEM;
            goto out;
        }
        rc = update_sparse(&u);
        if (rc < 0)
            goto out;
    }
    what = "fdatasync";
    rc = fdatasync(u.c.dst) < 0 ? -errno : 0;
out:
    if (rc < 0)
        log_error("store: update %s ← %s: %s: %s", dst_path, src_path, what, strerror(-rc));
    close(u.c.dst);
    close(u.c.src);
    free(u.c.buf);
    free(u.dbuf);
    return rc;
}
