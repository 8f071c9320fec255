/*
 * SANITIZE (SBC-4 §5.30), BLOCK ERASE only: on a thin volume whose
 * deallocated blocks read back as zeros, deallocating every block is a
 * block erase (WABEREQ = 01b: reads after it succeed, with zeros). OVERWRITE,
 * CRYPTO ERASE and EXIT FAILURE MODE are not offered (INVALID FIELD IN CDB),
 * and neither is IMMED: the command returns when the erase is durable.
 *
 * The erase holds the LBA range lock exclusively over the whole LU, so
 * commands that arrive meanwhile wait for it instead of seeing half an
 * erase.
 */
#include <errno.h>

#include "core/util.h"
#include "scsi/scsi_internal.h"

bool scsi_lu_can_block_erase(const struct scsi_lu *lu)
{
    unsigned caps = volume_caps(lu->vol);
    return (caps & BDEV_CAN_TRIM) && (caps & BDEV_TRIM_ZEROES);
}

static bool erase_done(struct scsi_cmd *c)
{
    int r = c->priv.vreq.result;
    const struct scsi_lu *lu = c->lu;
    if ((r == -ENOTSUP || r == -EOPNOTSUPP) && c->priv.step == 0) {
        /* the backend refused to deallocate the range in one go: zero it */
        c->priv.step = 1;
        scsi_vreq_prep(c, VREQ_WRITE_ZEROES, VREQ_MAY_TRIM | VREQ_FUA, 0,
                       scsi_lu_blocks(lu) << lu->block_shift, NULL);
        return true;
    }
    if (r < 0)
        scsi_fail_errno(c, r, true);
    scsi_complete(c);
    return false;
}

void scsi_run_sanitize(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint32_t plen = be16_load(&c->cdb[7]);
    c->xfer_want = plen;
    if (plen != 0) {
        /* BLOCK ERASE takes no parameter list */
        scsi_fail_cdb(c, 7, -1);
        scsi_complete(c);
        return;
    }
    uint64_t blocks = scsi_lu_blocks(lu);
    if (blocks == 0) {
        scsi_complete(c);
        return;
    }
    if (!scsi_range_lock(c, 0, blocks, true))
        return; /* runs again once granted */
    c->priv.step = 0;
    scsi_vreq_prep(c, VREQ_TRIM, VREQ_FUA, 0, blocks << lu->block_shift, NULL);
    scsi_io_submit(c, erase_done);
}
