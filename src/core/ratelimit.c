/* Failed-login throttling over a fixed table (see ratelimit.h). */
#include "core/ratelimit.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

uint64_t ratelimit_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Which of two used slots to give up first: one not blocked before one
 * that is (evicting a blocked key would lift its block), then the one seen
 * least recently. */
static bool evict_before(const struct ratelimit_slot *a, const struct ratelimit_slot *b,
                         uint64_t now_ms)
{
    bool ab = a->blocked_until > now_ms, bb = b->blocked_until > now_ms;
    if (ab != bb)
        return !ab;
    return a->last_seen < b->last_seen;
}

/* The slot of key, or NULL; with create, a free slot or the best victim. */
static struct ratelimit_slot *slot_find(struct ratelimit *rl, const char *key, bool create,
                                        uint64_t now_ms)
{
    char k[RATELIMIT_KEY_MAX];
    snprintf(k, sizeof(k), "%s", key);
    struct ratelimit_slot *victim = NULL;
    for (size_t i = 0; i < RATELIMIT_SLOTS; i++) {
        struct ratelimit_slot *s = &rl->slots[i];
        if (s->key[0] && strcmp(s->key, k) == 0)
            return s;
        if (!create)
            continue;
        if (!victim || (!s->key[0] && victim->key[0]) ||
            (s->key[0] && victim->key[0] && evict_before(s, victim, now_ms)))
            victim = s;
    }
    if (!create)
        return NULL;
    memset(victim, 0, sizeof(*victim));
    memcpy(victim->key, k, sizeof(k));
    return victim;
}

bool ratelimit_allowed(struct ratelimit *rl, const char *key, uint64_t now_ms)
{
    pthread_mutex_lock(&rl->lock);
    struct ratelimit_slot *s = slot_find(rl, key, false, now_ms);
    bool ok = !s || s->blocked_until <= now_ms;
    pthread_mutex_unlock(&rl->lock);
    return ok;
}

uint64_t ratelimit_blocked_for(struct ratelimit *rl, const char *key, uint64_t now_ms)
{
    pthread_mutex_lock(&rl->lock);
    struct ratelimit_slot *s = slot_find(rl, key, false, now_ms);
    uint64_t left = s && s->blocked_until > now_ms ? s->blocked_until - now_ms : 0;
    pthread_mutex_unlock(&rl->lock);
    return left;
}

bool ratelimit_failed(struct ratelimit *rl, const char *key, uint64_t now_ms)
{
    pthread_mutex_lock(&rl->lock);
    struct ratelimit_slot *s = slot_find(rl, key, true, now_ms);
    s->last_seen = now_ms;
    if (s->fails == 0 || now_ms - s->window_start > rl->window_ms) {
        s->window_start = now_ms;
        s->fails = 0;
    }
    bool blocked = false;
    if (++s->fails >= rl->fail_max && s->blocked_until <= now_ms) {
        s->blocked_until = now_ms + rl->block_ms;
        s->fails = 0;
        blocked = true;
    }
    pthread_mutex_unlock(&rl->lock);
    return blocked;
}

void ratelimit_succeeded(struct ratelimit *rl, const char *key)
{
    pthread_mutex_lock(&rl->lock);
    struct ratelimit_slot *s = slot_find(rl, key, false, 0);
    if (s && s->blocked_until == 0)
        memset(s, 0, sizeof(*s));
    else if (s)
        s->fails = 0;
    pthread_mutex_unlock(&rl->lock);
}

void ratelimit_forgive(struct ratelimit *rl, const char *key)
{
    pthread_mutex_lock(&rl->lock);
    struct ratelimit_slot *s = slot_find(rl, key, false, 0);
    if (s)
        memset(s, 0, sizeof(*s));
    pthread_mutex_unlock(&rl->lock);
}

void ratelimit_reset(struct ratelimit *rl)
{
    pthread_mutex_lock(&rl->lock);
    memset(rl->slots, 0, sizeof(rl->slots));
    pthread_mutex_unlock(&rl->lock);
}
