/*
 * JSON-RPC 2.0 request handling and the method registry.
 *
 * The registry is filled at start-up (api_register) and read-only after,
 * so lookups from the per-connection API threads need no lock. Requests
 * are validated here once, before dispatch; handlers only see well-formed
 * calls with params as an array.
 */
#include "api/api.h"
#include "api/apistats.h"
#include "api/api_internal.h"
#include "api/redact.h"
#include "api/auth.h"
#include "api/jsonw.h"
#include "api/callmem.h"
#include "api/validate.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/log.h"
#include "core/reactor.h"

/* ---- registry ---- */

static const struct api_method **registry;
static size_t registry_count;
static size_t registry_cap;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

static int method_cmp(const void *a, const void *b)
{
    const struct api_method *const *ma = a;
    const struct api_method *const *mb = b;
    return strcmp((*ma)->name, (*mb)->name);
}

static void register_locked(const struct api_method *methods, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const struct api_method *m = &methods[i];
        if (!m->name || !m->fn) {
            log_error("api: method table entry %zu has no name or handler; ignored", i);
            continue;
        }
        unsigned access = m->flags & API_ACCESS_MASK;
        if (access == 0 || (access & (access - 1)) != 0) {
            /* A method that does not say what it needs would be reachable
             * by whichever rule guessed: refuse to start instead. */
            log_error("api: method %s declares %s of API_READ, API_SHARE, API_ADMIN", m->name,
                      access ? "more than one" : "none");
            abort();
        }
        bool dup = false;
        for (size_t j = 0; j < registry_count; j++) {
            if (strcmp(registry[j]->name, m->name) == 0) {
                dup = true;
                break;
            }
        }
        if (dup) {
            log_error("api: method %s registered twice; keeping the first", m->name);
            continue;
        }
        if (registry_count == registry_cap) {
            size_t ncap = registry_cap ? registry_cap * 2 : 64;
            const struct api_method **n = realloc(registry, ncap * sizeof(*n));
            if (!n) {
                log_error("api: out of memory registering %s", m->name);
                return;
            }
            registry = n;
            registry_cap = ncap;
        }
        registry[registry_count++] = m;
    }
    qsort(registry, registry_count, sizeof(*registry), method_cmp);
}

static void builtins_register(void)
{
    register_locked(api_core_methods, api_core_method_count);
}

void api_register(const struct api_method *methods, size_t count)
{
    pthread_once(&builtins_once, builtins_register);
    register_locked(methods, count);
}

const struct api_method *api_find(const char *name)
{
    pthread_once(&builtins_once, builtins_register);
    if (!name)
        return NULL;
    size_t lo = 0, hi = registry_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, registry[mid]->name);
        if (c == 0)
            return registry[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

bool api_request_runs_briefly(const json_t *req, const struct api_client *client)
{
    if (!json_is_object(req) || (client && client->jobs_wait))
        return false; /* a batch or not a request; or job methods that wait for their jobs */
    const struct api_method *m = api_find(json_string_value(json_object_get(req, "method")));
    return m && !(m->flags & API_WAITS);
}

size_t api_methods(const struct api_method ***out)
{
    pthread_once(&builtins_once, builtins_register);
    *out = registry;
    return registry_count;
}

/* ---- calls and errors ---- */

struct api_call {
    const char *method;
    const char *peer;
    struct api_client *client; /* the transport's, or NULL (bulk item, internal call) */
    struct api_identity who;   /* whose rights the call runs with */
    int code;                  /* 0 = no error set yet */
    int errnum;                /* positive errno for API_CALL_ERROR */
    char *message;             /* malloc'd */
    json_t *verrs;             /* [[field, message, errno], …] or NULL */
};

const struct api_identity api_identity_internal = {
    .kind = API_CALLER_INTERNAL, .roles = API_ROLE_FULL, .name = "blockd"};

static const struct api_identity identity_local = {.kind = API_CALLER_LOCAL,
                                                   .roles = API_ROLE_FULL};

/* who: the caller's identity (copied); NULL: the client's (a call without
 * a client and without an identity is the local administrator's, which
 * only in-process entry points make). */
static void call_init(struct api_call *call, const char *method, const char *peer,
                      struct api_client *client, const struct api_identity *who)
{
    memset(call, 0, sizeof(*call));
    call->method = method;
    call->peer = peer ? peer : "local";
    call->client = client;
    if (who)
        call->who = *who;
    else if (client)
        api_auth_identity(client, &call->who);
    else
        call->who = identity_local;
}

const struct api_identity *api_call_identity(const struct api_call *call)
{
    return &call->who;
}

static const char *const role_names[] = {"READONLY_ADMIN", "SHARING_ADMIN", "FULL_ADMIN"};

const char *api_role_name(unsigned role)
{
    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++)
        if (role == 1u << i)
            return role_names[i];
    return "?";
}

unsigned api_role_parse(const char *name)
{
    for (size_t i = 0; name && i < sizeof(role_names) / sizeof(role_names[0]); i++)
        if (strcmp(name, role_names[i]) == 0)
            return 1u << i;
    return 0;
}

void api_roles_text(unsigned roles, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = 0;
    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++) {
        if (!(roles & (1u << i)) || used >= len)
            continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? "," : "", role_names[i]);
        used += w > 0 ? (size_t)w : 0;
    }
}

static void call_fini(struct api_call *call)
{
    free(call->message);
    json_decref(call->verrs);
}

struct api_call *api_call_internal_new(const char *method, const char *peer)
{
    struct api_call *call = malloc(sizeof(*call));

    if (call)
        call_init(call, method, peer, NULL, &api_identity_internal);
    return call;
}

struct api_call *api_call_as_new(const struct api_identity *who, const char *method,
                                 const char *peer)
{
    struct api_call *call = malloc(sizeof(*call));

    if (call)
        call_init(call, method, peer ? peer : "internal", NULL, who);
    return call;
}

static int call_allowed(struct api_call *call, const struct api_method *m);

int api_call_authorize(struct api_call *call)
{
    const struct api_method *m = api_find(call->method);

    if (!m)
        return api_error(call, EINVAL, "no method %s to check the rights of", call->method);
    return call_allowed(call, m);
}

void api_call_internal_free(struct api_call *call)
{
    if (!call)
        return;
    call_fini(call);
    free(call);
}

const char *api_errno_name(int errnum)
{
    if (errnum < 0)
        errnum = -errnum;
    /* glibc names 95 EOPNOTSUPP; TrueNAS (Python's errno.errorcode) and
     * its clients say ENOTSUP. */
    if (errnum == ENOTSUP)
        return "ENOTSUP";
    if (errnum == API_ENOTAUTHENTICATED)
        return "ENOTAUTHENTICATED"; /* TrueNAS's own errno, above the system's */
    const char *n = strerrorname_np(errnum);
    return n ? n : "EFAULT";
}

static char *vformat(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

int api_error(struct api_call *call, int errnum, const char *fmt, ...)
{
    if (call->code != 0)
        return -1; /* the first error is the cause; keep it */
    va_list ap;
    va_start(ap, fmt);
    char *msg = vformat(fmt, ap);
    va_end(ap);
    call->code = API_CALL_ERROR;
    call->errnum = errnum < 0 ? -errnum : errnum;
    if (call->errnum == 0)
        call->errnum = EFAULT;
    call->message = msg;
    return -1;
}

void api_verr(struct api_call *call, const char *field, int errnum, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = vformat(fmt, ap);
    va_end(ap);
    if (!call->verrs)
        call->verrs = json_array();
    if (errnum < 0)
        errnum = -errnum;
    json_array_append_new(call->verrs, json_pack("[s, s, i]", field ? field : "",
                                                 msg ? msg : "invalid", errnum ? errnum : EINVAL));
    free(msg);
}

bool api_has_verrs(const struct api_call *call)
{
    return call->verrs && json_array_size(call->verrs) > 0;
}

int api_invalid(struct api_call *call)
{
    if (call->code == 0)
        call->code = API_INVALID_PARAMS;
    return -1;
}

const char *api_call_peer(const struct api_call *call)
{
    return call->peer;
}

const char *api_call_method(const struct api_call *call)
{
    return call->method;
}

struct api_client *api_call_client(const struct api_call *call)
{
    return call->client;
}

int api_call_errno(const struct api_call *call)
{
    return call->code == API_CALL_ERROR ? call->errnum : call->code ? EINVAL : 0;
}

json_t *api_param(json_t *params, size_t index)
{
    if (!json_is_array(params))
        return NULL;
    json_t *v = json_array_get(params, index);
    return json_is_null(v) ? NULL : v;
}

/* ---- responses ---- */

static json_t *response_new(json_t *id)
{
    json_t *r = json_object();
    json_object_set_new(r, "jsonrpc", json_string("2.0"));
    json_object_set(r, "id", id ? id : json_null());
    return r;
}

static json_t *error_object(int code, const char *message, json_t *data)
{
    json_t *e = json_pack("{s:i, s:s}", "code", code, "message", message ? message : "");
    if (data)
        json_object_set_new(e, "data", data);
    return e;
}

json_t *api_error_data(int errnum, const char *reason, json_t *extra)
{
    if (errnum < 0)
        errnum = -errnum;
    return json_pack("{s:i, s:s, s:s, s:n, s:O?}", "error", errnum, "errname",
                     api_errno_name(errnum), "reason", reason ? reason : "", "trace", "extra",
                     extra);
}

json_t *api_error_response(int code, const char *message, json_t *id)
{
    json_t *r = response_new(id);
    json_object_set_new(r, "error", error_object(code, message, NULL));
    return r;
}

/* The error object for a failed call, in the TrueNAS shape (api.h). */
static json_t *call_error_object(struct api_call *call)
{
    if (call->code == API_INVALID_PARAMS || (call->code == 0 && api_has_verrs(call))) {
        if (!api_has_verrs(call))
            api_verr(call, call->method, EINVAL, "invalid parameters");
        /* As TrueNAS: message "Invalid params", the causes one per line in
         * data.reason ("[EINVAL] field: msg") and as [field, msg, errno] in
         * data.extra. */
        size_t n = json_array_size(call->verrs);
        char *reason = NULL;
        size_t rlen = 0;
        FILE *rf = open_memstream(&reason, &rlen);
        for (size_t i = 0; i < n && rf; i++) {
            json_t *e = json_array_get(call->verrs, i);
            const char *f = json_string_value(json_array_get(e, 0));
            const char *m = json_string_value(json_array_get(e, 1));
            int en = (int)json_integer_value(json_array_get(e, 2));
            fprintf(rf, "[%s] %s: %s\n", api_errno_name(en), f, m);
        }
        if (rf)
            fclose(rf);
        json_t *data = api_error_data(EINVAL, reason ? reason : "", call->verrs);
        json_t *e = error_object(API_INVALID_PARAMS, "Invalid params", data);
        free(reason);
        return e;
    }
    if (call->code == API_CALL_ERROR) {
        const char *name = api_errno_name(call->errnum);
        const char *m = call->message ? call->message : strerror(call->errnum);
        char *reason = NULL;
        if (asprintf(&reason, "[%s] %s", name, m) < 0)
            reason = NULL;
        json_t *data = api_error_data(call->errnum, reason ? reason : m, NULL);
        free(reason);
        return error_object(API_CALL_ERROR, m, data);
    }
    int code = call->code ? call->code : API_INTERNAL_ERROR;
    return error_object(code, call->message ? call->message : "Internal error", NULL);
}

json_t *api_call_error(struct api_call *call)
{
    return call->code == 0 && !api_has_verrs(call) ? NULL : call_error_object(call);
}

static json_t *error_response_call(struct api_call *call, json_t *id)
{
    json_t *r = response_new(id);
    json_object_set_new(r, "error", call_error_object(call));
    return r;
}

/* ---- dispatch ---- */

/* An error response with fmt's message, or fallback's when it cannot be
 * formatted (out of memory). */
static json_t *error_response_fmt(int code, const char *fallback, json_t *id, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static json_t *error_response_fmt(int code, const char *fallback, json_t *id, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = vformat(fmt, ap);
    va_end(ap);
    json_t *r = api_error_response(code, msg ? msg : fallback, id);
    free(msg);
    return r;
}

static json_t *invalid_request(const char *peer, json_t *id, const char *why)
{
    log_info("api: %s: invalid request: %s", peer, why);
    return error_response_fmt(API_INVALID_REQUEST, "Invalid Request", id, "Invalid Request: %s",
                              why);
}

/* Whether the caller's roles cover what m needs (enum api_method_flags). */
static bool roles_allow(unsigned roles, unsigned flags)
{
    if (roles & API_ROLE_FULL)
        return true;
    switch (flags & API_ACCESS_MASK) {
    case API_READ:
        return (roles & (API_ROLE_READONLY | API_ROLE_SHARING)) != 0;
    case API_SHARE:
        return (roles & API_ROLE_SHARING) != 0;
    default:
        return false;
    }
}

/* The one place rights are checked, for every call however it came:
 * login, local-only, the caller's roles, a credential revoked since the
 * identity was taken (a job's). 0, or -1 with the error set. */
static int call_allowed(struct api_call *call, const struct api_method *m)
{
    if (m->flags & API_NO_AUTH)
        return 0;
    if (call->client && !call->client->authenticated)
        return api_error(call, API_ENOTAUTHENTICATED, "Not authenticated");
    if ((m->flags & API_LOCAL_ONLY) && call->who.kind != API_CALLER_LOCAL) {
        log_warn("api: %s: %s refused: local-only method called by %s%s", call->peer, m->name,
                 call->who.kind == API_CALLER_INTERNAL ? "blockd itself" : "a remote client ",
                 call->who.name);
        return api_error(call, EPERM, "%s is only available on the local API socket (blockctl)",
                         m->name);
    }
    if (call->who.kind == API_CALLER_REMOTE && !api_auth_identity_current(&call->who)) {
        log_warn("api: %s: %s refused: the credential of %s was revoked or expired", call->peer,
                 m->name, call->who.name);
        return api_error(call, API_ENOTAUTHENTICATED,
                         "Not authenticated (the credential was revoked or expired)");
    }
    if (!roles_allow(call->who.roles, m->flags)) {
        char roles[64];
        api_roles_text(call->who.roles, roles, sizeof(roles));
        log_warn("api: %s: %s refused: API key '%s' has role %s", call->peer, m->name,
                 call->who.name, roles[0] ? roles : "none");
        return api_error(call, EACCES, "%s: not allowed for an API key with role %s", m->name,
                         roles[0] ? roles : "none");
    }
    return 0;
}

/* A caller who may only read sees stored secrets (CHAP secrets, host
 * keys) as TrueNAS shows them to READONLY_ADMIN: "********". A key that
 * may change shares reads them in clear, as an editing client needs. 0,
 * or -1 with the error set (no memory for the copy). */
static int redact_for_reader(struct api_call *call, json_t **result)
{
    if (call->who.kind != API_CALLER_REMOTE || roles_allow(call->who.roles, API_SHARE))
        return 0;
    json_t *r = redact_value(*result);
    json_decref(*result);
    *result = r;
    return r ? 0 : api_error(call, ENOMEM, "out of memory");
}

/* Run a method; returns 0 with *result or -1 with the error in call. */
static int call_run(struct api_call *call, const struct api_method *m, json_t *params,
                    json_t **result)
{
    *result = NULL;
    if (call_allowed(call, m) < 0)
        return -1;
    uint64_t t0 = time_now_ns();
    /* The one check point: a method described by its args never sees
     * parameters of the wrong shape (a params text means it checks its own). */
    int rc;
    if (!m->params && api_validate_args(call, m, params) < 0)
        rc = api_invalid(call);
    else
        rc = m->fn(call, params, result);
    apistats_record(m, time_now_ns() - t0, rc != 0 || call->code != 0 || api_has_verrs(call));
    if (rc == 0 && call->code == 0 && !api_has_verrs(call)) {
        if (!*result)
            *result = json_null();
        return redact_for_reader(call, result);
    }
    /* A handler that failed (or reported errors yet returned 0). */
    json_decref(*result);
    *result = NULL;
    if (call->code == 0 && !api_has_verrs(call)) {
        call->code = API_INTERNAL_ERROR;
        free(call->message);
        call->message = strdup("Internal error (handler failed without an error)");
        log_error("api: %s: %s failed without setting an error", call->peer, call->method);
    }
    return -1;
}

static void log_failure(struct api_call *call)
{
    if (call->code == API_INVALID_PARAMS || (call->code == 0 && api_has_verrs(call))) {
        json_t *e = json_array_get(call->verrs, 0);
        log_info("api: %s: %s: invalid params: %s: %s", call->peer, call->method,
                 json_string_value(json_array_get(e, 0)), json_string_value(json_array_get(e, 1)));
    } else {
        log_info("api: %s: %s failed: [%s] %s", call->peer, call->method,
                 api_errno_name(call->errnum ? call->errnum : EFAULT),
                 call->message ? call->message : "error");
    }
}

/* The call's JSON went past the per-call memory budget: whatever the
 * handler built (with allocations failing) is dropped, and the call
 * answers ENOMEM naming the limit. */
static int call_over_budget(struct api_call *call, json_t **result)
{
    json_decref(*result);
    *result = NULL;
    free(call->message);
    call->message = NULL;
    json_decref(call->verrs);
    call->verrs = NULL;
    call->code = 0;
    call->errnum = 0;
    log_warn("api: %s: %s: refused: it needed more than the per-call memory limit of %llu "
             "bytes (--api-call-memory)",
             call->peer, call->method, (unsigned long long)callmem_budget());
    return api_error(call, ENOMEM,
                     "%s needs more memory than one API call may use (%llu bytes; blockd "
                     "--api-call-memory): narrow the query (filters, select, limit)",
                     call->method, (unsigned long long)callmem_budget());
}

/* Run m inside a memory scope (callmem.h). */
static int call_run_bounded(struct api_call *call, const struct api_method *m, json_t *params,
                            json_t **result)
{
    struct callmem_scope ms;
    callmem_begin(&ms);
    int rc = call_run(call, m, params, result);
    if (callmem_end(&ms))
        rc = call_over_budget(call, result);
    return rc;
}

json_t *api_response_too_big(json_t *resp, const char *peer)
{
    json_t *id = json_is_object(resp) ? json_object_get(resp, "id") : NULL;
    log_warn("api: %s: response refused: longer than the per-call memory limit of %llu bytes "
             "(--api-call-memory)",
             peer ? peer : "local", (unsigned long long)callmem_budget());
    char *msg = NULL;
    if (asprintf(&msg,
                 "[ENOMEM] the response is longer than one API call may use (%llu bytes; blockd "
                 "--api-call-memory): narrow the query (filters, select, limit)",
                 (unsigned long long)callmem_budget()) < 0)
        msg = NULL;
    json_t *data = api_error_data(ENOMEM, msg ? msg : "[ENOMEM] response too large", NULL);
    json_t *r = response_new(id);
    json_object_set_new(r, "error",
                        error_object(API_CALL_ERROR, msg ? msg : "response too large", data));
    free(msg);
    return r;
}

json_t *api_handle_request_client(json_t *req, struct api_client *client)
{
    const char *peer = client && client->peer ? client->peer : "local";
    if (!json_is_object(req))
        return invalid_request(peer, NULL, "not a JSON object");

    json_t *id = json_object_get(req, "id");
    bool notification = (id == NULL);
    if (id && !json_is_string(id) && !json_is_integer(id) && !json_is_real(id) && !json_is_null(id))
        return invalid_request(peer, NULL, "id must be a string, number or null");

    json_t *ver = json_object_get(req, "jsonrpc");
    if (!json_is_string(ver) || strcmp(json_string_value(ver), "2.0") != 0)
        return invalid_request(peer, id, "jsonrpc must be \"2.0\"");
    json_t *jm = json_object_get(req, "method");
    if (!json_is_string(jm))
        return invalid_request(peer, id, "method must be a string");
    const char *name = json_string_value(jm);

    json_t *raw = json_object_get(req, "params");
    json_t *params;
    if (!raw)
        params = json_array();
    else if (json_is_array(raw))
        params = json_incref(raw);
    else if (json_is_object(raw))
        params = json_pack("[O]", raw); /* by-name params: one positional object */
    else
        return invalid_request(peer, id, "params must be an array or an object");

    const struct api_method *m = api_find(name);
    if (!m) {
        json_decref(params);
        log_info("api: %s: method not found: %.200s", peer, name);
        if (notification)
            return NULL;
        return error_response_fmt(API_METHOD_NOT_FOUND, "Method not found", id,
                                  "Method not found: %.200s", name);
    }

    struct api_call call;
    call_init(&call, m->name, peer, client, NULL);
    log_debug("api: %s: call %s", peer, m->name);
    json_t *result = NULL;
    int rc = call_run_bounded(&call, m, params, &result);
    json_decref(params);

    json_t *resp = NULL;
    if (rc == 0) {
        if (!notification) {
            resp = response_new(id);
            json_object_set_new(resp, "result", result);
        } else {
            json_decref(result);
        }
    } else {
        log_failure(&call);
        if (!notification)
            resp = error_response_call(&call, id);
    }
    call_fini(&call);
    return resp;
}

json_t *api_handle_request(json_t *req, const char *peer)
{
    if (!peer)
        return api_handle_request_client(req, NULL);
    struct api_client local = {.peer = peer, .authenticated = true, .local = true};
    return api_handle_request_client(req, &local);
}

static json_t *handle_parsed(json_t *doc, struct api_client *client)
{
    if (!json_is_array(doc))
        return api_handle_request_client(doc, client);
    const char *peer = client && client->peer ? client->peer : "local";
    if (json_array_size(doc) == 0)
        return invalid_request(peer, NULL, "empty batch");
    json_t *out = json_array();
    size_t i;
    json_t *req;
    json_array_foreach(doc, i, req)
    {
        json_t *r = api_handle_request_client(req, client);
        if (r)
            json_array_append_new(out, r);
    }
    if (json_array_size(out) == 0) {
        json_decref(out); /* a batch of notifications gets no reply */
        return NULL;
    }
    return out;
}

static char *dump(json_t *resp, const char *peer)
{
    char *s = api_json_dumps(resp, NULL);
    if (!s && errno == E2BIG) {
        json_t *e = api_response_too_big(resp, peer);
        json_decref(resp);
        resp = e;
        s = api_json_dumps(resp, NULL);
    }
    json_decref(resp);
    if (!s) {
        /* Only when out of memory or a handler built invalid UTF-8. */
        json_t *e = api_error_response(API_INTERNAL_ERROR, "response could not be encoded", NULL);
        s = json_dumps(e, JSON_COMPACT);
        json_decref(e);
    }
    return s;
}

char *api_handle_text_client(const char *text, size_t len, struct api_client *client)
{
    const char *peer = client && client->peer ? client->peer : "local";
    if (len > API_MAX_REQUEST) {
        log_info("api: %s: request of %zu bytes rejected (max %u)", peer, len, API_MAX_REQUEST);
        return dump(api_error_response(API_INVALID_REQUEST, "request too large (max 16 MiB)", NULL),
                    peer);
    }
    json_error_t err;
    json_t *doc = json_loadb(text, len, JSON_DECODE_ANY, &err);
    if (!doc) {
        log_info("api: %s: parse error at line %d column %d: %s", peer, err.line, err.column,
                 err.text);
        return dump(error_response_fmt(API_PARSE_ERROR, "Parse error", NULL,
                                       "Parse error: %s (line %d, column %d)", err.text, err.line,
                                       err.column),
                    peer);
    }
    json_t *resp = handle_parsed(doc, client);
    json_decref(doc);
    if (!resp)
        return NULL;
    return dump(resp, peer);
}

char *api_handle_text(const char *text, size_t len, const char *peer)
{
    struct api_client local = {.peer = peer ? peer : "local", .authenticated = true, .local = true};
    return api_handle_text_client(text, len, &local);
}

/* method for who, with the client (may be NULL) and peer of the call. */
static int call_method(const struct api_identity *who, struct api_client *client, const char *peer,
                       const char *method, json_t *params, json_t **result, json_t **error)
{
    *result = NULL;
    *error = NULL;
    const struct api_method *m = api_find(method);
    if (!m) {
        char *msg = NULL;
        if (asprintf(&msg, "Method not found: %.200s", method) < 0)
            msg = NULL;
        *error = error_object(API_METHOD_NOT_FOUND, msg ? msg : "Method not found", NULL);
        free(msg);
        return -1;
    }
    struct api_call call;
    call_init(&call, m->name, peer, client, who);
    json_t *p = params ? json_incref(params) : json_array();
    int rc = call_run_bounded(&call, m, p, result);
    json_decref(p);
    if (rc != 0) {
        log_failure(&call);
        *error = call_error_object(&call);
    }
    call_fini(&call);
    return rc;
}

int api_call_method_json(struct api_call *parent, const char *method, json_t *params,
                         json_t **result, json_t **error)
{
    if (!parent) {
        /* A call without a caller would have to guess its rights: none. */
        log_error("api: %s called without a calling call; refused", method);
        *result = NULL;
        *error = error_object(API_INTERNAL_ERROR, "internal call without a caller", NULL);
        return -1;
    }
    return call_method(&parent->who, parent->client, parent->peer, method, params, result, error);
}

int api_call_method_as(const struct api_identity *who, const char *peer, const char *method,
                       json_t *params, json_t **result, json_t **error)
{
    return call_method(who, NULL, peer ? peer : "internal", method, params, result, error);
}

enum api_prio { API_PRIO_IDLE, API_PRIO_LOW, API_PRIO_NORMAL };
static enum api_prio api_prio = API_PRIO_IDLE;

int api_set_thread_priority(const char *policy)
{
    if (strcmp(policy, "idle") == 0)
        api_prio = API_PRIO_IDLE;
    else if (strcmp(policy, "low") == 0)
        api_prio = API_PRIO_LOW;
    else if (strcmp(policy, "normal") == 0)
        api_prio = API_PRIO_NORMAL;
    else
        return -EINVAL;
    return 0;
}

static __thread int thread_bg_policy = -1; /* -1: not a background thread */
static __thread int thread_bg_nice;
static __thread int thread_base_nice; /* what the thread started with */

void api_thread_background(void)
{
    /* Both are per thread on Linux (PRIO_PROCESS with a thread id,
     * sched_setscheduler with 0 = the calling thread). Niceness is relative
     * to the thread's own (a daemon started under `nice -n 5` runs its API
     * threads at 15 and boosts them back to 5, not to 0). */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    errno = 0;
    int base = getpriority(PRIO_PROCESS, (id_t)tid);
    if (base == -1 && errno)
        base = 0;
    thread_base_nice = base;
    int nice = base;
    if (api_prio == API_PRIO_IDLE) {
        struct sched_param sp = {0};
        if (sched_setscheduler(0, SCHED_IDLE, &sp) == 0) {
            thread_bg_policy = SCHED_IDLE;
            return;
        }
        log_debug("api: SCHED_IDLE on thread %d: %s; using nice 19", (int)tid, strerror(errno));
        nice = 19;
    } else if (api_prio == API_PRIO_LOW) {
        nice = base + 10 > 19 ? 19 : base + 10;
    }
    if (nice > base && setpriority(PRIO_PROCESS, (id_t)tid, nice) < 0)
        log_debug("api: setpriority(%d) on thread %d: %s", nice, (int)tid, strerror(errno));
    else if (nice > base) {
        thread_bg_policy = SCHED_OTHER;
        thread_bg_nice = nice;
    }
}

/* Going back up needs CAP_SYS_NICE (or RLIMIT_NICE >= 20); without it the
 * thread stays at background priority, which is logged once. */
static void boost_failed(void)
{
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        log_warn("api: cannot raise an API thread's priority while it holds a lock the data "
                 "path also takes (%s); run blockd with CAP_SYS_NICE or --api-priority normal",
                 strerror(errno));
}

void api_thread_boost(void)
{
    struct sched_param sp = {0};
    if (thread_bg_policy == SCHED_IDLE) {
        if (sched_setscheduler(0, SCHED_OTHER, &sp) < 0)
            boost_failed();
    } else if (thread_bg_policy == SCHED_OTHER) {
        if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), thread_base_nice) < 0)
            boost_failed();
    }
}

void api_thread_unboost(void)
{
    struct sched_param sp = {0};
    if (thread_bg_policy == SCHED_IDLE)
        sched_setscheduler(0, SCHED_IDLE, &sp);
    else if (thread_bg_policy == SCHED_OTHER)
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), thread_bg_nice);
}
