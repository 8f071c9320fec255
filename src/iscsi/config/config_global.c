/*
 * iscsi.global.config / update (the API of struct icfg_global,
 * global_store.h: one decoder, one encoder) / sessions / client_count.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "core/util.h"
#include "iscsi/config/config_crud.h"
#include "iscsi/config/global_store.h"
#include "iscsi/iscsi_runtime.h"

static const struct api_field isns_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = 255};
/* alua, iser and pool_avail_threshold are accepted for TrueNAS's clients
 * but not served (a standalone target has no ALUA peer, no iSER, no pool
 * threshold): they have no codec and read back as false/null. */
static const struct api_field global_fields[] = {
    {.name = "basename",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 1,
     .max = 96,
     API_AT(struct icfg_global, basename, api_codec_str)},
    {.name = "isns_servers",
     .type = API_T_ARRAY,
     .items = &isns_item,
     API_AT(struct icfg_global, isns_servers, api_codec_strv)},
    {.name = "listen_port",
     .type = API_T_INT,
     .flags = API_RANGE,
     .min = 1025,
     .max = 65535,
     API_AT(struct icfg_global, listen_port, api_codec_int)},
    {.name = "pool_avail_threshold",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 99},
    {.name = "alua", .type = API_T_BOOL},
    {.name = "iser", .type = API_T_BOOL},
};

/* The row iscsi.global.config answers with. New reference or NULL. */
static json_t *global_encode(const struct icfg_global *g)
{
    json_t *r = api_fields_row(1, global_fields, ARRAY_SIZE(global_fields), g);
    if (r && (json_object_set_new(r, "pool_avail_threshold", json_null()) < 0 ||
              json_object_set_new(r, "alua", json_false()) < 0 ||
              json_object_set_new(r, "iser", json_false()) < 0)) {
        json_decref(r);
        r = NULL;
    }
    return r;
}

/* The one decoder: apply the keys present in data (a partial body checked
 * against global_fields) to g. 0 or -ENOMEM. */
static int global_decode(json_t *data, struct icfg_global *g)
{
    g->alua = json_is_true(json_object_get(data, "alua"));
    g->iser = json_is_true(json_object_get(data, "iser"));
    json_t *v = json_object_get(data, "pool_avail_threshold");
    g->pool_avail_threshold = v && !json_is_null(v);
    return api_fields_decode(global_fields, ARRAY_SIZE(global_fields), data, g);
}

/* The settings in force encoded as the call's result (DB locked). */
static int global_result(struct api_call *call, json_t **result)
{
    struct icfg_global g;
    int rc = icfg_global_get(&g);
    if (rc == 0 && !(*result = global_encode(&g)))
        rc = -ENOMEM;
    icfg_global_clear(&g);
    return rc < 0 ? api_error(call, ENOMEM, "out of memory") : 0;
}

static int global_config(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    db_lock();
    int rc = global_result(call, result);
    db_unlock();
    return rc;
}

/* IQN-style name characters (lower case: the IQN on the wire is compared
 * case-insensitively, so one spelling is stored). */
static bool basename_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' ||
              *s == ':'))
            return false;
    return true;
}

/* What a table cannot say about the settings asked for (only the given
 * basename is checked: a stored one was checked when it was stored). */
static void global_check(struct api_call *call, const struct icfg_global *g, bool basename)
{
    char f[128];
    if (basename && !basename_ok(g->basename))
        api_verr(call, icfg_field(call, "basename", f, sizeof(f)), EINVAL,
                 "Value error, basename may contain only lower case letters, digits, '-', '.' "
                 "and ':'");
    if (g->alua)
        api_verr(call, icfg_field(call, "alua", f, sizeof(f)), EINVAL,
                 "ALUA is not supported by blockd");
    if (g->iser)
        api_verr(call, icfg_field(call, "iser", f, sizeof(f)), EINVAL,
                 "iSER is not supported by blockd");
    if (g->pool_avail_threshold)
        api_verr(call, icfg_field(call, "pool_avail_threshold", f, sizeof(f)), EINVAL,
                 "pool availability alerts are not supported by blockd");
}

static bool strv_same(const struct api_strv *a, const struct api_strv *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->v[i], b->v[i]) != 0)
            return false;
    return true;
}

/* Store the settings of g that differ from old's inside w, recording the
 * published facets that change. Every portal address (and
 * --iscsi-listen's) moves to a new port live: the change is refused,
 * writing nothing, if one cannot be bound. 0 or -1 (error set). */
static int global_store(struct icfg_write *w, const struct icfg_global *old,
                        const struct icfg_global *g)
{
    struct api_call *call = w->call;
    char f[128];
    bool port = g->listen_port != old->listen_port;
    if (port && icfg_listen_check_port(call, icfg_field(call, "listen_port", f, sizeof(f)),
                                       g->listen_port) < 0)
        return api_invalid(call);
    int rc = 0;
    if (strcmp(g->basename, old->basename) != 0) {
        rc = icfg_global_set_basename(g->basename);
        /* every IQN changes */
        cfg_tx_changed(&w->tx, CFG_ISCSI_GLOBAL, CFG_ISCSI_GLOBAL_BASENAME, CFG_UPDATED);
    }
    if (rc == 0 && port) {
        rc = icfg_global_set_listen_port(g->listen_port);
        cfg_tx_changed(&w->tx, CFG_ISCSI_GLOBAL, CFG_ISCSI_GLOBAL_LISTEN, CFG_UPDATED);
    }
    if (rc == 0 && !strv_same(&g->isns_servers, &old->isns_servers))
        rc = icfg_global_set_isns(&g->isns_servers);
    return rc < 0 ? icfg_db_fail(call, rc) : 0;
}

static int global_update(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against global_fields by the dispatcher */
    struct icfg_global given = {0}, old = {0}, g = {0};
    if (global_decode(data, &given) < 0) {
        icfg_global_clear(&given);
        return api_error(call, ENOMEM, "out of memory");
    }
    global_check(call, &given, json_object_get(data, "basename") != NULL);
    icfg_global_clear(&given);
    if (api_has_verrs(call))
        return api_invalid(call);
    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = icfg_global_get(&old);
    if (rc == 0)
        rc = icfg_global_get(&g);
    if (rc < 0 || global_decode(data, &g) < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    else if ((rc = global_store(&w, &old, &g)) == 0)
        rc = global_result(call, result);
    icfg_global_clear(&old);
    icfg_global_clear(&g);
    return icfg_write_end(&w, rc);
}

static json_t *session_row(const struct iscsi_session_info *s)
{
    char alias[ISCSI_ALIAS_MAX] = "";
    if (!s->discovery && s->target[0]) {
        struct iscsi_target_view *v = iscsi_runtime_find_target(s->target);
        if (v) {
            snprintf(alias, sizeof(alias), "%s", v->alias);
            iscsi_target_view_unref(v);
        }
    }
    json_t *row = json_object();
    json_object_set_new(row, "initiator", json_string(s->initiator));
    json_object_set_new(row, "initiator_addr", json_string(s->initiator_addr));
    json_object_set_new(row, "initiator_alias",
                        s->initiator_alias[0] ? json_string(s->initiator_alias) : json_null());
    json_object_set_new(row, "target", json_string(s->target));
    json_object_set_new(row, "target_alias", alias[0] ? json_string(alias) : json_null());
    json_object_set_new(row, "target_addr", json_string(s->target_addr));
    json_object_set_new(row, "target_id", json_integer((json_int_t)s->target_id));
    char isid[16];
    snprintf(isid, sizeof(isid), "%012llx", (unsigned long long)s->isid);
    json_object_set_new(row, "isid", json_string(isid));
    json_object_set_new(row, "tsih", json_integer(s->tsih));
    json_object_set_new(row, "portal_tag", json_integer(s->portal_tag));
    json_object_set_new(row, "discovery", json_boolean(s->discovery));
    json_object_set_new(row, "header_digest", json_string(s->header_digest ? "CRC32C" : "None"));
    json_object_set_new(row, "data_digest", json_string(s->data_digest ? "CRC32C" : "None"));
    json_object_set_new(row, "max_data_segment_length",
                        json_integer(s->max_recv_data_segment_length));
    json_object_set_new(row, "max_recv_data_segment_length",
                        json_integer(s->max_recv_data_segment_length));
    json_object_set_new(row, "max_xmit_data_segment_length",
                        json_integer(s->max_xmit_data_segment_length));
    json_object_set_new(row, "max_burst_length", json_integer(s->max_burst_length));
    json_object_set_new(row, "first_burst_length", json_integer(s->first_burst_length));
    json_object_set_new(row, "immediate_data", json_boolean(s->immediate_data));
    json_object_set_new(row, "initial_r2t", json_boolean(s->initial_r2t));
    json_object_set_new(row, "max_outstanding_r2t", json_integer(s->max_outstanding_r2t));
    json_object_set_new(row, "connections", json_integer(s->connections));
    json_object_set_new(row, "iser", json_false());
    json_object_set_new(row, "offload", json_false());
    /* blockd's own: not in TrueNAS's rows */
    json_object_set_new(row, "connected_at", json_integer((json_int_t)s->connected_at));
    json_object_set_new(row, "commands", json_integer((json_int_t)s->commands));
    json_object_set_new(row, "bytes_read", json_integer((json_int_t)s->bytes_read));
    json_object_set_new(row, "bytes_written", json_integer((json_int_t)s->bytes_written));
    return row;
}

static json_t *sessions_rows(void)
{
    struct iscsi_session_info *list = NULL;
    int n = iscsi_sessions_list(&list);
    json_t *rows = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(rows, session_row(&list[i]));
    free(list);
    return rows;
}

static int global_sessions(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_query_rows(call, sessions_rows(), params, result);
}

static int global_client_count(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    json_t *rows = sessions_rows();
    json_t *seen = json_object();
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        const char *addr = json_string_value(json_object_get(row, "initiator_addr"));
        /* count distinct client addresses, without the port */
        char host[80];
        snprintf(host, sizeof(host), "%s", addr ? addr : "");
        char *colon = strrchr(host, ':');
        if (colon)
            *colon = '\0';
        json_object_set_new(seen, host, json_true());
    }
    *result = json_integer((json_int_t)json_object_size(seen));
    json_decref(seen);
    json_decref(rows);
    return 0;
}

static const struct api_arg update_args[] = {API_ARG_OBJECT("data", global_fields, API_PARTIAL)};
static const struct api_arg query_args[] = {API_ARG_QUERY};

const struct api_method icfg_global_methods[] = {
    {"iscsi.global.config", NULL, "iSCSI global settings (basename, listen_port, isns_servers)",
     global_config, API_READ},
    {"iscsi.global.update", NULL, "Change iSCSI global settings", global_update, API_ADMIN,
     API_ARGS(update_args)},
    {"iscsi.global.sessions", NULL, "Logged-in iSCSI sessions with their negotiated parameters",
     global_sessions, API_READ, API_ARGS(query_args)},
    {"iscsi.global.client_count", NULL, "Number of distinct connected iSCSI initiator addresses",
     global_client_count, API_READ},
};
const size_t icfg_global_methods_count = ARRAY_SIZE(icfg_global_methods);
