/*
 * Identification and capacity: INQUIRY (standard data and VPD pages),
 * READ CAPACITY 10/16, REPORT LUNS, REPORT TARGET PORT GROUPS. Everything
 * about provisioning is derived from the volume's capabilities.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "scsi/scsi_internal.h"

static void pad_copy(uint8_t *dst, size_t n, const char *s)
{
    memset(dst, ' ', n);
    size_t l = strlen(s);
    memcpy(dst, s, l < n ? l : n);
}

static bool lu_thin(const struct scsi_lu *lu)
{
    return volume_caps(lu->vol) & BDEV_CAN_TRIM;
}

static bool lu_lbprz(const struct scsi_lu *lu)
{
    unsigned caps = volume_caps(lu->vol);
    return (caps & BDEV_CAN_TRIM) && (caps & BDEV_TRIM_ZEROES);
}

static uint32_t standard_inquiry(const struct scsi_cmd *c, uint8_t *b)
{
    const struct scsi_lu *lu = c->lu;
    memset(b, 0, 96);
    if (!lu) {
        b[0] = 0x7f; /* peripheral qualifier 3: no LU here; device type 0x1f */
        b[2] = 0x06;
        b[3] = 0x12;
        b[4] = 31;
        return 36;
    }
    b[0] = 0x00; /* direct access block device, connected */
    b[1] = 0x00; /* not removable */
    b[2] = 0x06; /* SPC-4 */
    b[3] = 0x12; /* HiSup, response data format 2 */
    b[4] = 96 - 5;
    b[5] = 0x10; /* TPGS = 01: implicit ALUA (REPORT TARGET PORT GROUPS) */
    if (lu->insecure_tpc)
        b[5] |= 0x08; /* 3PC: EXTENDED COPY (scsi_xcopy.c) */
    b[6] = 0x00;
    b[7] = 0x02; /* CmdQue */
    pad_copy(b + 8, 8, lu->vendor);
    pad_copy(b + 16, 16, lu->product);
    pad_copy(b + 32, 4, lu->revision);
    /* version descriptors: SAM-5, SPC-4, SBC-3, iSCSI */
    be16_store(b + 58, 0x00a0);
    be16_store(b + 60, 0x0460);
    be16_store(b + 62, 0x04c0);
    be16_store(b + 64, 0x0960);
    return 96;
}

/* One designation descriptor; returns its total length. */
static size_t put_desig(uint8_t *p, uint8_t proto_codeset, uint8_t piv_assoc_type, const void *id,
                        size_t len)
{
    p[0] = proto_codeset;
    p[1] = piv_assoc_type;
    p[2] = 0;
    p[3] = (uint8_t)len;
    memcpy(p + 4, id, len);
    return 4 + len;
}

/* SCSI name string: NUL-terminated, padded with NULs to a multiple of 4. */
static size_t put_name(uint8_t *p, uint8_t proto_codeset, uint8_t piv_assoc_type, const char *s)
{
    size_t l = strnlen(s, 251);
    size_t padded = (l + 1 + 3) & ~(size_t)3;
    uint8_t tmp[256];
    memset(tmp, 0, sizeof tmp);
    memcpy(tmp, s, l);
    return put_desig(p, proto_codeset, piv_assoc_type, tmp, padded);
}

static uint32_t vpd_device_id(const struct scsi_cmd *c, uint8_t *b)
{
    const struct scsi_lu *lu = c->lu;
    const struct scsi_nexus *n = c->nexus;
    size_t off = 4;
    uint8_t id[64];

    /* LU: NAA (binary) */
    off += put_desig(b + off, 0x01, 0x03, lu->naa, lu->naa_len);
    /* LU: T10 vendor id (ASCII): vendor + serial */
    memset(id, ' ', 8);
    memcpy(id, lu->vendor, strlen(lu->vendor));
    size_t sl = strlen(lu->serial);
    memcpy(id + 8, lu->serial, sl);
    off += put_desig(b + off, 0x02, 0x01, id, 8 + sl);
    if (n) {
        /* Target port: relative port, port group, SCSI name (iSCSI protocol id 5, PIV) */
        uint8_t rp[4] = {0, 0, (uint8_t)(n->rel_tgt_port_id >> 8), (uint8_t)n->rel_tgt_port_id};
        off += put_desig(b + off, 0x51, 0x94, rp, 4);
        uint8_t tpg[4] = {0, 0, (uint8_t)(n->tpg_id >> 8), (uint8_t)n->tpg_id};
        off += put_desig(b + off, 0x51, 0x95, tpg, 4);
        if (n->target_port[0])
            off += put_name(b + off, 0x53, 0x98, n->target_port);
        /* Target device: SCSI name string */
        if (n->target_name[0])
            off += put_name(b + off, 0x53, 0xa8, n->target_name);
    }
    b[0] = 0x00;
    b[1] = 0x83;
    be16_store(b + 2, (uint16_t)(off - 4));
    return (uint32_t)off;
}

static uint32_t vpd_block_limits(const struct scsi_cmd *c, uint8_t *b)
{
    const struct scsi_lu *lu = c->lu;
    memset(b, 0, 64);
    b[1] = 0xb0;
    be16_store(b + 2, 0x3c);
    b[4] = 0;                   /* WSNZ = 0: WRITE SAME with 0 blocks means "to the end" */
    b[5] = SCSI_MAX_CAW_BLOCKS; /* MAXIMUM COMPARE AND WRITE LENGTH */
    be16_store(b + 6, (uint16_t)(1u << lu->pblock_exp));        /* optimal transfer granularity */
    be32_store(b + 8, SCSI_MAX_XFER_BYTES >> lu->block_shift);  /* maximum transfer length */
    be32_store(b + 12, (1u << 20) >> lu->block_shift);          /* optimal transfer length */
    be32_store(b + 16, SCSI_MAX_XFER_BYTES >> lu->block_shift); /* maximum prefetch length */
    if (lu_thin(lu)) {
        be32_store(b + 20, SCSI_MAX_UNMAP_LBAS);
        be32_store(b + 24, SCSI_MAX_UNMAP_DESCS);
        be32_store(b + 28, 1u << lu->pblock_exp); /* optimal unmap granularity */
    }
    /* MAXIMUM WRITE SAME LENGTH: 0 = no limit */
    return 64;
}

static uint32_t vpd_characteristics(const struct scsi_cmd *c, uint8_t *b)
{
    memset(b, 0, 64);
    b[1] = 0xb1;
    be16_store(b + 2, 0x3c);
    be16_store(b + 4, c->lu->rotation_rate);
    if (scsi_lu_can_block_erase(c->lu))
        b[7] = 0x40; /* WABEREQ 01b: reads after SANITIZE BLOCK ERASE succeed (zeros) */
    return 64;
}

static uint32_t vpd_provisioning(const struct scsi_cmd *c, uint8_t *b)
{
    const struct scsi_lu *lu = c->lu;
    memset(b, 0, 8);
    b[1] = 0xb2;
    be16_store(b + 2, 4);
    if (lu_thin(lu)) {
        b[5] = 0x80 | 0x40 | 0x20; /* LBPU, LBPWS, LBPWS10 */
        if (lu_lbprz(lu))
            b[5] |= 0x04; /* LBPRZ */
        b[6] = 0x02;      /* provisioning type: thin */
    }
    return 8;
}

static const uint8_t vpd_pages[] = {0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2};

void scsi_run_inquiry(struct scsi_cmd *c)
{
    bool evpd = c->cdb[1] & 0x01;
    uint8_t page = c->cdb[2];
    uint32_t alloc = be16_load(&c->cdb[3]);
    uint8_t b[1024];
    uint32_t len;

    if (!evpd) {
        if (page) {
            scsi_fail_cdb(c, 2, 7);
            scsi_complete(c);
            return;
        }
        len = standard_inquiry(c, b);
        scsi_complete_data(c, b, len, alloc);
        return;
    }
    if (!c->lu) {
        /* VPD pages describe an LU; there is none at this LUN. */
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x25, 0x00);
        scsi_complete(c);
        return;
    }
    switch (page) {
    case 0x00:
        memset(b, 0, 4);
        b[1] = 0x00;
        be16_store(b + 2, sizeof vpd_pages);
        memcpy(b + 4, vpd_pages, sizeof vpd_pages);
        len = 4 + sizeof vpd_pages;
        break;
    case 0x80: {
        size_t sl = strlen(c->lu->serial);
        memset(b, 0, 4);
        b[1] = 0x80;
        be16_store(b + 2, (uint16_t)sl);
        memcpy(b + 4, c->lu->serial, sl);
        len = (uint32_t)(4 + sl);
        break;
    }
    case 0x83:
        len = vpd_device_id(c, b);
        break;
    case 0xb0:
        len = vpd_block_limits(c, b);
        break;
    case 0xb1:
        len = vpd_characteristics(c, b);
        break;
    case 0xb2:
        len = vpd_provisioning(c, b);
        break;
    default:
        scsi_fail_cdb(c, 2, -1);
        scsi_complete(c);
        return;
    }
    scsi_complete_data(c, b, len, alloc);
}

void scsi_run_read_capacity10(struct scsi_cmd *c)
{
    uint8_t b[8];
    uint64_t blocks = scsi_lu_blocks(c->lu);
    uint64_t last = blocks ? blocks - 1 : 0;
    if ((c->cdb[8] & 0x01) == 0 && be32_load(&c->cdb[2]) != 0) {
        /* LBA without PMI */
        scsi_fail_cdb(c, 2, -1);
        scsi_complete(c);
        return;
    }
    be32_store(b, last > 0xffffffffull ? 0xffffffffu : (uint32_t)last);
    be32_store(b + 4, c->lu->block_size);
    scsi_complete_data(c, b, 8, 8);
}

void scsi_run_read_capacity16(struct scsi_cmd *c)
{
    uint8_t b[32];
    uint32_t alloc = be32_load(&c->cdb[10]);
    uint64_t blocks = scsi_lu_blocks(c->lu);
    if ((c->cdb[14] & 0x01) == 0 && be64_load(&c->cdb[2]) != 0) {
        scsi_fail_cdb(c, 2, -1);
        scsi_complete(c);
        return;
    }
    memset(b, 0, sizeof b);
    be64_store(b, blocks ? blocks - 1 : 0);
    be32_store(b + 8, c->lu->block_size);
    b[13] = c->lu->pblock_exp & 0x0f;
    if (lu_thin(c->lu)) {
        b[14] = 0x80; /* LBPME */
        if (lu_lbprz(c->lu))
            b[14] |= 0x40; /* LBPRZ */
    }
    scsi_complete_data(c, b, sizeof b, alloc);
}

void scsi_run_report_luns(struct scsi_cmd *c)
{
    uint8_t select = c->cdb[2];
    uint32_t alloc = be32_load(&c->cdb[6]);
    if (select > 0x02) {
        scsi_fail_cdb(c, 2, -1);
        scsi_complete(c);
        return;
    }
    if (alloc < 16) {
        scsi_fail_cdb(c, 6, -1);
        scsi_complete(c);
        return;
    }
    enum { MAX_LUNS = 1024 };
    uint64_t *luns = malloc(MAX_LUNS * sizeof *luns);
    uint8_t *b = malloc(8 + MAX_LUNS * 8);
    if (!luns || !b) {
        free(luns);
        free(b);
        scsi_fail_errno(c, -ENOMEM, false);
        scsi_complete(c);
        return;
    }
    size_t n = 0;
    if (select != 0x01 && c->nexus && c->nexus->list_luns) {
        n = c->nexus->list_luns(c->nexus, luns, MAX_LUNS);
        if (n > MAX_LUNS)
            n = MAX_LUNS;
    } else if (select != 0x01 && c->lu) {
        luns[0] = c->lun;
        n = 1;
    }
    memset(b, 0, 8);
    be32_store(b, (uint32_t)(n * 8));
    for (size_t i = 0; i < n; i++)
        scsi_lun_encode(luns[i], b + 8 + i * 8);
    free(luns);
    scsi_complete_data(c, b, (uint32_t)(8 + n * 8), alloc);
    free(b);
}

/* Seconds an initiator should allow for an implicit transition (a lock
 * moving between gateways, a dead one being fenced: docs/ha.md). */
#define SCSI_ALUA_TRANSITION_S 10

void scsi_run_report_tpg(struct scsi_cmd *c)
{
    uint32_t alloc = be32_load(&c->cdb[6]);
    unsigned format = c->cdb[1] >> 5;
    enum { MAX_TPGS = 32 };
    struct scsi_tpg_desc tpgs[MAX_TPGS];
    uint8_t b[8 + MAX_TPGS * 12];
    size_t off, n = 0;

    if (format > 1) {
        scsi_fail_cdb(c, 1, 7);
        scsi_complete(c);
        return;
    }
    if (c->lu && c->lu->alua)
        n = c->lu->alua->report(c->lu->alua_arg, tpgs, MAX_TPGS);
    if (n > MAX_TPGS)
        n = MAX_TPGS;
    if (n == 0) {
        tpgs[0].tpg_id = c->nexus ? c->nexus->tpg_id : 1;
        tpgs[0].rel_port_id = c->nexus ? c->nexus->rel_tgt_port_id : 1;
        tpgs[0].state = SCSI_ALUA_OPTIMIZED;
        n = 1;
    }
    memset(b, 0, sizeof b);
    if (format == 1) {
        b[4] = 0x10; /* extended header: format 1 */
        b[5] = SCSI_ALUA_TRANSITION_S;
        off = 8;
    } else {
        off = 4;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t *d = b + off;
        d[0] = tpgs[i].state & 0x0f; /* PREF 0: no group is preferred for good */
        /* T_SUP, U_SUP, AN_SUP, AO_SUP: the states a group can be in */
        d[1] = c->lu && c->lu->alua ? 0x80 | 0x08 | 0x02 | 0x01 : 0x01;
        be16_store(d + 2, tpgs[i].tpg_id);
        d[5] = 0x00; /* status code: no transition requested by a SET TPGS */
        d[7] = 1;    /* target port count */
        be16_store(d + 10, tpgs[i].rel_port_id);
        off += 12;
    }
    be32_store(b, (uint32_t)(off - 4));
    scsi_complete_data(c, b, (uint32_t)off, alloc);
}
