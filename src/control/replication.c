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
 *    destroyed, the target's data becomes the snapshot's
 *    (store_update_file: reflink, else compare-and-write of what differs),
 *    then the target snapshot is taken (zfs.snapshot.create);
 *  - readonly SET/REQUIRE/IGNORE, then retention_policy on the targets.
 *
 * The dataset work goes through the existing methods (pool.dataset.create
 * / update / delete, zfs.snapshot.create / delete) called in-process, so
 * their checks, locking and observers apply; only the data copy into the
 * target volume is done here, under ds_ops_lock() like every long copy.
 * One replication job runs at a time (the others wait, saying so in
 * their progress).
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

#include "api/jobs.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/repl_select.h"
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
static const char *const transport_values[] = {"SSH", "SSH+NETCAT", "LOCAL", "LEGACY", NULL};
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

#define NULLABLE_STR(n)                                                                            \
    {                                                                                              \
        .name = n, .type = API_T_STRING, .flags = API_NULLABLE                                     \
    }
#define PORT(n)                                                                                    \
    {                                                                                              \
        .name = n, .type = API_T_INT, .flags = API_NULLABLE | API_RANGE, .min = 1, .max = 65535    \
    }

/* ReplicationRunOnetimeArgs (TrueNAS 25.04): every field is accepted;
 * what blockd cannot do is refused with ENOTSUP after validation. */
static const struct api_field onetime_fields[] = {
    {.name = "direction", .type = API_T_ENUM, .flags = API_REQUIRED, .choices = direction_values},
    {.name = "transport", .type = API_T_ENUM, .flags = API_REQUIRED, .choices = transport_values},
    {.name = "ssh_credentials", .type = API_T_INT, .flags = API_NULLABLE},
    {.name = "netcat_active_side",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = netcat_side_values},
    NULLABLE_STR("netcat_active_side_listen_address"),
    PORT("netcat_active_side_port_min"),
    PORT("netcat_active_side_port_max"),
    NULLABLE_STR("netcat_passive_side_connect_address"),
    {.name = "sudo", .type = API_T_BOOL},
    {.name = "source_datasets",
     .type = API_T_ARRAY,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = REPL_MAX_DATASETS,
     .items = &dataset_item},
    {.name = "target_dataset",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX},
    {.name = "recursive", .type = API_T_BOOL, .flags = API_REQUIRED},
    {.name = "exclude",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_DATASETS,
     .items = &dataset_item},
    {.name = "properties", .type = API_T_BOOL},
    {.name = "properties_exclude", .type = API_T_ARRAY, .items = &nonempty_item},
    {.name = "properties_override", .type = API_T_OBJECT},
    {.name = "replicate", .type = API_T_BOOL},
    {.name = "encryption", .type = API_T_BOOL},
    {.name = "encryption_inherit", .type = API_T_BOOL, .flags = API_NULLABLE},
    NULLABLE_STR("encryption_key"),
    {.name = "encryption_key_format",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = keyformat_values},
    NULLABLE_STR("encryption_key_location"),
    {.name = "periodic_snapshot_tasks", .type = API_T_ARRAY, .items = &int_item},
    {.name = "naming_schema",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_SCHEMAS,
     .items = &schema_item},
    {.name = "also_include_naming_schema",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_SCHEMAS,
     .items = &schema_item},
    {.name = "name_regex",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1024},
    {.name = "restrict_schedule", .type = API_T_OBJECT, .flags = API_NULLABLE},
    {.name = "allow_from_scratch", .type = API_T_BOOL},
    {.name = "readonly", .type = API_T_ENUM, .choices = readonly_values},
    {.name = "hold_pending_snapshots", .type = API_T_BOOL},
    {.name = "retention_policy",
     .type = API_T_ENUM,
     .flags = API_REQUIRED,
     .choices = retention_values},
    {.name = "lifetime_value",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1000000},
    {.name = "lifetime_unit", .type = API_T_ENUM, .flags = API_NULLABLE, .choices = unit_values},
    {.name = "lifetimes", .type = API_T_ARRAY},
    {.name = "compression",
     .type = API_T_ENUM,
     .flags = API_NULLABLE,
     .choices = compression_values},
    {.name = "speed_limit",
     .type = API_T_INT,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = INT64_MAX},
    {.name = "large_block", .type = API_T_BOOL},
    {.name = "embed", .type = API_T_BOOL},
    {.name = "compressed", .type = API_T_BOOL},
    {.name = "retries", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = 1000},
    {.name = "logging_level", .type = API_T_ENUM, .flags = API_NULLABLE, .choices = level_values},
    {.name = "exclude_mountpoint_property", .type = API_T_BOOL},
    {.name = "only_from_scratch", .type = API_T_BOOL},
    {.name = "mount", .type = API_T_BOOL},
};

static const struct api_field count_fields[] = {
    {.name = "datasets",
     .type = API_T_ARRAY,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = REPL_MAX_DATASETS,
     .items = &dataset_item},
    {.name = "naming_schema",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 0,
     .max = REPL_MAX_SCHEMAS,
     .items = &schema_item},
    {.name = "name_regex",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1024},
    {.name = "transport", .type = API_T_ENUM, .flags = API_REQUIRED, .choices = transport_values},
    {.name = "ssh_credentials", .type = API_T_INT, .flags = API_NULLABLE},
};

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
};

struct repl_task {
    json_t *args; /* validated params[0] (own reference) */
    bool push;
    struct repl_select sel;
    enum readonly_mode readonly;
    enum retention_mode retention;
    int64_t lifetime_s; /* CUSTOM: json lifetime in seconds… */
    int lifetime_value;
    const char *lifetime_unit; /* …or calendar months/years */
    bool allow_from_scratch, only_from_scratch, recursive, properties;
    char base_prefix[DS_NAME_BUF]; /* common parent of the source datasets */
    struct item *items;
    size_t nitems, cap;
    size_t total, sent; /* snapshots to send / sent (progress) */
    struct job *job;
    const struct item *cur;
    const struct snap *cur_snap;
    int last_pct;
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
    json_decref(t->args);
    free(t);
}

/* zettarepl's get_source_dataset_base: the sources' common path, cut back
 * to a whole component when it is not an ancestor of all of them. */
static void source_base(json_t *sources, char *out, size_t len)
{
    size_t i, n = 0;
    json_t *v;
    const char *first = json_string_value(json_array_get(sources, 0));

    snprintf(out, len, "%s", first);
    n = strlen(out);
    json_array_foreach(sources, i, v)
    {
        const char *s = json_string_value(v);
        size_t k = 0;
        while (k < n && s[k] == out[k])
            k++;
        n = k;
    }
    out[n] = '\0';
    /* os.path.commonpath works on components */
    json_array_foreach(sources, i, v)
    {
        const char *s = json_string_value(v);
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
    const char *target = json_string_value(json_object_get(t->args, "target_dataset"));
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
    json_t *ex = json_object_get(t->args, "exclude"), *v;
    size_t i;

    json_array_foreach(ex, i, v)
    {
        if (is_child_or_self(name, json_string_value(v)))
            return true;
    }
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

/* ---- calling the dataset methods in-process ---- */

/* Run method(params) (params stolen). On failure the job fails with the
 * method's message prefixed by what. 0 or -1. */
static int run_method(struct repl_task *t, const char *what, const char *method, json_t *params,
                      json_t **result)
{
    json_t *res = NULL, *err = NULL;
    int rc;

    if (!params)
        return repl_fail(t, ENOMEM, "%s: out of memory", what);
    /* with the rights of whoever started the replication (its job's) */
    rc = api_call_method_as(jobs_identity(t->job), "replication", method, params, &res, &err);
    json_decref(params);
    if (rc < 0) {
        json_t *data = json_object_get(err, "data");
        json_t *extra = json_array_get(json_object_get(data, "extra"), 0);
        int e = (int)json_integer_value(json_object_get(data, "error"));
        const char *msg = json_string_value(json_object_get(err, "message"));

        if (extra)
            msg = json_string_value(json_array_get(extra, 1));
        repl_fail(t, e ? e : EINVAL, "%s: %s", what, msg ? msg : method);
        json_decref(err);
        return -1;
    }
    if (result)
        *result = res;
    else
        json_decref(res);
    return 0;
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
    jobs_progress(t->job, pct, "Sending %zu of %zu: %s@%s (%d%%)", t->sent + 1, t->total,
                  t->cur->src, t->cur_snap->name, cur);
}

static json_t *vbs_json(uint32_t vbs)
{
    char buf[16];

    if (vbs < 1024)
        snprintf(buf, sizeof(buf), "%u", vbs);
    else
        snprintf(buf, sizeof(buf), "%uK", vbs / 1024);
    return json_string(buf);
}

/* The source's properties a created target takes: its managedby and its
 * user properties. */
struct create_props {
    json_t *data, *uprops;
};

static void create_prop_add(const char *k, const char *v, void *arg)
{
    struct create_props *cp = arg;

    if (strcmp(k, "managedby") == 0)
        json_object_set_new(cp->data, "managedby", json_string(v));
    else if (strchr(k, ':'))
        json_array_append_new(cp->uprops, json_pack("{s:s, s:s}", "key", k, "value", v));
}

/* pool.dataset.create of the target volume with the source's properties. */
static int create_target(struct repl_task *t, struct item *it, uint64_t volsize)
{
    struct ds_row src;
    json_t *data;
    int rc;

    db_lock();
    rc = ds_dataset_get(it->src, &src);
    db_unlock();
    if (rc < 0)
        return repl_fail(t, rc, "cannot read dataset %s", it->src);
    /* Target volumes are thin: the received data decides what is
     * allocated (a thick source's unwritten space is not sent either). */
    data = json_pack("{s:s, s:s, s:I, s:o, s:b, s:b}", "name", it->dst, "type", "VOLUME", "volsize",
                     (json_int_t)volsize, "volblocksize", vbs_json(src.volblocksize), "sparse", 1,
                     "create_ancestors", 1);
    if (data && t->properties) {
        json_object_set_new(data, "sync", json_string(volume_sync_name(src.sync)));
        json_object_set_new(data, "comments", json_string(src.comments));
        struct create_props cp = {.data = data, .uprops = json_array()};
        db_lock();
        rc = ds_dataset_props_each(src.id, create_prop_add, &cp);
        db_unlock();
        if (rc < 0) {
            json_decref(cp.uprops);
            json_decref(data);
            return repl_fail(t, rc, "cannot read the properties of %s", it->src);
        }
        if (json_array_size(cp.uprops))
            json_object_set_new(data, "user_properties", cp.uprops);
        else
            json_decref(cp.uprops);
    }
    rc = run_method(t, it->dst, "pool.dataset.create", json_pack("[o]", data), NULL);
    if (rc == 0)
        it->dst_exists = true;
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

/* What one receive works on, found under the locks. */
struct recv_ctx {
    struct ds_row drow;                    /* the target dataset */
    char spath[PATH_MAX], dpath[PATH_MAX]; /* the source snapshot's and target's files */
    struct volume *v;                      /* the target's open volume, or NULL (own ref) */
    struct store_update_stats st;
    bool resized;
};

/* Under db_lock: both pools, the target row and the two files' paths.
 * *rbd when either pool is RBD (nothing else is looked up then). */
static int recv_locate(struct item *it, const struct snap *s, struct recv_ctx *c, bool *rbd)
{
    struct ds_pool spool, dpool;
    char poolname[DS_NAME_BUF];
    int rc;

    db_lock();
    ds_pool_of(it->src, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &spool);
    if (rc == 0) {
        ds_pool_of(it->dst, poolname, sizeof(poolname));
        rc = ds_pool_get(poolname, &dpool);
    }
    *rbd = rc == 0 && (ds_pool_is_rbd(&spool) || ds_pool_is_rbd(&dpool));
    if (rc == 0 && !*rbd)
        rc = ds_dataset_get(it->dst, &c->drow);
    if (rc == 0 && !*rbd &&
        (ds_path(&spool, it->src, s->name, c->spath, sizeof(c->spath)) < 0 ||
         ds_path(&dpool, it->dst, NULL, c->dpath, sizeof(c->dpath)) < 0))
        rc = -ENAMETOOLONG;
    db_unlock();
    return rc;
}

/* Called under ds_ops_lock: may this snapshot be received into the
 * target now? Flushes the target's open volume (c->v, kept for the
 * caller to release after the lock) so the compare sees its data.
 * 0, or -errno with the job's failure message in msg. */
static int recv_check(struct item *it, const struct snap *s, struct recv_ctx *c, char *msg,
                      size_t msglen)
{
    char why[256];
    bool rbd;
    int rc = recv_locate(it, s, c, &rbd);

    if (rbd) {
        str_printf(msg, msglen,
                   "replication of %s to %s: RBD pools are not supported by "
                   "replication.run_onetime yet (file pools only)",
                   it->src, it->dst);
        return -ENOTSUP;
    }
    if (rc < 0) {
        str_printf(msg, msglen, "cannot locate %s@%s or %s", it->src, s->name, it->dst);
        return rc;
    }
    if (c->drow.memory) {
        str_printf(msg, msglen, "%s is memory-backed; replication needs the file backend", it->dst);
        return -ENOTSUP;
    }
    /* zfs recv replaces the data under any user: refuse instead */
    if (ds_in_use(it->dst, why, sizeof(why))) {
        str_printf(msg, msglen, "target %s is in use (%s)", it->dst, why);
        return -EBUSY;
    }
    c->v = ds_cache_peek(it->dst);
    if (c->v && (rc = volume_flush_wait(c->v)) < 0) {
        str_printf(msg, msglen, "cannot flush %s", it->dst);
        return rc;
    }
    return 0;
}

/* Called under ds_ops_lock: make the target's file the snapshot's data,
 * then the open volume's and the database's size the received one. */
static int recv_transfer(struct repl_task *t, struct recv_ctx *c)
{
    int rc;

    recv_progress(0, 1, t);
    /* the file changes behind the open volume: its change log cannot say
     * how (store/changes.h) */
    struct store_changes *log = c->v ? bdev_file_changes(volume_bdev(c->v)) : NULL;
    if (log)
        store_changes_invalidate(log);
    rc = store_update_file(c->spath, c->dpath, 0, recv_progress, t, &c->st);
    if (rc == 0 && c->v && volume_size(c->v) != c->st.size) {
        rc = volume_resize(c->v, c->st.size);
        c->resized = rc == 0;
    }
    if (rc == 0)
        rc = recv_store_size(c->drow.id, c->st.size);
    return rc;
}

/* Receive one snapshot: the target's data becomes the source snapshot's
 * (under ds_ops_lock, so no dataset operation runs in between), then the
 * target snapshot of the same name is taken with its creation time. */
static int recv_snapshot(struct repl_task *t, struct item *it, const struct snap *s)
{
    struct recv_ctx c = {0};
    char msg[1024];
    int rc;

    t->cur = it;
    t->cur_snap = s;
    t->last_pct = -1;
    ds_ops_lock();
    rc = recv_check(it, s, &c, msg, sizeof(msg));
    if (rc == 0) {
        rc = recv_transfer(t, &c);
        if (rc < 0)
            str_printf(msg, sizeof(msg), "receiving %s@%s into %s: %s", it->src, s->name, it->dst,
                       strerror(-rc));
    }
    ds_ops_unlock();
    if (c.resized)
        ds_notify(DATASETS_RESIZED, it->dst, c.v);
    if (c.v)
        volume_unref(c.v);
    if (rc < 0)
        return repl_fail(t, rc, "%s", msg);
    log_info("replication: %s@%s → %s (%s%s): %s; %llu MiB compared, %llu MiB written, %llu "
             "MiB punched",
             it->src, s->name, it->dst, it->base || s != it->send[0] ? "incremental" : "full",
             it->base && s == it->send[0] ? " from the common snapshot" : "",
             c.st.reflinked ? "reflink" : "compare-and-write",
             (unsigned long long)(c.st.compared >> 20), (unsigned long long)(c.st.written >> 20),
             (unsigned long long)(c.st.punched >> 20));

    rc = run_method(t, it->dst, "zfs.snapshot.create",
                    json_pack("[{s:s, s:s}]", "dataset", it->dst, "name", s->name), NULL);
    if (rc < 0)
        return rc;
    /* zfs recv keeps the snapshot's creation time */
    recv_store_created(c.drow.id, s->name, s->created);
    t->sent++;
    recv_progress(1, 1, t);
    return 0;
}

static int delete_snapshot(struct repl_task *t, const char *dataset, const char *snap)
{
    char full[DS_NAME_BUF * 2];

    snprintf(full, sizeof(full), "%s@%s", dataset, snap);
    return run_method(t, full, "zfs.snapshot.delete", json_pack("[s]", full), NULL);
}

static int run_item(struct repl_task *t, struct item *it)
{
    if (!it->volume || !it->nsend)
        return 0;
    if (it->destroy_first) {
        log_warn("replication: no incremental base for %s: destroying %s (allow_from_scratch)",
                 it->src, it->dst);
        if (run_method(t, it->dst, "pool.dataset.delete",
                       json_pack("[s, {s:b, s:b}]", it->dst, "recursive", 1, "force", 1), NULL) < 0)
            return -1;
        it->dst_exists = false;
        it->base = NULL;
    }
    if (!it->dst_exists) {
        if (create_target(t, it, it->send[0]->volsize) < 0)
            return -1;
    } else if (it->base) {
        /* zfs recv -F: the target's snapshots after the base go */
        const struct snap *db = snaps_find(&it->dsn, it->base->name);
        for (size_t i = 0; db && i < it->dsn.n; i++)
            if (it->dsn.v[i].id > db->id && delete_snapshot(t, it->dst, it->dsn.v[i].name) < 0)
                return -1;
    }
    for (size_t i = 0; i < it->nsend; i++)
        if (recv_snapshot(t, it, it->send[i]) < 0)
            return -1;
    if (t->readonly != RO_IGNORE &&
        run_method(t, it->dst, "pool.dataset.update",
                   json_pack("[s, {s:s}]", it->dst, "readonly", "ON"), NULL) < 0)
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
            /* a failure (e.g. a clone depends on it) is logged, not fatal,
             * as zettarepl's retention does */
            char full[DS_NAME_BUF * 2];
            json_t *res = NULL, *err = NULL;
            snprintf(full, sizeof(full), "%s@%s", it->dst, d->name);
            json_t *p = json_pack("[s]", full);
            if (p && api_call_method_as(jobs_identity(t->job), "replication", "zfs.snapshot.delete",
                                        p, &res, &err) < 0)
                log_warn("replication: retention could not delete %s: %s", full,
                         json_string_value(json_object_get(err, "message")));
            json_decref(p);
            json_decref(res);
            json_decref(err);
        }
        snaps_free(&src);
        snaps_free(&dst);
    }
}

static pthread_mutex_t repl_mutex = PTHREAD_MUTEX_INITIALIZER;

static int onetime_job(struct job *job, void *arg, json_t **result)
{
    struct repl_task *t = arg;
    json_t *sources = json_object_get(t->args, "source_datasets"), *v;
    size_t i;
    int rc = 0;

    t->job = job;
    jobs_progress(job, 0, "Waiting for other replication jobs");
    pthread_mutex_lock(&repl_mutex);
    jobs_progress(job, 0, "Planning");
    json_array_foreach(sources, i, v)
    {
        if (rc == 0)
            rc = collect_sources(t, json_string_value(v));
    }
    for (i = 0; rc == 0 && i < t->nitems; i++)
        rc = plan_item(t, &t->items[i]);
    for (i = 0; rc == 0 && i < t->nitems; i++)
        rc = run_item(t, &t->items[i]);
    if (rc == 0) {
        run_retention(t);
        jobs_progress(job, 100, "Replication finished: %zu snapshot%s sent", t->sent,
                      t->sent == 1 ? "" : "s");
        log_info("replication: job %lld finished: %zu snapshot%s sent", (long long)jobs_id(job),
                 t->sent, t->sent == 1 ? "" : "s");
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

static bool nonnull(json_t *data, const char *key)
{
    json_t *v = json_object_get(data, key);
    return v && !json_is_null(v);
}

static void check_schemas(struct api_call *call, json_t *list, const char *field,
                          struct repl_select *sel)
{
    json_t *v;
    size_t i;

    json_array_foreach(list, i, v)
    {
        char why[256], path[96];
        if (repl_schema_check(json_string_value(v), why, sizeof(why)) < 0) {
            snprintf(path, sizeof(path), "%s.%zu", field, i);
            api_verr(call, path, EINVAL, "%s", why);
            continue;
        }
        if (sel && sel->nschemas < REPL_MAX_SCHEMAS) {
            char **nv = realloc(sel->schemas, (sel->nschemas + 1) * sizeof(*nv));
            if (nv) {
                sel->schemas = nv;
                sel->schemas[sel->nschemas] = strdup(json_string_value(v));
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
static void onetime_check_direction(struct api_call *call, json_t *data, bool push)
{
    json_t *ns = json_object_get(data, "naming_schema");
    json_t *aln = json_object_get(data, "also_include_naming_schema");
    const char *regex = json_string_value(json_object_get(data, "name_regex"));
    char path[96];
    json_t *v;
    size_t i;

    json_array_foreach(json_object_get(data, "periodic_snapshot_tasks"), i, v)
    {
        snprintf(path, sizeof(path), F("periodic_snapshot_tasks.%zu"), i);
        api_verr(call, path, ENOTSUP,
                 push ? "replication bound to periodic snapshot tasks is not supported: give "
                        "the task's naming schema as also_include_naming_schema"
                      : "Pull replication can't be bound to a periodic snapshot task");
    }
    if (push) {
        if (json_array_size(ns))
            api_verr(call, F("naming_schema"), EINVAL,
                     "This field has no sense for push replication");
        if (!json_array_size(aln) && !regex)
            api_verr(call, F("periodic_snapshot_tasks"), EINVAL,
                     "You must at least either bind a periodic snapshot task or provide \"Also "
                     "Include Naming Schema\" or \"Name Regex\" for push replication task");
    } else {
        if (!json_array_size(ns) && !regex)
            api_verr(call, F("naming_schema"), EINVAL,
                     "Naming schema or Name regex are required for pull replication");
        if (json_array_size(aln))
            api_verr(call, F("also_include_naming_schema"), EINVAL,
                     "This field has no sense for pull replication");
        if (json_is_true(json_object_get(data, "hold_pending_snapshots")))
            api_verr(call, F("hold_pending_snapshots"), EINVAL,
                     "Pull replication tasks can't hold pending snapshots because they don't do "
                     "source retention");
    }
}

/* Transport LOCAL (the only one, checked before): every SSH, netcat and
 * network field is an error rather than silently ignored. */
static void onetime_check_local_transport(struct api_call *call, json_t *data)
{
    static const char *const nc[] = {"netcat_active_side_listen_address",
                                     "netcat_active_side_port_min", "netcat_active_side_port_max",
                                     "netcat_passive_side_connect_address"};
    char path[96];
    size_t i;

    if (nonnull(data, "netcat_active_side"))
        api_verr(call, F("netcat_active_side"), EINVAL,
                 "This field only has sense for SSH+netcat replication");
    for (i = 0; i < ARRAY_SIZE(nc); i++)
        if (nonnull(data, nc[i])) {
            snprintf(path, sizeof(path), F("%s"), nc[i]);
            api_verr(call, path, EINVAL, "This field only has sense for SSH+netcat replication");
        }
    if (nonnull(data, "ssh_credentials"))
        api_verr(call, F("ssh_credentials"), EINVAL,
                 "Remote credentials have no sense for local replication");
    if (nonnull(data, "compression"))
        api_verr(call, F("compression"), EINVAL, "Compression has no sense for local replication");
    if (nonnull(data, "speed_limit"))
        api_verr(call, F("speed_limit"), EINVAL, "Speed limit has no sense for local replication");
}

/* True when name is a strict descendant of one of the source datasets:
 * "exclude" may only name children of what is sent. */
static bool onetime_is_source_child(json_t *sources, const char *name)
{
    json_t *s;
    size_t k;
    bool child = false;

    json_array_foreach(sources, k, s)
    {
        size_t n = strlen(json_string_value(s));
        if (strncmp(name, json_string_value(s), n) == 0 && name[n] == '/')
            child = true;
    }
    return child;
}

/* Dataset names and the recursion/exclude pair; sets t->recursive, which
 * the exclude check needs. */
static void onetime_check_datasets(struct api_call *call, json_t *data, struct repl_task *t)
{
    json_t *sources = json_object_get(data, "source_datasets"), *v;
    char why[256], path[96];
    size_t i;

    json_array_foreach(sources, i, v)
    {
        if (name_check_dataset(json_string_value(v), false, why, sizeof(why)) < 0) {
            snprintf(path, sizeof(path), F("source_datasets.%zu"), i);
            api_verr(call, path, EINVAL, "%s", why);
        }
    }
    if (name_check_dataset(json_string_value(json_object_get(data, "target_dataset")), false, why,
                           sizeof(why)) < 0)
        api_verr(call, F("target_dataset"), EINVAL, "%s", why);
    t->recursive = json_is_true(json_object_get(data, "recursive"));
    if (!t->recursive && json_array_size(json_object_get(data, "exclude")))
        api_verr(call, F("exclude"), EINVAL,
                 "Excluding child datasets is only supported for recursive replication");
    json_array_foreach(json_object_get(data, "exclude"), i, v)
    {
        if (!onetime_is_source_child(sources, json_string_value(v))) {
            snprintf(path, sizeof(path), F("exclude.%zu"), i);
            api_verr(call, path, EINVAL, "This dataset is not a child of any of source datasets");
        }
    }
}

/* Which snapshots are sent: the naming schemas the direction uses are
 * compiled into t->sel, the others only checked; a regex excludes both
 * schemas and a custom retention (it has no date to age). */
static void onetime_check_selection(struct api_call *call, json_t *data, bool push,
                                    struct repl_task *t)
{
    json_t *ns = json_object_get(data, "naming_schema");
    json_t *aln = json_object_get(data, "also_include_naming_schema");
    const char *regex = json_string_value(json_object_get(data, "name_regex"));
    const char *ret = json_string_value(json_object_get(data, "retention_policy"));
    char why[256];

    check_schemas(call, push ? aln : ns,
                  push ? F("also_include_naming_schema") : F("naming_schema"), &t->sel);
    check_schemas(call, push ? ns : aln,
                  push ? F("naming_schema") : F("also_include_naming_schema"), NULL);
    if (!regex)
        return;
    if (repl_regex_compile(regex, &t->sel.regex, why, sizeof(why)) < 0)
        api_verr(call, F("name_regex"), EINVAL, "%s", why);
    else
        t->sel.use_regex = true;
    if (json_array_size(ns) || json_array_size(aln))
        api_verr(call, F("name_regex"), EINVAL, "Naming regex can't be used with Naming schema");
    if (strcmp(ret, "CUSTOM") == 0)
        api_verr(call, F("retention_policy"), EINVAL,
                 "Only `Same as Source` and `None` retention policies can be used with Naming "
                 "regex");
}

/* A custom retention needs its lifetime; the other policies must not
 * carry one (TrueNAS refuses it rather than ignoring it). */
static void onetime_check_retention(struct api_call *call, json_t *data)
{
    static const char *const lt[] = {"lifetime_value", "lifetime_unit"};
    const char *ret = json_string_value(json_object_get(data, "retention_policy"));
    char path[96];
    size_t i;

    if (strcmp(ret, "CUSTOM") == 0) {
        if (!nonnull(data, "lifetime_value"))
            api_verr(call, F("lifetime_value"), EINVAL,
                     "This field is required for custom retention policy");
        if (!nonnull(data, "lifetime_unit"))
            api_verr(call, F("lifetime_unit"), EINVAL,
                     "This field is required for custom retention policy");
        return;
    }
    for (i = 0; i < ARRAY_SIZE(lt); i++)
        if (nonnull(data, lt[i])) {
            snprintf(path, sizeof(path), F("%s"), lt[i]);
            api_verr(call, path, EINVAL, "This field has no sense for specified retention policy");
        }
    if (json_array_size(json_object_get(data, "lifetimes")))
        api_verr(call, F("lifetimes"), EINVAL,
                 "This field has no sense for specified retention policy");
}

/* A valid request that asks for something blockd's LOCAL replication does
 * not do: the first such feature's description, or NULL. */
static const char *onetime_unsupported(json_t *data)
{
    if (json_is_true(json_object_get(data, "replicate")))
        return "full filesystem replication (replicate)";
    if (json_is_true(json_object_get(data, "encryption")))
        return "encrypting the target (encryption)";
    if (nonnull(data, "restrict_schedule"))
        return "restrict_schedule";
    if (json_array_size(json_object_get(data, "lifetimes")))
        return "per-schedule lifetimes (lifetimes)";
    if (json_array_size(json_object_get(data, "properties_exclude")) ||
        json_object_size(json_object_get(data, "properties_override")))
        return "properties_exclude / properties_override";
    return NULL;
}

/* RBD pools are not replicated yet (the transfer compares files): the
 * first source or target dataset in an RBD pool, or NULL. The name is
 * borrowed from data. Takes db_lock for the pool lookups. */
static const char *onetime_rbd_dataset(json_t *data)
{
    json_t *names = json_array(), *n;
    size_t k;
    const char *rbd_name = NULL;

    json_array_extend(names, json_object_get(data, "source_datasets"));
    json_array_append(names, json_object_get(data, "target_dataset"));
    db_lock();
    json_array_foreach(names, k, n)
    {
        char poolname[DS_NAME_BUF];
        struct ds_pool pool;

        ds_pool_of(json_string_value(n), poolname, sizeof(poolname));
        if (!rbd_name && ds_pool_get(poolname, &pool) == 0 && ds_pool_is_rbd(&pool))
            rbd_name = json_string_value(n);
    }
    db_unlock();
    json_decref(names);
    return rbd_name;
}

/* Copy the checked request into the task the job runs. */
static void onetime_task_fill(struct repl_task *t, json_t *data)
{
    const char *ret = json_string_value(json_object_get(data, "retention_policy"));
    json_t *v;

    t->args = json_incref(data);
    t->allow_from_scratch = json_is_true(json_object_get(data, "allow_from_scratch"));
    t->only_from_scratch = json_is_true(json_object_get(data, "only_from_scratch"));
    t->properties = !json_is_false(json_object_get(data, "properties"));
    v = json_object_get(data, "readonly");
    t->readonly = !v || strcmp(json_string_value(v), "SET") == 0 ? RO_SET
                  : strcmp(json_string_value(v), "REQUIRE") == 0 ? RO_REQUIRE
                                                                 : RO_IGNORE;
    t->retention = strcmp(ret, "SOURCE") == 0   ? RET_SOURCE
                   : strcmp(ret, "CUSTOM") == 0 ? RET_CUSTOM
                                                : RET_NONE;
    if (t->retention == RET_CUSTOM) {
        t->lifetime_value = (int)json_integer_value(json_object_get(data, "lifetime_value"));
        t->lifetime_unit = json_string_value(json_object_get(data, "lifetime_unit"));
        t->lifetime_s = (int64_t)t->lifetime_value * unit_seconds(t->lifetime_unit);
        if (!t->lifetime_s) /* months/years for the "do not send" guess */
            t->lifetime_s = (int64_t)t->lifetime_value *
                            (strcmp(t->lifetime_unit, "MONTH") == 0 ? 31 : 366) * 86400;
    }
    source_base(json_object_get(data, "source_datasets"), t->base_prefix, sizeof(t->base_prefix));
}

/* replication.run_onetime: decode -> check (every field error reported
 * together, as TrueNAS does) -> refuse what blockd does not do -> start
 * the job. The parameter shapes were checked by the dispatcher against
 * onetime_fields. */
static int m_run_onetime(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0);
    const char *transport = json_string_value(json_object_get(data, "transport"));
    const char *what;
    struct repl_task *t;
    bool push;
    int rc;

    if (strcmp(transport, "LOCAL") != 0)
        return api_error(call, ENOTSUP,
                         "Replication transport %s is not supported: blockd replicates between "
                         "its own pools only (supported transports: LOCAL)",
                         transport);
    push = strcmp(json_string_value(json_object_get(data, "direction")), "PUSH") == 0;
    t = calloc(1, sizeof(*t));
    if (!t)
        return api_error(call, ENOMEM, "out of memory");
    t->push = push;
    onetime_check_direction(call, data, push);
    onetime_check_local_transport(call, data);
    onetime_check_datasets(call, data, t);
    onetime_check_selection(call, data, push, t);
    onetime_check_retention(call, data);
    if (api_has_verrs(call)) {
        rc = api_invalid(call);
        goto fail;
    }
    what = onetime_unsupported(data);
    if (what) {
        rc = api_error(call, ENOTSUP, "%s is not supported by blockd's LOCAL replication", what);
        goto fail;
    }
    /* refused before any job starts */
    what = onetime_rbd_dataset(data);
    if (what) {
        rc = api_error(call, ENOTSUP,
                       "%s is in an RBD pool: replication.run_onetime supports file pools only "
                       "(not RBD pools yet)",
                       what);
        goto fail;
    }
    onetime_task_fill(t, data);
    log_info("replication: run_onetime %s → %s (%s%s) by %s",
             json_string_value(json_array_get(json_object_get(data, "source_datasets"), 0)),
             json_string_value(json_object_get(data, "target_dataset")),
             t->recursive ? "recursive, " : "",
             json_string_value(json_object_get(data, "retention_policy")), api_call_peer(call));
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

static int m_count_eligible(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data, *v;
    struct repl_select sel = {0};
    const char *regex;
    char why[256];
    size_t i;
    json_int_t total = 0, eligible = 0;

    data = api_param(params, 0); /* checked against count_fields by the dispatcher */
    if (strcmp(json_string_value(json_object_get(data, "transport")), "LOCAL") != 0)
        return api_error(call, ENOTSUP,
                         "Replication transport %s is not supported: blockd replicates between "
                         "its own pools only (supported transports: LOCAL)",
                         json_string_value(json_object_get(data, "transport")));
    check_schemas(call, json_object_get(data, "naming_schema"),
                  "replication.count_eligible_manual_snapshots.naming_schema", &sel);
    regex = json_string_value(json_object_get(data, "name_regex"));
    if (regex) {
        if (repl_regex_compile(regex, &sel.regex, why, sizeof(why)) < 0)
            api_verr(call, "replication.count_eligible_manual_snapshots.name_regex", EINVAL, "%s",
                     why);
        else
            sel.use_regex = true;
    }
    if (api_has_verrs(call)) {
        select_free(&sel);
        return api_invalid(call);
    }
    json_array_foreach(json_object_get(data, "datasets"), i, v)
    {
        struct snaps s;
        if (snaps_list(json_string_value(v), &sel, &s) < 0)
            continue;
        total += (json_int_t)s.n;
        for (size_t k = 0; k < s.n; k++)
            eligible += s.v[k].sel;
        snaps_free(&s);
    }
    select_free(&sel);
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
