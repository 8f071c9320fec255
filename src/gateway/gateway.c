/*
 * Gateway group membership (gateway.h): configuration, the membership
 * object in RADOS, heartbeats, liveness and fencing.
 */
#include "gateway/gateway.h"

#include <errno.h>
#include <stdatomic.h>
#include <jansson.h>
#include <limits.h>
#include <rados/librados.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "gateway/gateway_internal.h"
#include "store/bdev_rbd.h"
#include "store/rbd_cluster.h"

/* How long a fenced client stays blocklisted: far longer than any
 * zombie can live (a restarted daemon has a new address anyway). */
#define GW_BLOCKLIST_S 3600
/* Fenced addresses remembered (their locks are broken on sight). */
#define GW_FENCED_MAX 64
/* A join or leave waits this long for the other members' acks. */
#define GW_NOTIFY_MS 1000
/* A fenced member's rejoin attempts: 1 s after the first failure,
 * doubling up to this. */
#define GW_REJOIN_BACKOFF_MAX_MS 30000
/* Retired connections kept for the configuration store's old I/O
 * context until it moved (gw_config_reconnected). */
#define GW_RETIRED_MAX 8

static struct {
    char group[GATEWAY_NAME_MAX + 1];
    char name[GATEWAY_NAME_MAX + 1];
    unsigned id;
    unsigned timeout_s;
    char conf[PATH_MAX];
    char ceph_id[64];
    char pool[128];
    bool any; /* some --gateway-* flag given */
} cfg = {.timeout_s = GATEWAY_TIMEOUT_DEFAULT_S, .pool = "rbd"};

struct member_rec {
    bool present;
    struct gateway_member m;
    uint64_t changed_ms; /* our clock when its counter last changed */
};

pthread_mutex_t gw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gw_cond = PTHREAD_COND_INITIALIZER;
static struct member_rec recs[GATEWAY_ID_MAX + 1]; /* by id; gw_mu */
static char fenced[GW_FENCED_MAX][128];            /* ring; gw_mu */
static unsigned fenced_next;
static bool kick, stop_req; /* gw_mu */

static bool enabled;
static pthread_t thr;
static struct rbd_cluster *cluster;
static rados_ioctx_t io;
static uint64_t watch_cookie;
static bool watching;
/* A watch handle exists (watch_cookie), healthy or not: librados keeps it
 * until rados_unwatch2, also after its error callback (membership thread). */
static bool have_watch;
static char obj[160];
static char my_key[32];
static char my_addr[128];
static char my_portals[128];
static char my_nvme[GATEWAY_NVME_PORTS_MAX]; /* gw_mu: gateway_set_nvme_ports */
static uint64_t my_counter;
static _Atomic bool my_blocklisted;
/* When this member's heartbeat last reached the cluster (gw_now_ms; 0:
 * not yet): see gateway_fenced. */
static _Atomic uint64_t my_heartbeat_ok_ms;

/* Rejoining after a fencing (membership thread only, but the hook). */
enum rejoin_phase { REJOIN_CONNECT, REJOIN_REOPEN, REJOIN_REGISTER };
static enum rejoin_phase rejoin_phase;
static unsigned rejoin_attempt;
static uint64_t rejoin_next_ms, fenced_ms;
static char fenced_addr[128];       /* the client address the group blocklisted */
static bool rejoin_given_up;        /* another live member took our id meanwhile */
static _Atomic bool blocklist_seen; /* some connection of ours was refused */
static bool reopen_pending;         /* some images are still on a retired client */
static uint64_t reopen_next_ms, reopen_delay_ms;
static struct rbd_cluster *retired[GW_RETIRED_MAX]; /* gw_mu; references */
/* The configuration store's (gateway.h): set once at start-up, before the
 * membership thread runs, so read without a lock. */
static bool (*reconnect_hook)(void);

uint64_t gw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void gateway_set_reconnect_hook(bool (*fn)(void))
{
    reconnect_hook = fn;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > GATEWAY_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return false;
    return true;
}

static int parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -EINVAL;
    *out = (unsigned)v;
    return 0;
}

int gateway_configure_group(const char *group)
{
    if (!name_ok(group))
        return -EINVAL;
    snprintf(cfg.group, sizeof(cfg.group), "%s", group);
    cfg.any = true;
    return 0;
}

int gateway_configure_name(const char *name)
{
    if (!name_ok(name))
        return -EINVAL;
    snprintf(cfg.name, sizeof(cfg.name), "%s", name);
    cfg.any = true;
    return 0;
}

int gateway_configure_id(const char *id)
{
    cfg.any = true;
    return parse_uint(id, 1, GATEWAY_ID_MAX, &cfg.id);
}

int gateway_configure_timeout(const char *seconds)
{
    cfg.any = true;
    return parse_uint(seconds, 2, 60, &cfg.timeout_s);
}

int gateway_configure_ceph(const char *conf, const char *id, const char *pool)
{
    cfg.any = true;
    if (conf && snprintf(cfg.conf, sizeof(cfg.conf), "%s", conf) >= (int)sizeof(cfg.conf))
        return -EINVAL;
    if (id && snprintf(cfg.ceph_id, sizeof(cfg.ceph_id), "%s", id) >= (int)sizeof(cfg.ceph_id))
        return -EINVAL;
    if (pool &&
        (!pool[0] || snprintf(cfg.pool, sizeof(cfg.pool), "%s", pool) >= (int)sizeof(cfg.pool)))
        return -EINVAL;
    /* RBD pools created with this conf share the group's client: fencing
     * this member then reaches their I/O too (rbd_cluster.h). */
    rbd_cluster_set_group(cfg.conf, cfg.ceph_id);
    return 0;
}

bool gateway_enabled(void)
{
    return enabled;
}

/* The others fence a member whose heartbeat they have not seen change for
 * the timeout; one whose own heartbeat has not reached the cluster for as
 * long (frozen, cut off, or its membership thread stuck) may be fenced
 * already without knowing: it answers as fenced until its next heartbeat
 * tells which (a lease, as Ceph's OSDs and monitors keep). Else a member
 * woken from SIGSTOP answers TEST UNIT READY GOOD until its first cluster
 * call fails. */
bool gateway_fenced(void)
{
    if (my_blocklisted)
        return true;
    uint64_t ok = atomic_load(&my_heartbeat_ok_ms);
    return enabled && ok && gw_now_ms() - ok > (uint64_t)cfg.timeout_s * 1000u;
}

unsigned gateway_id(void)
{
    return enabled ? cfg.id : 0;
}

/* ---- the membership object ---- */

void gateway_set_nvme_ports(const char *ports)
{
    pthread_mutex_lock(&gw_mu);
    snprintf(my_nvme, sizeof(my_nvme), "%s", ports ? ports : "");
    pthread_mutex_unlock(&gw_mu);
}

static char *record_json(void)
{
    pthread_mutex_lock(&gw_mu);
    json_t *o = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:s}", "name", cfg.name, "id",
                          (int)cfg.id, "portals", my_portals, "addr", my_addr, "heartbeat",
                          (json_int_t)my_counter, "time", (json_int_t)time(NULL), "nvme", my_nvme);
    pthread_mutex_unlock(&gw_mu);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static int write_record(void)
{
    my_counter++;
    char *val = record_json();
    if (!val)
        return -ENOMEM;
    const char *keys[1] = {my_key};
    const char *vals[1] = {val};
    size_t klen[1] = {strlen(my_key)}, vlen[1] = {strlen(val)};
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_omap_set2(op, keys, vals, klen, vlen, 1);
    int rc = rados_write_op_operate(op, io, obj, NULL, 0);
    rados_release_write_op(op);
    free(val);
    return rc;
}

/* This member's record written: its lease renewed (gateway_fenced). */
static int heartbeat(void)
{
    int rc = write_record();
    if (rc == 0)
        atomic_store(&my_heartbeat_ok_ms, gw_now_ms());
    return rc;
}

static int remove_record(void)
{
    const char *keys[1] = {my_key};
    size_t klen[1] = {strlen(my_key)};
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_omap_rm_keys2(op, keys, klen, 1);
    int rc = rados_write_op_operate(op, io, obj, NULL, 0);
    rados_release_write_op(op);
    return rc;
}

/* Tell the watchers to reread now (a join or a leave). */
static void notify_members(void)
{
    char *reply = NULL;
    size_t reply_len = 0;
    int rc = rados_notify2(io, obj, "", 0, GW_NOTIFY_MS, &reply, &reply_len);
    if (reply)
        rados_buffer_free(reply);
    /* -ETIMEDOUT: a dead member's watch is still registered; it will
     * expire. The others got the notification. */
    if (rc < 0 && rc != -ETIMEDOUT)
        log_warn("gateway %s: notify on %s: %s", cfg.group, obj, strerror(-rc));
}

/* The records in the object, parsed: out[id] for each present id. */
static int read_records(struct gateway_member *out, bool *present)
{
    rados_read_op_t op = rados_create_read_op();
    rados_omap_iter_t it = NULL;
    unsigned char more = 0;
    int prval = 0;
    memset(present, 0, sizeof(bool) * (GATEWAY_ID_MAX + 1));
    rados_read_op_omap_get_vals2(op, "", "member.", GATEWAY_ID_MAX * 2, &it, &more, &prval);
    int rc = rados_read_op_operate(op, io, obj, 0);
    rados_release_read_op(op);
    /* librados hands out the iterator when the op is set up, so it is
     * ours to end on every path, a failed read included. */
    if (rc < 0 || prval < 0) {
        if (it)
            rados_omap_get_end(it);
        if (rc == -ENOENT)
            return 0; /* no member yet */
        return rc < 0 ? rc : prval;
    }
    char *k, *v;
    size_t kl, vl;
    while (rados_omap_get_next2(it, &k, &v, &kl, &vl) == 0 && k) {
        json_t *o = json_loadb(v, vl, 0, NULL);
        json_int_t id = json_integer_value(json_object_get(o, "id"));
        if (!o || id < 1 || id > GATEWAY_ID_MAX) {
            log_warn("gateway %s: ignoring a bad record %.*s in %s", cfg.group, (int)kl, k, obj);
            json_decref(o);
            continue;
        }
        struct gateway_member *m = &out[id];
        memset(m, 0, sizeof(*m));
        m->id = (unsigned)id;
        snprintf(m->name, sizeof(m->name), "%s",
                 json_string_value(json_object_get(o, "name")) ?: "");
        snprintf(m->portals, sizeof(m->portals), "%s",
                 json_string_value(json_object_get(o, "portals")) ?: "");
        snprintf(m->addr, sizeof(m->addr), "%s",
                 json_string_value(json_object_get(o, "addr")) ?: "");
        snprintf(m->nvme_ports, sizeof(m->nvme_ports), "%s",
                 json_string_value(json_object_get(o, "nvme")) ?: "");
        m->heartbeat = (uint64_t)json_integer_value(json_object_get(o, "heartbeat"));
        m->last_seen = (int64_t)json_integer_value(json_object_get(o, "time"));
        present[id] = true;
        json_decref(o);
    }
    rados_omap_get_end(it);
    return 0;
}

static void fence_remember_locked(const char *addr)
{
    if (!addr[0])
        return;
    for (unsigned i = 0; i < GW_FENCED_MAX; i++)
        if (strcmp(fenced[i], addr) == 0)
            return;
    snprintf(fenced[fenced_next], sizeof(fenced[0]), "%s", addr);
    fenced_next = (fenced_next + 1) % GW_FENCED_MAX;
}

/* Blocklist a dead member's client (id's, addr): from now on the OSDs
 * refuse it, so a member that was only cut off can never write again.
 * Only then is it marked fenced, and logged as such under gw_mu in the
 * same step: its exclusive locks are broken by the LU pass (gw_lu_pass,
 * lu_check on any thread) only once the blocklist holds, and
 * gateway.query never shows it fenced before the log line. A failed
 * blocklist leaves it unfenced: the next round tries again. */
static void fence(unsigned id, const char *what, const char *addr)
{
    char a[128];
    snprintf(a, sizeof(a), "%s", addr);
    int rc = rados_blocklist_add(rbd_cluster_rados(cluster), a, GW_BLOCKLIST_S);
    if (rc < 0) {
        log_error("gateway %s: cannot blocklist %s (%s): %s; its locks are not broken", cfg.group,
                  what, addr, strerror(-rc));
        return;
    }
    pthread_mutex_lock(&gw_mu);
    struct member_rec *r = &recs[id];
    if (r->present && strcmp(r->m.addr, addr) == 0 && r->m.state == GATEWAY_OFFLINE)
        r->m.fenced = true;
    fence_remember_locked(addr);
    log_warn("gateway %s: fenced %s: client %s blocklisted for %u s", cfg.group, what, addr,
             GW_BLOCKLIST_S);
    pthread_mutex_unlock(&gw_mu);
}

/* Merge what was read into the table; fence members that went OFFLINE
 * (only while our own heartbeat works: a member cut off from the cluster
 * must not fence the others). */
static void merge(const struct gateway_member *rd, const bool *present, bool self_ok)
{
    uint64_t now = gw_now_ms();
    struct {
        unsigned id;
        char what[128];
        char addr[128];
    } to_fence[GATEWAY_ID_MAX + 1];
    size_t nf = 0;

    pthread_mutex_lock(&gw_mu);
    for (unsigned id = 1; id <= GATEWAY_ID_MAX; id++) {
        struct member_rec *r = &recs[id];
        if (!present[id]) {
            if (r->present && id != cfg.id)
                log_info("gateway %s: member %s (id %u) left", cfg.group, r->m.name, id);
            if (id != cfg.id)
                r->present = false;
            continue;
        }
        const struct gateway_member *m = &rd[id];
        if (!r->present || strcmp(r->m.addr, m->addr) != 0) {
            if (r->present && r->m.addr[0] && strcmp(r->m.addr, m->addr) != 0) {
                /* A restart: the old instance is dead (the new one fenced
                 * it when it took the id over); its locks can be broken. */
                fence_remember_locked(r->m.addr);
            }
            if (id != cfg.id)
                log_info("gateway %s: member %s (id %u) joined, portals %s, client %s", cfg.group,
                         m->name, id, m->portals, m->addr);
            r->present = true;
            r->m = *m;
            r->m.state = GATEWAY_ONLINE;
            r->changed_ms = now;
            continue;
        }
        if (m->heartbeat != r->m.heartbeat)
            r->changed_ms = now;
        enum gateway_member_state st = r->m.state;
        bool fenced_before = r->m.fenced;
        r->m = *m;
        r->m.fenced = fenced_before;
        if (id == cfg.id)
            r->m.state = GATEWAY_ONLINE;
        else if (now - r->changed_ms >= (uint64_t)cfg.timeout_s * 1000u)
            r->m.state = GATEWAY_OFFLINE;
        else
            r->m.state = GATEWAY_ONLINE;
        if (st == GATEWAY_OFFLINE && r->m.state == GATEWAY_ONLINE) {
            log_info("gateway %s: member %s (id %u) is back", cfg.group, m->name, id);
            r->m.fenced = false;
        }
        if (r->m.state == GATEWAY_OFFLINE && st == GATEWAY_ONLINE)
            log_warn("gateway %s: member %s (id %u) is OFFLINE: no heartbeat for %u s", cfg.group,
                     m->name, id, cfg.timeout_s);
        if (r->m.state == GATEWAY_OFFLINE && !r->m.fenced && self_ok) {
            /* marked fenced by fence(), once blocklisted */
            to_fence[nf].id = id;
            snprintf(to_fence[nf].what, sizeof(to_fence[nf].what), "member %s (id %u)", m->name,
                     id);
            snprintf(to_fence[nf].addr, sizeof(to_fence[nf].addr), "%s", m->addr);
            nf++;
        }
    }
    pthread_mutex_unlock(&gw_mu);
    for (size_t i = 0; i < nf; i++)
        fence(to_fence[i].id, to_fence[i].what, to_fence[i].addr);
}

static void watch_cb(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier_id,
                     void *data, size_t data_len)
{
    (void)arg, (void)notifier_id, (void)data, (void)data_len;
    rados_notify_ack(io, obj, notify_id, handle, NULL, 0);
    pthread_mutex_lock(&gw_mu);
    kick = true;
    pthread_cond_signal(&gw_cond);
    pthread_mutex_unlock(&gw_mu);
}

static void watch_err_cb(void *arg, uint64_t cookie, int err)
{
    (void)arg, (void)cookie;
    log_warn("gateway %s: the watch on %s failed (%s): watching again", cfg.group, obj,
             strerror(-err));
    pthread_mutex_lock(&gw_mu);
    watching = false;
    kick = true;
    pthread_cond_signal(&gw_cond);
    pthread_mutex_unlock(&gw_mu);
}

static void watch_start(void)
{
    if (have_watch) { /* a failed watch too: its handle is ours to drop */
        rados_unwatch2(io, watch_cookie);
        have_watch = false;
    }
    watching = false;
    /* Timeout 0: the OSDs' default. The watch only makes rereads prompt;
     * liveness is the heartbeat's, so its own timeout need not be short. */
    int rc = rados_watch3(io, obj, &watch_cookie, watch_cb, watch_err_cb, 0, NULL);
    if (rc < 0)
        log_warn("gateway %s: cannot watch %s: %s (membership changes are seen within %u ms)",
                 cfg.group, obj, strerror(-rc), GATEWAY_HEARTBEAT_MS);
    else
        watching = have_watch = true;
}

static int check_id_free(void);
static void reopen_later(unsigned failed);

/* ---- fenced: rejoining with a new client (docs/ha.md) ---- */

/* Any call on one of this daemon's connections was refused as
 * blocklisted (a librbd completion, a management call): wake the
 * membership thread. Any thread, non-blocking. */
static void blocklist_hook(struct rbd_cluster *c)
{
    (void)c;
    atomic_store(&blocklist_seen, true);
    pthread_mutex_lock(&gw_mu);
    kick = true;
    pthread_cond_signal(&gw_cond);
    pthread_mutex_unlock(&gw_mu);
}

/* The cluster refuses this member's client: stop using it at once (every
 * image fails new I/O with -ESHUTDOWN: SCSI 02/04/0C, NBD ESHUTDOWN; the
 * port state is unavailable) and start rejoining. */
static void become_fenced(const char *how)
{
    if (my_blocklisted)
        return;
    my_blocklisted = true;
    fenced_ms = gw_now_ms();
    snprintf(fenced_addr, sizeof(fenced_addr), "%s", my_addr);
    rejoin_phase = REJOIN_CONNECT;
    rejoin_attempt = 0;
    rejoin_next_ms = fenced_ms;
    rejoin_given_up = false;
    rbd_cluster_note_error(cluster, -ESHUTDOWN); /* it is retired below */
    unsigned n = bdev_rbd_fence(cluster);
    log_error("gateway %s: member %s (id %u, client %s) was fenced by the group (%s): the "
              "cluster refuses this client; %u image(s) now fail I/O with NOT READY, TARGET "
              "PORT IN UNAVAILABLE STATE (02/04/0C); rejoining with a new client",
              cfg.group, cfg.name, cfg.id, fenced_addr, how, n);
    pthread_mutex_lock(&gw_mu);
    watching = false;
    pthread_mutex_unlock(&gw_mu);
    if (have_watch)
        rados_unwatch2(io, watch_cookie); /* refused too; drops it here */
    have_watch = false;
}

/* An attempt failed: the next one after a backoff, logged once. */
static void rejoin_later(const char *what, int rc)
{
    uint64_t delay = 1000;
    for (unsigned i = 1; i < rejoin_attempt && delay < GW_REJOIN_BACKOFF_MAX_MS; i++)
        delay *= 2;
    if (delay > GW_REJOIN_BACKOFF_MAX_MS)
        delay = GW_REJOIN_BACKOFF_MAX_MS;
    rejoin_next_ms = gw_now_ms() + delay;
    log_warn("gateway %s: member %s: rejoin attempt %u: %s: %s; next attempt in %llu s", cfg.group,
             cfg.name, rejoin_attempt, what, strerror(-rc), (unsigned long long)(delay / 1000));
}

/* Keep old (a retired connection) until the configuration store moved
 * off it (gw_config_reconnected) or the member stops. */
static void keep_retired(struct rbd_cluster *old)
{
    struct rbd_cluster *drop = NULL;
    pthread_mutex_lock(&gw_mu);
    unsigned i = 0;
    while (i < GW_RETIRED_MAX && retired[i])
        i++;
    if (i == GW_RETIRED_MAX) { /* the store has not moved for 8 rejoins: not running */
        drop = retired[0];
        memmove(retired, retired + 1, sizeof(retired[0]) * (GW_RETIRED_MAX - 1));
        i = GW_RETIRED_MAX - 1;
    }
    retired[i] = old;
    pthread_mutex_unlock(&gw_mu);
    if (drop)
        rbd_cluster_put(drop);
}

void gw_config_reconnected(void)
{
    struct rbd_cluster *drop[GW_RETIRED_MAX];
    pthread_mutex_lock(&gw_mu);
    memcpy(drop, retired, sizeof(drop));
    memset(retired, 0, sizeof(retired));
    pthread_mutex_unlock(&gw_mu);
    for (unsigned i = 0; i < GW_RETIRED_MAX; i++)
        if (drop[i])
            rbd_cluster_put(drop[i]);
}

/* Step 2: a new client (a new address: not blocklisted) and the
 * membership object's I/O context on it. */
static int rejoin_connect(void)
{
    /* A refusal seen after this is another connection's (round_once). */
    atomic_store(&blocklist_seen, false);
    rbd_cluster_retire_blocklisted();
    rbd_cluster_retire(cluster);
    struct rbd_cluster *nc;
    rados_ioctx_t nio;
    int rc = rbd_cluster_get_like(cluster, 10, &nc);
    if (rc < 0) {
        rejoin_later("cannot connect a new client", rc);
        return rc;
    }
    rc = rbd_cluster_ioctx(nc, cfg.pool, NULL, &nio);
    if (rc < 0) {
        rbd_cluster_put(nc);
        rejoin_later("no I/O context on the new client", rc);
        return rc;
    }
    /* No watch callback of the old client runs after this (it uses io). */
    rados_watch_flush(rbd_cluster_rados(cluster));
    rados_ioctx_destroy(io);
    io = nio;
    pthread_mutex_lock(&gw_mu);
    struct rbd_cluster *old = cluster;
    cluster = nc;
    pthread_mutex_unlock(&gw_mu);
    snprintf(my_addr, sizeof(my_addr), "%s", rbd_cluster_addr(nc));
    bool (*hook)(void) = reconnect_hook;
    bool store = hook && hook();
    log_info("gateway %s: member %s: rejoining: connected a new client %s (the fenced one was "
             "%s)%s",
             cfg.group, cfg.name, my_addr, fenced_addr,
             store ? "; the configuration store reloads on it" : "");
    if (store)
        keep_retired(old);
    else
        rbd_cluster_put(old);
    return 0;
}

/* Step 3: the images of every LU and export, under the volumes the
 * front-ends hold, then their shared reservations. */
static void rejoin_reopen(void)
{
    unsigned failed = 0;
    unsigned ok = bdev_rbd_reopen_retired(&failed);
    log_info("gateway %s: member %s: rejoining: reopened %u image(s) on client %s", cfg.group,
             cfg.name, ok, my_addr);
    if (ok)
        gw_lu_reconnected();
    /* One image that cannot be opened (removed meanwhile) must not keep
     * the member out: its LU keeps failing with 02/04/0C, the others
     * serve, and it is retried in the background. */
    if (failed)
        reopen_later(failed);
}

/* Step 4: our id must still be ours (a restarted instance elsewhere may
 * have taken it over while we were away), then register the new
 * address. */
static int rejoin_register(void)
{
    struct gateway_member rd[GATEWAY_ID_MAX + 1];
    bool present[GATEWAY_ID_MAX + 1];
    int rc = read_records(rd, present);
    if (rc < 0) {
        rejoin_later("cannot read the membership", rc);
        return rc;
    }
    if (present[cfg.id] && strcmp(rd[cfg.id].addr, fenced_addr) != 0 &&
        strcmp(rd[cfg.id].addr, my_addr) != 0) {
        rc = check_id_free();
        if (rc == -EADDRINUSE) {
            log_error("gateway %s: member %s stays fenced: its id %u was taken over meanwhile",
                      cfg.group, cfg.name, cfg.id);
            rejoin_given_up = true;
            return rc;
        }
        if (rc < 0) {
            rejoin_later("cannot read the membership", rc);
            return rc;
        }
    }
    rc = heartbeat();
    if (rc < 0) {
        rejoin_later("cannot register the new client", rc);
        return rc;
    }
    pthread_mutex_lock(&gw_mu);
    snprintf(recs[cfg.id].m.addr, sizeof(recs[cfg.id].m.addr), "%s", my_addr);
    recs[cfg.id].m.heartbeat = my_counter;
    recs[cfg.id].changed_ms = gw_now_ms();
    pthread_mutex_unlock(&gw_mu);
    watch_start();
    notify_members(); /* the others see the new address at once */
    /* Logged before the port opens: a command that succeeds here comes
     * after this line. */
    log_info("gateway %s: member %s (id %u) rejoined the group as client %s, %llu ms after it "
             "was fenced (attempt %u)",
             cfg.group, cfg.name, cfg.id, my_addr, (unsigned long long)(gw_now_ms() - fenced_ms),
             rejoin_attempt);
    my_blocklisted = false;
    return 0;
}

/* Images that could not be reopened on the new client: again after a
 * backoff (1 s doubling up to GW_REJOIN_BACKOFF_MAX_MS), logged once per
 * attempt. */
static void reopen_later(unsigned failed)
{
    reopen_delay_ms = reopen_pending ? reopen_delay_ms * 2 : 1000;
    if (reopen_delay_ms > GW_REJOIN_BACKOFF_MAX_MS)
        reopen_delay_ms = GW_REJOIN_BACKOFF_MAX_MS;
    reopen_pending = true;
    reopen_next_ms = gw_now_ms() + reopen_delay_ms;
    log_warn("gateway %s: member %s: %u image(s) could not be reopened on the new client: "
             "their LUs and exports fail with 02/04/0C / ESHUTDOWN; next attempt in %llu s",
             cfg.group, cfg.name, failed, (unsigned long long)(reopen_delay_ms / 1000));
}

/* Another connection than the membership's was refused (an RBD pool
 * with other Ceph settings than --gateway-ceph-conf, blocklisted by an
 * operator): this member is not fenced, but the images on it are
 * replaced the same way. */
static void recover_images(bool seen)
{
    if (!seen && gw_now_ms() < reopen_next_ms)
        return;
    unsigned n = rbd_cluster_retire_blocklisted();
    unsigned failed = 0;
    unsigned ok = bdev_rbd_reopen_retired(&failed);
    if (n || ok)
        log_warn("gateway %s: member %s: %u client(s) of this daemon blocklisted: reopened %u "
                 "image(s) on new clients",
                 cfg.group, cfg.name, n, ok);
    if (ok)
        gw_lu_reconnected();
    if (failed)
        reopen_later(failed);
    else
        reopen_pending = false;
}

/* One rejoin attempt, from the phase reached (membership thread). */
static void rejoin_step(void)
{
    if (rejoin_given_up || gw_now_ms() < rejoin_next_ms)
        return;
    rejoin_attempt++;
    if (rejoin_phase == REJOIN_CONNECT) {
        if (rejoin_connect() < 0)
            return;
        rejoin_phase = REJOIN_REOPEN;
    }
    if (rejoin_phase == REJOIN_REOPEN) {
        rejoin_reopen();
        rejoin_phase = REJOIN_REGISTER;
    }
    rejoin_register();
}

/* One round: heartbeat, reread, fence, LU pass; while fenced, a rejoin
 * attempt instead of the heartbeat. */
static void round_once(void)
{
    if (!my_blocklisted) {
        bool seen = atomic_exchange(&blocklist_seen, false);
        if (rbd_cluster_blocklisted(cluster))
            become_fenced("a request was refused as blocklisted");
        else if (seen || reopen_pending)
            recover_images(seen);
    }
    if (my_blocklisted) {
        rejoin_step();
        if (my_blocklisted) {
            gw_lu_pass(); /* the views: this member's group is unavailable */
            return;
        }
    }
    int rc = heartbeat();
    bool self_ok = rc == 0;
    if (rc == -ESHUTDOWN /* EBLOCKLISTED */) {
        char how[64];
        snprintf(how, sizeof(how), "its heartbeat stopped for over %u s", cfg.timeout_s);
        become_fenced(how);
        rejoin_step();
        if (my_blocklisted) {
            gw_lu_pass();
            return;
        }
        self_ok = heartbeat() == 0;
    } else if (rc < 0) {
        log_warn("gateway %s: heartbeat on %s failed: %s", cfg.group, obj, strerror(-rc));
    }
    struct gateway_member rd[GATEWAY_ID_MAX + 1];
    bool present[GATEWAY_ID_MAX + 1];
    rc = read_records(rd, present);
    if (rc < 0) {
        log_warn("gateway %s: cannot read %s: %s", cfg.group, obj, strerror(-rc));
        return;
    }
    merge(rd, present, self_ok);
    gw_lu_pass();
}

static void *gw_main(void *arg)
{
    (void)arg;
    bool first = true;
    uint64_t next = 0;
    for (;;) {
        pthread_mutex_lock(&gw_mu);
        if (stop_req) {
            pthread_mutex_unlock(&gw_mu);
            break;
        }
        bool rewatch = !watching;
        pthread_mutex_unlock(&gw_mu);
        if (rewatch && !my_blocklisted)
            watch_start();
        if (first) {
            notify_members(); /* the join: the others reread at once */
            first = false;
        }
        uint64_t now = gw_now_ms();
        if (now >= next || (!my_blocklisted && atomic_load(&blocklist_seen))) {
            round_once();
            next = now + GATEWAY_HEARTBEAT_MS;
        } else if (my_blocklisted) {
            /* a notification while fenced: nothing to reread with */
        } else {
            /* a notification: reread only */
            struct gateway_member rd[GATEWAY_ID_MAX + 1];
            bool present[GATEWAY_ID_MAX + 1];
            if (read_records(rd, present) == 0)
                merge(rd, present, true);
        }
        pthread_mutex_lock(&gw_mu);
        while (!kick && !stop_req) {
            uint64_t t = gw_now_ms();
            if (t >= next)
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t wait = next - t;
            ts.tv_sec += (time_t)(wait / 1000);
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&gw_cond, &gw_mu, &ts);
        }
        kick = false;
        pthread_mutex_unlock(&gw_mu);
    }
    return NULL;
}

/* Is the id held by another live member? Watch its counter for a timeout. */
static int check_id_free(void)
{
    struct gateway_member rd[GATEWAY_ID_MAX + 1];
    bool present[GATEWAY_ID_MAX + 1];
    int rc = read_records(rd, present);
    if (rc < 0)
        return rc;
    if (!present[cfg.id])
        return 0;
    struct gateway_member old = rd[cfg.id];
    log_info("gateway %s: id %u is registered to %s (client %s): checking whether it is alive "
             "(up to %u s)",
             cfg.group, cfg.id, old.name, old.addr, cfg.timeout_s + 1);
    uint64_t end = gw_now_ms() + (uint64_t)(cfg.timeout_s + 1) * 1000u;
    while (gw_now_ms() < end) {
        usleep(250 * 1000);
        rc = read_records(rd, present);
        if (rc < 0)
            return rc;
        if (!present[cfg.id])
            return 0; /* it left */
        if (rd[cfg.id].heartbeat != old.heartbeat) {
            log_error("gateway %s: gateway id %u is already used by the live member %s (client "
                      "%s, portals %s): refusing to start; give this member another "
                      "--gateway-id",
                      cfg.group, cfg.id, rd[cfg.id].name, rd[cfg.id].addr, rd[cfg.id].portals);
            return -EADDRINUSE;
        }
    }
    /* Dead: take the id over, and fence the old instance first so that it
     * can never write again (its image locks are broken on sight). */
    fence(cfg.id, "the previous holder of this id", old.addr);
    return 0;
}

/* Check the options and fill in the member's name and object names. */
static int start_config(const char *portals)
{
    if (!cfg.id) {
        log_error("gateway %s: --gateway-id N (1..%d) is required", cfg.group, GATEWAY_ID_MAX);
        return -EINVAL;
    }
    if (!cfg.name[0]) {
        char host[sizeof(cfg.name)] = ""; /* a longer host name falls back below */
        if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
            snprintf(host, sizeof(host), "gateway-%u", cfg.id);
        host[strcspn(host, ".")] = 0; /* the short name */
        if (!name_ok(host))
            snprintf(host, sizeof(host), "gateway-%u", cfg.id);
        snprintf(cfg.name, sizeof(cfg.name), "%s", host);
    }
    snprintf(my_portals, sizeof(my_portals), "%s", portals ? portals : "");
    snprintf(obj, sizeof(obj), "blockd.gateway.%s", cfg.group);
    snprintf(my_key, sizeof(my_key), "member.%03u", cfg.id);
    return 0;
}

static void start_disconnect(void)
{
    rados_ioctx_destroy(io);
    rbd_cluster_put(cluster);
    cluster = NULL;
}

/* Connect to the cluster, take the member id (fencing a dead previous
 * holder) and write our record. On failure nothing is left open. */
static int start_register(void)
{
    struct rbd_cluster_spec spec = {.conf = cfg.conf, .id = cfg.ceph_id};
    int rc = rbd_cluster_get(&spec, 10, &cluster);
    if (rc < 0) {
        log_error("gateway %s: cannot connect to the Ceph cluster (conf %s): %s", cfg.group,
                  cfg.conf[0] ? cfg.conf : "default", strerror(-rc));
        return rc;
    }
    rc = rbd_cluster_ioctx(cluster, cfg.pool, NULL, &io);
    if (rc < 0) {
        log_error("gateway %s: RADOS pool %s: %s", cfg.group, cfg.pool, strerror(-rc));
        rbd_cluster_put(cluster);
        cluster = NULL;
        return rc;
    }
    char *addrs = NULL;
    rc = rados_getaddrs(rbd_cluster_rados(cluster), &addrs);
    if (rc == 0 && addrs)
        snprintf(my_addr, sizeof(my_addr), "%s", addrs);
    if (addrs)
        rados_buffer_free(addrs);
    if (rc == 0)
        rc = check_id_free();
    if (rc == 0)
        rc = heartbeat();
    if (rc < 0) {
        if (rc != -EADDRINUSE)
            log_error("gateway %s: cannot register in %s/%s: %s", cfg.group, cfg.pool, obj,
                      strerror(-rc));
        start_disconnect();
    }
    return rc;
}

/* Our own entry in the membership table, as registered. */
static void start_own_record(void)
{
    pthread_mutex_lock(&gw_mu);
    recs[cfg.id].present = true;
    memset(&recs[cfg.id].m, 0, sizeof(recs[cfg.id].m));
    recs[cfg.id].m.id = cfg.id;
    snprintf(recs[cfg.id].m.name, sizeof(recs[cfg.id].m.name), "%s", cfg.name);
    snprintf(recs[cfg.id].m.portals, sizeof(recs[cfg.id].m.portals), "%s", my_portals);
    snprintf(recs[cfg.id].m.addr, sizeof(recs[cfg.id].m.addr), "%s", my_addr);
    recs[cfg.id].m.heartbeat = my_counter;
    recs[cfg.id].m.last_seen = time(NULL);
    recs[cfg.id].changed_ms = gw_now_ms();
    pthread_mutex_unlock(&gw_mu);
}

int gateway_start(const char *portals)
{
    if (!cfg.group[0]) {
        if (cfg.any) {
            log_error("gateway: --gateway-* options need --gateway-group NAME");
            return -EINVAL;
        }
        return 0;
    }
    int rc = start_config(portals);
    if (rc == 0)
        rc = start_register();
    if (rc < 0)
        return rc;
    start_own_record();
    enabled = true;
    rbd_cluster_set_blocklist_hook(blocklist_hook);
    rc = pthread_create(&thr, NULL, gw_main, NULL);
    if (rc != 0) {
        enabled = false;
        rbd_cluster_set_blocklist_hook(NULL);
        remove_record();
        start_disconnect();
        return -rc;
    }
    log_info("gateway %s: member %s, id %u (target port group %u), client %s, in %s/%s; "
             "heartbeat %u ms, timeout %u s",
             cfg.group, cfg.name, cfg.id, cfg.id, my_addr, cfg.pool, obj, GATEWAY_HEARTBEAT_MS,
             cfg.timeout_s);
    return 0;
}

void gateway_stop(void)
{
    if (!cluster)
        return;
    pthread_mutex_lock(&gw_mu);
    stop_req = true;
    pthread_cond_signal(&gw_cond);
    pthread_mutex_unlock(&gw_mu);
    pthread_join(thr, NULL);
    if (have_watch)
        rados_unwatch2(io, watch_cookie);
    watching = have_watch = false;
    if (!my_blocklisted) {
        log_info("gateway %s: member %s (id %u) leaving the group", cfg.group, cfg.name, cfg.id);
        int rc = remove_record();
        if (rc == 0)
            notify_members(); /* the leave: seen at once */
        log_info("gateway %s: member %s (id %u) left the group%s", cfg.group, cfg.name, cfg.id,
                 rc < 0 ? " (could not remove its record)" : "");
    }
    gw_lu_shutdown();
    rbd_cluster_set_blocklist_hook(NULL);
    rados_ioctx_destroy(io);
    gw_config_reconnected(); /* the store stopped: its old I/O context is gone */
    rbd_cluster_put(cluster);
    cluster = NULL;
}

size_t gw_members_locked(struct gateway_member *out, size_t max)
{
    size_t n = 0;
    for (unsigned id = 1; id <= GATEWAY_ID_MAX; id++) {
        if (!recs[id].present)
            continue;
        if (n < max) {
            out[n] = recs[id].m;
            if (id == cfg.id)
                out[n].state = my_blocklisted ? GATEWAY_OFFLINE : GATEWAY_ONLINE;
        }
        n++;
    }
    return n;
}

size_t gateway_members(struct gateway_member *out, size_t max)
{
    pthread_mutex_lock(&gw_mu);
    size_t n = gw_members_locked(out, max);
    pthread_mutex_unlock(&gw_mu);
    return n;
}

unsigned gw_member_of_addr_locked(const char *addr, bool *is_fenced)
{
    *is_fenced = false;
    for (unsigned i = 0; i < GW_FENCED_MAX; i++)
        if (fenced[i][0] && strcmp(fenced[i], addr) == 0)
            *is_fenced = true;
    for (unsigned id = 1; id <= GATEWAY_ID_MAX; id++) {
        if (recs[id].present && strcmp(recs[id].m.addr, addr) == 0) {
            if (recs[id].m.state == GATEWAY_OFFLINE && recs[id].m.fenced)
                *is_fenced = true;
            return id;
        }
    }
    return 0;
}

int gw_pool_ioctx(rados_ioctx_t *out, const char **group)
{
    /* cluster changes when a fenced member rejoins (under gw_mu). */
    pthread_mutex_lock(&gw_mu);
    struct rbd_cluster *c = enabled ? cluster : NULL;
    if (c)
        rbd_cluster_ref(c);
    pthread_mutex_unlock(&gw_mu);
    if (!c)
        return -ENOTCONN;
    *group = cfg.group;
    int rc = rbd_cluster_ioctx(c, cfg.pool, NULL, out);
    rbd_cluster_put(c);
    return rc;
}
