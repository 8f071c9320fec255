/*
 * The NVMe/TCP listeners: one per port of the published part (each
 * enabled nvmet.port, its id as the accept callback's argument, and the
 * discovery-only port at discovery_listen, argument 0), following the
 * part after every publication (the subscriber's applied hook, no DB
 * lock: closing a listener waits for reactor 0). New sockets open before
 * old ones close; an unchanged port keeps its socket; an established
 * connection never depends on its listener.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/listener.h"
#include "core/log.h"
#include "nvme/config/nvmet_internal.h"
#include "nvme/nvme_target.h"
#include "nvme/nvme_view.h"

struct open_port {
    int64_t id;
    char addr[96];  /* "[traddr]:port" (traddr < 64 bytes), as configured */
    char bound[96]; /* what the kernel bound (the port chosen for 0), or addr */
    struct listener *l;
};

static pthread_mutex_t listen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct open_port *open_ports;
static size_t n_open;

static void port_addr(const struct nvme_port *p, char *buf, size_t len)
{
    if (!*p->traddr)
        snprintf(buf, len, ":%u", p->trsvcid);
    else if (strchr(p->traddr, ':'))
        snprintf(buf, len, "[%.63s]:%u", p->traddr, p->trsvcid);
    else
        snprintf(buf, len, "%.63s:%u", p->traddr, p->trsvcid);
}

static struct open_port *find_open(int64_t id, const char *addr)
{
    for (size_t i = 0; i < n_open; i++)
        if (open_ports[i].id == id && strcmp(open_ports[i].addr, addr) == 0)
            return &open_ports[i];
    return NULL;
}

/* Open the listener of p into o. 0 or -errno (logged by the listener). */
static int port_open(const struct nvme_port *p, struct open_port *o)
{
    o->id = p->discovery ? 0 : p->id;
    port_addr(p, o->addr, sizeof(o->addr));
    /* the discovery port is not shared with another process (SO_REUSEPORT would let a
     * second daemon on the same address take half its connections) */
    int rc = listener_open_tcp_opts(o->addr, p->discovery ? 0 : LISTENER_REUSEPORT,
                                    nvme_target_accept, (void *)(intptr_t)o->id, &o->l);
    if (rc < 0) {
        log_error("nvmet: cannot listen on %s (%s): %s", o->addr,
                  p->discovery ? "discovery" : "port", strerror(-rc));
        return rc;
    }
    if (listener_bound_addr(o->l, o->bound, sizeof(o->bound)) < 0)
        snprintf(o->bound, sizeof(o->bound), "%s", o->addr);
    if (p->discovery)
        log_info("nvmet: discovery listening on %s", o->bound);
    else
        log_info("nvmet: listening on %s (port %u, id %lld)", o->bound, p->index, (long long)p->id);
    return 0;
}

/* Close the listeners still in open_ports (those not moved to the next
 * set). Called with listen_lock held. */
static void close_left(void)
{
    for (size_t i = 0; i < n_open; i++)
        if (open_ports[i].l) {
            listener_close(open_ports[i].l);
            log_info("nvmet: stopped listening on %s", open_ports[i].bound);
        }
}

void nvmet_listen_apply(void)
{
    struct nvme_conf *c = nvmet_running() ? nvme_conf_current() : NULL;
    size_t want = c ? c->nports : 0, n = 0;
    struct open_port *next = calloc(want + 1, sizeof(*next));
    if (!next) {
        nvme_conf_unref(c);
        log_error("nvmet: out of memory: listeners unchanged");
        return;
    }
    pthread_mutex_lock(&listen_lock);
    for (size_t i = 0; i < want; i++) {
        const struct nvme_port *p = &c->ports[i];
        char addr[sizeof(next->addr)];
        port_addr(p, addr, sizeof(addr));
        struct open_port *o = find_open(p->discovery ? 0 : p->id, addr);
        if (o) {
            next[n++] = *o;
            o->l = NULL; /* kept: moved to next */
        } else if (port_open(p, &next[n]) == 0) {
            n++;
        }
    }
    close_left();
    free(open_ports);
    open_ports = next;
    n_open = n;
    pthread_mutex_unlock(&listen_lock);
    nvme_conf_unref(c);
}

void nvmet_listen_close_all(void)
{
    pthread_mutex_lock(&listen_lock);
    close_left();
    free(open_ports);
    open_ports = NULL;
    n_open = 0;
    pthread_mutex_unlock(&listen_lock);
}
