/*
 * pool.snapshottask.* methods and the snapshot_tasks table (snaptask.h).
 * A task is a struct snaptask, described once by task_fields (validation,
 * decoding, the row, and the JSON text of its fields that the table's
 * config column stores); its last state is stored beside it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/fields.h"
#include "api/validate.h"
#include "control/dataset_store.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/snaptask.h"
#include "core/log.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static const char schema_sql[] = "CREATE TABLE IF NOT EXISTS snapshot_tasks ("
                                 " id INTEGER PRIMARY KEY,"
                                 " config TEXT NOT NULL,"
                                 " state TEXT NOT NULL DEFAULT '{\"state\": \"PENDING\"}');";

const char *const snaptask_units[] = {"HOUR", "DAY", "WEEK", "MONTH", "YEAR", NULL};

/* One description of a task (api/fields.h): it validates create and
 * update, decodes into struct snaptask, encodes the row and the stored
 * text; the defaults are TrueNAS's (PeriodicSnapshotTaskCreate,
 * CronModel). */
#define CRON(member, lo, hi, dflt)                                                                 \
    {                                                                                              \
        .name = #member, .type = API_T_STRING, .flags = API_RANGE, .min = (lo), .max = (hi),       \
        .def = (dflt), API_AT(struct snaptask_cron, member, api_codec_str)                         \
    }
static const struct api_field sched_fields[] = {
    CRON(minute, 1, 127, "\"00\""), CRON(hour, 1, 127, "\"*\""), CRON(dom, 1, 127, "\"*\""),
    CRON(month, 1, 127, "\"*\""),   CRON(dow, 1, 127, "\"*\""),  CRON(begin, 5, 5, "\"00:00\""),
    CRON(end, 5, 5, "\"23:59\""),
};
#undef CRON
#define AT(member, codec) API_AT(struct snaptask, member, codec)
static const struct api_field exclude_item = API_FIELD_STRING(NULL, 0, 1, NAME_DATASET_MAX);
_Static_assert(sizeof(((struct snaptask *)0)->lifetime_unit) == sizeof(int), "enum index");
static const struct api_field task_fields[] = {
    {.name = "dataset",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     AT(dataset, api_codec_str)},
    {.name = "recursive", .type = API_T_BOOL, .def = "false", AT(recursive, api_codec_bool)},
    {.name = "exclude",
     .type = API_T_ARRAY,
     .items = &exclude_item,
     .def = "[]",
     AT(exclude, api_codec_strv)},
    {.name = "lifetime_value",
     .type = API_T_INT,
     .flags = API_RANGE,
     .min = 1,
     .max = 1000000,
     .def = "2",
     AT(lifetime_value, api_codec_i64)},
    {.name = "lifetime_unit",
     .type = API_T_ENUM,
     .choices = snaptask_units,
     .def = "\"WEEK\"",
     AT(lifetime_unit, api_codec_enum)},
    {.name = "enabled", .type = API_T_BOOL, .def = "true", AT(enabled, api_codec_bool)},
    {.name = "naming_schema",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 1,
     .max = NAME_DATASET_MAX,
     .def = "\"auto-%Y-%m-%d_%H-%M\"",
     AT(naming_schema, api_codec_str)},
    {.name = "schedule",
     .type = API_T_OBJECT,
     .fields = sched_fields,
     .nfields = ARRAY_LEN(sched_fields),
     AT(schedule, api_codec_object)},
    {.name = "allow_empty", .type = API_T_BOOL, .def = "true", AT(allow_empty, api_codec_bool)},
    /* update only (refused on create): accepted, as blockd keeps no
     * removal dates; expiry follows the task's lifetime at each run */
    {.name = "fixate_removal_date", .type = API_T_BOOL},
};
#undef AT

void snaptask_clear(struct snaptask *t)
{
    api_fields_clear(task_fields, ARRAY_LEN(task_fields), t);
    memset(t, 0, sizeof(*t));
}

void snaptasks_free(struct snaptask *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        snaptask_clear(&v[i]);
    free(v);
}

static void verr(struct api_call *call, const char *pfx, const char *key, int err, const char *msg)
{
    char field[512];

    snprintf(field, sizeof(field), "%s.%s", pfx, key);
    api_verr(call, field, err, "%s", msg);
}

/* exclude: datasets under the task's dataset, with recursive only. */
static void check_exclude(struct api_call *call, const char *pfx, const struct snaptask *t)
{
    size_t n = strlen(t->dataset);

    if (t->exclude.n && !t->recursive)
        verr(call, pfx, "exclude", EINVAL,
             "Excluding datasets has no sense in non-recursive "
             "periodic snapshot tasks");
    for (size_t i = 0; i < t->exclude.n; i++) {
        const char *e = t->exclude.v[i];
        if (strncmp(e, t->dataset, n) != 0 || e[n] != '/')
            verr(call, pfx, "exclude", EINVAL, "Excluded datasets must belong to the dataset");
    }
}

/* The checks a field table cannot make, on the whole task. */
static void task_check(struct api_call *call, const char *pfx, const struct snaptask *t)
{
    struct snaptask_sched sched;
    struct ds_row row;
    const char *field = NULL;
    char why[256] = "", msg[320];
    int rc;

    db_lock();
    rc = ds_dataset_get(t->dataset, &row);
    db_unlock();
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "Dataset %s does not exist", t->dataset);
        verr(call, pfx, "dataset", ENOENT, msg);
    }
    if (snaptask_schema_check(t->naming_schema, why, sizeof(why)) < 0)
        verr(call, pfx, "naming_schema", EINVAL, why);
    if (snaptask_sched_parse(&t->schedule, &sched, &field, why, sizeof(why)) < 0) {
        snprintf(msg, sizeof(msg), "schedule.%s", field);
        verr(call, pfx, msg, EINVAL, why);
    }
    check_exclude(call, pfx, t);
    if (!t->allow_empty)
        verr(call, pfx, "allow_empty", ENOTSUP,
             "allow_empty false is not supported: blockd cannot tell whether a volume changed "
             "since its last snapshot, so every run takes one");
}

/* A stored task: the defaults, then its stored fields (a task stored by
 * an older version may lack newer ones). 0 or -errno. */
static int task_of(sqlite3_stmt *st, struct snaptask *t)
{
    json_t *cfg = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
    int rc = cfg ? api_fields_defaults(task_fields, ARRAY_LEN(task_fields), t) : -EIO;

    if (rc == 0)
        rc = api_fields_decode(task_fields, ARRAY_LEN(task_fields), cfg, t);
    t->id = sqlite3_column_int64(st, 0);
    json_decref(cfg);
    return rc;
}

int snaptask_load_all(struct snaptask **out, size_t *n)
{
    sqlite3_stmt *st = NULL;
    struct snaptask *v = NULL;
    size_t cap = 0;
    int rc;

    *out = NULL;
    *n = 0;
    db_lock();
    rc = db_stmt("SELECT id, config FROM snapshot_tasks ORDER BY id", &st);
    while (rc == 0 && db_stmt_next(st, &rc)) {
        if (*n == cap) {
            struct snaptask *nv = realloc(v, (cap = cap ? cap * 2 : 8) * sizeof(*v));
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        memset(&v[*n], 0, sizeof(v[*n]));
        rc = task_of(st, &v[*n]);
        (*n)++;
    }
    if (st)
        db_stmt_done(st);
    db_unlock();
    if (rc < 0) {
        snaptasks_free(v, *n);
        *n = 0;
        return rc;
    }
    *out = v;
    return 0;
}

/* The row pool.snapshottask.* answers with: the task's fields, its last
 * state (stored as {state, datetime, error}) and vmware_sync (always
 * false). A new reference or NULL. */
static json_t *task_row(const struct snaptask *t, const char *state_text)
{
    json_t *row = api_fields_row(t->id, task_fields, ARRAY_LEN(task_fields), t);
    json_t *state = json_loads(state_text ? state_text : "{\"state\": \"PENDING\"}", 0, NULL);

    if (!row || !state || json_object_set_new(row, "vmware_sync", json_false()) < 0 ||
        json_object_set_new(row, "state", state) < 0) {
        json_decref(row);
        return NULL;
    }
    return row;
}

/* Every task's row, by id: a new reference, or NULL (logged). */
static json_t *task_rows(void)
{
    json_t *rows = json_array();
    sqlite3_stmt *st = NULL;
    int rc;

    db_lock();
    rc = db_stmt("SELECT id, config, state FROM snapshot_tasks ORDER BY id", &st);
    while (rc == 0 && rows && db_stmt_next(st, &rc)) {
        struct snaptask t = {0};
        json_t *row =
            task_of(st, &t) == 0 ? task_row(&t, (const char *)sqlite3_column_text(st, 2)) : NULL;
        if (!row || json_array_append_new(rows, row) < 0)
            rc = -ENOMEM;
        snaptask_clear(&t);
    }
    if (st)
        db_stmt_done(st);
    db_unlock();
    if (rc < 0) {
        log_error("snapshottask: cannot read the tasks: %s", strerror(-rc));
        json_decref(rows);
        return NULL;
    }
    return rows;
}

void snaptask_state_set(int64_t id, const char *state, const char *error)
{
    json_t *j = json_pack("{s:s, s:{s:I}}", "state", state, "datetime", "$date",
                          (json_int_t)time(NULL) * 1000);
    char *text;
    int rc = -ENOMEM;

    if (j && error)
        json_object_set_new(j, "error", json_string(error));
    text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (text) {
        db_lock();
        rc = db_run("UPDATE snapshot_tasks SET state = ?1 WHERE id = ?2", "ti", text, id);
        db_unlock();
    }
    if (rc < 0)
        log_error("snapshottask: task %lld: cannot record state %s: %s", (long long)id, state,
                  strerror(-rc));
    free(text);
    json_decref(j);
}

/* Task id's row (a new reference), or NULL after an error on call. */
static json_t *task_get(struct api_call *call, int64_t id)
{
    json_t *rows = task_rows(), *row, *found = NULL;
    size_t i;

    if (!rows) {
        api_error(call, EIO, "cannot read the periodic snapshot tasks");
        return NULL;
    }
    json_array_foreach(rows, i, row)
    {
        if (json_integer_value(json_object_get(row, "id")) == id)
            found = json_incref(row);
    }
    json_decref(rows);
    if (!found)
        api_error(call, ENOENT, "Periodic snapshot task %lld does not exist", (long long)id);
    return found;
}

/* Task id as a struct (cleared by the caller). 0, or -1 after an error
 * on call (ENOENT, EIO). */
static int task_load(struct api_call *call, int64_t id, struct snaptask *out)
{
    struct snaptask *v;
    size_t n;
    int rc = snaptask_load_all(&v, &n);

    if (rc < 0)
        return api_error(call, -rc, "cannot read the periodic snapshot tasks: %s", strerror(-rc));
    rc = -ENOENT;
    for (size_t i = 0; i < n && rc < 0; i++)
        if (v[i].id == id) {
            *out = v[i];
            memset(&v[i], 0, sizeof(v[i]));
            rc = 0;
        }
    snaptasks_free(v, n);
    return rc == 0 ? 0
                   : api_error(call, ENOENT, "Periodic snapshot task %lld does not exist",
                               (long long)id);
}

static int m_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = task_rows();
    int rc;

    if (!rows)
        return api_error(call, EIO, "cannot read the periodic snapshot tasks");
    rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static int m_get_instance(struct api_call *call, json_t *params, json_t **result)
{
    return api_get_instance(call, params, m_query, "Periodic snapshot task", result);
}

/* Store t (id 0: a new one) as the table encodes it. 0 with *result the
 * row, or -1. */
static int task_store(struct api_call *call, struct snaptask *t, json_t **result)
{
    json_t *cfg = json_object();
    char *text = cfg && api_fields_encode(task_fields, ARRAY_LEN(task_fields), t, cfg) == 0
                     ? json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS)
                     : NULL;
    int rc;

    json_decref(cfg);
    if (!text)
        return api_error(call, ENOMEM, "out of memory");
    db_lock();
    if (t->id == 0) {
        rc = db_run("INSERT INTO snapshot_tasks (config) VALUES (?1)", "t", text);
        if (rc == 0)
            t->id = sqlite3_last_insert_rowid(db_handle());
    } else {
        rc = db_run("UPDATE snapshot_tasks SET config = ?1 WHERE id = ?2", "ti", text, t->id);
    }
    db_unlock();
    free(text);
    if (rc < 0)
        return api_error(call, -rc, "cannot store the periodic snapshot task: %s", strerror(-rc));
    *result = task_get(call, t->id);
    return *result ? 0 : -1;
}

/* Decode data over t (a fresh task's defaults, or the stored task), check
 * the whole, store it. 0 with *result, or -1. */
static int task_save(struct api_call *call, const char *pfx, json_t *data, struct snaptask *t,
                     json_t **result)
{
    if (api_fields_decode(task_fields, ARRAY_LEN(task_fields), data, t) < 0)
        return api_error(call, ENOMEM, "out of memory");
    task_check(call, pfx, t);
    if (api_has_verrs(call))
        return api_invalid(call);
    return task_store(call, t, result);
}

static int m_create(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0);
    struct snaptask t = {0};
    int rc;

    if (json_object_get(data, "fixate_removal_date")) {
        verr(call, "pool_snapshottask_create", "fixate_removal_date", EINVAL,
             "Extra inputs are not permitted");
        return api_invalid(call);
    }
    rc = api_fields_defaults(task_fields, ARRAY_LEN(task_fields), &t) < 0
             ? api_error(call, ENOMEM, "out of memory")
             : task_save(call, "pool_snapshottask_create", data, &t, result);
    if (rc == 0)
        log_info("snapshottask: task %lld created for %s (peer %s)", (long long)t.id, t.dataset,
                 api_call_peer(call));
    snaptask_clear(&t);
    return rc;
}

static int m_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id = json_integer_value(api_param(params, 0));
    struct snaptask t = {0};
    int rc = task_load(call, id, &t);

    if (rc == 0)
        rc = task_save(call, "pool_snapshottask_update", api_param(params, 1), &t, result);
    if (rc == 0)
        log_info("snapshottask: task %lld updated (peer %s)", (long long)id, api_call_peer(call));
    snaptask_clear(&t);
    return rc;
}

static int m_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id = json_integer_value(api_param(params, 0));
    struct snaptask t = {0};
    int rc = task_load(call, id, &t);

    snaptask_clear(&t);
    if (rc < 0)
        return -1;
    db_lock();
    rc = db_run("DELETE FROM snapshot_tasks WHERE id = ?1", "i", id);
    db_unlock();
    if (rc < 0)
        return api_error(call, -rc, "cannot delete the periodic snapshot task: %s", strerror(-rc));
    log_info("snapshottask: task %lld deleted (peer %s)", (long long)id, api_call_peer(call));
    *result = json_true();
    return 0;
}

static int m_run(struct api_call *call, json_t *params, json_t **result)
{
    struct snaptask t = {0};
    int rc = task_load(call, json_integer_value(api_param(params, 0)), &t);

    if (rc == 0)
        rc = snaptask_run_task(call, &t, NULL);
    snaptask_clear(&t);
    if (rc == 0)
        *result = json_null();
    return rc;
}

static const struct api_arg create_args[] = {{.name = "data",
                                              .type = API_T_OBJECT,
                                              .fields = task_fields,
                                              .nfields = ARRAY_LEN(task_fields),
                                              .prefix = "pool_snapshottask_create"}};
static const struct api_arg update_args[] = {{.name = "id", .type = API_T_INT},
                                             {.name = "data",
                                              .type = API_T_OBJECT,
                                              .flags = API_PARTIAL,
                                              .fields = task_fields,
                                              .nfields = ARRAY_LEN(task_fields),
                                              .prefix = "pool_snapshottask_update"}};
static const struct api_field delete_fields[] = {
    {.name = "fixate_removal_date", .type = API_T_BOOL}};
static const struct api_arg delete_args[] = {{.name = "id", .type = API_T_INT},
                                             {.name = "options",
                                              .type = API_T_OBJECT,
                                              .flags = API_ARG_OPTIONAL,
                                              .fields = delete_fields,
                                              .nfields = ARRAY_LEN(delete_fields),
                                              .prefix = "pool_snapshottask_delete.options"}};
static const struct api_arg id_args[] = {{.name = "id", .type = API_T_INT}};

static const struct api_method methods[] = {
    {"pool.snapshottask.create", NULL,
     "Create a periodic snapshot task ({dataset, recursive, exclude, lifetime_value, "
     "lifetime_unit, enabled, naming_schema, schedule, allow_empty})",
     m_create, API_SHARE, API_ARGS(create_args)},
    {"pool.snapshottask.query", NULL, "List periodic snapshot tasks", m_query, API_READ,
     API_ARGS(ds_query_args)},
    {"pool.snapshottask.get_instance", NULL, "One periodic snapshot task by id", m_get_instance,
     API_READ, API_ARGS(ds_get_instance_args)},
    {"pool.snapshottask.update", NULL, "Change a periodic snapshot task", m_update, API_SHARE,
     API_ARGS(update_args)},
    {"pool.snapshottask.delete", NULL,
     "Delete a periodic snapshot task (its snapshots stay and are no longer expired)", m_delete,
     API_SHARE, API_ARGS(delete_args)},
    {"pool.snapshottask.run", NULL,
     "Run a periodic snapshot task now: take its snapshots, then expire old ones", m_run, API_SHARE,
     API_ARGS(id_args)},
};

void snaptask_init(void)
{
    static bool registered;

    db_register_schema(schema_sql);
    if (registered)
        return;
    registered = true;
    api_register(methods, ARRAY_LEN(methods));
}
