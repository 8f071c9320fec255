/*
 * A volume: a refcounted, thread-safe handle on an open bdev with the
 * properties front-ends need (block size, sync policy, read-only) and the
 * async request path every front-end uses (volume_submit).
 *
 * Durability (DESIGN.md): a FLUSH completes only after a bdev sync() that
 * *started after* every write that had completed before the flush was
 * submitted — on any connection. Concurrent flushes share sync() calls
 * (group commit). sync=always: every write is followed by the same group
 * commit before it completes. sync=disabled: FLUSH completes at once and
 * FUA is ignored too — the one explicit exception to durability, which
 * front-ends report to initiators from volume_sync_mode().
 *
 * Threads: every function is thread-safe. Requests hold no reference on the
 * volume: whoever submits must keep its own reference until done() has run
 * for every request it submitted. Up to a few group-commit sync jobs per
 * volume run on the I/O pool; each holds a reference while it runs.
 */
#ifndef BLOCKD_STORE_VOLUME_H
#define BLOCKD_STORE_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "store/bdev.h"
#include "store/uring.h"

enum volume_sync { VOLUME_SYNC_STANDARD = 0, VOLUME_SYNC_ALWAYS = 1, VOLUME_SYNC_DISABLED = 2 };

/* "standard"/"always"/"disabled" (any case) ↔ enum. */
int volume_sync_parse(const char *s, enum volume_sync *out);
const char *volume_sync_name(enum volume_sync s); /* "STANDARD", ... */

struct volume;

/* Takes ownership of b (closed when the last reference is dropped), also
 * on success only (on error the caller still owns b). name is copied, for
 * logs ("demo/vm1"). block_size: 512..128K power of two, else -EINVAL.
 * A bdev opened read-only makes the volume read-only for good. */
int volume_new(const char *name, struct bdev *b, uint32_t block_size, enum volume_sync sync,
               bool readonly, struct volume **out);
void volume_ref(struct volume *v);
/* The last reference closes the backend, on the calling thread, except
 * for asynchronous backends (bdev_ops.submit: RBD) dropped on a reactor or
 * by the volume's own completions: their close blocks, so it runs on the
 * I/O pool then. */
void volume_unref(struct volume *v);

const char *volume_name(const struct volume *v);
/* The backend (borrowed: valid while a reference on v is held), for
 * backend-specific queries (e.g. bdev_rbd_image). */
struct bdev *volume_bdev(struct volume *v);
uint64_t volume_size(const struct volume *v); /* bytes, atomic read */
uint32_t volume_block_size(const struct volume *v);
enum volume_sync volume_sync_mode(const struct volume *v);
bool volume_readonly(const struct volume *v);
unsigned volume_caps(const struct volume *v); /* enum bdev_cap */
/* A counter bumped by every resize, so front-ends can notice (UA, NBD). */
uint64_t volume_size_generation(const struct volume *v);

/* Property changes take effect for the next request. Thread-safe. */
void volume_set_sync(struct volume *v, enum volume_sync s);
void volume_set_readonly(struct volume *v, bool ro);
/* Synchronous (blocking) — call from the API/control thread. new_size must
 * be a non-zero multiple of the block size (-EINVAL). A shrink first makes
 * new requests see the new size, then waits for the modifying requests
 * already in flight (so none can write past the new end after it), then
 * cuts the backend. Front-ends learn of the change via
 * volume_size_generation. Block devices: -ENOTSUP. A shrink while a
 * snapshot is being copied out of the volume (volume_cow_attach): -EBUSY. */
int volume_resize(struct volume *v, uint64_t new_size);
/* The backend's storage was resized by someone else (another client of a
 * shared RBD image: a gateway member, `rbd resize`): take new_size
 * (rounded down to whole blocks) as the volume's size without resizing
 * the backend. A shrink makes new requests see it first, then lets the
 * modifying requests in flight land (as volume_resize). Front-ends learn
 * of it via volume_size_generation. 1 changed, 0 already that size,
 * -EINVAL (less than a block). Blocking: API/control threads. */
int volume_size_changed(struct volume *v, uint64_t new_size);
/* Flush and wait (used at shutdown and by tests/benchmarks). */
int volume_flush_wait(struct volume *v);

/*
 * Quiesce: hold the volume's file still, e.g. while a snapshot copies it.
 * Blocking — call from the API/control thread (never a reactor or pool
 * thread). From the moment it is called, new modifying requests (WRITE,
 * TRIM, WRITE_ZEROES) are parked in a per-volume FIFO — no thread blocks,
 * their done() simply has not run yet. It then waits until every modifying
 * request already in flight has returned from the backend, and syncs the
 * backend (group commit; also on sync=disabled volumes), so when it returns
 * 0 the file does not change until the matching volume_resume. Reads,
 * CACHE, EXTENTS and FLUSH keep flowing: a FLUSH covers the writes
 * completed before it, and parked writes have not completed.
 * Calls nest and may come from several threads (a counter): requests are
 * released when the last quiescer resumes. Returns 0, or -errno if the
 * sync failed — then the volume is NOT left quiesced (no resume owed).
 */
int volume_quiesce(struct volume *v);
/* End one volume_quiesce. When none is left, the parked requests are
 * resubmitted in arrival order from the calling thread (volume_submit:
 * checks are made again, done() still runs on each request's owner). */
void volume_resume(struct volume *v);
/* Modifying requests parked right now (tests). */
size_t volume_parked_count(struct volume *v);
/*
 * The first half of volume_quiesce without the sync: new modifying
 * requests park, the ones in flight land; pairs with volume_resume. It
 * takes as long as the writes already in flight (no fdatasync), so it may
 * be used where writes must not wait long. Blocking: API/control thread.
 */
void volume_hold(struct volume *v);

struct store_cow;
/*
 * Start copying a snapshot of v out into dst_fd (an empty file, borrowed
 * until detach) by copy-before-write (store/cow.h; chunk: bytes, 0 for the
 * default): this is the snapshot's instant. Writes are held only while the
 * requests in flight land (volume_hold, no sync); *held_ns (may be NULL)
 * gets how long. From then on every modifying request first copies the old
 * data of its chunks not copied yet, on an I/O pool thread (never inline on
 * a reactor); the caller runs store_cow_copy_rest(*out) for the rest. The
 * snapshot's size is (*out)->size. One at a time per volume: -EBUSY.
 * Blocking: API/control thread. 0 or -errno.
 */
int volume_cow_attach(struct volume *v, int dst_fd, uint32_t chunk, struct store_cow **out,
                      uint64_t *held_ns);
/* Detach and free cow: new requests stop copying; returns once no request
 * that may still use it is in flight (writes are not held meanwhile).
 * Returns the copy's first error (store_cow_error), 0 if the snapshot file
 * is complete as far as writes are concerned. Blocking: API/control
 * thread. */
int volume_cow_detach(struct volume *v, struct store_cow *cow);

enum vreq_op {
    VREQ_READ,
    VREQ_WRITE,
    VREQ_FLUSH,
    VREQ_TRIM,
    VREQ_WRITE_ZEROES,
    VREQ_CACHE,
    VREQ_EXTENTS,
    /* Atomic compare-and-write done by the backend (BDEV_CAN_COMPARE_WRITE in
     * volume_caps): buf holds length bytes to compare,
     * then length bytes to write. -EILSEQ: the data differed, nothing was
     * written, miscompare says where (byte offset from offset). -ENOTSUP:
     * the backend cannot for this range (the caller locks and does it). */
    VREQ_COMPARE_WRITE,
};

enum vreq_flags {
    VREQ_FUA = 1u << 0,       /* WRITE/WRITE_ZEROES/TRIM: durable before completion */
    VREQ_MAY_TRIM = 1u << 1,  /* WRITE_ZEROES: may deallocate */
    VREQ_FAST_ZERO = 1u << 2, /* WRITE_ZEROES: -ENOTSUP unless fast */
};

/* An asynchronous request. The caller owns the memory and fills the public
 * fields; it must stay valid until done() is called. */
struct vreq {
    enum vreq_op op;
    unsigned flags;
    uint64_t offset;
    uint64_t length;
    void *buf;              /* READ: destination; WRITE: source (length bytes) */
    struct extent *extents; /* EXTENTS: output array */
    size_t extents_max;     /* EXTENTS: capacity */
    size_t extents_count;   /* EXTENTS: filled on completion */
    uint64_t miscompare;    /* COMPARE_WRITE -EILSEQ: first differing byte */
    int result;             /* 0 or -errno, set before done() */
    struct reactor *owner;  /* done() runs on this reactor; NULL: any thread */
    void (*done)(struct vreq *r);
    void *arg; /* for the caller */
    /* private */
    struct volume *vol;
    struct io_job job;
    struct reactor_timer timer;
    struct reactor_msg msg;
    struct vreq *next_waiter;
    struct vreq *batch_next; /* the volume's write queue */
    struct uring_op uop;
    struct bdev_io bio; /* backends with submit() (bdev.h) */
    uint64_t flush_target;
    unsigned resize_epoch;
    /* Where a modifying request spent its time (time_now_ns; 0: not
     * reached), for the slow-write log line (volume.c, slow_write_note). */
    uint64_t t_submit, t_start, t_queued, t_run, t_cow, t_exec;
};

/*
 * Start a request. Range and permission checks happen here: out of range →
 * -EINVAL (offset+length past the end → -ENOSPC for writes, -EINVAL for
 * reads), write to a read-only volume → -EPERM. done() may be called before
 * volume_submit returns (inline completion on the calling thread, e.g. a
 * page-cache hit); otherwise it is called later on owner's thread.
 */
void volume_submit(struct volume *v, struct vreq *r);

/* Submit and wait on the calling (non-reactor) thread. Returns r->result.
 * Overwrites r->owner (NULL), r->done and r->arg. Allocates nothing. */
int volume_submit_wait(struct volume *v, struct vreq *r);

/* For benchmarks: disable group commit (every flush does its own sync, on
 * its own pool thread, concurrently with others). */
void volume_set_group_commit(struct volume *v, bool enabled);
/* Counters for tests/benchmarks. */
uint64_t volume_sync_calls(const struct volume *v);

#endif
