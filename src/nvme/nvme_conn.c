/*
 * One NVMe/TCP connection's life (nvme_internal.h): admission and the
 * handshake deadline, command slots and the payload bound, close, the
 * shutdown drain. The reader is nvme_reader.c, what is sent nvme_send.c.
 * Runs on the connection's reactor thread, except the registry walks.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/bufpool.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_target.h"

static struct registry queues = REGISTRY_INIT(0);
static atomic_uint live; /* connections not freed yet */
static atomic_bool draining_all;
static _Atomic size_t held_total; /* payload bytes of every queue */

bool nvme_held_room(const struct nvme_queue *q, size_t need)
{
    return q->held == 0 ||
           (q->held + need <= NVME_HELD_MAX &&
            atomic_load_explicit(&held_total, memory_order_relaxed) + need <= NVME_HELD_BUDGET);
}
static struct admit_gate nvme_gate = ADMIT_GATE_INIT("nvme", NVME_DEFAULT_MAX_CONNECTIONS);

void nvme_target_set_max_connections(unsigned n)
{
    admit_set_max_total(&nvme_gate, n);
}

/* ---- slots ---- */

struct nvme_cmd *nvme_slot_get(struct nvme_queue *q)
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
        nvme_r2t_flush(q);
        if (q->held_paused && nvme_held_room(q, 0)) {
            q->held_paused = false;
            conn_pause_input(q->c, false);
        }
    }
    conn_put(q->c);
}

void nvme_slot_free(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    struct conn *c = q->c;
    if (cmd->buf) {
        q->held -= cmd->buf_size;
        atomic_fetch_sub(&held_total, cmd->buf_size);
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
    bool wake = q->held_paused || q->r2t_head || q->draining;
    if (wake && !q->resume_posted && !c->closing) {
        q->resume_posted = true;
        conn_get(c);
        q->resume_msg.fn = resume_run;
        reactor_post(c->reactor, &q->resume_msg);
    }
    conn_put(c);
}

void nvme_cmd_release(void *arg)
{
    struct nvme_cmd *cmd = arg;
    if (--cmd->pending == 0)
        nvme_slot_free(cmd);
}

int nvme_cmd_buf(struct nvme_cmd *cmd, size_t size)
{
    if (cmd->buf && cmd->buf_size >= size)
        return 0;
    if (cmd->buf) {
        cmd->q->held -= cmd->buf_size;
        atomic_fetch_sub(&held_total, cmd->buf_size);
        bufpool_put(cmd->buf, cmd->buf_size);
    }
    size = size ? size : 1;
    cmd->buf = bufpool_get(size);
    if (!cmd->buf)
        return -ENOMEM;
    cmd->buf_size = size;
    cmd->q->held += size;
    atomic_fetch_add(&held_total, size);
    return 0;
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
            nvme_slot_free(cmd);
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
    nvme_auth_queue_free(q); /* after the commands: a DH job may hold it */
    free(q->mslots);
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
    .on_input = nvme_conn_input,
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
    } else if (!c->closing && nvme_auth_unfinished(q)) {
        log_warn("%s: nvme: host %s did not authenticate queue %u within %u s, closing", c->peer,
                 q->ctrl->hostnqn, q->qid, admit_handshake_timeout_s());
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

static void deadline_off(struct nvme_queue *q)
{
    if (reactor_timer_armed(&q->hs_timer)) {
        reactor_timer_cancel(q->c->reactor, &q->hs_timer);
        conn_put(q->c);
    }
}

void nvme_conn_auth_deadline(struct nvme_queue *q)
{
    deadline_off(q);
    conn_get(q->c);
    reactor_timer_start(q->c->reactor, &q->hs_timer, admit_handshake_timeout_ns());
}

void nvme_conn_connected(struct nvme_queue *q)
{
    q->state = QS_LIVE;
    /* A queue that must authenticate stays a pending connection (evictable,
     * counted as one in its handshake) and gets a whole deadline for it. */
    if (q->auth_pending)
        nvme_conn_auth_deadline(q);
    else
        nvme_conn_authenticated(q);
}

void nvme_conn_authenticated(struct nvme_queue *q)
{
    admit_promote(&q->ticket);
    deadline_off(q);
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
