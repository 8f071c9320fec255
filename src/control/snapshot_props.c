/*
 * A snapshot's properties beyond its data (snapshot_store.h: table
 * snapshot_props): the user properties ("ns:name" = value) a client sets
 * at create (pool.snapshot.create's properties) or with
 * pool.snapshot.update, shown in the snapshot's row; and ZFS's deferred
 * destroy: pool.snapshot.delete {defer: true} of a snapshot that clones
 * still depend on marks it (property defer_destroy "on") instead of
 * failing, and the snapshot goes once its last clone has gone
 * (ds_snapshot_reap_deferred, run after every dataset delete, promote
 * and release and at start-up); and holds (pool.snapshot.hold/release:
 * a held snapshot is not destroyed, deferred or not). CSI drivers keep their bookkeeping in the
 * first and delete snapshots of restored volumes with the second.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "core/log.h"
#include "core/util.h"

/* One user property's key: "ns:name", as ZFS names them. NULL if valid,
 * else why not. */
static const char *user_key_why(const char *key, size_t len)
{
    if (len != strlen(key))
        return "the name contains a NUL byte";
    if (len < 3 || len > DS_USER_PROP_KEY_MAX)
        return "a user property name has 3 to 256 characters";
    if (!strchr(key, ':'))
        return "only user properties (\"namespace:name\") can be set on a snapshot";
    if (strncmp(key, "blockd:", 7) == 0)
        return "the \"blockd:\" namespace is reserved";
    for (const char *p = key; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr(":_-.", *p)))
            return "a user property name has lowercase letters, digits and ':', '_', '-', '.'";
    return NULL;
}

int ds_snap_props_decode(struct api_call *call, json_t *props, struct ds_user_props *out)
{
    const char *key;
    json_t *value;
    char field[DS_USER_PROP_KEY_MAX + 64];
    size_t i = 0;

    memset(out, 0, sizeof(*out));
    if (json_object_size(props) == 0)
        return 0;
    out->v = calloc(json_object_size(props), sizeof(*out->v));
    if (!out->v)
        return api_error(call, ENOMEM, "out of memory");
    json_object_foreach(props, key, value)
    {
        const char *why = user_key_why(key, strlen(key));

        snprintf(field, sizeof(field), "%s.properties.%s", api_call_method(call), key);
        if (!why && !json_is_string(value))
            why = "Input should be a valid string";
        else if (!why && (json_string_length(value) > DS_USER_PROP_VALUE_MAX ||
                          strlen(json_string_value(value)) != json_string_length(value)))
            why = "a value has at most 8192 bytes and no NUL byte";
        if (why) {
            api_verr(call, field, EINVAL, "%s", why);
            continue;
        }
        out->v[i].key = strdup(key);
        out->v[i].value = strdup(json_string_value(value));
        out->v[i].has_value = true;
        out->n = ++i;
        if (!out->v[i - 1].key || !out->v[i - 1].value) {
            ds_user_props_free(out);
            return api_error(call, ENOMEM, "out of memory");
        }
    }
    return api_has_verrs(call) ? -1 : 0;
}

int ds_snap_props_store(int64_t id, const struct ds_user_props *props)
{
    for (size_t i = 0; i < props->n; i++) {
        int rc = props->v[i].remove ? ds_snapshot_prop_remove(id, props->v[i].key)
                                    : ds_snapshot_prop_set(id, props->v[i].key, props->v[i].value);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ds_snapshot_props_each's callback: one property into the row. */
static int prop_encode(const char *name, const char *value, void *arg)
{
    json_t *row = arg, *props = json_object_get(row, "properties");
    bool user = strchr(name, ':') != NULL;

    if (strcmp(name, DS_SNAP_HOLD) == 0) { /* TrueNAS's shape: {tag: count} */
        json_object_set_new(json_object_get(row, "holds"), value, json_integer(1));
        json_object_set_new(props, "userrefs", ds_prop(json_integer(1), "1", "1", "NONE"));
        return 0;
    }

    json_object_set_new(props, name,
                        ds_prop(json_string(value), value, value, user ? "LOCAL" : "NONE"));
    if (user)
        json_object_set_new(json_object_get(row, "user_properties"), name,
                            ds_prop(json_string(value), value, value, "LOCAL"));
    return 0;
}

void ds_snap_props_encode(int64_t id, json_t *row)
{
    json_t *props = json_object_get(row, "properties");

    json_object_set_new(props, DS_SNAP_DEFER_DESTROY, ds_prop(json_false(), "off", "off", "NONE"));
    json_object_set_new(props, "userrefs", ds_prop(json_integer(0), "0", "0", "NONE"));
    json_object_set_new(row, "user_properties", json_object());
    if (ds_snapshot_props_each(id, prop_encode, row) < 0)
        log_warn("datasets: cannot read the properties of snapshot %lld", (long long)id);
    json_t *d = json_object_get(props, DS_SNAP_DEFER_DESTROY);
    json_object_set_new(
        d, "parsed",
        json_boolean(strcmp(json_string_value(json_object_get(d, "value")), "on") == 0));
}

/* ---- pool.snapshot.update ---- */

/* pool.snapshot.update's data, decoded by ds_snap_update_fields. */
struct snap_update {
    struct ds_user_props props; /* user_properties_update */
    struct api_strv remove;     /* user_properties_remove: names */
};

static const struct api_field remove_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 3, .max = DS_USER_PROP_KEY_MAX};

const struct api_field ds_snap_update_fields[DS_SNAP_UPDATE_NFIELDS] = {
    DS_USER_PROPS_FIELD("user_properties_update", &ds_user_prop_update_item, struct snap_update,
                        props),
    {.name = "user_properties_remove",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = 256,
     .items = &remove_item,
     API_AT(struct snap_update, remove, api_codec_strv)},
};

/* user_properties_remove's names into *out as removals (after the
 * updates, so that one list cannot undo the other silently: a key in both
 * is refused). Field errors on call. */
static int update_removals(struct api_call *call, const struct api_strv *names,
                           struct ds_user_props *out)
{
    size_t n = names->n, base = out->n;
    struct ds_user_prop *grown;
    char field[128];

    if (!n)
        return 0;
    grown = realloc(out->v, (base + n) * sizeof(*grown));
    if (!grown)
        return api_error(call, ENOMEM, "out of memory");
    out->v = grown;
    for (size_t i = 0; i < n; i++) {
        const char *name = names->v[i];
        const char *why = user_key_why(name, strlen(name)); /* a NUL: the table refused it */

        snprintf(field, sizeof(field), "%s.user_properties_remove.%zu", api_call_method(call), i);
        for (size_t k = 0; !why && k < base; k++)
            if (strcmp(out->v[k].key, name) == 0)
                why = "also in user_properties_update";
        if (why)
            api_verr(call, field, EINVAL, "%s", why);
        memset(&out->v[out->n], 0, sizeof(out->v[0]));
        out->v[out->n].key = strdup(name);
        out->v[out->n].key_len = strlen(name);
        out->v[out->n].remove = true;
        if (!out->v[out->n++].key)
            return api_error(call, ENOMEM, "out of memory");
    }
    return api_has_verrs(call) ? -1 : 0;
}

/* The update's lists, decoded and checked: user_properties_update items
 * {key, value} set and {key, remove: true} remove (TrueNAS's dataset
 * form, which clients also send for snapshots); user_properties_remove
 * names remove. 0 or -1 (the call's error set; *out freed). */
static int update_decode(struct api_call *call, json_t *data, struct ds_user_props *out)
{
    struct snap_update u = {0};
    char field[128];
    int rc;

    snprintf(field, sizeof(field), "%s.user_properties_update", api_call_method(call));
    rc = api_fields_decode(ds_snap_update_fields, DS_SNAP_UPDATE_NFIELDS, data, &u);
    if (rc < 0) {
        api_fields_clear(ds_snap_update_fields, DS_SNAP_UPDATE_NFIELDS, &u);
        *out = (struct ds_user_props){0};
        return api_error(call, ENOMEM, "out of memory");
    }
    *out = u.props; /* the caller's from here on */
    /* ':', the reserved namespace, value xor remove: the dataset rules;
     * then what ZFS also asks of a snapshot's property name */
    ds_check_user_props(call, field, out, true);
    for (size_t i = 0; i < out->n; i++) {
        const struct ds_user_prop *p = &out->v[i];
        const char *why;
        char f[160];

        if (!p->key || !strchr(p->key, ':') || strncmp(p->key, "blockd:", 7) == 0 ||
            strlen(p->key) != p->key_len)
            continue; /* reported by the schema or ds_check_user_props */
        why = user_key_why(p->key, p->key_len);
        snprintf(f, sizeof(f), "%s.%zu.key", field, i);
        if (why)
            api_verr(call, f, EINVAL, "%s", why);
    }
    rc = update_removals(call, &u.remove, out);
    api_strv_clear(&u.remove);
    if (rc < 0 || api_has_verrs(call)) {
        ds_user_props_free(out);
        return api_has_verrs(call) ? api_invalid(call) : -1;
    }
    return 0;
}

int ds_snapshot_update_method(struct api_call *call, json_t *params, json_t **result)
{
    struct ds_user_props props;
    struct ds_snap snap;
    struct ds_pool pool;
    struct cfg_tx tx;
    char full[DS_NAME_BUF * 2];
    int rc = update_decode(call, api_param(params, 1), &props);

    if (rc < 0)
        return rc;
    ds_ops_lock();
    db_lock();
    rc = ds_snapshot_id_param(call, params, &snap, &pool, full);
    if (rc == 0 && (rc = cfg_tx_begin(&tx)) == 0) {
        rc = ds_snap_props_store(snap.id, &props);
        cfg_tx_changed(&tx, CFG_SNAPSHOT, snap.id, CFG_UPDATED);
        rc = rc == 0 ? cfg_tx_commit(&tx) : (cfg_tx_abort(&tx), rc);
        if (rc < 0)
            rc = ds_api_errno(call, rc, "cannot update snapshot", full);
    }
    if (rc == 0)
        *result = ds_snapshot_row(snap.dataset, snap.name, true);
    db_unlock();
    ds_ops_unlock();
    if (rc == 0)
        log_info("datasets: snapshot %s: %zu user propert%s changed (peer %s)", full, props.n,
                 props.n == 1 ? "y" : "ies", api_call_peer(call));
    ds_user_props_free(&props);
    if (rc == 0 && !*result)
        return api_error(call, EIO, "snapshot %s vanished", full);
    return rc;
}

/* ---- holds ---- */

/* pool.snapshot.hold / release [id, {recursive?}]: the hold "truenas"
 * placed or taken off (a volume has no children: recursive changes
 * nothing). Release of a snapshot without it fails as ZFS's does; after
 * a release a snapshot marked for deferred destroy without clones goes. */
static int hold_set(struct api_call *call, json_t *params, bool hold)
{
    struct ds_snap snap;
    struct ds_pool pool;
    struct cfg_tx tx;
    char full[DS_NAME_BUF * 2], tag[32];
    int rc;

    ds_ops_lock();
    db_lock();
    rc = ds_snapshot_id_param(call, params, &snap, &pool, full);
    if (rc == 0 && !hold && ds_snapshot_prop_get(snap.id, DS_SNAP_HOLD, tag, sizeof(tag)) < 0)
        rc = api_error(call, ESRCH,
                       "cannot release hold from snapshot '%s': no such tag on this "
                       "dataset",
                       full);
    if (rc == 0 && (rc = cfg_tx_begin(&tx)) == 0) {
        rc = hold ? ds_snapshot_prop_set(snap.id, DS_SNAP_HOLD, "truenas")
                  : ds_snapshot_prop_remove(snap.id, DS_SNAP_HOLD);
        cfg_tx_changed(&tx, CFG_SNAPSHOT, snap.id, CFG_UPDATED);
        rc = rc == 0 ? cfg_tx_commit(&tx) : (cfg_tx_abort(&tx), rc);
        if (rc < 0)
            rc = ds_api_errno(call, rc, hold ? "cannot hold" : "cannot release", full);
    }
    db_unlock();
    ds_ops_unlock();
    if (rc < 0)
        return rc;
    log_info("datasets: snapshot %s %s (peer %s)", full, hold ? "held" : "released",
             api_call_peer(call));
    if (!hold)
        ds_snapshot_reap_deferred(false, api_call_peer(call));
    return 0;
}

int ds_snapshot_hold_method(struct api_call *call, json_t *params, json_t **result)
{
    int rc = hold_set(call, params, true);

    if (rc == 0)
        *result = json_null();
    return rc;
}

int ds_snapshot_release_method(struct api_call *call, json_t *params, json_t **result)
{
    int rc = hold_set(call, params, false);

    if (rc == 0)
        *result = json_null();
    return rc;
}

int ds_snapshot_held(struct api_call *call, const struct ds_snap *snap, const char *full)
{
    char tag[32];
    int rc = ds_snapshot_prop_get(snap->id, DS_SNAP_HOLD, tag, sizeof(tag));

    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot read the holds of", full);
    return api_error(call, EBUSY, "cannot destroy snapshot %s: dataset is busy (held: %s)", full,
                     tag);
}

/* ---- deferred destroy ---- */

int ds_snapshot_defer_destroy(struct api_call *call, const struct ds_snap *snap, const char *full)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc == 0) {
        rc = ds_snapshot_prop_set(snap->id, DS_SNAP_DEFER_DESTROY, "on");
        cfg_tx_changed(&tx, CFG_SNAPSHOT, snap->id, CFG_UPDATED);
        rc = rc == 0 ? cfg_tx_commit(&tx) : (cfg_tx_abort(&tx), rc);
    }
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot mark for deferred destroy", full);
    return 0;
}

/* The snapshots to reap, collected under the DB lock. */
struct reap_list {
    struct ds_snap *v;
    size_t n, cap;
};

static int reap_add(const struct ds_snap *s, void *arg)
{
    struct reap_list *l = arg;

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct ds_snap *grown = realloc(l->v, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = *s;
    return 0;
}

/* DB locked: snapshot s's row goes, unless it is exported (then it stays
 * marked and a later reap retries). 0 if removed, else -errno. */
static int reap_row(const struct ds_snap *s, const char *full)
{
    char why[256] = "";
    struct cfg_tx tx;
    int rc;

    if (ds_in_use(full, why, sizeof(why))) {
        log_warn("datasets: deferred destroy of %s waits: it is in use (%s)", full, why);
        return -EBUSY;
    }
    rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    rc = ds_snapshot_delete(s->id);
    cfg_tx_changed(&tx, CFG_SNAPSHOT, s->id, CFG_DELETED);
    return rc == 0 ? cfg_tx_commit(&tx) : (cfg_tx_abort(&tx), rc);
}

/* ds_ops locked, DB not: the row of s, then its storage. 0 if it went,
 * else -errno (it stays marked). */
static int reap_one(const struct ds_snap *s, bool at_start, const char *peer)
{
    char full[DS_NAME_BUF * 2], poolname[DS_NAME_BUF];
    struct ds_pool pool;
    int rc;

    snprintf(full, sizeof(full), "%s@%s", s->dataset, s->name);
    ds_pool_of(s->dataset, poolname, sizeof(poolname));
    db_lock();
    rc = ds_pool_get(poolname, &pool);
    if (rc == 0 && at_start && ds_pool_is_rbd(&pool))
        rc = -EAGAIN; /* start-up does not wait for a cluster: the next delete reaps it */
    else if (rc == 0)
        rc = reap_row(s, full);
    db_unlock();
    if (rc < 0) {
        if (rc != -EBUSY && rc != -EAGAIN)
            log_error("datasets: deferred destroy of %s: %s", full, strerror(-rc));
        return rc;
    }
    ds_cache_drop(full, false);
    rc = ds_backend_of(&pool)->snapshot_remove(&pool, s->dataset, s->name);
    if (rc < 0 && rc != -ENOENT)
        log_error("datasets: remove snapshot %s: %s", full, strerror(-rc));
    log_info("datasets: snapshot %s destroyed: it was marked for deferred destroy and its last "
             "clone is gone (peer %s)",
             full, peer);
    return 0;
}

void ds_snapshot_reap_deferred(bool at_start, const char *peer)
{
    struct reap_list l = {0};
    char full[DS_NAME_BUF * 2];
    int rc;

    ds_ops_lock();
    db_lock();
    rc = ds_snapshot_each_deferred_free(reap_add, &l);
    db_unlock();
    if (rc < 0)
        log_error("datasets: listing the snapshots marked for deferred destroy: %s", strerror(-rc));
    for (size_t i = 0; i < l.n; i++)
        if (reap_one(&l.v[i], at_start, peer) < 0)
            l.v[i].id = 0; /* stays */
    ds_ops_unlock();
    /* EV_DATASET goes out unlocked, as after a delete */
    for (size_t i = 0; i < l.n; i++) {
        if (!l.v[i].id)
            continue;
        snprintf(full, sizeof(full), "%s@%s", l.v[i].dataset, l.v[i].name);
        ds_notify(DATASETS_DELETED, full, NULL);
    }
    free(l.v);
}
