/*
 * The one transaction path of the configuration.
 *
 * Every writer of the configuration database runs its change inside a
 * struct cfg_tx:
 *
 *   struct cfg_tx tx;
 *   if (cfg_tx_begin(&tx) < 0) ...        db_lock + BEGIN IMMEDIATE
 *   ... SQL through control/db.h ...
 *   cfg_tx_changed(&tx, CFG_ISCSI_TARGET, id, CFG_UPDATED);
 *   rc == 0 ? cfg_tx_commit(&tx) : cfg_tx_abort(&tx);
 *
 * The writer records which configured objects it created, updated or
 * deleted. After COMMIT succeeds the subscribers of EV_CONFIG_COMMITTED
 * (control/events.h) whose kinds intersect the change receive the list
 * (under the DB lock, so they publish in commit order), then, once the DB
 * lock is released, EV_CONFIG_AFTER (work that must not hold the DB lock,
 * e.g. unit attentions that take an LU mutex). After a rollback no event
 * is sent.
 *
 * Nesting: a cfg_tx_begin on a thread that already has a transaction open
 * joins it (a SAVEPOINT): its changes move into the outer transaction when
 * it commits and are dropped when it aborts, and only the outermost commit
 * publishes. Composite calls (share.iscsi.create) are one transaction this
 * way, however many objects they write.
 *
 * Durability: the outermost commit is durable before cfg_tx_commit
 * returns 0. When nothing else holds the DB lock it commits without
 * waiting for the disk, publishes, releases the lock and then syncs
 * (group commit, control/db.h db_sync: writers committing meanwhile share
 * one fdatasync; inside core.bulk the bulk's one sync). When the caller
 * holds the DB lock around the transaction (datasets' writers, which do
 * file work after the commit) the commit itself syncs, as db_commit does.
 *
 * Threads: any API/worker thread; a transaction belongs to the thread
 * that began it.
 */
#ifndef BLOCKD_CONFIG_CFGTX_H
#define BLOCKD_CONFIG_CFGTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The configured objects a change names. The iSCSI global settings are a
 * singleton: their id says which published facet changed
 * (CFG_ISCSI_GLOBAL_BASENAME: every target's IQN; _LISTEN: the portals'
 * port). */
enum cfg_kind {
    CFG_POOL,
    CFG_DATASET,
    CFG_SNAPSHOT,
    CFG_REPLICATION,
    CFG_ISCSI_GLOBAL,
    CFG_ISCSI_PORTAL,
    CFG_ISCSI_INITIATOR,
    CFG_ISCSI_AUTH,
    CFG_ISCSI_TARGET,
    CFG_ISCSI_EXTENT,
    CFG_ISCSI_TARGETEXTENT,
    CFG_NBD_EXPORT,
    CFG_NBD_GLOBAL,
    CFG_NVME_GLOBAL,
    CFG_NVME_SUBSYS,
    CFG_NVME_NAMESPACE,
    CFG_NVME_PORT,
    CFG_NVME_HOST,
    CFG_NVME_HOST_SUBSYS,
    CFG_NVME_PORT_SUBSYS,
    CFG_API_KEY,
    CFG_USER,
    CFG_SERVICE,
    CFG_KIND_COUNT
};
#define CFG_KIND_BIT(k) (1u << (k))
#define CFG_ISCSI_GLOBAL_BASENAME 1
#define CFG_ISCSI_GLOBAL_LISTEN 2
/* An id for "every object of this kind" (a rename moving many rows). */
#define CFG_ID_ALL (-1)

enum cfg_op { CFG_CREATED, CFG_UPDATED, CFG_DELETED };

struct cfg_change {
    enum cfg_kind kind;
    enum cfg_op op;
    int64_t id;
};

/* What a publisher receives: the changes in the order recorded (an object
 * may appear more than once), whether the writer deferred publication
 * (TrueNAS "defer": applied at service.reload), and overflow when a
 * change could not be recorded (out of memory): rebuild everything. */
struct cfg_changes {
    const struct cfg_change *v;
    size_t n;
    bool defer;
    bool overflow;
};

struct cfg_tx {
    struct cfg_tx *outer; /* the transaction this one joined, or NULL */
    struct cfg_change *v;
    size_t n, cap;
    uint32_t kinds; /* CFG_KIND_BIT of every recorded kind */
    bool overflow;
    bool defer;     /* publish at service.reload (only the outermost counts) */
    bool active;    /* between begin and commit/abort */
    bool committed; /* set by cfg_tx_commit once COMMIT succeeded */
};

/* db_lock() and BEGIN IMMEDIATE, or a SAVEPOINT inside the thread's open
 * transaction. 0, or -EIO (logged; the lock is released again). */
int cfg_tx_begin(struct cfg_tx *tx);
/* Record that object (kind, id) was created/updated/deleted by tx. Never
 * fails: out of memory marks the transaction overflowed. */
void cfg_tx_changed(struct cfg_tx *tx, enum cfg_kind kind, int64_t id, enum cfg_op op);
/* Commit (see the header comment). 0; -EIO with tx->committed false when
 * the COMMIT failed (rolled back, nothing published); -EIO with
 * tx->committed true when it was committed but the fdatasync failed
 * (published, not durable). Always ends tx and releases its lock. */
int cfg_tx_commit(struct cfg_tx *tx);
/* Roll back (the savepoint only when nested); nothing is published. */
void cfg_tx_abort(struct cfg_tx *tx);
/* The innermost open transaction of the calling thread, or NULL. */
struct cfg_tx *cfg_tx_current(void);

/* For an EV_CONFIG_AFTER subscriber that finds the change it just saw committed rejected
 * elsewhere (a gateway group's shared configuration store: the name was
 * taken by another member at the same time, gwsync/gwconfig.h): the
 * cfg_tx_commit delivering the event returns -err (tx->committed stays true)
 * and cfg_tx_after_message() names the reason. The first report of a
 * commit wins. Calling thread only (the committing one). */
void cfg_tx_after_fail(int err, const char *message);
/* The message of the last cfg_tx_after_fail on this thread ("" if none). */
const char *cfg_tx_after_message(void);

/* Store one key/value setting (control/db.h db_setting_set) in its own
 * transaction, recording (kind, id) updated. 0 or -errno. */
int cfg_setting_put(const char *key, const char *value, enum cfg_kind kind, int64_t id);

/* Whether changes holds an object of kind (any op, any id). */
bool cfg_changes_has(const struct cfg_changes *changes, enum cfg_kind kind);

#endif
