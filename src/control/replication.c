/*
 * replication.run_onetime with transport LOCAL, as TrueNAS 25.04 runs it
 * (middleware plugins/replication.py validation, zettarepl's plan):
 *
 *  - each source dataset (and, recursive, its descendants minus exclude)
 *    maps to target_dataset + its path below the sources' common parent;
 *  - snapshots are selected by naming schema (also_include_naming_schema
 *    for PUSH, naming_schema for PULL) or name_regex (repl_select.h);
 *  - the newest snapshot both sides share is the incremental base; the
 *    selected source snapshots newer than it are received in order; with
 *    no base and snapshots on the target the job fails unless
 *    allow_from_scratch (then the target is destroyed and sent whole);
 *  - receiving is "zfs recv -F": target snapshots newer than the base are
 *    destroyed, the target's data becomes the snapshot's, then the target
 *    snapshot is taken. After the base (or a snapshot just received) only
 *    the ranges that may differ are copied (repl_copy.h): those the
 *    source's changed blocks give from the common snapshot to the new one
 *    (store/diff.h: RBD diff, FIEMAP, change log or content compare), and
 *    those the target changed since its copy of the common snapshot; the
 *    source's holes and zeroes there become holes on the target. Without a
 *    common snapshot, or when a diff is unavailable, the copy is full
 *    (between file pools the whole-file update of store/copy.h: reflink,
 *    else compare-and-write; otherwise every allocated range). File and
 *    RBD pools mix in any direction. The job's progress says which;
 *  - readonly SET/REQUIRE/IGNORE, then retention_policy on the targets.
 *
 * The dataset work goes through the typed functions of the methods
 * (pool.dataset.create / update / delete, zfs.snapshot.create / delete:
 * control/ds_internal.h), with the identity of whoever started the job,
 * checked as the dispatcher checks a call of that method
 * (api_call_authorize), so their checks, locking and observers apply; only
 * the data copy into the target volume is done here, under ds_ops_lock()
 * like every long copy. One replication job runs at a time (the others
 * wait, saying so in their progress).
 */
#include "control/replication.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api/fields.h"
#include "api/jobs.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/repl_copy.h"
#include "control/repl_select.h"
#include "control/snapdiff.h"
#include "core/log.h"
#include "core/util.h"
#include "store/changes.h"
#include "store/copy.h"

#define REPL_MAX_DATASETS 256 /* source_datasets, exclude */
#define REPL_MAX_SCHEMAS 64
/* zettarepl: an existing target without snapshots may be overwritten
 * only if it holds less than this (empty datasets are not 0 bytes) */
#define REPL_EMPTY_TARGET_MAX ((uint64_t)10 << 20)

static const char *const direction_values[] = {"PUSH", "PULL", NULL};
enum { DIRECTION_PUSH, DIRECTION_PULL };
static const char *const transport_values[] = {"SSH", "SSH+NETCAT", "LOCAL", "LEGACY", NULL};
enum { TRANSPORT_LOCAL = 2 };
static const char *const netcat_side_values[] = {"LOCAL", "REMOTE", NULL};
static const char *const keyformat_values[] = {"HEX", "PASSPHRASE", NULL};
static const char *const readonly_values[] = {"SET", "REQUIRE", "IGNORE", NULL};
static const char *const retention_values[] = {"SOURCE", "CUSTOM", "NONE", NULL};
static const char *const unit_values[] = {"HOUR", "DAY", "WEEK", "MONTH", "YEAR", NULL};
static const char *const compression_values[] = {"LZ4", "PIGZ", "PLZIP", NULL};
static const char *const level_values[] = {"DEBUG", "INFO", "WARNING", "ERROR", NULL};

static const struct api_field dataset_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = NAME_DATASET_MAX};
static const struct api_field schema_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = NAME_DATASET_MAX};
static const struct api_field int_item = {.type = API_T_INT};
static const struct api_field nonempty_item = {
    .type = API_T_STRING, .flags = API_RANGE, .min = 1, .max = 256};

/* ---- selection ---- */

struct repl_select {
    bool use_regex;
    regex_t regex;
    char **schemas;
    size_t nschemas;
};

static void select_free(struct repl_select *s)
{
    if (s->use_regex)
        regfree(&s->regex);
    for (size_t i = 0; i < s->nschemas; i++)
        free(s->schemas[i]);
    free(s->schemas);
    memset(s, 0, sizeof(*s));
}

/* Is name selected; *when orders it (schema time; unused with a regex). */
static bool select_name(const struct repl_select *s, const char *name, int64_t *when)
{
    if (s->use_regex)
        return repl_regex_match(&s->regex, name);
    for (size_t i = 0; i < s->nschemas; i++)
        if (repl_schema_parse(s->schemas[i], name, when) == 0)
            return true;
    return false;
}

/* ---- snapshot lists (DB) ---- */

struct snap {
    char name[DS_NAME_BUF];
    int64_t id; /* creation order (blockd's createtxg) */
    uint64_t volsize;
    int64_t created;
    bool sel;
    int64_t when;
};

struct snaps {
    struct snap *v;
    size_t n;
};

static void snaps_free(struct snaps *s)
{
    free(s->v);
    s->v = NULL;
    s->n = 0;
}

/* snaps_list's walk: the list and the selection to mark it by. */
struct snaps_walk {
    struct snaps *out;
    size_t cap;
    const struct repl_select *sel;
};

static int snaps_add(const struct ds_snap *ds, void *arg)
{
    struct snaps_walk *w = arg;
    struct snaps *out = w->out;
    struct snap *s;

    if (out->n == w->cap) {
        size_t ncap = w->cap ? w->cap * 2 : 16;
        struct snap *nv = realloc(out->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        out->v = nv;
        w->cap = ncap;
    }
    s = &out->v[out->n++];
    memset(s, 0, sizeof(*s));
    s->id = ds->id;
    snprintf(s->name, sizeof(s->name), "%s", ds->name);
    s->volsize = ds->volsize;
    s->created = ds->created;
    s->when = s->id;
    s->sel = w->sel && select_name(w->sel, s->name, &s->when);
    return 0;
}

/* The snapshots of dataset (none when it does not exist), oldest first,
 * marked by sel. 0 or -errno. */
static int snaps_list(const char *dataset, const struct repl_select *sel, struct snaps *out)
{
    struct snaps_walk w = {.out = out, .sel = sel};
    struct ds_row row;
    int rc;

    out->v = NULL;
    out->n = 0;
    db_lock();
    rc = ds_dataset_get(dataset, &row);
    if (rc == 0)
        rc = ds_snapshot_each_upto(row.id, INT64_MAX, snaps_add, &w);
    else if (rc == -ENOENT)
        rc = 0;
    db_unlock();
    if (rc < 0)
        snaps_free(out);
    return rc;
}

static const struct snap *snaps_find(const struct snaps *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i].name, name) == 0)
            return &s->v[i];
    return NULL;
}

/* Order of two selected snapshots: time, then name (zettarepl's key). */
static int snap_cmp(const struct snap *a, const struct snap *b)
{
    if (a->when != b->when)
        return a->when < b->when ? -1 : 1;
    return strcmp(a->name, b->name);
}

static int snap_cmp_ptr(const void *a, const void *b)
{
    return snap_cmp(*(const struct snap *const *)a, *(const struct snap *const *)b);
}

/* ---- the task ---- */

enum readonly_mode { RO_SET, RO_REQUIRE, RO_IGNORE };
enum retention_mode { RET_SOURCE, RET_CUSTOM, RET_NONE };

/* One source volume and where it goes. */
struct item {
    char src[DS_NAME_BUF], dst[DS_NAME_BUF];
    bool volume;      /* else a FILESYSTEM: only its children carry data */
    bool immediate;   /* the task's source dataset itself (not a child) */
    struct snaps ssn; /* source snapshots */
    struct snaps dsn; /* target snapshots (none if !dst_exists) */
    bool dst_exists;
    bool destroy_first; /* allow_from_scratch: no base, target has snapshots */
    const struct snap *base;
    const struct snap **send; /* source snapshots to receive, in order */
    size_t nsend;
    bool fresh; /* the target was created by this job and holds nothing yet */
};

/* A replication.run_onetime job: its arguments, decoded once by
 * onetime_fields (owned: api_fields_clear), then the plan and progress. */
struct repl_task {
    /* The arguments. */
    int direction; /* index in direction_values: DIRECTION_PUSH, ... */
    int transport; /* index in transport_values */
    struct api_strv sources;
    char *target;
    bool recursive;
    struct api_strv exclude;
    bool properties;
    enum readonly_mode readonly;
    enum retention_mode retention;
    int lifetime_value;  /* CUSTOM: 0 when not given (the range starts at 1)… */
    char *lifetime_unit; /* …and its unit (NULL when not given) */
    bool allow_from_scratch, only_from_scratch, hold_pending_snapshots;
    struct api_strv naming_schema, also_include;
    char *name_regex; /* NULL when not given */
    /* what LOCAL replication has no use for: whether it is given */
    bool ssh_credentials, netcat_side, netcat_listen, netcat_port_min, netcat_port_max,
        netcat_connect, compression, speed_limit, restrict_schedule, replicate, encryption;
    size_t periodic_tasks, lifetimes, properties_exclude, properties_override;
    /* The plan. */
    bool push;
    struct repl_select sel;
    int64_t lifetime_s;            /* CUSTOM: the lifetime in seconds (calendar units: a guess) */
    char base_prefix[DS_NAME_BUF]; /* common parent of the source datasets */
    struct item *items;
    size_t nitems, cap;
    size_t total, sent; /* snapshots to send / sent (progress) */
    struct job *job;
    const struct item *cur;
    const struct snap *cur_snap;
    int last_pct;
    char mode[256]; /* how the current snapshot is received (progress) */
    /* what was received: bytes written, and how many receives were
     * incremental (changed ranges only) or full */
    uint64_t copied;
    size_t nincremental, nfull;
};

/* ---- the arguments' field tables ---- */

/* The fields LOCAL replication only refuses: what matters is whether the
 * request gives them (not null), or how many items a list or object
 * holds. Arguments are never encoded back; these encoders give what was
 * decoded. */
static int given_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(bool *)field = !json_is_null(v);
    return 0;
}

static json_t *given_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_boolean(*(const bool *)field);
}

static int count_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    *(size_t *)field = json_is_array(v) ? json_array_size(v) : json_object_size(v);
    return 0;
}

static json_t *count_encode(const struct api_field *f, const void *field)
{
    (void)f;
    return json_integer((json_int_t) * (const size_t *)field);
}

static const struct api_codec given_codec = {given_decode, given_encode, NULL};
static const struct api_codec count_codec = {count_decode, count_encode, NULL};

_Static_assert(sizeof(enum readonly_mode) == sizeof(int), "api_codec_enum writes an int");
_Static_assert(sizeof(enum retention_mode) == sizeof(int), "api_codec_enum writes an int");

#define AT(member, codec) API_AT(struct repl_task, member, codec)
#define GIVEN(member) AT(member, given_codec)
#define NULLABLE_STR(n)                                                                            \
    {                                                                                              \
        .name = n, .type = API_T_STRING, .flags = API_NULLABLE                                     \
    }
#define NULLABLE_STR_GIVEN(n, member)                                                              \
    {                                                                                              \
        .name = n, .type = API_T_STRING, .flags = API_NULLABLE, GIVEN(member)                      \
    }
#define PORT(n, member)                                                                            \
    {                                                                                              \
        .name = n, .type = API_T_INT, .flags = API_NULLABLE | API_RANGE, .min = 1, .max = 65535,   \
        GIVEN(member)                                                                              \
    }

/* ReplicationRunOnetimeArgs (TrueNAS 25.04): every field is accepted;
 * what blockd cannot do is refused with ENOTSUP after validation. The
 * encryption details have no member: encryption itself is refused. */
static const struct api_field onetime_fields[] = {
    {.name = "direction",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = direction_values,
     AT(direction, api_codec_enum)},
    {.name = "transport",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = transport_values,
     AT(transport, api_codec_enum)},
    {.name = "ssh_credentials", .type = API_T_INT, .flags = API_NULLABLE, GIVEN(ssh_credentials)},
    {.name = "netcat_active_side",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = netcat_side_values,
     GIVEN(netcat_side)},
    NULLABLE_STR_GIVEN("netcat_active_side_listen_address", netcat_listen),
    PORT("netcat_active_side_port_min", netcat_port_min),
    PORT("netcat_active_side_port_max", netcat_port_max),
    NULLABLE_STR_GIVEN("netcat_passive_side_connect_address", netcat_connect),
    {.name = "sudo", .type = API_T_BOOL},
    {.name = "source_datasets",
     .type = API_T_ARRAY,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = REPL_MAX_DATASETS,
     .items = &dataset_item,
     AT(sources, api_codec_strv)},
    {.name = "target_dataset",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     AT(target, api_codec_str)},
    {.name = "recursive", .type = API_T_BOOL, .flags = API_REQUIRED, AT(recursive, api_codec_bool)},
    {.name = "exclude",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_DATASETS,
     .items = &dataset_item,
     AT(exclude, api_codec_strv)},
    {.name = "properties", .type = API_T_BOOL, .def = "true", AT(properties, api_codec_bool)},
    {.name = "properties_exclude",
     .type = API_T_ARRAY,
     .items = &nonempty_item,
     AT(properties_exclude, count_codec)},
    {.name = "properties_override", .type = API_T_OBJECT, AT(properties_override, count_codec)},
    {.name = "replicate", .type = API_T_BOOL, AT(replicate, api_codec_bool)},
    {.name = "encryption", .type = API_T_BOOL, AT(encryption, api_codec_bool)},
    {.name = "encryption_inherit", .type = API_T_BOOL, .flags = API_NULLABLE},
    NULLABLE_STR("encryption_key"),
    {.name = "encryption_key_format",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = keyformat_values},
    NULLABLE_STR("encryption_key_location"),
    {.name = "periodic_snapshot_tasks",
     .type = API_T_ARRAY,
     .items = &int_item,
     AT(periodic_tasks, count_codec)},
    {.name = "naming_schema",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_SCHEMAS,
     .items = &schema_item,
     AT(naming_schema, api_codec_strv)},
    {.name = "also_include_naming_schema",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_SCHEMAS,
     .items = &schema_item,
     AT(also_include, api_codec_strv)},
    {.name = "name_regex",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1024,
     AT(name_regex, api_codec_str_null)},
    {.name = "restrict_schedule",
     .type = API_T_OBJECT,
     .flags = API_NULLABLE,
     GIVEN(restrict_schedule)},
    {.name = "allow_from_scratch", .type = API_T_BOOL, AT(allow_from_scratch, api_codec_bool)},
    {.name = "readonly",
     .type = API_T_ENUM,
     .choices = readonly_values,
     .def = "\"SET\"",
     AT(readonly, api_codec_enum)},
    {.name = "hold_pending_snapshots",
     .type = API_T_BOOL,
     AT(hold_pending_snapshots, api_codec_bool)},
    {.name = "retention_policy",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = retention_values,
     AT(retention, api_codec_enum)},
    {.name = "lifetime_value",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1000000,
     AT(lifetime_value, api_codec_int)},
    {.name = "lifetime_unit",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = unit_values,
     AT(lifetime_unit, api_codec_str_null)},
    {.name = "lifetimes", .type = API_T_ARRAY, AT(lifetimes, count_codec)},
    {.name = "compression",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = compression_values,
     GIVEN(compression)},
    {.name = "speed_limit",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = INT64_MAX,
     GIVEN(speed_limit)},
    {.name = "large_block", .type = API_T_BOOL},
    {.name = "embed", .type = API_T_BOOL},
    {.name = "compressed", .type = API_T_BOOL},
    {.name = "retries", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = 1000},
    {.name = "logging_level", .type = API_T_ENUM, .flags = API_NULLABLE, .choices = level_values},
    {.name = "exclude_mountpoint_property", .type = API_T_BOOL},
    {.name = "only_from_scratch", .type = API_T_BOOL, AT(only_from_scratch, api_codec_bool)},
    {.name = "mount", .type = API_T_BOOL},
};
#undef PORT
#undef NULLABLE_STR_GIVEN
#undef NULLABLE_STR
#undef GIVEN
#undef AT

/* replication.count_eligible_manual_snapshots' arguments (owned:
 * api_fields_clear); ssh_credentials is accepted and has no use. */
struct count_args {
    struct api_strv datasets, naming_schema;
    char *name_regex; /* NULL when not given */
    int transport;    /* index in transport_values */
};

static const struct api_field count_fields[] = {
    {.name = "datasets",
     .type = API_T_ARRAY,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = REPL_MAX_DATASETS,
     .items = &dataset_item,
     API_AT(struct count_args, datasets, api_codec_strv)},
    {.name = "naming_schema",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_SCHEMAS,
     .items = &schema_item,
     API_AT(struct count_args, naming_schema, api_codec_strv)},
    {.name = "name_regex",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1024,
     API_AT(struct count_args, name_regex, api_codec_str_null)},
    {.name = "transport",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = transport_values,
     API_AT(struct count_args, transport, api_codec_enum)},
    {.name = "ssh_credentials", .type = API_T_INT, .flags = API_NULLABLE},
};

static void task_free(void *arg)
{
    struct repl_task *t = arg;

    if (!t)
        return;
    for (size_t i = 0; i < t->nitems; i++) {
        snaps_free(&t->items[i].ssn);
        snaps_free(&t->items[i].dsn);
        free(t->items[i].send);
    }
    free(t->items);
    select_free(&t->sel);
    api_fields_clear(onetime_fields, ARRAY_SIZE(onetime_fields), t);
    free(t);
}

/* zettarepl's get_source_dataset_base: the sources' common path, cut back
 * to a whole component when it is not an ancestor of all of them. */
static void source_base(const struct api_strv *sources, char *out, size_t len)
{
    size_t n;

    snprintf(out, len, "%s", sources->n ? sources->v[0] : "");
    n = strlen(out);
    for (size_t i = 0; i < sources->n; i++) {
        const char *s = sources->v[i];
        size_t k = 0;
        while (k < n && s[k] == out[k])
            k++;
        n = k;
    }
    out[n] = '\0';
    /* os.path.commonpath works on components */
    for (size_t i = 0; i < sources->n; i++) {
        const char *s = sources->v[i];
        if (!(s[n] == '\0' || s[n] == '/')) {
            char *slash = strrchr(out, '/');
            n = slash ? (size_t)(slash - out) : 0;
            out[n] = '\0';
            break;
        }
    }
    while (n > 0 && out[n - 1] == '/')
        out[--n] = '\0';
}

/* get_target_dataset: target + the path of src below the sources' base. */
static int target_of(const struct repl_task *t, const char *src, char *out, size_t len)
{
    const char *target = t->target;
    size_t bl = strlen(t->base_prefix);
    const char *rel = src + bl;
    int n;

    while (*rel == '/')
        rel++;
    n = snprintf(out, len, "%s%s%s", target, *rel ? "/" : "", rel);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static bool is_child_or_self(const char *child, const char *parent)
{
    size_t n = strlen(parent);
    return strncmp(child, parent, n) == 0 && (child[n] == '\0' || child[n] == '/');
}

static bool excluded(const struct repl_task *t, const char *name)
{
    for (size_t i = 0; i < t->exclude.n; i++)
        if (is_child_or_self(name, t->exclude.v[i]))
            return true;
    return false;
}

/* Fail the job with a message, also logged (the job keeps it for the
 * client; the log names the job). Returns -1. */
static int repl_fail(struct repl_task *t, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int repl_fail(struct repl_task *t, int errnum, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_error("replication: job %lld: %s", (long long)jobs_id(t->job), msg);
    return jobs_fail(t->job, errnum, "%s", msg);
}

/* ---- the dataset functions, on the job's caller's behalf ---- */

/* A call for method's typed function with the identity of whoever started
 * the replication (its job's), checked as the dispatcher checks a call of
 * method (roles, a credential revoked since the job started). NULL when
 * refused or out of memory: the job failed then, saying why, prefixed by
 * what. */
static struct api_call *job_call(struct repl_task *t, const char *what, const char *method);

/* The failure message of a typed call (its field error's, else its
 * message's) into msg; its errno. */
static int call_failure(struct api_call *call, char *msg, size_t len)
{
    json_t *err = api_call_error(call);
    json_t *data = json_object_get(err, "data");
    json_t *extra = json_array_get(json_object_get(data, "extra"), 0);
    const char *m = json_string_value(json_object_get(err, "message"));
    int e = api_call_errno(call);

    if (extra)
        m = json_string_value(json_array_get(extra, 1));
    str_printf(msg, len, "%s", m ? m : "failed");
    json_decref(err);
    return e ? e : EINVAL;
}

static struct api_call *job_call(struct repl_task *t, const char *what, const char *method)
{
    struct api_call *call = api_call_as_new(jobs_identity(t->job), method, "replication");
    char msg[512];

    if (!call) {
        repl_fail(t, ENOMEM, "%s: out of memory", what);
        return NULL;
    }
    if (api_call_authorize(call) < 0) {
        int e = call_failure(call, msg, sizeof(msg));
        repl_fail(t, e, "%s: %s", what, msg);
        api_call_internal_free(call);
        return NULL;
    }
    return call;
}

/* End a typed call that returned rc: on failure the job fails with the
 * call's message prefixed by what. 0 or -1. */
static int job_call_end(struct repl_task *t, struct api_call *call, const char *what, int rc)
{
    char msg[512];

    if (rc < 0) {
        int e = call_failure(call, msg, sizeof(msg));
        repl_fail(t, e, "%s: %s", what, msg);
    }
    api_call_internal_free(call);
    return rc < 0 ? -1 : 0;
}

/* ---- planning (no change is made while planning) ---- */

static int item_add(struct repl_task *t, const struct ds_row *row, bool immediate)
{
    struct item *it;

    if (t->nitems == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 8;
        struct item *nv = realloc(t->items, ncap * sizeof(*nv));
        if (!nv)
            return repl_fail(t, ENOMEM, "out of memory");
        t->items = nv;
        t->cap = ncap;
    }
    it = &t->items[t->nitems];
    memset(it, 0, sizeof(*it));
    snprintf(it->src, sizeof(it->src), "%s", row->name);
    if (target_of(t, row->name, it->dst, sizeof(it->dst)) < 0)
        return repl_fail(t, ENAMETOOLONG, "target name for %s is too long", row->name);
    it->volume = row->type == DS_VOLUME;
    it->immediate = immediate;
    t->nitems++;
    return 0;
}

/* The names a walk of the datasets found (malloc'd strings). */
struct name_list {
    char **v;
    size_t n, cap;
};

static int name_add(const char *name, void *arg)
{
    struct name_list *l = arg;

    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, ncap * sizeof(*nv));
        if (!nv)
            return -ENOMEM;
        l->v = nv;
        l->cap = ncap;
    }
    l->v[l->n] = strdup(name);
    if (l->v[l->n])
        l->n++;
    return 0;
}

/* The source dataset and (recursive) its descendants, minus exclude. */
static int collect_sources(struct repl_task *t, const char *root)
{
    struct ds_row row;
    struct name_list names = {0};
    int rc;

    db_lock();
    rc = ds_dataset_get(root, &row);
    db_unlock();
    if (rc == -ENOENT)
        return repl_fail(t, ENOENT, "Dataset '%s' does not exist", root);
    if (rc < 0)
        return repl_fail(t, rc, "cannot read dataset %s", root);
    if (item_add(t, &row, true) < 0)
        return -1;
    if (!t->recursive)
        return 0;
    /* every descendant, in name order (parents before their children);
     * a walk cut short (no memory) sends what it listed */
    db_lock();
    ds_dataset_each_descendant(root, name_add, &names);
    db_unlock();
    rc = 0;
    for (size_t i = 0; i < names.n; i++) {
        if (rc == 0 && !excluded(t, names.v[i])) {
            db_lock();
            int g = ds_dataset_get(names.v[i], &row);
            db_unlock();
            if (g == 0)
                rc = item_add(t, &row, false);
        }
        free(names.v[i]);
    }
    free(names.v);
    return rc;
}

/* Target type and size (for the "has data" check). */
static int target_info(const char *name, bool *exists, enum ds_type *type, bool *readonly,
                       uint64_t *used)
{
    struct ds_row row;
    struct ds_pool pool;
    char poolname[DS_NAME_BUF], path[PATH_MAX];
    struct stat sb;
    int rc;

    *exists = false;
    *used = 0;
    db_lock();
    rc = ds_dataset_get(name, &row);
    if (rc == 0) {
        *exists = true;
        *type = row.type;
        *readonly = row.readonly;
        ds_pool_of(name, poolname, sizeof(poolname));
        if (row.type == DS_VOLUME && ds_pool_get(poolname, &pool) == 0 &&
            ds_path(&pool, name, NULL, path, sizeof(path)) == 0 && poolfs_stat(path, &sb) == 0)
            *used = (uint64_t)sb.st_blocks * 512;
    }
    db_unlock();
    return rc == -ENOENT ? 0 : rc;
}

/* The target's existence, type and readonly state against the task's
 * rules, checked before any snapshot is listed. 1 when there is nothing
 * to send (a filesystem), 0 to go on, or repl_fail()'s result. */
static int plan_check_target(struct repl_task *t, struct item *it, uint64_t *used)
{
    enum ds_type dtype = DS_FILESYSTEM;
    bool ro = false;
    int rc = target_info(it->dst, &it->dst_exists, &dtype, &ro, used);

    if (rc < 0)
        return repl_fail(t, rc, "cannot read dataset %s", it->dst);
    if (it->dst_exists && (dtype == DS_VOLUME) != it->volume)
        return repl_fail(t, EINVAL,
                         "Source '%s' is a %s, but target '%s' already exists and is a %s", it->src,
                         it->volume ? "volume" : "filesystem", it->dst,
                         dtype == DS_VOLUME ? "volume" : "filesystem");
    if (it->immediate && t->only_from_scratch && it->dst_exists)
        return repl_fail(t, EEXIST, "Target dataset '%s' already exists", it->dst);
    if (!it->volume)
        return 1; /* blockd filesystems hold no snapshots: nothing to send */
    if (t->readonly == RO_REQUIRE && it->dst_exists && !ro)
        return repl_fail(t, EINVAL,
                         "Target dataset '%s' exists and does not have readonly=on property, but "
                         "replication task is set up to require this property. Refusing to "
                         "replicate.",
                         it->dst);
    return 0;
}

/* Name regex: the base is the newest source snapshot (creation order)
 * the target also has, whatever its name; the matching ones after it are
 * sent. */
static void plan_pick_by_regex(struct item *it)
{
    size_t from = 0;

    for (size_t i = 0; i < it->ssn.n; i++)
        if (snaps_find(&it->dsn, it->ssn.v[i].name)) {
            it->base = &it->ssn.v[i];
            from = i + 1;
        }
    for (size_t i = from; i < it->ssn.n; i++)
        if (it->ssn.v[i].sel)
            it->send[it->nsend++] = &it->ssn.v[i];
}

/* Custom retention: do not send what retention would delete at once;
 * "now" is the newest source snapshot's time, as zettarepl guesses. */
static void plan_drop_expired(const struct repl_task *t, struct item *it)
{
    int64_t newest = INT64_MIN;
    size_t k = 0;

    for (size_t i = 0; i < it->ssn.n; i++)
        if (it->ssn.v[i].sel && it->ssn.v[i].when > newest)
            newest = it->ssn.v[i].when;
    for (size_t i = 0; i < it->nsend; i++)
        if (it->send[i]->when >= newest - t->lifetime_s)
            it->send[k++] = it->send[i];
    it->nsend = k;
}

/* Naming schemas: by the times the schemas give, the base is the newest
 * selected snapshot both sides have; the newer selected ones are sent in
 * time order. */
static void plan_pick_by_schema(const struct repl_task *t, struct item *it)
{
    for (size_t i = 0; i < it->ssn.n; i++) {
        const struct snap *d;
        if (!it->ssn.v[i].sel)
            continue;
        d = snaps_find(&it->dsn, it->ssn.v[i].name);
        if (d && d->sel && (!it->base || snap_cmp(&it->ssn.v[i], it->base) > 0))
            it->base = &it->ssn.v[i];
    }
    for (size_t i = 0; i < it->ssn.n; i++)
        if (it->ssn.v[i].sel && (!it->base || snap_cmp(&it->ssn.v[i], it->base) > 0))
            it->send[it->nsend++] = &it->ssn.v[i];
    if (it->nsend > 1) /* send may be NULL with none */
        qsort(it->send, it->nsend, sizeof(*it->send), snap_cmp_ptr);
    if (t->retention == RET_CUSTOM && it->nsend)
        plan_drop_expired(t, it);
}

/* What the chosen plan may do to the target: a full send over existing
 * snapshots or data needs allow_from_scratch, a busy target is refused
 * before anything is changed, and the task's own source must have
 * something to send. 0 or repl_fail()'s result. */
static int plan_check_send(struct repl_task *t, struct item *it, uint64_t used)
{
    if (!it->base && it->nsend) {
        if (it->dsn.n) {
            if (!t->allow_from_scratch)
                return repl_fail(t, EINVAL,
                                 "No incremental base on dataset '%s' and replication from "
                                 "scratch is not allowed",
                                 it->src);
            it->destroy_first = true;
        } else if (!t->allow_from_scratch && it->immediate && it->dst_exists &&
                   used > REPL_EMPTY_TARGET_MAX) {
            return repl_fail(t, EINVAL,
                             "Target dataset '%s' does not have snapshots but has data (%llu "
                             "bytes used) and replication from scratch is not allowed. Refusing "
                             "to overwrite existing data.",
                             it->dst, (unsigned long long)used);
        }
    }
    if (it->nsend && it->dst_exists) {
        /* checked again before each receive; here so that nothing is
         * changed (snapshots destroyed) before the refusal */
        char why[256];
        if (ds_in_use(it->dst, why, sizeof(why)))
            return repl_fail(t, EBUSY, "target %s is in use (%s)", it->dst, why);
    }
    if (!it->nsend && it->immediate && !it->base)
        return repl_fail(t, ENOENT,
                         "Dataset '%s' does not have any matching snapshots to replicate", it->src);
    return 0;
}

/* zettarepl get_snapshots_to_send (+ run_replication_steps checks):
 * check the target, list both sides, pick the base and the snapshots to
 * send, check what that plan would do. */
static int plan_item(struct repl_task *t, struct item *it)
{
    uint64_t used = 0;
    int rc = plan_check_target(t, it, &used);

    if (rc != 0)
        return rc < 0 ? rc : 0;
    rc = snaps_list(it->src, &t->sel, &it->ssn);
    if (rc == 0 && it->dst_exists)
        rc = snaps_list(it->dst, &t->sel, &it->dsn);
    if (rc < 0)
        return repl_fail(t, rc, "cannot list snapshots of %s", it->src);
    it->send = calloc(it->ssn.n ? it->ssn.n : 1, sizeof(*it->send));
    if (!it->send)
        return repl_fail(t, ENOMEM, "out of memory");
    if (t->sel.use_regex)
        plan_pick_by_regex(it);
    else
        plan_pick_by_schema(t, it);
    rc = plan_check_send(t, it, used);
    if (rc < 0)
        return rc;
    t->total += it->nsend;
    return 0;
}

/* ---- receiving ---- */

static void recv_progress(uint64_t done, uint64_t total, void *arg)
{
    struct repl_task *t = arg;
    int cur = total ? (int)(done * 100 / total) : 100;
    int pct = t->total ? (int)((t->sent * 100 + (size_t)cur) / t->total) : 100;

    if (pct == t->last_pct && done != total)
        return;
    t->last_pct = pct;
    jobs_progress(t->job, pct, "Sending %zu of %zu: %s@%s: %s (%d%%)", t->sent + 1, t->total,
                  t->cur->src, t->cur_snap->name, t->mode, cur);
}

/* The source's user properties ("ns:name") a created target takes. */
struct create_props {
    char managedby[DS_MANAGEDBY_MAX + 1];
    bool has_managedby;
    struct ds_user_props uprops;
    int rc;
};

static void create_prop_add(const char *k, const char *v, void *arg)
{
    struct create_props *cp = arg;
    struct ds_user_prop *nv, *p;

    if (strcmp(k, "managedby") == 0) {
        snprintf(cp->managedby, sizeof(cp->managedby), "%s", v);
        cp->has_managedby = true;
        return;
    }
    if (!strchr(k, ':') || cp->rc < 0)
        return;
    nv = realloc(cp->uprops.v, (cp->uprops.n + 1) * sizeof(*nv));
    if (!nv) {
        cp->rc = -ENOMEM;
        return;
    }
    cp->uprops.v = nv;
    p = &nv[cp->uprops.n];
    *p = (struct ds_user_prop){.key = strdup(k), .value = strdup(v), .has_value = true};
    cp->uprops.n++;
    if (!p->key || !p->value)
        cp->rc = -ENOMEM;
    p->key_len = p->key ? strlen(p->key) : 0;
    p->value_len = p->value ? strlen(p->value) : 0;
}

/* The target volume (pool.dataset.create's typed path), thin, with the
 * source's block size and, with properties, its sync, comments,
 * managedby and user properties. */
static int create_target(struct repl_task *t, struct item *it, uint64_t volsize)
{
    struct create_props cp = {0};
    struct ds_row src;
    struct api_call *call;
    int rc;

    db_lock();
    rc = ds_dataset_get(it->src, &src);
    if (rc == 0 && t->properties)
        rc = ds_dataset_props_each(src.id, create_prop_add, &cp);
    db_unlock();
    if (rc == 0)
        rc = cp.rc;
    if (rc < 0) {
        ds_user_props_free(&cp.uprops);
        return repl_fail(t, rc, "cannot read dataset %s and its properties", it->src);
    }
    /* Target volumes are thin: the received data decides what is
     * allocated (a thick source's unwritten space is not sent either). */
    struct ds_volume_new nv = {.name = it->dst,
                               .volsize = volsize,
                               .volblocksize = src.volblocksize,
                               .sparse = true,
                               .sync_given = t->properties,
                               .sync = src.sync,
                               .comments = t->properties ? src.comments : NULL,
                               .managedby = cp.has_managedby ? cp.managedby : NULL,
                               .user_props = &cp.uprops};
    call = job_call(t, it->dst, "pool.dataset.create");
    rc = call ? job_call_end(t, call, it->dst, ds_volume_create(call, &nv)) : -1;
    ds_user_props_free(&cp.uprops);
    if (rc == 0)
        it->dst_exists = it->fresh = true;
    return rc;
}

/* The received volume's size, in one transaction. 0 or -errno. */
static int recv_store_size(int64_t dataset_id, uint64_t size)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    rc = ds_dataset_set_volsize(dataset_id, size);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    cfg_tx_changed(&tx, CFG_DATASET, dataset_id, CFG_UPDATED);
    return cfg_tx_commit(&tx);
}

/* A received snapshot's creation time (as zfs recv keeps it); best effort. */
static void recv_store_created(int64_t dataset_id, const char *name, int64_t created)
{
    struct cfg_tx tx;
    if (cfg_tx_begin(&tx) < 0)
        return;
    if (ds_snapshot_set_created(dataset_id, name, created) < 0) {
        cfg_tx_abort(&tx);
        return;
    }
    cfg_tx_changed(&tx, CFG_SNAPSHOT, CFG_ID_ALL, CFG_UPDATED);
    cfg_tx_commit(&tx);
}

/* What one receive works on, found under the locks, and what it did. */
struct recv_ctx {
    struct ds_row drow;                    /* the target dataset */
    struct ds_pool spool, dpool;           /* the source's and the target's pools */
    bool files;                            /* both are file pools: spath and dpath set */
    char spath[PATH_MAX], dpath[PATH_MAX]; /* the source snapshot's and target's files */
    struct volume *v;                      /* the target's open volume (own ref) */
    uint64_t size;                         /* the received size */
    bool incremental;                      /* only changed ranges were copied */
    size_t ranges;                         /* the ranges walked… */
    uint64_t span;                         /* …and the bytes they cover */
    struct repl_copy_stats st;             /* what the range copy did */
    struct store_update_stats ust;         /* or the whole-file update */
    bool resized;
};

/* Under db_lock: both pools, the target row and, for two file pools, the
 * two files' paths. */
static int recv_locate(struct item *it, const struct snap *s, struct recv_ctx *c)
{
    char poolname[DS_NAME_BUF];
    int rc;

    db_lock();
    ds_pool_of(it->src, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &c->spool);
    if (rc == 0) {
        ds_pool_of(it->dst, poolname, sizeof(poolname));
        rc = ds_pool_get(poolname, &c->dpool);
    }
    if (rc == 0)
        rc = ds_dataset_get(it->dst, &c->drow);
    c->files = rc == 0 && !ds_pool_is_rbd(&c->spool) && !ds_pool_is_rbd(&c->dpool);
    if (c->files && (ds_path(&c->spool, it->src, s->name, c->spath, sizeof(c->spath)) < 0 ||
                     ds_path(&c->dpool, it->dst, NULL, c->dpath, sizeof(c->dpath)) < 0))
        rc = -ENAMETOOLONG;
    db_unlock();
    return rc;
}

/* Called under ds_ops_lock: may this snapshot be received into the
 * target now? Opens the target's volume (c->v, released by the caller
 * after the lock) and flushes it, so what is compared or diffed is on
 * the storage. 0, or -errno with the job's failure message in msg. */
static int recv_check(struct item *it, const struct snap *s, struct recv_ctx *c, char *msg,
                      size_t msglen)
{
    char why[256];
    int rc = recv_locate(it, s, c);

    if (rc < 0) {
        str_printf(msg, msglen, "cannot locate %s@%s or %s", it->src, s->name, it->dst);
        return rc;
    }
    if (c->drow.memory) {
        str_printf(msg, msglen, "%s is memory-backed; replication needs the file or RBD backend",
                   it->dst);
        return -ENOTSUP;
    }
    /* zfs recv replaces the data under any user: refuse instead */
    if (ds_in_use(it->dst, why, sizeof(why))) {
        str_printf(msg, msglen, "target %s is in use (%s)", it->dst, why);
        return -EBUSY;
    }
    rc = datasets_volume_open(it->dst, &c->v);
    if (rc == 0 && (rc = volume_flush_wait(c->v)) < 0)
        str_printf(msg, msglen, "cannot flush %s", it->dst);
    else if (rc < 0)
        str_printf(msg, msglen, "cannot open %s: %s", it->dst, strerror(-rc));
    return rc;
}

/* The target's size becomes the received one (c->size), through its
 * pool's backend, stored in the database. Under ds_ops_lock. */
static int recv_resize(struct item *it, struct recv_ctx *c)
{
    uint64_t old = volume_size(c->v);
    int rc;

    if (old == c->size)
        return 0;
    rc = ds_backend_of(&c->dpool)->volume_resize(&c->dpool, it->dst, c->v, old, c->size,
                                                 c->drow.sparse);
    if (rc == 0) {
        c->resized = true;
        rc = recv_store_size(c->drow.id, c->size);
    }
    return rc;
}

/* Full receive between two file pools: the whole-file update (reflink,
 * else compare-and-write of what differs). */
static int recv_full_files(struct repl_task *t, struct recv_ctx *c, const char *why)
{
    int rc;

    str_printf(t->mode, sizeof(t->mode), "full copy (whole file): %s", why);
    recv_progress(0, 1, t);
    /* the file changes behind the open volume: its change log cannot say
     * how (store/changes.h) */
    struct store_changes *log = bdev_file_changes(volume_bdev(c->v));
    if (log)
        store_changes_invalidate(log);
    rc = store_update_file(c->spath, c->dpath, 0, recv_progress, t, &c->ust);
    c->size = c->ust.size;
    c->span = c->ust.size;
    c->st.copied = c->ust.written;
    c->st.zeroed = c->ust.punched;
    if (rc == 0 && volume_size(c->v) != c->size) {
        rc = volume_resize(c->v, c->size);
        c->resized = rc == 0;
    }
    if (rc == 0)
        rc = recv_store_size(c->drow.id, c->size);
    return rc;
}

/* Full receive through the volumes (any pool pair): every allocated
 * range of the source snapshot is copied, the rest zeroed unless the
 * target was just created. */
static int recv_full(struct repl_task *t, struct item *it, const struct snap *s, struct recv_ctx *c,
                     const char *why)
{
    char name[DS_NAME_BUF * 2], err[256];
    struct repl_ranges r = {0};
    struct ds_diff sd;
    const char *field;
    bool fresh = it->fresh;
    int rc;

    if (c->files)
        return recv_full_files(t, c, why);
    snprintf(name, sizeof(name), "%s@%s", it->src, s->name);
    rc = ds_diff_open_one(name, &sd, &field, err, sizeof(err));
    if (rc < 0)
        log_error("replication: full copy of %s: %s", name, err);
    if (rc == 0) {
        c->size = sd.size;
        rc = recv_resize(it, c);
    }
    if (rc == 0)
        rc = repl_ranges_add(0, c->size, &r);
    if (rc == 0) {
        c->ranges = 1;
        c->span = c->size;
        str_printf(t->mode, sizeof(t->mode), "full copy of %llu bytes: %s",
                   (unsigned long long)c->size, why);
        rc = repl_copy_ranges(sd.target, volume_bdev(c->v), &r, fresh, recv_progress, t, &c->st);
    }
    repl_ranges_free(&r);
    ds_diff_close(&sd);
    return rc;
}

/* The ranges that may differ between the target and the source snapshot
 * s, given that both hold prev: where the source changed from prev to s,
 * and where the target changed since its own prev (a target written to
 * after the last receive). 0 or -errno (the diff is unavailable). */
static int recv_ranges(struct item *it, const char *prev, const struct snap *s, struct ds_diff *sd,
                       struct repl_ranges *r, char *why, size_t len)
{
    char base[DS_NAME_BUF * 2], target[DS_NAME_BUF * 2];
    struct ds_diff dd;
    const char *field;
    int rc;

    snprintf(base, sizeof(base), "%s@%s", it->dst, prev);
    rc = ds_diff_open(base, it->dst, &dd, &field, why, len);
    if (rc == 0 && (rc = ds_diff_changed(&dd, 0, dd.size, repl_ranges_add, r)) != 0)
        str_printf(why, len, "changed blocks of %s since @%s: %s", it->dst, prev,
                   strerror(rc < 0 ? -rc : EIO));
    ds_diff_close(&dd);
    if (rc != 0)
        return rc < 0 ? rc : -EIO;
    snprintf(base, sizeof(base), "%s@%s", it->src, prev);
    snprintf(target, sizeof(target), "%s@%s", it->src, s->name);
    rc = ds_diff_open(base, target, sd, &field, why, len);
    if (rc == 0 && (rc = ds_diff_changed(sd, 0, sd->size, repl_ranges_add, r)) != 0)
        str_printf(why, len, "changed blocks of %s from @%s to @%s: %s", it->src, prev, s->name,
                   strerror(rc < 0 ? -rc : EIO));
    return rc == 0 ? 0 : rc < 0 ? rc : -EIO;
}

/* Incremental receive: only the ranges recv_ranges finds are copied.
 * 1 when the changed blocks are unavailable (why says so: the caller
 * copies in full), else 0 or -errno. */
static int recv_incremental(struct repl_task *t, struct item *it, const char *prev,
                            const struct snap *s, struct recv_ctx *c, char *why, size_t len)
{
    struct repl_ranges r = {0};
    struct ds_diff sd = {0};
    int rc = recv_ranges(it, prev, s, &sd, &r, why, len);

    if (rc < 0) {
        log_warn("replication: %s@%s → %s: no changed blocks from @%s (%s): copying in full",
                 it->src, s->name, it->dst, prev, why);
        repl_ranges_free(&r);
        ds_diff_close(&sd);
        return 1;
    }
    c->size = sd.size;
    rc = recv_resize(it, c);
    repl_ranges_merge(&r, c->size);
    c->incremental = true;
    c->ranges = r.n;
    c->span = repl_ranges_bytes(&r);
    str_printf(t->mode, sizeof(t->mode), "incremental from %s: %llu bytes in %zu ranges of %llu",
               prev, (unsigned long long)c->span, c->ranges, (unsigned long long)c->size);
    if (rc == 0)
        rc = repl_copy_ranges(sd.target, volume_bdev(c->v), &r, false, recv_progress, t, &c->st);
    repl_ranges_free(&r);
    ds_diff_close(&sd);
    return rc;
}

/* Under ds_ops_lock: the data step, incremental from prev when there is
 * one (the common snapshot, or the one received just before). */
static int recv_data(struct repl_task *t, struct item *it, const char *prev, const struct snap *s,
                     struct recv_ctx *c, char *msg, size_t msglen)
{
    char why[512] = "";
    int rc = 1;

    if (prev)
        rc = recv_incremental(t, it, prev, s, c, why, sizeof(why));
    if (rc == 1) {
        char note[600];
        str_printf(note, sizeof(note), "no changed blocks from %s (%s)", prev ? prev : "", why);
        rc = recv_full(t, it, s, c, prev ? note : "no common snapshot");
    }
    if (rc < 0)
        str_printf(msg, msglen, "receiving %s@%s into %s: %s", it->src, s->name, it->dst,
                   strerror(-rc));
    return rc;
}

static void recv_log(const struct item *it, const struct snap *s, const char *prev,
                     const struct recv_ctx *c)
{
    if (c->incremental)
        log_info("replication: %s@%s → %s: incremental from @%s: %llu bytes in %zu ranges of "
                 "%llu walked, %llu bytes copied, %llu zeroed",
                 it->src, s->name, it->dst, prev, (unsigned long long)c->span, c->ranges,
                 (unsigned long long)c->size, (unsigned long long)c->st.copied,
                 (unsigned long long)c->st.zeroed);
    else
        log_info("replication: %s@%s → %s: full (%s) of %llu bytes: %llu bytes copied, %llu "
                 "zeroed",
                 it->src, s->name, it->dst,
                 c->ust.reflinked ? "reflink"
                 : c->files       ? "compare-and-write"
                                  : "allocated ranges",
                 (unsigned long long)c->size, (unsigned long long)c->st.copied,
                 (unsigned long long)c->st.zeroed);
}

/* Snapshot name of the target (zfs.snapshot.create's typed path), with
 * the source snapshot's creation time as zfs recv keeps it. */
static int recv_snapshot_take(struct repl_task *t, struct item *it, const struct snap *s,
                              int64_t dataset_id)
{
    struct api_call *call = job_call(t, it->dst, "zfs.snapshot.create");

    if (!call || job_call_end(t, call, it->dst, ds_snapshot_take(call, it->dst, s->name)) < 0)
        return -1;
    recv_store_created(dataset_id, s->name, s->created);
    return 0;
}

/* Receive one snapshot: the target's data becomes the source snapshot's
 * (under ds_ops_lock, so no dataset operation runs in between), then the
 * target snapshot of the same name is taken. prev: the snapshot both
 * hold already (NULL: none, a full copy). */
static int recv_snapshot(struct repl_task *t, struct item *it, const char *prev,
                         const struct snap *s)
{
    struct recv_ctx c = {0};
    char msg[1024];
    int rc;

    t->cur = it;
    t->cur_snap = s;
    t->last_pct = -1;
    str_printf(t->mode, sizeof(t->mode), "%s", prev ? "finding the changed blocks" : "full copy");
    recv_progress(0, 1, t);
    ds_ops_lock();
    rc = recv_check(it, s, &c, msg, sizeof(msg));
    if (rc == 0)
        rc = recv_data(t, it, prev, s, &c, msg, sizeof(msg));
    ds_ops_unlock();
    if (c.resized)
        ds_notify(DATASETS_RESIZED, it->dst, c.v);
    if (c.v)
        volume_unref(c.v);
    if (rc < 0)
        return repl_fail(t, rc, "%s", msg);
    it->fresh = false;
    recv_log(it, s, prev, &c);
    t->copied += c.st.copied;
    if (c.incremental)
        t->nincremental++;
    else
        t->nfull++;
    if (recv_snapshot_take(t, it, s, c.drow.id) < 0)
        return -1;
    t->sent++;
    recv_progress(1, 1, t);
    return 0;
}

/* zfs.snapshot.delete's typed path; fatal: the job fails on error, else
 * the failure is logged (retention). 0 or -1. */
static int delete_snapshot(struct repl_task *t, const char *dataset, const char *snap, bool fatal)
{
    char full[DS_NAME_BUF * 2], msg[512];
    struct api_call *call;
    int rc;

    snprintf(full, sizeof(full), "%s@%s", dataset, snap);
    if (fatal) {
        call = job_call(t, full, "zfs.snapshot.delete");
        return call ? job_call_end(t, call, full, ds_snapshot_destroy(call, full)) : -1;
    }
    /* retention: a failure (e.g. a clone depends on it) is logged, not
     * fatal, as zettarepl's retention does */
    call = api_call_as_new(jobs_identity(t->job), "zfs.snapshot.delete", "replication");
    if (!call)
        return -1;
    rc = api_call_authorize(call);
    if (rc == 0)
        rc = ds_snapshot_destroy(call, full);
    if (rc < 0) {
        call_failure(call, msg, sizeof(msg));
        log_warn("replication: retention could not delete %s: %s", full, msg);
    }
    api_call_internal_free(call);
    return rc < 0 ? -1 : 0;
}

/* allow_from_scratch without a base: the target goes first
 * (pool.dataset.delete's typed path, recursive and forced). */
static int destroy_target(struct repl_task *t, struct item *it)
{
    struct api_call *call;

    log_warn("replication: no incremental base for %s: destroying %s (allow_from_scratch)", it->src,
             it->dst);
    call = job_call(t, it->dst, "pool.dataset.delete");
    if (!call || job_call_end(t, call, it->dst, ds_dataset_destroy(call, it->dst, true, true)) < 0)
        return -1;
    it->dst_exists = false;
    it->base = NULL;
    return 0;
}

static int run_item(struct repl_task *t, struct item *it)
{
    struct api_call *call;

    if (!it->volume || !it->nsend)
        return 0;
    if (it->destroy_first && destroy_target(t, it) < 0)
        return -1;
    if (!it->dst_exists) {
        if (create_target(t, it, it->send[0]->volsize) < 0)
            return -1;
    } else if (it->base) {
        /* zfs recv -F: the target's snapshots after the base go */
        const struct snap *db = snaps_find(&it->dsn, it->base->name);
        for (size_t i = 0; db && i < it->dsn.n; i++)
            if (it->dsn.v[i].id > db->id &&
                delete_snapshot(t, it->dst, it->dsn.v[i].name, true) < 0)
                return -1;
    }
    for (size_t i = 0; i < it->nsend; i++) {
        const char *prev = i ? it->send[i - 1]->name : it->base ? it->base->name : NULL;
        if (recv_snapshot(t, it, prev, it->send[i]) < 0)
            return -1;
    }
    if (t->readonly == RO_IGNORE)
        return 0;
    call = job_call(t, it->dst, "pool.dataset.update");
    if (!call || job_call_end(t, call, it->dst, ds_dataset_set_readonly(call, it->dst, true)) < 0)
        return -1;
    return 0;
}

/* Seconds before now (naive local time, like the snapshot names) that a
 * CUSTOM lifetime reaches back to. */
static int64_t lifetime_cutoff(const struct repl_task *t, int64_t now)
{
    struct tm tm;
    time_t tt = (time_t)now;

    if (strcmp(t->lifetime_unit, "MONTH") && strcmp(t->lifetime_unit, "YEAR"))
        return now - t->lifetime_s;
    gmtime_r(&tt, &tm);
    if (strcmp(t->lifetime_unit, "MONTH") == 0)
        tm.tm_mon -= t->lifetime_value;
    else
        tm.tm_year -= t->lifetime_value;
    return (int64_t)timegm(&tm);
}

/* Target retention, after the sends (zettarepl's remote retention). */
static void run_retention(struct repl_task *t)
{
    time_t now_t = time(NULL);
    struct tm lt;
    int64_t now, cutoff;

    if (t->retention == RET_NONE)
        return;
    localtime_r(&now_t, &lt);
    now = (int64_t)timegm(&lt);
    cutoff = t->retention == RET_CUSTOM ? lifetime_cutoff(t, now) : 0;
    for (size_t i = 0; i < t->nitems; i++) {
        struct item *it = &t->items[i];
        struct snaps src, dst;

        if (!it->volume || !it->dst_exists)
            continue;
        if (snaps_list(it->src, &t->sel, &src) < 0)
            continue;
        if (snaps_list(it->dst, &t->sel, &dst) < 0) {
            snaps_free(&src);
            continue;
        }
        for (size_t k = 0; k < dst.n; k++) {
            const struct snap *d = &dst.v[k];
            bool del = d->sel &&
                       (t->retention == RET_SOURCE ? !snaps_find(&src, d->name) : d->when < cutoff);
            if (!del)
                continue;
            log_info("replication: retention %s: deleting %s@%s",
                     t->retention == RET_SOURCE ? "SOURCE" : "CUSTOM", it->dst, d->name);
            delete_snapshot(t, it->dst, d->name, false);
        }
        snaps_free(&src);
        snaps_free(&dst);
    }
}

static pthread_mutex_t repl_mutex = PTHREAD_MUTEX_INITIALIZER;

static int onetime_job(struct job *job, void *arg, json_t **result)
{
    struct repl_task *t = arg;
    size_t i;
    int rc = 0;

    t->job = job;
    jobs_progress(job, 0, "Waiting for other replication jobs");
    pthread_mutex_lock(&repl_mutex);
    jobs_progress(job, 0, "Planning");
    for (i = 0; rc == 0 && i < t->sources.n; i++)
        rc = collect_sources(t, t->sources.v[i]);
    for (i = 0; rc == 0 && i < t->nitems; i++)
        rc = plan_item(t, &t->items[i]);
    for (i = 0; rc == 0 && i < t->nitems; i++)
        rc = run_item(t, &t->items[i]);
    if (rc == 0) {
        run_retention(t);
        jobs_progress(job, 100,
                      "Replication finished: %zu snapshot%s sent (%zu incremental, %zu full), "
                      "%llu bytes copied",
                      t->sent, t->sent == 1 ? "" : "s", t->nincremental, t->nfull,
                      (unsigned long long)t->copied);
        log_info("replication: job %lld finished: %zu snapshot%s sent (%zu incremental, %zu "
                 "full), %llu bytes copied",
                 (long long)jobs_id(job), t->sent, t->sent == 1 ? "" : "s", t->nincremental,
                 t->nfull, (unsigned long long)t->copied);
    } else {
        log_error("replication: job %lld failed after %zu of %zu snapshots",
                  (long long)jobs_id(job), t->sent, t->total);
    }
    pthread_mutex_unlock(&repl_mutex);
    *result = NULL;
    return rc;
}

/* ---- validation (TrueNAS ReplicationService._validate, LOCAL) ---- */

#define F(name) "replication.run_onetime." name

static void check_schemas(struct api_call *call, const struct api_strv *list, const char *field,
                          struct repl_select *sel)
{
    for (size_t i = 0; i < list->n; i++) {
        char why[256], path[96];
        if (repl_schema_check(list->v[i], why, sizeof(why)) < 0) {
            snprintf(path, sizeof(path), "%s.%zu", field, i);
            api_verr(call, path, EINVAL, "%s", why);
            continue;
        }
        if (sel && sel->nschemas < REPL_MAX_SCHEMAS) {
            char **nv = realloc(sel->schemas, (sel->nschemas + 1) * sizeof(*nv));
            if (nv) {
                sel->schemas = nv;
                sel->schemas[sel->nschemas] = strdup(list->v[i]);
                if (sel->schemas[sel->nschemas])
                    sel->nschemas++;
            }
        }
    }
}

static int64_t unit_seconds(const char *u)
{
    if (strcmp(u, "HOUR") == 0)
        return 3600;
    if (strcmp(u, "DAY") == 0)
        return 86400;
    if (strcmp(u, "WEEK") == 0)
        return 7 * 86400;
    return 0; /* MONTH / YEAR: calendar, see lifetime_cutoff */
}

/* The direction's own rules (TrueNAS's ReplicationModel checks, in its
 * order): blockd has no periodic snapshot tasks, and push and pull each
 * want a different way of naming the snapshots to send. */
static void onetime_check_direction(struct api_call *call, const struct repl_task *t)
{
    char path[96];

    for (size_t i = 0; i < t->periodic_tasks; i++) {
        snprintf(path, sizeof(path), F("periodic_snapshot_tasks.%zu"), i);
        api_verr(call, path, ENOTSUP,
                 t->push ? "replication bound to periodic snapshot tasks is not supported: give "
                           "the task's naming schema as also_include_naming_schema"
                         : "Pull replication can't be bound to a periodic snapshot task");
    }
    if (t->push) {
        if (t->naming_schema.n)
            api_verr(call, F("naming_schema"), EINVAL,
                     "This field has no sense for push replication");
        if (!t->also_include.n && !t->name_regex)
            api_verr(call, F("periodic_snapshot_tasks"), EINVAL,
                     "You must at least either bind a periodic snapshot task or provide \"Also "
                     "Include Naming Schema\" or \"Name Regex\" for push replication task");
    } else {
        if (!t->naming_schema.n && !t->name_regex)
            api_verr(call, F("naming_schema"), EINVAL,
                     "Naming schema or Name regex are required for pull replication");
        if (t->also_include.n)
            api_verr(call, F("also_include_naming_schema"), EINVAL,
                     "This field has no sense for pull replication");
        if (t->hold_pending_snapshots)
            api_verr(call, F("hold_pending_snapshots"), EINVAL,
                     "Pull replication tasks can't hold pending snapshots because they don't do "
                     "source retention");
    }
}

/* Transport LOCAL (the only one, checked before): every SSH, netcat and
 * network field is an error rather than silently ignored. */
static void onetime_check_local_transport(struct api_call *call, const struct repl_task *t)
{
    const struct {
        const char *field;
        bool given;
    } nc[] = {{F("netcat_active_side_listen_address"), t->netcat_listen},
              {F("netcat_active_side_port_min"), t->netcat_port_min},
              {F("netcat_active_side_port_max"), t->netcat_port_max},
              {F("netcat_passive_side_connect_address"), t->netcat_connect}};

    if (t->netcat_side)
        api_verr(call, F("netcat_active_side"), EINVAL,
                 "This field only has sense for SSH+netcat replication");
    for (size_t i = 0; i < ARRAY_SIZE(nc); i++)
        if (nc[i].given)
            api_verr(call, nc[i].field, EINVAL,
                     "This field only has sense for SSH+netcat replication");
    if (t->ssh_credentials)
        api_verr(call, F("ssh_credentials"), EINVAL,
                 "Remote credentials have no sense for local replication");
    if (t->compression)
        api_verr(call, F("compression"), EINVAL, "Compression has no sense for local replication");
    if (t->speed_limit)
        api_verr(call, F("speed_limit"), EINVAL, "Speed limit has no sense for local replication");
}

/* True when name is a strict descendant of one of the source datasets:
 * "exclude" may only name children of what is sent. */
static bool onetime_is_source_child(const struct api_strv *sources, const char *name)
{
    bool child = false;

    for (size_t k = 0; k < sources->n; k++) {
        size_t n = strlen(sources->v[k]);
        if (strncmp(name, sources->v[k], n) == 0 && name[n] == '/')
            child = true;
    }
    return child;
}

/* Dataset names and the recursion/exclude pair. */
static void onetime_check_datasets(struct api_call *call, const struct repl_task *t)
{
    char why[256], path[96];

    for (size_t i = 0; i < t->sources.n; i++) {
        if (name_check_dataset(t->sources.v[i], false, why, sizeof(why)) < 0) {
            snprintf(path, sizeof(path), F("source_datasets.%zu"), i);
            api_verr(call, path, EINVAL, "%s", why);
        }
    }
    if (name_check_dataset(t->target, false, why, sizeof(why)) < 0)
        api_verr(call, F("target_dataset"), EINVAL, "%s", why);
    if (!t->recursive && t->exclude.n)
        api_verr(call, F("exclude"), EINVAL,
                 "Excluding child datasets is only supported for recursive replication");
    for (size_t i = 0; i < t->exclude.n; i++) {
        if (!onetime_is_source_child(&t->sources, t->exclude.v[i])) {
            snprintf(path, sizeof(path), F("exclude.%zu"), i);
            api_verr(call, path, EINVAL, "This dataset is not a child of any of source datasets");
        }
    }
}

/* Which snapshots are sent: the naming schemas the direction uses are
 * compiled into t->sel, the others only checked; a regex excludes both
 * schemas and a custom retention (it has no date to age). */
static void onetime_check_selection(struct api_call *call, struct repl_task *t)
{
    const struct api_strv *ns = &t->naming_schema, *aln = &t->also_include;
    char why[256];

    check_schemas(call, t->push ? aln : ns,
                  t->push ? F("also_include_naming_schema") : F("naming_schema"), &t->sel);
    check_schemas(call, t->push ? ns : aln,
                  t->push ? F("naming_schema") : F("also_include_naming_schema"), NULL);
    if (!t->name_regex)
        return;
    if (repl_regex_compile(t->name_regex, &t->sel.regex, why, sizeof(why)) < 0)
        api_verr(call, F("name_regex"), EINVAL, "%s", why);
    else
        t->sel.use_regex = true;
    if (ns->n || aln->n)
        api_verr(call, F("name_regex"), EINVAL, "Naming regex can't be used with Naming schema");
    if (t->retention == RET_CUSTOM)
        api_verr(call, F("retention_policy"), EINVAL,
                 "Only `Same as Source` and `None` retention policies can be used with Naming "
                 "regex");
}

/* A custom retention needs its lifetime; the other policies must not
 * carry one (TrueNAS refuses it rather than ignoring it). */
static void onetime_check_retention(struct api_call *call, const struct repl_task *t)
{
    if (t->retention == RET_CUSTOM) {
        if (!t->lifetime_value)
            api_verr(call, F("lifetime_value"), EINVAL,
                     "This field is required for custom retention policy");
        if (!t->lifetime_unit)
            api_verr(call, F("lifetime_unit"), EINVAL,
                     "This field is required for custom retention policy");
        return;
    }
    if (t->lifetime_value)
        api_verr(call, F("lifetime_value"), EINVAL,
                 "This field has no sense for specified retention policy");
    if (t->lifetime_unit)
        api_verr(call, F("lifetime_unit"), EINVAL,
                 "This field has no sense for specified retention policy");
    if (t->lifetimes)
        api_verr(call, F("lifetimes"), EINVAL,
                 "This field has no sense for specified retention policy");
}

/* A valid request that asks for something blockd's LOCAL replication does
 * not do: the first such feature's description, or NULL. */
static const char *onetime_unsupported(const struct repl_task *t)
{
    if (t->replicate)
        return "full filesystem replication (replicate)";
    if (t->encryption)
        return "encrypting the target (encryption)";
    if (t->restrict_schedule)
        return "restrict_schedule";
    if (t->lifetimes)
        return "per-schedule lifetimes (lifetimes)";
    if (t->properties_exclude || t->properties_override)
        return "properties_exclude / properties_override";
    return NULL;
}

/* What the job derives from the checked arguments. */
static void onetime_task_fill(struct repl_task *t)
{
    if (t->retention == RET_CUSTOM) {
        t->lifetime_s = (int64_t)t->lifetime_value * unit_seconds(t->lifetime_unit);
        if (!t->lifetime_s) /* months/years for the "do not send" guess */
            t->lifetime_s = (int64_t)t->lifetime_value *
                            (strcmp(t->lifetime_unit, "MONTH") == 0 ? 31 : 366) * 86400;
    }
    source_base(&t->sources, t->base_prefix, sizeof(t->base_prefix));
}

/* The arguments (checked against onetime_fields by the dispatcher) into
 * a new task: the table's defaults, then the keys given. NULL (ENOMEM). */
static struct repl_task *onetime_decode(json_t *data)
{
    struct repl_task *t = calloc(1, sizeof(*t));

    if (t && (api_fields_defaults(onetime_fields, ARRAY_SIZE(onetime_fields), t) < 0 ||
              api_fields_decode(onetime_fields, ARRAY_SIZE(onetime_fields), data, t) < 0)) {
        task_free(t);
        t = NULL;
    }
    if (t)
        t->push = t->direction == DIRECTION_PUSH;
    return t;
}

/* replication.run_onetime: decode -> check (every field error reported
 * together, as TrueNAS does) -> refuse what blockd does not do -> start
 * the job. */
static int m_run_onetime(struct api_call *call, json_t *params, json_t **result)
{
    struct repl_task *t = onetime_decode(api_param(params, 0));
    const char *what;
    int rc;

    if (!t)
        return api_error(call, ENOMEM, "out of memory");
    if (t->transport != TRANSPORT_LOCAL) {
        rc = api_error(call, ENOTSUP,
                       "Replication transport %s is not supported: blockd replicates between "
                       "its own pools only (supported transports: LOCAL)",
                       transport_values[t->transport]);
        goto fail;
    }
    onetime_check_direction(call, t);
    onetime_check_local_transport(call, t);
    onetime_check_datasets(call, t);
    onetime_check_selection(call, t);
    onetime_check_retention(call, t);
    if (api_has_verrs(call)) {
        rc = api_invalid(call);
        goto fail;
    }
    what = onetime_unsupported(t);
    if (what) {
        rc = api_error(call, ENOTSUP, "%s is not supported by blockd's LOCAL replication", what);
        goto fail;
    }
    onetime_task_fill(t);
    log_info("replication: run_onetime %s → %s (%s%s) by %s", t->sources.v[0], t->target,
             t->recursive ? "recursive, " : "", retention_values[t->retention],
             api_call_peer(call));
    return jobs_submit(call, params, "Replication", onetime_job, t, task_free, result);

fail:
    task_free(t);
    return rc;
}

static int m_list_naming_schemas(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    /* The naming schemas of periodic snapshot tasks and stored
     * replication tasks: blockd keeps neither. */
    *result = json_array();
    return *result ? 0 : api_error(call, ENOMEM, "out of memory");
}

/* The schemas and regex of a as a selection; field errors on call. */
static void count_select(struct api_call *call, const struct count_args *a, struct repl_select *sel)
{
    char why[256];

    check_schemas(call, &a->naming_schema,
                  "replication.count_eligible_manual_snapshots.naming_schema", sel);
    if (!a->name_regex)
        return;
    if (repl_regex_compile(a->name_regex, &sel->regex, why, sizeof(why)) < 0)
        api_verr(call, "replication.count_eligible_manual_snapshots.name_regex", EINVAL, "%s", why);
    else
        sel->use_regex = true;
}

static int m_count_eligible(struct api_call *call, json_t *params, json_t **result)
{
    struct count_args a = {0};
    struct repl_select sel = {0};
    json_int_t total = 0, eligible = 0;
    int rc = 0;

    /* checked against count_fields by the dispatcher */
    if (api_fields_decode(count_fields, ARRAY_SIZE(count_fields), api_param(params, 0), &a) < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    else if (a.transport != TRANSPORT_LOCAL)
        rc = api_error(call, ENOTSUP,
                       "Replication transport %s is not supported: blockd replicates between "
                       "its own pools only (supported transports: LOCAL)",
                       transport_values[a.transport]);
    if (rc == 0)
        count_select(call, &a, &sel);
    if (rc == 0 && api_has_verrs(call))
        rc = api_invalid(call);
    for (size_t i = 0; rc == 0 && i < a.datasets.n; i++) {
        struct snaps s;
        if (snaps_list(a.datasets.v[i], &sel, &s) < 0)
            continue;
        total += (json_int_t)s.n;
        for (size_t k = 0; k < s.n; k++)
            eligible += s.v[k].sel;
        snaps_free(&s);
    }
    select_free(&sel);
    api_fields_clear(count_fields, ARRAY_SIZE(count_fields), &a);
    if (rc < 0)
        return rc;
    *result = json_pack("{s:I, s:I}", "total", total, "eligible", eligible);
    return *result ? 0 : api_error(call, ENOMEM, "out of memory");
}

static const struct api_arg onetime_args[] = {API_ARG_OBJECT("data", onetime_fields, 0)};
static const struct api_arg count_args[] = {API_ARG_OBJECT("data", count_fields, 0)};

static const struct api_method repl_methods[] = {
    {"replication.run_onetime", NULL, "Copy volumes and their snapshots to another dataset (a job)",
     m_run_onetime, API_ADMIN, API_ARGS(onetime_args)},
    {"replication.list_naming_schemas", NULL, "Naming schemas of stored tasks (none in blockd)",
     m_list_naming_schemas, API_READ},
    {"replication.count_eligible_manual_snapshots", NULL,
     "How many snapshots of datasets a naming schema or regex selects", m_count_eligible, API_READ,
     API_ARGS(count_args)},
};

void replication_init(void)
{
    static bool registered;

    if (registered)
        return;
    registered = true;
    api_register(repl_methods, ARRAY_SIZE(repl_methods));
}
