/* iscsi.global.config / update / sessions / client_count. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/db.h"
#include "core/util.h"
#include "config/iscsi/config_internal.h"
#include "iscsi/iscsi_runtime.h"

#define KEY_BASENAME "iscsi.global.basename"
#define KEY_PORT "iscsi.global.listen_port"
#define KEY_ISNS "iscsi.global.isns_servers"

char *icfg_global_basename(void)
{
    char *v = NULL;
    if (db_setting_get(KEY_BASENAME, &v) < 0 || !v)
        return strdup(ICFG_DEFAULT_BASENAME);
    return v;
}

int icfg_global_listen_port(void)
{
    char *v = NULL;
    int port = ICFG_DEFAULT_PORT;
    if (db_setting_get(KEY_PORT, &v) == 0 && v) {
        char *end;
        long p = strtol(v, &end, 10);
        if (*end == '\0' && p > 0 && p <= 65535)
            port = (int)p;
    }
    free(v);
    return port;
}

static json_t *global_row(void)
{
    char *basename = icfg_global_basename();
    char *isns = NULL;
    json_t *servers = NULL;
    if (db_setting_get(KEY_ISNS, &isns) == 0 && isns)
        servers = json_loads(isns, 0, NULL);
    free(isns);
    if (!json_is_array(servers)) {
        json_decref(servers);
        servers = json_array();
    }
    json_t *row = json_pack("{s:i, s:s, s:o, s:i, s:n, s:b, s:b}", "id", 1, "basename",
                            basename ? basename : ICFG_DEFAULT_BASENAME, "isns_servers", servers,
                            "listen_port", icfg_global_listen_port(), "pool_avail_threshold",
                            "alua", 0, "iser", 0);
    free(basename);
    return row;
}

static int global_config(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    db_lock();
    *result = global_row();
    db_unlock();
    return *result ? 0 : api_error(call, ENOMEM, "out of memory");
}

static const struct api_field isns_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = 255};
static const struct api_field global_fields[] = {
    {.name = "basename", .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = 96},
    {.name = "isns_servers", .type = API_T_ARRAY, .items = &isns_item},
    {.name = "listen_port", .type = API_T_INT, .flags = API_RANGE, .min = 1025, .max = 65535},
    {.name = "pool_avail_threshold",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 99},
    {.name = "alua", .type = API_T_BOOL},
    {.name = "iser", .type = API_T_BOOL},
};

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

static int global_update(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against global_fields by the dispatcher */
    char f[128];
    json_t *b = json_object_get(data, "basename");
    if (b && !basename_ok(json_string_value(b)))
        api_verr(call, icfg_field(call, "basename", f, sizeof(f)), EINVAL,
                 "Value error, basename may contain only lower case letters, digits, '-', '.' "
                 "and ':'");
    json_t *alua = json_object_get(data, "alua"), *iser = json_object_get(data, "iser");
    if (json_is_true(alua))
        api_verr(call, icfg_field(call, "alua", f, sizeof(f)), EINVAL,
                 "ALUA is not supported by blockd");
    if (json_is_true(iser))
        api_verr(call, icfg_field(call, "iser", f, sizeof(f)), EINVAL,
                 "iSER is not supported by blockd");
    if (json_object_get(data, "pool_avail_threshold") &&
        !json_is_null(json_object_get(data, "pool_avail_threshold")))
        api_verr(call, icfg_field(call, "pool_avail_threshold", f, sizeof(f)), EINVAL,
                 "pool availability alerts are not supported by blockd");
    if (api_has_verrs(call))
        return api_invalid(call);

    struct icfg_write w;
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    int rc = 0;
    /* Every portal address (and --iscsi-listen's) moves to the new port
     * live: refuse the change, writing nothing, if one cannot be bound. */
    json_t *port = json_object_get(data, "listen_port");
    if (port && json_integer_value(port) != icfg_global_listen_port() &&
        icfg_listen_check_port(call, icfg_field(call, "listen_port", f, sizeof(f)),
                               (int)json_integer_value(port)) < 0)
        return icfg_write_end(&w, api_invalid(call));
    char *old = icfg_global_basename();
    if (b && (!old || strcmp(old, json_string_value(b)) != 0)) {
        rc = db_setting_set(KEY_BASENAME, json_string_value(b));
        /* every IQN changes */
        cfg_tx_changed(&w.tx, CFG_ISCSI_GLOBAL, CFG_ISCSI_GLOBAL_BASENAME, CFG_UPDATED);
    }
    free(old);
    if (rc == 0 && port && json_integer_value(port) != icfg_global_listen_port()) {
        char buf[16];
        snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(port));
        rc = db_setting_set(KEY_PORT, buf);
        cfg_tx_changed(&w.tx, CFG_ISCSI_GLOBAL, CFG_ISCSI_GLOBAL_LISTEN, CFG_UPDATED);
    }
    json_t *isns = json_object_get(data, "isns_servers");
    if (rc == 0 && isns) {
        char *text = json_dumps(isns, JSON_COMPACT);
        rc = text ? db_setting_set(KEY_ISNS, text) : -ENOMEM;
        free(text);
    }
    if (rc < 0)
        rc = icfg_db_fail(call, rc);
    else
        *result = global_row();
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
     global_config, 0},
    {"iscsi.global.update", NULL, "Change iSCSI global settings", global_update, 0,
     API_ARGS(update_args)},
    {"iscsi.global.sessions", NULL, "Logged-in iSCSI sessions with their negotiated parameters",
     global_sessions, 0, API_ARGS(query_args)},
    {"iscsi.global.client_count", NULL, "Number of distinct connected iSCSI initiator addresses",
     global_client_count, 0},
};
const size_t icfg_global_methods_count = ARRAY_SIZE(icfg_global_methods);
