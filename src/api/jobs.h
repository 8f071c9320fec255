/*
 * Jobs: long or batched operations recorded with progress, state and
 * result, visible through core.get_jobs and announced to subscribers of
 * "core.get_jobs" as collection_update notifications
 * ({"jsonrpc":"2.0","method":"collection_update","params":{"msg":
 * "added"|"changed"|"removed","collection":"core.get_jobs","id":N,
 * "fields":{job}}}).
 *
 * Two ways to run one, as TrueNAS does:
 *  - jobs_submit(): a TrueNAS "@job" method (core.bulk, core.job_wait).
 *    Like TrueNAS's default ("legacy_jobs"), the call answers at once with
 *    the integer job id and the work runs on its own thread; a client that
 *    sent core.set_options [{"legacy_jobs": false}] (and a trusted local
 *    call without a client) instead gets the job's result as the answer,
 *    the work running on the calling thread.
 *  - jobs_run(): a plain method whose work is long (a clone that must copy,
 *    a recursive delete): the call stays synchronous and returns the
 *    result as usual, but the work is also recorded as a job so that
 *    core.get_jobs shows its progress meanwhile.
 *
 * Job dict (TrueNAS shape): {id, method, arguments, description,
 * transient:false, abortable:false, logs_path:null, logs_excerpt:null,
 * progress:{percent, description, extra}, result, result_encoding_error,
 * error, exception, exc_info:{repr,type,errno,extra}|null, state:
 * RUNNING|SUCCESS|FAILED, time_started:{$date}, time_finished:{$date}|null,
 * message_ids:[]}.
 *
 * The last JOBS_KEEP_FINISHED finished jobs are kept, within
 * JOBS_KEEP_BYTES; running jobs always.
 *
 * Rights: a job runs with its caller's identity (api.h struct
 * api_identity; core.bulk's calls too). Arguments are stored and results
 * shown redacted of secrets (api/redact.h); a FULL_ADMIN (or the local
 * socket) sees every job and its events, a narrower key only its own; a
 * subscription ends when its login does (logout, key revoked).
 * Thread-safe.
 */
#ifndef BLOCKD_API_JOBS_H
#define BLOCKD_API_JOBS_H

#include <jansson.h>
#include <stdint.h>

#include "api/api.h"

#define JOBS_KEEP_FINISHED 1000
/* Finished jobs are also dropped, oldest first (a log line says so),
 * while together they hold more than this (arguments, results, texts). */
#define JOBS_KEEP_BYTES (4u * 1024 * 1024)
#define JOBS_MAX_RUNNING 64

struct job;

/*
 * The work of a job. Runs on the calling thread (jobs_run, synchronous
 * jobs_submit) or on a job thread. Returns 0 with *result (a new reference,
 * NULL = null), or -1 after jobs_fail() (or, only under jobs_run, after an
 * api_error() on the original call).
 */
typedef int (*jobs_fn)(struct job *job, void *arg, json_t **result);

/*
 * Run fn(job, arg) now, on this thread, recorded as a job of call's method
 * with params as its arguments (borrowed; may be NULL). Returns 0 with
 * *result, or -1 with the error set on call. description may be NULL.
 */
int jobs_run(struct api_call *call, json_t *params, const char *description, jobs_fn fn, void *arg,
             json_t **result);

/*
 * A job method: see above. arg is freed with arg_free (may be NULL) after
 * fn returns, on whichever thread ran it. Returns 0 with *result (the id,
 * or the job's result), or -1 with the error set on call (and arg freed).
 */
int jobs_submit(struct api_call *call, json_t *params, const char *description, jobs_fn fn,
                void *arg, void (*arg_free)(void *), json_t **result);

/* Progress from inside fn: percent 0..100 and a description (printf). */
void jobs_progress(struct job *job, int percent, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fail the job from inside fn with an errno and message; returns -1. */
int jobs_fail(struct job *job, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int64_t jobs_id(const struct job *job);
/* Who started the job (its call's identity): work that calls methods on
 * the job's behalf passes it to api_call_method_as. Valid while fn runs. */
const struct api_identity *jobs_identity(const struct job *job);

/*
 * Register core.get_jobs, core.job_wait, core.bulk, core.subscribe,
 * core.unsubscribe, core.set_options. Start-up only.
 */
void jobs_init(void);

/* Wait for every job thread to finish (daemon shutdown, after the API
 * transports stopped and before the modules and the DB close). */
void jobs_stop(void);

/*
 * A transport's client is going away: drop its subscriptions. After this
 * returns no event is sent to it. Call before freeing the client.
 */
void jobs_client_closed(struct api_client *client);

/*
 * A credential was revoked or changed (api_key.delete, api_key.update of
 * roles, an account's password changed or deleted): end every
 * subscription made under a credential that no longer stands, before
 * returning. Called by api_auth_sessions_changed(). Any API thread; takes
 * the DB lock, so not under the job or subscription locks.
 */
void jobs_credentials_changed(void);

#endif
