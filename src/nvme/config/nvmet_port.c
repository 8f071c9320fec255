/*
 * nvmet.port.*: the addresses subsystems are served on, as TrueNAS 25.10
 * shapes them. blockd serves NVMe/TCP only: RDMA and FC ports are
 * refused with the reason. addr_adrfam is derived from the address,
 * index is the next free one (the port's number in the discovery log).
 * Every enabled port has its own listener (nvmet_listen.c), opened when
 * the commit publishes. delete refuses while subsystems use the port
 * unless force (then the links go too).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/listener.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"

/* 1 IPv4, 2 IPv6, 0 not an IP address. */
static int ip_family(const char *s)
{
    unsigned char buf[16];
    if (inet_pton(AF_INET, s, buf) == 1)
        return 1;
    return inet_pton(AF_INET6, s, buf) == 1 ? 2 : 0;
}

/* A port that starts listening (created enabled, enabled, or moved) must
 * be bindable now: refused before it is stored rather than logged after. */
static void port_probe(struct nvw *w, const struct nvmet_port *p, const struct nvmet_port *old,
                       int fam)
{
    char addr[80];
    if (!p->enabled || (old && old->enabled && strcmp(old->addr_traddr, p->addr_traddr) == 0 &&
                        old->addr_trsvcid == p->addr_trsvcid))
        return;
    snprintf(addr, sizeof(addr), fam == 2 ? "[%s]:%" PRId64 : "%s:%" PRId64, p->addr_traddr,
             p->addr_trsvcid);
    int rc = listener_probe_tcp(addr, LISTENER_REUSEPORT);
    if (rc < 0) {
        nvw_err(w, "addr_trsvcid", -rc, "cannot listen on %s: %s", addr, strerror(-rc));
        log_warn("nvmet: %s: cannot listen on %s (peer %s): %s", w->method, addr,
                 api_call_peer(w->call), strerror(-rc));
    }
}

/* The next free index (the port's number in the discovery log). */
static int64_t index_next(void)
{
    void *all;
    size_t n;
    int64_t next = 0;
    if (nvs_load(&nvs_port, NULL, &all, &n, NULL) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (((struct nvmet_port *)all)[i].index > next)
            next = ((struct nvmet_port *)all)[i].index;
    nvs_free_all(&nvs_port, all, n);
    return next + 1;
}

static int port_check(struct nvw *w, void *obj, const void *prev)
{
    struct nvmet_port *p = obj;
    const struct nvmet_port *old = prev;
    const char *tr = nvs_trtypes[p->addr_trtype];
    if (strcmp(tr, "TCP") != 0) {
        nvw_err(w, "addr_trtype", ENOTSUP,
                "blockd serves NVMe/TCP only: %s ports are not supported (no %s transport)", tr,
                tr);
        log_warn("nvmet: %s refused a %s port (peer %s)", w->method, tr, api_call_peer(w->call));
        return 0;
    }
    int fam = ip_family(p->addr_traddr);
    if (!fam) {
        nvw_err(w, "addr_traddr", EINVAL, "addr_traddr must be a valid IP address");
        return 0;
    }
    free(p->addr_adrfam);
    p->addr_adrfam = strdup(fam == 1 ? "IPV4" : "IPV6");
    port_probe(w, p, old, fam);
    void *same;
    size_t n;
    if (nvs_load(&nvs_port,
                 "addr_trtype = ?1 AND addr_traddr = ?2 AND addr_trsvcid = ?3 AND id != ?4", &same,
                 &n, "ttii", tr, p->addr_traddr, p->addr_trsvcid, p->id) == 0) {
        if (n)
            api_verr(w->call, w->method, EEXIST,
                     "Port #%" PRId64 " uses the same transport/address",
                     ((struct nvmet_port *)same)->index);
        nvs_free_all(&nvs_port, same, n);
    }
    if (!old && (p->index = index_next()) < 0)
        return api_error(w->call, EIO, "cannot read the ports");
    return p->addr_adrfam ? 0 : api_error(w->call, ENOMEM, "out of memory");
}

static int port_remove(struct nvw *w, const void *obj, json_t *opts)
{
    const struct nvmet_port *p = obj;
    int64_t n = 0;
    if (nvs_count(&nvs_port_subsys, "port_id = ?1", &n, "i", p->id) < 0)
        return api_error(w->call, EIO, "cannot read the port's subsystems");
    if (n && !nvj_bool(opts, "force")) {
        nvw_err(w, "id", EBUSY, "Port #%" PRId64 " used by %" PRId64 " subsystem%s (use force)",
                p->index, n, n == 1 ? "" : "s");
        return api_invalid(w->call);
    }
    int rc = nvs_delete(&nvs_port_subsys, NULL, "port_id = ?1", "i", p->id);
    return rc < 0 ? api_error(w->call, -rc, "cannot delete the port's links") : 0;
}

const struct nvmet_res nvmet_port_res = {
    .what = "port",
    .t = &nvs_port,
    .check = port_check,
    .remove = port_remove,
};

NVMET_CRUD_HANDLERS(port, nvmet_port_res, "NVMe-oF port")

/* nvmet.port.transport_address_choices: the addresses a TCP port may
 * bind (the wildcards and this host's interface addresses). */
static int port_address_choices(struct api_call *call, json_t *params, json_t **result)
{
    json_t *tr = api_param(params, 0);
    *result = json_object();
    if (!json_is_string(tr) || strcmp(json_string_value(tr), "TCP") != 0)
        return 0; /* RDMA, FC: no addresses here */
    json_object_set_new(*result, "0.0.0.0", json_string("0.0.0.0"));
    json_object_set_new(*result, "::", json_string("::"));
    struct ifaddrs *ifs;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            char buf[INET6_ADDRSTRLEN];
            int fam = i->ifa_addr ? i->ifa_addr->sa_family : 0;
            if (fam == AF_INET)
                inet_ntop(fam, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, buf,
                          sizeof(buf));
            else if (fam == AF_INET6)
                inet_ntop(fam, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, buf,
                          sizeof(buf));
            else
                continue;
            json_object_set_new(*result, buf, json_string(buf));
        }
        freeifaddrs(ifs);
    }
    (void)call;
    return 0;
}

static const struct api_field del_fields[] = {
    {.name = "force", .type = API_T_BOOL, .def = "false"},
};
static const struct api_arg create_args[] = {NVMET_ARG_DATA(nvs_port_fields, NVS_PORT_INPUT, 0)};
static const struct api_arg update_args[] = {
    API_ARG_ID, NVMET_ARG_DATA(nvs_port_fields, NVS_PORT_INPUT, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    API_ARG_ID, API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};
static const struct api_arg choices_args[] = {
    {.name = "addr_trtype", .type = API_T_STRING},
    {.name = "force_ana", .type = API_T_BOOL, .flags = API_ARG_OPTIONAL}};

const struct api_method nvmet_port_methods[] = {
    NVMET_CRUD_METHODS("nvmet.port", port, "port", create_args, update_args, delete_args),
    {"nvmet.port.transport_address_choices", NULL,
     "Addresses a port of the transport may listen on", port_address_choices, API_READ,
     API_ARGS(choices_args)},
};
const size_t nvmet_port_methods_n = ARRAY_SIZE(nvmet_port_methods);
