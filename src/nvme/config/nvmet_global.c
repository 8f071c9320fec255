/*
 * nvmet.global.*: the target's settings (config, update, sessions,
 * ana_enabled, rdma_enabled), as TrueNAS 25.10 shapes them, plus
 * blockd's discovery_listen: where the discovery-only listener binds
 * ("ADDR:PORT", default ":8009"; "" for none). A change applies live:
 * its commit publishes a new CONF_NVME part, whose listeners follow.
 * blockd has one target (reported as kernel: true) and no RDMA.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvmet_internal.h"
#include "nvme/config/nvmet_write.h"
#include "nvme/nvme_target.h"

static const struct api_field global_fields[] = {
    API_FIELD_STRING("basenqn", 0, 5, NVS_NQN_MAX),
    {.name = "kernel", .type = API_T_BOOL},
    {.name = "ana", .type = API_T_BOOL},
    {.name = "rdma", .type = API_T_BOOL},
    {.name = "xport_referral", .type = API_T_BOOL},
    API_FIELD_STRING("discovery_listen", 0, 0, 256),
};

static json_t *global_encode(const struct nvmet_global *g)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:s}", "id", 1, "basenqn", g->basenqn,
                     "kernel", g->kernel, "ana", g->ana, "rdma", g->rdma, "xport_referral",
                     g->xport_referral, "discovery_listen", g->discovery_listen);
}

static int global_config(struct api_call *call, json_t *params, json_t **result)
{
    struct nvmet_global g;
    (void)params;
    int rc = nvs_global_load(&g);
    if (rc < 0)
        return api_error(call, -rc, "cannot read the NVMe-oF settings");
    *result = global_encode(&g);
    return 0;
}

static void global_check(struct api_call *call, json_t *in)
{
    const char *nqn = nvj_str(in, "basenqn"), *l = nvj_str(in, "discovery_listen");
    struct sockaddr_storage ss;
    socklen_t sl;
    if (nqn && (strncmp(nqn, "nqn.", 4) != 0 || strpbrk(nqn, " \t\r\n")))
        api_verr(call, "nvmet.global.update.basenqn", EINVAL,
                 "Must be an NQN (\"nqn.\", no spaces)");
    if (json_is_false(json_object_get(in, "kernel")))
        api_verr(call, "nvmet.global.update.kernel", ENOTSUP,
                 "blockd has one NVMe-oF target (its own); kernel cannot be turned off");
    if (json_is_true(json_object_get(in, "rdma")))
        api_verr(call, "nvmet.global.update.rdma", ENOTSUP,
                 "blockd serves NVMe/TCP only: RDMA cannot be enabled");
    if (l && *l && parse_host_port(l, &ss, &sl) < 0)
        api_verr(call, "nvmet.global.update.discovery_listen", EINVAL,
                 "expected ADDR:PORT (\":8009\", \"0.0.0.0:8009\", \"[::]:8009\"), or \"\"");
}

/* nvmet.global.update after the dispatcher's check (nvmet_write.h). */
static int global_write(struct api_call *call, json_t *in, struct nvmet_global *out)
{
    struct nvmet_global g;
    global_check(call, in);
    if (api_has_verrs(call))
        return api_invalid(call);
    int rc = nvs_global_load(&g);
    if (rc < 0)
        return api_error(call, -rc, "cannot read the NVMe-oF settings");
    const char *v;
    if ((v = nvj_str(in, "basenqn")))
        snprintf(g.basenqn, sizeof(g.basenqn), "%s", v);
    if ((v = nvj_str(in, "discovery_listen")))
        snprintf(g.discovery_listen, sizeof(g.discovery_listen), "%s", v);
    if (json_object_get(in, "ana"))
        g.ana = nvj_bool(in, "ana");
    if (json_object_get(in, "xport_referral"))
        g.xport_referral = nvj_bool(in, "xport_referral");
    rc = nvs_global_store(&g);
    if (rc < 0)
        return api_error(call, -rc, "cannot store the NVMe-oF settings");
    *out = g;
    return 0;
}

static int global_update(struct api_call *call, json_t *params, json_t **result)
{
    struct nvmet_global g;
    if (global_write(call, api_param(params, 0), &g) < 0)
        return -1;
    *result = global_encode(&g);
    return 0;
}

int nvmet_global_write(struct api_call *call, json_t *body)
{
    struct nvmet_global g;
    if (api_validate_object(call, api_call_method(call), body, global_fields,
                            ARRAY_SIZE(global_fields), API_PARTIAL) < 0)
        return api_invalid(call);
    return global_write(call, body, &g) < 0 ? -1 : 0;
}

static int global_flag(struct api_call *call, json_t **result, bool rdma)
{
    struct nvmet_global g;
    int rc = nvs_global_load(&g);
    if (rc < 0)
        return api_error(call, -rc, "cannot read the NVMe-oF settings");
    *result = json_boolean(rdma ? g.rdma : g.ana);
    return 0;
}

static int global_ana_enabled(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    return global_flag(call, result, false);
}

static int global_rdma_enabled(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    return global_flag(call, result, true);
}

/* One live controller as TrueNAS shows it: the host's address without
 * its port (host_traddr), its NQN, the subsystem and port rows (null for
 * a discovery controller / the discovery-only listener) and its CNTLID;
 * blockd adds subnqn, discovery and connected_at. */
static json_t *session_row(const struct nvme_session_info *s)
{
    /* the peer is "IP:PORT" or "[IPv6]:PORT" (format_sockaddr) */
    const char *host = s->peer, *colon = strrchr(host, ':');
    size_t n = colon ? (size_t)(colon - host) : strlen(host);
    if (host[0] == '[' && n >= 2 && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    char addr[sizeof(s->peer)];
    snprintf(addr, sizeof(addr), "%.*s", (int)n, host);
    return json_pack("{s:s, s:s, s:o, s:o, s:i, s:s, s:b, s:I}", "host_traddr", addr, "hostnqn",
                     s->hostnqn, "subsys_id",
                     s->subsys_id ? json_integer((json_int_t)s->subsys_id) : json_null(), "port_id",
                     s->port_id ? json_integer((json_int_t)s->port_id) : json_null(), "ctrl",
                     (int)s->cntlid, "subnqn", s->subnqn, "discovery", s->discovery, "connected_at",
                     (json_int_t)s->connected_at);
}

/* nvmet.global.sessions: the target's live controllers, filtered like any
 * query (TrueNAS's filterable fields: host_traddr, hostnqn, subsys_id,
 * port_id, ctrl). */
static int global_sessions(struct api_call *call, json_t *params, json_t **result)
{
    struct nvme_session_info *v = NULL;
    int n = nvme_sessions_list(&v);
    if (n < 0)
        return api_error(call, ENOMEM, "out of memory");
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++)
        if (json_array_append_new(arr, session_row(&v[i])) < 0) {
            json_decref(arr);
            arr = NULL;
        }
    free(v);
    if (!arr)
        return api_error(call, ENOMEM, "out of memory");
    int rc = api_query(call, arr, params, result);
    json_decref(arr);
    return rc;
}

static const struct api_arg update_args[] = {API_ARG_OBJECT("data", global_fields, API_PARTIAL)};
static const struct api_arg query_args[] = {API_ARG_QUERY};

const struct api_method nvmet_global_methods[] = {
    {"nvmet.global.config", NULL, "NVMe-oF target settings", global_config, API_READ},
    {"nvmet.global.update", NULL, "Change NVMe-oF target settings (live)", global_update, API_ADMIN,
     API_ARGS(update_args)},
    {"nvmet.global.ana_enabled", NULL, "Whether ANA reporting is on", global_ana_enabled, API_READ},
    {"nvmet.global.rdma_enabled", NULL, "Whether RDMA is on (never: NVMe/TCP only)",
     global_rdma_enabled, API_READ},
    {"nvmet.global.sessions", NULL, "Connected NVMe-oF controllers", global_sessions, API_READ,
     API_ARGS(query_args)},
};
const size_t nvmet_global_methods_n = ARRAY_SIZE(nvmet_global_methods);
