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
#include <string.h>

#include "core/listener.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"

static const char *const trtypes[] = {"TCP", "RDMA", "FC", NULL};

static const struct api_field port_fields[] = {
    {.name = "addr_trtype", .type = API_T_ENUM, .flags = API_REQUIRED, .choices = trtypes},
    {.name = "addr_trsvcid",
     .type = API_T_INT,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1024,
     .max = 65535},
    API_FIELD_STRING("addr_traddr", API_REQUIRED, 1, 63),
    {.name = "inline_data_size",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = 1 << 20,
     .def = "null"},
    {.name = "max_queue_size",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 2,
     .max = 65535,
     .def = "null"},
    {.name = "pi_enable", .type = API_T_BOOL, .flags = API_NULLABLE, .def = "null"},
    {.name = "enabled", .type = API_T_BOOL, .def = "true"},
};

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
static void port_probe(struct nvw *w, json_t *row, json_t *old, int fam)
{
    char addr[80];
    if (!nvj_bool(row, "enabled") ||
        (old && nvj_bool(old, "enabled") &&
         strcmp(nvj_str(old, "addr_traddr"), nvj_str(row, "addr_traddr")) == 0 &&
         nvj_int(old, "addr_trsvcid") == nvj_int(row, "addr_trsvcid")))
        return;
    snprintf(addr, sizeof(addr), fam == 2 ? "[%s]:%" PRId64 : "%s:%" PRId64,
             nvj_str(row, "addr_traddr"), nvj_int(row, "addr_trsvcid"));
    int rc = listener_probe_tcp(addr, LISTENER_REUSEPORT);
    if (rc < 0) {
        nvw_err(w, "addr_trsvcid", -rc, "cannot listen on %s: %s", addr, strerror(-rc));
        log_warn("nvmet: %s: cannot listen on %s (peer %s): %s", w->method, addr,
                 api_call_peer(w->call), strerror(-rc));
    }
}

static int port_check(struct nvw *w, json_t *row, json_t *old)
{
    const char *tr = nvj_str(row, "addr_trtype"), *addr = nvj_str(row, "addr_traddr");
    int64_t id = old ? nvj_int(old, "id") : 0;
    if (strcmp(tr, "TCP") != 0) {
        nvw_err(w, "addr_trtype", ENOTSUP,
                "blockd serves NVMe/TCP only: %s ports are not supported (no %s transport)", tr,
                tr);
        log_warn("nvmet: %s refused a %s port (peer %s)", w->method, tr, api_call_peer(w->call));
        return 0;
    }
    int fam = ip_family(addr);
    if (!fam) {
        nvw_err(w, "addr_traddr", EINVAL, "addr_traddr must be a valid IP address");
        return 0;
    }
    json_object_set_new(row, "addr_adrfam", json_string(fam == 1 ? "IPV4" : "IPV6"));
    port_probe(w, row, old, fam);
    json_t *same;
    if (nvs_select(&nvs_port,
                   "addr_trtype = ?1 AND addr_traddr = ?2 AND addr_trsvcid = ?3 AND "
                   "id != ?4",
                   &same, "ttii", tr, addr, nvj_int(row, "addr_trsvcid"), id) == 0 &&
        json_array_size(same))
        api_verr(w->call, w->method, EEXIST, "Port #%" PRId64 " uses the same transport/address",
                 nvj_int(json_array_get(same, 0), "index"));
    json_decref(same);
    if (old) {
        json_object_set(row, "index", json_object_get(old, "index"));
        return 0;
    }
    int64_t next = 0;
    json_t *all;
    size_t i;
    json_t *p;
    if (nvs_select(&nvs_port, NULL, &all, NULL) < 0)
        return api_error(w->call, EIO, "cannot read the ports");
    json_array_foreach(all, i, p) if (nvj_int(p, "index") > next) next = nvj_int(p, "index");
    json_decref(all);
    json_object_set_new(row, "index", json_integer(next + 1));
    return 0;
}

static json_t *port_encode(json_t *row, json_t *ctx)
{
    (void)ctx;
    return json_deep_copy(row);
}

static int port_remove(struct nvw *w, json_t *row, json_t *opts)
{
    int64_t id = nvj_int(row, "id"), n = 0;
    if (nvs_count(&nvs_port_subsys, "port_id = ?1", &n, "i", id) < 0)
        return api_error(w->call, EIO, "cannot read the port's subsystems");
    if (n && !nvj_bool(opts, "force")) {
        nvw_err(w, "id", EBUSY, "Port #%" PRId64 " used by %" PRId64 " subsystem%s (use force)",
                nvj_int(row, "index"), n, n == 1 ? "" : "s");
        return api_invalid(w->call);
    }
    int rc = nvs_delete(&nvs_port_subsys, NULL, "port_id = ?1", "i", id);
    return rc < 0 ? api_error(w->call, -rc, "cannot delete the port's links") : 0;
}

const struct nvmet_res nvmet_port_res = {
    .what = "port",
    .t = &nvs_port,
    .fields = port_fields,
    .nfields = ARRAY_SIZE(port_fields),
    .check = port_check,
    .encode = port_encode,
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
static const struct api_arg create_args[] = {API_ARG_OBJECT("data", port_fields, 0)};
static const struct api_arg update_args[] = {API_ARG_ID,
                                             API_ARG_OBJECT("data", port_fields, API_PARTIAL)};
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
