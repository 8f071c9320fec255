/*
 * NVM command set I/O commands over the namespace's volume
 * (nvme_internal.h): Read, Write (FUA: durable before completion), Flush
 * (the volume's group commit: every write completed before it is
 * durable), Write Zeroes (DEAC: may deallocate), Dataset Management
 * (deallocate → trim), Compare. Every command is checked in one place
 * (io_check) before it touches the volume: namespace, write protection,
 * LBA range, transfer size against MDTS and the host's SGL, and the
 * namespace's reservation (nvme_resv.c, which also runs the reservation
 * commands).
 */
#include <errno.h>
#include <string.h>

#include "core/bufpool.h"
#include "core/iostats.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"

static void done(struct nvme_cmd *cmd, uint16_t status)
{
    cmd->status = status;
    nvme_cmd_complete(cmd);
}

static uint16_t errno_status(int err, bool write)
{
    switch (err) {
    case 0:
        return NVME_SC_SUCCESS;
    case -EPERM:
    case -EROFS:
        return NVME_SC_NS_WRITE_PROTECTED;
    case -EINVAL:
        return NVME_SC_LBA_RANGE;
    case -ENOSPC:
    case -EDQUOT:
        return NVME_SC_CAP_EXCEEDED;
    case -ENOTSUP:
        return NVME_SC_INVALID_FIELD;
    case -EIO:
        return write ? NVME_SC_WRITE_FAULT : NVME_SC_READ_ERROR;
    case -ESHUTDOWN: /* this member is fenced (gateway group): another path may serve it */
        return NVME_SC_PATH_INTERNAL;
    default:
        return NVME_SC_INTERNAL;
    }
}

static uint8_t opc(const struct nvme_cmd *cmd)
{
    return cmd->sqe[NVME_SQE_OPC];
}

void nvme_io_stats_done(struct nvme_cmd *cmd)
{
    enum iostats_op op;
    uint64_t bytes = cmd->vr.length;
    switch (opc(cmd)) {
    case NVME_IO_READ:
        op = IOSTATS_READ;
        break;
    case NVME_IO_WRITE:
        op = IOSTATS_WRITE;
        break;
    case NVME_IO_FLUSH:
        op = IOSTATS_FLUSH;
        bytes = 0;
        break;
    case NVME_IO_DSM: /* its ranges are in its data, as SCSI UNMAP's */
        op = IOSTATS_UNMAP;
        bytes = 0;
        break;
    default:
        op = IOSTATS_OTHER;
        bytes = 0;
    }
    iostats_done(cmd->mslot, IOSTATS_NVME, op, bytes, cmd->status != NVME_SC_SUCCESS, cmd->mt0);
    cmd->mt0 = 0;
}

static void vr_done(struct vreq *vr)
{
    struct nvme_cmd *cmd = vr->arg;
    uint8_t op = opc(cmd);
    bool write = op != NVME_IO_READ && op != NVME_IO_COMPARE;
    if (vr->result < 0)
        log_debug("%s: nvme: queue %u command %u (opcode 0x%02x) failed: %s", cmd->q->c->peer,
                  cmd->q->qid, cmd->cid, op, strerror(-vr->result));
    cmd->status = errno_status(vr->result, write);
    if (op == NVME_IO_READ && vr->result == 0)
        cmd->out_len = (uint32_t)vr->length;
    nvme_cmd_complete(cmd);
}

static void submit(struct nvme_cmd *cmd, enum vreq_op op, unsigned flags, uint64_t off,
                   uint64_t len, void *buf, void (*fn)(struct vreq *))
{
    struct vreq *vr = &cmd->vr;
    memset(vr, 0, sizeof(*vr));
    vr->op = op;
    vr->flags = flags;
    vr->offset = off;
    vr->length = len;
    vr->buf = buf;
    vr->owner = cmd->q->c->reactor;
    vr->done = fn;
    vr->arg = cmd;
    cmd->state = CMD_EXEC;
    volume_submit(cmd->vol, vr);
}

static void compare_done(struct vreq *vr)
{
    struct nvme_cmd *cmd = vr->arg;
    uint16_t st = errno_status(vr->result, false);
    if (st == NVME_SC_SUCCESS && memcmp(vr->buf, cmd->buf, vr->length) != 0)
        st = NVME_SC_COMPARE_FAILED;
    bufpool_put(vr->buf, vr->length);
    done(cmd, st);
}

/* Deallocate the DSM ranges one after the other. */
static void dsm_next(struct vreq *vr)
{
    struct nvme_cmd *cmd = vr->arg;
    if (vr->result < 0)
        return done(cmd, errno_status(vr->result, true));
    while (cmd->dsm_next < cmd->dsm_count) {
        const uint8_t *r = cmd->buf + NVME_DSM_RANGE_LEN * cmd->dsm_next++;
        uint64_t nlb = le32_get(r + 4), slba = le64_get(r + 8);
        if (nlb == 0)
            continue;
        submit(cmd, VREQ_TRIM, 0, slba << cmd->lba_shift, nlb << cmd->lba_shift, NULL, dsm_next);
        return;
    }
    done(cmd, NVME_SC_SUCCESS);
}

/* Check a DSM command's ranges; start deallocating. */
static void io_dsm(struct nvme_cmd *cmd, uint64_t nblocks)
{
    uint32_t nr = (le32_get(cmd->sqe + NVME_SQE_CDW10) & 0xff) + 1;
    if (cmd->data_len < nr * NVME_DSM_RANGE_LEN)
        return done(cmd, NVME_SC_SGL_INVALID_DATA);
    if (!(le32_get(cmd->sqe + NVME_SQE_CDW11) & NVME_DSM_AD))
        return done(cmd, NVME_SC_SUCCESS); /* only hints: nothing to do */
    if (!cmd->data_ready)
        return nvme_cmd_request_data(cmd);
    for (uint32_t i = 0; i < nr; i++) {
        const uint8_t *r = cmd->buf + NVME_DSM_RANGE_LEN * i;
        uint64_t nlb = le32_get(r + 4), slba = le64_get(r + 8);
        if (slba > nblocks || nlb > nblocks - slba)
            return done(cmd, NVME_SC_LBA_RANGE);
    }
    cmd->dsm_count = nr;
    cmd->dsm_next = 0;
    cmd->vr.result = 0;
    cmd->vr.arg = cmd;
    dsm_next(&cmd->vr);
}

static uint8_t log2_u32(uint32_t v)
{
    uint8_t n = 0;
    while (v > 1) {
        v >>= 1;
        n++;
    }
    return n;
}

static bool modifies(const struct nvme_cmd *cmd)
{
    uint8_t op = opc(cmd);
    return op == NVME_IO_WRITE || op == NVME_IO_WRITE_ZEROES ||
           (op == NVME_IO_DSM && (le32_get(cmd->sqe + NVME_SQE_CDW11) & NVME_DSM_AD));
}

static bool is_resv(uint8_t op)
{
    return op == NVME_IO_RESV_REGISTER || op == NVME_IO_RESV_REPORT || op == NVME_IO_RESV_ACQUIRE ||
           op == NVME_IO_RESV_RELEASE;
}

/* The checks every command passes first: 0, or the status to fail with. */
static uint16_t io_check(struct nvme_cmd *cmd, const struct nvme_ns **nsp)
{
    uint8_t op = opc(cmd);
    if (op != NVME_IO_FLUSH && op != NVME_IO_WRITE && op != NVME_IO_READ && op != NVME_IO_COMPARE &&
        op != NVME_IO_WRITE_ZEROES && op != NVME_IO_DSM && !is_resv(op))
        return NVME_SC_INVALID_OPCODE;
    struct nvme_subsys *s = nvme_queue_subsys(cmd->q);
    const struct nvme_ns *ns = s ? nvme_subsys_ns(s, le32_get(cmd->sqe + NVME_SQE_NSID)) : NULL;
    if (!ns)
        return NVME_SC_INVALID_NS;
    if (!ns->vol)
        return NVME_SC_NS_NOT_READY;
    if (is_resv(op)) { /* a namespace without reservations (RBD) does not know them */
        *nsp = ns;
        return ns->resv ? 0 : NVME_SC_INVALID_OPCODE;
    }
    if (modifies(cmd) && (ns->readonly || volume_readonly(ns->vol)))
        return NVME_SC_NS_WRITE_PROTECTED;
    /* The NVM command set's reservation table: Read and Compare read;
     * the rest (Flush and DSM with them) write. */
    uint16_t st = nvme_resv_check(ns->resv, cmd->q->ctrl->hostid,
                                  op != NVME_IO_READ && op != NVME_IO_COMPARE);
    if (st)
        return st;
    *nsp = ns;
    return 0;
}

/* Read, Write, Compare, Write Zeroes: LBA range and transfer size. */
static uint16_t rw_check(struct nvme_cmd *cmd, uint64_t nblocks, uint64_t *off, uint64_t *len)
{
    uint64_t slba = le64_get(cmd->sqe + NVME_SQE_CDW10);
    uint64_t nlb = (le32_get(cmd->sqe + NVME_SQE_CDW12) & 0xffff) + 1u;
    if (slba > nblocks || nlb > nblocks - slba)
        return NVME_SC_LBA_RANGE;
    *off = slba << cmd->lba_shift;
    *len = nlb << cmd->lba_shift;
    if (opc(cmd) == NVME_IO_WRITE_ZEROES)
        return 0;
    if (*len > NVME_MAX_XFER)
        return NVME_SC_INVALID_FIELD; /* above MDTS */
    if (*len != cmd->data_len)
        return NVME_SC_SGL_INVALID_DATA;
    return 0;
}

static void io_rw(struct nvme_cmd *cmd, uint64_t nblocks)
{
    uint64_t off, len;
    uint16_t st = rw_check(cmd, nblocks, &off, &len);
    if (st)
        return done(cmd, st);
    uint32_t c12 = le32_get(cmd->sqe + NVME_SQE_CDW12);
    unsigned fua = (c12 & NVME_RW_FUA) ? VREQ_FUA : 0;
    switch (opc(cmd)) {
    case NVME_IO_READ:
        if (nvme_cmd_buf(cmd, len) < 0)
            return done(cmd, NVME_SC_INTERNAL);
        return submit(cmd, VREQ_READ, 0, off, len, cmd->buf, vr_done);
    case NVME_IO_WRITE:
        if (!cmd->data_ready)
            return nvme_cmd_request_data(cmd);
        return submit(cmd, VREQ_WRITE, fua, off, len, cmd->buf, vr_done);
    case NVME_IO_COMPARE: {
        if (!cmd->data_ready)
            return nvme_cmd_request_data(cmd);
        void *tmp = bufpool_get(len);
        if (!tmp)
            return done(cmd, NVME_SC_INTERNAL);
        return submit(cmd, VREQ_READ, 0, off, len, tmp, compare_done);
    }
    default: /* Write Zeroes */
        if (c12 & NVME_WZ_DEAC)
            fua |= VREQ_MAY_TRIM;
        return submit(cmd, VREQ_WRITE_ZEROES, fua, off, len, NULL, vr_done);
    }
}

void nvme_io_exec(struct nvme_cmd *cmd)
{
    const struct nvme_ns *ns = NULL;
    uint16_t st = io_check(cmd, &ns);
    if (!st)
        st = nvme_ana_io_status(cmd->q->subsys);
    if (st)
        return done(cmd, st);
    if (is_resv(opc(cmd)))
        return nvme_resv_exec(cmd, ns->resv);
    if (!cmd->vol) {
        cmd->vol = ns->vol;
        volume_ref(cmd->vol);
        struct nvme_queue *q = cmd->q;
        cmd->mslot = q->mslots ? q->mslots[ns - q->subsys->ns] : -1;
        cmd->mt0 = iostats_start(cmd->mslot, IOSTATS_NVME);
    }
    cmd->lba_shift = log2_u32(nvme_lba_size(cmd->vol));
    uint64_t nblocks = volume_size(cmd->vol) >> cmd->lba_shift;
    switch (opc(cmd)) {
    case NVME_IO_FLUSH:
        return submit(cmd, VREQ_FLUSH, 0, 0, 0, NULL, vr_done);
    case NVME_IO_DSM:
        return io_dsm(cmd, nblocks);
    default:
        return io_rw(cmd, nblocks);
    }
}
