/*
 * The JSON-RPC 2.0 method framework. Modules declare their methods in a
 * table (name, help, handler, flags) and register it once at start-up; the
 * transports (Unix socket, later WebSocket) and blockctl's help all come
 * from that one table.
 *
 * Handlers run on an API worker thread (one per client connection), may
 * block (SQLite, file copies), and must be thread-safe against each other
 * (control/db.h serializes database work).
 *
 * Error shape (TrueNAS's, as its clients decode it; Go clients need the
 * integer data.error):
 *   invalid params  → code -32602, message "Invalid params", data = {error: 22,
 *                     errname: "EINVAL", reason: "[EINVAL] field: msg\n…", trace: null,
 *                     extra: [[field, message, errno], …]}
 *   other failures  → code -32001, message (the cause, in words), data = {error: N,
 *                     errname: "ENOENT", reason: "[ENOENT] message", trace: null, extra: null}
 *   before login    → as other failures, errno API_ENOTAUTHENTICATED (207, "ENOTAUTHENTICATED")
 */
#ifndef BLOCKD_API_API_H
#define BLOCKD_API_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum api_code {
    API_PARSE_ERROR = -32700,
    API_INVALID_REQUEST = -32600,
    API_METHOD_NOT_FOUND = -32601,
    API_INVALID_PARAMS = -32602,
    API_INTERNAL_ERROR = -32603,
    API_CALL_ERROR = -32001,
};

/* TrueNAS's errno for a call made before login (middlewared's ErrnoMixin);
 * clients re-authenticate when they see it. Above every system errno. */
#define API_ENOTAUTHENTICATED 207

/* One call in progress: who is calling and the error being built. */
struct api_call;

typedef int (*api_handler_fn)(struct api_call *call, json_t *params, json_t **result);

enum api_method_flags {
    API_NO_AUTH = 1u << 0,    /* allowed before login on remote transports */
    API_WAITS = 1u << 1,      /* may wait for other calls or jobs (core.job_wait) */
    API_LOCAL_ONLY = 1u << 2, /* only on the local Unix socket (account.*): EPERM elsewhere */
    /* What the method needs (exactly one; api_register aborts on a method
     * without one, so no method is reachable by default). The dispatcher
     * checks it against the caller's roles (struct api_identity). */
    API_READ = 1u << 3,  /* reads and the caller's own session: every role */
    API_SHARE = 1u << 4, /* changes datasets, snapshots, shares: SHARING_ADMIN, FULL_ADMIN */
    API_ADMIN = 1u << 5, /* every other change (pools, keys, settings): FULL_ADMIN */
};
#define API_ACCESS_MASK (API_READ | API_SHARE | API_ADMIN)

/* The roles of an API key (TrueNAS's names); a key holds one or more. */
enum api_role {
    API_ROLE_READONLY = 1u << 0, /* READONLY_ADMIN: API_READ methods, /metrics, /ui */
    API_ROLE_SHARING = 1u << 1,  /* SHARING_ADMIN: API_READ and API_SHARE methods */
    API_ROLE_FULL = 1u << 2,     /* FULL_ADMIN: every method but API_LOCAL_ONLY ones */
};
#define API_ROLES_ALL (API_ROLE_READONLY | API_ROLE_SHARING | API_ROLE_FULL)

/* Who makes a call (STYLE principle 18: every call carries its caller). */
enum api_caller {
    API_CALLER_REMOTE,   /* a network client: its roles are its login's */
    API_CALLER_LOCAL,    /* the local administrator (Unix socket): full, local-only allowed */
    API_CALLER_INTERNAL, /* blockd itself (gateway sync, replication): full, not local-only */
};

/*
 * A caller's identity, copied by value into every call and into the jobs
 * it starts (a core.bulk runs its calls with the identity of the client
 * that submitted it, after that client is gone). Remote identities name
 * their credential so that a revoked one stops counting
 * (api_auth_identity_current in api/auth.h).
 */
struct api_identity {
    enum api_caller kind;
    unsigned roles;     /* enum api_role bits; 0 before login */
    int64_t key_id;     /* the API key logged in with, or 0 */
    int64_t account_id; /* or the password account (and its password generation) */
    int64_t pwgen;
    int64_t expires_at; /* the key's expiry (ms since the epoch), 0 if none */
    unsigned gen;       /* the credential generation when last checked */
    char name[208];     /* the key's or account's name, for log lines; "" if none */
};

/* blockd's own calls (gateway sync, replication): full rights, not local. */
extern const struct api_identity api_identity_internal;

/* "FULL_ADMIN" for a role bit; roles_text: "READONLY_ADMIN,SHARING_ADMIN"
 * into buf (never fails; "" for none). api_role_parse: the bit, or 0. */
const char *api_role_name(unsigned role);
void api_roles_text(unsigned roles, char *buf, size_t len);
unsigned api_role_parse(const char *name);

/* A method's positional parameter (api/validate.h describes it). */
struct api_arg;

/*
 * One method. Its positional parameters are described once, by args/nargs
 * (api/validate.h): the dispatcher checks the arity and validates every
 * argument against that table before fn runs, and the synopsis that
 * core.get_methods, `blockctl methods` and docs/api.md show is generated
 * from the same table (api_method_synopsis). So a handler starts with
 * parameters already known to have the right shape and keeps only the
 * checks a field table cannot say (cross-field rules, existence).
 *
 * params is the legacy escape hatch: a method that sets it gets no checks
 * from the dispatcher (its handler validates everything itself) and that
 * hand-written text as its synopsis. Leave it NULL for new methods.
 */
struct api_method {
    const char *name;    /* "pool.dataset.create" */
    const char *params;  /* NULL (args describe the parameters), or a free-form synopsis */
    const char *summary; /* one-line description */
    api_handler_fn fn;   /* returns 0 with *result set (new reference), or -1 with an error set */
    unsigned flags;
    const struct api_arg *args; /* positional parameters, in order (NULL, 0: none) */
    size_t nargs;
};

/* The args and nargs of a method table entry: API_ARGS(create_args). */
#define API_ARGS(a) (a), (sizeof(a) / sizeof((a)[0]))

/* Register a table (must outlive the process). Not thread-safe: start-up only. */
void api_register(const struct api_method *methods, size_t count);
const struct api_method *api_find(const char *name);
/* Every registered method, sorted by name (for core.get_methods). */
size_t api_methods(const struct api_method ***out);

/* Handle one request line; returns the response text (malloc'd, no newline)
 * or NULL for a notification. peer names the client in log lines. */
char *api_handle_text(const char *text, size_t len, const char *peer);
/* Handle one parsed request object; returns the response object or NULL. */
json_t *api_handle_request(json_t *req, const char *peer);

/* Errors. Each returns -1 so a handler can `return api_error(...)`. */
int api_error(struct api_call *call, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Add a validation error for a field ("pool.dataset.create.volsize"); the
 * call then fails with -32602 when the handler returns api_invalid(call). */
void api_verr(struct api_call *call, const char *field, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
bool api_has_verrs(const struct api_call *call);
int api_invalid(struct api_call *call); /* returns -1 */
const char *api_call_peer(const struct api_call *call);
const char *api_call_method(const struct api_call *call);

/*
 * TrueNAS-style query over rows already built as JSON objects.
 * params is the method's params array: [filters?, options?]. Takes no
 * ownership of rows. Result per options: list, single object (get), or
 * integer (count). Errors (bad filter, get with no match) are set on call.
 */
int api_query(struct api_call *call, json_t *rows, json_t *params, json_t **result);

/*
 * <ns>.get_instance [id, options?], as TrueNAS: runs query (the method's
 * own *.query handler) with [[["id", "=", id]], options] — so the query
 * options (extra.properties, extra.retrieve_children, select, ...) apply —
 * and answers its one row, or ENOENT "<what> <id> does not exist" (what
 * may be NULL: "<id> does not exist" for string ids). get, count, limit
 * and offset in options are ignored (one row is the answer). An options
 * that is not an object is a -32602. The handler's return value.
 */
int api_get_instance(struct api_call *call, json_t *params, api_handler_fn query, const char *what,
                     json_t **result);

/* Parameter helpers: fetch params[i] (NULL if absent/null). */
json_t *api_param(json_t *params, size_t index);

/* ---- Additions (api work): limits, per-connection clients, query helpers ---- */

/* Largest request text a transport accepts (one line / one message). */
#define API_MAX_REQUEST (16u * 1024 * 1024)

/*
 * A transport's view of one connected client, passed to the handlers
 * through their call. The transport owns it (lives as long as the
 * connection); handlers may read it and, for auth.* methods, set
 * authenticated. api_handle_text/_request (no transport) make a local
 * client; api_handle_request_client(req, NULL) runs as the local
 * administrator too (in-process callers only).
 */
struct api_client {
    const char *peer;   /* "unix:pid=123", "ws:10.0.0.1:5000" */
    bool authenticated; /* false: only API_NO_AUTH methods are allowed */
    void *transport;    /* transport-private */
    void *auth;         /* owned by the auth methods (e.g. the key used) */
    /* Send an unsolicited message (event, job update) to this client,
     * between responses; thread-safe; msg is borrowed. NULL if the
     * transport cannot. 0 or -errno. */
    int (*send)(struct api_client *client, json_t *msg);
    /* Additions (control, api/jobs.h): core.set_options {"legacy_jobs":
     * false} sets jobs_wait, so job methods answer with the job's result
     * instead of its id. A transport that calls jobs_client_closed() when
     * the connection ends sets closes_notified; only such clients may
     * core.subscribe (the event list must not outlive them). */
    bool jobs_wait;
    bool closes_notified;
    /* The local administrator (the 0600 Unix socket): set by that
     * transport only, so a new transport is remote unless it says
     * otherwise. Methods flagged API_LOCAL_ONLY refuse other clients. */
    bool local;
};

/* True when req (a parsed request; NULL allowed) is one call that cannot
 * wait for other calls or jobs of this client (no API_WAITS method, no
 * jobs_wait client, not a batch): a transport may run it on its I/O thread
 * (api_handle_request_client) instead of handing it to a worker. */
bool api_request_runs_briefly(const json_t *req, const struct api_client *client);

/* As api_handle_text/api_handle_request, for a client of a transport. */
char *api_handle_text_client(const char *text, size_t len, struct api_client *client);
json_t *api_handle_request_client(json_t *req, struct api_client *client);
/* The error response that replaces resp when its text is longer than the
 * per-call memory budget (api_json_dumps failed with E2BIG): same id,
 * ENOMEM naming the limit; logs a line naming peer. Returns a new
 * reference; resp is borrowed. */
json_t *api_response_too_big(json_t *resp, const char *peer);
/* The transport client of a call, or NULL when it has none (a core.bulk
 * item, an internal call): rights come from api_call_identity, never
 * from whether there is a client. */
struct api_client *api_call_client(const struct api_call *call);
/* Build a JSON-RPC error response {"jsonrpc","error":{code,message},"id"}
 * (id may be NULL for null). Returns a new reference. */
json_t *api_error_response(int code, const char *message, json_t *id);
/* The data member of a TrueNAS error: {error: errnum, errname, reason,
 * trace: null, extra} (extra borrowed, NULL for null). A new reference. */
json_t *api_error_data(int errnum, const char *reason, json_t *extra);
/* The errno an api_error() set on this call (0 if none); for core.bulk-like
 * callers that re-dispatch and need the outcome. */
int api_call_errno(const struct api_call *call);
/* The JSON-RPC error object ({code, message, data}) the call would answer
 * with, or NULL if no error is set; a new reference (jobs record it). */
json_t *api_call_error(struct api_call *call);
/*
 * Run one method on behalf of another call (share.* helpers), with its
 * identity and client (parent is required): returns 0 with *result, or -1 with *error set to the
 * JSON-RPC error object ({code, message, data}) as a new reference.
 */
int api_call_method_json(struct api_call *parent, const char *method, json_t *params,
                         json_t **result, json_t **error);
/*
 * As api_call_method_json, for a caller that is not itself a call: who
 * (required: a job's saved identity, or &api_identity_internal) and peer
 * (for log lines; NULL: "internal"). Every check sees who: roles,
 * API_LOCAL_ONLY, a revoked key. The call has no transport client, so a
 * job method it runs answers synchronously.
 */
int api_call_method_as(const struct api_identity *who, const char *peer, const char *method,
                       json_t *params, json_t **result, json_t **error);
/*
 * A call for blockd's own work below the API (the snapshot task
 * scheduler), so that it runs the same checked functions the methods do:
 * the internal identity, no client, method and peer (borrowed, must
 * outlive the call) for log lines. NULL when out of memory. Free it with
 * api_call_internal_free (api_call_error tells how it failed).
 */
struct api_call *api_call_internal_new(const char *method, const char *peer);
void api_call_internal_free(struct api_call *call);
/*
 * The same for work a job does below the API on its caller's behalf
 * (replication): the call carries who (copied: a job's saved identity),
 * method names the method whose typed function runs, peer (borrowed) the
 * log lines' peer. api_call_authorize(call) then makes the checks the
 * dispatcher makes before running that method (its access flag against
 * who's roles, local-only, a credential revoked since the job started):
 * 0, or -1 with the error set on call. Free with api_call_internal_free.
 */
struct api_call *api_call_as_new(const struct api_identity *who, const char *method,
                                 const char *peer);
int api_call_authorize(struct api_call *call);
/* The identity the call runs with (never NULL). */
const struct api_identity *api_call_identity(const struct api_call *call);

/* options.extra of a query's params ([filters, options]), or NULL. */
json_t *api_query_extra(json_t *params);
/*
 * Check the filters only (no rows): 0, or -1 with a -32602 error on call.
 * For handlers that pre-filter in SQL and still call api_query after.
 */
int api_query_validate(struct api_call *call, json_t *params);
/*
 * An index hint for handlers with many rows: if the top-level (ANDed)
 * filters hold [field, "=", value] or [field, "in", [values…]] for this
 * exact field name, return that value (borrowed from params) and set *op
 * to "=" or "in"; else NULL. The handler may then build only the rows
 * that can match, and must still run api_query over them (which applies
 * every filter and option). With several such filters the first is used.
 */
json_t *api_query_hint(json_t *params, const char *field, const char **op);

/*
 * Control plane below data path (addition): the transports call
 * api_thread_background() at the start of every thread that runs API
 * handlers (connection and worker threads); threads a handler starts
 * inherit it. The policy (blockd --api-priority):
 *   idle    SCHED_IDLE (default): handlers get the CPU time reactors and
 *           I/O threads leave; on an idle machine nothing changes, on a
 *           machine whose CPUs are busy with I/O, configuration changes
 *           wait instead of taking time from the data path.
 *   low     10 above the thread's own nice value, at most 19 (SCHED_OTHER).
 *   normal  unchanged.
 * api_set_thread_priority: start-up only; 0 or -EINVAL.
 */
int api_set_thread_priority(const char *policy);
void api_thread_background(void);
/*
 * Priority ceiling for locks the data path also takes (the iSCSI
 * publication lock): a background thread raises itself to normal priority
 * while it holds one, so a reactor never waits for a thread that the
 * scheduler keeps off the CPU. No-ops on other threads. Pairs; not nested.
 */
void api_thread_boost(void);
void api_thread_unboost(void);

/*
 * Batched acknowledgement (addition): core.bulk calls begin() before its
 * calls and end() after them, on the thread that runs them, and fails if
 * end() does not return 0. The config DB sets them at start-up so that the
 * calls' commits share one fdatasync before the bulk answers (control/db.h
 * db_sync_batch_begin/_end). Start-up only.
 */
void api_set_batch_hooks(void (*begin)(void), int (*end)(void));
void api_thread_background(void);

#endif
