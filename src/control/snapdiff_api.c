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

#include "api/fields.h"
#include "api/validate.h"
#include "control/snapdiff.h"
#include "core/log.h"
#include "core/util.h"

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

/* A request of either method, decoded once by its table (owned:
 * api_fields_clear). */
struct diff_req {
    char *base, *target; /* changed_blocks */
    char *snapshot;      /* allocated_blocks */
    int64_t offset;
    int64_t length;      /* -1 when not given: to the end */
    int64_t max_results; /* a page's size: 10000 unless given */
};

#define AT(member, codec) API_AT(struct diff_req, member, codec)
#define RANGE_FIELDS                                                                               \
    {.name = "offset",                                                                             \
     .type = API_T_INT,                                                                            \
     .flags = API_RANGE,                                                                           \
     .min = 0,                                                                                     \
     .max = INT64_MAX,                                                                             \
     .def = "0",                                                                                   \
     AT(offset, api_codec_i64)},                                                                   \
        {.name = "length",                                                                         \
         .type = API_T_INT,                                                                        \
         .flags = API_RANGE,                                                                       \
         .min = 0,                                                                                 \
         .max = INT64_MAX,                                                                         \
         AT(length, api_codec_i64)},                                                               \
    {                                                                                              \
        .name = "max_results", .type = API_T_INT, .flags = API_RANGE, .min = 1,                    \
        .max = RESULTS_MAX, .def = "10000", AT(max_results, api_codec_i64)                         \
    }

static const struct api_field changed_fields[] = {
    {.name = "base",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 2 * NAME_DATASET_MAX,
     AT(base, api_codec_str)},
    {.name = "target",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 2 * NAME_DATASET_MAX,
     AT(target, api_codec_str)},
    RANGE_FIELDS,
};
static const struct api_field allocated_fields[] = {
    {.name = "snapshot",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 2 * NAME_DATASET_MAX,
     AT(snapshot, api_codec_str)},
    RANGE_FIELDS,
};
#undef RANGE_FIELDS
#undef AT

/* params[0] (checked against fields by the dispatcher) into *r: the
 * table's defaults, then the keys given. 0 or -ENOMEM. */
static int diff_decode(json_t *params, const struct api_field *fields, size_t n, struct diff_req *r)
{
    memset(r, 0, sizeof(*r));
    r->length = -1;
    int rc = api_fields_defaults(fields, n, r);
    return rc < 0 ? rc : api_fields_decode(fields, n, api_param(params, 0), r);
}

/* offset and length (defaults: 0 and the rest) checked against size. */
static int range_of(struct api_call *call, const struct diff_req *r, uint64_t size, uint64_t *off,
                    uint64_t *len)
{
    char path[128];

    *off = (uint64_t)r->offset;
    if (*off > size) {
        snprintf(path, sizeof(path), "%s.offset", api_call_method(call));
        api_verr(call, path, EINVAL, "offset %llu is past the end (%llu bytes)",
                 (unsigned long long)*off, (unsigned long long)size);
        return api_invalid(call);
    }
    *len = r->length >= 0 ? (uint64_t)r->length : size - *off;
    if (*len > size - *off) {
        snprintf(path, sizeof(path), "%s.length", api_call_method(call));
        api_verr(call, path, EINVAL, "offset %llu + length %llu is past the end (%llu bytes)",
                 (unsigned long long)*off, (unsigned long long)*len, (unsigned long long)size);
        return api_invalid(call);
    }
    return 0;
}

static int run_page(struct api_call *call, const struct diff_req *r, struct ds_diff *d,
                    bool changed, json_t **result)
{
    struct page p = {
        .ranges = json_array(), .max = (size_t)r->max_results, .next_offset = UINT64_MAX};
    uint64_t off = 0, len = 0;

    if (range_of(call, r, d->size, &off, &len) < 0) {
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

/* The page of r over the open d, then r and d released. */
static int diff_page(struct api_call *call, struct diff_req *r, struct ds_diff *d, bool changed,
                     int open_rc, const char *field, const char *why, json_t **result)
{
    int rc =
        open_rc < 0 ? open_error(call, open_rc, field, why) : run_page(call, r, d, changed, result);

    ds_diff_close(d);
    return rc;
}

static int m_changed_blocks(struct api_call *call, json_t *params, json_t **result)
{
    struct diff_req r;
    const char *field = NULL;
    char why[640];
    struct ds_diff d;
    int rc = diff_decode(params, changed_fields, ARRAY_SIZE(changed_fields), &r);

    if (rc < 0) {
        api_fields_clear(changed_fields, ARRAY_SIZE(changed_fields), &r);
        return api_error(call, ENOMEM, "out of memory");
    }
    rc = ds_diff_open(r.base, r.target, &d, &field, why, sizeof(why));
    rc = diff_page(call, &r, &d, true, rc, field, why, result);
    api_fields_clear(changed_fields, ARRAY_SIZE(changed_fields), &r);
    return rc;
}

static int m_allocated_blocks(struct api_call *call, json_t *params, json_t **result)
{
    struct diff_req r;
    const char *field = NULL;
    char why[640];
    struct ds_diff d;
    int rc = diff_decode(params, allocated_fields, ARRAY_SIZE(allocated_fields), &r);

    if (rc < 0) {
        api_fields_clear(allocated_fields, ARRAY_SIZE(allocated_fields), &r);
        return api_error(call, ENOMEM, "out of memory");
    }
    rc = ds_diff_open_one(r.snapshot, &d, &field, why, sizeof(why));
    rc = diff_page(call, &r, &d, false, rc, field, why, result);
    api_fields_clear(allocated_fields, ARRAY_SIZE(allocated_fields), &r);
    return rc;
}

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
