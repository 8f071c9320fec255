/*
 * API keys, logins and the failed-login rate limiter (see auth.h).
 */
#include "api/auth.h"

#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/account.h"
#include "api/fields.h"
#include "api/jobs.h"
#include "api/store.h"
#include "api/validate.h"
#include "core/log.h"
#include "core/bounds.h"
#include "core/ratelimit.h"
#include "core/util.h"

#define KEY_MAX_LEN 256
#define KEY_BUF_LEN 128 /* a generated key: "<id>-<secret>" */

/* What a logged-in connection remembers (client->auth). */
struct auth_session {
    bool password;                /* logged in with a password (else an API key) */
    unsigned roles;               /* enum api_role bits */
    int64_t key_id;               /* API key */
    int64_t expires_at;           /* its expiry (ms since the epoch), 0 if none */
    char name[201];               /* API key name */
    struct account_login account; /* password */
    unsigned gen;                 /* auth_gen when last checked */
    char username[65];
};

/* Bumped by api_key.delete and account changes so sessions re-check. */
static atomic_uint auth_gen;
/* Guards every client's ->auth: a connection's calls run on several
 * worker threads at once (login, logout, checks). Taken before db_lock. */
static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;

static int64_t now_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- keys ---- */

int auth_key_generate(int64_t id, char *buf, size_t len)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    char secret[AUTH_KEY_SECRET_LEN + 1];
    size_t n = 0;
    while (n < AUTH_KEY_SECRET_LEN) {
        unsigned char rnd[64];
        if (gnutls_rnd(GNUTLS_RND_KEY, rnd, sizeof(rnd)) < 0) {
            log_error("auth: random number generator failed");
            return -EIO;
        }
        /* Rejection sampling keeps every character equally likely. */
        for (size_t i = 0; i < sizeof(rnd) && n < AUTH_KEY_SECRET_LEN; i++)
            if (rnd[i] < 248)
                secret[n++] = alphabet[rnd[i] % 62];
    }
    secret[n] = 0;
    int w = snprintf(buf, len, "%" PRId64 "-%s", id, secret);
    explicit_bzero(secret, sizeof(secret));
    if (w < 0 || (size_t)w >= len)
        return -ENOSPC;
    return 0;
}

int auth_key_hash(const char *key, size_t keylen, char hex[65])
{
    unsigned char digest[32];
    if (gnutls_hash_fast(GNUTLS_DIG_SHA256, key, keylen, digest) < 0)
        return -EIO;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof(digest); i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = 0;
    return 0;
}

bool auth_hash_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    size_t n = la < lb ? la : lb;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

void auth_peer_address(const char *peer, char *buf, size_t len)
{
    if (!peer)
        peer = "local";
    const char *p = peer;
    if (strncmp(p, "ws:", 3) == 0)
        p += 3;
    else if (strncmp(p, "wss:", 4) == 0)
        p += 4;
    else {
        snprintf(buf, len, "%s", peer);
        return;
    }
    if (*p == '[') {
        const char *end = strchr(p, ']');
        size_t n = end ? (size_t)(end - p - 1) : strlen(p + 1);
        snprintf(buf, len, "%.*s", (int)n, p + 1);
        return;
    }
    const char *colon = strrchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    snprintf(buf, len, "%.*s", (int)n, p);
}

/* ---- rate limiter (core/ratelimit.h, one table for every API login) ---- */

static struct ratelimit login_rl =
    RATELIMIT_INIT(AUTH_FAIL_MAX, AUTH_FAIL_WINDOW_MS, AUTH_BLOCK_MS);

bool auth_rate_allowed(const char *addr, uint64_t now_ms)
{
    return ratelimit_allowed(&login_rl, addr, now_ms);
}

bool auth_rate_failed(const char *addr, uint64_t now_ms)
{
    return ratelimit_failed(&login_rl, addr, now_ms);
}

void auth_rate_succeeded(const char *addr)
{
    ratelimit_succeeded(&login_rl, addr);
}

void auth_rate_reset(void)
{
    ratelimit_reset(&login_rl);
}

/* ---- the field table: validates, decodes and encodes a key ---- */

static const char *const role_choices[] = {"FULL_ADMIN", "READONLY_ADMIN", "SHARING_ADMIN", NULL};
static const struct api_field role_item = {.type = API_T_ENUM, .choices = role_choices};

/* roles: a list of role names (the table's items check each, and that
 * there is at least one) ↔ enum api_role bits. */
static int roles_field_decode(const struct api_field *f, json_t *v, void *field)
{
    (void)f;
    unsigned roles = 0;
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) roles |= api_role_parse(json_string_value(item));
    *(unsigned *)field = roles;
    return 0;
}

static json_t *roles_field_encode(const struct api_field *f, const void *field)
{
    (void)f;
    unsigned roles = *(const unsigned *)field;
    json_t *a = json_array();
    for (unsigned bit = 1; a && (bit & API_ROLES_ALL); bit <<= 1)
        if ((roles & bit) && json_array_append_new(a, json_string(api_role_name(bit))) < 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

static const struct api_codec roles_codec = {roles_field_decode, roles_field_encode, NULL};

#define AT_CHARS(member) API_AT_CHARS(struct api_key_rec, member)
/* One table for api_key.create (all of it) and api_key.update (its first
 * two fields, API_PARTIAL): each field's member of struct api_key_rec.
 * expires_at spans two members (has_expiry, expires_at) and is read and
 * written next to the table calls. No roles: FULL_ADMIN, what every key
 * was before roles existed (a client written for that keeps working);
 * docs/security.md. No username (or null): root. */
static const struct api_field key_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     AT_CHARS(name)},
    {.name = "roles",
     .type = API_T_ARRAY,
     .flags = API_RANGE,
     .min = 1,
     .max = 3,
     .items = &role_item,
     .def = "[\"FULL_ADMIN\"]",
     .off = offsetof(struct api_key_rec, roles),
     .codec = &roles_codec},
    {.name = "username",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .def = "\"root\"",
     AT_CHARS(username)},
    {.name = "expires_at", .type = API_T_OBJECT, .flags = API_NULLABLE},
};
#undef AT_CHARS
#define KEY_UPDATE_NFIELDS 2 /* name, roles */

/* ---- rows ---- */

static json_t *date_value(int64_t ms)
{
    return json_pack("{s:I}", "$date", (json_int_t)ms);
}

/* The TrueNAS-shaped row of a key (the encoder): the keys in TrueNAS's
 * order, the table's fields encoded into their places (a key already in
 * the object keeps its place), then what the store alone sets and
 * TrueNAS' constants for a local key. */
static json_t *key_row(const struct api_key_rec *r)
{
    json_t *row = json_pack(
        "{s:I, s:n, s:n, s:o, s:b, s:b, s:o, s:i, s:n}", "id", (json_int_t)r->id, "name",
        "username", "created_at", date_value(r->created_at), "local", 1, "revoked", 0, "expires_at",
        r->has_expiry ? date_value(r->expires_at) : json_null(), "user_identifier", 0, "roles");
    if (row && api_fields_encode(key_fields, ARRAY_SIZE(key_fields), r, row) < 0) {
        json_decref(row);
        row = NULL;
    }
    return row;
}

/* Every key (id 0) or key id, as rows; NULL on error. */
static json_t *key_rows(int64_t id)
{
    struct api_key_rec *v;
    size_t n;
    if (api_store()->key_list(id, &v, &n) < 0)
        return NULL;
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < n; i++)
        if (json_array_append_new(rows, key_row(&v[i])) < 0) {
            json_decref(rows);
            rows = NULL;
        }
    free(v);
    return rows;
}

/* ---- api_key.* ---- */

static int key_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = key_rows(0);
    if (!rows)
        return api_error(call, EIO, "cannot read the API keys");
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

/* The checked create body into *r (the decoder): the table's defaults,
 * then the keys given; -1 with the error set. */
static int key_decode(struct api_call *call, json_t *data, struct api_key_rec *r)
{
    memset(r, 0, sizeof(*r));
    if (api_fields_defaults(key_fields, ARRAY_SIZE(key_fields), r) < 0 ||
        api_fields_decode(key_fields, ARRAY_SIZE(key_fields), data, r) < 0)
        return api_error(call, ENOMEM, "out of memory");
    if (!r->username[0]) /* null */
        snprintf(r->username, sizeof(r->username), "root");
    json_t *v = json_object_get(data, "expires_at");
    if (!v || json_is_null(v))
        return 0;
    json_t *d = json_object_get(v, "$date");
    if (!json_is_integer(d) || json_object_size(v) != 1) {
        api_verr(call, "api_key.create.expires_at", EINVAL,
                 "Input should be null or {\"$date\": milliseconds}");
        return api_invalid(call);
    }
    r->expires_at = json_integer_value(d);
    r->has_expiry = true;
    return 0;
}

/* The new key (it embeds the id): generated into arg, its hash stored. */
static int key_make(int64_t id, char *hash, void *arg)
{
    char *key = arg;
    int rc = auth_key_generate(id, key, KEY_BUF_LEN);
    return rc < 0 ? rc : auth_key_hash(key, strlen(key), hash);
}

static int key_create(struct api_call *call, json_t *params, json_t **result)
{
    struct api_key_rec r;
    /* the body was checked against create_fields by the dispatcher */
    if (key_decode(call, api_param(params, 0), &r) < 0)
        return -1;
    char key[KEY_BUF_LEN];
    int rc = api_store()->key_create(&r, key_make, key);
    if (rc == -EEXIST) {
        api_verr(call, "api_key.create.name", EEXIST, "API key with name %s already exists",
                 r.name);
        return api_invalid(call);
    }
    if (rc == -EDQUOT) { /* core/bounds.h */
        log_warn("limits: %s: refused: %u %s is the limit (%s)", api_call_peer(call),
                 limit_get(LIMIT_API_KEYS), limit_what(LIMIT_API_KEYS), limit_flag(LIMIT_API_KEYS));
        return api_error(call, EDQUOT, "limit reached: at most %u %s (%s)",
                         limit_get(LIMIT_API_KEYS), limit_what(LIMIT_API_KEYS),
                         limit_flag(LIMIT_API_KEYS));
    }
    json_t *rows = rc == 0 ? key_rows(r.id) : NULL;
    if (rc < 0 || !rows || json_array_size(rows) != 1) {
        json_decref(rows);
        explicit_bzero(key, sizeof(key));
        return api_error(call, rc < 0 ? rc : EIO, "cannot create the API key");
    }
    json_t *row = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    json_object_set_new(row, "key", json_string(key));
    explicit_bzero(key, sizeof(key));
    char roles[64];
    api_roles_text(r.roles, roles, sizeof(roles));
    log_info("auth: %s: API key %" PRId64 " (%s, %s) created", api_call_peer(call), r.id, r.name,
             roles);
    *result = row;
    return 0;
}

static int key_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id =
        json_integer_value(api_param(params, 0)); /* an integer: the dispatcher checked it */
    bool existed;
    int rc = api_store()->key_delete(id, &existed);
    if (rc < 0)
        return api_error(call, rc, "cannot delete API key %" PRId64, id);
    if (!existed)
        return api_error(call, ENOENT, "API key %" PRId64 " does not exist", id);
    api_auth_sessions_changed();
    log_info("auth: %s: API key %" PRId64 " deleted", api_call_peer(call), id);
    *result = json_true();
    return 0;
}

/* api_key.update [id, {name?, roles?}]: a change of roles takes effect at
 * once: the key's sessions and subscriptions end (they log in again and
 * get the new roles), as after a delete. */
static int key_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id = json_integer_value(api_param(params, 0));
    /* only the keys given: an empty name and no roles change nothing */
    struct api_key_rec r = {0};
    api_fields_decode(key_fields, KEY_UPDATE_NFIELDS, api_param(params, 1), &r);
    unsigned roles = r.roles;
    int rc = api_store()->key_update(id, r.name[0] ? r.name : NULL, roles);
    if (rc == -EEXIST) {
        api_verr(call, "api_key.update.name", EEXIST, "API key with name %s already exists",
                 r.name);
        return api_invalid(call);
    }
    if (rc == -ENOENT)
        return api_error(call, ENOENT, "API key %" PRId64 " does not exist", id);
    if (rc < 0)
        return api_error(call, rc, "cannot update API key %" PRId64, id);
    if (roles) {
        api_auth_sessions_changed();
    }
    log_info("auth: %s: API key %" PRId64 " updated%s", api_call_peer(call), id,
             roles ? " (roles changed: its sessions end)" : "");
    json_t *rows = key_rows(id);
    if (!rows || json_array_size(rows) != 1) {
        json_decref(rows);
        return api_error(call, EIO, "cannot read API key %" PRId64, id);
    }
    *result = json_incref(json_array_get(rows, 0));
    json_decref(rows);
    return 0;
}

/* ---- logins ---- */

/* The key's session if key is valid (a new struct), else NULL. */
static struct auth_session *key_lookup(const char *key)
{
    char hash[65], stored[API_KEY_HASH_LEN + 1];
    if (auth_key_hash(key, strlen(key), hash) < 0)
        return NULL;
    struct api_key_rec r;
    if (api_store()->key_by_hash(hash, &r, stored) != 1 || !auth_hash_equal(stored, hash) ||
        (r.has_expiry && r.expires_at <= now_wall_ms()))
        return NULL;
    struct auth_session *s = calloc(1, sizeof(*s));
    if (s) {
        s->key_id = r.id;
        s->roles = r.roles;
        s->expires_at = r.has_expiry ? r.expires_at : 0;
        snprintf(s->name, sizeof(s->name), "%s", r.name);
        snprintf(s->username, sizeof(s->username), "%s", r.username);
        s->gen = atomic_load(&auth_gen);
    }
    return s;
}

/* The account's session if username/password match (a new struct), else
 * NULL; *err set to a -errno when the check itself failed. */
static struct auth_session *password_lookup(const char *username, const char *password, int *err)
{
    struct account_login login;
    *err = 0;
    unsigned gen = atomic_load(&auth_gen);
    int rc = account_verify(username, password, &login);
    if (rc != 1) {
        *err = rc < 0 ? rc : 0;
        return NULL;
    }
    struct auth_session *s = calloc(1, sizeof(*s));
    if (!s) {
        *err = -ENOMEM;
        return NULL;
    }
    s->password = true;
    s->roles = API_ROLE_FULL; /* account.h: every account is a full administrator */
    s->account = login;
    snprintf(s->username, sizeof(s->username), "%s", login.username);
    s->gen = gen;
    return s;
}

/* Make s the session of call's client (takes s). A trusted local client
 * (authenticated, no session) stays as it is. */
static void session_install(struct api_call *call, struct auth_session *s)
{
    struct api_client *client = api_call_client(call);
    pthread_mutex_lock(&session_lock);
    if (client && (!client->authenticated || client->auth)) {
        free(client->auth);
        client->auth = s;
        client->authenticated = true;
    } else {
        free(s);
    }
    pthread_mutex_unlock(&session_lock);
}

void auth_rate_key(const char *peer, const char *mech, const char *target, char *buf, size_t len)
{
    char addr[64];
    auth_peer_address(peer, addr, sizeof(addr));
    if (target)
        snprintf(buf, len, "%s:%s u:%.64s", mech, addr, target);
    else
        snprintf(buf, len, "%s:%s", mech, addr);
}

/* Shared by every login method: -1 with EBUSY set while the caller's
 * address is blocked for this mechanism (and account); else 0 with *rkey
 * filled: the throttle's key, which a success forgets (auth.h). */
static int login_gate(struct api_call *call, const char *mech, const char *target, char *rkey,
                      size_t len)
{
    const char *peer = api_call_peer(call);
    auth_rate_key(peer, mech, target, rkey, len);
    if (!auth_rate_allowed(rkey, ratelimit_now_ms())) {
        log_warn("auth: %s: login refused: too many failed %s logins from this address", peer,
                 strcmp(mech, "key") == 0 ? "API key" : "password");
        return api_error(call, EBUSY, "Rate Limit Exceeded");
    }
    return 0;
}

/*
 * Check key for call's client: 1 logged in, 0 wrong key, -1 error set
 * (rate limit, bad input).
 */
static int login_key(struct api_call *call, json_t *jkey, const char *field)
{
    if (!json_is_string(jkey)) {
        api_verr(call, field, EINVAL, "Input should be a valid string");
        return api_invalid(call);
    }
    char addr[AUTH_RATE_KEY_MAX];
    if (login_gate(call, "key", NULL, addr, sizeof(addr)) < 0)
        return -1;
    const char *key = json_string_value(jkey);
    struct auth_session *s = NULL;
    if (json_string_length(jkey) <= KEY_MAX_LEN && strlen(key) == json_string_length(jkey))
        s = key_lookup(key);
    if (!s) {
        bool blocked = auth_rate_failed(addr, ratelimit_now_ms());
        log_warn("auth: %s: login with an invalid API key refused%s", api_call_peer(call),
                 blocked ? "; address blocked for 30 s after repeated failures" : "");
        return 0;
    }
    auth_rate_succeeded(addr);
    int64_t key_id = s->key_id;
    session_install(call, s);
    log_info("auth: %s: logged in with API key %" PRId64, api_call_peer(call), key_id);
    return 1;
}

/*
 * Check username/password for call's client: 1 logged in, 0 wrong, -1
 * error set (rate limit, bad input, hash failure). The hash blocks this
 * API thread ~100 ms (never a reactor: docs/threads.md).
 */
static int login_password(struct api_call *call, json_t *juser, json_t *jpw, const char *prefix)
{
    char f[96];
    if (!json_is_string(juser)) {
        snprintf(f, sizeof(f), "%s.username", prefix);
        api_verr(call, f, EINVAL, "Input should be a valid string");
    }
    if (!json_is_string(jpw)) {
        snprintf(f, sizeof(f), "%s.password", prefix);
        api_verr(call, f, EINVAL, "Input should be a valid string");
    }
    if (api_has_verrs(call))
        return api_invalid(call);
    char addr[AUTH_RATE_KEY_MAX];
    if (login_gate(call, "pw", json_string_value(juser), addr, sizeof(addr)) < 0)
        return -1;
    const char *user = json_string_value(juser);
    const char *pw = json_string_value(jpw);
    /* Counted as a failure before the hash, and forgotten on success:
     * pipelined attempts from one address (each on its own worker) would
     * otherwise all pass the gate before the first one failed, and each
     * cost a hash. A right password forgives it (and its address). */
    bool blocked = auth_rate_failed(addr, ratelimit_now_ms());
    struct auth_session *s = NULL;
    int err = 0;
    /* Over-long or NUL-carrying input cannot match: no hash for it. */
    if (json_string_length(jpw) <= ACCOUNT_PASSWORD_MAX && strlen(pw) == json_string_length(jpw) &&
        strlen(user) == json_string_length(juser))
        s = password_lookup(user, pw, &err);
    if (err < 0)
        return api_error(call, err, "cannot check the password");
    if (!s) {
        log_warn("auth: %s: login with a wrong password for user '%.32s' refused%s",
                 api_call_peer(call), account_name_valid(user) ? user : "?",
                 blocked ? "; address blocked for 30 s after repeated failures" : "");
        return 0;
    }
    ratelimit_forgive(&login_rl, addr); /* the attempt counted above was right */
    char name[sizeof(s->username)];
    memcpy(name, s->username, sizeof(name));
    session_install(call, s);
    log_info("auth: %s: logged in with the password of account %s", api_call_peer(call), name);
    return 1;
}

int auth_check_key(const char *key, size_t len, const char *peer)
{
    char addr[AUTH_RATE_KEY_MAX];
    auth_rate_key(peer, "key", NULL, addr, sizeof(addr));
    uint64_t now = ratelimit_now_ms();
    if (!auth_rate_allowed(addr, now)) {
        log_warn("auth: %s: API key refused: too many failed API key logins from this address",
                 peer);
        return -EBUSY;
    }
    struct auth_session *s = NULL;
    if (len > 0 && len <= KEY_MAX_LEN && !memchr(key, 0, len)) {
        char k[KEY_MAX_LEN + 1];
        memcpy(k, key, len);
        k[len] = 0;
        s = key_lookup(k);
    }
    if (!s) {
        bool blocked = auth_rate_failed(addr, now);
        log_warn("auth: %s: HTTP request with an invalid API key refused%s", peer,
                 blocked ? "; address blocked for 30 s after repeated failures" : "");
        return -EACCES;
    }
    free(s);
    auth_rate_succeeded(addr);
    return 0;
}

static int auth_login_with_api_key(struct api_call *call, json_t *params, json_t **result)
{
    int rc = login_key(call, api_param(params, 0), "auth.login_with_api_key.api_key");
    if (rc < 0)
        return -1;
    *result = json_boolean(rc == 1);
    return 0;
}

/* auth.login(username, password, otp_token=null): blockd has no second
 * factor, so otp_token is accepted and ignored, as TrueNAS does for an
 * account without 2FA. */
static int auth_login(struct api_call *call, json_t *params, json_t **result)
{
    int rc = login_password(call, api_param(params, 0), api_param(params, 1), "auth.login");
    if (rc < 0)
        return -1;
    *result = json_boolean(rc == 1);
    return 0;
}

static json_t *me_object(struct api_client *client)
{
    struct auth_session copy, *s = NULL;
    pthread_mutex_lock(&session_lock);
    if (client && client->auth) {
        copy = *(struct auth_session *)client->auth;
        s = &copy;
    }
    pthread_mutex_unlock(&session_lock);
    /* Every blockd login is a full administrator: the root identity with
     * the name the login used (TrueNAS's AuthUserInfo fields). */
    const char *name = s ? s->username : "root";
    json_t *me = json_pack(
        "{s:s, s:i, s:i, s:s, s:s, s:s, s:[i], s:n, s:b, s:s, s:{}, s:{s:b, s:i, s:i}}", "pw_name",
        name, "pw_uid", 0, "pw_gid", 0, "pw_gecos", name, "pw_dir", "/root", "pw_shell", "/bin/sh",
        "grouplist", 0, "sid", "local", 1, "source", "LOCAL", "attributes", "two_factor_config",
        "secret_configured", 0, "interval", 30, "otp_digits", 6);
    /* The local administrator (no session) and password accounts are
     * FULL_ADMIN; a key has its own roles (TrueNAS's privilege.roles). */
    unsigned roles = s ? s->roles : API_ROLE_FULL;
    json_t *jroles = json_array();
    for (unsigned bit = 1; bit & API_ROLES_ALL; bit <<= 1)
        if (roles & bit)
            json_array_append_new(jroles, json_string(api_role_name(bit)));
    json_object_set_new(me, "privilege", json_pack("{s:o}", "roles", jroles));
    json_t *attrs = json_pack("[s]", "LOCAL");
    if (s && !s->password)
        json_array_append_new(attrs, json_string("API_KEY"));
    json_object_set_new(me, "account_attributes", attrs);
    json_object_set_new(me, "api_key",
                        s && !s->password
                            ? json_pack("{s:I, s:s}", "id", (json_int_t)s->key_id, "name", s->name)
                            : json_null());
    return me;
}

static int auth_login_ex(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* an object: login_data_check */
    const char *mech = json_string_value(json_object_get(data, "mechanism"));
    int rc;
    if (mech && strcmp(mech, "API_KEY_PLAIN") == 0) {
        rc = login_key(call, json_object_get(data, "api_key"), "auth.login_ex.login_data.api_key");
    } else if (mech && strcmp(mech, "PASSWORD_PLAIN") == 0) {
        rc = login_password(call, json_object_get(data, "username"),
                            json_object_get(data, "password"), "auth.login_ex.login_data");
    } else {
        api_verr(call, "auth.login_ex.login_data.mechanism", ENOTSUP,
                 "only API_KEY_PLAIN and PASSWORD_PLAIN are supported");
        return api_invalid(call);
    }
    if (rc < 0)
        return -1;
    if (rc == 0) {
        *result = json_pack("{s:s}", "response_type", "AUTH_ERR");
        return 0;
    }
    json_t *opts = json_object_get(data, "login_options");
    json_t *ui = json_is_object(opts) ? json_object_get(opts, "user_info") : NULL;
    *result = json_pack("{s:s, s:o, s:s}", "response_type", "SUCCESS", "user_info",
                        json_is_false(ui) ? json_null() : me_object(api_call_client(call)),
                        "authenticator", "LEVEL_1");
    return 0;
}

static int auth_me(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    *result = me_object(api_call_client(call));
    return 0;
}

static int auth_logout(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    struct api_client *client = api_call_client(call);
    pthread_mutex_lock(&session_lock);
    bool had = client && client->auth;
    pthread_mutex_unlock(&session_lock);
    if (had) {
        api_auth_client_release(client);
        /* Its events end with its login (a new login subscribes again). */
        jobs_client_closed(client);
        log_info("auth: %s: logged out", api_call_peer(call));
    }
    *result = json_true();
    return 0;
}

/* Does key id still exist with these roles (a change of roles ends the
 * sessions that had the old ones)? */
static bool key_current(int64_t id, unsigned roles)
{
    struct api_key_rec *v;
    size_t n;
    if (api_store()->key_list(id, &v, &n) < 0)
        return false;
    bool same =
        n == 1 && v[0].roles == roles && (!v[0].has_expiry || v[0].expires_at > now_wall_ms());
    free(v);
    return same;
}

/* Does s's credential still exist (the DB is not locked)? */
static bool session_current(const struct auth_session *s)
{
    if (s->password)
        return account_current(&s->account);
    return key_current(s->key_id, s->roles);
}

void api_auth_identity(struct api_client *client, struct api_identity *out)
{
    memset(out, 0, sizeof(*out));
    if (client->local) {
        out->kind = API_CALLER_LOCAL;
        out->roles = API_ROLE_FULL;
        return;
    }
    out->kind = API_CALLER_REMOTE;
    pthread_mutex_lock(&session_lock);
    const struct auth_session *s = client->auth;
    if (client->authenticated && s) {
        out->roles = s->roles;
        out->gen = s->gen;
        if (s->password) {
            out->account_id = s->account.id;
            out->pwgen = s->account.pwgen;
            snprintf(out->name, sizeof(out->name), "%s", s->username);
        } else {
            out->key_id = s->key_id;
            out->expires_at = s->expires_at;
            snprintf(out->name, sizeof(out->name), "%s", s->name);
        }
    }
    pthread_mutex_unlock(&session_lock);
}

bool api_auth_identity_current(struct api_identity *id)
{
    if (id->kind != API_CALLER_REMOTE)
        return true;
    if (id->expires_at && id->expires_at <= now_wall_ms())
        return false; /* an expired key ends without a credential change */
    unsigned gen = atomic_load(&auth_gen);
    if (id->gen == gen)
        return true;
    bool ok;
    if (id->account_id) {
        struct account_login login = {.id = id->account_id, .pwgen = id->pwgen};
        ok = account_current(&login);
    } else {
        ok = id->key_id && key_current(id->key_id, id->roles);
    }
    if (ok)
        id->gen = gen;
    return ok;
}

void api_auth_client_check(struct api_client *client)
{
    if (!client)
        return;
    pthread_mutex_lock(&session_lock);
    struct auth_session *s = client->auth;
    unsigned gen = atomic_load(&auth_gen);
    if (!s || s->gen == gen) {
        pthread_mutex_unlock(&session_lock);
        return;
    }
    if (session_current(s)) {
        s->gen = gen;
        pthread_mutex_unlock(&session_lock);
        return;
    }
    char what[160];
    if (s->password)
        snprintf(what, sizeof(what), "account %s was deleted or its password changed", s->username);
    else
        snprintf(what, sizeof(what), "API key %" PRId64 " was deleted", s->key_id);
    free(client->auth);
    client->auth = NULL;
    client->authenticated = false;
    pthread_mutex_unlock(&session_lock);
    log_info("auth: %s: %s; logged out", client->peer, what);
}

void api_auth_client_release(struct api_client *client)
{
    if (!client)
        return;
    pthread_mutex_lock(&session_lock);
    free(client->auth);
    client->auth = NULL;
    client->authenticated = false;
    pthread_mutex_unlock(&session_lock);
}

/* login_ex's data: "valid object" is how this method always worded it. */
static int login_data_check(struct api_call *call, json_t *data)
{
    if (!json_is_object(data)) {
        api_verr(call, "auth.login_ex.login_data", EINVAL, "Input should be a valid object");
        return -1;
    }
    return 0;
}

static const struct api_arg key_create_args[] = {API_ARG_OBJECT("data", key_fields, 0)};
static const struct api_arg query_args[] = {API_ARG_QUERY};
static const struct api_arg key_update_args[] = {
    {.name = "id", .type = API_T_INT, .flags = API_ARG_TYPE_MSG},
    {.name = "data",
     .type = API_T_OBJECT,
     .flags = API_PARTIAL,
     .fields = key_fields,
     .nfields = KEY_UPDATE_NFIELDS}};
static const struct api_arg key_delete_args[] = {
    {.name = "id", .type = API_T_INT, .flags = API_ARG_TYPE_MSG}};
/* The credentials are checked by the login itself (a wrong type is a
 * failed login, not a -32602), so they are API_T_ANY here. */
static const struct api_arg login_key_args[] = {{.name = "api_key", .type = API_T_ANY}};
static const struct api_arg login_args[] = {
    {.name = "username", .type = API_T_ANY},
    {.name = "password", .type = API_T_ANY},
    {.name = "otp_token", .type = API_T_STRING, .flags = API_ARG_OPTIONAL}};
static const struct api_arg login_ex_args[] = {
    {.name = "login_data", .type = API_T_OBJECT, .check = login_data_check}};

static const struct api_method auth_methods[] = {
    {"api_key.create", NULL, "Create an API key; the key is returned once and stored hashed.",
     key_create, API_ADMIN, API_ARGS(key_create_args)},
    {"api_key.query", NULL, "API keys (never the key or its hash).", key_query, API_READ,
     API_ARGS(query_args)},
    {"api_key.update", NULL,
     "Rename an API key or replace its roles (its sessions and subscriptions then end).",
     key_update, API_ADMIN, API_ARGS(key_update_args)},
    {"api_key.delete", NULL, "Delete an API key; its sessions are logged out.", key_delete,
     API_ADMIN, API_ARGS(key_delete_args)},
    {"auth.login_with_api_key", NULL, "Log this connection in; returns true or false.",
     auth_login_with_api_key, API_NO_AUTH | API_READ, API_ARGS(login_key_args)},
    {"auth.login", NULL,
     "Log this connection in with a local account's password; returns true or false.", auth_login,
     API_NO_AUTH | API_READ, API_ARGS(login_args)},
    {"auth.login_ex", NULL,
     "Log in (TrueNAS login_ex shape: login_data {mechanism: API_KEY_PLAIN|PASSWORD_PLAIN, "
     "username?, api_key|password}); returns {response_type, user_info}.",
     auth_login_ex, API_NO_AUTH | API_READ, API_ARGS(login_ex_args)},
    {"auth.me", NULL, "The logged-in identity.", auth_me, API_READ},
    {"auth.logout", NULL, "End this connection's login (allowed without one, as TrueNAS does).",
     auth_logout, API_NO_AUTH | API_READ},
};

void api_auth_sessions_changed(void)
{
    atomic_fetch_add(&auth_gen, 1);
    jobs_credentials_changed(); /* events end with the credential, at once */
}

void api_auth_init(void)
{
    account_init();
    api_register(auth_methods, ARRAY_SIZE(auth_methods));
}
