/*
 * Asymmetric namespace access (NVMe 2.0 base 8.1; nvme_target.h says who
 * the paths are). A subsystem whose `ana` is on reports it: Identify
 * Controller CMIC bit 3 and the ANA fields, each namespace's ANA group
 * (Identify Namespace ANAGRPID), log page 0Ch with the groups' states as
 * seen through this controller, and an Asymmetric Namespace Access Change
 * notice when they change (if the host enabled it).
 *
 * In a gateway group a namespace's group is the member that is optimized
 * for its image, the one its RBD exclusive lock settles on (docs/ha.md):
 * when that member dies, the namespace moves to the group of its new
 * optimized member. The state through a member is optimized for its own
 * group and non-optimized for the others, which still serve I/O (librbd
 * moves the lock), exactly as the ALUA view of the image's LU; a fenced
 * member reports every group inaccessible and refuses I/O with the path
 * status ANA Inaccessible, which makes the host retry on another path.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nvme/nvme_internal.h"

#define ANATT_S 10                     /* ANA transition time, as ALUA's */
#define ANA_POLL_NS (200ull * 1000000) /* the watch's period */
#define ANA_HDR 16
#define ANA_DESC 32

static const struct nvme_path_ops *paths; /* set at start-up */

void nvme_target_set_paths(const struct nvme_path_ops *ops)
{
    paths = ops;
}

void nvme_target_volume_hold(struct volume *vol)
{
    if (paths && paths->volume_hold && vol)
        paths->volume_hold(vol);
}

void nvme_target_volume_release(struct volume *vol)
{
    if (paths && paths->volume_release && vol)
        paths->volume_release(vol);
}

static uint32_t max_groups(void)
{
    return paths && paths->max_groups ? paths->max_groups : 1;
}

uint32_t nvme_ana_group(const struct nvme_ns *ns)
{
    uint32_t g = paths && ns->vol ? paths->group(ns->vol) : 0;
    if (g == 0)
        g = paths ? paths->own_group() : 1; /* a volume of this member only */
    return g >= 1 && g <= max_groups() ? g : 1;
}

static uint8_t group_state(uint32_t group)
{
    if (paths && paths->inaccessible())
        return NVME_ANA_INACCESSIBLE;
    uint32_t own = paths ? paths->own_group() : 1;
    return group == own ? NVME_ANA_OPTIMIZED : NVME_ANA_NON_OPTIMIZED;
}

void nvme_ana_identify_ctrl(const struct nvme_subsys *s, uint8_t *out)
{
    if (!nvme_ana_on(s))
        return;
    out[76] |= 1u << 3;                                           /* CMIC: ANA reporting */
    le32_put(out + 92, le32_get(out + 92) | NVME_AEC_ANA_CHANGE); /* OAES */
    out[261] |= 1u << 2;                                          /* LPA: extended data */
    out[342] = ANATT_S;                                           /* ANATT */
    /* ANACAP: optimized, non-optimized and inaccessible states reported;
     * ANAGRPID may change while attached (bit 6 clear): a namespace
     * follows its optimized member. */
    out[343] = 0x07;
    le32_put(out + 540, le32_get(out + 516)); /* MNAN: NN (hosts size the ANA log from it) */
    le32_put(out + 344, max_groups());        /* ANAGRPMAX */
    le32_put(out + 348, max_groups());        /* NANAGRPID */
}

uint16_t nvme_ana_io_status(const struct nvme_subsys *s)
{
    if (nvme_ana_on(s) && paths && paths->inaccessible())
        return NVME_SC_ANA_INACCESSIBLE;
    return 0;
}

/* Each namespace's group (groups[i] for s->ns[i], 0 when inactive) and a
 * signature of what the log page says. */
static uint64_t ana_view(const struct nvme_subsys *s, uint32_t *groups)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < s->nns; i++) {
        groups[i] = s->ns[i].vol ? nvme_ana_group(&s->ns[i]) : 0;
        uint64_t v = (uint64_t)s->ns[i].nsid << 32 | groups[i] << 8 |
                     (groups[i] ? group_state(groups[i]) : 0);
        h = (h ^ v) * 0x100000001b3ull;
    }
    h ^= paths && paths->inaccessible() ? 1 : 0;
    return h;
}

/* The subsystem ctrl serves now (a reference), or NULL. */
static struct nvme_subsys *ctrl_subsys(struct nvme_ctrl *ctrl)
{
    pthread_mutex_lock(&ctrl->lock);
    struct nvme_subsys *s = ctrl->subsys;
    if (s)
        nvme_subsys_ref(s);
    pthread_mutex_unlock(&ctrl->lock);
    return s;
}

/* The change count for view sig (ctrl->lock held): it moves when the view
 * differs from the last one seen. */
static uint64_t chgcnt_locked(struct nvme_ctrl *ctrl, uint64_t sig)
{
    if (!ctrl->ana_chgcnt || sig != ctrl->ana_sig) {
        ctrl->ana_sig = sig;
        ctrl->ana_chgcnt = ctrl->ana_chgcnt == UINT64_MAX ? 1 : ctrl->ana_chgcnt + 1;
    }
    return ctrl->ana_chgcnt;
}

/* One descriptor per group that holds an active namespace, in group id
 * order, each with its NSIDs in ascending order (s->ns is sorted). */
static size_t ana_fill(const struct nvme_subsys *s, const uint32_t *groups, uint64_t chg, bool rgo,
                       uint8_t *page)
{
    size_t off = ANA_HDR;
    uint16_t ngrps = 0;
    for (uint32_t g = 1; g <= max_groups(); g++) {
        uint32_t n = 0;
        uint8_t *d = page + off;
        for (size_t i = 0; i < s->nns; i++) {
            if (groups[i] != g)
                continue;
            if (!rgo)
                le32_put(d + ANA_DESC + 4 * n, s->ns[i].nsid);
            n++;
        }
        if (!n)
            continue;
        le32_put(d, g);               /* ANAGRPID */
        le32_put(d + 4, rgo ? 0 : n); /* NNSIDS */
        le64_put(d + 8, chg);         /* CHGCNT */
        d[16] = group_state(g);       /* ANAS */
        off += ANA_DESC + (rgo ? 0 : 4 * (size_t)n);
        ngrps++;
    }
    le64_put(page, chg);
    le16_put(page + 8, ngrps);
    return off;
}

uint16_t nvme_ana_log(struct nvme_ctrl *ctrl, bool rgo, uint8_t **page, size_t *len)
{
    struct nvme_subsys *s = ctrl_subsys(ctrl);
    if (!nvme_ana_on(s)) {
        nvme_subsys_unref(s);
        return NVME_SC_INVALID_LOG_PAGE;
    }
    uint32_t *groups = calloc(s->nns ? s->nns : 1, sizeof(*groups));
    *page = calloc(1, ANA_HDR + (size_t)max_groups() * ANA_DESC + 4 * s->nns);
    if (!groups || !*page) {
        free(groups);
        free(*page);
        nvme_subsys_unref(s);
        return NVME_SC_INTERNAL;
    }
    uint64_t sig = ana_view(s, groups);
    pthread_mutex_lock(&ctrl->lock);
    uint64_t chg = chgcnt_locked(ctrl, sig);
    pthread_mutex_unlock(&ctrl->lock);
    *len = ana_fill(s, groups, chg, rgo, *page);
    free(groups);
    nvme_subsys_unref(s);
    return 0;
}

/* What the view of s depends on besides the configuration: the path
 * provider's generation and whether this member is fenced, with s's own
 * build number (a new subsystem object for any configuration change). */
static uint64_t ana_inputs(const struct nvme_subsys *s)
{
    uint64_t gen = paths && paths->generation ? paths->generation() : 0;
    uint64_t h = 0xcbf29ce484222325ull;
    h = (h ^ s->build) * 0x100000001b3ull;
    h = (h ^ gen) * 0x100000001b3ull;
    return (h ^ (paths && paths->inaccessible() ? 1 : 0)) * 0x100000001b3ull;
}

/* The watch: the state through this controller, every ANA_POLL_NS (a
 * membership change, a fenced member, a namespace added); a change raises
 * the notice when the host enabled it. The view (one path-provider call
 * per namespace) is recomputed only when its inputs moved. */
static void ana_poll(struct reactor_timer *t)
{
    struct nvme_queue *q = container_of(t, struct nvme_queue, ana_timer);
    struct conn *c = q->c;
    if (c->closing) {
        conn_put(c);
        return;
    }
    struct nvme_ctrl *ctrl = q->ctrl;
    struct nvme_subsys *s = ctrl_subsys(ctrl);
    uint64_t in = s ? ana_inputs(s) : 0;
    pthread_mutex_lock(&ctrl->lock);
    bool same = s && in == ctrl->ana_inputs;
    pthread_mutex_unlock(&ctrl->lock);
    uint32_t *groups = s && !same ? calloc(s->nns ? s->nns : 1, sizeof(*groups)) : NULL;
    if (groups) {
        uint64_t sig = ana_view(s, groups);
        pthread_mutex_lock(&ctrl->lock);
        bool changed = sig != ctrl->ana_aen_sig;
        ctrl->ana_aen_sig = sig;
        ctrl->ana_inputs = in;
        bool tell = changed && (ctrl->aec & NVME_AEC_ANA_CHANGE);
        pthread_mutex_unlock(&ctrl->lock);
        if (tell)
            nvme_ctrl_aen(ctrl, NVME_AEN_ANA_CHANGED);
    }
    free(groups);
    nvme_subsys_unref(s);
    reactor_timer_start(c->reactor, t, ANA_POLL_NS); /* keeps its reference */
}

void nvme_ana_watch_start(struct nvme_queue *q)
{
    struct nvme_subsys *s = ctrl_subsys(q->ctrl);
    uint32_t *groups = nvme_ana_on(s) ? calloc(s->nns ? s->nns : 1, sizeof(*groups)) : NULL;
    if (groups && !q->ana_watching) {
        /* what the host can read now is the base of the first change */
        uint64_t in = ana_inputs(s);
        uint64_t sig = ana_view(s, groups);
        pthread_mutex_lock(&q->ctrl->lock);
        q->ctrl->ana_aen_sig = sig;
        q->ctrl->ana_inputs = in;
        pthread_mutex_unlock(&q->ctrl->lock);
        q->ana_watching = true;
        reactor_timer_init(&q->ana_timer, ana_poll);
        conn_get(q->c);
        reactor_timer_start(q->c->reactor, &q->ana_timer, ANA_POLL_NS);
    }
    free(groups);
    nvme_subsys_unref(s);
}

void nvme_ana_cntlid_range(uint16_t *lo, uint16_t *hi)
{
    *lo = 1;
    *hi = NVME_CNTLID_MAX;
    if (paths && paths->cntlid_range)
        paths->cntlid_range(lo, hi);
}

uint16_t nvme_ana_port_id(uint16_t index)
{
    return paths && paths->port_id ? paths->port_id(index) : index;
}

size_t nvme_ana_peer_ports(struct nvme_peer_port *out, size_t max)
{
    return paths && paths->peer_ports ? paths->peer_ports(out, max) : 0;
}

#define PEERS_SIG_MAX 256

uint64_t nvme_ana_peers_gen(void)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static uint64_t last_sig, gen;
    if (!paths || !paths->peer_ports)
        return 0;
    struct nvme_peer_port *p = calloc(PEERS_SIG_MAX, sizeof(*p));
    size_t n = p ? paths->peer_ports(p, PEERS_SIG_MAX) : 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = (const unsigned char *)&p[i];
        for (size_t k = 0; k < offsetof(struct nvme_peer_port, traddr); k++)
            h = (h ^ b[k]) * 0x100000001b3ull;
        for (const char *c = p[i].traddr; *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
        h = (h ^ p[i].trsvcid ^ (uint64_t)p[i].adrfam << 16) * 0x100000001b3ull;
    }
    free(p);
    pthread_mutex_lock(&mu);
    if (h != last_sig) {
        last_sig = h;
        gen++;
    }
    uint64_t g = gen;
    pthread_mutex_unlock(&mu);
    return g;
}

void nvme_target_ports_text(char *buf, size_t len)
{
    struct nvme_conf *conf = nvme_conf_current();
    size_t off = 0;
    buf[0] = 0;
    for (size_t i = 0; i < conf->nports && off < len; i++) {
        const struct nvme_port *p = &conf->ports[i];
        if (p->discovery)
            continue;
        bool v6 = p->adrfam == 2;
        int n = snprintf(buf + off, len - off, "%s%u=%s%s%s:%u", off ? "," : "", p->index,
                         v6 ? "[" : "", p->traddr, v6 ? "]" : "", p->trsvcid);
        if (n < 0 || (size_t)n >= len - off) {
            buf[off] = 0; /* what does not fit is left out whole */
            break;
        }
        off += (size_t)n;
    }
    nvme_conf_unref(conf);
}
