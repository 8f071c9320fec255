/*
 * A pool of threads for calls that may block (fdatasync, fallocate, reads
 * that miss the page cache, copies). A job's run() executes on a pool
 * thread; then, if owner is set, done.fn is posted to the owner reactor,
 * else done.fn (if set) is called directly on the pool thread.
 *
 * The pool reads the job (owner, done.fn) after run() returns: the job must
 * stay valid until done.fn runs. A waiter that owns the job's memory (on its
 * stack, say) is woken by done.fn, never by run().
 */
#ifndef BLOCKD_CORE_IOPOOL_H
#define BLOCKD_CORE_IOPOOL_H

#include "core/reactor.h"

struct io_job {
    void (*run)(struct io_job *j);
    struct reactor_msg done; /* done.fn may be NULL */
    struct reactor *owner;   /* NULL: done runs on the pool thread */
    struct io_job *next;     /* private */
};

/* Start n threads (0: a default of 4 × CPUs, at least 8). Call once. */
int iopool_start(unsigned n);
/* Drain every queued job, then join the threads. */
void iopool_stop(void);
/* Thread-safe; never blocks. Before iopool_start, run() is executed inline. */
void iopool_submit(struct io_job *j);
/* Jobs submitted and not finished yet (a hint, read without a lock). */
unsigned iopool_busy(void);

#endif
