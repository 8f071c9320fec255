/* iscsi.target.create|update|delete|query|validate_name. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/db.h"
#include "core/log.h"
#include "core/util.h"
#include "config/iscsi/config_crud.h"
#include "iscsi/iscsi_runtime.h"

/* Every rel_tgt_id below this is in use (DB lock). Reset to 1 whenever a
 * transaction rolls back or a target is deleted below it. */
static int64_t rel_hint = 1;

void icfg_target_reset_hint(int64_t rel_tgt_id)
{
    if (rel_tgt_id < rel_hint)
        rel_hint = rel_tgt_id < 1 ? 1 : rel_tgt_id;
}

static json_t *groups_of(int64_t target_id)
{
    json_t *groups = json_array();
    sqlite3_stmt *st;
    if (icfg_prepare("SELECT portal_id, initiator_id, authmethod, auth_tag FROM "
                     "iscsi_target_group WHERE target_id = ? ORDER BY id",
                     &st) < 0)
        return groups;
    sqlite3_bind_int64(st, 1, target_id);
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *g = json_object();
        json_object_set_new(g, "portal", json_integer(sqlite3_column_int64(st, 0)));
        json_object_set_new(g, "initiator", icfg_col_int_or_null(st, 1));
        json_object_set_new(g, "authmethod", json_string(icfg_col_text(st, 2)));
        json_object_set_new(g, "auth", icfg_col_int_or_null(st, 3));
        json_array_append_new(groups, g);
    }
    icfg_finalize(st);
    return groups;
}

json_t *icfg_target_row(sqlite3_stmt *st)
{
    int64_t id = sqlite3_column_int64(st, 0);
    json_t *row = json_object();
    json_object_set_new(row, "id", json_integer(id));
    json_object_set_new(row, "name", json_string(icfg_col_text(st, 1)));
    json_object_set_new(row, "alias", icfg_col_text_or_null(st, 2));
    json_object_set_new(row, "mode", json_string(icfg_col_text(st, 3)));
    json_object_set_new(row, "groups", groups_of(id));
    json_object_set_new(row, "auth_networks", icfg_col_json(st, 4));
    json_object_set_new(row, "rel_tgt_id", json_integer(sqlite3_column_int64(st, 5)));
    json_object_set_new(row, "iscsi_parameters", json_null());
    return row;
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

static const char *const auth_methods_enum[] = {"NONE", "CHAP", "CHAP_MUTUAL", NULL};
static const char *const mode_enum[] = {"ISCSI", "FC", "BOTH", NULL};
static const struct api_field group_fields[] = {
    {.name = "portal", .type = API_T_INT, .flags = API_REQUIRED},
    {.name = "initiator", .type = API_T_INT, .flags = API_NULLABLE},
    {.name = "authmethod", .type = API_T_ENUM, .choices = auth_methods_enum},
    {.name = "auth", .type = API_T_INT, .flags = API_NULLABLE},
};
static const struct api_field group_item = {
    .type = API_T_OBJECT, .fields = group_fields, .nfields = ARRAY_SIZE(group_fields)};
static const struct api_field network_item = {.type = API_T_STRING};
static const struct api_field target_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = ICFG_TARGET_NAME_MAX},
    {.name = "alias",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = ISCSI_ALIAS_MAX - 1,
     .def = "null"},
    {.name = "mode", .type = API_T_ENUM, .choices = mode_enum, .def = "\"ISCSI\""},
    {.name = "groups", .type = API_T_ARRAY, .items = &group_item, .def = "[]"},
    {.name = "auth_networks", .type = API_T_ARRAY, .items = &network_item, .def = "[]"},
    {.name = "iscsi_parameters", .type = API_T_ANY, .flags = API_NULLABLE, .def = "null"},
    {.name = "defer", .type = API_T_BOOL},
};

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
    if (icfg_int(&other, "SELECT id FROM iscsi_target WHERE name = ? AND id != ?", "ti", name,
                 self_id) == 0)
        return "Target name already exists";
    return NULL;
}

/* The alias: "" is stored as NULL; a given one has no double quote, is
 * not the reserved word, and is unique among the other targets. */
static void target_check_alias(struct api_call *call, json_t *d, int64_t self_id)
{
    json_t *alias = json_object_get(d, "alias");
    const char *a;
    char f[160];
    int64_t other;

    if (json_is_string(alias) && json_string_length(alias) == 0)
        json_object_set_new(d, "alias", json_null()); /* "" is stored as NULL */
    alias = json_object_get(d, "alias");
    if (!json_is_string(alias))
        return;
    a = json_string_value(alias);
    icfg_field(call, "alias", f, sizeof(f));
    if (strchr(a, '"'))
        api_verr(call, f, EINVAL, "Double quotes are not allowed");
    else if (strcmp(a, "target") == 0)
        api_verr(call, f, EINVAL, "target is a reserved word");
    else if (icfg_int(&other, "SELECT id FROM iscsi_target WHERE alias = ? AND id != ?", "ti", a,
                      self_id) == 0)
        api_verr(call, f, EEXIST, "Alias already exists");
}

/* Group i's auth: CHAP methods need one; a given tag exists and, for
 * CHAP_MUTUAL, has a peer user. */
static void target_check_group_auth(struct api_call *call, json_t *g, size_t i)
{
    json_t *auth = json_object_get(g, "auth");
    const char *method = json_string_value(json_object_get(g, "authmethod"));
    char f[160], fld[64];
    int64_t found, tag;

    snprintf(fld, sizeof(fld), "groups.%zu.auth", i);
    if (strcmp(method, "NONE") != 0 && !json_is_integer(auth)) {
        api_verr(call, icfg_field(call, fld, f, sizeof(f)), EINVAL,
                 "Authentication group is required for CHAP and CHAP Mutual");
        return;
    }
    if (!json_is_integer(auth))
        return;
    tag = json_integer_value(auth);
    if (icfg_int(&found, "SELECT id FROM iscsi_auth WHERE tag = ? LIMIT 1", "i", tag) < 0)
        api_verr(call, icfg_field(call, fld, f, sizeof(f)), ENOENT,
                 "Authentication group %lld does not exist", (long long)tag);
    else if (strcmp(method, "CHAP_MUTUAL") == 0 &&
             icfg_int(&found, "SELECT id FROM iscsi_auth WHERE tag = ? AND peeruser != '' LIMIT 1",
                      "i", tag) < 0)
        api_verr(call, icfg_field(call, fld, f, sizeof(f)), EINVAL,
                 "Authentication group %lld does not support CHAP Mutual", (long long)tag);
}

/* Group i of groups, with its defaults filled in: an existing portal not
 * used by an earlier group, an existing initiator group, a usable auth. */
static void target_check_group(struct api_call *call, json_t *groups, size_t i)
{
    json_t *g = json_array_get(groups, i), *ini;
    char f[160], fld[64];
    int64_t portal, found;

    if (!json_object_get(g, "authmethod"))
        json_object_set_new(g, "authmethod", json_string("NONE"));
    if (!json_object_get(g, "initiator"))
        json_object_set_new(g, "initiator", json_null());
    if (!json_object_get(g, "auth"))
        json_object_set_new(g, "auth", json_null());
    portal = json_integer_value(json_object_get(g, "portal"));
    ini = json_object_get(g, "initiator");
    snprintf(fld, sizeof(fld), "groups.%zu.portal", i);
    if (icfg_int(&found, "SELECT id FROM iscsi_portal WHERE id = ?", "i", portal) < 0)
        api_verr(call, icfg_field(call, fld, f, sizeof(f)), ENOENT, "Portal %lld does not exist",
                 (long long)portal);
    for (size_t j = 0; j < i; j++)
        if (json_integer_value(json_object_get(json_array_get(groups, j), "portal")) == portal)
            api_verr(call, icfg_field(call, fld, f, sizeof(f)), EINVAL,
                     "Portal %lld cannot be duplicated on a target", (long long)portal);
    snprintf(fld, sizeof(fld), "groups.%zu.initiator", i);
    if (json_is_integer(ini) && icfg_int(&found, "SELECT id FROM iscsi_initiator WHERE id = ?", "i",
                                         (int64_t)json_integer_value(ini)) < 0)
        api_verr(call, icfg_field(call, fld, f, sizeof(f)), ENOENT,
                 "Initiator group %lld does not exist", (long long)json_integer_value(ini));
    target_check_group_auth(call, g, i);
}

/* Checks of a complete (defaults applied or merged) target object, in
 * TrueNAS's order; field errors are collected on call. */
static void target_check(struct api_call *call, json_t *d, int64_t self_id)
{
    char f[160], fld[64], buf[128];
    const char *name = json_string_value(json_object_get(d, "name"));
    const char *problem = name_problem(name, self_id, buf, sizeof(buf));
    json_t *params = json_object_get(d, "iscsi_parameters"), *n;
    size_t i;

    if (problem)
        api_verr(call, icfg_field(call, "name", f, sizeof(f)),
                 strcmp(problem, "Target name already exists") == 0 ? EEXIST : EINVAL, "%s",
                 problem);
    target_check_alias(call, d, self_id);
    if (strcmp(json_string_value(json_object_get(d, "mode")), "ISCSI") != 0)
        api_verr(call, icfg_field(call, "mode", f, sizeof(f)), EINVAL,
                 "Fibre Channel is not supported by blockd; mode must be ISCSI");
    if (params && !json_is_null(params))
        api_verr(call, icfg_field(call, "iscsi_parameters", f, sizeof(f)), EINVAL,
                 "Per-target iSCSI parameters are not supported by blockd; use null");
    for (i = 0; i < json_array_size(json_object_get(d, "groups")); i++)
        target_check_group(call, json_object_get(d, "groups"), i);
    json_array_foreach(json_object_get(d, "auth_networks"), i, n)
    {
        struct iscsi_cidr c;
        if (icfg_parse_cidr(json_string_value(n), &c) < 0) {
            snprintf(fld, sizeof(fld), "auth_networks.%zu", i);
            api_verr(call, icfg_field(call, fld, f, sizeof(f)), EINVAL,
                     "Value error, %s is not a valid IP network", json_string_value(n));
        }
    }
}

static int store_groups(int64_t id, json_t *groups)
{
    int rc = icfg_run("DELETE FROM iscsi_target_group WHERE target_id = ?", "i", id);
    sqlite3_stmt *st;
    if (rc < 0 || (rc = icfg_prepare("INSERT INTO iscsi_target_group (target_id, portal_id, "
                                     "initiator_id, authmethod, auth_tag) VALUES (?, ?, ?, ?, ?)",
                                     &st)) < 0)
        return rc;
    size_t i;
    json_t *g;
    json_array_foreach(groups, i, g)
    {
        json_t *ini = json_object_get(g, "initiator"), *auth = json_object_get(g, "auth");
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, id);
        sqlite3_bind_int64(st, 2, json_integer_value(json_object_get(g, "portal")));
        if (json_is_integer(ini))
            sqlite3_bind_int64(st, 3, json_integer_value(ini));
        else
            sqlite3_bind_null(st, 3);
        sqlite3_bind_text(st, 4, json_string_value(json_object_get(g, "authmethod")), -1,
                          SQLITE_TRANSIENT);
        if (json_is_integer(auth))
            sqlite3_bind_int64(st, 5, json_integer_value(auth));
        else
            sqlite3_bind_null(st, 5);
        if (sqlite3_step(st) != SQLITE_DONE) {
            rc = -EIO;
            break;
        }
    }
    icfg_finalize(st);
    return rc;
}

static int target_store(struct api_call *call, json_t *d, int64_t id, int64_t *out_id)
{
    char *nets = json_dumps(json_object_get(d, "auth_networks"), JSON_COMPACT);
    if (!nets)
        return api_error(call, ENOMEM, "out of memory");
    json_t *alias = json_object_get(d, "alias");
    const char *name = json_string_value(json_object_get(d, "name"));
    const char *mode = json_string_value(json_object_get(d, "mode"));
    int err;
    if (id == 0) {
        /* rel_tgt_id: the lowest free value in 1..31999, allocated inside
         * this transaction (BEGIN IMMEDIATE serializes writers). The search
         * starts at a hint below which every value is known to be taken,
         * so a create costs O(log n), not a scan of every target. */
        int64_t rel = 0;
        err = icfg_int(&rel,
                       "SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM iscsi_target WHERE rel_tgt_id "
                       "= ?1) THEN ?1 ELSE (SELECT t.rel_tgt_id + 1 FROM iscsi_target t WHERE "
                       "t.rel_tgt_id >= ?1 AND t.rel_tgt_id + 1 <= ?2 AND NOT EXISTS (SELECT 1 "
                       "FROM iscsi_target u WHERE u.rel_tgt_id = t.rel_tgt_id + 1) ORDER BY "
                       "t.rel_tgt_id LIMIT 1) END",
                       "ii", rel_hint, (int64_t)ICFG_REL_TGT_ID_MAX);
        if (err == 0 && rel > ICFG_REL_TGT_ID_MAX)
            err = -ENOENT;
        if (err == 0)
            rel_hint = rel + 1;
        if (err == -ENOENT) {
            free(nets);
            return api_error(call, ENOSPC, "No free relative target id (at most %d targets)",
                             ICFG_REL_TGT_ID_MAX);
        }
        if (err == 0)
            err = icfg_run("INSERT INTO iscsi_target (name, alias, mode, auth_networks, "
                           "rel_tgt_id) VALUES (?, ?, ?, ?, ?)",
                           "tttti", name, json_string_value(alias), mode, nets, rel);
        *out_id = sqlite3_last_insert_rowid(db_handle());
    } else {
        err = icfg_run("UPDATE iscsi_target SET name = ?, alias = ?, mode = ?, auth_networks = ? "
                       "WHERE id = ?",
                       "tttti", name, json_string_value(alias), mode, nets, id);
        *out_id = id;
    }
    free(nets);
    if (err == 0)
        err = store_groups(*out_id, json_object_get(d, "groups"));
    return err < 0 ? icfg_db_fail(call, err) : 0;
}

#define TARGET_BY_ID ICFG_TARGET_SELECT " WHERE id = ?"

static int target_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    json_t *data;
    if (icfg_create_begin(&w, call, params, target_fields, ARRAY_SIZE(target_fields), &data) < 0)
        return -1;
    int rc = 0;
    target_check(call, data, 0);
    int64_t id = 0;
    if (api_has_verrs(call))
        rc = api_invalid(call);
    else
        rc = target_store(call, data, 0, &id);
    if (rc == 0) {
        cfg_tx_changed(&w.tx, CFG_ISCSI_TARGET, id, CFG_CREATED);
        *result = icfg_get_by_id(icfg_target_row, TARGET_BY_ID, id);
    }
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int target_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    json_t *data;
    if (icfg_update_begin(&w, call, params, target_fields, ARRAY_SIZE(target_fields), &id, &data) <
        0)
        return -1;
    int rc = 0;
    json_t *merged = icfg_get_by_id(icfg_target_row, TARGET_BY_ID, id);
    if (!merged) {
        rc = api_error(call, ENOENT, "Target %lld does not exist", (long long)id);
    } else {
        json_object_update(merged, data);
        target_check(call, merged, id);
        if (api_has_verrs(call))
            rc = api_invalid(call);
        else {
            int64_t out;
            rc = target_store(call, merged, id, &out);
        }
        if (rc == 0) {
            icfg_changed_target(&w, id);
            *result = icfg_get_by_id(icfg_target_row, TARGET_BY_ID, id);
        }
    }
    json_decref(merged);
    json_decref(data);
    return icfg_write_end(&w, rc);
}

int icfg_target_check_sessions(struct icfg_write *w, int64_t target_id, bool force)
{
    sqlite3_stmt *st;
    if (icfg_prepare("SELECT name FROM iscsi_target WHERE id = ?", &st) < 0)
        return icfg_db_fail(w->call, -EIO);
    sqlite3_bind_int64(st, 1, target_id);
    int rc = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = icfg_col_text(st, 0);
        char *basename = icfg_global_basename();
        char iqn[ISCSI_NAME_MAX * 2];
        snprintf(iqn, sizeof(iqn), "%s:%s", basename ? basename : "", name);
        free(basename);
        unsigned n = iscsi_sessions_count_target(iqn);
        if (n > 0 && !force)
            rc = api_error(w->call, EBUSY, "Target %s is in use", name);
        else if (n > 0)
            /* The sessions are closed when the deletion is applied
             * (immediately, or at service.reload when deferred). */
            log_info("iscsi config: deleting target %s with %u session(s) (force)", iqn, n);
    }
    icfg_finalize(st);
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
    int64_t found;
    if (icfg_int(&found, "SELECT id FROM iscsi_target WHERE id = ?", "i", id) < 0)
        return icfg_write_end(&w,
                              api_error(call, ENOENT, "Target %lld does not exist", (long long)id));
    int rc = icfg_target_check_sessions(&w, id, force);
    json_t *extents = NULL;
    if (rc == 0 && delete_extents)
        extents = icfg_rows(icfg_extent_row_internal,
                            ICFG_EXTENT_SELECT " WHERE id IN (SELECT extent_id FROM "
                                               "iscsi_targetextent WHERE target_id = ?)",
                            "i", id);
    if (rc == 0)
        rc = icfg_targetextent_delete_where(&w, "target_id = ?", id);
    if (rc == 0 && extents) {
        size_t i;
        json_t *e;
        json_array_foreach(extents, i, e)
        {
            rc = icfg_extent_delete_row(&w, json_integer_value(json_object_get(e, "id")), false,
                                        force);
            if (rc < 0)
                break;
        }
    }
    json_decref(extents);
    int64_t rel;
    if (rc == 0 && icfg_int(&rel, "SELECT rel_tgt_id FROM iscsi_target WHERE id = ?", "i", id) == 0)
        icfg_target_reset_hint(rel);
    if (rc == 0) {
        int err = icfg_run("DELETE FROM iscsi_target_group WHERE target_id = ?", "i", id);
        if (err == 0)
            err = icfg_run("DELETE FROM iscsi_target WHERE id = ?", "i", id);
        if (err < 0)
            rc = icfg_db_fail(call, err);
    }
    if (rc == 0) {
        cfg_tx_changed(&w.tx, CFG_ISCSI_TARGET, id, CFG_DELETED);
        *result = json_true();
    }
    return icfg_write_end(&w, rc);
}

static int target_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"name", "name"}, {"alias", "alias"}};
    return icfg_query_hinted(call, params, result, icfg_target_row, ICFG_TARGET_SELECT, hints,
                             ARRAY_SIZE(hints));
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
     "Create an iSCSI target (IQN = basename:name); live when the call returns", target_create, 0,
     API_ARGS(create_args)},
    {"iscsi.target.update", NULL, "Change an iSCSI target", target_update, 0,
     API_ARGS(update_args)},
    {"iscsi.target.delete", NULL,
     "Delete an iSCSI target (EBUSY while sessions are logged in, unless force)", target_delete, 0,
     API_ARGS(delete_args)},
    {"iscsi.target.query", NULL, "List iSCSI targets", target_query, 0, API_ARGS(icfg_query_args)},
    {"iscsi.target.get_instance", NULL, "One target by id", target_query_instance, 0,
     API_ARGS(icfg_get_instance_args)},
    {"iscsi.target.validate_name", NULL, "Check a target name: null when valid, else the reason",
     target_validate_name, 0, API_ARGS(validate_name_args)},
};
const size_t icfg_target_methods_count = ARRAY_SIZE(icfg_target_methods);
