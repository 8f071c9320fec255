/*
 * EXTENDED COPY (LID1, SPC-4 §6.4) and RECEIVE COPY RESULTS (COPY STATUS,
 * OPERATING PARAMETERS), offered only where the extent's insecure_tpc allows
 * it (the opcode table hides them otherwise).
 *
 * Supported: identification CSCD descriptors (0xE4) naming a block device
 * by its NAA designator, and block→block segment descriptors (0x02). A CSCD
 * resolves to the LU the command addresses only: an NAA naming any other LU
 * is "copy target device not reachable". The whole parameter list is checked
 * before the first block moves; the copy then runs in SCSI_CHUNK_BYTES
 * chunks (read into a pooled buffer, write it out) through volume_submit,
 * backwards when the destination overlaps the source from above.
 *
 * Results of a copy with a held list identifier (LIST ID USAGE 00b) are kept
 * per I_T nexus in a few slots of the LU for RECEIVE COPY RESULTS; commands
 * that fail are not kept (nothing was started under that list identifier).
 */
#include <errno.h>
#include <string.h>

#include "core/bufpool.h"
#include "core/log.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"

#define HDR_LEN 16u
#define CSCD_LEN 32u
#define SEG_B2B_LEN 28u
#define SK_COPY_ABORTED 0x0a

/* ---- sense ---- */

/* COPY ABORTED; seg_off != 0: sense-key specific segment pointer (SD = 0:
 * the byte offset of the segment descriptor in the parameter list). */
static void copy_aborted(struct scsi_cmd *c, uint8_t asc, uint8_t ascq, unsigned seg_off)
{
    scsi_sense_fill(c, SK_COPY_ABORTED, asc, ascq);
    if (seg_off) {
        c->sense[15] = 0x80;
        be16_store(&c->sense[16], (uint16_t)seg_off);
    }
}

static uint64_t nexus_key(const struct scsi_cmd *c)
{
    return c->nexus ? c->nexus->id : 0;
}

/* ---- parameter list checks ---- */

/* The CSCD at index idx, resolved against the command's LU: true when it
 * names this LU as a block device; else c is failed. */
static bool cscd_resolve(struct scsi_cmd *c, const uint8_t *p, unsigned ncscd, unsigned idx,
                         unsigned seg_off)
{
    const struct scsi_lu *lu = c->lu;
    if (idx >= ncscd) {
        copy_aborted(c, 0x0d, 0x02, seg_off); /* COPY TARGET DEVICE NOT REACHABLE */
        return false;
    }
    const uint8_t *d = p + HDR_LEN + idx * CSCD_LEN;
    uint8_t code_set = d[4] & 0x0f, assoc = (d[5] >> 4) & 0x03, type = d[5] & 0x0f;
    uint8_t len = d[7];
    if (code_set != 0x01 || assoc != 0 || type != 0x03 || len != lu->naa_len ||
        memcmp(d + 8, lu->naa, len) != 0) {
        copy_aborted(c, 0x0d, 0x02, seg_off);
        return false;
    }
    return true;
}

/* The parameter list header (SPC-4 §6.4.3.1): LIST ID USAGE, and lengths
 * that fit both our limits and the data sent. false: c failed. */
static bool xcopy_check_header(struct scsi_cmd *c, const uint8_t *p, uint32_t plen)
{
    unsigned usage = (p[1] >> 3) & 0x03;
    uint32_t tlen = be16_load(p + 2);
    uint32_t slen = be32_load(p + 8);
    uint32_t ilen = be32_load(p + 12);

    if (usage == 1) {
        scsi_fail_param(c, 1, 4);
        return false;
    }
    if (usage == 3 && p[0] != 0) {
        /* no list identifier: LIST IDENTIFIER must be zero */
        scsi_fail_param(c, 0, 7);
        return false;
    }
    if ((uint64_t)tlen + slen > SCSI_XCOPY_MAX_DESC_LIST ||
        (uint64_t)HDR_LEN + tlen + slen + ilen > plen) {
        scsi_fail_param_len(c);
        return false;
    }
    if (ilen) {
        /* no segment type we support carries inline data; limit is 0 */
        scsi_fail_param(c, 12, -1);
        return false;
    }
    if (tlen % CSCD_LEN) {
        scsi_fail_param_len(c);
        return false;
    }
    if (tlen / CSCD_LEN > SCSI_XCOPY_MAX_CSCDS) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x06); /* TOO MANY TARGET DESCRIPTORS */
        return false;
    }
    return true;
}

/* One CSCD descriptor at byte off: an identification descriptor for a
 * block device of our block size (which LU it names is checked where a
 * segment uses it, cscd_resolve). false: c failed. */
static bool xcopy_check_cscd(struct scsi_cmd *c, const uint8_t *p, unsigned off)
{
    const uint8_t *d = p + off;
    if (d[0] != 0xe4) {
        /* UNSUPPORTED TARGET DESCRIPTOR TYPE CODE */
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x07);
        return false;
    }
    /* Byte 1 bits 7-5 (LU ID TYPE, NUL) are obsolete in SPC-4: ignored. */
    if ((d[1] & 0x1f) != 0) { /* PERIPHERAL DEVICE TYPE: block devices only */
        scsi_fail_param(c, off + 1, 4);
        return false;
    }
    if (d[7] > 20) { /* the designator field holds 20 bytes */
        scsi_fail_param(c, off + 7, -1);
        return false;
    }
    uint32_t dbl = ((uint32_t)d[29] << 16) | ((uint32_t)d[30] << 8) | d[31];
    if (dbl != c->lu->block_size) {
        scsi_fail_param(c, off + 29, -1);
        return false;
    }
    return true;
}

/* Count the segment descriptors in [sbeg, send) before checking any, so
 * that too many is reported as such; each must fit in the list. false: c
 * failed. */
static bool xcopy_count_segments(struct scsi_cmd *c, const uint8_t *p, uint32_t sbeg, uint32_t send)
{
    unsigned n = 0;
    for (uint32_t off = sbeg; off < send;) {
        if (send - off < 4) {
            scsi_fail_param_len(c);
            return false;
        }
        uint32_t dlen = 4u + be16_load(p + off + 2);
        if (dlen > send - off) {
            scsi_fail_param_len(c);
            return false;
        }
        off += dlen;
        n++;
    }
    if (n > SCSI_XCOPY_MAX_SEGS) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x08); /* TOO MANY SEGMENT DESCRIPTORS */
        return false;
    }
    return true;
}

/* One block→block segment descriptor at byte off: both CSCDs name this LU
 * and both block ranges lie inside its blocks; [*dmin, *dend) grows to
 * cover its destination. false: c failed. */
static bool xcopy_check_segment(struct scsi_cmd *c, const uint8_t *p, unsigned ncscd, uint32_t off,
                                uint64_t blocks, uint64_t *dmin, uint64_t *dend)
{
    const uint8_t *d = p + off;
    if (d[0] != 0x02) {
        /* UNSUPPORTED SEGMENT DESCRIPTOR TYPE CODE */
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x09);
        return false;
    }
    if (4u + be16_load(d + 2) != SEG_B2B_LEN) {
        scsi_fail_param(c, off + 2, -1);
        return false;
    }
    if (!cscd_resolve(c, p, ncscd, be16_load(d + 4), off) ||
        !cscd_resolve(c, p, ncscd, be16_load(d + 6), off))
        return false;
    uint64_t nb = be16_load(d + 10), src = be64_load(d + 12), dst = be64_load(d + 20);
    if (src > blocks || nb > blocks - src || dst > blocks || nb > blocks - dst) {
        copy_aborted(c, 0x00, 0x00, off); /* the segment pointer names the culprit */
        return false;
    }
    if (nb) {
        *dmin = MIN(*dmin, dst);
        *dend = MAX(*dend, dst + nb);
    }
    return true;
}

/*
 * Validate the whole parameter list of plen bytes (plen ≥ HDR_LEN): the
 * header, every CSCD descriptor, the segment count, every segment, in that
 * order (the first failure is the one reported). On success [*dmin, *dend)
 * spans every destination block (empty: nothing to write). Every failure
 * fills c's sense.
 */
static bool xcopy_check(struct scsi_cmd *c, const uint8_t *p, uint32_t plen, uint64_t *dmin,
                        uint64_t *dend)
{
    if (!xcopy_check_header(c, p, plen))
        return false;
    uint32_t tlen = be16_load(p + 2);
    uint32_t slen = be32_load(p + 8);
    unsigned ncscd = tlen / CSCD_LEN;
    for (unsigned i = 0; i < ncscd; i++)
        if (!xcopy_check_cscd(c, p, HDR_LEN + i * CSCD_LEN))
            return false;
    uint32_t sbeg = HDR_LEN + tlen, send = sbeg + slen;
    if (!xcopy_count_segments(c, p, sbeg, send))
        return false;
    uint64_t blocks = scsi_lu_blocks(c->lu); /* one size for every segment */
    *dmin = UINT64_MAX;
    *dend = 0;
    /* xcopy_count_segments showed every length fits. */
    for (uint32_t off = sbeg; off < send; off += 4u + be16_load(p + off + 2))
        if (!xcopy_check_segment(c, p, ncscd, off, blocks, dmin, dend))
            return false;
    return true;
}

/* ---- list identifier records (lu->mu) ---- */

static struct scsi_xcopy_rec *rec_find_locked(struct scsi_lu *lu, uint64_t nexus, uint8_t id)
{
    for (unsigned i = 0; i < SCSI_XCOPY_RECS; i++) {
        struct scsi_xcopy_rec *r = &lu->xcopy[i];
        if (r->used && r->nexus_id == nexus && r->list_id == id)
            return r;
    }
    return NULL;
}

/* Claim a record for a copy with a valid list identifier. false: c failed. */
static bool rec_start(struct scsi_cmd *c, uint8_t id, bool held)
{
    struct scsi_lu *lu = c->lu;
    uint64_t nexus = nexus_key(c);
    bool ok = true;
    pthread_mutex_lock(&lu->mu);
    struct scsi_xcopy_rec *r = rec_find_locked(lu, nexus, id);
    if (r && r->running) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x00, 0x16); /* OPERATION IN PROGRESS */
        ok = false;
    } else if (!r) {
        for (unsigned i = 0; i < SCSI_XCOPY_RECS; i++) {
            struct scsi_xcopy_rec *s = &lu->xcopy[i];
            if (!s->used) {
                r = s;
                break;
            }
            if (!s->running && (!r || s->seq < r->seq))
                r = s; /* the oldest finished one */
        }
        if (!r) {
            scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x55, 0x03); /* INSUFFICIENT RESOURCES */
            ok = false;
        }
    }
    if (ok) {
        memset(r, 0, sizeof *r);
        r->used = true;
        r->running = true;
        r->held = held;
        r->list_id = id;
        r->nexus_id = nexus;
        r->seq = ++lu->xcopy_seq;
    }
    pthread_mutex_unlock(&lu->mu);
    return ok;
}

static void rec_finish(struct scsi_cmd *c, const uint8_t *p, bool good)
{
    unsigned usage = (p[1] >> 3) & 0x03;
    if (usage == 3)
        return;
    struct scsi_lu *lu = c->lu;
    pthread_mutex_lock(&lu->mu);
    struct scsi_xcopy_rec *r = rec_find_locked(lu, nexus_key(c), p[0]);
    if (r) {
        if (good && r->held) {
            r->running = false;
            r->status = 0x01; /* operation completed without errors */
            r->segments = (uint16_t)c->priv.step;
            r->blocks = c->priv.pos;
        } else {
            memset(r, 0, sizeof *r);
        }
    }
    pthread_mutex_unlock(&lu->mu);
}

/* ---- the copy ---- */

/* priv use: step = segment index, end = offset of its descriptor, lba =
 * blocks of it done, nblocks = blocks in flight, pos = blocks copied. */

struct seg {
    uint64_t src, dst, n;
    bool backward;
};

static void seg_decode(const struct scsi_cmd *c, struct seg *s)
{
    const uint8_t *d = c->data_out + c->priv.end;
    s->n = be16_load(d + 10);
    s->src = be64_load(d + 12);
    s->dst = be64_load(d + 20);
    /* Overlap with the destination above the source: copy from the end so
     * no source block is overwritten before it is read. */
    s->backward = s->dst > s->src && s->dst < s->src + s->n;
}

/* First block (relative to the segment) of the chunk of k blocks now due. */
static uint64_t chunk_first(const struct seg *s, uint64_t done, uint64_t k)
{
    return s->backward ? s->n - done - k : done;
}

static bool xcopy_read_done(struct scsi_cmd *c);

static bool xcopy_finish(struct scsi_cmd *c, bool good)
{
    rec_finish(c, c->data_out, good);
    scsi_complete(c);
    return false;
}

static bool xcopy_io_failed(struct scsi_cmd *c, bool write)
{
    int err = c->priv.vreq.result;
    scsi_fail_errno(c, err, write);
    if (c->status == SCSI_STATUS_CHECK_CONDITION) {
        /* an error on a copy target ends the copy: COPY ABORTED, keeping
         * what went wrong in the additional sense code */
        uint8_t asc = c->sense[12], ascq = c->sense[13];
        copy_aborted(c, asc, ascq, (unsigned)c->priv.end);
    }
    return xcopy_finish(c, false);
}

/* Prepare the next read, moving on to the next segment as needed; false
 * when everything is copied (c completed). */
static bool xcopy_next_read(struct scsi_cmd *c)
{
    uint32_t tlen = be16_load(c->data_out + 2);
    uint32_t send = HDR_LEN + tlen + be32_load(c->data_out + 8);
    const struct scsi_lu *lu = c->lu;
    for (;;) {
        if (c->priv.end >= send)
            return xcopy_finish(c, true);
        struct seg s;
        seg_decode(c, &s);
        if (c->priv.lba < s.n) {
            uint64_t per = c->priv.tmp_len >> lu->block_shift;
            uint64_t k = s.n - c->priv.lba < per ? s.n - c->priv.lba : per;
            uint64_t first = chunk_first(&s, c->priv.lba, k);
            c->priv.nblocks = (uint32_t)k;
            scsi_vreq_prep(c, VREQ_READ, 0, (s.src + first) << lu->block_shift,
                           k << lu->block_shift, c->priv.tmp);
            c->priv.next = xcopy_read_done;
            return true;
        }
        /* segment done */
        c->priv.end += 4u + be16_load(c->data_out + c->priv.end + 2);
        c->priv.step++;
        c->priv.lba = 0;
    }
}

static bool xcopy_write_done(struct scsi_cmd *c)
{
    if (c->priv.vreq.result < 0)
        return xcopy_io_failed(c, true);
    c->priv.lba += c->priv.nblocks;
    c->priv.pos += c->priv.nblocks;
    return xcopy_next_read(c);
}

static bool xcopy_read_done(struct scsi_cmd *c)
{
    if (c->priv.vreq.result < 0)
        return xcopy_io_failed(c, false);
    const struct scsi_lu *lu = c->lu;
    struct seg s;
    seg_decode(c, &s);
    uint64_t first = chunk_first(&s, c->priv.lba, c->priv.nblocks);
    scsi_vreq_prep(c, VREQ_WRITE, 0, (s.dst + first) << lu->block_shift,
                   (uint64_t)c->priv.nblocks << lu->block_shift, c->priv.tmp);
    c->priv.next = xcopy_write_done;
    return true;
}

void scsi_run_xcopy(struct scsi_cmd *c)
{
    uint32_t plen = be32_load(&c->cdb[10]);
    const uint8_t *p = c->data_out;
    uint64_t dmin, dend;

    c->xfer_want = plen;
    if (plen == 0) { /* no copy: not an error (SPC-4) */
        scsi_complete(c);
        return;
    }
    if (plen < HDR_LEN || !p || c->data_out_len < plen) {
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    if (!xcopy_check(c, p, plen, &dmin, &dend)) {
        scsi_complete(c);
        return;
    }
    /* The writes take the LBA range lock shared, like WRITE, so a COMPARE
     * AND WRITE stays atomic against them. Not granted now: this handler
     * runs again (and re-checks the list) once it is. */
    if (dend > dmin && !scsi_range_lock(c, dmin, dend - dmin, false))
        return;
    unsigned usage = (p[1] >> 3) & 0x03;
    if (usage != 3 && !rec_start(c, p[0], usage == 0)) {
        scsi_complete(c);
        return;
    }
    c->priv.tmp = bufpool_get(SCSI_CHUNK_BYTES);
    if (!c->priv.tmp) {
        log_error("scsi: %s: no buffer for EXTENDED COPY", volume_name(c->lu->vol));
        scsi_fail_errno(c, -ENOMEM, false);
        xcopy_finish(c, false);
        return;
    }
    c->priv.tmp_len = SCSI_CHUNK_BYTES;
    c->priv.end = HDR_LEN + be16_load(p + 2);
    c->priv.step = 0;
    c->priv.lba = 0;
    c->priv.pos = 0;
    if (xcopy_next_read(c))
        scsi_io_submit(c, c->priv.next);
}

/* ---- RECEIVE COPY RESULTS ---- */

static void put_transfer_count(uint8_t *b, uint64_t bytes)
{
    /* TRANSFER COUNT UNITS: 00h bytes, F1h KiB, F2h MiB, F3h GiB, F4h TiB */
    uint8_t units = 0;
    while (bytes > UINT32_MAX && units < 4) {
        bytes >>= 10;
        units++;
    }
    b[0] = units ? (uint8_t)(0xf0 + units) : 0;
    be32_store(b + 1, (uint32_t)MIN(bytes, (uint64_t)UINT32_MAX));
}

static void copy_status(struct scsi_cmd *c, uint32_t alloc)
{
    struct scsi_lu *lu = c->lu;
    uint8_t b[12];
    bool found = false;
    memset(b, 0, sizeof b);
    pthread_mutex_lock(&lu->mu);
    struct scsi_xcopy_rec *r = rec_find_locked(lu, nexus_key(c), c->cdb[2]);
    if (r && r->held) {
        found = true;
        be32_store(b, 8);
        b[4] = r->running ? 0x00 : r->status; /* HDD = 0: nothing held */
        be16_store(b + 5, r->segments);
        put_transfer_count(b + 7, r->blocks << lu->block_shift);
    }
    pthread_mutex_unlock(&lu->mu);
    if (!found) {
        /* no copy with that list identifier on this I_T nexus */
        scsi_fail_cdb(c, 2, -1);
        scsi_complete(c);
        return;
    }
    scsi_complete_data(c, b, sizeof b, alloc);
}

static void operating_parameters(struct scsi_cmd *c, uint32_t alloc)
{
    const struct scsi_lu *lu = c->lu;
    uint8_t b[46];
    memset(b, 0, sizeof b);
    be32_store(b, sizeof b - 4);
    b[4] = 0x01; /* SNLID: LIST ID USAGE 11b (no list identifier) supported */
    be16_store(b + 8, SCSI_XCOPY_MAX_CSCDS);
    be16_store(b + 10, SCSI_XCOPY_MAX_SEGS);
    be32_store(b + 12, SCSI_XCOPY_MAX_DESC_LIST);
    be32_store(b + 16, SCSI_XCOPY_MAX_SEG_BLOCKS << lu->block_shift); /* MAXIMUM SEGMENT LENGTH */
    be32_store(b + 20, 0);               /* MAXIMUM INLINE DATA LENGTH */
    be32_store(b + 24, 0);               /* HELD DATA LIMIT */
    be32_store(b + 28, 0);               /* MAXIMUM STREAM DEVICE TRANSFER SIZE */
    be16_store(b + 34, SCSI_XCOPY_RECS); /* TOTAL CONCURRENT COPIES */
    b[36] = SCSI_XCOPY_RECS;             /* MAXIMUM CONCURRENT COPIES */
    b[37] = (uint8_t)lu->block_shift;    /* DATA SEGMENT GRANULARITY (log2 bytes) */
    b[38] = 0;                           /* INLINE DATA GRANULARITY */
    b[39] = 0;                           /* HELD DATA GRANULARITY */
    b[43] = 2;                           /* IMPLEMENTED DESCRIPTOR LIST LENGTH */
    b[44] = 0x02;                        /* block → block segment */
    b[45] = 0xe4;                        /* identification CSCD */
    scsi_complete_data(c, b, sizeof b, alloc);
}

void scsi_run_receive_copy_results(struct scsi_cmd *c)
{
    uint32_t alloc = be32_load(&c->cdb[10]);
    if ((c->cdb[1] & 0x1f) == 0x03)
        operating_parameters(c, alloc);
    else
        copy_status(c, alloc);
}
