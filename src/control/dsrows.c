/*
 * pool.dataset.query rows, shaped like TrueNAS: properties are objects
 * {"parsed", "rawvalue", "value", "source"}; a dataset's id is its name;
 * FILESYSTEM rows carry their children (full rows) like TrueNAS does.
 * The one encoder of a dataset (row_encode: struct ds_row_view, what its
 * backend reports and its dataset_props → the row); the rows come from
 * the store's walk (dataset_store.h), never from SQL here.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "control/dataset_store.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsprops.h"
#include "control/dsquery.h"
#include "core/log.h"

static json_t *prop_str(const char *parsed, const char *raw, const char *value, const char *src)
{
    return ds_prop(json_string(parsed), raw, value, src);
}

static json_t *prop_creation(int64_t ms)
{
    char raw[32], value[64];
    time_t t = (time_t)(ms / 1000);
    struct tm tm;

    snprintf(raw, sizeof(raw), "%lld", (long long)(ms / 1000));
    gmtime_r(&t, &tm);
    strftime(value, sizeof(value), "%a %b %e %H:%M %Y", &tm);
    return ds_prop(json_pack("{s:I}", "$date", (json_int_t)ms), raw, value, "NONE");
}

/* Sync property in ZFS' lower-case raw form and TrueNAS' upper-case value. */
static json_t *prop_sync(enum volume_sync s)
{
    const char *up = volume_sync_name(s);
    char low[16];
    size_t i;

    for (i = 0; up[i] && i + 1 < sizeof(low); i++)
        low[i] = (char)(up[i] >= 'A' && up[i] <= 'Z' ? up[i] + 32 : up[i]);
    low[i] = '\0';
    return prop_str(low, low, up, s == VOLUME_SYNC_STANDARD ? "DEFAULT" : "LOCAL");
}

/* Where a dataset's dataset_props rows go in its row. */
struct row_props_out {
    json_t *row, *user;
    struct ds_props_local local;
};

/* ds_dataset_props_each's callback: managedby, a user property ("ns:name",
 * always with a ':') or a local ZFS property. */
static void row_prop_add(const char *n, const char *v, void *arg)
{
    struct row_props_out *o = arg;

    if (strcmp(n, "managedby") == 0)
        json_object_set_new(o->row, "managedby", prop_str(v, v, v, "LOCAL"));
    else if (strchr(n, ':')) /* user properties always have one */
        json_object_set_new(o->user, n, prop_str(v, v, v, "LOCAL"));
    else
        ds_props_local_add(&o->local, n, v);
}

/* managedby, user_properties and the ZFS properties of dsprops.h from
 * dataset_props (the latter with their inherited values). */
static void row_props(json_t *row, int64_t id, const char *name, enum ds_type type)
{
    struct row_props_out o = {.row = row, .user = json_object_get(row, "user_properties")};

    (void)ds_dataset_props_each(id, row_prop_add, &o);
    if (!json_object_get(row, "managedby"))
        json_object_set_new(row, "managedby", prop_str("", "-", "-", "DEFAULT"));
    ds_props_emit(row, name, type, &o.local);
}

/* The properties every dataset has, in TrueNAS's shape. */
static void row_common_props(json_t *row, const struct ds_row *r, const char *origin,
                             uint64_t avail, const char *path)
{
    json_object_set_new(
        row, "comments",
        prop_str(r->comments, r->comments, r->comments, r->comments[0] ? "LOCAL" : "NONE"));
    json_object_set_new(row, "origin", prop_str(origin, origin, origin, "NONE"));
    json_object_set_new(row, "readonly",
                        ds_prop(json_boolean(r->readonly), r->readonly ? "on" : "off",
                                r->readonly ? "ON" : "OFF", r->readonly ? "LOCAL" : "DEFAULT"));
    json_object_set_new(row, "sync", prop_sync(r->sync));
    json_object_set_new(row, "creation", prop_creation(r->created));
    json_object_set_new(row, "available", ds_prop_size(avail, "NONE"));
    json_object_set_new(row, "path", json_string(path));
}

/* A volume's own properties, and its usage from the backend (*used,
 * *snapused; none for a memory volume). */
static void row_volume_props(json_t *row, const struct ds_row *r, const struct ds_pool *pool,
                             const struct ds_backend *be, uint64_t *used, uint64_t *snapused)
{
    char vbs[16], vbsraw[16];

    if (!r->memory) {
        struct volume *v = ds_cache_peek(r->name);

        be->volume_usage(pool, r->name, r->id, v, used, snapused);
        if (v)
            volume_unref(v);
    }
    json_object_set_new(row, "mountpoint", json_null());
    json_object_set_new(row, "volsize", ds_prop_size(r->volsize, "LOCAL"));
    snprintf(vbsraw, sizeof(vbsraw), "%u", r->volblocksize);
    ds_nicenum(r->volblocksize, vbs, sizeof(vbs));
    json_object_set_new(row, "volblocksize",
                        ds_prop(json_integer(r->volblocksize), vbsraw, vbs,
                                r->volblocksize == 16384 ? "DEFAULT" : "LOCAL"));
    json_object_set_new(row, "sparse", json_boolean(r->sparse));
    json_object_set_new(row, "refreservation",
                        ds_prop_size(r->sparse ? 0 : r->volsize, r->sparse ? "DEFAULT" : "LOCAL"));
    json_object_set_new(row, "backend", json_string(r->memory ? "memory" : be->name));
    json_object_set_new(row, "latency_us", json_integer(r->latency_us));
}

/* The row of dataset v (keys in TrueNAS's order); *used_out is what it
 * and its snapshots use (rows_link adds the children's). New row or
 * NULL. */
static json_t *row_encode(const struct ds_row_view *v, uint64_t *used_out)
{
    const struct ds_row *r = &v->row;
    const struct ds_backend *be = ds_backend_of(&v->pool);
    char path[PATH_MAX];
    uint64_t used = 0, snapused = 0, avail;
    json_t *row;

    if (be->locator(&v->pool, r->name, NULL, path, sizeof(path)) < 0)
        path[0] = '\0';
    avail = be->available(&v->pool);
    row = json_pack("{s:s, s:s, s:s, s:s, s:b, s:n, s:b, s:b, s:[], s:{}, s:I}", "id", r->name,
                    "name", r->name, "pool", v->pool.name, "type",
                    r->type == DS_VOLUME ? "VOLUME" : "FILESYSTEM", "encrypted", false,
                    "encryption_root", "key_loaded", false, "locked", false, "children",
                    "user_properties", "snapshot_count", (json_int_t)v->snapshot_count);
    if (!row)
        return NULL;
    row_common_props(row, r, v->origin, avail, path);
    if (r->type == DS_VOLUME)
        row_volume_props(row, r, &v->pool, be, &used, &snapused);
    else
        json_object_set_new(row, "mountpoint", json_string(path));
    row_props(row, r->id, r->name, r->type); /* after refreservation: a local one wins */
    json_object_set_new(row, "usedbydataset", ds_prop_size(used, "NONE"));
    json_object_set_new(row, "usedbysnapshots", ds_prop_size(snapused, "NONE"));
    json_object_set_new(row, "usedbychildren", ds_prop_size(0, "NONE"));
    *used_out = used + snapused;
    return row;
}

/* After every row exists: fill FILESYSTEM used/usedbychildren and attach
 * children. Rows are in name order, so a parent precedes its children. */
static void rows_link(json_t *rows, const uint64_t *used)
{
    size_t n = json_array_size(rows);
    uint64_t *child_used = calloc(n ? n : 1, sizeof(*child_used));

    if (!child_used)
        return;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(rows, i), "name"));
        size_t len = strlen(name);

        for (size_t j = i + 1; j < n; j++) {
            json_t *c = json_array_get(rows, j);
            const char *cn = json_string_value(json_object_get(c, "name"));

            if (strncmp(cn, name, len) != 0 || cn[len] != '/')
                break; /* name order: descendants are contiguous */
            child_used[i] += used[j];
            if (!strchr(cn + len + 1, '/'))
                json_array_append(json_object_get(json_array_get(rows, i), "children"), c);
        }
    }
    for (size_t i = 0; i < n; i++) {
        json_t *row = json_array_get(rows, i);
        json_object_set_new(row, "usedbychildren", ds_prop_size(child_used[i], "NONE"));
        json_object_set_new(row, "used", ds_prop_size(used[i] + child_used[i], "NONE"));
    }
    free(child_used);
}

/* The rows being built, and what each one uses (for rows_link). */
struct rows_acc {
    json_t *rows;
    uint64_t *used;
    size_t n, cap;
};

/* ds_dataset_each's callback: encode v and keep it. */
static int row_add(const struct ds_row_view *v, void *arg)
{
    struct rows_acc *a = arg;
    uint64_t u = 0;
    json_t *row = row_encode(v, &u);

    if (!row)
        return 0;
    if (a->n == a->cap) {
        uint64_t *nu = realloc(a->used, (a->cap ? a->cap * 2 : 16) * sizeof(*nu));
        if (!nu) {
            json_decref(row);
            return 1; /* stop: the rows so far are answered */
        }
        a->used = nu;
        a->cap = a->cap ? a->cap * 2 : 16;
    }
    a->used[a->n++] = u;
    json_array_append_new(a->rows, row);
    return 0;
}

/* The rows of the datasets keys selects (which takes in the descendants
 * of every dataset it takes in: a row's children and used come from
 * them). A new array, or NULL. */
static json_t *rows_select_keys(const struct ds_row_keys *keys)
{
    struct rows_acc a = {.rows = json_array()};
    int rc;

    if (!a.rows)
        return NULL;
    ds_props_batch_begin();
    rc = ds_dataset_each(keys, row_add, &a);
    ds_props_batch_end();
    if (rc < 0) {
        json_decref(a.rows);
        free(a.used);
        return NULL;
    }
    rows_link(a.rows, a.used);
    free(a.used);
    return a.rows;
}

static json_t *rows_select(const char *name)
{
    struct ds_row_keys keys = {.kind = DS_KEYS_ALL};

    if (name)
        keys = (struct ds_row_keys){.kind = DS_KEYS_SUBTREES, .names = &name, .n = 1};
    return rows_select_keys(&keys);
}

bool ds_query_pushdown = true;

/* Strings of an [field, "=", s] or [field, "in", [s…]] top-level filter
 * (new reference), or NULL when it cannot narrow. */
static json_t *hint_strings(json_t *params, const char *field)
{
    const char *op = NULL;
    json_t *v = api_query_hint(params, field, &op), *item;
    size_t i;

    if (!v)
        return NULL;
    if (strcmp(op, "=") == 0)
        return json_is_string(v) ? json_pack("[O]", v) : NULL;
    if (json_array_size(v) > DS_HINT_MAX)
        return NULL;
    json_array_foreach(v, i, item) if (!json_is_string(item)) return NULL;
    return json_incref(v);
}

json_t *ds_query_hint_names(json_t *params, const char *const *fields, size_t n)
{
    if (!ds_query_pushdown)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *names = hint_strings(params, fields[i]);
        if (names)
            return names;
    }
    return NULL;
}

const char *ds_query_hint_prefix(json_t *params, const char *const *fields, size_t n)
{
    json_t *filters = api_param(params, 0), *f;
    size_t i;

    if (!ds_query_pushdown)
        return NULL;
    json_array_foreach(filters, i, f)
    {
        const char *field = json_string_value(json_array_get(f, 0));
        const char *op = json_string_value(json_array_get(f, 1));
        const char *v = json_string_value(json_array_get(f, 2));

        if (json_array_size(f) != 3 || !field || !op || !v || strcmp(op, "^") != 0 || !v[0])
            continue;
        for (size_t k = 0; k < n; k++)
            if (strcmp(field, fields[k]) == 0)
                return v;
    }
    return NULL;
}

int ds_prefix_end(const char *prefix, char *buf, size_t len)
{
    size_t n = strlen(prefix);

    if (n + 1 > len)
        return -ENAMETOOLONG;
    memcpy(buf, prefix, n + 1);
    /* The least string above every string starting with prefix: drop
     * trailing 0xff bytes, then increment the last one. */
    while (n > 0 && (unsigned char)buf[n - 1] == 0xff)
        buf[--n] = '\0';
    if (n == 0)
        return -ERANGE;
    buf[n - 1] = (char)((unsigned char)buf[n - 1] + 1);
    return 0;
}

json_t *ds_dataset_rows_hinted(json_t *params)
{
    static const char *const fields[] = {"id", "name"};
    json_t *names = ds_query_hint_names(params, fields, 2);
    const char *prefix = names ? NULL : ds_query_hint_prefix(params, fields, 2);
    struct ds_row_keys keys = {.kind = DS_KEYS_SUBTREES};
    const char **v;
    json_t *rows;

    if (!names && !prefix)
        return ds_dataset_rows();
    if (!names) {
        char end[DS_NAME_BUF * 2];

        if (ds_prefix_end(prefix, end, sizeof(end)) < 0)
            return ds_dataset_rows();
        /* The descendants of a name with that prefix have it too. */
        keys = (struct ds_row_keys){.kind = DS_KEYS_RANGE, .lo = prefix, .hi = end};
        return rows_select_keys(&keys);
    }
    v = calloc(json_array_size(names) + 1, sizeof(*v));
    for (size_t k = 0; v && k < json_array_size(names); k++)
        v[keys.n++] = json_string_value(json_array_get(names, k));
    keys.names = v;
    rows = v ? rows_select_keys(&keys) : NULL;
    free(v);
    json_decref(names);
    return rows;
}

json_t *ds_dataset_rows(void)
{
    return rows_select(NULL);
}

json_t *ds_dataset_row(const char *name)
{
    json_t *rows, *row;

    /* The dataset sorts first, its descendants follow (for children). */
    rows = rows_select(name);
    if (!rows)
        return NULL;
    row = json_array_get(rows, 0);
    if (row && strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
        json_incref(row);
    else
        row = NULL;
    json_decref(rows);
    return row;
}
