/*
 * Jobs (src/api/jobs.c): jobs_run records a synchronous call with its
 * progress and outcome; job methods return an id (legacy_jobs) or their
 * result (legacy_jobs off / local calls); core.bulk returns per-call
 * results and errors; core.job_wait; core.get_jobs filters; subscribers
 * get collection_update added/changed events and none after they close.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/api.h"
#include "api/jobs.h"

/* ---- a test method that uses jobs_run ---- */

/* mode 0: succeeds; 1: fails (jobs_fail); 2: a field error on the call */
struct copy_arg {
    int mode;
    struct api_call *call;
};

static int slow_work(struct job *job, void *arg, json_t **result)
{
    struct copy_arg *a = arg;
    jobs_progress(job, 10, "copying %d", 1);
    jobs_progress(job, 60, "copying %d", 2);
    if (a->mode == 1)
        return jobs_fail(job, ENOSPC, "pool is full");
    if (a->mode == 2) {
        api_verr(a->call, "test.copy.mode", EINVAL, "not a mode");
        return api_invalid(a->call);
    }
    *result = json_pack("{s:i}", "copied", 2);
    return 0;
}

static int test_copy(struct api_call *call, json_t *params, json_t **result)
{
    struct copy_arg a = {(int)json_integer_value(api_param(params, 0)), call};
    return jobs_run(call, params, "test copy", slow_work, &a, result);
}

/* A job whose result is a string of params[0] bytes (job history bound). */
static int big_work(struct job *job, void *arg, json_t **result)
{
    size_t n = *(size_t *)arg;
    char *text = malloc(n + 1);
    if (!text)
        return jobs_fail(job, ENOMEM, "no memory");
    memset(text, 'x', n);
    text[n] = 0;
    *result = json_string(text);
    free(text);
    return 0;
}

static int test_big(struct api_call *call, json_t *params, json_t **result)
{
    size_t n = (size_t)json_integer_value(api_param(params, 0));
    return jobs_run(call, params, "big result", big_work, &n, result);
}

static int gate_open;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

static int gated_work(struct job *job, void *arg, json_t **result)
{
    pthread_mutex_lock(&gate_lock);
    while (!gate_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    *result = json_string("done");
    return 0;
}

static int test_gated(struct api_call *call, json_t *params, json_t **result)
{
    return jobs_submit(call, params, NULL, gated_work, NULL, NULL, result);
}

static const struct api_method test_methods[] = {
    {"test.copy", "[mode]", "jobs_run", test_copy, API_READ},
    {"test.gated", "[]", "jobs_submit that waits for the test", test_gated, API_READ},
    {"test.big", "[bytes]", "jobs_run with a result of that many bytes", test_big, API_READ},
};

/* ---- a fake transport client that records what it is sent ---- */

static pthread_mutex_t sent_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *sent;

static int record_send(struct api_client *c, json_t *msg)
{
    pthread_mutex_lock(&sent_lock);
    json_array_append(sent, msg);
    pthread_mutex_unlock(&sent_lock);
    return 0;
}

static json_t *rpc(struct api_client *client, const char *method, const char *params)
{
    char req[2048];
    snprintf(req, sizeof(req), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
             method, params);
    char *resp = api_handle_text_client(req, strlen(req), client);
    assert_non_null(resp);
    json_t *r = json_loads(resp, 0, NULL);
    free(resp);
    assert_non_null(r);
    return r;
}

static json_t *get_job(struct api_client *c, json_int_t id)
{
    char p[128];
    snprintf(p, sizeof(p), "[[[\"id\",\"=\",%lld]],{\"get\":true}]", (long long)id);
    json_t *r = rpc(c, "core.get_jobs", p);
    json_t *job = json_incref(json_object_get(r, "result"));
    json_decref(r);
    assert_non_null(job);
    return job;
}

static const char *state_of(json_t *job)
{
    return json_string_value(json_object_get(job, "state"));
}

static void test_run_sync(void **st)
{
    struct api_client c = {.peer = "t", .authenticated = true, .local = true};
    json_t *r = rpc(&c, "test.copy", "[0]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "result"), "copied")),
                     2);
    json_decref(r);
    r = rpc(&c, "core.get_jobs", "[[[\"method\",\"=\",\"test.copy\"]]]");
    json_t *jobs = json_object_get(r, "result");
    assert_int_equal(json_array_size(jobs), 1);
    json_t *job = json_array_get(jobs, 0);
    assert_string_equal(state_of(job), "SUCCESS");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(job, "progress"), "percent")), 100);
    assert_string_equal(json_string_value(json_object_get(job, "description")), "test copy");
    assert_non_null(json_object_get(json_object_get(job, "time_finished"), "$date"));
    json_decref(r);

    /* failure: the call fails with the job's error, the job says FAILED */
    r = rpc(&c, "test.copy", "[1]");
    json_t *e = json_object_get(r, "error");
    assert_non_null(e);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "data"), "error")),
                     ENOSPC);
    assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "pool is full"));
    json_decref(r);
    r = rpc(&c, "core.get_jobs", "[[[\"state\",\"=\",\"FAILED\"]]]");
    job = json_array_get(json_object_get(r, "result"), 0);
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "error")), "[ENOSPC] pool is full");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(job, "exc_info"), "errno")),
                     ENOSPC);
    json_decref(r);

    /* a field error: the job says it as TrueNAS does (VALIDATION, extra) */
    r = rpc(&c, "test.copy", "[2]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                     API_INVALID_PARAMS);
    json_decref(r);
    r = rpc(&c, "core.get_jobs", "[[[\"state\",\"=\",\"FAILED\"]], {\"order_by\": [\"-id\"]}]");
    job = json_array_get(json_object_get(r, "result"), 0);
    assert_string_equal(json_string_value(json_object_get(job, "error")),
                        "[EINVAL] test.copy.mode: not a mode");
    json_t *exc = json_object_get(job, "exc_info");
    assert_string_equal(json_string_value(json_object_get(exc, "type")), "VALIDATION");
    assert_int_equal(json_integer_value(json_object_get(exc, "errno")), EINVAL);
    assert_string_equal(
        json_string_value(json_array_get(json_array_get(json_object_get(exc, "extra"), 0), 0)),
        "test.copy.mode");
    json_decref(r);
}

static void test_bulk(void **st)
{
    struct api_client c = {.peer = "t", .authenticated = true, .local = true, .jobs_wait = true};
    /* legacy_jobs off: the answer is the per-call list */
    json_t *r = rpc(&c, "core.bulk", "[\"core.ping\", [[], [1], []], \"pings\"]");
    json_t *res = json_object_get(r, "result");
    assert_int_equal(json_array_size(res), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(res, 0), "result")),
                        "pong");
    assert_true(json_is_null(json_object_get(json_array_get(res, 0), "error")));
    assert_true(json_is_null(json_object_get(json_array_get(res, 0), "job_id")));
    assert_non_null(
        strstr(json_string_value(json_object_get(json_array_get(res, 1), "error")), "EINVAL"));
    assert_true(json_is_null(json_object_get(json_array_get(res, 1), "result")));
    json_decref(r);

    /* bad shapes are validation errors */
    r = rpc(&c, "core.bulk", "[\"core.ping\", [1]]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                     -32602);
    json_decref(r);
    r = rpc(&c, "core.bulk", "[\"no.such\", [[]]]");
    assert_non_null(json_object_get(r, "error"));
    json_decref(r);

    /* legacy (default): the id at once; core.job_wait returns another job */
    c.jobs_wait = false;
    r = rpc(&c, "core.bulk", "[\"core.ping\", [[], []]]");
    json_int_t id = json_integer_value(json_object_get(r, "result"));
    assert_true(id > 0);
    json_decref(r);
    c.jobs_wait = true;
    char p[64];
    snprintf(p, sizeof(p), "[%lld]", (long long)id);
    r = rpc(&c, "core.job_wait", p);
    res = json_object_get(r, "result");
    assert_int_equal(json_array_size(res), 2);
    json_decref(r);
    json_t *job = get_job(&c, id);
    assert_string_equal(state_of(job), "SUCCESS");
    json_decref(job);
    r = rpc(&c, "core.job_wait", "[987654]");
    assert_non_null(json_object_get(r, "error"));
    json_decref(r);
}

static void test_events(void **st)
{
    sent = json_array();
    struct api_client c = {.peer = "ev", .authenticated = true, .local = true};
    c.send = record_send;
    c.closes_notified = true;
    struct api_client nosend = {.peer = "plain", .authenticated = true, .local = true};
    json_t *r = rpc(&nosend, "core.subscribe", "[\"core.get_jobs\"]");
    assert_non_null(json_object_get(r, "error")); /* cannot receive events */
    json_decref(r);
    r = rpc(&c, "core.subscribe", "[\"nope\"]");
    assert_non_null(json_object_get(r, "error"));
    json_decref(r);
    r = rpc(&c, "core.subscribe", "[\"core.get_jobs\"]");
    char sub[64];
    snprintf(sub, sizeof(sub), "[\"%s\"]", json_string_value(json_object_get(r, "result")));
    json_decref(r);

    /* a job that runs until we let it go */
    gate_open = 0;
    r = rpc(&c, "test.gated", "[]");
    json_int_t id = json_integer_value(json_object_get(r, "result"));
    json_decref(r);
    json_t *job = get_job(&c, id);
    assert_string_equal(state_of(job), "RUNNING");
    json_decref(job);
    pthread_mutex_lock(&gate_lock);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
    c.jobs_wait = true;
    char p[64];
    snprintf(p, sizeof(p), "[%lld]", (long long)id);
    r = rpc(&c, "core.job_wait", p);
    assert_string_equal(json_string_value(json_object_get(r, "result")), "done");
    json_decref(r);

    bool added = false, success = false;
    pthread_mutex_lock(&sent_lock);
    size_t i;
    json_t *m;
    json_array_foreach(sent, i, m)
    {
        assert_string_equal(json_string_value(json_object_get(m, "method")), "collection_update");
        json_t *pr = json_object_get(m, "params");
        assert_string_equal(json_string_value(json_object_get(pr, "collection")), "core.get_jobs");
        if (json_integer_value(json_object_get(pr, "id")) != id)
            continue;
        const char *msg = json_string_value(json_object_get(pr, "msg"));
        json_t *fields = json_object_get(pr, "fields");
        if (strcmp(msg, "added") == 0)
            added = true;
        if (strcmp(msg, "changed") == 0 && strcmp(state_of(fields), "SUCCESS") == 0)
            success = true;
    }
    size_t before = json_array_size(sent);
    pthread_mutex_unlock(&sent_lock);
    assert_true(added);
    assert_true(success);

    /* unsubscribe stops events; closing drops the rest */
    r = rpc(&c, "core.unsubscribe", sub);
    assert_true(json_is_null(json_object_get(r, "result")));
    json_decref(r);
    r = rpc(&c, "core.unsubscribe", sub);
    assert_non_null(json_object_get(r, "error"));
    json_decref(r);
    r = rpc(&c, "core.subscribe", "[\"core.get_jobs\"]");
    json_decref(r);
    jobs_client_closed(&c);
    struct api_client other = {
        .peer = "o", .authenticated = true, .local = true, .jobs_wait = true};
    r = rpc(&other, "test.copy", "[0]");
    json_decref(r);
    pthread_mutex_lock(&sent_lock);
    assert_int_equal(json_array_size(sent), before);
    pthread_mutex_unlock(&sent_lock);
    json_decref(sent);
}

static void test_set_options(void **st)
{
    struct api_client c = {.peer = "t", .authenticated = true, .local = true};
    json_t *r = rpc(&c, "core.set_options", "[{\"legacy_jobs\": false}]");
    assert_true(json_is_null(json_object_get(r, "result")));
    json_decref(r);
    assert_true(c.jobs_wait);
    r = rpc(&c, "core.set_options", "[{\"legacy_jobs\": \"no\"}]");
    assert_non_null(json_object_get(r, "error"));
    json_decref(r);
    r = rpc(&c, "core.set_options", "[{\"legacy_jobs\": true}]");
    json_decref(r);
    assert_false(c.jobs_wait);
}

/* Which calls a transport may run on its I/O thread: never one that can
 * wait on other calls or jobs, never when unsure. */
static bool brief(const struct api_client *c, const char *text)
{
    json_t *req = json_loads(text, JSON_DECODE_ANY, NULL); /* NULL if it does not parse */
    bool r = api_request_runs_briefly(req, c);
    json_decref(req);
    return r;
}

static void test_runs_briefly(void **st)
{
    struct api_client c = {.peer = "t", .authenticated = true, .local = true};
    assert_true(brief(&c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"core.get_jobs\"}"));
    assert_true(brief(&c, " {\"id\":1, \"method\" : \"core.ping\", \"params\":[]}"));
    assert_false(brief(&c, "{\"id\":1,\"method\":\"core.job_wait\",\"params\":[1]}"));
    assert_false(brief(&c, "[{\"id\":1,\"method\":\"core.ping\"}]"));    /* batch */
    assert_false(brief(&c, "{\"id\":1,\"method\":\"no.such.method\"}")); /* error path */
    assert_false(
        brief(&c, "{\"id\":1,\"method\":\"core.job\\u005fwait\"}")); /* core.job_wait, escaped */
    assert_false(
        brief(&c, "{\"params\":[{\"method\":\"core.ping\"}],\"method\":\"core.job_wait\"}"));
    assert_false(brief(&c, "{\"id\":1}")); /* no method */
    assert_false(brief(&c, "{\"id\":1,\"method\":"));
    assert_false(brief(&c, "not json"));
    c.jobs_wait = true; /* its job methods wait for the job */
    assert_false(brief(&c, "{\"id\":1,\"method\":\"core.get_jobs\"}"));
}

/* Finished jobs are bounded in bytes: after more than JOBS_KEEP_BYTES of
 * results, the oldest big jobs are gone and the newest is kept. */
static void test_history_bytes(void **st)
{
    struct api_client c = {.peer = "t", .authenticated = true, .local = true};
    size_t each = JOBS_KEEP_BYTES / 4;
    char p[64];
    snprintf(p, sizeof(p), "[%zu]", each);
    json_int_t first = 0, last = 0;
    for (int i = 0; i < 6; i++) {
        json_decref(rpc(&c, "test.big", p));
        json_t *r = rpc(&c, "core.get_jobs",
                        "[[[\"method\",\"=\",\"test.big\"]],{\"order_by\":[\"-id\"],"
                        "\"limit\":1,\"select\":[\"id\"]}]");
        last = json_integer_value(
            json_object_get(json_array_get(json_object_get(r, "result"), 0), "id"));
        json_decref(r);
        if (i == 0)
            first = last;
    }
    json_t *r =
        rpc(&c, "core.get_jobs", "[[[\"method\",\"=\",\"test.big\"]],{\"select\":[\"id\"]}]");
    json_t *rows = json_object_get(r, "result");
    assert_true(json_array_size(rows) >= 1 && json_array_size(rows) < 4);
    size_t i;
    json_t *row;
    bool has_last = false;
    json_array_foreach(rows, i, row)
    {
        assert_true(json_integer_value(json_object_get(row, "id")) != first);
        has_last |= json_integer_value(json_object_get(row, "id")) == last;
    }
    assert_true(has_last);
    json_decref(r);
}

int main(void)
{
    jobs_init();
    api_register(test_methods, sizeof(test_methods) / sizeof(test_methods[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_sync),     cmocka_unit_test(test_bulk),
        cmocka_unit_test(test_events),       cmocka_unit_test(test_set_options),
        cmocka_unit_test(test_runs_briefly), cmocka_unit_test(test_history_bytes),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    jobs_stop();
    return rc;
}
