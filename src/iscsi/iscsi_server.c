/*
 * Listening sockets for iSCSI portals and the transport-wide settings
 * (queue depth, NOP-In ping interval). Accepted sockets are spread over
 * the reactors; the iSCSI connection state is created on the owner.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/admit.h"
#include "core/listener.h"
#include "core/log.h"
#include "core/reactor.h"
#include "iscsi/iscsi_internal.h"

int iscsi_conn_init(struct conn *c, uint16_t portal_tag, const struct sockaddr *local,
                    socklen_t locallen);
void iscsi_sessions_close_all(void);

struct portal {
    struct portal *next;
    char addr[128];
    uint16_t tag; /* atomic: iscsi_server_retag changes it while accepts run */
    int port;
    struct listener *l;
};

struct admit_gate iscsi_gate = ADMIT_GATE_INIT("iscsi", 1024);

void iscsi_server_set_max_connections(unsigned n)
{
    admit_set_max_total(&iscsi_gate, n);
}

static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct portal *portals;
static unsigned queue_depth = 128;
static uint64_t nop_interval_ns = 30ull * 1000000000ull;
static uint64_t nop_timeout_ns = 30ull * 1000000000ull;

void iscsi_server_set_queue_depth(unsigned depth)
{
    if (depth < 1)
        depth = 1;
    if (depth > 4096)
        depth = 4096;
    __atomic_store_n(&queue_depth, depth, __ATOMIC_RELAXED);
}

unsigned iscsi_server_queue_depth(void)
{
    return __atomic_load_n(&queue_depth, __ATOMIC_RELAXED);
}

void iscsi_server_set_nop(unsigned interval_s, unsigned timeout_s)
{
    if (interval_s)
        __atomic_store_n(&nop_interval_ns, interval_s * 1000000000ull, __ATOMIC_RELAXED);
    if (timeout_s)
        __atomic_store_n(&nop_timeout_ns, timeout_s * 1000000000ull, __ATOMIC_RELAXED);
}

uint64_t iscsi_server_nop_interval_ns(void)
{
    return __atomic_load_n(&nop_interval_ns, __ATOMIC_RELAXED);
}

uint64_t iscsi_server_nop_timeout_ns(void)
{
    return __atomic_load_n(&nop_timeout_ns, __ATOMIC_RELAXED);
}

struct accept_arg {
    struct admit_ticket ticket;
    uint16_t tag;
    struct sockaddr_storage local;
    socklen_t locallen;
};

static int adopt_init(struct conn *c, void *arg)
{
    struct accept_arg *a = arg;
    int rc = iscsi_conn_init(c, a->tag, (const struct sockaddr *)&a->local, a->locallen);
    if (rc == 0) {
        struct iscsi_conn *ic = c->proto;
        ic->ticket = a->ticket; /* released by the connection's on_free */
    } else {
        admit_release(&a->ticket);
    }
    free(a);
    return rc;
}

static atomic_bool draining; /* shutdown: refuse new connections */

static void on_accept(int fd, const struct sockaddr *peer, socklen_t peerlen,
                      const struct sockaddr *local, socklen_t locallen, void *arg)
{
    struct portal *p = arg;
    if (atomic_load(&draining)) {
        close(fd);
        return;
    }
    struct accept_arg *a = calloc(1, sizeof(*a));
    if (!a) {
        close(fd);
        return;
    }
    char name[80];
    format_sockaddr(peer, peerlen, name, sizeof(name));
    if (admit_try(&iscsi_gate, fd, peer, peerlen, name, &a->ticket) < 0) {
        free(a);
        close(fd);
        return;
    }
    a->tag = __atomic_load_n(&p->tag, __ATOMIC_RELAXED);
    if (local && locallen <= sizeof(a->local)) {
        memcpy(&a->local, local, locallen);
        a->locallen = locallen;
    }
    if (conn_adopt(reactor_next(), fd, peer, peerlen, &iscsi_conn_ops, adopt_init, a) < 0) {
        log_warn("iscsi: could not adopt a connection on %s", p->addr);
        admit_release(&a->ticket);
        free(a);
    }
}

int iscsi_server_listen(const char *addr_port, uint16_t portal_tag)
{
    struct portal *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    if (strlen(addr_port) >= sizeof(p->addr)) {
        free(p);
        return -EINVAL;
    }
    memcpy(p->addr, addr_port, strlen(addr_port) + 1);
    p->tag = portal_tag;
    pthread_mutex_lock(&srv_lock);
    for (struct portal *q = portals; q; q = q->next) {
        if (strcmp(q->addr, addr_port) == 0) {
            pthread_mutex_unlock(&srv_lock);
            free(p);
            return -EEXIST;
        }
    }
    /* SO_REUSEPORT: a wildcard portal and address portals on the same port
     * listen side by side (the kernel picks the most specific). */
    int rc = listener_open_tcp_opts(addr_port, LISTENER_REUSEPORT, on_accept, p, &p->l);
    if (rc < 0) {
        pthread_mutex_unlock(&srv_lock);
        free(p);
        return rc;
    }
    p->port = listener_port(p->l);
    p->next = portals;
    portals = p;
    pthread_mutex_unlock(&srv_lock);
    /* The bound address: for ":0" the port the kernel chose. */
    char bound[LISTENER_ADDR_MAX];
    if (listener_bound_addr(p->l, bound, sizeof(bound)) < 0)
        snprintf(bound, sizeof(bound), "%s", addr_port);
    log_info("iscsi: listening on %s (portal group tag %u)", bound, portal_tag);
    return 0;
}

int iscsi_server_unlisten(const char *addr_port)
{
    pthread_mutex_lock(&srv_lock);
    struct portal **pp = &portals;
    while (*pp && strcmp((*pp)->addr, addr_port) != 0)
        pp = &(*pp)->next;
    struct portal *p = *pp;
    if (p)
        *pp = p->next;
    pthread_mutex_unlock(&srv_lock);
    if (!p)
        return -ENOENT;
    listener_close(p->l);
    free(p);
    log_info("iscsi: stopped listening on %s", addr_port);
    return 0;
}

int iscsi_server_retag(const char *addr_port, uint16_t portal_tag)
{
    pthread_mutex_lock(&srv_lock);
    struct portal *p = portals;
    while (p && strcmp(p->addr, addr_port) != 0)
        p = p->next;
    uint16_t old = p ? p->tag : 0;
    if (p)
        __atomic_store_n(&p->tag, portal_tag, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&srv_lock);
    if (!p)
        return -ENOENT;
    if (old != portal_tag)
        log_info("iscsi: %s now serves portal group tag %u (was %u)", addr_port, portal_tag, old);
    return 0;
}

/* The port of "ADDR:PORT" / "[ADDR]:PORT", or -1. */
static int addr_port_port(const char *addr_port)
{
    const char *colon = strrchr(addr_port, ':');
    if (!colon)
        return -1;
    char *end;
    long v = strtol(colon + 1, &end, 10);
    return *end == '\0' && v >= 0 && v <= 65535 ? (int)v : -1;
}

int iscsi_server_probe(const char *addr_port)
{
    int port = addr_port_port(addr_port);
    bool ours = false, same_port = false;
    pthread_mutex_lock(&srv_lock);
    for (struct portal *q = portals; q; q = q->next) {
        ours |= strcmp(q->addr, addr_port) == 0;
        same_port |= q->port == port;
    }
    pthread_mutex_unlock(&srv_lock);
    if (ours)
        return 0;
    int rc = listener_probe_tcp(addr_port, 0);
    /* In use, maybe only by our own overlapping listeners on this port (a
     * wildcard and an address): those share with SO_REUSEPORT, foreign
     * sockets without it still refuse. */
    if (rc == -EADDRINUSE && same_port)
        rc = listener_probe_tcp(addr_port, LISTENER_REUSEPORT);
    return rc;
}

int iscsi_server_start(void)
{
    /* BLOCKD_ISCSI_NOP="INTERVAL,TIMEOUT" (seconds): shorter NOP-In pings,
     * for tests of the idle-initiator path. */
    const char *nop = getenv("BLOCKD_ISCSI_NOP");
    if (nop) {
        char *end;
        unsigned long iv = strtoul(nop, &end, 10), to = 0;
        if (*end == ',')
            to = strtoul(end + 1, &end, 10);
        if (iv > 0 && iv < 86400 && to < 86400 && *end == '\0') {
            iscsi_server_set_nop((unsigned)iv, (unsigned)to);
            log_info("iscsi: NOP-In after %lu s idle, timeout %lu s", iv, to ? to : iv);
        }
    }
    return 0;
}

unsigned iscsi_server_drain(unsigned timeout_ms)
{
    atomic_store(&draining, true);
    iscsi_sessions_drain_all();
    uint64_t end = time_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (iscsi_sessions_count() > 0 && time_now_ns() < end)
        usleep(5000);
    unsigned left = iscsi_sessions_count();
    if (left) {
        log_warn("iscsi: %u sessions still busy after %u ms of shutdown, closing them", left,
                 timeout_ms);
        iscsi_sessions_close_all();
    }
    return left;
}

void iscsi_server_stop(void)
{
    pthread_mutex_lock(&srv_lock);
    struct portal *list = portals;
    portals = NULL;
    pthread_mutex_unlock(&srv_lock);
    while (list) {
        struct portal *p = list;
        list = p->next;
        listener_close(p->l);
        free(p);
    }
    iscsi_sessions_close_all();
}
