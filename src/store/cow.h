/*
 * Copy-before-write state of one snapshot being copied out of a live volume
 * (as dm-snapshot does): the snapshot is taken logically at one instant,
 * then its file is filled in the background while the volume keeps taking
 * writes. A write to a chunk not copied yet first copies that chunk's old
 * data to the snapshot file; the background copier walks the origin's data
 * extents and copies every chunk no write has copied already.
 *
 * The bitmap of copied chunks is read without a lock (atomics): a write to
 * a chunk already copied costs a few loads and takes no lock. A write
 * captures a chunk (its old data read from the origin into a buffer, then
 * its bit set, never cleared) under copy_lock; the copier reads a chunk
 * without the lock and only claims it (sets the bit) under the lock, if no
 * write captured it meanwhile (cow.c says why that is the chunk's data at
 * the instant), so a write never waits for the copier's reads. A write never
 * writes the snapshot file itself while the copier runs: it hands the
 * captured buffer to the copier (a queue bounded by STORE_COW_QUEUE_BYTES)
 * and goes on, so it waits for its own chunk read, and for a free queue
 * slot if writes capture faster than the copier stores. Measured why (perf sched stacks, ext4 under
 * bench/snapshot.sh): writes that stored their own chunks waited 50-650 ms on the snapshot file's
 * inode lock, held by another store that waited for delayed block allocation (block bitmap reads)
 * behind the file's writeback; with the volume's writes drained in order by one job, every write
 * queued behind such a store waited too.
 *
 * The copier is the snapshot file's only writer. It stores the queued
 * chunks before its own next one, and writes with O_DIRECT where the
 * filesystem allows it: no dirty pages of the snapshot file, so no
 * writeback of it that could hold the file's locks or fill the page cache
 * the volume's own writes need, and nothing for the final fsync to write.
 * When writes capture faster than that (the queue over half full), it
 * stores queued chunks through the page cache until it has caught up.
 * (Without O_DIRECT it paces its writeback with sync_file_range.) Its I/O
 * runs in the idle I/O class, so a disk scheduler that dispatches by class
 * (mq-deadline, BFQ) serves the volume's own reads, writes and the
 * filesystem's journal first. And it backs off when the disk is saturated
 * (a store of its own chunk that took over 5 ms is followed by a pause as
 * long, during which it stores only the writes' queued chunks): the
 * volume's writes are buffered, and the kernel's writeback of them holds
 * the pages it writes locked until the disk takes the I/O; a guest write
 * to such a page waited 174-531 ms behind a saturated disk (kernel stacks
 * sampled every 5 ms: __filemap_get_folio in ext4_da_write_begin, while
 * the writeback waited in wbt_wait or blk_mq_get_tag). Measured on the
 * test VM (bench/snapshot.sh, 10 snapshots of 1 GiB under fio at 1,500
 * IOPS): 2 of 8 runs over 100 ms before (180.8 and 530.8 ms), 0 of 12
 * after (fio's worst write: median 46 ms, at most 91.4); a snapshot takes
 * as long (2.3-3.3 s).
 *
 * Why the result is the origin at the instant of volume_cow_attach: a
 * chunk whose bit is clear has not been modified since (every modifying
 * request copies its chunks first), so reading it from the origin, at any
 * later time, gives its old contents; a hole there was a hole then.
 *
 * Errors (snapshot file full, I/O error) never fail the volume's writes:
 * the first one is kept (store_cow_error), the state becomes "failed"
 * (writes stop copying, the copier stops) and the snapshot must be
 * discarded by its owner.
 *
 * Threads: store_cow_range_copied from any thread (reactors included);
 * store_cow_before_write and store_cow_copy_rest block on I/O: I/O pool or
 * control threads only (and inline for backends that never block, like
 * memory). See volume.h for how a volume uses it.
 */
#ifndef BLOCKD_STORE_COW_H
#define BLOCKD_STORE_COW_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/bdev.h"

/* 256 KiB. With 64 KiB chunks a write copied less, but fio's mean write
 * latency during a copy was 3x worse (more copy-before-write trips through
 * the I/O pool, 4x more copier steps; fio 4K random writes at 1500 IOPS,
 * 1 GiB volume data: bench/snapshot.sh). */
#define STORE_COW_CHUNK_DEFAULT ((uint32_t)256 << 10)

/* Captured chunks a snapshot's writes may hand to the copier before a
 * write that must copy waits for the copier to store one: 64 MiB (256
 * chunks of 256 KiB), the memory one snapshot in progress may hold. */
#define STORE_COW_QUEUE_BYTES ((uint64_t)64 << 20)

/* Capture locks (striped by chunk). With one lock, a capture read that
 * waited for the disk or the CPU (20-90 ms seen on the loaded VM, 256 KiB)
 * made every other write that had to capture a chunk wait too. */
#define STORE_COW_LOCKS 16

struct store_cow_pending; /* a captured chunk waiting for the copier (cow.c) */

struct store_cow {
    struct bdev *origin; /* borrowed: the live volume's backend */
    int dst_fd;          /* borrowed: the snapshot file, already `size` long and sparse */
    uint64_t size;       /* snapshot size: the volume's size at the instant */
    uint32_t chunk;      /* bytes, power of two */
    unsigned chunk_shift;
    uint64_t nchunks;
    _Atomic uint64_t *bits; /* nchunks bits: 1 = old data is in the snapshot file */
    atomic_int error;       /* first error, 0 if none; non-zero = failed */
    atomic_bool cancel;     /* store_cow_copy_rest stops at the next chunk */
    _Atomic uint64_t copied_by_writes, copied_by_copier; /* chunks (statistics) */
    _Atomic uint64_t progress;                           /* copier position, bytes */
    /* Capture locks, one per chunk modulo STORE_COW_LOCKS (copy_lock_of in
     * cow.c): writes capturing different chunks read them in parallel. */
    pthread_mutex_t copy_lock[STORE_COW_LOCKS];
    char *buf; /* one chunk, the copier's (4 KiB aligned, for O_DIRECT) */

    /* Chunks captured by writes, for the copier to store (q_lock). While
     * copier_active, writes queue; after the copier finished (or was
     * cancelled, or never ran) a write stores its chunk itself. */
    pthread_mutex_t q_lock;
    pthread_cond_t q_space; /* a queued chunk was stored, or the copier stopped */
    struct store_cow_pending *q_head, *q_tail;
    struct store_cow_pending *q_free; /* buffers stored already, for reuse */
    uint64_t q_bytes;
    bool copier_active;
    bool direct;         /* the copier writes with O_DIRECT */
    bool store_buffered; /* this store goes through the page cache (copier only) */
    _Atomic uint64_t queue_waits, queue_wait_max_ns; /* writes that waited for a slot */
};

/*
 * Set up the state for a snapshot of `size` bytes of origin into dst_fd
 * (both borrowed: they must outlive the state). chunk: a power of two in
 * 4 KiB..64 MiB (0: STORE_COW_CHUNK_DEFAULT). Returns 0 or -errno
 * (-EINVAL, -ENOMEM). Free with store_cow_free.
 */
int store_cow_new(struct bdev *origin, int dst_fd, uint64_t size, uint32_t chunk,
                  struct store_cow **out);
void store_cow_free(struct store_cow *c);

/* Is every chunk overlapping [off, off+len) copied already (or past the
 * snapshot's end)? Lock-free; any thread. */
static inline bool store_cow_range_copied(const struct store_cow *c, uint64_t off, uint64_t len)
{
    if (off >= c->size || len == 0)
        return true;
    uint64_t last = off + len - 1 < c->size ? off + len - 1 : c->size - 1;
    for (uint64_t i = off >> c->chunk_shift; i <= last >> c->chunk_shift; i++)
        if (!(atomic_load_explicit(&c->bits[i >> 6], memory_order_acquire) & (1ull << (i & 63))))
            return false;
    return true;
}

/*
 * Before [off, off+len) of the origin is modified: capture the old data of
 * every chunk of the range not copied yet, for the copier to store (or
 * store it here once the copier has stopped). Blocking (a chunk read; a
 * free queue slot). Errors are recorded (store_cow_error), never returned:
 * the write goes on.
 */
void store_cow_before_write(struct store_cow *c, uint64_t off, uint64_t len);

/*
 * The background copier: store the chunks writes captured, and copy every
 * chunk not copied yet that holds data in the origin (holes are skipped:
 * the snapshot file is sparse), in order, one chunk per hold of
 * copy_lock. Returns once every captured chunk is in the file (page cache
 * or disk; the caller fsyncs). Call at most once per state. Blocking (I/O
 * pool thread; a write waiting for copy_lock or a queue slot waits for
 * this thread, so it must run at the data path's priority). Progress in
 * c->progress. Returns 0, the recorded error, or -ECANCELED after
 * store_cow_cancel.
 */
int store_cow_copy_rest(struct store_cow *c);
/* Stop the copier at its next chunk (or, if it never runs, make writes
 * store their own chunks from now on). Any thread. */
void store_cow_cancel(struct store_cow *c);

/* The first error (copy-before-write or copier), or 0. */
int store_cow_error(const struct store_cow *c);
/* Chunks copied so far (tests, logs). */
uint64_t store_cow_copied_count(const struct store_cow *c);

#endif
