/* The file backend: a regular (usually sparse) file or a block device.
 * Optional kernel features are probed once per filesystem (block devices:
 * per open) and remembered in caps and in the flags below; the portable
 * path stays available behind each. */
#include "core/log.h"
#include "core/util.h"
#include "store/bdev.h"
#include "store/changes.h"
#include "store/poolfs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif

struct bdev_file {
    struct bdev base;
    int fd;
    bool is_blockdev;
    /* Cleared at run time when the kernel says EOPNOTSUPP after all. */
    atomic_bool read_nowait_ok;
    atomic_bool write_nowait_ok;
    atomic_bool punch_ok;
    atomic_bool zero_range_ok;
    bool seek_data_ok;
    /* writable volumes in pools without reflink: what changed since the
     * last snapshot (store/changes.h); NULL otherwise */
    struct store_changes *changes;
    char path[];
};

static struct bdev_file *to_file(struct bdev *b)
{
    return (struct bdev_file *)b;
}

/* Zeros for the write-zeroes fallback; lives in .bss so it costs nothing. */
static const char zero_buf[256 * 1024];

/* Read len bytes at *off into p; what lies past EOF reads as zeros (the
 * file is shorter than the volume, e.g. resized elsewhere). nowait: with
 * RWF_NOWAIT (fails with EAGAIN rather than wait for the disk). 0, or
 * -errno of the read that failed, with *off where it was. */
static int read_or_zeros(int fd, char *p, size_t len, uint64_t *off, bool nowait)
{
    while (len > 0) {
        struct iovec iov = {.iov_base = p, .iov_len = len};
        ssize_t n =
            nowait ? preadv2(fd, &iov, 1, (off_t)*off, RWF_NOWAIT) : pread(fd, p, len, (off_t)*off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0) {
            memset(p, 0, len);
            return 0;
        }
        p += n;
        len -= (size_t)n;
        *off += (uint64_t)n;
    }
    return 0;
}

static int file_read(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    struct bdev_file *f = to_file(b);
    int rc = read_or_zeros(f->fd, buf, len, &off, false);
    if (rc < 0)
        log_error("store: pread %s at %llu: %s", f->path, (unsigned long long)off, strerror(-rc));
    return rc;
}

static int file_read_nowait(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    struct bdev_file *f = to_file(b);
    if (!atomic_load_explicit(&f->read_nowait_ok, memory_order_relaxed))
        return -EAGAIN;
    int rc = read_or_zeros(f->fd, buf, len, &off, true);
    if (rc == -EOPNOTSUPP || rc == -ENOSYS || rc == -EINVAL)
        atomic_store(&f->read_nowait_ok, false);
    /* Anything unusual is retried (and logged) by the blocking path. */
    return rc < 0 ? -EAGAIN : 0;
}

static int file_write(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    struct bdev_file *f = to_file(b);
    if (f->changes)
        store_changes_mark(f->changes, off, len);
    int rc = pwrite_all(f->fd, buf, len, off);
    if (rc < 0)
        log_error("store: pwrite %s at %llu (%zu bytes): %s", f->path, (unsigned long long)off, len,
                  strerror(-rc));
    return rc;
}

static int file_write_nowait(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    struct bdev_file *f = to_file(b);
    if (!atomic_load_explicit(&f->write_nowait_ok, memory_order_relaxed))
        return -EAGAIN;
    if (f->changes)
        store_changes_mark(f->changes, off, len);
    const char *p = buf;
    while (len > 0) {
        struct iovec iov = {.iov_base = (void *)p, .iov_len = len};
        ssize_t n = pwritev2(f->fd, &iov, 1, (off_t)off, RWF_NOWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL)
                atomic_store(&f->write_nowait_ok, false);
            /* A partial write followed by EAGAIN is redone whole by the
             * blocking path: rewriting the same bytes is harmless. */
            return -EAGAIN;
        }
        if (n == 0)
            return -EAGAIN;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

static int file_sync(struct bdev *b)
{
    struct bdev_file *f = to_file(b);
    if (fdatasync(f->fd) < 0) {
        int e = errno;
        log_error("store: fdatasync %s: %s", f->path, strerror(e));
        return -e;
    }
    return 0;
}

static int file_fallocate(struct bdev_file *f, int mode, uint64_t off, uint64_t len)
{
    while (fallocate(f->fd, mode, (off_t)off, (off_t)len) < 0) {
        if (errno == EINTR)
            continue;
        return -errno;
    }
    return 0;
}

static int file_trim(struct bdev *b, uint64_t off, uint64_t len)
{
    struct bdev_file *f = to_file(b);
    if (len == 0)
        return 0;
    if (!atomic_load(&f->punch_ok))
        return -EOPNOTSUPP;
    if (f->changes)
        store_changes_mark(f->changes, off, len);
    int rc = file_fallocate(f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
    if (rc == -EOPNOTSUPP) {
        atomic_store(&f->punch_ok, false);
        return rc;
    }
    if (rc < 0)
        log_error("store: punch hole %s at %llu+%llu: %s", f->path, (unsigned long long)off,
                  (unsigned long long)len, strerror(-rc));
    return rc;
}

static int file_write_zeroes(struct bdev *b, uint64_t off, uint64_t len, unsigned flags)
{
    struct bdev_file *f = to_file(b);
    if (len == 0)
        return 0;
    if (f->changes)
        store_changes_mark(f->changes, off, len);
    if ((flags & BDEV_ZERO_MAY_TRIM) && atomic_load(&f->punch_ok)) {
        /* A punched range reads back as zeros on files and block devices. */
        int rc = file_fallocate(f, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len);
        if (rc == 0)
            return 0;
        if (rc == -EOPNOTSUPP)
            atomic_store(&f->punch_ok, false);
        else
            log_warn("store: punch hole %s: %s; zeroing instead", f->path, strerror(-rc));
    }
    if (atomic_load(&f->zero_range_ok)) {
        int rc = file_fallocate(f, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, off, len);
        if (rc == 0)
            return 0;
        if (rc == -EOPNOTSUPP)
            atomic_store(&f->zero_range_ok, false);
        else if (rc == -ENOSPC) {
            log_error("store: zero range %s: %s", f->path, strerror(-rc));
            return rc;
        }
    }
    if (flags & BDEV_ZERO_FAST)
        return -ENOTSUP;
    while (len > 0) {
        size_t n = len < sizeof(zero_buf) ? (size_t)len : sizeof(zero_buf);
        int rc = file_write(b, zero_buf, n, off);
        if (rc < 0)
            return rc;
        off += n;
        len -= n;
    }
    return 0;
}

static int file_cache(struct bdev *b, uint64_t off, uint64_t len)
{
    struct bdev_file *f = to_file(b);
    int rc = posix_fadvise(f->fd, (off_t)off, (off_t)len, POSIX_FADV_WILLNEED);
    return rc ? -rc : 0;
}

static int extent_push(struct extent *out, size_t max, size_t *n, uint64_t off, uint64_t len,
                       enum extent_type type)
{
    if (*n > 0 && out[*n - 1].type == type && out[*n - 1].offset + out[*n - 1].length == off) {
        out[*n - 1].length += len;
        return 0;
    }
    if (*n >= max)
        return -ENOSPC;
    out[*n] = (struct extent){.offset = off, .length = len, .type = type};
    (*n)++;
    return 0;
}

static int file_extents(struct bdev *b, uint64_t off, uint64_t len, struct extent *out, size_t max,
                        size_t *n)
{
    struct bdev_file *f = to_file(b);
    *n = 0;
    if (max == 0)
        return -EINVAL;
    uint64_t end = off + len;
    if (!f->seek_data_ok) {
        if (len)
            extent_push(out, max, n, off, len, EXTENT_DATA);
        return 0;
    }
    uint64_t pos = off;
    while (pos < end) {
        off_t data = lseek(f->fd, (off_t)pos, SEEK_DATA);
        if (data < 0) {
            if (errno != ENXIO) {
                int e = errno;
                log_error("store: SEEK_DATA %s: %s", f->path, strerror(e));
                return -e;
            }
            /* No data at or after pos (includes past EOF): all hole. */
            if (extent_push(out, max, n, pos, end - pos, EXTENT_HOLE) < 0)
                return 0;
            return 0;
        }
        if ((uint64_t)data > pos) {
            uint64_t hend = (uint64_t)data < end ? (uint64_t)data : end;
            if (extent_push(out, max, n, pos, hend - pos, EXTENT_HOLE) < 0)
                return 0;
            pos = hend;
            continue;
        }
        off_t hole = lseek(f->fd, (off_t)pos, SEEK_HOLE);
        if (hole < 0) {
            int e = errno;
            log_error("store: SEEK_HOLE %s: %s", f->path, strerror(e));
            return -e;
        }
        uint64_t dend = (uint64_t)hole < end ? (uint64_t)hole : end;
        if (dend <= pos) /* raced with a concurrent punch: data is always safe */
            dend = end;
        if (extent_push(out, max, n, pos, dend - pos, EXTENT_DATA) < 0)
            return 0;
        pos = dend;
    }
    return 0;
}

static int file_resize(struct bdev *b, uint64_t new_size)
{
    struct bdev_file *f = to_file(b);
    if (f->is_blockdev)
        return -ENOTSUP;
    if (ftruncate(f->fd, (off_t)new_size) < 0) {
        int e = errno;
        log_error("store: ftruncate %s to %llu: %s", f->path, (unsigned long long)new_size,
                  strerror(e));
        return -e;
    }
    b->size = new_size;
    if (f->changes)
        store_changes_invalidate(f->changes); /* made for the old size */
    return 0;
}

static void file_close(struct bdev *b)
{
    struct bdev_file *f = to_file(b);
    close(f->fd);
    store_changes_free(f->changes);
    free(f);
}

static int file_read_fd(struct bdev *b)
{
    return to_file(b)->fd;
}

static const struct bdev_ops file_ops = {
    .name = "file",
    .read = file_read,
    .read_nowait = file_read_nowait,
    .write = file_write,
    .write_nowait = file_write_nowait,
    .sync = file_sync,
    .trim = file_trim,
    .write_zeroes = file_write_zeroes,
    .cache = file_cache,
    .extents = file_extents,
    .resize = file_resize,
    .close = file_close,
    .read_fd = file_read_fd,
};

/* 1 if the device under st_dev (or the block device itself) spins. */
static bool probe_rotational(dev_t dev)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/queue/rotational", major(dev), minor(dev));
    FILE *fp = fopen(path, "re");
    if (!fp) {
        /* A partition: the queue lives on the parent disk. */
        snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/../queue/rotational", major(dev),
                 minor(dev));
        fp = fopen(path, "re");
    }
    if (!fp)
        return false;
    int c = fgetc(fp);
    fclose(fp);
    return c == '1';
}

/* What the probes found for one filesystem. */
struct fs_probe {
    dev_t dev;
    bool writable; /* probed on a writable open: punch and zero_range are known */
    bool nowait, punch, zero_range, seek_data, rotational;
};

/* Probe results of regular files, per filesystem (st_dev): the probes cost
 * 8 system calls, and ZERO_RANGE allocates a block that PUNCH_HOLE then
 * frees (metadata for the disk to write back), at every open, i.e. for
 * every iSCSI share created. A feature that fails later anyway (a file the
 * filesystem treats differently, or another filesystem mounted later on a
 * reused device number) is turned off at run time by the paths above;
 * SEEK_DATA needs no fallback, the VFS answers it for filesystems without
 * holes. Block devices are probed at each open. */
#define FS_PROBES_MAX 16
static pthread_mutex_t fs_probes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fs_probe fs_probes[FS_PROBES_MAX];
static size_t fs_probes_n;

static bool fs_probe_find(dev_t dev, bool readonly, struct fs_probe *out)
{
    bool found = false;
    pthread_mutex_lock(&fs_probes_lock);
    for (size_t i = 0; i < fs_probes_n && !found; i++) {
        if (fs_probes[i].dev == dev && (readonly || fs_probes[i].writable)) {
            *out = fs_probes[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&fs_probes_lock);
    return found;
}

static void fs_probe_save(const struct fs_probe *p)
{
    pthread_mutex_lock(&fs_probes_lock);
    size_t i = 0;
    while (i < fs_probes_n && fs_probes[i].dev != p->dev)
        i++;
    if (i == fs_probes_n && fs_probes_n < FS_PROBES_MAX)
        fs_probes[fs_probes_n++] = *p;
    else if (i < fs_probes_n && (p->writable || !fs_probes[i].writable))
        fs_probes[i] = *p; /* a writable probe knows more than a read-only one */
    pthread_mutex_unlock(&fs_probes_lock);
}

static void probe_file(struct bdev_file *f, bool readonly, struct fs_probe *p)
{
    /* One byte, not zero: a zero-length read returns before the kernel
     * looks at the flags. EAGAIN (not cached) also means "supported". */
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    ssize_t r = preadv2(f->fd, &iov, 1, 0, RWF_NOWAIT);
    p->nowait = r >= 0 || errno == EAGAIN;
    p->writable = !readonly;
    p->punch = p->zero_range = false;
    if (!readonly) {
        if (f->is_blockdev) {
            /* Cannot probe without touching data; assume and fall back on
             * EOPNOTSUPP at run time. */
            p->punch = p->zero_range = true;
        } else {
            /* Probe past EOF so no data is touched; KEEP_SIZE keeps the size. */
            uint64_t at = (f->base.size + 4095) & ~(uint64_t)4095;
            p->punch =
                fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, 4096) == 0;
            p->zero_range =
                fallocate(f->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)at, 4096) == 0;
            if (p->zero_range) /* give back the block the probe allocated */
                (void)fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)at, 4096);
        }
    }
    p->seek_data = false;
    if (!f->is_blockdev) {
        off_t d = lseek(f->fd, 0, SEEK_DATA);
        p->seek_data = d >= 0 || errno == ENXIO;
    }
    p->rotational = probe_rotational(p->dev);
}

static void probe_caps(struct bdev_file *f, bool readonly, const struct stat *st)
{
    struct fs_probe p = {.dev = f->is_blockdev ? st->st_rdev : st->st_dev};
    if (f->is_blockdev || !fs_probe_find(p.dev, readonly, &p)) {
        probe_file(f, readonly, &p);
        if (!f->is_blockdev)
            fs_probe_save(&p);
    }
    atomic_init(&f->read_nowait_ok, p.nowait);
    atomic_init(&f->write_nowait_ok, p.nowait && !readonly);
    bool punch = p.punch && !readonly, zero_range = p.zero_range && !readonly;
    atomic_init(&f->punch_ok, punch);
    atomic_init(&f->zero_range_ok, zero_range);
    f->seek_data_ok = p.seek_data;

    unsigned caps = BDEV_CAN_FLUSH | BDEV_CAN_MULTI_CONN | BDEV_CAN_CACHE;
    if (punch)
        caps |= BDEV_CAN_TRIM | BDEV_TRIM_ZEROES;
    if (punch || zero_range)
        caps |= BDEV_CAN_ZERO | BDEV_CAN_FAST_ZERO;
    if (f->seek_data_ok)
        caps |= BDEV_CAN_EXTENTS;
    if (p.rotational)
        caps |= BDEV_ROTATIONAL;
    f->base.caps = caps;
}

/* open(2), or poolfs_open when the file must lie beneath a pool root. */
static int path_open(const char *path, int flags, mode_t mode, bool in_pool)
{
    if (in_pool)
        return poolfs_open(path, flags, mode);
    int fd = open(path, flags | O_CLOEXEC, mode);
    return fd < 0 ? -errno : fd;
}

/* A volume in a pool whose snapshots are copies (no reflink) keeps a
 * change log, so that changed blocks need not compare the copies. */
static int changes_start(struct bdev_file *f)
{
    struct statfs sf;
    if (f->is_blockdev || !store_changes_enabled() || fstatfs(f->fd, &sf) < 0 ||
        sf.f_type == XFS_SUPER_MAGIC || sf.f_type == BTRFS_SUPER_MAGIC)
        return 0;
    return store_changes_new(f->base.size, &f->changes);
}

static int file_open(const char *path, bool readonly, bool in_pool, struct bdev **out)
{
    *out = NULL;
    size_t plen = strlen(path);
    struct bdev_file *f = calloc(1, sizeof(*f) + plen + 1);
    if (!f)
        return -ENOMEM;
    memcpy(f->path, path, plen + 1);
    f->fd = path_open(path, readonly ? O_RDONLY : O_RDWR, 0, in_pool);
    if (f->fd < 0) {
        int e = -f->fd;
        log_error("store: open %s: %s", path, strerror(e));
        free(f);
        return -e;
    }
    struct stat st;
    if (fstat(f->fd, &st) < 0) {
        int e = errno;
        log_error("store: fstat %s: %s", path, strerror(e));
        file_close(&f->base);
        return -e;
    }
    if (S_ISBLK(st.st_mode)) {
        uint64_t sz = 0;
        if (ioctl(f->fd, BLKGETSIZE64, &sz) < 0) {
            int e = errno;
            log_error("store: BLKGETSIZE64 %s: %s", path, strerror(e));
            file_close(&f->base);
            return -e;
        }
        f->is_blockdev = true;
        f->base.size = sz;
    } else if (S_ISREG(st.st_mode)) {
        f->base.size = (uint64_t)st.st_size;
    } else {
        log_error("store: %s is neither a regular file nor a block device", path);
        file_close(&f->base);
        return -EINVAL;
    }
    f->base.ops = &file_ops;
    f->base.readonly = readonly;
    probe_caps(f, readonly, &st);
    int rc = in_pool && !readonly ? changes_start(f) : 0;
    if (rc < 0) {
        file_close(&f->base);
        return rc;
    }
    *out = &f->base;
    return 0;
}

struct store_changes *bdev_file_changes(struct bdev *b)
{
    return b && b->ops == &file_ops ? to_file(b)->changes : NULL;
}

int bdev_file_open(const char *path, bool readonly, struct bdev **out)
{
    return file_open(path, readonly, false, out);
}

int bdev_file_open_in_pool(const char *path, bool readonly, struct bdev **out)
{
    return file_open(path, readonly, true, out);
}

static int fsync_parent_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        dir[0] = '.';
        dir[1] = '\0';
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0)
            n = 1;
        if (n >= sizeof(dir))
            return -ENAMETOOLONG;
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -errno;
    int rc = fsync(dfd) < 0 ? -errno : 0;
    close(dfd);
    return rc;
}

static int file_create(const char *path, uint64_t size, bool thick, bool in_pool)
{
    if (size > (uint64_t)INT64_MAX)
        return -EFBIG;
    int fd = path_open(path, O_RDWR | O_CREAT | O_EXCL, 0600, in_pool);
    if (fd < 0) {
        int e = -fd;
        log_error("store: create %s: %s", path, strerror(e));
        return -e;
    }
    int rc = 0;
    const char *what = "ftruncate";
    if (ftruncate(fd, (off_t)size) < 0)
        rc = -errno;
    if (rc == 0 && thick && size > 0) {
        what = "fallocate";
        if (fallocate(fd, 0, 0, (off_t)size) < 0)
            rc = -errno;
        /* Without fallocate (an odd filesystem) thick cannot be honoured
         * cheaply; refuse rather than pretend. */
    }
    if (rc == 0 && fsync(fd) < 0) {
        what = "fsync";
        rc = -errno;
    }
    close(fd);
    if (rc == 0) {
        what = "fsync directory";
        rc = in_pool ? poolfs_fsync_parent(path) : fsync_parent_dir(path);
    }
    if (rc < 0) {
        log_error("store: %s %s: %s", what, path, strerror(-rc));
        if (in_pool)
            poolfs_unlink(path);
        else
            unlink(path);
    }
    return rc;
}

int bdev_file_create(const char *path, uint64_t size, bool thick)
{
    return file_create(path, size, thick, false);
}

int bdev_file_create_in_pool(const char *path, uint64_t size, bool thick)
{
    return file_create(path, size, thick, true);
}
