/*
 * CHAP for iSCSI login (RFC 1994 with MD5, RFC 7143 §12.1.3): response
 * computation and the binary value encodings iSCSI uses (0x hex, 0b base64).
 * Pure functions; MD5 comes from GnuTLS. Thread-safe.
 */
#ifndef BLOCKD_ISCSI_CHAP_H
#define BLOCKD_ISCSI_CHAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ISCSI_CHAP_DIGEST_LEN 16 /* MD5 */
#define ISCSI_CHAP_CHALLENGE_LEN 16
#define ISCSI_CHAP_BINARY_MAX 1024 /* longest challenge/response we decode */

/* out = MD5(id || secret || challenge). 0 or -errno. */
int iscsi_chap_response(uint8_t id, const char *secret, const uint8_t *challenge,
                        size_t challenge_len, uint8_t out[ISCSI_CHAP_DIGEST_LEN]);

/* Decode "0x<hex>" or "0b<base64>" into out (max bytes). Returns the length
 * or -EINVAL (malformed, empty) / -E2BIG. */
int iscsi_chap_decode(const char *s, uint8_t *out, size_t max);

/* Encode as "0x<lower hex>" into out (outlen ≥ 2*len + 3). */
void iscsi_chap_encode_hex(const uint8_t *in, size_t len, char *out, size_t outlen);

/* Constant-time comparison. */
bool iscsi_chap_equal(const uint8_t *a, const uint8_t *b, size_t len);

/* Fill buf with random bytes (getrandom). 0 or -errno. */
int iscsi_chap_random(void *buf, size_t len);

/*
 * Failed CHAP logins are throttled per target and initiator name and per
 * target and source address with the mechanism API logins use
 * (core/ratelimit.h, its own table): ISCSI_CHAP_FAIL_MAX failures within
 * ISCSI_CHAP_FAIL_WINDOW_MS block the name, or the address, for that
 * target for ISCSI_CHAP_BLOCK_MS; while either is blocked a CHAP response
 * is not even checked. A right response forgets the failures against its
 * own target only: a login to a target the initiator may use does not
 * reset its guesses against another. Per address stops one
 * guesser; per name stops a guesser that rotates addresses. The cost: an
 * attacker who knows an initiator's name can keep that initiator out
 * while the attack goes on (logged), as with any lock-out.
 * iscsi_chap_limit_* live in iscsi_chap_limit.c; thread-safe, reactor-safe
 * (no I/O, no allocation).
 */
#define ISCSI_CHAP_FAIL_MAX 5
#define ISCSI_CHAP_FAIL_WINDOW_MS 10000
#define ISCSI_CHAP_BLOCK_MS 30000

struct sockaddr_storage;
/* 0 if a CHAP response from initiator at peer for target (its name; "" for
 * a discovery session) may be checked; else the milliseconds left of the
 * block, and *what says which key is blocked ("initiator" or "address"). */
uint64_t iscsi_chap_limit_check(const char *initiator, const char *target,
                                const struct sockaddr_storage *peer, const char **what);
/* A wrong response: count it for both keys; true if either just became
 * blocked (the caller logs it). */
bool iscsi_chap_limit_failed(const char *initiator, const char *target,
                             const struct sockaddr_storage *peer);
/* A right response: forget both keys' failures (for this target only). */
void iscsi_chap_limit_succeeded(const char *initiator, const char *target,
                                const struct sockaddr_storage *peer);
/* Forget every failure and block (fuzzers: each input starts afresh). */
void iscsi_chap_limit_reset(void);

#endif
