/* Per-call memory budget for jansson allocations; see callmem.h. */
#include "api/callmem.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <malloc.h>
#include <stdlib.h>

static _Atomic uint64_t budget = CALLMEM_DEFAULT_BUDGET;
static _Thread_local struct callmem_scope *cur;

/* Plain malloc blocks, no header: jansson hands some of its blocks to
 * callers that release them with free() (json_dumps' text), so a block
 * must be valid for free() whoever frees it. Sizes come from
 * malloc_usable_size. */
static void *cm_malloc(size_t size)
{
    struct callmem_scope *s = cur;
    if (s && (s->exceeded || s->used + (int64_t)size >
                                 (int64_t)atomic_load_explicit(&budget, memory_order_relaxed))) {
        s->exceeded = true; /* every later allocation of the call fails too */
        return NULL;
    }
    void *p = malloc(size);
    if (p && s) {
        s->used += (int64_t)malloc_usable_size(p);
        if (s->used > s->peak)
            s->peak = s->used;
    }
    return p;
}

static void cm_free(void *p)
{
    struct callmem_scope *s = cur;
    if (p && s)
        s->used -= (int64_t)malloc_usable_size(p);
    free(p);
}

void callmem_init(void)
{
    static atomic_bool done;
    if (!atomic_exchange(&done, true))
        json_set_alloc_funcs(cm_malloc, cm_free);
}

void callmem_set_budget(uint64_t bytes)
{
    atomic_store(&budget, bytes);
}

uint64_t callmem_budget(void)
{
    return atomic_load(&budget);
}

void callmem_begin(struct callmem_scope *s)
{
    *s = (struct callmem_scope){0};
    if (cur)
        return; /* nested: the outer call's scope counts */
    s->owner = true;
    cur = s;
}

bool callmem_end(struct callmem_scope *s)
{
    if (s->owner && cur == s) {
        cur = NULL;
        return s->exceeded;
    }
    return cur ? cur->exceeded : false;
}

bool callmem_exceeded(void)
{
    return cur && cur->exceeded;
}
