/*
 * One NVMe/TCP connection (nvme_internal.h): admission, ICReq/ICResp, the
 * PDU reader, command slots, responses and C2HData, terminate requests,
 * close. Runs on the connection's reactor thread. The reader is a state
 * machine over the connection's input buffer: a PDU's header is checked
 * (nvme_tcp_ch_check) before anything is allocated for its data, and data
 * is copied into the command's pool buffer as it arrives, so the input
 * buffer never has to hold a whole payload.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/bufpool.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_target.h"

static struct registry queues = REGISTRY_INIT(0);
static atomic_uint live; /* connections not freed yet */
static atomic_bool draining_all;
static struct admit_gate nvme_gate = ADMIT_GATE_INIT("nvme", 4096);

#define SC_TRANSIENT_TRANSPORT 0x22

/* ---- slots ---- */

static struct nvme_cmd *slot_get(struct nvme_queue *q)
{
    if (q->nfree == 0)
        return NULL;
    struct nvme_cmd *cmd = &q->slots[q->free_tags[--q->nfree]];
    uint16_t tag = cmd->tag;
    memset(cmd, 0, sizeof(*cmd));
    cmd->q = q;
    cmd->tag = tag;
    cmd->state = CMD_EXEC;
    q->inflight++;
    conn_get(q->c);
    return cmd;
}

static void r2t_send(struct nvme_cmd *cmd);

/* Send the deferred R2Ts the payload bound allows now, in arrival order. */
static void r2t_flush(struct nvme_queue *q)
{
    while (q->r2t_head && !q->c->closing &&
           (q->held == 0 || q->held + q->r2t_head->data_len <= NVME_HELD_MAX)) {
        struct nvme_cmd *cmd = q->r2t_head;
        q->r2t_head = cmd->r2t_next;
        if (!q->r2t_head)
            q->r2t_tail = NULL;
        r2t_send(cmd);
    }
}

/* Shutdown: close once no command is running or being sent (those waiting
 * for host data will get none: they were never acknowledged). */
static void drain_check(struct nvme_queue *q)
{
    for (unsigned i = 0; i < q->nslots; i++) {
        const struct nvme_cmd *cmd = &q->slots[i];
        if ((cmd->state == CMD_EXEC && !cmd->aer) || cmd->state == CMD_SEND)
            return;
    }
    conn_close(q->c);
}

static void resume_run(struct reactor_msg *m)
{
    struct nvme_queue *q = container_of(m, struct nvme_queue, resume_msg);
    q->resume_posted = false;
    if (!q->c->closing && q->draining) {
        drain_check(q);
    } else if (!q->c->closing) {
        r2t_flush(q);
        if (q->held_paused && q->held <= NVME_HELD_MAX / 2) {
            q->held_paused = false;
            conn_pause_input(q->c, false);
        }
    }
    conn_put(q->c);
}

static void slot_free(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    struct conn *c = q->c;
    if (cmd->buf) {
        q->held -= cmd->buf_size;
        bufpool_put(cmd->buf, cmd->buf_size);
        cmd->buf = NULL;
    }
    if (cmd->vol) {
        volume_unref(cmd->vol);
        cmd->vol = NULL;
    }
    cmd->state = CMD_FREE;
    q->free_tags[q->nfree++] = cmd->tag;
    q->inflight--;
    bool wake = (q->held_paused && q->held <= NVME_HELD_MAX / 2) || q->r2t_head || q->draining;
    if (wake && !q->resume_posted && !c->closing) {
        q->resume_posted = true;
        conn_get(c);
        q->resume_msg.fn = resume_run;
        reactor_post(c->reactor, &q->resume_msg);
    }
    conn_put(c);
}

static void cmd_release(void *arg)
{
    struct nvme_cmd *cmd = arg;
    if (--cmd->pending == 0)
        slot_free(cmd);
}

int nvme_cmd_buf(struct nvme_cmd *cmd, size_t size)
{
    if (cmd->buf && cmd->buf_size >= size)
        return 0;
    if (cmd->buf) {
        cmd->q->held -= cmd->buf_size;
        bufpool_put(cmd->buf, cmd->buf_size);
    }
    size = size ? size : 1;
    cmd->buf = bufpool_get(size);
    if (!cmd->buf)
        return -ENOMEM;
    cmd->buf_size = size;
    cmd->q->held += size;
    return 0;
}

/* ---- sending ---- */

static uint32_t hd_len(const struct nvme_queue *q)
{
    return q->hdgst ? NVME_TCP_DIGEST_LEN : 0;
}

/* Where data starts in a PDU we send: after the header and its digest,
 * aligned as the host asked (HPDA). */
static uint32_t send_pdo(const struct nvme_queue *q, uint32_t hlen)
{
    uint32_t align = (q->hpda + 1u) * 4u;
    return (hlen + hd_len(q) + align - 1) / align * align;
}

static void header_digest(const struct nvme_queue *q, uint8_t *h, uint32_t hlen)
{
    if (q->hdgst)
        le32_put(h + hlen, crc32c(0, h, hlen));
}

static void send_c2h(struct nvme_cmd *cmd, uint32_t off, uint32_t n, bool last, bool success)
{
    struct nvme_queue *q = cmd->q;
    uint8_t h[NVME_TCP_DATA_HLEN + NVME_TCP_DIGEST_LEN + 128] = {0};
    uint32_t pdo = send_pdo(q, NVME_TCP_DATA_HLEN);
    uint32_t dd = q->ddgst ? NVME_TCP_DIGEST_LEN : 0;
    uint8_t flags = (q->hdgst ? NVME_TCP_F_HDGST : 0) | (q->ddgst ? NVME_TCP_F_DDGST : 0) |
                    (last ? NVME_TCP_F_DATA_LAST : 0) | (success ? NVME_TCP_F_DATA_SUCCESS : 0);
    nvme_tcp_ch_build(h, NVME_TCP_C2H_DATA, flags, NVME_TCP_DATA_HLEN, (uint8_t)pdo, pdo + n + dd);
    le16_put(h + 8, cmd->cid);
    le32_put(h + 12, off);
    le32_put(h + 16, n);
    header_digest(q, h, NVME_TCP_DATA_HLEN);
    conn_send_copy(q->c, h, pdo);
    struct iovec iov = {cmd->buf + off, n};
    cmd->pending++;
    conn_send(q->c, &iov, 1, cmd_release, cmd);
    if (dd) {
        uint8_t d[4];
        le32_put(d, crc32c(0, cmd->buf + off, n));
        conn_send_copy(q->c, d, sizeof(d));
    }
}

static void send_resp(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    uint8_t h[NVME_TCP_RSP_HLEN + NVME_TCP_DIGEST_LEN];
    nvme_tcp_ch_build(h, NVME_TCP_RSP, q->hdgst ? NVME_TCP_F_HDGST : 0, NVME_TCP_RSP_HLEN, 0,
                      NVME_TCP_RSP_HLEN + hd_len(q));
    uint16_t sqhd = q->sqflow_off ? 0xffff : q->sqhd;
    nvme_cqe_build(h + 8, cmd->result, sqhd, q->qid, cmd->cid, cmd->status,
                   cmd->status != SC_TRANSIENT_TRANSPORT);
    header_digest(q, h, NVME_TCP_RSP_HLEN);
    conn_send_copy(q->c, h, NVME_TCP_RSP_HLEN + hd_len(q));
}

void nvme_cmd_complete(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    if (cmd->vol) {
        volume_unref(cmd->vol);
        cmd->vol = NULL;
    }
    if (q->c->closing) {
        slot_free(cmd);
        return;
    }
    cmd->state = CMD_SEND;
    cmd->pending = 1;
    bool success = false;
    if (cmd->status == NVME_SC_SUCCESS && cmd->out_len > 0) {
        /* Never more than the host's buffer (its SGL) holds. */
        uint32_t total = MIN(cmd->out_len, cmd->data_len);
        /* With SQ flow control off the host needs no SQHD: the last
         * C2HData may carry the completion (SUCCESS), no response PDU. */
        success = q->sqflow_off && total > 0;
        for (uint32_t off = 0; off < total; off += NVME_C2H_CHUNK) {
            uint32_t n = MIN(NVME_C2H_CHUNK, total - off);
            bool last = off + n == total;
            send_c2h(cmd, off, n, last, last && success);
        }
    }
    if (!success)
        send_resp(cmd);
    cmd_release(cmd);
}

static void r2t_send(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    if (nvme_cmd_buf(cmd, cmd->data_len) < 0) {
        cmd->status = NVME_SC_INTERNAL;
        nvme_cmd_complete(cmd);
        return;
    }
    uint8_t h[NVME_TCP_R2T_HLEN + NVME_TCP_DIGEST_LEN];
    nvme_tcp_ch_build(h, NVME_TCP_R2T, q->hdgst ? NVME_TCP_F_HDGST : 0, NVME_TCP_R2T_HLEN, 0,
                      NVME_TCP_R2T_HLEN + hd_len(q));
    le16_put(h + 8, cmd->cid);
    le16_put(h + 10, cmd->tag);
    le32_put(h + 12, 0);
    le32_put(h + 16, cmd->data_len);
    le32_put(h + 20, 0);
    header_digest(q, h, NVME_TCP_R2T_HLEN);
    cmd->state = CMD_WAIT_DATA;
    cmd->got = 0;
    conn_send_copy(q->c, h, NVME_TCP_R2T_HLEN + hd_len(q));
}

void nvme_cmd_request_data(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    /* Past the payload bound, the R2T waits for buffers to be released
     * (the host keeps sending commands and the data of earlier R2Ts). */
    if (q->r2t_head || (q->held > 0 && q->held + cmd->data_len > NVME_HELD_MAX)) {
        if (!q->held_logged)
            log_warn("%s: nvme: queue %u holds %zu payload bytes: R2Ts wait for some to be "
                     "released",
                     q->c->peer, q->qid, q->held);
        q->held_logged = true;
        cmd->state = CMD_WAIT_R2T;
        cmd->r2t_next = NULL;
        if (q->r2t_tail)
            q->r2t_tail->r2t_next = cmd;
        else
            q->r2t_head = cmd;
        q->r2t_tail = cmd;
        return;
    }
    r2t_send(cmd);
}

int nvme_conn_fatal(struct nvme_queue *q, int fes, uint32_t fei, const uint8_t *hdr, size_t hlen,
                    const char *why)
{
    struct conn *c = q->c;
    log_warn("%s: nvme: %s (FES 0x%02x, field at byte %u): terminating the connection", c->peer,
             why, fes, fei);
    uint8_t t[NVME_TCP_TERM_HLEN + NVME_TCP_TERM_DATA_MAX] = {0};
    size_t n = MIN(hlen, (size_t)NVME_TCP_TERM_DATA_MAX);
    nvme_tcp_ch_build(t, NVME_TCP_C2H_TERM, 0, NVME_TCP_TERM_HLEN, 0,
                      (uint32_t)(NVME_TCP_TERM_HLEN + n));
    le16_put(t + 8, (uint16_t)fes);
    le32_put(t + 10, fei);
    if (n)
        memcpy(t + NVME_TCP_TERM_HLEN, hdr, n);
    conn_send_copy(c, t, NVME_TCP_TERM_HLEN + n);
    conn_close(c);
    return -EPROTO;
}

/* ---- commands ---- */

struct nvme_subsys *nvme_queue_subsys(struct nvme_queue *q)
{
    struct nvme_ctrl *ctrl = q->ctrl;
    if (!ctrl)
        return NULL;
    unsigned g = atomic_load(&ctrl->subsys_gen);
    if (!q->subsys || g != q->subsys_gen) {
        pthread_mutex_lock(&ctrl->lock);
        struct nvme_subsys *old = q->subsys;
        q->subsys = ctrl->subsys;
        if (q->subsys)
            nvme_subsys_ref(q->subsys);
        q->subsys_gen = atomic_load(&ctrl->subsys_gen);
        pthread_mutex_unlock(&ctrl->lock);
        nvme_subsys_unref(old);
    }
    return q->subsys;
}

void nvme_cmd_dispatch(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    cmd->state = CMD_EXEC;
    if (cmd->sqe[NVME_SQE_OPC] == NVME_FABRICS) {
        nvme_fabrics_exec(cmd);
        return;
    }
    if (q->state != QS_LIVE) {
        cmd->status = NVME_SC_CMD_SEQ_ERROR; /* Connect first */
        nvme_cmd_complete(cmd);
        return;
    }
    nvme_ctrl_seen(q->ctrl);
    if (q->qid == 0)
        nvme_admin_exec(cmd);
    else
        nvme_io_exec(cmd);
}

/* The SGL of a new command against the in-capsule data it came with:
 * 0, or the status to fail it with. */
static uint16_t cmd_sgl(struct nvme_cmd *cmd, uint32_t incap)
{
    const uint8_t *sgl = cmd->sqe + NVME_SQE_DPTR;
    uint8_t type = sgl[15];
    uint32_t len = le32_get(sgl + 8);
    cmd->sgl_type = type;
    if ((cmd->sqe[NVME_SQE_FLAGS] & NVME_SQE_PSDT_MASK) == 0 && cmd->sqe[0] != NVME_FABRICS)
        return incap ? NVME_SC_INVALID_FIELD : 0; /* PRPs mean nothing over a fabric */
    switch (type) {
    case NVME_SGL_DATA_OFFSET:
        /* ICDOFF is 0: in-capsule data starts at offset 0. */
        if (le64_get(sgl) != 0 || len != incap)
            return NVME_SC_SGL_INVALID_DATA;
        cmd->data_len = len;
        cmd->data_ready = true;
        return 0;
    case NVME_SGL_TRANSPORT_DATA:
        if (incap)
            return NVME_SC_SGL_INVALID_TYPE;
        if (len > NVME_MAX_XFER)
            return NVME_SC_INVALID_FIELD;
        cmd->data_len = len;
        return 0;
    case NVME_SGL_KEYED_DATA:
    case 0x00:
        if (incap || len != 0)
            return NVME_SC_SGL_INVALID_TYPE;
        return 0;
    default:
        return NVME_SC_SGL_INVALID_TYPE;
    }
}

static void cmd_start(struct nvme_cmd *cmd, uint32_t incap)
{
    uint16_t st = cmd_sgl(cmd, incap);
    if (st) {
        cmd->status = st;
        nvme_cmd_complete(cmd);
        return;
    }
    nvme_cmd_dispatch(cmd);
}

/* ---- reader ---- */

static void rx_begin(struct nvme_queue *q, struct nvme_cmd *cmd, uint8_t *dst, uint32_t len,
                     uint32_t pad)
{
    q->rx_cmd = cmd;
    q->rx_dst = dst;
    q->rx_left = len;
    q->rx_pad = pad;
    q->rx_crc = 0;
    q->rx = pad ? RX_PAD : RX_DATA;
}

static uint32_t inline_limit(const struct nvme_queue *q)
{
    return q->state == QS_LIVE && q->qid != 0 ? q->port.inline_data_size : NVME_ADMIN_INLINE;
}

/* Whether a command waits for H2CData: reading must go on for it. */
static bool waiting_for_data(const struct nvme_queue *q)
{
    for (unsigned i = 0; i < q->nslots; i++)
        if (q->slots[i].state == CMD_WAIT_DATA)
            return true;
    return false;
}

static int on_capsule(struct nvme_queue *q, const uint8_t *hdr, uint32_t data_len)
{
    if (q->held > NVME_HELD_MAX && !waiting_for_data(q)) {
        if (!q->held_logged)
            log_warn("%s: nvme: queue %u holds %zu payload bytes: reading paused until some "
                     "are released",
                     q->c->peer, q->qid, q->held);
        q->held_logged = true;
        q->held_paused = true;
        conn_pause_input(q->c, true);
        return 1;
    }
    struct nvme_cmd *cmd = slot_get(q);
    if (!cmd)
        return nvme_conn_fatal(q, NVME_TCP_FES_PDU_SEQ, 0, hdr, q->ch.hlen,
                               "more commands outstanding than the queue holds");
    memcpy(cmd->sqe, hdr + NVME_TCP_CH_LEN, NVME_SQE_LEN);
    cmd->cid = le16_get(cmd->sqe + NVME_SQE_CID);
    uint32_t hd = hd_len(q);
    conn_consume(q->c, q->ch.hlen + hd);
    if (q->sqsize)
        q->sqhd = (uint16_t)((q->sqhd + 1) % q->sqsize);
    if (data_len == 0) {
        cmd_start(cmd, 0);
        return 0;
    }
    if (nvme_cmd_buf(cmd, data_len) < 0) {
        slot_free(cmd);
        log_error("%s: nvme: out of memory for %u bytes of in-capsule data", q->c->peer, data_len);
        return -ENOMEM;
    }
    cmd->state = CMD_RX;
    rx_begin(q, cmd, cmd->buf, data_len, q->ch.pdo - q->ch.hlen - hd);
    return 0;
}

static int on_h2c_data(struct nvme_queue *q, const uint8_t *hdr, uint32_t data_len)
{
    uint16_t cid = le16_get(hdr + 8), ttag = le16_get(hdr + 10);
    uint32_t datao = le32_get(hdr + 12), datal = le32_get(hdr + 16);
    size_t hl = q->ch.hlen;
    if (ttag >= q->nslots || q->slots[ttag].state != CMD_WAIT_DATA)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 10, hdr, hl,
                               "H2CData for a transfer tag not waiting for data");
    struct nvme_cmd *cmd = &q->slots[ttag];
    if (cid != cmd->cid)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 8, hdr, hl,
                               "H2CData names another command than its transfer tag");
    if (datal != data_len)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 16, hdr, hl,
                               "H2CData length differs from the PDU's data");
    if ((uint64_t)datao + datal > cmd->data_len)
        return nvme_conn_fatal(q, NVME_TCP_FES_DATA_RANGE, 12, hdr, hl,
                               "H2CData beyond the command's transfer");
    if (datao != cmd->got)
        return nvme_conn_fatal(q, NVME_TCP_FES_PDU_SEQ, 12, hdr, hl, "H2CData out of order");
    conn_consume(q->c, hl + hd_len(q));
    rx_begin(q, cmd, cmd->buf + datao, datal, q->ch.pdo - q->ch.hlen - hd_len(q));
    return 0;
}

static int on_term(struct nvme_queue *q, const uint8_t *hdr)
{
    log_warn("%s: nvme: the host terminated the connection (H2CTermReq FES 0x%02x, field %u)",
             q->c->peer, le16_get(hdr + 8), le32_get(hdr + 10));
    conn_close(q->c);
    return -ECONNRESET;
}

static int on_icreq(struct nvme_queue *q)
{
    struct conn *c = q->c;
    const uint8_t *p = conn_input(c);
    struct nvme_tcp_ch ch;
    nvme_tcp_ch_parse(p, &ch);
    if (ch.type != NVME_TCP_ICREQ)
        return nvme_conn_fatal(q, NVME_TCP_FES_PDU_SEQ, 0, p, NVME_TCP_CH_LEN,
                               "first PDU is not an ICReq");
    if (ch.hlen != NVME_TCP_IC_LEN)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 2, p, NVME_TCP_CH_LEN,
                               "ICReq HLEN is not 128");
    if (ch.plen != NVME_TCP_IC_LEN)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 4, p, NVME_TCP_CH_LEN,
                               "ICReq PLEN is not 128");
    if (conn_input_len(c) < NVME_TCP_IC_LEN)
        return 1;
    if (le16_get(p + 8) != 0)
        return nvme_conn_fatal(q, NVME_TCP_FES_UNSUPPORTED, 8, p, NVME_TCP_IC_LEN,
                               "ICReq PFV is not 0");
    if (p[10] > 31)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 10, p, NVME_TCP_IC_LEN,
                               "ICReq HPDA above 31");
    q->hpda = p[10];
    q->hdgst = (p[11] & NVME_TCP_HDGST_ENABLE) != 0;
    q->ddgst = (p[11] & NVME_TCP_DDGST_ENABLE) != 0;
    conn_consume(c, NVME_TCP_IC_LEN);
    uint8_t r[NVME_TCP_IC_LEN] = {0};
    nvme_tcp_ch_build(r, NVME_TCP_ICRESP, 0, NVME_TCP_IC_LEN, 0, NVME_TCP_IC_LEN);
    r[10] = 0; /* CPDA: data may follow the header directly */
    r[11] =
        (uint8_t)((q->hdgst ? NVME_TCP_HDGST_ENABLE : 0) | (q->ddgst ? NVME_TCP_DDGST_ENABLE : 0));
    le32_put(r + 12, NVME_MAXH2CDATA);
    conn_send_copy(c, r, sizeof(r));
    q->state = QS_CONNECT;
    log_debug("%s: nvme: ICReq (digests: header %s, data %s)", c->peer, q->hdgst ? "on" : "off",
              q->ddgst ? "on" : "off");
    return 0;
}

static int read_header(struct nvme_queue *q)
{
    struct conn *c = q->c;
    if (conn_input_len(c) < NVME_TCP_CH_LEN)
        return 1;
    if (q->state == QS_IC)
        return on_icreq(q);
    const uint8_t *p = conn_input(c);
    nvme_tcp_ch_parse(p, &q->ch);
    uint32_t data_len, fei = 0;
    uint32_t max = q->ch.type == NVME_TCP_CMD ? inline_limit(q) : NVME_MAXH2CDATA;
    int fes = nvme_tcp_ch_check(&q->ch, q->hdgst, q->ddgst, max, &data_len, &fei);
    if (fes)
        return nvme_conn_fatal(q, fes, fei, p, MIN(conn_input_len(c), (size_t)q->ch.hlen),
                               "invalid PDU header");
    bool term = q->ch.type == NVME_TCP_H2C_TERM;
    uint32_t need = q->ch.hlen + (term ? 0 : hd_len(q));
    if (conn_input_len(c) < need)
        return conn_input_reserve(c, need) < 0 ? -ENOMEM : 1;
    p = conn_input(c);
    if (!term && q->hdgst && le32_get(p + q->ch.hlen) != crc32c(0, p, q->ch.hlen))
        return nvme_conn_fatal(q, NVME_TCP_FES_HDGST, 0, p, q->ch.hlen, "header digest error");
    if (term)
        return on_term(q, p);
    if (q->ch.type == NVME_TCP_CMD)
        return on_capsule(q, p, data_len);
    return on_h2c_data(q, p, data_len);
}

/* A payload has fully arrived (with its digest checked). */
static void rx_done(struct nvme_queue *q)
{
    struct nvme_cmd *cmd = q->rx_cmd;
    uint32_t len = (uint32_t)(q->rx_dst - cmd->buf);
    q->rx = RX_HEADER;
    q->rx_cmd = NULL;
    if (cmd->state == CMD_RX) { /* in-capsule */
        if (cmd->ddgst_bad) {
            cmd->status = SC_TRANSIENT_TRANSPORT;
            nvme_cmd_complete(cmd);
            return;
        }
        cmd_start(cmd, len);
        return;
    }
    cmd->got = len;
    if (cmd->got < cmd->data_len)
        return; /* more H2CData to come */
    cmd->data_ready = true;
    if (cmd->ddgst_bad) {
        cmd->status = SC_TRANSIENT_TRANSPORT;
        nvme_cmd_complete(cmd);
        return;
    }
    nvme_cmd_dispatch(cmd);
}

static int read_payload(struct nvme_queue *q)
{
    struct conn *c = q->c;
    size_t avail = conn_input_len(c);
    switch (q->rx) {
    case RX_PAD: {
        size_t n = MIN(avail, (size_t)q->rx_pad);
        conn_consume(c, n);
        q->rx_pad -= (uint32_t)n;
        if (q->rx_pad == 0)
            q->rx = RX_DATA;
        return 0;
    }
    case RX_DATA: {
        size_t n = MIN(avail, (size_t)q->rx_left);
        memcpy(q->rx_dst, conn_input(c), n);
        if (q->ddgst)
            q->rx_crc = crc32c(q->rx_crc, q->rx_dst, n);
        conn_consume(c, n);
        q->rx_dst += n;
        q->rx_left -= (uint32_t)n;
        if (q->rx_left == 0) {
            if (q->ddgst)
                q->rx = RX_DDGST;
            else
                rx_done(q);
        }
        return 0;
    }
    case RX_DDGST:
        if (avail < NVME_TCP_DIGEST_LEN)
            return 1;
        if (le32_get(conn_input(c)) != q->rx_crc) {
            log_warn("%s: nvme: data digest error on queue %u, command %u: failed with a "
                     "transient transport error",
                     c->peer, q->qid, q->rx_cmd->cid);
            q->rx_cmd->ddgst_bad = true;
        }
        conn_consume(c, NVME_TCP_DIGEST_LEN);
        rx_done(q);
        return 0;
    default:
        return -EINVAL;
    }
}

static int nvme_on_input(struct conn *c)
{
    struct nvme_queue *q = c->proto;
    int rc = 0;
    while (rc == 0 && !c->closing && conn_input_len(c) > 0 && !q->held_paused && !q->draining)
        rc = q->rx == RX_HEADER ? read_header(q) : read_payload(q);
    return rc < 0 ? rc : 0;
}

/* ---- life ---- */

static void nvme_on_close(struct conn *c)
{
    struct nvme_queue *q = c->proto;
    if (!q)
        return;
    registry_remove(&queues, &q->reg);
    if (reactor_timer_armed(&q->hs_timer)) {
        reactor_timer_cancel(c->reactor, &q->hs_timer);
        conn_put(c);
    }
    if (reactor_timer_armed(&q->ka_timer)) {
        reactor_timer_cancel(c->reactor, &q->ka_timer);
        conn_put(c);
    }
    if (reactor_timer_armed(&q->disc_timer)) {
        reactor_timer_cancel(c->reactor, &q->disc_timer);
        conn_put(c);
    }
    /* Slots with nothing in flight: waiting for host data or an R2T, or
     * AERs held. */
    q->r2t_head = q->r2t_tail = NULL;
    for (unsigned i = 0; i < q->nslots; i++) {
        struct nvme_cmd *cmd = &q->slots[i];
        if (cmd->state == CMD_RX || cmd->state == CMD_WAIT_DATA || cmd->state == CMD_WAIT_R2T ||
            (cmd->state == CMD_EXEC && cmd->aer))
            slot_free(cmd);
    }
    if (q->ctrl)
        nvme_ctrl_queue_closed(q);
    log_debug("%s: nvme: connection closed", c->peer);
}

static void nvme_on_free(struct conn *c)
{
    struct nvme_queue *q = c->proto;
    if (!q)
        return;
    nvme_subsys_unref(q->subsys);
    if (q->ctrl)
        nvme_ctrl_unref(q->ctrl);
    admit_release(&q->ticket);
    free(q->slots);
    free(q->free_tags);
    free(q);
    c->proto = NULL;
    atomic_fetch_sub(&live, 1);
}

unsigned nvme_conn_live(void)
{
    return atomic_load(&live);
}

static const struct conn_ops nvme_conn_ops = {
    .on_input = nvme_on_input,
    .on_close = nvme_on_close,
    .on_free = nvme_on_free,
};

static void handshake_expired(struct reactor_timer *t)
{
    struct nvme_queue *q = container_of(t, struct nvme_queue, hs_timer);
    struct conn *c = q->c;
    if (!c->closing && q->state != QS_LIVE) {
        admit_log(&nvme_gate, "%s: nvme: no ICReq and Connect within %u s, closing", c->peer,
                  admit_handshake_timeout_s());
        conn_close(c);
    }
    conn_put(c);
}

static int nvme_conn_init(struct conn *c, void *arg)
{
    struct nvme_queue *q = arg;
    q->c = c;
    c->proto = q;
    registry_add(&queues, &q->reg);
    conn_get(c);
    reactor_timer_start(c->reactor, &q->hs_timer, admit_handshake_timeout_ns());
    return 0;
}

/* The port's settings as the connection starts; defaults for the
 * discovery-only listener or a port not (or no longer) published. */
static void queue_port(struct nvme_queue *q, int64_t port_id)
{
    struct nvme_conf *conf = nvme_conf_current();
    const struct nvme_port *p = nvme_conf_find_port(conf, port_id);
    q->port_id = port_id;
    if (p) {
        q->port = *p;
        q->port_known = true;
    }
    nvme_conf_unref(conf);
    if (q->port.max_queue_size == 0 || q->port.max_queue_size > NVME_QSIZE_MAX)
        q->port.max_queue_size = q->port.max_queue_size ? NVME_QSIZE_MAX : NVME_DEFAULT_QSIZE;
    if (q->port.inline_data_size > NVME_INLINE_MAX)
        q->port.inline_data_size = NVME_INLINE_MAX;
    if (!p)
        q->port.inline_data_size = NVME_DEFAULT_INLINE;
}

static int queue_slots(struct nvme_queue *q)
{
    q->nslots = MAX((unsigned)NVME_ADMIN_QSIZE, q->port.max_queue_size);
    q->slots = calloc(q->nslots, sizeof(*q->slots));
    q->free_tags = calloc(q->nslots, sizeof(*q->free_tags));
    if (!q->slots || !q->free_tags)
        return -ENOMEM;
    for (unsigned i = 0; i < q->nslots; i++) {
        q->slots[i].tag = (uint16_t)i;
        q->free_tags[i] = (uint16_t)(q->nslots - 1 - i);
    }
    q->nfree = q->nslots;
    return 0;
}

void nvme_target_accept(int fd, const struct sockaddr *peer, socklen_t peerlen,
                        const struct sockaddr *local, socklen_t locallen, void *arg)
{
    (void)local;
    (void)locallen;
    char name[80];
    format_sockaddr(peer, peerlen, name, sizeof(name));
    struct nvme_queue *q = NULL;
    if (atomic_load(&draining_all))
        goto refuse;
    q = calloc(1, sizeof(*q));
    if (!q || (queue_port(q, (int64_t)(intptr_t)arg), queue_slots(q)) < 0) {
        log_error("%s: nvme: out of memory for a connection", name);
        goto refuse;
    }
    if (admit_try(&nvme_gate, fd, peer, peerlen, name, &q->ticket) < 0)
        goto refuse; /* logged by admit */
    reactor_timer_init(&q->hs_timer, handshake_expired);
    reactor_timer_init(&q->ka_timer, NULL);   /* nvme_ctrl_ka_start sets it */
    reactor_timer_init(&q->disc_timer, NULL); /* nvme_ctrl_disc_watch_start */
    atomic_fetch_add(&live, 1);
    if (conn_adopt(reactor_next(), fd, peer, peerlen, &nvme_conn_ops, nvme_conn_init, q) == 0)
        return;
    atomic_fetch_sub(&live, 1);
    admit_release(&q->ticket);
    fd = -1; /* conn_adopt closed it */
refuse:
    if (q) {
        free(q->slots);
        free(q->free_tags);
        free(q);
    }
    if (fd >= 0)
        close(fd);
}

void nvme_conn_connected(struct nvme_queue *q)
{
    q->state = QS_LIVE;
    admit_promote(&q->ticket);
    if (reactor_timer_armed(&q->hs_timer)) {
        reactor_timer_cancel(q->c->reactor, &q->hs_timer);
        conn_put(q->c);
    }
}

static void drain_run(struct reactor_msg *m)
{
    struct nvme_queue *q = container_of(m, struct nvme_queue, drain_msg);
    struct conn *c = q->c;
    if (!c->closing) {
        q->draining = true;
        conn_pause_input(c, true);
        drain_check(q);
    }
    conn_put(c);
}

unsigned nvme_target_drain(unsigned timeout_ms)
{
    atomic_store(&draining_all, true);
    registry_lock(&queues);
    REGISTRY_FOREACH (&queues, e) {
        struct nvme_queue *q = container_of(e, struct nvme_queue, reg);
        conn_get(q->c);
        q->drain_msg.fn = drain_run;
        reactor_post(q->c->reactor, &q->drain_msg);
    }
    registry_unlock(&queues);
    uint64_t end = time_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (nvme_conn_live() > 0 && time_now_ns() < end)
        usleep(5000);
    unsigned left = nvme_conn_live();
    if (left) {
        log_warn("nvme: %u connections still busy after %u ms of shutdown, closing them", left,
                 timeout_ms);
        nvme_conn_close_all();
    }
    return left;
}

void nvme_conn_close_all(void)
{
    atomic_store(&draining_all, true);
    registry_lock(&queues);
    REGISTRY_FOREACH (&queues, e)
        conn_close_async(container_of(e, struct nvme_queue, reg)->c);
    registry_unlock(&queues);
}

void nvme_conn_reopen(void)
{
    atomic_store(&draining_all, false);
}
