/* Per-reactor volume I/O counters (see iostats.h). */
#include "core/iostats.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/reactor.h"
#include "core/util.h"

#define MAX_REACTORS 256
#define NCHUNKS (IOSTATS_MAX_SLOTS / IOSTATS_CHUNK)

struct cell {
    _Atomic uint64_t started;
    _Atomic uint64_t ops[IOSTATS_NOP];
    _Atomic uint64_t bytes[IOSTATS_NOP];
    _Atomic uint64_t errors[IOSTATS_NOP];
    _Atomic uint64_t sum_ns[IOSTATS_NOP];
    _Atomic uint64_t buckets[IOSTATS_NOP][IOSTATS_NBUCKETS];
};

struct chunk {
    struct cell cells[IOSTATS_CHUNK][IOSTATS_NPROTO];
};

/* One per reactor: written only by that reactor. */
struct shard {
    _Atomic(struct chunk *) chunks[NCHUNKS];
};

static _Atomic(struct shard *) shards[MAX_REACTORS];

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static char *names[IOSTATS_MAX_SLOTS];
static _Atomic uint8_t bound[IOSTATS_MAX_SLOTS];
static _Atomic size_t nslots;

unsigned iostats_bucket(uint64_t ns)
{
    if (ns <= IOSTATS_BUCKET0_NS)
        return 0;
    uint64_t q = (ns - 1) / IOSTATS_BUCKET0_NS;
    unsigned i = (unsigned)(64 - __builtin_clzll(q));
    if (i < IOSTATS_NBUCKETS - 2)
        return i;
    return ns <= 10000000000ull ? IOSTATS_NBUCKETS - 2 : IOSTATS_NBUCKETS - 1;
}

double iostats_bucket_le(unsigned i)
{
    if (i >= IOSTATS_NBUCKETS - 2)
        return 10.0;
    return (double)(IOSTATS_BUCKET0_NS << i) / 1e9;
}

int iostats_slot(const char *name)
{
    pthread_mutex_lock(&slot_lock);
    size_t n = atomic_load_explicit(&nslots, memory_order_relaxed);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], name) == 0) {
            pthread_mutex_unlock(&slot_lock);
            return (int)i;
        }
    }
    int rc;
    if (n == IOSTATS_MAX_SLOTS) {
        static bool warned;
        if (!warned)
            log_warn("metrics: more than %d volumes seen; %s and later ones are not counted",
                     IOSTATS_MAX_SLOTS, name);
        warned = true;
        rc = -ENOSPC;
    } else if (!(names[n] = strdup(name))) {
        rc = -ENOMEM;
    } else {
        /* Release: a reader that sees the count sees the name. */
        atomic_store_explicit(&nslots, n + 1, memory_order_release);
        rc = (int)n;
    }
    pthread_mutex_unlock(&slot_lock);
    return rc;
}

void iostats_bind(int slot, enum iostats_proto proto)
{
    if (slot >= 0)
        atomic_fetch_or_explicit(&bound[slot], (uint8_t)(1u << proto), memory_order_relaxed);
}

size_t iostats_slots(void)
{
    return atomic_load_explicit(&nslots, memory_order_acquire);
}

const char *iostats_name(size_t slot)
{
    return names[slot];
}

bool iostats_bound(size_t slot, enum iostats_proto proto)
{
    return atomic_load_explicit(&bound[slot], memory_order_relaxed) & (1u << proto);
}

/* The calling reactor's cell for (slot, proto), allocating its chunk on
 * first use; NULL off a reactor or out of memory. */
static struct cell *my_cell(int slot, enum iostats_proto proto)
{
    if (slot < 0)
        return NULL;
    struct reactor *r = reactor_self();
    if (!r)
        return NULL;
    unsigned ri = reactor_index(r);
    if (ri >= MAX_REACTORS)
        return NULL;
    struct shard *s = atomic_load_explicit(&shards[ri], memory_order_acquire);
    if (!s) {
        s = calloc(1, sizeof(*s));
        if (!s)
            return NULL;
        atomic_store_explicit(&shards[ri], s, memory_order_release);
    }
    size_t ci = (size_t)slot / IOSTATS_CHUNK;
    struct chunk *c = atomic_load_explicit(&s->chunks[ci], memory_order_relaxed);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return NULL;
        atomic_store_explicit(&s->chunks[ci], c, memory_order_release);
    }
    return &c->cells[(size_t)slot % IOSTATS_CHUNK][proto];
}

uint64_t iostats_start(int slot, enum iostats_proto proto)
{
    struct cell *c = my_cell(slot, proto);
    if (!c)
        return 0;
    counter_add(&c->started, 1);
    return time_now_ns();
}

void iostats_done(int slot, enum iostats_proto proto, enum iostats_op op, uint64_t bytes,
                  bool failed, uint64_t t0)
{
    if (t0 == 0 || op >= IOSTATS_NOP)
        return;
    struct cell *c = my_cell(slot, proto);
    if (!c)
        return;
    uint64_t now = time_now_ns();
    uint64_t ns = now > t0 ? now - t0 : 0;
    counter_add(&c->ops[op], 1);
    counter_add(&c->bytes[op], bytes);
    if (failed)
        counter_add(&c->errors[op], 1);
    counter_add(&c->sum_ns[op], ns);
    counter_add(&c->buckets[op][iostats_bucket(ns)], 1);
}

void iostats_read(size_t slot, enum iostats_proto proto, struct iostats_totals *out)
{
    memset(out, 0, sizeof(*out));
    if (slot >= IOSTATS_MAX_SLOTS)
        return;
    size_t nr = reactors_count();
    for (size_t ri = 0; ri < nr && ri < MAX_REACTORS; ri++) {
        struct shard *s = atomic_load_explicit(&shards[ri], memory_order_acquire);
        if (!s)
            continue;
        struct chunk *ch =
            atomic_load_explicit(&s->chunks[slot / IOSTATS_CHUNK], memory_order_acquire);
        if (!ch)
            continue;
        struct cell *c = &ch->cells[slot % IOSTATS_CHUNK][proto];
        out->started += atomic_load_explicit(&c->started, memory_order_relaxed);
        for (unsigned op = 0; op < IOSTATS_NOP; op++) {
            out->ops[op] += atomic_load_explicit(&c->ops[op], memory_order_relaxed);
            out->bytes[op] += atomic_load_explicit(&c->bytes[op], memory_order_relaxed);
            out->errors[op] += atomic_load_explicit(&c->errors[op], memory_order_relaxed);
            out->sum_ns[op] += atomic_load_explicit(&c->sum_ns[op], memory_order_relaxed);
            for (unsigned b = 0; b < IOSTATS_NBUCKETS; b++)
                out->buckets[op][b] +=
                    atomic_load_explicit(&c->buckets[op][b], memory_order_relaxed);
        }
    }
}

const char *iostats_proto_name(enum iostats_proto p)
{
    return p == IOSTATS_NBD ? "nbd" : p == IOSTATS_ISCSI ? "iscsi" : "nvme";
}

const char *iostats_op_name(enum iostats_op op)
{
    static const char *const n[IOSTATS_NOP] = {"read", "write", "flush", "unmap", "other"};
    return op < IOSTATS_NOP ? n[op] : "?";
}
