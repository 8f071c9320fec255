/*
 * pool.dataset.query / update / delete, the dataset method table, and
 * datasets_init(); pool.dataset.create is dscreate.c's.
 * Every write is one SQLite transaction; file work happens inside it so a
 * failure on either side leaves neither behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/fields.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsprops.h"
#include "control/dsquery.h"
#include "control/dsrbd.h" /* ds_backend_why */
#include "control/snapdiff.h"
#include "core/log.h"
#include "core/util.h"

/*
 * Apply options.extra to the flat rows (consumed): children emptied,
 * user properties dropped, only the asked properties kept — on every row
 * (nested ones are the same objects) and before filtering, since TrueNAS
 * retrieves only what was asked and then filters. all=false keeps only
 * the pool roots. New array, or NULL.
 */
static json_t *rows_shape(json_t *rows, bool all, bool children, bool user_props, json_t *props)
{
    json_t *keep = json_array(), *row;
    size_t i;

    json_array_foreach(rows, i, row)
    {
        if (!children)
            json_object_set_new(row, "children", json_array());
        if (!user_props)
            json_object_set_new(row, "user_properties", json_object());
        if (props)
            ds_props_select(row, props);
        if (keep && (all || !strchr(json_string_value(json_object_get(row, "name")), '/')))
            json_array_append(keep, row);
    }
    json_decref(rows);
    return keep;
}

/*
 * TrueNAS' options.extra:
 * - flat=false nests children under their parents. Without filters only
 *   the pool roots are listed (their children carry the rest); with
 *   filters, TrueNAS matches them against every dataset at any depth, so
 *   [["name", "=", "pool/a/vol"]] finds a nested dataset (clients check
 *   existence this way before every create and delete).
 * - retrieve_children=false leaves children empty.
 * - properties: null (all), [] (none) or the ZFS property names to return.
 * - retrieve_user_props=false (or user_properties=false, which the
 *   truenas_incus_ctl client sends) leaves user_properties empty.
 */
static int m_dataset_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows, *extra, *props = NULL;
    bool flat = true, children = true, user_props = true, filtered;
    int rc;

    /* The filters are checked before the rows are built from them. */
    if (api_query_validate(call, params) < 0)
        return -1;
    extra = api_query_extra(params);
    if (extra) {
        flat = ds_bool_or(extra, "flat", true);
        children = ds_bool_or(extra, "retrieve_children", true);
        user_props =
            ds_bool_or(extra, "retrieve_user_props", ds_bool_or(extra, "user_properties", true));
        props = json_object_get(extra, "properties");
        if (props && !json_is_null(props) && !json_is_array(props)) {
            api_verr(call, "query-options.extra.properties", EINVAL,
                     "Input should be a valid list");
            return api_invalid(call);
        }
        if (json_is_null(props))
            props = NULL;
    }
    filtered = json_array_size(api_param(params, 0)) > 0;
    db_lock();
    rows = ds_dataset_rows_hinted(params);
    db_unlock();
    if (!rows)
        return api_error(call, EIO, "cannot read datasets");
    rows = rows_shape(rows, flat || filtered, children, user_props, props);
    if (!rows)
        return api_error(call, ENOMEM, "cannot list datasets");
    rc = api_query(call, rows, params, result); /* it accepts options.extra */
    json_decref(rows);
    return rc;
}

/* Resolve params[0] as an existing dataset id. */
static int dataset_id_param(struct api_call *call, json_t *params, const char *method,
                            const char **id)
{
    json_t *jid = api_param(params, 0);
    char field[64];

    snprintf(field, sizeof(field), "%s.id", method);
    if (!jid) {
        api_verr(call, field, EINVAL, "Field required");
        return -EINVAL;
    }
    if (!json_is_string(jid)) {
        api_verr(call, field, EINVAL, "Input should be a valid string");
        return -EINVAL;
    }
    *id = json_string_value(jid);
    if (strlen(*id) != json_string_length(jid) || strlen(*id) > NAME_DATASET_MAX) {
        api_verr(call, field, EINVAL, "not a dataset name");
        return -EINVAL;
    }
    return 0;
}

/* After the commit, still locked: give the open volumes of a recompute
 * their new sync and readonly. */
static void apply_changes(const struct ds_eff_change *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct volume *v = ds_cache_peek(c[i].name);

        if (!v)
            continue;
        if (c[i].sync_changed)
            volume_set_sync(v, c[i].sync);
        if (c[i].readonly_changed)
            volume_set_readonly(v, c[i].readonly);
        volume_unref(v);
    }
}

/* One pool.dataset.update's state, shared by its steps. */
struct update {
    struct api_call *call;
    char id[DS_NAME_BUF];
    /* The request, decoded once by update_fields (update_decode); the
     * steps after it take only these, never the request's JSON. */
    int64_t volsize; /* 0: not given (the table's minimum is 1) */
    char *comments;  /* NULL: not given; "INHERIT" means none of its own */
    struct ds_managedby managedby;
    struct ds_user_props user_props;        /* user_properties: the whole set */
    struct ds_user_props user_props_update; /* user_properties_update: changes */
    struct ds_propset propset;              /* the ZFS properties */
    /* The state. */
    struct ds_row row; /* read, then changed in place */
    struct ds_pool pool;
    struct volume *v; /* the open volume (own ref), or NULL */
    uint64_t old_size, new_size;
    bool resize, opened_here;
    struct ds_eff_change *changes; /* sync/readonly recomputed below this dataset */
    size_t nchanges;
    enum { UPDATE_ERRNO, UPDATE_NOENT, UPDATE_READ } fail; /* which error a failure gets */
};

#define AT(member, codec) API_AT(struct update, member, codec)
/* One table validates and decodes the changes (API_PARTIAL: only what
 * is given changes). The ZFS properties have no codec here: dsprops'
 * table decodes them (ds_propset_decode), sync and readonly included. */
static const struct api_field update_fields[] = {
    DS_MANAGEDBY_FIELD(struct update, managedby),
    DS_USER_PROPS_FIELD("user_properties_update", &ds_user_prop_update_item, struct update,
                        user_props_update),
    /* the whole set: listed keys are set, the others removed */
    DS_USER_PROPS_FIELD("user_properties", &ds_user_prop_update_item, struct update, user_props),
    {.name = "volsize",
     .type = API_T_INT,
     .flags = API_RANGE,
     .min = 1,
     .max = INT64_MAX,
     AT(volsize, api_codec_i64)},
    {.name = "sync", .type = API_T_ENUM, .choices = ds_choices_sync_inherit},
    {.name = "readonly", .type = API_T_ENUM, .choices = ds_choices_onoff_inherit},
    {.name = "comments",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = DS_COMMENTS_MAX,
     AT(comments, api_codec_str_null)},
    /* Accepted as TrueNAS does; they only matter for a volume's size check,
     * which blockd does not make (see create's force_size). */
    {.name = "force_size", .type = API_T_BOOL},
    DS_PROP_FIELDS_COMMON,
};
#undef AT

/* The changes object (checked against update_fields) into u. 0 or
 * -ENOMEM; either way update_free may be called. */
static int update_decode_data(json_t *data, struct update *u)
{
    int rc = api_fields_decode(update_fields, ARRAY_SIZE(update_fields), data, u);

    if (rc == 0)
        rc = ds_propset_decode(data, false, DS_FILESYSTEM, &u->propset); /* no presets */
    return rc;
}

static void update_free(struct update *u)
{
    api_fields_clear(update_fields, ARRAY_SIZE(update_fields), u);
    ds_propset_free(&u->propset);
}

/* The id and the changes object, checked together (both errors are
 * reported at once, which the dispatcher's table cannot do), then
 * decoded. 0, -EINVAL (field errors on call) or -ENOMEM. */
static int update_decode(struct api_call *call, json_t *params, struct update *u)
{
    json_t *data = api_param(params, 1);
    const char *id;

    if (dataset_id_param(call, params, "pool.dataset.update", &id) == 0)
        snprintf(u->id, sizeof(u->id), "%s", id);
    if (!data)
        api_verr(call, "pool.dataset.update", EINVAL, "Field required (the changes)");
    else
        api_validate_object(call, NULL, data, update_fields, ARRAY_SIZE(update_fields),
                            API_PARTIAL);
    if (api_has_verrs(call))
        return -EINVAL;
    return update_decode_data(data, u);
}

/* Locked: the checks that need the row (a size only for a volume, in
 * whole blocks; user_properties and user_properties_update exclusive;
 * the ZFS properties), and the new comment into the row. */
static void update_check(struct update *u)
{
    struct api_call *call = u->call;

    if (u->volsize) {
        if (u->row.type != DS_VOLUME) {
            api_verr(call, "pool.dataset.update.volsize", EINVAL, "only valid for a VOLUME");
        } else {
            u->new_size = (uint64_t)u->volsize;
            if (u->new_size % u->row.volblocksize)
                api_verr(call, "pool.dataset.update.volsize", EINVAL,
                         "must be a multiple of volblocksize (%u bytes)", u->row.volblocksize);
            u->old_size = u->row.volsize;
            u->resize = u->new_size != u->old_size;
        }
    }
    ds_check_user_props(call, "pool.dataset.update.user_properties_update", &u->user_props_update,
                        true);
    ds_check_user_props(call, "pool.dataset.update.user_properties", &u->user_props, true);
    if (u->user_props.n && u->user_props_update.n)
        api_verr(call, "pool.dataset.update.user_properties_update", EINVAL,
                 "Should not be specified when \"user_properties\" are explicitly specified");
    ds_props_check(call, "pool.dataset.update", &u->propset, u->row.type, u->row.name, true);
    /* TrueNAS' "INHERIT" comment: no comment of its own */
    if (u->comments)
        snprintf(u->row.comments, sizeof(u->row.comments), "%s",
                 strcmp(u->comments, "INHERIT") != 0 ? u->comments : "");
}

/* Inside the transaction: size and comment, managedby, the user and ZFS
 * properties, then the effective sync/readonly of this dataset and its
 * descendants. 0 or -errno. */
static int update_write_rows(struct update *u)
{
    int rc = ds_dataset_update_size(u->row.id, u->resize ? u->new_size : u->row.volsize,
                                    u->row.comments);

    if (rc == 0 && u->managedby.given)
        rc = ds_prop_set(u->row.id, "managedby", u->managedby.inherit ? NULL : u->managedby.value);
    /* user_properties is the whole set (TrueNAS): drop the others first */
    if (rc == 0 && u->user_props.n)
        rc = ds_clear_user_props(u->row.id);
    if (rc == 0)
        rc = ds_apply_user_props(u->row.id, &u->user_props);
    if (rc == 0)
        rc = ds_apply_user_props(u->row.id, &u->user_props_update);
    if (rc == 0)
        rc = ds_props_apply(u->row.id, &u->propset, u->row.type, true);
    if (rc == 0 &&
        (ds_propset_given(&u->propset, "sync") || ds_propset_given(&u->propset, "readonly")))
        rc = ds_props_recompute(u->row.name, &u->changes, &u->nchanges);
    return rc;
}

/* Inside the transaction: the volume's storage follows, so that if it
 * fails nothing is recorded. A memory volume is (re)created on first
 * open: it is opened so the new size is checked by the backend now rather
 * than at the next open. 0 or -errno. */
static int update_volume(struct update *u)
{
    int rc = 0;

    if (u->row.type != DS_VOLUME)
        return 0;
    u->v = ds_cache_peek(u->row.name);
    if (u->row.memory && !u->v) {
        rc = datasets_volume_open(u->row.name, &u->v);
        u->opened_here = rc == 0;
    }
    if (rc < 0 || !u->resize)
        return rc;
    if (u->row.memory)
        rc = volume_resize(u->v, u->new_size);
    else
        rc = ds_backend_of(&u->pool)->volume_resize(&u->pool, u->row.name, u->v, u->old_size,
                                                    u->new_size, u->row.sparse);
    if (rc < 0)
        log_error("datasets: resize %s to %llu: %s", u->row.name, (unsigned long long)u->new_size,
                  strerror(-rc));
    return rc;
}

/* Locked: the one transaction; a failed commit shrinks the open volume
 * back, and after a commit the open volumes get their new sync/readonly. */
static int update_commit(struct update *u)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc < 0)
        return rc;
    cfg_tx_changed(&tx, CFG_DATASET, u->row.id, CFG_UPDATED);
    rc = update_write_rows(u);
    if (rc == 0)
        rc = update_volume(u);
    if (rc == 0) {
        rc = cfg_tx_commit(&tx);
        if (rc < 0 && u->resize && u->v)
            volume_resize(u->v, u->old_size);
    } else {
        cfg_tx_abort(&tx);
    }
    if (rc < 0 && u->opened_here)
        ds_cache_drop(u->row.name, false); /* it was empty: nothing is lost */
    if (rc == 0)
        apply_changes(u->changes, u->nchanges);
    return rc;
}

/* Locked: read the dataset and its pool, check, write. 0 or -errno
 * (u->fail says which error; field errors are on the call). */
static int update_locked(struct update *u)
{
    char poolname[DS_NAME_BUF];
    int rc = ds_dataset_get(u->id, &u->row);

    if (rc < 0) {
        u->fail = rc == -ENOENT ? UPDATE_NOENT : UPDATE_READ;
        return rc;
    }
    ds_pool_of(u->id, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &u->pool);
    if (rc < 0)
        return rc;
    update_check(u);
    if (api_has_verrs(u->call))
        return -EINVAL;
    return update_commit(u);
}

/* Unlocked, after a failure: the call's error. */
static int update_fail(struct update *u, int rc)
{
    free(u->changes);
    if (u->v)
        volume_unref(u->v);
    if (api_has_verrs(u->call))
        return api_invalid(u->call);
    if (u->fail == UPDATE_NOENT)
        return api_error(u->call, ENOENT, "dataset %s does not exist", u->id);
    return ds_api_errno(u->call, rc,
                        u->fail == UPDATE_READ ? "cannot read dataset" : "cannot update dataset",
                        u->id);
}

/* Unlocked, after the commit: EV_DATASET for a resize. The
 * open volumes already have their new size, sync and read-only values
 * (apply_changes): the front-ends read them on the next request (SCSI
 * raises CAPACITY DATA HAS CHANGED or MODE PARAMETERS CHANGED itself). */
static void update_publish(struct update *u)
{
    free(u->changes);
    if (u->resize) {
        log_info("datasets: %s resized %llu -> %llu bytes (peer %s)", u->row.name,
                 (unsigned long long)u->old_size, (unsigned long long)u->new_size,
                 api_call_peer(u->call));
        ds_notify(DATASETS_RESIZED, u->row.name, u->v);
    }
    if (u->v)
        volume_unref(u->v);
}

/* pool.dataset.update, once decoded: (locked) check -> one transaction
 * -> publish. The caller frees the decoded request (update_free). */
static int update_run(struct update *u, json_t **result)
{
    struct api_call *call = u->call;
    int rc;

    ds_ops_lock();
    db_lock();
    rc = update_locked(u);
    if (rc == 0)
        *result = ds_dataset_row(u->row.name);
    db_unlock();
    ds_ops_unlock();
    if (rc < 0) {
        rc = update_fail(u, rc);
    } else {
        update_publish(u);
        rc = *result ? 0 : api_error(call, EIO, "dataset %s vanished", u->row.name);
    }
    return rc;
}

/* pool.dataset.update: decode once, then update_run; one exit frees the
 * decoded request. */
static int m_dataset_update(struct api_call *call, json_t *params, json_t **result)
{
    struct update u = {.call = call};
    int rc = update_decode(call, params, &u);

    if (rc < 0)
        rc = api_has_verrs(call) ? api_invalid(call)
                                 : ds_api_errno(call, rc, "cannot update dataset", u.id);
    else
        rc = update_run(&u, result);
    update_free(&u);
    return rc;
}

/* The typed path decodes its one change the way the method does, so the
 * ZFS property rules (ds_propset) apply to it unchanged. */
int ds_dataset_set_readonly(struct api_call *call, const char *name, bool on)
{
    struct update u = {.call = call};
    json_t *data = json_pack("{s:s}", "readonly", on ? "ON" : "OFF");
    json_t *result = NULL;
    int rc;

    snprintf(u.id, sizeof(u.id), "%s", name);
    rc = data ? update_decode_data(data, &u) : -ENOMEM;
    json_decref(data);
    if (rc < 0)
        rc = ds_api_errno(call, rc, "cannot update dataset", name);
    else
        rc = update_run(&u, &result);
    json_decref(result);
    update_free(&u);
    return rc;
}

/* A dataset or snapshot a delete removes. */
struct plan_item {
    char *name;     /* "pool/vol" or "pool/vol@snap" */
    int64_t id;     /* its row in datasets / snapshots */
    bool is_volume; /* a file to unlink, not a directory */
    bool keep;      /* its storage could not be removed: the row stays */
    /* A delete with force on a pool whose storage another client may
     * hold (RBD): this daemon's own open volume of it (a reference) and
     * the bdev it serves through (borrowed while own is held). */
    struct volume *own;
    struct bdev *own_bdev;
};

/* What a delete removes, deepest first. */
struct delete_plan {
    struct plan_item *datasets; /* deepest first */
    size_t ndatasets;
    struct plan_item *snapshots;
    size_t nsnapshots;
};

static void plan_free(struct delete_plan *p)
{
    for (size_t i = 0; i < p->ndatasets; i++) {
        free(p->datasets[i].name);
        volume_unref(p->datasets[i].own);
    }
    for (size_t i = 0; i < p->nsnapshots; i++) {
        free(p->snapshots[i].name);
        volume_unref(p->snapshots[i].own);
    }
    free(p->datasets);
    free(p->snapshots);
}

/* The items a walk appends to. */
struct plan_list {
    struct plan_item **items;
    size_t *n;
    size_t cap;
};

/* Append (name, id, is_volume) to the list arg. 0 or -ENOMEM. */
static int plan_add(const char *name, int64_t id, bool is_volume, void *arg)
{
    struct plan_list *l = arg;

    if (*l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct plan_item *grown = realloc(*l->items, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        *l->items = grown;
        l->cap = cap;
    }
    struct plan_item *it = &(*l->items)[*l->n];
    it->name = strdup(name);
    it->id = id;
    it->is_volume = is_volume;
    it->keep = false;
    it->own = NULL;
    it->own_bdev = NULL;
    if (!it->name)
        return -ENOMEM;
    (*l->n)++;
    return 0;
}

static int plan_add_snapshot(const char *full, int64_t id, void *arg)
{
    return plan_add(full, id, false, arg);
}

static int plan_build(const char *name, struct delete_plan *p)
{
    struct plan_list datasets = {&p->datasets, &p->ndatasets, 0};
    struct plan_list snapshots = {&p->snapshots, &p->nsnapshots, 0};
    int rc;

    memset(p, 0, sizeof(*p));
    rc = ds_dataset_each_in_subtree(name, plan_add, &datasets);
    if (rc < 0)
        return rc;
    return ds_snapshot_each_in_subtree(name, plan_add_snapshot, &snapshots);
}

/* One pool.dataset.delete's state, shared by its steps. */
struct dataset_delete {
    struct api_call *call;
    const char *id;
    bool recursive, force;
    struct ds_pool pool;
    struct delete_plan plan;
};

/* The options (both false when absent). force: delete even if a
 * front-end uses it; its open handle keeps working on the unlinked file
 * until it lets go. */
static const struct api_field delete_fields[] = {
    {.name = "recursive",
     .type = API_T_BOOL,
     API_AT(struct dataset_delete, recursive, api_codec_bool)},
    {.name = "force", .type = API_T_BOOL, API_AT(struct dataset_delete, force, api_codec_bool)},
};

/* The id and the options, checked together (both errors at once). */
static int delete_decode(struct api_call *call, json_t *params, struct dataset_delete *d)
{
    json_t *opts;

    dataset_id_param(call, params, "pool.dataset.delete", &d->id);
    opts = api_param(params, 1);
    if (opts)
        api_validate_object(call, "pool.dataset.delete.options", opts, delete_fields,
                            ARRAY_SIZE(delete_fields), 0);
    if (api_has_verrs(call))
        return -EINVAL;
    return opts ? api_fields_decode(delete_fields, ARRAY_SIZE(delete_fields), opts, d) : 0;
}

/* Locked: nothing a delete must not remove is in the plan — a pool's
 * root, children or snapshots without recursive, the origin of a clone
 * outside the subtree, anything in use (unless force). Builds the plan.
 * 0 or the call's error. */
static int delete_check(struct dataset_delete *d)
{
    char poolname[DS_NAME_BUF], why[512], clone[DS_NAME_BUF], origin[DS_NAME_BUF];
    struct delete_plan *plan = &d->plan;
    struct ds_row row;
    int rc = ds_dataset_get(d->id, &row);

    if (rc == -ENOENT)
        return api_error(d->call, ENOENT, "dataset %s does not exist", d->id);
    if (rc < 0)
        return ds_api_errno(d->call, rc, "cannot delete dataset", d->id);
    if (!strchr(d->id, '/'))
        return api_error(d->call, EINVAL, "%s is a pool's root dataset; it cannot be deleted",
                         d->id);
    ds_pool_of(d->id, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &d->pool);
    if (rc == 0)
        rc = plan_build(d->id, plan);
    if (rc < 0)
        return ds_api_errno(d->call, rc, "cannot delete dataset", d->id);
    if (!d->recursive && plan->ndatasets > 1)
        return api_error(d->call, ENOTEMPTY,
                         "dataset %s has children (e.g. %s); use recursive to delete them too",
                         d->id, plan->datasets[0].name);
    if (!d->recursive && plan->nsnapshots > 0)
        return api_error(d->call, ENOTEMPTY,
                         "dataset %s has snapshots (e.g. %s); use recursive to delete them too",
                         d->id, plan->snapshots[0].name);
    rc = ds_dataset_outside_clone(d->id, clone, sizeof(clone), origin, sizeof(origin));
    if (rc < 0)
        return ds_api_errno(d->call, rc, "cannot delete dataset", d->id);
    if (rc == 1)
        return api_error(d->call, EBUSY,
                         "snapshot %s has dependent clones (%s); delete the clones first", origin,
                         clone);
    for (size_t i = 0; !d->force && i < plan->ndatasets + plan->nsnapshots; i++) {
        const char *n = i < plan->ndatasets ? plan->datasets[i].name
                                            : plan->snapshots[i - plan->ndatasets].name;
        why[0] = '\0';
        if (ds_in_use(n, why, sizeof(why)))
            return api_error(d->call, EBUSY, "dataset %s is in use: %s", n, why[0] ? why : "busy");
    }
    return 0;
}

/* Locked: the one transaction removing the rows (snapshots, properties,
 * datasets), but those whose storage stays (keep). 0 or the call's
 * error. */
static int delete_rows(struct dataset_delete *d)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc < 0)
        return ds_api_errno(d->call, rc, "cannot delete dataset", d->id);
    for (size_t i = 0; rc == 0 && i < d->plan.nsnapshots; i++)
        if (!d->plan.snapshots[i].keep)
            rc = ds_snapshot_delete(d->plan.snapshots[i].id);
    for (size_t i = 0; rc == 0 && i < d->plan.ndatasets; i++) {
        int64_t id = d->plan.datasets[i].id;
        if (d->plan.datasets[i].keep)
            continue;
        rc = ds_dataset_delete(id, true);
        cfg_tx_changed(&tx, CFG_DATASET, id, CFG_DELETED);
    }
    if (rc == 0)
        rc = cfg_tx_commit(&tx);
    else
        cfg_tx_abort(&tx);
    return rc < 0 ? ds_api_errno(d->call, rc, "cannot delete dataset", d->id) : 0;
}

/* Committed, without the database lock (unlinking a big file takes a
 * while), still under ds_ops_lock: the storage. A failure leaves a stray
 * file behind, which is logged; the dataset is gone either way. */
static void delete_storage(struct dataset_delete *d)
{
    const struct ds_backend *be;
    int rc;

    ds_cache_drop(d->id, true);
    be = ds_backend_of(&d->pool);
    /* snapshots first: an RBD image with snapshots cannot be removed */
    for (size_t i = 0; i < d->plan.nsnapshots; i++) {
        char *name = d->plan.snapshots[i].name, *at = strchr(name, '@');
        *at = '\0';
        rc = be->snapshot_remove(&d->pool, name, at + 1);
        if (rc < 0 && rc != -ENOENT)
            log_error("datasets: remove snapshot %s@%s: %s", name, at + 1, strerror(-rc));
        *at = '@';
    }
    for (size_t i = 0; i < d->plan.ndatasets; i++) {
        rc = be->dataset_remove(&d->pool, d->plan.datasets[i].name, d->plan.datasets[i].is_volume);
        if (rc < 0 && rc != -ENOENT)
            log_error("datasets: remove %s: %s", d->plan.datasets[i].name, strerror(-rc));
    }
}

/* The plan's datasets and snapshots, one index over both. */
static struct plan_item *plan_item_at(struct delete_plan *p, size_t i)
{
    return i < p->ndatasets ? &p->datasets[i] : &p->snapshots[i - p->ndatasets];
}

/*
 * A delete with force, before anything is checked: this daemon's own
 * open volumes of what goes, taken from the cache (which keeps them until
 * the withdraw), so that their use is told from another client's
 * (volume_remove_check) and can be withdrawn.
 */
static void own_collect(struct delete_plan *p)
{
    for (size_t i = 0; i < p->ndatasets + p->nsnapshots; i++) {
        struct plan_item *it = plan_item_at(p, i);
        if (i < p->ndatasets && !it->is_volume)
            continue;
        it->own = ds_cache_peek_bdev(it->name, &it->own_bdev);
    }
}

/*
 * Once no other client holds the storage: this daemon lets go of it. The
 * cache drops the volumes and every serving handle is closed; the shares
 * on them fail each request (SCSI LOGICAL UNIT NOT SUPPORTED, NBD EIO)
 * until DATASETS_DELETED makes the front-ends drop them (iSCSI: extents,
 * mappings and emptied targets; NBD: the exports and their connections).
 */
static void own_withdraw(struct dataset_delete *d, const struct ds_backend *be)
{
    size_t n = 0;

    ds_cache_drop(d->id, true);
    for (size_t i = 0; i < d->plan.ndatasets + d->plan.nsnapshots; i++) {
        struct plan_item *it = plan_item_at(&d->plan, i);
        if (!it->own_bdev)
            continue;
        int rc = be->handle_withdraw(it->own_bdev);
        if (rc < 0)
            log_warn("datasets: cannot close this daemon's handle of %s: %s", it->name,
                     strerror(-rc));
        n += rc == 0;
    }
    if (n)
        log_info("datasets: delete %s with force: closed this daemon's %zu open handle(s)", d->id,
                 n);
}

/* The removal failed: what stays serves again through the same volumes
 * (the shares never noticed but for the errors meanwhile). */
static void own_restore(struct dataset_delete *d, const struct ds_backend *be)
{
    for (size_t i = 0; i < d->plan.ndatasets + d->plan.nsnapshots; i++) {
        struct plan_item *it = plan_item_at(&d->plan, i);
        if (!it->keep || !it->own)
            continue;
        if (it->own_bdev && be->handle_restore(it->own_bdev) < 0)
            log_error("datasets: %s stays but its shares cannot serve it until a restart",
                      it->name);
        ds_cache_put_back(it->name, it->own, it->own_bdev);
    }
}

/* Datasets from i on stay (their storage could not be removed), with
 * their snapshots not removed yet. */
static void plan_keep_from(struct delete_plan *plan, size_t i)
{
    for (size_t k = i; k < plan->ndatasets; k++)
        plan->datasets[k].keep = true;
    for (size_t j = 0; j < plan->nsnapshots; j++) {
        char *name = plan->snapshots[j].name, *at = strchr(name, '@');
        for (size_t k = i; k < plan->ndatasets; k++) {
            const char *dn = plan->datasets[k].name;
            if (strlen(dn) == (size_t)(at - name) && strncmp(name, dn, (size_t)(at - name)) == 0)
                plan->snapshots[j].keep = true;
        }
    }
}

/* Deepest first, each dataset's snapshots and then the dataset, up to the
 * first failure; *at: the dataset reached last. 0 or -errno. */
static int remove_each(struct dataset_delete *d, const struct ds_backend *be, size_t *at)
{
    struct delete_plan *plan = &d->plan;
    int rc = 0;

    for (size_t k = 0; k < plan->ndatasets && rc == 0; k++) {
        struct plan_item *ds = &plan->datasets[k];
        size_t dlen = strlen(ds->name);
        *at = k;
        for (size_t j = 0; j < plan->nsnapshots && rc == 0; j++) {
            char *name = plan->snapshots[j].name, *sep = strchr(name, '@');
            if ((size_t)(sep - name) != dlen || strncmp(name, ds->name, dlen) != 0)
                continue;
            *sep = '\0';
            rc = be->snapshot_remove(&d->pool, name, sep + 1);
            *sep = '@';
            if (rc == -ENOENT)
                rc = 0;
            if (rc < 0)
                log_error("datasets: remove snapshot %s: %s", name, strerror(-rc));
        }
        if (rc == 0) {
            rc = be->dataset_remove(&d->pool, ds->name, ds->is_volume);
            if (rc == -ENOENT)
                rc = 0;
            if (rc < 0)
                log_error("datasets: remove %s: %s", ds->name, strerror(-rc));
        }
    }
    return rc;
}

/*
 * Storage that another client may hold open (RBD: an image another
 * gateway member or a VM still has open cannot be removed), with
 * ds_ops_lock held and no DB lock (it waits a bounded time for that
 * client): the storage goes first, then only the rows of what went, so
 * that no row is deleted while its image stays. Each volume is checked
 * (volume_remove_check) before anything is removed; with force, this
 * daemon's own use does not count and is withdrawn after the check
 * (own_withdraw). Then remove_each. At the first failure the rest stays
 * (keep; with force it serves again) and the call fails with the
 * backend's reason: a snapshot removed before its image failed is gone
 * from the cluster, so its row goes too. 0 or the call's error (the rows
 * of what went are still to be deleted).
 */
static int delete_storage_first(struct dataset_delete *d)
{
    const struct ds_backend *be = ds_backend_of(&d->pool);
    struct delete_plan *plan = &d->plan;
    size_t at = 0;
    int rc = 0;

    if (d->force)
        own_collect(plan);
    else
        ds_cache_drop(d->id, true); /* our own handle is a watcher too */
    for (size_t k = 0; k < plan->ndatasets && rc == 0; k++)
        if (plan->datasets[k].is_volume) {
            rc = be->volume_remove_check(&d->pool, plan->datasets[k].name,
                                         plan->datasets[k].own_bdev);
            at = k;
        }
    if (rc < 0) {
        plan_keep_from(plan, 0); /* nothing was removed: everything stays */
    } else {
        if (d->force)
            own_withdraw(d, be);
        rc = remove_each(d, be, &at);
        if (rc == 0)
            return 0;
        plan_keep_from(plan, at);
        if (d->force)
            own_restore(d, be);
    }
    const char *at_name = plan->datasets[at].name;
    log_warn("datasets: delete %s failed at %s: %s (peer %s)", d->id, at_name,
             ds_backend_why[0] ? ds_backend_why : strerror(-rc), api_call_peer(d->call));
    return ds_api_errno(d->call, rc, "cannot delete dataset", at_name);
}

/* Snapshots already removed from storage whose rows stay would be wrong:
 * a kept snapshot is only one that was not reached (see above). */
static bool plan_removed_any(const struct delete_plan *p)
{
    for (size_t i = 0; i < p->ndatasets; i++)
        if (!p->datasets[i].keep)
            return true;
    for (size_t i = 0; i < p->nsnapshots; i++)
        if (!p->snapshots[i].keep)
            return true;
    return false;
}

/* Unlocked: the log lines and EV_DATASET (front-ends drop the shares). */
static void delete_publish(struct dataset_delete *d)
{
    if (d->force)
        log_warn("datasets: %s deleted with force; in-use checks skipped", d->id);
    log_info("datasets: deleted %s (%zu dataset(s), %zu snapshot(s); peer %s)", d->id,
             d->plan.ndatasets, d->plan.nsnapshots, api_call_peer(d->call));
    for (size_t i = 0; i < d->plan.nsnapshots; i++)
        if (!d->plan.snapshots[i].keep)
            ds_notify(DATASETS_DELETED, d->plan.snapshots[i].name, NULL);
    for (size_t i = 0; i < d->plan.ndatasets; i++)
        if (!d->plan.datasets[i].keep)
            ds_notify(DATASETS_DELETED, d->plan.datasets[i].name, NULL);
}

/* pool.dataset.delete: decode -> (locked) check and plan -> one
 * transaction -> the storage -> publish; one exit frees the plan. Pools
 * whose storage another client may hold (volume_remove_check: RBD) remove
 * the storage first and then the rows of what went (delete_storage_first). */
static int dataset_delete_run(struct dataset_delete *d, json_t **result)
{
    struct api_call *call = d->call;
    int rc, failed = 0;

    ds_ops_lock();
    db_lock();
    rc = delete_check(d);
    bool first = rc == 0 && ds_backend_of(&d->pool)->volume_remove_check;
    if (first) {
        db_unlock();
        failed = delete_storage_first(d);
        db_lock();
        rc = plan_removed_any(&d->plan) ? delete_rows(d) : failed;
    } else if (rc == 0) {
        rc = delete_rows(d);
    }
    db_unlock();
    if (rc == 0 && !first)
        delete_storage(d);
    ds_ops_unlock();
    if (rc == 0 && plan_removed_any(&d->plan))
        delete_publish(d);
    if (rc == 0 && failed)
        rc = failed;                /* what went is gone; the call reports what stayed */
    if (plan_removed_any(&d->plan)) /* a clone gone may free a deferred origin */
        ds_snapshot_reap_deferred(false, api_call_peer(call));
    if (rc == 0 && result)
        *result = json_true();
    plan_free(&d->plan);
    return rc;
}

static int m_dataset_delete(struct api_call *call, json_t *params, json_t **result)
{
    struct dataset_delete d = {.call = call};

    if (delete_decode(call, params, &d) < 0)
        return api_invalid(call);
    return dataset_delete_run(&d, result);
}

int ds_dataset_destroy(struct api_call *call, const char *name, bool recursive, bool force)
{
    struct dataset_delete d = {.call = call, .id = name, .recursive = recursive, .force = force};

    return dataset_delete_run(&d, NULL);
}

int datasets_forget(const char *name, char *why, size_t len)
{
    struct delete_plan plan = {0};
    struct ds_row row = {0};
    int rc;

    ds_ops_lock();
    db_lock();
    rc = ds_dataset_get(name, &row);
    if (rc == 0 && row.type != DS_VOLUME) {
        snprintf(why, len, "%s is not a volume", name);
        rc = -EINVAL;
    }
    if (rc == 0)
        rc = plan_build(name, &plan);
    if (rc == 0 && (plan.ndatasets != 1 || plan.nsnapshots)) {
        snprintf(why, len, "%s has %s here", name, plan.nsnapshots ? "snapshots" : "children");
        rc = -ENOTEMPTY;
    }
    /* Checked under the DB lock: no share can be made on it in between. */
    if (rc == 0 && ds_in_use(name, why, len))
        rc = -EBUSY;
    if (rc == 0) {
        struct cfg_tx tx;
        rc = cfg_tx_begin(&tx);
        if (rc == 0) {
            rc = ds_dataset_delete(row.id, false);
            cfg_tx_changed(&tx, CFG_DATASET, row.id, CFG_DELETED);
            if (rc == 0)
                rc = cfg_tx_commit(&tx);
            else
                cfg_tx_abort(&tx);
        }
        if (rc < 0)
            snprintf(why, len, "cannot delete the row of %s: %s", name, strerror(-rc));
    } else if (rc == -ENOENT) {
        snprintf(why, len, "%s does not exist", name);
    }
    db_unlock();
    if (rc == 0)
        ds_cache_drop(name, false);
    ds_ops_unlock();
    plan_free(&plan);
    if (rc == 0) {
        log_info("datasets: %s forgotten here (its storage stays)", name);
        ds_notify(DATASETS_DELETED, name, NULL);
    }
    return rc;
}

static int m_dataset_get_instance(struct api_call *call, json_t *params, json_t **result)
{
    /* TrueNAS's [id, {extra: {properties: [...]}}] (truenas-csi): the query does it */
    return api_get_instance(call, params, m_dataset_query, NULL, result);
}

/* update and delete check their id and their object in the handler: the id
 * is resolved as it is checked (dataset_id_param) and both errors are
 * reported together; the args give the arity and the synopsis. */
static const struct api_arg update_args[] = {
    {.name = "id", .type = API_T_ANY},
    API_ARG_OBJECT("data", update_fields, API_PARTIAL | API_ARG_SELF_CHECKED)};
static const struct api_arg delete_args[] = {
    {.name = "id", .type = API_T_ANY},
    API_ARG_OBJECT("options", delete_fields, API_ARG_OPTIONAL | API_ARG_SELF_CHECKED)};

const struct api_method ds_dataset_methods[] = {
    {"pool.dataset.get_instance", NULL, "One dataset by its name", m_dataset_get_instance, API_READ,
     API_ARGS(ds_get_instance_args)},
    {"pool.dataset.create", NULL,
     "Create a volume (a sparse or thick file) or a filesystem (a directory); ZFS properties: "
     "docs/api-datasets.md",
     ds_dataset_create, API_SHARE, API_ARGS(ds_dataset_create_args)},
    {"pool.dataset.query", NULL, "List datasets with TrueNAS-style properties", m_dataset_query,
     API_READ, API_ARGS(ds_query_args)},
    {"pool.dataset.update", NULL,
     "Resize a volume or change its properties; applied live to open volumes", m_dataset_update,
     API_SHARE, API_ARGS(update_args)},
    {"pool.dataset.delete", NULL,
     "Delete a dataset (with its children and snapshots when recursive)", m_dataset_delete,
     API_SHARE, API_ARGS(delete_args)},
};
const size_t ds_dataset_method_count = ARRAY_SIZE(ds_dataset_methods);

void datasets_init(const char *state_dir)
{
    static bool registered;

    snprintf(ds_state_dir, sizeof(ds_state_dir), "%s", state_dir);
    db_register_schema(ds_schema_sql);
    if (registered)
        return; /* api_register is start-up only; tests re-init */
    registered = true;
    api_register(ds_pool_methods, ds_pool_method_count);
    api_register(ds_dataset_methods, ds_dataset_method_count);
    api_register(ds_snapshot_methods, ds_snapshot_method_count);
    api_register(ds_pool_snapshot_methods, ds_pool_snapshot_method_count);
    api_register(ds_rename_methods, ds_rename_method_count);
    api_register(ds_promote_methods, ds_promote_method_count);
    api_register(ds_snapdiff_methods, ds_snapdiff_method_count);
    api_register(ds_resource_methods, ds_resource_method_count);
    /* core.bulk: one fdatasync for all its calls, before it answers. */
    api_set_batch_hooks(db_sync_batch_begin, db_sync_batch_end);
}
