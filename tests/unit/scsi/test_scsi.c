/*
 * Drives CDBs through scsi_cmd_execute against LUs backed by real memory
 * volumes (no reactors: completions run inline or on the caller's thread
 * because the I/O pool is not started), checking data, status and sense.
 */
#include <errno.h>
#include <setjmp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/bufpool.h"
#include "core/util.h"
#include "harness.h"
#include "scsi/scsi_internal.h" /* range lock, for the lock test */

struct fixture {
    struct volume *vol;
    struct scsi_lu *lu;
    struct scsi_nexus a, b;
    /* a fake config store for APTPL */
    char saved[4096];
    size_t saved_len;
    int saves;
};

static size_t list_luns(const struct scsi_nexus *n, uint64_t *out, size_t max)
{
    static const uint64_t luns[] = {0, 3, 300};
    for (size_t i = 0; i < 3 && i < max; i++)
        out[i] = luns[i];
    return 3;
}

static int pr_save(void *arg, const void *blob, size_t len)
{
    struct fixture *f = arg;
    if (len > sizeof f->saved)
        return -ENOSPC;
    if (len)
        memcpy(f->saved, blob, len);
    f->saved_len = len;
    f->saves++;
    return 0;
}

static void nexus_setup(struct scsi_nexus *n, const char *iqn, uint16_t rel)
{
    memset(n, 0, sizeof *n);
    snprintf(n->initiator_name, sizeof n->initiator_name, "%s", iqn);
    snprintf(n->initiator_port, sizeof n->initiator_port, "%s,i,0x23d000000001", iqn);
    snprintf(n->target_name, sizeof n->target_name, "iqn.2026-11.org.blockd:t1");
    snprintf(n->target_port, sizeof n->target_port, "iqn.2026-11.org.blockd:t1,t,0x0001");
    n->rel_tgt_port_id = rel;
    n->tpg_id = 1;
    n->list_luns = list_luns;
    scsi_nexus_init(n);
}

static struct fixture *fixture_new_latency(uint32_t lu_bs, bool ro, enum volume_sync sync,
                                           uint32_t latency_us)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct bdev *b;
    assert_int_equal(bdev_memory_open(VOL_SIZE, latency_us, &b), 0);
    assert_int_equal(volume_new("test/vol", b, 512, sync, false, &f->vol), 0);
    struct scsi_lu_params p;
    memset(&p, 0, sizeof p);
    p.block_size = lu_bs;
    p.rotation_rate = 1;
    p.readonly = ro;
    snprintf(p.serial, sizeof p.serial, "SER123");
    snprintf(p.naa, sizeof p.naa, "0x6589cfc000000abcdef0123456789abc");
    p.pr_store.save = pr_save;
    p.pr_store.arg = f;
    assert_int_equal(scsi_lu_new(f->vol, &p, &f->lu), 0);
    nexus_setup(&f->a, "iqn.2026-11.test:a", 1);
    nexus_setup(&f->b, "iqn.2026-11.test:b", 1);
    return f;
}

static struct fixture *fixture_new(uint32_t lu_bs, bool ro, enum volume_sync sync)
{
    return fixture_new_latency(lu_bs, ro, sync, 0);
}

static void fixture_free(struct fixture *f)
{
    scsi_lu_unref(f->lu);
    volume_unref(f->vol);
    free(f);
}

static int setup(void **state)
{
    *state = fixture_new(0, false, VOLUME_SYNC_STANDARD);
    return 0;
}

static int teardown(void **state)
{
    fixture_free(*state);
    return 0;
}

#define RUN(f, n, r, out, out_len, cap, ...)                                                       \
    do {                                                                                           \
        const uint8_t cdb_[16] = {__VA_ARGS__};                                                    \
        harness_run((f)->lu, (n), cdb_, sizeof cdb_, (out), (out_len), (cap), (r));                \
    } while (0)

/* Clear the power-on unit attention of a nexus. */
static void clear_ua(struct fixture *f, const struct scsi_nexus *n)
{
    struct result r;
    for (int i = 0; i < 8; i++) {
        RUN(f, n, &r, NULL, 0, 0, 0x00);
        if (r.status == SCSI_STATUS_GOOD)
            return;
    }
    fail_msg("unit attention did not clear");
}

static void write_blocks(struct fixture *f, uint64_t lba, uint32_t n, uint8_t fill)
{
    struct result r;
    uint32_t bs = scsi_lu_block_size(f->lu);
    uint8_t *buf = malloc((size_t)n * bs);
    memset(buf, fill, (size_t)n * bs);
    RUN(f, &f->a, &r, buf, n * bs, 0, 0x8a, 0, 0, 0, 0, 0, (uint8_t)(lba >> 24),
        (uint8_t)(lba >> 16), (uint8_t)(lba >> 8), (uint8_t)lba, 0, 0, (uint8_t)(n >> 8),
        (uint8_t)n, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    free(buf);
}

/* ------------------------------------------------------------------ */

static void test_power_on_ua(void **state)
{
    struct fixture *f = *state;
    struct result r;
    /* INQUIRY does not report the UA */
    RUN(f, &f->a, &r, NULL, 0, 96, 0x12, 0, 0, 0, 96, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x29, 0x00);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* the other nexus still has its own */
    RUN(f, &f->b, &r, NULL, 0, 32, 0x03, 0, 0, 0, 32, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 18);
    assert_int_equal(r.data[2] & 0x0f, 0x06);
    assert_int_equal(r.data[12], 0x29);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* raised by the control plane */
    scsi_lu_raise_ua(f->lu, SCSI_UA_LUNS_CHANGED);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x3f, 0x0e);
    /* REPORT LUNS clears LUNS_CHANGED for b without reporting it */
    RUN(f, &f->b, &r, NULL, 0, 64, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
}

static void test_capacity_change_ua(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    assert_int_equal(volume_resize(f->vol, VOL_SIZE * 2), 0);
    RUN(f, &f->a, &r, NULL, 0, 8, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    expect_sense(&r, 0x06, 0x2a, 0x09);
    RUN(f, &f->a, &r, NULL, 0, 8, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be32_load(r.data), 2 * BLOCKS - 1);
}

/* An LU whose storage is not reachable yet (a volume on the offline
 * backend: an RBD pool still connecting): found and identified by the
 * standard INQUIRY, everything else BECOMING READY (02/04/01) after the
 * power-on unit attention, unsupported-looking commands included. */
static void test_offline_lu(void **state)
{
    (void)state;
    struct fixture f = {0};
    struct bdev *b;
    assert_int_equal(bdev_offline_open(VOL_SIZE, &b), 0);
    assert_int_equal(volume_new("test/offline", b, 512, VOLUME_SYNC_STANDARD, false, &f.vol), 0);
    struct scsi_lu_params p;
    memset(&p, 0, sizeof p);
    assert_int_equal(scsi_lu_new(f.vol, &p, &f.lu), 0);
    nexus_setup(&f.a, "iqn.2026-11.test:a", 1);
    struct result r;
    RUN(&f, &f.a, &r, NULL, 0, 96, 0x12, 0, 0, 0, 96, 0); /* standard INQUIRY */
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[0] & 0x1f, 0);                                  /* direct access */
    RUN(&f, &f.a, &r, NULL, 0, 64, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0); /* REPORT LUNS */
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(&f, &f.a, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x29, 0x00);
    RUN(&f, &f.a, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x02, 0x04, 0x01);
    RUN(&f, &f.a, &r, NULL, 0, 32, 0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0);
    expect_sense(&r, 0x02, 0x04, 0x01);
    RUN(&f, &f.a, &r, NULL, 0, 4096, 0x88, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0);
    expect_sense(&r, 0x02, 0x04, 0x01);
    RUN(&f, &f.a, &r, NULL, 0, 255, 0x12, 1, 0x83, 0, 255, 0); /* identity: from the storage */
    expect_sense(&r, 0x02, 0x04, 0x01);
    uint8_t unmap[24] = {0, 22, 0, 16};
    RUN(&f, &f.a, &r, unmap, sizeof unmap, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0);
    expect_sense(&r, 0x02, 0x04, 0x01); /* not "unsupported": the real LU may have it */
    RUN(&f, &f.a, &r, NULL, 0, 32, 0x03, 0, 0, 0, 32, 0); /* REQUEST SENSE */
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[2] & 0x0f, 0x02);
    assert_int_equal(r.data[12], 0x04);
    assert_int_equal(r.data[13], 0x01);
    scsi_lu_unref(f.lu);
    volume_unref(f.vol);
}

static void test_unknown_opcode_and_lun(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, NULL, 0, 0, 0xc5);
    expect_sense(&r, 0x05, 0x20, 0x00);
    /* SANITIZE: only BLOCK ERASE (service action 2), so 0 is an invalid
     * field; WRITE ATOMIC unsupported; EXTENDED COPY without insecure_tpc */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x48);
    expect_sense(&r, 0x05, 0x24, 0x00);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x9c);
    expect_sense(&r, 0x05, 0x20, 0x00);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x83);
    expect_sense(&r, 0x05, 0x20, 0x00);
    /* no LU at this LUN */
    struct scsi_cmd c;
    memset(&c, 0, sizeof c);
    uint8_t buf[96];
    c.cdb[0] = 0x00;
    c.cdb_len = 16;
    c.nexus = &f->a;
    c.done = harness_on_done;
    scsi_cmd_execute(&c);
    assert_int_equal(c.status, SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(c.sense[12], 0x25);
    memset(&c, 0, sizeof c);
    c.cdb[0] = 0x12;
    c.cdb[4] = 96;
    c.cdb_len = 16;
    c.nexus = &f->a;
    c.data_in = buf;
    c.data_in_cap = sizeof buf;
    c.done = harness_on_done;
    scsi_cmd_execute(&c);
    assert_int_equal(c.status, SCSI_STATUS_GOOD);
    assert_int_equal(buf[0], 0x7f);
    /* unknown service action of a known opcode */
    RUN(f, &f->a, &r, NULL, 0, 32, 0x9e, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
}

static void test_reserved_bits_field_pointer(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    /* READ(10) with RDPROTECT=1: byte 1 bit 5 */
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0x20, 0, 0, 0, 0, 0, 0, 1, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    assert_int_equal(r.sense[15], 0x80 | 0x40 | 0x08 | 5);
    assert_int_equal(be16_load(&r.sense[16]), 1);
    /* TEST UNIT READY with a reserved byte set */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00, 0, 0, 0x10, 0, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    assert_int_equal(be16_load(&r.sense[16]), 3);
    /* NACA in the control byte */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00, 0, 0, 0, 0, 0x04);
    expect_sense(&r, 0x05, 0x24, 0x00);
    assert_int_equal(be16_load(&r.sense[16]), 5);
    /* EVPD=0 with a page code */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 0, 0x80, 0, 255, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    assert_int_equal(be16_load(&r.sense[16]), 2);
}

static void test_inquiry(void **state)
{
    struct fixture *f = *state;
    struct result r;
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 0, 0, 0, 255, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 96);
    assert_int_equal(r.want, 96);
    assert_int_equal(r.data[0], 0);
    assert_int_equal(r.data[2], 6);
    assert_memory_equal(r.data + 8, "BLOCKD  ", 8);
    assert_memory_equal(r.data + 16, "iSCSI Disk      ", 16);
    /* allocation length shorter than the data */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 0, 0, 0, 5, 0);
    assert_int_equal(r.len, 5);
    /* supported pages */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 1, 0x00, 0, 255, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[3], 6);
    assert_memory_equal(r.data + 4, "\x00\x80\x83\xb0\xb1\xb2", 6);
    /* serial */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 1, 0x80, 0, 255, 0);
    assert_int_equal(r.data[3], 6);
    assert_memory_equal(r.data + 4, "SER123", 6);
    /* device identification: NAA 6 first, then the port descriptors */
    RUN(f, &f->a, &r, NULL, 0, 1024 > 255 ? 255 : 255, 0x12, 1, 0x83, 0, 255, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[4], 0x01);
    assert_int_equal(r.data[5], 0x03);
    assert_int_equal(r.data[7], 16);
    assert_int_equal(r.data[8] >> 4, 6);
    bool relport = false, tpg = false, name = false;
    size_t total = 4 + be16_load(r.data + 2);
    for (size_t off = 4; off + 4 <= total && off < r.len;) {
        uint8_t type = r.data[off + 1] & 0x0f, assoc = (r.data[off + 1] >> 4) & 3;
        if (type == 4 && assoc == 1)
            relport = be16_load(r.data + off + 6) == 1;
        if (type == 5 && assoc == 1)
            tpg = true;
        if (type == 8 && assoc == 1)
            name = strstr((char *)r.data + off + 4, ",t,0x0001") != NULL;
        off += 4 + r.data[off + 3];
    }
    assert_true(relport);
    assert_true(tpg);
    assert_true(name);
    /* block limits */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 1, 0xb0, 0, 255, 0);
    assert_int_equal(be16_load(r.data + 2), 0x3c);
    assert_int_equal(r.data[5], 255);
    assert_true(be32_load(r.data + 20) > 0); /* max unmap LBA count */
    assert_true(be32_load(r.data + 24) > 0);
    /* rotation rate: non-rotating */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 1, 0xb1, 0, 255, 0);
    assert_int_equal(be16_load(r.data + 4), 1);
    /* provisioning: memory volumes trim and read back zeros */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 1, 0xb2, 0, 255, 0);
    assert_int_equal(r.data[5] & 0xe4, 0xe4);
    /* unknown page */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x12, 1, 0x99, 0, 255, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
}

static void test_read_capacity(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, NULL, 0, 8, 0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be32_load(r.data), BLOCKS - 1);
    assert_int_equal(be32_load(r.data + 4), BS);
    RUN(f, &f->a, &r, NULL, 0, 32, 0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be64_load(r.data), BLOCKS - 1);
    assert_int_equal(r.data[14] & 0xc0, 0xc0); /* LBPME, LBPRZ */
    /* short allocation length */
    RUN(f, &f->a, &r, NULL, 0, 32, 0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 15);
}

static void test_read_write(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t buf[4 * BS];
    clear_ua(f, &f->a);
    memset(buf, 0xab, sizeof buf);
    /* WRITE(10) 4 blocks at 100, FUA */
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x2a, 0x08, 0, 0, 0, 100, 0, 0, 4, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.want, 4 * BS);
    /* READ(6), READ(12), READ(16) see it */
    RUN(f, &f->a, &r, NULL, 0, 4 * BS, 0x08, 0, 0, 100, 4, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 4 * BS);
    assert_memory_equal(r.data, buf, sizeof buf);
    RUN(f, &f->a, &r, NULL, 0, 4 * BS, 0xa8, 0x18, 0, 0, 0, 100, 0, 0, 0, 4, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_memory_equal(r.data, buf, sizeof buf);
    RUN(f, &f->a, &r, NULL, 0, 4 * BS, 0x88, 0, 0, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 4, 0, 0);
    assert_memory_equal(r.data, buf, sizeof buf);
    /* out of range, and 0 blocks at the end is fine */
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, (BLOCKS >> 8) & 0xff, BLOCKS & 0xff, 0, 0, 1, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, (BLOCKS >> 8) & 0xff, BLOCKS & 0xff, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, buf, BS, 0, 0x8a, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0,
        1, 0, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
    /* READ(6) with length 0 means 256 blocks */
    RUN(f, &f->a, &r, NULL, 0, 16384, 0x08, 0, 0, 0, 0, 0);
    assert_int_equal(r.want, 256 * BS);
    assert_int_equal(r.len, 16384);
    /* data-out shorter than the CDB asks (iSCSI overflow): only whole sent blocks are written */
    memset(buf, 0x11, sizeof buf);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 100, 0, 0, 2, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.want, 2 * BS);
    RUN(f, &f->a, &r, NULL, 0, 2 * BS, 0x28, 0, 0, 0, 0, 100, 0, 0, 2, 0);
    assert_int_equal(r.data[0], 0x11);
    assert_int_equal(r.data[BS], 0xab);
    /* data-in buffer ending inside a block */
    RUN(f, &f->a, &r, NULL, 0, 200, 0x28, 0, 0, 0, 0, 100, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 200);
    assert_int_equal(r.want, BS);
    assert_int_equal(r.data[199], 0x11);
    /* too long for MAXIMUM TRANSFER LENGTH */
    RUN(f, &f->a, &r, NULL, 0, BS, 0xa8, 0, 0, 0, 0, 0, 0, 0x02, 0, 0, 0, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
}

static void test_read_only(void **state)
{
    struct fixture *f = fixture_new(0, true, VOLUME_SYNC_STANDARD);
    struct result r;
    uint8_t buf[BS] = {0};
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    expect_sense(&r, 0x07, 0x27, 0x00);
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* MODE SENSE shows WP */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x3f, 0, 255, 0);
    assert_int_equal(r.data[2] & 0x80, 0x80);
    /* live change: announced as MODE PARAMETERS CHANGED */
    scsi_lu_set_readonly(f->lu, false);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    expect_sense(&r, 0x06, 0x2a, 0x01);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    fixture_free(f);
}

static void test_verify(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t buf[2 * BS];
    clear_ua(f, &f->a);
    write_blocks(f, 10, 2, 'A');
    memset(buf, 'A', sizeof buf);
    /* BYTCHK=1 match */
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x2f, 0x02, 0, 0, 0, 10, 0, 0, 2, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* mismatch at byte 700 */
    buf[700] = 'B';
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x2f, 0x02, 0, 0, 0, 10, 0, 0, 2, 0);
    expect_sense(&r, 0x0e, 0x1d, 0x00);
    assert_int_equal(r.sense[0], 0xf0);
    assert_int_equal(be32_load(&r.sense[3]), 700);
    /* BYTCHK=0 does not compare */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x2f, 0x10, 0, 0, 0, 10, 0, 0, 2, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* BYTCHK=3: one block against each */
    buf[700] = 'A';
    RUN(f, &f->a, &r, buf, BS, 0, 0x8f, 0x06, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* BYTCHK=2 reserved */
    RUN(f, &f->a, &r, buf, BS, 0, 0xaf, 0x04, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    /* beyond the end */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x2f, 0, 0, 0, (BLOCKS >> 8) & 0xff, 0xff, 0, 0, 2, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
    /* WRITE AND VERIFY */
    memset(buf, 'Z', sizeof buf);
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x2e, 0x02, 0, 0, 0, 20, 0, 0, 2, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 2 * BS, 0x28, 0, 0, 0, 0, 20, 0, 0, 2, 0);
    assert_memory_equal(r.data, buf, sizeof buf);
}

static void test_write_same(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t blk[BS];
    clear_ua(f, &f->a);
    memset(blk, 'P', BS);
    RUN(f, &f->a, &r, blk, BS, 0, 0x41, 0, 0, 0, 0, 50, 0, 0, 8, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 8 * BS, 0x28, 0, 0, 0, 0, 50, 0, 0, 8, 0);
    for (int i = 0; i < 8 * BS; i++)
        assert_int_equal(r.data[i], 'P');
    /* zeros with UNMAP */
    memset(blk, 0, BS);
    RUN(f, &f->a, &r, blk, BS, 0, 0x93, 0x08, 0, 0, 0, 0, 0, 0, 0, 50, 0, 0, 0, 8, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 8 * BS, 0x28, 0, 0, 0, 0, 50, 0, 0, 8, 0);
    for (int i = 0; i < 8 * BS; i++)
        assert_int_equal(r.data[i], 0);
    /* NDOB: no data-out */
    write_blocks(f, 60, 1, 'x');
    RUN(f, &f->a, &r, NULL, 0, 0, 0x93, 0x09, 0, 0, 0, 0, 0, 0, 0, 60, 0, 0, 0, 1, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 60, 0, 0, 1, 0);
    assert_int_equal(r.data[0], 0);
    /* wrong data-out size */
    RUN(f, &f->a, &r, blk, BS / 2, 0, 0x41, 0x08, 0, 0, 0, 50, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_CHECK_CONDITION);
    /* ANCHOR refused (ANC_SUP = 0) */
    RUN(f, &f->a, &r, blk, BS, 0, 0x41, 0x18, 0, 0, 0, 50, 0, 0, 1, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    /* 0 blocks = to the end of the LU */
    RUN(f, &f->a, &r, blk, BS, 0, 0x41, 0x08, 0, 0, (BLOCKS - 4) >> 8, (BLOCKS - 4) & 0xff, 0, 0, 0,
        0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* beyond the end */
    RUN(f, &f->a, &r, blk, BS, 0, 0x41, 0, 0, 0, (BLOCKS >> 8), 0, 0, 0, 1, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
}

static void unmap_param(uint8_t *p, uint16_t bddl, uint64_t lba, uint32_t n)
{
    memset(p, 0, 24);
    be16_store(p, (uint16_t)(6 + bddl));
    be16_store(p + 2, bddl);
    be64_store(p + 8, lba);
    be32_store(p + 16, n);
}

static void test_unmap(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t p[24];
    clear_ua(f, &f->a);
    write_blocks(f, 128, 128, 'U');
    unmap_param(p, 16, 128, 128);
    RUN(f, &f->a, &r, p, 24, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 200, 0, 0, 1, 0);
    assert_int_equal(r.data[0], 0);
    /* GET LBA STATUS shows the hole (64 KiB chunks in the memory backend) */
    RUN(f, &f->a, &r, NULL, 0, 64, 0x9e, 0x12, 0, 0, 0, 0, 0, 0, 0, 128, 0, 0, 0, 64, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be64_load(r.data + 8), 128);
    assert_int_equal(r.data[8 + 12], 1);
    /* parameter list too short */
    RUN(f, &f->a, &r, p, 4, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 4, 0);
    expect_sense(&r, 0x05, 0x1a, 0x00);
    /* descriptor beyond the end */
    unmap_param(p, 16, BLOCKS - 1, 2);
    RUN(f, &f->a, &r, p, 24, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
    /* BLOCK DESCRIPTOR DATA LENGTH larger than the list */
    unmap_param(p, 32, 0, 1);
    RUN(f, &f->a, &r, p, 24, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0);
    expect_sense(&r, 0x05, 0x26, 0x00);
    /* ANCHOR bit */
    unmap_param(p, 16, 0, 1);
    RUN(f, &f->a, &r, p, 24, 0, 0x42, 0x01, 0, 0, 0, 0, 0, 0, 24, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    /* zero-length list is a no-op */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* GET LBA STATUS beyond the end */
    RUN(f, &f->a, &r, NULL, 0, 64, 0x9e, 0x12, 0, 0, 0, 0, 0, 0, (BLOCKS >> 8), 0, 0, 0, 0, 64, 0,
        0);
    expect_sense(&r, 0x05, 0x21, 0x00);
}

static void test_compare_and_write(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t buf[4 * BS];
    clear_ua(f, &f->a);
    write_blocks(f, 30, 2, 'A');
    memset(buf, 'A', 2 * BS);
    memset(buf + 2 * BS, 'B', 2 * BS);
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0, 2, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 2 * BS, 0x28, 0, 0, 0, 0, 30, 0, 0, 2, 0);
    assert_int_equal(r.data[0], 'B');
    assert_int_equal(r.data[2 * BS - 1], 'B');
    /* now it must miscompare: the medium holds 'B' */
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0, 2, 0, 0);
    expect_sense(&r, 0x0e, 0x1d, 0x00);
    assert_int_equal(be32_load(&r.sense[3]), 0);
    /* miscompare offset inside the second block */
    memset(buf, 'B', 2 * BS);
    buf[BS + 27] = 'C';
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0, 2, 0, 0);
    expect_sense(&r, 0x0e, 0x1d, 0x00);
    assert_int_equal(be32_load(&r.sense[3]), BS + 27);
    /* wrong data-out size */
    RUN(f, &f->a, &r, buf, 3 * BS, 0, 0x89, 0, 0, 0, 0, 0, 0, 0, 0, 30, 0, 0, 0, 2, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_CHECK_CONDITION);
    /* beyond the end */
    RUN(f, &f->a, &r, buf, 2 * BS, 0, 0x89, 0, 0, 0, 0, 0, 0, 0, (BLOCKS >> 8), 0, 0, 0, 0, 1, 0,
        0);
    expect_sense(&r, 0x05, 0x21, 0x00);
}

static void test_orwrite_defects(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t buf[2 * BS];
    clear_ua(f, &f->a);
    write_blocks(f, 70, 2, 0xa0);
    memset(buf, 0x05, sizeof buf);
    RUN(f, &f->a, &r, buf, sizeof buf, 0, 0x8b, 0, 0, 0, 0, 0, 0, 0, 0, 70, 0, 0, 0, 2, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 2 * BS, 0x28, 0, 0, 0, 0, 70, 0, 0, 2, 0);
    assert_int_equal(r.data[0], 0xa5);
    assert_int_equal(r.data[2 * BS - 1], 0xa5);
    RUN(f, &f->a, &r, buf, BS, 0, 0x8b, 0, 0, 0, 0, 0, 0, 0, (BLOCKS >> 8), 0, 0, 0, 0, 1, 0, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
    /* READ DEFECT DATA: no defects */
    RUN(f, &f->a, &r, NULL, 0, 32, 0x37, 0, 0x18, 0, 0, 0, 0, 0, 32, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 4);
    assert_int_equal(r.data[1], 0x18);
    assert_int_equal(be16_load(r.data + 2), 0);
    RUN(f, &f->a, &r, NULL, 0, 32, 0xb7, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0);
    assert_int_equal(r.len, 8);
}

/* A write waiting for a CAW on the range lock runs when the CAW finishes. */
static struct scsi_cmd *parked;
static int parked_done;
static void parked_cb(struct scsi_cmd *c)
{
    parked_done++;
}

static void test_range_lock(void **state)
{
    struct fixture *f = *state;
    clear_ua(f, &f->a);
    /* Hold the lock by hand as a CAW would, then try a write. */
    struct scsi_cmd holder;
    memset(&holder, 0, sizeof holder);
    holder.lu = f->lu;
    assert_true(scsi_range_lock(&holder, 40, 4, true));

    static uint8_t buf[BS];
    memset(buf, 'W', BS);
    parked = calloc(1, sizeof *parked);
    parked->cdb[0] = 0x2a;
    parked->cdb[5] = 42;
    parked->cdb[8] = 1;
    parked->cdb_len = 16;
    parked->lu = f->lu;
    parked->nexus = &f->a;
    parked->data_out = buf;
    parked->data_out_len = BS;
    parked->done = parked_cb;
    scsi_cmd_execute(parked);
    assert_int_equal(parked_done, 0); /* waiting */
    /* a write elsewhere is not blocked */
    write_blocks(f, 100, 1, 'q');
    scsi_range_unlock(&holder);
    assert_int_equal(parked_done, 1);
    assert_int_equal(parked->status, SCSI_STATUS_GOOD);
    free(parked);
}

/* COMPARE AND WRITE from several threads incrementing one counter block:
 * with the range lock every successful CAW saw the previous value, so the
 * final counter equals the number of successes (no lost update). */
struct caw_thread {
    struct fixture *f;
    struct scsi_nexus *n;
    int successes;
};

static void caw_done(struct scsi_cmd *c)
{
    atomic_store((atomic_int *)c->arg, 1);
}

static void exec_wait(struct scsi_cmd *c)
{
    atomic_int flag = 0;
    c->arg = &flag;
    c->done = caw_done;
    scsi_cmd_execute(c);
    while (!atomic_load(&flag))
        sched_yield(); /* completion may run on another thread (range lock) */
}

static void *caw_worker(void *arg)
{
    struct caw_thread *t = arg;
    uint8_t cur[BS], both[2 * BS];
    for (int i = 0; i < 60; i++) {
        struct scsi_cmd c;
        memset(&c, 0, sizeof c);
        c.cdb[0] = 0x28;
        c.cdb[5] = 90;
        c.cdb[8] = 1;
        c.cdb_len = 16;
        c.lu = t->f->lu;
        c.nexus = t->n;
        c.data_in = cur;
        c.data_in_cap = BS;
        exec_wait(&c);
        if (c.status != SCSI_STATUS_GOOD)
            continue;
        uint64_t v = be64_load(cur);
        memcpy(both, cur, BS);
        memcpy(both + BS, cur, BS);
        be64_store(both + BS, v + 1);
        memset(&c, 0, sizeof c);
        c.cdb[0] = 0x89;
        c.cdb[9] = 90;
        c.cdb[13] = 1;
        c.cdb_len = 16;
        c.lu = t->f->lu;
        c.nexus = t->n;
        c.data_out = both;
        c.data_out_len = 2 * BS;
        exec_wait(&c);
        if (c.status == SCSI_STATUS_GOOD)
            t->successes++;
    }
    /* Buffers released on this thread sit in bufpool's per-thread cache,
     * which is not freed when a thread exits (reactors never do): drain it
     * so LeakSanitizer does not flag them. */
    for (int i = 0; i < 64; i++)
        free(bufpool_get(BS));
    return NULL;
}

static void test_caw_concurrent(void **state)
{
    /* 300 µs per request (slept in the submitting thread): a CAW's read and
     * write are far apart, so without the lock updates would be lost. */
    struct fixture *f = fixture_new_latency(0, false, VOLUME_SYNC_STANDARD, 300);
    struct result r;
    clear_ua(f, &f->a);
    clear_ua(f, &f->b);
    write_blocks(f, 90, 1, 0);
    enum { N = 4 };
    struct caw_thread t[N];
    pthread_t tid[N];
    for (int i = 0; i < N; i++) {
        t[i] = (struct caw_thread){f, i % 2 ? &f->b : &f->a, 0};
        assert_int_equal(pthread_create(&tid[i], NULL, caw_worker, &t[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(tid[i], NULL);
        total += t[i].successes;
    }
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 90, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_true(total > 0);
    assert_int_equal(be64_load(r.data), (uint64_t)total);
    fixture_free(f);
}

static void test_sync_cache_prefetch(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    uint64_t before = volume_sync_calls(f->vol);
    write_blocks(f, 1, 1, 's');
    RUN(f, &f->a, &r, NULL, 0, 0, 0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_true(volume_sync_calls(f->vol) > before);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x91, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x35, 0, 0, 0, (BLOCKS >> 8), 1, 0, 0, 1, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x34, 0x02, 0, 0, 0, 0, 3, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x90, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0);
    expect_sense(&r, 0x05, 0x21, 0x00);
}

static void test_mode_pages(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0, 0x3f, 0, 255, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[2], 0x10); /* DPOFUA, not WP */
    assert_int_equal(r.data[3], 8);
    assert_int_equal(be32_load(r.data + 4), BLOCKS);
    assert_int_equal(r.data[0] + 1, 4 + 8 + 20 + 12 + 12);
    const uint8_t *cache = r.data + 12;
    assert_int_equal(cache[0], 0x08);
    assert_int_equal(cache[2] & 0x04, 0x04); /* sync=standard → WCE */
    /* MODE SENSE(10) caching page only, DBD */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x5a, 0x08, 0x08, 0, 0, 0, 0, 0, 255, 0);
    assert_int_equal(be16_load(r.data + 6), 0);
    assert_int_equal(r.data[8], 0x08);
    /* changeable values: nothing */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x48, 0, 255, 0);
    assert_int_equal(r.data[4 + 2], 0);
    /* saved values: not supported */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0xc8, 0, 255, 0);
    expect_sense(&r, 0x05, 0x39, 0x00);
    /* unknown page */
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x05, 0, 255, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    /* MODE SELECT: same caching page accepted, WCE change refused with a pointer */
    uint8_t sel[4 + 20];
    memset(sel, 0, sizeof sel);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x08, 0, 255, 0);
    memcpy(sel + 4, r.data + 4, 20);
    RUN(f, &f->a, &r, sel, sizeof sel, 0, 0x15, 0x10, 0, 0, sizeof sel, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    sel[4 + 2] &= ~0x04;
    RUN(f, &f->a, &r, sel, sizeof sel, 0, 0x15, 0x10, 0, 0, sizeof sel, 0);
    expect_sense(&r, 0x05, 0x26, 0x00);
    assert_int_equal(be16_load(&r.sense[16]), 6);
    /* SP=1 refused */
    RUN(f, &f->a, &r, sel, sizeof sel, 0, 0x15, 0x11, 0, 0, sizeof sel, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);

    /* SWP: the one changeable bit; set by a (b)'s MODE SELECT, seen by everyone */
    clear_ua(f, &f->b);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x4a, 0, 255, 0);
    assert_int_equal(r.data[4 + 4], 0x08);
    uint8_t ctl[4 + 12];
    memset(ctl, 0, sizeof ctl);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x0a, 0, 255, 0);
    memcpy(ctl + 4, r.data + 4, 12);
    ctl[4 + 4] |= 0x08;
    RUN(f, &f->a, &r, ctl, sizeof ctl, 0, 0x15, 0x10, 0, 0, sizeof ctl, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    uint8_t blk[BS] = {0};
    RUN(f, &f->a, &r, blk, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    expect_sense(&r, 0x07, 0x27, 0x02);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x2a, 0x01); /* the other nexus is told */
    RUN(f, &f->b, &r, NULL, 0, 255, 0x1a, 0, 0x0a, 0, 255, 0);
    assert_int_equal(r.data[2] & 0x80, 0x80); /* WP */
    ctl[4 + 4] &= ~0x08;
    RUN(f, &f->a, &r, ctl, sizeof ctl, 0, 0x15, 0x10, 0, 0, sizeof ctl, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, blk, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);

    /* the volume's sync property flips WCE: UA, then WCE=0 */
    volume_set_sync(f->vol, VOLUME_SYNC_ALWAYS);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x08, 0, 255, 0);
    expect_sense(&r, 0x06, 0x2a, 0x01);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x08, 0, 255, 0);
    assert_int_equal(r.data[4 + 2] & 0x04, 0);
    volume_set_sync(f->vol, VOLUME_SYNC_DISABLED);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x08, 0, 255, 0);
    expect_sense(&r, 0x06, 0x2a, 0x01);
    RUN(f, &f->a, &r, NULL, 0, 255, 0x1a, 0x08, 0x08, 0, 255, 0);
    assert_int_equal(r.data[4 + 2] & 0x04, 0x04);

    /* sync=always → WCE=0 */
    struct fixture *g = fixture_new(4096, false, VOLUME_SYNC_ALWAYS);
    clear_ua(g, &g->a);
    RUN(g, &g->a, &r, NULL, 0, 255, 0x1a, 0, 0x08, 0, 255, 0);
    assert_int_equal(r.data[4 + 8 + 2] & 0x04, 0);
    assert_int_equal(be32_load(r.data + 8) & 0xffffff, 4096);
    fixture_free(g);
}

/* A gateway group's view (gateway/gateway_lu.c provides the real one). */
static struct {
    struct scsi_tpg_desc tpgs[3];
    size_t n;
    uint8_t port_state;
    int released;
} alua;

static size_t alua_report(void *arg, struct scsi_tpg_desc *out, size_t max)
{
    (void)arg;
    for (size_t i = 0; i < alua.n && i < max; i++)
        out[i] = alua.tpgs[i];
    return alua.n;
}

static uint8_t alua_port_state(void *arg, uint16_t tpg)
{
    (void)arg, (void)tpg;
    return alua.port_state;
}

static void alua_release(void *arg)
{
    (void)arg;
    alua.released++;
}

static const struct scsi_alua_ops alua_ops = {
    .report = alua_report, .release = alua_release, .port_state = alua_port_state};

/* RTPG lists every group of the provider with its state; 2A/06 reaches
 * every nexus; an unavailable port refuses I/O with 04/0C but serves
 * INQUIRY and RTPG; the LU releases the provider when freed. */
static void test_alua_provider(void **state)
{
    (void)state;
    struct fixture *f = fixture_new(0, false, VOLUME_SYNC_STANDARD);
    struct result r;
    memset(&alua, 0, sizeof alua);
    alua.tpgs[0] = (struct scsi_tpg_desc){1, 1, SCSI_ALUA_NON_OPTIMIZED};
    alua.tpgs[1] = (struct scsi_tpg_desc){2, 2, SCSI_ALUA_OPTIMIZED};
    alua.tpgs[2] = (struct scsi_tpg_desc){3, 3, SCSI_ALUA_UNAVAILABLE};
    alua.n = 3;
    alua.port_state = SCSI_ALUA_NON_OPTIMIZED;
    scsi_lu_set_alua(f->lu, &alua_ops, NULL);
    clear_ua(f, &f->a);
    clear_ua(f, &f->b);
    /* extended format: header 8 bytes, 3 descriptors of 12 */
    RUN(f, &f->a, &r, NULL, 0, 255, 0xa3, 0x2a, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be32_load(r.data), 4 + 3 * 12);
    assert_int_equal(r.data[4], 0x10);
    for (unsigned i = 0; i < 3; i++) {
        const uint8_t *d = r.data + 8 + i * 12;
        assert_int_equal(d[0] & 0x0f, alua.tpgs[i].state);
        assert_int_equal(d[1], 0x8b); /* T_SUP U_SUP AN_SUP AO_SUP */
        assert_int_equal(be16_load(d + 2), i + 1);
        assert_int_equal(d[7], 1);
        assert_int_equal(be16_load(d + 10), i + 1);
    }
    /* the view moved: both nexuses get ASYMMETRIC ACCESS STATE CHANGED once */
    scsi_lu_raise_ua(f->lu, SCSI_UA_ALUA_CHANGED);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x2a, 0x06);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x2a, 0x06);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* non-optimized serves I/O */
    write_blocks(f, 0, 1, 0x5a);
    /* unavailable (a fenced gateway): 04/0C for I/O and TUR, not INQUIRY/RTPG */
    alua.port_state = SCSI_ALUA_UNAVAILABLE;
    RUN(f, &f->a, &r, NULL, 0, 512, 0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0);
    expect_sense(&r, 0x02, 0x04, 0x0c);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x02, 0x04, 0x0c);
    RUN(f, &f->a, &r, NULL, 0, 96, 0x12, 0, 0, 0, 96, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 255, 0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    alua.port_state = SCSI_ALUA_TRANSITIONING;
    RUN(f, &f->a, &r, NULL, 0, 512, 0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0);
    expect_sense(&r, 0x02, 0x04, 0x0a);
    fixture_free(f);
    assert_int_equal(alua.released, 1);
}

static void test_report_luns_tpg_rsoc(void **state)
{
    struct fixture *f = *state;
    struct result r;
    RUN(f, &f->a, &r, NULL, 0, 255, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be32_load(r.data), 24);
    assert_int_equal(r.data[8 + 8 + 1], 3);
    assert_int_equal(r.data[8 + 16], 0x41); /* 300: flat space */
    assert_int_equal(r.data[8 + 16 + 1], 300 & 0xff);
    RUN(f, &f->a, &r, NULL, 0, 255, 0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, NULL, 0, 255, 0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be16_load(r.data + 4 + 2), 1);
    assert_int_equal(be16_load(r.data + 4 + 10), 1);
    /* REPORT SUPPORTED OPCODES: all, with timeouts */
    RUN(f, &f->a, &r, NULL, 0, 8192, 0xa3, 0x0c, 0x80, 0, 0, 0, 0, 0, 0x20, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    uint32_t len = be32_load(r.data);
    assert_true(len > 20 * 20);
    assert_int_equal(len % 20, 0);
    /* one command: READ(10) has DPO/FUA in its usage data */
    RUN(f, &f->a, &r, NULL, 0, 64, 0xa3, 0x0c, 0x01, 0x28, 0, 0, 0, 0, 0, 64, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[1] & 0x07, 3);
    assert_int_equal(be16_load(r.data + 2), 10);
    assert_int_equal(r.data[4], 0x28);
    assert_int_equal(r.data[5] & 0x18, 0x18);
    /* unsupported opcode */
    RUN(f, &f->a, &r, NULL, 0, 64, 0xa3, 0x0c, 0x01, 0x9c, 0, 0, 0, 0, 0, 64, 0, 0);
    assert_int_equal(r.data[1] & 0x07, 1);
    /* opcode with service actions asked without one */
    RUN(f, &f->a, &r, NULL, 0, 64, 0xa3, 0x0c, 0x01, 0x9e, 0, 0, 0, 0, 0, 64, 0, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    RUN(f, &f->a, &r, NULL, 0, 64, 0xa3, 0x0c, 0x02, 0x9e, 0, 0x10, 0, 0, 0, 64, 0, 0);
    assert_int_equal(r.data[1] & 0x07, 3);
    assert_int_equal(be16_load(r.data + 2), 16);
}

static void test_misc(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x1b, 0, 0, 0, 0x01, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* eject a non-removable medium */
    RUN(f, &f->a, &r, NULL, 0, 0, 0x1b, 1, 0, 0, 0x02, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x1e, 0, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, 252, 0x03, 0, 0, 0, 252, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 18);
    assert_int_equal(r.data[2], 0);
    /* a transport-side helper */
    uint8_t cdb[16] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 8, 0};
    assert_int_equal(scsi_cdb_data_out_length(f->lu, cdb, 16), 8 * BS);
    uint8_t caw[16] = {0x89};
    caw[13] = 3;
    assert_int_equal(scsi_cdb_data_out_length(f->lu, caw, 16), 6 * BS);
    uint8_t lun[8];
    scsi_lun_encode(300, lun);
    assert_int_equal(scsi_lun_decode(lun), 300);
    scsi_lun_encode(5, lun);
    assert_int_equal(lun[1], 5);
    assert_int_equal(scsi_lun_decode(lun), 5);
}

static void test_spc2_reserve(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    clear_ua(f, &f->b);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x16, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    RUN(f, &f->b, &r, NULL, 0, 96, 0x12, 0, 0, 0, 96, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x16, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* release by the other is a no-op */
    RUN(f, &f->b, &r, NULL, 0, 0, 0x17, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* nexus loss releases it */
    scsi_lu_nexus_lost(f->lu, &f->a);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* LU reset releases it too, with a UA */
    RUN(f, &f->b, &r, NULL, 0, 0, 0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    scsi_lu_reset(f->lu, &f->b);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x00);
    expect_sense(&r, 0x06, 0x29, 0x03);
    clear_ua(f, &f->a);
    RUN(f, &f->a, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
}

static void prout(struct fixture *f, const struct scsi_nexus *n, uint8_t sa, uint8_t type,
                  uint64_t key, uint64_t sark, bool aptpl, struct result *r)
{
    uint8_t p[24];
    memset(p, 0, sizeof p);
    be64_store(p, key);
    be64_store(p + 8, sark);
    p[20] = aptpl ? 1 : 0;
    RUN(f, n, r, p, 24, 0, 0x5f, sa, type, 0, 0, 0, 0, 0, 24, 0);
}

static void test_persistent_reservations(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t buf[BS] = {0};
    clear_ua(f, &f->a);
    clear_ua(f, &f->b);
    /* register both */
    prout(f, &f->a, 0x00, 0, 0, 0xaaaa, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    prout(f, &f->b, 0x06, 0, 0, 0xbbbb, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* a wrong key re-registering conflicts */
    prout(f, &f->b, 0x00, 0, 0x1234, 0xcccc, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* READ KEYS */
    RUN(f, &f->a, &r, NULL, 0, 64, 0x5e, 0x00, 0, 0, 0, 0, 0, 0, 64, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be32_load(r.data + 4), 16);
    assert_int_equal(be64_load(r.data + 8), 0xaaaa);
    assert_int_equal(be64_load(r.data + 16), 0xbbbb);
    uint32_t gen = be32_load(r.data);
    assert_int_equal(gen, 2);
    /* A reserves Write Exclusive */
    prout(f, &f->a, 0x01, 0x01, 0xaaaa, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, NULL, 0, 64, 0x5e, 0x01, 0, 0, 0, 0, 0, 0, 64, 0);
    assert_int_equal(be32_load(r.data + 4), 16);
    assert_int_equal(be64_load(r.data + 8), 0xaaaa);
    assert_int_equal(r.data[8 + 13], 0x01);
    /* B may read, not write; A may do both */
    RUN(f, &f->b, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* B cannot reserve; SPC-2 RESERVE conflicts with PR */
    prout(f, &f->b, 0x01, 0x01, 0xbbbb, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x16, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* release with the wrong type */
    prout(f, &f->a, 0x02, 0x03, 0xaaaa, 0, false, &r);
    expect_sense(&r, 0x05, 0x26, 0x04);
    /* B preempts A: A's registration is gone, B holds EA */
    prout(f, &f->b, 0x04, 0x03, 0xbbbb, 0xaaaa, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    expect_sense(&r, 0x06, 0x2a, 0x05); /* REGISTRATIONS PREEMPTED */
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* READ FULL STATUS: one registrant, the holder, with a TransportID */
    RUN(f, &f->a, &r, NULL, 0, 512, 0x5e, 0x03, 0, 0, 0, 0, 0, 0, 0xff, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be64_load(r.data + 8), 0xbbbb);
    assert_int_equal(r.data[8 + 12] & 1, 1);
    assert_int_equal(r.data[8 + 13], 0x03);
    assert_int_equal(r.data[8 + 24] & 0x0f, 5);
    assert_non_null(strstr((char *)r.data + 8 + 28, "iqn.2026-11.test:b,i,0x"));
    /* REPORT CAPABILITIES */
    RUN(f, &f->a, &r, NULL, 0, 8, 0x5e, 0x02, 0, 0, 0, 0, 0, 0, 8, 0);
    assert_int_equal(be16_load(r.data), 8);
    assert_int_equal(r.data[2] & 0x01, 1); /* PTPL_C */
    /* unregistering the holder releases an EA reservation */
    prout(f, &f->b, 0x00, 0, 0xbbbb, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);

    /* all-registrants: stays while any registrant remains */
    prout(f, &f->a, 0x00, 0, 0, 0x1, false, &r);
    prout(f, &f->b, 0x00, 0, 0, 0x2, false, &r);
    prout(f, &f->a, 0x01, 0x08, 0x1, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->b, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    prout(f, &f->a, 0x00, 0, 0x1, 0, false, &r);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    RUN(f, &f->b, &r, NULL, 0, 64, 0x5e, 0x01, 0, 0, 0, 0, 0, 0, 64, 0);
    assert_int_equal(be32_load(r.data + 4), 16);
    assert_int_equal(be64_load(r.data + 8), 0); /* AR: key 0 */
    /* CLEAR */
    prout(f, &f->b, 0x03, 0, 0x2, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* parameter list length must be 24 */
    RUN(f, &f->a, &r, buf, 16, 0, 0x5f, 0x00, 0, 0, 0, 0, 0, 0, 16, 0);
    expect_sense(&r, 0x05, 0x1a, 0x00);
    /* invalid type */
    prout(f, &f->a, 0x00, 0, 0, 0x9, false, &r);
    prout(f, &f->a, 0x01, 0x02, 0x9, 0, false, &r);
    expect_sense(&r, 0x05, 0x24, 0x00);
    /* unknown PR IN service action */
    RUN(f, &f->a, &r, NULL, 0, 64, 0x5e, 0x07, 0, 0, 0, 0, 0, 0, 64, 0);
    expect_sense(&r, 0x05, 0x24, 0x00);
}

/* ALL_TG_PT: a registration stands for the initiator port through every
 * target port (every member of a gateway group); without it, the same
 * initiator port through another target port is another I_T nexus. */
static void test_pr_all_tg_pt(void **state)
{
    struct fixture *f = *state;
    struct result r;
    uint8_t buf[BS] = {0};
    struct scsi_nexus a2, b2;
    nexus_setup(&a2, "iqn.2026-11.test:a", 2);
    nexus_setup(&b2, "iqn.2026-11.test:b", 2);
    clear_ua(f, &f->a);
    clear_ua(f, &f->b);
    clear_ua(f, &a2);
    clear_ua(f, &b2);
    uint8_t p[24] = {0};
    be64_store(p + 8, 0x7);
    p[20] = 0x04; /* ALL_TG_PT */
    RUN(f, &f->a, &r, p, 24, 0, 0x5f, 0x00, 0, 0, 0, 0, 0, 0, 24, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* through port 2 the same initiator port holds the registration */
    prout(f, &a2, 0x01, 0x01, 0x7, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &f->a, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &b2, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* READ FULL STATUS: ALL_TG_PT set, relative target port 0 */
    RUN(f, &f->b, &r, NULL, 0, 512, 0x5e, 0x03, 0, 0, 0, 0, 0, 0, 0xff, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[8 + 12], 0x03); /* ALL_TG_PT | R_HOLDER */
    assert_int_equal(be16_load(r.data + 8 + 18), 0);
    /* REPORT CAPABILITIES: ATP_C */
    RUN(f, &f->a, &r, NULL, 0, 8, 0x5e, 0x02, 0, 0, 0, 0, 0, 0, 8, 0);
    assert_int_equal(r.data[2] & 0x04, 0x04);
    /* the holder releases through port 1 */
    prout(f, &f->a, 0x02, 0x01, 0x7, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &b2, &r, buf, BS, 0, 0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    /* without ALL_TG_PT: b's registration through port 1 is not b2's */
    prout(f, &f->b, 0x00, 0, 0, 0x8, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    prout(f, &b2, 0x01, 0x01, 0x8, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    prout(f, &f->b, 0x01, 0x03, 0x8, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &b2, &r, NULL, 0, BS, 0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    /* an SPC-2 reservation is an I_T nexus's too: b2 is not b */
    prout(f, &f->b, 0x03, 0, 0x8, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    clear_ua(f, &f->a);
    clear_ua(f, &f->b);
    clear_ua(f, &b2);
    RUN(f, &f->b, &r, NULL, 0, 0, 0x16, 0, 0, 0, 0, 0);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &b2, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    RUN(f, &b2, &r, NULL, 0, 0, 0x17, 0, 0, 0, 0, 0); /* not the holder: a no-op */
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    RUN(f, &b2, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_RESERVATION_CONFLICT);
    scsi_lu_nexus_lost(f->lu, &f->b);
    RUN(f, &b2, &r, NULL, 0, 0, 0x00);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
}

/* The text form of a state, as stored in the cluster and notified: every
 * field survives a round trip, with a notify's seq and unit attentions. */
static void test_pr_state_text(void **state)
{
    (void)state;
    struct scsi_pr_change *ch = calloc(1, sizeof *ch), *back = calloc(1, sizeof *back);
    struct scsi_pr_reg regs[2] = {
        {.key = 0xabc, .rel_tgt_port_id = 0},
        {.key = 0xdef, .rel_tgt_port_id = 7},
    };
    snprintf(regs[0].initiator_port, sizeof regs[0].initiator_port, "iqn.x:a,i,0x1");
    snprintf(regs[1].initiator_port, sizeof regs[1].initiator_port, "iqn.x:b,i,0x2");
    ch->s.regs = regs;
    ch->s.nregs = 2;
    ch->s.generation = 42;
    ch->s.aptpl = false;
    ch->s.held = true;
    ch->s.type = 5;
    ch->s.holder = 1;
    ch->s.res2_held = true;
    ch->s.res2_rel = 3;
    snprintf(ch->s.res2_port, sizeof ch->s.res2_port, "iqn.x:c,i,0x3");
    ch->s.swp = true;
    ch->nuas = 1;
    ch->uas[0].ua = SCSI_UA_REGISTRATIONS_PREEMPTED;
    ch->uas[0].rel = 7;
    snprintf(ch->uas[0].port, sizeof ch->uas[0].port, "iqn.x:b,i,0x2");
    /* MODE PARAMETERS CHANGED for everybody but the nexus that changed SWP */
    scsi_pr_change_ua(ch, "iqn.x:a,i,0x1", 2, SCSI_UA_MODE_CHANGED, true);
    size_t len;
    char *text = scsi_pr_state_format(&ch->s, ch, 99, &len);
    assert_non_null(text);
    uint64_t seq = 0;
    assert_int_equal(scsi_pr_state_parse(text, len, back, &seq), 0);
    assert_int_equal(seq, 99);
    assert_int_equal(back->s.nregs, 2);
    assert_int_equal(back->s.regs[0].key, 0xabc);
    assert_int_equal(back->s.regs[0].rel_tgt_port_id, 0);
    assert_string_equal(back->s.regs[1].initiator_port, "iqn.x:b,i,0x2");
    assert_int_equal(back->s.generation, 42);
    assert_false(back->s.aptpl);
    assert_true(back->s.held);
    assert_int_equal(back->s.type, 5);
    assert_int_equal(back->s.holder, 1);
    assert_true(back->s.res2_held);
    assert_int_equal(back->s.res2_rel, 3);
    assert_string_equal(back->s.res2_port, "iqn.x:c,i,0x3");
    assert_true(back->s.swp);
    assert_int_equal(back->nuas, 2);
    assert_int_equal(back->uas[0].ua, SCSI_UA_REGISTRATIONS_PREEMPTED);
    assert_false(back->uas[0].except);
    assert_int_equal(back->uas[1].ua, SCSI_UA_MODE_CHANGED);
    assert_true(back->uas[1].except);
    assert_int_equal(back->uas[1].rel, 2);
    assert_string_equal(back->uas[1].port, "iqn.x:a,i,0x1");
    scsi_pr_state_free(&back->s);
    /* without SWP there is no swp line: it parses as off */
    ch->s.swp = false;
    free(text);
    text = scsi_pr_state_format(&ch->s, NULL, 0, &len);
    assert_null(strstr(text, "swp"));
    assert_int_equal(scsi_pr_state_parse(text, len, back, NULL), 0);
    assert_false(back->s.swp);
    scsi_pr_state_free(&back->s);
    /* a holder index past the registrations is refused */
    ch->s.holder = 2;
    free(text);
    text = scsi_pr_state_format(&ch->s, NULL, 0, &len);
    assert_int_equal(scsi_pr_state_parse(text, len, back, NULL), -EINVAL);
    /* an empty object is an empty state */
    assert_int_equal(scsi_pr_state_parse("", 0, back, NULL), 0);
    assert_int_equal(back->s.nregs, 0);
    assert_false(back->s.held);
    free(text);
    free(ch);
    free(back);
}

static void test_pr_aptpl_persistence(void **state)
{
    struct fixture *f = *state;
    struct result r;
    clear_ua(f, &f->a);
    prout(f, &f->a, 0x00, 0, 0, 0x77, true, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    prout(f, &f->a, 0x01, 0x05, 0x77, 0, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_true(f->saves >= 2);
    assert_true(f->saved_len > 0);

    /* "restart": a new LU from the saved blob */
    struct scsi_lu_params p;
    memset(&p, 0, sizeof p);
    p.pr_blob = f->saved;
    p.pr_blob_len = f->saved_len;
    p.pr_store.save = pr_save;
    p.pr_store.arg = f;
    struct scsi_lu *lu2;
    assert_int_equal(scsi_lu_new(f->vol, &p, &lu2), 0);
    struct scsi_nexus a2;
    nexus_setup(&a2, "iqn.2026-11.test:a", 1);
    uint8_t cdb[16] = {0x5e, 0x01, 0, 0, 0, 0, 0, 0, 64, 0};
    harness_run(lu2, &a2, cdb, 16, NULL, 0, 64, &r); /* power-on UA first */
    harness_run(lu2, &a2, cdb, 16, NULL, 0, 64, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(be64_load(r.data + 8), 0x77);
    assert_int_equal(r.data[8 + 13], 0x05);
    scsi_lu_unref(lu2);

    /* APTPL off: the blob is deleted */
    prout(f, &f->a, 0x00, 0, 0x77, 0x78, false, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(f->saved_len, 0);

    /* garbage blob refused */
    p.pr_blob = "nonsense";
    p.pr_blob_len = 8;
    assert_int_equal(scsi_lu_new(f->vol, &p, &lu2), -EINVAL);
}

static void test_lu_params(void **state)
{
    struct fixture *f = *state;
    struct scsi_lu_params p;
    struct scsi_lu *lu;
    memset(&p, 0, sizeof p);
    p.block_size = 520;
    assert_int_equal(scsi_lu_new(f->vol, &p, &lu), -EINVAL);
    p.block_size = 4096;
    snprintf(p.naa, sizeof p.naa, "0x12");
    assert_int_equal(scsi_lu_new(f->vol, &p, &lu), -EINVAL);
    snprintf(p.naa, sizeof p.naa, "5000c50000000001");
    assert_int_equal(scsi_lu_new(f->vol, &p, &lu), 0);
    assert_int_equal(scsi_lu_block_size(lu), 4096);
    scsi_lu_unref(lu);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_power_on_ua, setup, teardown),
        cmocka_unit_test_setup_teardown(test_capacity_change_ua, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_opcode_and_lun, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reserved_bits_field_pointer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inquiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_capacity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_verify, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_same, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compare_and_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orwrite_defects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_range_lock, setup, teardown),
        cmocka_unit_test(test_caw_concurrent),
        cmocka_unit_test_setup_teardown(test_sync_cache_prefetch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mode_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_report_luns_tpg_rsoc, setup, teardown),
        cmocka_unit_test(test_alua_provider),
        cmocka_unit_test_setup_teardown(test_misc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spc2_reserve, setup, teardown),
        cmocka_unit_test_setup_teardown(test_persistent_reservations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pr_aptpl_persistence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pr_all_tg_pt, setup, teardown),
        cmocka_unit_test(test_pr_state_text),
        cmocka_unit_test_setup_teardown(test_lu_params, setup, teardown),
        cmocka_unit_test(test_offline_lu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
