/*
 * One iSCSI connection: PDU framing and digests over the conn input buffer,
 * the full-feature phase (SCSI commands with immediate/unsolicited/R2T data,
 * Data-In with status piggy-backing, NOP, task management, Text, Logout) and
 * the CmdSN window. Commands run concurrently; each reply is queued as its
 * scsi/ completion arrives and goes out with the loop's batched writev.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/bufpool.h"
#include "core/log.h"
#include "core/util.h"
#include "core/crc32c.h"
#include "iscsi/iscsi_internal.h"

/* ---------------------------------------------------------------- output */

void iscsi_conn_fill_sn(struct iscsi_conn *ic, uint8_t *bhs, bool advance_statsn)
{
    be32_store(bhs + 24, ic->stat_sn);
    if (advance_statsn)
        ic->stat_sn++;
    struct iscsi_session *s = ic->sess;
    if (s) {
        uint32_t room = s->depth > s->inflight ? s->depth - s->inflight : 0;
        be32_store(bhs + 28, s->exp_cmd_sn);
        be32_store(bhs + 32, s->exp_cmd_sn - 1 + room);
    } else if (ic->login) {
        be32_store(bhs + 28, ic->login->cmdsn);
        be32_store(bhs + 32, ic->login->cmdsn + iscsi_server_queue_depth() - 1);
    }
}

static const uint8_t zero_pad[4];

/* Queue header (+digest); data is referenced until release(arg) runs. */
static int send_pdu_ref(struct iscsi_conn *ic, const uint8_t *bhs, const void *data, uint32_t dsl,
                        conn_release_fn release, void *arg)
{
    uint8_t hdr[ISCSI_BHS_LEN + ISCSI_DIGEST_LEN];
    memcpy(hdr, bhs, ISCSI_BHS_LEN);
    iscsi_bhs_set_dsl(hdr, dsl);
    size_t hlen = ISCSI_BHS_LEN;
    if (ic->params.header_digest) {
        uint32_t crc = crc32c(0, hdr, ISCSI_BHS_LEN);
        memcpy(hdr + ISCSI_BHS_LEN, &crc, 4); /* little-endian on the wire */
        hlen += 4;
    }
    int rc = conn_send_copy(ic->c, hdr, hlen);
    if (rc < 0) {
        if (release)
            release(arg);
        return rc;
    }
    if (dsl == 0) {
        if (release)
            release(arg);
        return 0;
    }
    uint32_t pad = iscsi_pad4(dsl);
    uint8_t tail[8];
    size_t tlen = 0;
    if (pad) {
        memset(tail, 0, pad);
        tlen = pad;
    }
    if (ic->params.data_digest) {
        uint32_t crc = crc32c(0, data, dsl);
        if (pad)
            crc = crc32c(crc, zero_pad, pad);
        memcpy(tail + tlen, &crc, 4);
        tlen += 4;
    }
    struct iovec iov[2] = {{(void *)data, dsl}, {tail, tlen}};
    if (tlen == 0)
        return conn_send(ic->c, iov, 1, release, arg);
    /* The tail lives on our stack: send it as a copy after the data. */
    rc = conn_send(ic->c, iov, 1, release, arg);
    if (rc < 0)
        return rc;
    return conn_send_copy(ic->c, tail, tlen);
}

int iscsi_conn_send_pdu(struct iscsi_conn *ic, const uint8_t *bhs, const void *data, uint32_t dsl)
{
    if (dsl == 0)
        return send_pdu_ref(ic, bhs, NULL, 0, NULL, NULL);
    void *copy = malloc(dsl);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, data, dsl);
    return send_pdu_ref(ic, bhs, copy, dsl, free, copy);
}

int iscsi_conn_send_reject(struct iscsi_conn *ic, uint8_t reason, const uint8_t *bad_bhs)
{
    uint8_t bhs[ISCSI_BHS_LEN] = {0};
    bhs[0] = ISCSI_OP_REJECT;
    bhs[1] = ISCSI_FLAG_FINAL;
    bhs[2] = reason;
    be32_store(bhs + 16, ISCSI_RESERVED_TAG);
    iscsi_conn_fill_sn(ic, bhs, true);
    log_info("%s: Reject 0x%02x of %s", ic->c->peer, reason,
             iscsi_opcode_name(iscsi_bhs_opcode(bad_bhs)));
    return iscsi_conn_send_pdu(ic, bhs, bad_bhs, ISCSI_BHS_LEN);
}

uint32_t iscsi_conn_new_ttt(struct iscsi_conn *ic)
{
    ic->ttt_next++;
    if (ic->ttt_next == ISCSI_RESERVED_TAG)
        ic->ttt_next = 1;
    return ic->ttt_next;
}

/* ----------------------------------------------------------------- tasks */

static unsigned itt_hash(uint32_t itt)
{
    return (itt ^ (itt >> 8) ^ (itt >> 16)) & (ISCSI_TASK_HASH - 1);
}

static struct iscsi_task *task_find(struct iscsi_conn *ic, uint32_t itt)
{
    for (struct iscsi_task *t = ic->hash[itt_hash(itt)]; t; t = t->hash_next)
        if (t->itt == itt)
            return t;
    return NULL;
}

static struct iscsi_task *task_new(struct iscsi_conn *ic, uint32_t itt)
{
    struct iscsi_task *t = ic->free_tasks;
    if (t) {
        ic->free_tasks = t->next;
        ic->nfree--;
    } else {
        t = malloc(sizeof(*t));
        if (!t)
            return NULL;
    }
    memset(t, 0, sizeof(*t));
    t->ic = ic;
    t->itt = itt;
    t->prev = NULL;
    t->next = ic->tasks;
    if (ic->tasks)
        ic->tasks->prev = t;
    ic->tasks = t;
    unsigned h = itt_hash(itt);
    t->hash_next = ic->hash[h];
    ic->hash[h] = t;
    ic->ntasks++;
    conn_get(ic->c);
    return t;
}

static void conn_check_logout(struct iscsi_conn *ic);
static void drain_check(struct iscsi_conn *ic);

/* The task leaves the ITT table (the initiator may reuse the tag as soon as
 * it has the response) and the CmdSN window accounting. */
static void task_retire(struct iscsi_task *t)
{
    struct iscsi_conn *ic = t->ic;
    if (!t->replied) {
        struct iscsi_task **pp = &ic->hash[itt_hash(t->itt)];
        while (*pp && *pp != t)
            pp = &(*pp)->hash_next;
        if (*pp)
            *pp = t->hash_next;
        t->replied = true;
    }
    if (t->counted) {
        t->counted = false;
        if (ic->sess && ic->sess->inflight)
            ic->sess->inflight--;
    }
}

static void task_free(struct iscsi_task *t)
{
    struct iscsi_conn *ic = t->ic;
    task_retire(t);
    if (t->prev)
        t->prev->next = t->next;
    else
        ic->tasks = t->next;
    if (t->next)
        t->next->prev = t->prev;
    ic->ntasks--;
    if (t->data_out)
        bufpool_put(t->data_out, t->data_out_cap);
    if (t->data_in)
        bufpool_put(t->data_in, t->data_in_cap);
    if (t->cmd.lu)
        scsi_lu_unref(t->cmd.lu);
    struct conn *c = ic->c;
    if (ic->nfree < 64) {
        t->next = ic->free_tasks;
        ic->free_tasks = t;
        ic->nfree++;
    } else {
        free(t);
    }
    conn_check_logout(ic);
    if (ic->draining)
        drain_check(ic);
    conn_put(c);
}

/* -------------------------------------------------------- task management */

static void tmf_task_finished(struct iscsi_conn *ic, struct iscsi_tmf_wait *w)
{
    if (--w->remaining)
        return;
    if (ic->phase != ISCSI_PHASE_CLOSED) {
        iscsi_conn_fill_sn(ic, w->bhs, true);
        iscsi_conn_send_pdu(ic, w->bhs, NULL, 0);
        if (w->close_after)
            conn_close(ic->c);
    }
    free(w);
}

/* w's response waits until the executing task t has finished (its own
 * response is dropped: t->aborted). Without memory for that, the response
 * goes without waiting; the task's effects may then follow it. */
static void tmf_hold(struct iscsi_conn *ic, struct iscsi_task *t, struct iscsi_tmf_wait *w)
{
    struct iscsi_tmf_hold *h = calloc(1, sizeof(*h));

    t->aborted = true;
    if (!h) {
        log_warn("%s: out of memory: a task management response does not wait for task 0x%08x",
                 ic->c->peer, t->itt);
        return;
    }
    h->w = w;
    h->next = t->tmf;
    t->tmf = h;
    w->remaining++;
}

/* A LOGICAL UNIT RESET of an LU other daemons serve too (RBD: docs/ha.md)
 * answers once they applied it, so the initiator's next command on any path
 * sees the unit attention. */
struct tmf_shared_wait {
    struct reactor_msg msg;
    struct iscsi_conn *ic;
    struct iscsi_tmf_wait *w;
};

static void tmf_shared_done(struct reactor_msg *m)
{
    struct tmf_shared_wait *sw = container_of(m, struct tmf_shared_wait, msg);
    struct conn *c = sw->ic->c;
    tmf_task_finished(sw->ic, sw->w);
    conn_put(c);
    free(sw);
}

static void tmf_wait_shared_reset(struct iscsi_conn *ic, struct iscsi_tmf_wait *w,
                                  struct scsi_lu *lu)
{
    struct tmf_shared_wait *sw = calloc(1, sizeof(*sw));
    if (!sw)
        return; /* the others learn nothing: their sessions keep no UA */
    sw->ic = ic;
    sw->w = w;
    sw->msg.fn = tmf_shared_done;
    conn_get(ic->c);
    w->remaining++;
    if (!scsi_lu_reset_shared(lu, ic->c->reactor, &sw->msg)) {
        w->remaining--;
        conn_put(ic->c);
        free(sw);
    }
}

/* --------------------------------------------------------- SCSI response */

static void send_scsi_response(struct iscsi_conn *ic, struct iscsi_task *t, uint8_t flags)
{
    struct scsi_cmd *c = &t->cmd;
    uint8_t bhs[ISCSI_BHS_LEN] = {0};
    bhs[0] = ISCSI_OP_SCSI_RSP;
    bhs[1] = ISCSI_FLAG_FINAL | flags;
    bhs[2] = 0; /* command completed at target */
    bhs[3] = c->status;
    be32_store(bhs + 16, t->itt);
    iscsi_conn_fill_sn(ic, bhs, true);
    uint32_t residual = 0;
    if (flags & (ISCSI_RSP_OVERFLOW | ISCSI_RSP_UNDERFLOW))
        residual = c->xfer_want > t->edtl ? c->xfer_want - t->edtl : t->edtl - c->xfer_want;
    be32_store(bhs + 44, residual);
    if (c->status == SCSI_STATUS_CHECK_CONDITION && c->sense_len) {
        uint8_t data[2 + SCSI_SENSE_MAX];
        be16_store(data, c->sense_len);
        memcpy(data + 2, c->sense, c->sense_len);
        iscsi_conn_send_pdu(ic, bhs, data, 2u + c->sense_len);
    } else {
        iscsi_conn_send_pdu(ic, bhs, NULL, 0);
    }
}

static void release_task(void *arg)
{
    task_free(arg);
}

/* Send data-in (split by the initiator's MaxRecvDataSegmentLength, F at
 * every MaxBurstLength boundary) and the status; frees the task. */
static void task_reply(struct iscsi_conn *ic, struct iscsi_task *t)
{
    struct scsi_cmd *c = &t->cmd;
    task_retire(t);
    uint8_t flags = 0;
    uint32_t want = c->xfer_want;
    if (want < t->edtl)
        flags = ISCSI_RSP_UNDERFLOW;
    else if (want > t->edtl)
        flags = ISCSI_RSP_OVERFLOW;
    uint32_t len = t->read ? c->data_in_len : 0;
    if (len > t->edtl)
        len = t->edtl;
    if (ic->sess) {
        counter_add(&ic->sess->st_commands, 1);
        counter_add(&ic->sess->st_read, len);
        if (t->write && c->status == SCSI_STATUS_GOOD)
            counter_add(&ic->sess->st_written, t->data_received);
    }
    bool piggyback = len > 0 && c->status == SCSI_STATUS_GOOD && c->sense_len == 0;
    if (len == 0) {
        send_scsi_response(ic, t, flags);
        task_free(t);
        return;
    }
    uint32_t seg_max = ic->params.max_send_dsl;
    uint32_t burst = ic->params.max_burst;
    uint32_t off = 0, data_sn = 0, burst_used = 0;
    while (off < len) {
        uint32_t n = MIN(seg_max, len - off);
        n = MIN(n, burst - burst_used);
        bool last = off + n == len;
        burst_used += n;
        uint8_t bhs[ISCSI_BHS_LEN] = {0};
        bhs[0] = ISCSI_OP_DATA_IN;
        if (last || burst_used == burst)
            bhs[1] |= ISCSI_FLAG_FINAL;
        if (burst_used == burst)
            burst_used = 0;
        memcpy(bhs + 8, t->lun_field, 8);
        be32_store(bhs + 16, t->itt);
        be32_store(bhs + 20, ISCSI_RESERVED_TAG);
        if (last && piggyback) {
            bhs[1] |= ISCSI_DATAIN_STATUS | flags;
            bhs[3] = c->status;
            uint32_t residual = want > t->edtl ? want - t->edtl : t->edtl - want;
            be32_store(bhs + 44, flags ? residual : 0);
            iscsi_conn_fill_sn(ic, bhs, true);
        } else {
            iscsi_conn_fill_sn(ic, bhs, false);
            be32_store(bhs + 24, 0); /* StatSN reserved without S */
        }
        be32_store(bhs + 36, data_sn++);
        be32_store(bhs + 40, off);
        bool release_here = last && piggyback;
        send_pdu_ref(ic, bhs, t->data_in + off, n, release_here ? release_task : NULL,
                     release_here ? t : NULL);
        off += n;
    }
    if (!piggyback) {
        send_scsi_response(ic, t, flags);
        /* Data-In buffers are still queued: free the task when they are out. */
        struct iovec none = {NULL, 0};
        if (conn_send(ic->c, &none, 0, release_task, t) < 0)
            return; /* release already ran */
    }
}

static void task_done(struct scsi_cmd *cmd);

static void task_done_msg(struct reactor_msg *m)
{
    struct iscsi_task *t = container_of(m, struct iscsi_task, done_msg);
    task_done(&t->cmd);
}

static void task_done(struct scsi_cmd *cmd)
{
    struct iscsi_task *t = cmd->arg;
    struct iscsi_conn *ic = t->ic;
    if (reactor_self() != ic->c->reactor) {
        /* Connection state is only touched on its reactor: hop there. */
        static bool warned;
        if (!warned) {
            warned = true;
            log_warn("iscsi: a SCSI completion arrived off its reactor; re-posting");
        }
        t->done_msg.fn = task_done_msg;
        reactor_post(ic->c->reactor, &t->done_msg);
        return;
    }
    t->executing = false;
    if (t->tmf) {
        /* The task's reference may be the connection's last one. */
        struct conn *c = ic->c;
        struct iscsi_tmf_hold *h = t->tmf;
        t->tmf = NULL;
        conn_get(c);
        task_free(t);
        while (h) {
            struct iscsi_tmf_hold *next = h->next;
            tmf_task_finished(ic, h->w);
            free(h);
            h = next;
        }
        conn_put(c);
        return;
    }
    if (t->aborted || ic->phase == ISCSI_PHASE_CLOSED) {
        task_free(t);
        return;
    }
    task_reply(ic, t);
}

static void task_execute(struct iscsi_conn *ic, struct iscsi_task *t)
{
    struct scsi_cmd *c = &t->cmd;
    if (t->data_error) {
        /* ABORTED COMMAND, DATA PHASE ERROR: the data did not arrive as
         * sent, so the command is not executed. */
        scsi_cmd_set_sense(c, 0x0b, 0x4b, 0x00);
        c->xfer_want = t->edtl;
        task_reply(ic, t);
        return;
    }
    c->data_out = t->data_out;
    c->data_out_len = t->write ? t->data_received : 0;
    if (t->read && t->edtl) {
        t->data_in_cap = t->edtl;
        t->data_in = bufpool_get(t->edtl);
        if (!t->data_in) {
            t->data_in_cap = 0;
            scsi_cmd_set_sense(c, 0x04, 0x55, 0x03); /* insufficient resources */
            c->xfer_want = t->edtl;
            task_reply(ic, t);
            return;
        }
        c->data_in = t->data_in;
        c->data_in_cap = t->edtl;
    }
    c->owner = ic->c->reactor;
    c->done = task_done;
    c->arg = t;
    t->executing = true;
    scsi_cmd_execute(c);
}

/* Solicit more data with R2Ts while slots are free. */
static int task_send_r2ts(struct iscsi_conn *ic, struct iscsi_task *t)
{
    uint32_t max_r2t = MIN(ic->params.max_outstanding_r2t, ISCSI_MAX_R2T_SLOTS);
    while (t->r2t_next < t->edtl && t->r2t_outstanding < max_r2t) {
        struct iscsi_r2t *r = NULL;
        for (unsigned i = 0; i < ISCSI_MAX_R2T_SLOTS; i++) {
            if (!t->r2t[i].active) {
                r = &t->r2t[i];
                break;
            }
        }
        if (!r)
            break;
        uint32_t len = MIN(ic->params.max_burst, t->edtl - t->r2t_next);
        r->active = true;
        r->ttt = iscsi_conn_new_ttt(ic);
        r->offset = t->r2t_next;
        r->length = len;
        r->received = 0;
        r->exp_data_sn = 0;
        r->r2t_sn = t->r2t_sn++;
        t->r2t_next += len;
        t->r2t_outstanding++;
        uint8_t bhs[ISCSI_BHS_LEN] = {0};
        bhs[0] = ISCSI_OP_R2T;
        bhs[1] = ISCSI_FLAG_FINAL;
        memcpy(bhs + 8, t->lun_field, 8);
        be32_store(bhs + 16, t->itt);
        be32_store(bhs + 20, r->ttt);
        iscsi_conn_fill_sn(ic, bhs, false);
        be32_store(bhs + 36, r->r2t_sn);
        be32_store(bhs + 40, r->offset);
        be32_store(bhs + 44, len);
        int rc = iscsi_conn_send_pdu(ic, bhs, NULL, 0);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static struct scsi_lu *session_lookup_lu(struct iscsi_session *s, uint64_t lun)
{
    const struct iscsi_target_view *v = iscsi_session_view(s);
    if (!v)
        return NULL;
    size_t lo = 0, hi = v->n_luns;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v->luns[mid].lun == lun)
            return v->luns[mid].lu;
        if (v->luns[mid].lun < lun)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* RFC 7143 §11.3's rules a SCSI Command PDU must meet before it becomes a
 * task: the Reject reason for the first one it breaks, 0 if it meets all. */
static uint8_t scsi_cmd_reject_reason(struct iscsi_conn *ic, const uint8_t *bhs, uint32_t dsl)
{
    struct iscsi_session *s = ic->sess;
    uint32_t itt = iscsi_bhs_itt(bhs);
    bool wbit = bhs[1] & ISCSI_CMD_WRITE;
    uint32_t edtl = be32_load(bhs + 20);

    if (s->info.discovery)
        return ISCSI_REJECT_PROTOCOL_ERROR;
    if (itt == ISCSI_RESERVED_TAG)
        return ISCSI_REJECT_INVALID_PDU_FIELD;
    if (task_find(ic, itt)) {
        log_warn("%s: ITT 0x%08x already in use", ic->c->peer, itt);
        return ISCSI_REJECT_TASK_IN_PROGRESS;
    }
    /* Bounded memory: a few more tasks than the window allows (immediate
     * commands and tasks finishing their output), never unbounded. */
    if (ic->ntasks >= 2 * s->depth + 16)
        return ISCSI_REJECT_OUT_OF_RESOURCES;
    if (dsl && !wbit) {
        log_warn("%s: immediate data on a command without W bit", ic->c->peer);
        return ISCSI_REJECT_PROTOCOL_ERROR;
    }
    if (dsl > edtl || (dsl && !ic->params.immediate_data) || dsl > ic->params.first_burst) {
        log_warn("%s: immediate data of %u bytes not allowed (EDTL %u)", ic->c->peer, dsl, edtl);
        return ISCSI_REJECT_PROTOCOL_ERROR;
    }
    return 0;
}

/* A task for an admitted command, with its CDB and its LU (referenced for
 * the task's life; NULL when the session maps nothing at that LUN). */
static struct iscsi_task *task_from_cmd(struct iscsi_conn *ic, const uint8_t *bhs)
{
    struct iscsi_session *s = ic->sess;
    struct iscsi_task *t = task_new(ic, iscsi_bhs_itt(bhs));
    if (!t)
        return NULL;
    t->immediate = iscsi_bhs_immediate(bhs);
    t->cmdsn = be32_load(bhs + 24);
    memcpy(t->lun_field, bhs + 8, 8);
    t->lun = scsi_lun_decode(bhs + 8);
    t->edtl = be32_load(bhs + 20);
    t->read = bhs[1] & ISCSI_CMD_READ;
    t->write = bhs[1] & ISCSI_CMD_WRITE;
    if (!t->immediate) {
        /* An immediate command is outside the CmdSN window. */
        s->inflight++;
        t->counted = true;
    }
    struct scsi_cmd *c = &t->cmd;
    memcpy(c->cdb, bhs + 32, 16);
    c->cdb_len = 16;
    c->lun = t->lun;
    c->nexus = &s->nexus;
    c->lu = session_lookup_lu(s, t->lun);
    if (c->lu)
        scsi_lu_ref(c->lu);
    return t;
}

/* Extended CDBs (AHS type 1) and bidirectional commands are not used by
 * SBC disks, and a transfer over ISCSI_MAX_TRANSFER is not taken: such a
 * task is answered with a CHECK CONDITION rather than a Reject. */
static bool task_unsupported(const struct iscsi_task *t, const uint8_t *ahs, uint32_t ahs_len)
{
    if ((t->read && t->write) || t->edtl > ISCSI_MAX_TRANSFER)
        return true;
    for (uint32_t off = 0; off + 4 <= ahs_len;) {
        uint16_t alen = be16_load(ahs + off);
        if (ahs[off + 2] == 1)
            return true;
        off += 4 + ((alen + 3u) & ~3u);
    }
    return false;
}

/* A write's data: the immediate part (already here), then the rest of the
 * first burst as unsolicited Data-Out when InitialR2T=No allows it, then
 * R2Ts for what is left; the task executes once it has everything. */
static int task_start_write(struct iscsi_conn *ic, struct iscsi_task *t, const uint8_t *bhs,
                            const uint8_t *data, uint32_t dsl)
{
    bool final = bhs[1] & ISCSI_FLAG_FINAL;
    uint32_t edtl = t->edtl;
    t->data_out_cap = edtl;
    t->data_out = bufpool_get(edtl);
    if (!t->data_out) {
        log_error("%s: out of memory for %u bytes of write data", ic->c->peer, edtl);
        return -ENOMEM;
    }
    if (dsl)
        memcpy(t->data_out, data, dsl);
    t->data_received = dsl;
    uint32_t first = MIN(ic->params.first_burst, edtl);
    if (!final && !ic->params.initial_r2t && first > dsl) {
        t->unsol_len = first - dsl;
        t->unsol_offset = dsl;
    } else if (!final) {
        log_warn("%s: unsolicited data announced but InitialR2T=Yes", ic->c->peer);
        task_free(t);
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_PROTOCOL_ERROR, bhs);
    }
    t->r2t_next = dsl + t->unsol_len;
    if (t->data_received == edtl) {
        task_execute(ic, t);
        return 0;
    }
    return task_send_r2ts(ic, t);
}

/* SCSI Command PDU (RFC 7143 §11.3). */
static int handle_scsi_cmd(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *ahs,
                           uint32_t ahs_len, const uint8_t *data, uint32_t dsl)
{
    uint8_t reason = scsi_cmd_reject_reason(ic, bhs, dsl);
    if (reason)
        return iscsi_conn_send_reject(ic, reason, bhs);
    struct iscsi_task *t = task_from_cmd(ic, bhs);
    if (!t)
        return -ENOMEM;
    if (task_unsupported(t, ahs, ahs_len)) {
        /* We must not leave unsolicited data behind: only answer now if
         * nothing more will arrive for this task. */
        if (t->write && !(bhs[1] & ISCSI_FLAG_FINAL)) {
            log_warn("%s: unsupported write with unsolicited data", ic->c->peer);
            return -EPROTO;
        }
        scsi_cmd_set_sense(&t->cmd, 0x05, 0x24, 0x00); /* INVALID FIELD IN CDB */
        t->cmd.xfer_want = t->edtl;
        task_reply(ic, t);
        return 0;
    }
    if (!t->write || t->edtl == 0) {
        task_execute(ic, t);
        return 0;
    }
    return task_start_write(ic, t, bhs, data, dsl);
}

/* Unsolicited Data-Out (TTT 0xffffffff) continues the first burst in
 * order. 0: take the data; -EPROTO: the connection ends. A wrong DataSN
 * fails only the command (DATA PHASE ERROR), as the data itself is sound. */
static int data_out_unsolicited(struct iscsi_conn *ic, struct iscsi_task *t, uint32_t offset,
                                uint32_t dsl, uint32_t data_sn, bool final)
{
    if (t->unsol_len < dsl || offset != t->unsol_offset) {
        log_warn("%s: unexpected unsolicited Data-Out (offset %u, DataSN %u)", ic->c->peer, offset,
                 data_sn);
        return -EPROTO;
    }
    if (data_sn != t->unsol_data_sn && !t->data_error) {
        log_warn("%s: unsolicited Data-Out with DataSN %u, expected %u: failing the command",
                 ic->c->peer, data_sn, t->unsol_data_sn);
        t->data_error = true;
    }
    t->unsol_len -= dsl;
    t->unsol_offset += dsl;
    t->unsol_data_sn++;
    if (final && t->unsol_len) {
        /* The initiator ended the unsolicited burst early: solicit the rest. */
        if (t->r2t_next > t->unsol_offset)
            t->r2t_next = t->unsol_offset;
        t->unsol_len = 0;
    }
    return 0;
}

static struct iscsi_r2t *task_find_r2t(struct iscsi_task *t, uint32_t ttt)
{
    for (unsigned i = 0; i < ISCSI_MAX_R2T_SLOTS; i++)
        if (t->r2t[i].active && t->r2t[i].ttt == ttt)
            return &t->r2t[i];
    return NULL;
}

/* Solicited Data-Out answers the R2T its TTT names, in order; the PDU with
 * F set must complete that R2T exactly, which frees its slot. Return
 * values as data_out_unsolicited. */
static int data_out_solicited(struct iscsi_conn *ic, struct iscsi_task *t, uint32_t ttt,
                              uint32_t offset, uint32_t dsl, uint32_t data_sn, bool final)
{
    struct iscsi_r2t *r = task_find_r2t(t, ttt);
    if (!r) {
        log_warn("%s: Data-Out with unknown TTT 0x%08x", ic->c->peer, ttt);
        return -EPROTO;
    }
    if (offset != r->offset + r->received || r->received + dsl > r->length) {
        log_warn("%s: Data-Out out of order (DataSN %u, expected %u; offset %u)", ic->c->peer,
                 data_sn, r->exp_data_sn, offset);
        return -EPROTO;
    }
    if (data_sn != r->exp_data_sn && !t->data_error) {
        log_warn("%s: Data-Out with DataSN %u, expected %u: failing the command", ic->c->peer,
                 data_sn, r->exp_data_sn);
        t->data_error = true;
    }
    r->exp_data_sn++;
    r->received += dsl;
    if (final) {
        if (r->received != r->length) {
            log_warn("%s: R2T sequence ended short (%u of %u)", ic->c->peer, r->received,
                     r->length);
            return -EPROTO;
        }
        r->active = false;
        t->r2t_outstanding--;
    }
    return 0;
}

/* Data-Out PDU (RFC 7143 §11.7). */
static int handle_data_out(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *data,
                           uint32_t dsl)
{
    uint32_t itt = iscsi_bhs_itt(bhs);
    uint32_t ttt = be32_load(bhs + 20);
    uint32_t data_sn = be32_load(bhs + 36);
    uint32_t offset = be32_load(bhs + 40);
    bool final = bhs[1] & ISCSI_FLAG_FINAL;
    struct iscsi_task *t = task_find(ic, itt);
    if (!t || t->executing || !t->data_out) {
        /* Data for a task that was aborted or finished: ignore it. */
        log_debug("%s: Data-Out for unknown ITT 0x%08x", ic->c->peer, itt);
        return 0;
    }
    if (t->aborted)
        return 0;
    if (dsl == 0 && !final)
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_PROTOCOL_ERROR, bhs);
    if ((uint64_t)offset + dsl > t->edtl) {
        log_warn("%s: Data-Out beyond the expected length (offset %u + %u > %u)", ic->c->peer,
                 offset, dsl, t->edtl);
        return -EPROTO;
    }
    int rc = ttt == ISCSI_RESERVED_TAG
                 ? data_out_unsolicited(ic, t, offset, dsl, data_sn, final)
                 : data_out_solicited(ic, t, ttt, offset, dsl, data_sn, final);
    if (rc < 0)
        return rc;
    if (dsl)
        memcpy(t->data_out + offset, data, dsl);
    t->data_received += dsl;
    if (t->data_received >= t->edtl && t->r2t_outstanding == 0 && t->unsol_len == 0) {
        task_execute(ic, t);
        return 0;
    }
    if (final)
        return task_send_r2ts(ic, t);
    return 0;
}

/* NOP-Out (RFC 7143 §11.18). */
static int handle_nop_out(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *data,
                          uint32_t dsl)
{
    uint32_t itt = iscsi_bhs_itt(bhs);
    uint32_t ttt = be32_load(bhs + 20);
    if (itt == ISCSI_RESERVED_TAG) {
        if (ttt != ISCSI_RESERVED_TAG && ic->ping_outstanding && ttt == ic->ping_ttt)
            ic->ping_outstanding = false;
        return 0;
    }
    if (ttt != ISCSI_RESERVED_TAG) {
        /* A reply to our ping must carry ITT 0xffffffff. */
        if (ic->ping_outstanding && ttt == ic->ping_ttt)
            ic->ping_outstanding = false;
    }
    uint8_t rsp[ISCSI_BHS_LEN] = {0};
    rsp[0] = ISCSI_OP_NOP_IN;
    rsp[1] = ISCSI_FLAG_FINAL;
    memcpy(rsp + 8, bhs + 8, 8);
    be32_store(rsp + 16, itt);
    be32_store(rsp + 20, ISCSI_RESERVED_TAG);
    iscsi_conn_fill_sn(ic, rsp, true);
    return iscsi_conn_send_pdu(ic, rsp, data, MIN(dsl, ic->params.max_send_dsl));
}

/* What each task management function does (RFC 7143 §11.5.1, SAM-5 §7.1):
 * which tasks it aborts, what it then does to the LU(s), and whether the
 * connection ends after the response. A function missing from the table
 * (an all-zero entry) is not supported; TMF_REFUSED names another refusal. */
enum tmf_scope { TMF_REFUSED = 0, TMF_ONE_TASK, TMF_LUN_TASKS, TMF_ALL_TASKS };
enum tmf_effect { TMF_NO_EFFECT = 0, TMF_ABORT_SET, TMF_RESET_LU, TMF_RESET_TARGET };

struct tmf_rule {
    enum tmf_scope scope;
    enum tmf_effect effect; /* applied once the tasks are aborted */
    bool close_after;       /* the connection closes once the response is out */
    uint8_t refusal;        /* the response when scope is TMF_REFUSED */
};

static const struct tmf_rule tmf_rules[] = {
    [ISCSI_TMF_ABORT_TASK] = {TMF_ONE_TASK, TMF_NO_EFFECT, false, 0},
    [ISCSI_TMF_ABORT_TASK_SET] = {TMF_LUN_TASKS, TMF_ABORT_SET, false, 0},
    [ISCSI_TMF_CLEAR_ACA] = {TMF_REFUSED, TMF_NO_EFFECT, false, ISCSI_TMF_RSP_NOT_SUPPORTED},
    [ISCSI_TMF_CLEAR_TASK_SET] = {TMF_LUN_TASKS, TMF_ABORT_SET, false, 0},
    [ISCSI_TMF_LUN_RESET] = {TMF_LUN_TASKS, TMF_RESET_LU, false, 0},
    [ISCSI_TMF_TARGET_WARM_RESET] = {TMF_ALL_TASKS, TMF_RESET_TARGET, false, 0},
    [ISCSI_TMF_TARGET_COLD_RESET] = {TMF_ALL_TASKS, TMF_RESET_TARGET, true, 0},
    [ISCSI_TMF_TASK_REASSIGN] = {TMF_REFUSED, TMF_NO_EFFECT, false, ISCSI_TMF_RSP_NO_REASSIGN},
};

static const struct tmf_rule *tmf_rule_of(uint8_t fn)
{
    static const struct tmf_rule unsupported = {.refusal = ISCSI_TMF_RSP_NOT_SUPPORTED};
    if (fn >= ARRAY_SIZE(tmf_rules))
        return &unsupported;
    const struct tmf_rule *r = &tmf_rules[fn];
    if (r->scope == TMF_REFUSED && r->refusal == ISCSI_TMF_RSP_COMPLETE)
        return &unsupported;
    return r;
}

/* ABORT TASK: the task the Referenced Task Tag names, on this LUN. An
 * executing one drops its response and holds the TMF response until it
 * completes; one still collecting data goes now. */
static uint8_t tmf_abort_task(struct iscsi_conn *ic, struct iscsi_tmf_wait *w, const uint8_t *bhs,
                              uint64_t lun)
{
    struct iscsi_session *s = ic->sess;
    uint32_t rtt = be32_load(bhs + 20);
    uint32_t cmdsn = be32_load(bhs + 24);
    uint32_t refcmdsn = be32_load(bhs + 32);
    struct iscsi_task *t = task_find(ic, rtt);
    if (!t) {
        /* RFC 7143 §11.5.1: a task never received whose CmdSN is in
         * the window counts as received, and is done. */
        bool never_received = iscsi_sn_lt(refcmdsn, cmdsn) && iscsi_sn_le(s->exp_cmd_sn, refcmdsn);
        return never_received ? ISCSI_TMF_RSP_COMPLETE : ISCSI_TMF_RSP_NO_TASK;
    }
    if (t->lun != lun || t->replied)
        return ISCSI_TMF_RSP_NO_TASK;
    if (t->executing)
        tmf_hold(ic, t, w);
    else if (!t->aborted)
        task_free(t);
    return ISCSI_TMF_RSP_COMPLETE;
}

static bool task_matches_lun(const struct iscsi_task *t, uint64_t lun)
{
    return t->lun == lun;
}

/* Abort every task of the set (this LUN's, or all with whole_target) as
 * ABORT TASK does; one an earlier TMF already aborted is waited for too. */
static void tmf_abort_set_tasks(struct iscsi_conn *ic, struct iscsi_tmf_wait *w, bool whole_target,
                                uint64_t lun)
{
    struct iscsi_task *t = ic->tasks, *next;
    for (; t; t = next) {
        next = t->next;
        if (!whole_target && !task_matches_lun(t, lun))
            continue;
        if (t->replied)
            continue;
        if (t->executing)
            tmf_hold(ic, t, w);
        else if (!t->aborted)
            task_free(t);
    }
}

/* The functions over a task set (ABORT/CLEAR TASK SET, LUN and target
 * resets): abort the tasks, then apply the rule's effect to the LU(s). */
static uint8_t tmf_task_set(struct iscsi_conn *ic, struct iscsi_tmf_wait *w,
                            const struct tmf_rule *rule, uint64_t lun)
{
    struct iscsi_session *s = ic->sess;
    bool whole_target = rule->scope == TMF_ALL_TASKS;
    struct scsi_lu *lu = NULL;
    if (!whole_target) {
        lu = session_lookup_lu(s, lun);
        if (!lu)
            return ISCSI_TMF_RSP_NO_LUN;
    }
    tmf_abort_set_tasks(ic, w, whole_target, lun);
    w->close_after = rule->close_after;
    switch (rule->effect) {
    case TMF_RESET_LU:
        scsi_lu_reset(lu, &s->nexus);
        tmf_wait_shared_reset(ic, w, lu);
        break;
    case TMF_ABORT_SET:
        scsi_lu_abort_task_set(lu, &s->nexus);
        break;
    case TMF_RESET_TARGET:
        for (size_t i = 0; s->view && i < s->view->n_luns; i++)
            scsi_lu_target_reset(s->view->luns[i].lu, &s->nexus);
        break;
    case TMF_NO_EFFECT:
        break;
    }
    return ISCSI_TMF_RSP_COMPLETE;
}

/* Task Management Function Request (RFC 7143 §11.5). The response goes
 * out once every task the function waits for has completed. */
static int handle_tmf(struct iscsi_conn *ic, const uint8_t *bhs)
{
    uint8_t fn = bhs[1] & 0x7f;
    uint64_t lun = scsi_lun_decode(bhs + 8);
    struct iscsi_tmf_wait *w = calloc(1, sizeof(*w));
    if (!w)
        return -ENOMEM;
    w->bhs[0] = ISCSI_OP_TMF_RSP;
    w->bhs[1] = ISCSI_FLAG_FINAL;
    be32_store(w->bhs + 16, iscsi_bhs_itt(bhs));
    w->remaining = 1; /* ours; dropped at the end */

    const struct tmf_rule *rule = tmf_rule_of(fn);
    uint8_t response;
    if (ic->sess->info.discovery)
        response = ISCSI_TMF_RSP_REJECTED;
    else if (rule->scope == TMF_ONE_TASK)
        response = tmf_abort_task(ic, w, bhs, lun);
    else if (rule->scope != TMF_REFUSED)
        response = tmf_task_set(ic, w, rule, lun);
    else
        response = rule->refusal;
    w->bhs[2] = response;
    log_info("%s: task management function %u on LUN %llu: response %u", ic->c->peer, fn,
             (unsigned long long)lun, response);
    tmf_task_finished(ic, w);
    return 0;
}

static void send_logout_response(struct iscsi_conn *ic)
{
    uint8_t rsp[ISCSI_BHS_LEN] = {0};
    rsp[0] = ISCSI_OP_LOGOUT_RSP;
    rsp[1] = ISCSI_FLAG_FINAL;
    rsp[2] = ISCSI_LOGOUT_RSP_OK;
    be32_store(rsp + 16, ic->logout_itt);
    iscsi_conn_fill_sn(ic, rsp, true);
    iscsi_conn_send_pdu(ic, rsp, NULL, 0);
    ic->logout_pending = false;
    log_info("%s: logged out", ic->c->peer);
    conn_close(ic->c);
}

static void conn_check_logout(struct iscsi_conn *ic)
{
    if (ic->logout_pending && ic->ntasks == 0 && ic->logout_waits == 0 &&
        ic->phase != ISCSI_PHASE_CLOSED)
        send_logout_response(ic);
}

/* An SPC-2 reservation the session holds on an LU other daemons serve too
 * (RBD) is released in the cluster before the logout completes, so that
 * the initiator's next RESERVE through any daemon finds it free. */
struct logout_wait {
    struct reactor_msg msg;
    struct iscsi_conn *ic;
};

static void logout_wait_done(struct reactor_msg *m)
{
    struct logout_wait *lw = container_of(m, struct logout_wait, msg);
    struct iscsi_conn *ic = lw->ic;
    struct conn *c = ic->c;
    ic->logout_waits--;
    conn_check_logout(ic);
    conn_put(c);
    free(lw);
}

static void logout_release_shared(struct iscsi_conn *ic)
{
    struct iscsi_session *s = ic->sess;
    for (size_t i = 0; s && s->view && i < s->view->n_luns; i++) {
        struct scsi_lu *lu = s->view->luns[i].lu;
        struct logout_wait *lw = lu ? calloc(1, sizeof(*lw)) : NULL;
        if (!lw)
            continue;
        lw->ic = ic;
        lw->msg.fn = logout_wait_done;
        conn_get(ic->c);
        ic->logout_waits++;
        if (!scsi_lu_nexus_release_shared(lu, &s->nexus, ic->c->reactor, &lw->msg)) {
            ic->logout_waits--;
            conn_put(ic->c);
            free(lw);
        }
    }
}

/* Logout Request (RFC 7143 §11.14): answer once every task has finished. */
static int handle_logout(struct iscsi_conn *ic, const uint8_t *bhs)
{
    uint8_t reason = bhs[1] & 0x7f;
    uint16_t cid = be16_load(bhs + 20);
    ic->logout_itt = iscsi_bhs_itt(bhs);
    if (reason == ISCSI_LOGOUT_REMOVE_FOR_RECOVERY ||
        (reason == ISCSI_LOGOUT_CLOSE_CONNECTION && cid != ic->cid)) {
        uint8_t rsp[ISCSI_BHS_LEN] = {0};
        rsp[0] = ISCSI_OP_LOGOUT_RSP;
        rsp[1] = ISCSI_FLAG_FINAL;
        rsp[2] = reason == ISCSI_LOGOUT_REMOVE_FOR_RECOVERY ? ISCSI_LOGOUT_RSP_NO_RECOVERY
                                                            : ISCSI_LOGOUT_RSP_CID_NOT_FOUND;
        be32_store(rsp + 16, ic->logout_itt);
        iscsi_conn_fill_sn(ic, rsp, true);
        return iscsi_conn_send_pdu(ic, rsp, NULL, 0);
    }
    if (reason > ISCSI_LOGOUT_REMOVE_FOR_RECOVERY)
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_INVALID_PDU_FIELD, bhs);
    ic->phase = ISCSI_PHASE_LOGOUT;
    ic->logout_pending = true;
    logout_release_shared(ic);
    /* Tasks still waiting for data will never get it: drop them. */
    struct iscsi_task *t = ic->tasks, *next;
    for (; t; t = next) {
        next = t->next;
        if (!t->executing && !t->replied)
            task_free(t);
    }
    conn_check_logout(ic);
    return 0;
}

/* ----------------------------------------------------------------- Text */

static int text_send_chunk(struct iscsi_conn *ic, uint32_t itt)
{
    size_t left = ic->text_pending.len - ic->text_sent;
    uint32_t n = (uint32_t)MIN(left, (size_t)ic->params.max_send_dsl);
    bool last = n == left;
    uint8_t rsp[ISCSI_BHS_LEN] = {0};
    rsp[0] = ISCSI_OP_TEXT_RSP;
    rsp[1] = last ? ISCSI_FLAG_FINAL : ISCSI_TEXT_CONTINUE;
    be32_store(rsp + 8, 0);
    be32_store(rsp + 16, itt);
    if (last) {
        be32_store(rsp + 20, ISCSI_RESERVED_TAG);
    } else {
        ic->text_ttt = iscsi_conn_new_ttt(ic);
        be32_store(rsp + 20, ic->text_ttt);
    }
    iscsi_conn_fill_sn(ic, rsp, true);
    /* An empty answer (SendTargets for no target) has no buffer at all:
     * no pointer arithmetic on NULL. */
    const char *data = n ? ic->text_pending.buf + ic->text_sent : NULL;
    int rc = iscsi_conn_send_pdu(ic, rsp, data, n);
    ic->text_sent += n;
    if (last) {
        iscsi_text_out_free(&ic->text_pending);
        ic->text_sent = 0;
        ic->text_ttt = ISCSI_RESERVED_TAG;
    }
    return rc;
}

struct text_ctx {
    struct iscsi_conn *ic;
    struct iscsi_text_out *out;
    int rc;
};

static int text_key(const char *key, const char *value, void *arg)
{
    struct text_ctx *x = arg;
    struct iscsi_conn *ic = x->ic;
    if (strcmp(key, "SendTargets") == 0)
        return iscsi_send_targets(ic, value, ic->sess->info.initiator, x->out);
    (void)value;
    /* Renegotiating operational keys in full feature phase is not
     * supported: known keys get Reject, others NotUnderstood. */
    if (iscsi_key_known(key))
        return iscsi_text_add(x->out, key, "Reject");
    return iscsi_neg_not_understood(x->out, key);
}

int iscsi_conn_handle_text(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *data,
                           uint32_t dsl)
{
    uint32_t itt = iscsi_bhs_itt(bhs);
    uint32_t ttt = be32_load(bhs + 20);
    if (ttt != ISCSI_RESERVED_TAG) {
        if (ttt != ic->text_ttt || !ic->text_pending.buf)
            return iscsi_conn_send_reject(ic, ISCSI_REJECT_INVALID_PDU_FIELD, bhs);
        return text_send_chunk(ic, itt);
    }
    if (bhs[1] & ISCSI_TEXT_CONTINUE) {
        /* Multi-PDU text requests are only used for huge key sets. */
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_CMD_NOT_SUPPORTED, bhs);
    }
    iscsi_text_out_free(&ic->text_pending);
    iscsi_text_out_init(&ic->text_pending, ISCSI_TEXT_MAX);
    ic->text_sent = 0;
    struct text_ctx x = {ic, &ic->text_pending, 0};
    int rc = iscsi_text_parse((const char *)data, dsl, text_key, &x);
    if (rc == -EINVAL) {
        iscsi_text_out_free(&ic->text_pending);
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_PROTOCOL_ERROR, bhs);
    }
    if (rc < 0) {
        iscsi_text_out_free(&ic->text_pending);
        return rc == -E2BIG ? iscsi_conn_send_reject(ic, ISCSI_REJECT_OUT_OF_RESOURCES, bhs) : rc;
    }
    return text_send_chunk(ic, itt);
}

/* --------------------------------------------------------- PDU dispatch */

/* Apply the CmdSN rules to a non-immediate request. Returns true when the
 * PDU is to be processed, false when it is outside the window (ignored). */
static bool cmdsn_accept(struct iscsi_conn *ic, const uint8_t *bhs)
{
    struct iscsi_session *s = ic->sess;
    uint32_t cmdsn = be32_load(bhs + 24);
    if (iscsi_bhs_immediate(bhs))
        return true;
    if (cmdsn == s->exp_cmd_sn) {
        s->exp_cmd_sn++;
        return true;
    }
    uint32_t room = s->depth > s->inflight ? s->depth - s->inflight : 0;
    uint32_t max_cmd_sn = s->exp_cmd_sn - 1 + room;
    log_warn("%s: %s with CmdSN %u outside the window [%u, %u]: ignored", ic->c->peer,
             iscsi_opcode_name(iscsi_bhs_opcode(bhs)), cmdsn, s->exp_cmd_sn, max_cmd_sn);
    return false;
}

static int dispatch_full_feature(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *ahs,
                                 uint32_t ahs_len, const uint8_t *data, uint32_t dsl)
{
    uint8_t op = iscsi_bhs_opcode(bhs);
    if (ic->phase == ISCSI_PHASE_LOGOUT && op != ISCSI_OP_DATA_OUT && op != ISCSI_OP_NOP_OUT) {
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_WAITING_FOR_LOGOUT, bhs);
    }
    switch (op) {
    case ISCSI_OP_NOP_OUT:
        if (iscsi_bhs_itt(bhs) == ISCSI_RESERVED_TAG && !iscsi_bhs_immediate(bhs))
            return iscsi_conn_send_reject(ic, ISCSI_REJECT_PROTOCOL_ERROR, bhs);
        if (iscsi_bhs_itt(bhs) != ISCSI_RESERVED_TAG && !cmdsn_accept(ic, bhs))
            return 0;
        return handle_nop_out(ic, bhs, data, dsl);
    case ISCSI_OP_SCSI_CMD:
        if (!cmdsn_accept(ic, bhs))
            return 0;
        return handle_scsi_cmd(ic, bhs, ahs, ahs_len, data, dsl);
    case ISCSI_OP_TMF_REQ:
        if (!cmdsn_accept(ic, bhs))
            return 0;
        return handle_tmf(ic, bhs);
    case ISCSI_OP_TEXT_REQ:
        if (!cmdsn_accept(ic, bhs))
            return 0;
        return iscsi_conn_handle_text(ic, bhs, data, dsl);
    case ISCSI_OP_DATA_OUT:
        return handle_data_out(ic, bhs, data, dsl);
    case ISCSI_OP_LOGOUT_REQ:
        if (!cmdsn_accept(ic, bhs))
            return 0;
        return handle_logout(ic, bhs);
    case ISCSI_OP_SNACK_REQ:
        /* ErrorRecoveryLevel=0: no SNACK support (RFC 7143 §11.16). */
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_CMD_NOT_SUPPORTED, bhs);
    case ISCSI_OP_LOGIN_REQ:
        log_warn("%s: Login Request in full feature phase", ic->c->peer);
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_PROTOCOL_ERROR, bhs);
    default:
        log_warn("%s: unsupported opcode 0x%02x", ic->c->peer, op);
        return iscsi_conn_send_reject(ic, ISCSI_REJECT_CMD_NOT_SUPPORTED, bhs);
    }
}

static int conn_on_input(struct conn *c)
{
    struct iscsi_conn *ic = c->proto;
    if (ic->draining)
        return 0; /* shutdown: no new commands */
    ic->last_rx_ns = time_now_ns();
    while (conn_input_len(c) >= ISCSI_BHS_LEN && ic->phase != ISCSI_PHASE_CLOSED) {
        const uint8_t *p = conn_input(c);
        bool login = ic->phase == ISCSI_PHASE_LOGIN;
        struct iscsi_pdu_frame fr;
        if (iscsi_pdu_frame(p, !login && ic->params.header_digest, !login && ic->params.data_digest,
                            &fr) < 0)
            return -EPROTO;
        uint32_t limit = login ? ISCSI_LOGIN_DSL_MAX : ic->params.max_recv_dsl;
        if (fr.dsl > limit) {
            log_warn("%s: %s with DataSegmentLength %u > %u", c->peer,
                     iscsi_opcode_name(iscsi_bhs_opcode(p)), fr.dsl, limit);
            if (!login)
                iscsi_conn_send_reject(ic, ISCSI_REJECT_PROTOCOL_ERROR, p);
            return -EPROTO;
        }
        if (conn_input_len(c) < fr.total) {
            int rc = conn_input_reserve(c, fr.total);
            if (rc < 0)
                return rc;
            break;
        }
        if (!login && ic->params.header_digest) {
            uint32_t want = crc32c(0, p, ISCSI_BHS_LEN + fr.ahs_len), got;
            memcpy(&got, p + ISCSI_BHS_LEN + fr.ahs_len, 4);
            if (want != got) {
                log_warn("%s: header digest error", c->peer);
                return -EPROTO;
            }
        }
        const uint8_t *data = p + fr.data_off;
        if (!login && ic->params.data_digest && fr.dsl) {
            uint32_t padded = fr.dsl + iscsi_pad4(fr.dsl);
            uint32_t want = crc32c(0, data, padded), got;
            memcpy(&got, data + padded, 4);
            if (want != got) {
                log_warn("%s: data digest error on %s", c->peer,
                         iscsi_opcode_name(iscsi_bhs_opcode(p)));
                iscsi_conn_send_reject(ic, ISCSI_REJECT_DATA_DIGEST, p);
                return -EPROTO;
            }
        }
        int rc;
        if (login) {
            rc = iscsi_login_handle(ic, p, data, fr.dsl);
        } else {
            rc = dispatch_full_feature(ic, p, p + ISCSI_BHS_LEN, fr.ahs_len, data, fr.dsl);
        }
        if (rc < 0)
            return rc;
        conn_consume(c, fr.total);
    }
    return 0;
}

/* ------------------------------------------------------------ NOP timer */

static void nop_timer_fire(struct reactor_timer *tm)
{
    struct iscsi_conn *ic = container_of(tm, struct iscsi_conn, nop_timer);
    if (ic->phase == ISCSI_PHASE_CLOSED)
        return;
    uint64_t now = time_now_ns();
    uint64_t interval = iscsi_server_nop_interval_ns();
    uint64_t timeout = iscsi_server_nop_timeout_ns();
    if (ic->phase == ISCSI_PHASE_LOGIN) {
        /* A login must finish within the handshake deadline, however
         * slowly its bytes keep coming. */
        if (now >= ic->login_deadline_ns) {
            admit_log(&iscsi_gate, "%s: iscsi: login not finished within %u s, closing",
                      ic->c->peer, admit_handshake_timeout_s());
            conn_close(ic->c);
            return;
        }
        reactor_timer_start(ic->c->reactor, &ic->nop_timer, ic->login_deadline_ns - now);
        return;
    } else if (ic->ping_outstanding) {
        if (now - ic->ping_sent_ns >= timeout) {
            log_warn("%s: no answer to NOP-In for %llu s: closing", ic->c->peer,
                     (unsigned long long)(timeout / 1000000000ull));
            conn_close(ic->c);
            return;
        }
    } else if (now - ic->last_rx_ns >= interval && ic->ntasks == 0) {
        uint8_t bhs[ISCSI_BHS_LEN] = {0};
        bhs[0] = ISCSI_OP_NOP_IN;
        bhs[1] = ISCSI_FLAG_FINAL;
        be32_store(bhs + 16, ISCSI_RESERVED_TAG);
        ic->ping_ttt = iscsi_conn_new_ttt(ic);
        be32_store(bhs + 20, ic->ping_ttt);
        iscsi_conn_fill_sn(ic, bhs, false);
        ic->ping_outstanding = true;
        ic->ping_sent_ns = now;
        iscsi_conn_send_pdu(ic, bhs, NULL, 0);
    }
    uint64_t next = interval < timeout ? interval : timeout;
    reactor_timer_start(ic->c->reactor, &ic->nop_timer, next / 4 ? next / 4 : 1000000);
}

/* ------------------------------------------------------------ lifecycle */

/* Shutdown: once no task is executing (tasks waiting for Data-Out never
 * will), the replies queued go out, then FIN, then the close. */
static void drain_check(struct iscsi_conn *ic)
{
    if (ic->phase == ISCSI_PHASE_CLOSED || ic->c->closing)
        return;
    for (struct iscsi_task *t = ic->tasks; t; t = t->next)
        if (t->executing)
            return;
    conn_finish(ic->c);
}

void iscsi_conn_drain_msg(struct reactor_msg *m)
{
    struct iscsi_conn *ic = container_of(m, struct iscsi_conn, drain_msg);
    struct conn *c = ic->c;
    if (!c->closing && ic->phase != ISCSI_PHASE_CLOSED) {
        ic->draining = true;
        if (ic->phase != ISCSI_PHASE_FULL_FEATURE) {
            conn_close(c);
        } else {
            conn_pause_input(c, true);
            drain_check(ic);
        }
    }
    conn_put(c);
}

int iscsi_conn_enter_full_feature(struct iscsi_conn *ic)
{
    ic->phase = ISCSI_PHASE_FULL_FEATURE;
    admit_promote(&ic->ticket);
    /* The NOP timer was set for the login deadline: back to its pace. */
    reactor_timer_cancel(ic->c->reactor, &ic->nop_timer);
    reactor_timer_start(ic->c->reactor, &ic->nop_timer, 1000000000ull);
    conn_input_reserve(ic->c, ISCSI_BHS_LEN + ISCSI_AHS_MAX + 8 + ic->params.max_recv_dsl + 4);
    return 0;
}

static void conn_on_close(struct conn *c)
{
    struct iscsi_conn *ic = c->proto;
    if (!ic)
        return;
    ic->phase = ISCSI_PHASE_CLOSED;
    reactor_timer_cancel(c->reactor, &ic->nop_timer);
    if (ic->sess)
        iscsi_session_unregister(ic->sess);
    /* Tasks waiting for data never execute; executing ones finish and
     * drop their replies (task_done sees PHASE_CLOSED). */
    struct iscsi_task *t = ic->tasks, *next;
    for (; t; t = next) {
        next = t->next;
        if (!t->executing && !t->replied)
            task_free(t);
    }
}

static void conn_on_free(struct conn *c)
{
    struct iscsi_conn *ic = c->proto;
    if (!ic)
        return;
    struct iscsi_session *s = ic->sess;
    if (s) {
        if (s->view) {
            for (size_t i = 0; i < s->view->n_luns; i++)
                scsi_lu_nexus_lost(s->view->luns[i].lu, &s->nexus);
            iscsi_target_view_unref(s->view);
        }
        free(s);
    }
    if (ic->login)
        iscsi_login_free(ic->login);
    while (ic->free_tasks) {
        struct iscsi_task *t = ic->free_tasks;
        ic->free_tasks = t->next;
        free(t);
    }
    iscsi_text_out_free(&ic->text_pending);
    admit_release(&ic->ticket);
    free(ic);
    c->proto = NULL;
}

const struct conn_ops iscsi_conn_ops = {
    .on_input = conn_on_input,
    .on_close = conn_on_close,
    .on_free = conn_on_free,
};

/* Called from the listener (via conn_adopt's init) on the owner reactor. */
int iscsi_conn_init(struct conn *c, uint16_t portal_tag, const struct sockaddr *local,
                    socklen_t locallen);
int iscsi_conn_init(struct conn *c, uint16_t portal_tag, const struct sockaddr *local,
                    socklen_t locallen)
{
    struct iscsi_conn *ic = calloc(1, sizeof(*ic));
    if (!ic)
        return -ENOMEM;
    ic->login = calloc(1, sizeof(*ic->login));
    if (!ic->login) {
        free(ic);
        return -ENOMEM;
    }
    ic->c = c;
    ic->phase = ISCSI_PHASE_LOGIN;
    ic->portal_tag = portal_tag;
    iscsi_params_default(&ic->params);
    ic->text_ttt = ISCSI_RESERVED_TAG;
    if (local && locallen <= sizeof(ic->local_sa)) {
        memcpy(&ic->local_sa, local, locallen);
        format_sockaddr(local, locallen, ic->local_addr, sizeof(ic->local_addr));
    }
    socklen_t pl = sizeof(ic->peer_sa);
    getpeername(c->fd, (struct sockaddr *)&ic->peer_sa, &pl);
    if (!local) {
        socklen_t ll = sizeof(ic->local_sa);
        if (getsockname(c->fd, (struct sockaddr *)&ic->local_sa, &ll) == 0)
            format_sockaddr((struct sockaddr *)&ic->local_sa, ll, ic->local_addr,
                            sizeof(ic->local_addr));
    }
    iscsi_chap_random(&ic->stat_sn, sizeof(ic->stat_sn));
    iscsi_chap_random(&ic->ttt_next, sizeof(ic->ttt_next));
    c->proto = ic;
    ic->last_rx_ns = time_now_ns();
    ic->login_deadline_ns = ic->last_rx_ns + admit_handshake_timeout_ns();
    reactor_timer_init(&ic->nop_timer, nop_timer_fire);
    reactor_timer_start(c->reactor, &ic->nop_timer, admit_handshake_timeout_ns());
    return 0;
}
