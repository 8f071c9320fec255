/*
 * LUs on RBD images in a gateway group (gateway.h): the same SCSI identity
 * on every member, the ALUA view, and breaking a fenced member's lock.
 *
 * librbd gives an image's writes to the one client holding its exclusive
 * lock and moves the lock cooperatively when another client writes. Each
 * LU has one optimized member, chosen from the membership (view_locked:
 * the live member ranked first for the image); the others are
 * non-optimized and serve reads directly and writes after a lock transfer
 * (still correct). An initiator following ALUA writes through the
 * optimized member, which then holds the lock. A dead owner's lock would
 * only be released by the OSDs after its watch expires (30 s): the
 * survivors break it as soon as the member is fenced (gateway.c).
 */
#include <errno.h>
#include <rbd/librbd.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "gateway/gateway_internal.h"
#include "store/bdev_rbd.h"

struct gw_lu {
    struct scsi_lu *lu; /* borrowed until released; NULL: a volume held by
                         * another front-end (gateway_volume_hold) */
    unsigned holds;     /* lu NULL: gateway_volume_hold calls not released (lu_mu) */
    struct volume *vol; /* a reference: keeps its bdev open */
    uint64_t seed;      /* from the image id: the members' ranks (view_locked) */
    unsigned owner;     /* member id holding the lock, 0: none known (gw_mu) */
    char owner_addr[128];
    struct scsi_tpg_desc seen[GATEWAY_ID_MAX]; /* last view (lu_mu) */
    size_t nseen;
    bool viewed;
    bool released; /* the LU is gone (lu_mu) */
    struct gw_lu *next;
};

static pthread_mutex_t lu_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint_fast64_t views_gen = 1; /* gateway_views_gen */
static uint64_t members_sig;               /* the membership it was moved for (membership thread) */
static struct gw_lu *lus;                  /* lu_mu */

static uint64_t fnv1a(const char *s, uint64_t h)
{
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

void gateway_lu_params(struct volume *vol, struct scsi_lu_params *p)
{
    struct bdev *b = volume_bdev(vol);
    if (!gateway_enabled() || !bdev_is_rbd(b))
        return;
    char id[64] = "", fsid[64] = "", pool[32];
    rbd_image_t img = bdev_rbd_image_get(b);
    if (!img) {
        log_error("gateway: %s: this member's client is fenced: its LU keeps the local serial "
                  "until it is configured again",
                  volume_name(vol));
        return;
    }
    rados_ioctx_t io = bdev_rbd_ioctx(b);
    int rc = rbd_get_id(img, id, sizeof(id));
    if (rc == 0)
        rc = rados_cluster_fsid(rados_ioctx_get_cluster(io), fsid, sizeof(fsid));
    int64_t pool_id = rados_ioctx_get_id(io);
    bdev_rbd_image_put(b);
    if (rc < 0) {
        log_error("gateway: %s: cannot read the image id (%s): its LU keeps the local serial, "
                  "so initiators will not see one device on every path",
                  volume_name(vol), strerror(-rc));
        return;
    }
    snprintf(pool, sizeof(pool), "%lld", (long long)pool_id);
    /* Serial: the image id (unique in its cluster, the same for every
     * client). NAA 3 (locally assigned): 60 bits of cluster + pool + id. */
    snprintf(p->serial, sizeof(p->serial), "%.32s", id);
    uint64_t h = fnv1a(id, fnv1a("/", fnv1a(pool, fnv1a("/", fnv1a(fsid, 0xcbf29ce484222325ull)))));
    snprintf(p->naa, sizeof(p->naa), "0x3%015llx", (unsigned long long)(h & 0x0fffffffffffffffull));
}

/* A member's rank for an LU (rendezvous hashing): splitmix64 of the LU's
 * seed and the member id. Every member computes the same ranks. */
static uint64_t rank_of(uint64_t seed, unsigned id)
{
    uint64_t z = seed ^ ((uint64_t)id * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The view of gl for an RTPG, under gw_mu. The optimized member is the
 * live member ranked first for this image, from the membership alone (the
 * same on every member, and stable: it moves only when a member joins,
 * leaves or dies). Not the current lock holder: the lock moves at every
 * write through another path, and each move of the optimized state must
 * raise ASYMMETRIC ACCESS STATE CHANGED on every I_T nexus (SPC-4), so a
 * view following the lock flapped with the I/O and failed commands of
 * initiators that write through both paths (iscsi-test-cu's multipath
 * and reservation tests). An initiator that follows ALUA sends its I/O to
 * the optimized member, so the lock settles there. */
static size_t view_locked(const struct gw_lu *gl, struct scsi_tpg_desc *out, size_t max)
{
    struct gateway_member m[GATEWAY_ID_MAX];
    size_t n = gw_members_locked(m, GATEWAY_ID_MAX);
    unsigned optimized = 0;
    uint64_t best = 0;
    for (size_t i = 0; i < n; i++) {
        if (m[i].state != GATEWAY_ONLINE)
            continue;
        uint64_t r = rank_of(gl->seed, m[i].id);
        if (!optimized || r > best) {
            optimized = m[i].id;
            best = r;
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n && k < max; i++, k++) {
        memset(&out[k], 0, sizeof(out[k])); /* views are compared with memcmp */
        out[k].tpg_id = (uint16_t)m[i].id;
        out[k].rel_port_id = (uint16_t)m[i].id;
        if (m[i].state != GATEWAY_ONLINE)
            out[k].state = SCSI_ALUA_UNAVAILABLE;
        else if (m[i].id == optimized)
            out[k].state = SCSI_ALUA_OPTIMIZED;
        else
            out[k].state = SCSI_ALUA_NON_OPTIMIZED;
    }
    return k;
}

unsigned gateway_volume_optimized(struct volume *vol)
{
    struct bdev *b = volume_bdev(vol);
    if (!gateway_enabled() || !bdev_is_rbd(b))
        return 0;
    char id[64];
    struct gw_lu gl = {.seed = fnv1a(volume_name(vol), 0xcbf29ce484222325ull)};
    rbd_image_t img = bdev_rbd_image_get(b);
    if (img && rbd_get_id(img, id, sizeof(id)) == 0)
        gl.seed = fnv1a(id, 0xcbf29ce484222325ull); /* as gateway_lu_attach */
    if (img)
        bdev_rbd_image_put(b);
    struct scsi_tpg_desc v[GATEWAY_ID_MAX];
    pthread_mutex_lock(&gw_mu);
    size_t n = view_locked(&gl, v, GATEWAY_ID_MAX);
    pthread_mutex_unlock(&gw_mu);
    for (size_t i = 0; i < n; i++)
        if (v[i].state == SCSI_ALUA_OPTIMIZED)
            return v[i].tpg_id;
    return 0;
}

static size_t alua_report(void *arg, struct scsi_tpg_desc *out, size_t max)
{
    struct gw_lu *gl = arg;
    pthread_mutex_lock(&gw_mu);
    size_t n = view_locked(gl, out, max);
    pthread_mutex_unlock(&gw_mu);
    return n;
}

static void alua_release(void *arg)
{
    struct gw_lu *gl = arg;
    pthread_mutex_lock(&lu_mu);
    gl->released = true; /* freed by the membership thread */
    pthread_mutex_unlock(&lu_mu);
}

/* Only a fenced member refuses I/O: a non-optimized one serves it (librbd
 * moves the lock). */
static uint8_t alua_port_state(void *arg, uint16_t tpg_id)
{
    (void)arg, (void)tpg_id;
    return gateway_fenced() ? SCSI_ALUA_UNAVAILABLE : SCSI_ALUA_OPTIMIZED;
}

static const struct scsi_alua_ops alua_ops = {
    .report = alua_report, .release = alua_release, .port_state = alua_port_state};

static void lu_check(struct gw_lu *gl);
static void lu_check_image(struct gw_lu *gl, rbd_image_t img);

void gateway_lu_attach(struct scsi_lu *lu, struct volume *vol)
{
    struct bdev *b = volume_bdev(vol);
    if (!gateway_enabled() || !bdev_is_rbd(b))
        return;
    struct gw_lu *gl = calloc(1, sizeof(*gl));
    if (!gl) {
        log_error("gateway: %s: out of memory: the LU reports one optimized path only",
                  volume_name(vol));
        return;
    }
    gl->lu = lu;
    gl->vol = vol;
    volume_ref(vol);
    char id[64];
    rbd_image_t img = bdev_rbd_image_get(b);
    int rc = img ? rbd_get_id(img, id, sizeof(id)) : -ESHUTDOWN;
    if (img)
        bdev_rbd_image_put(b);
    if (rc == 0) {
        gl->seed = fnv1a(id, 0xcbf29ce484222325ull);
    } else {
        log_warn("gateway: %s: cannot read the image id: its optimized member is chosen from "
                 "the volume name (the same on every member only if the names are)",
                 volume_name(vol));
        gl->seed = fnv1a(volume_name(vol), 0xcbf29ce484222325ull);
    }
    /* The view is right from the first command (not only after the next
     * membership round): who holds the lock now. */
    lu_check(gl);
    scsi_lu_set_alua(lu, &alua_ops, gl);
    pthread_mutex_lock(&lu_mu);
    gl->next = lus;
    lus = gl;
    pthread_mutex_unlock(&lu_mu);
}

/* The held entry of vol (lu_mu held), or NULL. */
static struct gw_lu *held_locked(struct volume *vol)
{
    for (struct gw_lu *gl = lus; gl; gl = gl->next)
        if (!gl->lu && gl->vol == vol && !gl->released)
            return gl;
    return NULL;
}

void gateway_volume_hold(struct volume *vol)
{
    if (!gateway_enabled() || !bdev_is_rbd(volume_bdev(vol)))
        return;
    pthread_mutex_lock(&lu_mu);
    struct gw_lu *gl = held_locked(vol);
    if (gl) {
        gl->holds++;
        pthread_mutex_unlock(&lu_mu);
        return;
    }
    gl = calloc(1, sizeof(*gl));
    if (gl) {
        gl->vol = vol;
        gl->holds = 1;
        gl->seed = fnv1a(volume_name(vol), 0xcbf29ce484222325ull); /* no LU: no view to keep */
        volume_ref(vol);
        gl->next = lus;
        lus = gl;
    } else {
        log_error("gateway: %s: out of memory: a fenced member's lock on it is not broken",
                  volume_name(vol));
    }
    pthread_mutex_unlock(&lu_mu);
}

void gateway_volume_release(struct volume *vol)
{
    if (!vol)
        return;
    pthread_mutex_lock(&lu_mu);
    struct gw_lu *gl = held_locked(vol);
    if (gl && --gl->holds == 0)
        gl->released = true; /* freed by the membership thread */
    pthread_mutex_unlock(&lu_mu);
}

/* Read gl's lock owner; break it if it is a fenced member's. */
static void lu_check(struct gw_lu *gl)
{
    struct bdev *b = volume_bdev(gl->vol);
    rbd_image_t img = bdev_rbd_image_get(b);
    if (!img)
        return; /* this member is fenced: its handle is being replaced */
    lu_check_image(gl, img);
    bdev_rbd_image_put(b);
}

static void lu_check_image(struct gw_lu *gl, rbd_image_t img)
{
    rbd_lock_mode_t mode;
    char *owners[4];
    size_t n = 4;
    char addr[128] = "";
    int rc = rbd_lock_get_owners(img, &mode, owners, &n);
    if (rc == 0) {
        if (n > 0)
            snprintf(addr, sizeof(addr), "%s", owners[0]);
        rbd_lock_get_owners_cleanup(owners, n);
    } else if (rc != -ENOENT) {
        return; /* the cluster did not answer: keep the last view */
    }
    bool fenced = false;
    pthread_mutex_lock(&gw_mu);
    unsigned id = addr[0] ? gw_member_of_addr_locked(addr, &fenced) : 0;
    pthread_mutex_unlock(&gw_mu);
    if (addr[0] && fenced) {
        /* The owner is blocklisted: breaking its lock lets our writes (and
         * the ones librbd holds waiting for it) go on now. Said before:
         * those writes may complete before rbd_lock_break returns. */
        log_warn("gateway: %s: breaking the exclusive lock of fenced client %s",
                 volume_name(gl->vol), addr);
        rc = rbd_lock_break(img, RBD_LOCK_MODE_EXCLUSIVE, addr);
        if (rc < 0 && rc != -ENOENT)
            log_warn("gateway: %s: cannot break the lock of fenced client %s: %s",
                     volume_name(gl->vol), addr, strerror(-rc));
        id = 0;
        addr[0] = 0;
    }
    pthread_mutex_lock(&gw_mu);
    if (gl->owner != id)
        log_info("gateway: %s: the exclusive lock is now held by %s%.0u%s", volume_name(gl->vol),
                 id ? "member " : "no member", id,
                 id && id == gateway_id() ? " (this member)" : "");
    gl->owner = id;
    snprintf(gl->owner_addr, sizeof(gl->owner_addr), "%s", addr);
    pthread_mutex_unlock(&gw_mu);
}

uint64_t gateway_views_gen(void)
{
    return atomic_load(&views_gen);
}

/* Move views_gen when the members or their states differ from the last
 * pass's: every view (view_locked) is a function of them alone. */
static void views_gen_update(void)
{
    struct gateway_member m[GATEWAY_ID_MAX];
    pthread_mutex_lock(&gw_mu);
    size_t n = gw_members_locked(m, GATEWAY_ID_MAX);
    pthread_mutex_unlock(&gw_mu);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((uint64_t)m[i].id << 8 | (uint64_t)m[i].state)) * 0x100000001b3ull;
    if (h != members_sig) {
        members_sig = h;
        atomic_fetch_add(&views_gen, 1);
    }
}

void gw_lu_pass(void)
{
    views_gen_update();
    struct gw_lu *dead = NULL, **pp;
    struct gw_lu **todo = NULL;
    size_t nt = 0, cap = 0;

    pthread_mutex_lock(&lu_mu);
    for (struct gw_lu *gl = lus; gl; gl = gl->next)
        cap++;
    todo = cap ? malloc(cap * sizeof(*todo)) : NULL;
    for (pp = &lus; *pp;) {
        struct gw_lu *gl = *pp;
        if (gl->released) {
            *pp = gl->next;
            gl->next = dead;
            dead = gl;
            continue;
        }
        if (todo)
            todo[nt++] = gl;
        pp = &gl->next;
    }
    pthread_mutex_unlock(&lu_mu);
    while (dead) {
        struct gw_lu *next = dead->next;
        volume_unref(dead->vol);
        free(dead);
        dead = next;
    }
    /* Only this thread frees entries: the ones in todo stay valid. */
    for (size_t i = 0; i < nt; i++) {
        struct gw_lu *gl = todo[i];
        lu_check(gl);
        struct scsi_tpg_desc v[GATEWAY_ID_MAX];
        pthread_mutex_lock(&gw_mu);
        size_t n = view_locked(gl, v, GATEWAY_ID_MAX);
        pthread_mutex_unlock(&gw_mu);
        pthread_mutex_lock(&lu_mu);
        bool changed = gl->viewed && (n != gl->nseen || memcmp(v, gl->seen, n * sizeof(v[0])));
        memcpy(gl->seen, v, n * sizeof(v[0]));
        gl->nseen = n;
        gl->viewed = true;
        if (changed && !gl->released && gl->lu)
            scsi_lu_raise_ua(gl->lu, SCSI_UA_ALUA_CHANGED);
        pthread_mutex_unlock(&lu_mu);
    }
    free(todo);
}

void gw_lu_shutdown(void)
{
    pthread_mutex_lock(&lu_mu);
    struct gw_lu *gl = lus;
    lus = NULL;
    /* An LU still alive keeps pointing at its entry: detach it first. */
    for (struct gw_lu *g = gl; g; g = g->next)
        if (!g->released && g->lu)
            scsi_lu_set_alua(g->lu, NULL, NULL);
    pthread_mutex_unlock(&lu_mu);
    while (gl) {
        struct gw_lu *next = gl->next;
        volume_unref(gl->vol);
        free(gl);
        gl = next;
    }
}

void gw_lu_reconnected(void)
{
    unsigned n = 0;

    pthread_mutex_lock(&lu_mu);
    /* Under lu_mu: an LU's release (its first step when it is freed)
     * waits, so the LU is alive for the call. */
    for (struct gw_lu *gl = lus; gl; gl = gl->next) {
        if (gl->released || !gl->lu)
            continue;
        scsi_lu_shared_resync(gl->lu);
        n++;
    }
    pthread_mutex_unlock(&lu_mu);
    if (n)
        log_info("gateway: reloading the shared reservations of %u LU(s) on the new client", n);
}
