/*
 * Size-class free lists. Each thread keeps a few buffers per class so the
 * common case (a reactor allocating and freeing request buffers) takes no
 * lock; overflow goes to a global list capped in bytes so idle memory stays
 * bounded (the RSS goal in the NBD benchmark).
 */
#include "core/bufpool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define MIN_SHIFT 12 /* 4 KiB */
#define MAX_SHIFT 26 /* 64 MiB */
#define NCLASS (MAX_SHIFT - MIN_SHIFT + 1)
#define LOCAL_SLOTS 8
#define LOCAL_MAX_SHIFT 18     /* per-thread caching up to 256 KiB */
#define GLOBAL_CAP (32u << 20) /* bytes kept in global lists */

struct free_buf {
    struct free_buf *next;
};

struct local_cache {
    void *slot[NCLASS][LOCAL_SLOTS];
    unsigned count[NCLASS];
};

static _Thread_local struct local_cache local;
static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct free_buf *global_list[NCLASS];
static size_t global_bytes;

static int size_class(size_t size)
{
    unsigned shift = MIN_SHIFT;
    while (shift <= MAX_SHIFT && ((size_t)1 << shift) < size)
        shift++;
    return shift > MAX_SHIFT ? -1 : (int)(shift - MIN_SHIFT);
}

void *bufpool_get(size_t size)
{
    if (size == 0)
        size = 1;
    int c = size_class(size);
    if (c < 0)
        return aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
    if (local.count[c])
        return local.slot[c][--local.count[c]];
    size_t csize = (size_t)1 << (c + MIN_SHIFT);
    pthread_mutex_lock(&global_lock);
    struct free_buf *b = global_list[c];
    if (b) {
        global_list[c] = b->next;
        global_bytes -= csize;
    }
    pthread_mutex_unlock(&global_lock);
    if (b)
        return b;
    return aligned_alloc(4096, csize);
}

void bufpool_put(void *buf, size_t size)
{
    if (!buf)
        return;
    if (size == 0)
        size = 1;
    int c = size_class(size);
    if (c < 0) {
        free(buf);
        return;
    }
    if (c + MIN_SHIFT <= LOCAL_MAX_SHIFT && local.count[c] < LOCAL_SLOTS) {
        local.slot[c][local.count[c]++] = buf;
        return;
    }
    size_t csize = (size_t)1 << (c + MIN_SHIFT);
    pthread_mutex_lock(&global_lock);
    if (global_bytes + csize <= GLOBAL_CAP) {
        struct free_buf *b = buf;
        b->next = global_list[c];
        global_list[c] = b;
        global_bytes += csize;
        buf = NULL;
    }
    pthread_mutex_unlock(&global_lock);
    free(buf);
}

void bufpool_thread_release(void)
{
    for (int c = 0; c < NCLASS; c++) {
        while (local.count[c])
            free(local.slot[c][--local.count[c]]);
    }
}
