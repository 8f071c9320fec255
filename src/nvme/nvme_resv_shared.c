/*
 * NVMe reservations of a namespace over an RBD image: the state lives in
 * the cluster next to the image (store/rbd_pr.h, the object
 * "blockd.nvme-resv.<image id>"), so every blockd daemon that serves the
 * image -- the members of a gateway group, or two daemons exporting the
 * same image -- enforces the same registrations and reservation. The way
 * SCSI's shared persistent reservations work (scsi/scsi_pr_shared.c):
 *
 *   - A Register, Acquire, Release or Set Features Reservation Persistence
 *     runs on the I/O pool: read the state and its seq, apply the command
 *     (nvme_resv.c's rules) to that copy, write it back with a
 *     compare-and-swap on the seq (a concurrent change through another
 *     daemon makes it start over: nothing is lost), then notify every
 *     daemon and wait for their acknowledgements. Each daemon installs the
 *     new state in its cache before it acknowledges, so when the command
 *     completes the change is enforced everywhere.
 *   - I/O checks read the cache (r->s under r->mu): no cluster round trip
 *     per command. Report reads the cluster, so it is authoritative even
 *     after a missed notify.
 *   - A lost watch is re-registered and the state read again on the pool.
 *   - Persist Through Power Loss: the state is in the cluster either way.
 *     Without PTPL it is cleared when the namespace "powers on": a daemon
 *     opens it and no other daemon watches the object.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_resv.h"
#include "nvme/nvme_resv_priv.h"
#include "store/rbd_pr.h"

/* Compare-and-swap rounds before a command gives up (each round is one
 * read and one write to the cluster). */
#define CAS_ROUNDS 64

struct nvme_resv_shared {
    struct nvme_resv *r; /* its owner (for the resync job) */
    struct rbd_pr *store;
    struct io_job resync; /* re-watch and reload after a lost watch */
    atomic_bool resyncing;
};

/* One command's trip to the pool. */
struct resv_job {
    struct io_job job;
    struct nvme_resv *r; /* a reference */
    struct nvme_cmd *cmd;
    struct resv_args a;
    uint16_t status;
    struct resv_state s, before;
};

/* Read and parse the cluster's state (pool or control thread). */
static int fetch(struct nvme_resv *r, struct resv_state *s, uint64_t *seq)
{
    char *blob;
    size_t len;
    int rc = rbd_pr_read(r->shared->store, &blob, &len, seq);
    if (rc < 0)
        return rc;
    rc = resv_parse(s, len ? blob : "", NULL);
    free(blob);
    if (rc < 0)
        log_error("nvme: namespace %" PRId64 ": the reservation object %s does not parse", r->ns_id,
                  rbd_pr_name(r->shared->store));
    return rc;
}

/* ---- listener (librados threads) ---- */

/* Who made the change a notify carries ("by HOSTID OPCODE ACTION"). */
static bool by(const char *text, struct resv_args *a)
{
    const char *l = strstr(text, "\nby ");
    char hex[33];
    unsigned op, action;
    memset(a, 0, sizeof(*a));
    if (!l || sscanf(l + 4, "%32s %u %u", hex, &op, &action) != 3 || strlen(hex) != 32 ||
        resv_hex_get(hex, a->hostid) < 0)
        return false;
    a->op = (uint8_t)op;
    a->action = (uint8_t)action;
    return true;
}

/* Install a peer's change; tell this daemon's controllers what it did to
 * their hosts (the issuing daemon told its own: self). */
static void on_changed(void *arg, const void *msg, size_t len, bool self)
{
    struct nvme_resv *r = arg;
    if (!len)
        return; /* a daemon counting its peers */
    char *text = strndup(msg, len);
    struct resv_state *s = malloc(2 * sizeof(*s));
    struct resv_note *notes = malloc(RESV_NOTES_MAX * sizeof(*notes));
    struct resv_args a;
    uint64_t seq = 0;
    if (!text || !s || !notes || resv_parse(s, text, &seq) < 0 || !seq)
        log_warn("nvme: namespace %" PRId64 ": ignoring a malformed reservation notify", r->ns_id);
    else if (resv_install(r, s, seq, s + 1) && !self && by(text, &a))
        resv_notify(r, notes, resv_notes(s + 1, s, &a, notes));
    free(notes);
    free(s);
    free(text);
}

static void resync_run(struct io_job *j)
{
    struct nvme_resv_shared *sh = container_of(j, struct nvme_resv_shared, resync);
    struct nvme_resv *r = sh->r;
    struct resv_state *s = malloc(sizeof(*s));
    uint64_t seq;
    int rc = rbd_pr_rewatch(sh->store);
    if (rc == 0 && s && (rc = fetch(r, s, &seq)) == 0)
        resv_install(r, s, seq, NULL);
    free(s);
    if (rc < 0)
        log_warn("nvme: namespace %" PRId64 ": reservation object %s: cannot watch again: %s",
                 r->ns_id, rbd_pr_name(sh->store), strerror(-rc));
}

/* After run(), the last the pool touches of the job (iopool.h): only now
 * may final_run free it. */
static void resync_done(struct reactor_msg *m)
{
    struct nvme_resv_shared *sh = container_of(m, struct nvme_resv_shared, resync.done);
    atomic_store(&sh->resyncing, false);
}

static void on_lost(void *arg, int err)
{
    struct nvme_resv *r = arg;
    struct nvme_resv_shared *sh = r->shared;
    (void)err;
    if (atomic_exchange(&sh->resyncing, true))
        return;
    sh->resync.run = resync_run;
    sh->resync.owner = NULL;
    sh->resync.done.fn = resync_done;
    iopool_submit(&sh->resync);
}

/* ---- open and close ---- */

/* Power on: without PTPL and with no other daemon serving the image, the
 * state goes (what a namespace's power loss does). Control thread. */
static void power_on(struct nvme_resv *r, unsigned peers)
{
    struct resv_state *s = calloc(1, sizeof(*s)), *empty = calloc(1, sizeof(*s));
    uint64_t seq = 0;
    if (!s || !empty || fetch(r, s, &seq) < 0)
        goto out;
    if (!s->ptpl && peers == 0 && (s->nregs || s->type)) {
        char *t = resv_format(empty, 0);
        if (t && rbd_pr_cas(r->shared->store, seq, t, strlen(t)) == 0) {
            *s = *empty;
            seq++;
            log_info("nvme: namespace %" PRId64 ": reservations without PTPL cleared at power on",
                     r->ns_id);
        }
        free(t);
    }
    resv_install(r, s, seq ? seq : 1, NULL);
out:
    free(s);
    free(empty);
}

int resv_shared_open(struct nvme_resv *r, struct volume *vol)
{
    struct nvme_resv_shared *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return -ENOMEM;
    struct rbd_pr_listener l = {.changed = on_changed, .lost = on_lost, .arg = r};
    unsigned peers = 0;
    r->shared = sh;
    sh->r = r;
    int rc = rbd_pr_open_as(volume_bdev(vol), RBD_PR_NVME, &l, &peers, &sh->store);
    if (rc < 0) {
        log_warn("nvme: namespace %" PRId64 " (%s): no reservations: cannot open their object: %s",
                 r->ns_id, volume_name(vol), strerror(-rc));
        r->shared = NULL;
        free(sh);
        return rc;
    }
    power_on(r, peers);
    /* (not SCSI's "reservations shared through": tests wait for that line) */
    log_info("nvme: namespace %" PRId64 " (%s): NVMe reservations kept in %s (%u other "
             "daemon(s) serving it)",
             r->ns_id, volume_name(vol), rbd_pr_name(sh->store), peers);
    return 0;
}

static void final_run(struct io_job *j)
{
    struct nvme_resv *r = container_of(j, struct nvme_resv, final_job);
    struct nvme_resv_shared *sh = r->shared;
    rbd_pr_close(sh->store); /* no listener call, so no new resync, after this */
    while (atomic_load(&sh->resyncing)) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The pool is done with the job (iopool.h: it reads it after run()). */
static void final_done(struct reactor_msg *m)
{
    struct nvme_resv *r = container_of(m, struct nvme_resv, final_job.done);
    free(r->shared);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void resv_shared_free(struct nvme_resv *r)
{
    r->final_job.run = final_run;
    r->final_job.owner = NULL;
    r->final_job.done.fn = final_done;
    iopool_submit(&r->final_job);
}

/* ---- commands ---- */

/* The change is committed as seq: every daemon enforces it before the
 * command completes (the notify returns once each acknowledged), and the
 * hosts it touched hear of it. */
static void notify(struct resv_job *rj, uint64_t seq)
{
    struct nvme_resv *r = rj->r;
    char *state = resv_format(&rj->s, seq), *msg = NULL, hex[33];
    resv_hex_put(hex, rj->a.hostid);
    unsigned missed = 0;
    if (state && asprintf(&msg, "%sby %s %u %u\n", state, hex, rj->a.op, rj->a.action) > 0 &&
        rbd_pr_notify(r->shared->store, msg, strlen(msg), &missed) == -ETIMEDOUT)
        log_warn("nvme: namespace %" PRId64 ": %u daemon(s) did not acknowledge a "
                 "reservation change in time",
                 r->ns_id, missed);
    free(msg);
    free(state);
    resv_install(r, &rj->s, seq, NULL);
    struct resv_note *notes = malloc(RESV_NOTES_MAX * sizeof(*notes));
    if (notes)
        resv_notify(r, notes, resv_notes(&rj->before, &rj->s, &rj->a, notes));
    free(notes);
}

/* Read, apply, compare-and-swap, notify (pool thread): the status. */
static uint16_t change(struct resv_job *rj)
{
    struct nvme_resv *r = rj->r;
    struct rbd_pr *p = r->shared->store;
    for (int round = 0; round < CAS_ROUNDS; round++) {
        uint64_t seq;
        if (fetch(r, &rj->s, &seq) < 0)
            return NVME_SC_INTERNAL;
        resv_install(r, &rj->s, seq, NULL);
        if (rj->a.op == RESV_OP_REPORT)
            return 0;
        rj->before = rj->s;
        uint16_t st = resv_apply(&rj->s, &rj->a);
        if (st || memcmp(&rj->before, &rj->s, sizeof(rj->s)) == 0)
            return st;
        char *text = resv_format(&rj->s, 0);
        int rc = text ? rbd_pr_cas(p, seq, text, strlen(text)) : -ENOMEM;
        free(text);
        if (rc == -ECANCELED)
            continue; /* another daemon changed it first: start over */
        if (rc < 0) {
            log_error("nvme: namespace %" PRId64 ": cannot write %s: %s", r->ns_id, rbd_pr_name(p),
                      strerror(-rc));
            return NVME_SC_INTERNAL;
        }
        notify(rj, seq + 1);
        return 0;
    }
    log_warn("nvme: namespace %" PRId64 ": reservation change lost %d races in a row", r->ns_id,
             CAS_ROUNDS);
    return NVME_SC_INTERNAL;
}

static void job_run(struct io_job *j)
{
    struct resv_job *rj = container_of(j, struct resv_job, job);
    rj->status = change(rj);
}

/* On the command's reactor. */
static void job_done(struct reactor_msg *m)
{
    struct resv_job *rj = container_of(m, struct resv_job, job.done);
    struct nvme_cmd *cmd = rj->cmd;
    if (rj->a.op == RESV_OP_REPORT && rj->status == 0)
        resv_report_fill(&rj->s, cmd->buf, cmd->out_len);
    cmd->status = rj->status;
    if (rj->status)
        cmd->out_len = 0;
    nvme_cmd_complete(cmd);
    nvme_resv_unref(rj->r);
    free(rj);
}

void resv_shared_run(struct nvme_resv *r, struct nvme_cmd *cmd, const struct resv_args *a)
{
    struct resv_job *rj = calloc(1, sizeof(*rj));
    if (!rj) {
        cmd->status = NVME_SC_INTERNAL;
        return nvme_cmd_complete(cmd);
    }
    atomic_fetch_add(&r->refs, 1);
    rj->r = r;
    rj->cmd = cmd;
    rj->a = *a;
    rj->job.run = job_run;
    rj->job.owner = cmd->q->c->reactor;
    rj->job.done.fn = job_done;
    cmd->state = CMD_EXEC;
    iopool_submit(&rj->job);
}
