/* The service registry and the service.* methods (see service.h). */
#include "api/service.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/jobs.h"
#include "api/validate.h"
#include "api/store.h"
#include "core/log.h"
#include "core/util.h"

struct service {
    const char *name;
    const struct service_ops *ops;
};

static struct service services[SERVICE_MAX];
static size_t nservices;
/* One service operation at a time: start/stop of one module must not
 * interleave with another call's restart of it. */
static pthread_mutex_t op_lock = PTHREAD_MUTEX_INITIALIZER;

int service_register(const char *name, const struct service_ops *ops)
{
    for (size_t i = 0; i < nservices; i++)
        if (strcmp(services[i].name, name) == 0)
            return -EEXIST;
    if (nservices == SERVICE_MAX || !ops || !ops->start || !ops->stop || !ops->running)
        return -ENOSPC;
    services[nservices].name = name;
    services[nservices].ops = ops;
    nservices++;
    return 0;
}

static struct service *service_find(const char *name)
{
    for (size_t i = 0; i < nservices; i++)
        if (strcmp(services[i].name, name) == 0)
            return &services[i];
    return NULL;
}

/* Stored enable flag (default true, also when it cannot be read). */
static bool service_enabled(const struct service *s)
{
    return api_store()->service_enable_get(s->name) != 0;
}

static json_t *service_row(const struct service *s)
{
    bool running = s->ops->running();
    return json_pack("{s:I, s:s, s:b, s:s, s:[]}", "id", (json_int_t)(s - services + 1), "service",
                     s->name, "enable", service_enabled(s), "state",
                     running ? "RUNNING" : "STOPPED", "pids");
}

static int svc_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = json_array();
    for (size_t i = 0; i < nservices; i++)
        json_array_append_new(rows, service_row(&services[i]));
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

/* The service argument (api_arg check): names a registered service, else
 * the -32602 error; the dispatcher runs it before the handler. */
static int service_arg_check(struct api_call *call, json_t *jn)
{
    char field[96];
    snprintf(field, sizeof(field), "%s.service", api_call_method(call));
    if (!json_is_string(jn)) {
        api_verr(call, field, EINVAL, "Input should be a valid string");
        return -1;
    }
    if (!service_find(json_string_value(jn))) {
        /* TrueNAS's NVMe-oF service, registered when the configuration
         * starts (nvme_config_start): named, so a client learns why */
        if (strcmp(json_string_value(jn), "nvmet") == 0) {
            api_error(call, ENOTSUP, "service nvmet: the NVMe-oF target is not started");
            return -1;
        }
        api_verr(call, field, ENOENT, "Unknown service %.64s (known: iscsitarget, nbd, nvmet)",
                 json_string_value(jn));
        return -1;
    }
    return 0;
}

/* params[0], already checked by service_arg_check. */
static struct service *param_service(json_t *params)
{
    return service_find(json_string_value(api_param(params, 0)));
}

static const struct api_field control_fields[] = {
    {.name = "ha_propagate", .type = API_T_BOOL},
    {.name = "silent", .type = API_T_BOOL},
    {.name = "timeout", .type = API_T_INT, .flags = API_NULLABLE},
};

enum verb { VERB_START, VERB_STOP, VERB_RESTART, VERB_RELOAD };
static const char *const verb_names[] = {"start", "stop", "restart", "reload"};

/* Run verb on s (one operation at a time); 0 or -errno, logged with peer. */
static int service_do(struct service *s, enum verb verb, const char *peer)
{
    pthread_mutex_lock(&op_lock);
    int rc = 0;
    bool running = s->ops->running();
    switch (verb) {
    case VERB_START:
        if (!running)
            rc = s->ops->start();
        break;
    case VERB_STOP:
        if (running)
            rc = s->ops->stop();
        break;
    case VERB_RESTART:
        if (running)
            rc = s->ops->stop();
        if (rc == 0)
            rc = s->ops->start();
        break;
    case VERB_RELOAD:
        if (s->ops->reload)
            rc = s->ops->reload();
        break;
    }
    pthread_mutex_unlock(&op_lock);
    if (rc < 0) {
        log_warn("api: %s: service %s %s failed: %s", peer, verb_names[verb], s->name,
                 strerror(-rc));
        return rc;
    }
    log_info("api: %s: service %s %s", peer, s->name,
             verb == VERB_STOP     ? "stopped"
             : verb == VERB_RELOAD ? "reloaded"
                                   : "started");
    return 0;
}

/* options.silent (default true: a failure answers false, not an error). */
static bool option_silent(json_t *opts)
{
    json_t *js = json_object_get(opts, "silent");
    return js ? json_is_true(js) : true;
}

static int svc_control(struct api_call *call, json_t *params, json_t **result, enum verb verb)
{
    struct service *s = param_service(params);
    int rc = service_do(s, verb, api_call_peer(call));
    if (rc < 0 && !option_silent(api_param(params, 1)))
        return api_error(call, rc, "Failed to %s %s: %s", verb_names[verb], s->name, strerror(-rc));
    *result = json_boolean(rc == 0);
    return 0;
}

/* service.control's job: the verb, and how a failure ends it. */
struct control_job {
    struct service *s;
    enum verb verb;
    bool silent;
    char peer[96];
};

static int control_work(struct job *job, void *arg, json_t **result)
{
    struct control_job *cj = arg;
    int rc = service_do(cj->s, cj->verb, cj->peer);
    if (rc < 0 && !cj->silent)
        return jobs_fail(job, rc, "Failed to %s %s: %s", verb_names[cj->verb], cj->s->name,
                         strerror(-rc));
    *result = json_boolean(rc == 0);
    return 0;
}

/* service.control [verb, service, options] (TrueNAS 25.10): a job whose
 * result is what service.<verb> answers. */
static int svc_control_job(struct api_call *call, json_t *params, json_t **result)
{
    static const char *const verbs[] = {"START", "STOP", "RESTART", "RELOAD"};
    const char *v = json_string_value(api_param(params, 0));
    struct control_job *cj = calloc(1, sizeof(*cj));
    if (!cj)
        return api_error(call, ENOMEM, "out of memory");
    for (size_t i = 0; i < ARRAY_SIZE(verbs); i++)
        if (strcmp(v, verbs[i]) == 0)
            cj->verb = (enum verb)i;
    cj->s = service_find(json_string_value(api_param(params, 1)));
    cj->silent = option_silent(api_param(params, 2));
    snprintf(cj->peer, sizeof(cj->peer), "%s", api_call_peer(call));
    char what[96];
    snprintf(what, sizeof(what), "%s %s", v, cj->s->name);
    return jobs_submit(call, params, what, control_work, cj, free, result);
}

static int svc_start(struct api_call *call, json_t *params, json_t **result)
{
    return svc_control(call, params, result, VERB_START);
}
static int svc_stop(struct api_call *call, json_t *params, json_t **result)
{
    return svc_control(call, params, result, VERB_STOP);
}
static int svc_restart(struct api_call *call, json_t *params, json_t **result)
{
    return svc_control(call, params, result, VERB_RESTART);
}
static int svc_reload(struct api_call *call, json_t *params, json_t **result)
{
    return svc_control(call, params, result, VERB_RELOAD);
}

static int svc_started(struct api_call *call, json_t *params, json_t **result)
{
    (void)call;
    struct service *s = param_service(params);
    *result = json_boolean(s->ops->running());
    return 0;
}

static const struct api_field update_fields[] = {
    {.name = "enable", .type = API_T_BOOL, .flags = API_REQUIRED},
};

/* A service by its id (1-based) or name; NULL if there is none. */
static struct service *service_by_id_or_name(json_t *jid)
{
    if (json_is_integer(jid)) {
        json_int_t i = json_integer_value(jid);
        if (i >= 1 && (size_t)i <= nservices)
            return &services[i - 1];
    } else if (json_is_string(jid)) {
        return service_find(json_string_value(jid));
    }
    return NULL;
}

/* The id_or_name argument (api_arg check): ENOENT before the data is
 * looked at, as TrueNAS answers. */
static int service_id_check(struct api_call *call, json_t *jid)
{
    if (!service_by_id_or_name(json_is_null(jid) ? NULL : jid))
        return api_error(call, ENOENT, "Service not found");
    return 0;
}

/* service.update [id_or_name, {enable}] → id */
static int svc_update(struct api_call *call, json_t *params, json_t **result)
{
    struct service *s = service_by_id_or_name(api_param(params, 0));
    json_t *data = api_param(params, 1);
    bool on = json_is_true(json_object_get(data, "enable"));
    int rc = api_store()->service_enable_put(s->name, s - services + 1, on);
    if (rc < 0)
        return api_error(call, rc, "cannot store the service setting");
    *result = json_integer(s - services + 1);
    return 0;
}

void service_apply_enabled(void)
{
    for (size_t i = 0; i < nservices; i++) {
        struct service *s = &services[i];
        if (!service_enabled(s) && s->ops->running()) {
            log_info("service %s is disabled (service.update enable=false); stopping it", s->name);
            int rc = s->ops->stop();
            if (rc < 0)
                log_warn("service %s: stop failed: %s", s->name, strerror(-rc));
        }
    }
}

static const struct api_arg query_args[] = {API_ARG_QUERY};
static const struct api_arg started_args[] = {
    {.name = "service", .type = API_T_STRING, .check = service_arg_check}};
/* One table per verb: the options' errors name the method
 * ("service.start.options.silent"). */
#define CONTROL_ARGS(verb)                                                                         \
    static const struct api_arg verb##_args[] = {                                                  \
        {.name = "service", .type = API_T_STRING, .check = service_arg_check},                     \
        {.name = "options",                                                                        \
         .type = API_T_OBJECT,                                                                     \
         .flags = API_ARG_OPTIONAL,                                                                \
         .fields = control_fields,                                                                 \
         .nfields = ARRAY_SIZE(control_fields),                                                    \
         .prefix = "service." #verb ".options"}}
CONTROL_ARGS(start);
CONTROL_ARGS(stop);
CONTROL_ARGS(restart);
CONTROL_ARGS(reload);
static const char *const control_verbs[] = {"START", "STOP", "RESTART", "RELOAD", NULL};
static const struct api_field control_verb_field = {.type = API_T_ENUM, .choices = control_verbs};
/* The verb is checked as a one-field object would be: "service.control.verb". */
static int control_verb_check(struct api_call *call, json_t *v)
{
    return api_validate_value(call, "service.control.verb", v, &control_verb_field) < 0 ? -1 : 0;
}
static const struct api_arg control_args[] = {
    {.name = "verb", .type = API_T_ENUM, .check = control_verb_check},
    {.name = "service", .type = API_T_STRING, .check = service_arg_check},
    {.name = "options",
     .type = API_T_OBJECT,
     .flags = API_ARG_OPTIONAL,
     .fields = control_fields,
     .nfields = ARRAY_SIZE(control_fields),
     .prefix = "service.control.options"}};
static const struct api_arg update_args[] = {
    {.name = "id_or_name", .type = API_T_ANY, .check = service_id_check},
    API_ARG_OBJECT("data", update_fields, 0)};

static const struct api_method service_methods[] = {
    {"service.query", NULL, "Services with their state (RUNNING/STOPPED).", svc_query, API_READ,
     API_ARGS(query_args)},
    {"service.started", NULL, "Whether a service runs.", svc_started, API_READ,
     API_ARGS(started_args)},
    {"service.start", NULL, "Open the service's listeners.", svc_start, API_ADMIN,
     API_ARGS(start_args)},
    {"service.stop", NULL, "Close the service's listeners and sessions.", svc_stop, API_ADMIN,
     API_ARGS(stop_args)},
    {"service.restart", NULL, "Stop then start a service.", svc_restart, API_ADMIN,
     API_ARGS(restart_args)},
    {"service.reload", NULL,
     "Apply pending configuration (iscsitarget: every deferred change, as one generation).",
     svc_reload, API_ADMIN, API_ARGS(reload_args)},
    {"service.control", NULL,
     "START, STOP, RESTART or RELOAD a service, as a job (TrueNAS 25.10); its result is "
     "what service.<verb> answers",
     svc_control_job, API_ADMIN, API_ARGS(control_args)},
    {"service.update", NULL, "Whether the service starts with blockd.", svc_update, API_ADMIN,
     API_ARGS(update_args)},
};

void service_init(void)
{
    api_register(service_methods, ARRAY_SIZE(service_methods));
}
