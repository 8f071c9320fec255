/*
 * Failed-login throttling, shared by every front door that checks a secret
 * (API keys and passwords on the WebSocket API, CHAP on iSCSI).
 *
 * A limiter counts failures per key (an address, "iqn:<initiator name>",
 * …) in a fixed table: fail_max failures within window_ms block that key
 * for block_ms. While a key is blocked every attempt is refused, even a
 * correct one, so an attacker learns nothing from the answers. The table
 * has RATELIMIT_SLOTS entries; when it is full the least recently seen
 * key that is not blocked is forgotten (a flood of new keys cannot lift a
 * block), and nothing is ever allocated.
 *
 * Threads: every function is thread-safe; the lock is held only for a scan
 * of the table (no I/O, no allocation), so a reactor may call them.
 */
#ifndef BLOCKD_CORE_RATELIMIT_H
#define BLOCKD_CORE_RATELIMIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define RATELIMIT_SLOTS 256
#define RATELIMIT_KEY_MAX 240 /* longer keys are cut (an IQN is at most 223 bytes) */

struct ratelimit_slot {
    char key[RATELIMIT_KEY_MAX];
    unsigned fails;
    uint64_t window_start;
    uint64_t blocked_until;
    uint64_t last_seen;
};

struct ratelimit {
    pthread_mutex_t lock;
    unsigned fail_max;
    uint64_t window_ms;
    uint64_t block_ms;
    struct ratelimit_slot slots[RATELIMIT_SLOTS];
};

/* Static initializer: static struct ratelimit rl = RATELIMIT_INIT(5, 10000, 30000); */
#define RATELIMIT_INIT(max, window, block)                                                         \
    {                                                                                              \
        .lock = PTHREAD_MUTEX_INITIALIZER, .fail_max = (max), .window_ms = (window),               \
        .block_ms = (block)                                                                        \
    }

/* A monotonic clock in milliseconds (the now_ms the functions below take;
 * injected so that tests can drive time). */
uint64_t ratelimit_now_ms(void);

/* false while key is blocked. */
bool ratelimit_allowed(struct ratelimit *rl, const char *key, uint64_t now_ms);
/* Record a failure; true if key just became blocked (log it once). */
bool ratelimit_failed(struct ratelimit *rl, const char *key, uint64_t now_ms);
/* Forget key's failures (a block in force stays). */
void ratelimit_succeeded(struct ratelimit *rl, const char *key);
/* Forget key entirely, a block included: for a caller that counts an
 * attempt as failed before checking it (so that concurrent attempts cannot
 * all pass ratelimit_allowed) and then finds it right. */
void ratelimit_forgive(struct ratelimit *rl, const char *key);
/* Milliseconds key stays blocked from now_ms (0 when not blocked). */
uint64_t ratelimit_blocked_for(struct ratelimit *rl, const char *key, uint64_t now_ms);
/* Empty the table (tests). */
void ratelimit_reset(struct ratelimit *rl);

#endif
