/*
 * The block backend interface: an ops table of synchronous calls, an
 * optional asynchronous submission path (submit, for backends whose
 * requests go to a remote service: RBD), plus capability bits. Backends are thread-safe: many
 * threads may call read/ write concurrently. Front-ends never call a bdev directly; they go through
 * struct volume (volume.h), which adds async dispatch, group commit, and the
 * sync policy. Capabilities decide what front-ends advertise (NBD flags, SCSI
 * VPD/mode pages); nothing is hard-coded there.
 */
#ifndef BLOCKD_STORE_BDEV_H
#define BLOCKD_STORE_BDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/reactor.h"

enum bdev_cap {
    BDEV_CAN_FLUSH = 1u << 0,      /* sync() makes written data durable */
    BDEV_CAN_TRIM = 1u << 1,       /* trim() deallocates */
    BDEV_CAN_ZERO = 1u << 2,       /* write_zeroes() is better than writing zeros */
    BDEV_CAN_FAST_ZERO = 1u << 3,  /* write_zeroes(BDEV_ZERO_FAST) can succeed */
    BDEV_CAN_EXTENTS = 1u << 4,    /* extents() reports real holes */
    BDEV_CAN_MULTI_CONN = 1u << 5, /* one sync covers writes from every thread */
    BDEV_CAN_CACHE = 1u << 6,      /* cache() prefetches */
    BDEV_TRIM_ZEROES = 1u << 7,    /* trimmed ranges read back as zeros (LBPRZ) */
    BDEV_ROTATIONAL = 1u << 8,
    /* A failed sync() loses no write that completed: the backend keeps no
     * volatile cache of its own (RBD with rbd_cache off), so the error
     * (typically -ETIMEDOUT: the cluster did not answer) goes to the
     * flushes that sync covered and the next sync tries again. Without
     * it the first sync error is sticky (a failed fdatasync may have
     * dropped dirty pages). */
    BDEV_SYNC_RETRIABLE = 1u << 9,
    /* submit() takes BDEV_IO_COMPARE_WRITE: an atomic compare-and-write
     * done by the backend itself (for every client of a shared device). */
    BDEV_CAN_COMPARE_WRITE = 1u << 10,
    /* A write is on stable storage when it completes: the backend has no
     * volatile cache between us and the medium (RBD with rbd_cache off, no
     * journal and no write-log cache plugin: an OSD acknowledges a write
     * only once every replica committed it). A flush then has nothing to
     * make durable beyond what already is, so the volume completes it at
     * once instead of calling sync() (store/volume.c). */
    BDEV_WRITES_STABLE = 1u << 11,
};

enum bdev_zero_flags {
    BDEV_ZERO_MAY_TRIM = 1u << 0, /* may deallocate (punch) instead of allocating */
    BDEV_ZERO_FAST = 1u << 1,     /* fail with -ENOTSUP rather than be slow */
};

enum extent_type { EXTENT_DATA = 0, EXTENT_HOLE = 1, EXTENT_ZERO = 2 };

struct extent {
    uint64_t offset;
    uint64_t length;
    enum extent_type type; /* HOLE reads as zeros and is unallocated */
};

struct bdev;

enum bdev_io_op {
    BDEV_IO_READ,
    BDEV_IO_WRITE,
    BDEV_IO_FLUSH,
    BDEV_IO_TRIM,
    BDEV_IO_WRITE_ZEROES,
    /* Atomically (for every client of the device): compare [offset,
     * offset+length) with buf's first length bytes; equal: write buf's
     * next length bytes there; else -EILSEQ, nothing written, the byte
     * offset of the first difference (from offset) in miscompare. Only
     * with BDEV_CAN_COMPARE_WRITE; -ENOTSUP when the backend cannot do it
     * for this range (the caller may then fall back to its own locking). */
    BDEV_IO_COMPARE_WRITE,
};

/*
 * An asynchronous request (bdev_ops.submit). The submitter owns the memory
 * (usually embedded in its own request) and fills the public fields; it
 * must stay valid, and buf untouched, until done() has run.
 */
struct bdev_io {
    enum bdev_io_op op;
    unsigned flags;      /* WRITE_ZEROES: enum bdev_zero_flags */
    uint64_t offset;     /* range-checked by the submitter */
    uint64_t length;     /* > 0 for every op but FLUSH (0 there) */
    void *buf;           /* READ: destination; WRITE: source (length bytes);
                          * COMPARE_WRITE: compare data then write data (2 x length) */
    uint64_t miscompare; /* COMPARE_WRITE -EILSEQ: first differing byte */
    /* done() runs on this reactor's thread; NULL: on whatever thread the
     * backend completes on (its own, or a reactor): done() must not block,
     * and must not close the bdev there. */
    struct reactor *owner;
    void (*done)(struct bdev_io *io);
    int result; /* 0 or -errno, set before done() */
    /* private to the backend */
    struct reactor_msg msg;
    struct iovec iov;
    struct bdev *bdev; /* the one submitted to (its completion finds it) */
};

struct bdev_ops {
    const char *name;
    /* All return 0 or -errno; len/off are already range-checked by volume.
     * -ETIMEDOUT: a remote backend's service did not answer in time (the
     * request may or may not have been applied); retriable, and front-ends
     * say so (SCSI NOT READY, NBD EIO). */
    int (*read)(struct bdev *b, void *buf, size_t len, uint64_t off);
    /* Like read but return -EAGAIN instead of blocking (page-cache miss).
     * NULL: read never blocks (memory) — may be called inline. */
    int (*read_nowait)(struct bdev *b, void *buf, size_t len, uint64_t off);
    int (*write)(struct bdev *b, const void *buf, size_t len, uint64_t off);
    /* NULL: write never blocks. Else -EAGAIN if it would block. */
    int (*write_nowait)(struct bdev *b, const void *buf, size_t len, uint64_t off);
    int (*sync)(struct bdev *b); /* fdatasync */
    int (*trim)(struct bdev *b, uint64_t off, uint64_t len);
    int (*write_zeroes)(struct bdev *b, uint64_t off, uint64_t len, unsigned flags);
    int (*cache)(struct bdev *b, uint64_t off, uint64_t len);
    /* Fill up to max extents describing [off, off+len) in order; set *n.
     * The last extent may end before off+len when max is reached. */
    int (*extents)(struct bdev *b, uint64_t off, uint64_t len, struct extent *out, size_t max,
                   size_t *n);
    int (*resize)(struct bdev *b, uint64_t new_size);
    void (*close)(struct bdev *b);
    /* An fd whose byte offsets are the device's, for reads through the
     * reactor's io_uring (store/uring.h). NULL: no such fd. */
    int (*read_fd)(struct bdev *b);
    /* The asynchronous data path; NULL: none (volume runs the synchronous
     * ops above on the I/O pool or inline). Starts io without blocking
     * and returns 0: done() then runs exactly once, as io->owner says,
     * possibly before submit returns. -errno: refused (nothing started,
     * done() will not run). Thread-safe; callable from a reactor.
     * A FLUSH completes once every write whose done() ran before submit
     * was called, on any thread, is durable (sync()'s promise). */
    int (*submit)(struct bdev *b, struct bdev_io *io);
};

struct bdev {
    const struct bdev_ops *ops;
    uint64_t size; /* bytes; updated by resize */
    unsigned caps; /* enum bdev_cap */
    bool readonly;
    uint32_t latency_us; /* memory backend: simulated per-request latency */
};

/* Open a file or block device. Probes RWF_NOWAIT, PUNCH_HOLE, ZERO_RANGE,
 * SEEK_DATA once per open and sets caps accordingly. */
int bdev_file_open(const char *path, bool readonly, struct bdev **out);
/* Create a file-backed volume file: sparse (ftruncate) or thick (fallocate). */
int bdev_file_create(const char *path, uint64_t size, bool thick);
/* The same, confined to a registered pool root (store/poolfs.h): path must
 * lie beneath one, with no symlink on the way (-EXDEV, -ELOOP, -EINVAL).
 * Everything the API names (datasets, export and extent paths) opens
 * through these; the unconfined pair is for tests and tools. */
int bdev_file_open_in_pool(const char *path, bool readonly, struct bdev **out);
int bdev_file_create_in_pool(const char *path, uint64_t size, bool thick);
/* A sparse in-memory device (allocated in chunks on first write).
 * latency_us > 0 makes every request complete after that delay (without
 * blocking any thread), like nbdkit's delay filter. */
int bdev_memory_open(uint64_t size, uint32_t latency_us, struct bdev **out);
/* A device whose storage cannot be reached yet (a volume of an RBD pool
 * still connecting): it has the volume's size, no capabilities, and fails
 * every request with -EAGAIN. A front-end keeps such a share visible and
 * answers "becoming ready" (the iSCSI LU's not-ready state) instead of
 * sending it requests; until the pool comes online and the real volume
 * replaces it. Thread-safe; no memory per byte. */
int bdev_offline_open(uint64_t size, struct bdev **out);
bool bdev_is_offline(const struct bdev *b);

static inline void bdev_close(struct bdev *b)
{
    if (b)
        b->ops->close(b);
}

#endif
