/*
 * The PDU reader of a queue (nvme_internal.h): a state machine over the
 * connection's input buffer. A PDU's common header is checked
 * (nvme_tcp_ch_check) and its header digest verified before anything is
 * allocated for its data; data is copied into the command's pool buffer as
 * it arrives (the input buffer never holds a whole payload), its digest
 * computed on the way. Then the command's SGL is checked and it is
 * dispatched (Fabrics, admin or I/O). Owner reactor only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/iostats.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"

/* The metrics slots of s's namespaces (a mutex each: once per change of
 * the queue's subsystem, not per command). */
static int *queue_mslots(const struct nvme_subsys *s)
{
    int *m = s && s->nns ? malloc(s->nns * sizeof(*m)) : NULL;
    for (size_t i = 0; m && i < s->nns; i++) {
        m[i] = s->ns[i].vol ? iostats_slot(volume_name(s->ns[i].vol)) : -1;
        iostats_bind(m[i], IOSTATS_NVME);
    }
    return m;
}

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
        free(q->mslots);
        q->mslots = q->qid ? queue_mslots(q->subsys) : NULL;
    }
    return q->subsys;
}

void nvme_cmd_dispatch(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    cmd->state = CMD_EXEC;
    if (q->auth_pending && !nvme_auth_allows(cmd->sqe)) {
        cmd->status = NVME_SC_AUTH_REQUIRED; /* the queue has not authenticated */
        nvme_cmd_complete(cmd);
        return;
    }
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
    if (!nvme_held_room(q, 0) && !waiting_for_data(q)) {
        if (!q->held_logged)
            log_warn("%s: nvme: queue %u holds %zu payload bytes (at its bound or the target's): "
                     "reading paused until some "
                     "are released",
                     q->c->peer, q->qid, q->held);
        q->held_logged = true;
        q->held_paused = true;
        conn_pause_input(q->c, true);
        return 1;
    }
    struct nvme_cmd *cmd = nvme_slot_get(q);
    if (!cmd)
        return nvme_conn_fatal(q, NVME_TCP_FES_PDU_SEQ, 0, hdr, q->ch.hlen,
                               "more commands outstanding than the queue holds");
    memcpy(cmd->sqe, hdr + NVME_TCP_CH_LEN, NVME_SQE_LEN);
    cmd->cid = le16_get(cmd->sqe + NVME_SQE_CID);
    uint32_t hd = nvme_hd_len(q);
    conn_consume(q->c, q->ch.hlen + hd);
    if (q->sqsize)
        q->sqhd = (uint16_t)((q->sqhd + 1) % q->sqsize);
    if (data_len == 0) {
        cmd_start(cmd, 0);
        return 0;
    }
    if (nvme_cmd_buf(cmd, data_len) < 0) {
        nvme_slot_free(cmd);
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
    if (datal != data_len || datal == 0)
        return nvme_conn_fatal(q, NVME_TCP_FES_INVALID_HEADER, 16, hdr, hl,
                               "H2CData length zero or not the PDU's data length");
    if ((uint64_t)datao + datal > cmd->data_len)
        return nvme_conn_fatal(q, NVME_TCP_FES_DATA_RANGE, 12, hdr, hl,
                               "H2CData beyond the command's transfer");
    if (datao != cmd->got)
        return nvme_conn_fatal(q, NVME_TCP_FES_PDU_SEQ, 12, hdr, hl, "H2CData out of order");
    conn_consume(q->c, hl + nvme_hd_len(q));
    rx_begin(q, cmd, cmd->buf + datao, datal, q->ch.pdo - q->ch.hlen - nvme_hd_len(q));
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
    uint32_t need = q->ch.hlen + (term ? 0 : nvme_hd_len(q));
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
            cmd->status = NVME_SC_TRANSIENT_TRANSPORT;
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
        cmd->status = NVME_SC_TRANSIENT_TRANSPORT;
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

int nvme_conn_input(struct conn *c)
{
    struct nvme_queue *q = c->proto;
    int rc = 0;
    while (rc == 0 && !c->closing && conn_input_len(c) > 0 && !q->held_paused && !q->draining)
        rc = q->rx == RX_HEADER ? read_header(q) : read_payload(q);
    return rc < 0 ? rc : 0;
}
