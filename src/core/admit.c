/* Connection admission (see admit.h). */
#include "core/admit.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The address without the port, an IPv6 one cut to its /64 prefix;
 * IPv4-mapped IPv6 counts as IPv4, so one host cannot double its share by
 * using both forms. Unix peers: key[0]=0. */
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
            /* the /64 prefix: a host usually owns all of it */
            key[0] = 6;
            memcpy(key + 1, a->s6_addr, 8);
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

/* Under g->lock: the per-address entry for key, made if absent. NULL for
 * Unix peers (no per-address count) or when memory runs out (*oom). */
static struct admit_addr *addr_get(struct admit_gate *g, const uint8_t key[17], bool *oom)
{
    *oom = false;
    if (!key[0])
        return NULL;
    struct admit_addr *a = addr_find(g, key);
    if (a)
        return a;
    if (g->naddrs == g->addrs_cap) {
        unsigned cap = g->addrs_cap ? g->addrs_cap * 2 : 16;
        struct admit_addr *n = realloc(g->addrs, cap * sizeof(*n));
        if (!n) {
            *oom = true;
            return NULL;
        }
        g->addrs = n;
        g->addrs_cap = cap;
    }
    a = &g->addrs[g->naddrs++];
    memcpy(a->key, key, 17);
    a->pending = 0;
    return a;
}

static int pend_index(struct admit_gate *g, uint64_t id)
{
    for (unsigned i = 0; i < g->npend; i++)
        if (g->pend[i].id == id)
            return (int)i;
    return -1;
}

/* Under g->lock: forget pending entry i (keeping the list oldest first)
 * and its place in the pending counts. */
static void pend_remove(struct admit_gate *g, unsigned i)
{
    struct admit_pend *p = &g->pend[i];
    if (p->fd >= 0)
        close(p->fd);
    g->pending--;
    struct admit_addr *a = p->key[0] ? addr_find(g, p->key) : NULL;
    if (a && --a->pending == 0)
        *a = g->addrs[--g->naddrs];
    memmove(p, p + 1, (g->npend - i - 1) * sizeof(*p));
    g->npend--;
}

/* Under g->lock: the oldest pending connection of the address holding the
 * most pending ones, among those the gate can shut down; -1 if none. */
static int pick_victim(struct admit_gate *g)
{
    int best = -1;
    unsigned best_n = 0;
    for (unsigned i = 0; i < g->npend; i++) {
        const struct admit_pend *p = &g->pend[i];
        struct admit_addr *a = p->fd >= 0 && p->key[0] ? addr_find(g, p->key) : NULL;
        if (a && a->pending > best_n) {
            best = (int)i;
            best_n = a->pending;
        }
    }
    return best;
}

/* Under g->lock: shut down and forget the pending connection chosen by
 * pick_victim, out of the total too; its name into victim. false if there
 * is none. */
static bool evict_one(struct admit_gate *g, char *victim, size_t len)
{
    int i = pick_victim(g);
    if (i < 0)
        return false;
    struct admit_pend *p = &g->pend[i];
    snprintf(victim, len, "%s", p->peer);
    /* The owner's reactor/thread sees end-of-file and closes as usual;
     * its release then finds no entry: the counts went with the eviction. */
    shutdown(p->fd, SHUT_RDWR);
    pend_remove(g, (unsigned)i);
    g->total--;
    g->evictions++;
    return true;
}

static unsigned pending_cap_of(const struct admit_gate *g, unsigned mp)
{
    /* Keep a quarter of the total for established sessions. */
    unsigned cap = g->max_total - g->max_total / 4;
    if (cap > mp)
        cap = mp;
    return cap ? cap : 1;
}

/* Under g->lock: the refusal reason for a newcomer with key, after
 * evicting an older pending connection when only the shared room is
 * short. NULL: the newcomer may be counted (*a its address entry). */
static const char *admit_check(struct admit_gate *g, const uint8_t key[17], unsigned *limit,
                               struct admit_addr **a, char *victim, size_t vlen)
{
    unsigned mpa = __atomic_load_n(&max_per_addr, __ATOMIC_RELAXED);
    unsigned pending_cap = pending_cap_of(g, __atomic_load_n(&max_pending, __ATOMIC_RELAXED));
    struct admit_addr *mine = key[0] ? addr_find(g, key) : NULL;
    if (mine && mine->pending >= mpa) {
        *limit = mpa;
        return "connections in their handshake from this address";
    }
    if (g->total >= g->max_total || g->pending >= pending_cap) {
        bool all = g->total >= g->max_total;
        *limit = all ? g->max_total : pending_cap;
        if (!evict_one(g, victim, vlen))
            return all ? "connections in all" : "connections still in their handshake";
    }
    bool oom;
    *a = addr_get(g, key, &oom);
    if (oom) {
        *limit = g->naddrs;
        return "memory for connections";
    }
    if (g->npend == g->pend_cap) {
        unsigned cap = g->pend_cap ? g->pend_cap * 2 : 16;
        struct admit_pend *n = realloc(g->pend, cap * sizeof(*n));
        if (!n) {
            *limit = g->npend;
            return "memory for connections";
        }
        g->pend = n;
        g->pend_cap = cap;
    }
    return NULL;
}

int admit_try(struct admit_gate *g, int fd, const struct sockaddr *peer, socklen_t peerlen,
              const char *peer_name, struct admit_ticket *t)
{
    memset(t, 0, sizeof(*t));
    uint8_t key[17];
    addr_key(peer, peerlen, key);
    /* Duplicated outside the lock; a failed dup only makes this
     * connection impossible to evict. */
    int dfd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    char victim[64] = "";
    unsigned limit = 0;
    struct admit_addr *a = NULL;
    pthread_mutex_lock(&g->lock);
    const char *why = admit_check(g, key, &limit, &a, victim, sizeof(victim));
    if (!why) {
        g->total++;
        g->pending++;
        if (a)
            a->pending++;
        struct admit_pend *p = &g->pend[g->npend++];
        p->id = ++g->next_id;
        memcpy(p->key, key, 17);
        p->fd = dfd;
        snprintf(p->peer, sizeof(p->peer), "%s", peer_name);
        dfd = -1;
        t->gate = g;
        t->id = p->id;
        memcpy(t->key, key, 17);
        t->held = true;
        t->pending = true;
    }
    pthread_mutex_unlock(&g->lock);
    if (dfd >= 0)
        close(dfd);
    if (victim[0])
        admit_log(g,
                  "%s: %s: pending connection evicted to admit %s: %u connections still in "
                  "their handshake is the limit",
                  victim, g->name, peer_name, limit);
    if (why) {
        admit_log(g, "%s: %s: connection refused: %u %s is the limit", peer_name, g->name, limit,
                  why);
        return -EBUSY;
    }
    return 0;
}

/* Under g->lock. An evicted ticket has no entry left: its counts went
 * with the eviction. */
static void unpend(struct admit_gate *g, struct admit_ticket *t)
{
    if (!t->pending)
        return;
    t->pending = false;
    int i = pend_index(g, t->id);
    if (i >= 0)
        pend_remove(g, (unsigned)i);
    else
        t->evicted = true;
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
    if (!t->evicted)
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

bool admit_is_pending(struct admit_ticket *t)
{
    struct admit_gate *g = t->gate;
    if (!g || !t->pending)
        return false;
    pthread_mutex_lock(&g->lock);
    bool p = pend_index(g, t->id) >= 0;
    pthread_mutex_unlock(&g->lock);
    return p;
}
