/*
 * Pooled payload buffers so the hot path does not malloc per request. Sizes
 * are rounded up to a power of two from 4 KiB; buffers of up to 64 MiB are
 * cached per size class (bounded), bigger ones are plain allocations.
 * Thread-safe; any thread may free a buffer another allocated.
 */
#ifndef BLOCKD_CORE_BUFPOOL_H
#define BLOCKD_CORE_BUFPOOL_H

#include <stddef.h>

/* Returns a 4096-aligned buffer of at least size bytes, or NULL. */
void *bufpool_get(size_t size);
/* size must be the value passed to bufpool_get. NULL is ignored. */
void bufpool_put(void *buf, size_t size);
/* Return this thread's cached buffers (call before a thread exits). */
void bufpool_thread_release(void);

#endif
