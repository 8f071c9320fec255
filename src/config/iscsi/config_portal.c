/* iscsi.portal.create|update|delete|query. A portal is a set of listen
 * addresses (port = iscsi.global.listen_port) with a tag that TrueNAS keeps
 * numbered 1..n. Each address listens live (config_listen.c); one that
 * cannot be bound is refused before anything is written. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/db.h"
#include "core/util.h"
#include "config/iscsi/config_crud.h"

static json_t *portal_row(sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0);
    json_t *listen = json_array();
    sqlite3_stmt *ips;
    int port = icfg_global_listen_port();
    if (icfg_prepare("SELECT ip FROM iscsi_portal_ip WHERE portal_id = ? ORDER BY rowid", &ips) ==
        0) {
        sqlite3_bind_int64(ips, 1, id);
        while (sqlite3_step(ips) == SQLITE_ROW)
            json_array_append_new(
                listen, json_pack("{s:s, s:i}", "ip", icfg_col_text(ips, 0), "port", port));
        icfg_finalize(ips);
    }
    return json_pack("{s:I, s:I, s:s, s:o}", "id", (json_int_t)id, "tag",
                     (json_int_t)sqlite3_column_int64(st, 1), "comment", icfg_col_text(st, 2),
                     "listen", listen);
}

#define PORTAL_SELECT "SELECT id, tag, comment FROM iscsi_portal"

static const struct api_field ip_fields[] = {
    {.name = "ip", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 64},
};
static const struct api_field listen_item = {
    .type = API_T_OBJECT, .fields = ip_fields, .nfields = ARRAY_SIZE(ip_fields)};
static const struct api_field portal_fields[] = {
    {.name = "listen",
     .type = API_T_ARRAY,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 64,
     .items = &listen_item},
    {.name = "comment", .type = API_T_STRING, .def = "\"\""},
};

/* The address must be a literal this host can listen on: a wildcard or one
 * of its interface addresses (TrueNAS: listen_ip_choices). */
static bool ip_is_local(const char *ip, char *canon, size_t len)
{
    struct in_addr a4;
    struct in6_addr a6;
    int family;
    if (inet_pton(AF_INET, ip, &a4) == 1)
        family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &a6) == 1)
        family = AF_INET6;
    else
        return false;
    inet_ntop(family, family == AF_INET ? (void *)&a4 : (void *)&a6, canon, (socklen_t)len);
    /* the wildcard, and all of 127/8 (Linux accepts any loopback address) */
    if (family == AF_INET && (a4.s_addr == htonl(INADDR_ANY) || (ntohl(a4.s_addr) >> 24) == 127))
        return true;
    if (family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a6))
        return true;
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) < 0)
        return true; /* cannot tell: let the listener report it */
    bool found = false;
    for (i = ifs; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family)
            continue;
        if (family == AF_INET)
            found = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr == a4.s_addr;
        else
            found = memcmp(&((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, &a6,
                           sizeof(a6)) == 0;
    }
    freeifaddrs(ifs);
    return found;
}

/* Semantic checks; canonical IPs are written back into data. */
static void portal_check(struct api_call *call, json_t *data, int64_t self_id)
{
    json_t *listen = json_object_get(data, "listen");
    size_t i;
    json_t *item;
    json_array_foreach(listen, i, item)
    {
        char f[160], field[64];
        snprintf(field, sizeof(field), "listen.%zu.ip", i);
        icfg_field(call, field, f, sizeof(f));
        const char *ip = json_string_value(json_object_get(item, "ip"));
        char canon[INET6_ADDRSTRLEN];
        if (!ip_is_local(ip, canon, sizeof(canon))) {
            api_verr(call, f, EINVAL, "Value error, %s is not an IP address of this system", ip);
            continue;
        }
        json_object_set_new(item, "ip", json_string(canon));
        for (size_t j = 0; j < i; j++)
            if (strcmp(json_string_value(json_object_get(json_array_get(listen, j), "ip")),
                       canon) == 0)
                api_verr(call, f, EINVAL, "IP %s is listed twice", canon);
        int64_t other;
        if (icfg_int(&other,
                     "SELECT portal_id FROM iscsi_portal_ip WHERE ip = ? AND portal_id != ?", "ti",
                     canon, self_id) == 0) {
            api_verr(call, f, EEXIST, "IP %s already belongs to portal %lld", canon,
                     (long long)other);
            continue;
        }
        /* A new address must be bindable now: the listener opens right
         * after commit, and a portal that cannot listen is refused rather
         * than stored dead. Addresses the portal already has are left
         * alone (they are listening, or their failure was logged). */
        if (icfg_int(&other, "SELECT portal_id FROM iscsi_portal_ip WHERE ip = ? AND portal_id = ?",
                     "ti", canon, self_id) != 0)
            icfg_listen_check(call, f, canon, icfg_global_listen_port());
    }
}

static int portal_store_ips(int64_t id, json_t *listen)
{
    int rc = icfg_run("DELETE FROM iscsi_portal_ip WHERE portal_id = ?", "i", id);
    size_t i;
    json_t *item;
    json_array_foreach(listen, i, item)
    {
        if (rc < 0)
            break;
        rc = icfg_run("INSERT INTO iscsi_portal_ip (portal_id, ip) VALUES (?, ?)", "it", id,
                      json_string_value(json_object_get(item, "ip")));
    }
    return rc;
}

static int portal_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    json_t *data;
    if (icfg_create_begin(&w, call, params, portal_fields, ARRAY_SIZE(portal_fields), &data) < 0)
        return -1;
    int rc = 0;
    portal_check(call, data, 0);
    if (api_has_verrs(call)) {
        rc = api_invalid(call);
    } else {
        int64_t count = 0, id = 0;
        icfg_int(&count, "SELECT COUNT(*) FROM iscsi_portal", "");
        int err = icfg_run("INSERT INTO iscsi_portal (tag, comment) VALUES (?, ?)", "it", count + 1,
                           json_string_value(json_object_get(data, "comment")));
        if (err == 0) {
            id = sqlite3_last_insert_rowid(db_handle());
            err = portal_store_ips(id, json_object_get(data, "listen"));
        }
        if (err < 0)
            rc = icfg_db_fail(call, err);
        else {
            cfg_tx_changed(&w.tx, CFG_ISCSI_PORTAL, id, CFG_CREATED);
            *result = icfg_get_by_id(portal_row, PORTAL_SELECT " WHERE id = ?", id);
        }
    }
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int portal_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    json_t *data;
    if (icfg_update_begin(&w, call, params, portal_fields, ARRAY_SIZE(portal_fields), &id, &data) <
        0)
        return -1;
    int rc = 0;
    json_t *old = icfg_get_by_id(portal_row, PORTAL_SELECT " WHERE id = ?", id);
    if (!old) {
        json_decref(data);
        rc = api_error(call, ENOENT, "Portal %lld does not exist", (long long)id);
        return icfg_write_end(&w, rc);
    }
    json_t *merged = json_deep_copy(old);
    json_object_update(merged, data);
    portal_check(call, merged, id);
    if (api_has_verrs(call)) {
        rc = api_invalid(call);
    } else {
        int err = icfg_run("UPDATE iscsi_portal SET comment = ? WHERE id = ?", "ti",
                           json_string_value(json_object_get(merged, "comment")), id);
        if (err == 0 && json_object_get(data, "listen")) {
            err = portal_store_ips(id, json_object_get(merged, "listen"));
            cfg_tx_changed(&w.tx, CFG_ISCSI_PORTAL, id, CFG_UPDATED);
        }
        if (err < 0)
            rc = icfg_db_fail(call, err);
        else
            *result = icfg_get_by_id(portal_row, PORTAL_SELECT " WHERE id = ?", id);
    }
    json_decref(merged);
    json_decref(old);
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int portal_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    if (icfg_delete_begin(&w, call, params, &id) < 0)
        return -1;
    int64_t tag;
    int rc = 0;
    if (icfg_int(&tag, "SELECT tag FROM iscsi_portal WHERE id = ?", "i", id) < 0) {
        rc = api_error(call, ENOENT, "Portal %lld does not exist", (long long)id);
        return icfg_write_end(&w, rc);
    }
    /* As TrueNAS: the target groups on this portal go with it. Tags are
     * renumbered 1..n, so every target's view is rebuilt. */
    int err = icfg_run("DELETE FROM iscsi_target_group WHERE portal_id = ?", "i", id);
    if (err == 0)
        err = icfg_run("DELETE FROM iscsi_portal_ip WHERE portal_id = ?", "i", id);
    if (err == 0)
        err = icfg_run("DELETE FROM iscsi_portal WHERE id = ?", "i", id);
    if (err == 0)
        err = icfg_run("UPDATE iscsi_portal SET tag = tag - 1 WHERE tag > ?", "i", tag);
    if (err < 0)
        rc = icfg_db_fail(call, err);
    else {
        /* every target's portal group tags move: the publisher rebuilds all */
        cfg_tx_changed(&w.tx, CFG_ISCSI_PORTAL, id, CFG_DELETED);
        *result = json_true();
    }
    return icfg_write_end(&w, rc);
}

static int portal_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"tag", "tag"}};
    return icfg_query_hinted(call, params, result, portal_row, PORTAL_SELECT, hints,
                             ARRAY_SIZE(hints));
}

static int portal_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, portal_query, "Portal");
}

/* TrueNAS: {"0.0.0.0": "0.0.0.0", "::": "::", <address>: <address>…}. */
static int portal_listen_ip_choices(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    json_t *r = json_pack("{s:s, s:s}", "0.0.0.0", "0.0.0.0", "::", "::");
    struct ifaddrs *ifs;
    if (r && getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
            char buf[INET6_ADDRSTRLEN];
            if (!i->ifa_addr)
                continue;
            if (i->ifa_addr->sa_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, buf,
                          sizeof(buf));
            else if (i->ifa_addr->sa_family == AF_INET6 &&
                     !IN6_IS_ADDR_LINKLOCAL(
                         &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr))
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)i->ifa_addr)->sin6_addr, buf,
                          sizeof(buf));
            else
                continue;
            json_object_set_new(r, buf, json_string(buf));
        }
        freeifaddrs(ifs);
    }
    if (!r)
        return api_error(call, ENOMEM, "out of memory");
    *result = r;
    return 0;
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(portal_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(portal_fields)};

const struct api_method icfg_portal_methods[] = {
    {"iscsi.portal.create", NULL, "Create an iSCSI portal", portal_create, 0,
     API_ARGS(create_args)},
    {"iscsi.portal.update", NULL, "Change an iSCSI portal", portal_update, 0,
     API_ARGS(update_args)},
    {"iscsi.portal.delete", NULL, "Delete an iSCSI portal (and the target groups using it)",
     portal_delete, 0, API_ARGS(icfg_delete_args)},
    {"iscsi.portal.query", NULL, "List iSCSI portals", portal_query, 0, API_ARGS(icfg_query_args)},
    {"iscsi.portal.listen_ip_choices", NULL, "Addresses a portal may listen on",
     portal_listen_ip_choices, 0},
    {"iscsi.portal.get_instance", NULL, "One portal by id", portal_query_instance, 0,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_portal_methods_count = ARRAY_SIZE(icfg_portal_methods);
