/* Changed blocks between two snapshots, and allocation; see diff.h. */
#include "store/diff.h"

#include <errno.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <linux/magic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "store/bdev_rbd.h"

/* Extent maps are read a window at a time, so their memory stays bounded
 * (at most window / block size extents per file). */
#define DIFF_WINDOW ((uint64_t)256 << 20)
#define FIEMAP_BATCH 256

/* Ranges on their way to the caller: adjacent and overlapping ones are
 * merged, so fn sees each maximal range once. */
struct emitter {
    store_range_fn fn;
    void *arg;
    uint64_t off, len;
};

static int emit(struct emitter *e, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    if (e->len && off >= e->off && off <= e->off + e->len) {
        e->len = MAX(e->off + e->len, off + len) - e->off;
        return 0;
    }
    if (e->len) {
        int rc = e->fn(e->off, e->len, e->arg);
        if (rc)
            return rc;
    }
    e->off = off;
    e->len = len;
    return 0;
}

static int emit_end(struct emitter *e)
{
    int rc = e->len ? e->fn(e->off, e->len, e->arg) : 0;
    e->len = 0;
    return rc;
}

/* ---- file extent maps ---- */

/* One mapped extent of a window; unknown: its physical place cannot be
 * compared (FIEMAP said so, or the map came from SEEK_DATA). */
struct fext {
    uint64_t logical, physical, length;
    bool unknown;
};

struct fmap {
    struct fext *v;
    size_t n, cap;
};

static int fmap_push(struct fmap *m, const struct fext *x)
{
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        struct fext *v = realloc(m->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = *x;
    return 0;
}

/* Extents whose physical address says nothing we can compare. */
#define FIEMAP_NOT_COMPARABLE                                                                      \
    (FIEMAP_EXTENT_UNKNOWN | FIEMAP_EXTENT_DELALLOC | FIEMAP_EXTENT_ENCODED |                      \
     FIEMAP_EXTENT_DATA_ENCRYPTED | FIEMAP_EXTENT_NOT_ALIGNED | FIEMAP_EXTENT_DATA_INLINE |        \
     FIEMAP_EXTENT_DATA_TAIL)

/* Add the extents FIEMAP returned in fm, clipped to [start, end). *pos
 * becomes the end of the last one; *last: FIEMAP said it was the file's
 * last. */
static int fiemap_take(struct fmap *m, const struct fiemap *fm, uint64_t start, uint64_t end,
                       uint64_t *pos, bool *last)
{
    for (uint32_t i = 0; i < fm->fm_mapped_extents; i++) {
        const struct fiemap_extent *x = &fm->fm_extents[i];
        uint64_t lo = MAX(x->fe_logical, start), hi = MIN(x->fe_logical + x->fe_length, end);
        if (hi > lo) {
            struct fext e = {.logical = lo,
                             .physical = x->fe_physical + (lo - x->fe_logical),
                             .length = hi - lo,
                             .unknown = (x->fe_flags & FIEMAP_NOT_COMPARABLE) != 0};
            int rc = fmap_push(m, &e);
            if (rc < 0)
                return rc;
        }
        *pos = x->fe_logical + x->fe_length;
        *last = (x->fe_flags & FIEMAP_EXTENT_LAST) != 0;
    }
    return 0;
}

/* The FIEMAP extents of fd in [start, end). -ENOTSUP: the filesystem has
 * no FIEMAP (tmpfs): use fmap_seek. */
static int fmap_fiemap(int fd, uint64_t start, uint64_t end, bool sync, struct fmap *m)
{
    size_t size = sizeof(struct fiemap) + FIEMAP_BATCH * sizeof(struct fiemap_extent);
    struct fiemap *fm = malloc(size);
    uint64_t pos = start;
    bool last = false;
    int rc = fm ? 0 : -ENOMEM;

    while (rc == 0 && pos < end && !last) {
        memset(fm, 0, sizeof(*fm));
        fm->fm_start = pos;
        fm->fm_length = end - pos;
        fm->fm_flags = sync ? FIEMAP_FLAG_SYNC : 0;
        fm->fm_extent_count = FIEMAP_BATCH;
        if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0) {
            rc = errno == EOPNOTSUPP || errno == ENOTTY ? -ENOTSUP : -errno;
            break;
        }
        if (fm->fm_mapped_extents == 0)
            break;
        sync = false; /* once is enough: the whole file was written back */
        rc = fiemap_take(m, fm, start, end, &pos, &last);
    }
    free(fm);
    return rc;
}

/* The data ranges of fd in [start, end) by SEEK_DATA/SEEK_HOLE, each
 * "unknown" (no physical address). */
static int fmap_seek(int fd, uint64_t start, uint64_t end, struct fmap *m)
{
    uint64_t pos = start;
    while (pos < end) {
        off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? 0 : -errno;
        if ((uint64_t)data >= end)
            return 0;
        off_t hole = lseek(fd, data, SEEK_HOLE);
        if (hole < 0)
            return -errno;
        struct fext e = {.logical = (uint64_t)data,
                         .length = MIN((uint64_t)hole, end) - (uint64_t)data,
                         .unknown = true};
        int rc = fmap_push(m, &e);
        if (rc < 0)
            return rc;
        pos = (uint64_t)hole;
    }
    return 0;
}

static int fmap_fill(int fd, uint64_t start, uint64_t end, bool sync, struct fmap *m)
{
    m->n = 0;
    int rc = fmap_fiemap(fd, start, end, sync, m);
    if (rc == -ENOTSUP) {
        m->n = 0;
        rc = fmap_seek(fd, start, end, m);
    }
    return rc;
}

/* ---- file diff ---- */

struct file_diff {
    int bfd, tfd;
    uint64_t common;      /* min of the two sizes: what both files have */
    bool compare;         /* no shared extents: compare candidates by content */
    uint64_t compared_to; /* granules below this were compared already */
    char *bbuf, *tbuf;
    struct emitter *out;
};

/* Read up to len bytes at off; past the file's end reads as zeros. */
static int read_full(int fd, char *buf, uint64_t len, uint64_t off)
{
    uint64_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0) {
            memset(buf + got, 0, len - got);
            break;
        }
        got += (uint64_t)n;
    }
    return 0;
}

/* A range the maps cannot prove unchanged: reported as it is, or (without
 * shared extents) granule by granule where the contents differ. */
static int diff_candidate(struct file_diff *d, uint64_t off, uint64_t len)
{
    if (!d->compare)
        return emit(d->out, off, len);
    uint64_t g = MAX(off & ~(STORE_DIFF_GRANULE - 1), d->compared_to);
    for (; g < off + len && g < d->common; g += STORE_DIFF_GRANULE) {
        uint64_t glen = MIN(STORE_DIFF_GRANULE, d->common - g);
        int rc = read_full(d->bfd, d->bbuf, glen, g);
        if (rc == 0)
            rc = read_full(d->tfd, d->tbuf, glen, g);
        if (rc < 0)
            return rc;
        if (memcmp(d->bbuf, d->tbuf, glen) != 0 && (rc = emit(d->out, g, glen)) != 0)
            return rc;
        d->compared_to = g + glen;
    }
    return 0;
}

/* Walk the two maps of [start, end) together: a piece where both are holes,
 * or both map to the same physical place, is unchanged. */
static int diff_window(struct file_diff *d, const struct fmap *a, const struct fmap *b,
                       uint64_t start, uint64_t end)
{
    size_t i = 0, j = 0;
    for (uint64_t p = start; p < end;) {
        while (i < a->n && a->v[i].logical + a->v[i].length <= p)
            i++;
        while (j < b->n && b->v[j].logical + b->v[j].length <= p)
            j++;
        const struct fext *ea = i < a->n && a->v[i].logical <= p ? &a->v[i] : NULL;
        const struct fext *eb = j < b->n && b->v[j].logical <= p ? &b->v[j] : NULL;
        uint64_t next = end;
        if (i < a->n)
            next = MIN(next, ea ? ea->logical + ea->length : a->v[i].logical);
        if (j < b->n)
            next = MIN(next, eb ? eb->logical + eb->length : b->v[j].logical);
        /* same physical offset at p: equal (physical - logical), modulo 2^64 */
        bool same = (!ea && !eb) || (ea && eb && !ea->unknown && !eb->unknown &&
                                     ea->physical - ea->logical == eb->physical - eb->logical);
        if (!same) {
            int rc = diff_candidate(d, p, next - p);
            if (rc)
                return rc;
        }
        p = next;
    }
    return 0;
}

/* Filesystems whose snapshots share the volume's extents (FICLONE). */
static bool fs_reflinks(int fd)
{
    struct statfs sf;
    if (fstatfs(fd, &sf) < 0)
        return false;
    return sf.f_type == XFS_SUPER_MAGIC || sf.f_type == BTRFS_SUPER_MAGIC;
}

static int diff_common(struct file_diff *d, uint64_t off, uint64_t end)
{
    struct fmap a = {0}, b = {0};
    int rc = 0;
    for (uint64_t w = off; rc == 0 && w < end; w += DIFF_WINDOW) {
        uint64_t we = MIN(end, w + DIFF_WINDOW);
        rc = fmap_fill(d->bfd, w, we, w == off, &a);
        if (rc == 0)
            rc = fmap_fill(d->tfd, w, we, w == off, &b);
        if (rc == 0)
            rc = diff_window(d, &a, &b, w, we);
    }
    free(a.v);
    free(b.v);
    return rc;
}

static int diff_files(int bfd, int tfd, uint64_t off, uint64_t len, struct emitter *out)
{
    struct stat bs, ts;
    if (fstat(bfd, &bs) < 0 || fstat(tfd, &ts) < 0)
        return -errno;
    uint64_t tsize = (uint64_t)ts.st_size, end = off + len;
    if (end > tsize)
        end = tsize;
    struct file_diff d = {.bfd = bfd,
                          .tfd = tfd,
                          .common = MIN((uint64_t)bs.st_size, tsize),
                          .compare = !fs_reflinks(tfd),
                          .out = out};
    if (d.compare) {
        d.bbuf = malloc(STORE_DIFF_GRANULE);
        d.tbuf = malloc(STORE_DIFF_GRANULE);
    }
    int rc = d.compare && (!d.bbuf || !d.tbuf) ? -ENOMEM : 0;
    if (rc == 0 && off < MIN(end, d.common))
        rc = diff_common(&d, off, MIN(end, d.common));
    /* past the base's end: all new */
    if (rc == 0 && end > MAX(off, d.common))
        rc = emit(out, MAX(off, d.common), end - MAX(off, d.common));
    free(d.bbuf);
    free(d.tbuf);
    return rc;
}

/* ---- RBD ---- */

struct rbd_walk {
    struct emitter *out;
    int stop; /* fn's nonzero value, which librbd would not pass back */
};

static int rbd_diff_cb(uint64_t off, size_t len, int exists, void *arg)
{
    struct rbd_walk *w = arg;
    (void)exists; /* a discarded range differs too */
    w->stop = emit(w->out, off, len);
    return w->stop ? -ECANCELED : 0;
}

/* The changed objects of one window, from the object map (fast-diff):
 * adjacent objects merged into runs. A window holds RBD_WINDOW_OBJECTS
 * objects, so at most half as many runs. */
#define RBD_WINDOW_OBJECTS 1024
struct rbd_runs {
    uint64_t off[RBD_WINDOW_OBJECTS / 2 + 2], len[RBD_WINDOW_OBJECTS / 2 + 2];
    size_t n;
};

static int rbd_run_cb(uint64_t off, size_t len, int exists, void *arg)
{
    struct rbd_runs *r = arg;
    (void)exists;
    if (r->n && r->off[r->n - 1] + r->len[r->n - 1] == off) {
        r->len[r->n - 1] += len;
        return 0;
    }
    if (r->n == sizeof(r->off) / sizeof(r->off[0]))
        return -ERANGE; /* cannot happen: runs of a window are apart */
    r->off[r->n] = off;
    r->len[r->n++] = len;
    return 0;
}

/* The byte extents of the changed objects of one window, asked of the OSDs
 * by RBD_REFINE_THREADS threads at once (each rbd_diff_iterate2 waits for
 * its object's answer: in sequence, the map would cost one round trip per
 * changed object), then emitted in order. */
#define RBD_REFINE_THREADS 8
struct refine_out {
    uint64_t (*v)[2]; /* {offset, length} */
    size_t n, cap;
    int rc;
};
struct refine {
    rbd_image_t img;
    const char *base;
    /* each changed object: {offset, length}; a window not aligned to
     * objects touches one more at each end */
    uint64_t unit[RBD_WINDOW_OBJECTS + 2][2];
    struct refine_out out[RBD_WINDOW_OBJECTS + 2];
    size_t n;
    atomic_size_t next;
};

static int refine_cb(uint64_t off, size_t len, int exists, void *arg)
{
    struct refine_out *o = arg;
    (void)exists; /* a discarded range differs too */
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 16;
        uint64_t(*v)[2] = realloc(o->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n][0] = off;
    o->v[o->n++][1] = len;
    return 0;
}

static void *refine_worker(void *arg)
{
    struct refine *f = arg;
    for (size_t i; (i = atomic_fetch_add(&f->next, 1)) < f->n;)
        f->out[i].rc = rbd_diff_iterate2(f->img, f->base, f->unit[i][0], f->unit[i][1], 1, 0,
                                         refine_cb, &f->out[i]);
    return NULL;
}

/* The window [lo, hi)'s runs cut into objects (clipped to the window),
 * refined in parallel, emitted in order into w. 0 or -errno. */
static int refine_runs(struct refine *f, const struct rbd_runs *r, uint64_t lo, uint64_t hi,
                       uint64_t obj, struct rbd_walk *w)
{
    f->n = 0;
    for (size_t i = 0; i < r->n; i++) {
        uint64_t end = MIN(r->off[i] + r->len[i], hi);
        for (uint64_t o = MAX(r->off[i], lo); o < end; o = (o / obj + 1) * obj) {
            if (f->n == sizeof(f->unit) / sizeof(f->unit[0]))
                return -ERANGE; /* cannot happen; never drop a changed range */
            f->unit[f->n][0] = o;
            f->unit[f->n++][1] = MIN((o / obj + 1) * obj, end) - o;
        }
    }
    memset(f->out, 0, f->n * sizeof(f->out[0]));
    atomic_store(&f->next, 0);
    pthread_t t[RBD_REFINE_THREADS];
    size_t nt = 0;
    while (nt < RBD_REFINE_THREADS && nt < f->n &&
           pthread_create(&t[nt], NULL, refine_worker, f) == 0)
        nt++;
    refine_worker(f); /* also this thread, so that no thread at all still works */
    while (nt)
        pthread_join(t[--nt], NULL);
    int rc = 0;
    for (size_t i = 0; i < f->n; i++) {
        rc = rc ? rc : f->out[i].rc;
        for (size_t k = 0; rc == 0 && k < f->out[i].n; k++)
            if ((w->stop = emit(w->out, f->out[i].v[k][0], f->out[i].v[k][1])))
                rc = -ECANCELED;
        free(f->out[i].v);
    }
    return rc;
}

/* With fast-diff, the object map says which objects changed without a
 * request to any OSD, but only to the object (4 MiB by default): 1% of a
 * volume changed in scattered 64 KiB writes dirties half its objects. So
 * each window's changed objects are then asked for their byte ranges
 * (whole_object = 0: an object-level list of the snapshots' extents from
 * the OSDs), which costs a request per changed object only, several in
 * flight. */
static int diff_rbd_runs(rbd_image_t img, const char *base_snap, uint64_t off, uint64_t end,
                         uint64_t obj, struct rbd_walk *w)
{
    struct rbd_runs *r = malloc(sizeof(*r));
    struct refine *f = malloc(sizeof(*f));
    int rc = r && f ? 0 : -ENOMEM;
    if (f) {
        f->img = img;
        f->base = base_snap;
    }
    for (uint64_t at = off; rc == 0 && at < end;) {
        uint64_t n = MIN(end - at, obj * RBD_WINDOW_OBJECTS);
        r->n = 0;
        rc = rbd_diff_iterate2(img, base_snap, at, n, 1, 1, rbd_run_cb, r);
        if (rc == 0)
            rc = refine_runs(f, r, at, at + n, obj, w);
        at += n;
    }
    free(r);
    free(f);
    return rc;
}

static int diff_rbd(struct bdev *target, const char *base_snap, uint64_t off, uint64_t len,
                    struct emitter *out)
{
    rbd_image_t img = bdev_rbd_image_get(target);
    if (!img)
        return -ESHUTDOWN;
    uint64_t features = 0, size = 0;
    rbd_image_info_t info;
    int rc = rbd_get_features(img, &features);
    if (rc == 0)
        rc = rbd_get_size(img, &size);
    if (rc == 0)
        rc = rbd_stat(img, &info, sizeof(info));
    struct rbd_walk w = {.out = out};
    uint64_t end = off < size ? off + MIN(len, size - off) : off;
    if (rc == 0 && off < end && (features & RBD_FEATURE_FAST_DIFF))
        rc = diff_rbd_runs(img, base_snap, off, end, info.obj_size ? info.obj_size : 4 << 20, &w);
    else if (rc == 0 && off < end)
        rc = rbd_diff_iterate2(img, base_snap, off, end - off, 1, 0, rbd_diff_cb, &w);
    bdev_rbd_image_put(target);
    if (w.stop)
        return w.stop;
    if (rc < 0)
        log_warn("store: rbd_diff_iterate2 from %s: %s", base_snap, strerror(-rc));
    return rc;
}

int store_diff(struct bdev *base, const char *base_snap, struct bdev *target, uint64_t offset,
               uint64_t length, store_range_fn fn, void *arg)
{
    struct emitter out = {.fn = fn, .arg = arg};
    int rc;

    if (!target || offset + length < offset)
        return -EINVAL;
    if (bdev_is_rbd(target)) {
        if (!base_snap || base)
            return -EINVAL;
        rc = diff_rbd(target, base_snap, offset, length, &out);
    } else {
        if (!base || bdev_is_rbd(base))
            return -EINVAL;
        if (!base->ops->read_fd || !target->ops->read_fd)
            return -ENOTSUP;
        rc = diff_files(base->ops->read_fd(base), target->ops->read_fd(target), offset, length,
                        &out);
    }
    return rc ? rc : emit_end(&out);
}

int store_allocated(struct bdev *b, uint64_t offset, uint64_t length, store_range_fn fn, void *arg)
{
    struct emitter out = {.fn = fn, .arg = arg};
    struct extent ext[256];
    uint64_t end = offset + length;

    if (end < offset)
        return -EINVAL;
    if (!b->ops->extents)
        return -ENOTSUP;
    end = MIN(end, b->size);
    for (uint64_t pos = offset; pos < end;) {
        size_t n = 0;
        int rc = b->ops->extents(b, pos, end - pos, ext, ARRAY_SIZE(ext), &n);
        if (rc < 0)
            return rc;
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++)
            if (ext[i].type == EXTENT_DATA && (rc = emit(&out, ext[i].offset, ext[i].length)))
                return rc;
        uint64_t next = ext[n - 1].offset + ext[n - 1].length;
        if (next <= pos)
            break;
        pos = next;
    }
    return emit_end(&out);
}
