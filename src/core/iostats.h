/*
 * Per-volume I/O statistics for the metrics endpoint, kept per reactor.
 *
 * Hot path: a front-end calls iostats_start() when a request arrives and
 * iostats_done() once when it completes, both on the reactor that owns the
 * connection. Each reactor has its own counter arrays, indexed by the
 * volume's stats slot and the protocol, and only that reactor writes them
 * (counter_add: a relaxed load and store, no lock, no locked
 * read-modify-write, no cache line shared with another writer). A scrape
 * sums the reactors' arrays (iostats_read), so a reading may be a few
 * requests behind, never torn.
 *
 * Slots: iostats_slot("pool/vol") maps a volume name to a small integer,
 * under a mutex (call it when a session binds a volume, not per request).
 * Slots are never freed: a volume deleted and created again under the same
 * name continues its counters (Prometheus counters must not go backwards
 * while the process lives). At most IOSTATS_MAX_SLOTS names; past that
 * iostats_slot returns -ENOSPC (logged once) and the volume is not counted.
 *
 * Memory: per reactor, chunks of IOSTATS_CHUNK slots, allocated by the
 * reactor itself the first time it counts a request of a slot in the chunk
 * and published with a release store (the scraper loads with acquire).
 */
#ifndef BLOCKD_CORE_IOSTATS_H
#define BLOCKD_CORE_IOSTATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IOSTATS_MAX_SLOTS 65536
#define IOSTATS_CHUNK 64

enum iostats_proto { IOSTATS_NBD, IOSTATS_ISCSI, IOSTATS_NVME, IOSTATS_NPROTO };
enum iostats_op {
    IOSTATS_READ,
    IOSTATS_WRITE,
    IOSTATS_FLUSH,
    IOSTATS_UNMAP,
    IOSTATS_OTHER,
    IOSTATS_NOP
};

/* Latency buckets: le = 16 µs × 2^i for i = 0..19 (16 µs … 8.39 s), then
 * 10 s, then +Inf. */
#define IOSTATS_NBUCKETS 22
#define IOSTATS_BUCKET0_NS 16000ull

/* Totals of one (volume, protocol), summed over reactors. */
struct iostats_totals {
    uint64_t started;
    uint64_t ops[IOSTATS_NOP];
    uint64_t bytes[IOSTATS_NOP];
    uint64_t errors[IOSTATS_NOP];
    uint64_t sum_ns[IOSTATS_NOP];
    uint64_t buckets[IOSTATS_NOP][IOSTATS_NBUCKETS]; /* not cumulative */
};

/* Upper bound of bucket i in seconds (i < IOSTATS_NBUCKETS - 1). */
double iostats_bucket_le(unsigned i);
/* Bucket index for a latency in ns. Pure. */
unsigned iostats_bucket(uint64_t ns);

/* Slot for volume name ("pool/vol"), creating it. Thread-safe (mutex);
 * not for the hot path. Returns the slot or -ENOSPC / -ENOMEM. */
int iostats_slot(const char *name);
/* Mark (slot, proto) as exported so a scrape lists it even before its
 * first request. Thread-safe. slot < 0 is ignored. */
void iostats_bind(int slot, enum iostats_proto proto);

/* A request arrived: returns its start time (ns) for iostats_done.
 * Call on the owning reactor; slot < 0 or a non-reactor thread: no-op
 * (returns 0 and the done call is ignored too). */
uint64_t iostats_start(int slot, enum iostats_proto proto);
/* The request that iostats_start timed completed. bytes moved, failed:
 * the client got an error. Same thread as iostats_start. */
void iostats_done(int slot, enum iostats_proto proto, enum iostats_op op, uint64_t bytes,
                  bool failed, uint64_t t0);

/* Number of slots handed out so far; iostats_name(slot) its volume name
 * (stable pointer, slots are never freed); iostats_bound(slot, proto). */
size_t iostats_slots(void);
const char *iostats_name(size_t slot);
bool iostats_bound(size_t slot, enum iostats_proto proto);
/* Sum over reactors into *out. Any thread. */
void iostats_read(size_t slot, enum iostats_proto proto, struct iostats_totals *out);

const char *iostats_proto_name(enum iostats_proto p); /* "nbd", "iscsi", "nvme" */
const char *iostats_op_name(enum iostats_op op);      /* "read", ... */

#endif
