/* TEST UNIT READY, REQUEST SENSE, START STOP UNIT, PREVENT ALLOW MEDIUM
 * REMOVAL: the commands of a medium that is always present. */
#include <string.h>

#include "core/util.h"

#include "scsi/scsi_internal.h"

void scsi_run_tur(struct scsi_cmd *c)
{
    scsi_complete(c);
}

void scsi_run_request_sense(struct scsi_cmd *c)
{
    uint32_t alloc = c->cdb[4];
    if (c->cdb[1] & 0x01) {
        /* DESC: descriptor-format sense is not supported (D_SENSE is 0). */
        scsi_fail_cdb(c, 1, 0);
        scsi_complete(c);
        return;
    }
    /* Build the answer in a scratch command so c keeps GOOD status. */
    struct scsi_cmd tmp;
    memset(&tmp, 0, sizeof tmp);
    bool have = false;
    if (!c->lu) {
        scsi_sense_fill(&tmp, SK_ILLEGAL_REQUEST, 0x25, 0x00);
        have = true;
    } else if (c->nexus) {
        pthread_mutex_lock(&c->lu->mu);
        struct scsi_nexus_state *ns = scsi_lu_nexus_locked(c->lu, c->nexus);
        if (ns)
            have = scsi_lu_ua_pop_locked(ns, &tmp);
        pthread_mutex_unlock(&c->lu->mu);
    }
    if (!have && c->lu && c->lu->offline) /* SPC-4: the not-ready condition */
        scsi_sense_fill(&tmp, SK_NOT_READY, 0x04, 0x01);
    else if (!have)
        scsi_sense_fill(&tmp, SK_NO_SENSE, 0x00, 0x00);
    scsi_complete_data(c, tmp.sense, 18, alloc);
}

void scsi_run_start_stop(struct scsi_cmd *c)
{
    uint8_t pc = c->cdb[4] >> 4;
    bool loej = c->cdb[4] & 0x02;
    if (pc != 0 && pc != 0x1 && pc != 0x2 && pc != 0x3 && pc != 0x7 && pc != 0xa && pc != 0xb) {
        scsi_fail_cdb(c, 4, 7);
        scsi_complete(c);
        return;
    }
    if (pc == 0 && loej) {
        /* The medium is not removable: nothing to load or eject. */
        scsi_fail_cdb(c, 4, 1);
        scsi_complete(c);
        return;
    }
    /* Starting/stopping a virtual disk changes nothing: it is always ready. */
    scsi_complete(c);
}

void scsi_run_prevent_allow(struct scsi_cmd *c)
{
    /* Not removable: PREVENT has no effect to enforce (SBC-3 §5.14). */
    scsi_complete(c);
}

/* READ DEFECT DATA 10/12: a virtual medium has no defects. Both lists are
 * reported valid and empty, in the format asked for. */
void scsi_run_read_defect_data(struct scsi_cmd *c)
{
    bool twelve = c->cdb[0] == 0xb7;
    uint8_t req = twelve ? c->cdb[1] : c->cdb[2];
    uint32_t alloc = twelve ? be32_load(&c->cdb[6]) : be16_load(&c->cdb[7]);
    uint8_t b[8];
    memset(b, 0, sizeof b);
    b[1] = (uint8_t)((req & 0x18) | (req & 0x07)); /* PLISTV/GLISTV as requested, format */
    scsi_complete_data(c, b, twelve ? 8 : 4, alloc);
}
