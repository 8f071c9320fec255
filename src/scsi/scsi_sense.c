/* Sense data (fixed format, SPC-4 §4.5.3), the errno → sense mapping, and
 * command completion. */
#include <errno.h>
#include <string.h>

#include "core/iostats.h"
#include "core/bufpool.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"

void scsi_sense_fill(struct scsi_cmd *c, uint8_t key, uint8_t asc, uint8_t ascq)
{
    c->status = SCSI_STATUS_CHECK_CONDITION;
    memset(c->sense, 0, sizeof c->sense);
    c->sense[0] = 0x70; /* current error, fixed format */
    c->sense[2] = key & 0x0f;
    c->sense[7] = 10; /* additional sense length: bytes 8..17 */
    c->sense[12] = asc;
    c->sense[13] = ascq;
    c->sense_len = 18;
}

void scsi_cmd_set_sense(struct scsi_cmd *c, uint8_t key, uint8_t asc, uint8_t ascq)
{
    scsi_sense_fill(c, key, asc, ascq);
}

static void sense_field_pointer(struct scsi_cmd *c, bool cdb, unsigned byte, int bit)
{
    uint8_t b = 0x80; /* SKSV */
    if (cdb)
        b |= 0x40; /* C/D: the error is in the CDB */
    if (bit >= 0)
        b |= 0x08 | (uint8_t)(bit & 7); /* BPV + bit pointer */
    c->sense[15] = b;
    be16_store(&c->sense[16], (uint16_t)byte);
}

void scsi_fail_cdb(struct scsi_cmd *c, unsigned byte, int bit)
{
    scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x24, 0x00);
    sense_field_pointer(c, true, byte, bit);
}

void scsi_fail_param(struct scsi_cmd *c, unsigned byte, int bit)
{
    scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x00);
    sense_field_pointer(c, false, byte, bit);
}

void scsi_fail_lba_range(struct scsi_cmd *c)
{
    scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x21, 0x00);
}

void scsi_fail_write_protect(struct scsi_cmd *c)
{
    scsi_sense_fill(c, SK_DATA_PROTECT, 0x27, 0x00);
}

void scsi_fail_param_len(struct scsi_cmd *c)
{
    scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x1a, 0x00);
}

void scsi_fail_miscompare(struct scsi_cmd *c, uint32_t offset)
{
    scsi_sense_fill(c, SK_MISCOMPARE, 0x1d, 0x00);
    c->sense[0] |= 0x80; /* VALID: INFORMATION holds the offset */
    be32_store(&c->sense[3], offset);
}

void scsi_fail_errno(struct scsi_cmd *c, int err, bool write)
{
    switch (err) {
    case -EINVAL:
        scsi_fail_lba_range(c);
        break;
    case -EPERM:
    case -EROFS:
    case -EACCES:
        scsi_fail_write_protect(c);
        break;
    case -ENOSPC:
    case -EDQUOT:
        /* Backing store full: SPACE ALLOCATION FAILED WRITE PROTECT. */
        scsi_sense_fill(c, SK_DATA_PROTECT, 0x27, 0x07);
        break;
    case -EIO:
        if (write)
            scsi_sense_fill(c, SK_MEDIUM_ERROR, 0x0c, 0x00); /* WRITE ERROR */
        else
            scsi_sense_fill(c, SK_MEDIUM_ERROR, 0x11, 0x00); /* UNRECOVERED READ ERROR */
        break;
    case -ETIMEDOUT:
        /* The backend's service (a Ceph cluster) did not answer in time:
         * LOGICAL UNIT IS IN PROCESS OF BECOMING READY, which initiators
         * retry after a delay (Linux, ESXi), unlike MEDIUM or HARDWARE
         * ERROR, which fail the I/O up to the filesystem. */
        scsi_sense_fill(c, SK_NOT_READY, 0x04, 0x01);
        break;
    case -ENOMEM:
    case -EAGAIN:
    case -EBUSY:
        c->status = SCSI_STATUS_BUSY;
        c->sense_len = 0;
        break;
    case -ESHUTDOWN:
        /* librbd's EBLOCKLISTED: this client was fenced (a gateway group
         * took over, docs/ha.md). NOT READY, TARGET PORT IN UNAVAILABLE
         * STATE: a multipath initiator goes to another path; it is not a
         * medium error. */
        scsi_sense_fill(c, SK_NOT_READY, 0x04, 0x0c);
        break;
    case -ENOTSUP:
#if EOPNOTSUPP != ENOTSUP
    case -EOPNOTSUPP:
#endif
        scsi_fail_cdb(c, 0, -1);
        break;
    case -ENODEV:
        /* The volume is being deleted (an RBD image withdrawn before its
         * removal): LOGICAL UNIT NOT SUPPORTED, as once its LU is gone. */
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x25, 0x00);
        break;
    default:
        /* INTERNAL TARGET FAILURE */
        scsi_sense_fill(c, SK_HARDWARE_ERROR, 0x44, 0x00);
        break;
    }
}

int scsi_iostats_op(const uint8_t *cdb)
{
    switch (cdb[0]) {
    case 0x08: /* READ (6) */
    case 0x28: /* READ (10) */
    case 0xa8: /* READ (12) */
    case 0x88: /* READ (16) */
        return IOSTATS_READ;
    case 0x0a: /* WRITE (6) */
    case 0x2a: /* WRITE (10) */
    case 0xaa: /* WRITE (12) */
    case 0x8a: /* WRITE (16) */
    case 0x2e: /* WRITE AND VERIFY (10) */
    case 0xae: /* WRITE AND VERIFY (12) */
    case 0x8e: /* WRITE AND VERIFY (16) */
        return IOSTATS_WRITE;
    case 0x35: /* SYNCHRONIZE CACHE (10) */
    case 0x91: /* SYNCHRONIZE CACHE (16) */
        return IOSTATS_FLUSH;
    case 0x42: /* UNMAP */
        return IOSTATS_UNMAP;
    case 0x41: /* WRITE SAME (10) */
    case 0x93: /* WRITE SAME (16) */
    case 0x89: /* COMPARE AND WRITE */
        return IOSTATS_OTHER;
    default:
        return IOSTATS_NOP;
    }
}

/* One completed, counted command: bytes are the data moved (reads: sent,
 * writes: received); UNMAP counts no bytes (its ranges are in the
 * parameter list). */
static void scsi_iostats_done(struct scsi_cmd *c)
{
    int op = scsi_iostats_op(c->cdb);
    bool ok = c->status == SCSI_STATUS_GOOD;
    uint64_t bytes = op == IOSTATS_READ    ? c->data_in_len
                     : op == IOSTATS_WRITE ? (ok ? c->data_out_len : 0)
                                           : 0;
    iostats_done(c->lu->mslot, IOSTATS_ISCSI, (enum iostats_op)op, bytes, !ok, c->priv.mt0);
    c->priv.mt0 = 0;
}

void scsi_complete(struct scsi_cmd *c)
{
    if (c->priv.lock_state)
        scsi_range_unlock(c);
    if (c->priv.tmp) {
        bufpool_put(c->priv.tmp, c->priv.tmp_len);
        c->priv.tmp = NULL;
        c->priv.tmp_len = 0;
    }
    if (c->status != SCSI_STATUS_GOOD && c->status != SCSI_STATUS_CONDITION_MET) {
        /* No data accompanies an error status. */
        c->data_in_len = 0;
    }
    if (c->priv.mt0)
        scsi_iostats_done(c);
    c->done(c);
}

void scsi_complete_data(struct scsi_cmd *c, const void *src, uint32_t avail, uint32_t alloc_len)
{
    uint32_t n = avail < alloc_len ? avail : alloc_len;
    uint32_t k = scsi_alloc_len(c, n);
    if (k)
        memcpy(c->data_in, src, k);
    c->data_in_len = k;
    c->xfer_want = n;
    c->status = SCSI_STATUS_GOOD;
    scsi_complete(c);
}
