/* Local accounts: password hashing, the account table, account.* methods
 * (see account.h). */
#include "api/account.h"

#include <crypt.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/auth.h"
#include "api/fields.h"
#include "api/store.h"
#include "api/validate.h"
#include "core/log.h"
#include "core/util.h"

static int64_t now_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the hash, bounded ---- */

/* A check costs ~16 MiB and ~100 ms of CPU: without a bound, a burst of
 * logins on many connections (each on its own API thread) would take the
 * memory and CPU of the data path. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned running;
} hash_slots = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void hash_slot_take(void)
{
    pthread_mutex_lock(&hash_slots.lock);
    if (hash_slots.running >= ACCOUNT_HASH_CONCURRENCY)
        log_info("auth: %u password checks running (the limit); a login waits its turn",
                 hash_slots.running);
    while (hash_slots.running >= ACCOUNT_HASH_CONCURRENCY)
        pthread_cond_wait(&hash_slots.cond, &hash_slots.lock);
    hash_slots.running++;
    pthread_mutex_unlock(&hash_slots.lock);
}

static void hash_slot_give(void)
{
    pthread_mutex_lock(&hash_slots.lock);
    hash_slots.running--;
    pthread_cond_signal(&hash_slots.cond);
    pthread_mutex_unlock(&hash_slots.lock);
}

/* crypt_r with setting (a salt or a whole hash) into out. 0 or -errno. */
static int crypt_into(const char *password, const char *setting, char *out, size_t len)
{
    struct crypt_data *cd = calloc(1, sizeof(*cd)); /* 32 KiB: not on the stack */
    if (!cd)
        return -ENOMEM;
    hash_slot_take();
    const char *h = crypt_r(password, setting, cd);
    hash_slot_give();
    int rc = 0;
    /* libxcrypt fails with NULL or a "*…" token, never a valid hash. */
    if (!h || h[0] == '*')
        rc = -EINVAL;
    else if ((size_t)snprintf(out, len, "%s", h) >= len)
        rc = -ENAMETOOLONG;
    explicit_bzero(cd, sizeof(*cd));
    free(cd);
    return rc;
}

int account_hash_password(const char *password, char *out, size_t len)
{
    char salt[CRYPT_GENSALT_OUTPUT_SIZE];
    /* "$y$", count 0 (libxcrypt's default cost), random bytes from the
     * library's own getentropy. */
    if (!crypt_gensalt_rn("$y$", 0, NULL, 0, salt, sizeof(salt))) {
        log_error("auth: crypt_gensalt_rn(yescrypt): %s", strerror(errno));
        return -EIO;
    }
    return crypt_into(password, salt, out, len);
}

int account_check_password(const char *password, const char *hash)
{
    char got[ACCOUNT_HASH_MAX];
    int rc = crypt_into(password, hash, got, sizeof(got));
    if (rc < 0)
        return rc;
    rc = auth_hash_equal(got, hash) ? 1 : 0;
    explicit_bzero(got, sizeof(got));
    return rc;
}

bool account_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > ACCOUNT_NAME_MAX || name[0] == '-' || name[0] == '.')
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '.' || *p == '-'))
            return false;
    return true;
}

/* A hash of a random password, made once: unknown users are checked
 * against it so that they cost the same time as known ones. */
static pthread_once_t dummy_once = PTHREAD_ONCE_INIT;
static char dummy_hash[ACCOUNT_HASH_MAX];

static void dummy_make(void)
{
    unsigned char rnd[16];
    char pw[33];
    if (getentropy(rnd, sizeof(rnd)) < 0)
        memset(rnd, 0x5a, sizeof(rnd));
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(pw + 2 * i, 3, "%02x", rnd[i]);
    if (account_hash_password(pw, dummy_hash, sizeof(dummy_hash)) < 0)
        dummy_hash[0] = 0;
    explicit_bzero(pw, sizeof(pw));
}

int account_verify(const char *username, const char *password, struct account_login *out)
{
    char hash[ACCOUNT_HASH_MAX] = "";
    bool found = false;
    if (account_name_valid(username)) {
        struct api_account_rec r;
        found = api_store()->account_get(username, &r, hash, sizeof(hash)) == 1;
        if (found) {
            out->id = r.id;
            out->pwgen = r.pwgen;
            snprintf(out->username, sizeof(out->username), "%s", username);
        }
    }
    if (!found) {
        pthread_once(&dummy_once, dummy_make);
        if (dummy_hash[0])
            (void)account_check_password(password, dummy_hash);
        return 0;
    }
    int rc = account_check_password(password, hash);
    explicit_bzero(hash, sizeof(hash));
    if (rc < 0)
        log_error("auth: checking the password of account %s failed: %s", username, strerror(-rc));
    return rc;
}

bool account_current(const struct account_login *login)
{
    return api_store()->account_current(login->id, login->pwgen);
}

/* ---- the field table: validates, decodes and encodes an account ---- */

/* account.set_password's body and the rows' username: username is the
 * member of struct api_account_rec (at most ACCOUNT_NAME_MAX bytes, which
 * its buffer holds); the password has no codec: it is hashed from the
 * request and never kept nor shown. */
static const struct api_field account_fields[] = {
    {.name = "username",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = ACCOUNT_NAME_MAX,
     API_AT(struct api_account_rec, username, api_codec_chars)},
    {.name = "password",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = ACCOUNT_PASSWORD_MAX},
};

/* ---- rows ---- */

/* {"$date": ms}, as TrueNAS shows a time. */
static json_t *date_value(int64_t ms)
{
    return json_pack("{s:I}", "$date", (json_int_t)ms);
}

/* The TrueNAS-shaped row of an account (the encoder): the table's fields,
 * then the times the store sets. */
static json_t *account_row(const struct api_account_rec *r)
{
    json_t *row = api_fields_row(r->id, account_fields, ARRAY_SIZE(account_fields), r);
    if (row &&
        (json_object_set_new(row, "created_at", date_value(r->created_at)) < 0 ||
         json_object_set_new(row, "password_changed_at", date_value(r->password_changed_at)) < 0)) {
        json_decref(row);
        row = NULL;
    }
    return row;
}

/* Every account (id 0) or account id only, as rows; NULL on error. */
static json_t *account_rows(int64_t id)
{
    struct api_account_rec *v;
    size_t n;
    if (api_store()->account_list(&v, &n) < 0)
        return NULL;
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < n; i++)
        if ((!id || v[i].id == id) && json_array_append_new(rows, account_row(&v[i])) < 0) {
            json_decref(rows);
            rows = NULL;
        }
    free(v);
    return rows;
}

/* ---- account.* ---- */

static int account_query(struct api_call *call, json_t *params, json_t **result)
{
    json_t *rows = account_rows(0);
    if (!rows)
        return api_error(call, EIO, "cannot read the accounts");
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

/* The decoded name's rule the field table cannot state (a NUL in either
 * string the table refuses); -1 with the error set. */
static int set_password_check(struct api_call *call, const char *name)
{
    if (!account_name_valid(name)) {
        api_verr(call, "account.set_password.username", EINVAL,
                 "Usernames are 1-%d letters, digits, '_', '.' or '-', not starting with '-' or "
                 "'.'",
                 ACCOUNT_NAME_MAX);
        return api_invalid(call);
    }
    return 0;
}

static int account_set_password(struct api_call *call, json_t *params, json_t **result)
{
    json_t *data = api_param(params, 0); /* checked against account_fields by the dispatcher */
    struct api_account_rec rec = {0};
    api_fields_decode(account_fields, ARRAY_SIZE(account_fields), data, &rec);
    const char *name = rec.username;
    if (set_password_check(call, name) < 0)
        return -1;
    /* the password (no codec): hashed from the request, never kept */
    const char *password = json_string_value(json_object_get(data, "password"));
    char hash[ACCOUNT_HASH_MAX];
    int rc = account_hash_password(password, hash, sizeof(hash));
    if (rc < 0)
        return api_error(call, rc, "cannot hash the password");
    int64_t id = 0;
    bool created = false;
    rc = api_store()->account_set_hash(name, hash, now_wall_ms(), &id, &created);
    explicit_bzero(hash, sizeof(hash));
    if (rc < 0)
        return api_error(call, rc, "cannot store the password of %s", name);
    if (!created)
        api_auth_sessions_changed(); /* sessions of the old password end */
    log_info("auth: %s: account %s %s", api_call_peer(call), name,
             created ? "created" : "password changed");
    json_t *rows = account_rows(id);
    json_t *row = json_array_size(rows) == 1 ? json_incref(json_array_get(rows, 0)) : NULL;
    json_decref(rows);
    if (!row)
        return api_error(call, EIO, "cannot read back account %s", name);
    *result = row;
    return 0;
}

static int account_delete(struct api_call *call, json_t *params, json_t **result)
{
    const char *name = json_string_value(api_param(params, 0)); /* the dispatcher checked it */
    bool existed;
    int rc = api_store()->account_delete(name, &existed);
    if (rc < 0)
        return api_error(call, rc, "cannot delete account %s", name);
    if (!existed)
        return api_error(call, ENOENT, "Account %s does not exist", name);
    api_auth_sessions_changed();
    log_info("auth: %s: account %s deleted", api_call_peer(call), name);
    *result = json_true();
    return 0;
}

/* The username's errors read "Input should be a valid string" even when
 * it is missing, as before the dispatcher checked it. */
static int username_check(struct api_call *call, json_t *v)
{
    if (!json_is_string(v)) {
        api_verr(call, "account.delete.username", EINVAL, "Input should be a valid string");
        return -1;
    }
    return 0;
}

static const struct api_arg set_password_args[] = {API_ARG_OBJECT("data", account_fields, 0)};
static const struct api_arg query_args[] = {API_ARG_QUERY};
static const struct api_arg delete_args[] = {
    {.name = "username", .type = API_T_STRING, .check = username_check}};

static const struct api_method account_methods[] = {
    {"account.set_password", NULL,
     "Create a local account or change its password (local socket only; stored as yescrypt).",
     account_set_password, API_LOCAL_ONLY | API_ADMIN, API_ARGS(set_password_args)},
    {"account.query", NULL, "Local accounts (never the password or its hash).", account_query,
     API_LOCAL_ONLY | API_READ, API_ARGS(query_args)},
    {"account.delete", NULL, "Delete a local account; its sessions are logged out.", account_delete,
     API_LOCAL_ONLY | API_ADMIN, API_ARGS(delete_args)},
};

void account_init(void)
{
    api_register(account_methods, ARRAY_SIZE(account_methods));
}
