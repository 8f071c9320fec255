/*
 * API keys and logins (src/api/auth.c): key format and hashing, constant-
 * time comparison, peer address parsing, the per-address rate limiter
 * with an injected clock, and the api_key.* / auth.* methods over a real
 * config DB, with a WebSocket-like client (starts unauthenticated).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/account.h"
#include "api/api.h"
#include "api/auth.h"
#include "core/ratelimit.h"
#include "control/apistore.h"
#include "control/db.h"
#include "testdb.h"

static void test_key_format(void **state)
{
    char a[128], b[128];
    assert_int_equal(auth_key_generate(42, a, sizeof(a)), 0);
    assert_int_equal(auth_key_generate(42, b, sizeof(b)), 0);
    assert_true(strncmp(a, "42-", 3) == 0);
    assert_int_equal(strlen(a), 3 + AUTH_KEY_SECRET_LEN);
    for (const char *p = a + 3; *p; p++)
        assert_true((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9'));
    assert_string_not_equal(a, b); /* random */
    char small[10];
    assert_int_equal(auth_key_generate(1, small, sizeof(small)), -ENOSPC);
}

static void test_hash(void **state)
{
    char h[65], h2[65];
    /* SHA-256("abc") */
    assert_int_equal(auth_key_hash("abc", 3, h), 0);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(auth_key_hash("abd", 3, h2), 0);
    assert_true(auth_hash_equal(h, h));
    assert_false(auth_hash_equal(h, h2));
    assert_false(auth_hash_equal("abc", "abcd"));
    assert_false(auth_hash_equal("", "a"));
    assert_true(auth_hash_equal("", ""));
}

static void test_peer_address(void **state)
{
    char b[64];
    auth_peer_address("ws:10.1.2.3:5000", b, sizeof(b));
    assert_string_equal(b, "10.1.2.3");
    auth_peer_address("wss:[::1]:443", b, sizeof(b));
    assert_string_equal(b, "::1");
    auth_peer_address("unix:pid=3,uid=0", b, sizeof(b));
    assert_string_equal(b, "unix:pid=3,uid=0");
    auth_peer_address(NULL, b, sizeof(b));
    assert_string_equal(b, "local");
    /* the throttle's keys: per mechanism, and per account for passwords */
    char k[AUTH_RATE_KEY_MAX];
    auth_rate_key("ws:10.1.2.3:5000", "key", NULL, k, sizeof(k));
    assert_string_equal(k, "key:10.1.2.3");
    auth_rate_key("wss:[::1]:443", "pw", "incus", k, sizeof(k));
    assert_string_equal(k, "pw:::1 u:incus");
}

static void test_rate_limit(void **state)
{
    auth_rate_reset();
    uint64_t t = 1000000;
    for (int i = 0; i < AUTH_FAIL_MAX - 1; i++) {
        assert_true(auth_rate_allowed("10.0.0.1", t));
        assert_false(auth_rate_failed("10.0.0.1", t));
        t += 100;
    }
    /* the fifth failure within the window blocks */
    assert_true(auth_rate_failed("10.0.0.1", t));
    assert_false(auth_rate_allowed("10.0.0.1", t + 1));
    assert_false(auth_rate_allowed("10.0.0.1", t + AUTH_BLOCK_MS - 1));
    /* another address is not affected */
    assert_true(auth_rate_allowed("10.0.0.2", t + 1));
    /* the block ends */
    assert_true(auth_rate_allowed("10.0.0.1", t + AUTH_BLOCK_MS));

    /* failures spread wider than the window never block */
    auth_rate_reset();
    t = 5000000;
    for (int i = 0; i < 3 * AUTH_FAIL_MAX; i++) {
        assert_false(auth_rate_failed("10.0.0.3", t));
        t += AUTH_FAIL_WINDOW_MS / 2 + 1;
        if (i % 2 == 1)
            t += AUTH_FAIL_WINDOW_MS;
    }
    assert_true(auth_rate_allowed("10.0.0.3", t));

    /* a success forgets the failures */
    auth_rate_reset();
    t = 9000000;
    for (int i = 0; i < AUTH_FAIL_MAX - 1; i++)
        auth_rate_failed("10.0.0.4", t);
    auth_rate_succeeded("10.0.0.4");
    assert_false(auth_rate_failed("10.0.0.4", t));
    assert_true(auth_rate_allowed("10.0.0.4", t));

    /* many addresses: the table evicts, never grows or crashes */
    auth_rate_reset();
    char a[32];
    for (int i = 0; i < 2000; i++) {
        snprintf(a, sizeof(a), "192.168.%d.%d", i / 256, i % 256);
        auth_rate_failed(a, t + (uint64_t)i);
    }
    auth_rate_reset();
}

/* ---- methods over a real DB ---- */

static json_t *rpc(struct api_client *client, const char *method, const char *params)
{
    char req[2048];
    snprintf(req, sizeof(req), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
             method, params);
    char *resp = client ? api_handle_text_client(req, strlen(req), client)
                        : api_handle_text(req, strlen(req), "test");
    assert_non_null(resp);
    json_t *r = json_loads(resp, 0, NULL);
    free(resp);
    assert_non_null(r);
    return r;
}

static void assert_errno(json_t *r, int errnum)
{
    json_t *e = json_object_get(r, "error");
    assert_non_null(e);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "data"), "error")),
                     errnum);
}

static void test_methods(void **state)
{
    auth_rate_reset();
    struct api_client ws = {.peer = "ws:10.9.9.9:1234", .authenticated = false};

    /* before login */
    json_t *r = rpc(&ws, "api_key.query", "[]");
    assert_errno(r, API_ENOTAUTHENTICATED);
    json_decref(r);

    /* create over the trusted local path */
    r = rpc(NULL, "api_key.create", "[{\"name\":\"one\"}]");
    json_t *res = json_object_get(r, "result");
    assert_non_null(res);
    char key[128];
    snprintf(key, sizeof(key), "%s", json_string_value(json_object_get(res, "key")));
    json_int_t id = json_integer_value(json_object_get(res, "id"));
    assert_true(id > 0);
    assert_non_null(json_object_get(json_object_get(res, "created_at"), "$date"));
    json_decref(r);

    /* duplicate name: a field error */
    r = rpc(NULL, "api_key.create", "[{\"name\":\"one\"}]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                     -32602);
    json_decref(r);
    r = rpc(NULL, "api_key.create", "[{\"name\":\"x\",\"bogus\":1}]");
    assert_non_null(json_object_get(r, "error"));
    json_decref(r);

    /* query never shows the key or a hash */
    r = rpc(NULL, "api_key.query", "[]");
    char *txt = json_dumps(r, 0);
    assert_null(strstr(txt, key + 3));
    assert_null(strstr(txt, "hash"));
    free(txt);
    json_decref(r);

    /* the DB holds the SHA-256, not the key */
    char hex[65];
    auth_key_hash(key, strlen(key), hex);
    db_lock();
    sqlite3_stmt *st;
    assert_int_equal(db_prepare("SELECT keyhash FROM api_key WHERE id = ?", &st), 0);
    sqlite3_bind_int64(st, 1, id);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), hex);
    sqlite3_finalize(st);
    db_unlock();

    /* wrong key: false, still unauthenticated */
    r = rpc(&ws, "auth.login_with_api_key", "[\"1-nope\"]");
    assert_true(json_is_false(json_object_get(r, "result")));
    json_decref(r);
    assert_false(ws.authenticated);
    r = rpc(&ws, "auth.login_with_api_key", "[5]");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "error"), "code")),
                     -32602);
    json_decref(r);

    /* right key */
    char params[256];
    snprintf(params, sizeof(params), "[\"%s\"]", key);
    r = rpc(&ws, "auth.login_with_api_key", params);
    assert_true(json_is_true(json_object_get(r, "result")));
    json_decref(r);
    assert_true(ws.authenticated);
    r = rpc(&ws, "auth.me", "[]");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(r, "result"), "api_key"), "name")),
                        "one");
    json_decref(r);

    /* login_ex shape */
    struct api_client ws2 = {.peer = "ws:10.9.9.8:1", .authenticated = false};
    snprintf(params, sizeof(params),
             "[{\"mechanism\":\"API_KEY_PLAIN\",\"username\":\"root\","
             "\"api_key\":\"%s\"}]",
             key);
    r = rpc(&ws2, "auth.login_ex", params);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "result"), "response_type")),
        "SUCCESS");
    json_decref(r);
    assert_true(ws2.authenticated);

    /* deleting the key logs its sessions out at their next call */
    snprintf(params, sizeof(params), "[%lld]", (long long)id);
    r = rpc(NULL, "api_key.delete", params);
    assert_true(json_is_true(json_object_get(r, "result")));
    json_decref(r);
    api_auth_client_check(&ws2);
    assert_false(ws2.authenticated);
    api_auth_client_release(&ws2);
    r = rpc(NULL, "api_key.delete", params);
    assert_errno(r, ENOENT);
    json_decref(r);

    /* logout */
    r = rpc(&ws, "auth.logout", "[]");
    assert_true(json_is_true(json_object_get(r, "result")));
    json_decref(r);
    assert_false(ws.authenticated);
    assert_null(ws.auth);

    /* the rate limit applies to the login methods */
    struct api_client ws3 = {.peer = "ws:10.7.7.7:1", .authenticated = false};
    for (int i = 0; i < AUTH_FAIL_MAX; i++) {
        r = rpc(&ws3, "auth.login_with_api_key", "[\"bad\"]");
        assert_true(json_is_false(json_object_get(r, "result")));
        json_decref(r);
    }
    r = rpc(&ws3, "auth.login_with_api_key", "[\"bad\"]");
    assert_errno(r, EBUSY);
    json_decref(r);
}

static void test_password_hash(void **state)
{
    char h[ACCOUNT_HASH_MAX], h2[ACCOUNT_HASH_MAX];
    assert_int_equal(account_hash_password("s3cret pw", h, sizeof(h)), 0);
    assert_true(strncmp(h, "$y$", 3) == 0); /* yescrypt */
    assert_null(strstr(h, "s3cret"));
    assert_int_equal(account_check_password("s3cret pw", h), 1);
    assert_int_equal(account_check_password("s3cret pX", h), 0);
    assert_int_equal(account_check_password("", h), 0);
    /* salted: the same password hashes differently */
    assert_int_equal(account_hash_password("s3cret pw", h2, sizeof(h2)), 0);
    assert_string_not_equal(h, h2);
    assert_int_equal(account_check_password("s3cret pw", h2), 1);
    /* a garbage stored hash never matches */
    assert_true(account_check_password("s3cret pw", "not-a-hash") <= 0);

    assert_true(account_name_valid("incus"));
    assert_true(account_name_valid("a.b-c_1"));
    assert_false(account_name_valid(""));
    assert_false(account_name_valid("-x"));
    assert_false(account_name_valid(".x"));
    assert_false(account_name_valid("a b"));
    assert_false(account_name_valid("a/b"));
    assert_false(account_name_valid("0123456789012345678901234567890123"));
}

static void test_accounts(void **state)
{
    auth_rate_reset();
    struct api_client ws = {.peer = "ws:10.8.8.8:1", .authenticated = false};
    struct api_client local = {.peer = "unix:pid=1", .authenticated = true, .local = true};
    /* managed on the local socket only */
    json_t *r = rpc(&local, "account.set_password",
                    "[{\"username\":\"alice\",\"password\":\"pw-alice-1\"}]");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "result"), "username")), "alice");
    char *txt = json_dumps(r, 0);
    assert_null(strstr(txt, "$y$")); /* never the hash */
    free(txt);
    json_decref(r);
    /* four typos, then the right password: in, and the address stays open */
    for (int i = 0; i < AUTH_FAIL_MAX - 1; i++) {
        r = rpc(&ws, "auth.login", "[\"alice\", \"typo\"]");
        assert_true(json_is_false(json_object_get(r, "result")));
        json_decref(r);
    }
    r = rpc(&ws, "auth.login", "[\"alice\", \"pw-alice-1\"]");
    assert_true(json_is_true(json_object_get(r, "result")));
    json_decref(r);
    assert_true(ws.authenticated);
    assert_true(auth_rate_allowed("10.8.8.8", ratelimit_now_ms()));
    /* a remote session, even logged in, cannot manage accounts */
    r = rpc(&ws, "account.query", "[]");
    assert_errno(r, EPERM);
    json_decref(r);
    r = rpc(&ws, "auth.me", "[]");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r, "result"), "pw_name")),
                        "alice");
    json_decref(r);
    /* a password change ends the session at its next call */
    r = rpc(&local, "account.set_password",
            "[{\"username\":\"alice\",\"password\":\"pw-alice-2\"}]");
    json_decref(r);
    api_auth_client_check(&ws);
    assert_false(ws.authenticated);
    r = rpc(&ws, "auth.login", "[\"alice\", \"pw-alice-1\"]");
    assert_true(json_is_false(json_object_get(r, "result")));
    json_decref(r);
    r = rpc(&ws, "auth.login_ex",
            "[{\"mechanism\":\"PASSWORD_PLAIN\",\"username\":\"alice\","
            "\"password\":\"pw-alice-2\"}]");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r, "result"), "response_type")),
        "SUCCESS");
    json_decref(r);
    /* deleting the account logs it out */
    r = rpc(&local, "account.delete", "[\"alice\"]");
    assert_true(json_is_true(json_object_get(r, "result")));
    json_decref(r);
    api_auth_client_check(&ws);
    assert_false(ws.authenticated);
    r = rpc(&local, "account.delete", "[\"alice\"]");
    assert_errno(r, ENOENT);
    json_decref(r);
    api_auth_client_release(&ws);
    auth_rate_reset();
}

/* A flood of new keys must not evict a key that is blocked. */
static void test_ratelimit_eviction(void **state)
{
    static struct ratelimit rl = RATELIMIT_INIT(2, 1000, 60000);
    uint64_t t = 100;
    ratelimit_failed(&rl, "victim", t);
    assert_true(ratelimit_failed(&rl, "victim", t));
    char k[32];
    for (int i = 0; i < 3 * RATELIMIT_SLOTS; i++) {
        snprintf(k, sizeof(k), "flood-%d", i);
        ratelimit_failed(&rl, k, t + 1 + (uint64_t)i);
    }
    assert_false(ratelimit_allowed(&rl, "victim", t + 5000));
    assert_true(ratelimit_blocked_for(&rl, "victim", t + 5000) > 0);
    assert_true(ratelimit_allowed(&rl, "victim", t + 60000));
}

int main(void)
{
    struct testdb tdb;
    if (testdb_make(&tdb, "/tmp/blockd-test-auth", "t.db") < 0)
        return 1;
    apistore_init();
    api_auth_init();
    if (db_open(tdb.path) < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_format),   cmocka_unit_test(test_hash),
        cmocka_unit_test(test_peer_address), cmocka_unit_test(test_rate_limit),
        cmocka_unit_test(test_methods),      cmocka_unit_test(test_password_hash),
        cmocka_unit_test(test_accounts),     cmocka_unit_test(test_ratelimit_eviction),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    db_close();
    testdb_remove(&tdb);
    return rc;
}
