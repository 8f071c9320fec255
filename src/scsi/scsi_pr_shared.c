/*
 * Reservations of LUs over shared storage (RBD): the state lives in the
 * cluster next to the image (store/rbd_pr.h), so every blockd daemon that
 * serves the image -- the members of a gateway group, or two daemons that
 * merely export the same image -- enforces the same registrations and
 * reservations.
 *
 *   - A PERSISTENT RESERVE OUT / RESERVE / RELEASE runs on the I/O pool:
 *     read the state and its seq, apply the service action (scsi_pr.c) to
 *     that copy, write it back with a compare-and-swap on the seq (a
 *     concurrent update through another daemon makes it start over, so no
 *     update is lost), then notify every daemon and wait for their
 *     acknowledgements. Each daemon installs the new state in its LU's
 *     cache (lu->pr) and queues the unit attentions for its own sessions
 *     before it acknowledges, so when the command completes (on its owner
 *     reactor) the change is enforced everywhere.
 *   - The data path only reads lu->pr under lu->mu: no cluster round trip
 *     per command.
 *   - PERSISTENT RESERVE IN reads the state from the cluster (on the pool),
 *     so it is authoritative even when a notify was missed.
 *   - A lost watch (the OSD connection broke) marks the cache stale; a pool
 *     job watches again and reloads it.
 *   - APTPL: the state is in the cluster either way. Without APTPL it is
 *     cleared when the LU "powers on", which for a group means: a daemon
 *     opens the LU and no other daemon is watching the object (nobody
 *     serves it). SPC-2 reservations are cleared then too.
 *   - The control mode page's SWP (software write protect) is LU state
 *     too: it is part of the same object and updated the same way (MODE
 *     SELECT through any daemon write-protects the LU on every path before
 *     it completes); it reverts to 0 at the LU's power on.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"
#include "store/bdev_rbd.h"
#include "store/rbd_pr.h"

/* Compare-and-swap rounds before a command gives up with BUSY (each
 * round is one read and one write to the cluster). */
#define CAS_ROUNDS 64

/* SPC-2 reservations to release (nexus losses, LU resets) not yet
 * committed to the cluster; more than this and the oldest are left to
 * their own background updates. */
#define DROPS_MAX 16

struct scsi_pr_shared {
    struct rbd_pr *store;
    pthread_mutex_t mu; /* jobs, closing, drops */
    pthread_cond_t cond;
    unsigned jobs; /* resync jobs running (they hold no LU reference) */
    bool closing;
    atomic_bool stale;
    /* Releases of SPC-2 reservations not committed yet: every update and
     * every install applies them first, so that a RESERVE right after the
     * holder's logout does not see the old holder (a nexus loss cannot wait
     * for the cluster, its release is asynchronous). */
    struct scsi_pr_res2_who drops[DROPS_MAX];
    size_t ndrops;
};

/* Apply the pending SPC-2 releases to s; true if one changed it. Takes
 * sh->mu. *n gets how many were applied (for drops_done). */
static bool drops_apply(struct scsi_pr_shared *sh, struct scsi_pr_state *s, size_t *n)
{
    bool changed = false;
    pthread_mutex_lock(&sh->mu);
    for (size_t i = 0; i < sh->ndrops; i++)
        changed |= scsi_pr_res2_release(s, &sh->drops[i]);
    if (n)
        *n = sh->ndrops;
    pthread_mutex_unlock(&sh->mu);
    return changed;
}

/* The first n pending releases are committed: forget them. */
static void drops_done(struct scsi_pr_shared *sh, size_t n)
{
    pthread_mutex_lock(&sh->mu);
    if (n > sh->ndrops)
        n = sh->ndrops;
    memmove(sh->drops, sh->drops + n, (sh->ndrops - n) * sizeof *sh->drops);
    sh->ndrops -= n;
    pthread_mutex_unlock(&sh->mu);
}

/* Install a fetched or committed state in lu's cache if it is newer;
 * queue its unit attentions when with_uas. Takes ch->s (frees what is
 * left). Any thread. */
static void install(struct scsi_lu *lu, struct scsi_pr_change *ch, uint64_t seq, bool with_uas)
{
    drops_apply(lu->shared, &ch->s, NULL);
    pthread_mutex_lock(&lu->mu);
    if (seq > lu->pr.seq) {
        struct scsi_pr_state old = lu->pr;
        lu->pr = ch->s;
        lu->pr.seq = seq;
        atomic_store(&lu->swp, lu->pr.swp);
        ch->s = old;
        if (with_uas)
            scsi_pr_apply_uas_locked(lu, ch);
    }
    pthread_mutex_unlock(&lu->mu);
    scsi_pr_state_free(&ch->s);
}

/* Read and parse the state (pool thread). */
static int fetch(struct scsi_lu *lu, struct scsi_pr_change *ch, uint64_t *seq)
{
    char *blob;
    size_t len;
    int rc = rbd_pr_read(lu->shared->store, &blob, &len, seq);
    if (rc < 0)
        return rc;
    rc = scsi_pr_state_parse(blob, len, ch, NULL);
    free(blob);
    if (rc < 0)
        log_error("scsi: %s: the reservation object %s does not parse", volume_name(lu->vol),
                  rbd_pr_name(lu->shared->store));
    ch->nuas = 0;
    return rc;
}

/* ---- listener (librados threads) ---- */

static void on_changed(void *arg, const void *msg, size_t len, bool self)
{
    struct scsi_lu *lu = arg;
    struct scsi_pr_change *ch = malloc(sizeof *ch);
    uint64_t seq = 0;
    if (!ch)
        return;
    if (scsi_pr_state_parse(msg, len, ch, &seq) < 0) {
        log_warn("scsi: %s: ignoring a malformed reservation notify", volume_name(lu->vol));
    } else if (seq) {
        install(lu, ch, seq, true);
    } else if (!self) {
        /* An event without state (an LU reset elsewhere): its unit
         * attentions only; the sender raised them on its own sessions. */
        pthread_mutex_lock(&lu->mu);
        scsi_pr_apply_uas_locked(lu, ch);
        pthread_mutex_unlock(&lu->mu);
        scsi_pr_state_free(&ch->s);
    } else {
        scsi_pr_state_free(&ch->s);
    }
    free(ch);
}

/* Watch again and reload (pool thread). */
static int resync(struct scsi_lu *lu)
{
    struct scsi_pr_shared *sh = lu->shared;
    int rc = rbd_pr_rewatch(sh->store);
    struct scsi_pr_change *ch = NULL;
    uint64_t seq = 0;
    if (rc == 0)
        rc = (ch = malloc(sizeof *ch)) ? fetch(lu, ch, &seq) : -ENOMEM;
    if (rc == 0) {
        install(lu, ch, seq, false);
        atomic_store(&sh->stale, false);
        log_info("scsi: %s: reservation watch restored (seq %" PRIu64 ")", volume_name(lu->vol),
                 seq);
    } else {
        log_warn("scsi: %s: cannot restore the reservation watch: %s", volume_name(lu->vol),
                 strerror(-rc));
    }
    free(ch);
    return rc;
}

struct resync_job {
    struct io_job job;
    struct scsi_lu *lu;
};

static void resync_job_run(struct io_job *j)
{
    struct resync_job *r = container_of(j, struct resync_job, job);
    struct scsi_pr_shared *sh = r->lu->shared;
    resync(r->lu);
    pthread_mutex_lock(&sh->mu);
    sh->jobs--;
    pthread_cond_broadcast(&sh->cond);
    pthread_mutex_unlock(&sh->mu);
}

/* The pool touches the job after run() (job_complete): free it in done,
 * which runs last (on the pool thread: no owner). */
static void resync_job_free(struct reactor_msg *m)
{
    free(container_of(m, struct resync_job, job.done));
}

static void on_lost(void *arg, int err)
{
    (void)err;
    struct scsi_lu *lu = arg;
    struct scsi_pr_shared *sh = lu->shared;
    atomic_store(&sh->stale, true);
    struct resync_job *r = calloc(1, sizeof *r);
    if (!r)
        return;
    pthread_mutex_lock(&sh->mu);
    if (sh->closing) {
        pthread_mutex_unlock(&sh->mu);
        free(r);
        return;
    }
    sh->jobs++;
    pthread_mutex_unlock(&sh->mu);
    r->lu = lu;
    r->job.run = resync_job_run;
    r->job.done.fn = resync_job_free;
    iopool_submit(&r->job);
}

void scsi_lu_shared_resync(struct scsi_lu *lu)
{
    if (lu->shared)
        on_lost(lu, 0); /* the same as a lost watch: stale, then a resync job */
}

/* ---- open / close ---- */

/* Nobody else serves the LU: it powers on. Without APTPL the registrations
 * and the reservation go; an SPC-2 reservation never survives. */
static int power_on(struct scsi_lu *lu)
{
    for (unsigned round = 0; round < CAS_ROUNDS; round++) {
        struct scsi_pr_change *ch = malloc(sizeof *ch);
        uint64_t seq;
        int rc = ch ? fetch(lu, ch, &seq) : -ENOMEM;
        if (rc < 0) {
            free(ch);
            return rc;
        }
        struct scsi_pr_state *s = &ch->s;
        bool change = s->res2_held || s->swp || (!s->aptpl && (s->nregs || s->held));
        if (!change) {
            install(lu, ch, seq, false);
            free(ch);
            return 0;
        }
        s->res2_held = false;
        s->swp = false; /* mode parameters are not saved */
        if (!s->aptpl) {
            s->nregs = 0;
            s->held = false;
        }
        size_t len;
        char *blob = scsi_pr_state_format(s, NULL, 0, &len);
        rc = blob ? rbd_pr_cas(lu->shared->store, seq, blob, len) : -ENOMEM;
        free(blob);
        if (rc == 0) {
            log_info("scsi: %s: first to serve it: %s", volume_name(lu->vol),
                     s->aptpl ? "SPC-2 reservation, software write protect released (power on)"
                              : "registrations without APTPL cleared (power on)");
            install(lu, ch, seq + 1, false);
        } else {
            scsi_pr_state_free(s);
        }
        free(ch);
        if (rc != -ECANCELED)
            return rc;
    }
    return -EBUSY;
}

int scsi_pr_shared_open(struct scsi_lu *lu)
{
    struct bdev *b = volume_bdev(lu->vol);
    if (!b || !bdev_is_rbd(b))
        return 0;
    struct scsi_pr_shared *sh = calloc(1, sizeof *sh);
    if (!sh)
        return -ENOMEM;
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->cond, NULL);
    atomic_init(&sh->stale, false);
    lu->shared = sh;
    struct rbd_pr_listener l = {.changed = on_changed, .lost = on_lost, .arg = lu};
    unsigned peers = 0;
    int rc = rbd_pr_open(b, &l, &peers, &sh->store);
    if (rc == 0 && peers == 0)
        rc = power_on(lu);
    else if (rc == 0) {
        struct scsi_pr_change *ch = malloc(sizeof *ch);
        uint64_t seq;
        rc = ch ? fetch(lu, ch, &seq) : -ENOMEM;
        if (rc == 0)
            install(lu, ch, seq, false);
        free(ch);
    }
    if (rc < 0) {
        log_error("scsi: %s: cannot load the shared reservations: %s", volume_name(lu->vol),
                  strerror(-rc));
        scsi_pr_shared_close(lu);
        return rc;
    }
    log_info(
        "scsi: %s: reservations shared through %s (%u other daemon%s serving it, seq %" PRIu64 ")",
        volume_name(lu->vol), rbd_pr_name(sh->store), peers, peers == 1 ? "" : "s", lu->pr.seq);
    return 0;
}

void scsi_pr_shared_close(struct scsi_lu *lu)
{
    struct scsi_pr_shared *sh = lu->shared;
    if (!sh)
        return;
    pthread_mutex_lock(&sh->mu);
    sh->closing = true;
    while (sh->jobs)
        pthread_cond_wait(&sh->cond, &sh->mu);
    pthread_mutex_unlock(&sh->mu);
    rbd_pr_close(sh->store); /* no listener call runs after this */
    pthread_cond_destroy(&sh->cond);
    pthread_mutex_destroy(&sh->mu);
    free(sh);
    lu->shared = NULL;
}

/* ---- commands ---- */

struct upd_job {
    struct io_job job;
    struct scsi_lu *lu;
    struct scsi_cmd *c; /* NULL: a background update holding an LU reference */
    scsi_pr_action action;
    int res;
    struct scsi_pr_change ch; /* PR IN: the state read */
    bool read;
    struct reactor_msg *ext_done; /* background: posted when done */
    _Alignas(max_align_t) uint8_t arg[];
};

static void fail(struct upd_job *u, int err)
{
    if (u->c)
        scsi_fail_errno(u->c, err == -ETIMEDOUT ? -EBUSY : err, false);
    u->res = SCSI_PR_FAILED;
}

static void update_run(struct io_job *j)
{
    struct upd_job *u = container_of(j, struct upd_job, job);
    struct scsi_lu *lu = u->lu;
    struct scsi_pr_shared *sh = lu->shared;
    struct scsi_pr_change *ch = &u->ch;

    if (atomic_load(&sh->stale))
        resync(lu);
    if (u->read) {
        uint64_t seq;
        int rc = fetch(lu, ch, &seq);
        if (rc < 0) {
            fail(u, rc);
            return;
        }
        struct scsi_pr_change *cache = malloc(sizeof *cache);
        if (cache && scsi_pr_state_copy(&cache->s, &ch->s) == 0)
            install(lu, cache, seq, false);
        free(cache);
        u->res = SCSI_PR_OK;
        return;
    }
    for (unsigned round = 0; round < CAS_ROUNDS; round++) {
        uint64_t seq;
        int rc = fetch(lu, ch, &seq);
        if (rc < 0) {
            fail(u, rc);
            return;
        }
        if (u->c) {
            u->c->status = SCSI_STATUS_GOOD;
            u->c->sense_len = 0;
        }
        size_t ndrops;
        bool dirty = drops_apply(sh, &ch->s, &ndrops);
        u->res = u->action(u->c, ch, u->arg);
        if (u->res != SCSI_PR_OK && !dirty) {
            drops_done(sh, ndrops);      /* nothing to release in what we read */
            install(lu, ch, seq, false); /* what we read is news too */
            return;
        }
        size_t len;
        char *blob = scsi_pr_state_format(&ch->s, NULL, 0, &len);
        rc = blob ? rbd_pr_cas(sh->store, seq, blob, len) : -ENOMEM;
        free(blob);
        if (rc == -ECANCELED) {
            /* Another daemon changed it first: redo on its state. */
            log_info("scsi: %s: reservation update lost a race at seq %" PRIu64 ", retrying",
                     volume_name(lu->vol), seq);
            scsi_pr_state_free(&ch->s);
            continue;
        }
        if (rc < 0) {
            log_error("scsi: %s: updating the reservation object %s failed: %s",
                      volume_name(lu->vol), rbd_pr_name(sh->store), strerror(-rc));
            scsi_pr_state_free(&ch->s);
            fail(u, rc);
            return;
        }
        drops_done(sh, ndrops);
        char *msg = scsi_pr_state_format(&ch->s, ch, seq + 1, &len);
        install(lu, ch, seq + 1, true);
        unsigned missed = 0;
        rc = msg ? rbd_pr_notify(sh->store, msg, len, &missed) : -ENOMEM;
        free(msg);
        if (rc < 0)
            /* The change is committed; a daemon that did not answer is
             * dead or cut off from the cluster (and so from the image). */
            log_warn("scsi: %s: reservation change %" PRIu64 " not acknowledged by %u daemon%s: "
                     "%s",
                     volume_name(lu->vol), seq + 1, missed, missed == 1 ? "" : "s", strerror(-rc));
        return;
    }
    log_warn("scsi: %s: reservation update lost %u races in a row", volume_name(lu->vol),
             CAS_ROUNDS);
    fail(u, -EBUSY);
}

static void update_done(struct reactor_msg *m)
{
    struct upd_job *u = container_of(m, struct upd_job, job.done);
    struct scsi_cmd *c = u->c;
    if (!c) {
        struct reactor_msg *d = u->ext_done;
        scsi_lu_unref(u->lu);
        free(u);
        if (d)
            d->fn(d);
        return;
    }
    if (u->read && u->res == SCSI_PR_OK) {
        scsi_pr_in_reply(c, &u->ch.s, true);
        scsi_pr_state_free(&u->ch.s);
        free(u);
        return;
    }
    if (u->res == SCSI_PR_CONFLICT) {
        c->status = SCSI_STATUS_RESERVATION_CONFLICT;
        c->sense_len = 0;
    }
    free(u);
    scsi_complete(c);
}

static int act_none(struct scsi_cmd *c, struct scsi_pr_change *ch, const void *arg)
{
    (void)c;
    (void)ch;
    (void)arg;
    return SCSI_PR_NOOP;
}

/* Queue w's release and start a background update committing it (done
 * posted to owner when given). false: out of memory, the release stays
 * queued for the next update of this daemon (done not used). */
static bool drop_res2(struct scsi_lu *lu, const struct scsi_pr_res2_who *w, struct reactor *owner,
                      struct reactor_msg *done);
static struct upd_job *job_new(struct scsi_lu *lu, struct scsi_cmd *c, size_t arg_len);

void scsi_pr_shared_drop_res2(struct scsi_lu *lu, const struct scsi_pr_res2_who *w)
{
    drop_res2(lu, w, NULL, NULL);
}

bool scsi_lu_nexus_release_shared(struct scsi_lu *lu, const struct scsi_nexus *n,
                                  struct reactor *owner, struct reactor_msg *done)
{
    if (!lu || !lu->shared || !n)
        return false;
    struct scsi_pr_res2_who w = {.rel = n->rel_tgt_port_id};
    snprintf(w.port, sizeof w.port, "%s", n->initiator_port);
    pthread_mutex_lock(&lu->mu);
    bool held =
        lu->pr.res2_held && lu->pr.res2_rel == w.rel && strcasecmp(lu->pr.res2_port, w.port) == 0;
    pthread_mutex_unlock(&lu->mu);
    if (!held)
        return false;
    return drop_res2(lu, &w, owner, done);
}

static bool drop_res2(struct scsi_lu *lu, const struct scsi_pr_res2_who *w, struct reactor *owner,
                      struct reactor_msg *done)
{
    struct scsi_pr_shared *sh = lu->shared;
    pthread_mutex_lock(&sh->mu);
    if (sh->ndrops == DROPS_MAX) {
        memmove(sh->drops, sh->drops + 1, (DROPS_MAX - 1) * sizeof *sh->drops);
        sh->ndrops--;
    }
    sh->drops[sh->ndrops++] = *w;
    pthread_mutex_unlock(&sh->mu);
    pthread_mutex_lock(&lu->mu);
    scsi_pr_res2_release(&lu->pr, w); /* this daemon stops enforcing it now */
    pthread_mutex_unlock(&lu->mu);
    struct upd_job *u = job_new(lu, NULL, 0);
    if (!u)
        return false;
    u->action = act_none; /* the update commits the pending drops */
    u->ext_done = done;
    u->job.owner = owner;
    scsi_lu_ref(lu);
    iopool_submit(&u->job);
    return true;
}

/* ---- LU reset: an event for the other daemons ---- */

struct reset_job {
    struct io_job job;
    struct scsi_lu *lu;
    struct reactor_msg *done;
};

static void reset_run(struct io_job *j)
{
    struct reset_job *r = container_of(j, struct reset_job, job);
    static const char msg[] = "blockd-pr 1\nua 2 0 *\n"; /* SCSI_UA_LU_RESET on every nexus */
    _Static_assert(SCSI_UA_LU_RESET == 2, "the event names LU RESET by number");
    unsigned missed = 0;
    int rc = rbd_pr_notify(r->lu->shared->store, msg, sizeof msg - 1, &missed);
    if (rc < 0)
        log_warn("scsi: %s: LU reset not acknowledged by %u daemon%s: %s", volume_name(r->lu->vol),
                 missed, missed == 1 ? "" : "s", strerror(-rc));
}

static void reset_done(struct reactor_msg *m)
{
    struct reset_job *r = container_of(m, struct reset_job, job.done);
    struct reactor_msg *done = r->done;
    scsi_lu_unref(r->lu);
    free(r);
    done->fn(done);
}

bool scsi_lu_reset_shared(struct scsi_lu *lu, struct reactor *owner, struct reactor_msg *done)
{
    if (!lu || !lu->shared)
        return false;
    struct reset_job *r = calloc(1, sizeof *r);
    if (!r)
        return false;
    scsi_lu_ref(lu);
    r->lu = lu;
    r->done = done;
    r->job.run = reset_run;
    r->job.done.fn = reset_done;
    r->job.owner = owner;
    iopool_submit(&r->job);
    return true;
}

static struct upd_job *job_new(struct scsi_lu *lu, struct scsi_cmd *c, size_t arg_len)
{
    struct upd_job *u = calloc(1, sizeof *u + arg_len);
    if (!u)
        return NULL;
    u->lu = lu;
    u->c = c;
    u->job.run = update_run;
    u->job.done.fn = update_done;
    u->job.owner = c ? c->owner : NULL;
    return u;
}

void scsi_pr_shared_update(struct scsi_lu *lu, struct scsi_cmd *c, scsi_pr_action action,
                           const void *arg, size_t arg_len)
{
    struct upd_job *u = job_new(lu, c, arg_len);
    if (!u) {
        if (c) {
            scsi_fail_errno(c, -ENOMEM, false);
            scsi_complete(c);
        }
        return;
    }
    u->action = action;
    if (arg_len)
        memcpy(u->arg, arg, arg_len);
    if (!c)
        scsi_lu_ref(lu);
    iopool_submit(&u->job);
}

void scsi_pr_shared_read(struct scsi_cmd *c)
{
    struct upd_job *u = job_new(c->lu, c, 0);
    if (!u) {
        scsi_fail_errno(c, -ENOMEM, false);
        scsi_complete(c);
        return;
    }
    u->read = true;
    iopool_submit(&u->job);
}
