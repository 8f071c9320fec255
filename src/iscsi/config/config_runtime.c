/*
 * The runtime side of the iSCSI configuration: the subscriber of facet
 * CONF_ISCSI of the configuration generation (control/confgen.h). It puts
 * the target views (built by config_views.c) into the iSCSI part of each
 * generation (struct iscsi_conf), and turns the difference between two
 * generations into work on the sessions (target_gone, target_changed,
 * portals_applied, called from conf_apply).
 *
 * Building is O(changes): the next part copies the previous one's sorted
 * view pointers, rebuilds only the dirty targets' views and replaces
 * those, so unchanged targets keep their views (and sessions keep their
 * LUs). Readers (iscsi_confview.c) take the generation's lock only long
 * enough to find a view and take a reference.
 *
 * Locks: build runs under the DB lock (the commit's). Calls that take an
 * LU's mutex (unit attentions) and session closing run from conf_apply and
 * icfg_live_drain, after the DB lock is released, because scsi/ calls our PR
 * save callback — which takes the DB lock — with the LU mutex held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "control/confgen.h"
#include "control/datasets.h"
#include "control/db.h"
#include "control/pwenc.h"
#include "core/log.h"
#include "iscsi/config/config_internal.h"
#include "iscsi/config/iscsi_config.h"
#include "iscsi/config/config_views.h"
#include "iscsi/iscsi_runtime.h"
#include "scsi/scsi.h"

static bool started; /* DB lock */

/* ---- the dirty set ---- */

void icfg_dirty_add(struct icfg_dirty *d, int64_t target_id)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->ids[i] == target_id)
            return;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        int64_t *ids = realloc(d->ids, cap * sizeof(*ids));
        if (!ids) {
            /* Out of memory: fall back to rebuilding everything. */
            d->all = true;
            return;
        }
        d->ids = ids;
        d->cap = cap;
    }
    d->ids[d->n++] = target_id;
}

void icfg_dirty_merge(struct icfg_dirty *into, const struct icfg_dirty *from)
{
    for (size_t i = 0; i < from->n; i++)
        icfg_dirty_add(into, from->ids[i]);
    into->all |= from->all;
    into->discovery |= from->discovery;
    into->portals |= from->portals;
}

void icfg_dirty_free(struct icfg_dirty *d)
{
    free(d->ids);
    memset(d, 0, sizeof(*d));
}

/* ---- the iSCSI part of a generation (struct iscsi_conf) ---- */

static void disc_unref(struct iscsi_disc_auth *d)
{
    if (!d || atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    explicit_bzero(d->creds, d->n_creds * sizeof(d->creds[0]));
    free(d);
}

static void conf_destroy(struct conf_part *p)
{
    struct iscsi_conf *c = (struct iscsi_conf *)p;
    for (size_t i = 0; i < c->n; i++)
        iscsi_target_view_unref(c->byiqn[i]);
    free(c->byid);
    free(c->byiqn);
    disc_unref(c->disc);
    icfg_portals_unref(c->portals);
    free(c);
}

/* A new part holding prev's views, discovery credentials and portals
 * (references taken), with room for `extra` more views. NULL: no memory. */
static struct iscsi_conf *conf_copy(const struct iscsi_conf *prev, size_t extra)
{
    size_t n = prev ? prev->n : 0, cap = n + extra ? n + extra : 1;
    struct iscsi_conf *c = calloc(1, sizeof(*c));
    if (c) {
        c->byid = malloc(cap * sizeof(*c->byid));
        c->byiqn = malloc(cap * sizeof(*c->byiqn));
    }
    if (!c || !c->byid || !c->byiqn) {
        if (c) {
            free(c->byid);
            free(c->byiqn);
        }
        free(c);
        return NULL;
    }
    atomic_init(&c->part.refs, 1);
    c->part.destroy = conf_destroy;
    if (!prev)
        return c;
    memcpy(c->byid, prev->byid, n * sizeof(*c->byid));
    memcpy(c->byiqn, prev->byiqn, n * sizeof(*c->byiqn));
    c->n = n;
    for (size_t i = 0; i < n; i++)
        iscsi_target_view_ref(c->byiqn[i]);
    if ((c->disc = prev->disc))
        atomic_fetch_add(&c->disc->refs, 1);
    if ((c->portals = prev->portals))
        atomic_fetch_add(&c->portals->refs, 1);
    return c;
}

static size_t byid_lower_bound(const struct iscsi_conf *c, int64_t id)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->byid[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Take view v (published in c) out of both indexes; c's reference goes. */
static void conf_remove(struct iscsi_conf *c, struct iscsi_target_view *v)
{
    size_t k = byid_lower_bound(c, (int64_t)v->id);
    memmove(&c->byid[k], &c->byid[k + 1], (c->n - k - 1) * sizeof(*c->byid));
    for (size_t i = iscsi_conf_lower_bound(c, v->iqn); i < c->n; i++)
        if (c->byiqn[i] == v) {
            memmove(&c->byiqn[i], &c->byiqn[i + 1], (c->n - i - 1) * sizeof(*c->byiqn));
            break;
        }
    c->n--;
    iscsi_target_view_unref(v);
}

/* Put v into both indexes (room was reserved by conf_copy; takes v). */
static void conf_insert(struct iscsi_conf *c, struct iscsi_target_view *v)
{
    size_t i = iscsi_conf_lower_bound(c, v->iqn);
    memmove(&c->byiqn[i + 1], &c->byiqn[i], (c->n - i) * sizeof(*c->byiqn));
    c->byiqn[i] = v;
    size_t k = byid_lower_bound(c, (int64_t)v->id);
    memmove(&c->byid[k + 1], &c->byid[k], (c->n - k) * sizeof(*c->byid));
    c->byid[k] = (struct conf_obj){.id = (int64_t)v->id, .obj = v};
    c->n++;
}

/* Target id's view becomes v (NULL: withdrawn). A view of another id
 * under v's IQN is a deferred delete's (names are unique in the DB): it
 * is stale and leaves too (conf_apply closes its sessions). */
static void conf_replace(struct iscsi_conf *c, int64_t id, struct iscsi_target_view *v)
{
    size_t k = byid_lower_bound(c, id);
    if (k < c->n && c->byid[k].id == id)
        conf_remove(c, c->byid[k].obj);
    if (!v)
        return;
    size_t same = iscsi_conf_lower_bound(c, v->iqn);
    if (same < c->n && strcasecmp(c->byiqn[same]->iqn, v->iqn) == 0)
        conf_remove(c, c->byiqn[same]);
    conf_insert(c, v);
}

/* Every target id (the DB's and the published ones) into d. */
static int collect_all_ids(const struct iscsi_conf *prev, struct icfg_dirty *d)
{
    int rc = icfg_read_target_ids(d);
    for (size_t i = 0; prev && i < prev->n; i++)
        icfg_dirty_add(d, prev->byid[i].id);
    return rc;
}

/* Rebuild the views of d's targets into c (DB locked). A view that cannot
 * be built keeps the old one (logged; the error is returned). */
static int conf_rebuild_views(struct iscsi_conf *c, const struct icfg_dirty *d)
{
    char *basename = icfg_global_basename();
    if (!basename)
        return -ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct iscsi_target_view *v = NULL;
        int err = icfg_view_build(d->ids[i], basename, &v);
        if (err < 0 && err != -ENOENT) {
            log_error("iscsi config: cannot build target %lld: %s (old view kept)",
                      (long long)d->ids[i], strerror(-err));
            rc = err;
            continue;
        }
        conf_replace(c, d->ids[i], v);
    }
    free(basename);
    return rc;
}

/* The discovery credentials as stored now (DB locked). */
static int disc_build(struct iscsi_disc_auth **out)
{
    struct iscsi_chap_cred *creds;
    size_t n;
    enum iscsi_auth_method method;
    int rc = icfg_load_creds(0, true, &creds, &n, &method);
    if (rc < 0)
        return rc;
    struct iscsi_disc_auth *d = calloc(1, sizeof(*d) + n * sizeof(d->creds[0]));
    if (d) {
        atomic_init(&d->refs, 1);
        d->method = method;
        d->n_creds = n;
        memcpy(d->creds, creds, n * sizeof(*creds));
    }
    explicit_bzero(creds, n * sizeof(*creds));
    free(creds);
    *out = d;
    return d ? 0 : -ENOMEM;
}

/* The next part: prev with the dirty targets rebuilt and, if dirty, the
 * discovery credentials and portals. Its reads share one snapshot (the
 * caller holds the DB lock). */
static int conf_build(const struct iscsi_conf *prev, const struct icfg_dirty *in,
                      struct conf_part **next)
{
    struct icfg_dirty d = {0};
    icfg_dirty_merge(&d, in);
    d.all = false;
    if (in->all)
        collect_all_ids(prev, &d);
    bool snap = db_read_begin() == 0;
    struct iscsi_conf *c = conf_copy(prev, d.n);
    int rc = c ? conf_rebuild_views(c, &d) : -ENOMEM;
    struct iscsi_disc_auth *disc;
    if (c && in->discovery && disc_build(&disc) == 0) {
        disc_unref(c->disc);
        c->disc = disc;
    }
    struct iscsi_portals *portals;
    if (c && in->portals && icfg_portals_build(&portals) == 0) {
        icfg_portals_unref(c->portals);
        c->portals = portals;
    }
    if (snap)
        db_read_end();
    icfg_dirty_free(&d);
    if (c) {
        c->part.objs = c->byid;
        c->part.n_objs = c->n;
        *next = &c->part;
    }
    return rc;
}

/* ---- the subscriber (control/confgen.h) ---- */

/* The dirty set a change list makes; live: a committed change (an
 * extent's running LU is updated or dropped here). */
static void changes_dirty(const struct cfg_changes *ch, struct icfg_dirty *d, bool live)
{
    if (ch->overflow)
        d->all = d->discovery = d->portals = true;
    for (size_t i = 0; i < ch->n; i++) {
        const struct cfg_change *c = &ch->v[i];
        switch (c->kind) {
        case CFG_ISCSI_TARGET:
            if (c->id == CFG_ID_ALL)
                d->all = true;
            else
                icfg_dirty_add(d, c->id);
            break;
        case CFG_ISCSI_PORTAL:
            d->portals = true;
            /* tags are renumbered: every target's groups change */
            d->all |= c->op == CFG_DELETED;
            break;
        case CFG_ISCSI_GLOBAL:
            d->all |= c->id == CFG_ISCSI_GLOBAL_BASENAME;
            d->portals |= c->id == CFG_ISCSI_GLOBAL_LISTEN;
            break;
        case CFG_ISCSI_AUTH:
            d->discovery = true;
            break;
        case CFG_ISCSI_EXTENT:
            if (live)
                icfg_extent_changed(c->id);
            break;
        default:
            break;
        }
    }
}

/* build (confgen): the next iSCSI part from prev and the change list. A
 * stopped runtime serves nothing; a deferred change waits in confgen's
 * pending list (only the extents' live state is applied at commit); an
 * extent changed while unmapped changes no view. */
static int icfg_build(struct conf_part *prev, const struct cfg_changes *changes,
                      struct conf_part **next)
{
    struct icfg_dirty d = {0};
    changes_dirty(changes, &d, true);
    bool empty = d.n == 0 && !d.all && !d.discovery && !d.portals;
    int rc = 0;
    if (!started)
        *next = NULL;
    else if (!changes->defer && !empty)
        rc = conf_build((const struct iscsi_conf *)prev, &d, next);
    icfg_dirty_free(&d);
    return rc;
}

static void close_sessions(const char *iqn)
{
    unsigned c = iscsi_sessions_close_target(iqn);
    if (c)
        log_info("iscsi config: closed %u session(s) of removed target %s", c, iqn);
}

static bool lun_maps_equal(const struct iscsi_target_view *a, const struct iscsi_target_view *b)
{
    if (a->n_luns != b->n_luns)
        return false;
    for (size_t i = 0; i < a->n_luns; i++)
        if (a->luns[i].lun != b->luns[i].lun || a->luns[i].lu != b->luns[i].lu)
            return false;
    return true;
}

/* conf_apply: a target withdrawn (deleted, or a deferred delete's stale
 * view replaced by a new target of its name) closes its sessions. */
static void target_gone(void *old_obj)
{
    close_sessions(((struct iscsi_target_view *)old_obj)->iqn);
}

/* conf_apply: a target renamed closes its sessions; a changed LUN map
 * raises REPORTED LUNS DATA HAS CHANGED on its LUs. */
static void target_changed(void *old_obj, void *new_obj)
{
    const struct iscsi_target_view *o = old_obj, *n = new_obj;
    if (strcasecmp(o->iqn, n->iqn) != 0)
        close_sessions(o->iqn);
    else if (!lun_maps_equal(o, n))
        for (size_t k = 0; k < n->n_luns; k++)
            scsi_lu_raise_ua(n->luns[k].lu, SCSI_UA_LUNS_CHANGED);
}

/* conf_apply: new portals open, retag and close listeners. */
static void portals_applied(struct conf_part *old_part, struct conf_part *new_part)
{
    struct iscsi_portals *o = old_part ? ((struct iscsi_conf *)old_part)->portals : NULL;
    struct iscsi_portals *n = new_part ? ((struct iscsi_conf *)new_part)->portals : NULL;
    if (o != n)
        icfg_listen_apply(n);
}

/*
 * Dataset events that concern the running targets (config_main.c's
 * subscriber passes them on; the configuration's own consequences,
 * extents of a deleted dataset, are its own).
 */
void icfg_runtime_dataset(enum datasets_event ev, const char *name, struct volume *v)
{
    if (ev == DATASETS_POOL_ONLINE) {
        /* Rebuild every target: an extent whose volume could not be opened
         * has no LU yet and gets one now (its target's sessions see
         * REPORTED LUNS DATA HAS CHANGED); unchanged LUs are reused. */
        struct cfg_change all = {.kind = CFG_ISCSI_TARGET, .op = CFG_UPDATED, .id = CFG_ID_ALL};
        int rc = conf_republish(1u << CONF_ISCSI, &(struct cfg_changes){.v = &all, .n = 1});
        if (rc < 0)
            log_error("iscsi config: cannot republish the targets after pool %s came online: %s",
                      name, strerror(-rc));
    } else if (ev == DATASETS_ROLLED_BACK) {
        /* The sessions stay; each nexus learns on its next command that the
         * medium changed (a size change adds CAPACITY DATA HAS CHANGED by
         * itself). */
        db_lock();
        size_t n = icfg_volume_ua(v, SCSI_UA_MEDIUM_CHANGED);
        db_unlock();
        icfg_live_drain();
        if (n)
            log_info("iscsi config: %s rolled back: MEDIUM MAY HAVE CHANGED raised on %zu LU(s)",
                     name, n);
    }
}

#define ICFG_KINDS                                                                                 \
    (CFG_KIND_BIT(CFG_ISCSI_TARGET) | CFG_KIND_BIT(CFG_ISCSI_PORTAL) |                             \
     CFG_KIND_BIT(CFG_ISCSI_GLOBAL) | CFG_KIND_BIT(CFG_ISCSI_AUTH) |                               \
     CFG_KIND_BIT(CFG_ISCSI_EXTENT))

static const struct conf_subscriber subscriber = {
    .name = "iscsi",
    .kinds = ICFG_KINDS,
    .build = icfg_build,
    .gone = target_gone,
    .changed = target_changed,
    .applied = portals_applied,
    .after = icfg_live_drain,
};

void icfg_runtime_init(void)
{
    conf_subscribe(CONF_ISCSI, &subscriber);
}

int iscsi_config_reload(void)
{
    return conf_reload();
}

size_t iscsi_config_pending(void)
{
    db_lock();
    struct cfg_changes ch = conf_pending();
    struct icfg_dirty d = {0};
    changes_dirty(&ch, &d, false);
    size_t n = d.all ? (size_t)-1 : d.n;
    icfg_dirty_free(&d);
    db_unlock();
    return n;
}

bool icfg_runtime_started(void)
{
    return started;
}

/* ---- start / stop ---- */

int iscsi_config_start(const char *override)
{
    db_lock();
    int rc = icfg_listen_set_override(override);
    if (rc < 0) {
        db_unlock();
        return rc;
    }
    started = true;
    rc = conf_republish(1u << CONF_ISCSI, &(struct cfg_changes){.overflow = true});
    db_unlock();
    conf_apply_pending();
    /* The daemon's own address must be served: fail the start as a
     * listener that cannot bind always did. */
    int lrc = override ? icfg_listen_override_status() : 0;
    if (lrc < 0)
        return lrc;
    struct iscsi_conf *c = (struct iscsi_conf *)conf_part_get(CONF_ISCSI);
    log_info("iscsi config: %zu target(s) published", c ? c->n : 0);
    if (c)
        conf_part_unref(&c->part);
    return rc;
}

void icfg_runtime_stop(void)
{
    db_lock();
    icfg_listen_stop();
    started = false;
    /* every target withdrawn, every portal listener closed (conf_apply) */
    conf_republish(1u << CONF_ISCSI, &(struct cfg_changes){.overflow = true});
    conf_pending_drop(ICFG_KINDS);
    icfg_lu_cache_clear();
    db_unlock();
    conf_apply_pending();
    icfg_live_drain();
}

void iscsi_config_stop(void)
{
    icfg_runtime_stop();
}
