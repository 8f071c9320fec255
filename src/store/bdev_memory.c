/* The memory backend: a sparse device made of 64 KiB chunks allocated on
 * first write. Lock-free: a two-level table of atomic slots, each holding a
 * chunk pointer whose low bit says "holds data". Chunks are never freed
 * before close, so a reader racing a trim can never touch freed memory;
 * trim instead clears the data bit and gives the pages back to the kernel
 * with MADV_DONTNEED (they then read as zeros). */
#include "store/bdev.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK_SHIFT 16
#define CHUNK_SIZE ((uint64_t)1 << CHUNK_SHIFT)
#define LEAF_SHIFT 12 /* chunks per leaf table: 4096 → 256 MiB */
#define LEAF_SLOTS ((size_t)1 << LEAF_SHIFT)
#define MEMORY_MAX_SIZE ((uint64_t)1 << 46) /* 64 TiB */
#define DIR_SLOTS ((size_t)(MEMORY_MAX_SIZE >> (CHUNK_SHIFT + LEAF_SHIFT)))
#define SLOT_DATA ((uintptr_t)1)

typedef _Atomic uintptr_t slot_t;

struct bdev_memory {
    struct bdev base;
    _Atomic(slot_t *) *dir; /* DIR_SLOTS leaf pointers */
};

static struct bdev_memory *to_mem(struct bdev *b)
{
    return (struct bdev_memory *)b;
}

static slot_t *slot_find(struct bdev_memory *m, uint64_t chunk, bool create)
{
    size_t di = (size_t)(chunk >> LEAF_SHIFT);
    slot_t *leaf = atomic_load_explicit(&m->dir[di], memory_order_acquire);
    if (!leaf) {
        if (!create)
            return NULL;
        slot_t *fresh = calloc(LEAF_SLOTS, sizeof(slot_t));
        if (!fresh)
            return NULL;
        slot_t *expected = NULL;
        if (atomic_compare_exchange_strong_explicit(&m->dir[di], &expected, fresh,
                                                    memory_order_acq_rel, memory_order_acquire))
            leaf = fresh;
        else {
            free(fresh);
            leaf = expected;
        }
    }
    return &leaf[chunk & (LEAF_SLOTS - 1)];
}

static char *chunk_of(slot_t *s)
{
    return s ? (char *)(atomic_load_explicit(s, memory_order_acquire) & ~SLOT_DATA) : NULL;
}

static char *chunk_create(slot_t *s)
{
    char *p = chunk_of(s);
    if (p)
        return p;
    char *fresh = aligned_alloc(4096, CHUNK_SIZE);
    if (!fresh)
        return NULL;
    memset(fresh, 0, CHUNK_SIZE);
    uintptr_t expected = 0;
    if (atomic_compare_exchange_strong_explicit(s, &expected, (uintptr_t)fresh,
                                                memory_order_acq_rel, memory_order_acquire))
        return fresh;
    free(fresh);
    return (char *)(expected & ~SLOT_DATA);
}

static int mem_read(struct bdev *b, void *buf, size_t len, uint64_t off)
{
    struct bdev_memory *m = to_mem(b);
    char *out = buf;
    while (len > 0) {
        uint64_t in = off & (CHUNK_SIZE - 1);
        size_t n = (size_t)(CHUNK_SIZE - in) < len ? (size_t)(CHUNK_SIZE - in) : len;
        char *p = chunk_of(slot_find(m, off >> CHUNK_SHIFT, false));
        if (p)
            memcpy(out, p + in, n);
        else
            memset(out, 0, n);
        out += n;
        off += n;
        len -= n;
    }
    return 0;
}

static int mem_write(struct bdev *b, const void *buf, size_t len, uint64_t off)
{
    struct bdev_memory *m = to_mem(b);
    const char *src = buf;
    while (len > 0) {
        uint64_t in = off & (CHUNK_SIZE - 1);
        size_t n = (size_t)(CHUNK_SIZE - in) < len ? (size_t)(CHUNK_SIZE - in) : len;
        slot_t *s = slot_find(m, off >> CHUNK_SHIFT, true);
        char *p = s ? chunk_create(s) : NULL;
        if (!p)
            return -ENOMEM;
        memcpy(p + in, src, n);
        /* Data first, then the bit: extents never report a hole over data
         * a completed write put there. */
        atomic_fetch_or_explicit(s, SLOT_DATA, memory_order_release);
        src += n;
        off += n;
        len -= n;
    }
    return 0;
}

/* Zero [off, off+len); whole chunks are deallocated when dealloc is set,
 * otherwise allocated chunks are zeroed and stay data. */
static int mem_zero(struct bdev_memory *m, uint64_t off, uint64_t len, bool dealloc)
{
    while (len > 0) {
        uint64_t in = off & (CHUNK_SIZE - 1);
        uint64_t n = CHUNK_SIZE - in < len ? CHUNK_SIZE - in : len;
        slot_t *s = slot_find(m, off >> CHUNK_SHIFT, false);
        char *p = chunk_of(s);
        if (!s) { /* no leaf: nothing allocated in its whole span */
            uint64_t span = (uint64_t)1 << (CHUNK_SHIFT + LEAF_SHIFT);
            uint64_t left = span - (off & (span - 1));
            n = left < len ? left : len;
        } else if (p && dealloc && in == 0 && n == CHUNK_SIZE) {
            atomic_fetch_and_explicit(s, ~SLOT_DATA, memory_order_acq_rel);
            if (madvise(p, CHUNK_SIZE, MADV_DONTNEED) < 0)
                memset(p, 0, CHUNK_SIZE);
        } else if (p) {
            /* Partial chunk, or zeroing that must not deallocate: zero in
             * place and keep it data. A chunk never written already reads
             * as zeros; allocating it would only burn memory (a whole-disk
             * WRITE SAME could exhaust RAM). */
            memset(p + in, 0, (size_t)n);
        }
        off += n;
        len -= n;
    }
    return 0;
}

static int mem_sync(struct bdev *b)
{
    return 0;
}

static int mem_trim(struct bdev *b, uint64_t off, uint64_t len)
{
    return mem_zero(to_mem(b), off, len, true);
}

static int mem_write_zeroes(struct bdev *b, uint64_t off, uint64_t len, unsigned flags)
{
    return mem_zero(to_mem(b), off, len, flags & BDEV_ZERO_MAY_TRIM);
}

static int mem_cache(struct bdev *b, uint64_t off, uint64_t len)
{
    return 0;
}

static int mem_extents(struct bdev *b, uint64_t off, uint64_t len, struct extent *out, size_t max,
                       size_t *n)
{
    struct bdev_memory *m = to_mem(b);
    *n = 0;
    if (max == 0)
        return -EINVAL;
    while (len > 0) {
        uint64_t in = off & (CHUNK_SIZE - 1);
        uint64_t piece = CHUNK_SIZE - in < len ? CHUNK_SIZE - in : len;
        slot_t *s = slot_find(m, off >> CHUNK_SHIFT, false);
        if (!s) {
            /* No leaf: the whole 256 MiB it would cover is a hole. */
            uint64_t span = (uint64_t)1 << (CHUNK_SHIFT + LEAF_SHIFT);
            uint64_t left = span - (off & (span - 1));
            piece = left < len ? left : len;
        }
        bool data = s && (atomic_load_explicit(s, memory_order_acquire) & SLOT_DATA);
        enum extent_type t = data ? EXTENT_DATA : EXTENT_HOLE;
        if (*n > 0 && out[*n - 1].type == t) {
            out[*n - 1].length += piece;
        } else {
            if (*n == max)
                return 0;
            out[(*n)++] = (struct extent){.offset = off, .length = piece, .type = t};
        }
        off += piece;
        len -= piece;
    }
    return 0;
}

static int mem_resize(struct bdev *b, uint64_t new_size)
{
    struct bdev_memory *m = to_mem(b);
    if (new_size > MEMORY_MAX_SIZE)
        return -EFBIG;
    if (new_size < b->size) /* so that growing again reads zeros */
        mem_zero(m, new_size, b->size - new_size, true);
    b->size = new_size;
    return 0;
}

static void mem_close(struct bdev *b)
{
    struct bdev_memory *m = to_mem(b);
    for (size_t d = 0; d < DIR_SLOTS; d++) {
        slot_t *leaf = atomic_load(&m->dir[d]);
        if (!leaf)
            continue;
        for (size_t i = 0; i < LEAF_SLOTS; i++)
            free(chunk_of(&leaf[i]));
        free(leaf);
    }
    free(m->dir);
    free(m);
}

static const struct bdev_ops memory_ops = {
    .name = "memory",
    .read = mem_read,
    .read_nowait = NULL,
    .write = mem_write,
    .write_nowait = NULL,
    .sync = mem_sync,
    .trim = mem_trim,
    .write_zeroes = mem_write_zeroes,
    .cache = mem_cache,
    .extents = mem_extents,
    .resize = mem_resize,
    .close = mem_close,
};

int bdev_memory_open(uint64_t size, uint32_t latency_us, struct bdev **out)
{
    *out = NULL;
    if (size > MEMORY_MAX_SIZE)
        return -EFBIG;
    struct bdev_memory *m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    /* Large enough that calloc maps it lazily: untouched pages cost nothing. */
    m->dir = calloc(DIR_SLOTS, sizeof(*m->dir));
    if (!m->dir) {
        free(m);
        return -ENOMEM;
    }
    m->base.ops = &memory_ops;
    m->base.size = size;
    m->base.caps = BDEV_CAN_FLUSH | BDEV_CAN_TRIM | BDEV_CAN_ZERO | BDEV_CAN_FAST_ZERO |
                   BDEV_CAN_EXTENTS | BDEV_CAN_MULTI_CONN | BDEV_TRIM_ZEROES;
    m->base.latency_us = latency_us;
    *out = &m->base;
    return 0;
}
