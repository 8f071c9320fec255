/*
 * pool.snapshottask.* methods and the snapshot_tasks table (snaptask.h).
 * A task is stored as its validated configuration (JSON text) and its
 * last state; rows are built from both.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
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

static const char *const units[] = {"HOUR", "DAY", "WEEK", "MONTH", "YEAR", NULL};

static const struct api_field sched_fields[] = {
    API_FIELD_STRING("minute", 0, 1, 127), API_FIELD_STRING("hour", 0, 1, 127),
    API_FIELD_STRING("dom", 0, 1, 127),    API_FIELD_STRING("month", 0, 1, 127),
    API_FIELD_STRING("dow", 0, 1, 127),    API_FIELD_STRING("begin", 0, 5, 5),
    API_FIELD_STRING("end", 0, 5, 5),
};
static const struct api_field exclude_item = API_FIELD_STRING(NULL, 0, 1, NAME_DATASET_MAX);
static const struct api_field task_fields[] = {
    API_FIELD_STRING("dataset", API_REQUIRED, 1, NAME_DATASET_MAX),
    {.name = "recursive", .type = API_T_BOOL},
    {.name = "exclude", .type = API_T_ARRAY, .items = &exclude_item},
    {.name = "lifetime_value", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = 1000000},
    {.name = "lifetime_unit", .type = API_T_ENUM, .choices = units},
    {.name = "enabled", .type = API_T_BOOL},
    API_FIELD_STRING("naming_schema", 0, 1, NAME_DATASET_MAX),
    {.name = "schedule",
     .type = API_T_OBJECT,
     .fields = sched_fields,
     .nfields = ARRAY_LEN(sched_fields)},
    {.name = "allow_empty", .type = API_T_BOOL},
};
/* update: the same, and fixate_removal_date (accepted: blockd keeps no
 * removal dates, expiry follows the task's lifetime at each run) */
static const struct api_field update_fields[] = {
    API_FIELD_STRING("dataset", 0, 1, NAME_DATASET_MAX),
    {.name = "recursive", .type = API_T_BOOL},
    {.name = "exclude", .type = API_T_ARRAY, .items = &exclude_item},
    {.name = "lifetime_value", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = 1000000},
    {.name = "lifetime_unit", .type = API_T_ENUM, .choices = units},
    {.name = "enabled", .type = API_T_BOOL},
    API_FIELD_STRING("naming_schema", 0, 1, NAME_DATASET_MAX),
    {.name = "schedule",
     .type = API_T_OBJECT,
     .fields = sched_fields,
     .nfields = ARRAY_LEN(sched_fields)},
    {.name = "allow_empty", .type = API_T_BOOL},
    {.name = "fixate_removal_date", .type = API_T_BOOL},
};

/* TrueNAS's defaults (PeriodicSnapshotTaskCreate, CronModel). */
static json_t *task_defaults(void)
{
    return json_pack("{s:b, s:[], s:i, s:s, s:b, s:s, s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s},"
                     " s:b}",
                     "recursive", 0, "exclude", "lifetime_value", 2, "lifetime_unit", "WEEK",
                     "enabled", 1, "naming_schema", "auto-%Y-%m-%d_%H-%M", "schedule", "minute",
                     "00", "hour", "*", "dom", "*", "month", "*", "dow", "*", "begin", "00:00",
                     "end", "23:59", "allow_empty", 1);
}

/* data over base; schedule keys over base's schedule. A new reference. */
static json_t *task_merge(json_t *base, json_t *data)
{
    json_t *cfg = json_deep_copy(base), *sched = json_object_get(data, "schedule");
    json_t *s = json_deep_copy(json_object_get(cfg, "schedule"));

    json_object_update(cfg, data);
    if (sched && s) {
        json_object_update(s, sched);
        json_object_set(cfg, "schedule", s);
    }
    json_decref(s);
    json_object_del(cfg, "vmware_sync"); /* a row's, given back: always false */
    json_object_del(cfg, "fixate_removal_date");
    return cfg;
}

static void verr(struct api_call *call, const char *pfx, const char *key, int err, const char *msg)
{
    char field[512];

    snprintf(field, sizeof(field), "%s.%s", pfx, key);
    api_verr(call, field, err, "%s", msg);
}

/* exclude: datasets under the task's dataset, with recursive only. */
static void check_exclude(struct api_call *call, const char *pfx, json_t *cfg)
{
    const char *ds = json_string_value(json_object_get(cfg, "dataset"));
    json_t *ex = json_object_get(cfg, "exclude"), *v;
    size_t i, n = strlen(ds);

    if (json_array_size(ex) && !json_is_true(json_object_get(cfg, "recursive")))
        verr(call, pfx, "exclude", EINVAL,
             "Excluding datasets has no sense in non-recursive "
             "periodic snapshot tasks");
    json_array_foreach(ex, i, v)
    {
        const char *e = json_string_value(v);
        if (strncmp(e, ds, n) != 0 || e[n] != '/')
            verr(call, pfx, "exclude", EINVAL, "Excluded datasets must belong to the dataset");
    }
}

/* The checks a field table cannot make, on the whole configuration. */
static void task_check(struct api_call *call, const char *pfx, json_t *cfg)
{
    const char *ds = json_string_value(json_object_get(cfg, "dataset"));
    struct snaptask_sched sched;
    struct ds_row row;
    const char *field = NULL;
    char why[256] = "", msg[320];
    int rc;

    db_lock();
    rc = ds_dataset_get(ds, &row);
    db_unlock();
    if (rc < 0) {
        snprintf(msg, sizeof(msg), "Dataset %s does not exist", ds);
        verr(call, pfx, "dataset", ENOENT, msg);
    }
    if (snaptask_schema_check(json_string_value(json_object_get(cfg, "naming_schema")), why,
                              sizeof(why)) < 0)
        verr(call, pfx, "naming_schema", EINVAL, why);
    if (snaptask_sched_parse(json_object_get(cfg, "schedule"), &sched, &field, why, sizeof(why)) <
        0) {
        snprintf(msg, sizeof(msg), "schedule.%s", field);
        verr(call, pfx, msg, EINVAL, why);
    }
    check_exclude(call, pfx, cfg);
    if (!json_is_true(json_object_get(cfg, "allow_empty")))
        verr(call, pfx, "allow_empty", ENOTSUP,
             "allow_empty false is not supported: blockd cannot tell whether a volume changed "
             "since its last snapshot, so every run takes one");
}

static json_t *row_of(sqlite3_stmt *st)
{
    json_t *row = json_loads((const char *)sqlite3_column_text(st, 1), 0, NULL);
    json_t *state = json_loads((const char *)sqlite3_column_text(st, 2), 0, NULL);

    if (!row || !state) {
        json_decref(row);
        json_decref(state);
        return NULL;
    }
    json_object_set_new(row, "id", json_integer(sqlite3_column_int64(st, 0)));
    json_object_set_new(row, "vmware_sync", json_false());
    json_object_set_new(row, "state", state);
    return row;
}

json_t *snaptask_rows(void)
{
    json_t *rows = json_array();
    sqlite3_stmt *st;
    int rc;

    db_lock();
    rc = db_stmt("SELECT id, config, state FROM snapshot_tasks ORDER BY id", &st);
    if (rc == 0) {
        while (db_stmt_next(st, &rc)) {
            json_t *row = row_of(st);
            if (row)
                json_array_append_new(rows, row);
        }
        db_stmt_done(st);
    }
    db_unlock();
    if (rc < 0) {
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

/* The task id's row, or NULL after an ENOENT on call. */
static json_t *task_get(struct api_call *call, json_t *jid)
{
    json_t *rows = snaptask_rows(), *row, *found = NULL;
    size_t i;

    json_array_foreach(rows, i, row) if (json_equal(json_object_get(row, "id"), jid)) found =
        json_incref(row);
    json_decref(rows);
    if (!found)
        api_error(call, ENOENT, "Periodic snapshot task %lld does not exist",
                  (long long)json_integer_value(jid));
    return found;
}

static int m_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = snaptask_rows();
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

/* Store cfg as task id (0: a new one). 0 with *result the row, or -1. */
static int task_store(struct api_call *call, int64_t id, json_t *cfg, json_t **result)
{
    char *text = json_dumps(cfg, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *jid;
    int rc;

    if (!text)
        return api_error(call, ENOMEM, "out of memory");
    db_lock();
    if (id == 0) {
        rc = db_run("INSERT INTO snapshot_tasks (config) VALUES (?1)", "t", text);
        id = sqlite3_last_insert_rowid(db_handle());
    } else {
        rc = db_run("UPDATE snapshot_tasks SET config = ?1 WHERE id = ?2", "ti", text, id);
    }
    db_unlock();
    free(text);
    if (rc < 0)
        return api_error(call, -rc, "cannot store the periodic snapshot task: %s", strerror(-rc));
    jid = json_integer(id);
    *result = task_get(call, jid);
    json_decref(jid);
    return *result ? 0 : -1;
}

static int m_create(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0), *defaults = task_defaults(), *cfg;
    int rc;

    cfg = task_merge(defaults, data);
    json_decref(defaults);
    task_check(call, "pool_snapshottask_create", cfg);
    if (api_has_verrs(call)) {
        json_decref(cfg);
        return api_invalid(call);
    }
    rc = task_store(call, 0, cfg, result);
    if (rc == 0)
        log_info("snapshottask: task %lld created for %s (peer %s)",
                 (long long)json_integer_value(json_object_get(*result, "id")),
                 json_string_value(json_object_get(cfg, "dataset")), api_call_peer(call));
    json_decref(cfg);
    return rc;
}

static int m_update(struct api_call *call, json_t *params, json_t **result)
{
    json_t *jid = api_param(params, 0), *data = api_param(params, 1), *row, *cfg;
    int rc;

    if (!(row = task_get(call, jid)))
        return -1;
    json_object_del(row, "id");
    json_object_del(row, "state");
    cfg = task_merge(row, data);
    json_decref(row);
    task_check(call, "pool_snapshottask_update", cfg);
    if (api_has_verrs(call)) {
        json_decref(cfg);
        return api_invalid(call);
    }
    rc = task_store(call, json_integer_value(jid), cfg, result);
    if (rc == 0)
        log_info("snapshottask: task %lld updated (peer %s)", (long long)json_integer_value(jid),
                 api_call_peer(call));
    json_decref(cfg);
    return rc;
}

static int m_delete(struct api_call *call, json_t *params, json_t **result)
{
    json_t *jid = api_param(params, 0), *row = task_get(call, jid);
    int rc;

    if (!row)
        return -1;
    json_decref(row);
    db_lock();
    rc = db_run("DELETE FROM snapshot_tasks WHERE id = ?1", "i", (int64_t)json_integer_value(jid));
    db_unlock();
    if (rc < 0)
        return api_error(call, -rc, "cannot delete the periodic snapshot task: %s", strerror(-rc));
    log_info("snapshottask: task %lld deleted (peer %s)", (long long)json_integer_value(jid),
             api_call_peer(call));
    *result = json_true();
    return 0;
}

static int m_run(struct api_call *call, json_t *params, json_t **result)
{
    json_t *row = task_get(call, api_param(params, 0));
    int rc;

    if (!row)
        return -1;
    rc = snaptask_run_task(call, row, NULL);
    json_decref(row);
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
                                              .fields = update_fields,
                                              .nfields = ARRAY_LEN(update_fields),
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
