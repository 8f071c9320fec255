/*
 * Admin commands (nvme_internal.h): Identify, Get Log Page, Get/Set
 * Features, Keep Alive, Asynchronous Event Request, Abort. Unknown
 * opcodes get Invalid Command Opcode, a field out of range Invalid Field
 * in Command. A discovery controller answers only what a host asks a
 * discovery controller.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nvme/nvme_internal.h"

#define PAGE 4096u

static uint32_t cdw(const struct nvme_cmd *cmd, unsigned n)
{
    return le32_get(cmd->sqe + NVME_SQE_CDW10 + 4 * (n - 10));
}

static void done(struct nvme_cmd *cmd, uint16_t status)
{
    cmd->status = status;
    nvme_cmd_complete(cmd);
}

/* A page of data for the host: buf is allocated, zeroed, out_len set. */
static uint8_t *out_page(struct nvme_cmd *cmd, uint32_t len)
{
    if (nvme_cmd_buf(cmd, len) < 0)
        return NULL;
    memset(cmd->buf, 0, len);
    cmd->out_len = len;
    return cmd->buf;
}

static void admin_identify(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    struct nvme_subsys *s = nvme_queue_subsys(q);
    uint8_t cns = (uint8_t)cdw(cmd, 10);
    uint32_t nsid = le32_get(cmd->sqe + NVME_SQE_NSID);
    if (cns != 0x01 && q->ctrl->discovery)
        return done(cmd, NVME_SC_INVALID_FIELD);
    uint8_t *p = out_page(cmd, PAGE);
    if (!p)
        return done(cmd, NVME_SC_INTERNAL);
    const struct nvme_ns *ns = s ? nvme_subsys_ns(s, nsid) : NULL;
    switch (cns) {
    case 0x00:
        if (nsid == 0 || nsid == 0xffffffffu)
            return done(cmd, NVME_SC_INVALID_NS);
        nvme_identify_ns(ns, p); /* zeroes for an inactive NSID */
        if (ns && ns->vol && nvme_ana_on(s))
            le32_put(p + 92, nvme_ana_group(ns)); /* ANAGRPID */
        break;
    case 0x01:
        nvme_identify_ctrl(q, s, p);
        break;
    case 0x02:
        if (nsid >= 0xfffffffeu)
            return done(cmd, NVME_SC_INVALID_FIELD);
        nvme_identify_ns_list(s, nsid, p);
        break;
    case 0x03:
        if (!ns)
            return done(cmd, NVME_SC_INVALID_NS);
        nvme_identify_ns_descs(ns, p);
        break;
    case 0x05: /* NVM command set specific namespace: nothing beyond CNS 00h */
    case 0x06: /* NVM command set specific controller: no size limits */
        if ((cdw(cmd, 11) >> 24) != 0)
            return done(cmd, NVME_SC_INVALID_FIELD); /* only the NVM command set */
        if (cns == 0x05 && !ns)
            return done(cmd, NVME_SC_INVALID_NS);
        break;
    case 0x08:
        if (!ns)
            return done(cmd, NVME_SC_INVALID_NS);
        nvme_identify_ns_indep(ns, p);
        if (ns->vol && nvme_ana_on(s))
            le32_put(p + 4, nvme_ana_group(ns)); /* ANAGRPID */
        break;
    default:
        return done(cmd, NVME_SC_INVALID_FIELD);
    }
    done(cmd, NVME_SC_SUCCESS);
}

/* The whole log page lid into a new buffer (*page, *len), or a status. */
static uint16_t log_page(struct nvme_cmd *cmd, uint8_t lid, uint8_t **page, size_t *len)
{
    struct nvme_ctrl *ctrl = cmd->q->ctrl;
    if (lid == NVME_LOG_DISCOVERY) {
        if (!ctrl->discovery)
            return NVME_SC_INVALID_LOG_PAGE;
        return nvme_discovery_log(ctrl->hostnqn, page, len) < 0 ? NVME_SC_INTERNAL : 0;
    }
    if (lid == NVME_LOG_ANA && !ctrl->discovery)
        return nvme_ana_log(ctrl, (cdw(cmd, 10) >> 8) & 1, page, len); /* LSP bit 0: RGO */
    if (ctrl->discovery || (lid != NVME_LOG_ERROR && lid != NVME_LOG_SMART &&
                            lid != NVME_LOG_CHANGED_NS && lid != NVME_LOG_RESV))
        return NVME_SC_INVALID_LOG_PAGE;
    *len = lid == NVME_LOG_ERROR ? 64 : lid == NVME_LOG_SMART ? 512 : PAGE;
    *page = calloc(1, PAGE);
    if (!*page)
        return NVME_SC_INTERNAL;
    if (lid == NVME_LOG_SMART) {
        (*page)[3] = 100; /* available spare */
        (*page)[4] = 10;  /* its threshold */
    } else if (lid == NVME_LOG_CHANGED_NS) {
        nvme_ctrl_changed_ns(ctrl, *page);
    } else if (lid == NVME_LOG_RESV) {
        *len = 64;
        nvme_resv_log_page(ctrl, *page);
    }
    return 0;
}

static void admin_get_log_page(struct nvme_cmd *cmd)
{
    uint32_t c10 = cdw(cmd, 10), c11 = cdw(cmd, 11);
    uint8_t lid = (uint8_t)c10;
    uint64_t numd = ((uint64_t)(c11 & 0xffff) << 16 | (c10 >> 16)) + 1;
    uint64_t want = numd * 4;
    uint64_t off = (uint64_t)cdw(cmd, 13) << 32 | cdw(cmd, 12);
    if (want > NVME_MAX_XFER || (off & 3))
        return done(cmd, NVME_SC_INVALID_FIELD);
    uint8_t *page = NULL;
    size_t len = 0;
    uint16_t st = log_page(cmd, lid, &page, &len);
    if (st)
        return done(cmd, st);
    if (off > len) {
        free(page);
        return done(cmd, NVME_SC_INVALID_FIELD);
    }
    /* What lies past the page reads as zeroes. */
    uint8_t *p = out_page(cmd, (uint32_t)want);
    if (p)
        memcpy(p, page + off, (size_t)MIN((uint64_t)(len - off), want));
    free(page);
    done(cmd, p ? NVME_SC_SUCCESS : NVME_SC_INTERNAL);
}

static uint32_t queues_result(const struct nvme_ctrl *ctrl)
{
    uint32_t n = ctrl->nr_io_queues ? ctrl->nr_io_queues - 1u : 0;
    return n | n << 16;
}

static void admin_set_features(struct nvme_cmd *cmd)
{
    struct nvme_ctrl *ctrl = cmd->q->ctrl;
    uint32_t c10 = cdw(cmd, 10), c11 = cdw(cmd, 11);
    if (c10 & (1u << 31))
        return done(cmd, NVME_SC_FEATURE_NOT_SAVEABLE);
    switch (c10 & 0xff) {
    case NVME_FEAT_NUM_QUEUES:
        if (ctrl->discovery || (c11 & 0xffff) == 0xffff || (c11 >> 16) == 0xffff)
            return done(cmd, NVME_SC_INVALID_FIELD);
        cmd->result = queues_result(ctrl);
        break;
    case NVME_FEAT_ASYNC_EVENT: {
        /* before ctrl->lock: nvme_queue_subsys may take it */
        uint32_t ana = nvme_ana_on(nvme_queue_subsys(cmd->q)) ? NVME_AEC_ANA_CHANGE : 0;
        pthread_mutex_lock(&ctrl->lock);
        ctrl->aec = c11 & (NVME_AEC_NS_ATTR | NVME_AEC_DISC_CHANGE | ana);
        pthread_mutex_unlock(&ctrl->lock);
        if (ctrl->aec & NVME_AEC_ANA_CHANGE)
            nvme_ana_watch_start(cmd->q);
        break;
    }
    case NVME_FEAT_HOST_ID: /* given by Connect on a fabric */
        return done(cmd, NVME_SC_CMD_SEQ_ERROR);
    case NVME_FEAT_RESV_MASK:
    case NVME_FEAT_RESV_PERSIST:
        return nvme_resv_feature(cmd, true);
    case NVME_FEAT_KATO:
        ctrl->kato_ms = c11;
        nvme_ctrl_seen(ctrl);
        if (c11 && !reactor_timer_armed(&cmd->q->ka_timer))
            nvme_ctrl_ka_start(cmd->q);
        break;
    default:
        return done(cmd, NVME_SC_INVALID_FIELD);
    }
    done(cmd, NVME_SC_SUCCESS);
}

static void admin_get_features(struct nvme_cmd *cmd)
{
    struct nvme_ctrl *ctrl = cmd->q->ctrl;
    uint32_t c10 = cdw(cmd, 10);
    if ((c10 >> 8) & 0x7) /* SEL: only the current value is kept */
        return done(cmd, NVME_SC_INVALID_FIELD);
    switch (c10 & 0xff) {
    case NVME_FEAT_NUM_QUEUES:
        if (ctrl->discovery)
            return done(cmd, NVME_SC_INVALID_FIELD);
        cmd->result = queues_result(ctrl);
        break;
    case NVME_FEAT_ASYNC_EVENT:
        cmd->result = ctrl->aec;
        break;
    case NVME_FEAT_KATO:
        cmd->result = ctrl->kato_ms;
        break;
    case NVME_FEAT_HOST_ID:
    case NVME_FEAT_RESV_MASK:
    case NVME_FEAT_RESV_PERSIST:
        return nvme_resv_feature(cmd, false);
    case NVME_FEAT_VOLATILE_WC:
        cmd->result = ctrl->discovery ? 0 : 1; /* WCE: writes are acknowledged before sync */
        break;
    default:
        return done(cmd, NVME_SC_INVALID_FIELD);
    }
    done(cmd, NVME_SC_SUCCESS);
}

void nvme_admin_exec(struct nvme_cmd *cmd)
{
    switch (cmd->sqe[NVME_SQE_OPC]) {
    case NVME_ADM_IDENTIFY:
        return admin_identify(cmd);
    case NVME_ADM_GET_LOG_PAGE:
        return admin_get_log_page(cmd);
    case NVME_ADM_SET_FEATURES:
        return admin_set_features(cmd);
    case NVME_ADM_GET_FEATURES:
        return admin_get_features(cmd);
    case NVME_ADM_KEEP_ALIVE:
        return done(cmd, NVME_SC_SUCCESS);
    case NVME_ADM_ASYNC_EVENT:
        return nvme_ctrl_aer(cmd);
    case NVME_ADM_ABORT:
        cmd->result = 1; /* not aborted: commands run to completion */
        return done(cmd, NVME_SC_SUCCESS);
    default:
        return done(cmd, NVME_SC_INVALID_OPCODE);
    }
}
