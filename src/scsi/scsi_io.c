/*
 * The medium commands (SBC-3): READ/WRITE 6/10/12/16, WRITE AND VERIFY,
 * VERIFY, WRITE SAME, UNMAP, COMPARE AND WRITE, SYNCHRONIZE CACHE,
 * PRE-FETCH, GET LBA STATUS. All I/O goes through volume_submit; multi-step
 * commands are small state machines driven by scsi_io_submit.
 */
#include <errno.h>
#include <string.h>

#include "core/bufpool.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"

enum { PH_IDLE = 0, PH_SUBMITTING = 1, PH_ASYNC = 2, PH_DONE = 3 };

/* ---- the async driver ---- */

static void io_done(struct vreq *r)
{
    struct scsi_cmd *c = r->arg;
    /* Completed inside volume_submit: let the submitter's loop continue
     * (no recursion however many steps complete inline). */
    if (atomic_exchange(&c->priv.phase, PH_DONE) == PH_SUBMITTING)
        return;
    if (c->priv.next(c))
        scsi_io_submit(c, c->priv.next);
}

void scsi_vreq_prep(struct scsi_cmd *c, enum vreq_op op, unsigned flags, uint64_t off, uint64_t len,
                    void *buf)
{
    struct vreq *r = &c->priv.vreq;
    memset(r, 0, sizeof *r);
    r->op = op;
    r->flags = flags;
    r->offset = off;
    r->length = len;
    r->buf = buf;
}

void scsi_io_submit(struct scsi_cmd *c, bool (*next)(struct scsi_cmd *c))
{
    /* A step may replace c->priv.next before returning true. */
    c->priv.next = next;
    for (;;) {
        struct vreq *r = &c->priv.vreq;
        r->owner = c->owner;
        r->done = io_done;
        r->arg = c;
        atomic_store(&c->priv.phase, PH_SUBMITTING);
        volume_submit(c->lu->vol, r);
        if (atomic_exchange(&c->priv.phase, PH_ASYNC) != PH_DONE)
            return; /* completes later in io_done */
        if (!c->priv.next(c))
            return;
    }
}

/* ---- shared checks ---- */

static bool fail(struct scsi_cmd *c)
{
    scsi_complete(c);
    return false;
}

/* The volume request of a step failed: the command ends with the sense for
 * its error (write: a write error, else a read error); true when it did. */
static bool step_failed(struct scsi_cmd *c, bool write)
{
    int r = c->priv.vreq.result;
    if (r >= 0)
        return false;
    scsi_fail_errno(c, r, write);
    scsi_complete(c);
    return true;
}

/* The last step of a command that writes (WRITE, COMPARE AND WRITE, ORWRITE,
 * SYNCHRONIZE CACHE): GOOD or the write error. */
static bool write_done(struct scsi_cmd *c)
{
    int r = c->priv.vreq.result;
    if (r < 0)
        scsi_fail_errno(c, r, true);
    return fail(c);
}

/* LBA range: lba + n must not pass the capacity (n == 0: lba ≤ capacity). */
static bool range_ok(struct scsi_cmd *c, uint64_t lba, uint64_t n)
{
    uint64_t blocks = scsi_lu_blocks(c->lu);
    if (lba > blocks || n > blocks - lba) {
        scsi_fail_lba_range(c);
        scsi_complete(c);
        return false;
    }
    return true;
}

/* Byte offset of the transfer length field, for field pointers. */
static unsigned len_field(uint8_t opcode)
{
    switch (opcode) {
    case 0x08:
    case 0x0a:
        return 4;
    case 0xa8:
    case 0xaa:
    case 0xae:
    case 0xaf:
        return 6;
    case 0x89:
        return 13;
    default:
        return opcode >= 0x80 ? 10 : 7;
    }
}

static bool xfer_ok(struct scsi_cmd *c, uint32_t n)
{
    if ((uint64_t)n << c->lu->block_shift > SCSI_MAX_XFER_BYTES) {
        scsi_fail_cdb(c, len_field(c->cdb[0]), -1);
        scsi_complete(c);
        return false;
    }
    return true;
}

static bool get_tmp(struct scsi_cmd *c, size_t len)
{
    if (c->priv.tmp && c->priv.tmp_len >= len)
        return true;
    if (c->priv.tmp)
        bufpool_put(c->priv.tmp, c->priv.tmp_len);
    c->priv.tmp = bufpool_get(len);
    c->priv.tmp_len = c->priv.tmp ? len : 0;
    if (!c->priv.tmp) {
        scsi_fail_errno(c, -ENOMEM, false);
        scsi_complete(c);
        return false;
    }
    return true;
}

static unsigned fua_flag(const struct scsi_cmd *c)
{
    return (c->cdb[0] != 0x0a && (c->cdb[1] & 0x08)) ? VREQ_FUA : 0;
}

/* The common start of WRITE, WRITE AND VERIFY and ORWRITE: the LBA range
 * and transfer length checked, and the bytes to write: what the CDB asks
 * for but never more than the initiator sent (iSCSI residual overflow), in
 * whole blocks. False when the command has completed (an error, or nothing
 * to write). */
static bool write_range(struct scsi_cmd *c, uint64_t *lba, uint32_t *n, uint32_t *take)
{
    struct scsi_lu *lu = c->lu;
    scsi_cdb_lba_len(c->cdb, lba, n);
    if (!xfer_ok(c, *n) || !range_ok(c, *lba, *n))
        return false;
    uint32_t bytes = *n << lu->block_shift;
    c->xfer_want = bytes;
    *take = (bytes < c->data_out_len ? bytes : c->data_out_len) & ~(lu->block_size - 1);
    if (*take == 0) {
        scsi_complete(c);
        return false;
    }
    return true;
}

static bool first_diff(const uint8_t *a, const uint8_t *b, size_t n, size_t *at)
{
    if (memcmp(a, b, n) == 0)
        return false;
    size_t i = 0;
    while (a[i] == b[i])
        i++;
    *at = i;
    return true;
}

/* ---- READ ---- */

static bool read_done(struct scsi_cmd *c)
{
    if (step_failed(c, false))
        return false;
    if (c->priv.tmp) /* a partial last block: copy what the buffer holds */
        memcpy(c->data_in, c->priv.tmp, c->data_in_len);
    return fail(c);
}

void scsi_run_read(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba;
    uint32_t n;
    scsi_cdb_lba_len(c->cdb, &lba, &n);
    if (!xfer_ok(c, n) || !range_ok(c, lba, n))
        return;
    uint32_t bytes = n << lu->block_shift;
    c->xfer_want = bytes;
    if (n == 0) {
        scsi_complete(c);
        return;
    }
    uint32_t take = bytes < c->data_in_cap ? bytes : c->data_in_cap;
    c->data_in_len = take;
    if (take == 0) {
        scsi_complete(c);
        return;
    }
    uint64_t off = lba << lu->block_shift;
    if (take % lu->block_size) {
        /* The initiator's buffer ends inside a block: read whole blocks. */
        uint32_t whole = (take + lu->block_size - 1) & ~(lu->block_size - 1);
        if (!get_tmp(c, whole))
            return;
        scsi_vreq_prep(c, VREQ_READ, 0, off, whole, c->priv.tmp);
    } else {
        scsi_vreq_prep(c, VREQ_READ, 0, off, take, c->data_in);
    }
    scsi_io_submit(c, read_done);
}

/* ---- WRITE ---- */

void scsi_run_write(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba;
    uint32_t n, take;
    if (!write_range(c, &lba, &n, &take))
        return;
    if (!scsi_range_lock(c, lba, n, false))
        return; /* resumed by the lock */
    scsi_vreq_prep(c, VREQ_WRITE, fua_flag(c), lba << lu->block_shift, take, (void *)c->data_out);
    scsi_io_submit(c, write_done);
}

/* ---- WRITE AND VERIFY: write, read back, compare ---- */

static bool wv_compare(struct scsi_cmd *c)
{
    if (step_failed(c, false))
        return false;
    size_t at;
    if (first_diff(c->priv.tmp, c->data_out, c->priv.vreq.length, &at))
        scsi_fail_miscompare(c, (uint32_t)at);
    return fail(c);
}

static bool wv_written(struct scsi_cmd *c)
{
    if (step_failed(c, true))
        return false;
    uint64_t off = c->priv.vreq.offset, len = c->priv.vreq.length;
    if (!get_tmp(c, len))
        return false;
    scsi_vreq_prep(c, VREQ_READ, 0, off, len, c->priv.tmp);
    c->priv.next = wv_compare;
    return true;
}

void scsi_run_write_verify(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba;
    uint32_t n, take;
    if ((c->cdb[1] >> 1) & 2) { /* BYTCHK 2/3 are reserved here */
        scsi_fail_cdb(c, 1, 2);
        scsi_complete(c);
        return;
    }
    if (!write_range(c, &lba, &n, &take))
        return;
    if (!scsi_range_lock(c, lba, n, false))
        return;
    /* The write is made durable before it is verified (FUA). */
    scsi_vreq_prep(c, VREQ_WRITE, VREQ_FUA, lba << lu->block_shift, take, (void *)c->data_out);
    scsi_io_submit(c, wv_written);
}

/* ---- VERIFY ---- */

static void verify_prep_chunk(struct scsi_cmd *c)
{
    uint64_t left = c->priv.end - c->priv.pos;
    uint64_t chunk = left < c->priv.tmp_len ? left : c->priv.tmp_len;
    scsi_vreq_prep(c, VREQ_READ, 0, (c->priv.lba << c->lu->block_shift) + c->priv.pos, chunk,
                   c->priv.tmp);
}

static bool verify_step(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    if (step_failed(c, false))
        return false;
    unsigned bytchk = c->priv.step;
    uint64_t chunk = c->priv.vreq.length;
    size_t at;
    if (bytchk == 1) {
        if (first_diff(c->priv.tmp, c->data_out + c->priv.pos, chunk, &at)) {
            scsi_fail_miscompare(c, (uint32_t)(c->priv.pos + at));
            return fail(c);
        }
    } else if (bytchk == 3) {
        for (uint64_t k = 0; k < chunk; k += lu->block_size) {
            if (first_diff(c->priv.tmp + k, c->data_out, lu->block_size, &at)) {
                scsi_fail_miscompare(c, (uint32_t)(c->priv.pos + k + at));
                return fail(c);
            }
        }
    }
    c->priv.pos += chunk;
    if (c->priv.pos >= c->priv.end)
        return fail(c); /* GOOD */
    verify_prep_chunk(c);
    return true;
}

void scsi_run_verify(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    unsigned bytchk = (c->cdb[1] >> 1) & 3;
    uint64_t lba;
    uint32_t n;
    if (bytchk == 2) {
        scsi_fail_cdb(c, 1, 2);
        scsi_complete(c);
        return;
    }
    scsi_cdb_lba_len(c->cdb, &lba, &n);
    if ((bytchk == 1 && !xfer_ok(c, n)) || !range_ok(c, lba, n))
        return;
    uint64_t bytes = (uint64_t)n << lu->block_shift;
    c->xfer_want = bytchk == 0 ? 0 : bytchk == 3 ? lu->block_size : (uint32_t)bytes;
    if (n == 0) {
        scsi_complete(c);
        return;
    }
    if ((bytchk == 1 && c->data_out_len < bytes) ||
        (bytchk == 3 && c->data_out_len < lu->block_size)) {
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    c->priv.step = bytchk;
    c->priv.lba = lba;
    c->priv.pos = 0;
    c->priv.end = bytes;
    if (!get_tmp(c, bytes < SCSI_CHUNK_BYTES ? bytes : SCSI_CHUNK_BYTES))
        return;
    verify_prep_chunk(c);
    scsi_io_submit(c, verify_step);
}

/* ---- WRITE SAME ---- */

static bool ws_pattern_step(struct scsi_cmd *c)
{
    if (step_failed(c, true))
        return false;
    c->priv.pos += c->priv.vreq.length;
    if (c->priv.pos >= c->priv.end)
        return fail(c);
    uint64_t left = c->priv.end - c->priv.pos;
    uint64_t chunk = left < c->priv.tmp_len ? left : c->priv.tmp_len;
    scsi_vreq_prep(c, VREQ_WRITE, 0, (c->priv.lba << c->lu->block_shift) + c->priv.pos, chunk,
                   c->priv.tmp);
    return true;
}

/* Write the block in tmp (already replicated) over the range, chunk by chunk. */
static bool ws_start_pattern(struct scsi_cmd *c)
{
    uint64_t chunk = c->priv.end < c->priv.tmp_len ? c->priv.end : c->priv.tmp_len;
    c->priv.pos = 0;
    scsi_vreq_prep(c, VREQ_WRITE, 0, c->priv.lba << c->lu->block_shift, chunk, c->priv.tmp);
    c->priv.next = ws_pattern_step;
    return true;
}

static bool fill_pattern(struct scsi_cmd *c, const uint8_t *block)
{
    uint32_t bs = c->lu->block_size;
    size_t len = c->priv.end < SCSI_CHUNK_BYTES ? c->priv.end : SCSI_CHUNK_BYTES;
    if (!get_tmp(c, len))
        return false;
    for (size_t o = 0; o < len; o += bs) {
        if (block)
            memcpy(c->priv.tmp + o, block, bs);
        else
            memset(c->priv.tmp + o, 0, bs);
    }
    return true;
}

static bool ws_zero_done(struct scsi_cmd *c)
{
    int r = c->priv.vreq.result;
    if (r == -ENOTSUP || r == -EOPNOTSUPP) {
        /* The backend cannot zero efficiently: write zeros. */
        if (!fill_pattern(c, NULL))
            return false;
        return ws_start_pattern(c);
    }
    if (r < 0)
        scsi_fail_errno(c, r, true);
    return fail(c);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

void scsi_run_write_same(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    bool ws16 = c->cdb[0] == 0x93;
    bool unmap = c->cdb[1] & 0x08;
    bool ndob = ws16 && (c->cdb[1] & 0x01);
    uint64_t lba;
    uint32_t n;
    scsi_cdb_lba_len(c->cdb, &lba, &n);
    uint64_t blocks = scsi_lu_blocks(lu);

    if (unmap && !(volume_caps(lu->vol) & BDEV_CAN_TRIM)) {
        scsi_fail_cdb(c, 1, 3);
        scsi_complete(c);
        return;
    }
    if (!range_ok(c, lba, n))
        return;
    uint64_t count = n ? n : blocks - lba; /* WSNZ = 0: 0 means "to the end" */
    c->xfer_want = ndob ? 0 : lu->block_size;
    if (!ndob && c->data_out_len != lu->block_size) {
        /* Exactly one block of data-out, no more, no less. */
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    if (count == 0) {
        scsi_complete(c);
        return;
    }
    if (!scsi_range_lock(c, lba, count, false))
        return;
    c->priv.lba = lba;
    c->priv.end = count << lu->block_shift;
    /* UNMAP=1 on an LU whose unmapped blocks read as zeros: deallocate,
     * whatever the data-out holds (what initiators and iscsi-test-cu expect
     * of LBPRZ=1); otherwise zeros are written efficiently when the block is
     * all zeros, and the pattern is written as data. */
    unsigned caps = volume_caps(lu->vol);
    bool deallocate = unmap && (caps & BDEV_TRIM_ZEROES);
    if (ndob || deallocate || all_zero(c->data_out, lu->block_size)) {
        scsi_vreq_prep(c, VREQ_WRITE_ZEROES, unmap ? VREQ_MAY_TRIM : 0, lba << lu->block_shift,
                       c->priv.end, NULL);
        scsi_io_submit(c, ws_zero_done);
        return;
    }
    if (!fill_pattern(c, c->data_out))
        return;
    ws_start_pattern(c);
    scsi_io_submit(c, ws_pattern_step);
}

/* ---- UNMAP ---- */

static bool unmap_prep_next(struct scsi_cmd *c)
{
    const uint8_t *d = c->data_out + 8;
    while (c->priv.pos < c->priv.end) {
        const uint8_t *desc = d + c->priv.pos * 16;
        c->priv.pos++;
        uint64_t lba = be64_load(desc);
        uint32_t cnt = be32_load(desc + 8);
        if (!cnt)
            continue;
        scsi_vreq_prep(c, VREQ_TRIM, 0, lba << c->lu->block_shift,
                       (uint64_t)cnt << c->lu->block_shift, NULL);
        return true;
    }
    return false;
}

static bool unmap_step(struct scsi_cmd *c)
{
    int r = c->priv.vreq.result;
    if (r < 0 && r != -ENOTSUP && r != -EOPNOTSUPP) {
        scsi_fail_errno(c, r, true);
        return fail(c);
    }
    if (unmap_prep_next(c))
        return true;
    return fail(c);
}

void scsi_run_unmap(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint32_t plen = be16_load(&c->cdb[7]);
    c->xfer_want = plen;
    if (plen == 0) {
        scsi_complete(c);
        return;
    }
    if (plen < 8 || c->data_out_len < plen) {
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    const uint8_t *d = c->data_out;
    uint32_t udl = be16_load(d);
    uint32_t bddl = be16_load(d + 2);
    if (udl && udl + 2 > plen) {
        scsi_fail_param(c, 0, -1);
        scsi_complete(c);
        return;
    }
    if (bddl > plen - 8) {
        scsi_fail_param(c, 2, -1);
        scsi_complete(c);
        return;
    }
    uint32_t ndesc = bddl / 16;
    if (ndesc > SCSI_MAX_UNMAP_DESCS) {
        scsi_fail_param(c, 2, -1);
        scsi_complete(c);
        return;
    }
    /* Check every descriptor before unmapping anything. */
    uint64_t blocks = scsi_lu_blocks(lu);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t i = 0; i < ndesc; i++) {
        const uint8_t *desc = d + 8 + i * 16;
        uint64_t lba = be64_load(desc);
        uint32_t cnt = be32_load(desc + 8);
        /* Any 32-bit count is within MAXIMUM UNMAP LBA COUNT (0xffffffff). */
        if (lba > blocks || cnt > blocks - lba) {
            scsi_fail_lba_range(c);
            scsi_complete(c);
            return;
        }
        if (cnt) {
            lo = MIN(lo, lba);
            hi = MAX(hi, lba + cnt);
        }
    }
    if (lo == UINT64_MAX) {
        scsi_complete(c);
        return;
    }
    if (!scsi_range_lock(c, lo, hi - lo, false))
        return;
    c->priv.pos = 0;
    c->priv.end = ndesc;
    if (unmap_prep_next(c))
        scsi_io_submit(c, unmap_step);
    else
        scsi_complete(c);
}

/* ---- COMPARE AND WRITE ---- */

static bool caw_compare(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    if (step_failed(c, false))
        return false;
    size_t len = (size_t)c->priv.nblocks << lu->block_shift, at;
    if (first_diff(c->priv.tmp, c->data_out, len, &at)) {
        scsi_fail_miscompare(c, (uint32_t)at);
        return fail(c);
    }
    scsi_vreq_prep(c, VREQ_WRITE, fua_flag(c), c->priv.lba << lu->block_shift, len,
                   (void *)(c->data_out + len));
    c->priv.next = write_done;
    return true;
}

/* The backend's own compare-and-write (an RBD LU: one atomic RADOS
 * operation, so atomic across gateways too) finished. */
static bool caw_atomic_done(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    struct vreq *r = &c->priv.vreq;
    size_t len = (size_t)c->priv.nblocks << lu->block_shift;

    if (r->result == -EILSEQ) {
        scsi_fail_miscompare(c, (uint32_t)r->miscompare);
        return fail(c);
    }
    if (r->result != -ENOTSUP)
        return write_done(c);
    /* Not atomic in the backend for this range (an RBD object boundary):
     * read, compare and write under our exclusive range lock. */
    if (!get_tmp(c, len))
        return false;
    scsi_vreq_prep(c, VREQ_READ, 0, c->priv.lba << lu->block_shift, len, c->priv.tmp);
    c->priv.next = caw_compare;
    return true;
}

void scsi_run_caw(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba;
    uint32_t n;
    scsi_cdb_lba_len(c->cdb, &lba, &n);
    if (n > SCSI_MAX_CAW_BLOCKS) {
        scsi_fail_cdb(c, 13, -1);
        scsi_complete(c);
        return;
    }
    if (!range_ok(c, lba, n))
        return;
    size_t len = (size_t)n << lu->block_shift;
    c->xfer_want = (uint32_t)(2 * len);
    if (c->data_out_len != 2 * len) {
        /* verify data + write data, exactly; a mismatch means the NUMBER
         * OF LOGICAL BLOCKS field does not describe what was sent */
        scsi_fail_cdb(c, 13, -1);
        scsi_complete(c);
        return;
    }
    if (n == 0) {
        scsi_complete(c);
        return;
    }
    if (!scsi_range_lock(c, lba, n, true))
        return;
    c->priv.lba = lba;
    c->priv.nblocks = n;
    if (volume_caps(lu->vol) & BDEV_CAN_COMPARE_WRITE) {
        scsi_vreq_prep(c, VREQ_COMPARE_WRITE, fua_flag(c), lba << lu->block_shift, len,
                       (void *)c->data_out);
        scsi_io_submit(c, caw_atomic_done);
        return;
    }
    if (!get_tmp(c, len))
        return;
    scsi_vreq_prep(c, VREQ_READ, 0, lba << lu->block_shift, len, c->priv.tmp);
    scsi_io_submit(c, caw_compare);
}

/* ---- ORWRITE: read, OR the data-out in, write (exclusive range lock) ---- */

static bool orwrite_merge(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    if (step_failed(c, false))
        return false;
    size_t len = (size_t)c->priv.nblocks << lu->block_shift;
    for (size_t i = 0; i < len; i++)
        c->priv.tmp[i] |= c->data_out[i];
    scsi_vreq_prep(c, VREQ_WRITE, fua_flag(c), c->priv.lba << lu->block_shift, len, c->priv.tmp);
    c->priv.next = write_done;
    return true;
}

void scsi_run_orwrite(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba;
    uint32_t n, take;
    /* Only whole blocks the initiator actually sent are merged. */
    if (!write_range(c, &lba, &n, &take))
        return;
    if (!scsi_range_lock(c, lba, n, true))
        return;
    c->priv.lba = lba;
    c->priv.nblocks = take >> lu->block_shift;
    if (!get_tmp(c, take))
        return;
    scsi_vreq_prep(c, VREQ_READ, 0, lba << lu->block_shift, take, c->priv.tmp);
    scsi_io_submit(c, orwrite_merge);
}

/* ---- SYNCHRONIZE CACHE / PRE-FETCH ---- */

void scsi_run_sync_cache(struct scsi_cmd *c)
{
    uint64_t lba;
    uint32_t n;
    scsi_cdb_lba_len(c->cdb, &lba, &n);
    if (!range_ok(c, lba, n))
        return;
    /* The whole volume is flushed whatever the range: a superset is correct,
     * and group commit makes it cheap. IMMED is honoured by simply being
     * exact: status is returned when the flush is done. */
    scsi_vreq_prep(c, VREQ_FLUSH, 0, 0, 0, NULL);
    scsi_io_submit(c, write_done);
}

static bool prefetch_done(struct scsi_cmd *c)
{
    int r = c->priv.vreq.result;
    if (r < 0 && r != -ENOTSUP && r != -EOPNOTSUPP)
        scsi_fail_errno(c, r, false);
    return fail(c);
}

void scsi_run_prefetch(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba;
    uint32_t n;
    scsi_cdb_lba_len(c->cdb, &lba, &n);
    if (!range_ok(c, lba, n))
        return;
    uint64_t count = n ? n : scsi_lu_blocks(lu) - lba;
    if (count == 0 || !(volume_caps(lu->vol) & BDEV_CAN_CACHE)) {
        scsi_complete(c);
        return;
    }
    scsi_vreq_prep(c, VREQ_CACHE, 0, lba << lu->block_shift, count << lu->block_shift, NULL);
    scsi_io_submit(c, prefetch_done);
}

/* ---- GET LBA STATUS ---- */

#define LBA_STATUS_MAX_DESCS 256u
#define LBA_STATUS_SPAN (1ull << 30) /* bytes examined per command */

static void lba_status_reply(struct scsi_cmd *c, struct extent *ext, size_t next)
{
    struct scsi_lu *lu = c->lu;
    uint32_t alloc = be32_load(&c->cdb[10]);
    uint8_t buf[8 + LBA_STATUS_MAX_DESCS * 16];
    size_t nd = 0;
    uint8_t *d = NULL;

    for (size_t i = 0; i < next && nd < LBA_STATUS_MAX_DESCS; i++) {
        uint64_t start = ext[i].offset >> lu->block_shift;
        uint64_t end = (ext[i].offset + ext[i].length + lu->block_size - 1) >> lu->block_shift;
        /* Backends may report extents aligned to their own granularity:
         * clip to the request, and the first descriptor starts exactly at
         * the requested LBA (SBC-3 §5.7). */
        if (start < c->priv.lba || nd == 0)
            start = c->priv.lba;
        if (end <= start)
            continue;
        uint8_t status = ext[i].type == EXTENT_HOLE ? 1 : 0; /* deallocated : mapped */
        if (d && d[12] == status && be64_load(d) + be32_load(d + 8) == start &&
            be32_load(d + 8) + (end - start) <= 0xffffffffull) {
            be32_store(d + 8, (uint32_t)(be32_load(d + 8) + (end - start)));
            continue;
        }
        d = buf + 8 + nd * 16;
        memset(d, 0, 16);
        be64_store(d, start);
        uint64_t cnt = end - start;
        be32_store(d + 8, cnt > 0xffffffffull ? 0xffffffffu : (uint32_t)cnt);
        d[12] = status;
        nd++;
    }
    memset(buf, 0, 8);
    be32_store(buf, (uint32_t)(4 + nd * 16));
    scsi_complete_data(c, buf, (uint32_t)(8 + nd * 16), alloc);
}

static bool lba_status_done(struct scsi_cmd *c)
{
    struct vreq *r = &c->priv.vreq;
    if (step_failed(c, false))
        return false;
    lba_status_reply(c, r->extents, r->extents_count);
    return false;
}

void scsi_run_get_lba_status(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint64_t lba = be64_load(&c->cdb[2]);
    uint64_t blocks = scsi_lu_blocks(lu);
    if (lba >= blocks) {
        scsi_fail_lba_range(c);
        scsi_complete(c);
        return;
    }
    c->priv.lba = lba;
    uint64_t off = lba << lu->block_shift;
    uint64_t len = volume_size(lu->vol) - off;
    if (len > LBA_STATUS_SPAN)
        len = LBA_STATUS_SPAN;
    if (!(volume_caps(lu->vol) & BDEV_CAN_EXTENTS)) {
        struct extent all = {off, len, EXTENT_DATA};
        lba_status_reply(c, &all, 1);
        return;
    }
    if (!get_tmp(c, LBA_STATUS_MAX_DESCS * sizeof(struct extent)))
        return;
    scsi_vreq_prep(c, VREQ_EXTENTS, 0, off, len, NULL);
    c->priv.vreq.extents = (struct extent *)(void *)c->priv.tmp;
    c->priv.vreq.extents_max = LBA_STATUS_MAX_DESCS;
    scsi_io_submit(c, lba_status_done);
}
