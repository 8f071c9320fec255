/*
 * iscsi.target.create|update|delete|query|get_instance|validate_name: the
 * API of struct icfg_target (target_store.h holds its SQL): the field
 * table the dispatcher checks, the one decoder (target_decode: JSON →
 * struct), the one encoder (target_encode: struct → TrueNAS row), the
 * invariants a table cannot state (target_check), and handlers of one
 * shape: decode → check → one transaction (icfg_write) → publish (its
 * commit, control/cfgtx.h).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "core/log.h"
#include "core/util.h"
#include "iscsi/config/config_crud.h"
#include "iscsi/config/target_store.h"
#include "iscsi/iscsi_runtime.h"

/* ---- encoder: struct → the TrueNAS-shaped row ---- */

static json_t *group_encode(const struct icfg_target_group *g)
{
    return json_pack("{s:I, s:o, s:s, s:o}", "portal", (json_int_t)g->portal, "initiator",
                     icfg_int_or_null(g->has_initiator, g->initiator), "authmethod",
                     icfg_authmethod_names[g->authmethod], "auth",
                     icfg_int_or_null(g->has_auth, g->auth));
}

int icfg_parse_cidr(const char *s, struct iscsi_cidr *out)
{
    char addr[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(s, '/');
    size_t alen = slash ? (size_t)(slash - s) : strlen(s);
    if (alen == 0 || alen >= sizeof(addr))
        return -EINVAL;
    memcpy(addr, s, alen);
    addr[alen] = '\0';
    memset(out, 0, sizeof(*out));
    unsigned maxp;
    if (inet_pton(AF_INET, addr, out->addr) == 1) {
        out->family = AF_INET;
        maxp = 32;
    } else if (inet_pton(AF_INET6, addr, out->addr) == 1) {
        out->family = AF_INET6;
        maxp = 128;
    } else {
        return -EINVAL;
    }
    unsigned prefix = maxp;
    if (slash) {
        const char *p = slash + 1;
        if (!*p || strlen(p) > 3)
            return -EINVAL;
        prefix = 0;
        for (; *p; p++) {
            if (*p < '0' || *p > '9')
                return -EINVAL;
            prefix = prefix * 10 + (unsigned)(*p - '0');
        }
        if (prefix > maxp)
            return -EINVAL;
    }
    out->prefix = (uint8_t)prefix;
    /* Keep only the network bits so matching is a plain compare. */
    for (unsigned bit = prefix; bit < maxp; bit++)
        out->addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    return 0;
}

static const struct api_field group_fields[] = {
    {.name = "portal", .type = API_T_INT, .flags = API_REQUIRED},
    {.name = "initiator", .type = API_T_INT, .flags = API_NULLABLE},
    {.name = "authmethod", .type = API_T_ENUM, .choices = icfg_authmethod_names},
    {.name = "auth", .type = API_T_INT, .flags = API_NULLABLE},
};
static const struct api_field group_item = {
    .type = API_T_OBJECT, .fields = group_fields, .nfields = ARRAY_SIZE(group_fields)};
static const struct api_field network_item = {.type = API_T_STRING};
#define AT(member, codec) API_AT(struct icfg_target, member, codec)
_Static_assert(sizeof(enum icfg_target_mode) == sizeof(int), "api_codec_enum writes an int");
/* alias ("" is none), groups and iscsi_parameters have no codec:
 * target_decode and target_encode read and write them. */
static const struct api_field target_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = ICFG_TARGET_NAME_MAX,
     AT(name, api_codec_str)},
    {.name = "alias",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = ISCSI_ALIAS_MAX - 1,
     .def = "null"},
    {.name = "mode",
     .type = API_T_ENUM,
     .choices = icfg_target_mode_names,
     .def = "\"ISCSI\"",
     AT(mode, api_codec_enum)},
    {.name = "groups", .type = API_T_ARRAY, .items = &group_item, .def = "[]"},
    {.name = "auth_networks",
     .type = API_T_ARRAY,
     .items = &network_item,
     .def = "[]",
     AT(auth_networks, api_codec_strv)},
    {.name = "iscsi_parameters", .type = API_T_ANY, .flags = API_NULLABLE, .def = "null"},
    {.name = "defer", .type = API_T_BOOL},
};
#undef AT

/* ---- encoder: struct → the TrueNAS-shaped row ---- */

static json_t *groups_encode(const struct icfg_target *t)
{
    json_t *groups = json_array();
    for (size_t i = 0; groups && i < t->n_groups; i++)
        if (json_array_append_new(groups, group_encode(&t->groups[i])) < 0) {
            json_decref(groups);
            groups = NULL;
        }
    return groups;
}

/* The row iscsi.target.* answers with: the table's fields and the rest.
 * A new reference, or NULL (ENOMEM). */
static json_t *target_encode(const struct icfg_target *t)
{
    json_t *r = api_fields_row(t->id, target_fields, ARRAY_SIZE(target_fields), t);
    if (r && (json_object_set_new(r, "alias", icfg_str_or_null(t->alias)) < 0 ||
              json_object_set_new(r, "groups", groups_encode(t)) < 0 ||
              json_object_set_new(r, "rel_tgt_id", json_integer((json_int_t)t->rel_tgt_id)) < 0 ||
              json_object_set_new(r, "iscsi_parameters", json_null()) < 0)) {
        json_decref(r);
        r = NULL;
    }
    return r;
}

/* ---- decoder: a checked JSON body → struct ---- */

/* A group as given: initiator and auth null or absent are none, a missing
 * authmethod is NONE. */
static void group_decode(json_t *g, struct icfg_target_group *out)
{
    json_t *ini = json_object_get(g, "initiator"), *auth = json_object_get(g, "auth");
    memset(out, 0, sizeof(*out));
    out->portal = json_integer_value(json_object_get(g, "portal"));
    out->has_initiator = json_is_integer(ini);
    out->initiator = json_integer_value(ini);
    out->authmethod = icfg_authmethod_parse(json_string_value(json_object_get(g, "authmethod")));
    out->has_auth = json_is_integer(auth);
    out->auth = json_integer_value(auth);
}

static int groups_decode(json_t *groups, struct icfg_target *t)
{
    size_t n = json_array_size(groups);
    struct icfg_target_group *g = calloc(n ? n : 1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        group_decode(json_array_get(groups, i), &g[i]);
    int rc = icfg_target_set_groups(t, g, n);
    free(g);
    return rc;
}

/*
 * The one decoder: apply the keys present in data (a body the dispatcher
 * checked against target_fields: complete with its defaults on create,
 * partial on update) to t. A given alias "" is none, as it is stored.
 * 0 or -ENOMEM.
 */
static int target_decode(json_t *data, struct icfg_target *t)
{
    json_t *v;
    int rc = api_fields_decode(target_fields, ARRAY_SIZE(target_fields), data, t);
    if (rc == 0 && (v = json_object_get(data, "alias")))
        rc = icfg_str_set(&t->alias, json_string_length(v) ? json_string_value(v) : NULL);
    if (rc == 0 && (v = json_object_get(data, "groups")))
        rc = groups_decode(v, t);
    if ((v = json_object_get(data, "iscsi_parameters")))
        t->iscsi_parameters = !json_is_null(v);
    return rc;
}

static int target_decode_any(json_t *data, void *obj)
{
    return target_decode(data, obj);
}

int icfg_target_init(struct icfg_target *t)
{
    memset(t, 0, sizeof(*t));
    return icfg_defaults(target_fields, ARRAY_SIZE(target_fields), target_decode_any, t);
}

int iscsi_target_decode(struct api_call *call, json_t *body, bool partial, struct icfg_target *t)
{
    if (api_validate_object(call, api_call_method(call), body, target_fields,
                            ARRAY_SIZE(target_fields), partial ? API_PARTIAL : 0) < 0)
        return api_invalid(call);
    return target_decode(body, t) < 0 ? api_error(call, ENOMEM, "out of memory") : 0;
}

/* ---- invariants ---- */

static bool name_chars_ok(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.' ||
              *s == ':'))
            return false;
    return true;
}

/* The TrueNAS validate_name rules; returns an error text or NULL. */
static const char *name_problem(const char *name, int64_t self_id, char *buf, size_t len)
{
    if (!name[0])
        return "Target name is required";
    if (strlen(name) > ICFG_TARGET_NAME_MAX)
        return "Target name must be at most 120 characters";
    if (!name_chars_ok(name))
        return "Lowercase alphanumeric characters plus dot (.), dash (-), and colon (:) are "
               "allowed.";
    char *basename = icfg_global_basename();
    size_t iqn_len = strlen(basename ? basename : "") + 1 + strlen(name);
    free(basename);
    if (iqn_len >= ISCSI_NAME_MAX) {
        snprintf(buf, len, "The target IQN (basename:name) must be at most %d characters",
                 ISCSI_NAME_MAX - 1);
        return buf;
    }
    int64_t other;
    if (icfg_target_find_name(name, self_id, &other) == 0)
        return "Target name already exists";
    return NULL;
}

/* A given alias has no double quote, is not the reserved word, and is
 * unique among the other targets. */
static void target_check_alias(struct icfg_write *w, const struct icfg_target *t)
{
    struct api_call *call = w->call;
    char f[160];
    int64_t other;

    if (!t->alias)
        return;
    icfg_wfield(w, "alias", f, sizeof(f));
    if (strchr(t->alias, '"'))
        api_verr(call, f, EINVAL, "Double quotes are not allowed");
    else if (strcmp(t->alias, "target") == 0)
        api_verr(call, f, EINVAL, "target is a reserved word");
    else if (icfg_target_find_alias(t->alias, t->id, &other) == 0)
        api_verr(call, f, EEXIST, "Alias already exists");
}

/* Group i's auth: CHAP methods need one; a given tag exists and, for
 * CHAP_MUTUAL, has a peer user. */
static void target_check_group_auth(struct icfg_write *w, const struct icfg_target_group *g,
                                    size_t i)
{
    struct api_call *call = w->call;
    char f[160], fld[64];

    snprintf(fld, sizeof(fld), "groups.%zu.auth", i);
    if (g->authmethod != ICFG_AUTH_NONE && !g->has_auth) {
        api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), EINVAL,
                 "Authentication group is required for CHAP and CHAP Mutual");
        return;
    }
    if (!g->has_auth)
        return;
    if (icfg_auth_tag_exists(g->auth, false) < 0)
        api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), ENOENT,
                 "Authentication group %lld does not exist", (long long)g->auth);
    else if (g->authmethod == ICFG_AUTH_CHAP_MUTUAL && icfg_auth_tag_exists(g->auth, true) < 0)
        api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), EINVAL,
                 "Authentication group %lld does not support CHAP Mutual", (long long)g->auth);
}

/* Group i: an existing portal not used by an earlier group, an existing
 * initiator group, a usable auth. */
static void target_check_group(struct icfg_write *w, const struct icfg_target *t, size_t i)
{
    struct api_call *call = w->call;
    const struct icfg_target_group *g = &t->groups[i];
    char f[160], fld[64];

    snprintf(fld, sizeof(fld), "groups.%zu.portal", i);
    if (icfg_portal_exists(g->portal) < 0)
        api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), ENOENT, "Portal %lld does not exist",
                 (long long)g->portal);
    for (size_t j = 0; j < i; j++)
        if (t->groups[j].portal == g->portal)
            api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), EINVAL,
                     "Portal %lld cannot be duplicated on a target", (long long)g->portal);
    snprintf(fld, sizeof(fld), "groups.%zu.initiator", i);
    if (g->has_initiator && icfg_initiator_exists(g->initiator) < 0)
        api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), ENOENT,
                 "Initiator group %lld does not exist", (long long)g->initiator);
    target_check_group_auth(w, g, i);
}

/* The invariants of a complete target (t->id 0 on create), in TrueNAS's
 * order; field errors are collected on call. DB locked. */
static void target_check(struct icfg_write *w, const struct icfg_target *t)
{
    struct api_call *call = w->call;
    char f[160], fld[64], buf[128];
    const char *problem = name_problem(t->name, t->id, buf, sizeof(buf));

    if (problem)
        api_verr(call, icfg_wfield(w, "name", f, sizeof(f)),
                 strcmp(problem, "Target name already exists") == 0 ? EEXIST : EINVAL, "%s",
                 problem);
    target_check_alias(w, t);
    if (t->mode != ICFG_MODE_ISCSI)
        api_verr(call, icfg_wfield(w, "mode", f, sizeof(f)), EINVAL,
                 "Fibre Channel is not supported by blockd; mode must be ISCSI");
    if (t->iscsi_parameters)
        api_verr(call, icfg_wfield(w, "iscsi_parameters", f, sizeof(f)), EINVAL,
                 "Per-target iSCSI parameters are not supported by blockd; use null");
    for (size_t i = 0; i < t->n_groups; i++)
        target_check_group(w, t, i);
    for (size_t i = 0; i < t->auth_networks.n; i++) {
        struct iscsi_cidr c;
        if (icfg_parse_cidr(t->auth_networks.v[i], &c) < 0) {
            snprintf(fld, sizeof(fld), "auth_networks.%zu", i);
            api_verr(call, icfg_wfield(w, fld, f, sizeof(f)), EINVAL,
                     "Value error, %s is not a valid IP network", t->auth_networks.v[i]);
        }
    }
}

/* ---- handlers: decode → check → one transaction → publish ---- */

/* The stored target id encoded as the call's result. 0 or -1 (error set). */
static int target_result(struct api_call *call, int64_t id, json_t **result)
{
    struct icfg_target t;
    int rc = icfg_target_get(id, &t);
    if (rc == 0 && !(*result = target_encode(&t)))
        rc = -ENOMEM;
    icfg_target_clear(&t);
    return rc < 0 ? icfg_db_fail(call, rc) : 0;
}

int icfg_target_save(struct icfg_write *w, struct icfg_target *t)
{
    struct api_call *call = w->call;
    bool create = t->id == 0;
    target_check(w, t);
    if (api_has_verrs(call))
        return api_invalid(call);
    int err = create ? icfg_target_insert(t) : icfg_target_update(t);
    if (err == -ENOSPC)
        return api_error(call, ENOSPC, "No free relative target id (at most %d targets)",
                         ICFG_REL_TGT_ID_MAX);
    if (err < 0)
        return icfg_db_fail(call, err);
    cfg_tx_changed(&w->tx, CFG_ISCSI_TARGET, t->id, create ? CFG_CREATED : CFG_UPDATED);
    return 0;
}

/* Save t and answer with the stored row. 0 or -1 (error set). */
static int target_save(struct icfg_write *w, struct icfg_target *t, json_t **result)
{
    return icfg_target_save(w, t) < 0 ? -1 : target_result(w->call, t->id, result);
}

static int target_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    struct icfg_target t = {0};
    json_t *body;
    if (icfg_create_begin(&w, call, params, target_fields, ARRAY_SIZE(target_fields), &body) < 0)
        return -1;
    int rc = target_decode(body, &t) < 0 ? api_error(call, ENOMEM, "out of memory")
                                         : target_save(&w, &t, result);
    icfg_target_clear(&t);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int target_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    struct icfg_target t;
    json_t *body;
    if (icfg_update_begin(&w, call, params, target_fields, ARRAY_SIZE(target_fields), &id, &body) <
        0)
        return -1;
    int rc = icfg_target_get(id, &t);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Target", id);
    else if (target_decode(body, &t) < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    else
        rc = target_save(&w, &t, result);
    icfg_target_clear(&t);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

int icfg_target_check_sessions(struct icfg_write *w, int64_t target_id, bool force)
{
    struct icfg_target t;
    int rc = icfg_target_get(target_id, &t);
    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return icfg_db_fail(w->call, rc);
    char *basename = icfg_global_basename();
    char iqn[ISCSI_NAME_MAX * 2];
    snprintf(iqn, sizeof(iqn), "%s:%s", basename ? basename : "", t.name);
    free(basename);
    unsigned n = iscsi_sessions_count_target(iqn);
    if (n > 0 && !force)
        rc = api_error(w->call, EBUSY, "Target %s is in use", t.name);
    else if (n > 0)
        /* The sessions are closed when the deletion is applied
         * (immediately, or at service.reload when deferred). */
        log_info("iscsi config: deleting target %s with %u session(s) (force)", iqn, n);
    icfg_target_clear(&t);
    return rc;
}

int icfg_target_remove(struct icfg_write *w, int64_t id, bool force, bool delete_extents)
{
    int64_t *extents = NULL;
    size_t n = 0;
    int rc = icfg_target_check_sessions(w, id, force);
    if (rc == 0 && delete_extents && (rc = icfg_target_extents(id, &extents, &n)) < 0)
        rc = icfg_db_fail(w->call, rc);
    if (rc == 0)
        rc = icfg_targetextent_remove(w, "target_id", id);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = icfg_extent_delete_row(w, extents[i], false, force);
    free(extents);
    int err = rc == 0 ? icfg_target_delete(id) : 0;
    if (err < 0)
        return icfg_db_fail(w->call, err);
    if (rc == 0)
        cfg_tx_changed(&w->tx, CFG_ISCSI_TARGET, id, CFG_DELETED);
    return rc;
}

static int target_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    bool force, delete_extents;
    struct icfg_write w;
    if (icfg_delete_begin_opts(&w, call, params, &id, "force", &force, "delete_extents",
                               &delete_extents) < 0)
        return -1;
    int rc = icfg_target_exists(id);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Target", id);
    else
        rc = icfg_target_remove(&w, id, force, delete_extents);
    if (rc == 0)
        *result = json_true();
    return icfg_write_end(&w, rc);
}

static json_t *target_encode_elem(const void *elem)
{
    return target_encode(elem);
}

static int target_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"name", "name"}, {"alias", "alias"}};
    static const struct icfg_typed type = {&icfg_target_table, target_encode_elem};
    return icfg_query_typed(call, params, result, &type, hints, ARRAY_SIZE(hints));
}

static int target_validate_name(struct api_call *call, json_t *params, json_t **result)
{
    /* Both arguments are checked here, not by type in validate_name_args:
     * their errors are reported together. */
    json_t *name = api_param(params, 0), *existing = api_param(params, 1);
    char f[128];
    if (!json_is_string(name))
        api_verr(call, icfg_field(call, "name", f, sizeof(f)), EINVAL,
                 "Input should be a valid string");
    if (existing && !json_is_integer(existing))
        api_verr(call, icfg_field(call, "existing_id", f, sizeof(f)), EINVAL,
                 "Input should be a valid integer");
    if (api_has_verrs(call))
        return api_invalid(call);
    char buf[128];
    db_lock();
    const char *p =
        name_problem(json_string_value(name), existing ? (int64_t)json_integer_value(existing) : 0,
                     buf, sizeof(buf));
    *result = p ? json_string(p) : json_null();
    db_unlock();
    return 0;
}

static int target_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, target_query, "Target");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(target_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(target_fields)};
static const struct api_arg delete_args[] = {
    ICFG_ARG_ID, ICFG_ARG_BOOL("force"), ICFG_ARG_BOOL("delete_extents"), ICFG_ARG_BOOL("defer")};
static const struct api_arg validate_name_args[] = {
    {.name = "name", .type = API_T_ANY},
    {.name = "existing_id", .type = API_T_ANY, .flags = API_ARG_OPTIONAL}};

const struct api_method icfg_target_methods[] = {
    {"iscsi.target.create", NULL,
     "Create an iSCSI target (IQN = basename:name); live when the call returns", target_create,
     API_SHARE, API_ARGS(create_args)},
    {"iscsi.target.update", NULL, "Change an iSCSI target", target_update, API_SHARE,
     API_ARGS(update_args)},
    {"iscsi.target.delete", NULL,
     "Delete an iSCSI target (EBUSY while sessions are logged in, unless force)", target_delete,
     API_SHARE, API_ARGS(delete_args)},
    {"iscsi.target.query", NULL, "List iSCSI targets", target_query, API_READ,
     API_ARGS(icfg_query_args)},
    {"iscsi.target.get_instance", NULL, "One target by id", target_query_instance, API_READ,
     API_ARGS(icfg_get_instance_args)},
    {"iscsi.target.validate_name", NULL, "Check a target name: null when valid, else the reason",
     target_validate_name, API_READ, API_ARGS(validate_name_args)},
};
const size_t icfg_target_methods_count = ARRAY_SIZE(icfg_target_methods);
