/*
 * Page-cache reads through a per-reactor io_uring. On this kind of machine a
 * system call is the dearest part of a small read (a PVM guest pays a trip
 * through the hypervisor for each), so the reads a reactor accepts in one
 * loop iteration are handed to the kernel with one io_uring_enter at the end
 * of it; reads served from the page cache complete inside that call and are
 * delivered at once, the rest complete later and wake the reactor through an
 * eventfd (muted while the reactor reaps inline completions itself).
 *
 * Reactor threads only. Where io_uring is unavailable (old kernel, disabled
 * by sysctl, seccomp) uring_read returns -ENOSYS and the caller keeps its
 * portable path (preadv2 RWF_NOWAIT, then the I/O pool). The environment
 * variable BLOCKD_IO_ENGINE=pread chooses that path on purpose (make check
 * runs the ASan pass of the integration tests with it, so both are tested).
 */
#ifndef BLOCKD_STORE_URING_H
#define BLOCKD_STORE_URING_H

#include <stddef.h>
#include <stdint.h>

struct uring_op {
    /* res: bytes read (may be short) or -errno. Runs on the reactor thread
     * that queued the op. */
    void (*done)(struct uring_op *op, int res);
};

/* Queue a read of len bytes at off into buf. 0: op->done will be called
 * (never before the end of the current loop iteration); -ENOSYS: no
 * io_uring on this thread, use another path. */
int uring_read(int fd, void *buf, size_t len, uint64_t off, struct uring_op *op);

/* Disable the engine for the whole process (tests, comparisons). */
void uring_disable(void);

#endif
