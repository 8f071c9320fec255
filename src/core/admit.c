/* Connection admission (see admit.h). */
#include "core/admit.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/reactor.h"

static unsigned handshake_s = ADMIT_DEFAULT_HANDSHAKE_S;
static unsigned max_pending = ADMIT_DEFAULT_MAX_PENDING;
static unsigned max_per_addr = ADMIT_DEFAULT_MAX_PENDING_PER_ADDR;

void admit_configure(unsigned hs, unsigned mp, unsigned mpa)
{
    if (hs)
        __atomic_store_n(&handshake_s, hs, __ATOMIC_RELAXED);
    if (mp)
        __atomic_store_n(&max_pending, mp, __ATOMIC_RELAXED);
    if (mpa)
        __atomic_store_n(&max_per_addr, mpa, __ATOMIC_RELAXED);
}

unsigned admit_handshake_timeout_s(void)
{
    return __atomic_load_n(&handshake_s, __ATOMIC_RELAXED);
}

uint64_t admit_handshake_timeout_ns(void)
{
    return (uint64_t)admit_handshake_timeout_s() * 1000000000ull;
}

void admit_set_max_total(struct admit_gate *g, unsigned max_total)
{
    pthread_mutex_lock(&g->lock);
    g->max_total = max_total;
    pthread_mutex_unlock(&g->lock);
}

/* The address without the port; IPv4-mapped IPv6 counts as IPv4, so one
 * host cannot double its share by using both forms. Unix peers: key[0]=0. */
static void addr_key(const struct sockaddr *sa, socklen_t len, uint8_t key[17])
{
    memset(key, 0, 17);
    if (!sa || len == 0)
        return;
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            key[0] = 4;
            memcpy(key + 1, a->s6_addr + 12, 4);
        } else {
            key[0] = 6;
            memcpy(key + 1, a->s6_addr, 16);
        }
    }
}

static struct admit_addr *addr_find(struct admit_gate *g, const uint8_t key[17])
{
    for (unsigned i = 0; i < g->naddrs; i++)
        if (memcmp(g->addrs[i].key, key, 17) == 0)
            return &g->addrs[i];
    return NULL;
}

static void vlog_limited(struct admit_gate *g, const char *fmt, va_list ap)
{
    uint64_t now = time_now_ns();
    unsigned suppressed = 0;
    bool emit;
    pthread_mutex_lock(&g->lock);
    if (now - g->log_window_ns >= 1000000000ull) {
        suppressed = g->log_suppressed;
        g->log_window_ns = now;
        g->log_lines = 0;
        g->log_suppressed = 0;
    }
    emit = g->log_lines < ADMIT_LOG_BURST;
    if (emit)
        g->log_lines++;
    else
        g->log_suppressed++;
    pthread_mutex_unlock(&g->lock);
    if (suppressed)
        log_warn("%s: %u more connection refusals/drops not logged in the last second", g->name,
                 suppressed);
    if (emit && LOG_WARN <= log_current_level) {
        char line[512];
        vsnprintf(line, sizeof(line), fmt, ap);
        log_warn("%s", line);
    }
}

void admit_log(struct admit_gate *g, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_limited(g, fmt, ap);
    va_end(ap);
}

int admit_try(struct admit_gate *g, const struct sockaddr *peer, socklen_t peerlen,
              const char *peer_name, struct admit_ticket *t)
{
    memset(t, 0, sizeof(*t));
    uint8_t key[17];
    addr_key(peer, peerlen, key);
    unsigned mp = __atomic_load_n(&max_pending, __ATOMIC_RELAXED);
    unsigned mpa = __atomic_load_n(&max_per_addr, __ATOMIC_RELAXED);
    const char *why = NULL;
    unsigned limit = 0;
    pthread_mutex_lock(&g->lock);
    /* Keep a quarter of the total for established sessions. */
    unsigned pending_cap = g->max_total - g->max_total / 4;
    if (pending_cap > mp)
        pending_cap = mp;
    if (pending_cap == 0)
        pending_cap = 1;
    struct admit_addr *a = key[0] ? addr_find(g, key) : NULL;
    if (g->total >= g->max_total) {
        why = "connections in all";
        limit = g->max_total;
    } else if (g->pending >= pending_cap) {
        why = "connections still in their handshake";
        limit = pending_cap;
    } else if (a && a->pending >= mpa) {
        why = "connections in their handshake from this address";
        limit = mpa;
    } else if (key[0] && !a) {
        if (g->naddrs == g->addrs_cap) {
            unsigned cap = g->addrs_cap ? g->addrs_cap * 2 : 16;
            struct admit_addr *n = realloc(g->addrs, cap * sizeof(*n));
            if (!n) {
                why = "memory for connections";
                limit = g->naddrs;
            } else {
                g->addrs = n;
                g->addrs_cap = cap;
            }
        }
        if (!why) {
            a = &g->addrs[g->naddrs++];
            memcpy(a->key, key, 17);
            a->pending = 0;
        }
    }
    if (!why) {
        g->total++;
        g->pending++;
        if (a)
            a->pending++;
        t->gate = g;
        memcpy(t->key, key, 17);
        t->held = true;
        t->pending = true;
    }
    pthread_mutex_unlock(&g->lock);
    if (why) {
        admit_log(g, "%s: %s: connection refused: %u %s is the limit", peer_name, g->name, limit,
                  why);
        return -EBUSY;
    }
    return 0;
}

/* Under g->lock. */
static void unpend(struct admit_gate *g, struct admit_ticket *t)
{
    if (!t->pending)
        return;
    t->pending = false;
    g->pending--;
    if (!t->key[0])
        return;
    struct admit_addr *a = addr_find(g, t->key);
    if (a && --a->pending == 0)
        *a = g->addrs[--g->naddrs];
}

void admit_promote(struct admit_ticket *t)
{
    struct admit_gate *g = t->gate;
    if (!g || !t->pending)
        return;
    pthread_mutex_lock(&g->lock);
    unpend(g, t);
    pthread_mutex_unlock(&g->lock);
}

void admit_release(struct admit_ticket *t)
{
    struct admit_gate *g = t->gate;
    if (!g || !t->held)
        return;
    unsigned suppressed = 0;
    pthread_mutex_lock(&g->lock);
    unpend(g, t);
    t->held = false;
    g->total--;
    /* A flood's last lines were suppressed and no event has logged their
     * count since: say it now that the flood has ended. */
    if (g->log_suppressed && time_now_ns() - g->log_window_ns >= 1000000000ull) {
        suppressed = g->log_suppressed;
        g->log_suppressed = 0;
    }
    pthread_mutex_unlock(&g->lock);
    if (suppressed)
        log_warn("%s: %u more connection refusals/drops not logged in the last second", g->name,
                 suppressed);
}

void admit_counts(struct admit_gate *g, unsigned *total, unsigned *pending)
{
    pthread_mutex_lock(&g->lock);
    if (total)
        *total = g->total;
    if (pending)
        *pending = g->pending;
    pthread_mutex_unlock(&g->lock);
}
