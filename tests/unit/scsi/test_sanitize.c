/*
 * SANITIZE BLOCK ERASE through scsi_cmd_execute against an LU over a memory
 * volume (which deallocates, and reads deallocated blocks as zeros): the
 * erase itself, its CDB checks, what is reported (REPORT SUPPORTED
 * OPERATION CODES, WABEREQ) and write protection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/util.h"

#include "harness.h"

static void sanitize(struct lu_fixture *f, uint8_t byte1, uint16_t plen, const void *out,
                     struct result *r)
{
    uint8_t cdb[16] = {0x48, byte1};
    be16_store(cdb + 7, plen);
    lu_run(f, cdb, out, plen, 0, r);
}

static void test_block_erase(void **state)
{
    (void)state;
    struct lu_fixture *f = lu_fixture_new("test/sanitize", "SN1", false);
    lu_clear_ua(f);
    struct result r;
    uint8_t *buf = malloc(64 * BS), *zero = calloc(64, BS);
    memset(buf, 0xa5, 64 * BS);
    lu_rw(f, true, 0, 64, buf);
    lu_rw(f, true, BLOCKS - 64, 64, buf);

    /* a parameter list, IMMED, other service actions: refused, nothing erased */
    uint8_t pl[8] = {0};
    sanitize(f, 0x02, 8, pl, &r);
    expect_sense(&r, 0x05, 0x24, 0x00);
    assert_int_equal(be16_load(r.sense + 16), 7);
    sanitize(f, 0x82, 0, NULL, &r);
    expect_sense(&r, 0x05, 0x24, 0x00);
    sanitize(f, 0x01, 0, NULL, &r); /* OVERWRITE */
    expect_sense(&r, 0x05, 0x24, 0x00);
    sanitize(f, 0x03, 0, NULL, &r); /* CRYPTO ERASE */
    expect_sense(&r, 0x05, 0x24, 0x00);
    lu_rw(f, false, 0, 64, buf + 0);
    assert_int_equal(buf[0], 0xa5);

    sanitize(f, 0x02, 0, NULL, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    lu_rw(f, false, 0, 64, buf);
    assert_memory_equal(buf, zero, 64 * BS);
    lu_rw(f, false, BLOCKS - 64, 64, buf);
    assert_memory_equal(buf, zero, 64 * BS);

    /* REPORT SUPPORTED OPERATION CODES: 0x48/2 supported, 0x48/1 not */
    const uint8_t one[16] = {0xa3, 0x0c, 0x02, 0x48, 0x00, 0x02, 0, 0, 0x01, 0x00};
    lu_run(f, one, NULL, 0, 256, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[1] & 0x07, 0x03);
    const uint8_t ow[16] = {0xa3, 0x0c, 0x02, 0x48, 0x00, 0x01, 0, 0, 0x01, 0x00};
    lu_run(f, ow, NULL, 0, 256, &r);
    assert_int_equal(r.data[1] & 0x07, 0x01);

    /* WABEREQ = 01b in the Block Device Characteristics page */
    const uint8_t b1[16] = {0x12, 0x01, 0xb1, 0, 64};
    lu_run(f, b1, NULL, 0, 64, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[7] >> 6, 1);

    /* write protected */
    scsi_lu_set_readonly(f->lu, true);
    lu_clear_ua(f);
    sanitize(f, 0x02, 0, NULL, &r);
    expect_sense(&r, 0x07, 0x27, 0x00);
    free(buf);
    free(zero);
    lu_fixture_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_erase),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
