/* The one transaction path: nesting, the change list, and the commit's
 * events (cfgtx.h, events.h). */
#include "control/cfgtx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/events.h"
#include "core/log.h"

static __thread struct cfg_tx *tls_current;
/* An after hook's rejection of the commit being run (cfg_tx_after_fail). */
static __thread int tls_after_err;
static __thread char tls_after_msg[256];

void cfg_tx_after_fail(int err, const char *message)
{
    if (tls_after_err)
        return;
    tls_after_err = err > 0 ? -err : err;
    snprintf(tls_after_msg, sizeof(tls_after_msg), "%s", message ? message : "");
}

const char *cfg_tx_after_message(void)
{
    return tls_after_msg;
}

struct cfg_tx *cfg_tx_current(void)
{
    return tls_current;
}

int cfg_tx_begin(struct cfg_tx *tx)
{
    memset(tx, 0, sizeof(*tx));
    db_lock();
    if (db_begin() < 0) {
        db_unlock();
        return -EIO;
    }
    tx->outer = tls_current;
    tx->active = true;
    tls_current = tx;
    return 0;
}

static void changes_push(struct cfg_tx *tx, const struct cfg_change *c)
{
    if (tx->n == tx->cap) {
        size_t cap = tx->cap ? tx->cap * 2 : 8;
        struct cfg_change *v = realloc(tx->v, cap * sizeof(*v));
        if (!v) {
            /* The subscribers rebuild everything instead. */
            tx->overflow = true;
            return;
        }
        tx->v = v;
        tx->cap = cap;
    }
    tx->v[tx->n++] = *c;
    tx->kinds |= CFG_KIND_BIT(c->kind);
}

void cfg_tx_changed(struct cfg_tx *tx, enum cfg_kind kind, int64_t id, enum cfg_op op)
{
    changes_push(tx, &(struct cfg_change){.kind = kind, .op = op, .id = id});
}

bool cfg_changes_has(const struct cfg_changes *changes, enum cfg_kind kind)
{
    if (changes->overflow)
        return true;
    for (size_t i = 0; i < changes->n; i++)
        if (changes->v[i].kind == kind)
            return true;
    return false;
}

/* Leave tx (committed or not): the thread's current transaction is the
 * outer one again, and the lock tx took is released. */
static void tx_end(struct cfg_tx *tx)
{
    tls_current = tx->outer;
    tx->active = false;
    free(tx->v);
    tx->v = NULL;
    tx->n = tx->cap = 0;
}

/* A nested commit: the savepoint is released and the changes join the
 * outer transaction, which publishes them if it commits. */
static int tx_commit_nested(struct cfg_tx *tx)
{
    int rc = db_commit();
    if (rc == 0) {
        for (size_t i = 0; i < tx->n; i++)
            changes_push(tx->outer, &tx->v[i]);
        tx->outer->overflow |= tx->overflow;
        tx->committed = true;
    } else {
        db_rollback();
    }
    tx_end(tx);
    db_unlock();
    return rc;
}

/* Under the DB lock: EV_CONFIG_COMMITTED (control/events.h) to every
 * subscriber whose kinds were changed; returns the set it reached (their
 * EV_CONFIG_AFTER is due). */
static uint32_t publish(const struct cfg_tx *tx)
{
    struct cfg_changes ch = {.v = tx->v, .n = tx->n, .defer = tx->defer, .overflow = tx->overflow};
    return events_config_committed(&ch, tx->kinds);
}

static void run_after(uint32_t ran)
{
    if (!ran)
        return;
    if (db_lock_depth() > 0) {
        /* The caller holds the DB lock around the transaction: the hooks'
         * queued work waits for the next transaction's (or a publisher's
         * own) drain instead of risking a lock inversion here. */
        log_debug("cfgtx: publication side effects wait (DB lock still held)");
        return;
    }
    events_config_after(ran);
}

int cfg_tx_commit(struct cfg_tx *tx)
{
    if (tx->outer)
        return tx_commit_nested(tx);
    /* The caller holds the lock around us: commit durably now (its file
     * work after the commit relies on it). Otherwise group commit. */
    bool caller_locked = db_lock_depth() > 1;
    uint64_t seq = 0;
    int rc = caller_locked ? db_commit() : db_commit_nosync(&seq);
    uint32_t ran = 0;
    if (rc < 0) {
        db_rollback();
    } else {
        tx->committed = true;
        ran = publish(tx);
    }
    tx_end(tx);
    db_unlock();
    /* An after hook may itself commit a transaction (the gateway sync's
     * bookkeeping): this one's hooks' report is kept apart from it. */
    int outer_err = tls_after_err;
    tls_after_err = 0;
    run_after(ran);
    int after_err = tls_after_err;
    tls_after_err = outer_err;
    if (rc == 0 && db_sync(seq) < 0)
        rc = -EIO;
    if (rc == 0 && after_err)
        rc = after_err;
    return rc;
}

void cfg_tx_abort(struct cfg_tx *tx)
{
    db_rollback();
    tx_end(tx);
    db_unlock();
}

int cfg_setting_put(const char *key, const char *value, enum cfg_kind kind, int64_t id)
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
    cfg_tx_changed(&tx, kind, id, CFG_UPDATED);
    return cfg_tx_commit(&tx);
}
