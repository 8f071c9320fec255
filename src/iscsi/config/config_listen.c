/*
 * Portal listeners: which "ip:port" sockets the iSCSI transport listens on,
 * derived from the portal table, iscsi.global.listen_port and the
 * daemon's --iscsi-listen address; the validation that a new address can
 * be bound before it is committed; and the published portal addresses that
 * SendTargets reports.
 *
 * Every portal IP listens at listen_port, live: a committed change to
 * iscsi.portal or listen_port builds a new struct iscsi_portals (the
 * wanted sockets and the addresses SendTargets reports) under the DB lock
 * (icfg_portals_build), published in the configuration generation; when
 * conf_apply sees the generation's portals change, the sockets are opened,
 * retagged or closed (icfg_listen_apply), without the DB lock, because
 * closing a listener waits for reactor 0 and a reactor may be waiting for
 * the DB lock (persistent-reservation save). New sockets open before old
 * ones close, so a port change leaves no moment without a listener, and an
 * established connection never depends on its listening socket.
 *
 * --iscsi-listen ADDR:PORT: at the first start of the process PORT becomes
 * listen_port (stored, so rows and clients see the port that is served;
 * a later iscsi.global.update moves it live until the next daemon start),
 * and ADDR is served at listen_port even when no portal lists it. While no
 * portal lists ADDR exactly, its connections carry portal tag 0, which
 * matches every target group (the single-address setup needs no portal);
 * once a portal lists ADDR, the same socket serves that portal's tag.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control/db.h"
#include "core/log.h"
#include "core/util.h"
#include "iscsi/config/config_internal.h"
#include "iscsi/iscsi_runtime.h"

#define KEY_PORT "iscsi.global.listen_port"

/* ---- --iscsi-listen (DB lock) ---- */
static char ovr_ip[INET6_ADDRSTRLEN];
static bool ovr_set;
static bool ovr_port_applied; /* once per process: a service restart keeps API changes */
static int ovr_rc;            /* listen_lock: result of the last bind of the override address */

/* ---- applied set (listen_lock orders concurrent appliers) ---- */
static pthread_mutex_t listen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct iscsi_listen_addr *listeners;
static size_t listeners_n;

static void format_addr(char *buf, size_t len, const char *ip, int port)
{
    snprintf(buf, len, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
}

int icfg_listen_set_override(const char *addr_port)
{
    ovr_set = false;
    if (!addr_port)
        return 0;
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_host_port(addr_port, &ss, &len) < 0) {
        log_error("iscsi: --iscsi-listen '%s' is not ADDR:PORT", addr_port);
        return -EINVAL;
    }
    const void *a = ss.ss_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)&ss)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr;
    inet_ntop(ss.ss_family, a, ovr_ip, sizeof(ovr_ip));
    int port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                             : ((struct sockaddr_in6 *)&ss)->sin6_port);
    ovr_set = true;
    if (ovr_port_applied)
        return 0;
    if (port == 0) {
        /* ":0": let the kernel pick a free port once; it is then stored
         * like any other (tests start daemons this way). */
        char probe[80];
        format_addr(probe, sizeof(probe), ovr_ip, 0);
        int fd = -1;
        struct sockaddr_storage b;
        socklen_t bl = sizeof(b);
        fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0 ||
            getsockname(fd, (struct sockaddr *)&b, &bl) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            log_error("iscsi: cannot pick a port on %s: %s", probe, strerror(e));
            return -e;
        }
        close(fd);
        port = ntohs(b.ss_family == AF_INET ? ((struct sockaddr_in *)&b)->sin_port
                                            : ((struct sockaddr_in6 *)&b)->sin6_port);
    }
    int old = icfg_global_listen_port();
    if (old != port) {
        char buf[16];
        snprintf(buf, sizeof(buf), "%d", port);
        /* the first start of the process: the runtime is not started, so
         * the commit publishes nothing yet (iscsi_config_start applies) */
        struct cfg_tx tx;
        int rc = cfg_tx_begin(&tx);
        if (rc == 0 && (rc = db_setting_set(KEY_PORT, buf)) == 0) {
            cfg_tx_changed(&tx, CFG_ISCSI_GLOBAL, CFG_ISCSI_GLOBAL_LISTEN, CFG_UPDATED);
            rc = cfg_tx_commit(&tx);
        } else if (rc == 0) {
            cfg_tx_abort(&tx);
        }
        if (rc < 0) {
            log_error("iscsi: cannot store listen_port %d: %s", port, strerror(-rc));
            return rc;
        }
        log_info("iscsi: --iscsi-listen %s sets iscsi.global.listen_port to %d (was %d)", addr_port,
                 port, old);
    }
    ovr_port_applied = true;
    return 0;
}

static int want_add(struct iscsi_listen_addr **want, size_t *n, const char *ip, int port,
                    uint16_t tag, bool override)
{
    struct iscsi_listen_addr *w = realloc(*want, (*n + 1) * sizeof(*w));
    if (!w)
        return -ENOMEM;
    *want = w;
    w = &w[(*n)++];
    memset(w, 0, sizeof(*w));
    format_addr(w->addr, sizeof(w->addr), ip, port);
    w->tag = tag;
    w->override = override;
    return 0;
}

/* The portal address of (ip, tag) at port, for SendTargets. */
static int addr_add(struct iscsi_portal_addr **pa, size_t *npa, const char *ip, uint16_t tag,
                    int port)
{
    struct iscsi_portal_addr *p = realloc(*pa, (*npa + 1) * sizeof(*p));
    if (!p)
        return -ENOMEM;
    *pa = p;
    p = &p[(*npa)++];
    memset(p, 0, sizeof(*p));
    p->tag = tag;
    p->port = port;
    snprintf(p->ip, sizeof(p->ip), "%s", ip);
    p->family = strchr(ip, ':') ? AF_INET6 : AF_INET;
    p->wildcard = strcmp(ip, "0.0.0.0") == 0 || strcmp(ip, "::") == 0;
    return 0;
}

void icfg_portals_unref(struct iscsi_portals *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    free(p->addrs);
    free(p->listen);
    free(p);
}

int icfg_portals_build(struct iscsi_portals **out)
{
    *out = NULL;
    if (!icfg_runtime_started())
        return 0;
    struct iscsi_portals *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    atomic_init(&p->refs, 1);
    int port = icfg_global_listen_port();
    bool ovr_listed = false;
    struct icfg_portal_ip_rec *ips;
    size_t n;
    if (icfg_read_portal_ips(false, &ips, &n) < 0) {
        free(p);
        return -EIO;
    }
    for (size_t i = 0; i < n; i++) {
        if (want_add(&p->listen, &p->n_listen, ips[i].ip, port, ips[i].tag, false) < 0 ||
            addr_add(&p->addrs, &p->n_addrs, ips[i].ip, ips[i].tag, port) < 0)
            break;
        if (ovr_set && strcmp(ips[i].ip, ovr_ip) == 0) {
            ovr_listed = true;
            p->listen[p->n_listen - 1].override = true;
        }
    }
    free(ips);
    if (ovr_set && !ovr_listed)
        want_add(&p->listen, &p->n_listen, ovr_ip, port, 0, true);
    *out = p;
    return 0;
}

void icfg_listen_stop(void)
{
    ovr_set = false;
}

static struct iscsi_listen_addr *applied_find(const char *addr)
{
    for (size_t i = 0; i < listeners_n; i++)
        if (strcmp(listeners[i].addr, addr) == 0)
            return &listeners[i];
    return NULL;
}

void icfg_listen_apply(const struct iscsi_portals *p)
{
    const struct iscsi_listen_addr *want = p ? p->listen : NULL;
    size_t nwant = p ? p->n_listen : 0;
    pthread_mutex_lock(&listen_lock);
    /* Open (or retag) what is wanted first, then close the rest: a moved
     * port never leaves a moment without a listener. */
    struct iscsi_listen_addr *next = calloc(nwant ? nwant : 1, sizeof(*next));
    size_t nnext = 0;
    for (size_t k = 0; next && k < nwant; k++) {
        struct iscsi_listen_addr *have = applied_find(want[k].addr);
        int rc = 0;
        if (have) {
            if (have->tag != want[k].tag)
                rc = iscsi_server_retag(want[k].addr, want[k].tag);
        } else {
            rc = iscsi_server_listen(want[k].addr, want[k].tag);
            /* logged by the server; retried at the next portal change */
        }
        if (want[k].override)
            ovr_rc = rc;
        if (rc == 0)
            next[nnext++] = want[k];
    }
    if (!next) {
        log_error("iscsi: out of memory applying portal listeners");
        pthread_mutex_unlock(&listen_lock);
        return;
    }
    for (size_t i = 0; i < listeners_n; i++) {
        bool kept = false;
        for (size_t k = 0; k < nnext && !kept; k++)
            kept = strcmp(next[k].addr, listeners[i].addr) == 0;
        if (!kept)
            iscsi_server_unlisten(listeners[i].addr);
    }
    free(listeners);
    if (nnext == 0) {
        free(next);
        next = NULL;
    }
    listeners = next;
    listeners_n = nnext;
    pthread_mutex_unlock(&listen_lock);
}

int icfg_listen_override_status(void)
{
    pthread_mutex_lock(&listen_lock);
    int rc = ovr_rc;
    pthread_mutex_unlock(&listen_lock);
    return rc;
}

/* One failed probe as a validation error on field. */
static void probe_error(struct api_call *call, const char *field, const char *addr, int rc)
{
    const char *why = rc == -EADDRINUSE      ? "the address is already in use"
                      : rc == -EADDRNOTAVAIL ? "it is not an address of this system"
                      : rc == -EACCES        ? "permission denied"
                                             : strerror(-rc);
    log_warn("iscsi: %s cannot be bound (%s): refused", addr, strerror(-rc));
    api_verr(call, field, -rc, "Cannot listen on %s: %s", addr, why);
}

int icfg_listen_check(struct api_call *call, const char *field, const char *ip, int port)
{
    char addr[80];
    format_addr(addr, sizeof(addr), ip, port);
    int rc = iscsi_server_probe(addr);
    if (rc < 0) {
        probe_error(call, field, addr, rc);
        return -1;
    }
    return 0;
}

int icfg_listen_check_port(struct api_call *call, const char *field, int port)
{
    struct icfg_portal_ip_rec *ips;
    size_t n;
    if (icfg_read_portal_ips(true, &ips, &n) < 0)
        return -1;
    int bad = 0;
    bool ovr_listed = false;
    for (size_t i = 0; i < n; i++) {
        ovr_listed |= ovr_set && strcmp(ips[i].ip, ovr_ip) == 0;
        if (icfg_listen_check(call, field, ips[i].ip, port) < 0)
            bad = -1;
    }
    free(ips);
    if (ovr_set && !ovr_listed && icfg_listen_check(call, field, ovr_ip, port) < 0)
        bad = -1;
    return bad;
}
