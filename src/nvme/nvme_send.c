/*
 * What the target sends on a queue (nvme_internal.h): C2HData (split at
 * NVME_C2H_CHUNK, the data sent from the command's buffer without a copy),
 * CapsuleResp, R2T (deferred past the queue's payload bound), C2HTermReq.
 * Owner reactor only.
 */
#include <errno.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"

/* Where data starts in a PDU we send: after the header and its digest,
 * aligned as the host asked (HPDA). */
static uint32_t send_pdo(const struct nvme_queue *q, uint32_t hlen)
{
    uint32_t align = (q->hpda + 1u) * 4u;
    return (hlen + nvme_hd_len(q) + align - 1) / align * align;
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
    conn_send(q->c, &iov, 1, nvme_cmd_release, cmd);
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
                      NVME_TCP_RSP_HLEN + nvme_hd_len(q));
    uint16_t sqhd = q->sqflow_off ? 0xffff : q->sqhd;
    nvme_cqe_build(h + 8, cmd->result, sqhd, q->qid, cmd->cid, cmd->status,
                   cmd->status != NVME_SC_TRANSIENT_TRANSPORT &&
                       (cmd->status & 0x700) != NVME_SCT_PATH); /* path errors: retry elsewhere */
    header_digest(q, h, NVME_TCP_RSP_HLEN);
    conn_send_copy(q->c, h, NVME_TCP_RSP_HLEN + nvme_hd_len(q));
}

void nvme_cmd_complete(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    if (cmd->mt0)
        nvme_io_stats_done(cmd);
    if (cmd->vol) {
        volume_unref(cmd->vol);
        cmd->vol = NULL;
    }
    if (q->c->closing) {
        nvme_slot_free(cmd);
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
    nvme_cmd_release(cmd);
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
                      NVME_TCP_R2T_HLEN + nvme_hd_len(q));
    le16_put(h + 8, cmd->cid);
    le16_put(h + 10, cmd->tag);
    le32_put(h + 12, 0);
    le32_put(h + 16, cmd->data_len);
    le32_put(h + 20, 0);
    header_digest(q, h, NVME_TCP_R2T_HLEN);
    cmd->state = CMD_WAIT_DATA;
    cmd->got = 0;
    conn_send_copy(q->c, h, NVME_TCP_R2T_HLEN + nvme_hd_len(q));
}

void nvme_cmd_request_data(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    /* Past the payload bound, the R2T waits for buffers to be released
     * (the host keeps sending commands and the data of earlier R2Ts). */
    if (q->r2t_head || !nvme_held_room(q, cmd->data_len)) {
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

/* Send the deferred R2Ts the payload bound allows now, in arrival order. */
void nvme_r2t_flush(struct nvme_queue *q)
{
    while (q->r2t_head && !q->c->closing && nvme_held_room(q, q->r2t_head->data_len)) {
        struct nvme_cmd *cmd = q->r2t_head;
        q->r2t_head = cmd->r2t_next;
        if (!q->r2t_head)
            q->r2t_tail = NULL;
        r2t_send(cmd);
    }
}

/* Shutdown: close once no command is running or being sent (those waiting
 * for host data will get none: they were never acknowledged). */
