/*
 * zfs.resource.query {paths, properties, get_user_properties, get_source,
 * get_children}: TrueNAS 25.10's flat view of datasets and pools with their
 * ZFS properties, which truenas-csi reads a pool's free space from
 * (properties.available.value). Built from pool.dataset.query's rows (the
 * one place datasets are read), reshaped:
 *   {name, pool, type, createtxg, guid, properties: {NAME: {raw, value,
 *    source, rawvalue, parsed}}, user_properties, children: []}
 * value is the parsed value (a number for sizes) as TrueNAS's
 * PropertyValue has it; rawvalue and parsed repeat the pool.dataset.query
 * shape for clients written against that. A pool's name is its root
 * dataset's path. "referenced" is what the dataset itself uses
 * (usedbydataset): blockd keeps no other count.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/validate.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "core/util.h"

static const struct api_field path_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = 1024};
static const struct api_field prop_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = 256};
static const struct api_field query_fields[] = {
    {.name = "paths",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = 4096,
     .items = &path_item},
    {.name = "properties",
     .type = API_T_ARRAY,
     .flags = API_NULLABLE | API_RANGE,
     .min = 0,
     .max = 256,
     .items = &prop_item},
    {.name = "get_user_properties", .type = API_T_BOOL},
    {.name = "get_source", .type = API_T_BOOL},
    {.name = "nest_results", .type = API_T_BOOL},
    {.name = "get_children", .type = API_T_BOOL},
};
static const struct api_arg query_args[] = {{.name = "data",
                                             .type = API_T_OBJECT,
                                             .flags = API_ARG_OPTIONAL,
                                             .fields = query_fields,
                                             .nfields = ARRAY_SIZE(query_fields)}};

/* A stable integer id for a name (FNV-1a, 53 bits so that JSON clients
 * that read numbers as doubles keep it exact): blockd has no ZFS guid. */
static json_int_t name_guid(const char *name)
{
    uint64_t h = 1469598103934665603ull;

    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (json_int_t)(h & ((1ull << 53) - 1));
}

/* pool.dataset.query's property object → TrueNAS's PropertyValue. */
static json_t *prop_value(json_t *p, bool source)
{
    const char *src = json_string_value(json_object_get(p, "source"));
    json_t *parsed = json_object_get(p, "parsed");

    return json_pack("{s:O, s:O, s:o, s:O, s:O}", "raw", json_object_get(p, "rawvalue"), "value",
                     parsed ? parsed : json_null(), "source",
                     source && src ? json_pack("{s:s, s:n}", "type", src, "value") : json_null(),
                     "rawvalue", json_object_get(p, "rawvalue"), "parsed",
                     parsed ? parsed : json_null());
}

/* The row's property NAME in the resource shape, or NULL (no such one). */
static json_t *row_prop(json_t *row, const char *name, bool source)
{
    json_t *p = json_object_get(row, strcmp(name, "referenced") == 0 ? "usedbydataset" : name);

    return json_is_object(p) && json_object_get(p, "rawvalue") ? prop_value(p, source) : NULL;
}

static json_t *entry_properties(json_t *row, json_t *names, bool source)
{
    json_t *out = json_object(), *v;
    const char *key;
    size_t i;

    if (names) {
        json_array_foreach(names, i, v)
        {
            json_t *p = row_prop(row, json_string_value(v), source);
            if (p)
                json_object_set_new(out, json_string_value(v), p);
        }
        return out;
    }
    json_object_foreach(row, key, v)
    {
        json_t *p = row_prop(row, key, source);
        if (p)
            json_object_set_new(out, key, p);
    }
    if (json_object_get(row, "usedbydataset"))
        json_object_set_new(out, "referenced", row_prop(row, "referenced", source));
    return out;
}

/* user_properties {k: {value, source, ...}} → {k: value}. */
static json_t *entry_user_props(json_t *row)
{
    json_t *out = json_object(), *v;
    const char *key;

    json_object_foreach(json_object_get(row, "user_properties"), key, v)
    {
        json_t *val = json_is_object(v) ? json_object_get(v, "value") : v;
        if (json_is_string(val))
            json_object_set(out, key, val);
    }
    return out;
}

static json_t *entry_encode(json_t *row, json_t *data)
{
    json_t *names = json_object_get(data, "properties");
    bool source = ds_bool_or(data, "get_source", false);
    json_t *e =
        json_pack("{s:O, s:O, s:O, s:i, s:I}", "name", json_object_get(row, "name"), "pool",
                  json_object_get(row, "pool"), "type", json_object_get(row, "type"), "createtxg",
                  0, "guid", name_guid(json_string_value(json_object_get(row, "name"))));

    if (!e)
        return NULL;
    json_object_set_new(e, "properties",
                        entry_properties(row, json_is_array(names) ? names : NULL, source));
    json_object_set_new(e, "user_properties",
                        ds_bool_or(data, "get_user_properties", false) ? entry_user_props(row)
                                                                       : json_null());
    json_object_set_new(e, "children", json_array());
    return e;
}

/* Whether row is one of paths, or (children) below one. */
static bool row_wanted(json_t *row, json_t *paths, bool children)
{
    const char *name = json_string_value(json_object_get(row, "name"));
    json_t *p;
    size_t i;

    if (json_array_size(paths) == 0)
        return true;
    json_array_foreach(paths, i, p)
    {
        const char *path = json_string_value(p);
        size_t len = strlen(path);
        if (strcmp(name, path) == 0 ||
            (children && strncmp(name, path, len) == 0 && name[len] == '/'))
            return true;
    }
    return false;
}

/* Every path must exist: a missing one is named (ENOENT, "does not exist"). */
static int paths_check(struct api_call *call, json_t *rows, json_t *paths)
{
    json_t *p, *row;
    size_t i, j;

    json_array_foreach(paths, i, p)
    {
        bool found = false;
        json_array_foreach(rows, j, row)
        {
            found |= json_equal(json_object_get(row, "name"), p);
        }
        if (!found)
            return api_error(call, ENOENT, "%s does not exist", json_string_value(p));
    }
    return 0;
}

static int m_resource_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0), *paths = json_object_get(data, "paths");
    bool children = ds_bool_or(data, "get_children", false);
    json_t *rows, *row;
    size_t i;

    /* the dataset rows, flat, with their properties: the typed reader the
     * pool.dataset.query handler uses, not the dispatcher */
    db_lock();
    rows = ds_dataset_rows();
    db_unlock();
    if (!rows)
        return api_error(call, EIO, "cannot read datasets");
    if (paths_check(call, rows, paths) < 0) {
        json_decref(rows);
        return -1;
    }
    json_t *out = json_array();
    json_array_foreach(rows, i, row)
    {
        if (out && row_wanted(row, paths, children))
            json_array_append_new(out, entry_encode(row, data));
    }
    json_decref(rows);
    if (!out)
        return api_error(call, ENOMEM, "out of memory");
    *result = out;
    return 0;
}

const struct api_method ds_resource_methods[] = {
    {"zfs.resource.query", NULL,
     "Datasets and pools by path with their ZFS properties ({raw, value, source}), as "
     "TrueNAS 25.10",
     m_resource_query, API_READ, API_ARGS(query_args)},
};
const size_t ds_resource_method_count = ARRAY_SIZE(ds_resource_methods);
