/*
 * NVMe/TCP and NVMe wire constants and the pure PDU helpers (nvme_pdu.c):
 * the NVMe-oF 1.1 TCP transport binding (PDU types, headers, ICReq/ICResp,
 * terminate requests), the NVMe 2.0 base specification's submission and
 * completion entries, status codes and fabrics commands, and the NVM
 * command set's opcodes. Every multi-byte field on the wire is little
 * endian. Pure functions: any thread.
 */
#ifndef BLOCKD_NVME_PROTO_H
#define BLOCKD_NVME_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- little-endian fields ---- */
static inline uint16_t le16_get(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t le32_get(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t le64_get(const void *p)
{
    return le32_get(p) | (uint64_t)le32_get((const uint8_t *)p + 4) << 32;
}
static inline void le16_put(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
}
static inline void le32_put(void *p, uint32_t v)
{
    uint8_t *b = p;
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}
static inline void le64_put(void *p, uint64_t v)
{
    le32_put(p, (uint32_t)v);
    le32_put((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* ---- NVMe/TCP transport (NVMe-oF TCP transport binding, 3.6) ---- */
enum nvme_tcp_pdu_type {
    NVME_TCP_ICREQ = 0x00,
    NVME_TCP_ICRESP = 0x01,
    NVME_TCP_H2C_TERM = 0x02,
    NVME_TCP_C2H_TERM = 0x03,
    NVME_TCP_CMD = 0x04,
    NVME_TCP_RSP = 0x05,
    NVME_TCP_H2C_DATA = 0x06,
    NVME_TCP_C2H_DATA = 0x07,
    NVME_TCP_R2T = 0x09,
};

#define NVME_TCP_F_HDGST 0x01
#define NVME_TCP_F_DDGST 0x02
#define NVME_TCP_F_DATA_LAST 0x04
#define NVME_TCP_F_DATA_SUCCESS 0x08

#define NVME_TCP_CH_LEN 8 /* common header: type, flags, hlen, pdo, plen */
#define NVME_TCP_IC_LEN 128
#define NVME_TCP_CMD_HLEN 72 /* 8 + the 64-byte SQE */
#define NVME_TCP_RSP_HLEN 24 /* 8 + the 16-byte CQE */
#define NVME_TCP_DATA_HLEN 24
#define NVME_TCP_R2T_HLEN 24
#define NVME_TCP_TERM_HLEN 24
#define NVME_TCP_DIGEST_LEN 4
/* A terminate request carries at most this much of the offending PDU. */
#define NVME_TCP_TERM_DATA_MAX 128

/* ICReq/ICResp DGST field. */
#define NVME_TCP_HDGST_ENABLE 0x01
#define NVME_TCP_DDGST_ENABLE 0x02

/* Fatal error status of a terminate request (FES). */
enum nvme_tcp_fes {
    NVME_TCP_FES_INVALID_HEADER = 0x01,
    NVME_TCP_FES_PDU_SEQ = 0x02,
    NVME_TCP_FES_HDGST = 0x03,
    NVME_TCP_FES_DATA_RANGE = 0x04,
    NVME_TCP_FES_R2T_LIMIT = 0x05,
    NVME_TCP_FES_DATA_LIMIT = 0x05,
    NVME_TCP_FES_UNSUPPORTED = 0x06,
};

/* One received PDU's common header, decoded. */
struct nvme_tcp_ch {
    uint8_t type, flags, hlen, pdo;
    uint32_t plen;
};

void nvme_tcp_ch_parse(const uint8_t *p, struct nvme_tcp_ch *ch);
void nvme_tcp_ch_build(uint8_t *p, uint8_t type, uint8_t flags, uint8_t hlen, uint8_t pdo,
                       uint32_t plen);

/*
 * Check a received common header against the rules of its type (hlen,
 * plen, pdo, flags) and the digests negotiated (hdgst/ddgst). The data
 * length the PDU carries goes to *data_len (0 when none). 0, or a FES code
 * with the offending field's byte offset in the header in *fei.
 */
int nvme_tcp_ch_check(const struct nvme_tcp_ch *ch, bool hdgst, bool ddgst, uint32_t max_data,
                      uint32_t *data_len, uint32_t *fei);

/* ---- NVMe: submission queue entry fields (64 bytes) ---- */
#define NVME_SQE_LEN 64
#define NVME_CQE_LEN 16
#define NVME_SQE_OPC 0
#define NVME_SQE_FLAGS 1
#define NVME_SQE_CID 2
#define NVME_SQE_NSID 4
#define NVME_SQE_DPTR 24
#define NVME_SQE_CDW10 40
#define NVME_SQE_CDW11 44
#define NVME_SQE_CDW12 48
#define NVME_SQE_CDW13 52
#define NVME_SQE_CDW14 56
#define NVME_SQE_CDW15 60
#define NVME_SQE_PSDT_MASK 0xc0 /* flags: 00 PRP, 01/10 SGL */

/* SGL descriptor type byte (descriptor type << 4 | subtype). */
#define NVME_SGL_DATA_OFFSET 0x01    /* data block, offset: in-capsule data */
#define NVME_SGL_KEYED_DATA 0x40     /* keyed data block (length 0: no data) */
#define NVME_SGL_TRANSPORT_DATA 0x5a /* transport data block: R2T / C2HData */

/* Status: (SCT << 8 | SC); the CQE's status field is this << 1 | DNR << 15. */
#define NVME_SCT_GENERIC 0x000
#define NVME_SCT_CMD 0x100
#define NVME_SCT_MEDIA 0x200
#define NVME_SCT_PATH 0x300 /* path related: the host retries on another path */
enum nvme_status {
    NVME_SC_SUCCESS = 0x00,
    NVME_SC_INVALID_OPCODE = 0x01,
    NVME_SC_INVALID_FIELD = 0x02,
    NVME_SC_CID_CONFLICT = 0x03,
    NVME_SC_DATA_XFER_ERROR = 0x04,
    NVME_SC_INTERNAL = 0x06,
    NVME_SC_ABORT_REQ = 0x07,
    NVME_SC_INVALID_NS = 0x0b,
    NVME_SC_CMD_SEQ_ERROR = 0x0c,
    NVME_SC_SGL_INVALID_DATA = 0x0f, /* data SGL length invalid */
    NVME_SC_SGL_INVALID_TYPE = 0x11,
    NVME_SC_HOST_ID_INCONSIST = 0x18,
    NVME_SC_NS_WRITE_PROTECTED = 0x20,
    NVME_SC_TRANSIENT_TRANSPORT = 0x22,
    NVME_SC_LBA_RANGE = 0x80,
    NVME_SC_CAP_EXCEEDED = 0x81,
    NVME_SC_NS_NOT_READY = 0x82,
    NVME_SC_RESV_CONFLICT = 0x83,
    /* command specific */
    NVME_SC_QID_INVALID = NVME_SCT_CMD | 0x01,
    NVME_SC_QUEUE_SIZE = NVME_SCT_CMD | 0x02,
    NVME_SC_AER_LIMIT = NVME_SCT_CMD | 0x05,
    NVME_SC_INVALID_LOG_PAGE = NVME_SCT_CMD | 0x09,
    NVME_SC_FEATURE_NOT_SAVEABLE = NVME_SCT_CMD | 0x0d,
    NVME_SC_CONNECT_FORMAT = NVME_SCT_CMD | 0x80,
    NVME_SC_CONNECT_CTRL_BUSY = NVME_SCT_CMD | 0x81,
    NVME_SC_CONNECT_INVALID_PARAM = NVME_SCT_CMD | 0x82,
    NVME_SC_CONNECT_INVALID_HOST = NVME_SCT_CMD | 0x84,
    NVME_SC_AUTH_REQUIRED = NVME_SCT_CMD | 0x91,
    /* media and data integrity */
    NVME_SC_WRITE_FAULT = NVME_SCT_MEDIA | 0x80,
    NVME_SC_READ_ERROR = NVME_SCT_MEDIA | 0x81,
    NVME_SC_COMPARE_FAILED = NVME_SCT_MEDIA | 0x85,
    NVME_SC_PATH_INTERNAL = NVME_SCT_PATH | 0x00,
    NVME_SC_ANA_INACCESSIBLE = NVME_SCT_PATH | 0x02,
};
#define NVME_STATUS_DNR 0x8000u /* in the CQE's status field */

void nvme_cqe_build(uint8_t *cqe, uint64_t result, uint16_t sqhd, uint16_t sqid, uint16_t cid,
                    uint16_t status, bool dnr);

/* ---- admin opcodes ---- */
enum nvme_admin_opc {
    NVME_ADM_GET_LOG_PAGE = 0x02,
    NVME_ADM_IDENTIFY = 0x06,
    NVME_ADM_ABORT = 0x08,
    NVME_ADM_SET_FEATURES = 0x09,
    NVME_ADM_GET_FEATURES = 0x0a,
    NVME_ADM_ASYNC_EVENT = 0x0c,
    NVME_ADM_KEEP_ALIVE = 0x18,
    NVME_FABRICS = 0x7f,
};

/* ---- NVM command set opcodes ---- */
enum nvme_io_opc {
    NVME_IO_FLUSH = 0x00,
    NVME_IO_WRITE = 0x01,
    NVME_IO_READ = 0x02,
    NVME_IO_COMPARE = 0x05,
    NVME_IO_WRITE_ZEROES = 0x08,
    NVME_IO_DSM = 0x09,
    NVME_IO_RESV_REGISTER = 0x0d,
    NVME_IO_RESV_REPORT = 0x0e,
    NVME_IO_RESV_ACQUIRE = 0x11,
    NVME_IO_RESV_RELEASE = 0x15,
};
#define NVME_RW_FUA (1u << 30) /* CDW12 */
#define NVME_WZ_DEAC (1u << 25)
#define NVME_DSM_AD (1u << 2) /* CDW11 */
#define NVME_DSM_RANGE_LEN 16

/* ---- fabrics ---- */
#define NVME_FCTYPE_OFF 4
enum nvme_fctype {
    NVME_FCT_PROP_SET = 0x00,
    NVME_FCT_CONNECT = 0x01,
    NVME_FCT_PROP_GET = 0x04,
    NVME_FCT_AUTH_SEND = 0x05,
    NVME_FCT_AUTH_RECV = 0x06,
    NVME_FCT_DISCONNECT = 0x08,
};
/* Connect command fields (SQE offsets) and its 1024-byte data. */
#define NVME_CONNECT_RECFMT 40
#define NVME_CONNECT_QID 42
#define NVME_CONNECT_SQSIZE 44
#define NVME_CONNECT_CATTR 46
#define NVME_CONNECT_KATO 48
#define NVME_CONNECT_DATA_LEN 1024
#define NVME_CONNECT_HOSTID 0
#define NVME_CONNECT_CNTLID 16
#define NVME_CONNECT_SUBNQN 256
#define NVME_CONNECT_HOSTNQN 512
#define NVME_CATTR_DISABLE_SQFLOW 0x04
/* Connect response dword 0: AUTHREQ.ATR, the host must authenticate. */
#define NVME_CONNECT_AUTHREQ_ATR (1u << 17)
/* Invalid-parameter results: the offending field's offset, and whether it
 * is in the connect data (IATTR 1) or the SQE (IATTR 0). */
#define NVME_IPO_DATA(off) ((1u << 16) | (uint32_t)(off))
#define NVME_IPO_SQE(off) ((uint32_t)(off))
/* Property Get/Set fields. */
#define NVME_PROP_ATTRIB 40
#define NVME_PROP_OFFSET 44
#define NVME_PROP_VALUE 48

/* Controller properties (registers). */
#define NVME_REG_CAP 0x00
#define NVME_REG_VS 0x08
#define NVME_REG_CC 0x14
#define NVME_REG_CSTS 0x1c
#define NVME_CC_EN 0x1u
#define NVME_CC_SHN_MASK (0x3u << 14)
#define NVME_CSTS_RDY 0x1u
#define NVME_CSTS_CFS 0x2u
#define NVME_CSTS_SHST_DONE (0x2u << 2)

#define NVME_DISC_NQN "nqn.2014-08.org.nvmexpress.discovery"

/* Log pages. */
#define NVME_LOG_ERROR 0x01
#define NVME_LOG_SMART 0x02
#define NVME_LOG_CHANGED_NS 0x04
#define NVME_LOG_ANA 0x0c
#define NVME_LOG_DISCOVERY 0x70
#define NVME_LOG_RESV 0x80 /* reservation notification */

/* Features. */
#define NVME_FEAT_VOLATILE_WC 0x06
#define NVME_FEAT_NUM_QUEUES 0x07
#define NVME_FEAT_ASYNC_EVENT 0x0b
#define NVME_FEAT_KATO 0x0f
#define NVME_FEAT_HOST_ID 0x81
#define NVME_FEAT_RESV_MASK 0x82
#define NVME_FEAT_RESV_PERSIST 0x83

/* Asynchronous event results (CQE dword 0: type, info, log page). */
#define NVME_AEN_NS_CHANGED 0x00040002u   /* notice, NS attribute changed, log 04h */
#define NVME_AEN_RESV_LOG 0x00800006u     /* I/O command set: reservation log, 80h */
#define NVME_AEN_DISC_CHANGED 0x0070f002u /* notice, discovery log changed, log 70h */
#define NVME_AEN_ANA_CHANGED 0x000c0302u  /* notice, ANA change, log 0Ch */
#define NVME_AEC_NS_ATTR (1u << 8)
#define NVME_AEC_ANA_CHANGE (1u << 11)
/* ANA states (log page 0Ch). */
#define NVME_ANA_OPTIMIZED 0x1
#define NVME_ANA_NON_OPTIMIZED 0x2
#define NVME_ANA_INACCESSIBLE 0x3
#define NVME_AEC_DISC_CHANGE (1u << 31)

#endif
