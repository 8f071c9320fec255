/*
 * pool.dataset.promote (and zfs.dataset.promote): a clone stops depending
 * on its origin snapshot, as `zfs promote` does.
 *
 * Clone C of O@s: the snapshots of O up to and including s (by creation
 * order, the snapshot id) move to C, C takes over O's origin (none, or
 * the snapshot O was cloned from), and O becomes a clone of C@s. Other
 * clones of the moved snapshots follow them (their origin names change
 * with the snapshots'). Afterwards O can be deleted.
 *
 * In blockd a clone is already a file of its own (a reflink or a sparse
 * copy), so no data moves: the moved snapshots' files are renamed from
 * "<O>@<snap>" to "<C>@<snap>" inside the transaction that moves their
 * rows. Only when O and C are in different pools (which ZFS does not
 * allow, blockd does) are the snapshot files copied — a job with progress,
 * reflinked where the filesystem can — and the originals removed once the
 * promote is committed. Shares of the moved snapshots follow them (rename
 * hooks); open snapshot volumes stay open and are re-keyed.
 *
 * On backends with a flatten op (RBD pools) the clone's data is what
 * depends on the origin, not its name: the promote flattens the clone (a
 * job with progress: the origin's data is copied into it), after which
 * it has no origin and the origin can be deleted. The origin's snapshots
 * stay with the origin: an RBD snapshot cannot move to another image.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "core/log.h"
#include "core/util.h"
#include "store/poolfs.h"

struct promote_snap {
    int64_t id;
    char *name;
    char from[PATH_MAX], to[PATH_MAX];
    bool moved; /* renamed or copied into place */
};

static void snaps_free(struct promote_snap *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].name);
    free(v);
}

/* The snapshots being collected. */
struct snaps_list {
    struct promote_snap *v;
    size_t n;
};

/* Append s (its id and name) to the list arg. 0 or -ENOMEM. */
static int snaps_add(const struct ds_snap *s, void *arg)
{
    struct snaps_list *l = arg;
    struct promote_snap *grown = realloc(l->v, (l->n + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    l->v = grown;
    memset(&grown[l->n], 0, sizeof(grown[l->n]));
    grown[l->n].id = s->id;
    grown[l->n].name = strdup(s->name);
    if (!grown[l->n].name)
        return -ENOMEM;
    l->n++;
    return 0;
}

/* The snapshots of dataset_id up to and including upto_id. */
static int snaps_upto(int64_t dataset_id, int64_t upto_id, struct promote_snap **out, size_t *n)
{
    struct snaps_list l = {0};
    int rc = ds_snapshot_each_upto(dataset_id, upto_id, snaps_add, &l);

    if (rc < 0) {
        snaps_free(l.v, l.n);
        l.v = NULL;
        l.n = 0;
    }
    *out = l.v;
    *n = l.n;
    return rc;
}

/* Re-key the open volumes of the moved snapshots from origin to clone
 * (back: the other way). DB locked. */
static void promote_cache_rename(const struct ds_row *origin, const struct ds_row *clone,
                                 const struct promote_snap *snaps, size_t nsnaps, bool back)
{
    for (size_t i = 0; i < nsnaps; i++) {
        char o[DS_NAME_BUF * 2], n[DS_NAME_BUF * 2];
        snprintf(o, sizeof(o), "%s@%s", origin->name, snaps[i].name);
        snprintf(n, sizeof(n), "%s@%s", clone->name, snaps[i].name);
        ds_cache_rename(back ? n : o, back ? o : n, false);
    }
}

/* The id argument (api_arg check): a dataset name. */
static int promote_id_check(struct api_call *call, json_t *jid)
{
    char field[96];

    if (json_is_null(jid))
        jid = NULL;
    snprintf(field, sizeof(field), "%s.id", api_call_method(call));
    if (!json_is_string(jid) || strlen(json_string_value(jid)) != json_string_length(jid) ||
        json_string_length(jid) > NAME_DATASET_MAX) {
        api_verr(call, field, EINVAL,
                 jid ? "Input should be a valid dataset name" : "Field required");
        return -1;
    }
    return 0;
}

/* One promote's state, shared by its steps. */
struct promote {
    struct api_call *call;
    json_t *params;
    const char *id; /* the clone's name (checked by promote_id_check) */
    char origin_full[DS_NAME_BUF * 2];
    struct ds_row clone, origin;
    struct ds_snap osnap; /* the clone's origin snapshot */
    struct ds_pool cpool, opool;
    struct promote_snap *snaps; /* the origin's snapshots that move */
    size_t nsnaps;
    bool cross_pool, committed;
};

/* Every refusal has zfs promote's shape: the call's error, returned. */
static int promote_fail(struct promote *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int promote_fail(struct promote *p, int err, const char *fmt, ...)
{
    char msg[8192];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return api_error(p->call, err, "Failed to promote dataset: cannot promote '%s': %s", p->id,
                     msg);
}

/* DB locked: the clone, its origin snapshot and dataset, the origin's
 * snapshots up to that one and both pools, refusing what zfs refuses.
 * 0 or the call's error. */
static int promote_load(struct promote *p)
{
    char poolname[DS_NAME_BUF];
    int rc;

    if (strchr(p->id, '@'))
        return promote_fail(p, EINVAL, "snapshots cannot be promoted");
    rc = ds_dataset_get(p->id, &p->clone);
    if (rc == -ENOENT)
        return promote_fail(p, ENOENT, "dataset does not exist");
    if (rc < 0)
        return promote_fail(p, -rc, "%s", strerror(-rc));
    if (!p->clone.origin_id)
        return promote_fail(p, EINVAL, "not a cloned filesystem");
    rc = ds_snapshot_get_id(p->clone.origin_id, &p->osnap);
    if (rc == 0)
        rc = ds_dataset_get_id(p->osnap.dataset_id, &p->origin);
    if (rc < 0)
        return promote_fail(p, -rc, "cannot read its origin: %s", strerror(-rc));
    snprintf(p->origin_full, sizeof(p->origin_full), "%s@%s", p->origin.name, p->osnap.name);
    rc = snaps_upto(p->origin.id, p->osnap.id, &p->snaps, &p->nsnaps);
    if (rc < 0)
        return promote_fail(p, -rc, "cannot list the snapshots of %s: %s", p->origin.name,
                            strerror(-rc));
    ds_pool_of(p->clone.name, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &p->cpool);
    if (rc == 0) {
        ds_pool_of(p->origin.name, poolname, sizeof(poolname));
        rc = ds_pool_get(poolname, &p->opool);
    }
    if (rc < 0)
        return promote_fail(p, -rc, "cannot read pool %s: %s", poolname, strerror(-rc));
    return 0;
}

/* DB locked (released during the job): a backend with a flatten op
 * copies the origin's data into the clone, then the clone's origin is
 * cleared. Nothing here touches other shares' names: a plain transaction
 * after the job, no rename events to send, no snapshot moved (so the
 * caller's exit has nothing to undo). 0 or the call's error. */
static int promote_flatten(struct promote *p)
{
    struct cfg_tx tx;
    int rc;

    db_unlock();
    rc = ds_flatten_job(p->call, p->params, &p->cpool, p->clone.name);
    db_lock();
    if (rc < 0)
        return -1; /* the error is set */
    rc = cfg_tx_begin(&tx);
    if (rc == 0) {
        rc = ds_dataset_set_origin(p->clone.id, 0);
        cfg_tx_changed(&tx, CFG_DATASET, p->clone.id, CFG_UPDATED);
        if (rc == 0)
            rc = cfg_tx_commit(&tx);
        else
            cfg_tx_abort(&tx);
    }
    if (rc < 0)
        return promote_fail(p, -rc,
                            "the clone is flattened but its origin could not be cleared: %s",
                            strerror(-rc));
    log_info("datasets: promoted %s (flattened: no longer a clone of %s; peer %s)", p->id,
             p->origin_full, api_call_peer(p->call));
    return 0;
}

/* DB locked: nothing in the clone's way, neither a snapshot of the same
 * name nor a file where a moved snapshot's goes; fills each snapshot's
 * from/to paths. 0 or the call's error. */
static int promote_check_room(struct promote *p)
{
    struct ds_snap other;
    struct stat st;
    int rc;

    for (size_t i = 0; i < p->nsnaps; i++) {
        if (ds_snapshot_get(p->clone.name, p->snaps[i].name, &other) == 0)
            return promote_fail(p, EEXIST,
                                "snapshot name '%s' from origin conflicts with '%s@%s' from target",
                                p->snaps[i].name, p->clone.name, p->snaps[i].name);
    }
    for (size_t i = 0; i < p->nsnaps; i++) {
        struct promote_snap *s = &p->snaps[i];
        rc = ds_path(&p->opool, p->origin.name, s->name, s->from, sizeof(s->from));
        if (rc == 0)
            rc = ds_path(&p->cpool, p->clone.name, s->name, s->to, sizeof(s->to));
        if (rc < 0)
            return promote_fail(p, -rc, "%s", strerror(-rc));
        if (poolfs_stat(s->to, &st) == 0)
            return promote_fail(p, EEXIST, "a file named %s is in the way", s->to);
    }
    return 0;
}

/* DB locked (released during the copies, as a clone's): across pools the
 * snapshot files are copied, a job each; the copies made are marked
 * moved so that a failure removes them. 0 or -1 (the error is set). */
static int promote_copy(struct promote *p)
{
    int rc = 0;

    db_unlock();
    for (size_t i = 0; i < p->nsnaps; i++) {
        char what[DS_NAME_BUF * 2];
        snprintf(what, sizeof(what), "%s@%s", p->clone.name, p->snaps[i].name);
        if (ds_copy_file_job(p->call, p->params, "promote", what, p->snaps[i].from, p->snaps[i].to,
                             NULL) < 0) {
            rc = -1;
            break;
        }
        p->snaps[i].moved = true;
    }
    db_lock();
    return rc;
}

/* Inside the transaction: the snapshot rows move to the clone, C takes
 * over O's origin, O becomes a clone of C@s, and shares of the moved
 * snapshots follow their new names. 0 or -errno. */
static int promote_move_rows(struct promote *p)
{
    int rc = ds_snapshot_move(p->origin.id, p->clone.id, p->osnap.id);

    if (rc == 0)
        rc = ds_dataset_set_origin(p->clone.id, p->origin.origin_id);
    if (rc == 0)
        rc = ds_dataset_set_origin(p->origin.id, p->osnap.id);
    for (size_t i = 0; rc == 0 && i < p->nsnaps; i++) {
        char o[DS_NAME_BUF * 2], n[DS_NAME_BUF * 2];
        snprintf(o, sizeof(o), "%s@%s", p->origin.name, p->snaps[i].name);
        snprintf(n, sizeof(n), "%s@%s", p->clone.name, p->snaps[i].name);
        rc = ds_rename_event_update(o, n, false);
    }
    return rc;
}

/* Inside the transaction, within one pool: the snapshot files are
 * renamed (poolfs: confined to the pool, no symlink followed; the
 * target's absence was checked under ds_ops_lock). 0 or -errno. */
static int promote_rename_files(struct promote *p)
{
    int rc = 0;

    for (size_t i = 0; rc == 0 && !p->cross_pool && i < p->nsnaps; i++) {
        struct promote_snap *s = &p->snaps[i];
        rc = poolfs_rename(s->from, s->to, RENAME_NOREPLACE);
        if (rc == -EINVAL)
            rc = poolfs_rename(s->from, s->to, 0);
        if (rc < 0)
            log_error("datasets: promote %s: rename %s to %s: %s", p->id, s->from, s->to,
                      strerror(-rc));
        else
            s->moved = true;
    }
    return rc;
}

/* DB locked: the one transaction of a moving promote. The cache follows
 * before the commit publishes (front-ends reopen exports by their new
 * names) and is put back if the commit fails. 0 or the call's error. */
static int promote_commit(struct promote *p)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc < 0)
        return promote_fail(p, -rc, "%s", strerror(-rc));
    cfg_tx_changed(&tx, CFG_DATASET, p->clone.id, CFG_UPDATED);
    cfg_tx_changed(&tx, CFG_DATASET, p->origin.id, CFG_UPDATED);
    rc = promote_move_rows(p);
    if (rc == 0)
        rc = promote_rename_files(p);
    if (rc == 0) {
        promote_cache_rename(&p->origin, &p->clone, p->snaps, p->nsnaps, false);
        rc = cfg_tx_commit(&tx);
        if (rc < 0)
            promote_cache_rename(&p->origin, &p->clone, p->snaps, p->nsnaps, true);
    } else {
        cfg_tx_abort(&tx);
    }
    if (rc < 0)
        return promote_fail(p, -rc, "%s", strerror(-rc));
    p->committed = true;
    return 0;
}

/* DB locked: the snapshots move with their files (renamed in one pool,
 * copied across pools). 0 or the call's error. */
static int promote_move(struct promote *p)
{
    int rc = promote_check_room(p);

    if (rc < 0)
        return rc;
    p->cross_pool = p->cpool.id != p->opool.id;
    if (p->cross_pool && promote_copy(p) < 0)
        return -1; /* the error is set; copies made so far are removed by the caller */
    return promote_commit(p);
}

/* After a commit: durable renames; a cross-pool promote's originals go. */
static void promote_settle(struct promote *p)
{
    for (size_t i = 0; i < p->nsnaps; i++) {
        int urc = p->cross_pool ? poolfs_unlink(p->snaps[i].from) : 0;
        if (urc < 0 && urc != -ENOENT)
            log_error("datasets: unlink %s: %s", p->snaps[i].from, strerror(-urc));
    }
    for (int k = 0; p->nsnaps && k < 2; k++) {
        const char *path = k ? p->snaps[0].from : p->snaps[0].to;
        int frc = poolfs_fsync_parent(path);
        if (frc < 0)
            log_error("datasets: fsync the directory of %s: %s", path, strerror(-frc));
    }
    log_info("datasets: promoted %s (was a clone of %s; %zu snapshot(s) moved from %s%s; "
             "peer %s)",
             p->id, p->origin_full, p->nsnaps, p->origin.name, p->cross_pool ? " by copy" : "",
             api_call_peer(p->call));
}

/* Without a commit: renamed files go back, copies are removed. */
static void promote_undo(struct promote *p)
{
    for (size_t i = p->nsnaps; i-- > 0;) {
        struct promote_snap *s = &p->snaps[i];
        if (!s->moved)
            continue;
        int urc = p->cross_pool ? poolfs_unlink(s->to) : poolfs_rename(s->to, s->from, 0);
        if (urc < 0)
            log_error("datasets: promote %s: cannot undo %s: %s", p->id, s->to, strerror(-urc));
    }
}

/* pool.dataset.promote: load and check under the rename-hook, ops and DB
 * locks, then flatten (backends that can) or move the snapshots in one
 * transaction; one exit settles or undoes the files and drops the
 * locks. */
static int m_dataset_promote(struct api_call *call, json_t *params, json_t **result)
{
    struct promote p = {.call = call, .params = params};
    int rc;

    p.id = json_string_value(api_param(params, 0)); /* promote_id_check */
    ds_rename_event_lock();
    ds_ops_lock();
    db_lock();
    rc = promote_load(&p);
    if (rc == 0)
        rc = ds_backend_of(&p.cpool)->flatten ? promote_flatten(&p) : promote_move(&p);
    db_unlock();
    if (p.committed)
        promote_settle(&p);
    else
        promote_undo(&p);
    ds_ops_unlock();
    ds_rename_event_done(p.committed);
    if (p.committed) /* the origin's clone may now be its only dependant's */
        ds_snapshot_reap_deferred(false, api_call_peer(call));
    snaps_free(p.snaps, p.nsnaps);
    if (rc == 0)
        *result = json_null();
    return rc;
}

static const struct api_arg promote_args[] = {
    {.name = "id", .type = API_T_STRING, .check = promote_id_check}};

const struct api_method ds_promote_methods[] = {
    {"pool.dataset.promote", NULL,
     "Make a clone independent of its origin snapshot (the origin's older snapshots move to it)",
     m_dataset_promote, API_SHARE, API_ARGS(promote_args)},
    {"zfs.dataset.promote", NULL, "Same as pool.dataset.promote", m_dataset_promote, API_SHARE,
     API_ARGS(promote_args)},
};
const size_t ds_promote_method_count = ARRAY_SIZE(ds_promote_methods);
