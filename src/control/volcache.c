/*
 * The open-volume cache: one struct volume per dataset (or snapshot),
 * shared by every front-end. The cache holds one reference per entry until
 * the dataset is deleted or the daemon shuts down, so memory-backed volumes
 * keep their data while the daemon runs even when no front-end uses them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsrbd.h"
#include "control/events.h"
#include "core/log.h"

#define DS_MAX_IN_USE 16

struct cache_entry {
    char *name;
    uint32_t hash;
    struct volume *vol;
    struct bdev *bdev;         /* the volume's, borrowed; NULL if unknown */
    struct cache_entry *next;  /* every entry (flush, shutdown, drop) */
    struct cache_entry *hnext; /* same bucket */
};

/* Volumes stay open until their dataset goes, so the cache holds every
 * volume ever used: lookups by name go through a hash index (a list walk
 * was 5% of the control plane's CPU at 1,000 volumes). */
#define CACHE_BUCKETS 4096
static pthread_mutex_t cache_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct cache_entry *cache_head;
static struct cache_entry *cache_buckets[CACHE_BUCKETS];

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void bucket_remove_locked(struct cache_entry *e)
{
    for (struct cache_entry **pp = &cache_buckets[e->hash % CACHE_BUCKETS]; *pp;
         pp = &(*pp)->hnext) {
        if (*pp == e) {
            *pp = e->hnext;
            return;
        }
    }
}

static datasets_in_use_fn in_use_fns[DS_MAX_IN_USE];
static size_t in_use_count;
static datasets_clients_fn clients_fns[DS_MAX_IN_USE];
static size_t clients_count;

static struct cache_entry *cache_find_locked(const char *name)
{
    uint32_t h = name_hash(name);
    for (struct cache_entry *e = cache_buckets[h % CACHE_BUCKETS]; e; e = e->hnext)
        if (e->hash == h && strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

struct volume *ds_cache_peek_bdev(const char *name, struct bdev **b)
{
    struct cache_entry *e;
    struct volume *v = NULL;

    *b = NULL;
    pthread_mutex_lock(&cache_mutex);
    e = cache_find_locked(name);
    if (e) {
        v = e->vol;
        *b = e->bdev;
        volume_ref(v);
    }
    pthread_mutex_unlock(&cache_mutex);
    return v;
}

struct volume *ds_cache_peek(const char *name)
{
    struct bdev *b;

    return ds_cache_peek_bdev(name, &b);
}

struct volume *ds_cache_find_bdev(const struct bdev *b, char *name, size_t len)
{
    struct volume *v = NULL;

    pthread_mutex_lock(&cache_mutex);
    for (struct cache_entry *e = cache_head; e && !v; e = e->next) {
        if (e->bdev != b)
            continue;
        v = e->vol;
        volume_ref(v);
        snprintf(name, len, "%s", e->name);
    }
    pthread_mutex_unlock(&cache_mutex);
    return v;
}

static int cache_insert(const char *name, struct volume *v, struct bdev *b)
{
    struct cache_entry *e = calloc(1, sizeof(*e));

    if (!e)
        return -ENOMEM;
    e->name = strdup(name);
    if (!e->name) {
        free(e);
        return -ENOMEM;
    }
    e->hash = name_hash(name);
    e->vol = v;
    e->bdev = b;
    volume_ref(v);
    pthread_mutex_lock(&cache_mutex);
    e->next = cache_head;
    cache_head = e;
    e->hnext = cache_buckets[e->hash % CACHE_BUCKETS];
    cache_buckets[e->hash % CACHE_BUCKETS] = e;
    pthread_mutex_unlock(&cache_mutex);
    return 0;
}

static bool name_covers(const char *parent, const char *name, bool children)
{
    size_t n = strlen(parent);

    if (strncmp(parent, name, n) != 0)
        return false;
    if (name[n] == '\0')
        return true;
    return children && (name[n] == '/' || name[n] == '@');
}

void ds_cache_drop(const char *name, bool children)
{
    struct cache_entry **pp, *e, *dropped = NULL;

    pthread_mutex_lock(&cache_mutex);
    for (pp = &cache_head; (e = *pp);) {
        if (name_covers(name, e->name, children)) {
            *pp = e->next;
            bucket_remove_locked(e);
            e->next = dropped;
            dropped = e;
        } else {
            pp = &e->next;
        }
    }
    pthread_mutex_unlock(&cache_mutex);
    /* Unref outside the lock: the last reference closes the bdev. */
    while ((e = dropped)) {
        dropped = e->next;
        log_debug("datasets: closing cached volume %s", e->name);
        volume_unref(e->vol);
        free(e->name);
        free(e);
    }
}

bool datasets_volume_release_unused(const char *name)
{
    char why[128];
    bool cached;

    if (ds_in_use(name, why, sizeof(why)))
        return false;
    pthread_mutex_lock(&cache_mutex);
    cached = cache_find_locked(name) != NULL;
    pthread_mutex_unlock(&cache_mutex);
    if (!cached)
        return false;
    log_info("datasets: closing %s: no share uses it any more", name);
    ds_cache_drop(name, false);
    return true;
}

int ds_cache_rename(const char *old_name, const char *new_name, bool subtree)
{
    size_t olen = strlen(old_name), nlen = strlen(new_name);
    struct cache_entry *e;
    int moved = 0;

    pthread_mutex_lock(&cache_mutex);
    for (e = cache_head; e; e = e->next) {
        if (!name_covers(old_name, e->name, subtree))
            continue;
        size_t rest = strlen(e->name) - olen;
        char *n = malloc(nlen + rest + 1);
        if (!n) {
            /* Left under the old name: the next open of the new name
             * opens the (renamed) file again; both stay valid. */
            log_error("datasets: out of memory re-keying cached volume %s", e->name);
            continue;
        }
        memcpy(n, new_name, nlen);
        memcpy(n + nlen, e->name + olen, rest + 1);
        bucket_remove_locked(e);
        free(e->name);
        e->name = n;
        e->hash = name_hash(n);
        e->hnext = cache_buckets[e->hash % CACHE_BUCKETS];
        cache_buckets[e->hash % CACHE_BUCKETS] = e;
        moved++;
    }
    pthread_mutex_unlock(&cache_mutex);
    return moved;
}

int ds_cache_insert(const char *name, struct volume *v)
{
    return cache_insert(name, v, NULL);
}

void ds_cache_put_back(const char *name, struct volume *v, struct bdev *b)
{
    /* Under the database lock, as every insertion (datasets_volume_open). */
    db_lock();
    pthread_mutex_lock(&cache_mutex);
    bool cached = cache_find_locked(name) != NULL;
    pthread_mutex_unlock(&cache_mutex);
    if (!cached && cache_insert(name, v, b) < 0)
        log_warn("datasets: %s stays open but uncached (out of memory)", name);
    db_unlock();
}

static int volume_open_uncached(const char *name, struct volume **out, struct bdev **bout)
{
    char dsname[DS_NAME_BUF], poolname[DS_NAME_BUF];
    const char *at = strchr(name, '@');
    struct ds_pool pool;
    struct ds_row row;
    struct ds_snap snap;
    struct bdev *b = NULL;
    char why[256];
    int rc;

    if (name_check_dataset(name, true, why, sizeof(why)) < 0) {
        log_warn("datasets: open %s: %s", name, why);
        return -EINVAL;
    }
    snprintf(dsname, sizeof(dsname), "%.*s", (int)(at ? (size_t)(at - name) : strlen(name)), name);
    ds_pool_of(name, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &pool);
    if (rc < 0)
        return rc;
    rc = ds_dataset_get(dsname, &row);
    if (rc < 0)
        return rc;
    if (row.type != DS_VOLUME)
        return -EISDIR;
    if (at) {
        rc = ds_snapshot_get(dsname, at + 1, &snap);
        if (rc < 0)
            return rc;
        rc = ds_backend_of(&pool)->open(&pool, dsname, at + 1, true, &b);
    } else if (row.memory) {
        rc = bdev_memory_open(row.volsize, row.latency_us, &b);
    } else {
        rc = ds_backend_of(&pool)->open(&pool, dsname, NULL, false, &b);
        if (rc == 0 && b->size != row.volsize)
            log_warn("datasets: %s: %s is %llu bytes but volsize is %llu", name,
                     ds_backend_of(&pool)->name, (unsigned long long)b->size,
                     (unsigned long long)row.volsize);
    }
    if (rc < 0) {
        log_error("datasets: cannot open %s: %s", name, strerror(-rc));
        return rc;
    }
    rc = volume_new(name, b, row.volblocksize, row.sync, at ? true : row.readonly, out);
    if (rc < 0) {
        log_error("datasets: volume %s: %s", name, strerror(-rc));
        bdev_close(b);
    }
    *bout = rc == 0 ? b : NULL;
    return rc;
}

int datasets_volume_open(const char *name, struct volume **out)
{
    struct volume *v;
    struct bdev *b;
    int rc;

    *out = ds_cache_peek(name);
    if (*out)
        return 0;
    /* Slow path under the database lock: every insertion happens with it
     * held, so a second look at the cache cannot race another opener. */
    db_lock();
    *out = ds_cache_peek(name);
    if (*out) {
        db_unlock();
        return 0;
    }
    rc = volume_open_uncached(name, &v, &b);
    if (rc == 0) {
        rc = cache_insert(name, v, b);
        if (rc == 0)
            *out = v; /* the creation reference goes to the caller */
        else
            volume_unref(v);
    }
    db_unlock();
    if (rc == 0)
        log_debug("datasets: opened %s", name);
    return rc;
}

int datasets_volume_offline(const char *name, struct volume **out)
{
    char dsname[DS_NAME_BUF], poolname[DS_NAME_BUF];
    const char *at = strchr(name, '@');
    struct ds_pool pool;
    struct ds_row row = {0};
    struct ds_snap snap = {0};
    struct bdev *b;
    uint64_t size;
    int rc;

    *out = NULL;
    snprintf(dsname, sizeof(dsname), "%.*s", (int)(at ? (size_t)(at - name) : strlen(name)), name);
    ds_pool_of(name, poolname, sizeof(poolname));
    db_lock();
    rc = ds_pool_get(poolname, &pool);
    if (rc == 0)
        rc = ds_dataset_get(dsname, &row);
    if (rc == 0 && row.type != DS_VOLUME)
        rc = -EISDIR;
    size = row.volsize;
    if (rc == 0 && at && (rc = ds_snapshot_get(dsname, at + 1, &snap)) == 0)
        size = snap.volsize;
    db_unlock();
    if (rc < 0)
        return rc;
    if (!ds_pool_is_rbd(&pool))
        return -EINVAL; /* a file pool never waits for its storage */
    rc = bdev_offline_open(size, &b);
    if (rc < 0)
        return rc;
    rc = volume_new(name, b, row.volblocksize, row.sync, at ? true : row.readonly, out);
    if (rc < 0)
        bdev_close(b);
    return rc;
}

/* Abort when a table of hooks (count entries) is full: the tables are
 * sized for the modules that register. */
static void table_room(size_t count, const char *what)
{
    if (count == DS_MAX_IN_USE) {
        log_error("datasets: too many %s registered", what);
        abort();
    }
}

void datasets_register_in_use(datasets_in_use_fn fn)
{
    table_room(in_use_count, "in-use checks");
    for (size_t i = 0; i < in_use_count; i++)
        if (in_use_fns[i] == fn)
            return;
    in_use_fns[in_use_count++] = fn;
}

bool ds_in_use(const char *name, char *why, size_t len)
{
    for (size_t i = 0; i < in_use_count; i++) {
        if (in_use_fns[i](name, why, len))
            return true;
    }
    return false;
}

static struct {
    const char *proto;
    datasets_export_fn fn;
} export_fns[DS_MAX_IN_USE];
static size_t export_count;

void datasets_register_reserving_export(const char *proto, datasets_export_fn fn)
{
    table_room(export_count, "reserving exports");
    for (size_t i = 0; i < export_count; i++)
        if (export_fns[i].fn == fn)
            return;
    export_fns[export_count].proto = proto;
    export_fns[export_count++].fn = fn;
}

bool datasets_reserving_export(const char *proto, const char *device, char *why, size_t len)
{
    for (size_t i = 0; i < export_count; i++)
        if (strcmp(export_fns[i].proto, proto) != 0 && export_fns[i].fn(device, why, len))
            return true;
    return false;
}

void datasets_register_clients(datasets_clients_fn fn)
{
    table_room(clients_count, "client checks");
    for (size_t i = 0; i < clients_count; i++)
        if (clients_fns[i] == fn)
            return;
    clients_fns[clients_count++] = fn;
}

unsigned ds_clients(const char *name, char *why, size_t len)
{
    unsigned total = 0;
    size_t used = 0;

    if (len)
        why[0] = '\0';
    for (size_t i = 0; i < clients_count; i++) {
        char one[256] = "";
        unsigned n = clients_fns[i](name, one, sizeof(one));
        if (!n)
            continue;
        total += n;
        if (used < len) {
            int w = snprintf(why + used, len - used, "%s%s", used ? "; " : "", one);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    return total;
}

/* The rename's and the dataset events, on the one bus (events.h). */
void ds_rename_event_lock(void)
{
    events_emit(&(struct event){.type = EV_RENAME_LOCK});
}

int ds_rename_event_update(const char *old_name, const char *new_name, bool subtree)
{
    return events_emit(&(struct event){
        .type = EV_RENAME_UPDATE,
        .rename = {.old_name = old_name, .new_name = new_name, .subtree = subtree}});
}

void ds_rename_event_done(bool committed)
{
    events_emit(&(struct event){.type = EV_RENAME_DONE, .committed = committed});
}

void ds_notify(enum datasets_event ev, const char *name, struct volume *v)
{
    events_emit(&(struct event){.type = EV_DATASET, .dataset = {.what = ev, .name = name, .v = v}});
}

/* References to every cached volume, so we can work on them unlocked. */
static size_t cache_snapshot(struct volume ***out)
{
    size_t n = 0, i = 0;
    struct cache_entry *e;

    pthread_mutex_lock(&cache_mutex);
    for (e = cache_head; e; e = e->next)
        n++;
    *out = n ? calloc(n, sizeof(**out)) : NULL;
    if (*out) {
        for (e = cache_head; e; e = e->next) {
            volume_ref(e->vol);
            (*out)[i++] = e->vol;
        }
    }
    pthread_mutex_unlock(&cache_mutex);
    return i;
}

void datasets_flush_all(void)
{
    struct volume **vols;
    size_t n = cache_snapshot(&vols);
    int rc;

    for (size_t i = 0; i < n; i++) {
        /* Read-only volumes too: they may have been writable earlier. */
        rc = volume_flush_wait(vols[i]);
        if (rc < 0)
            log_error("datasets: flush %s: %s", volume_name(vols[i]), strerror(-rc));
        volume_unref(vols[i]);
    }
    free(vols);
    if (n)
        log_info("datasets: flushed %zu open volume(s)", n);
}

void datasets_shutdown(void)
{
    struct cache_entry *e;

    ds_rbd_follow_stop(); /* it may hold a volume: before they go */

    pthread_mutex_lock(&cache_mutex);
    e = cache_head;
    cache_head = NULL;
    memset(cache_buckets, 0, sizeof(cache_buckets));
    pthread_mutex_unlock(&cache_mutex);
    while (e) {
        struct cache_entry *next = e->next;
        volume_unref(e->vol);
        free(e->name);
        free(e);
        e = next;
    }
    ds_rbd_stop(); /* after the volumes: they held cluster references too */
}
