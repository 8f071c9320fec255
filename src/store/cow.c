/* Copy-before-write snapshot state; see cow.h for the contract. */
#include "store/cow.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"

#define ZERO_BLOCK 4096
#define EXTENTS_BATCH 64

int store_cow_new(struct bdev *origin, int dst_fd, uint64_t size, uint32_t chunk,
                  struct store_cow **out)
{
    *out = NULL;
    if (chunk == 0)
        chunk = STORE_COW_CHUNK_DEFAULT;
    if (!origin || dst_fd < 0 || chunk < ZERO_BLOCK || chunk > (64u << 20) || (chunk & (chunk - 1)))
        return -EINVAL;
    struct store_cow *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->origin = origin;
    c->dst_fd = dst_fd;
    c->size = size;
    c->chunk = chunk;
    c->chunk_shift = (unsigned)__builtin_ctz(chunk);
    c->nchunks = (size + chunk - 1) >> c->chunk_shift;
    c->bits = calloc((size_t)((c->nchunks + 63) / 64) + 1, sizeof(*c->bits));
    c->buf = malloc(chunk);
    if (!c->bits || !c->buf) {
        free(c->bits);
        free(c->buf);
        free(c);
        return -ENOMEM;
    }
    pthread_mutex_init(&c->copy_lock, NULL);
    *out = c;
    return 0;
}

void store_cow_free(struct store_cow *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->copy_lock);
    free(c->bits);
    free(c->buf);
    free(c);
}

static bool chunk_copied(const struct store_cow *c, uint64_t i)
{
    return atomic_load_explicit(&c->bits[i >> 6], memory_order_acquire) & (1ull << (i & 63));
}

static void fail(struct store_cow *c, int rc, const char *what, uint64_t off)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&c->error, &expected, rc))
        log_error("store: snapshot copy: %s at %llu: %s; the snapshot is abandoned, the "
                  "volume's writes go on",
                  what, (unsigned long long)off, strerror(-rc));
}

static bool all_zero(const char *p, size_t n)
{
    static const char zeros[ZERO_BLOCK];
    for (; n >= ZERO_BLOCK; p += ZERO_BLOCK, n -= ZERO_BLOCK)
        if (memcmp(p, zeros, ZERO_BLOCK))
            return false;
    return n == 0 || memcmp(p, zeros, n) == 0;
}

/* Capture chunk i's current origin data into buf and set its bit: from
 * here on writes may change it in the origin. copy_lock held (so no write
 * to the chunk runs meanwhile). Returns its length or -errno. */
static ssize_t chunk_capture(struct store_cow *c, uint64_t i, char *buf)
{
    uint64_t off = i << c->chunk_shift;
    size_t len = (size_t)(c->size - off < c->chunk ? c->size - off : c->chunk);
    int rc = c->origin->ops->read(c->origin, buf, len, off);
    if (rc < 0) {
        fail(c, rc, "read of the volume", off);
        return rc;
    }
    atomic_fetch_or_explicit(&c->bits[i >> 6], 1ull << (i & 63), memory_order_release);
    return (ssize_t)len;
}

/* Write a captured chunk to the snapshot file, without copy_lock: a write
 * to the file may wait for writeback (dirty page limits), and writes to
 * the volume must not wait for that. All-zero blocks are left out: the
 * file is sparse and reads zeros there already. */
static int chunk_store(struct store_cow *c, uint64_t i, const char *buf, size_t len)
{
    uint64_t off = i << c->chunk_shift;
    for (size_t at = 0; at < len; at += ZERO_BLOCK) {
        size_t bn = len - at < ZERO_BLOCK ? len - at : ZERO_BLOCK;
        if (all_zero(buf + at, bn))
            continue;
        int rc = pwrite_all(c->dst_fd, buf + at, bn, off + at);
        if (rc < 0) {
            fail(c, rc, "write to the snapshot file", off + at);
            return rc;
        }
    }
    return 0;
}

void store_cow_before_write(struct store_cow *c, uint64_t off, uint64_t len)
{
    if (store_cow_range_copied(c, off, len) || atomic_load(&c->error))
        return;
    char *buf = malloc(c->chunk); /* slow path: once per write that copies */
    if (!buf) {
        fail(c, -ENOMEM, "buffer for copy-before-write", off);
        return;
    }
    uint64_t last = off + len - 1 < c->size ? off + len - 1 : c->size - 1;
    for (uint64_t i = off >> c->chunk_shift; i <= last >> c->chunk_shift; i++) {
        if (atomic_load(&c->error))
            break;
        if (chunk_copied(c, i))
            continue;
        pthread_mutex_lock(&c->copy_lock);
        ssize_t n = chunk_copied(c, i) ? 0 : chunk_capture(c, i, buf);
        pthread_mutex_unlock(&c->copy_lock);
        if (n > 0 && chunk_store(c, i, buf, (size_t)n) == 0)
            atomic_fetch_add_explicit(&c->copied_by_writes, 1, memory_order_relaxed);
    }
    free(buf);
}

/* The copier's writeback pacing: every PACE_BYTES of the file it went
 * through, start writeback of that window and wait for the one before, so
 * that the copy keeps ~2 windows dirty instead of filling the page cache
 * until the kernel throttles every writer of the machine (the volume's
 * included). (Starting writeback of the whole file each time, to cover
 * the chunks writes copied, made fio's mean write latency during the copy
 * 3x worse.) */
#define PACE_BYTES ((uint64_t)8 << 20)

static void pace(struct store_cow *c, uint64_t upto, uint64_t *win_start, uint64_t *prev_start)
{
    if (upto - *win_start < PACE_BYTES)
        return;
    if (*prev_start < *win_start)
        sync_file_range(c->dst_fd, (off_t)*prev_start, (off_t)(*win_start - *prev_start),
                        SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                            SYNC_FILE_RANGE_WAIT_AFTER);
    sync_file_range(c->dst_fd, (off_t)*win_start, (off_t)(upto - *win_start),
                    SYNC_FILE_RANGE_WRITE);
    *prev_start = *win_start;
    *win_start = upto;
}

/* Copy the chunks of [off, end) that hold data. */
static int copy_range(struct store_cow *c, uint64_t off, uint64_t end, uint64_t *win_start,
                      uint64_t *prev_start)
{
    for (uint64_t i = off >> c->chunk_shift; i <= (end - 1) >> c->chunk_shift; i++) {
        if (atomic_load(&c->cancel))
            return -ECANCELED;
        int rc = atomic_load(&c->error);
        if (rc)
            return rc;
        if (chunk_copied(c, i))
            continue;
        pthread_mutex_lock(&c->copy_lock);
        ssize_t n = chunk_copied(c, i) ? 0 : chunk_capture(c, i, c->buf);
        pthread_mutex_unlock(&c->copy_lock);
        if (n > 0 && chunk_store(c, i, c->buf, (size_t)n) == 0)
            atomic_fetch_add_explicit(&c->copied_by_copier, 1, memory_order_relaxed);
        uint64_t next = (i + 1) << c->chunk_shift;
        if (next > c->size)
            next = c->size;
        atomic_store_explicit(&c->progress, next, memory_order_relaxed);
        pace(c, next, win_start, prev_start);
    }
    return atomic_load(&c->error);
}

int store_cow_copy_rest(struct store_cow *c)
{
    struct extent ext[EXTENTS_BATCH];
    uint64_t pos = 0, win_start = 0, prev_start = 0;
    bool extents = (c->origin->caps & BDEV_CAN_EXTENTS) && c->origin->ops->extents;

    while (pos < c->size) {
        uint64_t before = pos;
        size_t n = 0;
        if (extents) {
            /* The origin's holes at any time after the instant were holes
             * then, or were made since by a write that copied first. */
            int rc = c->origin->ops->extents(c->origin, pos, c->size - pos, ext, EXTENTS_BATCH, &n);
            if (rc < 0) {
                fail(c, rc, "extents of the volume", pos);
                return rc;
            }
        }
        if (n == 0) { /* no extents: everything is data */
            ext[0] = (struct extent){.offset = pos, .length = c->size - pos, .type = EXTENT_DATA};
            n = 1;
        }
        for (size_t k = 0; k < n; k++) {
            uint64_t s = ext[k].offset, e = ext[k].offset + ext[k].length;
            if (e > c->size)
                e = c->size;
            if (s < pos)
                s = pos;
            if (e <= s)
                continue;
            if (ext[k].type == EXTENT_DATA) {
                int rc = copy_range(c, s, e, &win_start, &prev_start);
                if (rc < 0)
                    return rc;
            }
            pos = e;
            atomic_store_explicit(&c->progress, pos, memory_order_relaxed);
        }
        if (pos == before) { /* extents that do not advance: copy the rest as data */
            int rc = copy_range(c, pos, c->size, &win_start, &prev_start);
            if (rc < 0)
                return rc;
            pos = c->size;
        }
    }
    atomic_store_explicit(&c->progress, c->size, memory_order_relaxed);
    return atomic_load(&c->error);
}

void store_cow_cancel(struct store_cow *c)
{
    atomic_store(&c->cancel, true);
}

int store_cow_error(const struct store_cow *c)
{
    return atomic_load_explicit(&c->error, memory_order_acquire);
}

uint64_t store_cow_copied_count(const struct store_cow *c)
{
    return atomic_load_explicit(&c->copied_by_writes, memory_order_relaxed) +
           atomic_load_explicit(&c->copied_by_copier, memory_order_relaxed);
}
