/* PDU framing and CRC32C digests (RFC 3720 appendix B.4 vectors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/crc32c.h"
#include "iscsi/iscsi_pdu.h"

static void check_vector(const uint8_t *buf, size_t len, const uint8_t wire[4])
{
    uint32_t want;
    memcpy(&want, wire, 4); /* the digest travels little-endian */
    assert_int_equal(crc32c(0, buf, len), want);
    assert_int_equal(crc32c_sw(0, buf, len), want);
    /* Feeding it in pieces gives the same result. */
    for (size_t split = 0; split <= len; split += 5) {
        uint32_t c = crc32c(0, buf, split);
        assert_int_equal(crc32c(c, buf + split, len - split), want);
        uint32_t s = crc32c_sw(0, buf, split);
        assert_int_equal(crc32c_sw(s, buf + split, len - split), want);
    }
}

static void test_crc32c_vectors(void **state)
{
    (void)state;
    uint8_t buf[48];
    memset(buf, 0, 32);
    check_vector(buf, 32, (const uint8_t[]){0xaa, 0x36, 0x91, 0x8a});
    memset(buf, 0xff, 32);
    check_vector(buf, 32, (const uint8_t[]){0x43, 0xab, 0xa8, 0x62});
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    check_vector(buf, 32, (const uint8_t[]){0x4e, 0x79, 0xdd, 0x46});
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    check_vector(buf, 32, (const uint8_t[]){0x5c, 0xdb, 0x3f, 0x11});
    static const uint8_t read_pdu[48] = {0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                         0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00,
                                         0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00,
                                         0x00, 0x18, 0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                                         0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    check_vector(read_pdu, 48, (const uint8_t[]){0x56, 0x3a, 0x96, 0xd9});
}

static void test_crc32c_unaligned_long(void **state)
{
    (void)state;
    static uint8_t big[70000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (uint8_t)(i * 31 + 7);
    for (size_t off = 0; off < 9; off++)
        assert_int_equal(crc32c(0, big + off, sizeof(big) - 16),
                         crc32c_sw(0, big + off, sizeof(big) - 16));
}

static void test_frame(void **state)
{
    (void)state;
    uint8_t bhs[48] = {0};
    bhs[0] = ISCSI_OP_SCSI_CMD | ISCSI_BHS_IMMEDIATE;
    bhs[4] = 2; /* 8 bytes of AHS */
    iscsi_bhs_set_dsl(bhs, 513);
    assert_int_equal(iscsi_bhs_opcode(bhs), ISCSI_OP_SCSI_CMD);
    assert_true(iscsi_bhs_immediate(bhs));
    assert_int_equal(iscsi_bhs_dsl(bhs), 513);
    struct iscsi_pdu_frame f;
    assert_int_equal(iscsi_pdu_frame(bhs, false, false, &f), 0);
    assert_int_equal(f.ahs_len, 8);
    assert_int_equal(f.data_off, 56);
    assert_int_equal(f.total, 56 + 516);
    assert_int_equal(iscsi_pdu_frame(bhs, true, true, &f), 0);
    assert_int_equal(f.data_off, 60);
    assert_int_equal(f.total, 60 + 516 + 4);
    /* No data: no data digest. */
    iscsi_bhs_set_dsl(bhs, 0);
    assert_int_equal(iscsi_pdu_frame(bhs, true, true, &f), 0);
    assert_int_equal(f.total, 60);
    /* Largest DataSegmentLength round-trips through the 24-bit field. */
    iscsi_bhs_set_dsl(bhs, ISCSI_DSL_MAX);
    assert_int_equal(iscsi_bhs_dsl(bhs), ISCSI_DSL_MAX);
}

static void test_serial_numbers(void **state)
{
    (void)state;
    assert_true(iscsi_sn_lt(1, 2));
    assert_false(iscsi_sn_lt(2, 2));
    assert_true(iscsi_sn_lt(0xfffffff0u, 5)); /* wraps */
    assert_false(iscsi_sn_lt(5, 0xfffffff0u));
    assert_true(iscsi_sn_le(7, 7));
    assert_int_equal(iscsi_pad4(0), 0);
    assert_int_equal(iscsi_pad4(1), 3);
    assert_int_equal(iscsi_pad4(4), 0);
    assert_int_equal(iscsi_pad4(6), 2);
    assert_string_equal(iscsi_opcode_name(ISCSI_OP_R2T), "R2T");
    assert_string_equal(iscsi_opcode_name(0x1f), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_vectors),
        cmocka_unit_test(test_crc32c_unaligned_long),
        cmocka_unit_test(test_frame),
        cmocka_unit_test(test_serial_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
