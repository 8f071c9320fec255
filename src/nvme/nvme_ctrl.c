/*
 * Controllers (nvme_internal.h): the CNTLID table, Fabrics Connect (the
 * dynamic controller model: an admin queue's Connect creates a controller,
 * I/O queues name it by CNTLID), Property Get/Set, Disconnect, keep-alive,
 * asynchronous events, teardown and configuration changes.
 *
 * Locks: tbl_lock (the table) is taken before a controller's lock, never
 * after. The table holds no reference: a controller leaves it when its
 * last reference goes, and lookups only take a reference on a controller
 * whose count is still above zero.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_dhchap.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_target.h"

static pthread_mutex_t tbl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvme_ctrl **tbl;
static size_t tbl_n, tbl_cap;
static uint16_t next_cntlid = 1;
static struct registry sessions = REGISTRY_INIT(0);

/* ---- table and references ---- */

static bool cntlid_used(uint16_t id)
{
    for (size_t i = 0; i < tbl_n; i++)
        if (tbl[i]->cntlid == id)
            return true;
    return false;
}

/* Add ctrl with a fresh CNTLID. 0 or -ENOSPC / -ENOMEM. */
static int tbl_add(struct nvme_ctrl *ctrl)
{
    int rc = -ENOSPC;
    pthread_mutex_lock(&tbl_lock);
    if (tbl_n == tbl_cap) {
        size_t cap = tbl_cap ? tbl_cap * 2 : 16;
        struct nvme_ctrl **n = realloc(tbl, cap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&tbl_lock);
            return -ENOMEM;
        }
        tbl = n;
        tbl_cap = cap;
    }
    uint16_t lo, hi;
    nvme_ana_cntlid_range(&lo, &hi);
    for (unsigned tries = 0; tries <= (unsigned)(hi - lo); tries++) {
        uint16_t id = next_cntlid < lo || next_cntlid > hi ? lo : next_cntlid;
        next_cntlid = id >= hi ? lo : (uint16_t)(id + 1);
        if (!cntlid_used(id)) {
            ctrl->cntlid = id;
            tbl[tbl_n++] = ctrl;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&tbl_lock);
    return rc;
}

static struct nvme_ctrl *tbl_find(uint16_t cntlid)
{
    struct nvme_ctrl *found = NULL;
    pthread_mutex_lock(&tbl_lock);
    for (size_t i = 0; i < tbl_n && !found; i++) {
        struct nvme_ctrl *c = tbl[i];
        if (c->cntlid != cntlid)
            continue;
        int r = atomic_load(&c->refs);
        while (r > 0 && !atomic_compare_exchange_weak(&c->refs, &r, r + 1))
            ;
        if (r > 0)
            found = c;
    }
    pthread_mutex_unlock(&tbl_lock);
    return found;
}

void nvme_ctrl_ref(struct nvme_ctrl *ctrl)
{
    atomic_fetch_add(&ctrl->refs, 1);
}

void nvme_ctrl_unref(struct nvme_ctrl *ctrl)
{
    if (!ctrl || atomic_fetch_sub(&ctrl->refs, 1) != 1)
        return;
    pthread_mutex_lock(&tbl_lock);
    for (size_t i = 0; i < tbl_n; i++)
        if (tbl[i] == ctrl) {
            tbl[i] = tbl[--tbl_n];
            break;
        }
    pthread_mutex_unlock(&tbl_lock);
    registry_remove(&sessions, &ctrl->reg);
    nvme_subsys_unref(ctrl->subsys);
    free(ctrl->sizes);
    free(ctrl->resv_log);
    nvme_auth_keys_free(ctrl->auth_keys);
    pthread_mutex_destroy(&ctrl->lock);
    free(ctrl->ioq);
    free(ctrl);
}

void nvme_ctrl_seen(struct nvme_ctrl *ctrl)
{
    atomic_store_explicit(&ctrl->last_seen_ns, time_now_ns(), memory_order_relaxed);
}

void nvme_ctrl_teardown(struct nvme_ctrl *ctrl, const char *why)
{
    pthread_mutex_lock(&ctrl->lock);
    if (ctrl->dead) {
        pthread_mutex_unlock(&ctrl->lock);
        return;
    }
    ctrl->dead = true;
    if (ctrl->admin)
        conn_close_async(ctrl->admin->c);
    for (unsigned i = 1; i <= ctrl->nr_io_queues; i++)
        if (ctrl->ioq[i])
            conn_close_async(ctrl->ioq[i]->c);
    pthread_mutex_unlock(&ctrl->lock);
    registry_remove(&sessions, &ctrl->reg);
    log_info("%s: nvme: controller %u of host %s (%s) torn down: %s", ctrl->peer, ctrl->cntlid,
             ctrl->hostnqn, ctrl->subnqn, why);
}

void nvme_ctrl_queue_closed(struct nvme_queue *q)
{
    struct nvme_ctrl *ctrl = q->ctrl;
    bool admin = false;
    pthread_mutex_lock(&ctrl->lock);
    if (ctrl->admin == q) {
        ctrl->admin = NULL;
        admin = true;
    } else if (q->qid <= ctrl->nr_io_queues && ctrl->ioq[q->qid] == q) {
        ctrl->ioq[q->qid] = NULL;
    }
    pthread_mutex_unlock(&ctrl->lock);
    if (admin)
        nvme_ctrl_teardown(ctrl, "admin queue closed");
}

/* ---- keep-alive ---- */

static void ka_expired(struct reactor_timer *t)
{
    struct nvme_queue *q = container_of(t, struct nvme_queue, ka_timer);
    struct conn *c = q->c;
    struct nvme_ctrl *ctrl = q->ctrl;
    uint64_t kato_ns = (uint64_t)ctrl->kato_ms * 1000000u;
    uint64_t last = atomic_load_explicit(&ctrl->last_seen_ns, memory_order_relaxed);
    uint64_t now = time_now_ns();
    if (!c->closing && now - last >= kato_ns) {
        char why[96];
        snprintf(why, sizeof(why), "keep-alive timeout (no command for %u ms)", ctrl->kato_ms);
        nvme_ctrl_teardown(ctrl, why);
    } else if (!c->closing) {
        reactor_timer_start(c->reactor, t, last + kato_ns - now);
        return; /* the timer keeps its reference */
    }
    conn_put(c);
}

void nvme_ctrl_ka_start(struct nvme_queue *q)
{
    if (!q->ctrl->kato_ms)
        return;
    reactor_timer_init(&q->ka_timer, ka_expired);
    conn_get(q->c);
    reactor_timer_start(q->c->reactor, &q->ka_timer, (uint64_t)q->ctrl->kato_ms * 1000000u);
}

/* ---- asynchronous events ---- */

static void aen_raise_locked(struct nvme_ctrl *ctrl, uint32_t ev);

#define DISC_POLL_NS (1000ull * 1000000) /* one atomic load a second */

static void disc_poll(struct reactor_timer *t)
{
    struct nvme_queue *q = container_of(t, struct nvme_queue, disc_timer);
    struct conn *c = q->c;
    if (c->closing) {
        conn_put(c);
        return;
    }
    uint64_t gen = conf_part_number(CONF_NVME) + nvme_ana_peers_gen();
    if (gen != q->disc_gen) {
        q->disc_gen = gen;
        pthread_mutex_lock(&q->ctrl->lock);
        if (q->ctrl->aec & NVME_AEC_DISC_CHANGE)
            aen_raise_locked(q->ctrl, NVME_AEN_DISC_CHANGED);
        pthread_mutex_unlock(&q->ctrl->lock);
    }
    reactor_timer_start(c->reactor, t, DISC_POLL_NS); /* keeps its reference */
}

void nvme_ctrl_disc_watch_start(struct nvme_queue *q)
{
    q->disc_gen = conf_part_number(CONF_NVME) + nvme_ana_peers_gen();
    reactor_timer_init(&q->disc_timer, disc_poll);
    conn_get(q->c);
    reactor_timer_start(q->c->reactor, &q->disc_timer, DISC_POLL_NS);
}

static struct nvme_cmd *aer_slot(struct nvme_queue *q, uint16_t cid)
{
    for (unsigned i = 0; i < q->nslots; i++)
        if (q->slots[i].state == CMD_EXEC && q->slots[i].aer && q->slots[i].cid == cid)
            return &q->slots[i];
    return NULL;
}

/* Pair held AERs with pending events; on the admin queue's reactor. */
static void aen_deliver(struct nvme_ctrl *ctrl, struct nvme_queue *q)
{
    for (;;) {
        pthread_mutex_lock(&ctrl->lock);
        if (!ctrl->naer || !ctrl->naen) {
            pthread_mutex_unlock(&ctrl->lock);
            return;
        }
        uint16_t cid = ctrl->aer_cids[--ctrl->naer];
        uint32_t ev = ctrl->aen_pending[0];
        memmove(ctrl->aen_pending, ctrl->aen_pending + 1, --ctrl->naen * sizeof(uint32_t));
        pthread_mutex_unlock(&ctrl->lock);
        struct nvme_cmd *cmd = aer_slot(q, cid);
        if (cmd) {
            cmd->aer = false;
            cmd->result = ev;
            nvme_cmd_complete(cmd);
        }
    }
}

static void aen_run(struct reactor_msg *m)
{
    struct nvme_ctrl *ctrl = container_of(m, struct nvme_ctrl, aen_msg);
    struct conn *c = ctrl->aen_conn;
    pthread_mutex_lock(&ctrl->lock);
    ctrl->aen_conn = NULL;
    pthread_mutex_unlock(&ctrl->lock);
    if (!c->closing && c->proto)
        aen_deliver(ctrl, c->proto);
    conn_put(c);
    nvme_ctrl_unref(ctrl);
}

/* Queue event ev (ctrl->lock held) and have the admin queue deliver it. */
static void aen_raise_locked(struct nvme_ctrl *ctrl, uint32_t ev)
{
    for (unsigned i = 0; i < ctrl->naen; i++)
        if (ctrl->aen_pending[i] == ev)
            return; /* the host reads the log page once for both */
    if (ctrl->naen < 4)
        ctrl->aen_pending[ctrl->naen++] = ev;
    if (ctrl->admin && !ctrl->aen_conn && !ctrl->dead) {
        ctrl->aen_conn = ctrl->admin->c;
        conn_get(ctrl->aen_conn);
        nvme_ctrl_ref(ctrl);
        ctrl->aen_msg.fn = aen_run;
        reactor_post(ctrl->aen_conn->reactor, &ctrl->aen_msg);
    }
}

void nvme_ctrl_aen(struct nvme_ctrl *ctrl, uint32_t ev)
{
    pthread_mutex_lock(&ctrl->lock);
    aen_raise_locked(ctrl, ev);
    pthread_mutex_unlock(&ctrl->lock);
}

void nvme_ctrl_aer(struct nvme_cmd *cmd)
{
    struct nvme_ctrl *ctrl = cmd->q->ctrl;
    pthread_mutex_lock(&ctrl->lock);
    if (ctrl->naer > NVME_AERL) {
        pthread_mutex_unlock(&ctrl->lock);
        cmd->status = NVME_SC_AER_LIMIT;
        nvme_cmd_complete(cmd);
        return;
    }
    ctrl->aer_cids[ctrl->naer++] = cmd->cid;
    cmd->aer = true;
    pthread_mutex_unlock(&ctrl->lock);
    aen_deliver(ctrl, cmd->q);
}

void nvme_ctrl_changed_ns(struct nvme_ctrl *ctrl, uint8_t *buf)
{
    memset(buf, 0, 4096);
    pthread_mutex_lock(&ctrl->lock);
    if (ctrl->changed_overflow)
        le32_put(buf, 0xffffffffu); /* more than the list holds */
    else
        for (unsigned i = 0; i < ctrl->nchanged; i++)
            le32_put(buf + 4 * i, ctrl->changed_ns[i]);
    ctrl->nchanged = 0;
    ctrl->changed_overflow = false;
    pthread_mutex_unlock(&ctrl->lock);
}

static void changed_add_locked(struct nvme_ctrl *ctrl, uint32_t nsid)
{
    for (unsigned i = 0; i < ctrl->nchanged; i++)
        if (ctrl->changed_ns[i] == nsid)
            return;
    if (ctrl->nchanged == NVME_CHANGED_NS_MAX)
        ctrl->changed_overflow = true;
    else
        ctrl->changed_ns[ctrl->nchanged++] = nsid;
}

struct nvme_ns_size *nvme_ns_sizes(const struct nvme_subsys *s, size_t *n)
{
    *n = 0;
    struct nvme_ns_size *a = s && s->nns ? calloc(s->nns, sizeof(*a)) : NULL;
    for (size_t i = 0; a && i < s->nns; i++)
        if (s->ns[i].vol)
            a[(*n)++] = (struct nvme_ns_size){s->ns[i].nsid, volume_size(s->ns[i].vol)};
    return a;
}

static bool size_changed(const struct nvme_ctrl *ctrl, const struct nvme_ns *ns)
{
    for (size_t i = 0; i < ctrl->nsizes; i++)
        if (ctrl->sizes[i].nsid == ns->nsid)
            return ns->vol && volume_size(ns->vol) != ctrl->sizes[i].bytes;
    return false;
}

/* Namespaces that differ between a and b (added, removed, another volume,
 * read-only or not, resized since the controller last looked), into
 * ctrl's changed list; the sizes seen are kept. Whether any did. */
static bool ns_diff_locked(struct nvme_ctrl *ctrl, const struct nvme_subsys *a,
                           const struct nvme_subsys *b)
{
    bool any = false;
    for (size_t i = 0; i < a->nns; i++) {
        const struct nvme_ns *x = &a->ns[i], *y = nvme_subsys_ns(b, x->nsid);
        if (!y || y->vol != x->vol || y->readonly != x->readonly || size_changed(ctrl, y)) {
            changed_add_locked(ctrl, x->nsid);
            any = true;
        }
    }
    for (size_t i = 0; i < b->nns; i++)
        if (!nvme_subsys_ns(a, b->ns[i].nsid)) {
            changed_add_locked(ctrl, b->ns[i].nsid);
            any = true;
        }
    size_t n;
    struct nvme_ns_size *sizes = nvme_ns_sizes(b, &n);
    if (sizes || n == 0) {
        free(ctrl->sizes);
        ctrl->sizes = sizes;
        ctrl->nsizes = n;
    }
    return any;
}

/* ---- configuration changes ---- */

/* The controllers serving s (NULL: every I/O controller), each with a
 * reference (*n of them). */
static struct nvme_ctrl **ctrls_of(const struct nvme_subsys *s, size_t *n)
{
    *n = 0;
    pthread_mutex_lock(&tbl_lock);
    struct nvme_ctrl **a = calloc(tbl_n ? tbl_n : 1, sizeof(*a));
    for (size_t i = 0; a && i < tbl_n; i++) {
        struct nvme_ctrl *c = tbl[i];
        pthread_mutex_lock(&c->lock);
        bool match = (s ? c->subsys == s : !c->discovery) && !c->dead;
        pthread_mutex_unlock(&c->lock);
        int r = atomic_load(&c->refs);
        while (match && r > 0 && !atomic_compare_exchange_weak(&c->refs, &r, r + 1))
            ;
        if (match && r > 0)
            a[(*n)++] = c;
    }
    pthread_mutex_unlock(&tbl_lock);
    return a;
}

struct nvme_ctrl **nvme_ctrl_all(size_t *n)
{
    return ctrls_of(NULL, n);
}

void nvme_ctrl_aen_locked(struct nvme_ctrl *ctrl, uint32_t ev)
{
    aen_raise_locked(ctrl, ev);
}

void nvme_target_subsys_gone(struct nvme_subsys *s)
{
    size_t n;
    struct nvme_ctrl **a = ctrls_of(s, &n);
    for (size_t i = 0; i < n; i++) {
        nvme_ctrl_teardown(a[i], "subsystem removed from the configuration");
        nvme_ctrl_unref(a[i]);
    }
    free(a);
}

static void ctrl_adopt(struct nvme_ctrl *ctrl, struct nvme_subsys *old, struct nvme_subsys *next)
{
    const char *why = NULL;
    if (!next->allow_any_host && !nvme_subsys_host(next, ctrl->hostnqn))
        why = "host no longer allowed on the subsystem";
    else if (!nvme_subsys_on_port(next, ctrl->port_id))
        why = "subsystem no longer served on the port";
    if (why) {
        nvme_ctrl_teardown(ctrl, why);
        return;
    }
    nvme_subsys_ref(next); /* next may be old itself: a volume was resized */
    pthread_mutex_lock(&ctrl->lock);
    ctrl->subsys = next;
    atomic_fetch_add(&ctrl->subsys_gen, 1);
    bool changed = ns_diff_locked(ctrl, old, next);
    if (changed && (ctrl->aec & NVME_AEC_NS_ATTR))
        aen_raise_locked(ctrl, NVME_AEN_NS_CHANGED);
    pthread_mutex_unlock(&ctrl->lock);
    nvme_subsys_unref(old);
    if (changed)
        log_info("%s: nvme: controller %u: namespaces of %s changed", ctrl->peer, ctrl->cntlid,
                 ctrl->subnqn);
}

void nvme_target_subsys_changed(struct nvme_subsys *old, struct nvme_subsys *next)
{
    size_t n;
    struct nvme_ctrl **a = ctrls_of(old, &n);
    for (size_t i = 0; i < n; i++) {
        ctrl_adopt(a[i], old, next);
        nvme_ctrl_unref(a[i]);
    }
    free(a);
}

/* ---- sessions ---- */

int nvme_sessions_list(struct nvme_session_info **out)
{
    registry_lock(&sessions);
    size_t n = sessions.count, i = 0;
    struct nvme_session_info *a = calloc(n ? n : 1, sizeof(*a));
    if (!a) {
        registry_unlock(&sessions);
        return -ENOMEM;
    }
    REGISTRY_FOREACH (&sessions, e) {
        struct nvme_ctrl *ctrl = container_of(e, struct nvme_ctrl, reg);
        struct nvme_session_info *s = &a[i++];
        /* Fixed at Connect, before the entry was listed. */
        snprintf(s->peer, sizeof(s->peer), "%s", ctrl->peer);
        snprintf(s->hostnqn, sizeof(s->hostnqn), "%s", ctrl->hostnqn);
        snprintf(s->subnqn, sizeof(s->subnqn), "%s", ctrl->subnqn);
        s->cntlid = ctrl->cntlid;
        s->subsys_id = ctrl->subsys_id;
        s->port_id = ctrl->port_id;
        s->discovery = ctrl->discovery;
        s->connected_at = ctrl->connected_at;
    }
    registry_unlock(&sessions);
    *out = a;
    return (int)n;
}

/* Called by nvme_fabrics.c once a new controller is filled in. */
int nvme_ctrl_register(struct nvme_ctrl *ctrl)
{
    int rc = tbl_add(ctrl);
    if (rc == 0) {
        ctrl->connected_at = (uint64_t)time(NULL);
        registry_add(&sessions, &ctrl->reg);
    }
    return rc;
}

struct nvme_ctrl *nvme_ctrl_find(uint16_t cntlid)
{
    return tbl_find(cntlid);
}

int nvme_target_init(void)
{
    nvme_dhchap_init();
    nvme_conn_reopen();
    return 0;
}

void nvme_target_stop(void)
{
    nvme_conn_close_all();
}
