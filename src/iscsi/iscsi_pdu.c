/* PDU framing and names (pure). */
#include "iscsi/iscsi_pdu.h"

#include <errno.h>

int iscsi_pdu_frame(const uint8_t *bhs, bool header_digest, bool data_digest,
                    struct iscsi_pdu_frame *out)
{
    uint32_t ahs = iscsi_bhs_ahs_len(bhs);
    uint32_t dsl = iscsi_bhs_dsl(bhs);
    if (ahs > ISCSI_AHS_MAX)
        return -EINVAL;
    out->ahs_len = ahs;
    out->dsl = dsl;
    out->data_off = ISCSI_BHS_LEN + ahs + (header_digest ? ISCSI_DIGEST_LEN : 0);
    out->total = out->data_off;
    if (dsl) {
        out->total += dsl + iscsi_pad4(dsl);
        if (data_digest)
            out->total += ISCSI_DIGEST_LEN;
    }
    return 0;
}

const char *iscsi_opcode_name(uint8_t opcode)
{
    switch (opcode) {
    case ISCSI_OP_NOP_OUT:
        return "NOP-Out";
    case ISCSI_OP_SCSI_CMD:
        return "SCSI Command";
    case ISCSI_OP_TMF_REQ:
        return "Task Management Request";
    case ISCSI_OP_LOGIN_REQ:
        return "Login Request";
    case ISCSI_OP_TEXT_REQ:
        return "Text Request";
    case ISCSI_OP_DATA_OUT:
        return "Data-Out";
    case ISCSI_OP_LOGOUT_REQ:
        return "Logout Request";
    case ISCSI_OP_SNACK_REQ:
        return "SNACK Request";
    case ISCSI_OP_NOP_IN:
        return "NOP-In";
    case ISCSI_OP_SCSI_RSP:
        return "SCSI Response";
    case ISCSI_OP_TMF_RSP:
        return "Task Management Response";
    case ISCSI_OP_LOGIN_RSP:
        return "Login Response";
    case ISCSI_OP_TEXT_RSP:
        return "Text Response";
    case ISCSI_OP_DATA_IN:
        return "Data-In";
    case ISCSI_OP_LOGOUT_RSP:
        return "Logout Response";
    case ISCSI_OP_R2T:
        return "R2T";
    case ISCSI_OP_ASYNC_MSG:
        return "Async Message";
    case ISCSI_OP_REJECT:
        return "Reject";
    default:
        return "unknown";
    }
}
