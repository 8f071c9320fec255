/*
 * Command entry: validate the CDB against the opcode table once, apply the
 * LU-wide rules (LUN present, unit attentions, reservations, read-only), then
 * dispatch to the handler. Handlers only check field values.
 */
#include <string.h>

#include "core/iostats.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"

static int highest_bit(uint8_t v)
{
    for (int b = 7; b >= 0; b--)
        if (v & (1u << b))
            return b;
    return -1;
}

bool scsi_cdb_lba_len(const uint8_t *cdb, uint64_t *lba, uint32_t *len)
{
    switch (cdb[0]) {
    case 0x08: /* READ(6) / WRITE(6): length 0 means 256 blocks */
    case 0x0a:
        *lba = ((uint64_t)(cdb[1] & 0x1f) << 16) | ((uint64_t)cdb[2] << 8) | cdb[3];
        *len = cdb[4] ? cdb[4] : 256;
        return true;
    case 0x28:
    case 0x2a:
    case 0x2e:
    case 0x2f:
    case 0x34:
    case 0x35:
    case 0x41:
        *lba = be32_load(&cdb[2]);
        *len = be16_load(&cdb[7]);
        return true;
    case 0xa8:
    case 0xaa:
    case 0xae:
    case 0xaf:
        *lba = be32_load(&cdb[2]);
        *len = be32_load(&cdb[6]);
        return true;
    case 0x88:
    case 0x8a:
    case 0x8b:
    case 0x8e:
    case 0x8f:
    case 0x90:
    case 0x91:
    case 0x93:
        *lba = be64_load(&cdb[2]);
        *len = be32_load(&cdb[10]);
        return true;
    case 0x89:
        *lba = be64_load(&cdb[2]);
        *len = cdb[13];
        return true;
    default:
        return false;
    }
}

int64_t scsi_cdb_data_out_length(const struct scsi_lu *lu, const uint8_t *cdb, size_t cdb_len)
{
    if (!cdb || cdb_len < 6)
        return -1;
    bool known;
    const struct scsi_op *op = scsi_op_find(cdb[0], cdb[1] & 0x1f, &known);
    if (!op || cdb_len < op->cdb_len)
        return -1;
    if (op->dir != DIR_OUT)
        return 0;
    uint64_t bs = lu ? lu->block_size : 512;
    uint64_t lba;
    uint32_t n;
    switch (cdb[0]) {
    case 0x15:
        return cdb[4];
    case 0x55:
    case 0x42:
        return be16_load(&cdb[7]);
    case 0x5f:
        return be32_load(&cdb[5]);
    case 0x41:
        return bs;
    case 0x93:
        return (cdb[1] & 0x01) ? 0 : (int64_t)bs; /* NDOB */
    case 0x89:
        return 2 * (int64_t)cdb[13] * (int64_t)bs;
    case 0x2f:
    case 0xaf:
    case 0x8f: {
        unsigned bytchk = (cdb[1] >> 1) & 3;
        scsi_cdb_lba_len(cdb, &lba, &n);
        if (bytchk == 0)
            return 0;
        return bytchk == 3 ? (int64_t)bs : (int64_t)n * (int64_t)bs;
    }
    default:
        if (!scsi_cdb_lba_len(cdb, &lba, &n))
            return 0;
        return (int64_t)n * (int64_t)bs;
    }
}

bool scsi_cdb_is_write(const uint8_t *cdb)
{
    bool known;
    const struct scsi_op *op = scsi_op_find(cdb[0], cdb[1] & 0x1f, &known);
    return op && op->dir == DIR_OUT;
}

void scsi_lun_encode(uint64_t lun, uint8_t out[8])
{
    memset(out, 0, 8);
    if (lun < 256) {
        out[1] = (uint8_t)lun;
    } else {
        out[0] = 0x40 | (uint8_t)((lun >> 8) & 0x3f);
        out[1] = (uint8_t)lun;
    }
}

uint64_t scsi_lun_decode(const uint8_t in[8])
{
    for (int i = 2; i < 8; i++)
        if (in[i])
            return UINT64_MAX;
    switch (in[0] >> 6) {
    case 0: /* peripheral device addressing, bus 0 */
        if (in[0] & 0x3f)
            return UINT64_MAX;
        return in[1];
    case 1: /* flat space */
        return ((uint64_t)(in[0] & 0x3f) << 8) | in[1];
    default:
        return UINT64_MAX;
    }
}

/* Commands SPC-4 (5.15.2.4.5) serves in the unavailable and transitioning
 * ALUA states: what an initiator needs to find out what is going on. */
static bool alua_allowed(const uint8_t *cdb)
{
    switch (cdb[0]) {
    case 0x03: /* REQUEST SENSE */
    case 0x12: /* INQUIRY */
    case 0x15: /* MODE SELECT (6) */
    case 0x1a: /* MODE SENSE (6) */
    case 0x4c: /* LOG SELECT */
    case 0x4d: /* LOG SENSE */
    case 0x55: /* MODE SELECT (10) */
    case 0x5a: /* MODE SENSE (10) */
    case 0xa0: /* REPORT LUNS */
    case 0xa3: /* MAINTENANCE IN: REPORT TARGET PORT GROUPS, ... */
    case 0xa4: /* MAINTENANCE OUT */
        return true;
    default:
        return false;
    }
}

/* What an LU whose storage is not reachable yet (lu->offline) serves:
 * what an initiator needs to find the LU and learn that it is becoming
 * ready. Not the VPD pages: identity (an RBD image's, in a gateway group),
 * block limits and provisioning come from the storage, and an initiator
 * must not record a stand-in's. */
static bool offline_allowed(const uint8_t *cdb)
{
    switch (cdb[0]) {
    case 0x03: /* REQUEST SENSE */
    case 0xa0: /* REPORT LUNS */
        return true;
    case 0x12: /* INQUIRY: standard data only */
        return !(cdb[1] & 0x01);
    default:
        return false;
    }
}

/* LU-wide checks under the LU mutex. Returns false when c was failed. */
static bool check_lu_state(struct scsi_cmd *c, const struct scsi_op *op)
{
    struct scsi_lu *lu = c->lu;
    if (!c->nexus)
        return true;
    bool ok = true;
    pthread_mutex_lock(&lu->mu);
    uint64_t gen = volume_size_generation(lu->vol);
    if (gen != lu->size_gen_seen) {
        lu->size_gen_seen = gen;
        scsi_lu_ua_all_locked(lu, SCSI_UA_CAPACITY_CHANGED, 0);
    }
    bool wce = scsi_lu_wce(lu), wp = scsi_lu_is_readonly(lu);
    if (wce != lu->wce_seen || wp != lu->wp_seen) {
        /* the volume's sync or read-only property changed under us */
        lu->wce_seen = wce;
        lu->wp_seen = wp;
        scsi_lu_ua_all_locked(lu, SCSI_UA_MODE_CHANGED, 0);
    }
    struct scsi_nexus_state *ns = scsi_lu_nexus_locked(lu, c->nexus);
    if (ns) {
        if (op->opcode == 0xa0)
            ns->ua_pending &= ~(1u << SCSI_UA_LUNS_CHANGED);
        if (!(op->flags & OPF_UA_EXEMPT) && ns->ua_pending && scsi_lu_ua_pop_locked(ns, c))
            ok = false;
    }
    if (ok && lu->offline && !offline_allowed(c->cdb)) {
        /* LOGICAL UNIT IS IN PROCESS OF BECOMING READY: its RBD pool is
         * still connecting; the initiator retries */
        scsi_sense_fill(c, SK_NOT_READY, 0x04, 0x01);
        ok = false;
    }
    if (ok && lu->alua && lu->alua->port_state && !alua_allowed(c->cdb)) {
        uint8_t st = lu->alua->port_state(lu->alua_arg, c->nexus->tpg_id);
        if (st == SCSI_ALUA_UNAVAILABLE || st == SCSI_ALUA_TRANSITIONING) {
            /* LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE /
             * ASYMMETRIC ACCESS STATE TRANSITION: the initiator tries another
             * path (a fenced gateway must not fail I/O as a medium error) */
            scsi_sense_fill(c, SK_NOT_READY, 0x04, st == SCSI_ALUA_UNAVAILABLE ? 0x0c : 0x0a);
            ok = false;
        }
    }
    if (ok && scsi_pr_conflict_locked(lu, c->nexus, op, c->cdb)) {
        c->status = SCSI_STATUS_RESERVATION_CONFLICT;
        c->sense_len = 0;
        ok = false;
    }
    pthread_mutex_unlock(&lu->mu);
    return ok;
}

void scsi_cmd_execute(struct scsi_cmd *c)
{
    c->status = SCSI_STATUS_GOOD;
    c->sense_len = 0;
    c->data_in_len = 0;
    c->xfer_want = 0;
    memset(&c->priv, 0, sizeof c->priv);
    if (c->lu && scsi_iostats_op(c->cdb) != IOSTATS_NOP)
        c->priv.mt0 = iostats_start(c->lu->mslot, IOSTATS_ISCSI);

    if (c->cdb_len < 6 || c->cdb_len > SCSI_CDB_MAX) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x20, 0x00);
        scsi_complete(c);
        return;
    }
    bool known;
    const struct scsi_op *op = scsi_op_find(c->cdb[0], c->cdb[1] & 0x1f, &known);

    if (!c->lu && !(op && (op->flags & OPF_NO_LU))) {
        /* LOGICAL UNIT NOT SUPPORTED */
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x25, 0x00);
        scsi_complete(c);
        return;
    }
    if (!op) {
        if (known)
            scsi_fail_cdb(c, 1, 4); /* unknown service action */
        else
            scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x20, 0x00);
        scsi_complete(c);
        return;
    }
    if (!scsi_op_supported(op, c->lu) || c->cdb_len < op->cdb_len) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x20, 0x00);
        scsi_complete(c);
        return;
    }
    for (unsigned i = 1; i + 1 < op->cdb_len; i++) {
        uint8_t bad = c->cdb[i] & (uint8_t)~op->usage[i];
        if (bad) {
            scsi_fail_cdb(c, i, highest_bit(bad));
            scsi_complete(c);
            return;
        }
    }
    uint8_t ctl = c->cdb[op->cdb_len - 1] & 0x07; /* NACA, obsolete FLAG/LINK */
    if (ctl) {
        scsi_fail_cdb(c, op->cdb_len - 1u, highest_bit(ctl));
        scsi_complete(c);
        return;
    }
    if (c->lu && !check_lu_state(c, op)) {
        scsi_complete(c);
        return;
    }
    if ((op->flags & OPF_WRITE) && scsi_lu_is_readonly(c->lu)) {
        scsi_fail_write_protect(c);
        scsi_complete(c);
        return;
    }
    if ((op->flags & OPF_WRITE) && atomic_load(&c->lu->swp)) {
        /* LOGICAL UNIT SOFTWARE WRITE PROTECTED */
        scsi_sense_fill(c, SK_DATA_PROTECT, 0x27, 0x02);
        scsi_complete(c);
        return;
    }
    if (op->dir == DIR_OUT) {
        int64_t want = scsi_cdb_data_out_length(c->lu, c->cdb, c->cdb_len);
        c->xfer_want = want > 0 ? (uint32_t)MIN(want, (int64_t)UINT32_MAX) : 0;
    }
    c->priv.op = op;
    op->run(c);
}
