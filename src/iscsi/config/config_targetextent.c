/*
 * iscsi.targetextent.create|update|delete|query|get_instance: the API of
 * struct icfg_targetextent, the LUN mappings (targetextent_store.h holds
 * their SQL). An extent maps to one target only; LUN ids are unique per
 * target. The field table the dispatcher checks, the one decoder
 * (te_decode), the one encoder (te_encode), the invariants (te_check) and
 * handlers of one shape: decode → check → one transaction → publish.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_crud.h"
#include "iscsi/config/config_internal.h"
#include "core/util.h"

/* lunid (nullable: the lowest free LUN) is kept as has + value: no codec,
 * te_decode and te_encode read and write it. */
static const struct api_field te_fields[] = {
    {.name = "target",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(struct icfg_targetextent, target, api_codec_i64)},
    {.name = "extent",
     .type = API_T_INT,
     .flags = API_REQUIRED,
     API_AT(struct icfg_targetextent, extent, api_codec_i64)},
    {.name = "lunid",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = ICFG_LUN_MAX,
     .def = "null"},
    {.name = "defer", .type = API_T_BOOL},
};

/* The row iscsi.targetextent.* answers with. New reference or NULL. */
static json_t *te_encode(const struct icfg_targetextent *te)
{
    json_t *r = api_fields_row(te->id, te_fields, ARRAY_SIZE(te_fields), te);
    if (r && json_object_set_new(r, "lunid", json_integer((json_int_t)te->lunid)) < 0) {
        json_decref(r);
        r = NULL;
    }
    return r;
}

/* The one decoder: apply the keys present in data (a body checked
 * against te_fields, with its defaults on create) to te. */
static void te_decode(json_t *data, struct icfg_targetextent *te)
{
    json_t *v;
    (void)api_fields_decode(te_fields, ARRAY_SIZE(te_fields), data, te); /* no allocation */
    if ((v = json_object_get(data, "lunid"))) {
        te->has_lunid = json_is_integer(v);
        te->lunid = json_integer_value(v);
    }
}

static int te_decode_any(json_t *data, void *obj)
{
    te_decode(data, obj);
    return 0;
}

int icfg_targetextent_init(struct icfg_targetextent *te)
{
    memset(te, 0, sizeof(*te));
    return icfg_defaults(te_fields, ARRAY_SIZE(te_fields), te_decode_any, te);
}

/* The invariants of a complete mapping (te->id 0 on create), and the
 * lowest free LUN when none was given. DB locked. */
static void te_check(struct icfg_write *w, struct icfg_targetextent *te)
{
    struct api_call *call = w->call;
    char f[128];
    int64_t found;
    if (icfg_target_exists(te->target) < 0)
        api_verr(call, icfg_wfield(w, "target", f, sizeof(f)), ENOENT, "Target %lld does not exist",
                 (long long)te->target);
    if (icfg_extent_exists(te->extent) < 0)
        api_verr(call, icfg_wfield(w, "extent", f, sizeof(f)), ENOENT, "Extent %lld does not exist",
                 (long long)te->extent);
    else if (icfg_targetextent_find_extent(te->extent, te->id, &found) == 0)
        api_verr(call, icfg_wfield(w, "extent", f, sizeof(f)), EEXIST, "Extent is already in use.");
    if (api_has_verrs(call))
        return;
    if (te->has_lunid) {
        if (icfg_targetextent_find_lun(te->target, te->lunid, te->id, &found) == 0)
            api_verr(call, icfg_wfield(w, "lunid", f, sizeof(f)), EEXIST,
                     "LUN ID is already being used for this target.");
        return;
    }
    if (icfg_targetextent_free_lun(te->target, te->id, &te->lunid) < 0)
        api_verr(call, icfg_wfield(w, "lunid", f, sizeof(f)), ENOSPC,
                 "No free LUN ID in this target");
    else
        te->has_lunid = true;
}

int icfg_targetextent_remove(struct icfg_write *w, const char *column, int64_t value)
{
    struct icfg_key key = {
        .column = column, .values = &(struct icfg_key_value){.is_int = true, .i = value}, .n = 1};
    void *list;
    size_t n;
    int err = icfg_table_list(&icfg_targetextent_table, &key, &list, &n);
    const struct icfg_targetextent *v = list;
    for (size_t i = 0; err == 0 && i < n; i++) {
        icfg_changed_target(w, v[i].target);
        err = icfg_targetextent_delete(v[i].id);
    }
    free(list);
    return err < 0 ? icfg_db_fail(w->call, err) : 0;
}

int icfg_targetextent_save(struct icfg_write *w, struct icfg_targetextent *te)
{
    struct api_call *call = w->call;
    bool create = te->id == 0;
    te_check(w, te);
    if (api_has_verrs(call))
        return api_invalid(call);
    int err = create ? icfg_targetextent_insert(te) : icfg_targetextent_update(te);
    if (err < 0)
        return icfg_db_fail(call, err);
    icfg_changed_target(w, te->target);
    return 0;
}

/* Save te and answer with the stored row. 0 or -1 (error set). */
static int te_save(struct icfg_write *w, struct icfg_targetextent *te, json_t **result)
{
    if (icfg_targetextent_save(w, te) < 0)
        return -1;
    struct icfg_targetextent stored;
    int err = icfg_targetextent_get(te->id, &stored);
    if (err == 0 && !(*result = te_encode(&stored)))
        err = -ENOMEM;
    return err < 0 ? icfg_db_fail(w->call, err) : 0;
}

static int te_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    struct icfg_targetextent te = {0};
    json_t *body;
    if (icfg_create_begin(&w, call, params, te_fields, ARRAY_SIZE(te_fields), &body) < 0)
        return -1;
    te_decode(body, &te);
    json_decref(body);
    return icfg_write_end(&w, te_save(&w, &te, result));
}

static int te_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    struct icfg_targetextent te;
    json_t *body;
    if (icfg_update_begin(&w, call, params, te_fields, ARRAY_SIZE(te_fields), &id, &body) < 0)
        return -1;
    int rc = icfg_targetextent_get(id, &te);
    if (rc < 0) {
        rc = icfg_missing(call, rc, "Target-extent mapping", id);
    } else {
        icfg_changed_target(&w, te.target); /* the old target loses the LUN */
        te_decode(body, &te);
        rc = te_save(&w, &te, result);
    }
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int te_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    bool force, defer;
    struct icfg_write w;
    /* Decodes: delete_args were checked by the dispatcher. */
    if (icfg_param_id(call, params, 0, &id) < 0 ||
        icfg_param_bool(call, params, 1, "force", false, &force) < 0 ||
        icfg_param_bool(call, params, 2, "defer", false, &defer) < 0)
        return api_invalid(call);
    if (icfg_write_begin(&w, call) < 0)
        return -1;
    w.defer = defer;
    struct icfg_targetextent te;
    int rc = icfg_targetextent_get(id, &te);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Target-extent mapping", id);
    else
        rc = icfg_target_check_sessions(&w, te.target, force);
    if (rc == 0)
        rc = icfg_targetextent_remove(&w, "id", id);
    if (rc == 0)
        *result = json_true();
    return icfg_write_end(&w, rc);
}

static json_t *te_encode_elem(const void *elem)
{
    return te_encode(elem);
}

static int te_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {
        {"id", "id"}, {"target", "target_id"}, {"extent", "extent_id"}};
    static const struct icfg_typed type = {&icfg_targetextent_table, te_encode_elem};
    /* TrueNAS clients list every mapping before each create: without a
     * hint, the whole table comes from the cache (rebuilt after changes). */
    static struct icfg_rows_cache all = {.watch.table = "iscsi_targetextent"};
    const char *op;
    for (size_t i = 0; i < ARRAY_SIZE(hints); i++)
        if (api_query_hint(params, hints[i].field, &op))
            return icfg_query_typed(call, params, result, &type, hints, ARRAY_SIZE(hints));
    db_lock();
    json_t *rows = icfg_rows_cached(&all, &type);
    db_unlock();
    return icfg_query_rows(call, rows, params, result);
}

static int te_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, te_query, "Target-extent mapping");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(te_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(te_fields)};
static const struct api_arg delete_args[] = {ICFG_ARG_ID, ICFG_ARG_BOOL("force"),
                                             ICFG_ARG_BOOL("defer")};

const struct api_method icfg_targetextent_methods[] = {
    {"iscsi.targetextent.create", NULL,
     "Map an extent to a target as a LUN (lunid null: lowest free)", te_create, API_SHARE,
     API_ARGS(create_args)},
    {"iscsi.targetextent.update", NULL, "Change a LUN mapping", te_update, API_SHARE,
     API_ARGS(update_args)},
    {"iscsi.targetextent.delete", NULL, "Remove a LUN mapping", te_delete, API_SHARE,
     API_ARGS(delete_args)},
    {"iscsi.targetextent.query", NULL, "List LUN mappings", te_query, API_READ,
     API_ARGS(icfg_query_args)},
    {"iscsi.targetextent.get_instance", NULL, "One target-extent mapping by id", te_query_instance,
     API_READ, API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_targetextent_methods_count = ARRAY_SIZE(icfg_targetextent_methods);
