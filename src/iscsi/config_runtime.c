/*
 * The runtime side of the iSCSI configuration: builds immutable target
 * views (iscsi_runtime.h) from the DB and publishes them.
 *
 * Publication is O(changes): the published set is a sorted array of view
 * pointers; applying a change rebuilds only the dirty targets' views and
 * swaps those pointers under pub_lock, so unchanged targets keep their
 * views (and sessions keep their LUs). Readers take pub_lock only long
 * enough to find a view and take a reference.
 *
 * Locks: the DB lock (held by the API writer during apply) is taken before
 * pub_lock, never after. Calls that take an LU's mutex (unit attentions)
 * and session closing run after the DB lock is released
 * (icfg_runtime_after_unlock), because scsi/ calls our PR save callback
 * — which takes the DB lock — with the LU mutex held.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/datasets.h"
#include "config/db.h"
#include "config/pwenc.h"
#include "core/log.h"
#include "config/iscsi/config_internal.h"
#include "iscsi/iscsi_config.h"
#include "iscsi/iscsi_runtime.h"
#include "scsi/scsi.h"

/* ---- published state (pub_lock) ---- */
static pthread_mutex_t pub_lock = PTHREAD_MUTEX_INITIALIZER;

/* Reactors take pub_lock (a session whose view is stale looks its target
 * up again), and API threads run at background priority: they hold it at
 * normal priority (api_thread_boost) so that a reactor never waits for a
 * thread the scheduler keeps off the CPU. */
static void pub_lock_take(void)
{
    api_thread_boost();
    pthread_mutex_lock(&pub_lock);
}

static void pub_lock_give(void)
{
    pthread_mutex_unlock(&pub_lock);
    api_thread_unboost();
}
static struct iscsi_target_view **pub_views; /* sorted by iqn, case-insensitive */
static size_t pub_n, pub_cap;
static uint64_t pub_generation;
static struct iscsi_chap_cred *disc_creds;
static size_t disc_n;
static enum iscsi_auth_method disc_method;

/* ---- writer state (DB lock) ---- */
struct lu_entry {
    int64_t extent_id;
    int64_t gen;
    struct scsi_lu *lu;
};
static struct lu_entry *lu_cache;
static size_t lu_n, lu_cap;
static struct icfg_dirty pending;
static bool started;

/* ---- after-unlock work (own lock: filled under the DB lock, drained
 * after it is released) ---- */
static pthread_mutex_t post_lock = PTHREAD_MUTEX_INITIALIZER;
enum post_kind { POST_LUNS_CHANGED, POST_CLOSE, POST_LIVE, POST_UA };
struct post_item {
    enum post_kind kind;
    struct scsi_lu *lu; /* ref held */
    char *close_iqn;
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
    if (item.lu)
        icfg_lu_ref(item.lu);
    post_items[post_n++] = item;
    pthread_mutex_unlock(&post_lock);
}

static void post_push(struct scsi_lu *lu, const char *iqn)
{
    post_push_item((struct post_item){.kind = lu ? POST_LUNS_CHANGED : POST_CLOSE,
                                      .lu = lu,
                                      .close_iqn = iqn ? strdup(iqn) : NULL});
}

void icfg_runtime_after_unlock(void)
{
    pthread_mutex_lock(&post_lock);
    struct post_item *items = post_items;
    size_t n = post_n;
    post_items = NULL;
    post_n = post_cap = 0;
    pthread_mutex_unlock(&post_lock);
    /* LU mutexes and session teardown are the reactors' too: normal
     * priority while we hold them (see pub_lock_take). */
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
        } else if (items[i].kind == POST_LUNS_CHANGED) {
            scsi_lu_raise_ua(items[i].lu, SCSI_UA_LUNS_CHANGED);
        } else if (items[i].kind == POST_UA) {
            scsi_lu_raise_ua(items[i].lu, items[i].ua);
        }
        if (items[i].lu)
            icfg_lu_unref(items[i].lu);
        if (items[i].close_iqn) {
            unsigned c = iscsi_sessions_close_target(items[i].close_iqn);
            if (c)
                log_info("iscsi config: closed %u session(s) of removed target %s", c,
                         items[i].close_iqn);
            free(items[i].close_iqn);
        }
    }
    if (n)
        api_thread_unboost();
    free(items);
    icfg_listen_apply();
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

/* ---- publication ---- */

/* The published views are indexed twice: pub_views by IQN (lookups from
 * the transport) and pub_byid by target id (the writer's replace/withdraw),
 * so applying a change is O(log n) searches plus one pointer memmove. */
struct byid_entry {
    uint64_t id;
    struct iscsi_target_view *v;
};
static struct byid_entry *pub_byid; /* sorted by id, pub_n entries */

static size_t byid_lower_bound(uint64_t id)
{
    size_t lo = 0, hi = pub_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pub_byid[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static size_t pub_lower_bound(const char *iqn)
{
    size_t lo = 0, hi = pub_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcasecmp(pub_views[mid]->iqn, iqn) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Index in pub_views of the view of target id, or SIZE_MAX. */
static size_t pub_find_id(uint64_t id)
{
    size_t k = byid_lower_bound(id);
    if (k >= pub_n || pub_byid[k].id != id)
        return SIZE_MAX;
    struct iscsi_target_view *v = pub_byid[k].v;
    for (size_t i = pub_lower_bound(v->iqn); i < pub_n; i++)
        if (pub_views[i] == v)
            return i;
    return SIZE_MAX; /* not reached: both indexes hold the same views */
}

static void pub_remove_at(size_t i)
{
    size_t k = byid_lower_bound(pub_views[i]->id);
    if (k < pub_n && pub_byid[k].v == pub_views[i])
        memmove(&pub_byid[k], &pub_byid[k + 1], (pub_n - k - 1) * sizeof(*pub_byid));
    memmove(&pub_views[i], &pub_views[i + 1], (pub_n - i - 1) * sizeof(*pub_views));
    pub_n--;
}

static int pub_insert(struct iscsi_target_view *v)
{
    if (pub_n == pub_cap) {
        size_t cap = pub_cap ? pub_cap * 2 : 64;
        struct iscsi_target_view **p = realloc(pub_views, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        pub_views = p;
        struct byid_entry *b = realloc(pub_byid, cap * sizeof(*b));
        if (!b)
            return -ENOMEM; /* pub_views grew; pub_cap stays, so retried next time */
        pub_byid = b;
        pub_cap = cap;
    }
    size_t i = pub_lower_bound(v->iqn);
    memmove(&pub_views[i + 1], &pub_views[i], (pub_n - i) * sizeof(*pub_views));
    pub_views[i] = v;
    size_t k = byid_lower_bound(v->id);
    memmove(&pub_byid[k + 1], &pub_byid[k], (pub_n - k) * sizeof(*pub_byid));
    pub_byid[k] = (struct byid_entry){.id = v->id, .v = v};
    pub_n++;
    return 0;
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

/* One target of an apply: its new view (NULL: withdraw), the view it
 * replaces, and a stale view of a deferred delete under the same IQN. */
struct change {
    int64_t id;
    struct iscsi_target_view *view;
    struct iscsi_target_view *old;
    struct iscsi_target_view *stale;
};

static int collect_all_ids(struct icfg_dirty *d)
{
    int rc = icfg_read_target_ids(d);
    pub_lock_take();
    for (size_t i = 0; i < pub_n; i++)
        icfg_dirty_add(d, (int64_t)pub_views[i]->id);
    pub_lock_give();
    return rc;
}

/* Build the new views of d's targets into changes (*nc of them), in one
 * read snapshot (DB locked). A view that cannot be built keeps the old
 * one (logged; the error is returned). */
static int build_views(const struct icfg_dirty *d, const char *basename, struct change *changes,
                       size_t *nc)
{
    int rc = 0;
    *nc = 0;
    for (size_t i = 0; i < d->n; i++) {
        struct iscsi_target_view *v = NULL;
        int err = view_build(d->ids[i], basename, &v);
        if (err < 0 && err != -ENOENT) {
            log_error("iscsi config: cannot build target %lld: %s (old view kept)",
                      (long long)d->ids[i], strerror(-err));
            rc = err;
            continue;
        }
        changes[(*nc)++] = (struct change){.id = d->ids[i], .view = v};
    }
    return rc;
}

/* Swap the changed views in (pub_lock held): each change's old and stale
 * views are taken out of the published set and kept in the change. */
static void swap_views(struct change *changes, size_t nc)
{
    for (size_t i = 0; i < nc; i++) {
        struct change *c = &changes[i];
        size_t at = pub_find_id((uint64_t)c->id);
        if (at != SIZE_MAX) {
            c->old = pub_views[at];
            pub_remove_at(at);
        }
        /* A deferred delete may still publish a view under this IQN; names
         * are unique in the DB, so that view is stale: replace it. */
        size_t same = c->view ? pub_lower_bound(c->view->iqn) : pub_n;
        if (same < pub_n && strcasecmp(pub_views[same]->iqn, c->view->iqn) == 0) {
            c->stale = pub_views[same];
            pub_remove_at(same);
        }
        if (c->view && pub_insert(c->view) < 0) {
            log_error("iscsi config: out of memory publishing %s", c->view->iqn);
            iscsi_target_view_unref(c->view);
            c->view = NULL;
        }
    }
}

/* Swap in new discovery credentials (pub_lock held); the old ones are
 * returned in *creds / *n for the caller to wipe. */
static void swap_discovery(struct iscsi_chap_cred **creds, size_t *n, enum iscsi_auth_method m)
{
    struct iscsi_chap_cred *prev = disc_creds;
    size_t prev_n = disc_n;
    disc_creds = *creds;
    disc_n = *n;
    disc_method = m;
    *creds = prev;
    *n = prev_n;
}

/*
 * What the sessions must learn from (old, new), derived in one place and
 * queued for after the DB lock is released: a target gone or renamed
 * closes its sessions; a changed LUN map raises REPORTED LUNS DATA HAS
 * CHANGED on its LUs; a stale view's sessions close. Drops the old views.
 */
static void views_apply(struct change *changes, size_t nc)
{
    for (size_t i = 0; i < nc; i++) {
        struct iscsi_target_view *o = changes[i].old, *n = changes[i].view;
        if (o && (!n || strcasecmp(o->iqn, n->iqn) != 0))
            post_push(NULL, o->iqn);
        else if (o && !lun_maps_equal(o, n))
            for (size_t k = 0; k < n->n_luns; k++)
                post_push(n->luns[k].lu, NULL);
        if (o)
            iscsi_target_view_unref(o);
        if (changes[i].stale) {
            post_push(NULL, changes[i].stale->iqn);
            iscsi_target_view_unref(changes[i].stale);
        }
    }
}

/* The applied targets are no longer pending. */
static void pending_drop(const struct icfg_dirty *d)
{
    for (size_t i = 0; i < d->n && pending.n; i++)
        for (size_t k = 0; k < pending.n; k++)
            if (pending.ids[k] == d->ids[i]) {
                pending.ids[k] = pending.ids[--pending.n];
                break;
            }
}

int icfg_runtime_apply(const struct icfg_dirty *in)
{
    struct icfg_dirty d = {0};
    icfg_dirty_merge(&d, in);
    d.all = false;
    if (in->all)
        collect_all_ids(&d);
    /* Anything pending for these targets is superseded by this rebuild.
     * Its reads share one snapshot (the caller holds the DB lock). */
    bool snap = db_read_begin() == 0;
    char *basename = icfg_global_basename();
    struct change *changes = calloc(d.n ? d.n : 1, sizeof(*changes));
    if (!basename || !changes) {
        if (snap)
            db_read_end();
        free(basename);
        free(changes);
        icfg_dirty_free(&d);
        return -ENOMEM;
    }
    size_t nc = 0;
    int rc = build_views(&d, basename, changes, &nc);
    free(basename);
    struct iscsi_chap_cred *dcreds = NULL;
    size_t dn = 0;
    enum iscsi_auth_method dmethod = ISCSI_AUTH_NONE;
    bool disc = in->discovery && load_creds(0, true, &dcreds, &dn, &dmethod) == 0;
    if (snap)
        db_read_end();
    pub_lock_take();
    swap_views(changes, nc);
    if (disc)
        swap_discovery(&dcreds, &dn, dmethod);
    __atomic_add_fetch(&pub_generation, 1, __ATOMIC_RELEASE);
    pub_lock_give();
    if (dcreds) {
        explicit_bzero(dcreds, dn * sizeof(*dcreds));
        free(dcreds);
    }
    views_apply(changes, nc);
    free(changes);
    if (in->portals)
        icfg_runtime_sync_portals();
    pending_drop(&d);
    icfg_dirty_free(&d);
    return rc;
}

static void icfg_runtime_defer(const struct icfg_dirty *d)
{
    icfg_dirty_merge(&pending, d);
}

/* ---- the publisher (config/cfgtx.h) ---- */

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

/* The dirty set a committed change makes. */
static void changes_dirty(const struct cfg_changes *ch, struct icfg_dirty *d)
{
    if (ch->overflow)
        d->all = d->discovery = d->portals = true;
    for (size_t i = 0; i < ch->n; i++) {
        const struct cfg_change *c = &ch->v[i];
        switch (c->kind) {
        case CFG_ISCSI_TARGET:
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
            extent_changed(c->id);
            break;
        default:
            break;
        }
    }
}

void icfg_runtime_publish(const struct cfg_changes *changes, void *arg)
{
    (void)arg;
    struct icfg_dirty d = {0};
    changes_dirty(changes, &d);
    /* an extent created or changed while unmapped: no view changes */
    bool empty = d.n == 0 && !d.all && !d.discovery && !d.portals;
    if (started && !empty) {
        if (changes->defer)
            icfg_runtime_defer(&d);
        else
            icfg_runtime_apply(&d);
    }
    icfg_dirty_free(&d);
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
        struct icfg_dirty all = {.all = true};
        db_lock();
        int rc = started ? icfg_runtime_apply(&all) : 0;
        db_unlock();
        icfg_runtime_after_unlock();
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
        icfg_runtime_after_unlock();
        if (n)
            log_info("iscsi config: %s rolled back: MEDIUM MAY HAVE CHANGED raised on %zu LU(s)",
                     name, n);
    }
}

static void publisher_after(void *arg)
{
    (void)arg;
    icfg_runtime_after_unlock();
}

void icfg_runtime_init(void)
{
    cfg_publisher_register(CFG_KIND_BIT(CFG_ISCSI_TARGET) | CFG_KIND_BIT(CFG_ISCSI_PORTAL) |
                               CFG_KIND_BIT(CFG_ISCSI_GLOBAL) | CFG_KIND_BIT(CFG_ISCSI_AUTH) |
                               CFG_KIND_BIT(CFG_ISCSI_EXTENT),
                           icfg_runtime_publish, publisher_after, NULL);
    datasets_observe(dataset_observer, NULL);
}

int iscsi_config_reload(void)
{
    db_lock();
    struct icfg_dirty d = pending;
    memset(&pending, 0, sizeof(pending));
    int rc = started ? icfg_runtime_apply(&d) : 0;
    icfg_dirty_free(&d);
    db_unlock();
    icfg_runtime_after_unlock();
    return rc;
}

size_t iscsi_config_pending(void)
{
    db_lock();
    size_t n = pending.all ? (size_t)-1 : pending.n;
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
    struct icfg_dirty all = {.all = true, .discovery = true, .portals = true};
    rc = icfg_runtime_apply(&all);
    db_unlock();
    icfg_runtime_after_unlock();
    /* The daemon's own address must be served: fail the start as a
     * listener that cannot bind always did. */
    int lrc = override ? icfg_listen_override_status() : 0;
    if (lrc < 0)
        return lrc;
    pub_lock_take();
    size_t n = pub_n;
    pub_lock_give();
    log_info("iscsi config: %zu target(s) published", n);
    return rc;
}

void icfg_runtime_stop(void)
{
    db_lock();
    icfg_listen_stop(); /* close every portal listener after unlock */
    pub_lock_take();
    struct iscsi_target_view **views = pub_views;
    size_t n = pub_n;
    pub_views = NULL;
    free(pub_byid);
    pub_byid = NULL;
    pub_n = pub_cap = 0;
    struct iscsi_chap_cred *dc = disc_creds;
    size_t dn = disc_n;
    disc_creds = NULL;
    disc_n = 0;
    disc_method = ISCSI_AUTH_NONE;
    __atomic_add_fetch(&pub_generation, 1, __ATOMIC_RELEASE);
    pub_lock_give();
    for (size_t i = 0; i < n; i++)
        iscsi_target_view_unref(views[i]);
    free(views);
    if (dc) {
        explicit_bzero(dc, dn * sizeof(*dc));
        free(dc);
    }
    for (size_t i = 0; i < lu_n; i++)
        icfg_lu_unref(lu_cache[i].lu);
    free(lu_cache);
    lu_cache = NULL;
    lu_n = lu_cap = 0;
    icfg_dirty_free(&pending);
    started = false;
    db_unlock();
    icfg_runtime_after_unlock();
}

void iscsi_config_stop(void)
{
    icfg_runtime_stop();
}

/* ---- lookups for the transport (iscsi_runtime.h) ---- */

struct iscsi_target_view *iscsi_runtime_find_target(const char *iqn)
{
    struct iscsi_target_view *v = NULL;
    pub_lock_take();
    size_t i = pub_lower_bound(iqn);
    if (i < pub_n && strcasecmp(pub_views[i]->iqn, iqn) == 0) {
        v = pub_views[i];
        iscsi_target_view_ref(v);
    }
    pub_lock_give();
    return v;
}

int iscsi_runtime_list_targets(struct iscsi_target_view ***out)
{
    pub_lock_take();
    struct iscsi_target_view **arr = malloc((pub_n ? pub_n : 1) * sizeof(*arr));
    if (!arr) {
        pub_lock_give();
        return -ENOMEM;
    }
    for (size_t i = 0; i < pub_n; i++) {
        arr[i] = pub_views[i];
        iscsi_target_view_ref(arr[i]);
    }
    int n = (int)pub_n;
    pub_lock_give();
    *out = arr;
    return n;
}

int iscsi_runtime_discovery_auth(struct iscsi_auth_policy *out)
{
    memset(out, 0, sizeof(*out));
    pub_lock_take();
    int rc = 0;
    if (disc_n > 0) {
        struct iscsi_chap_cred *c = malloc(disc_n * sizeof(*c));
        if (!c) {
            rc = -ENOMEM;
        } else {
            memcpy(c, disc_creds, disc_n * sizeof(*c));
            out->creds = c;
            out->n_creds = disc_n;
            out->method = disc_method;
        }
    }
    pub_lock_give();
    return rc;
}

void iscsi_auth_policy_clear(struct iscsi_auth_policy *p)
{
    if (p->creds) {
        explicit_bzero((void *)p->creds, p->n_creds * sizeof(*p->creds));
        free((void *)p->creds);
    }
    memset(p, 0, sizeof(*p));
}

uint64_t iscsi_runtime_generation(void)
{
    return __atomic_load_n(&pub_generation, __ATOMIC_ACQUIRE);
}
