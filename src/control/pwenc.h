/*
 * Secrets the daemon must read back in cleartext (CHAP secrets: the
 * protocol needs them), stored encrypted so that the config DB alone does
 * not hand them out — the role of TrueNAS's pwenc.
 *
 * The key: 32 random bytes in <state dir>/pwenc.key, created on first
 * start, mode 0600, owned by the daemon's user, outside the DB (a DB copy,
 * backup or `sqlite3` dump shows only ciphertext). AES-256-GCM from
 * GnuTLS: a fresh 96-bit nonce per value, the 128-bit tag authenticates
 * it. Stored form: "$pwenc1$" + hex(nonce || ciphertext || tag).
 *
 * Losing the key file loses the secrets (they must be set again); a new
 * key is made at the next start and the undecryptable values are logged
 * by whoever reads them.
 *
 * Threads: pwenc_init at start-up (before db_open); the rest from any
 * thread (no shared state but the key, read-only after init).
 */
#ifndef BLOCKD_CONFIG_PWENC_H
#define BLOCKD_CONFIG_PWENC_H

#include <stdbool.h>
#include <stddef.h>

#define PWENC_PREFIX "$pwenc1$"
#define PWENC_PLAIN_MAX 256
/* prefix + hex(12 + PWENC_PLAIN_MAX + 16) + NUL */
#define PWENC_SEALED_MAX (sizeof(PWENC_PREFIX) + 2 * (12 + PWENC_PLAIN_MAX + 16) + 1)

/* Load <state_dir>/pwenc.key, or create it. 0 or -errno (logged). */
int pwenc_init(const char *state_dir);
/* Forget the key (tests). */
void pwenc_fini(void);

/* True if stored is a sealed value (else it is cleartext from an older
 * blockd, or the empty "not set"). */
bool pwenc_is_sealed(const char *stored);

/* Encrypt plain (< PWENC_PLAIN_MAX bytes) into out (PWENC_SEALED_MAX).
 * "" stays "" (not set). 0, -ENOKEY (no pwenc_init), -E2BIG, -EIO. */
int pwenc_seal(const char *plain, char *out, size_t len);

/* Decrypt a stored value into out (PWENC_PLAIN_MAX); a value that is not
 * sealed is copied as it is (rows written before encryption). 0, -ENOKEY,
 * -EBADMSG (wrong key or altered value), -E2BIG. out is zeroed on error. */
int pwenc_open(const char *stored, char *out, size_t len);

#endif
