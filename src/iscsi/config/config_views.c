/*
 * What a published iSCSI target is made of: the immutable target views
 * (iscsi_runtime.h) built from the DB, the LU cache that lets every view
 * of an extent share one LU, and the live work on running LUs (an
 * extent's read-only flag and size, a rollback's unit attention) that is
 * not a difference between generations. config_runtime.c puts the views
 * into the configuration generation. See config_views.h.
 */
#include "iscsi/config/config_views.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/pwenc.h"
#include "core/log.h"
#include "iscsi/config/config_internal.h"
#include "iscsi/iscsi_runtime.h"
#include "scsi/scsi.h"
#include "store/bdev.h"
#include "store/volume.h"

/* ---- the LU cache (DB lock): one LU per extent, shared by every view ---- */
struct lu_entry {
    int64_t extent_id;
    int64_t gen;
    struct scsi_lu *lu;
};
static struct lu_entry *lu_cache;
static size_t lu_n, lu_cap;

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

void icfg_live_drain(void)
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

int icfg_load_creds(int64_t tag, bool discovery, struct iscsi_chap_cred **out, size_t *n,
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
        /* Secrets are stored sealed (control/pwenc.h). One that cannot be
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

/* An LU on a stand-in volume whose pool is not reachable yet
 * (datasets_volume_offline): it answers BECOMING READY. */
static bool lu_offline(struct scsi_lu *lu)
{
    return bdev_is_offline(volume_bdev(scsi_lu_volume(lu)));
}

static struct scsi_lu *lu_for_extent(const struct icfg_extent *extent)
{
    int64_t id = extent->id;
    int64_t gen = extent->gen;
    for (size_t i = 0; i < lu_n; i++) {
        if (lu_cache[i].extent_id != id)
            continue;
        if (lu_cache[i].gen == gen && lu_offline(lu_cache[i].lu)) {
            /* Replaced only by one that serves (its pool came online);
             * another stand-in would only be a new LU to the sessions. */
            struct scsi_lu *lu = NULL;
            int rc = icfg_lu_from_extent(extent, &lu);
            if (rc < 0 || lu_offline(lu)) {
                if (rc == 0)
                    icfg_lu_unref(lu);
                icfg_lu_ref(lu_cache[i].lu);
                return lu_cache[i].lu;
            }
            log_info("iscsi config: extent %lld: its volume is reachable: the LU is ready",
                     (long long)id);
            icfg_lu_unref(lu_cache[i].lu);
            lu_cache[i].lu = lu;
            icfg_lu_ref(lu);
            return lu;
        }
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

size_t icfg_volume_ua(const struct volume *vol, enum scsi_ua ua)
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
static void group_initiators(struct view_box *b, size_t at, const struct api_strv *inis)
{
    struct iscsi_target_group *g = &b->groups[at];
    if (inis->n == 0)
        return;
    const char **arr = calloc(inis->n, sizeof(*arr));
    b->initiator_arrays[at] = arr;
    for (size_t k = 0; arr && k < inis->n; k++) {
        char *s = box_strdup(b, inis->v[k]);
        if (s)
            arr[g->n_initiators++] = s;
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
    if (icfg_load_creds(r->auth_tag, false, &creds, &nc, NULL) == 0) {
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
        group_initiators(b, i, &rows[i].initiators);
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
        struct icfg_extent extent;
        struct scsi_lu *lu =
            icfg_extent_get(rows[i].extent_id, &extent) == 0 ? lu_for_extent(&extent) : NULL;
        icfg_extent_clear(&extent);
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

/* The target's auth_networks (CIDR strings) into b. */
static void view_nets(struct view_box *b, const struct api_strv *nets)
{
    if (nets->n == 0)
        return;
    b->nets = calloc(nets->n, sizeof(*b->nets));
    for (size_t i = 0; b->nets && i < nets->n; i++)
        if (icfg_parse_cidr(nets->v[i], &b->nets[b->v.n_auth_networks]) == 0)
            b->v.n_auth_networks++;
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

int icfg_view_build(int64_t id, const char *basename, struct iscsi_target_view **out)
{
    struct icfg_target t;
    int rc = icfg_target_get(id, &t);
    if (rc < 0)
        return rc;
    struct view_box *b = calloc(1, sizeof(*b));
    if (!b) {
        icfg_target_clear(&t);
        return -ENOMEM;
    }
    b->v.refs = 1;
    b->v.destroy = view_destroy;
    b->v.id = (uint64_t)id;
    snprintf(b->v.iqn, sizeof(b->v.iqn), "%s:%s", basename, t.name);
    snprintf(b->v.alias, sizeof(b->v.alias), "%s", t.alias ? t.alias : "");
    b->v.rel_tgt_id = (uint16_t)t.rel_tgt_id;
    view_nets(b, &t.auth_networks);
    icfg_target_clear(&t);
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

void icfg_extent_changed(int64_t id)
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

void icfg_lu_cache_clear(void)
{
    for (size_t i = 0; i < lu_n; i++)
        icfg_lu_unref(lu_cache[i].lu);
    free(lu_cache);
    lu_cache = NULL;
    lu_n = lu_cap = 0;
}
