/*
 * The transport's reads of the published configuration (iscsi_runtime.h):
 * target lookups, SendTargets' lists, discovery credentials and portal
 * addresses, all from the iSCSI part of the current configuration
 * generation (control/confgen.h). A part is immutable: a reader holds a
 * reference for as long as it looks, and takes a view's own reference
 * before it lets the part go.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "control/confgen.h"
#include "iscsi/iscsi_runtime.h"

static struct iscsi_conf *conf_get(void)
{
    return (struct iscsi_conf *)conf_part_get(CONF_ISCSI);
}

static void conf_put(struct iscsi_conf *c)
{
    if (c)
        conf_part_unref(&c->part);
}

size_t iscsi_conf_lower_bound(const struct iscsi_conf *c, const char *iqn)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcasecmp(c->byiqn[mid]->iqn, iqn) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

struct iscsi_target_view *iscsi_runtime_find_target(const char *iqn)
{
    struct iscsi_conf *c = conf_get();
    struct iscsi_target_view *v = NULL;
    size_t lo = c ? iscsi_conf_lower_bound(c, iqn) : 0;
    if (c && lo < c->n && strcasecmp(c->byiqn[lo]->iqn, iqn) == 0) {
        v = c->byiqn[lo];
        iscsi_target_view_ref(v);
    }
    conf_put(c);
    return v;
}

int iscsi_runtime_list_targets(struct iscsi_target_view ***out)
{
    struct iscsi_conf *c = conf_get();
    size_t n = c ? c->n : 0;
    struct iscsi_target_view **arr = malloc((n ? n : 1) * sizeof(*arr));
    if (!arr) {
        conf_put(c);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        arr[i] = c->byiqn[i];
        iscsi_target_view_ref(arr[i]);
    }
    conf_put(c);
    *out = arr;
    return (int)n;
}

int iscsi_runtime_discovery_auth(struct iscsi_auth_policy *out)
{
    memset(out, 0, sizeof(*out));
    struct iscsi_conf *c = conf_get();
    const struct iscsi_disc_auth *d = c ? c->disc : NULL;
    int rc = 0;
    if (d && d->n_creds > 0) {
        struct iscsi_chap_cred *creds = malloc(d->n_creds * sizeof(*creds));
        if (!creds) {
            rc = -ENOMEM;
        } else {
            memcpy(creds, d->creds, d->n_creds * sizeof(*creds));
            out->creds = creds;
            out->n_creds = d->n_creds;
            out->method = d->method;
        }
    }
    conf_put(c);
    return rc;
}

void iscsi_auth_policy_clear(struct iscsi_auth_policy *p)
{
    if (p->creds) {
        explicit_bzero((void *)p->creds, p->n_creds * sizeof(*p->creds));
        free((void *)p->creds);
    }
    memset(p, 0, sizeof(*p));
}

uint64_t iscsi_runtime_generation(void)
{
    return conf_part_number(CONF_ISCSI);
}

static void format_addr(char *buf, size_t len, const char *ip, int port)
{
    snprintf(buf, len, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, port);
}

int iscsi_runtime_portal_addrs(uint16_t tag, const struct sockaddr *local,
                               char (*out)[ISCSI_PORTAL_ADDR_MAX], int max)
{
    char lip[INET6_ADDRSTRLEN] = "";
    int lfamily = local ? local->sa_family : AF_UNSPEC;
    if (lfamily == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)local)->sin_addr, lip,
                  sizeof(lip));
    else if (lfamily == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)local)->sin6_addr, lip,
                  sizeof(lip));
    struct iscsi_conf *c = conf_get();
    const struct iscsi_portals *pt = c ? c->portals : NULL;
    int n = 0;
    for (size_t i = 0; pt && i < pt->n_addrs && n < max; i++) {
        const struct iscsi_portal_addr *p = &pt->addrs[i];
        if (p->tag != tag)
            continue;
        const char *ip = p->ip;
        if (p->wildcard) {
            /* the address the initiator reached us at names this host */
            if (p->family != lfamily || !lip[0])
                continue;
            ip = lip;
        }
        format_addr(out[n], ISCSI_PORTAL_ADDR_MAX, ip, p->port);
        bool dup = false;
        for (int k = 0; k < n && !dup; k++)
            dup = strcmp(out[k], out[n]) == 0;
        if (!dup)
            n++;
    }
    conf_put(c);
    return n;
}
