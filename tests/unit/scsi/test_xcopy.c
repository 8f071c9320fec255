/*
 * EXTENDED COPY (LID1) and RECEIVE COPY RESULTS through scsi_cmd_execute
 * against an LU over a memory volume: the parameter-list errors, copies
 * (also overlapping ones, across chunk boundaries), the held results, and
 * both commands hidden when the extent does not allow third-party copy.
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
#include "scsi/scsi_internal.h" /* range lock, for the lock test */

#include "harness.h"

/* ---- parameter list builders ---- */

static size_t put_hdr(uint8_t *p, uint8_t list_id, unsigned usage, uint16_t tlen, uint32_t slen)
{
    memset(p, 0, 16);
    p[0] = list_id;
    p[1] = (uint8_t)((usage & 3) << 3);
    be16_store(p + 2, tlen);
    be32_store(p + 8, slen);
    return 16;
}

/* Identification CSCD naming our LU by its NAA (code set binary, LU). */
static size_t put_cscd(uint8_t *d, uint8_t type)
{
    static const uint8_t naa[16] = {0x65, 0x89, 0xcf, 0xc0, 0x00, 0x00, 0x0a, 0xbc,
                                    0xde, 0xf0, 0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc};
    memset(d, 0, 32);
    d[0] = type;
    d[4] = 0x01;
    d[5] = 0x03;
    d[7] = 16;
    memcpy(d + 8, naa, 16);
    d[29] = 0;
    d[30] = BS >> 8;
    d[31] = BS & 0xff;
    return 32;
}

static size_t put_seg(uint8_t *d, uint16_t si, uint16_t di, uint16_t n, uint64_t src, uint64_t dst)
{
    memset(d, 0, 28);
    d[0] = 0x02;
    be16_store(d + 2, 0x18);
    be16_store(d + 4, si);
    be16_store(d + 6, di);
    be16_store(d + 10, n);
    be64_store(d + 12, src);
    be64_store(d + 20, dst);
    return 28;
}

/* One CSCD + one segment; returns the parameter list length. */
static uint32_t simple_list(uint8_t *p, uint8_t list_id, unsigned usage, uint16_t n, uint64_t src,
                            uint64_t dst)
{
    size_t off = put_hdr(p, list_id, usage, 32, 28);
    off += put_cscd(p + off, 0xe4);
    off += put_seg(p + off, 0, 0, n, src, dst);
    return (uint32_t)off;
}

static void xcopy(struct lu_fixture *f, const uint8_t *p, uint32_t plen, uint32_t sent,
                  struct result *r)
{
    uint8_t cdb[16] = {0x83, 0x00};
    be32_store(cdb + 10, plen);
    lu_run(f, cdb, p, sent, 0, r);
}

static void fill(uint8_t *buf, uint64_t lba, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        memset(buf + (size_t)i * BS, (int)((lba + i) * 7 + 1), BS);
}

/* ---- tests ---- */

static void test_hidden_without_tpc(void **state)
{
    (void)state;
    struct lu_fixture *f = lu_fixture_new("test/xcopy", "XC1", false);
    lu_clear_ua(f);
    struct result r;
    uint8_t p[128];
    uint32_t plen = simple_list(p, 1, 2, 8, 0, 100);
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x05, 0x20, 0x00); /* INVALID COMMAND OPERATION CODE */
    const uint8_t rcr[16] = {0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0};
    lu_run(f, rcr, NULL, 0, 1024, &r);
    expect_sense(&r, 0x05, 0x20, 0x00);
    const uint8_t inq[16] = {0x12, 0, 0, 0, 96};
    lu_run(f, inq, NULL, 0, 96, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.data[5] & 0x08, 0); /* 3PC */
    lu_fixture_free(f);
}

static void test_param_errors(void **state)
{
    (void)state;
    struct lu_fixture *f = lu_fixture_new("test/xcopy", "XC1", true);
    lu_clear_ua(f);
    struct result r;
    uint8_t p[8192];
    uint32_t plen;

    const uint8_t inq[16] = {0x12, 0, 0, 0, 96};
    lu_run(f, inq, NULL, 0, 96, &r);
    assert_int_equal(r.data[5] & 0x08, 0x08); /* 3PC */

    /* length 0: nothing to do */
    xcopy(f, NULL, 0, 0, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);

    /* shorter than the header; fewer bytes sent than announced */
    plen = simple_list(p, 1, 2, 8, 0, 100);
    xcopy(f, p, 15, 15, &r);
    expect_sense(&r, 0x05, 0x1a, 0x00);
    xcopy(f, p, plen, plen - 1, &r);
    expect_sense(&r, 0x05, 0x1a, 0x00);
    assert_int_equal(r.want, plen);

    /* list truncated inside the CSCD / the segment descriptor */
    xcopy(f, p, 16 + 31, 16 + 31, &r);
    expect_sense(&r, 0x05, 0x1a, 0x00);
    xcopy(f, p, plen - 1, plen - 1, &r);
    expect_sense(&r, 0x05, 0x1a, 0x00);

    /* too many CSCDs (9 > 8) */
    size_t off = put_hdr(p, 1, 2, 9 * 32, 28);
    for (int i = 0; i < 9; i++)
        off += put_cscd(p + off, 0xe4);
    off += put_seg(p + off, 0, 0, 8, 0, 100);
    xcopy(f, p, (uint32_t)off, (uint32_t)off, &r);
    expect_sense(&r, 0x05, 0x26, 0x06);

    /* too many segments (65 > 64) */
    off = put_hdr(p, 1, 2, 32, 65 * 28);
    off += put_cscd(p + off, 0xe4);
    for (int i = 0; i < 65; i++)
        off += put_seg(p + off, 0, 0, 8, 0, 100);
    xcopy(f, p, (uint32_t)off, (uint32_t)off, &r);
    expect_sense(&r, 0x05, 0x26, 0x08);

    /* both lists past MAXIMUM DESCRIPTOR LIST LENGTH */
    off = put_hdr(p, 1, 2, 9 * 32, 65 * 28);
    for (int i = 0; i < 9; i++)
        off += put_cscd(p + off, 0xe4);
    for (int i = 0; i < 65; i++)
        off += put_seg(p + off, 0, 0, 8, 0, 100);
    xcopy(f, p, (uint32_t)off, (uint32_t)off, &r);
    expect_sense(&r, 0x05, 0x1a, 0x00);

    /* unsupported CSCD type (FC N_Port_Name) and segment type (stream→stream) */
    plen = simple_list(p, 1, 2, 8, 0, 100);
    p[16] = 0xe0;
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x05, 0x26, 0x07);
    plen = simple_list(p, 1, 2, 8, 0, 100);
    p[48] = 0x03;
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x05, 0x26, 0x09);

    /* CSCD index past the list; an NAA naming some other LU */
    plen = simple_list(p, 1, 2, 8, 0, 100);
    be16_store(p + 48 + 6, 1);
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x0a, 0x0d, 0x02);
    plen = simple_list(p, 1, 2, 8, 0, 100);
    p[16 + 8 + 15] ^= 0xff;
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x0a, 0x0d, 0x02);

    /* a disk block length other than the LU's */
    plen = simple_list(p, 1, 2, 8, 0, 100);
    p[16 + 30] = 0x10;
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x05, 0x26, 0x00);

    /* the destination range runs past the end: COPY ABORTED, segment pointer 48 */
    plen = simple_list(p, 1, 2, 2048, 0, BLOCKS - 1);
    xcopy(f, p, plen, plen, &r);
    assert_int_equal(r.key, 0x0a);
    assert_int_equal(r.sense[15], 0x80);
    assert_int_equal(be16_load(r.sense + 16), 48);

    /* LIST ID USAGE 01b is reserved; 11b needs LIST IDENTIFIER 0 */
    plen = simple_list(p, 1, 1, 8, 0, 100);
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x05, 0x26, 0x00);
    plen = simple_list(p, 1, 3, 8, 0, 100);
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x05, 0x26, 0x00);

    /* inline data: none supported */
    plen = simple_list(p, 1, 2, 8, 0, 100);
    be32_store(p + 12, 4);
    xcopy(f, p, plen + 4, plen + 4, &r);
    expect_sense(&r, 0x05, 0x26, 0x00);

    /* read-only: refused before anything is parsed */
    scsi_lu_set_readonly(f->lu, true);
    lu_clear_ua(f);
    plen = simple_list(p, 1, 2, 8, 0, 100);
    xcopy(f, p, plen, plen, &r);
    expect_sense(&r, 0x07, 0x27, 0x00);
    lu_fixture_free(f);
}

static void check_copy(struct lu_fixture *f, uint64_t src, uint64_t dst, uint32_t n)
{
    uint8_t *want = malloc((size_t)n * BS), *got = malloc((size_t)n * BS);
    fill(want, src, n);
    lu_rw(f, true, src, n, want);
    uint8_t p[128];
    struct result r;
    uint32_t plen = simple_list(p, 0, 3, (uint16_t)n, src, dst);
    xcopy(f, p, plen, plen, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.want, plen);
    lu_rw(f, false, dst, n, got);
    assert_memory_equal(got, want, (size_t)n * BS);
    free(want);
    free(got);
}

static void test_copy(void **state)
{
    (void)state;
    struct lu_fixture *f = lu_fixture_new("test/xcopy", "XC1", true);
    lu_clear_ua(f);
    check_copy(f, 0, BLOCKS - 2048, 2048); /* the libiscsi Simple case */
    check_copy(f, 10, 5000, 3000);         /* more than one 1 MiB chunk */
    check_copy(f, 100, 150, 2500);         /* overlap, destination above: copied backwards */
    check_copy(f, 3000, 2990, 2500);       /* overlap, destination below */

    /* two segments in one command */
    uint8_t a[8 * BS], b[8 * BS], p[256];
    fill(a, 7000, 8);
    lu_rw(f, true, 7000, 8, a);
    size_t off = put_hdr(p, 0, 3, 32, 56);
    off += put_cscd(p + off, 0xe4);
    off += put_seg(p + off, 0, 0, 4, 7000, 7100);
    off += put_seg(p + off, 0, 0, 4, 7004, 7200);
    struct result r;
    xcopy(f, p, (uint32_t)off, (uint32_t)off, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    lu_rw(f, false, 7100, 4, b);
    lu_rw(f, false, 7200, 4, b + 4 * BS);
    assert_memory_equal(a, b, sizeof a);
    lu_fixture_free(f);
}

/* The copy's writes take the range lock shared: a copy whose destination
 * overlaps a range held exclusively (as by COMPARE AND WRITE) waits. */
static int parked_done;
static void parked_cb(struct scsi_cmd *c)
{
    (void)c;
    parked_done++;
}

static void test_copy_waits_for_range_lock(void **state)
{
    (void)state;
    struct lu_fixture *f = lu_fixture_new("test/xcopy", "XC1", true);
    lu_clear_ua(f);
    uint8_t want[16 * BS], got[16 * BS];
    fill(want, 0, 16);
    lu_rw(f, true, 0, 16, want);
    struct scsi_cmd holder;
    memset(&holder, 0, sizeof holder);
    holder.lu = f->lu;
    assert_true(scsi_range_lock(&holder, 205, 2, true));

    static uint8_t p[128];
    uint32_t plen = simple_list(p, 0, 3, 16, 0, 200);
    struct scsi_cmd *c = calloc(1, sizeof *c);
    c->cdb[0] = 0x83;
    be32_store(c->cdb + 10, plen);
    c->cdb_len = 16;
    c->lu = f->lu;
    c->nexus = &f->a;
    c->data_out = p;
    c->data_out_len = plen;
    c->done = parked_cb;
    scsi_cmd_execute(c);
    assert_int_equal(parked_done, 0); /* waiting */
    scsi_range_unlock(&holder);
    assert_int_equal(parked_done, 1);
    assert_int_equal(c->status, SCSI_STATUS_GOOD);
    free(c);
    lu_rw(f, false, 200, 16, got);
    assert_memory_equal(got, want, sizeof want);
    lu_fixture_free(f);
}

static void test_receive_copy_results(void **state)
{
    (void)state;
    struct lu_fixture *f = lu_fixture_new("test/xcopy", "XC1", true);
    lu_clear_ua(f);
    struct result r;

    const uint8_t op[16] = {0x84, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0};
    lu_run(f, op, NULL, 0, 1024, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 46);
    assert_int_equal(be32_load(r.data), 42);
    assert_int_equal(be16_load(r.data + 8), 8);   /* CSCDs */
    assert_int_equal(be16_load(r.data + 10), 64); /* segments */
    assert_int_equal(be32_load(r.data + 12), 8 * 32 + 64 * 28);
    assert_int_equal(be32_load(r.data + 16), 0xffffu * BS);
    assert_int_equal(r.data[43], 2);
    assert_int_equal(r.data[44], 0x02);
    assert_int_equal(r.data[45], 0xe4);

    /* no copy with list id 5 yet */
    const uint8_t cs[16] = {0x84, 0x00, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0};
    lu_run(f, cs, NULL, 0, 1024, &r);
    expect_sense(&r, 0x05, 0x24, 0x00);

    /* a failed copy leaves nothing behind */
    uint8_t p[128];
    uint32_t plen = simple_list(p, 5, 0, 16, 0, BLOCKS);
    xcopy(f, p, plen, plen, &r);
    assert_int_equal(r.key, 0x0a);
    lu_run(f, cs, NULL, 0, 1024, &r);
    expect_sense(&r, 0x05, 0x24, 0x00);

    /* a held one is reported: completed, 1 segment, 16 blocks in bytes */
    plen = simple_list(p, 5, 0, 16, 0, 100);
    xcopy(f, p, plen, plen, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    lu_run(f, cs, NULL, 0, 1024, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    assert_int_equal(r.len, 12);
    assert_int_equal(be32_load(r.data), 8);
    assert_int_equal(r.data[4], 0x01);
    assert_int_equal(be16_load(r.data + 5), 1);
    assert_int_equal(r.data[7], 0x00);
    assert_int_equal(be32_load(r.data + 8), 16 * BS);

    /* a discarded list id (usage 10b) is not kept */
    plen = simple_list(p, 6, 2, 16, 0, 100);
    xcopy(f, p, plen, plen, &r);
    assert_int_equal(r.status, SCSI_STATUS_GOOD);
    const uint8_t cs6[16] = {0x84, 0x00, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0};
    lu_run(f, cs6, NULL, 0, 1024, &r);
    expect_sense(&r, 0x05, 0x24, 0x00);
    lu_fixture_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hidden_without_tpc),
        cmocka_unit_test(test_param_errors),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_copy_waits_for_range_lock),
        cmocka_unit_test(test_receive_copy_results),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
