/*
 * Reservation notifications (NVMe base: the Reservation Notification log
 * page, 80h, and the asynchronous event that announces it): a change of a
 * namespace's reservations tells the other hosts what it did to them --
 * Registration Preempted (their registration was removed by a preempt),
 * Reservation Released (a registrants-only or all-registrants reservation
 * they may have relied on ended), Reservation Preempted (the reservation
 * was cleared, or taken over by a preempt). Each controller of such a host
 * on this daemon gets a log entry and, unless one is already outstanding,
 * an event "reservation log page available"; reading the log page re-arms
 * it. Set Features 82h masks kinds per controller (one mask for every
 * namespace). A change made through another daemon of a group is told to
 * this daemon's controllers when its notify arrives (nvme_resv_shared.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_resv.h"
#include "nvme/nvme_resv_priv.h"

#define LOG_MAX 64u

struct nvme_resv_log {
    uint64_t count; /* log pages made (LOG PAGE COUNT of the last) */
    unsigned n;
    struct {
        uint64_t count;
        uint8_t type;
        uint32_t nsid;
    } e[LOG_MAX];
    bool aen_out; /* an event sent and the log not read since */
};

static bool in(const struct resv_state *s, const uint8_t *hostid)
{
    for (size_t i = 0; i < s->nregs; i++)
        if (memcmp(s->regs[i].hostid, hostid, 16) == 0)
            return true;
    return false;
}

/* Each registrant of s but the issuer gets type. */
static size_t to_others(const struct resv_state *s, const uint8_t *self, uint8_t type,
                        struct resv_note *out, size_t n)
{
    for (size_t i = 0; i < s->nregs && n < RESV_NOTES_MAX; i++)
        if (memcmp(s->regs[i].hostid, self, 16) != 0) {
            memcpy(out[n].hostid, s->regs[i].hostid, 16);
            out[n++].type = type;
        }
    return n;
}

size_t resv_notes(const struct resv_state *old, const struct resv_state *new,
                  const struct resv_args *a, struct resv_note *out)
{
    size_t n = 0;
    bool ro_or_ar = old->type >= 3;                        /* registrants only, all registrants */
    if (a->op == NVME_IO_RESV_ACQUIRE && a->action != 0) { /* preempt */
        for (size_t i = 0; i < old->nregs && n < RESV_NOTES_MAX; i++)
            if (!in(new, old->regs[i].hostid) && memcmp(old->regs[i].hostid, a->hostid, 16)) {
                memcpy(out[n].hostid, old->regs[i].hostid, 16);
                out[n++].type = RESV_NOTE_REG_PREEMPTED;
            }
        if (old->type && (old->type != new->type || memcmp(old->holder, new->holder, 16)))
            n = to_others(new, a->hostid, RESV_NOTE_PREEMPTED, out, n);
    } else if (a->op == NVME_IO_RESV_RELEASE && a->action == 1) { /* clear */
        n = to_others(old, a->hostid, RESV_NOTE_PREEMPTED, out, n);
    } else if ((a->op == NVME_IO_RESV_RELEASE || a->op == NVME_IO_RESV_REGISTER) && ro_or_ar &&
               new->type == 0) { /* released, or its holder unregistered */
        n = to_others(new, a->hostid, RESV_NOTE_RELEASED, out, n);
    }
    return n;
}

/* The namespace of ctrl's subsystem whose reservations are r, or 0. */
static uint32_t nsid_of(const struct nvme_ctrl *ctrl, const struct nvme_resv *r)
{
    for (size_t i = 0; ctrl->subsys && i < ctrl->subsys->nns; i++)
        if (ctrl->subsys->ns[i].resv == r)
            return ctrl->subsys->ns[i].nsid;
    return 0;
}

static void log_add_locked(struct nvme_ctrl *ctrl, uint8_t type, uint32_t nsid)
{
    if (!ctrl->resv_log && !(ctrl->resv_log = calloc(1, sizeof(*ctrl->resv_log))))
        return;
    struct nvme_resv_log *l = ctrl->resv_log;
    if (l->n == LOG_MAX) /* the oldest goes: the counts show the gap */
        memmove(l->e, l->e + 1, --l->n * sizeof(l->e[0]));
    l->e[l->n].count = ++l->count;
    l->e[l->n].type = type;
    l->e[l->n++].nsid = nsid;
    if (!l->aen_out) {
        l->aen_out = true;
        nvme_ctrl_aen_locked(ctrl, NVME_AEN_RESV_LOG);
    }
}

void resv_notify(const struct nvme_resv *r, const struct resv_note *notes, size_t n)
{
    if (!n)
        return;
    size_t nc;
    struct nvme_ctrl **a = nvme_ctrl_all(&nc);
    for (size_t i = 0; a && i < nc; i++) {
        struct nvme_ctrl *ctrl = a[i];
        pthread_mutex_lock(&ctrl->lock);
        uint32_t nsid = nsid_of(ctrl, r);
        for (size_t k = 0; nsid && k < n; k++)
            if (memcmp(notes[k].hostid, ctrl->hostid, 16) == 0 &&
                !(ctrl->resv_mask & (1u << notes[k].type)))
                log_add_locked(ctrl, notes[k].type, nsid);
        pthread_mutex_unlock(&ctrl->lock);
        nvme_ctrl_unref(ctrl);
    }
    free(a);
}

void nvme_resv_log_page(struct nvme_ctrl *ctrl, uint8_t *page)
{
    pthread_mutex_lock(&ctrl->lock);
    struct nvme_resv_log *l = ctrl->resv_log;
    if (l && l->n) {
        le64_put(page, l->e[0].count);
        page[8] = l->e[0].type;
        page[9] = (uint8_t)MIN(l->n - 1, 255u); /* available after this one */
        le32_put(page + 12, l->e[0].nsid);
        memmove(l->e, l->e + 1, --l->n * sizeof(l->e[0]));
    }
    if (l)
        l->aen_out = false; /* read: the next notice raises an event again */
    pthread_mutex_unlock(&ctrl->lock);
}
