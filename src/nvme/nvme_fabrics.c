/*
 * Fabrics commands (nvme_internal.h): Connect (admin queue: a new
 * controller of the dynamic model; I/O queue: joins the controller its
 * CNTLID names, from the same host), Property Get/Set (CAP, VS, CC,
 * CSTS), Disconnect. Every refused Connect is logged with the host NQN
 * and its address, and answered with the Connect status of the spec
 * (Invalid Parameters with the offending field, or Invalid Host). A host
 * with a DH-HMAC-CHAP key gets AUTHREQ.ATR: each of its queues must then
 * authenticate (Authentication Send/Receive, nvme_auth.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"

struct connect_args {
    uint16_t qid, sqsize; /* sqsize: entries (1-based here) */
    uint8_t cattr;
    uint32_t kato;
    uint16_t cntlid;
    const uint8_t *hostid;
    char subnqn[NVME_NQN_MAX + 1];
    char hostnqn[NVME_NQN_MAX + 1];
};

static void refuse(struct nvme_cmd *cmd, uint16_t status, uint32_t ipo, const char *hostnqn,
                   const char *why)
{
    log_warn("%s: nvme: Connect of host %s refused: %s", cmd->q->c->peer,
             hostnqn && *hostnqn ? hostnqn : "(unnamed)", why);
    cmd->status = status;
    cmd->result = ipo;
    nvme_cmd_complete(cmd);
}

/* An NQN field of the connect data: NUL-terminated within 256 bytes and
 * at most NVME_NQN_MAX long. */
static bool nqn_field(const uint8_t *p, char *out)
{
    size_t n = strnlen((const char *)p, 256);
    if (n == 0 || n > NVME_NQN_MAX)
        return false;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
}

/* Whether hostnqn may use s through port_id, else why not (and status). */
static const char *host_check(const struct nvme_subsys *s, int64_t port_id, const char *hostnqn,
                              uint16_t *status, uint32_t *ipo, const struct nvme_host **hp)
{
    *status = NVME_SC_CONNECT_INVALID_PARAM;
    *ipo = NVME_IPO_DATA(NVME_CONNECT_SUBNQN);
    if (!nvme_subsys_on_port(s, port_id))
        return "subsystem not served on this port";
    const struct nvme_host *h = nvme_subsys_host(s, hostnqn);
    *status = NVME_SC_CONNECT_INVALID_HOST;
    *ipo = NVME_IPO_DATA(NVME_CONNECT_HOSTNQN);
    if (!s->allow_any_host && !h)
        return "host not allowed on the subsystem";
    *hp = h;
    return NULL;
}

/* The DH-HMAC-CHAP keys of a host that has some (else *keys NULL): 0, or
 * refused (done) when they cannot be used. */
static int connect_keys(struct nvme_cmd *cmd, const struct nvme_host *h,
                        const struct connect_args *a, struct nvme_auth_keys **keys)
{
    *keys = NULL;
    if (!h || !h->dhchap_key)
        return 0;
    const char *why = NULL;
    *keys = nvme_auth_keys_new(h, a->hostnqn, a->subnqn, &why);
    if (*keys)
        return 0;
    char msg[160];
    snprintf(msg, sizeof(msg), "its DH-HMAC-CHAP key cannot be used: %s", why);
    refuse(cmd, NVME_SC_CONNECT_INVALID_HOST, NVME_IPO_DATA(NVME_CONNECT_HOSTNQN), a->hostnqn, msg);
    return -EINVAL;
}

/* The Connect's answer on a live queue: CNTLID, and AUTHREQ.ATR when the
 * queue must authenticate before anything else. */
static void connect_done(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    q->auth_pending = q->ctrl->auth_keys != NULL;
    nvme_conn_connected(q);
    cmd->result = q->ctrl->cntlid | (q->auth_pending ? NVME_CONNECT_AUTHREQ_ATR : 0);
}

static struct nvme_ctrl *ctrl_new(struct nvme_queue *q, const struct connect_args *a,
                                  struct nvme_subsys *s)
{
    struct nvme_ctrl *ctrl = calloc(1, sizeof(*ctrl));
    if (!ctrl)
        return NULL;
    uint16_t nq = s ? s->qid_max : 0;
    ctrl->ioq = calloc(nq + 1u, sizeof(*ctrl->ioq));
    if (!ctrl->ioq) {
        free(ctrl);
        return NULL;
    }
    pthread_mutex_init(&ctrl->lock, NULL);
    atomic_init(&ctrl->refs, 1); /* the admin queue's */
    ctrl->discovery = s == NULL;
    ctrl->subsys = s;
    if (s) {
        nvme_subsys_ref(s);
        ctrl->subsys_id = s->id;
        ctrl->sizes = nvme_ns_sizes(s, &ctrl->nsizes);
    }
    snprintf(ctrl->hostnqn, sizeof(ctrl->hostnqn), "%s", a->hostnqn);
    snprintf(ctrl->subnqn, sizeof(ctrl->subnqn), "%s", a->subnqn);
    memcpy(ctrl->hostid, a->hostid, 16);
    snprintf(ctrl->peer, sizeof(ctrl->peer), "%s", q->c->peer);
    ctrl->port_id = q->port_id;
    ctrl->inline_size = q->port.inline_data_size;
    ctrl->io_qsize = (uint16_t)q->port.max_queue_size;
    ctrl->nr_io_queues = nq;
    /* A discovery controller without keep-alive would hold its socket for
     * ever once the host forgot it: it gets two minutes, as Linux's. */
    ctrl->kato_ms = !s && a->kato == 0 ? NVME_DISC_KATO_MS : a->kato;
    ctrl->admin = q;
    nvme_ctrl_seen(ctrl);
    return ctrl;
}

static void connect_admin(struct nvme_cmd *cmd, const struct connect_args *a)
{
    struct nvme_queue *q = cmd->q;
    if (a->sqsize < 2 || a->sqsize > NVME_ADMIN_QSIZE)
        return refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, NVME_IPO_SQE(NVME_CONNECT_SQSIZE),
                      a->hostnqn, "admin queue size out of range");
    if (a->cntlid != 0xffff)
        return refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, NVME_IPO_DATA(NVME_CONNECT_CNTLID),
                      a->hostnqn, "admin queue must ask for a dynamic controller (CNTLID FFFFh)");
    struct nvme_conf *conf = nvme_conf_current();
    struct nvme_subsys *s = NULL;
    const struct nvme_host *h = NULL;
    if (strcmp(a->subnqn, NVME_DISC_NQN) != 0) {
        s = nvme_conf_find_nqn(conf, a->subnqn);
        uint16_t st;
        uint32_t ipo;
        const char *why = !s                ? "no such subsystem"
                          : q->port_id == 0 ? "discovery-only port"
                                            : host_check(s, q->port_id, a->hostnqn, &st, &ipo, &h);
        if (!s || q->port_id == 0) {
            st = NVME_SC_CONNECT_INVALID_PARAM;
            ipo = NVME_IPO_DATA(NVME_CONNECT_SUBNQN);
        }
        if (why) {
            char msg[NVME_NQN_MAX + 80];
            snprintf(msg, sizeof(msg), "%s (%s)", why, a->subnqn);
            nvme_conf_unref(conf);
            return refuse(cmd, st, ipo, a->hostnqn, msg);
        }
    }
    struct nvme_auth_keys *keys;
    if (connect_keys(cmd, h, a, &keys) < 0) {
        nvme_conf_unref(conf);
        return;
    }
    struct nvme_ctrl *ctrl = ctrl_new(q, a, s);
    nvme_conf_unref(conf); /* ctrl holds its own reference on s */
    if (ctrl)
        ctrl->auth_keys = keys;
    else
        nvme_auth_keys_free(keys);
    if (!ctrl || nvme_ctrl_register(ctrl) < 0) {
        if (ctrl) {
            ctrl->admin = NULL;
            nvme_ctrl_unref(ctrl);
        }
        return refuse(cmd, NVME_SC_CONNECT_CTRL_BUSY, 0, a->hostnqn, "no controller available");
    }
    q->ctrl = ctrl;
    q->qid = 0;
    q->sqsize = a->sqsize;
    q->sqflow_off = (a->cattr & NVME_CATTR_DISABLE_SQFLOW) != 0;
    connect_done(cmd);
    nvme_ctrl_ka_start(q);
    if (ctrl->discovery)
        nvme_ctrl_disc_watch_start(q);
    log_info("%s: nvme: host %s connected to %s: controller %u (keep-alive %u ms%s)", q->c->peer,
             a->hostnqn, a->subnqn, ctrl->cntlid, ctrl->kato_ms,
             q->auth_pending ? ", authentication required" : "");
    nvme_cmd_complete(cmd);
}

/* Whether the I/O queue's Connect may join ctrl; else refused (done). */
static bool io_check(struct nvme_cmd *cmd, struct nvme_ctrl *ctrl, const struct connect_args *a)
{
    const char *why = NULL;
    uint32_t ipo = NVME_IPO_DATA(NVME_CONNECT_CNTLID);
    if (strcmp(ctrl->hostnqn, a->hostnqn) != 0) {
        why = "I/O queue from another host NQN than its controller's";
        ipo = NVME_IPO_DATA(NVME_CONNECT_HOSTNQN);
    } else if (memcmp(ctrl->hostid, a->hostid, 16) != 0) {
        why = "I/O queue from another host ID than its controller's";
        ipo = NVME_IPO_DATA(NVME_CONNECT_HOSTID);
    } else if (strcmp(ctrl->subnqn, a->subnqn) != 0) {
        why = "I/O queue names another subsystem than its controller's";
        ipo = NVME_IPO_DATA(NVME_CONNECT_SUBNQN);
    } else if (ctrl->discovery) {
        why = "a discovery controller has no I/O queues";
        ipo = NVME_IPO_SQE(NVME_CONNECT_QID);
    } else if (ctrl->port_id != cmd->q->port_id) {
        why = "I/O queue on another port than its controller";
    } else if (a->qid > ctrl->nr_io_queues) {
        why = "queue ID above the number of queues";
        ipo = NVME_IPO_SQE(NVME_CONNECT_QID);
    } else if (a->sqsize < 2 || a->sqsize > ctrl->io_qsize) {
        why = "I/O queue size out of range";
        ipo = NVME_IPO_SQE(NVME_CONNECT_SQSIZE);
    }
    if (why)
        refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, ipo, a->hostnqn, why);
    return why == NULL;
}

static void connect_io(struct nvme_cmd *cmd, const struct connect_args *a)
{
    struct nvme_queue *q = cmd->q;
    struct nvme_ctrl *ctrl = nvme_ctrl_find(a->cntlid);
    if (!ctrl)
        return refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, NVME_IPO_DATA(NVME_CONNECT_CNTLID),
                      a->hostnqn, "no such controller");
    if (!io_check(cmd, ctrl, a)) {
        nvme_ctrl_unref(ctrl);
        return;
    }
    pthread_mutex_lock(&ctrl->lock);
    bool taken = ctrl->dead || ctrl->ioq[a->qid] != NULL;
    if (!taken)
        ctrl->ioq[a->qid] = q;
    pthread_mutex_unlock(&ctrl->lock);
    if (taken) {
        nvme_ctrl_unref(ctrl);
        return refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, NVME_IPO_SQE(NVME_CONNECT_QID),
                      a->hostnqn, "queue ID already connected (or controller gone)");
    }
    q->ctrl = ctrl; /* the reference nvme_ctrl_find took */
    q->qid = a->qid;
    q->sqsize = a->sqsize;
    q->sqflow_off = (a->cattr & NVME_CATTR_DISABLE_SQFLOW) != 0;
    connect_done(cmd);
    log_debug("%s: nvme: I/O queue %u of controller %u (%u entries)", q->c->peer, q->qid,
              ctrl->cntlid, q->sqsize);
    nvme_cmd_complete(cmd);
}

static void fabrics_connect(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    if (q->state != QS_CONNECT) {
        cmd->status = NVME_SC_CMD_SEQ_ERROR;
        return nvme_cmd_complete(cmd);
    }
    if (cmd->data_len != NVME_CONNECT_DATA_LEN) {
        cmd->status = NVME_SC_SGL_INVALID_DATA;
        return nvme_cmd_complete(cmd);
    }
    if (!cmd->data_ready)
        return nvme_cmd_request_data(cmd);
    const uint8_t *sqe = cmd->sqe, *d = cmd->buf;
    struct connect_args a = {
        .qid = le16_get(sqe + NVME_CONNECT_QID),
        .sqsize = (uint16_t)(le16_get(sqe + NVME_CONNECT_SQSIZE) + 1u),
        .cattr = sqe[NVME_CONNECT_CATTR],
        .kato = le32_get(sqe + NVME_CONNECT_KATO),
        .cntlid = le16_get(d + NVME_CONNECT_CNTLID),
        .hostid = d + NVME_CONNECT_HOSTID,
    };
    if (le16_get(sqe + NVME_CONNECT_RECFMT) != 0)
        return refuse(cmd, NVME_SC_CONNECT_FORMAT, NVME_IPO_SQE(NVME_CONNECT_RECFMT), NULL,
                      "unknown record format");
    if (!nqn_field(d + NVME_CONNECT_HOSTNQN, a.hostnqn))
        return refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, NVME_IPO_DATA(NVME_CONNECT_HOSTNQN), NULL,
                      "host NQN empty or too long");
    if (!nqn_field(d + NVME_CONNECT_SUBNQN, a.subnqn))
        return refuse(cmd, NVME_SC_CONNECT_INVALID_PARAM, NVME_IPO_DATA(NVME_CONNECT_SUBNQN),
                      a.hostnqn, "subsystem NQN empty or too long");
    if (a.qid == 0)
        connect_admin(cmd, &a);
    else
        connect_io(cmd, &a);
}

/* ---- properties ---- */

static uint64_t prop_cap(const struct nvme_ctrl *ctrl)
{
    /* A discovery controller has no I/O queue for MQES to bound: it
     * advertises the largest size, as Linux's target does, since Linux's
     * host warns on every discovery when MQES (or MAXCMD) is below its
     * queue_size (128 by default), which it then clamps to no purpose. */
    uint64_t mqes = (ctrl->discovery ? NVME_QSIZE_MAX : ctrl->io_qsize) - 1u;
    /* CSS bit 37: the NVM command set; TO 15 (7.5 s); MPSMIN/MAX 0 (4 KiB). */
    return mqes | (1ull << 16) | (15ull << 24) | (1ull << 37);
}

static void cc_write(struct nvme_ctrl *ctrl, uint32_t cc)
{
    pthread_mutex_lock(&ctrl->lock);
    uint32_t old = ctrl->cc;
    ctrl->cc = cc;
    if ((cc & NVME_CC_EN) && !(old & NVME_CC_EN)) {
        /* 64-byte SQEs, 16-byte CQEs, 4 KiB pages, NVM set, round robin. */
        bool ok = ((cc >> 16) & 0xf) == 6 && ((cc >> 20) & 0xf) == 4 && ((cc >> 7) & 0xf) == 0 &&
                  ((cc >> 4) & 0x7) == 0 && ((cc >> 11) & 0x7) == 0;
        ctrl->csts = ok ? NVME_CSTS_RDY : NVME_CSTS_CFS;
    }
    if (!(cc & NVME_CC_EN) && (old & NVME_CC_EN))
        ctrl->csts &= ~(NVME_CSTS_RDY | NVME_CSTS_CFS);
    if ((cc & NVME_CC_SHN_MASK) && !(old & NVME_CC_SHN_MASK))
        ctrl->csts |= NVME_CSTS_SHST_DONE;
    if (!(cc & NVME_CC_SHN_MASK) && (old & NVME_CC_SHN_MASK))
        ctrl->csts &= ~NVME_CSTS_SHST_DONE;
    pthread_mutex_unlock(&ctrl->lock);
}

static void prop_get_set(struct nvme_cmd *cmd, bool set)
{
    struct nvme_queue *q = cmd->q;
    struct nvme_ctrl *ctrl = q->ctrl;
    if (q->state != QS_LIVE || q->qid != 0) {
        cmd->status = q->state != QS_LIVE ? NVME_SC_CMD_SEQ_ERROR : NVME_SC_INVALID_FIELD;
        return nvme_cmd_complete(cmd);
    }
    bool wide = cmd->sqe[NVME_PROP_ATTRIB] & 1;
    uint32_t off = le32_get(cmd->sqe + NVME_PROP_OFFSET);
    if (set) {
        if (off == NVME_REG_CC && !wide)
            cc_write(ctrl, (uint32_t)le64_get(cmd->sqe + NVME_PROP_VALUE));
        else
            cmd->status = NVME_SC_INVALID_FIELD;
        return nvme_cmd_complete(cmd);
    }
    pthread_mutex_lock(&ctrl->lock);
    if (off == NVME_REG_CAP && wide)
        cmd->result = prop_cap(ctrl);
    else if (off == NVME_REG_VS && !wide)
        cmd->result = 0x00020000; /* 2.0 */
    else if (off == NVME_REG_CC && !wide)
        cmd->result = ctrl->cc;
    else if (off == NVME_REG_CSTS && !wide)
        cmd->result = ctrl->csts;
    else
        cmd->status = NVME_SC_INVALID_FIELD;
    pthread_mutex_unlock(&ctrl->lock);
    nvme_cmd_complete(cmd);
}

void nvme_fabrics_exec(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    if (q->ctrl)
        nvme_ctrl_seen(q->ctrl);
    switch (cmd->sqe[NVME_FCTYPE_OFF]) {
    case NVME_FCT_CONNECT:
        return fabrics_connect(cmd);
    case NVME_FCT_PROP_GET:
        return prop_get_set(cmd, false);
    case NVME_FCT_PROP_SET:
        return prop_get_set(cmd, true);
    case NVME_FCT_DISCONNECT:
        if (q->state != QS_LIVE) {
            cmd->status = NVME_SC_CMD_SEQ_ERROR;
            return nvme_cmd_complete(cmd);
        }
        log_debug("%s: nvme: Disconnect of queue %u", q->c->peer, q->qid);
        nvme_cmd_complete(cmd);
        conn_finish(q->c); /* the response leaves first */
        return;
    case NVME_FCT_AUTH_SEND:
        return nvme_auth_send(cmd);
    case NVME_FCT_AUTH_RECV:
        return nvme_auth_recv(cmd);
    default:
        cmd->status = NVME_SC_INVALID_OPCODE;
        return nvme_cmd_complete(cmd);
    }
}
