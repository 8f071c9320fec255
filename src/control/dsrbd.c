/*
 * RBD pools: connection settings, state and the connector thread
 * (dsrbd.h), and the rbd pool backend (dsbackend.h).
 */
#include "control/dsrbd.h"
#include "control/rbd_creds.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/db.h"
#include "control/dsbackend.h"
#include "core/log.h"
#include "store/bdev_rbd.h"
#include "store/rbd_image.h"

_Thread_local char ds_backend_why[640];

struct rbd_pool {
    int64_t id;
    char name[NAME_DATASET_MAX + 1];
    struct ds_rbd_spec spec;
    struct rbd_cluster *c; /* NULL until connected */
    bool online;
    char why[256];
    uint64_t size, avail;
    struct rbd_pool *next;
};

static pthread_mutex_t rp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rp_cond = PTHREAD_COND_INITIALIZER;
static struct rbd_pool *rp_head;
static pthread_t rp_thread;
static bool rp_running, rp_stop, rp_exited;

/* The pool (and namespace) answer on c: 0, or -errno with why. */
static int check_pool(struct rbd_cluster *c, const struct ds_rbd_spec *s, bool make_ns, char *why,
                      size_t whylen)
{
    rados_ioctx_t io;
    bool exists = false;
    int rc = rbd_cluster_ioctx(c, s->pool, NULL, &io);

    if (rc == -ENOENT) {
        snprintf(why, whylen, "the Ceph pool %s does not exist", s->pool);
        return rc;
    }
    if (rc < 0) {
        snprintf(why, whylen, "cannot open the Ceph pool %s: %s", s->pool, strerror(-rc));
        return rc;
    }
    if (s->ns[0]) {
        rc = rbd_namespace_exists(io, s->ns, &exists);
        if (rc == 0 && !exists && make_ns) {
            rc = rbd_namespace_create(io, s->ns);
            if (rc == 0)
                log_info("datasets: created RBD namespace %s/%s", s->pool, s->ns);
        } else if (rc == 0 && !exists) {
            rc = -ENOENT;
        }
        if (rc < 0)
            snprintf(why, whylen, "RBD namespace %.100s/%.100s: %s", s->pool, s->ns, strerror(-rc));
    }
    rados_ioctx_destroy(io);
    return rc;
}

int ds_rbd_connect(const struct ds_rbd_spec *s, unsigned timeout_s, struct rbd_cluster **out,
                   char *why, size_t whylen)
{
    struct rbd_cluster_spec cs;
    struct rbd_creds cr;
    char reason[512];
    int rc = rbd_creds_resolve(s, &cr, reason, sizeof(reason));

    *out = NULL;
    if (rc < 0) {
        snprintf(why, whylen, "the Ceph cluster's settings are refused: %s", reason);
        return rc;
    }
    /* The gateway group's own conf: the group's client, the one fencing
     * blocklists (rbd_cluster.h); any other: the settings read from it. */
    if (!rbd_cluster_group_spec(s->conf, &cs))
        rbd_creds_cluster_spec(&cr, &cs);
    rc = rbd_cluster_get(&cs, timeout_s, out);
    if (rc < 0) {
        /* A reason for a client: very long monitor lists are shortened
         * with "...", the error always fits (never the key). */
        size_t mlen = strlen(cr.mon_host);
        snprintf(why, whylen,
                 "cannot connect to the Ceph cluster (mon_host %s%.100s, id %.64s): %s",
                 mlen > 100 ? "..." : "", mlen > 100 ? cr.mon_host + mlen - 100 : cr.mon_host,
                 cr.id, strerror(-rc));
    }
    rbd_creds_clear(&cr);
    return rc;
}

static int connect_spec(const struct ds_rbd_spec *s, struct rbd_cluster **out, char *why,
                        size_t whylen)
{
    return ds_rbd_connect(s, DS_RBD_CONNECT_TIMEOUT, out, why, whylen);
}

int ds_rbd_probe(const struct ds_rbd_spec *spec, struct rbd_cluster **out, char *why, size_t whylen)
{
    int rc = connect_spec(spec, out, why, whylen);

    if (rc < 0)
        return rc;
    rc = check_pool(*out, spec, true, why, whylen);
    if (rc < 0) {
        rbd_cluster_put(*out);
        *out = NULL;
    }
    return rc;
}

static struct rbd_pool *find_locked(int64_t id)
{
    for (struct rbd_pool *p = rp_head; p; p = p->next)
        if (p->id == id)
            return p;
    return NULL;
}

static struct rbd_pool *pool_new(int64_t id, const char *name, const struct ds_rbd_spec *spec)
{
    struct rbd_pool *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->id = id;
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->spec = *spec;
    snprintf(p->why, sizeof(p->why), "connecting to the Ceph cluster");
    return p;
}

static void cluster_usage(struct rbd_cluster *c, uint64_t *size, uint64_t *avail, int *rc)
{
    struct rados_cluster_stat_t cs;

    *rc = rados_cluster_stat(rbd_cluster_rados(c), &cs);
    if (*rc == 0) {
        *size = cs.kb * 1024;
        *avail = cs.kb_avail * 1024;
    }
}

void ds_rbd_pool_add(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec,
                     struct rbd_cluster *c)
{
    struct rbd_pool *p = pool_new(pool_id, name, spec);
    int rc;

    if (!p) {
        rbd_cluster_put(c);
        return;
    }
    p->c = c;
    cluster_usage(c, &p->size, &p->avail, &rc);
    p->online = rc == 0;
    if (rc < 0)
        snprintf(p->why, sizeof(p->why), "the Ceph cluster does not answer: %s", strerror(-rc));
    pthread_mutex_lock(&rp_lock);
    p->next = rp_head;
    rp_head = p;
    pthread_mutex_unlock(&rp_lock);
}

void ds_rbd_status(int64_t pool_id, bool *online, char *why, size_t whylen, uint64_t *size,
                   uint64_t *avail)
{
    struct rbd_pool *p;

    pthread_mutex_lock(&rp_lock);
    p = find_locked(pool_id);
    *online = p && p->online;
    snprintf(why, whylen, "%s", p ? (p->online ? "" : p->why) : "not loaded");
    *size = p ? p->size : 0;
    *avail = p ? p->avail : 0;
    pthread_mutex_unlock(&rp_lock);
}

/* One pool's check, on copies taken under rp_lock. */
struct pool_probe {
    struct ds_rbd_spec spec;
    struct rbd_cluster *c; /* own reference, or NULL */
    char why[256], name[NAME_DATASET_MAX + 1];
    uint64_t size, avail;
    bool was_online;
    int rc;
};

/* Copy what the check needs from pool id (and a reference to its
 * cluster). False when the pool has gone meanwhile. */
static bool probe_load(int64_t id, struct pool_probe *pr)
{
    struct rbd_pool *p;

    pthread_mutex_lock(&rp_lock);
    p = find_locked(id);
    if (p) {
        pr->spec = p->spec;
        pr->was_online = p->online;
        snprintf(pr->name, sizeof(pr->name), "%s", p->name);
        if (p->c) {
            pr->c = p->c;
            rbd_cluster_ref(pr->c);
        }
    }
    pthread_mutex_unlock(&rp_lock);
    return p != NULL;
}

/* Unlocked (it may take the connect or op timeout): connect if needed,
 * read the usage, and check the pool again when it was not online. */
static void probe_run(struct pool_probe *pr)
{
    pr->rc = 0;
    if (!pr->c)
        pr->rc = connect_spec(&pr->spec, &pr->c, pr->why, sizeof(pr->why));
    if (pr->rc == 0) {
        cluster_usage(pr->c, &pr->size, &pr->avail, &pr->rc);
        if (pr->rc < 0)
            snprintf(pr->why, sizeof(pr->why), "the Ceph cluster does not answer: %s",
                     strerror(-pr->rc));
    }
    if (pr->rc == 0 && !pr->was_online)
        pr->rc = check_pool(pr->c, &pr->spec, false, pr->why, sizeof(pr->why));
}

/* A change of state is logged under rp_lock, as it is made: a reader
 * of the pool's status (pool.query) never sees it before the line. */
static void probe_log_locked(const struct pool_probe *pr)
{
    if (pr->rc == 0 && !pr->was_online)
        log_info("datasets: RBD pool %s (%s%s%s) is ONLINE", pr->name, pr->spec.pool,
                 pr->spec.ns[0] ? "/" : "", pr->spec.ns);
    else if (pr->rc < 0 && pr->was_online)
        log_error("datasets: RBD pool %s is UNAVAIL: %s", pr->name, pr->why);
    else if (pr->rc < 0)
        log_debug("datasets: RBD pool %s still UNAVAIL: %s", pr->name, pr->why);
}

/* Record the result in pool id if it is still there: a new connection
 * goes to the pool (pr->c then NULL); a failed pool lets its connection
 * go (returned, to be put unlocked), so the next attempt connects afresh
 * and reads the conf again (monitors may have moved); open images keep
 * their own references. */
static struct rbd_cluster *probe_store(int64_t id, struct pool_probe *pr)
{
    struct rbd_cluster *stale = NULL;
    struct rbd_pool *p;

    pthread_mutex_lock(&rp_lock);
    p = find_locked(id);
    if (p) {
        /* The state this result replaces (a failed request may have
         * marked the pool lost since probe_load, and logged it). */
        pr->was_online = p->online;
        if (pr->rc == 0 && pr->c && !p->c) {
            p->c = pr->c; /* our reference goes to the pool */
            pr->c = NULL;
        } else if (pr->rc < 0 && p->c) {
            stale = p->c;
            p->c = NULL;
        }
        p->online = pr->rc == 0;
        if (pr->rc == 0) {
            p->size = pr->size;
            p->avail = pr->avail;
        } else {
            snprintf(p->why, sizeof(p->why), "%s", pr->why);
        }
        probe_log_locked(pr);
    } else {
        pr->was_online = true; /* gone meanwhile: nothing to announce */
    }
    pthread_mutex_unlock(&rp_lock);
    return stale;
}

static int renew(int64_t id, struct rbd_cluster *old, struct rbd_cluster **out);

/* One pass of the connector: connect what is not, check what is. Works
 * on copies unlocked: an attempt may take DS_RBD_CONNECT_TIMEOUT (a lost
 * cluster's stat up to RBD_CLUSTER_OP_TIMEOUT). */
static void connector_pass(void)
{
    int64_t ids[64];
    size_t n = 0;

    pthread_mutex_lock(&rp_lock);
    for (struct rbd_pool *p = rp_head; p && n < 64; p = p->next)
        ids[n++] = p->id;
    pthread_mutex_unlock(&rp_lock);
    for (size_t i = 0; i < n && !__atomic_load_n(&rp_stop, __ATOMIC_RELAXED); i++) {
        struct pool_probe pr = {0};
        struct rbd_cluster *stale;

        if (!probe_load(ids[i], &pr))
            continue;
        if (pr.c && rbd_cluster_retired(pr.c)) {
            /* A fenced client being replaced: the pool lets it go too. */
            struct rbd_cluster *old = pr.c;
            pr.c = NULL;
            if (renew(ids[i], old, &pr.c) < 0)
                pr.c = NULL;
        }
        probe_run(&pr);
        stale = probe_store(ids[i], &pr);
        if (pr.rc == 0 && !pr.was_online)
            /* Shares whose volumes could not be opened while the pool
             * was down (at start-up: always) are opened now. */
            ds_notify(DATASETS_POOL_ONLINE, pr.name, NULL);
        /* (Shutting down a lost cluster's client can take seconds.) */
        if (pr.c)
            rbd_cluster_put(pr.c);
        if (stale)
            rbd_cluster_put(stale);
    }
}

static void *connector_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&rp_lock);
    while (!rp_stop) {
        struct timespec until;

        pthread_mutex_unlock(&rp_lock);
        connector_pass();
        pthread_mutex_lock(&rp_lock);
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += DS_RBD_CHECK_INTERVAL;
        while (!rp_stop && pthread_cond_timedwait(&rp_cond, &rp_lock, &until) != ETIMEDOUT)
            ;
    }
    rp_exited = true;
    pthread_cond_broadcast(&rp_cond);
    pthread_mutex_unlock(&rp_lock);
    return NULL;
}

/* ds_rbd_start's walk: record each stored RBD pool (not yet known) as
 * connecting; *arg counts them. */
static int start_pool_add(int64_t id, const char *name, const struct ds_rbd_spec *spec, void *arg)
{
    size_t *n = arg;
    struct rbd_pool *p = pool_new(id, name, spec);

    if (!p)
        return 0;
    pthread_mutex_lock(&rp_lock);
    if (!find_locked(p->id)) {
        p->next = rp_head;
        rp_head = p;
        p = NULL;
        (*n)++;
    }
    pthread_mutex_unlock(&rp_lock);
    free(p);
    return 0;
}

void ds_rbd_start(void)
{
    size_t n = 0;

    db_lock();
    ds_rbd_spec_each(start_pool_add, &n);
    db_unlock();
    ds_rbd_follow_start();
    pthread_mutex_lock(&rp_lock);
    if (!rp_running) {
        rp_stop = false;
        rp_exited = false;
        rp_running = pthread_create(&rp_thread, NULL, connector_main, NULL) == 0;
        if (!rp_running)
            log_error("datasets: cannot start the RBD connector thread");
    }
    pthread_mutex_unlock(&rp_lock);
    if (n)
        log_info("datasets: %zu RBD pool(s); connecting in the background", n);
}

void ds_rbd_stop(void)
{
    struct rbd_pool *p;
    bool join;

    struct timespec until;
    bool exited = true;

    pthread_mutex_lock(&rp_lock);
    __atomic_store_n(&rp_stop, true, __ATOMIC_RELAXED);
    join = rp_running;
    rp_running = false;
    pthread_cond_broadcast(&rp_cond);
    /* Bounded: the connector may be inside a call to a lost cluster (up
     * to the op timeout); shutdown does not wait that long for it. */
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DS_RBD_STOP_WAIT;
    while (join && !rp_exited && pthread_cond_timedwait(&rp_cond, &rp_lock, &until) != ETIMEDOUT)
        ;
    exited = rp_exited;
    pthread_mutex_unlock(&rp_lock);
    if (join && !exited) {
        log_warn("datasets: the RBD connector is still waiting on a cluster; not waiting for it");
        pthread_detach(rp_thread);
        return; /* it may still use the pools: leave them */
    }
    if (join)
        pthread_join(rp_thread, NULL);
    pthread_mutex_lock(&rp_lock);
    p = rp_head;
    rp_head = NULL;
    pthread_mutex_unlock(&rp_lock);
    while (p) {
        struct rbd_pool *next = p->next;
        if (p->c)
            rbd_cluster_put(p->c);
        free(p);
        p = next;
    }
}

int ds_rbd_image_name(const struct ds_pool *p, const char *name, char *buf, size_t len)
{
    size_t plen = strlen(p->name), i;
    const char *rest;

    /* only datasets below the pool's root have an image */
    if (strncmp(name, p->name, plen) != 0 || name[plen] != '/' || !name[plen + 1])
        return -EINVAL;
    rest = name + plen + 1;
    for (i = 0; rest[i]; i++) {
        if (i + 1 >= len)
            return -ENAMETOOLONG;
        buf[i] = rest[i] == '/' ? '%' : rest[i];
    }
    if (len == 0)
        return -ENAMETOOLONG;
    buf[i] = '\0';
    return 0;
}

/* ---- the rbd backend ---- */

/* A cluster reference and an I/O context on the pool's pool/namespace. */
struct rbd_io {
    int64_t pool_id;
    struct rbd_cluster *c;
    rados_ioctx_t io;
    struct ds_rbd_spec spec;
};

static void mark_lost(int64_t pool_id, int rc)
{
    struct rbd_pool *p;

    pthread_mutex_lock(&rp_lock);
    p = find_locked(pool_id);
    if (p && p->online) {
        p->online = false;
        snprintf(p->why, sizeof(p->why), "a request to the Ceph cluster failed: %s", strerror(-rc));
        /* under the lock, as probe_log_locked */
        log_error("datasets: RBD pool %s is UNAVAIL: %s", p->name, p->why);
    }
    pthread_mutex_unlock(&rp_lock);
}

/* Pool id's connection was retired (this daemon was fenced by its
 * gateway group and rejoins with a new client, docs/ha.md): take the
 * current one for the same settings. old: a reference the caller holds
 * (given back); *out: a new reference. Not under rp_lock (it may
 * connect). */
static int renew(int64_t id, struct rbd_cluster *old, struct rbd_cluster **out)
{
    struct rbd_cluster *stale = NULL;
    struct rbd_pool *p;
    int rc = rbd_cluster_get_like(old, DS_RBD_CONNECT_TIMEOUT, out);

    if (rc < 0) {
        rbd_cluster_put(old);
        return rc;
    }
    pthread_mutex_lock(&rp_lock);
    p = find_locked(id);
    if (p && p->c == old) {
        stale = old; /* the pool's reference */
        p->c = *out;
        rbd_cluster_ref(*out);
    }
    pthread_mutex_unlock(&rp_lock);
    if (stale)
        rbd_cluster_put(stale);
    rbd_cluster_put(old);
    return 0;
}

static int io_get(const struct ds_pool *dp, struct rbd_io *out)
{
    struct rbd_pool *p;
    int rc;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&rp_lock);
    p = find_locked(dp->id);
    if (!p || !p->online || !p->c) {
        snprintf(ds_backend_why, sizeof(ds_backend_why), "pool %.200s is UNAVAIL: %.255s", dp->name,
                 p ? p->why : "not loaded");
        pthread_mutex_unlock(&rp_lock);
        return -EHOSTUNREACH;
    }
    out->pool_id = p->id;
    out->c = p->c;
    out->spec = p->spec;
    rbd_cluster_ref(out->c);
    pthread_mutex_unlock(&rp_lock);
    if (rbd_cluster_retired(out->c)) {
        struct rbd_cluster *old = out->c;
        out->c = NULL;
        rc = renew(out->pool_id, old, &out->c);
        if (rc < 0) {
            snprintf(ds_backend_why, sizeof(ds_backend_why),
                     "pool %.200s: cannot connect a new Ceph client: %s", dp->name, strerror(-rc));
            return rc;
        }
    }
    rc = rbd_cluster_ioctx(out->c, out->spec.pool, out->spec.ns, &out->io);
    if (rc < 0) {
        rbd_cluster_put(out->c);
        out->c = NULL;
    }
    return rc;
}

static void mark_lost(int64_t pool_id, int rc);

/* Done with r; rc is the call's result: a request the cluster did not
 * answer (-ETIMEDOUT) makes the pool UNAVAIL at once, so that the calls
 * after it fail fast instead of each waiting out the timeout (the
 * connector brings it back). */
static void io_put(struct rbd_io *r, int rc)
{
    if (rc == -ETIMEDOUT && r->pool_id)
        mark_lost(r->pool_id, rc);
    if (r->io)
        rados_ioctx_destroy(r->io);
    if (r->c)
        rbd_cluster_put(r->c);
    memset(r, 0, sizeof(*r));
}

/* A handle on the image of name: the one serving it if the volume is
 * open (no second handle to pull the exclusive lock away), else one
 * opened here (*owned). *vol (when serving) holds a reference to drop. */
struct img_handle {
    rbd_image_t img;
    bool owned;
    struct volume *vol;
    struct bdev *bdev; /* the serving bdev whose image is borrowed */
};

static int handle_get(struct rbd_io *r, const char *name, const char *image, bool readonly,
                      struct img_handle *h)
{
    struct bdev *b = NULL;

    memset(h, 0, sizeof(*h));
    h->vol = ds_cache_peek_bdev(name, &b);
    if (h->vol && b && bdev_is_rbd(b)) {
        h->img = bdev_rbd_image_get(b);
        if (h->img) {
            h->bdev = b;
            return 0;
        }
        /* Its client was fenced; a second handle would pull the lock
         * away from the one about to be reopened. */
        snprintf(ds_backend_why, sizeof(ds_backend_why),
                 "%.200s: its RBD client was fenced and is being replaced; try again", name);
        return -ESHUTDOWN;
    }
    if (h->vol)
        volume_unref(h->vol);
    h->vol = NULL;
    h->owned = true;
    return rbd_image_open_mgmt(r->io, image, NULL, readonly, &h->img);
}

static void handle_put(struct img_handle *h)
{
    if (h->owned && h->img)
        rbd_close(h->img);
    if (h->bdev)
        bdev_rbd_image_put(h->bdev);
    if (h->vol)
        volume_unref(h->vol);
    memset(h, 0, sizeof(*h));
}

#define IMAGE_OF(p, name, buf)                                                                     \
    do {                                                                                           \
        int irc_ = ds_rbd_image_name(p, name, buf, sizeof(buf));                                   \
        if (irc_ < 0)                                                                              \
            return irc_;                                                                           \
    } while (0)

/* One management call on an image: the pool's I/O context and a handle on
 * name's image (handle_get). image_begin: 0, or -errno with nothing held;
 * image_end releases both and returns rc (a timeout marks the pool lost). */
struct image_op {
    struct rbd_io r;
    struct img_handle h;
};

static int image_begin(const struct ds_pool *p, const char *name, struct image_op *op)
{
    char image[DS_NAME_BUF];
    int rc = ds_rbd_image_name(p, name, image, sizeof(image));

    if (rc < 0)
        return rc;
    rc = io_get(p, &op->r);
    if (rc < 0)
        return rc;
    rc = handle_get(&op->r, name, image, false, &op->h);
    if (rc < 0) {
        handle_put(&op->h);
        io_put(&op->r, rc);
    }
    return rc;
}

static void usage_changed(void);

static int image_end(struct image_op *op, int rc)
{
    usage_changed(); /* every caller changes an image or its snapshots */
    handle_put(&op->h);
    io_put(&op->r, rc);
    return rc;
}

static int rbdpool_volume_create(const struct ds_pool *p, const char *name, uint64_t size,
                                 bool sparse, char *why, size_t whylen)
{
    char image[DS_NAME_BUF];
    struct rbd_io r;
    int rc;

    if (!sparse) {
        snprintf(why, whylen,
                 "sparse: false (a preallocated volume) is not supported on RBD pools: RBD "
                 "images are thin");
        snprintf(ds_backend_why, sizeof(ds_backend_why), "%s", why);
        return -ENOTSUP;
    }
    IMAGE_OF(p, name, image);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    rc = rbd_image_create(r.io, image, size);
    if (rc == -EEXIST)
        snprintf(ds_backend_why, sizeof(ds_backend_why),
                 "an RBD image named %.200s already exists in %.100s%s%.100s", image, r.spec.pool,
                 r.spec.ns[0] ? "/" : "", r.spec.ns);
    io_put(&r, rc);
    return rc;
}

/* The image exists (another gateway of the group made it): check its size
 * and take it as it is. */
static int rbdpool_volume_adopt(const struct ds_pool *p, const char *name, uint64_t size, char *why,
                                size_t whylen)
{
    char image[DS_NAME_BUF];
    struct rbd_io r;
    rbd_image_t img = NULL;
    uint64_t have = 0;
    int rc;

    IMAGE_OF(p, name, image);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    rc = rbd_image_open_mgmt(r.io, image, NULL, true, &img);
    if (rc == 0) {
        rc = rbd_get_size(img, &have);
        rbd_close(img);
    }
    if (rc == -ENOENT)
        snprintf(ds_backend_why, sizeof(ds_backend_why),
                 "adopt: there is no RBD image %.200s in %.100s%s%.100s to adopt", image,
                 r.spec.pool, r.spec.ns[0] ? "/" : "", r.spec.ns);
    else if (rc == 0 && have != size) {
        snprintf(ds_backend_why, sizeof(ds_backend_why),
                 "adopt: RBD image %.200s is %llu bytes, not volsize %llu", image,
                 (unsigned long long)have, (unsigned long long)size);
        rc = -EINVAL;
    }
    snprintf(why, whylen, "%s", ds_backend_why);
    io_put(&r, rc);
    return rc;
}

static int rbdpool_filesystem_create(const struct ds_pool *p, const char *name)
{
    /* A FILESYSTEM is only a prefix of image names: nothing to make. */
    (void)p;
    (void)name;
    return 0;
}

/* The client's reason for an image another client keeps open. */
static void busy_why(const struct rbd_io *r, const char *image, const char *who)
{
    snprintf(ds_backend_why, sizeof(ds_backend_why),
             "the RBD image %.160s in %.64s%s%.64s is still open by another client (%.120s) "
             "after %d s: close it there (or withdraw its share) and delete again",
             image, r->spec.pool, r->spec.ns[0] ? "/" : "", r->spec.ns, who[0] ? who : "watched",
             RBD_IMAGE_REMOVE_WAIT_MS / 1000);
}

/* Milliseconds since t0 (CLOCK_MONOTONIC). */
static long ms_since(const struct timespec *t0)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t0->tv_sec) * 1000L + (now.tv_nsec - t0->tv_nsec) / 1000000L;
}

/* A removal that took long says where the time went: librbd waits for
 * the image's lock and for every watcher to acknowledge its notifies. */
static void slow_step_log(const char *what, const char *name, const char *snap,
                          const struct timespec *t0, int rc)
{
    long ms = ms_since(t0);

    if (ms >= 1000)
        log_info("rbd: removing %s %s%s%s took %ld ms (%s)", what, name, snap ? "@" : "",
                 snap ? snap : "", ms, rc < 0 ? strerror(-rc) : "done");
}

static int rbdpool_dataset_remove(const struct ds_pool *p, const char *name, bool is_volume)
{
    char image[DS_NAME_BUF];
    struct rbd_io r;
    int rc;

    if (!is_volume)
        return 0;
    IMAGE_OF(p, name, image);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = rbd_image_remove(r.io, image);
    slow_step_log("the image of", name, NULL, &t0, rc);
    if (rc == -EBUSY)
        busy_why(&r, image, ""); /* a client opened it after the check */
    usage_changed();             /* its dataset id may be given again */
    io_put(&r, rc);
    return rc;
}

/* Wait (bounded) until no client watches the image: the other members of
 * a gateway group close a withdrawn share's image within about a second.
 * The watch of our own serving handle (own) does not count. */
static int rbdpool_volume_remove_check(const struct ds_pool *p, const char *name, struct bdev *own)
{
    char image[DS_NAME_BUF], who[256] = "";
    uint64_t mine = own ? bdev_rbd_client_id(own) : 0;
    struct rbd_io r;
    int rc;

    IMAGE_OF(p, name, image);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    rc = rbd_image_wait_unwatched(r.io, image, mine, RBD_IMAGE_REMOVE_WAIT_MS, who, sizeof(who));
    if (rc == -EBUSY)
        busy_why(&r, image, who);
    else if (rc == -ENOENT)
        rc = 0; /* removed behind blockd's back: the row goes */
    else if (rc < 0)
        snprintf(ds_backend_why, sizeof(ds_backend_why), "RBD image %.200s: %s", image,
                 strerror(-rc));
    io_put(&r, rc);
    return rc;
}

/* A volume of an RBD pool may still be a memory one: nothing to close. */
static int rbdpool_handle_withdraw(struct bdev *b)
{
    return bdev_is_rbd(b) ? bdev_rbd_withdraw(b) : 0;
}

static int rbdpool_handle_restore(struct bdev *b)
{
    return bdev_is_rbd(b) ? bdev_rbd_restore(b) : 0;
}

static int rbdpool_snapshot_remove(const struct ds_pool *p, const char *name, const char *snap)
{
    struct image_op op;
    struct timespec t0;
    char id[64];

    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = image_begin(p, name, &op);
    if (rc < 0)
        return rc;
    rc = rbd_image_snap_remove(op.h.img, snap);
    slow_step_log("snapshot", name, snap, &t0, rc);
    /* the snapshot's LU had a reservation object of its own */
    if (rc == 0 && rbd_get_id(op.h.img, id, sizeof(id)) == 0)
        rbd_image_forget(op.r.io, name, id, snap);
    return image_end(&op, rc);
}

static int rbdpool_volume_resize(const struct ds_pool *p, const char *name, struct volume *v,
                                 uint64_t old_size, uint64_t new_size, bool sparse)
{
    struct image_op op;
    int rc;

    (void)old_size;
    (void)sparse;
    if (v)
        return volume_resize(v, new_size); /* the bdev resizes its image */
    rc = image_begin(p, name, &op);
    return rc < 0 ? rc : image_end(&op, rbd_image_resize(op.h.img, new_size));
}

static int rbdpool_open_bdev(const struct ds_pool *p, const char *name, const char *snap,
                             bool readonly, struct bdev **out)
{
    char image[DS_NAME_BUF];
    struct rbd_io r;
    int rc;

    IMAGE_OF(p, name, image);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    /* Opened to serve: its writes change `used` (usage_get). */
    usage_changed();
    /* the bdev takes its own cluster reference */
    rc = bdev_rbd_open(r.c, r.spec.pool, r.spec.ns, image, snap, snap ? true : readonly, out);
    if (rc == 0 && !snap)
        ds_rbd_follow(*out, name); /* resizes by other clients of the image */
    if (rc == -ENOENT)
        /* removed behind blockd's back (rbd rm), or never made */
        snprintf(ds_backend_why, sizeof(ds_backend_why),
                 "the RBD image %.200s%s%.100s does not exist in %.100s%s%.100s", image,
                 snap ? "@" : "", snap ? snap : "", r.spec.pool, r.spec.ns[0] ? "/" : "",
                 r.spec.ns);
    io_put(&r, rc);
    return rc;
}

/*
 * Usage figures cache. Opening an image costs 7-27 ms here (librbd reads
 * its header, object map and snapshot list), and pool.dataset.query /
 * zfs.snapshot.query compute every volume's figures under db_lock, so a
 * query of 20 volumes took 0.8 s and held every other API call that long.
 * An entry keeps a volume's figures until blockd changes the image or its
 * snapshots (usage_gen, bumped by every such call and by opening a volume
 * to serve it) or USAGE_TTL_S passes (changes blockd does not see: another
 * librbd client's writes or snapshots). `used` of a volume open to serve
 * is read from its serving handle each time (its object map is in
 * memory: no open); only the snapshots' part comes from the entry then,
 * since writes to the head do not change what the snapshots hold.
 */
#define USAGE_CACHE_MAX 4096
#define USAGE_TTL_S 30

struct usage_entry {
    int64_t id; /* dataset id; 0: free */
    uint64_t gen;
    time_t at;    /* CLOCK_MONOTONIC seconds */
    bool head_ok; /* used was computed with the volume closed */
    uint64_t used, snapused;
};

static pthread_mutex_t uc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct usage_entry uc[USAGE_CACHE_MAX];
static uint64_t uc_gen = 1; /* under uc_lock */
static bool uc_full_logged;

static void usage_changed(void)
{
    pthread_mutex_lock(&uc_lock);
    uc_gen++;
    pthread_mutex_unlock(&uc_lock);
}

static time_t mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

/* The cached figures of dataset id, if still valid: *snapused always,
 * *used when head is true (the volume is closed). */
static bool usage_lookup(int64_t id, bool head, uint64_t *used, uint64_t *snapused)
{
    bool hit = false;
    time_t now = mono_now();

    pthread_mutex_lock(&uc_lock);
    for (size_t i = 0; i < USAGE_CACHE_MAX; i++) {
        struct usage_entry *e = &uc[i];
        if (e->id != id)
            continue;
        if (e->gen == uc_gen && now - e->at < USAGE_TTL_S && (!head || e->head_ok)) {
            *snapused = e->snapused;
            if (head)
                *used = e->used;
            hit = true;
        }
        break;
    }
    pthread_mutex_unlock(&uc_lock);
    return hit;
}

static void usage_store(int64_t id, uint64_t gen, bool head_ok, uint64_t used, uint64_t snapused)
{
    struct usage_entry *slot = NULL, *oldest = NULL;
    bool log_full = false;

    pthread_mutex_lock(&uc_lock);
    for (size_t i = 0; i < USAGE_CACHE_MAX && !slot; i++) {
        struct usage_entry *e = &uc[i];
        if (e->id == id || e->id == 0)
            slot = e;
        else if (!oldest || e->at < oldest->at)
            oldest = e;
    }
    if (!slot) { /* full: the oldest entry goes (a recomputation later) */
        slot = oldest;
        log_full = !uc_full_logged;
        uc_full_logged = true;
    }
    *slot = (struct usage_entry){.id = id,
                                 .gen = gen,
                                 .at = mono_now(),
                                 .head_ok = head_ok,
                                 .used = used,
                                 .snapused = snapused};
    pthread_mutex_unlock(&uc_lock);
    if (log_full)
        log_info("datasets: the RBD usage cache holds %d volumes; older entries are recomputed",
                 USAGE_CACHE_MAX);
}

/* Snapshots hold fixed data: their figures stay cached until blockd
 * changes snapshots (usage_gen: a name may be given again) or USAGE_TTL_S
 * passes. Keyed by "dataset@snapshot"; USAGE_CACHE_MAX entries. */
struct snap_usage_entry {
    char key[NAME_DATASET_MAX + 1];
    uint64_t gen;
    time_t at;
    uint64_t used;
};

static struct snap_usage_entry suc[USAGE_CACHE_MAX]; /* under uc_lock */

static bool snap_usage_lookup(const char *key, uint64_t *used)
{
    bool hit = false;
    time_t now = mono_now();

    pthread_mutex_lock(&uc_lock);
    for (size_t i = 0; i < USAGE_CACHE_MAX; i++) {
        if (strcmp(suc[i].key, key) != 0)
            continue;
        if (suc[i].gen == uc_gen && now - suc[i].at < USAGE_TTL_S) {
            *used = suc[i].used;
            hit = true;
        }
        break;
    }
    pthread_mutex_unlock(&uc_lock);
    return hit;
}

static void snap_usage_store(const char *key, uint64_t gen, uint64_t used)
{
    struct snap_usage_entry *slot = NULL, *oldest = NULL;

    pthread_mutex_lock(&uc_lock);
    for (size_t i = 0; i < USAGE_CACHE_MAX && !slot; i++) {
        struct snap_usage_entry *e = &suc[i];
        if (!e->key[0] || strcmp(e->key, key) == 0)
            slot = e;
        else if (!oldest || e->at < oldest->at)
            oldest = e;
    }
    if (!slot)
        slot = oldest; /* full: the oldest goes (recomputed when asked) */
    snprintf(slot->key, sizeof(slot->key), "%s", key);
    slot->gen = gen;
    slot->at = mono_now();
    slot->used = used;
    pthread_mutex_unlock(&uc_lock);
}

static uint64_t rbdpool_snapshot_usage(const struct ds_pool *p, const char *name, const char *snap)
{
    char image[DS_NAME_BUF], key[NAME_DATASET_MAX + 1];
    struct rbd_io r;
    rbd_image_t img;
    uint64_t used = 0, gen;
    int rc;

    if ((size_t)snprintf(key, sizeof(key), "%s@%s", name, snap) >= sizeof(key))
        key[0] = '\0'; /* not cached */
    if (key[0] && snap_usage_lookup(key, &used))
        return used;
    if (ds_rbd_image_name(p, name, image, sizeof(image)) < 0 || io_get(p, &r) < 0)
        return 0;
    pthread_mutex_lock(&uc_lock);
    gen = uc_gen;
    pthread_mutex_unlock(&uc_lock);
    rc = rbd_image_open_mgmt(r.io, image, snap, true, &img);
    if (rc == 0) {
        rc = rbd_image_usage(img, &used, NULL);
        rbd_close(img);
    }
    if (rc == 0 && key[0])
        snap_usage_store(key, gen, used);
    io_put(&r, rc);
    return used;
}

static int sum_cb(uint64_t off, size_t len, int exists, void *arg)
{
    (void)off;
    if (exists)
        *(uint64_t *)arg += len;
    return 0;
}

/* rbdpool_volume_usage's walk of a volume's snapshots, oldest first:
 * what each one wrote over the one before it, added to *snapused. */
struct snap_diff {
    rbd_image_t img; /* its own read-only handle: rbd_snap_set moves it */
    char prev[NAME_DATASET_MAX + 1];
    uint64_t *snapused;
};

static int snap_diff_add(const struct ds_snap *s, void *arg)
{
    struct snap_diff *sd = arg;
    uint64_t size = 0;

    if (rbd_snap_set(sd->img, s->name) == 0 && rbd_get_size(sd->img, &size) == 0)
        rbd_diff_iterate2(sd->img, sd->prev[0] ? sd->prev : NULL, 0, size, 0, 1, sum_cb,
                          sd->snapused);
    snprintf(sd->prev, sizeof(sd->prev), "%s", s->name);
    return 0;
}

/* used: the head's own objects (fast-diff); snapused: what each snapshot
 * wrote over the one before it (what the snapshots keep alive, at most). */
static void rbdpool_volume_usage(const struct ds_pool *p, const char *name, int64_t id,
                                 struct volume *v, uint64_t *used, uint64_t *snapused)
{
    char image[DS_NAME_BUF];
    struct rbd_io r;
    struct img_handle h;
    rbd_image_t img;
    struct snap_diff sd = {.snapused = snapused};
    uint64_t gen;
    int rc;

    *used = *snapused = 0;
    if (ds_rbd_image_name(p, name, image, sizeof(image)) < 0)
        return;
    if (usage_lookup(id, !v, used, snapused) && !v)
        return;
    if (io_get(p, &r) < 0)
        return;
    pthread_mutex_lock(&uc_lock);
    gen = uc_gen; /* a change from here on makes what we store stale */
    pthread_mutex_unlock(&uc_lock);
    if (v && usage_lookup(id, false, used, snapused)) {
        /* only the head: from the serving handle, no open */
        rc = handle_get(&r, name, image, true, &h);
        if (rc == 0)
            rc = rbd_image_usage(h.img, used, NULL);
        handle_put(&h);
        io_put(&r, rc);
        return;
    }
    /* a read-only handle of our own: rbd_snap_set below moves its view */
    rc = rbd_image_open_mgmt(r.io, image, NULL, true, &img);
    if (rc < 0) {
        io_put(&r, rc);
        return;
    }
    sd.img = img;
    rc = rbd_image_usage(img, used, NULL);
    ds_snapshot_each_upto(id, INT64_MAX, snap_diff_add, &sd);
    rbd_close(img);
    if (rc == 0)
        usage_store(id, gen, !v, *used, *snapused);
    io_put(&r, rc);
}

static uint64_t rbdpool_available(const struct ds_pool *p)
{
    bool online;
    char why[8];
    uint64_t size, avail;

    ds_rbd_status(p->id, &online, why, sizeof(why), &size, &avail);
    return avail;
}

static int rbdpool_locator(const struct ds_pool *p, const char *name, const char *snap, char *buf,
                           size_t len)
{
    char image[DS_NAME_BUF];
    int n;

    if (strcmp(name, p->name) == 0) {
        n = snprintf(buf, len, "%s", p->path);
    } else {
        IMAGE_OF(p, name, image);
        n = snprintf(buf, len, "%s/%s%s%s", p->path, image, snap ? "@" : "", snap ? snap : "");
    }
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int rbdpool_snapshot_create(const struct ds_pool *p, const char *name, const char *snap,
                                   struct volume *v, ds_progress_fn fn, void *arg,
                                   struct store_snapshot_stats *stats)
{
    struct image_op op;
    struct timespec a, b;
    int rc;

    (void)v;
    /* librbd blocks the image's writes for the snapshot's instant and
     * flushes its cache first: every write acknowledged before is in. */
    clock_gettime(CLOCK_MONOTONIC, &a);
    rc = image_begin(p, name, &op);
    if (rc == 0)
        rc = image_end(&op, rbd_image_snap_create(op.h.img, snap));
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (rc == 0) {
        memset(stats, 0, sizeof(*stats));
        stats->reflinked = true; /* O(1): no data copied */
        stats->held_ns = (uint64_t)((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
        if (fn)
            fn(1, 1, arg);
    }
    return rc;
}

static int rbdpool_clone(const struct ds_pool *p, const char *name, const char *snap,
                         const struct ds_pool *dp, const char *dst, ds_progress_fn fn, void *arg,
                         bool *o1)
{
    char image[DS_NAME_BUF], dimage[DS_NAME_BUF];
    struct rbd_io r, dr;
    int rc;

    if (!ds_pool_is_rbd(dp)) {
        snprintf(ds_backend_why, sizeof(ds_backend_why),
                 "a clone of an RBD snapshot must be in an RBD pool (%.200s is a file pool)",
                 dp->name);
        return -EXDEV;
    }
    IMAGE_OF(p, name, image);
    IMAGE_OF(dp, dst, dimage);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    rc = io_get(dp, &dr);
    if (rc == 0) {
        rc = rbd_image_clone(r.io, image, snap, dr.io, dimage);
        io_put(&dr, rc);
    }
    io_put(&r, rc);
    if (rc == 0) {
        *o1 = true;
        if (fn)
            fn(1, 1, arg);
    }
    return rc;
}

static int rbdpool_rollback(const struct ds_pool *p, const char *name, const char *snap,
                            struct volume *v, ds_progress_fn fn, void *arg, bool *o1)
{
    struct image_op op;
    uint64_t size = 0;
    int rc;

    rc = image_begin(p, name, &op);
    if (rc == 0) {
        /* Hold the volume's writes (and land those in flight) while the
         * image's contents are replaced. */
        if (v)
            rc = volume_quiesce(v);
        if (rc == 0) {
            rc = rbd_image_snap_rollback(op.h.img, snap, fn, arg);
            if (rc == 0)
                rc = rbd_get_size(op.h.img, &size);
            if (v)
                volume_resume(v);
        }
        /* the snapshot's size is the volume's now: tell the open volume */
        if (rc == 0 && v && size != volume_size(v))
            rc = volume_resize(v, size);
        rc = image_end(&op, rc);
    }
    if (rc == 0)
        *o1 = true;
    return rc;
}

static int rbdpool_volume_rename(const struct ds_pool *p, const char *from, const char *to)
{
    char ifrom[DS_NAME_BUF], ito[DS_NAME_BUF];
    struct rbd_io r;
    int rc;

    IMAGE_OF(p, from, ifrom);
    IMAGE_OF(p, to, ito);
    rc = io_get(p, &r);
    if (rc < 0)
        return rc;
    /* An open image keeps serving: its handle does not go by the name. */
    rc = rbd_image_rename(r.io, ifrom, ito);
    usage_changed();
    io_put(&r, rc);
    return rc;
}

static int rbdpool_snapshot_rename(const struct ds_pool *p, const char *name, const char *from,
                                   const char *to)
{
    struct image_op op;
    int rc = image_begin(p, name, &op);

    return rc < 0 ? rc : image_end(&op, rbd_image_snap_rename(op.h.img, from, to));
}

static int rbdpool_flatten(const struct ds_pool *p, const char *name, ds_progress_fn fn, void *arg)
{
    struct image_op op;
    int rc = image_begin(p, name, &op);

    return rc < 0 ? rc : image_end(&op, rbd_image_flatten(op.h.img, fn, arg));
}

const struct ds_backend ds_backend_rbd = {
    .name = "rbd",
    .volume_create = rbdpool_volume_create,
    .volume_adopt = rbdpool_volume_adopt,
    .filesystem_create = rbdpool_filesystem_create,
    .dataset_remove = rbdpool_dataset_remove,
    .volume_remove_check = rbdpool_volume_remove_check,
    .handle_withdraw = rbdpool_handle_withdraw,
    .handle_restore = rbdpool_handle_restore,
    .snapshot_remove = rbdpool_snapshot_remove,
    .volume_resize = rbdpool_volume_resize,
    .open = rbdpool_open_bdev,
    .volume_usage = rbdpool_volume_usage,
    .snapshot_usage = rbdpool_snapshot_usage,
    .available = rbdpool_available,
    .locator = rbdpool_locator,
    .snapshot_create = rbdpool_snapshot_create,
    .clone = rbdpool_clone,
    .rollback = rbdpool_rollback,
    .volume_rename = rbdpool_volume_rename,
    .snapshot_rename = rbdpool_snapshot_rename,
    .flatten = rbdpool_flatten,
};
