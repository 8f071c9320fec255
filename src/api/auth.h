/*
 * API keys and logins for the remote (WebSocket) transport.
 *
 * Methods: api_key.create {name} → the key, shown once; api_key.query;
 * api_key.delete [id]; auth.login_with_api_key [key] → bool;
 * auth.login [username, password, otp_token?] → bool (local accounts,
 * api/account.h); auth.login_ex {mechanism: "API_KEY_PLAIN" | "PASSWORD_PLAIN",
 * …}; auth.me; auth.logout.
 *
 * Keys are "<id>-<64 random alphanumerics>" (~380 bits from gnutls_rnd).
 * Only SHA-256(key) is stored: with that much entropy there is no
 * dictionary to slow down, so a salted slow KDF (PBKDF2) would cost every
 * login milliseconds and add nothing; the hash is looked up by its unique
 * index. api_key.query never returns the key or its hash.
 *
 * Failed logins are logged with the peer and rate-limited (core/ratelimit.h)
 * per source address and what is guessed: API keys per address, passwords
 * per address and account (auth_rate_key). AUTH_FAIL_MAX failures within
 * AUTH_FAIL_WINDOW_MS block that key for AUTH_BLOCK_MS; while blocked every
 * such login is refused with -32001 EBUSY "Rate Limit Exceeded" (the
 * TrueNAS error), even a correct one. A success forgets only its own key's
 * failures: a valid API key does not reset the password guesses of its
 * address, nor one account's login another account's.
 *
 * Start-up: apistore_init() (control/apistore.h: the tables and their SQL,
 * behind api/store.h) and api_auth_init() (the methods), before db_open().
 * Threads: handlers run on API threads; everything here is thread-safe.
 */
#ifndef BLOCKD_API_AUTH_H
#define BLOCKD_API_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"

#define AUTH_FAIL_MAX 5
#define AUTH_FAIL_WINDOW_MS 10000
#define AUTH_BLOCK_MS 30000
#define AUTH_KEY_SECRET_LEN 64

/* Register the api_key.* / auth.* / account.* methods. */
void api_auth_init(void);

/*
 * Per-connection login state for transports that need login: call
 * api_auth_client_check() before dispatching each request (it logs the
 * client out if its key was deleted meanwhile) and
 * api_auth_client_release() when the connection ends (frees client->auth).
 */
void api_auth_client_check(struct api_client *client);
void api_auth_client_release(struct api_client *client);

/*
 * The identity a client's calls run with (api.h struct api_identity): the
 * local administrator for the Unix socket, else the login's (its key's
 * roles, or FULL_ADMIN for a password account), or no roles before login.
 * Any API thread.
 */
void api_auth_identity(struct api_client *client, struct api_identity *out);
/* Whether id's credential (key or account password) still stands and has
 * not expired; cheap unless a credential changed since id->gen (then one
 * DB lookup, and id->gen is updated). Local and internal identities always
 * stand. */
bool api_auth_identity_current(struct api_identity *id);

/* A credential was deleted or changed (API key, account password): every
 * session re-checks its own at its next call. Any thread. */
void api_auth_sessions_changed(void);

/*
 * Check an API key presented outside a JSON-RPC login (HTTP
 * "Authorization: Bearer <key>", for /metrics), with the same rate limit
 * per source address as the logins. peer as in the logs ("ws:1.2.3.4:5").
 * Blocking (a DB lookup): API threads only. 0 valid, -EACCES invalid,
 * -EBUSY the address is blocked.
 */
int auth_check_key(const char *key, size_t len, const char *peer);

/* ---- pure parts, exposed for unit tests ---- */

/* Make a new key string for id into buf (at least 96 bytes). 0 or -errno. */
int auth_key_generate(int64_t id, char *buf, size_t len);
/* Lowercase hex SHA-256 of key into hex (65 bytes). 0 or -EIO. */
int auth_key_hash(const char *key, size_t keylen, char hex[65]);
/* Constant-time comparison of two equal-length strings. */
bool auth_hash_equal(const char *a, const char *b);

/* "ws:10.1.2.3:5000" → "10.1.2.3"; "wss:[::1]:80" → "::1"; others as given. */
void auth_peer_address(const char *peer, char *buf, size_t len);

/* The throttle's key for a login from peer ("ws:1.2.3.4:5") with mech
 * ("key" or "pw") against target (the account name; NULL for keys) into buf
 * (AUTH_RATE_KEY_MAX bytes). */
#define AUTH_RATE_KEY_MAX 160
void auth_rate_key(const char *peer, const char *mech, const char *target, char *buf, size_t len);

/*
 * Rate limiter over a fixed table of addresses (least recently seen
 * evicted). now_ms is a monotonic clock (injected for tests).
 * auth_rate_allowed: false while addr is blocked.
 * auth_rate_failed: records a failure; returns true if addr just became
 * blocked. auth_rate_succeeded: forgets addr's failures.
 * auth_rate_reset: empties the table (tests).
 */
bool auth_rate_allowed(const char *addr, uint64_t now_ms);
bool auth_rate_failed(const char *addr, uint64_t now_ms);
void auth_rate_succeeded(const char *addr);
void auth_rate_reset(void);

#endif
