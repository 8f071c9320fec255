/* Copy-before-write snapshot state; see cow.h for the contract. */
#include "store/cow.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/ioprio.h>

#include "core/log.h"
#include "core/reactor.h"
#include "core/util.h"

#define ZERO_BLOCK 4096
#define EXTENTS_BATCH 64
#define DIRECT_ALIGN 4096

struct store_cow_pending {
    struct store_cow_pending *next;
    uint64_t chunk;
    size_t len;
    char *buf; /* DIRECT_ALIGN aligned */
};

static char *chunk_buf(const struct store_cow *c)
{
    void *p = NULL;
    return posix_memalign(&p, DIRECT_ALIGN, c->chunk) == 0 ? p : NULL;
}

/* A buffer for a write's capture: a used one if any (freeing 256 KiB
 * buffers unmapped them, and munmap, which takes the process's mmap lock,
 * was seen waiting 40-120 ms on the loaded VM), else a new one. NULL if
 * out of memory. */
static struct store_cow_pending *node_get(struct store_cow *c)
{
    pthread_mutex_lock(&c->q_lock);
    struct store_cow_pending *p = c->q_free;
    if (p)
        c->q_free = p->next;
    pthread_mutex_unlock(&c->q_lock);
    if (p)
        return p;
    p = malloc(sizeof(*p));
    if (p && !(p->buf = chunk_buf(c))) {
        free(p);
        p = NULL;
    }
    return p;
}

static void node_put(struct store_cow *c, struct store_cow_pending *p)
{
    pthread_mutex_lock(&c->q_lock);
    p->next = c->q_free;
    c->q_free = p;
    pthread_mutex_unlock(&c->q_lock);
}

static void nodes_free(struct store_cow_pending *p)
{
    while (p) {
        struct store_cow_pending *next = p->next;
        free(p->buf);
        free(p);
        p = next;
    }
}

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
    c->buf = chunk_buf(c);
    if (!c->bits || !c->buf) {
        free(c->bits);
        free(c->buf);
        free(c);
        return -ENOMEM;
    }
    for (unsigned k = 0; k < STORE_COW_LOCKS; k++)
        pthread_mutex_init(&c->copy_lock[k], NULL);
    pthread_mutex_init(&c->q_lock, NULL);
    pthread_cond_init(&c->q_space, NULL);
    c->copier_active = true; /* writes queue until the copier stops (or is cancelled) */
    *out = c;
    return 0;
}

void store_cow_free(struct store_cow *c)
{
    if (!c)
        return;
    nodes_free(c->q_head); /* the copier never ran: the snapshot is abandoned */
    nodes_free(c->q_free);
    pthread_cond_destroy(&c->q_space);
    pthread_mutex_destroy(&c->q_lock);
    for (unsigned k = 0; k < STORE_COW_LOCKS; k++)
        pthread_mutex_destroy(&c->copy_lock[k]);
    free(c->bits);
    free(c->buf);
    free(c);
}

/* The lock that orders captures and claims of chunk i (cow.h). */
static pthread_mutex_t *copy_lock_of(struct store_cow *c, uint64_t i)
{
    return &c->copy_lock[i % STORE_COW_LOCKS];
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

/* Read chunk i's origin data into buf (the last chunk may be short).
 * Returns its length or -errno (c failed). */
static ssize_t chunk_read(struct store_cow *c, uint64_t i, char *buf)
{
    uint64_t off = i << c->chunk_shift;
    size_t len = (size_t)(c->size - off < c->chunk ? c->size - off : c->chunk);
    int rc = c->origin->ops->read(c->origin, buf, len, off);
    if (rc < 0) {
        fail(c, rc, "read of the volume", off);
        return rc;
    }
    return (ssize_t)len;
}

/* Capture chunk i's current origin data into buf and set its bit: from
 * here on writes may change it in the origin. copy_lock held (so no write
 * to the chunk runs meanwhile). Returns its length or -errno. */
static ssize_t chunk_capture(struct store_cow *c, uint64_t i, char *buf)
{
    ssize_t n = chunk_read(c, i, buf);
    if (n >= 0)
        atomic_fetch_or_explicit(&c->bits[i >> 6], 1ull << (i & 63), memory_order_release);
    return n;
}

/* Write [p, p+n) at off. The copier's O_DIRECT writes need DIRECT_ALIGN
 * offsets and lengths: an unaligned piece (the end of a volume whose size
 * is not a multiple of 4 KiB) is written through the page cache, and so
 * is a queued chunk while the queue is over half full (store_buffered). */
static int store_piece(struct store_cow *c, const char *p, size_t n, uint64_t off)
{
    bool unaligned = c->direct && (c->store_buffered || ((off | n) & (DIRECT_ALIGN - 1)));
    int fl = 0;
    if (unaligned) {
        fl = fcntl(c->dst_fd, F_GETFL);
        if (fl < 0 || fcntl(c->dst_fd, F_SETFL, fl & ~O_DIRECT) < 0)
            return -errno;
    }
    int rc = pwrite_all(c->dst_fd, p, n, off);
    if (rc == -EINVAL && c->direct && !unaligned) {
        /* A filesystem or device with larger O_DIRECT alignment needs:
         * buffered from here on. */
        fl = fcntl(c->dst_fd, F_GETFL);
        if (fl >= 0 && fcntl(c->dst_fd, F_SETFL, fl & ~O_DIRECT) == 0) {
            c->direct = false;
            rc = pwrite_all(c->dst_fd, p, n, off);
        }
    }
    if (unaligned && fcntl(c->dst_fd, F_SETFL, fl) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

/* Write a captured chunk to the snapshot file, without copy_lock: a write
 * to the file may wait for block allocation or writeback, and writes to
 * the volume must not wait for that. All-zero blocks are left out (the
 * file is sparse and reads zeros there already); each run of data blocks
 * is one write (a 4 KiB write per block cost a system call, an inode lock
 * and a timestamp update each). */
static int chunk_store(struct store_cow *c, uint64_t i, const char *buf, size_t len)
{
    uint64_t off = i << c->chunk_shift;
    size_t at = 0;
    while (at < len) {
        size_t bn = len - at < ZERO_BLOCK ? len - at : ZERO_BLOCK;
        if (all_zero(buf + at, bn)) {
            at += bn;
            continue;
        }
        size_t end = at + bn;
        while (end < len) {
            size_t en = len - end < ZERO_BLOCK ? len - end : ZERO_BLOCK;
            if (all_zero(buf + end, en))
                break;
            end += en;
        }
        int rc = store_piece(c, buf + at, end - at, off + at);
        if (rc < 0) {
            fail(c, rc, "write to the snapshot file", off + at);
            return rc;
        }
        at = end;
    }
    return 0;
}

/* Hand a captured chunk to the copier; false if it has stopped (the
 * caller stores the chunk itself). */
static bool queue_put(struct store_cow *c, struct store_cow_pending *p)
{
    pthread_mutex_lock(&c->q_lock);
    bool active = c->copier_active;
    if (active) {
        p->next = NULL;
        if (c->q_tail)
            c->q_tail->next = p;
        else
            c->q_head = p;
        c->q_tail = p;
        c->q_bytes += c->chunk;
    }
    pthread_mutex_unlock(&c->q_lock);
    return active;
}

/* Wait until the queue has room for one more chunk (or the copier has
 * stopped): the one place a write waits for the copier's stores. */
static void queue_wait_space(struct store_cow *c)
{
    pthread_mutex_lock(&c->q_lock);
    if (c->copier_active && c->q_bytes + c->chunk > STORE_COW_QUEUE_BYTES) {
        uint64_t t0 = time_now_ns();
        while (c->copier_active && c->q_bytes + c->chunk > STORE_COW_QUEUE_BYTES)
            pthread_cond_wait(&c->q_space, &c->q_lock);
        uint64_t waited = time_now_ns() - t0;
        atomic_fetch_add_explicit(&c->queue_waits, 1, memory_order_relaxed);
        uint64_t max = atomic_load_explicit(&c->queue_wait_max_ns, memory_order_relaxed);
        while (waited > max && !atomic_compare_exchange_weak(&c->queue_wait_max_ns, &max, waited))
            ;
    }
    pthread_mutex_unlock(&c->q_lock);
}

/* The copier: store every queued chunk. stop: then mark the copier
 * stopped once the queue is empty (under the same lock, so no chunk is
 * queued after the last look). */
static void queue_drain(struct store_cow *c, bool stop)
{
    for (;;) {
        pthread_mutex_lock(&c->q_lock);
        struct store_cow_pending *p = c->q_head;
        /* Writes capture faster than O_DIRECT stores (50-550 ms each on
         * the loaded shared disk): past half the queue, store through the
         * page cache, so that writes do not wait for a slot. */
        bool behind = c->q_bytes > STORE_COW_QUEUE_BYTES / 2;
        if (p) {
            c->q_head = p->next;
            if (!c->q_head)
                c->q_tail = NULL;
        } else if (stop) {
            c->copier_active = false;
            pthread_cond_broadcast(&c->q_space);
        }
        pthread_mutex_unlock(&c->q_lock);
        if (!p)
            return;
        if (!atomic_load(&c->error)) {
            c->store_buffered = behind;
            chunk_store(c, p->chunk, p->buf, p->len);
            c->store_buffered = false;
        }
        pthread_mutex_lock(&c->q_lock);
        p->next = c->q_free;
        c->q_free = p;
        c->q_bytes -= c->chunk;
        pthread_cond_broadcast(&c->q_space);
        pthread_mutex_unlock(&c->q_lock);
    }
}

/*
 * The copier reads a chunk without copy_lock, then claims it (sets its
 * bit) under the lock only if no write captured it meanwhile. Why that
 * read is the chunk at the instant: a write sets the chunk's bit (under
 * copy_lock) before it modifies the origin, so if the bit is still clear
 * once the copier holds the lock after its read, no write has modified
 * the chunk before or during that read. If a write did capture it, the
 * write's own copy is stored and this read is dropped.
 *
 * Why not read under the lock: on the loaded VM the copier, holding
 * copy_lock across a 256 KiB read, was preempted or waited for the disk
 * for 40-120 ms, and every write that had to copy a chunk (and, through
 * the volume's ordered write queue, every write behind it) waited too.
 * Now a write waits for the copier only for a bit test and set.
 */
static ssize_t chunk_read_unlocked(struct store_cow *c, uint64_t i, char *buf)
{
    return chunk_read(c, i, buf);
}

/* true if chunk i was not captured yet and is now the copier's. */
static bool chunk_claim(struct store_cow *c, uint64_t i)
{
    pthread_mutex_lock(copy_lock_of(c, i));
    bool mine = !chunk_copied(c, i);
    if (mine)
        atomic_fetch_or_explicit(&c->bits[i >> 6], 1ull << (i & 63), memory_order_release);
    pthread_mutex_unlock(copy_lock_of(c, i));
    return mine;
}

void store_cow_before_write(struct store_cow *c, uint64_t off, uint64_t len)
{
    if (store_cow_range_copied(c, off, len) || atomic_load(&c->error) || atomic_load(&c->cancel))
        return;
    uint64_t last = off + len - 1 < c->size ? off + len - 1 : c->size - 1;
    for (uint64_t i = off >> c->chunk_shift; i <= last >> c->chunk_shift; i++) {
        if (atomic_load(&c->error))
            break;
        if (chunk_copied(c, i))
            continue;
        queue_wait_space(c);
        struct store_cow_pending *p = node_get(c); /* slow path: once per chunk a write copies */
        if (!p) {
            fail(c, -ENOMEM, "buffer for copy-before-write", off);
            break;
        }
        pthread_mutex_lock(copy_lock_of(c, i));
        ssize_t n = chunk_copied(c, i) ? 0 : chunk_capture(c, i, p->buf);
        pthread_mutex_unlock(copy_lock_of(c, i));
        if (n > 0) {
            atomic_fetch_add_explicit(&c->copied_by_writes, 1, memory_order_relaxed);
            p->chunk = i;
            p->len = (size_t)n;
            if (queue_put(c, p))
                continue;
            chunk_store(c, i, p->buf, (size_t)n);
        }
        node_put(c, p);
    }
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
    if (c->direct || upto - *win_start < PACE_BYTES)
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

/* A store of the copier's own chunk that took over BACK_OFF_NS says the
 * disk is saturated: the copier then waits as long again (storing the
 * writes' queued chunks meanwhile), so that the disk has room for the
 * kernel's writeback of the volume. */
#define BACK_OFF_NS ((uint64_t)5 * 1000 * 1000)

static void back_off(struct store_cow *c, uint64_t took)
{
    if (took < BACK_OFF_NS)
        return;
    uint64_t until = time_now_ns() + (took > 200000000 ? 200000000 : took);
    while (time_now_ns() < until && !atomic_load(&c->cancel)) {
        queue_drain(c, false);
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
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
        queue_drain(c, false); /* the writes' chunks first: they hold memory and slots */
        if (chunk_copied(c, i))
            continue;
        ssize_t n = chunk_read_unlocked(c, i, c->buf);
        if (n < 0)
            return n;
        uint64_t t0 = time_now_ns();
        if (chunk_claim(c, i) && chunk_store(c, i, c->buf, (size_t)n) == 0)
            atomic_fetch_add_explicit(&c->copied_by_copier, 1, memory_order_relaxed);
        back_off(c, time_now_ns() - t0);
        uint64_t next = (i + 1) << c->chunk_shift;
        if (next > c->size)
            next = c->size;
        atomic_store_explicit(&c->progress, next, memory_order_relaxed);
        pace(c, next, win_start, prev_start);
    }
    return atomic_load(&c->error);
}

static int copy_all(struct store_cow *c)
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

/* O_DIRECT on the snapshot file for the copier's writes, if the
 * filesystem takes it (tmpfs, some FUSE filesystems do not). */
static void direct_on(struct store_cow *c)
{
    int fl = fcntl(c->dst_fd, F_GETFL);
    c->direct = fl >= 0 && fcntl(c->dst_fd, F_SETFL, fl | O_DIRECT) == 0;
}

static void direct_off(struct store_cow *c)
{
    int fl = fcntl(c->dst_fd, F_GETFL);
    if (fl >= 0 && (fl & O_DIRECT))
        fcntl(c->dst_fd, F_SETFL, fl & ~O_DIRECT);
    c->direct = false;
}

/* The calling thread's I/O in the idle class until ioprio_restore: the
 * copier's reads of the volume and writes of the snapshot file then wait
 * behind the volume's own I/O in the disk's queue (mq-deadline and BFQ
 * dispatch by class; "none" ignores it). Returns the previous priority,
 * or -1 if it could not be read (then nothing is changed). */
static int ioprio_idle(void)
{
    long old = syscall(SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
    if (old < 0 ||
        syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0)) < 0)
        return -1;
    return (int)old;
}

static void ioprio_restore(int old)
{
    if (old >= 0)
        syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, old);
}

int store_cow_copy_rest(struct store_cow *c)
{
    int prio = ioprio_idle();
    direct_on(c);
    int rc = copy_all(c);
    /* Every chunk a write captured is stored before this returns; writes
     * after the last look store their own (holes at the instant, in
     * practice: every data chunk has been copied by now), buffered:
     * O_DIRECT is off before the copier says it has stopped (q_lock orders
     * the two for those writes). */
    queue_drain(c, false);
    direct_off(c);
    queue_drain(c, true);
    ioprio_restore(prio);
    return rc < 0 ? rc : atomic_load(&c->error);
}

void store_cow_cancel(struct store_cow *c)
{
    atomic_store(&c->cancel, true);
    /* The snapshot is abandoned: writes stop copying, and none waits for
     * a queue slot a copier that never runs would not free. */
    pthread_mutex_lock(&c->q_lock);
    c->copier_active = false;
    pthread_cond_broadcast(&c->q_space);
    pthread_mutex_unlock(&c->q_lock);
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
