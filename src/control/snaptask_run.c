/*
 * Running the snapshot tasks (snaptask.h): taking a task's snapshots,
 * expiring the old ones, and the scheduler thread that does both at each
 * minute boundary. Snapshots are taken and deleted through the functions
 * pool.snapshot.create and pool.snapshot.delete use (ds_snapshot_take,
 * ds_snapshot_destroy), as blockd itself (api_call_internal_new).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "control/dataset_store.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/snaptask.h"
#include "core/log.h"

/* The volumes a task snapshots: its dataset's (with recursive, its
 * subtree's) minus the excluded datasets and their subtrees. */
struct targets {
    const struct snaptask *task;
    json_t *names; /* array of volume names */
};

static bool excluded(const struct snaptask *task, const char *name)
{
    for (size_t i = 0; i < task->exclude.n; i++) {
        const char *e = task->exclude.v[i];
        size_t n = strlen(e);
        if (strncmp(name, e, n) == 0 && (name[n] == '\0' || name[n] == '/'))
            return true;
    }
    return false;
}

static int target_add(const char *name, int64_t id, bool is_volume, void *arg)
{
    struct targets *t = arg;

    (void)id;
    if (is_volume && !excluded(t->task, name))
        json_array_append_new(t->names, json_string(name));
    return 0;
}

/* The task's volumes (a new array; empty when none), or NULL with rc. */
static json_t *task_targets(const struct snaptask *task, int *rc)
{
    const char *ds = task->dataset;
    struct targets t = {.task = task, .names = json_array()};
    struct ds_row row;

    db_lock();
    *rc = ds_dataset_get(ds, &row);
    if (*rc == 0 && task->recursive)
        *rc = ds_dataset_each_in_subtree(ds, target_add, &t);
    else if (*rc == 0 && row.type == DS_VOLUME)
        json_array_append_new(t.names, json_string(ds));
    db_unlock();
    if (*rc < 0) {
        json_decref(t.names);
        return NULL;
    }
    return t.names;
}

/* The reason of the error set on call, for the state and log lines. */
static void call_reason(struct api_call *call, char *buf, size_t len)
{
    json_t *e = api_call_error(call);
    const char *r = json_string_value(json_object_get(json_object_get(e, "data"), "reason"));

    snprintf(buf, len, "%s", r ? r : json_string_value(json_object_get(e, "message")));
    json_decref(e);
}

static int take_all(struct api_call *call, int64_t id, const struct snaptask *task, json_t *vols,
                    const struct tm *tm)
{
    const char *schema = task->naming_schema;
    char name[NAME_DATASET_MAX + 1];
    json_t *v;
    size_t i;

    if (strftime(name, sizeof(name), schema, tm) == 0)
        return api_error(call, EINVAL, "naming schema %s makes no name", schema);
    json_array_foreach(vols, i, v)
    {
        struct ds_snap snap;
        int rc;

        db_lock();
        rc = ds_snapshot_get(json_string_value(v), name, &snap);
        db_unlock();
        if (rc == 0) { /* a run and the schedule in one minute: one snapshot */
            log_info("snapshottask: task %lld: snapshot %s@%s exists already", (long long)id,
                     json_string_value(v), name);
            continue;
        }
        if (ds_snapshot_take(call, json_string_value(v), name) < 0)
            return -1;
        log_info("snapshottask: task %lld took snapshot %s@%s", (long long)id, json_string_value(v),
                 name);
    }
    return 0;
}

int snaptask_run_task(struct api_call *call, const struct snaptask *task, const struct tm *when)
{
    time_t now = time(NULL);
    struct tm tm;
    int64_t id = task->id;
    const char *ds = task->dataset;
    char why[512];
    int rc;
    json_t *vols = task_targets(task, &rc);

    snaptask_state_set(id, "RUNNING", NULL);
    if (!vols)
        rc = ds_api_errno(call, rc, "cannot snapshot", ds);
    else if (json_array_size(vols) == 0)
        rc = api_error(call, ENOENT, "dataset %s has no volume to snapshot", ds);
    else
        rc = take_all(call, id, task, vols, when ? when : localtime_r(&now, &tm));
    json_decref(vols);
    if (rc < 0) {
        call_reason(call, why, sizeof(why));
        log_error("snapshottask: task %lld (%s) failed: %s", (long long)id, ds, why);
        snaptask_state_set(id, "ERROR", why);
        return -1;
    }
    snaptask_state_set(id, "FINISHED", NULL);
    snaptask_expire(task);
    return 0;
}

/* Snapshots of one volume to expire: names parsing with the schema,
 * older than the cutoff, neither held nor cloned (those are logged). */
struct expiry {
    const struct snaptask *task;
    int64_t cutoff; /* naive local seconds (snaptask_schema_time) */
    json_t *names;  /* full names */
};

static int expiry_add(const struct ds_snap_view *v, void *arg)
{
    struct expiry *x = arg;
    const char *schema = x->task->naming_schema;
    long long id = (long long)x->task->id;
    char why[64], clone[DS_NAME_BUF];
    int64_t t;

    if (snaptask_schema_time(schema, v->snap.name, &t) < 0 || t >= x->cutoff)
        return 0; /* not this task's, or not old enough */
    if (ds_snapshot_prop_get(v->snap.id, DS_SNAP_HOLD, why, sizeof(why)) == 0)
        log_info("snapshottask: task %lld keeps expired snapshot %s@%s: it is held", id,
                 v->snap.dataset, v->snap.name);
    else if (ds_snapshot_first_clone(v->snap.id, clone, sizeof(clone)) == 0)
        log_info("snapshottask: task %lld keeps expired snapshot %s@%s: clone %s depends on it", id,
                 v->snap.dataset, v->snap.name, clone);
    else
        json_array_append_new(x->names, json_sprintf("%s@%s", v->snap.dataset, v->snap.name));
    return 0;
}

static void expire_one(struct api_call *call, long long id, const char *full)
{
    char why[512];

    if (ds_snapshot_destroy(call, full) == 0) {
        log_info("snapshottask: task %lld expired snapshot %s", id, full);
        return;
    }
    call_reason(call, why, sizeof(why));
    log_error("snapshottask: task %lld cannot expire snapshot %s: %s", id, full, why);
}

void snaptask_expire(const struct snaptask *task)
{
    long long id = (long long)task->id;
    int64_t life = snaptask_lifetime_s(task->lifetime_value, snaptask_units[task->lifetime_unit]);
    struct expiry x = {.task = task, .cutoff = snaptask_naive_now() - life, .names = json_array()};
    char peer[48];
    int rc;
    json_t *vols = task_targets(task, &rc), *v, *n;
    size_t i, j;

    snprintf(peer, sizeof(peer), "snapshottask %lld", id);
    json_array_foreach(vols, i, v)
    {
        struct ds_snap_key key = {.dataset = json_string_value(v), .dataset_len = -1};
        struct ds_snap_keys keys = {.v = &key, .n = 1};

        db_lock();
        ds_snapshot_each(&keys, expiry_add, &x);
        db_unlock();
    }
    json_array_foreach(x.names, j, n)
    {
        /* a fresh call each: an error set on one must not fail the next */
        struct api_call *call = api_call_internal_new("pool.snapshot.delete", peer);
        if (call)
            expire_one(call, id, json_string_value(n));
        api_call_internal_free(call);
    }
    json_decref(x.names);
    json_decref(vols);
}

/* ---- the scheduler thread ---- */

static pthread_mutex_t sched_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sched_cv = PTHREAD_COND_INITIALIZER;
static bool sched_stop, sched_running;
static pthread_t sched_thread;

static bool stopping(void)
{
    bool stop;

    pthread_mutex_lock(&sched_mu);
    stop = sched_stop;
    pthread_mutex_unlock(&sched_mu);
    return stop;
}

/* Run every enabled task whose schedule matches tm (the minute's local
 * time: the snapshots are named by it, even if taken a little later). */
static void run_due(const struct tm *tm, bool expire_only)
{
    struct snaptask *tasks;
    size_t n;
    int rc = snaptask_load_all(&tasks, &n);

    if (rc < 0) {
        log_error("snapshottask: cannot read the tasks: %s", strerror(-rc));
        return;
    }
    for (size_t i = 0; i < n && !stopping(); i++) { /* the tasks left wait for the next start */
        const struct snaptask *task = &tasks[i];
        struct snaptask_sched s;
        const char *field;
        char why[256], peer[48];

        if (expire_only) {
            snaptask_expire(task);
            continue;
        }
        if (!task->enabled ||
            snaptask_sched_parse(&task->schedule, &s, &field, why, sizeof(why)) < 0 ||
            !snaptask_sched_match(&s, tm))
            continue;
        snprintf(peer, sizeof(peer), "snapshottask %lld", (long long)task->id);
        struct api_call *call = api_call_internal_new("pool.snapshot.create", peer);
        if (call)
            (void)snaptask_run_task(call, task, tm); /* logged, state recorded */
        api_call_internal_free(call);
    }
    snaptasks_free(tasks, n);
}

/* Wait until the next minute boundary (wall clock) or a stop. True to
 * go on. */
static bool wait_minute(void)
{
    struct timespec now, until;
    bool go;

    clock_gettime(CLOCK_REALTIME, &now);
    until.tv_sec = now.tv_sec - now.tv_sec % 60 + 60;
    until.tv_nsec = 0;
    pthread_mutex_lock(&sched_mu);
    while (!sched_stop) {
        if (pthread_cond_timedwait(&sched_cv, &sched_mu, &until) == ETIMEDOUT)
            break;
    }
    go = !sched_stop;
    pthread_mutex_unlock(&sched_mu);
    return go;
}

static void *sched_main(void *arg)
{
    time_t last = 0;

    (void)arg;
    api_thread_background();
    run_due(NULL, true); /* what expired while blockd was stopped */
    while (wait_minute()) {
        time_t now = time(NULL), minute = now - now % 60;
        struct tm tm;

        if (minute == last)
            continue; /* woke early (clock stepped back): not twice a minute */
        last = minute;
        localtime_r(&now, &tm);
        run_due(&tm, false);
    }
    return NULL;
}

int snaptask_start(void)
{
    int rc;

    sched_stop = false;
    rc = pthread_create(&sched_thread, NULL, sched_main, NULL);
    if (rc != 0) {
        log_error("snapshottask: cannot start the scheduler: %s", strerror(rc));
        return -rc;
    }
    sched_running = true;
    log_info("snapshottask: scheduler started (schedules in local time)");
    return 0;
}

void snaptask_stop(void)
{
    if (!sched_running)
        return;
    pthread_mutex_lock(&sched_mu);
    sched_stop = true;
    pthread_cond_signal(&sched_cv);
    pthread_mutex_unlock(&sched_mu);
    pthread_join(sched_thread, NULL);
    sched_running = false;
}
