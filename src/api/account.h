/*
 * Local accounts for password logins (auth.login, auth.login_ex
 * PASSWORD_PLAIN) on the remote API.
 *
 * An account is a name and a password hash in the config DB (table
 * account, reached through api/store.h). Passwords are hashed with yescrypt from libxcrypt (the
 * crypt(3) of Debian, /etc/shadow's default): a salted KDF that costs
 * ~100 ms and 16 MiB per check, so a stolen DB does not give passwords away
 * cheaply. At most ACCOUNT_HASH_CONCURRENCY checks run at once (CPU and
 * memory bound); further callers wait their turn (logged).
 *
 * Managed only from the local Unix socket (flag API_LOCAL_ONLY):
 *   account.set_password {username, password}  create or change
 *   account.query [filters, options]           never the hash
 *   account.delete username                    its sessions log out
 * blockctl user set-password NAME | list | delete NAME call them.
 *
 * Every account is a full administrator, with the rights of an API key.
 * Threads: API threads only (a check blocks for the hash); thread-safe.
 */
#ifndef BLOCKD_API_ACCOUNT_H
#define BLOCKD_API_ACCOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACCOUNT_NAME_MAX 32
#define ACCOUNT_PASSWORD_MAX 1024
#define ACCOUNT_HASH_MAX 256
#define ACCOUNT_HASH_CONCURRENCY 2

/* Register the account.* methods (api_auth_init calls it). The account
 * table and its SQL are control/apistore.c's (api/store.h). */
void account_init(void);

/* Who logged in: enough to re-check the login later (account_current). */
struct account_login {
    int64_t id;
    int64_t pwgen; /* bumped by each password change */
    char username[ACCOUNT_NAME_MAX + 1];
};

/*
 * Check username/password. 1 and *out filled when they match, 0 when not
 * (unknown user or wrong password: both take one hash, so timing does not
 * tell which), -errno on failure (logged). Blocks ~100 ms; API threads
 * only. Takes db_lock() only to read the row, never across the hash.
 */
int account_verify(const char *username, const char *password, struct account_login *out);

/* True while the account of a login still exists with the same password. */
bool account_current(const struct account_login *login);

/* ---- pure parts, exposed for unit tests ---- */

/* yescrypt hash of password with a fresh salt into out
 * (ACCOUNT_HASH_MAX bytes). 0 or -errno. */
int account_hash_password(const char *password, char *out, size_t len);
/* 1 if password matches hash, 0 if not, -errno. Constant-time compare. */
int account_check_password(const char *password, const char *hash);
/* 1-32 of [A-Za-z0-9_.-], not starting with '-' or '.'. */
bool account_name_valid(const char *name);

#endif
