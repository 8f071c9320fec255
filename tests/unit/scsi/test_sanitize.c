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
#include "scsi/scsi.h"

#define BS 512
#define VOL_SIZE (4u << 20) /* 8192 blocks */
#define BLOCKS (VOL_SIZE / BS)
#define NAA_HEX "6589cfc000000abcdef0123456789abc"

struct fixture {
    struct volume *vol;
    struct scsi_lu *lu;
    struct scsi_nexus a;
};

struct result {
    uint8_t status, key, asc, ascq;
    uint8_t sense[SCSI_SENSE_MAX];
    uint32_t len, want;
    uint8_t data[4096];
};

static size_t list_luns(const struct scsi_nexus *n, uint64_t *out, size_t max)
{
    (void)n;
    if (max)
        out[0] = 0;
    return 1;
}

static struct fixture *fixture_new(void)
{
    struct fixture *f = calloc(1, sizeof *f);
    struct bdev *b;
    assert_int_equal(bdev_memory_open(VOL_SIZE, 0, &b), 0);
    assert_int_equal(volume_new("test/sanitize", b, 512, VOLUME_SYNC_STANDARD, false, &f->vol), 0);
    struct scsi_lu_params p;
    memset(&p, 0, sizeof p);
    p.block_size = BS;
    snprintf(p.serial, sizeof p.serial, "SN1");
    snprintf(p.naa, sizeof p.naa, "%s", NAA_HEX);
    assert_int_equal(scsi_lu_new(f->vol, &p, &f->lu), 0);
    struct scsi_nexus *n = &f->a;
    snprintf(n->initiator_name, sizeof n->initiator_name, "iqn.2026-11.test:a");
    snprintf(n->initiator_port, sizeof n->initiator_port, "iqn.2026-11.test:a,i,0x23d000000001");
    snprintf(n->target_name, sizeof n->target_name, "iqn.2026-11.org.blockd:t1");
    snprintf(n->target_port, sizeof n->target_port, "iqn.2026-11.org.blockd:t1,t,0x0001");
    n->rel_tgt_port_id = 1;
    n->tpg_id = 1;
    n->list_luns = list_luns;
    scsi_nexus_init(n);
    return f;
}

static void fixture_free(struct fixture *f)
{
    scsi_lu_unref(f->lu);
    volume_unref(f->vol);
    free(f);
}

static int done_calls;

static void on_done(struct scsi_cmd *c)
{
    (void)c;
    done_calls++;
}

static void run(struct fixture *f, const uint8_t cdb[16], const void *out, uint32_t out_len,
                uint32_t cap, struct result *r)
{
    struct scsi_cmd *c = calloc(1, sizeof *c);
    memset(r, 0, sizeof *r);
    memcpy(c->cdb, cdb, 16);
    c->cdb_len = 16;
    c->lu = f->lu;
    c->nexus = &f->a;
    c->data_out = out;
    c->data_out_len = out_len;
    c->data_in = r->data;
    c->data_in_cap = cap > sizeof r->data ? sizeof r->data : cap;
    c->done = on_done;
    int before = done_calls;
    scsi_cmd_execute(c);
    assert_int_equal(done_calls, before + 1);
    r->status = c->status;
    if (c->sense_len) {
        memcpy(r->sense, c->sense, sizeof r->sense);
        r->key = c->sense[2] & 0x0f;
        r->asc = c->sense[12];
        r->ascq = c->sense[13];
    }
    r->len = c->data_in_len;
    r->want = c->xfer_want;
    free(c);
}

static void expect_sense(const struct result *r, uint8_t key, uint8_t asc, uint8_t ascq)
{
    assert_int_equal(r->status, SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(r->key, key);
    assert_int_equal(r->asc, asc);
    assert_int_equal(r->ascq, ascq);
}

static void clear_ua(struct fixture *f)
{
    const uint8_t tur[16] = {0x00};
    struct result r;
    for (int i = 0; i < 8; i++) {
        run(f, tur, NULL, 0, 0, &r);
        if (r.status == SCSI_STATUS_GOOD)
            return;
    }
    fail_msg("unit attention did not clear");
}

static void rw(struct fixture *f, bool write, uint64_t lba, uint32_t n, uint8_t *buf)
{
    uint8_t cdb[16] = {write ? 0x8a : 0x88};
    be64_store(cdb + 2, lba);
    be32_store(cdb + 10, n);
    struct scsi_cmd *c = calloc(1, sizeof *c);
    memcpy(c->cdb, cdb, 16);
    c->cdb_len = 16;
    c->lu = f->lu;
    c->nexus = &f->a;
    if (write) {
        c->data_out = buf;
        c->data_out_len = n * BS;
    } else {
        c->data_in = buf;
        c->data_in_cap = n * BS;
    }
    c->done = on_done;
    scsi_cmd_execute(c);
    assert_int_equal(c->status, SCSI_STATUS_GOOD);
    free(c);
}

static void sanitize(struct fixture *f, uint8_t byte1, uint16_t plen, const void *out,
                     struct result *r)
{
    uint8_t cdb[16] = {0x48, byte1};
    be16_store(cdb + 7, plen);
    run(f, cdb, out, plen, 0, r);
}

static void test_block_erase(void **state)
{
    (void)state;
    struct fixture *f = fixture_new();
    clear_ua(f);
    struct result r;
    uint8_t *buf = malloc(64 * BS), *zero = calloc(64, BS);
    memset(buf, 0xa5, 64 * BS);
    rw(f, true, 0, 64, buf);
    rw(f, true, BLOCKS - 64, 64, buf);

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
    rw(f, false, 0, 64, buf + 0);
    assert_int_equal(buf[0], 0xa5);

    sanitize(f, 0x02, 0, NULL, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    rw(f, false, 0, 64, buf);
    assert_memory_equal(buf, zero, 64 * BS);
    rw(f, false, BLOCKS - 64, 64, buf);
    assert_memory_equal(buf, zero, 64 * BS);

    /* REPORT SUPPORTED OPERATION CODES: 0x48/2 supported, 0x48/1 not */
    const uint8_t one[16] = {0xa3, 0x0c, 0x02, 0x48, 0x00, 0x02, 0, 0, 0x01, 0x00};
    run(f, one, NULL, 0, 256, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[1] & 0x07, 0x03);
    const uint8_t ow[16] = {0xa3, 0x0c, 0x02, 0x48, 0x00, 0x01, 0, 0, 0x01, 0x00};
    run(f, ow, NULL, 0, 256, &r);
    assert_int_equal(r.data[1] & 0x07, 0x01);

    /* WABEREQ = 01b in the Block Device Characteristics page */
    const uint8_t b1[16] = {0x12, 0x01, 0xb1, 0, 64};
    run(f, b1, NULL, 0, 64, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[7] >> 6, 1);

    /* write protected */
    scsi_lu_set_readonly(f->lu, true);
    clear_ua(f);
    sanitize(f, 0x02, 0, NULL, &r);
    expect_sense(&r, 0x07, 0x27, 0x00);
    free(buf);
    free(zero);
    fixture_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_erase),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
