/* gateway.query: the group's members (gateway.h), a TrueNAS-style query. */
#include <jansson.h>

#include "api/api.h"
#include "api/validate.h"
#include "core/util.h"
#include "gateway/gateway.h"

static int m_query(struct api_call *call, json_t *params, json_t **result)
{
    struct gateway_member m[GATEWAY_ID_MAX];
    size_t n = gateway_members(m, GATEWAY_ID_MAX);
    if (n > GATEWAY_ID_MAX)
        n = GATEWAY_ID_MAX;
    json_t *rows = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_pack("{s:i, s:s, s:s, s:s, s:I, s:s, s:b, s:b}", "id", (int)m[i].id,
                              "name", m[i].name, "portals", m[i].portals, "state",
                              m[i].state == GATEWAY_ONLINE ? "ONLINE" : "OFFLINE", "last_seen",
                              (json_int_t)m[i].last_seen, "client_address", m[i].addr, "local",
                              m[i].id == gateway_id(), "fenced", m[i].fenced);
        json_array_append_new(rows, r);
    }
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static const struct api_arg query_args[] = {API_ARG_QUERY};

static const struct api_method gateway_methods[] = {
    {"gateway.query", NULL,
     "Members of this daemon's gateway group (--gateway-group): id (its target port group), "
     "name, portals, state ONLINE/OFFLINE, last_seen (unix s), client_address, local, fenced. "
     "Empty when the group is off.",
     m_query, API_READ, API_ARGS(query_args)},
};

void gateway_api_init(void)
{
    api_register(gateway_methods, ARRAY_SIZE(gateway_methods));
}
