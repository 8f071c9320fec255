/* Unit tests for the NVMe/TCP header checks and completion entries
 * (src/nvme/nvme_pdu.c): what a host's common header may claim. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nvme/nvme_proto.h"

static int check(uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo, uint32_t plen, bool hd,
                 bool dd, uint32_t *data_len, uint32_t *fei)
{
    struct nvme_tcp_ch ch = {type, flags, hlen, pdo, plen};
    return nvme_tcp_ch_check(&ch, hd, dd, 8192, data_len, fei);
}

static void test_capsule(void **state)
{
    (void)state;
    uint32_t dl, fei;
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 0, 72, false, false, &dl, &fei), 0);
    assert_int_equal(dl, 0);
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 72, 72 + 4096, false, false, &dl, &fei), 0);
    assert_int_equal(dl, 4096);
    /* digests: header digest flag must match what was negotiated */
    assert_int_equal(check(NVME_TCP_CMD, NVME_TCP_F_HDGST | NVME_TCP_F_DDGST, 72, 76, 76 + 512 + 4,
                           true, true, &dl, &fei),
                     0);
    assert_int_equal(dl, 512);
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 0, 76, true, false, &dl, &fei),
                     NVME_TCP_FES_INVALID_HEADER);
    assert_int_equal(fei, 1);
    /* wrong HLEN, PLEN shorter than the header, PDO inside the header */
    assert_int_equal(check(NVME_TCP_CMD, 0, 64, 0, 64, false, false, &dl, &fei),
                     NVME_TCP_FES_INVALID_HEADER);
    assert_int_equal(fei, 2);
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 0, 40, false, false, &dl, &fei),
                     NVME_TCP_FES_INVALID_HEADER);
    assert_int_equal(fei, 4);
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 10, 200, false, false, &dl, &fei),
                     NVME_TCP_FES_INVALID_HEADER);
    assert_int_equal(fei, 3);
    /* more in-capsule data than allowed */
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 72, 72 + 8193, false, false, &dl, &fei),
                     NVME_TCP_FES_DATA_LIMIT);
    assert_int_equal(check(NVME_TCP_CMD, 0, 72, 72, 0xffffffffu, false, false, &dl, &fei),
                     NVME_TCP_FES_DATA_LIMIT);
}

static void test_other_types(void **state)
{
    (void)state;
    uint32_t dl, fei;
    assert_int_equal(check(NVME_TCP_H2C_DATA, 0, 24, 24, 24 + 100, false, false, &dl, &fei), 0);
    assert_int_equal(dl, 100);
    assert_int_equal(check(NVME_TCP_H2C_TERM, 0, 24, 0, 24 + 128, false, false, &dl, &fei), 0);
    assert_int_equal(check(NVME_TCP_H2C_TERM, 0, 24, 0, 24 + 129, false, false, &dl, &fei),
                     NVME_TCP_FES_INVALID_HEADER);
    assert_int_equal(check(NVME_TCP_ICREQ, 0, 128, 0, 128, false, false, &dl, &fei),
                     NVME_TCP_FES_PDU_SEQ);
    assert_int_equal(check(NVME_TCP_C2H_DATA, 0, 24, 0, 24, false, false, &dl, &fei),
                     NVME_TCP_FES_INVALID_HEADER);
    assert_int_equal(check(0x55, 0, 8, 0, 8, false, false, &dl, &fei), NVME_TCP_FES_INVALID_HEADER);
}

static void test_cqe(void **state)
{
    (void)state;
    uint8_t c[16];
    nvme_cqe_build(c, 0x1122334455667788ull, 7, 3, 0xabcd, NVME_SC_CONNECT_INVALID_HOST, true);
    assert_int_equal(le64_get(c), 0x1122334455667788ull);
    assert_int_equal(le16_get(c + 8), 7);
    assert_int_equal(le16_get(c + 10), 3);
    assert_int_equal(le16_get(c + 12), 0xabcd);
    /* SCT 1, SC 84h, DNR; phase bit 0 */
    assert_int_equal(le16_get(c + 14), (0x184 << 1) | 0x8000);
    nvme_cqe_build(c, 0, 0, 0, 1, NVME_SC_SUCCESS, true);
    assert_int_equal(le16_get(c + 14), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capsule),
        cmocka_unit_test(test_other_types),
        cmocka_unit_test(test_cqe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
