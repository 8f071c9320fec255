/*
 * DH-HMAC-CHAP computations (nvme_dhchap.h). HMAC, hashes, base64 and
 * random bytes come from GnuTLS, the RFC 7919 group parameters too;
 * modular exponentiation is GMP's mpz_powm_sec, whose timing does not
 * depend on the exponent (our private value).
 */
#include <errno.h>
#include <gmp.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "nvme/nvme_dhchap.h"

static const struct {
    const char *name;
    size_t len;
    gnutls_mac_algorithm_t mac;
    gnutls_digest_algorithm_t dig;
} hashes[] = {
    [1] = {"SHA-256", 32, GNUTLS_MAC_SHA256, GNUTLS_DIG_SHA256},
    [2] = {"SHA-384", 48, GNUTLS_MAC_SHA384, GNUTLS_DIG_SHA384},
    [3] = {"SHA-512", 64, GNUTLS_MAC_SHA512, GNUTLS_DIG_SHA512},
};

static bool hash_known(int id)
{
    return id >= 1 && id <= 3;
}

size_t nvme_dhchap_hash_len(int hash_id)
{
    return hash_known(hash_id) ? hashes[hash_id].len : 0;
}

const char *nvme_dhchap_hash_name(int hash_id)
{
    return hash_known(hash_id) ? hashes[hash_id].name : "unknown hash";
}

struct group {
    const char *name;
    const gnutls_datum_t *prime, *gen;
    const unsigned *key_bits; /* the private exponent's size RFC 7919 suggests */
};

static const struct group groups[] = {
    [0] = {"null", NULL, NULL, NULL},
    [1] = {"ffdhe2048", &gnutls_ffdhe_2048_group_prime, &gnutls_ffdhe_2048_group_generator,
           &gnutls_ffdhe_2048_key_bits},
    [2] = {"ffdhe3072", &gnutls_ffdhe_3072_group_prime, &gnutls_ffdhe_3072_group_generator,
           &gnutls_ffdhe_3072_key_bits},
    [3] = {"ffdhe4096", &gnutls_ffdhe_4096_group_prime, &gnutls_ffdhe_4096_group_generator,
           &gnutls_ffdhe_4096_key_bits},
    [4] = {"ffdhe6144", &gnutls_ffdhe_6144_group_prime, &gnutls_ffdhe_6144_group_generator,
           &gnutls_ffdhe_6144_key_bits},
    [5] = {"ffdhe8192", &gnutls_ffdhe_8192_group_prime, &gnutls_ffdhe_8192_group_generator,
           &gnutls_ffdhe_8192_key_bits},
};

bool nvme_dhchap_dh_known(int dhgid)
{
    return dhgid >= 0 && dhgid <= 5;
}

size_t nvme_dhchap_dh_len(int dhgid)
{
    return dhgid >= 1 && dhgid <= 5 ? groups[dhgid].prime->size : 0;
}

const char *nvme_dhchap_dh_name(int dhgid)
{
    return nvme_dhchap_dh_known(dhgid) ? groups[dhgid].name : "unknown DH group";
}

/* ---- HMAC and hashes ---- */

int nvme_dhchap_hmac(int hash_id, const uint8_t *key, size_t keylen,
                     const struct nvme_dhchap_piece *pieces, int n, uint8_t *out)
{
    gnutls_hmac_hd_t h;
    if (!hash_known(hash_id) || gnutls_hmac_init(&h, hashes[hash_id].mac, key, keylen) < 0)
        return -EINVAL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (pieces[i].len && gnutls_hmac(h, pieces[i].p, pieces[i].len) < 0)
            rc = -EINVAL;
    gnutls_hmac_deinit(h, out);
    return rc;
}

int nvme_dhchap_augment(int hash_id, const uint8_t *skey, size_t skey_len, const uint8_t *chal,
                        uint8_t *out)
{
    uint8_t hashed[NVME_DHCHAP_HASH_MAX];
    if (!hash_known(hash_id) || gnutls_hash_fast(hashes[hash_id].dig, skey, skey_len, hashed) < 0)
        return -EINVAL;
    size_t hl = hashes[hash_id].len;
    struct nvme_dhchap_piece c = {chal, hl};
    int rc = nvme_dhchap_hmac(hash_id, hashed, hl, &c, 1, out);
    explicit_bzero(hashed, sizeof(hashed));
    return rc;
}

int nvme_dhchap_response(int hash_id, const struct nvme_dhchap_key *key, const uint8_t *chal,
                         uint32_t seq, uint16_t tid, const char *label, const char *nqn1,
                         const char *nqn2, uint8_t *out)
{
    uint8_t seq_le[4] = {(uint8_t)seq, (uint8_t)(seq >> 8), (uint8_t)(seq >> 16),
                         (uint8_t)(seq >> 24)};
    uint8_t tid_le[2] = {(uint8_t)tid, (uint8_t)(tid >> 8)};
    static const uint8_t zero = 0;
    const struct nvme_dhchap_piece p[] = {
        {chal, nvme_dhchap_hash_len(hash_id)},
        {seq_le, 4},
        {tid_le, 2},
        {&zero, 1},
        {label, strlen(label)},
        {nqn1, strlen(nqn1)},
        {&zero, 1},
        {nqn2, strlen(nqn2)},
    };
    return nvme_dhchap_hmac(hash_id, key->key, key->len, p, (int)(sizeof(p) / sizeof(p[0])), out);
}

int nvme_dhchap_random(void *buf, size_t len)
{
    return gnutls_rnd(GNUTLS_RND_NONCE, buf, len) < 0 ? -EIO : 0;
}

/* ---- the secret representation ---- */

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): the check value the
 * representation appends to the secret. */
static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* The base64 text between "DHHC-1:hh:" and the final ':' into raw; its
 * length (secret + CRC), or -1. */
static int key_decode(const char *b, size_t blen, uint8_t *raw, size_t max)
{
    gnutls_datum_t in = {(unsigned char *)b, (unsigned)blen}, out = {NULL, 0};
    if (gnutls_base64_decode2(&in, &out) < 0)
        return -1;
    int n = out.size <= max ? (int)out.size : -1;
    if (n > 0)
        memcpy(raw, out.data, out.size);
    explicit_bzero(out.data, out.size);
    gnutls_free(out.data);
    return n;
}

int nvme_dhchap_key_parse(const char *text, const char *nqn, struct nvme_dhchap_key *out,
                          const char **why)
{
    uint8_t raw[80];
    memset(out, 0, sizeof(*out));
    *why = "not \"DHHC-1:hh:<base64>:\"";
    if (!text || strncmp(text, "DHHC-1:0", 8) != 0 || text[8] < '0' || text[8] > '3' ||
        text[9] != ':')
        return -EINVAL;
    int transform = text[8] - '0';
    const char *b = text + 10, *end = strchr(b, ':');
    if (!end || end[1])
        return -EINVAL;
    int n = key_decode(b, (size_t)(end - b), raw, sizeof(raw));
    int rc = -EINVAL;
    if (n != 36 && n != 52 && n != 68) {
        *why = "the secret is not 32, 48 or 64 bytes";
        goto out;
    }
    size_t len = (size_t)n - 4;
    uint32_t crc = crc32_ieee(raw, len);
    if (raw[len] != (uint8_t)crc || raw[len + 1] != (uint8_t)(crc >> 8) ||
        raw[len + 2] != (uint8_t)(crc >> 16) || raw[len + 3] != (uint8_t)(crc >> 24)) {
        *why = "its CRC-32 does not match";
        goto out;
    }
    if (transform == 0) {
        memcpy(out->key, raw, len);
        out->len = len;
        rc = 0;
        goto out;
    }
    const struct nvme_dhchap_piece p[] = {{nqn, strlen(nqn)}, {"NVMe-over-Fabrics", 17}};
    rc = nvme_dhchap_hmac(transform, raw, len, p, 2, out->key);
    out->len = nvme_dhchap_hash_len(transform);
    *why = rc ? "the transformation failed" : NULL;
out:
    explicit_bzero(raw, sizeof(raw));
    if (rc == 0)
        *why = NULL;
    return rc;
}

/* ---- Diffie-Hellman ---- */

/* GMP's allocations hold exponents and shared secrets: wipe them when
 * they are freed or moved (for every GMP user in the process, GnuTLS's
 * included, which costs them nothing but a memset). Both are malloc based,
 * like GMP's defaults, so a block allocated before they were set is freed
 * by them correctly. */
static void *gmp_realloc_wipe(void *p, size_t old, size_t size)
{
    void *n = malloc(size);
    if (!n)
        abort(); /* as GMP's own allocator does */
    memcpy(n, p, old < size ? old : size);
    explicit_bzero(p, old);
    free(p);
    return n;
}

static void gmp_free_wipe(void *p, size_t size)
{
    explicit_bzero(p, size);
    free(p);
}

static pthread_once_t gmp_once = PTHREAD_ONCE_INIT;

static void gmp_setup(void)
{
    mp_set_memory_functions(NULL, gmp_realloc_wipe, gmp_free_wipe);
}

void nvme_dhchap_init(void)
{
    pthread_once(&gmp_once, gmp_setup);
}

struct nvme_dh {
    int dhgid;
    mpz_t p, x;
};

static void mpz_from(mpz_t z, const uint8_t *b, size_t len)
{
    mpz_import(z, len, 1, 1, 1, 0, b);
}

/* z into len bytes, big endian, left-padded with zeros (z < 256^len). */
static void mpz_to(const mpz_t z, uint8_t *out, size_t len)
{
    size_t n = (mpz_sizeinbase(z, 2) + 7) / 8;
    memset(out, 0, len);
    if (mpz_sgn(z) != 0 && n <= len)
        mpz_export(out + (len - n), NULL, 1, 1, 1, 0, z);
}

struct nvme_dh *nvme_dh_new(int dhgid, uint8_t *pub)
{
    if (dhgid < 1 || dhgid > 5)
        return NULL;
    nvme_dhchap_init();
    const struct group *g = &groups[dhgid];
    struct nvme_dh *dh = calloc(1, sizeof(*dh));
    uint8_t rnd[NVME_DHCHAP_DH_MAX];
    size_t bytes = (*g->key_bits + 7) / 8;
    if (!dh || bytes > sizeof(rnd) || gnutls_rnd(GNUTLS_RND_KEY, rnd, bytes) < 0) {
        free(dh);
        return NULL;
    }
    dh->dhgid = dhgid;
    mpz_inits(dh->p, dh->x, NULL);
    mpz_from(dh->p, g->prime->data, g->prime->size);
    mpz_from(dh->x, rnd, bytes);
    explicit_bzero(rnd, sizeof(rnd));
    mpz_setbit(dh->x, *g->key_bits - 1); /* never a small exponent */
    mpz_t gen, y;
    mpz_inits(gen, y, NULL);
    mpz_from(gen, g->gen->data, g->gen->size);
    mpz_powm_sec(y, gen, dh->x, dh->p);
    mpz_to(y, pub, g->prime->size);
    mpz_clears(gen, y, NULL);
    return dh;
}

int nvme_dh_shared(struct nvme_dh *dh, const uint8_t *peer, size_t len, uint8_t *out)
{
    size_t plen = groups[dh->dhgid].prime->size;
    if (len != plen)
        return -EINVAL;
    mpz_t y, max, k;
    mpz_inits(y, max, k, NULL);
    mpz_from(y, peer, len);
    mpz_sub_ui(max, dh->p, 2);
    int rc = -EINVAL;
    /* 1 and p-1 would make the secret known to anyone watching. */
    if (mpz_cmp_ui(y, 2) >= 0 && mpz_cmp(y, max) <= 0) {
        mpz_powm_sec(k, y, dh->x, dh->p);
        mpz_to(k, out, plen);
        rc = 0;
    }
    mpz_clears(y, max, k, NULL);
    return rc;
}

void nvme_dh_free(struct nvme_dh *dh)
{
    if (!dh)
        return;
    mpz_clears(dh->p, dh->x, NULL);
    free(dh);
}
