/*
 * The runtime side of the iSCSI configuration: the subscriber of facet
 * CONF_ISCSI of the configuration generation (config/confgen.h). It builds
 * immutable target views (iscsi_runtime.h) from the DB and the iSCSI part
 * of each generation (struct iscsi_conf), and turns the difference between
 * two generations into work on the sessions (target_gone, target_changed,
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
 * post_drain, after the DB lock is released, because scsi/ calls our PR
 * save callback — which takes the DB lock — with the LU mutex held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/confgen.h"
#include "config/datasets.h"
#include "config/db.h"
#include "config/pwenc.h"
#include "core/log.h"
#include "config/iscsi/config_internal.h"
#include "iscsi/iscsi_config.h"
#include "iscsi/iscsi_runtime.h"
#include "scsi/scsi.h"

/* ---- writer state (DB lock) ---- */
struct lu_entry {
    int64_t extent_id;
    int64_t gen;
    struct scsi_lu *lu;
};
static struct lu_entry *lu_cache;
static size_t lu_n, lu_cap;
static bool started;

/* ---- live work on running LUs (own lock: queued under the DB lock,
 * drained after it is released). Not a difference between generations:
 * an extent's read-only flag and size apply to its running LU (whether
 * mapped or not), a rollback raises MEDIUM MAY HAVE CHANGED. ---- */
static pthread_mutex_t post_lock = PTHREAD_MUTEX_INITIALIZER;
enum post_kind { POST_LIVE, POST_UA };
struct post_item {
    enum post_kind kind;
    struct scsi_lu *lu; /* ref held */
    bool ro;
    uint64_t size;
    enum scsi_ua ua; /* POST_UA */
};
static struct post_item *post_items;
static size_t post_n, post_cap;

static void post_push_item(struct post_item item)
{
    pthread_mutex_lock(&post_lock);
    if (post_n == post_cap) {
        size_t cap = post_cap ? post_cap * 2 : 16;
        struct post_item *p = realloc(post_items, cap * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&post_lock);
            log_error("iscsi config: out of memory queueing a unit attention");
            return;
        }
        post_items = p;
        post_cap = cap;
    }
    icfg_lu_ref(item.lu);
    post_items[post_n++] = item;
    pthread_mutex_unlock(&post_lock);
}

/* Run the queued live work (the subscriber's after hook). No DB lock. */
static void post_drain(void)
{
    pthread_mutex_lock(&post_lock);
    struct post_item *items = post_items;
    size_t n = post_n;
    post_items = NULL;
    post_n = post_cap = 0;
    pthread_mutex_unlock(&post_lock);
    /* LU mutexes are the reactors' too: normal priority while we hold
     * them (api_thread_boost). */
    if (n)
        api_thread_boost();
    for (size_t i = 0; i < n; i++) {
        if (items[i].kind == POST_LIVE) {
            scsi_lu_set_readonly(items[i].lu, items[i].ro);
            struct volume *vol = scsi_lu_volume(items[i].lu);
            if (items[i].size > volume_size(vol)) {
                int rc = volume_resize(vol, items[i].size);
                if (rc < 0)
                    log_error("iscsi config: cannot grow %s: %s", volume_name(vol), strerror(-rc));
            }
        } else {
            scsi_lu_raise_ua(items[i].lu, items[i].ua);
        }
        icfg_lu_unref(items[i].lu);
    }
    if (n)
        api_thread_unboost();
    free(items);
}

/* ---- views ---- */
struct view_box {
    struct iscsi_target_view v;
    struct iscsi_target_lun *luns;
    struct iscsi_target_group *groups;
    struct iscsi_cidr *nets;
    char **strings; /* initiator names, freed with the box */
    size_t n_strings;
    const char ***initiator_arrays;
    struct iscsi_chap_cred **cred_arrays;
};

static void view_destroy(struct iscsi_target_view *v)
{
    struct view_box *b = (struct view_box *)v;
    for (size_t i = 0; i < v->n_luns; i++)
        icfg_lu_unref(b->luns[i].lu);
    for (size_t i = 0; i < v->n_groups; i++) {
        free(b->initiator_arrays ? b->initiator_arrays[i] : NULL);
        if (b->cred_arrays && b->cred_arrays[i]) {
            explicit_bzero(b->cred_arrays[i],
                           sizeof(struct iscsi_chap_cred) * b->groups[i].auth.n_creds);
            free(b->cred_arrays[i]);
        }
    }
    for (size_t i = 0; i < b->n_strings; i++)
        free(b->strings[i]);
    free(b->strings);
    free(b->initiator_arrays);
    free(b->cred_arrays);
    free(b->luns);
    free(b->groups);
    free(b->nets);
    free(b);
}

/* Credentials of an auth tag (the DB is locked). */
static int load_creds(int64_t tag, bool discovery, struct iscsi_chap_cred **out, size_t *n,
                      enum iscsi_auth_method *method)
{
    struct icfg_cred_rec *rows;
    size_t nrows;
    int rc = icfg_read_creds(tag, discovery, &rows, &nrows);
    if (rc < 0)
        return rc;
    struct iscsi_chap_cred *creds = calloc(nrows ? nrows : 1, sizeof(*creds));
    if (!creds) {
        icfg_creds_free(rows, nrows);
        return -EIO;
    }
    size_t count = 0;
    if (method)
        *method = ISCSI_AUTH_NONE;
    for (size_t i = 0; i < nrows; i++) {
        struct iscsi_chap_cred *c = &creds[count++];
        snprintf(c->user, sizeof(c->user), "%s", rows[i].user);
        snprintf(c->peeruser, sizeof(c->peeruser), "%s", rows[i].peeruser);
        if (method) {
            enum iscsi_auth_method m = rows[i].mutual ? ISCSI_AUTH_CHAP_MUTUAL : ISCSI_AUTH_CHAP;
            if (m > *method)
                *method = m;
        }
        /* Secrets are stored sealed (config/pwenc.h). One that cannot be
         * opened drops the credential (an empty secret must never let a
         * login through); the method above still counts it, so that
         * discovery stays closed. */
        if (pwenc_open(rows[i].secret, c->secret, sizeof(c->secret)) < 0 ||
            pwenc_open(rows[i].peersecret, c->peersecret, sizeof(c->peersecret)) < 0 ||
            !c->secret[0]) {
            log_error("iscsi config: CHAP user '%s' (authorized access %lld) left out: its "
                      "secret cannot be decrypted (set it again with iscsi.auth.update)",
                      c->user, (long long)rows[i].id);
            explicit_bzero(c, sizeof(*c));
            count--;
        }
    }
    icfg_creds_free(rows, nrows);
    *out = creds;
    *n = count;
    return 0;
}

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

static struct scsi_lu *lu_for_extent(json_t *extent)
{
    int64_t id = json_integer_value(json_object_get(extent, "id"));
    int64_t gen = json_integer_value(json_object_get(extent, "gen"));
    for (size_t i = 0; i < lu_n; i++) {
        if (lu_cache[i].extent_id != id)
            continue;
        if (lu_cache[i].gen == gen) {
            icfg_lu_ref(lu_cache[i].lu);
            return lu_cache[i].lu;
        }
        icfg_lu_unref(lu_cache[i].lu);
        lu_cache[i] = lu_cache[--lu_n];
        break;
    }
    struct scsi_lu *lu;
    if (icfg_lu_from_extent(extent, &lu) < 0)
        return NULL;
    if (lu_n == lu_cap) {
        size_t cap = lu_cap ? lu_cap * 2 : 16;
        struct lu_entry *c = realloc(lu_cache, cap * sizeof(*c));
        if (!c)
            return lu; /* works, just not shared with the next rebuild */
        lu_cache = c;
        lu_cap = cap;
    }
    icfg_lu_ref(lu);
    lu_cache[lu_n++] = (struct lu_entry){.extent_id = id, .gen = gen, .lu = lu};
    return lu;
}

static size_t icfg_runtime_volume_ua(const struct volume *vol, enum scsi_ua ua)
{
    size_t n = 0;
    for (size_t i = 0; vol && i < lu_n; i++) {
        if (scsi_lu_volume(lu_cache[i].lu) != vol)
            continue;
        post_push_item((struct post_item){.kind = POST_UA, .lu = lu_cache[i].lu, .ua = ua});
        n++;
    }
    return n;
}

static char *box_strdup(struct view_box *b, const char *s)
{
    char **strings = realloc(b->strings, (b->n_strings + 1) * sizeof(*strings));
    if (!strings)
        return NULL;
    b->strings = strings;
    char *copy = strdup(s);
    if (copy)
        b->strings[b->n_strings++] = copy;
    return copy;
}

/* A group's initiator names into g (a restricted group never turns into
 * an open one, even out of memory). */
static void group_initiators(struct view_box *b, size_t at, json_t *inis)
{
    struct iscsi_target_group *g = &b->groups[at];
    if (json_array_size(inis) == 0)
        return;
    const char **arr = calloc(json_array_size(inis), sizeof(*arr));
    b->initiator_arrays[at] = arr;
    size_t k;
    json_t *ini;
    json_array_foreach(inis, k, ini)
    {
        if (arr && json_is_string(ini)) {
            char *s = box_strdup(b, json_string_value(ini));
            if (s)
                arr[g->n_initiators++] = s;
        }
    }
    g->initiators = arr;
    if (!arr || g->n_initiators == 0) {
        static const char *const nobody[] = {""};
        g->initiators = nobody;
        g->n_initiators = 1;
    }
}

/* A group's CHAP policy into g. */
static void group_auth(struct view_box *b, size_t at, const struct icfg_group_rec *r)
{
    struct iscsi_target_group *g = &b->groups[at];
    g->auth.method = strcmp(r->authmethod, "CHAP_MUTUAL") == 0 ? ISCSI_AUTH_CHAP_MUTUAL
                     : strcmp(r->authmethod, "CHAP") == 0      ? ISCSI_AUTH_CHAP
                                                               : ISCSI_AUTH_NONE;
    if (g->auth.method == ISCSI_AUTH_NONE)
        return;
    struct iscsi_chap_cred *creds = NULL;
    size_t nc = 0;
    if (load_creds(r->auth_tag, false, &creds, &nc, NULL) == 0) {
        b->cred_arrays[at] = creds;
        g->auth.creds = creds;
        g->auth.n_creds = nc;
    }
    /* A CHAP group with no credentials admits nobody: the login cannot
     * succeed, which is the safe direction. */
}

static int build_groups(struct view_box *b, int64_t target_id)
{
    struct icfg_group_rec *rows;
    size_t n;
    int rc = icfg_read_groups(target_id, &rows, &n);
    if (rc < 0)
        return rc;
    b->groups = calloc(n ? n : 1, sizeof(*b->groups));
    b->initiator_arrays = calloc(n ? n : 1, sizeof(*b->initiator_arrays));
    b->cred_arrays = calloc(n ? n : 1, sizeof(*b->cred_arrays));
    if (!b->groups || !b->initiator_arrays || !b->cred_arrays) {
        icfg_groups_free(rows, n);
        return -EIO;
    }
    for (size_t i = 0; i < n; i++) {
        b->groups[i].portal_tag = rows[i].portal_tag;
        b->v.n_groups = i + 1;
        group_initiators(b, i, rows[i].initiators);
        group_auth(b, i, &rows[i]);
    }
    icfg_groups_free(rows, n);
    return 0;
}

static int build_luns(struct view_box *b, int64_t target_id)
{
    struct icfg_lun_rec *rows;
    size_t n;
    int rc = icfg_read_luns(target_id, &rows, &n);
    if (rc < 0)
        return rc;
    b->luns = calloc(n ? n : 1, sizeof(*b->luns));
    if (!b->luns) {
        free(rows);
        return -EIO;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *extent = icfg_read_extent(rows[i].extent_id);
        struct scsi_lu *lu = extent ? lu_for_extent(extent) : NULL;
        json_decref(extent);
        if (!lu) {
            log_warn("iscsi config: target %s: LUN %llu left out (its extent cannot be opened)",
                     b->v.iqn, (unsigned long long)rows[i].lun);
            continue;
        }
        b->luns[b->v.n_luns].lun = rows[i].lun;
        b->luns[b->v.n_luns++].lu = lu;
    }
    free(rows);
    return 0;
}

/* Build the view of one target: 0 with *out, -ENOENT if the target no
 * longer exists, or -errno. */
/* The target's auth_networks (CIDR strings) into b. */
static void view_nets(struct view_box *b, json_t *nets)
{
    if (json_array_size(nets) == 0)
        return;
    b->nets = calloc(json_array_size(nets), sizeof(*b->nets));
    size_t i;
    json_t *n;
    json_array_foreach(nets, i, n)
    {
        if (b->nets && json_is_string(n) &&
            icfg_parse_cidr(json_string_value(n), &b->nets[b->v.n_auth_networks]) == 0)
            b->v.n_auth_networks++;
    }
    if (!b->nets || b->v.n_auth_networks == 0) {
        /* unparsable list (validated on write, so only on corruption):
         * admit no address rather than every address */
        static const struct iscsi_cidr none = {.family = -1};
        b->v.auth_networks = &none;
        b->v.n_auth_networks = 1;
    } else {
        b->v.auth_networks = b->nets;
    }
}

static int view_build(int64_t id, const char *basename, struct iscsi_target_view **out)
{
    struct icfg_target_rec t;
    int rc = icfg_read_target(id, &t);
    if (rc < 0)
        return rc;
    struct view_box *b = calloc(1, sizeof(*b));
    if (!b) {
        icfg_target_rec_clear(&t);
        return -ENOMEM;
    }
    b->v.refs = 1;
    b->v.destroy = view_destroy;
    b->v.id = (uint64_t)id;
    snprintf(b->v.iqn, sizeof(b->v.iqn), "%s:%s", basename, t.name);
    snprintf(b->v.alias, sizeof(b->v.alias), "%s", t.alias);
    b->v.rel_tgt_id = t.rel_tgt_id;
    view_nets(b, t.auth_networks);
    icfg_target_rec_clear(&t);
    rc = build_groups(b, id);
    b->v.groups = b->groups;
    if (rc == 0)
        rc = build_luns(b, id);
    b->v.luns = b->luns;
    if (rc < 0) {
        view_destroy(&b->v);
        return rc;
    }
    *out = &b->v;
    return 0;
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

static size_t byiqn_lower_bound(const struct iscsi_conf *c, const char *iqn)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcasecmp(c->byiqn[mid]->iqn, iqn) < 0)
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
    for (size_t i = byiqn_lower_bound(c, v->iqn); i < c->n; i++)
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
    size_t i = byiqn_lower_bound(c, v->iqn);
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
    size_t same = byiqn_lower_bound(c, v->iqn);
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
        int err = view_build(d->ids[i], basename, &v);
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
    int rc = load_creds(0, true, &creds, &n, &method);
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

/* ---- the subscriber (config/confgen.h) ---- */

/* An extent changed: drop the LU of a rebuilt or deleted one (its gen
 * moved: sessions see a new device at the next apply); apply ro and size
 * to the running LU otherwise (sessions keep their state). DB locked. */
static void extent_changed(int64_t id)
{
    size_t at = SIZE_MAX;
    for (size_t i = 0; i < lu_n && at == SIZE_MAX; i++)
        if (lu_cache[i].extent_id == id)
            at = i;
    if (at == SIZE_MAX)
        return;
    int64_t gen;
    bool ro;
    uint64_t size;
    if (icfg_read_extent_state(id, &gen, &ro, &size) == 0 && gen == lu_cache[at].gen) {
        post_push_item(
            (struct post_item){.kind = POST_LIVE, .lu = lu_cache[at].lu, .ro = ro, .size = size});
    } else {
        icfg_lu_unref(lu_cache[at].lu);
        lu_cache[at] = lu_cache[--lu_n];
    }
}

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
                extent_changed(c->id);
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
 * Dataset events that concern the running targets (the configuration's own
 * consequences, extents of a deleted dataset, are config_main.c's).
 */
static void dataset_observer(enum datasets_event ev, const char *name, struct volume *v, void *arg)
{
    (void)arg;
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
        size_t n = icfg_runtime_volume_ua(v, SCSI_UA_MEDIUM_CHANGED);
        db_unlock();
        post_drain();
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
    .after = post_drain,
};

void icfg_runtime_init(void)
{
    conf_subscribe(CONF_ISCSI, &subscriber);
    datasets_observe(dataset_observer, NULL);
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
    for (size_t i = 0; i < lu_n; i++)
        icfg_lu_unref(lu_cache[i].lu);
    free(lu_cache);
    lu_cache = NULL;
    lu_n = lu_cap = 0;
    db_unlock();
    conf_apply_pending();
    post_drain();
}

void iscsi_config_stop(void)
{
    icfg_runtime_stop();
}
