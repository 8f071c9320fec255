/* Range copies between bdevs for replication; see repl_copy.h. */
#include "control/repl_copy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "store/diff.h"

/* One read and one write at a time: large enough for the cluster's
 * 4 MiB objects to be written whole, small enough for the job's thread. */
#define COPY_CHUNK ((size_t)4 << 20)
/* All-zero blocks of this size inside the data are zeroed, not written
 * (the granule of the change log and of the content comparison). */
#define ZERO_BLOCK ((size_t)64 << 10)

int repl_ranges_add(uint64_t off, uint64_t len, void *arg)
{
    struct repl_ranges *r = arg;

    if (len == 0)
        return 0;
    if (r->n == r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 64;
        struct repl_range *nv = realloc(r->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        r->v = nv;
        r->cap = ncap;
    }
    r->v[r->n++] = (struct repl_range){off, len};
    return 0;
}

static int range_cmp(const void *a, const void *b)
{
    const struct repl_range *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

void repl_ranges_merge(struct repl_ranges *r, uint64_t size)
{
    size_t k = 0;

    if (r->n > 1) /* qsort's base may not be NULL, even for no elements */
        qsort(r->v, r->n, sizeof(*r->v), range_cmp);
    for (size_t i = 0; i < r->n; i++) {
        uint64_t off = r->v[i].off, end = MIN(off + r->v[i].len, size);
        if (off >= end)
            continue;
        if (k && off <= r->v[k - 1].off + r->v[k - 1].len) {
            struct repl_range *p = &r->v[k - 1];
            p->len = MAX(p->off + p->len, end) - p->off;
            continue;
        }
        r->v[k++] = (struct repl_range){off, end - off};
    }
    r->n = k;
}

uint64_t repl_ranges_bytes(const struct repl_ranges *r)
{
    uint64_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->v[i].len;
    return n;
}

void repl_ranges_free(struct repl_ranges *r)
{
    free(r->v);
    *r = (struct repl_ranges){0};
}

/* One copy in progress. */
struct copier {
    struct bdev *src, *dst;
    bool skip_holes;
    char *buf;
    char *zeros;  /* COPY_CHUNK zero bytes, made when a target cannot zero */
    uint64_t pos; /* where the range being walked is done up to */
    uint64_t done, total;
    store_progress_fn progress;
    void *arg;
    struct repl_copy_stats *st;
};

static bool all_zero(const char *p, size_t n)
{
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* Zeroes on dst: punched or zeroed in place where the backend can (a
 * trimmed source range must not keep the target's old data), else
 * written. */
static int zero_dst(struct copier *c, uint64_t off, uint64_t len)
{
    int rc = -ENOTSUP;

    if (len == 0 || c->skip_holes) /* a fresh target reads zeroes already */
        return 0;
    if (c->dst->ops->write_zeroes)
        rc = c->dst->ops->write_zeroes(c->dst, off, len, BDEV_ZERO_MAY_TRIM);
    if (rc == -ENOTSUP || rc == -EOPNOTSUPP) {
        /* not c->buf: it may still hold data to write after this run */
        if (!c->zeros && !(c->zeros = calloc(1, COPY_CHUNK)))
            return -ENOMEM;
        rc = 0;
        for (uint64_t at = off; rc == 0 && at < off + len; at += COPY_CHUNK)
            rc = c->dst->ops->write(c->dst, c->zeros, MIN(COPY_CHUNK, off + len - at), at);
    }
    if (rc == 0)
        c->st->zeroed += len;
    return rc;
}

static void advance(struct copier *c, uint64_t n)
{
    c->done += n;
    if (c->progress)
        c->progress(c->done, c->total, c->arg);
}

/* n bytes read from the source at at onto dst: runs of all-zero
 * ZERO_BLOCK blocks zeroed (a zeroed source range stays a hole on the
 * target), the other runs written. */
static int put_buf(struct copier *c, size_t n, uint64_t at)
{
    for (size_t i = 0; i < n;) {
        bool z = all_zero(c->buf + i, MIN(ZERO_BLOCK, n - i));
        size_t j = i + MIN(ZERO_BLOCK, n - i);
        int rc;
        while (j < n && all_zero(c->buf + j, MIN(ZERO_BLOCK, n - j)) == z)
            j += MIN(ZERO_BLOCK, n - j);
        if (z) {
            rc = zero_dst(c, at + i, j - i);
        } else {
            rc = c->dst->ops->write(c->dst, c->buf + i, j - i, at + i);
            if (rc == 0)
                c->st->copied += j - i;
        }
        if (rc < 0)
            return rc;
        i = j;
    }
    return 0;
}

/* The source's data [off, off+len): read, then written or zeroed. */
static int copy_data(struct copier *c, uint64_t off, uint64_t len)
{
    for (uint64_t at = off; at < off + len;) {
        size_t n = (size_t)MIN(COPY_CHUNK, off + len - at);
        int rc = c->src->ops->read(c->src, c->buf, n, at);
        if (rc == 0)
            rc = put_buf(c, n, at);
        if (rc < 0)
            return rc;
        at += n;
        advance(c, n);
    }
    return 0;
}

/* store_allocated's callback inside one range: the hole before this data
 * range, then the data. */
static int copy_allocated(uint64_t off, uint64_t len, void *arg)
{
    struct copier *c = arg;
    int rc = 0;

    if (off > c->pos) {
        rc = zero_dst(c, c->pos, off - c->pos);
        if (rc < 0)
            return rc;
        advance(c, off - c->pos);
    }
    rc = copy_data(c, off, len);
    c->pos = off + len;
    return rc;
}

static int copy_range(struct copier *c, const struct repl_range *r)
{
    int rc;

    c->pos = r->off;
    rc = store_allocated(c->src, r->off, r->len, copy_allocated, c);
    if (rc == -ENOTSUP) /* no extents: every byte is data */
        rc = copy_allocated(r->off, r->len, c);
    if (rc != 0)
        return rc < 0 ? rc : -EIO;
    if (c->pos < r->off + r->len) {
        uint64_t tail = r->off + r->len - c->pos;
        if ((rc = zero_dst(c, c->pos, tail)) < 0)
            return rc;
        advance(c, tail);
    }
    return 0;
}

int repl_copy_ranges(struct bdev *src, struct bdev *dst, const struct repl_ranges *r,
                     bool skip_holes, store_progress_fn progress, void *arg,
                     struct repl_copy_stats *st)
{
    struct copier c = {.src = src,
                       .dst = dst,
                       .skip_holes = skip_holes,
                       .total = repl_ranges_bytes(r),
                       .progress = progress,
                       .arg = arg,
                       .st = st};
    int rc = 0;

    c.buf = malloc(COPY_CHUNK);
    if (!c.buf)
        return -ENOMEM;
    if (progress)
        progress(0, c.total, arg);
    for (size_t i = 0; rc == 0 && i < r->n; i++)
        rc = copy_range(&c, &r->v[i]);
    if (rc == 0 && dst->ops->sync)
        rc = dst->ops->sync(dst);
    free(c.buf);
    free(c.zeros);
    return rc;
}
