/*
 * iscsi.portal.create|update|delete|query|get_instance|listen_ip_choices:
 * the API of struct icfg_portal (portal_store.h holds its SQL). A portal
 * is a set of listen addresses (port = iscsi.global.listen_port) with a
 * tag that TrueNAS keeps numbered 1..n. Each address listens live
 * (config_listen.c); one that cannot be bound is refused before anything
 * is written. The field table, the one decoder (portal_decode), the one
 * encoder (portal_encode), the invariants (portal_check_ip) and handlers
 * of one shape: decode → check → one transaction → publish.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "core/util.h"
#include "iscsi/config/config_crud.h"
#include "iscsi/config/portal_store.h"

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
    {.name = "comment",
     .type = API_T_STRING,
     .def = "\"\"",
     API_AT(struct icfg_portal, comment, api_codec_str)},
};

/* The row iscsi.portal.* answers with: the table's comment, then tag and
 * listen (kept as addresses and one port, shown as TrueNAS does: a list
 * of {ip, port}). New reference or NULL. */
static json_t *portal_encode(const struct icfg_portal *p)
{
    json_t *listen = json_array();
    for (size_t i = 0; listen && i < p->listen.n; i++)
        if (json_array_append_new(
                listen, json_pack("{s:s, s:i}", "ip", p->listen.v[i], "port", p->port)) < 0) {
            json_decref(listen);
            listen = NULL;
        }
    json_t *r = api_fields_row(p->id, portal_fields, ARRAY_SIZE(portal_fields), p);
    if (r && (json_object_set_new(r, "tag", json_integer((json_int_t)p->tag)) < 0 ||
              json_object_set_new(r, "listen", listen) < 0)) {
        json_decref(r);
        r = NULL;
    }
    return r;
}

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

/* The one decoder: apply the keys present in data (a body checked
 * against portal_fields, with its defaults on create) to p. 0 or -ENOMEM. */
static int portal_decode(json_t *data, struct icfg_portal *p)
{
    json_t *v;
    int rc = api_fields_decode(portal_fields, ARRAY_SIZE(portal_fields), data, p);
    if (rc == 0 && (v = json_object_get(data, "listen"))) {
        api_strv_clear(&p->listen);
        size_t i;
        json_t *item;
        json_array_foreach(v, i, item)
        {
            if (rc == 0)
                rc = api_strv_add(&p->listen, json_string_value(json_object_get(item, "ip")));
        }
    }
    return rc;
}

static int portal_decode_any(json_t *data, void *obj)
{
    return portal_decode(data, obj);
}

int icfg_portal_init(struct icfg_portal *p)
{
    memset(p, 0, sizeof(*p));
    return icfg_defaults(portal_fields, ARRAY_SIZE(portal_fields), portal_decode_any, p);
}

/* Address i of p: a literal of this host, not listed twice, not another
 * portal's, and (when new to the portal) bindable now: the listener opens
 * right after commit, and a portal that cannot listen is refused rather
 * than stored dead. Addresses the portal already has are left alone (they
 * are listening, or their failure was logged). The canonical form
 * replaces the given one. */
static void portal_check_ip(struct icfg_write *w, struct icfg_portal *p, size_t i)
{
    struct api_call *call = w->call;
    char f[160], field[64], canon[INET6_ADDRSTRLEN];
    int64_t other;
    snprintf(field, sizeof(field), "listen.%zu.ip", i);
    icfg_wfield(w, field, f, sizeof(f));
    if (!ip_is_local(p->listen.v[i], canon, sizeof(canon))) {
        api_verr(call, f, EINVAL, "Value error, %s is not an IP address of this system",
                 p->listen.v[i]);
        return;
    }
    if (icfg_str_set(&p->listen.v[i], canon) < 0)
        return; /* keeps the given text: refused below or by the UNIQUE column */
    for (size_t j = 0; j < i; j++)
        if (strcmp(p->listen.v[j], canon) == 0)
            api_verr(call, f, EINVAL, "IP %s is listed twice", canon);
    if (icfg_portal_find_ip(canon, p->id, &other) == 0) {
        api_verr(call, f, EEXIST, "IP %s already belongs to portal %lld", canon, (long long)other);
        return;
    }
    if (icfg_portal_has_ip(p->id, canon) != 0)
        icfg_listen_check(call, f, canon, icfg_global_listen_port());
}

int icfg_portal_save(struct icfg_write *w, struct icfg_portal *p, bool addresses)
{
    struct api_call *call = w->call;
    bool create = p->id == 0;
    for (size_t i = 0; i < p->listen.n; i++)
        portal_check_ip(w, p, i);
    if (api_has_verrs(call))
        return api_invalid(call);
    int err = create ? icfg_portal_insert(p) : icfg_portal_update(p, addresses);
    if (err < 0)
        return icfg_db_fail(call, err);
    /* A comment alone changes nothing that is served. */
    if (create || addresses)
        cfg_tx_changed(&w->tx, CFG_ISCSI_PORTAL, p->id, create ? CFG_CREATED : CFG_UPDATED);
    return 0;
}

/* Save p and answer with the stored row. 0 or -1 (error set). */
static int portal_save(struct icfg_write *w, struct icfg_portal *p, bool addresses, json_t **result)
{
    if (icfg_portal_save(w, p, addresses) < 0)
        return -1;
    struct icfg_portal stored;
    int err = icfg_portal_get(p->id, &stored);
    if (err == 0 && !(*result = portal_encode(&stored)))
        err = -ENOMEM;
    icfg_portal_clear(&stored);
    return err < 0 ? icfg_db_fail(w->call, err) : 0;
}

static int portal_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    struct icfg_portal p = {0};
    json_t *body;
    if (icfg_create_begin(&w, call, params, portal_fields, ARRAY_SIZE(portal_fields), &body) < 0)
        return -1;
    int rc = portal_decode(body, &p) < 0 ? api_error(call, ENOMEM, "out of memory")
                                         : portal_save(&w, &p, true, result);
    icfg_portal_clear(&p);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int portal_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    struct icfg_portal p;
    json_t *body;
    if (icfg_update_begin(&w, call, params, portal_fields, ARRAY_SIZE(portal_fields), &id, &body) <
        0)
        return -1;
    int rc = icfg_portal_get(id, &p);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Portal", id);
    else if (portal_decode(body, &p) < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    else
        rc = portal_save(&w, &p, json_object_get(body, "listen") != NULL, result);
    icfg_portal_clear(&p);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int portal_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    if (icfg_delete_begin(&w, call, params, &id) < 0)
        return -1;
    int rc = icfg_portal_delete(id);
    if (rc < 0) {
        rc = icfg_missing(call, rc, "Portal", id);
    } else {
        /* Tags are renumbered 1..n: every target's portal group tags
         * move, so the publisher rebuilds all views. */
        cfg_tx_changed(&w.tx, CFG_ISCSI_PORTAL, id, CFG_DELETED);
        *result = json_true();
    }
    return icfg_write_end(&w, rc);
}

static json_t *portal_encode_elem(const void *elem)
{
    return portal_encode(elem);
}

static int portal_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"tag", "tag"}};
    static const struct icfg_typed type = {&icfg_portal_table, portal_encode_elem};
    return icfg_query_typed(call, params, result, &type, hints, ARRAY_SIZE(hints));
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
    {"iscsi.portal.create", NULL, "Create an iSCSI portal", portal_create, API_ADMIN,
     API_ARGS(create_args)},
    {"iscsi.portal.update", NULL, "Change an iSCSI portal", portal_update, API_ADMIN,
     API_ARGS(update_args)},
    {"iscsi.portal.delete", NULL, "Delete an iSCSI portal (and the target groups using it)",
     portal_delete, API_ADMIN, API_ARGS(icfg_delete_args)},
    {"iscsi.portal.query", NULL, "List iSCSI portals", portal_query, API_READ,
     API_ARGS(icfg_query_args)},
    {"iscsi.portal.listen_ip_choices", NULL, "Addresses a portal may listen on",
     portal_listen_ip_choices, API_READ},
    {"iscsi.portal.get_instance", NULL, "One portal by id", portal_query_instance, API_READ,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_portal_methods_count = ARRAY_SIZE(icfg_portal_methods);
