/*
 * pool.snapshot.changed_blocks and pool.snapshot.allocated_blocks: the
 * blockd extensions for incremental backup (docs/api-datasets.md), shaped
 * like the CSI SnapshotMetadata service (GetMetadataDelta /
 * GetMetadataAllocated): byte ranges in ascending order, a page of at
 * most max_results, and next_offset to ask for the next page from (null
 * once the range is covered).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/validate.h"
#include "control/snapdiff.h"
#include "core/log.h"
#include "core/util.h"

#define RESULTS_DEFAULT 10000
#define RESULTS_MAX 100000

struct page {
    json_t *ranges;
    size_t max;
    uint64_t next_offset; /* UINT64_MAX: none */
};

static int page_add(uint64_t offset, uint64_t length, void *arg)
{
    struct page *p = arg;
    if (json_array_size(p->ranges) == p->max) {
        p->next_offset = offset;
        return 1;
    }
    json_t *r = json_pack("{sIsI}", "offset", (json_int_t)offset, "length", (json_int_t)length);
    return r && json_array_append_new(p->ranges, r) == 0 ? 0 : -ENOMEM;
}

/* An error of ds_diff_open*: on the field at fault, else the call's. */
static int open_error(struct api_call *call, int rc, const char *field, const char *why)
{
    char path[128];
    if (!field)
        return api_error(call, -rc, "%s", why);
    snprintf(path, sizeof(path), "%s.%s", api_call_method(call), field);
    api_verr(call, path, -rc, "%s", why);
    return api_invalid(call);
}

/* offset and length (defaults: 0 and the rest) checked against size. */
static int range_of(struct api_call *call, json_t *data, uint64_t size, uint64_t *off,
                    uint64_t *len)
{
    json_t *jo = json_object_get(data, "offset"), *jl = json_object_get(data, "length");
    char path[128];

    *off = jo ? (uint64_t)json_integer_value(jo) : 0;
    if (*off > size) {
        snprintf(path, sizeof(path), "%s.offset", api_call_method(call));
        api_verr(call, path, EINVAL, "offset %llu is past the end (%llu bytes)",
                 (unsigned long long)*off, (unsigned long long)size);
        return api_invalid(call);
    }
    *len = jl ? (uint64_t)json_integer_value(jl) : size - *off;
    if (*len > size - *off) {
        snprintf(path, sizeof(path), "%s.length", api_call_method(call));
        api_verr(call, path, EINVAL, "offset %llu + length %llu is past the end (%llu bytes)",
                 (unsigned long long)*off, (unsigned long long)*len, (unsigned long long)size);
        return api_invalid(call);
    }
    return 0;
}

static int run_page(struct api_call *call, json_t *data, struct ds_diff *d, bool changed,
                    json_t **result)
{
    json_t *jm = json_object_get(data, "max_results");
    struct page p = {.ranges = json_array(),
                     .max = jm ? (size_t)json_integer_value(jm) : RESULTS_DEFAULT,
                     .next_offset = UINT64_MAX};
    uint64_t off = 0, len = 0;

    if (range_of(call, data, d->size, &off, &len) < 0) {
        json_decref(p.ranges);
        return -1;
    }
    int rc = changed ? ds_diff_changed(d, off, len, page_add, &p)
                     : ds_diff_allocated(d, off, len, page_add, &p);
    if (rc < 0) {
        json_decref(p.ranges);
        log_warn("datasets: %s of %s: %s (peer %s)", api_call_method(call), d->dataset,
                 strerror(-rc), api_call_peer(call));
        return api_error(call, -rc, "cannot walk the blocks of %s: %s", d->dataset, strerror(-rc));
    }
    *result = json_pack(
        "{soso*sIss}", "ranges", p.ranges, "next_offset",
        p.next_offset == UINT64_MAX ? json_null() : json_integer((json_int_t)p.next_offset),
        "volume_size", (json_int_t)d->size, "source", d->from_log ? "change_log" : "snapshots");
    return *result ? 0 : api_error(call, ENOMEM, "out of memory");
}

static int m_changed_blocks(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0);
    const char *base = json_string_value(json_object_get(data, "base"));
    const char *target = json_string_value(json_object_get(data, "target"));
    const char *field;
    char why[640];
    struct ds_diff d;

    int rc = ds_diff_open(base, target, &d, &field, why, sizeof(why));
    if (rc < 0) {
        ds_diff_close(&d);
        return open_error(call, rc, field, why);
    }
    rc = run_page(call, data, &d, true, result);
    ds_diff_close(&d);
    return rc;
}

static int m_allocated_blocks(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0);
    const char *snap = json_string_value(json_object_get(data, "snapshot"));
    const char *field;
    char why[640];
    struct ds_diff d;

    int rc = ds_diff_open_one(snap, &d, &field, why, sizeof(why));
    if (rc < 0) {
        ds_diff_close(&d);
        return open_error(call, rc, field, why);
    }
    rc = run_page(call, data, &d, false, result);
    ds_diff_close(&d);
    return rc;
}

#define RANGE_FIELDS                                                                               \
    {.name = "offset", .type = API_T_INT, .flags = API_RANGE, .min = 0, .max = INT64_MAX},         \
        {.name = "length", .type = API_T_INT, .flags = API_RANGE, .min = 0, .max = INT64_MAX},     \
    {                                                                                              \
        .name = "max_results", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = RESULTS_MAX \
    }

static const struct api_field changed_fields[] = {
    API_FIELD_STRING("base", API_REQUIRED, 1, 2 * NAME_DATASET_MAX),
    API_FIELD_STRING("target", API_REQUIRED, 1, 2 * NAME_DATASET_MAX),
    RANGE_FIELDS,
};
static const struct api_field allocated_fields[] = {
    API_FIELD_STRING("snapshot", API_REQUIRED, 1, 2 * NAME_DATASET_MAX),
    RANGE_FIELDS,
};
static const struct api_arg changed_args[] = {API_ARG_OBJECT("data", changed_fields, 0)};
static const struct api_arg allocated_args[] = {API_ARG_OBJECT("data", allocated_fields, 0)};

const struct api_method ds_snapdiff_methods[] = {
    {"pool.snapshot.changed_blocks", NULL,
     "Byte ranges that may differ between snapshot base and a newer snapshot or the live volume "
     "target ({base, target, offset?, length?, max_results?} -> {ranges, next_offset})",
     m_changed_blocks, API_READ, API_ARGS(changed_args)},
    {"pool.snapshot.allocated_blocks", NULL,
     "Byte ranges of a snapshot that hold data ({snapshot, offset?, length?, max_results?} -> "
     "{ranges, next_offset})",
     m_allocated_blocks, API_READ, API_ARGS(allocated_args)},
};
const size_t ds_snapdiff_method_count = ARRAY_SIZE(ds_snapdiff_methods);
