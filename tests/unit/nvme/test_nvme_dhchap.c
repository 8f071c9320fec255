/* Unit tests for the DH-HMAC-CHAP computations (src/nvme/nvme_dhchap.c):
 * the secret representation, its CRC-32 and transformation, a host
 * response, the augmented challenge, and Diffie-Hellman agreement. The
 * expected values were computed apart from our code: the transformation
 * by nvme-cli (`nvme gen-dhchap-key -s 000102...1f -m 1 -n nqn.x` stores
 * that transformation of the secret) and by Python's hmac/hashlib. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "nvme/nvme_dhchap.h"

/* The 32-byte secret 00h..1Fh with its CRC-32, base64. */
#define SECRET32_B64 "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR"
#define NQN "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100"

static void hex(const char *h, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(h + 2 * i, "%2x", &v), 1);
        out[i] = (uint8_t)v;
    }
}

static void expect_key(const char *text, const char *nqn, const char *want_hex, size_t len)
{
    struct nvme_dhchap_key k;
    const char *why = NULL;
    uint8_t want[64];
    hex(want_hex, want, len);
    assert_int_equal(nvme_dhchap_key_parse(text, nqn, &k, &why), 0);
    assert_null(why);
    assert_int_equal(k.len, len);
    assert_memory_equal(k.key, want, len);
}

static void test_key_transform(void **state)
{
    (void)state;
    /* 00: the secret itself. */
    expect_key("DHHC-1:00:" SECRET32_B64 ":", NQN,
               "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", 32);
    /* 01: HMAC-SHA-256(secret, NQN || "NVMe-over-Fabrics"), as nvme-cli computes it. */
    expect_key("DHHC-1:01:" SECRET32_B64 ":", "nqn.x",
               "b39f2b8965f4b6eb72abeb19854a531b2742ac4a2c5c60b2768e53576777b77d", 32);
    expect_key("DHHC-1:01:" SECRET32_B64 ":", NQN,
               "166d822042f045f0fbf284e3931db29827617f77a5d1615e12160de2815a9cbd", 32);
    expect_key("DHHC-1:02:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ"
               "==:",
               NQN,
               "9bce93a80ef56e4bbf8a5beea17b6d5b391709628c5fab8b142b0b9a92d1443d74ef414fe0fdbfe5b3"
               "44a577fd8d3386",
               48);
    expect_key("DHHC-1:03:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMz"
               "Q1Njc4OTo7PD0+P4zODhA=:",
               NQN,
               "7ca654216065df4bd053eab24282394a53ccc87587617394d41efd694638629b9caccb1b97903a7145"
               "662b5428644aa08c14498e2192b55117bd56b3d6c705de",
               64);
}

static void test_key_refused(void **state)
{
    (void)state;
    struct nvme_dhchap_key k;
    const char *why;
    /* A CRC-32 off by one bit, in the last base64 character. */
    assert_int_equal(
        nvme_dhchap_key_parse("DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaQ:", NQN,
                              &k, &why),
        -EINVAL);
    assert_string_equal(why, "its CRC-32 does not match");
    /* 16 bytes: too short. */
    assert_int_equal(
        nvme_dhchap_key_parse("DHHC-1:00:AAECAwQFBgcICQoLDA0OD9iVbIk=:", NQN, &k, &why), -EINVAL);
    const char *bad[] = {"DHHC-1:04:" SECRET32_B64 ":",
                         "DHHC-2:01:" SECRET32_B64 ":",
                         "DHHC-1:01:" SECRET32_B64,
                         "DHHC-1:01:" SECRET32_B64 ":x",
                         "",
                         NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(nvme_dhchap_key_parse(bad[i], NQN, &k, &why), -EINVAL);
    assert_int_equal(nvme_dhchap_key_parse(NULL, NQN, &k, &why), -EINVAL);
}

static void test_response(void **state)
{
    (void)state;
    struct nvme_dhchap_key k;
    const char *why;
    assert_int_equal(nvme_dhchap_key_parse("DHHC-1:01:" SECRET32_B64 ":", NQN, &k, &why), 0);
    uint8_t chal[32], out[64], want[32];
    for (int i = 0; i < 32; i++)
        chal[i] = (uint8_t)(0x40 + i);
    assert_int_equal(nvme_dhchap_response(1, &k, chal, 0x01020304, 0x0506, "HostHost", NQN,
                                          "nqn.2026-01.org.blockd:unit", out),
                     0);
    hex("c43958e65c28e9006fbff9b3da15ec73102ce6b3cc6b2d631ec8d0d6f76f8a60", want, 32);
    assert_memory_equal(out, want, 32);
    /* Augmented with a session key 00h..FFh: HMAC(SHA-256(key), C). */
    uint8_t skey[256];
    for (int i = 0; i < 256; i++)
        skey[i] = (uint8_t)i;
    assert_int_equal(nvme_dhchap_augment(1, skey, sizeof(skey), chal, out), 0);
    hex("ee33acef1402d9ce81ddd89b5c3b67fc765868286bc2cf444bf133d5e59cd370", want, 32);
    assert_memory_equal(out, want, 32);
    assert_int_equal(nvme_dhchap_augment(4, skey, sizeof(skey), chal, out), -EINVAL);
}

static void test_dh_agreement(void **state)
{
    (void)state;
    static uint8_t pa[NVME_DHCHAP_DH_MAX], pb[NVME_DHCHAP_DH_MAX];
    static uint8_t ka[NVME_DHCHAP_DH_MAX], kb[NVME_DHCHAP_DH_MAX];
    for (int g = 1; g <= 2; g++) {
        size_t len = nvme_dhchap_dh_len(g);
        assert_int_equal(len, g == 1 ? 256 : 384);
        struct nvme_dh *a = nvme_dh_new(g, pa), *b = nvme_dh_new(g, pb);
        assert_non_null(a);
        assert_non_null(b);
        assert_memory_not_equal(pa, pb, len);
        assert_int_equal(nvme_dh_shared(a, pb, len, ka), 0);
        assert_int_equal(nvme_dh_shared(b, pa, len, kb), 0);
        assert_memory_equal(ka, kb, len);
        /* 1 is not a value a peer may send; nor is a value of another length. */
        memset(pb, 0, len);
        pb[len - 1] = 1;
        assert_int_equal(nvme_dh_shared(a, pb, len, ka), -EINVAL);
        assert_int_equal(nvme_dh_shared(a, pa, len - 1, ka), -EINVAL);
        nvme_dh_free(a);
        nvme_dh_free(b);
    }
    assert_null(nvme_dh_new(0, pa));
    assert_null(nvme_dh_new(6, pa));
    assert_int_equal(nvme_dhchap_dh_len(5), 1024);
    assert_int_equal(nvme_dhchap_dh_len(0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_transform),
        cmocka_unit_test(test_key_refused),
        cmocka_unit_test(test_response),
        cmocka_unit_test(test_dh_agreement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
