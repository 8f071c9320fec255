#include "harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/util.h"

#define NAA_HEX "6589cfc000000abcdef0123456789abc"

volatile int harness_done_calls;

void harness_on_done(struct scsi_cmd *c)
{
    (void)c;
    harness_done_calls++;
}

void harness_run(struct scsi_lu *lu, const struct scsi_nexus *n, const uint8_t *cdb, size_t cdb_len,
                 const void *out, uint32_t out_len, uint32_t cap, struct result *r)
{
    struct scsi_cmd *c = calloc(1, sizeof *c);
    assert_non_null(c);
    memset(r, 0, sizeof *r);
    memcpy(c->cdb, cdb, cdb_len);
    c->cdb_len = 16;
    c->lu = lu;
    c->nexus = n;
    c->data_out = out;
    c->data_out_len = out_len;
    c->data_in = r->data;
    c->data_in_cap = cap > sizeof r->data ? sizeof r->data : cap;
    c->done = harness_on_done;
    int before = harness_done_calls;
    scsi_cmd_execute(c);
    assert_int_equal(harness_done_calls, before + 1);
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

void expect_sense(const struct result *r, uint8_t key, uint8_t asc, uint8_t ascq)
{
    assert_int_equal(r->status, SCSI_STATUS_CHECK_CONDITION);
    assert_int_equal(r->key, key);
    assert_int_equal(r->asc, asc);
    assert_int_equal(r->ascq, ascq);
}

static size_t one_lun(const struct scsi_nexus *n, uint64_t *out, size_t max)
{
    (void)n;
    if (max)
        out[0] = 0;
    return 1;
}

struct lu_fixture *lu_fixture_new(const char *vol_name, const char *serial, bool tpc)
{
    struct lu_fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    struct bdev *b;
    assert_int_equal(bdev_memory_open(VOL_SIZE, 0, &b), 0);
    assert_int_equal(volume_new(vol_name, b, BS, VOLUME_SYNC_STANDARD, false, &f->vol), 0);
    struct scsi_lu_params p;
    memset(&p, 0, sizeof p);
    p.block_size = BS;
    p.insecure_tpc = tpc;
    snprintf(p.serial, sizeof p.serial, "%s", serial);
    snprintf(p.naa, sizeof p.naa, "%s", NAA_HEX);
    assert_int_equal(scsi_lu_new(f->vol, &p, &f->lu), 0);
    struct scsi_nexus *n = &f->a;
    snprintf(n->initiator_name, sizeof n->initiator_name, "iqn.2026-11.test:a");
    snprintf(n->initiator_port, sizeof n->initiator_port, "iqn.2026-11.test:a,i,0x23d000000001");
    snprintf(n->target_name, sizeof n->target_name, "iqn.2026-11.org.blockd:t1");
    snprintf(n->target_port, sizeof n->target_port, "iqn.2026-11.org.blockd:t1,t,0x0001");
    n->rel_tgt_port_id = 1;
    n->tpg_id = 1;
    n->list_luns = one_lun;
    scsi_nexus_init(n);
    return f;
}

void lu_fixture_free(struct lu_fixture *f)
{
    scsi_lu_unref(f->lu);
    volume_unref(f->vol);
    free(f);
}

void lu_run(struct lu_fixture *f, const uint8_t cdb[16], const void *out, uint32_t out_len,
            uint32_t cap, struct result *r)
{
    harness_run(f->lu, &f->a, cdb, 16, out, out_len, cap, r);
}

void lu_clear_ua(struct lu_fixture *f)
{
    const uint8_t tur[16] = {0x00};
    struct result r;
    for (int i = 0; i < 8; i++) {
        lu_run(f, tur, NULL, 0, 0, &r);
        if (r.status == SCSI_STATUS_GOOD)
            return;
    }
    fail_msg("unit attention did not clear");
}

void lu_rw(struct lu_fixture *f, bool write, uint64_t lba, uint32_t n, uint8_t *buf)
{
    uint8_t cdb[16] = {write ? 0x8a : 0x88};
    be64_store(cdb + 2, lba);
    be32_store(cdb + 10, n);
    struct scsi_cmd *c = calloc(1, sizeof *c);
    assert_non_null(c);
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
    c->done = harness_on_done;
    scsi_cmd_execute(c);
    assert_int_equal(c->status, SCSI_STATUS_GOOD);
    free(c);
}
