/*
 * The group's shared configuration store (gwconfig.h): the RADOS object,
 * the publisher that writes local changes to it, and the store thread
 * that applies the other members' changes here.
 *
 * Three views of the group's rows, each key → value:
 *   base   what this member last synchronised with the object (the value
 *          bytes as stored); persisted in the local DB (settings key
 *          "gateway.config.<group>") so that a restarted member tells a
 *          row deleted while it was down from one it never had;
 *   lv     the local view as of the last commit (gwconfig_rows.c);
 *   dirty  local changes not yet written to the object: key → {v, t},
 *          v the new value (null: deleted), t the commit's token.
 * A local commit (publisher, under the DB lock) diffs the new local view
 * against lv into dirty; its after hook writes dirty to the object with
 * one op that asserts every key still holds its base value. The store
 * thread reads the object and applies every key whose value differs from
 * base (and that is not dirty) through the API, then moves base.
 *
 * Locks: gc_mu (base, the object's writes) is held across RADOS calls but
 * never while calling another module, except the DB for persisting base
 * (gc_mu → db_lock); pend_mu (lv, dirty, results) is a leaf taken under
 * the DB lock by the publisher. Nothing takes gc_mu with the DB lock held.
 */
#include "gwsync/gwconfig.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <rados/librados.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/datasets.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/confgen.h"
#include "control/events.h"
#include "core/log.h"
#include "gateway/gateway.h"
#include "gwsync/gwconfig_internal.h"
#include "gwsync/gwnvme.h"

#define GWC_KEYS_MAX 100000 /* omap keys read per pass (bound: logged when hit) */
#define GWC_RETRIES 8       /* an update that keeps losing races */

static struct {
    bool on;
    const char *group;
    rados_ioctx_t io;
    char obj[192];
    char setting[192];
    char adopted_setting[192];
    uint64_t cookie;
    bool watching;
    pthread_t thr;
} gc;

static pthread_mutex_t gc_mu = PTHREAD_MUTEX_INITIALIZER;
static json_t *base; /* key → string; gc_mu */

static pthread_mutex_t pend_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pend_cond = PTHREAD_COND_INITIALIZER;
static json_t *lv;          /* pend_mu */
static json_t *dirty;       /* pend_mu */
static json_t *conflicts;   /* token (text) → message; pend_mu */
static uint64_t next_token; /* pend_mu */
static bool kick, stop_req; /* pend_mu */
static bool rewatch;        /* pend_mu */
static bool reconnect;      /* pend_mu: move gc.io to the gateway's new client */
/* gc.io changes only on the store thread under gc_mu and io_lk (write);
 * notify(), which runs without gc_mu, holds io_lk (read). */
static pthread_rwlock_t io_lk = PTHREAD_RWLOCK_INITIALIZER;
static json_t *failed_logged; /* key → last logged reason; store thread only */
/* Volumes this member adopted for a group share (dataset name → its local
 * id): dropped again once no share uses them here, unless a local change
 * claimed them (publish). Persisted as setting "gateway.adopted.<group>". */
static json_t *adopted;      /* pend_mu */
static bool adopted_changed; /* pend_mu: to be saved by the store thread */
static bool adopted_recheck; /* pend_mu: a share went (or start): look again */

/* The store thread's own commits are remote changes being applied. */
static __thread bool applying;
/* The token of this thread's last published commit. */
static __thread uint64_t my_token;

static void wake(void)
{
    pthread_mutex_lock(&pend_mu);
    kick = true;
    pthread_cond_signal(&pend_cond);
    pthread_mutex_unlock(&pend_mu);
}

/* ---- the object ---- */

/* Every key of the object: a new object key → string. 0 or -errno. */
static int read_all(json_t **out)
{
    json_t *s = json_object();
    char after[512] = "";
    for (;;) {
        rados_read_op_t op = rados_create_read_op();
        rados_omap_iter_t it = NULL;
        unsigned char more = 0;
        int prval = 0;
        rados_read_op_omap_get_vals2(op, after, "", 1000, &it, &more, &prval);
        int rc = rados_read_op_operate(op, gc.io, gc.obj, 0);
        rados_release_read_op(op);
        if (rc == 0 && prval < 0)
            rc = prval;
        if (rc < 0) {
            if (it)
                rados_omap_get_end(it);
            json_decref(s);
            return rc == -ENOENT ? (*out = json_object(), 0) : rc;
        }
        char *k, *v;
        size_t kl, vl;
        while (rados_omap_get_next2(it, &k, &v, &kl, &vl) == 0 && k) {
            char key[512];
            snprintf(key, sizeof(key), "%.*s", (int)kl, k);
            snprintf(after, sizeof(after), "%s", key);
            json_object_set_new(s, key, json_stringn(v, vl));
        }
        rados_omap_get_end(it);
        if (!more)
            break;
        if (json_object_size(s) >= GWC_KEYS_MAX) {
            log_warn("gateway config: %s holds more than %d keys: the rest is ignored", gc.obj,
                     GWC_KEYS_MAX);
            break;
        }
    }
    *out = s;
    return 0;
}

/* One key's stored value (NULL: absent) into *out. 0 or -errno. */
static int read_key(const char *key, json_t **out)
{
    rados_read_op_t op = rados_create_read_op();
    rados_omap_iter_t it = NULL;
    int prval = 0;
    const char *keys[1] = {key};
    size_t kl[1] = {strlen(key)};
    rados_read_op_omap_get_vals_by_keys2(op, keys, 1, kl, &it, &prval);
    int rc = rados_read_op_operate(op, gc.io, gc.obj, 0);
    rados_release_read_op(op);
    if (rc == 0 && prval < 0)
        rc = prval;
    *out = NULL;
    if (rc == 0) {
        char *k, *v;
        size_t klen, vl;
        if (rados_omap_get_next2(it, &k, &v, &klen, &vl) == 0 && k)
            *out = json_stringn(v, vl);
    }
    if (it)
        rados_omap_get_end(it);
    return rc == -ENOENT ? 0 : rc;
}

/* One write op: for each key of w (key → new string, or null to delete),
 * assert the stored value is old[key] (absent: an empty value, which no
 * row has), then set or remove it. -ECANCELED when an assertion failed. */
static int cas_write(json_t *w, json_t *old)
{
    rados_write_op_t op = rados_create_write_op();
    size_t n = json_object_size(w), i = 0;
    int *prval = calloc(n ? n : 1, sizeof(int));
    const char *key;
    json_t *v;
    json_object_foreach(w, key, v)
    {
        const char *o = json_string_value(json_object_get(old, key));
        rados_write_op_omap_cmp2(op, key, LIBRADOS_CMPXATTR_OP_EQ, o ? o : "", strlen(key),
                                 o ? strlen(o) : 0, &prval[i++]);
    }
    json_object_foreach(w, key, v)
    {
        const char *keys[1] = {key};
        size_t kl[1] = {strlen(key)};
        if (json_is_string(v)) {
            const char *vals[1] = {json_string_value(v)};
            size_t vl[1] = {json_string_length(v)};
            rados_write_op_omap_set2(op, keys, vals, kl, vl, 1);
        } else {
            rados_write_op_omap_rm_keys2(op, keys, kl, 1);
        }
    }
    int rc = rados_write_op_operate2(op, gc.io, gc.obj, NULL, 0);
    rados_release_write_op(op);
    for (size_t j = 0; rc == 0 && j < i; j++)
        if (prval[j] < 0)
            rc = prval[j];
    free(prval);
    return rc;
}

static void notify(void)
{
    char *reply = NULL;
    size_t reply_len = 0;
    pthread_rwlock_rdlock(&io_lk);
    int rc = rados_notify2(gc.io, gc.obj, "", 0, GWCONFIG_NOTIFY_MS, &reply, &reply_len);
    pthread_rwlock_unlock(&io_lk);
    if (reply)
        rados_buffer_free(reply);
    /* -ETIMEDOUT: a dead member's watch is still registered (it expires);
     * the live members got it. */
    if (rc < 0 && rc != -ETIMEDOUT)
        log_warn("gateway config: notify on %s: %s", gc.obj, strerror(-rc));
}

/* Store one bookkeeping setting on the one transaction path (cfgtx.h):
 * it names no configured object, so no publisher runs; durable once
 * committed. 0 or -errno. */
static int setting_save(const char *key, const char *value)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);
    if (rc < 0)
        return rc;
    rc = db_setting_set(key, value);
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    return cfg_tx_commit(&tx);
}

/* Persist base (gc_mu held; takes the DB lock). */
static void base_save(void)
{
    char *s = gwc_dump(base);
    if (!s)
        return;
    if (setting_save(gc.setting, s) < 0)
        log_error("gateway config: cannot save the synchronised state (a restart re-applies "
                  "the group's rows)");
    free(s);
}

static json_t *adopted_load(void)
{
    char *s = NULL;
    json_t *a = NULL;
    db_lock();
    if (db_setting_get(gc.adopted_setting, &s) == 0)
        a = json_loads(s, 0, NULL);
    db_unlock();
    free(s);
    if (!json_is_object(a)) {
        json_decref(a);
        a = json_object();
    }
    return a;
}

static json_t *base_load(void)
{
    char *s = NULL;
    json_t *b = NULL;
    db_lock();
    if (db_setting_get(gc.setting, &s) == 0)
        b = json_loads(s, 0, NULL);
    db_unlock();
    free(s);
    if (!json_is_object(b)) {
        json_decref(b);
        b = json_object();
    }
    return b;
}

/* ---- local changes → the object ---- */

/* Record the keys whose local value changed (publisher, DB locked). */
static void diff_into_dirty(json_t *now, uint64_t token)
{
    const char *key;
    json_t *v;
    json_object_foreach(now, key, v)
    {
        if (!json_equal(v, json_object_get(lv, key)))
            json_object_set_new(dirty, key,
                                json_pack("{s:O, s:I}", "v", v, "t", (json_int_t)token));
    }
    json_object_foreach(lv, key, v)
    {
        if (!json_object_get(now, key))
            json_object_set_new(dirty, key, json_pack("{s:n, s:I}", "v", "t", (json_int_t)token));
    }
}

/* A local change of a volume this member adopted (pool.dataset.update
 * through its API) makes it this member's: it is not dropped when its
 * group share goes (pend_mu held). */
static void adopted_claim_locked(const struct cfg_changes *changes)
{
    for (size_t i = 0; adopted && i < changes->n; i++) {
        const struct cfg_change *c = &changes->v[i];
        if (c->kind != CFG_DATASET || c->op != CFG_UPDATED)
            continue;
        const char *name;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(adopted, tmp, name, v)
        {
            if (json_integer_value(v) != c->id)
                continue;
            log_info("gateway config: %s was changed here: it stays when no group share uses it",
                     name);
            json_object_del(adopted, name);
            adopted_changed = true;
        }
    }
}

static void publish(const struct cfg_changes *changes, void *arg)
{
    (void)arg;
    my_token = 0;
    if (!gc.on)
        return;
    json_t *now = gwc_local_view();
    if (!now)
        return;
    /* A pool or dataset change alone (an RBD pool added, a volume
     * adopted) changes which rows are the group's, not the group's rows:
     * only the local view follows. */
    bool shares =
        cfg_changes_has(changes, CFG_ISCSI_TARGET) || cfg_changes_has(changes, CFG_ISCSI_EXTENT) ||
        cfg_changes_has(changes, CFG_ISCSI_TARGETEXTENT) ||
        cfg_changes_has(changes, CFG_NBD_EXPORT) || cfg_changes_has(changes, CFG_NVME_GLOBAL) ||
        cfg_changes_has(changes, CFG_NVME_SUBSYS) || cfg_changes_has(changes, CFG_NVME_NAMESPACE) ||
        cfg_changes_has(changes, CFG_NVME_HOST) || cfg_changes_has(changes, CFG_NVME_HOST_SUBSYS) ||
        cfg_changes_has(changes, CFG_NVME_PORT_SUBSYS) || cfg_changes_has(changes, CFG_NVME_PORT);
    pthread_mutex_lock(&pend_mu);
    if (cfg_changes_has(changes, CFG_POOL)) {
        /* an RBD pool may have come: the group's rows on it apply now */
        kick = true;
        pthread_cond_signal(&pend_cond);
    }
    if (!applying && shares) {
        my_token = ++next_token;
        diff_into_dirty(now, my_token);
        adopted_recheck = true; /* a local share may have gone */
    }
    if (!applying)
        adopted_claim_locked(changes);
    json_decref(lv);
    lv = now;
    pthread_mutex_unlock(&pend_mu);
}

/* A conflict for the commit with token t: its after hook reports it. */
static void conflict_record(json_t *t, const char *key)
{
    char tok[32];
    snprintf(tok, sizeof(tok), "%" JSON_INTEGER_FORMAT, json_integer_value(t));
    pthread_mutex_lock(&pend_mu);
    if (json_object_size(conflicts) > 64)
        json_object_clear(conflicts); /* of commits whose after hook never ran */
    json_object_set_new(conflicts, tok,
                        json_sprintf("%s was created by another member of gateway group %s at "
                                     "the same time",
                                     key, gc.group));
    pthread_mutex_unlock(&pend_mu);
}

/*
 * One key that lost the batch's compare (gc_mu held). A create whose name
 * another member took keeps theirs (EEXIST for the commit of token t); an
 * update or delete over another member's update is written again on the
 * newer value (last writer wins); an update of a row another member
 * deleted is dropped (the delete wins: nothing is resurrected). Returns
 * 1 written, 0 given up (the store thread applies the group's value), or
 * -errno (the object could not be written: the key stays dirty).
 */
static int push_one(const char *key, json_t *val, json_t *t)
{
    json_t *one = json_pack("{s:O}", key, val);
    json_t *old = json_pack("{s:O}", key, json_object_get(base, key) ?: json_null());
    bool create = !json_object_get(base, key);
    int r = cas_write(one, old), out;
    for (int i = 0; r == -ECANCELED && !create && i < GWC_RETRIES; i++) {
        json_t *cur = NULL;
        if ((r = read_key(key, &cur)) < 0)
            break;
        if (!cur && json_is_string(val)) {
            log_warn("gateway config: %s was deleted by another member: this member's change of "
                     "it is dropped",
                     key);
            r = -ECANCELED;
            break;
        }
        json_object_set_new(old, key, cur ? cur : json_null());
        r = cas_write(one, old);
        if (r == 0)
            log_info("gateway config: %s: this member's change overrides a concurrent one (last "
                     "writer wins)",
                     key);
    }
    if (r == 0) {
        out = 1;
    } else if (r == -ECANCELED) {
        if (create) {
            conflict_record(t, key);
            log_warn("gateway config: %s was created by another member at the same time: this "
                     "member takes theirs",
                     key);
        }
        out = 0;
    } else {
        out = r;
    }
    json_decref(one);
    json_decref(old);
    return out;
}

/* key → new stored string (null: remove) for each dirty key whose value
 * differs from base. */
static json_t *writes_of(json_t *todo)
{
    json_t *w = json_object();
    const char *key;
    json_t *e;
    json_object_foreach(todo, key, e)
    {
        json_t *v = json_object_get(e, "v");
        char *s = json_is_null(v) ? NULL : gwc_dump(v);
        const char *b = json_string_value(json_object_get(base, key));
        if (!((b && s && strcmp(b, s) == 0) || (!b && !s)))
            json_object_set_new(w, key, s ? json_string(s) : json_null());
        free(s);
    }
    return w;
}

/* Move base to what was written and log the keys (gc_mu). The caller
 * notifies the group first and persists base after (base_save): the
 * others must not wait for our local fdatasync (0.5-0.9 s under load
 * here), and a member that crashes before it finds the group's rows equal
 * to its own at restart. */
static void base_advance(json_t *writes, json_t *done)
{
    char list[1024] = "";
    size_t off = 0;
    const char *key;
    json_t *e;
    json_object_foreach(done, key, e)
    {
        if (!json_is_true(e))
            continue;
        json_t *v = json_object_get(writes, key);
        if (json_is_string(v))
            json_object_set(base, key, v);
        else
            json_object_del(base, key);
        if (off < sizeof(list))
            off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", off ? " " : "", key);
    }
    log_info("gateway config: wrote %s to %s", list, gc.obj);
}

/*
 * Write the dirty keys to the object: one op for all of them (a reader
 * never sees a LUN without its target), key by key when another member
 * changed one of them meanwhile (push_one). Returns 0, or -errno when the
 * object could not be written (the keys stay dirty: the store thread
 * retries).
 */
static int push(void)
{
    pthread_mutex_lock(&gc_mu);
    pthread_mutex_lock(&pend_mu);
    json_t *todo = json_deep_copy(dirty);
    pthread_mutex_unlock(&pend_mu);
    json_t *writes = writes_of(todo);
    json_t *done = json_object(); /* key → true written, false given up */
    const char *key;
    json_t *e;
    int rc = json_object_size(writes) ? cas_write(writes, base) : 0;
    if (rc == 0) {
        json_object_foreach(writes, key, e) json_object_set_new(done, key, json_true());
    } else if (rc == -ECANCELED) {
        rc = 0;
        json_object_foreach(writes, key, e)
        {
            int r = push_one(key, e, json_object_get(json_object_get(todo, key), "t"));
            if (r >= 0)
                json_object_set_new(done, key, json_boolean(r));
            else if (rc == 0)
                rc = r;
        }
    }
    bool changed = false, gave_up = false;
    json_object_foreach(done, key, e)
    {
        changed |= json_is_true(e);
        gave_up |= json_is_false(e);
    }
    /* Written, given up or nothing to write: no longer dirty, unless the
     * key changed again meanwhile (a newer token). */
    pthread_mutex_lock(&pend_mu);
    json_object_foreach(todo, key, e)
    {
        bool failed = json_object_get(writes, key) && !json_object_get(done, key);
        json_t *now = json_object_get(dirty, key);
        if (!failed && now && json_equal(json_object_get(now, "t"), json_object_get(e, "t")))
            json_object_del(dirty, key);
    }
    pthread_mutex_unlock(&pend_mu);
    if (changed)
        base_advance(writes, done);
    pthread_mutex_unlock(&gc_mu);
    if (changed) {
        notify();
        pthread_mutex_lock(&gc_mu);
        base_save();
        pthread_mutex_unlock(&gc_mu);
    }
    if (gave_up)
        wake(); /* apply the group's value here */
    if (rc < 0)
        log_warn("gateway config: cannot write to %s: %s (retried every %d ms)", gc.obj,
                 strerror(-rc), GWCONFIG_POLL_MS);
    json_decref(todo);
    json_decref(writes);
    json_decref(done);
    return rc;
}

static void after(void *arg)
{
    (void)arg;
    uint64_t token = my_token;
    my_token = 0;
    if (!gc.on || applying || !token)
        return;
    int rc = push();
    char tok[32];
    snprintf(tok, sizeof(tok), "%" PRIu64, token);
    pthread_mutex_lock(&pend_mu);
    json_t *c = json_object_get(conflicts, tok);
    char msg[512] = "";
    if (c)
        snprintf(msg, sizeof(msg), "%s", json_string_value(c));
    json_object_del(conflicts, tok);
    pthread_mutex_unlock(&pend_mu);
    if (msg[0])
        cfg_tx_after_fail(-EEXIST, msg);
    else if (rc < 0)
        log_warn("gateway config: a change is committed here but not yet shared with group %s: "
                 "%s",
                 gc.group, strerror(-rc));
}

/* The local configuration's transactions (events.h): the group's rows
 * among the changes are written to the object (publish, under the DB
 * lock, queues; after, unlocked, writes). */
static int on_event(const struct event *ev, void *arg)
{
    if (ev->type == EV_CONFIG_COMMITTED)
        publish(ev->config, arg);
    else
        after(arg);
    return 0;
}

/* ---- the object → local changes ---- */

/* A withdrawn extent or NBD export: close its volume here if nothing else
 * uses it, so that the member deleting the dataset can remove the image
 * (our open image would hold a watch: EBUSY). old is the row's stored
 * JSON text. */
static void release_withdrawn(json_t *old)
{
    const char *text = json_string_value(old);
    json_t *row = text ? json_loads(text, 0, NULL) : NULL;
    const char *disk = json_string_value(json_object_get(row, "disk"));
    const char *ds = json_string_value(json_object_get(row, "dataset"));
    if (disk && strncmp(disk, "zvol/", 5) == 0)
        ds = disk + 5;
    if (ds && ds[0])
        datasets_volume_release_unused(ds);
    json_decref(row);
}

struct change {
    char *key;
    json_t *want; /* parsed value, NULL: delete */
    json_t *old;  /* base value when read (string or NULL) */
    json_t *now;  /* stored value (string or NULL) */
    int rc;
};

static void log_failure(const char *key, const char *why)
{
    const char *last = json_string_value(json_object_get(failed_logged, key));
    if (last && strcmp(last, why) == 0)
        return; /* said already: retried quietly */
    log_warn("gateway config: cannot apply %s here yet: %s (retried every %d ms)", key, why,
             GWCONFIG_POLL_MS);
    json_object_set_new(failed_logged, key, json_string(why));
}

/* Changed here since the pull read the object (its write is pending):
 * the local change goes first, the group's value is not applied over it.
 * Checked with the DB lock held for iSCSI rows, so no local commit can
 * come between the check and the apply. */
static bool dirty_now(const char *key)
{
    pthread_mutex_lock(&pend_mu);
    bool d = json_object_get(dirty, key) != NULL;
    pthread_mutex_unlock(&pend_mu);
    return d;
}

static void apply_one(struct change *c, json_t *local)
{
    char why[512] = "";
    if (dirty_now(c->key)) {
        c->rc = -EAGAIN;
        return;
    }
    c->rc = gwc_apply(c->key, c->want, local, why, sizeof(why));
    if (c->rc < 0)
        log_failure(c->key, why);
}

static void adopted_add(const char *ds)
{
    int64_t id = ds ? gwc_dataset_id(ds) : 0;
    if (!id)
        return;
    pthread_mutex_lock(&pend_mu);
    json_object_set_new(adopted, ds, json_integer(id));
    adopted_changed = true;
    pthread_mutex_unlock(&pend_mu);
}

static void adopted_save(void)
{
    pthread_mutex_lock(&pend_mu);
    char *s = adopted_changed ? gwc_dump(adopted) : NULL;
    adopted_changed = false;
    pthread_mutex_unlock(&pend_mu);
    if (!s)
        return;
    if (setting_save(gc.adopted_setting, s) < 0)
        log_error("gateway config: cannot save the list of adopted volumes");
    free(s);
}

/* Drop (the dataset row only: the image is the group's) each volume this
 * member adopted for a group share once no share or export uses it here
 * any more. A row that is not the adopted one any more (deleted, renamed,
 * made again), or that has snapshots or children here (used locally),
 * stays and leaves the list. Store thread. */
static void adopted_release(void)
{
    pthread_mutex_lock(&pend_mu);
    json_t *todo = adopted_recheck ? json_deep_copy(adopted) : json_object();
    adopted_recheck = false;
    pthread_mutex_unlock(&pend_mu);
    bool again = false;
    const char *name;
    json_t *v;
    json_object_foreach(todo, name, v)
    {
        char key[300], why[512] = "";
        bool drop = true;
        snprintf(key, sizeof(key), "adopted/%s", name);
        if (gwc_dataset_id(name) != json_integer_value(v)) {
            log_info("gateway config: %s is no longer the volume adopted for the group: left alone",
                     name);
        } else if (gwc_volume_shared_here(name)) {
            drop = false;
        } else {
            applying = true;
            int rc = datasets_forget(name, why, sizeof(why));
            applying = false;
            if (rc == 0) {
                log_info("gateway config: dropped the dataset row of %s, adopted for a group share "
                         "that is gone (the RBD image stays)",
                         name);
            } else if (rc == -EBUSY || rc == -EIO) {
                drop = false; /* in use after all, or retried next round */
                again = true;
                log_failure(key, why);
            } else {
                log_info("gateway config: keeping %s: %s (it is this member's now)", name, why);
            }
        }
        if (!drop)
            continue;
        json_object_del(failed_logged, key);
        pthread_mutex_lock(&pend_mu);
        if (json_equal(json_object_get(adopted, name), v)) {
            json_object_del(adopted, name);
            adopted_changed = true;
        }
        pthread_mutex_unlock(&pend_mu);
    }
    json_decref(todo);
    if (again) {
        pthread_mutex_lock(&pend_mu);
        adopted_recheck = true;
        pthread_mutex_unlock(&pend_mu);
    }
    adopted_save();
}

static void apply_changes(struct change *ch, size_t n)
{
    char why[512];
    applying = true;
    /* Volumes first, with no lock held (pool.dataset.create). */
    for (size_t i = 0; i < n; i++) {
        why[0] = 0;
        ch[i].rc = gwc_ensure_volume(ch[i].key, ch[i].want, why, sizeof(why));
        if (ch[i].rc == 1) {
            adopted_add(gwc_value_volume(ch[i].key, ch[i].want));
            ch[i].rc = 0;
        }
        if (ch[i].rc < 0)
            log_failure(ch[i].key, why);
    }
    json_t *local = gwc_local_view();
    if (!local) {
        applying = false;
        for (size_t i = 0; i < n; i++)
            ch[i].rc = -EIO; /* retried next round */
        return;
    }
    /* applying: set above, for the adoptions too. Each phase's commit
     * publishes at once; the fdatasyncs wait until
     * every phase is served (one for all of them): what the group asks is
     * in the group's object already, and a member that crashes before the
     * sync applies it again from there. One fdatasync of a loaded virtual
     * disk can take most of a second: four in a row would hold the share
     * back from initiators for seconds (bench/gateways.sh measures the
     * propagation). */
    db_sync_batch_begin();
    for (int phase = 0; phase < 4; phase++) {
        /* iSCSI rows of a phase in one transaction (one publication) */
        bool any = false;
        for (size_t i = 0; i < n; i++)
            any |= ch[i].rc == 0 && !gwc_is_nbd(ch[i].key) &&
                   gwc_phase(ch[i].key, !ch[i].want) == phase;
        struct cfg_tx tx;
        bool in_tx = any && cfg_tx_begin(&tx) == 0;
        for (size_t i = 0; in_tx && i < n; i++) {
            if (ch[i].rc < 0 || gwc_is_nbd(ch[i].key) || gwc_phase(ch[i].key, !ch[i].want) != phase)
                continue;
            apply_one(&ch[i], local);
        }
        if (in_tx && cfg_tx_commit(&tx) < 0 && !tx.committed)
            for (size_t i = 0; i < n; i++)
                if (!gwc_is_nbd(ch[i].key) && gwc_phase(ch[i].key, !ch[i].want) == phase)
                    ch[i].rc = -EIO;
        /* NBD exports: their methods take the NBD lock before the DB's. */
        for (size_t i = 0; i < n; i++) {
            if (ch[i].rc < 0 || !gwc_is_nbd(ch[i].key) ||
                gwc_phase(ch[i].key, !ch[i].want) != phase)
                continue;
            apply_one(&ch[i], local);
        }
    }
    applying = false;
    json_decref(local);
    for (size_t i = 0; i < n; i++) {
        if (ch[i].rc == 0) {
            json_object_del(failed_logged, ch[i].key);
            log_info("gateway config: %s %s (from the group)", ch[i].want ? "applied" : "withdrew",
                     ch[i].key);
        }
    }
    if (db_sync_batch_end() < 0)
        log_error("gateway config: the local database could not be synced (the group's rows are "
                  "applied again after a restart)");
    for (size_t i = 0; i < n; i++)
        if (ch[i].rc == 0 && !ch[i].want)
            release_withdrawn(ch[i].old);
    for (size_t i = 0; i < n; i++)
        if (ch[i].rc == 0 && !ch[i].want) {
            pthread_mutex_lock(&pend_mu);
            adopted_recheck = true; /* a share went: its adopted volume may go too */
            pthread_mutex_unlock(&pend_mu);
            break;
        }
}

/* Read the object and apply here whatever changed since base. */
static void pull(void)
{
    json_t *s;
    pthread_mutex_lock(&gc_mu);
    int rc = read_all(&s);
    if (rc < 0) {
        pthread_mutex_unlock(&gc_mu);
        log_warn("gateway config: cannot read %s: %s", gc.obj, strerror(-rc));
        return;
    }
    size_t cap = json_object_size(s) + json_object_size(base), n = 0;
    struct change *ch = calloc(cap ? cap : 1, sizeof(*ch));
    pthread_mutex_lock(&pend_mu);
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v)
    {
        json_t *b = json_object_get(base, key);
        if ((b && json_equal(b, v)) || json_object_get(dirty, key))
            continue;
        json_t *want = json_loads(json_string_value(v), 0, NULL);
        ch[n++] = (struct change){.key = strdup(key),
                                  .want = want ? want : json_string("(bad JSON)"),
                                  .old = b ? json_incref(b) : NULL,
                                  .now = json_incref(v)};
    }
    json_object_foreach(base, key, v)
    {
        if (json_object_get(s, key) || json_object_get(dirty, key))
            continue;
        ch[n++] = (struct change){.key = strdup(key), .old = json_incref(v)};
    }
    pthread_mutex_unlock(&pend_mu);
    pthread_mutex_unlock(&gc_mu);
    json_decref(s);
    if (n)
        apply_changes(ch, n);
    pthread_mutex_lock(&gc_mu);
    bool changed = false;
    for (size_t i = 0; i < n; i++) {
        json_t *b = json_object_get(base, ch[i].key);
        bool same = (!b && !ch[i].old) || (b && ch[i].old && json_equal(b, ch[i].old));
        if (ch[i].rc == 0 && same) {
            if (ch[i].now)
                json_object_set(base, ch[i].key, ch[i].now);
            else
                json_object_del(base, ch[i].key);
            changed = true;
        }
        free(ch[i].key);
        json_decref(ch[i].want);
        json_decref(ch[i].old);
        json_decref(ch[i].now);
    }
    if (changed)
        base_save();
    pthread_mutex_unlock(&gc_mu);
    free(ch);
}

/* ---- watch and thread ---- */

static void on_notify(void *arg, uint64_t notify_id, uint64_t handle, uint64_t notifier_id,
                      void *data, size_t len)
{
    (void)arg, (void)notifier_id, (void)data, (void)len;
    /* Acknowledge at once: applying takes API calls, and the notifier
     * must not wait on them (nor on a member busy notifying us). */
    rados_notify_ack(gc.io, gc.obj, notify_id, handle, NULL, 0);
    wake();
}

static void on_watch_error(void *arg, uint64_t cookie, int err)
{
    (void)arg, (void)cookie;
    log_warn("gateway config: the watch on %s failed (%s): watching again and rereading", gc.obj,
             strerror(-err));
    pthread_mutex_lock(&pend_mu);
    rewatch = true;
    kick = true;
    pthread_cond_signal(&pend_cond);
    pthread_mutex_unlock(&pend_mu);
}

static int watch(void)
{
    if (gc.watching) {
        rados_unwatch2(gc.io, gc.cookie);
        gc.watching = false;
    }
    int rc = rados_watch3(gc.io, gc.obj, &gc.cookie, on_notify, on_watch_error, 10, NULL);
    if (rc == 0)
        gc.watching = true;
    return rc;
}

/* This member was fenced and rejoined with a new client: the old one's
 * I/O context can neither watch nor write. Store thread. */
static void move_io(void)
{
    rados_ioctx_t nio;
    const char *group;
    int rc = gw_pool_ioctx(&nio, &group);
    if (rc < 0) {
        log_warn("gateway config: no I/O context on the new client: %s (retried)", strerror(-rc));
        pthread_mutex_lock(&pend_mu);
        reconnect = true;
        pthread_mutex_unlock(&pend_mu);
        return;
    }
    pthread_mutex_lock(&gc_mu); /* no read or write of the object meanwhile */
    if (gc.watching)
        rados_unwatch2(gc.io, gc.cookie);
    gc.watching = false;
    /* No on_notify of the old watch runs after this (it uses gc.io). */
    rados_watch_flush(rados_ioctx_get_cluster(gc.io));
    pthread_rwlock_wrlock(&io_lk);
    rados_ioctx_t old = gc.io;
    gc.io = nio;
    pthread_rwlock_unlock(&io_lk);
    pthread_mutex_unlock(&gc_mu);
    rados_ioctx_destroy(old);
    gw_config_reconnected();
    log_info("gateway config: %s: on the new client, watching and rereading", gc.obj);
    pthread_mutex_lock(&pend_mu);
    rewatch = true;
    pthread_mutex_unlock(&pend_mu);
}

bool gwconfig_reconnect(void)
{
    if (!gc.on)
        return false;
    pthread_mutex_lock(&pend_mu);
    reconnect = true;
    kick = true;
    pthread_cond_signal(&pend_cond);
    pthread_mutex_unlock(&pend_mu);
    return true;
}

static void *store_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&pend_mu);
        bool mv = reconnect;
        reconnect = false;
        pthread_mutex_unlock(&pend_mu);
        if (mv)
            move_io();
        pthread_mutex_lock(&pend_mu);
        bool rw = rewatch, more = json_object_size(dirty) > 0;
        rewatch = false;
        pthread_mutex_unlock(&pend_mu);
        if (rw && watch() < 0) {
            pthread_mutex_lock(&pend_mu);
            rewatch = true;
            pthread_mutex_unlock(&pend_mu);
        }
        if (more)
            push(); /* changes whose after hook could not run or failed */
        pull();
        adopted_release();
        gwnvme_ports_update(); /* the others' discovery logs list them */
        pthread_mutex_lock(&pend_mu);
        if (!kick && !stop_req) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += GWCONFIG_POLL_MS / 1000;
            ts.tv_nsec += (long)(GWCONFIG_POLL_MS % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&pend_cond, &pend_mu, &ts);
        }
        bool stop = stop_req;
        kick = false;
        pthread_mutex_unlock(&pend_mu);
        if (stop)
            break;
    }
    return NULL;
}

void gwconfig_init(void)
{
    events_subscribe(&(struct event_subscriber){
        .name = "gateway config",
        .types = EV_BIT(EV_CONFIG_COMMITTED) | EV_BIT(EV_CONFIG_AFTER),
        .config_kinds = CFG_KIND_BIT(CFG_ISCSI_TARGET) | CFG_KIND_BIT(CFG_ISCSI_EXTENT) |
                        CFG_KIND_BIT(CFG_ISCSI_TARGETEXTENT) | CFG_KIND_BIT(CFG_NBD_EXPORT) |
                        CFG_KIND_BIT(CFG_POOL) | CFG_KIND_BIT(CFG_DATASET) | CFG_NVME_KINDS,
        .fn = on_event,
    });
    /* gateway/ is below the front-ends and cannot call us: it calls this
     * when it replaces its cluster connection. */
    gateway_set_reconnect_hook(gwconfig_reconnect);
}

int gwconfig_start(void)
{
    if (!gateway_enabled())
        return 0;
    int rc = gw_pool_ioctx(&gc.io, &gc.group);
    if (rc < 0) {
        log_error("gateway config: no I/O context on the group's pool: %s", strerror(-rc));
        return rc;
    }
    snprintf(gc.obj, sizeof(gc.obj), "blockd.config.%s", gc.group);
    snprintf(gc.setting, sizeof(gc.setting), "gateway.config.%s", gc.group);
    snprintf(gc.adopted_setting, sizeof(gc.adopted_setting), "gateway.adopted.%s", gc.group);
    rados_write_op_t op = rados_create_write_op();
    rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
    rc = rados_write_op_operate2(op, gc.io, gc.obj, NULL, 0);
    rados_release_write_op(op);
    if (rc == 0)
        rc = watch();
    if (rc < 0) {
        log_error("gateway config: cannot create or watch %s: %s", gc.obj, strerror(-rc));
        rados_ioctx_destroy(gc.io);
        return rc;
    }
    base = base_load();
    adopted = adopted_load();
    adopted_recheck = true; /* withdrawals while this member was down */
    failed_logged = json_object();
    conflicts = json_object();
    dirty = json_object();
    json_t *now = gwc_local_view();
    lv = json_object();
    pthread_mutex_lock(&pend_mu);
    if (now) {
        /* Local changes the object never got (made before joining the
         * group, or a crash between a commit and its write). */
        json_t *saved = lv;
        lv = json_object();
        const char *key;
        json_t *v;
        json_object_foreach(base, key, v)
        {
            json_t *parsed = json_loads(json_string_value(v), 0, NULL);
            if (parsed)
                json_object_set_new(lv, key, parsed);
        }
        diff_into_dirty(now, 0);
        json_decref(lv);
        json_decref(saved);
        lv = now;
    }
    gc.on = true;
    kick = true;
    pthread_mutex_unlock(&pend_mu);
    rc = pthread_create(&gc.thr, NULL, store_main, NULL);
    if (rc != 0) {
        gc.on = false;
        rados_unwatch2(gc.io, gc.cookie);
        rados_ioctx_destroy(gc.io);
        return -rc;
    }
    log_info("gateway config: group %s's shares in %s (%zu rows synchronised before, %zu local "
             "changes to write)",
             gc.group, gc.obj, json_object_size(base), json_object_size(dirty));
    return 0;
}

void gwconfig_stop(void)
{
    if (!gc.on)
        return;
    pthread_mutex_lock(&pend_mu);
    stop_req = true;
    pthread_cond_signal(&pend_cond);
    pthread_mutex_unlock(&pend_mu);
    pthread_join(gc.thr, NULL);
    gc.on = false;
    if (gc.watching)
        rados_unwatch2(gc.io, gc.cookie);
    gc.watching = false;
    rados_ioctx_destroy(gc.io);
    json_decref(base);
    json_decref(lv);
    json_decref(dirty);
    json_decref(conflicts);
    json_decref(failed_logged);
    pthread_mutex_lock(&pend_mu);
    json_decref(adopted);
    adopted = NULL;
    pthread_mutex_unlock(&pend_mu);
    base = lv = dirty = conflicts = failed_logged = NULL;
}
