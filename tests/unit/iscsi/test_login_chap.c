/* CHAP: MD5 response vector and the iSCSI binary encodings. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "iscsi/iscsi_chap.h"

static void test_md5_vector(void **state)
{
    (void)state;
    uint8_t chal[16], out[16];
    for (int i = 0; i < 16; i++)
        chal[i] = (uint8_t)i;
    /* MD5(0x07 || "secretsecret1" || 00..0f), computed independently. */
    static const uint8_t want[16] = {0x68, 0x75, 0xf3, 0x08, 0x06, 0xcb, 0x16, 0xd4,
                                     0x1a, 0x4e, 0x8f, 0x0e, 0x86, 0x0a, 0x39, 0x21};
    assert_int_equal(iscsi_chap_response(7, "secretsecret1", chal, 16, out), 0);
    assert_memory_equal(out, want, 16);
    assert_true(iscsi_chap_equal(out, want, 16));
    out[15] ^= 1;
    assert_false(iscsi_chap_equal(out, want, 16));
}

static void test_encodings(void **state)
{
    (void)state;
    uint8_t buf[64];
    uint8_t seq[16];
    for (int i = 0; i < 16; i++)
        seq[i] = (uint8_t)i;
    assert_int_equal(iscsi_chap_decode("0x000102030405060708090a0B0c0d0e0f", buf, sizeof(buf)), 16);
    assert_memory_equal(buf, seq, 16);
    assert_int_equal(iscsi_chap_decode("0bAAECAwQFBgcICQoLDA0ODw==", buf, sizeof(buf)), 16);
    assert_memory_equal(buf, seq, 16);
    /* Odd hex digit count: leading zero nibble. */
    assert_int_equal(iscsi_chap_decode("0xabc", buf, sizeof(buf)), 2);
    assert_int_equal(buf[0], 0x0a);
    assert_int_equal(buf[1], 0xbc);
    assert_int_equal(iscsi_chap_decode("abc", buf, sizeof(buf)), -EINVAL);
    assert_int_equal(iscsi_chap_decode("0x", buf, sizeof(buf)), -EINVAL);
    assert_int_equal(iscsi_chap_decode("0xzz", buf, sizeof(buf)), -EINVAL);
    assert_int_equal(iscsi_chap_decode("0b@@@@", buf, sizeof(buf)), -EINVAL);
    assert_int_equal(iscsi_chap_decode("0x0102030405", buf, 2), -E2BIG);
    char hex[40];
    iscsi_chap_encode_hex(seq, 16, hex, sizeof(hex));
    assert_string_equal(hex, "0x000102030405060708090a0b0c0d0e0f");
    iscsi_chap_encode_hex(seq, 16, hex, 10); /* too small: empty */
    assert_string_equal(hex, "");
    uint8_t r1[16] = {0}, r2[16] = {0};
    assert_int_equal(iscsi_chap_random(r1, 16), 0);
    assert_int_equal(iscsi_chap_random(r2, 16), 0);
    assert_memory_not_equal(r1, r2, 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_md5_vector),
        cmocka_unit_test(test_encodings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
