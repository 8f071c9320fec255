/*
 * The job table, core.* job methods and event subscriptions (see jobs.h).
 *
 * One lock guards the table and every job's mutable fields; job dicts are
 * built under it and events are sent after it is released, under the
 * subscription lock only (so a slow client never holds up job progress
 * of other threads for longer than its own send).
 */
#include "api/jobs.h"
#include "api/callmem.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"
#include "api/auth.h"
#include "api/redact.h"
#include "api/validate.h"
#include "core/bounds.h"
#include "core/log.h"
#include "core/util.h"

enum job_state { JOB_RUNNING, JOB_SUCCESS, JOB_FAILED };

static const char *const state_names[] = {"RUNNING", "SUCCESS", "FAILED"};

struct job {
    struct job *next; /* table order: oldest first */
    atomic_int refs;
    int64_t id;
    char *method;
    json_t *arguments;         /* redacted (redact.h): nobody needs them in plaintext */
    struct api_identity owner; /* who started it: its calls run with these rights */
    size_t bytes;              /* what it holds, once finished (history bound) */
    char *description;
    enum job_state state;
    bool settled; /* finished and its "changed" event sent: core.job_wait returns */
    int percent;
    char *progress_text;
    json_t *result;
    int errnum;
    char *error;       /* "[ENAME] message" */
    bool validation;   /* failed with field errors: exc_info type VALIDATION */
    json_t *exc_extra; /* exc_info.extra: the field errors, or NULL */
    int64_t time_started, time_finished;
    /* result is kept as the work returned it, for core.job_wait by the
     * job's owner; job_json() shows everyone else a redacted copy */
    /* jobs_run: the call whose api_error() counts as this job's failure */
    struct api_call *sync_call;
    /* jobs_submit on a thread */
    jobs_fn fn;
    void *arg;
    void (*arg_free)(void *);
};

struct sub {
    struct sub *next;
    struct api_client *client;
    struct api_identity who; /* the login it was made under: it ends with it */
    char id[40];
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a job finished, or a job thread ended */
    struct job *head, *tail;
    size_t finished;
    size_t finished_bytes; /* what the finished jobs hold (JOBS_KEEP_BYTES) */
    size_t threads;        /* job threads running */
    int64_t next_id;
    pthread_mutex_t sub_lock;
    struct sub *subs;
} jt = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .changed = PTHREAD_COND_INITIALIZER,
    .next_id = 1,
    .sub_lock = PTHREAD_MUTEX_INITIALIZER,
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void job_unref(struct job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    free(j->method);
    json_decref(j->arguments);
    free(j->description);
    free(j->progress_text);
    json_decref(j->result);
    free(j->error);
    json_decref(j->exc_extra);
    free(j);
}

int64_t jobs_id(const struct job *job)
{
    return job->id;
}

const struct api_identity *jobs_identity(const struct job *job)
{
    return &job->owner;
}

static bool same_caller(const struct api_identity *a, const struct api_identity *b)
{
    return a->kind == b->kind && a->key_id == b->key_id && a->account_id == b->account_id;
}

/* Whether who may see j (its events, core.get_jobs, core.job_wait): a
 * FULL_ADMIN, the local administrator and blockd see every job; a key
 * with a narrower role only the jobs it started itself. */
static bool job_visible(const struct job *j, const struct api_identity *who)
{
    if (who->kind != API_CALLER_REMOTE || (who->roles & API_ROLE_FULL))
        return true;
    return j->owner.kind == API_CALLER_REMOTE && j->owner.key_id == who->key_id &&
           j->owner.account_id == who->account_id;
}

/* The job dict (secrets redacted); jt.lock held. */
static json_t *job_json(const struct job *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(j->id));
    json_object_set_new(o, "method", json_string(j->method));
    json_object_set_new(o, "arguments", j->arguments ? json_deep_copy(j->arguments) : json_array());
    json_object_set_new(o, "description",
                        j->description ? json_string(j->description) : json_null());
    json_object_set_new(o, "transient", json_false());
    json_object_set_new(o, "abortable", json_false());
    json_object_set_new(o, "logs_path", json_null());
    json_object_set_new(o, "logs_excerpt", json_null());
    json_object_set_new(o, "progress",
                        json_pack("{s:i, s:o, s:n}", "percent", j->percent, "description",
                                  j->progress_text ? json_string(j->progress_text) : json_null(),
                                  "extra"));
    json_t *result = j->result ? redact_value(j->result) : NULL;
    json_object_set_new(o, "result", result ? result : json_null());
    json_object_set_new(o, "result_encoding_error", json_null());
    json_object_set_new(o, "error", j->error ? json_string(j->error) : json_null());
    json_object_set_new(o, "exception", j->error ? json_string(j->error) : json_null());
    json_object_set_new(o, "exc_info",
                        j->error ? json_pack("{s:s, s:s, s:i, s:O?}", "repr", j->error, "type",
                                             j->validation ? "VALIDATION" : "CallError", "errno",
                                             j->errnum, "extra", j->exc_extra)
                                 : json_null());
    json_object_set_new(o, "state", json_string(state_names[j->state]));
    json_object_set_new(o, "time_started",
                        json_pack("{s:I}", "$date", (json_int_t)j->time_started));
    json_object_set_new(o, "time_finished",
                        j->time_finished ? json_pack("{s:I}", "$date", (json_int_t)j->time_finished)
                                         : json_null());
    json_object_set_new(o, "message_ids", json_array());
    return o;
}

/* ---- events ---- */

/* Send an event about job j (its owner decides who may see it) to every
 * subscriber allowed to. */
static void broadcast(const struct job *j, const char *msg, int64_t id, json_t *fields)
{
    pthread_mutex_lock(&jt.sub_lock);
    if (jt.subs) {
        json_t *n = json_pack("{s:s, s:s, s:{s:s, s:s, s:I, s:O}}", "jsonrpc", "2.0", "method",
                              "collection_update", "params", "msg", msg, "collection",
                              "core.get_jobs", "id", (json_int_t)id, "fields", fields);
        int64_t now = now_ms();
        for (struct sub *s = jt.subs; s; s = s->next) {
            /* an expired key's subscription hears nothing more (no DB
             * lookup here: jobs_credentials_changed ends revoked ones) */
            if (s->who.expires_at && s->who.expires_at <= now)
                continue;
            if (job_visible(j, &s->who) && s->client->send && s->client->send(s->client, n) < 0)
                log_debug("api: %s: job event not delivered", s->client->peer);
        }
        json_decref(n);
    }
    pthread_mutex_unlock(&jt.sub_lock);
    json_decref(fields);
}

/* Build the dict under the lock, send after. */
static void job_event(struct job *j, const char *msg)
{
    pthread_mutex_lock(&jt.sub_lock);
    bool any = jt.subs != NULL;
    pthread_mutex_unlock(&jt.sub_lock);
    if (!any)
        return;
    pthread_mutex_lock(&jt.lock);
    json_t *fields = job_json(j);
    pthread_mutex_unlock(&jt.lock);
    broadcast(j, msg, j->id, fields);
}

void jobs_client_closed(struct api_client *client)
{
    pthread_mutex_lock(&jt.sub_lock);
    for (struct sub **p = &jt.subs; *p;) {
        if ((*p)->client == client) {
            struct sub *dead = *p;
            *p = dead->next;
            free(dead);
        } else {
            p = &(*p)->next;
        }
    }
    pthread_mutex_unlock(&jt.sub_lock);
}

/* A subscription's copy of what jobs_credentials_changed needs: checked
 * without the subscription lock (the check reads the DB, and job events
 * are sent from threads that hold the DB lock). */
struct sub_check {
    struct api_client *client;
    struct api_identity who;
    char id[40];
};

/* Remove subscription (client, id) if it is still there. */
static void sub_remove(struct api_client *client, const char *id)
{
    pthread_mutex_lock(&jt.sub_lock);
    for (struct sub **p = &jt.subs; *p; p = &(*p)->next) {
        if ((*p)->client == client && strcmp((*p)->id, id) == 0) {
            struct sub *dead = *p;
            *p = dead->next;
            free(dead);
            break;
        }
    }
    pthread_mutex_unlock(&jt.sub_lock);
}

void jobs_credentials_changed(void)
{
    pthread_mutex_lock(&jt.sub_lock);
    size_t n = 0;
    for (struct sub *s = jt.subs; s; s = s->next)
        n++;
    struct sub_check *v = n ? calloc(n, sizeof(*v)) : NULL;
    size_t k = 0;
    for (struct sub *s = jt.subs; s && v; s = s->next, k++) {
        v[k].client = s->client;
        v[k].who = s->who;
        memcpy(v[k].id, s->id, sizeof(v[k].id));
    }
    pthread_mutex_unlock(&jt.sub_lock);
    if (n && !v) {
        /* Cannot check them one by one: end them all rather than let a
         * revoked one live (a client subscribes again after its login). */
        log_warn("api: out of memory checking subscriptions after a credential change; "
                 "ending every subscription");
        pthread_mutex_lock(&jt.sub_lock);
        while (jt.subs) {
            struct sub *dead = jt.subs;
            jt.subs = dead->next;
            free(dead);
        }
        pthread_mutex_unlock(&jt.sub_lock);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (api_auth_identity_current(&v[i].who))
            continue;
        sub_remove(v[i].client, v[i].id);
        log_info("api: %s: subscription %s ended: its credential (%s) was revoked or changed",
                 v[i].client->peer, v[i].id, v[i].who.name);
    }
    free(v);
}

/* ---- the table ---- */

/* What a finished job holds, roughly: its JSON as text and its strings. */
static size_t job_size(const struct job *j, const json_t *result)
{
    size_t n = sizeof(*j) + strlen(j->method) + 2;
    n += j->arguments ? json_dumpb(j->arguments, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY) : 0;
    n += result ? json_dumpb(result, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY) : 0;
    n += j->description ? strlen(j->description) : 0;
    n += j->progress_text ? strlen(j->progress_text) : 0;
    n += j->error ? strlen(j->error) : 0;
    return n;
}

/* Drop the oldest finished jobs beyond the limits (count and bytes);
 * jt.lock held. Returns the dropped ids' jobs in a list for "removed"
 * events; *for_bytes counts those dropped for the byte bound alone. */
static struct job *trim_locked(size_t *for_bytes)
{
    struct job *removed = NULL;
    struct job **p = &jt.head, *prev = NULL;
    *for_bytes = 0;
    while (*p && (jt.finished > JOBS_KEEP_FINISHED || jt.finished_bytes > JOBS_KEEP_BYTES)) {
        struct job *j = *p;
        if (j->state == JOB_RUNNING) {
            prev = j;
            p = &j->next;
            continue;
        }
        *p = j->next;
        if (jt.tail == j)
            jt.tail = prev;
        if (jt.finished <= JOBS_KEEP_FINISHED)
            (*for_bytes)++;
        jt.finished--;
        jt.finished_bytes -= j->bytes;
        j->next = removed;
        removed = j;
    }
    return removed;
}

static struct job *job_new(struct api_call *call, json_t *params, const char *description)
{
    const char *method = api_call_method(call);
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    atomic_init(&j->refs, 2); /* the table's and the runner's */
    j->owner = *api_call_identity(call);
    j->method = strdup(method ? method : "");
    j->arguments = params ? redact_params(method, params) : json_array();
    j->description = description ? strdup(description) : NULL;
    j->state = JOB_RUNNING;
    j->time_started = now_ms();
    if (!j->method || !j->arguments) {
        json_decref(j->arguments);
        free(j->method);
        free(j->description);
        free(j);
        return NULL;
    }
    pthread_mutex_lock(&jt.lock);
    j->id = jt.next_id++;
    if (jt.tail)
        jt.tail->next = j;
    else
        jt.head = j;
    jt.tail = j;
    pthread_mutex_unlock(&jt.lock);
    job_event(j, "added");
    return j;
}

void jobs_progress(struct job *job, int percent, const char *fmt, ...)
{
    char *text = NULL;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&text, fmt, ap) < 0)
            text = NULL;
        va_end(ap);
    }
    pthread_mutex_lock(&jt.lock);
    job->percent = percent < 0 ? 0 : percent > 100 ? 100 : percent;
    free(job->progress_text);
    job->progress_text = text;
    pthread_mutex_unlock(&jt.lock);
    job_event(job, "changed");
}

int jobs_fail(struct job *job, int errnum, const char *fmt, ...)
{
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0)
        msg = NULL;
    va_end(ap);
    if (errnum < 0)
        errnum = -errnum;
    if (errnum == 0)
        errnum = EFAULT;
    char *err = NULL;
    if (asprintf(&err, "[%s] %s", api_errno_name(errnum), msg ? msg : "failed") < 0)
        err = NULL;
    free(msg);
    pthread_mutex_lock(&jt.lock);
    if (!job->error) {
        job->errnum = errnum;
        job->error = err;
        err = NULL;
    }
    pthread_mutex_unlock(&jt.lock);
    free(err);
    return -1;
}

/* A jobs_run job failed through its call's error: the job says what the
 * call answers, as TrueNAS does (error = the reason "[ENAME] ...", exc_info
 * type VALIDATION with the field errors for a -32602). jt.lock held. */
static void job_error_from_call(struct job *j)
{
    json_t *e = j->sync_call ? api_call_error(j->sync_call) : NULL;
    json_t *data = json_object_get(e, "data");
    const char *reason = json_string_value(json_object_get(data, "reason"));

    j->errnum = j->sync_call ? api_call_errno(j->sync_call) : 0;
    if (j->errnum == 0)
        j->errnum = EFAULT;
    j->validation = json_integer_value(json_object_get(e, "code")) == API_INVALID_PARAMS;
    if (j->validation)
        j->exc_extra = json_incref(json_object_get(data, "extra"));
    if (reason && *reason) {
        size_t n = strlen(reason);
        j->error = strndup(reason, reason[n - 1] == '\n' ? n - 1 : n);
    } else if (asprintf(&j->error, "[%s] %s failed", api_errno_name(j->errnum), j->method) < 0) {
        j->error = NULL;
    }
    json_decref(e);
}

/* Record the outcome (steals result), announce it and wake waiters. */
static void job_finish(struct job *j, int rc, json_t *result)
{
    size_t bytes = job_size(j, rc == 0 ? result : NULL);
    pthread_mutex_lock(&jt.lock);
    if (rc == 0) {
        j->state = JOB_SUCCESS;
        j->result = result ? result : json_null();
        j->percent = 100;
    } else {
        json_decref(result);
        j->state = JOB_FAILED;
        if (!j->error)
            job_error_from_call(j);
    }
    j->sync_call = NULL;
    j->time_finished = now_ms();
    j->bytes = bytes;
    jt.finished++;
    jt.finished_bytes += bytes;
    size_t for_bytes;
    struct job *removed = trim_locked(&for_bytes);
    pthread_cond_broadcast(&jt.changed);
    pthread_mutex_unlock(&jt.lock);
    if (for_bytes)
        log_info("api: job history over %u bytes: the %zu oldest finished job(s) dropped "
                 "(job %lld held %zu bytes)",
                 JOBS_KEEP_BYTES, for_bytes, (long long)j->id, bytes);
    job_event(j, "changed");
    /* A client that waits for the job and is subscribed gets the event
     * first: core.job_wait returns only once it has been sent. */
    pthread_mutex_lock(&jt.lock);
    j->settled = true;
    pthread_cond_broadcast(&jt.changed);
    pthread_mutex_unlock(&jt.lock);
    while (removed) {
        struct job *next = removed->next;
        broadcast(removed, "removed", removed->id,
                  json_pack("{s:I}", "id", (json_int_t)removed->id));
        job_unref(removed);
        removed = next;
    }
}

/* Copy the job's failure onto call; returns -1. */
static int fail_call(struct api_call *call, struct job *j)
{
    pthread_mutex_lock(&jt.lock);
    int errnum = j->errnum;
    char *msg = j->error ? strdup(j->error) : NULL;
    pthread_mutex_unlock(&jt.lock);
    /* "[ENAME] text": the call's own error adds the errno name again. */
    const char *text = msg ? msg : "job failed";
    if (text[0] == '[') {
        const char *close = strstr(text, "] ");
        if (close)
            text = close + 2;
    }
    api_error(call, errnum, "%s", text);
    free(msg);
    return -1;
}

int jobs_run(struct api_call *call, json_t *params, const char *description, jobs_fn fn, void *arg,
             json_t **result)
{
    struct job *j = job_new(call, params, description);
    if (!j)
        return api_error(call, ENOMEM, "out of memory for a job");
    j->sync_call = call;
    json_t *res = NULL;
    int rc = fn(j, arg, &res);
    if (rc == 0) {
        *result = res ? json_incref(res) : json_null();
        job_finish(j, 0, res);
    } else {
        job_finish(j, -1, res);
        /* An error the work set on call directly stays; else the job's. */
        if (api_call_errno(call) == 0)
            fail_call(call, j);
    }
    job_unref(j);
    return rc == 0 ? 0 : -1;
}

static void *job_thread(void *p)
{
    struct job *j = p;
    json_t *res = NULL;
    /* A job is the rest of an API call: the same per-call memory budget
     * (callmem.h), counted from here on. */
    struct callmem_scope ms;
    callmem_begin(&ms);
    int rc = j->fn(j, j->arg, &res);
    if (callmem_end(&ms)) {
        json_decref(res);
        res = NULL;
        log_warn("api: job %lld (%s): refused: it needed more than the per-call memory limit "
                 "of %llu bytes (--api-call-memory)",
                 (long long)j->id, j->method, (unsigned long long)callmem_budget());
        jobs_fail(j, ENOMEM,
                  "%s needs more memory than one API call may use (%llu bytes; blockd "
                  "--api-call-memory)",
                  j->method, (unsigned long long)callmem_budget());
        rc = -1;
    }
    if (j->arg_free)
        j->arg_free(j->arg);
    job_finish(j, rc == 0 ? 0 : -1, res);
    job_unref(j);
    pthread_mutex_lock(&jt.lock);
    jt.threads--;
    pthread_cond_broadcast(&jt.changed);
    pthread_mutex_unlock(&jt.lock);
    return NULL;
}

int jobs_submit(struct api_call *call, json_t *params, const char *description, jobs_fn fn,
                void *arg, void (*arg_free)(void *), json_t **result)
{
    struct api_client *client = api_call_client(call);
    bool async = client && !client->jobs_wait;
    if (async) {
        pthread_mutex_lock(&jt.lock);
        bool full = jt.threads >= JOBS_MAX_RUNNING;
        if (!full)
            jt.threads++;
        pthread_mutex_unlock(&jt.lock);
        if (full) {
            if (arg_free)
                arg_free(arg);
            return api_error(call, EBUSY, "too many jobs running (max %d)", JOBS_MAX_RUNNING);
        }
    }
    struct job *j = job_new(call, params, description);
    if (!j) {
        if (async) {
            pthread_mutex_lock(&jt.lock);
            jt.threads--;
            pthread_mutex_unlock(&jt.lock);
        }
        if (arg_free)
            arg_free(arg);
        return api_error(call, ENOMEM, "out of memory for a job");
    }
    if (!async) {
        json_t *res = NULL;
        int rc = fn(j, arg, &res);
        if (arg_free)
            arg_free(arg);
        if (rc == 0)
            *result = res ? json_incref(res) : json_null();
        job_finish(j, rc == 0 ? 0 : -1, res);
        if (rc != 0)
            fail_call(call, j);
        job_unref(j);
        return rc == 0 ? 0 : -1;
    }
    j->fn = fn;
    j->arg = arg;
    j->arg_free = arg_free;
    int64_t id = j->id;
    int err = -thread_start_detached(job_thread, j);
    if (err != 0) {
        log_error("api: %s: cannot start a job thread: %s", api_call_peer(call), strerror(err));
        if (arg_free)
            arg_free(arg);
        jobs_fail(j, err, "cannot start a job thread");
        job_finish(j, -1, NULL);
        job_unref(j);
        pthread_mutex_lock(&jt.lock);
        jt.threads--;
        pthread_mutex_unlock(&jt.lock);
        return api_error(call, err, "cannot start a job thread");
    }
    *result = json_integer(id);
    return 0;
}

void jobs_stop(void)
{
    pthread_mutex_lock(&jt.lock);
    if (jt.threads > 0)
        log_info("api: waiting for %zu running job(s)", jt.threads);
    while (jt.threads > 0)
        pthread_cond_wait(&jt.changed, &jt.lock);
    pthread_mutex_unlock(&jt.lock);
}

/* ---- core.get_jobs ---- */

static int core_get_jobs(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = json_array();
    const struct api_identity *who = api_call_identity(call);
    pthread_mutex_lock(&jt.lock);
    for (struct job *j = jt.head; j; j = j->next)
        if (job_visible(j, who))
            json_array_append_new(rows, job_json(j));
    pthread_mutex_unlock(&jt.lock);
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

/* ---- core.job_wait ---- */

static struct job *job_find_ref(int64_t id)
{
    struct job *found = NULL;
    pthread_mutex_lock(&jt.lock);
    for (struct job *j = jt.head; j; j = j->next) {
        if (j->id == id) {
            atomic_fetch_add(&j->refs, 1);
            found = j;
            break;
        }
    }
    pthread_mutex_unlock(&jt.lock);
    return found;
}

static int wait_work(struct job *self, void *arg, json_t **result)
{
    struct job *target = arg;
    jobs_progress(self, 0, "Waiting for job %" PRId64, target->id);
    pthread_mutex_lock(&jt.lock);
    while (!target->settled)
        pthread_cond_wait(&jt.changed, &jt.lock);
    bool ok = target->state == JOB_SUCCESS;
    /* Its owner gets the result as the work returned it (a key that
     * api_key.create made through core.bulk); others, as core.get_jobs
     * shows it. */
    json_t *res = NULL;
    if (ok && target->result)
        res = same_caller(&self->owner, &target->owner) ? json_deep_copy(target->result)
                                                        : redact_value(target->result);
    int errnum = target->errnum;
    char *err = !ok && target->error ? strdup(target->error) : NULL;
    pthread_mutex_unlock(&jt.lock);
    if (ok) {
        *result = res;
        return 0;
    }
    /* err is "[ENAME] text" already. */
    const char *text = err ? err : "failed";
    if (text[0] == '[' && strstr(text, "] "))
        text = strstr(text, "] ") + 2;
    jobs_fail(self, errnum, "%s", text);
    free(err);
    return -1;
}

static void wait_arg_free(void *arg)
{
    job_unref(arg);
}

static int core_job_wait(struct api_call *call, json_t *params, json_t **result)
{
    json_t *jid = api_param(params, 0); /* an integer: the dispatcher checked it */
    struct job *target = job_find_ref(json_integer_value(jid));
    if (target && !job_visible(target, api_call_identity(call))) {
        job_unref(target);
        target = NULL;
    }
    if (!target)
        return api_error(call, ENOENT, "Job %" JSON_INTEGER_FORMAT " does not exist",
                         json_integer_value(jid));
    char desc[64];
    snprintf(desc, sizeof(desc), "Waiting for job %" PRId64, target->id);
    return jobs_submit(call, params, desc, wait_work, target, wait_arg_free, result);
}

/* ---- core.bulk ---- */

/* Durability of a batch (api.h api_set_batch_hooks); NULL: none set. */
static void (*batch_begin)(void);
static int (*batch_end)(void);

void api_set_batch_hooks(void (*begin)(void), int (*end)(void))
{
    batch_begin = begin;
    batch_end = end;
}

struct bulk {
    char *method;
    json_t *calls;
    char peer[96]; /* the submitting client's, for log lines */
};

static void bulk_free(void *p)
{
    struct bulk *b = p;
    free(b->method);
    json_decref(b->calls);
    free(b);
}

/* The text TrueNAS puts in a bulk item's error: its reason or message. */
static json_t *bulk_error_text(json_t *err)
{
    json_t *data = json_object_get(err, "data");
    const char *reason = json_string_value(json_object_get(data, "reason"));
    if (reason && *reason)
        return json_string(reason);
    const char *msg = json_string_value(json_object_get(err, "message"));
    return json_string(msg ? msg : "error");
}

static int bulk_work(struct job *job, void *arg, json_t **result)
{
    struct bulk *b = arg;
    size_t n = json_array_size(b->calls);
    json_t *out = json_array();
    /* Each call is its own transaction, but the bulk answers once: its
     * configuration writes share one fdatasync, made before the result is
     * returned (control/db.h). */
    if (batch_begin)
        batch_begin();
    for (size_t i = 0; i < n; i++) {
        jobs_progress(job, (int)(i * 100 / (n ? n : 1)), "%s: call %zu of %zu", b->method, i + 1,
                      n);
        json_t *res = NULL, *err = NULL;
        /* Each call runs with the rights of whoever submitted the batch
         * (the submitting call may be gone, and its key since revoked:
         * the dispatcher checks both), exactly as if called directly. */
        int rc = api_call_method_as(jobs_identity(job), b->peer, b->method,
                                    json_array_get(b->calls, i), &res, &err);
        json_t *item;
        if (rc == 0)
            item = json_pack("{s:n, s:o, s:n}", "job_id", "result", res, "error");
        else
            item = json_pack("{s:n, s:n, s:o, s:O}", "job_id", "result", "error",
                             bulk_error_text(err), "error_object", err);
        json_decref(err);
        json_array_append_new(out, item);
    }
    if (batch_end && batch_end() < 0) {
        json_decref(out);
        return jobs_fail(job, EIO,
                         "%s: the changes were committed but could not be made durable "
                         "(fdatasync failed)",
                         b->method);
    }
    jobs_progress(job, 100, "%s: %zu calls done", b->method, n);
    *result = out;
    return 0;
}

static int core_bulk(struct api_call *call, json_t *params, json_t **result)
{
    /* The three arguments are checked here, not by type in bulk_args: a
     * bulk call reports every bad one (and every bad params list) at once. */
    json_t *jm = api_param(params, 0);
    json_t *calls = api_param(params, 1);
    json_t *desc = api_param(params, 2);
    if (!json_is_string(jm))
        api_verr(call, "core.bulk.method", EINVAL, "Input should be a valid string");
    if (!json_is_array(calls))
        api_verr(call, "core.bulk.params", EINVAL, "Input should be a valid list");
    else {
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c)
        {
            if (!json_is_array(c)) {
                char f[64];
                snprintf(f, sizeof(f), "core.bulk.params.%zu", i);
                api_verr(call, f, EINVAL, "Input should be a valid list");
            }
        }
    }
    if (desc && !json_is_string(desc))
        api_verr(call, "core.bulk.description", EINVAL, "Input should be a valid string");
    if (api_has_verrs(call))
        return api_invalid(call);
    const char *method = json_string_value(jm);
    if (!api_find(method))
        return api_error(call, ENOENT, "Method %s does not exist", method);
    if (strcmp(method, "core.bulk") == 0)
        return api_error(call, EINVAL, "core.bulk cannot run core.bulk");
    struct bulk *b = calloc(1, sizeof(*b));
    if (!b || !(b->method = strdup(method))) {
        free(b);
        return api_error(call, ENOMEM, "out of memory");
    }
    b->calls = json_deep_copy(calls);
    snprintf(b->peer, sizeof(b->peer), "%s", api_call_peer(call));
    return jobs_submit(call, params, desc ? json_string_value(desc) : NULL, bulk_work, b, bulk_free,
                       result);
}

/* ---- subscriptions and options ---- */

static int core_subscribe(struct api_call *call, json_t *params, json_t **result)
{
    json_t *jn = api_param(params, 0); /* a string: the dispatcher checked it */
    if (strcmp(json_string_value(jn), "core.get_jobs") != 0)
        return api_error(call, ENOENT, "Event %.100s not found (only core.get_jobs is offered)",
                         json_string_value(jn));
    struct api_client *client = api_call_client(call);
    if (!client || !client->send || !client->closes_notified)
        return api_error(call, ENOTSUP, "this connection cannot receive events");
    struct sub *s = calloc(1, sizeof(*s));
    if (!s)
        return api_error(call, ENOMEM, "out of memory");
    unsigned char r[16];
    if (gnutls_rnd(GNUTLS_RND_NONCE, r, sizeof(r)) < 0) {
        free(s);
        return api_error(call, EIO, "random number generator failed");
    }
    r[6] = (unsigned char)((r[6] & 0x0f) | 0x40); /* a version-4 UUID */
    r[8] = (unsigned char)((r[8] & 0x3f) | 0x80);
    snprintf(s->id, sizeof(s->id),
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", r[0], r[1],
             r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14],
             r[15]);
    s->client = client;
    s->who = *api_call_identity(call);
    /* Capped per connection: each event is queued once per subscription,
     * to a client that need not read (core/bounds.h). */
    unsigned cap = limit_get(LIMIT_SUBSCRIPTIONS), held = 0;
    pthread_mutex_lock(&jt.sub_lock);
    for (struct sub *o = jt.subs; o; o = o->next)
        held += o->client == client;
    if (held < cap) {
        s->next = jt.subs;
        jt.subs = s;
    }
    pthread_mutex_unlock(&jt.sub_lock);
    if (held >= cap) {
        free(s);
        log_warn("api: %s: core.subscribe refused: %u %s is the limit (%s)", api_call_peer(call),
                 cap, limit_what(LIMIT_SUBSCRIPTIONS), limit_flag(LIMIT_SUBSCRIPTIONS));
        return api_error(call, EDQUOT, "limit reached: at most %u %s (%s)", cap,
                         limit_what(LIMIT_SUBSCRIPTIONS), limit_flag(LIMIT_SUBSCRIPTIONS));
    }
    *result = json_string(s->id);
    return 0;
}

static int core_unsubscribe(struct api_call *call, json_t *params, json_t **result)
{
    json_t *jid = api_param(params, 0); /* a string: the dispatcher checked it */
    struct api_client *client = api_call_client(call);
    bool found = false;
    pthread_mutex_lock(&jt.sub_lock);
    for (struct sub **p = &jt.subs; *p; p = &(*p)->next) {
        if ((*p)->client == client && strcmp((*p)->id, json_string_value(jid)) == 0) {
            struct sub *dead = *p;
            *p = dead->next;
            free(dead);
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&jt.sub_lock);
    if (!found)
        return api_error(call, ENOENT, "no subscription %.64s on this connection",
                         json_string_value(jid));
    *result = json_null();
    return 0;
}

static const struct api_field option_fields[] = {
    {.name = "legacy_jobs", .type = API_T_BOOL},
};

static int core_set_options(struct api_call *call, json_t *params, json_t **result)
{
    json_t *o = api_param(params, 0); /* checked against option_fields by the dispatcher */
    json_t *lj = json_object_get(o, "legacy_jobs");
    struct api_client *client = api_call_client(call);
    if (lj && client)
        client->jobs_wait = !json_is_true(lj);
    *result = json_null();
    return 0;
}

static const struct api_arg query_args[] = {API_ARG_QUERY};
static const struct api_arg job_wait_args[] = {
    {.name = "id", .type = API_T_INT, .flags = API_ARG_TYPE_MSG}};
static const struct api_arg bulk_args[] = {
    {.name = "method", .type = API_T_ANY},
    {.name = "params", .type = API_T_ANY},
    {.name = "description", .type = API_T_ANY, .flags = API_ARG_OPTIONAL}};
static const struct api_arg subscribe_args[] = {
    {.name = "event", .type = API_T_STRING, .flags = API_ARG_TYPE_MSG}};
static const struct api_arg unsubscribe_args[] = {
    {.name = "id", .type = API_T_STRING, .flags = API_ARG_TYPE_MSG}};
static const struct api_arg set_options_args[] = {API_ARG_OBJECT("options", option_fields, 0)};

static const struct api_method job_methods[] = {
    {"core.get_jobs", NULL, "Recent and running jobs (query filters/options).", core_get_jobs,
     API_READ, API_ARGS(query_args)},
    {"core.job_wait", NULL, "A job that waits for job id and returns its result.", core_job_wait,
     API_WAITS | API_READ, API_ARGS(job_wait_args)},
    {"core.bulk", NULL,
     "A job that calls method once per params list (params: [[params]...]); result [{job_id, "
     "result, error}].",
     core_bulk, API_READ, API_ARGS(bulk_args)},
    {"core.subscribe", NULL,
     "Receive collection_update notifications for jobs (event \"core.get_jobs\"); returns the "
     "subscription id.",
     core_subscribe, API_READ, API_ARGS(subscribe_args)},
    {"core.unsubscribe", NULL, "End a subscription.", core_unsubscribe, API_READ,
     API_ARGS(unsubscribe_args)},
    {"core.set_options", NULL,
     "Connection options: legacy_jobs=false makes job methods answer with their result.",
     core_set_options, API_READ, API_ARGS(set_options_args)},
};

void jobs_init(void)
{
    api_register(job_methods, ARRAY_SIZE(job_methods));
}
