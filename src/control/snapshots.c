/*
 * zfs.snapshot.create / query / delete / clone / rollback: the API of
 * struct ds_snap (snapshot_store.h holds its SQL): the field tables the
 * dispatcher checks, the names decoded from a create's params
 * (snap_create_names), the one encoder (snapshot_encode: a stored
 * snapshot as its store shows it, struct ds_snap_view, and the space it
 * holds → the zfs.snapshot row), and handlers of one shape: decode →
 * check → the copy → one transaction → publish.
 *
 * A snapshot of "pool/vol" named "s1" is the file "<pool dir>/vol@s1" ('@'
 * cannot appear in a component, so it never collides with a dataset),
 * made by store_snapshot_volume (a reflink, or copy-before-write without
 * holding writes for the copy: store/snapshot.h); clones by store_clone_file.
 * Copies can be long: they run with only ds_ops_lock() held (other dataset
 * changes wait; queries and other modules' API calls do not), and report
 * progress in the log.
 */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/jobs.h"
#include "api/fields.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsrbd.h"
#include "control/dsquery.h"
#include "control/holdings.h"
#include "core/log.h"
#include "core/util.h"
#include "store/copy.h"
#include "store/snapshot.h"

static const char *const onoff_values[] = {"ON", "OFF", NULL};
static const char *const sync_values[] = {"STANDARD", "ALWAYS", "DISABLED", NULL};

/*
 * A long copy (snapshot without reflink, clone, rollback) runs as a job
 * (jobs_run: synchronous for the caller, visible with its progress in
 * core.get_jobs). Progress is also logged every 2 s, and sent to the
 * calling client as a notification {"method": "progress", "params":
 * {"method": M, "progress": {"percent": N, "description": D}}} at most
 * every 0.5 s once the copy has taken over a second (blockctl's progress
 * bar reads these).
 */
enum copy_kind { COPY_FILE, COPY_CLONE, COPY_ROLLBACK, COPY_SNAPSHOT, COPY_FLATTEN };

struct copy_work {
    enum copy_kind kind;
    const char *what;      /* "snapshot", "clone", "rollback" */
    const char *name;      /* what is being made or rolled back */
    const char *src, *dst; /* COPY_FILE: file paths */
    /* the others, through the pool's backend (dsbackend.h): dataset and
     * snapshot in pool; COPY_CLONE: into dst_name in dst_pool */
    const struct ds_pool *pool, *dst_pool;
    const char *dataset, *snap, *dst_name;
    struct volume *vol; /* COPY_ROLLBACK: the open volume or NULL; COPY_SNAPSHOT: the volume */
    bool reflinked;
    struct store_snapshot_stats snap_stats; /* COPY_SNAPSHOT */
    /* progress */
    struct job *job;
    struct api_client *client;
    const char *method;
    struct timespec start, last_log, last_note;
    bool final_logged;
};

static double elapsed(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static void copy_progress(uint64_t done, uint64_t total, void *arg)
{
    struct copy_work *w = arg;
    struct timespec now;
    int pct = total ? (int)(done * 100 / total) : 100;

    clock_gettime(CLOCK_MONOTONIC, &now);
    if (w->job)
        jobs_progress(w->job, pct, "%s %s: %llu of %llu MiB", w->what, w->name,
                      (unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
    if (w->client && w->client->send && elapsed(&w->start, &now) >= 1.0 &&
        (done == total || elapsed(&w->last_note, &now) >= 0.5)) {
        json_t *msg = json_pack("{s:s, s:s, s:{s:s, s:{s:i, s:s}}}", "jsonrpc", "2.0", "method",
                                "progress", "params", "method", w->method, "progress", "percent",
                                pct, "description", w->what);
        w->last_note = now;
        if (msg) {
            w->client->send(w->client, msg);
            json_decref(msg);
        }
    }
    if (done < total && elapsed(&w->last_log, &now) < 2.0)
        return;
    if (done == total && (w->final_logged || elapsed(&w->start, &now) < 1.0))
        return; /* short copies: the final log line says enough */
    w->final_logged = done == total;
    w->last_log = now;
    log_info("datasets: %s %s: %d%% (%llu of %llu MiB)", w->what, w->name, pct,
             (unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
}

static int copy_job(struct job *job, void *arg, json_t **result)
{
    struct copy_work *w = arg;
    int rc;

    const struct ds_backend *be = w->pool ? ds_backend_of(w->pool) : NULL;

    w->job = job;
    ds_backend_why[0] = '\0'; /* this thread's: jobs may run on their own */
    if (w->kind == COPY_FILE)
        rc = store_clone_file(w->src, w->dst, copy_progress, w, &w->reflinked);
    else if (w->kind == COPY_CLONE)
        rc = be->clone(w->pool, w->dataset, w->snap, w->dst_pool, w->dst_name, copy_progress, w,
                       &w->reflinked);
    else if (w->kind == COPY_SNAPSHOT) {
        /* This thread parks the volume's writes for the instant of the
         * snapshot: at SCHED_IDLE on a busy machine it could wait long for
         * the CPU with the writes parked (a hold of 110 ms was seen). */
        api_thread_boost();
        rc = be->snapshot_create(w->pool, w->dataset, w->snap, w->vol, copy_progress, w,
                                 &w->snap_stats);
        api_thread_unboost();
    } else if (w->kind == COPY_FLATTEN)
        rc = be->flatten(w->pool, w->dataset, copy_progress, w);
    else
        rc = be->rollback(w->pool, w->dataset, w->snap, w->vol, copy_progress, w, &w->reflinked);
    if (rc < 0 && ds_backend_why[0])
        return jobs_fail(job, rc, "%s %s: %s", w->what, w->name, ds_backend_why);
    if (rc < 0)
        return jobs_fail(job, rc, "%s %s: %s", w->what, w->name, strerror(-rc));
    *result = NULL;
    return 0;
}

/* Run the copy described by w. 0, or -1 with the error set on call. */
static int copy_run(struct api_call *call, json_t *params, struct copy_work *w)
{
    json_t *res = NULL;
    char desc[DS_NAME_BUF + 32];
    int rc;

    w->client = api_call_client(call);
    w->method = api_call_method(call);
    clock_gettime(CLOCK_MONOTONIC, &w->start);
    w->last_log = w->last_note = w->start;
    snprintf(desc, sizeof(desc), "%s %s", w->what, w->name);
    rc = jobs_run(call, params, desc, copy_job, w, &res);
    json_decref(res);
    return rc;
}

int ds_flatten_job(struct api_call *call, json_t *params, const struct ds_pool *pool,
                   const char *name)
{
    struct copy_work w = {
        .kind = COPY_FLATTEN, .what = "promote", .name = name, .pool = pool, .dataset = name};

    return copy_run(call, params, &w);
}

int ds_copy_file_job(struct api_call *call, json_t *params, const char *what, const char *name,
                     const char *src, const char *dst, bool *reflinked)
{
    struct copy_work w = {.kind = COPY_FILE, .what = what, .name = name, .src = src, .dst = dst};
    int rc = copy_run(call, params, &w);

    if (reflinked)
        *reflinked = w.reflinked;
    return rc;
}

/* Split "pool/vol@snap". 0 or -EINVAL with why. */
static int split_snapshot(const char *full, char *dataset, size_t dlen, const char **snap,
                          char *why, size_t whylen)
{
    const char *at = strchr(full, '@');

    *snap = NULL;
    if (!at) {
        snprintf(why, whylen, "not a snapshot name (expected POOL/DATASET@SNAPSHOT)");
        return -EINVAL;
    }
    if (name_check_dataset(full, true, why, whylen) < 0)
        return -EINVAL;
    snprintf(dataset, dlen, "%.*s", (int)(at - full), full);
    *snap = at + 1;
    return 0;
}

/* The field name "<method>.<leaf>" of call's error (zfs.snapshot.* and
 * pool.snapshot.* share the handlers) in buf. */
#define FIELD(call, leaf) field_of(call, leaf, (char[96]){0}, 96)
static const char *field_of(struct api_call *call, const char *leaf, char *buf, size_t len)
{
    snprintf(buf, len, "%s.%s", api_call_method(call), leaf);
    return buf;
}

/* ---- encoder: struct → the zfs.snapshot row ---- */

static json_t *prop_int_str(uint64_t v)
{
    return ds_prop_size(v, "NONE");
}

/* The "properties" of a snapshot's row. used: its backend's figure. */
static json_t *snapshot_props(const struct ds_snap_view *v, uint64_t used)
{
    const struct ds_snap *s = &v->snap;
    time_t t = (time_t)(s->created / 1000);
    char raw[32], value[64];
    struct tm tm;
    json_t *props = json_object();

    snprintf(raw, sizeof(raw), "%lld", (long long)(s->created / 1000));
    gmtime_r(&t, &tm);
    strftime(value, sizeof(value), "%a %b %e %H:%M %Y", &tm);
    json_object_set_new(
        props, "creation",
        ds_prop(json_pack("{s:I}", "$date", (json_int_t)s->created), raw, value, "NONE"));
    json_object_set_new(props, "used", prop_int_str(used));
    json_object_set_new(props, "referenced", prop_int_str(used));
    json_object_set_new(props, "volsize", ds_prop_size(s->volsize, "NONE"));
    json_object_set_new(props, "clones",
                        ds_prop(json_string(v->clones), v->clones, v->clones, "NONE"));
    json_object_set_new(props, "type",
                        ds_prop(json_string("snapshot"), "snapshot", "SNAPSHOT", "NONE"));
    snprintf(raw, sizeof(raw), "%lld", (long long)s->id);
    /* createtxg: blockd has no transaction groups; the snapshot's id
     * orders snapshots the same way. */
    json_object_set_new(props, "createtxg", ds_prop(json_integer(s->id), raw, raw, "NONE"));
    return props;
}

/* The row zfs.snapshot.* / pool.snapshot.* (pool_shape) answer with
 * (keys in TrueNAS's order). used: the space the snapshot holds, its
 * backend's figure. A new reference, or NULL. */
static json_t *snapshot_encode(const struct ds_snap_view *v, uint64_t used, bool pool_shape)
{
    const struct ds_snap *s = &v->snap;
    char full[DS_NAME_BUF * 2], txg[32];
    json_t *row;

    snprintf(full, sizeof(full), "%s@%s", s->dataset, s->name);
    snprintf(txg, sizeof(txg), "%lld", (long long)s->id);
    row = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:{}, s:n, s:I, s:I}", "id", full,
                    "name", full, "pool", v->pool.name, "type", "SNAPSHOT", "snapshot_name",
                    s->name, "dataset", s->dataset, "createtxg", txg, "properties",
                    snapshot_props(v, used), "holds", "retention", "volsize",
                    (json_int_t)s->volsize, "created", (json_int_t)s->created);
    if (row && pool_shape) {
        /* integers, as clients of pool.snapshot.* decode them */
        json_object_set_new(row, "used", json_integer((json_int_t)used));
        json_object_set_new(row, "referenced", json_integer((json_int_t)used));
    } else if (row) {
        /* also top-level, as the dataset rows have them */
        json_object_set_new(row, "used", prop_int_str(used));
        json_object_set_new(row, "referenced", prop_int_str(used));
    }
    if (row)
        ds_snap_props_encode(s->id, row);
    return row;
}

/* A list of rows being built, and their shape. */
struct row_list {
    json_t *rows;
    bool pool_shape;
};

/* ds_snapshot_each's callback: append v's row to the struct row_list
 * arg. */
static int snapshot_row_add(const struct ds_snap_view *v, void *arg)
{
    struct row_list *l = arg;
    const struct ds_pool *pool = &v->pool;
    uint64_t used = ds_backend_of(pool)->snapshot_usage(pool, v->snap.dataset, v->snap.name);
    json_t *row = snapshot_encode(v, used, l->pool_shape);

    if (row)
        json_array_append_new(l->rows, row);
    return 0;
}

/* The rows of the snapshots keys selects (NULL: every one), in the
 * store's order: a new array, or NULL. DB locked. */
static json_t *snapshot_rows(const struct ds_snap_keys *keys, bool pool_shape)
{
    struct row_list l = {.rows = json_array(), .pool_shape = pool_shape};

    if (l.rows && ds_snapshot_each(keys, snapshot_row_add, &l) < 0) {
        json_decref(l.rows);
        l.rows = NULL;
    }
    return l.rows;
}

/* Query push-down (ds_internal.h): the rows of the snapshots a top-level
 * id/name filter names ("dataset@snap"; a name without '@' matches no
 * snapshot), else of the datasets a dataset filter names, else all. DB
 * locked. */
static json_t *snapshot_rows_hinted(json_t *params, bool pool_shape)
{
    static const char *const ids[] = {"id", "name"};
    static const char *const datasets[] = {"dataset"};
    json_t *names = ds_query_hint_names(params, ids, 2), *rows = NULL;
    bool by_id = names != NULL;
    struct ds_snap_keys keys = {0};
    struct ds_snap_key *v;

    if (!names)
        names = ds_query_hint_names(params, datasets, 1);
    if (!names)
        return snapshot_rows(NULL, pool_shape);
    v = calloc(json_array_size(names) + 1, sizeof(*v));
    for (size_t k = 0; v && k < json_array_size(names); k++) {
        const char *n = json_string_value(json_array_get(names, k));
        const char *at = strchr(n, '@');

        if (!by_id)
            v[keys.n++] = (struct ds_snap_key){.dataset = n, .dataset_len = -1};
        else if (at)
            v[keys.n++] =
                (struct ds_snap_key){.dataset = n, .dataset_len = (int)(at - n), .snap = at + 1};
    }
    keys.v = v;
    if (v)
        rows = snapshot_rows(&keys, pool_shape);
    free(v);
    json_decref(names);
    return rows;
}

/* Does call use the pool.snapshot.* names (and row shape)? */
static bool pool_shape_of(struct api_call *call)
{
    return strncmp(api_call_method(call), "pool.", 5) == 0;
}

json_t *ds_snapshot_row(const char *dataset, const char *snap, bool pool_shape)
{
    struct ds_snap_key key = {.dataset = dataset, .dataset_len = -1, .snap = snap};
    struct ds_snap_keys keys = {.v = &key, .n = 1};
    json_t *rows = snapshot_rows(&keys, pool_shape), *row = json_array_get(rows, 0);

    json_incref(row);
    json_decref(rows);
    return row;
}

/* Look up a volume dataset for snapshot work. Locked by caller. On error
 * an API error is set and -1 returned. */
static int volume_lookup(struct api_call *call, const char *field, const char *name,
                         struct ds_row *row, struct ds_pool *pool)
{
    char poolname[DS_NAME_BUF];
    int rc;

    rc = ds_dataset_get(name, row);
    if (rc == -ENOENT) {
        api_verr(call, field, ENOENT, "dataset %s does not exist", name);
        return api_invalid(call);
    }
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot read dataset", name);
    if (row->type != DS_VOLUME)
        return api_error(call, ENOTSUP, "%s is a FILESYSTEM; only volumes have snapshots in blockd",
                         name);
    if (row->memory)
        return api_error(call, ENOTSUP, "%s is memory-backed; snapshots need the file backend",
                         name);
    ds_pool_of(name, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, pool);
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot read pool", poolname);
    return 0;
}

/* One zfs.snapshot.create's state, shared by its steps. */
struct snap_create {
    struct api_call *call;
    json_t *params;
    /* The request, decoded once by snap_create_fields (NULL: not given). */
    char *req_dataset, *req_name, *naming_schema;
    bool vmware_sync, suspend_vms;
    struct api_strv exclude;
    /* The state. */
    char dataset[DS_NAME_BUF];
    const char *snap;           /* the new snapshot's name (req_name, or named) */
    char named[DS_NAME_BUF];    /* the name naming_schema gave */
    struct ds_user_props props; /* properties: user properties */
    char full[DS_NAME_BUF * 2];
    struct ds_row row;
    struct ds_pool pool;
    struct copy_work work;
};

#define AT(member, codec) API_AT(struct snap_create, member, codec)
static const struct api_field snap_create_fields[] = {
    {.name = "dataset",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     AT(req_dataset, api_codec_str_null)},
    /* name, or naming_schema (strftime conversions, as TrueNAS's periodic
     * snapshots name theirs): one of them (snap_create_names) */
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     AT(req_name, api_codec_str_null)},
    {.name = "naming_schema",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     AT(naming_schema, api_codec_str_null)},
    {.name = "recursive", .type = API_T_BOOL},
    /* TrueNAS options some clients always send; only their "off" values
     * are accepted (snap_create_refuse). */
    {.name = "vmware_sync", .type = API_T_BOOL, AT(vmware_sync, api_codec_bool)},
    {.name = "suspend_vms", .type = API_T_BOOL, AT(suspend_vms, api_codec_bool)},
    {.name = "exclude", .type = API_T_ARRAY, AT(exclude, api_codec_strv)},
    /* user properties {"ns:name": "value"}, decoded with their checks by
     * ds_snap_props_decode (snapshot_props.c) */
    {.name = "properties", .type = API_T_OBJECT},
};
#undef AT

/* TrueNAS options some clients always send: only their "off" values are
 * accepted. 0 or the call's error. */
static int snap_create_refuse(struct snap_create *c)
{
    if (c->vmware_sync || c->suspend_vms)
        return api_error(c->call, ENOTSUP, "vmware_sync and suspend_vms are not supported");
    if (c->exclude.n > 0)
        return api_error(c->call, ENOTSUP, "exclude is not supported (volumes have no children)");
    return 0;
}

/* naming_schema → the snapshot's name, now (local time, as TrueNAS's
 * periodic snapshot tasks expand theirs). Field errors on the call. */
static void snap_create_named(struct snap_create *c, const char *schema)
{
    char field[96];
    time_t now = time(NULL);
    struct tm tm;

    snprintf(field, sizeof(field), "%s.naming_schema", api_call_method(c->call));
    localtime_r(&now, &tm);
    if (!strchr(schema, '%') || strftime(c->named, sizeof(c->named), schema, &tm) == 0) {
        api_verr(c->call, field, EINVAL,
                 "a naming schema has strftime conversions (%%Y, %%m, "
                 "%%d, %%H, %%M) and makes a non-empty name");
        c->named[0] = '\0';
    }
    c->snap = c->named;
}

/* The dataset and snapshot names, in either shape: TrueNAS's
 * {"dataset": "pool/vol", "name": "snap"} or {"name": "pool/vol@snap"}.
 * Field errors are collected on the call. */
static void snap_create_names(struct snap_create *c)
{
    const char *name = c->req_name, *schema = c->naming_schema;
    char why[256], field[96];

    snprintf(field, sizeof(field), "%s.name", api_call_method(c->call));
    if (!name == !schema) {
        api_verr(c->call, field, EINVAL, "give exactly one of name and naming_schema");
        return;
    }
    if (schema && !c->req_dataset) {
        api_verr(c->call, field, EINVAL, "naming_schema needs dataset");
        return;
    }
    if (schema) {
        snap_create_named(c, schema);
        name = c->named;
    }
    if (!c->req_dataset) {
        if (split_snapshot(name, c->dataset, sizeof(c->dataset), &c->snap, why, sizeof(why)) < 0)
            api_verr(c->call, FIELD(c->call, "name"), EINVAL, "%s", why);
        return;
    }
    snprintf(c->dataset, sizeof(c->dataset), "%s", c->req_dataset);
    c->snap = name;
    if (name_check_dataset(c->dataset, false, why, sizeof(why)) < 0)
        api_verr(c->call, FIELD(c->call, "dataset"), EINVAL, "%s", why);
    if (name[0] && name_check_component(name, strlen(name), why, sizeof(why)) < 0)
        api_verr(c->call, FIELD(c->call, "name"), EINVAL, "%s",
                 strchr(name, '@') ? "the snapshot name must not contain '@' when dataset "
                                     "is given"
                                   : why);
}

/* DB locked: a volume with a file backend, no snapshot of that name yet.
 * 0 or the call's error. */
static int snap_create_check(struct snap_create *c)
{
    struct ds_snap existing;
    int rc = volume_lookup(c->call, FIELD(c->call, "dataset"), c->dataset, &c->row, &c->pool);

    if (rc == 0 && ds_snapshot_get(c->dataset, c->snap, &existing) == 0) {
        api_verr(c->call, FIELD(c->call, "name"), EEXIST, "snapshot %s@%s already exists",
                 c->dataset, c->snap);
        rc = api_invalid(c->call);
    }
    /* ds_ops_lock is held until the snapshot is recorded */
    if (rc == 0 &&
        holdings_check(c->call, LIMIT_SNAPSHOTS, c->dataset,
                       "SELECT COUNT(*) FROM snapshots WHERE dataset_id = ?", "i", c->row.id) < 0)
        rc = -1;
    return rc;
}

/*
 * ds_ops locked, DB not: the snapshot's data. Point in time without
 * stalling writes (store/snapshot.h): a reflink under a hold of the writes
 * in flight, or, without reflink, a brief hold to start copy-before-write,
 * then the copy while writes go on (each write to a chunk not copied yet
 * copies its old data first). The snapshot exists (query, clone, export,
 * rollback) only once its row is recorded after this: a clone of it waits
 * on ds_ops_lock meanwhile, and a crash leaves only a temporary file that
 * the next start removes (no row). The volume is opened through the
 * shared cache if no front-end has yet, so one that opens it during the
 * copy gets this same volume. 0 or the call's error.
 */
static int snap_create_copy(struct snap_create *c)
{
    struct volume *v;
    int rc = datasets_volume_open(c->dataset, &v);

    if (rc < 0)
        return ds_api_errno(c->call, rc, "cannot open before snapshotting", c->dataset);
    snprintf(c->full, sizeof(c->full), "%s@%s", c->dataset, c->snap);
    c->work = (struct copy_work){.kind = COPY_SNAPSHOT,
                                 .what = "snapshot",
                                 .name = c->full,
                                 .pool = &c->pool,
                                 .dataset = c->dataset,
                                 .snap = c->snap,
                                 .vol = v};
    rc = copy_run(c->call, c->params, &c->work);
    volume_unref(v);
    return rc < 0 ? -1 : 0;
}

/* DB locked: the one transaction recording the snapshot; if it fails the
 * snapshot's data goes. 0 or the call's error (set under the locks: the
 * backend's reason, ds_backend_why, is theirs). */
static int snap_create_record(struct snap_create *c)
{
    struct ds_snap s = {.dataset_id = c->row.id, .volsize = c->row.volsize};
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    snprintf(s.name, sizeof(s.name), "%s", c->snap);
    if (rc == 0) {
        rc = ds_snapshot_insert(&s);
        if (rc == 0)
            rc = ds_snap_props_store(s.id, &c->props);
        cfg_tx_changed(&tx, CFG_SNAPSHOT, s.id, CFG_CREATED);
        if (rc == 0)
            rc = cfg_tx_commit(&tx);
        else
            cfg_tx_abort(&tx);
    }
    if (rc < 0) {
        ds_backend_of(&c->pool)->snapshot_remove(&c->pool, c->dataset, c->snap);
        return ds_api_errno(c->call, rc, "cannot record snapshot of", c->dataset);
    }
    return 0;
}

static void snap_create_log(const struct snap_create *c)
{
    const struct store_snapshot_stats *s = &c->work.snap_stats;
    double held_ms = (double)s->held_ns / 1e6;

    if (ds_pool_is_rbd(&c->pool))
        /* librbd holds the image's writes for part of this time */
        log_info("datasets: snapshot %s@%s created (RBD snapshot in %.1f ms; peer %s)", c->dataset,
                 c->snap, held_ms, api_call_peer(c->call));
    else if (s->reflinked)
        log_info("datasets: snapshot %s@%s created (reflink; writes held %.1f ms; peer %s)",
                 c->dataset, c->snap, held_ms, api_call_peer(c->call));
    else
        log_info("datasets: snapshot %s@%s created (copy-before-write: %llu chunks copied by "
                 "writes, %llu by the copier; writes held %.1f ms; %llu writes waited for the "
                 "copier's queue, longest %.1f ms; peer %s)",
                 c->dataset, c->snap, (unsigned long long)s->chunks_by_writes,
                 (unsigned long long)s->chunks_by_copier, held_ms,
                 (unsigned long long)s->queue_waits, (double)s->queue_wait_max_ns / 1e6,
                 api_call_peer(c->call));
}

/* decoded and checked: (locked) check -> the copy with only ds_ops_lock
 * held -> one transaction -> the new row. */
static int snap_create_run(struct snap_create *c, json_t **result)
{
    struct api_call *call = c->call;
    int rc;

    ds_ops_lock();
    db_lock();
    rc = snap_create_check(c);
    db_unlock();
    if (rc == 0)
        rc = snap_create_copy(c);
    if (rc == 0) {
        db_lock();
        rc = snap_create_record(c);
        if (rc == 0)
            *result = ds_snapshot_row(c->dataset, c->snap, pool_shape_of(call));
        db_unlock();
    }
    ds_ops_unlock();
    if (rc < 0)
        return rc;
    snap_create_log(c);
    return *result ? 0 : api_error(call, EIO, "snapshot %s@%s vanished", c->dataset, c->snap);
}

/* zfs.snapshot.create: decode -> (locked) check -> the copy with only
 * ds_ops_lock held -> one transaction -> the new row. The call returns
 * once the snapshot file is complete and durable. */
static int m_snapshot_create(struct api_call *call, json_t *params, json_t **result)
{
    struct snap_create c = {.call = call, .params = params};
    json_t *data = api_param(params, 0); /* checked against snap_create_fields */
    int rc = api_fields_decode(snap_create_fields, ARRAY_SIZE(snap_create_fields), data, &c);

    if (rc < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    if (rc == 0)
        rc = snap_create_refuse(&c);
    if (rc == 0)
        snap_create_names(&c);
    if (rc == 0 && (ds_snap_props_decode(call, json_object_get(data, "properties"), &c.props) < 0 ||
                    api_has_verrs(call)))
        rc = api_has_verrs(call) ? api_invalid(call) : -1;
    if (rc == 0)
        rc = snap_create_run(&c, result);
    api_fields_clear(snap_create_fields, ARRAY_SIZE(snap_create_fields), &c);
    ds_user_props_free(&c.props);
    return rc;
}

static int m_snapshot_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows;
    int rc;

    /* The filters are checked before the rows are built from them. */
    if (api_query_validate(call, params) < 0)
        return -1;
    db_lock();
    rows = snapshot_rows_hinted(params, pool_shape_of(call));
    db_unlock();
    if (!rows)
        return api_error(call, EIO, "cannot read snapshots");
    /* user properties are in every row's properties (as "zfs get all"
     * lists them); the user_properties object only when asked for */
    if (!ds_bool_or(api_query_extra(params), "user_properties", false)) {
        size_t i;
        json_t *row;

        json_array_foreach(rows, i, row) json_object_del(row, "user_properties");
    }
    rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

/* params[0] as "pool/vol@snap" → existing snapshot, its pool and its
 * full name ("pool/vol@snap"). API error on failure. */
int ds_snapshot_id_param(struct api_call *call, json_t *params, struct ds_snap *snap,
                         struct ds_pool *pool, char full[static DS_NAME_BUF * 2])
{
    const char *method = api_call_method(call);
    json_t *jid = api_param(params, 0);
    char field[64], dataset[DS_NAME_BUF], poolname[DS_NAME_BUF], why[256];
    const char *sn;
    int rc;

    snprintf(field, sizeof(field), "%s.id", method);
    if (!json_is_string(jid)) {
        api_verr(call, field, EINVAL, jid ? "Input should be a valid string" : "Field required");
        return api_invalid(call);
    }
    if (strlen(json_string_value(jid)) != json_string_length(jid) ||
        split_snapshot(json_string_value(jid), dataset, sizeof(dataset), &sn, why, sizeof(why)) <
            0) {
        api_verr(call, field, EINVAL, "%s", why);
        return api_invalid(call);
    }
    rc = ds_snapshot_get(dataset, sn, snap);
    if (rc == -ENOENT)
        return api_error(call, ENOENT, "snapshot %s does not exist", json_string_value(jid));
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot read snapshot", json_string_value(jid));
    ds_pool_of(dataset, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, pool);
    if (rc < 0)
        return ds_api_errno(call, rc, "cannot locate snapshot", json_string_value(jid));
    snprintf(full, DS_NAME_BUF * 2, "%s@%s", snap->dataset, snap->name);
    return 0;
}

/* DB locked: the snapshot has no dependent clone and no user. With
 * defer, one with clones is marked for deferred destroy instead (*marked:
 * ZFS's "zfs destroy -d"; it goes with its last clone). 0 or the call's
 * error; the text of the clone case is ZFS's, which clients match. */
static int snap_delete_check(struct api_call *call, const struct ds_snap *snap, const char *full,
                             bool defer, bool *marked)
{
    char why[512], clone[DS_NAME_BUF];
    int rc = ds_snapshot_first_clone(snap->id, clone, sizeof(clone));

    *marked = false;
    if (rc == 0 && defer) { /* also when held: it goes once released */
        rc = ds_snapshot_defer_destroy(call, snap, full);
        *marked = rc == 0;
        return rc;
    }
    if (rc == 0)
        return api_error(call, EBUSY,
                         "cannot destroy '%s': snapshot has dependent clones (%s); delete the "
                         "clones first, or delete with defer to destroy the snapshot with its "
                         "last clone",
                         full, clone);
    if (rc != -ENOENT)
        return ds_api_errno(call, rc, "cannot delete snapshot", full);
    if (defer && ds_snapshot_prop_get(snap->id, DS_SNAP_HOLD, why, sizeof(why)) == 0) {
        rc = ds_snapshot_defer_destroy(call, snap, full);
        *marked = rc == 0;
        return rc;
    }
    rc = ds_snapshot_held(call, snap, full);
    if (rc < 0)
        return rc;
    why[0] = '\0';
    if (ds_in_use(full, why, sizeof(why)))
        return api_error(call, EBUSY, "snapshot %s is in use: %s", full, why[0] ? why : "busy");
    return 0;
}

/* DB locked: the one transaction removing the row. 0 or the call's
 * error. */
static int snap_delete_row(struct api_call *call, const struct ds_snap *snap, const char *full)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc == 0) {
        rc = ds_snapshot_delete(snap->id);
        cfg_tx_changed(&tx, CFG_SNAPSHOT, snap->id, CFG_DELETED);
        if (rc == 0)
            rc = cfg_tx_commit(&tx);
        else
            cfg_tx_abort(&tx);
    }
    return rc < 0 ? ds_api_errno(call, rc, "cannot delete snapshot", full) : 0;
}

/* zfs.snapshot.delete's options (false when absent). */
struct snap_delete_opts {
    bool defer, recursive;
};

static const struct api_field snap_delete_fields[] = {
    {.name = "defer", .type = API_T_BOOL, API_AT(struct snap_delete_opts, defer, api_codec_bool)},
    {.name = "recursive",
     .type = API_T_BOOL,
     API_AT(struct snap_delete_opts, recursive, api_codec_bool)},
};

/* zfs.snapshot.delete: (locked) check -> one transaction -> the storage
 * (without the database lock) -> publish. */
static int m_snapshot_delete(struct api_call *call, json_t *params, json_t **result)
{
    json_t *opts = api_param(params, 1); /* delete_args, checked against snap_delete_fields */
    struct snap_delete_opts o = {0};
    bool defer, marked = false;
    struct ds_snap snap;
    struct ds_pool pool;
    char full[DS_NAME_BUF * 2];
    int rc;

    if (opts)
        api_fields_decode(snap_delete_fields, ARRAY_SIZE(snap_delete_fields), opts, &o);
    defer = o.defer;
    ds_ops_lock();
    db_lock();
    rc = ds_snapshot_id_param(call, params, &snap, &pool, full);
    if (rc == 0)
        rc = snap_delete_check(call, &snap, full, defer, &marked);
    if (rc == 0 && !marked)
        rc = snap_delete_row(call, &snap, full);
    db_unlock();
    if (rc == 0 && marked) {
        ds_ops_unlock();
        log_info("datasets: snapshot %s marked for deferred destroy: clones depend on it (peer "
                 "%s)",
                 full, api_call_peer(call));
        *result = json_true();
        return 0;
    }
    if (rc == 0) {
        int urc;

        ds_cache_drop(full, false);
        urc = ds_backend_of(&pool)->snapshot_remove(&pool, snap.dataset, snap.name);
        if (urc < 0 && urc != -ENOENT)
            log_error("datasets: remove snapshot %s: %s", full, strerror(-urc));
    }
    ds_ops_unlock();
    if (rc < 0)
        return rc;
    log_info("datasets: snapshot %s deleted (peer %s)", full, api_call_peer(call));
    ds_notify(DATASETS_DELETED, full, NULL);
    *result = json_true();
    return 0;
}

/* zfs.snapshot.clone's dataset_properties, decoded. */
struct clone_props {
    int sync;     /* index in sync_values (enum volume_sync's), -1: the source's */
    int readonly; /* index in onoff_values: 0 is "ON" */
    char comments[DS_COMMENTS_MAX + 1]; /* as given ("INHERIT" too) */
};

/* One zfs.snapshot.clone's state, shared by its steps. */
struct snap_clone {
    struct api_call *call;
    json_t *params; /* for the copy's job (copy_run) only */
    /* The request, decoded once by clone_fields (snap_clone_decode). */
    char snapname[DS_NAME_BUF]; /* "pool/vol@snap" */
    char dst[DS_NAME_BUF];      /* the new dataset */
    struct clone_props props;
    /* The state. */
    const char *sn;            /* the "snap" of snapname */
    char dataset[DS_NAME_BUF]; /* "pool/vol" */
    struct ds_snap snap;
    struct ds_row src;
    struct ds_pool pool, dst_pool;
    bool reflinked;
};

static const struct api_field clone_props_fields[] = {
    {.name = "sync",
     .type = API_T_ENUM,
     .choices = sync_values,
     API_AT(struct clone_props, sync, api_codec_enum)},
    {.name = "readonly",
     .type = API_T_ENUM,
     .choices = onoff_values,
     .def = "\"OFF\"",
     API_AT(struct clone_props, readonly, api_codec_enum)},
    {.name = "comments",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = DS_COMMENTS_MAX,
     API_AT(struct clone_props, comments, api_codec_chars)},
};

static const struct api_field clone_fields[] = {
    {.name = "snapshot",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     API_AT(struct snap_clone, snapname, api_codec_chars)},
    {.name = "dataset_dst",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     API_AT(struct snap_clone, dst, api_codec_chars)},
    {.name = "dataset_properties",
     .type = API_T_OBJECT,
     .fields = clone_props_fields,
     .nfields = ARRAY_SIZE(clone_props_fields),
     API_AT(struct snap_clone, props, api_codec_object)},
};

/* DB locked: the snapshot exists on a file-backed volume, the new name
 * is free, and both pools are of one kind (a clone stays in the same kind
 * of pool). Field errors are reported together. 0 or the call's error. */
static int snap_clone_check(struct snap_clone *c)
{
    struct api_call *call = c->call;
    int rc = ds_snapshot_get(c->dataset, c->sn, &c->snap), nrc;

    if (rc == -ENOENT)
        api_verr(call, FIELD(call, "snapshot"), ENOENT, "snapshot %s does not exist", c->snapname);
    else if (rc < 0)
        return ds_api_errno(call, rc, "cannot clone to", c->dst);
    if (rc == 0 &&
        (rc = volume_lookup(call, FIELD(call, "snapshot"), c->dataset, &c->src, &c->pool)) < 0)
        return rc;
    nrc = ds_check_new_name(call, FIELD(call, "dataset_dst"), c->dst, strlen(c->dst), &c->dst_pool);
    if (nrc < 0 && !api_has_verrs(call))
        return ds_api_errno(call, nrc, "cannot clone to", c->dst);
    if (api_has_verrs(call))
        return api_invalid(call);
    if (ds_pool_is_rbd(&c->pool) != ds_pool_is_rbd(&c->dst_pool))
        return api_error(call, EXDEV,
                         "cannot clone %s into %s: a clone stays in the same kind of pool (%s "
                         "pool %s, %s pool %s)",
                         c->snapname, c->dst, ds_backend_of(&c->pool)->name, c->pool.name,
                         ds_backend_of(&c->dst_pool)->name, c->dst_pool.name);
    return 0;
}

/* DB locked (released during the copy, a job): the clone's data, by the
 * backend (reflink, sparse copy or an RBD clone). 0 or the call's error. */
static int snap_clone_copy(struct snap_clone *c)
{
    struct copy_work work = {.kind = COPY_CLONE,
                             .what = "clone",
                             .name = c->dst,
                             .pool = &c->pool,
                             .dataset = c->dataset,
                             .snap = c->sn,
                             .dst_pool = &c->dst_pool,
                             .dst_name = c->dst};
    int rc;

    db_unlock();
    rc = copy_run(c->call, c->params, &work);
    db_lock();
    c->reflinked = work.reflinked;
    return rc;
}

/* The clone's row: a sparse volume of the snapshot's size with the
 * source's block size and sync, and the dataset_properties given. */
static void snap_clone_row(const struct snap_clone *c, struct ds_row *row)
{
    memset(row, 0, sizeof(*row));
    snprintf(row->name, sizeof(row->name), "%s", c->dst);
    row->pool_id = c->dst_pool.id;
    row->type = DS_VOLUME;
    row->volsize = c->snap.volsize;
    row->volblocksize = c->src.volblocksize;
    row->sparse = true;
    row->sync = c->props.sync >= 0 ? (enum volume_sync)c->props.sync : c->src.sync;
    row->origin_id = c->snap.id;
    row->readonly = c->props.readonly == 0; /* "ON" */
    snprintf(row->comments, sizeof(row->comments), "%s", c->props.comments);
}

/* DB locked: the one transaction recording the clone (and any missing
 * ancestors); if it fails the clone's data goes. 0 or the call's error. */
static int snap_clone_record(struct snap_clone *c)
{
    struct cfg_tx tx;
    struct ds_row row;
    int rc;

    snap_clone_row(c, &row);
    rc = cfg_tx_begin(&tx);
    if (rc == 0) {
        rc = ds_create_ancestors(&c->dst_pool, c->dst);
        if (rc == 0)
            rc = ds_dataset_insert(&row);
        if (rc == 0)
            cfg_tx_changed(&tx, CFG_DATASET, row.id, CFG_CREATED);
        if (rc == 0)
            rc = cfg_tx_commit(&tx);
        else
            cfg_tx_abort(&tx);
    }
    if (rc < 0) {
        ds_backend_of(&c->dst_pool)->dataset_remove(&c->dst_pool, c->dst, true);
        return ds_api_errno(c->call, rc, "cannot clone to", c->dst);
    }
    return 0;
}

/* The request (checked against clone_fields by the dispatcher) into c:
 * the table's defaults (no sync: the source's), then the keys given. */
static void snap_clone_decode(json_t *data, struct snap_clone *c)
{
    c->props.sync = -1;
    /* neither can fail: no field owns memory, every def is valid */
    api_fields_defaults(clone_fields, ARRAY_SIZE(clone_fields), c);
    api_fields_decode(clone_fields, ARRAY_SIZE(clone_fields), data, c);
}

/* zfs.snapshot.clone: decode once -> (locked) check -> the copy -> one
 * transaction; one exit drops the locks. */
static int m_snapshot_clone(struct api_call *call, json_t *params, json_t **result)
{
    struct snap_clone c = {.call = call, .params = params};
    char why[256];
    int rc;

    snap_clone_decode(api_param(params, 0), &c);
    if (split_snapshot(c.snapname, c.dataset, sizeof(c.dataset), &c.sn, why, sizeof(why)) < 0) {
        api_verr(call, FIELD(call, "snapshot"), EINVAL, "%s", why);
        return api_invalid(call);
    }
    ds_ops_lock();
    db_lock();
    rc = snap_clone_check(&c);
    if (rc == 0)
        rc = snap_clone_copy(&c);
    if (rc == 0)
        rc = snap_clone_record(&c);
    db_unlock();
    ds_ops_unlock();
    if (rc < 0)
        return rc;
    log_info("datasets: cloned %s to %s (%s; peer %s)", c.snapname, c.dst,
             ds_pool_is_rbd(&c.pool) ? "RBD clone v2"
             : c.reflinked           ? "reflink"
                                     : "sparse copy",
             api_call_peer(call));
    *result = json_true();
    return 0;
}

/* The rollback mark of dataset_id (snapshot_store.h): set to snap_id, or
 * (done) cleared with the volume's new size, in its own transaction or
 * the caller's. 0 or -errno. */
static int set_rollback_pending(int64_t dataset_id, int64_t snap_id, uint64_t volsize, bool done)
{
    struct cfg_tx tx;
    int rc;

    rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    rc = done ? ds_snapshot_rollback_done(dataset_id, volsize)
              : ds_snapshot_rollback_mark(dataset_id, snap_id);
    cfg_tx_changed(&tx, CFG_DATASET, dataset_id, CFG_UPDATED);
    if (rc == 0)
        rc = cfg_tx_commit(&tx);
    else
        cfg_tx_abort(&tx);
    return rc;
}

/* The newer snapshots a recursive rollback destroys, collected. */
struct newer_list {
    struct api_call *call;
    const struct ds_snap *snap; /* the rollback's target */
    struct ds_snap *v;
    size_t n, cap;
};

/* ds_snapshot_each_newer's callback: refuse (1, the call's error set) a
 * snapshot with a clone or a user, else keep it. */
static int newer_add(const struct ds_snap *s, const char *clone, void *arg)
{
    struct newer_list *l = arg;
    char full[DS_NAME_BUF * 2], why[256] = "";

    snprintf(full, sizeof(full), "%s@%s", l->snap->dataset, s->name);
    if (clone) {
        api_error(l->call, EBUSY,
                  "the newer snapshot %s has dependent clones (%s); delete the clones first", full,
                  clone);
        return 1;
    }
    if (ds_in_use(full, why, sizeof(why))) {
        api_error(l->call, EBUSY, "the newer snapshot %s is in use: %s", full, why);
        return 1;
    }
    if (l->n == l->cap) {
        struct ds_snap *grown = realloc(l->v, (l->cap ? l->cap * 2 : 4) * sizeof(*grown));
        if (!grown) {
            api_error(l->call, ENOMEM, "out of memory");
            return 1;
        }
        l->v = grown;
        l->cap = l->cap ? l->cap * 2 : 4;
    }
    l->v[l->n++] = *s;
    return 0;
}

/* The snapshots of snap's dataset taken after it, for a recursive
 * rollback; refused (API error set, -1) if one has a clone or is in use.
 * Locked by caller. *out is malloc'd (caller frees). */
static int newer_snapshots(struct api_call *call, const struct ds_snap *snap, struct ds_snap **out,
                           size_t *n)
{
    struct newer_list l = {.call = call, .snap = snap};
    int rc = ds_snapshot_each_newer(snap->dataset_id, snap->id, newer_add, &l);

    if (rc < 0)
        rc = ds_api_errno(call, rc, "cannot list the snapshots of", snap->dataset);
    else if (rc > 0)
        rc = -1;
    if (rc < 0) {
        free(l.v);
        l.v = NULL;
        l.n = 0;
    }
    *out = l.v;
    *n = l.n;
    return rc;
}

/* One zfs.snapshot.rollback's state, shared by its steps. */
struct rollback {
    struct api_call *call;
    json_t *params;
    bool force, recursive; /* the options (rollback_fields) */
    struct ds_snap snap;
    struct ds_pool pool;
    struct ds_row row; /* the volume rolled back */
    char full[DS_NAME_BUF * 2], why[512];
    unsigned nclients;
    struct ds_snap *newer; /* recursive: the newer snapshots that go */
    size_t nnewer;
    struct volume *v; /* the open volume (own ref), or NULL */
    bool reflinked;
};

static const struct api_field rollback_fields[] = {
    {.name = "force", .type = API_T_BOOL, API_AT(struct rollback, force, api_codec_bool)},
    /* ZFS -r: destroy the snapshots newer than the target. blockd can roll
     * back to any snapshot without it; with it, the newer ones go. */
    {.name = "recursive", .type = API_T_BOOL, API_AT(struct rollback, recursive, api_codec_bool)},
};

/* DB locked: may the volume be rolled back now? Being exported does not
 * block a rollback (the export then serves the rolled-back data, as a
 * zvol would); clients connected to the volume's shares do, unless
 * forced. Shares of its snapshots never matter: their files are not
 * touched. On success rollback_pending is recorded, so that a crash
 * during the copy is finished by the next start. 0 or the call's error. */
static int rollback_check(struct rollback *r)
{
    int rc = ds_snapshot_id_param(r->call, r->params, &r->snap, &r->pool, r->full);

    if (rc < 0)
        return rc;
    rc = ds_dataset_get_id(r->snap.dataset_id, &r->row);
    if (rc < 0)
        return ds_api_errno(r->call, rc, "cannot roll back to", r->full);
    r->nclients = ds_clients(r->row.name, r->why, sizeof(r->why));
    if (r->nclients && !r->force)
        return api_error(r->call, EBUSY, "dataset %s is in use: %s (use force to roll back anyway)",
                         r->row.name, r->why[0] ? r->why : "clients connected");
    if (r->recursive) {
        rc = newer_snapshots(r->call, &r->snap, &r->newer, &r->nnewer);
        if (rc < 0)
            return rc;
    }
    rc = set_rollback_pending(r->row.id, r->snap.id, 0, false);
    if (rc < 0)
        return ds_api_errno(r->call, rc, "cannot roll back to", r->full);
    return 0;
}

/* ds_ops locked, DB not: the volume's data becomes the snapshot's.
 * Front-ends first drop the clients that must not see the switch (NBD
 * disconnects the volume's exports' clients, forced or none). On failure
 * rollback_pending stays set: the next start retries it. 0 or -1 (the
 * call's error is set). */
static int rollback_copy(struct rollback *r)
{
    struct copy_work work;

    r->v = ds_cache_peek(r->row.name);
    if (r->nclients)
        log_warn("datasets: rolling back %s with %u client(s) connected (force): %s", r->row.name,
                 r->nclients, r->why);
    ds_notify(DATASETS_ROLLING_BACK, r->row.name, r->v);
    work = (struct copy_work){.kind = COPY_ROLLBACK,
                              .what = "rollback",
                              .name = r->row.name,
                              .pool = &r->pool,
                              .dataset = r->row.name,
                              .snap = r->snap.name,
                              .vol = r->v};
    if (copy_run(r->call, r->params, &work) < 0)
        return -1;
    r->reflinked = work.reflinked;
    return 0;
}

/* ds_ops locked: the one transaction ending the rollback (the newer
 * snapshots' rows go, the size is the snapshot's, rollback_pending is
 * cleared), then the newer snapshots' storage. 0 or the call's error. */
static int rollback_record(struct rollback *r)
{
    struct cfg_tx tx;
    int rc;

    db_lock();
    rc = cfg_tx_begin(&tx);
    if (rc == 0) {
        for (size_t i = 0; rc == 0 && i < r->nnewer; i++) {
            rc = ds_snapshot_delete(r->newer[i].id);
            cfg_tx_changed(&tx, CFG_SNAPSHOT, r->newer[i].id, CFG_DELETED);
        }
        if (rc == 0)
            rc = set_rollback_pending(r->row.id, r->snap.id, r->snap.volsize, true);
        if (rc == 0)
            rc = cfg_tx_commit(&tx);
        else
            cfg_tx_abort(&tx);
    }
    db_unlock();
    if (rc < 0)
        return ds_api_errno(r->call, rc, "cannot record the rollback of", r->full);
    for (size_t i = 0; i < r->nnewer; i++) {
        char n[DS_NAME_BUF * 2];

        snprintf(n, sizeof(n), "%s@%s", r->row.name, r->newer[i].name);
        ds_cache_drop(n, false);
        int urc = ds_backend_of(&r->pool)->snapshot_remove(&r->pool, r->row.name, r->newer[i].name);

        if (urc < 0 && urc != -ENOENT)
            log_error("datasets: remove snapshot %s: %s", n, strerror(-urc));
        log_info("datasets: snapshot %s destroyed by the recursive rollback", n);
    }
    return 0;
}

/* Unlocked, after the commit: EV_DATASET subscribers learn of the destroyed
 * snapshots, the rollback and a size change. */
static void rollback_publish(struct rollback *r)
{
    for (size_t i = 0; i < r->nnewer; i++) {
        char n[DS_NAME_BUF * 2];

        snprintf(n, sizeof(n), "%s@%s", r->row.name, r->newer[i].name);
        ds_notify(DATASETS_DELETED, n, NULL);
    }
    log_info("datasets: %s rolled back to %s (%s; peer %s)", r->row.name, r->full,
             ds_pool_is_rbd(&r->pool) ? "RBD rollback"
             : r->reflinked           ? "reflink"
                                      : "sparse copy",
             api_call_peer(r->call));
    ds_notify(DATASETS_ROLLED_BACK, r->row.name, r->v);
    if (r->row.volsize != r->snap.volsize) /* the row as read before */
        ds_notify(DATASETS_RESIZED, r->row.name, r->v);
}

/* zfs.snapshot.rollback: (locked) check and mark pending -> the copy ->
 * one transaction -> publish; one exit releases the volume and the list. */
static int m_snapshot_rollback(struct api_call *call, json_t *params, json_t **result)
{
    struct rollback r = {.call = call, .params = params};
    json_t *opts = api_param(params, 1); /* rollback_args, checked against rollback_fields */
    int rc;

    if (opts)
        api_fields_decode(rollback_fields, ARRAY_SIZE(rollback_fields), opts, &r);
    ds_ops_lock();
    db_lock();
    rc = rollback_check(&r);
    db_unlock();
    if (rc == 0)
        rc = rollback_copy(&r);
    if (rc == 0)
        rc = rollback_record(&r);
    ds_ops_unlock();
    if (rc == 0)
        rollback_publish(&r);
    free(r.newer);
    if (r.v)
        volume_unref(r.v);
    if (rc == 0)
        *result = json_null();
    return rc;
}

/* Start-up: remove the temporary files of copies a crash interrupted
 * (store_clone_file writes ".<name>.tmp.XXXXXX" next to the target) unless
 * a dataset or snapshot really has that name. nftw has no user argument:
 * sweep_pool is only used under ds_ops_lock(). */
static const struct ds_pool *sweep_pool;

static bool is_copy_temp(const char *base)
{
    const char *t = strstr(base, ".tmp.");

    if (base[0] != '.' || !t || t == base)
        return false;
    t += 5;
    if (strlen(t) != 6)
        return false;
    for (; *t; t++)
        if (!((*t >= 'A' && *t <= 'Z') || (*t >= 'a' && *t <= 'z') || (*t >= '0' && *t <= '9')))
            return false;
    return true;
}

static int sweep_one(const char *fpath, const struct stat *sb, int type, struct FTW *ftw)
{
    const char *rel = fpath + strlen(sweep_pool->path);
    char name[DS_NAME_BUF * 2], *at;
    struct ds_row row;
    struct ds_snap snap;

    if (type != FTW_F || !is_copy_temp(fpath + ftw->base) || *rel != '/')
        return 0;
    if (snprintf(name, sizeof(name), "%s%s", sweep_pool->name, rel) >= (int)sizeof(name))
        return 0;
    at = strchr(name, '@');
    if (at) {
        *at = '\0';
        if (ds_snapshot_get(name, at + 1, &snap) == 0)
            return 0;
    } else if (ds_dataset_get(name, &row) == 0) {
        return 0;
    }
    if (poolfs_unlink(fpath) == 0)
        log_warn("datasets: removed %s, left by an interrupted copy (%lld MiB)", fpath,
                 (long long)(sb->st_blocks * 512 >> 20));
    return 0;
}

static void sweep_copy_temps(void)
{
    struct ds_pool *pools;
    size_t n;

    if (ds_pool_list(false, &pools, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (ds_pool_is_rbd(&pools[i]))
            continue;
        sweep_pool = &pools[i];
        nftw(pools[i].path, sweep_one, 16, FTW_PHYS | FTW_MOUNT);
    }
    free(pools);
    sweep_pool = NULL;
}

void ds_rollback_recover(void)
{
    int64_t dataset_ids[64], snap_ids[64];
    size_t n = 0;

    ds_ops_lock();
    db_lock();
    int lrc = ds_snapshot_rollbacks_pending(dataset_ids, snap_ids, ARRAY_SIZE(dataset_ids), &n);
    if (lrc < 0) /* the ones read so far are still finished */
        log_error("datasets: reading the interrupted rollbacks: %s", strerror(-lrc));
    for (size_t i = 0; i < n; i++) {
        struct ds_row row;
        struct ds_snap snap;
        struct ds_pool pool;
        char poolname[DS_NAME_BUF], snap_path[PATH_MAX], vol_path[PATH_MAX];
        int rc;

        if (ds_dataset_get_id(dataset_ids[i], &row) < 0 ||
            ds_snapshot_get_id(snap_ids[i], &snap) < 0)
            continue;
        ds_pool_of(row.name, poolname, sizeof(poolname));
        if (ds_pool_get(poolname, &pool) < 0)
            continue;
        if (ds_pool_is_rbd(&pool)) {
            /* Start-up does not wait for a cluster: an RBD rollback is
             * one librbd call, redone by asking for the rollback again. */
            log_warn("datasets: the rollback of %s to @%s was interrupted; roll back again",
                     row.name, snap.name);
            continue;
        }
        if (ds_path(&pool, row.name, NULL, vol_path, sizeof(vol_path)) < 0 ||
            ds_path(&pool, row.name, snap.name, snap_path, sizeof(snap_path)) < 0)
            continue;
        log_warn("datasets: finishing the interrupted rollback of %s to @%s", row.name, snap.name);
        rc = store_rollback_file(snap_path, vol_path, 0, NULL, NULL, NULL, NULL);
        if (rc == 0)
            rc = set_rollback_pending(row.id, snap.id, snap.volsize, true);
        if (rc < 0)
            log_error("datasets: rollback of %s to @%s still incomplete: %s", row.name, snap.name,
                      strerror(-rc));
    }
    sweep_copy_temps();
    db_unlock();
    ds_ops_unlock();
}

int ds_snapshot_take(struct api_call *call, const char *dataset, const char *name)
{
    json_t *params = json_pack("[{s:s, s:s}]", "dataset", dataset, "name", name);
    json_t *result = NULL;
    int rc;

    if (!params)
        return api_error(call, ENOMEM, "out of memory");
    rc = m_snapshot_create(call, params, &result);
    json_decref(result);
    json_decref(params);
    return rc;
}

int ds_snapshot_destroy(struct api_call *call, const char *full)
{
    json_t *params = json_pack("[s]", full);
    json_t *result = NULL;
    int rc;

    if (!params)
        return api_error(call, ENOMEM, "out of memory");
    rc = m_snapshot_delete(call, params, &result);
    json_decref(result);
    json_decref(params);
    return rc;
}

static int m_snapshot_get_instance(struct api_call *call, json_t *params, json_t **result)
{
    return api_get_instance(call, params, m_snapshot_query, NULL, result);
}

static const struct api_arg create_args[] = {API_ARG_OBJECT("data", snap_create_fields, 0)};
/* The id is resolved (ds_snapshot_id_param) after the options are
 * checked; the options' field names start with prefix. */
#define ID_OPTIONS_ARGS(fields_, prefix_)                                                          \
    {                                                                                              \
        {.name = "id", .type = API_T_ANY},                                                         \
        {                                                                                          \
            .name = "options", .type = API_T_OBJECT, .flags = API_ARG_OPTIONAL, .fields = fields_, \
            .nfields = ARRAY_SIZE(fields_), .prefix = prefix_                                      \
        }                                                                                          \
    }
static const struct api_arg delete_args[] =
    ID_OPTIONS_ARGS(snap_delete_fields, "zfs.snapshot.delete.options");
static const struct api_arg pool_delete_args[] =
    ID_OPTIONS_ARGS(snap_delete_fields, "pool.snapshot.delete.options");
static const struct api_arg clone_args[] = {API_ARG_OBJECT("data", clone_fields, 0)};
static const struct api_arg rollback_args[] =
    ID_OPTIONS_ARGS(rollback_fields, "zfs.snapshot.rollback.options");
static const struct api_arg pool_rollback_args[] =
    ID_OPTIONS_ARGS(rollback_fields, "pool.snapshot.rollback.options");
static const struct api_field hold_fields[] = {{.name = "recursive", .type = API_T_BOOL}};
static const struct api_arg hold_args[] =
    ID_OPTIONS_ARGS(hold_fields, "pool.snapshot.hold.options");
static const struct api_arg release_args[] =
    ID_OPTIONS_ARGS(hold_fields, "pool.snapshot.release.options");
static const struct api_arg update_args[] = {{.name = "id", .type = API_T_ANY},
                                             {.name = "data",
                                              .type = API_T_OBJECT,
                                              .fields = ds_snap_update_fields,
                                              .nfields = DS_SNAP_UPDATE_NFIELDS,
                                              .prefix = "pool.snapshot.update.data"}};

#define CREATE_HELP                                                                                \
    "Snapshot a volume ({dataset, name | naming_schema, properties: {\"ns:name\": value}} or "     \
    "{name: \"pool/vol@snap\"}; reflink, or copy-before-write: writes are never held for the "     \
    "copy)"
#define DELETE_HELP                                                                                \
    "Delete a snapshot (refused while clones depend on it; with defer it is marked and goes "      \
    "with its last clone)"
#define ROLLBACK_HELP                                                                              \
    "Replace a volume's contents with a snapshot's (in place; open volumes see it at once)"

/* The older names (TrueNAS before 24.10): rows with used/referenced as
 * property objects. */
const struct api_method ds_snapshot_methods[] = {
    {"zfs.snapshot.get_instance", NULL, "One snapshot by its name (pool/vol@snap)",
     m_snapshot_get_instance, API_READ, API_ARGS(ds_get_instance_args)},
    {"zfs.snapshot.create", NULL, CREATE_HELP, m_snapshot_create, API_SHARE, API_ARGS(create_args)},
    {"zfs.snapshot.query", NULL, "List snapshots", m_snapshot_query, API_READ,
     API_ARGS(ds_query_args)},
    {"zfs.snapshot.delete", NULL, DELETE_HELP, m_snapshot_delete, API_SHARE, API_ARGS(delete_args)},
    {"zfs.snapshot.clone", NULL, "Create a new volume from a snapshot", m_snapshot_clone, API_SHARE,
     API_ARGS(clone_args)},
    {"zfs.snapshot.rollback", NULL, ROLLBACK_HELP, m_snapshot_rollback, API_SHARE,
     API_ARGS(rollback_args)},
};
const size_t ds_snapshot_method_count = ARRAY_SIZE(ds_snapshot_methods);

/* TrueNAS 24.10+'s names, the same handlers: rows with used/referenced
 * as integers; update is theirs only (pool.snapshot.rename: dsrename.c). */
const struct api_method ds_pool_snapshot_methods[] = {
    {"pool.snapshot.get_instance", NULL, "One snapshot by its name (pool/vol@snap)",
     m_snapshot_get_instance, API_READ, API_ARGS(ds_get_instance_args)},
    {"pool.snapshot.create", NULL, CREATE_HELP, m_snapshot_create, API_SHARE,
     API_ARGS(create_args)},
    {"pool.snapshot.query", NULL,
     "List snapshots (extra.user_properties: also a user_properties object per row)",
     m_snapshot_query, API_READ, API_ARGS(ds_query_args)},
    {"pool.snapshot.update", NULL,
     "Set ({key, value}) or remove ({key, remove: true}, user_properties_remove) a snapshot's "
     "user properties",
     ds_snapshot_update_method, API_SHARE, API_ARGS(update_args)},
    {"pool.snapshot.delete", NULL, DELETE_HELP, m_snapshot_delete, API_SHARE,
     API_ARGS(pool_delete_args)},
    {"pool.snapshot.clone", NULL, "Create a new volume from a snapshot", m_snapshot_clone,
     API_SHARE, API_ARGS(clone_args)},
    {"pool.snapshot.rollback", NULL, ROLLBACK_HELP, m_snapshot_rollback, API_SHARE,
     API_ARGS(pool_rollback_args)},
    {"pool.snapshot.hold", NULL,
     "Place the hold \"truenas\" on a snapshot: it cannot be destroyed until released",
     ds_snapshot_hold_method, API_SHARE, API_ARGS(hold_args)},
    {"pool.snapshot.release", NULL,
     "Release the hold \"truenas\" (a snapshot marked for deferred destroy may then go)",
     ds_snapshot_release_method, API_SHARE, API_ARGS(release_args)},
};
const size_t ds_pool_snapshot_method_count = ARRAY_SIZE(ds_pool_snapshot_methods);
