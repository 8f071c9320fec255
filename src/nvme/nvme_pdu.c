/*
 * NVMe/TCP common headers and completion entries (nvme_proto.h): the one
 * place that checks what a host's PDU header claims before anything is
 * read or allocated for it.
 */
#include "nvme/nvme_proto.h"

#include <string.h>

void nvme_tcp_ch_parse(const uint8_t *p, struct nvme_tcp_ch *ch)
{
    ch->type = p[0];
    ch->flags = p[1];
    ch->hlen = p[2];
    ch->pdo = p[3];
    ch->plen = le32_get(p + 4);
}

void nvme_tcp_ch_build(uint8_t *p, uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo,
                       uint32_t plen)
{
    p[0] = type;
    p[1] = flags;
    p[2] = hlen;
    p[3] = pdo;
    le32_put(p + 4, plen);
}

/* Byte offsets of the common header's fields, for FEI. */
#define CH_FLAGS 1
#define CH_HLEN 2
#define CH_PDO 3
#define CH_PLEN 4

/* The data part of a capsule or H2CData PDU: where it starts (pdo) and how
 * long it is, given that the header is hlen (+ digest) bytes. */
static int data_part(const struct nvme_tcp_ch *ch, bool hdgst, bool ddgst, uint32_t max_data,
                     uint32_t *data_len, uint32_t *fei)
{
    uint32_t hd = hdgst ? NVME_TCP_DIGEST_LEN : 0, dd = ddgst ? NVME_TCP_DIGEST_LEN : 0;
    uint32_t head = ch->hlen + hd;
    *data_len = 0;
    if (ch->plen < head) {
        *fei = CH_PLEN;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    if (ch->plen == head) {
        /* No data: no data digest either, and PDO is 0 (or points past the end). */
        if (ch->flags & NVME_TCP_F_DDGST) {
            *fei = CH_FLAGS;
            return NVME_TCP_FES_INVALID_HEADER;
        }
        return 0;
    }
    /* We advertised CPDA 0: data may start right after the header; padding
     * beyond that is accepted (the host may align more than asked). */
    if (ch->pdo < head) {
        *fei = CH_PDO;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    if (ch->plen <= (uint64_t)ch->pdo + dd) {
        *fei = CH_PLEN;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    if (ddgst != ((ch->flags & NVME_TCP_F_DDGST) != 0)) {
        *fei = CH_FLAGS;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    uint32_t len = ch->plen - ch->pdo - dd;
    if (len > max_data) {
        *fei = CH_PLEN;
        return NVME_TCP_FES_DATA_LIMIT;
    }
    *data_len = len;
    return 0;
}

int nvme_tcp_ch_check(const struct nvme_tcp_ch *ch, bool hdgst, bool ddgst, uint32_t max_data,
                      uint32_t *data_len, uint32_t *fei)
{
    uint8_t want_hlen;
    *data_len = 0;
    switch (ch->type) {
    case NVME_TCP_CMD:
        want_hlen = NVME_TCP_CMD_HLEN;
        break;
    case NVME_TCP_H2C_DATA:
        want_hlen = NVME_TCP_DATA_HLEN;
        break;
    case NVME_TCP_H2C_TERM:
        if (ch->hlen != NVME_TCP_TERM_HLEN) {
            *fei = CH_HLEN;
            return NVME_TCP_FES_INVALID_HEADER;
        }
        if (ch->plen < NVME_TCP_TERM_HLEN ||
            ch->plen > NVME_TCP_TERM_HLEN + NVME_TCP_TERM_DATA_MAX) {
            *fei = CH_PLEN;
            return NVME_TCP_FES_INVALID_HEADER;
        }
        *data_len = ch->plen - NVME_TCP_TERM_HLEN;
        return 0;
    case NVME_TCP_ICREQ:
        *fei = 0;
        return NVME_TCP_FES_PDU_SEQ; /* only as the first PDU */
    default:
        *fei = 0;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    if (ch->hlen != want_hlen) {
        *fei = CH_HLEN;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    if (hdgst != ((ch->flags & NVME_TCP_F_HDGST) != 0)) {
        *fei = CH_FLAGS;
        return NVME_TCP_FES_INVALID_HEADER;
    }
    return data_part(ch, hdgst, ddgst, max_data, data_len, fei);
}

void nvme_cqe_build(uint8_t *cqe, uint64_t result, uint16_t sqhd, uint16_t sqid, uint16_t cid,
                    uint16_t status, bool dnr)
{
    le64_put(cqe, result);
    le16_put(cqe + 8, sqhd);
    le16_put(cqe + 10, sqid);
    le16_put(cqe + 12, cid);
    uint16_t sf = (uint16_t)((status & 0x7ff) << 1);
    if (dnr && status != NVME_SC_SUCCESS)
        sf |= NVME_STATUS_DNR;
    le16_put(cqe + 14, sf);
}
