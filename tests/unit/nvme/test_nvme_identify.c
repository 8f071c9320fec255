/* Unit tests for the Identify data structures (src/nvme/nvme_identify.c)
 * over memory volumes: sizes and LBA formats from the volume, write
 * protection, identifiers, the active namespace list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nvme/nvme_internal.h"
#include "store/bdev.h"
#include "store/volume.h"

static struct volume *mkvol(uint64_t size, uint32_t bs, bool ro)
{
    struct bdev *b;
    struct volume *v;
    assert_int_equal(bdev_memory_open(size, 0, &b), 0);
    assert_int_equal(volume_new("t/v", b, bs, VOLUME_SYNC_STANDARD, ro, &v), 0);
    return v;
}

static void check_ns(uint32_t vol_bs, uint32_t lba, uint16_t npwg)
{
    uint8_t out[4096];
    struct nvme_ns ns = {.nsid = 1, .vol = mkvol(8u << 20, vol_bs, false)};
    for (int i = 0; i < 16; i++)
        ns.nguid[i] = (uint8_t)(i + 1);
    memcpy(ns.eui64, ns.nguid, 8);
    nvme_identify_ns(&ns, out);
    assert_int_equal(le64_get(out), (8u << 20) / lba);     /* NSZE */
    assert_int_equal(le64_get(out + 8), (8u << 20) / lba); /* NCAP */
    assert_int_equal(1u << out[128 + 2], lba);             /* LBAF0 LBADS */
    assert_int_equal(le16_get(out + 64), npwg);            /* NPWG */
    assert_int_equal(out[99], 0);                          /* not write protected */
    assert_memory_equal(out + 104, ns.nguid, 16);
    assert_memory_equal(out + 120, ns.eui64, 8);
    volume_unref(ns.vol);
}

static void test_ns_lba(void **state)
{
    (void)state;
    check_ns(512, 512, 0);
    check_ns(4096, 4096, 0);
    check_ns(16384, 4096, 3); /* hosts take no LBA above 4 KiB */
}

static void test_ns_readonly_inactive(void **state)
{
    (void)state;
    uint8_t out[4096];
    struct nvme_ns ns = {.nsid = 1, .vol = mkvol(1u << 20, 512, true)};
    nvme_identify_ns(&ns, out);
    assert_int_equal(out[99] & 1, 1);
    volume_unref(ns.vol);
    ns.vol = NULL; /* unavailable: all zeroes */
    nvme_identify_ns(&ns, out);
    for (size_t i = 0; i < sizeof(out); i++)
        assert_int_equal(out[i], 0);
}

static void test_descs_and_list(void **state)
{
    (void)state;
    uint8_t out[4096];
    struct nvme_ns ns[3] = {{.nsid = 1}, {.nsid = 4}, {.nsid = 9}};
    for (int i = 0; i < 16; i++)
        ns[0].uuid[i] = (uint8_t)(0xa0 + i);
    nvme_identify_ns_descs(&ns[0], out);
    assert_int_equal(out[0], 1); /* EUI64 */
    assert_int_equal(out[1], 8);
    assert_int_equal(out[12], 2); /* NGUID */
    assert_int_equal(out[13], 16);
    assert_int_equal(out[32], 3); /* UUID */
    assert_memory_equal(out + 36, ns[0].uuid, 16);
    assert_int_equal(out[52], 4); /* CSI: NVM */
    assert_int_equal(out[53], 1);
    assert_int_equal(out[56], 0);
    struct volume *v = mkvol(1u << 20, 512, false);
    ns[0].vol = ns[1].vol = v;
    ns[2].vol = NULL; /* not active */
    struct nvme_subsys s = {.nns = 3, .ns = ns};
    nvme_identify_ns_list(&s, 0, out);
    assert_int_equal(le32_get(out), 1);
    assert_int_equal(le32_get(out + 4), 4);
    assert_int_equal(le32_get(out + 8), 0);
    nvme_identify_ns_list(&s, 1, out);
    assert_int_equal(le32_get(out), 4);
    assert_int_equal(le32_get(out + 4), 0);
    volume_unref(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ns_lba),
        cmocka_unit_test(test_ns_readonly_inactive),
        cmocka_unit_test(test_descs_and_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
