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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/validate.h"
#include "config/cfgtx.h"
#include "config/db.h"
#include "config/ds_internal.h"
#include "config/dsbackend.h"
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

/* The snapshots of dataset_id up to and including upto_id. */
static int snaps_upto(int64_t dataset_id, int64_t upto_id, struct promote_snap **out, size_t *n)
{
    sqlite3_stmt *st;
    int rc =
        db_stmt("SELECT id, name FROM snapshots WHERE dataset_id = ? AND id <= ? ORDER BY id", &st);

    *out = NULL;
    *n = 0;
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, dataset_id);
    sqlite3_bind_int64(st, 2, upto_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct promote_snap *grown = realloc(*out, (*n + 1) * sizeof(**out));
        if (!grown) {
            rc = SQLITE_NOMEM;
            break;
        }
        *out = grown;
        memset(&grown[*n], 0, sizeof(grown[*n]));
        grown[*n].id = sqlite3_column_int64(st, 0);
        grown[*n].name = strdup((const char *)sqlite3_column_text(st, 1));
        if (!grown[*n].name) {
            rc = SQLITE_NOMEM;
            break;
        }
        (*n)++;
    }
    db_stmt_done(st);
    if (rc != SQLITE_DONE) {
        snaps_free(*out, *n);
        *out = NULL;
        *n = 0;
        return rc == SQLITE_NOMEM ? -ENOMEM : -db_errno();
    }
    return 0;
}

static int exec_ids(const char *sql, int64_t a, int64_t b, int64_t c)
{
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    sqlite3_bind_int64(st, 3, c);
    rc = db_step_done(st);
    db_stmt_done(st);
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

static int m_dataset_promote(struct api_call *call, json_t *params, json_t **result)
{
    json_t *jid = api_param(params, 0);
    const char *id;
    char poolname[DS_NAME_BUF], origin_full[DS_NAME_BUF * 2];
    struct ds_row clone, origin;
    struct cfg_tx tx;
    struct ds_snap osnap, other;
    struct ds_pool cpool, opool;
    struct promote_snap *snaps = NULL;
    size_t nsnaps = 0;
    bool cross_pool = false, committed = false;
    int rc;

    id = json_string_value(jid); /* promote_id_check */

#define PROMOTE_FAIL(err, ...)                                                                     \
    do {                                                                                           \
        char msg_[8192];                                                                           \
        snprintf(msg_, sizeof(msg_), __VA_ARGS__);                                                 \
        rc = api_error(call, err, "Failed to promote dataset: cannot promote '%s': %s", id, msg_); \
        goto out;                                                                                  \
    } while (0)

    ds_rename_hooks_lock();
    ds_ops_lock();
    db_lock();
    if (strchr(id, '@'))
        PROMOTE_FAIL(EINVAL, "snapshots cannot be promoted");
    rc = ds_dataset_get(id, &clone);
    if (rc == -ENOENT)
        PROMOTE_FAIL(ENOENT, "dataset does not exist");
    if (rc < 0)
        PROMOTE_FAIL(-rc, "%s", strerror(-rc));
    if (!clone.origin_id)
        PROMOTE_FAIL(EINVAL, "not a cloned filesystem");
    rc = ds_snapshot_get_id(clone.origin_id, &osnap);
    if (rc == 0)
        rc = ds_dataset_get_id(osnap.dataset_id, &origin);
    if (rc < 0)
        PROMOTE_FAIL(-rc, "cannot read its origin: %s", strerror(-rc));
    snprintf(origin_full, sizeof(origin_full), "%s@%s", origin.name, osnap.name);
    rc = snaps_upto(origin.id, osnap.id, &snaps, &nsnaps);
    if (rc < 0)
        PROMOTE_FAIL(-rc, "cannot list the snapshots of %s: %s", origin.name, strerror(-rc));
    ds_pool_of(clone.name, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &cpool);
    if (rc == 0) {
        ds_pool_of(origin.name, poolname, sizeof(poolname));
        rc = ds_pool_get(poolname, &opool);
    }
    if (rc < 0)
        PROMOTE_FAIL(-rc, "cannot read pool %s: %s", poolname, strerror(-rc));
    for (size_t i = 0; !ds_backend_of(&cpool)->flatten && i < nsnaps; i++) {
        if (ds_snapshot_get(clone.name, snaps[i].name, &other) == 0)
            PROMOTE_FAIL(EEXIST,
                         "snapshot name '%s' from origin conflicts with '%s@%s' from target",
                         snaps[i].name, clone.name, snaps[i].name);
    }
    if (ds_backend_of(&cpool)->flatten) {
        /* Nothing here touches other shares' names: a plain transaction
         * after the job, no rename hooks to update. */
        db_unlock();
        if (ds_flatten_job(call, params, &cpool, clone.name) < 0) {
            db_lock();
            rc = -1;
            goto out; /* the error is set */
        }
        db_lock();
        rc = cfg_tx_begin(&tx);
        if (rc == 0) {
            rc = exec_ids("UPDATE datasets SET origin_id = NULL WHERE id = ?1", clone.id, 0, 0);
            cfg_tx_changed(&tx, CFG_DATASET, clone.id, CFG_UPDATED);
            if (rc == 0)
                rc = cfg_tx_commit(&tx);
            else
                cfg_tx_abort(&tx);
        }
        if (rc < 0)
            PROMOTE_FAIL(-rc, "the clone is flattened but its origin could not be cleared: %s",
                         strerror(-rc));
        log_info("datasets: promoted %s (flattened: no longer a clone of %s; peer %s)", id,
                 origin_full, api_call_peer(call));
        rc = 0; /* no snapshot moved: the exit below has nothing to undo */
        goto out;
    }
    for (size_t i = 0; i < nsnaps; i++) {
        rc = ds_path(&opool, origin.name, snaps[i].name, snaps[i].from, sizeof(snaps[i].from));
        if (rc == 0)
            rc = ds_path(&cpool, clone.name, snaps[i].name, snaps[i].to, sizeof(snaps[i].to));
        if (rc < 0)
            PROMOTE_FAIL(-rc, "%s", strerror(-rc));
        struct stat st;
        if (poolfs_stat(snaps[i].to, &st) == 0)
            PROMOTE_FAIL(EEXIST, "a file named %s is in the way", snaps[i].to);
    }
    cross_pool = cpool.id != opool.id;

    if (cross_pool) {
        /* A copy per snapshot, outside the database lock (as a clone's). */
        db_unlock();
        for (size_t i = 0; i < nsnaps; i++) {
            char what[DS_NAME_BUF * 2];
            snprintf(what, sizeof(what), "%s@%s", clone.name, snaps[i].name);
            if (ds_copy_file_job(call, params, "promote", what, snaps[i].from, snaps[i].to, NULL) <
                0) {
                db_lock();
                rc = -1;
                goto out; /* the error is set; copies made so far go below */
            }
            snaps[i].moved = true;
        }
        db_lock();
    }

    rc = cfg_tx_begin(&tx);
    if (rc < 0) {
        rc = api_error(call, -rc, "Failed to promote dataset: cannot promote '%s': %s", id,
                       strerror(-rc));
        goto out;
    }
    cfg_tx_changed(&tx, CFG_DATASET, clone.id, CFG_UPDATED);
    cfg_tx_changed(&tx, CFG_DATASET, origin.id, CFG_UPDATED);
    rc = exec_ids("UPDATE snapshots SET dataset_id = ?1 WHERE dataset_id = ?2 AND id <= ?3",
                  clone.id, origin.id, osnap.id);
    /* C takes over O's origin; O becomes a clone of C@s. (Binding an
     * index a statement does not have is a harmless SQLITE_RANGE.) */
    if (rc == 0)
        rc = exec_ids(origin.origin_id ? "UPDATE datasets SET origin_id = ?2 WHERE id = ?1"
                                       : "UPDATE datasets SET origin_id = NULL WHERE id = ?1",
                      clone.id, origin.origin_id, 0);
    if (rc == 0)
        rc = exec_ids("UPDATE datasets SET origin_id = ?2 WHERE id = ?1", origin.id, osnap.id, 0);
    for (size_t i = 0; rc == 0 && i < nsnaps; i++) {
        char o[DS_NAME_BUF * 2], n[DS_NAME_BUF * 2];
        snprintf(o, sizeof(o), "%s@%s", origin.name, snaps[i].name);
        snprintf(n, sizeof(n), "%s@%s", clone.name, snaps[i].name);
        rc = ds_rename_hooks_update(o, n, false);
    }
    for (size_t i = 0; rc == 0 && !cross_pool && i < nsnaps; i++) {
        /* poolfs: confined to the pool, no symlink followed; the target's
         * absence was checked above under ds_ops_lock */
        rc = poolfs_rename(snaps[i].from, snaps[i].to, RENAME_NOREPLACE);
        if (rc == -EINVAL)
            rc = poolfs_rename(snaps[i].from, snaps[i].to, 0);
        if (rc < 0) {
            log_error("datasets: promote %s: rename %s to %s: %s", id, snaps[i].from, snaps[i].to,
                      strerror(-rc));
        } else {
            snaps[i].moved = true;
        }
    }
    if (rc == 0) {
        /* the cache follows before the commit publishes (front-ends
         * reopen exports by their new names); undone if it fails */
        promote_cache_rename(&origin, &clone, snaps, nsnaps, false);
        rc = cfg_tx_commit(&tx);
        if (rc < 0)
            promote_cache_rename(&origin, &clone, snaps, nsnaps, true);
    } else {
        cfg_tx_abort(&tx);
    }
    if (rc < 0) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", strerror(-rc));
        rc = api_error(call, -rc, "Failed to promote dataset: cannot promote '%s': %s", id, msg);
        goto out;
    }
    committed = true;
    rc = 0;
out:
    db_unlock();
    if (committed) {
        /* Durable renames; a cross-pool promote's originals go now. */
        for (size_t i = 0; i < nsnaps; i++) {
            int urc = cross_pool ? poolfs_unlink(snaps[i].from) : 0;
            if (urc < 0 && urc != -ENOENT)
                log_error("datasets: unlink %s: %s", snaps[i].from, strerror(-urc));
        }
        for (int k = 0; nsnaps && k < 2; k++) {
            int frc = poolfs_fsync_parent(k ? snaps[0].from : snaps[0].to);
            if (frc < 0)
                log_error("datasets: fsync the directory of %s: %s",
                          k ? snaps[0].from : snaps[0].to, strerror(-frc));
        }
        log_info("datasets: promoted %s (was a clone of %s; %zu snapshot(s) moved from %s%s; "
                 "peer %s)",
                 id, origin_full, nsnaps, origin.name, cross_pool ? " by copy" : "",
                 api_call_peer(call));
    } else {
        /* undo: renamed files go back, copies are removed */
        for (size_t i = nsnaps; i-- > 0;) {
            if (!snaps[i].moved)
                continue;
            int urc = cross_pool ? poolfs_unlink(snaps[i].to)
                                 : poolfs_rename(snaps[i].to, snaps[i].from, 0);
            if (urc < 0)
                log_error("datasets: promote %s: cannot undo %s: %s", id, snaps[i].to,
                          strerror(-urc));
        }
    }
    ds_ops_unlock();
    ds_rename_hooks_applied(committed);
    snaps_free(snaps, nsnaps);
    if (rc == 0)
        *result = json_null();
    return rc;
#undef PROMOTE_FAIL
}

static const struct api_arg promote_args[] = {
    {.name = "id", .type = API_T_STRING, .check = promote_id_check}};

const struct api_method ds_promote_methods[] = {
    {"pool.dataset.promote", NULL,
     "Make a clone independent of its origin snapshot (the origin's older snapshots move to it)",
     m_dataset_promote, 0, API_ARGS(promote_args)},
    {"zfs.dataset.promote", NULL, "Same as pool.dataset.promote", m_dataset_promote, 0,
     API_ARGS(promote_args)},
};
const size_t ds_promote_method_count = ARRAY_SIZE(ds_promote_methods);
