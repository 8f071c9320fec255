/*
 * The opcode table: every command we implement, with its CDB length, data
 * direction, the mask of CDB bits an initiator may set (also the CDB usage
 * data of REPORT SUPPORTED OPERATION CODES), reservation class and whether
 * it takes the LBA range lock. scsi_cmd.c validates every CDB against it
 * before dispatch, so handlers only check field *values*.
 */
#include <string.h>

#include "core/util.h"
#include "scsi/scsi_internal.h"

#define CTL 0x00 /* control byte: NACA/LINK unsupported; vendor bits ignored */

/* Common byte-1 masks. DPO 0x10, FUA 0x08, FUA_NV 0x02 (RDPROTECT/WRPROTECT
 * are left out: no protection information, so any value there is refused). */
#define RW_FLAGS 0x1a
#define VERIFY_FLAGS 0x16 /* DPO + BYTCHK (2 bits, SBC-4) */

/* clang-format off */
static const struct scsi_op ops[] = {
    {0x00, 0, 6, DIR_NONE, OPF_PR_ALLOW, {0x00, 0, 0, 0, 0, CTL},
     scsi_run_tur, "TEST UNIT READY", 1},
    {0x03, 0, 6, DIR_IN, OPF_NO_LU | OPF_UA_EXEMPT | OPF_PR_ALLOW | OPF_RES2_ALLOW,
     {0x03, 0x01, 0, 0, 0xff, CTL}, scsi_run_request_sense, "REQUEST SENSE", 1},
    {0x08, 0, 6, DIR_IN, OPF_PR_READ, {0x08, 0x1f, 0xff, 0xff, 0xff, CTL},
     scsi_run_read, "READ(6)", 30},
    {0x0a, 0, 6, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK, {0x0a, 0x1f, 0xff, 0xff, 0xff, CTL},
     scsi_run_write, "WRITE(6)", 30},
    {0x12, 0, 6, DIR_IN, OPF_NO_LU | OPF_UA_EXEMPT | OPF_PR_ALLOW | OPF_RES2_ALLOW,
     {0x12, 0x01, 0xff, 0xff, 0xff, CTL}, scsi_run_inquiry, "INQUIRY", 1},
    {0x15, 0, 6, DIR_OUT, 0, {0x15, 0x11, 0, 0, 0xff, CTL},
     scsi_run_mode_select, "MODE SELECT(6)", 1},
    {0x16, 0, 6, DIR_NONE, OPF_PR_ALLOW, {0x16, 0, 0, 0, 0, CTL},
     scsi_run_reserve, "RESERVE(6)", 1},
    {0x17, 0, 6, DIR_NONE, OPF_PR_ALLOW | OPF_RES2_ALLOW, {0x17, 0, 0, 0, 0, CTL},
     scsi_run_release, "RELEASE(6)", 1},
    {0x1a, 0, 6, DIR_IN, OPF_PR_READ, {0x1a, 0x08, 0xff, 0xff, 0xff, CTL},
     scsi_run_mode_sense, "MODE SENSE(6)", 1},
    {0x1b, 0, 6, DIR_NONE, 0, {0x1b, 0x01, 0, 0x0f, 0xf7, CTL},
     scsi_run_start_stop, "START STOP UNIT", 10},
    {0x1e, 0, 6, DIR_NONE, OPF_PR_READ, {0x1e, 0, 0, 0, 0x03, CTL},
     scsi_run_prevent_allow, "PREVENT ALLOW MEDIUM REMOVAL", 1},
    {0x25, 0, 10, DIR_IN, OPF_PR_ALLOW, {0x25, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0x01, CTL},
     scsi_run_read_capacity10, "READ CAPACITY(10)", 1},
    {0x28, 0, 10, DIR_IN, OPF_PR_READ,
     {0x28, RW_FLAGS | 0x04, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_read, "READ(10)", 30},
    {0x2a, 0, 10, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0x2a, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_write, "WRITE(10)", 30},
    {0x2e, 0, 10, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0x2e, 0x12, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_write_verify, "WRITE AND VERIFY(10)", 30},
    {0x2f, 0, 10, DIR_OUT, OPF_PR_READ,
     {0x2f, VERIFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_verify, "VERIFY(10)", 30},
    {0x34, 0, 10, DIR_NONE, OPF_PR_READ,
     {0x34, 0x02, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_prefetch, "PRE-FETCH(10)", 30},
    {0x35, 0, 10, DIR_NONE, OPF_PR_READ,
     {0x35, 0x06, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_sync_cache, "SYNCHRONIZE CACHE(10)", 60},
    {0x37, 0, 10, DIR_IN, OPF_PR_READ, {0x37, 0, 0x1f, 0, 0, 0, 0, 0xff, 0xff, CTL},
     scsi_run_read_defect_data, "READ DEFECT DATA(10)", 1},
    {0x41, 0, 10, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0x41, 0x08, 0xff, 0xff, 0xff, 0xff, 0x1f, 0xff, 0xff, CTL},
     scsi_run_write_same, "WRITE SAME(10)", 60},
    {0x42, 0, 10, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK | OPF_NEEDS_TRIM,
     {0x42, 0, 0, 0, 0, 0, 0x1f, 0xff, 0xff, CTL},
     scsi_run_unmap, "UNMAP", 60},
    /* SANITIZE: BLOCK ERASE only, without IMMED (scsi_sanitize.c) */
    {0x48, 0x02, 10, DIR_OUT, OPF_WRITE | OPF_HAS_SA | OPF_NEEDS_ERASE,
     {0x48, 0x3f, 0, 0, 0, 0, 0, 0xff, 0xff, CTL}, scsi_run_sanitize, "SANITIZE/BLOCK ERASE", 120},
    {0x55, 0, 10, DIR_OUT, 0, {0x55, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff, CTL},
     scsi_run_mode_select, "MODE SELECT(10)", 1},
    {0x56, 0, 10, DIR_NONE, OPF_PR_ALLOW, {0x56, 0, 0, 0, 0, 0, 0, 0, 0, CTL},
     scsi_run_reserve, "RESERVE(10)", 1},
    {0x57, 0, 10, DIR_NONE, OPF_PR_ALLOW | OPF_RES2_ALLOW, {0x57, 0, 0, 0, 0, 0, 0, 0, 0, CTL},
     scsi_run_release, "RELEASE(10)", 1},
    {0x5a, 0, 10, DIR_IN, OPF_PR_READ, {0x5a, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, CTL},
     scsi_run_mode_sense, "MODE SENSE(10)", 1},
    /* PERSISTENT RESERVE IN: one entry per service action. */
    {0x5e, 0x00, 10, DIR_IN, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5e, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff, CTL}, scsi_run_pr_in, "PR IN/READ KEYS", 1},
    {0x5e, 0x01, 10, DIR_IN, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5e, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff, CTL}, scsi_run_pr_in, "PR IN/READ RESERVATION", 1},
    {0x5e, 0x02, 10, DIR_IN, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5e, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff, CTL}, scsi_run_pr_in, "PR IN/REPORT CAPABILITIES", 1},
    {0x5e, 0x03, 10, DIR_IN, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5e, 0x1f, 0, 0, 0, 0, 0, 0xff, 0xff, CTL}, scsi_run_pr_in, "PR IN/READ FULL STATUS", 1},
    /* PERSISTENT RESERVE OUT */
    {0x5f, 0x00, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out, "PR OUT/REGISTER", 1},
    {0x5f, 0x01, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out, "PR OUT/RESERVE", 1},
    {0x5f, 0x02, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out, "PR OUT/RELEASE", 1},
    {0x5f, 0x03, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out, "PR OUT/CLEAR", 1},
    {0x5f, 0x04, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out, "PR OUT/PREEMPT", 1},
    {0x5f, 0x05, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out,
     "PR OUT/PREEMPT AND ABORT", 1},
    {0x5f, 0x06, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out,
     "PR OUT/REGISTER AND IGNORE EXISTING KEY", 1},
    {0x5f, 0x07, 10, DIR_OUT, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x5f, 0x1f, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, CTL}, scsi_run_pr_out,
     "PR OUT/REGISTER AND MOVE", 1},
    /* EXTENDED COPY (LID1) and RECEIVE COPY RESULTS: only where the
     * extent's insecure_tpc allows third-party copy (scsi_xcopy.c) */
    {0x83, 0x00, 16, DIR_OUT, OPF_WRITE | OPF_HAS_SA | OPF_NEEDS_TPC,
     {0x83, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, CTL},
     scsi_run_xcopy, "EXTENDED COPY(LID1)", 60},
    {0x84, 0x00, 16, DIR_IN, OPF_PR_READ | OPF_HAS_SA | OPF_NEEDS_TPC,
     {0x84, 0x1f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, CTL},
     scsi_run_receive_copy_results, "RECEIVE COPY RESULTS/COPY STATUS", 1},
    {0x84, 0x03, 16, DIR_IN, OPF_PR_READ | OPF_HAS_SA | OPF_NEEDS_TPC,
     {0x84, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, CTL},
     scsi_run_receive_copy_results, "RECEIVE COPY RESULTS/OPERATING PARAMETERS", 1},
    {0x88, 0, 16, DIR_IN, OPF_PR_READ,
     {0x88, RW_FLAGS | 0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0x1f, CTL},
     scsi_run_read, "READ(16)", 30},
    {0x89, 0, 16, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK | OPF_RANGE_EXCL,
     {0x89, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xff, 0x1f, CTL},
     scsi_run_caw, "COMPARE AND WRITE", 30},
    {0x8b, 0, 16, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK | OPF_RANGE_EXCL,
     {0x8b, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x1f, CTL},
     scsi_run_orwrite, "ORWRITE(16)", 30},
    {0x8a, 0, 16, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0x8a, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x1f, CTL},
     scsi_run_write, "WRITE(16)", 30},
    {0x8e, 0, 16, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0x8e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
      CTL},
     scsi_run_write_verify, "WRITE AND VERIFY(16)", 30},
    {0x8f, 0, 16, DIR_OUT, OPF_PR_READ,
     {0x8f, VERIFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0x1f, CTL},
     scsi_run_verify, "VERIFY(16)", 30},
    {0x90, 0, 16, DIR_NONE, OPF_PR_READ,
     {0x90, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
      CTL},
     scsi_run_prefetch, "PRE-FETCH(16)", 30},
    {0x91, 0, 16, DIR_NONE, OPF_PR_READ,
     {0x91, 0x06, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
      CTL},
     scsi_run_sync_cache, "SYNCHRONIZE CACHE(16)", 60},
    {0x93, 0, 16, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0x93, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f,
      CTL},
     scsi_run_write_same, "WRITE SAME(16)", 60},
    /* SERVICE ACTION IN(16) */
    {0x9e, 0x10, 16, DIR_IN, OPF_PR_ALLOW | OPF_HAS_SA,
     {0x9e, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
      CTL},
     scsi_run_read_capacity16, "READ CAPACITY(16)", 1},
    {0x9e, 0x12, 16, DIR_IN, OPF_PR_READ | OPF_HAS_SA,
     {0x9e, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, CTL},
     scsi_run_get_lba_status, "GET LBA STATUS", 10},
    {0xa0, 0, 12, DIR_IN, OPF_NO_LU | OPF_UA_EXEMPT | OPF_PR_ALLOW | OPF_RES2_ALLOW,
     {0xa0, 0, 0xff, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, CTL}, scsi_run_report_luns,
     "REPORT LUNS", 1},
    /* MAINTENANCE IN */
    {0xa3, 0x0a, 12, DIR_IN, OPF_PR_ALLOW | OPF_RES2_ALLOW | OPF_HAS_SA,
     {0xa3, 0xff, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, CTL}, scsi_run_report_tpg,
     "REPORT TARGET PORT GROUPS", 1},
    {0xa3, 0x0c, 12, DIR_IN, OPF_PR_ALLOW | OPF_RES2_ALLOW | OPF_HAS_SA,
     {0xa3, 0x1f, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, CTL}, scsi_run_rsoc,
     "REPORT SUPPORTED OPERATION CODES", 1},
    {0xb7, 0, 12, DIR_IN, OPF_PR_READ,
     {0xb7, 0x1f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, CTL},
     scsi_run_read_defect_data, "READ DEFECT DATA(12)", 1},
    {0xa8, 0, 12, DIR_IN, OPF_PR_READ,
     {0xa8, RW_FLAGS | 0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, CTL},
     scsi_run_read, "READ(12)", 30},
    {0xaa, 0, 12, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0xaa, RW_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, CTL},
     scsi_run_write, "WRITE(12)", 30},
    {0xae, 0, 12, DIR_OUT, OPF_WRITE | OPF_RANGE_LOCK,
     {0xae, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, CTL},
     scsi_run_write_verify, "WRITE AND VERIFY(12)", 30},
    {0xaf, 0, 12, DIR_OUT, OPF_PR_READ,
     {0xaf, VERIFY_FLAGS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x1f, CTL},
     scsi_run_verify, "VERIFY(12)", 30},
};
/* clang-format on */

const struct scsi_op *scsi_op_table(size_t *n)
{
    *n = ARRAY_SIZE(ops);
    return ops;
}

const struct scsi_op *scsi_op_find(uint8_t opcode, uint8_t sa, bool *opcode_known)
{
    *opcode_known = false;
    for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
        if (ops[i].opcode != opcode)
            continue;
        *opcode_known = true;
        if (!(ops[i].flags & OPF_HAS_SA) || ops[i].sa == sa)
            return &ops[i];
    }
    return NULL;
}

bool scsi_op_supported(const struct scsi_op *op, const struct scsi_lu *lu)
{
    if (lu && lu->offline)
        return true; /* not known yet: NOT READY (check_lu_state), not "unsupported" */
    if ((op->flags & OPF_NEEDS_TRIM) && lu && !(volume_caps(lu->vol) & BDEV_CAN_TRIM))
        return false;
    if ((op->flags & OPF_NEEDS_TPC) && lu && !lu->insecure_tpc)
        return false;
    if ((op->flags & OPF_NEEDS_ERASE) && lu && !scsi_lu_can_block_erase(lu))
        return false;
    return true;
}

/* ---- REPORT SUPPORTED OPERATION CODES (SPC-4 §6.35) ---- */

static size_t put_timeouts(uint8_t *p, const struct scsi_op *op)
{
    be16_store(p, 0x0a);
    p[2] = 0;
    p[3] = 0;
    be32_store(p + 4, op->timeout_s);      /* nominal */
    be32_store(p + 8, op->timeout_s * 2u); /* recommended */
    return 12;
}

void scsi_run_rsoc(struct scsi_cmd *c)
{
    const uint8_t *cdb = c->cdb;
    bool rctd = cdb[2] & 0x80;
    unsigned options = cdb[2] & 0x07;
    uint8_t req_op = cdb[3];
    uint16_t req_sa = be16_load(&cdb[4]);
    uint32_t alloc = be32_load(&cdb[6]);
    /* All descriptors with timeouts: 20 bytes each. */
    uint8_t buf[4 + ARRAY_SIZE(ops) * 20];
    size_t len = 0;

    if (options == 0) {
        len = 4;
        for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
            const struct scsi_op *op = &ops[i];
            if (!scsi_op_supported(op, c->lu))
                continue;
            uint8_t *d = buf + len;
            memset(d, 0, 8);
            d[0] = op->opcode;
            be16_store(d + 2, (op->flags & OPF_HAS_SA) ? op->sa : 0);
            d[5] = (rctd ? 0x02 : 0) | ((op->flags & OPF_HAS_SA) ? 0x01 : 0);
            be16_store(d + 6, op->cdb_len);
            len += 8;
            if (rctd)
                len += put_timeouts(buf + len, op);
        }
        be32_store(buf, (uint32_t)(len - 4));
        scsi_complete_data(c, buf, (uint32_t)len, alloc);
        return;
    }
    if (options > 3) {
        scsi_fail_cdb(c, 2, 2);
        scsi_complete(c);
        return;
    }

    /* One command. Does the opcode use service actions at all? */
    bool known = false, has_sa = false;
    for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
        if (ops[i].opcode == req_op) {
            known = true;
            has_sa = ops[i].flags & OPF_HAS_SA;
        }
    }
    if (known && options == 1 && has_sa) {
        scsi_fail_cdb(c, 2, 2);
        scsi_complete(c);
        return;
    }
    if (known && options == 2 && !has_sa) {
        scsi_fail_cdb(c, 2, 2);
        scsi_complete(c);
        return;
    }
    const struct scsi_op *op = NULL;
    if (known) {
        bool k;
        op = scsi_op_find(req_op, has_sa ? (uint8_t)req_sa : 0, &k);
        if (op && has_sa && req_sa > 0x1f)
            op = NULL;
        if (op && !scsi_op_supported(op, c->lu))
            op = NULL;
    }
    memset(buf, 0, sizeof buf);
    if (!op) {
        buf[1] = 0x01; /* not supported */
        len = 4;
    } else {
        buf[1] = (rctd ? 0x80 : 0) | 0x03; /* supported, conforming to the standard */
        be16_store(buf + 2, op->cdb_len);
        memcpy(buf + 4, op->usage, op->cdb_len);
        len = 4 + op->cdb_len;
        if (rctd)
            len += put_timeouts(buf + len, op);
    }
    scsi_complete_data(c, buf, (uint32_t)len, alloc);
}
