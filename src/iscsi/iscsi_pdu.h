/*
 * iSCSI PDU layout (RFC 7143 §11): the 48-byte Basic Header Segment, opcodes,
 * field offsets, and helpers to read/build headers. Pure functions; no I/O.
 */
#ifndef BLOCKD_ISCSI_PDU_H
#define BLOCKD_ISCSI_PDU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

#define ISCSI_BHS_LEN 48
#define ISCSI_DIGEST_LEN 4
#define ISCSI_RESERVED_TAG 0xffffffffu
/* Largest AHS we accept (TotalAHSLength is in 4-byte words, ≤ 255 words). */
#define ISCSI_AHS_MAX (255 * 4)
/* RFC 7143 limits for MaxRecvDataSegmentLength and burst lengths. */
#define ISCSI_DSL_MIN 512
#define ISCSI_DSL_MAX 16777215u
/* Login PDUs carry at most 8192 bytes of text (RFC 7143 §6.1). */
#define ISCSI_LOGIN_DSL_MAX 8192

enum iscsi_opcode {
    /* initiator → target */
    ISCSI_OP_NOP_OUT = 0x00,
    ISCSI_OP_SCSI_CMD = 0x01,
    ISCSI_OP_TMF_REQ = 0x02,
    ISCSI_OP_LOGIN_REQ = 0x03,
    ISCSI_OP_TEXT_REQ = 0x04,
    ISCSI_OP_DATA_OUT = 0x05,
    ISCSI_OP_LOGOUT_REQ = 0x06,
    ISCSI_OP_SNACK_REQ = 0x10,
    /* target → initiator */
    ISCSI_OP_NOP_IN = 0x20,
    ISCSI_OP_SCSI_RSP = 0x21,
    ISCSI_OP_TMF_RSP = 0x22,
    ISCSI_OP_LOGIN_RSP = 0x23,
    ISCSI_OP_TEXT_RSP = 0x24,
    ISCSI_OP_DATA_IN = 0x25,
    ISCSI_OP_LOGOUT_RSP = 0x26,
    ISCSI_OP_R2T = 0x31,
    ISCSI_OP_ASYNC_MSG = 0x32,
    ISCSI_OP_REJECT = 0x3f,
};

/* byte 0 */
#define ISCSI_BHS_IMMEDIATE 0x40
#define ISCSI_BHS_OPCODE_MASK 0x3f
/* byte 1 */
#define ISCSI_FLAG_FINAL 0x80
/* SCSI Command */
#define ISCSI_CMD_READ 0x40
#define ISCSI_CMD_WRITE 0x20
#define ISCSI_CMD_ATTR_MASK 0x07
/* SCSI Response / Data-In */
#define ISCSI_RSP_BIDI_OVERFLOW 0x10
#define ISCSI_RSP_BIDI_UNDERFLOW 0x08
#define ISCSI_RSP_OVERFLOW 0x04
#define ISCSI_RSP_UNDERFLOW 0x02
#define ISCSI_DATAIN_ACK 0x40
#define ISCSI_DATAIN_STATUS 0x01
/* Login */
#define ISCSI_LOGIN_TRANSIT 0x80
#define ISCSI_LOGIN_CONTINUE 0x40
#define ISCSI_LOGIN_CSG(b) (((b) >> 2) & 3)
#define ISCSI_LOGIN_NSG(b) ((b)&3)
/* Text */
#define ISCSI_TEXT_CONTINUE 0x40

enum iscsi_stage {
    ISCSI_STAGE_SECURITY = 0,
    ISCSI_STAGE_OPERATIONAL = 1,
    ISCSI_STAGE_FULL_FEATURE = 3,
};

/* Login status (class << 8 | detail), RFC 7143 §11.13.5. */
enum iscsi_login_status {
    ISCSI_LOGIN_OK = 0x0000,
    ISCSI_LOGIN_INITIATOR_ERROR = 0x0200,
    ISCSI_LOGIN_AUTH_FAILED = 0x0201,
    ISCSI_LOGIN_FORBIDDEN = 0x0202,
    ISCSI_LOGIN_NOT_FOUND = 0x0203,
    ISCSI_LOGIN_TARGET_REMOVED = 0x0204,
    ISCSI_LOGIN_UNSUPPORTED_VERSION = 0x0205,
    ISCSI_LOGIN_TOO_MANY_CONNECTIONS = 0x0206,
    ISCSI_LOGIN_MISSING_PARAMETER = 0x0207,
    ISCSI_LOGIN_CANT_INCLUDE_IN_SESSION = 0x0208,
    ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED = 0x0209,
    ISCSI_LOGIN_SESSION_DOES_NOT_EXIST = 0x020a,
    ISCSI_LOGIN_INVALID_REQUEST = 0x020b,
    ISCSI_LOGIN_TARGET_ERROR = 0x0300,
    ISCSI_LOGIN_SERVICE_UNAVAILABLE = 0x0301,
    ISCSI_LOGIN_OUT_OF_RESOURCES = 0x0302,
};

/* Reject reasons, RFC 7143 §11.17.1. */
enum iscsi_reject_reason {
    ISCSI_REJECT_DATA_DIGEST = 0x02,
    ISCSI_REJECT_SNACK = 0x03,
    ISCSI_REJECT_PROTOCOL_ERROR = 0x04,
    ISCSI_REJECT_CMD_NOT_SUPPORTED = 0x05,
    ISCSI_REJECT_IMMEDIATE_CMD = 0x06,
    ISCSI_REJECT_TASK_IN_PROGRESS = 0x07,
    ISCSI_REJECT_INVALID_DATA_ACK = 0x08,
    ISCSI_REJECT_INVALID_PDU_FIELD = 0x09,
    ISCSI_REJECT_OUT_OF_RESOURCES = 0x0a,
    ISCSI_REJECT_WAITING_FOR_LOGOUT = 0x0c,
};

/* Task management functions and responses, RFC 7143 §11.5/§11.6. */
enum iscsi_tmf_function {
    ISCSI_TMF_ABORT_TASK = 1,
    ISCSI_TMF_ABORT_TASK_SET = 2,
    ISCSI_TMF_CLEAR_ACA = 3,
    ISCSI_TMF_CLEAR_TASK_SET = 4,
    ISCSI_TMF_LUN_RESET = 5,
    ISCSI_TMF_TARGET_WARM_RESET = 6,
    ISCSI_TMF_TARGET_COLD_RESET = 7,
    ISCSI_TMF_TASK_REASSIGN = 8,
};
enum iscsi_tmf_response {
    ISCSI_TMF_RSP_COMPLETE = 0,
    ISCSI_TMF_RSP_NO_TASK = 1,
    ISCSI_TMF_RSP_NO_LUN = 2,
    ISCSI_TMF_RSP_TASK_ALLEGIANT = 3,
    ISCSI_TMF_RSP_NO_REASSIGN = 4,
    ISCSI_TMF_RSP_NOT_SUPPORTED = 5,
    ISCSI_TMF_RSP_AUTH_FAILED = 6,
    ISCSI_TMF_RSP_REJECTED = 255,
};

/* Logout reasons / responses. */
enum {
    ISCSI_LOGOUT_CLOSE_SESSION = 0,
    ISCSI_LOGOUT_CLOSE_CONNECTION = 1,
    ISCSI_LOGOUT_REMOVE_FOR_RECOVERY = 2
};
enum {
    ISCSI_LOGOUT_RSP_OK = 0,
    ISCSI_LOGOUT_RSP_CID_NOT_FOUND = 1,
    ISCSI_LOGOUT_RSP_NO_RECOVERY = 2
};

/* ---- field accessors on a 48-byte BHS ---- */
static inline uint8_t iscsi_bhs_opcode(const uint8_t *bhs)
{
    return bhs[0] & ISCSI_BHS_OPCODE_MASK;
}
static inline bool iscsi_bhs_immediate(const uint8_t *bhs)
{
    return (bhs[0] & ISCSI_BHS_IMMEDIATE) != 0;
}
static inline uint32_t iscsi_bhs_ahs_len(const uint8_t *bhs)
{
    return (uint32_t)bhs[4] * 4;
}
static inline uint32_t iscsi_bhs_dsl(const uint8_t *bhs)
{
    return ((uint32_t)bhs[5] << 16) | ((uint32_t)bhs[6] << 8) | bhs[7];
}
static inline void iscsi_bhs_set_dsl(uint8_t *bhs, uint32_t dsl)
{
    bhs[5] = (uint8_t)(dsl >> 16);
    bhs[6] = (uint8_t)(dsl >> 8);
    bhs[7] = (uint8_t)dsl;
}
static inline uint32_t iscsi_bhs_itt(const uint8_t *bhs)
{
    return be32_load(bhs + 16);
}
static inline uint32_t iscsi_pad4(uint32_t n)
{
    return (4 - (n & 3)) & 3;
}

/* Serial number arithmetic (RFC 1982, 32 bits), for CmdSN/StatSN windows. */
static inline bool iscsi_sn_lt(uint32_t a, uint32_t b)
{
    return a != b && (uint32_t)(b - a) < 0x80000000u;
}
static inline bool iscsi_sn_le(uint32_t a, uint32_t b)
{
    return a == b || iscsi_sn_lt(a, b);
}

/*
 * Framing of one incoming PDU, from the first bytes of the stream.
 * iscsi_pdu_frame() reads the BHS and computes where each part is.
 * Returns 0, or -EINVAL when the header cannot be framed at all.
 */
struct iscsi_pdu_frame {
    uint32_t ahs_len;  /* bytes of AHS */
    uint32_t dsl;      /* DataSegmentLength (without padding) */
    uint32_t data_off; /* offset of the data segment from the PDU start */
    uint32_t total;    /* bytes of the whole PDU incl. digests and padding */
};
int iscsi_pdu_frame(const uint8_t *bhs, bool header_digest, bool data_digest,
                    struct iscsi_pdu_frame *out);

/* Name of an opcode for logs ("SCSI Command"), "unknown" otherwise. */
const char *iscsi_opcode_name(uint8_t opcode);

#endif
