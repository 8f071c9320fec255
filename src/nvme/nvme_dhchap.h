/*
 * The DH-HMAC-CHAP computations (NVMe base specification 2.0, 8.13.5) for
 * nvme_auth.c: the secret representation "DHHC-1:hh:<base64 of secret and
 * CRC-32>:" and its transformation, HMAC and hashes (GnuTLS), the
 * augmented challenge, the responses, and finite field Diffie-Hellman in
 * the RFC 7919 groups (GnuTLS's primes, GMP's constant-time modular
 * exponentiation). Pure functions over the caller's buffers: any thread.
 * Secrets in the caller's buffers are the caller's to wipe; what these
 * functions allocate is wiped before it is freed.
 */
#ifndef BLOCKD_NVME_DHCHAP_H
#define BLOCKD_NVME_DHCHAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NVME_DHCHAP_HASH_MAX 64 /* SHA-512 */
#define NVME_DHCHAP_DH_MAX 1024 /* ffdhe8192: 8192 bits */

/* Hash identifiers: 1 SHA-256, 2 SHA-384, 3 SHA-512. The digest length,
 * or 0 for an unknown identifier. */
size_t nvme_dhchap_hash_len(int hash_id);
/* DH group identifiers: 0 null, 1 ffdhe2048, 2 ffdhe3072, 3 ffdhe4096,
 * 4 ffdhe6144, 5 ffdhe8192. Whether the identifier is known, and the
 * length of a DH value in bytes (0 for null). */
bool nvme_dhchap_dh_known(int dhgid);
size_t nvme_dhchap_dh_len(int dhgid);
const char *nvme_dhchap_dh_name(int dhgid);
const char *nvme_dhchap_hash_name(int hash_id);

/* A secret after the transformation: what HMAC takes as its key. */
struct nvme_dhchap_key {
    uint8_t key[NVME_DHCHAP_HASH_MAX];
    size_t len;
};

/*
 * Parse a secret in its representation, check its CRC-32 and apply the
 * transformation its "hh" names with nqn (HMAC(hash, secret, nqn ||
 * "NVMe-over-Fabrics"); hh 00: the secret as it is). 0, or -EINVAL with
 * *why set to a static reason.
 */
int nvme_dhchap_key_parse(const char *text, const char *nqn, struct nvme_dhchap_key *out,
                          const char **why);

/* HMAC with hash_id over the concatenation of n pieces into out (the
 * digest length). 0 or -EINVAL. */
struct nvme_dhchap_piece {
    const void *p;
    size_t len;
};
int nvme_dhchap_hmac(int hash_id, const uint8_t *key, size_t keylen,
                     const struct nvme_dhchap_piece *pieces, int n, uint8_t *out);

/* The augmented challenge: HMAC(H(session key), challenge), hl bytes. */
int nvme_dhchap_augment(int hash_id, const uint8_t *skey, size_t skey_len, const uint8_t *chal,
                        uint8_t *out);

/*
 * A response: HMAC(key, chal || seq (LE32) || tid (LE16) || 00h || label ||
 * nqn1 || 00h || nqn2), with chal already augmented when a DH group is in
 * use. The host's response uses label "HostHost", nqn1 the host NQN and
 * nqn2 the subsystem NQN; the controller's "Controller", the subsystem NQN
 * then the host NQN.
 */
int nvme_dhchap_response(int hash_id, const struct nvme_dhchap_key *key, const uint8_t *chal,
                         uint32_t seq, uint16_t tid, const char *label, const char *nqn1,
                         const char *nqn2, uint8_t *out);

/* Random bytes from GnuTLS (nonce quality for challenges). 0 or -EIO. */
int nvme_dhchap_random(void *buf, size_t len);

/* Have GMP wipe what it frees (exponents, shared secrets live in its
 * memory): once, before threads use GMP (nvme_target_init); nvme_dh_new
 * makes sure of it too. */
void nvme_dhchap_init(void);

/* One side of an ephemeral Diffie-Hellman exchange in group dhgid (1..5). */
struct nvme_dh;
/* A new private exponent and its public value g^x mod p into pub
 * (nvme_dhchap_dh_len bytes, big endian, left-padded). NULL on failure. */
struct nvme_dh *nvme_dh_new(int dhgid, uint8_t *pub);
/* The shared secret peer^x mod p into out (the group's length, padded):
 * 0, or -EINVAL when peer is not a value in 2..p-2 of that length. */
int nvme_dh_shared(struct nvme_dh *dh, const uint8_t *peer, size_t len, uint8_t *out);
void nvme_dh_free(struct nvme_dh *dh);

#endif
