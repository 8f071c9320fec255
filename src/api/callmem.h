/*
 * A memory budget per API call: the JSON a call builds
 * (its parameters' copies, rows, results) is counted against a budget, and
 * past it every further allocation of that call fails, so that one call
 * cannot make the daemon grow without bound; the call then answers
 * ENOMEM naming the limit (api.c, jobs.c).
 *
 * How: jansson's allocator (json_set_alloc_funcs) is replaced by one that
 * counts the calling thread's allocations and frees (malloc_usable_size)
 * in its active scope, if any: the net growth of jansson memory while the
 * call runs, which frees of older blocks (a row cache replaced) lower and
 * blocks freed later by another thread do not. Threads without a scope
 * (reactors, start-up) are not counted. Blocks stay plain malloc blocks:
 * jansson hands some to callers that free() them (json_dumps).
 *
 * What is not counted: allocations outside jansson (SQLite, the response
 * text, which api.c bounds separately by the same budget).
 */
#ifndef BLOCKD_API_CALLMEM_H
#define BLOCKD_API_CALLMEM_H

#include <stdbool.h>
#include <stdint.h>

#define CALLMEM_DEFAULT_BUDGET ((uint64_t)256 << 20)

struct callmem_scope {
    int64_t used; /* net bytes allocated since callmem_begin (may be < 0) */
    int64_t peak;
    bool exceeded; /* an allocation was refused */
    bool owner;    /* this scope was installed by callmem_begin (not nested) */
};

/*
 * Install the counting allocator in jansson. Must run before the process's
 * first jansson allocation (first thing in main): a block from the plain
 * allocator must never reach the counting free. Idempotent.
 */
void callmem_init(void);

/* The budget in bytes (CALLMEM_DEFAULT_BUDGET unless set). Set at start-up
 * (--api-call-memory); read by any thread. */
void callmem_set_budget(uint64_t bytes);
uint64_t callmem_budget(void);

/*
 * Start counting the calling thread's jansson allocations in s, unless a
 * scope is active already (a call made from inside another, as core.bulk
 * does: the outer call's budget covers it; s->owner false). Pair with
 * callmem_end on the same thread.
 */
void callmem_begin(struct callmem_scope *s);
/* Stop counting (if s is the active scope). Returns s->exceeded. */
bool callmem_end(struct callmem_scope *s);

/* The active scope's state: has an allocation been refused in it? (false
 * with no scope). */
bool callmem_exceeded(void);

#endif
