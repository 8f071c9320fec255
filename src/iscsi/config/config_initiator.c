/*
 * iscsi.initiator.create|update|delete|query|get_instance: the API of
 * struct icfg_initiator, the authorized-initiator groups
 * (initiator_store.h holds their SQL). An empty list allows every
 * initiator. The field table, the one decoder (initiator_decode), the one
 * encoder (initiator_encode), the invariants (initiator_check) and
 * handlers of one shape: decode → check → one transaction → publish.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_crud.h"
#include "iscsi/config/initiator_store.h"
#include "core/util.h"
#include "iscsi/iscsi_runtime.h"

static const struct api_field iqn_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = ISCSI_NAME_MAX - 1};
static const struct api_field initiator_fields[] = {
    {.name = "initiators",
     .type = API_T_ARRAY,
     .items = &iqn_item,
     .def = "[]",
     API_AT(struct icfg_initiator, initiators, api_codec_strv)},
    {.name = "comment",
     .type = API_T_STRING,
     .def = "\"\"",
     API_AT(struct icfg_initiator, comment, api_codec_str)},
};

/* The one decoder: the field table applied to the keys present in data
 * (a body checked against it, with its defaults on create). 0 or -ENOMEM. */
static int initiator_decode(json_t *data, struct icfg_initiator *g)
{
    return api_fields_decode(initiator_fields, ARRAY_SIZE(initiator_fields), data, g);
}

/* The row iscsi.initiator.* answers with: the id and the table's fields.
 * New reference or NULL. */
static json_t *initiator_encode(const struct icfg_initiator *g)
{
    return api_fields_row(g->id, initiator_fields, ARRAY_SIZE(initiator_fields), g);
}

static int initiator_decode_any(json_t *data, void *obj)
{
    return initiator_decode(data, obj);
}

int icfg_initiator_init(struct icfg_initiator *g)
{
    memset(g, 0, sizeof(*g));
    return icfg_defaults(initiator_fields, ARRAY_SIZE(initiator_fields), initiator_decode_any, g);
}

/* Initiator names are compared case-insensitively on the wire; printable
 * ASCII without spaces keeps them usable in logs and ACL lists. */
static void initiator_check(struct icfg_write *w, const struct icfg_initiator *g)
{
    for (size_t i = 0; i < g->initiators.n; i++) {
        for (const char *p = g->initiators.v[i]; *p; p++) {
            if (*p <= ' ' || *p > '~') {
                char f[160], field[64];
                snprintf(field, sizeof(field), "initiators.%zu", i);
                api_verr(w->call, icfg_wfield(w, field, f, sizeof(f)), EINVAL,
                         "Value error, initiator names may not contain spaces or control "
                         "characters");
                break;
            }
        }
    }
}

int icfg_initiator_save(struct icfg_write *w, struct icfg_initiator *g)
{
    bool create = g->id == 0;
    initiator_check(w, g);
    if (api_has_verrs(w->call))
        return api_invalid(w->call);
    int err = create ? icfg_initiator_insert(g) : icfg_initiator_update(g);
    if (err < 0)
        return icfg_db_fail(w->call, err);
    /* A new group is used by no target yet: nothing to publish. */
    int64_t *targets = NULL;
    size_t n = 0;
    if (!create && icfg_initiator_targets(g->id, &targets, &n) == 0)
        for (size_t i = 0; i < n; i++)
            icfg_changed_target(w, targets[i]);
    free(targets);
    return 0;
}

/* The stored group id encoded as the call's result. 0 or -1. */
static int initiator_result(struct api_call *call, int64_t id, json_t **result)
{
    struct icfg_initiator g;
    int rc = icfg_initiator_get(id, &g);
    if (rc == 0 && !(*result = initiator_encode(&g)))
        rc = -ENOMEM;
    icfg_initiator_clear(&g);
    return rc < 0 ? icfg_db_fail(call, rc) : 0;
}

static int initiator_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    struct icfg_initiator g = {0};
    json_t *body;
    if (icfg_create_begin(&w, call, params, initiator_fields, ARRAY_SIZE(initiator_fields), &body) <
        0)
        return -1;
    int rc = initiator_decode(body, &g) < 0 ? api_error(call, ENOMEM, "out of memory")
                                            : icfg_initiator_save(&w, &g);
    if (rc == 0)
        rc = initiator_result(call, g.id, result);
    icfg_initiator_clear(&g);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

/* The group id updated with body inside w (its names are checked before
 * the group is looked up, as TrueNAS does). 0 or -1 (error set). */
static int initiator_change(struct icfg_write *w, int64_t id, json_t *body, json_t **result)
{
    struct icfg_initiator given = {0}, g;
    int rc = initiator_decode(body, &given);
    if (rc == 0)
        initiator_check(w, &given);
    icfg_initiator_clear(&given);
    if (rc < 0)
        return api_error(w->call, ENOMEM, "out of memory");
    if (api_has_verrs(w->call))
        return api_invalid(w->call);
    rc = icfg_initiator_get(id, &g);
    if (rc < 0)
        rc = icfg_missing(w->call, rc, "Initiator group", id);
    else if (initiator_decode(body, &g) < 0)
        rc = api_error(w->call, ENOMEM, "out of memory");
    else if ((rc = icfg_initiator_save(w, &g)) == 0)
        rc = initiator_result(w->call, id, result);
    icfg_initiator_clear(&g);
    return rc;
}

static int initiator_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    json_t *body;
    if (icfg_update_begin(&w, call, params, initiator_fields, ARRAY_SIZE(initiator_fields), &id,
                          &body) < 0)
        return -1;
    int rc = initiator_change(&w, id, body, result);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int initiator_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    if (icfg_delete_begin(&w, call, params, &id) < 0)
        return -1;
    struct icfg_initiator g;
    int64_t *targets = NULL;
    size_t n = 0;
    int rc = icfg_initiator_get(id, &g);
    icfg_initiator_clear(&g);
    if (rc == 0)
        rc = icfg_initiator_targets(id, &targets, &n);
    if (rc < 0) {
        rc = icfg_missing(call, rc, "Initiator group", id);
    } else if (n > 0) {
        /* Dropping the group from the target would widen its access (a
         * target without groups admits everyone), so refuse instead. */
        rc = api_error(call, EBUSY, "Initiator group %lld is used by target %lld", (long long)id,
                       (long long)targets[0]);
    } else if ((rc = icfg_initiator_delete(id)) < 0) {
        rc = icfg_db_fail(call, rc);
    } else {
        *result = json_true();
    }
    free(targets);
    return icfg_write_end(&w, rc);
}

static json_t *initiator_encode_elem(const void *elem)
{
    return initiator_encode(elem);
}

static int initiator_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"comment", "comment"}};
    static const struct icfg_typed type = {&icfg_initiator_table, initiator_encode_elem};
    return icfg_query_typed(call, params, result, &type, hints, ARRAY_SIZE(hints));
}

static int initiator_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, initiator_query, "Initiator group");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(initiator_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(initiator_fields)};

const struct api_method icfg_initiator_methods[] = {
    {"iscsi.initiator.create", NULL,
     "Create an authorized-initiator group (empty list = every initiator)", initiator_create,
     API_SHARE, API_ARGS(create_args)},
    {"iscsi.initiator.update", NULL, "Change an initiator group", initiator_update, API_SHARE,
     API_ARGS(update_args)},
    {"iscsi.initiator.delete", NULL, "Delete an initiator group not used by a target",
     initiator_delete, API_SHARE, API_ARGS(icfg_delete_args)},
    {"iscsi.initiator.query", NULL, "List initiator groups", initiator_query, API_READ,
     API_ARGS(icfg_query_args)},
    {"iscsi.initiator.get_instance", NULL, "One initiator group by id", initiator_query_instance,
     API_READ, API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_initiator_methods_count = ARRAY_SIZE(icfg_initiator_methods);
