/*
 * MODE SENSE / MODE SELECT (SPC-4 §7.5, SBC-3 §6.4): the caching page (WCE
 * derived from the volume's sync property), the control page and the
 * informational exceptions page.
 *
 * WCE is not changeable: it reflects the volume's `sync` property, which is
 * changed through the management API, not by an initiator (an initiator
 * turning the cache off behind the administrator's back would silently turn
 * sync=standard into sync=always for everyone). The one changeable field is
 * SWP in the control page (software write protect, for every initiator,
 * until cleared or the LU is recreated; not saved). On an LU over shared
 * storage (RBD) SWP is part of the LU's shared state (scsi_pr_shared.c),
 * so it holds through every daemon serving the LU. MODE SELECT accepts a
 * page when only changeable bits differ from the current values, else
 * reports INVALID FIELD IN PARAMETER LIST at the first byte that differs;
 * the changeable-values page control shows exactly those bits.
 */
#include <string.h>

#include "core/util.h"
#include "scsi/scsi_internal.h"

enum { PC_CURRENT = 0, PC_CHANGEABLE = 1, PC_DEFAULT = 2, PC_SAVED = 3 };

static const uint8_t page_order[] = {0x08, 0x0a, 0x1c};

/* Build one page; returns its length, 0 when we do not have it. */
static size_t build_page(const struct scsi_lu *lu, uint8_t page, int pc, uint8_t *p)
{
    switch (page) {
    case 0x08: /* caching */
        memset(p, 0, 20);
        p[0] = 0x08;
        p[1] = 0x12;
        if (pc != PC_CHANGEABLE && scsi_lu_wce(lu))
            p[2] = 0x04; /* WCE */
        return 20;
    case 0x0a: /* control */
        memset(p, 0, 12);
        p[0] = 0x0a;
        p[1] = 0x0a;
        if (pc == PC_CHANGEABLE)
            p[4] = 0x08; /* SWP */
        else if (pc == PC_CURRENT && atomic_load(&lu->swp))
            p[4] = 0x08;
        if (pc != PC_CHANGEABLE) {
            p[2] = 0x02;               /* GLTSD: no log parameters are saved */
            p[3] = 0x10;               /* queue algorithm modifier 1: unrestricted reordering */
            be16_store(p + 8, 0xffff); /* busy timeout: unlimited */
        }
        return 12;
    case 0x1c: /* informational exceptions control */
        memset(p, 0, 12);
        p[0] = 0x1c;
        p[1] = 0x0a;
        if (pc != PC_CHANGEABLE)
            p[2] = 0x08; /* DEXCPT: no failure prediction to report */
        return 12;
    default:
        return 0;
    }
}

void scsi_run_mode_sense(struct scsi_cmd *c)
{
    const struct scsi_lu *lu = c->lu;
    bool ten = c->cdb[0] == 0x5a;
    bool dbd = c->cdb[1] & 0x08;
    bool llbaa = ten && (c->cdb[1] & 0x10);
    int pc = c->cdb[2] >> 6;
    uint8_t page = c->cdb[2] & 0x3f;
    uint8_t subpage = c->cdb[3];
    uint32_t alloc = ten ? be16_load(&c->cdb[7]) : c->cdb[4];
    uint8_t b[256];
    size_t hdr = ten ? 8 : 4, off;

    if (pc == PC_SAVED) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x39, 0x00); /* SAVING PARAMETERS NOT SUPPORTED */
        scsi_complete(c);
        return;
    }
    if (subpage != 0 && subpage != 0xff) {
        scsi_fail_cdb(c, 3, -1);
        scsi_complete(c);
        return;
    }
    memset(b, 0, sizeof b);
    off = hdr;
    if (!dbd) {
        uint64_t blocks = scsi_lu_blocks(lu);
        if (llbaa) {
            be64_store(b + off, blocks);
            be32_store(b + off + 12, lu->block_size);
            off += 16;
        } else {
            be32_store(b + off, blocks > 0xffffffffull ? 0xffffffffu : (uint32_t)blocks);
            be32_store(b + off + 4, lu->block_size & 0xffffff);
            off += 8;
        }
    }
    size_t bdl = off - hdr;
    if (page == 0x3f) {
        for (size_t i = 0; i < sizeof page_order; i++)
            off += build_page(lu, page_order[i], pc, b + off);
    } else {
        size_t n = subpage == 0xff && page != 0x3f ? 0 : build_page(lu, page, pc, b + off);
        if (!n) {
            scsi_fail_cdb(c, 2, 5);
            scsi_complete(c);
            return;
        }
        off += n;
    }
    uint8_t dsp = 0x10; /* DPOFUA */
    if (scsi_lu_is_readonly(lu) || atomic_load(&lu->swp))
        dsp |= 0x80; /* WP */
    if (ten) {
        be16_store(b, (uint16_t)(off - 2));
        b[3] = dsp;
        b[4] = llbaa && !dbd ? 0x01 : 0x00;
        be16_store(b + 6, (uint16_t)bdl);
    } else {
        b[0] = (uint8_t)(off - 1);
        b[2] = dsp;
        b[3] = (uint8_t)bdl;
    }
    scsi_complete_data(c, b, (uint32_t)off, alloc);
}

/* MODE SELECT's SWP on a shared LU (scsi_pr_shared.c runs it on a fresh
 * copy of the LU's shared state): the other I_T nexuses, through every
 * daemon, get MODE PARAMETERS CHANGED. */
static int act_swp(struct scsi_cmd *c, struct scsi_pr_change *ch, const void *arg)
{
    bool want = *(const uint8_t *)arg != 0;
    if (ch->s.swp == want)
        return SCSI_PR_NOOP;
    ch->s.swp = want;
    if (c && c->nexus) /* SPC-4 §5.12 */
        scsi_pr_change_ua(ch, c->nexus->initiator_port, c->nexus->rel_tgt_port_id,
                          SCSI_UA_MODE_CHANGED, true);
    return SCSI_PR_OK;
}

/* The mode parameter header and block descriptor (SPC-4 §7.5.5, §7.5.6):
 * no medium type, at most one block descriptor, giving our block size. On
 * success *pages is the offset of the first mode page. false: c failed. */
static bool mode_select_check_header(struct scsi_cmd *c, bool ten, uint32_t plen, size_t *pages)
{
    const struct scsi_lu *lu = c->lu;
    const uint8_t *d = c->data_out;
    size_t hdr = ten ? 8 : 4;
    size_t bdl = ten ? be16_load(d + 6) : d[3];
    bool longlba = ten && (d[4] & 0x01);
    if (d[ten ? 2 : 1] != 0) { /* medium type */
        scsi_fail_param(c, ten ? 2 : 1, -1);
        return false;
    }
    size_t bd_size = longlba ? 16 : 8;
    if (bdl % bd_size || bdl > bd_size || hdr + bdl > plen) {
        scsi_fail_param(c, ten ? 6 : 3, -1);
        return false;
    }
    if (bdl) {
        const uint8_t *bd = d + hdr;
        uint32_t blen = longlba ? be32_load(bd + 12) : (be32_load(bd + 4) & 0xffffff);
        if (blen != lu->block_size) {
            scsi_fail_param(c, (unsigned)(hdr + (longlba ? 12 : 5)), -1);
            return false;
        }
    }
    *pages = hdr + bdl;
    return true;
}

/* The mode page at off: one we have, sent whole, differing from the
 * current values only in changeable bits (else the first byte and bit that
 * differ are reported). On success *len is its length. false: c failed. */
static bool mode_select_check_page(struct scsi_cmd *c, size_t off, uint32_t plen, size_t *len)
{
    const struct scsi_lu *lu = c->lu;
    const uint8_t *p = c->data_out + off;
    size_t avail = plen - off;
    if (avail < 2) {
        scsi_fail_param_len(c);
        return false;
    }
    bool spf = p[0] & 0x40;
    *len = spf ? (avail >= 4 ? 4u + be16_load(p + 2) : avail + 1) : 2u + p[1];
    if (*len > avail) {
        scsi_fail_param_len(c);
        return false;
    }
    /* We have no subpages: an SPF page is never one of ours. */
    uint8_t cur[64], chg[64];
    size_t n = spf ? 0 : build_page(lu, p[0] & 0x3f, PC_CURRENT, cur);
    build_page(lu, p[0] & 0x3f, PC_CHANGEABLE, chg);
    if (!n || n != *len) {
        scsi_fail_param(c, (unsigned)off, 5);
        return false;
    }
    for (size_t i = 2; i < n; i++) {
        uint8_t diff = (p[i] ^ cur[i]) & (uint8_t)~chg[i];
        if (diff) {
            int bit = 7;
            while (bit > 0 && !(diff & (1u << bit)))
                bit--;
            scsi_fail_param(c, (unsigned)(off + i), bit);
            return false;
        }
    }
    return true;
}

/* Everything checked: apply the changeable fields (the last control page
 * sent wins), then complete c, or let the shared update complete it. */
static void mode_select_apply(struct scsi_cmd *c, size_t pages, uint32_t plen)
{
    const uint8_t *d = c->data_out;
    int swp = -1;
    for (size_t off = pages; off < plen;) {
        const uint8_t *p = d + off;
        size_t len = 2u + p[1]; /* checked: no SPF page got this far */
        if ((p[0] & 0x3f) == 0x0a)
            swp = (p[4] & 0x08) != 0;
        off += len;
    }
    if (swp >= 0 && c->lu->shared) {
        /* Every daemon serving the LU enforces it before this completes. */
        uint8_t want = (uint8_t)swp;
        scsi_pr_shared_update(c->lu, c, act_swp, &want, sizeof want);
        return;
    }
    bool swp_changed = swp >= 0 && atomic_exchange(&c->lu->swp, swp != 0) != (swp != 0);
    if (swp_changed && c->nexus) {
        /* SPC-4 §5.12: the other I_T nexuses learn of the change */
        pthread_mutex_lock(&c->lu->mu);
        scsi_lu_ua_all_locked(c->lu, SCSI_UA_MODE_CHANGED, c->nexus->id);
        pthread_mutex_unlock(&c->lu->mu);
    }
    scsi_complete(c);
}

void scsi_run_mode_select(struct scsi_cmd *c)
{
    bool ten = c->cdb[0] == 0x55;
    uint32_t plen = ten ? be16_load(&c->cdb[7]) : c->cdb[4];
    size_t hdr = ten ? 8 : 4, pages = 0, len = 0;

    if (c->cdb[1] & 0x01) {
        /* SP: nothing can be saved */
        scsi_fail_cdb(c, 1, 0);
        scsi_complete(c);
        return;
    }
    c->xfer_want = plen;
    if (plen == 0) {
        scsi_complete(c);
        return;
    }
    if (plen > c->data_out_len || plen < hdr) {
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    if (!mode_select_check_header(c, ten, plen, &pages)) {
        scsi_complete(c);
        return;
    }
    /* Check every page before applying any: a list is taken whole or not. */
    for (size_t off = pages; off < plen; off += len) {
        if (!mode_select_check_page(c, off, plen, &len)) {
            scsi_complete(c);
            return;
        }
    }
    mode_select_apply(c, pages, plen);
}
