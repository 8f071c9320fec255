/*
 * zfs.dataset.rename / pool.dataset.rename / zfs.snapshot.rename /
 * pool.snapshot.rename: rename a volume, a filesystem (with everything
 * below it) or a snapshot (with recursive, the same snapshot of every
 * descendant), as ZFS does.
 *
 * A rename is a rename(2) of the dataset's file or directory (and of a
 * volume's snapshot files "<vol>@<snap>") inside one SQLite transaction
 * that renames the rows and lets the front-ends rewrite theirs (NBD export
 * rows, iSCSI extents: EV_RENAME_UPDATE, control/events.h). Open volumes are not
 * touched: an open file descriptor survives rename(2), so NBD connections
 * and iSCSI sessions go on without a pause; the open-volume cache is
 * re-keyed under the new names.
 *
 * Locks: the front-ends' configuration locks (on EV_RENAME_LOCK), then
 * ds_ops_lock(), then db_lock() — front-ends never take ds_ops_lock while
 * holding their own lock, so the order is safe.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/fields.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsbackend.h"
#include "control/dsprops.h"
#include "core/log.h"
#include "core/util.h"
#include "store/poolfs.h"

/* The options of the renames, decoded once by their tables; every rename
 * method takes the new name the same way. */
struct rename_opts {
    char new_name[DS_NAME_BUF];
    bool recursive;
};

#define NEW_NAME_FIELD                                                                             \
    {                                                                                              \
        .name = "new_name", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1,     \
        .max = NAME_DATASET_MAX, API_AT(struct rename_opts, new_name, api_codec_chars)             \
    }

static const struct api_field zfs_rename_fields[] = {
    NEW_NAME_FIELD,
    {.name = "recursive",
     .type = API_T_BOOL,
     API_AT(struct rename_opts, recursive, api_codec_bool)},
};

/* pool.dataset.rename: TrueNAS' force skips its attachment checks (a
 * renamed zvol breaks its shares there); blockd's shares follow the
 * rename, so force changes nothing (no member). */
static const struct api_field pool_rename_fields[] = {
    NEW_NAME_FIELD,
    {.name = "force", .type = API_T_BOOL},
};

static const struct api_field snap_rename_fields[] = {
    NEW_NAME_FIELD,
};
#undef NEW_NAME_FIELD

/* fsync the directory holding path, so that a rename in it is durable. */
static void fsync_parent(const char *path)
{
    int rc = poolfs_fsync_parent(path);

    if (rc < 0)
        log_error("datasets: fsync the directory of %s: %s", path, strerror(-rc));
}

/* rename(2) inside a pool (poolfs: no symlink followed, no escape) that
 * never replaces an existing file or directory. */
static int rename_noreplace(const char *from, const char *to)
{
    struct stat st;
    int rc = poolfs_rename(from, to, RENAME_NOREPLACE);

    if (rc != -EINVAL)
        return rc;
    /* a filesystem without RENAME_NOREPLACE: check, then rename (the names
     * are ours and ds_ops_lock is held) */
    if (poolfs_stat(to, &st) == 0)
        return -EEXIST;
    return poolfs_rename(from, to, 0);
}

/* Files (or, on backends that rename by name, volumes and snapshots)
 * renamed so far by one operation, to undo them on failure. */
struct moves {
    struct move {
        char *from, *to;
        /* backend renames: dataset is NULL for a volume, the volume of a
         * snapshot otherwise; from/to are dataset or snapshot names */
        const struct ds_backend *be;
        const struct ds_pool *pool;
        char *dataset;
    } * v;
    size_t n;
};

/* Rename through the pool's backend (volume_rename/snapshot_rename),
 * recorded in m for the undo. dataset NULL: the volume from → to. */
static int moves_backend(struct moves *m, const struct ds_pool *pool, const char *dataset,
                         const char *from, const char *to)
{
    const struct ds_backend *be = ds_backend_of(pool);
    struct move *grown = realloc(m->v, (m->n + 1) * sizeof(*m->v));
    int rc;

    if (!grown)
        return -ENOMEM;
    m->v = grown;
    rc = dataset ? be->snapshot_rename(pool, dataset, from, to) : be->volume_rename(pool, from, to);
    if (rc < 0) {
        log_error("datasets: rename %s%s%s to %s in %s pool %s: %s", dataset ? dataset : "",
                  dataset ? "@" : "", from, to, be->name, pool->name, strerror(-rc));
        return rc;
    }
    memset(&m->v[m->n], 0, sizeof(m->v[m->n]));
    m->v[m->n].from = strdup(from);
    m->v[m->n].to = strdup(to);
    m->v[m->n].be = be;
    m->v[m->n].pool = pool;
    m->v[m->n].dataset = dataset ? strdup(dataset) : NULL;
    m->n++;
    return 0;
}

static int moves_do(struct moves *m, const char *from, const char *to)
{
    struct move *grown = realloc(m->v, (m->n + 1) * sizeof(*m->v));
    int rc;

    if (!grown)
        return -ENOMEM;
    m->v = grown;
    rc = rename_noreplace(from, to);
    if (rc < 0) {
        log_error("datasets: rename %s to %s: %s", from, to, strerror(-rc));
        return rc;
    }
    memset(&m->v[m->n], 0, sizeof(m->v[m->n]));
    m->v[m->n].from = strdup(from);
    m->v[m->n].to = strdup(to);
    m->n++;
    return 0;
}

/* Undo (failure) or make durable (success) the renames, then free. */
static void moves_end(struct moves *m, bool undo)
{
    for (size_t i = m->n; i-- > 0;) {
        if (!m->v[i].from || !m->v[i].to) {
            log_error("datasets: out of memory tracking a rename");
        } else if (m->v[i].be) {
            int rc = 0;
            if (undo && m->v[i].dataset)
                rc = m->v[i].be->snapshot_rename(m->v[i].pool, m->v[i].dataset, m->v[i].to,
                                                 m->v[i].from);
            else if (undo)
                rc = m->v[i].be->volume_rename(m->v[i].pool, m->v[i].to, m->v[i].from);
            if (rc < 0)
                log_error("datasets: cannot undo the rename of %s to %s: %s", m->v[i].from,
                          m->v[i].to, strerror(-rc));
        } else if (undo) {
            int rc = poolfs_rename(m->v[i].to, m->v[i].from, 0);
            if (rc < 0)
                log_error("datasets: cannot undo the rename of %s to %s: %s", m->v[i].from,
                          m->v[i].to, strerror(-rc));
        } else {
            fsync_parent(m->v[i].to);
            fsync_parent(m->v[i].from);
        }
        free(m->v[i].from);
        free(m->v[i].to);
        free(m->v[i].dataset);
    }
    free(m->v);
    m->v = NULL;
    m->n = 0;
}

/* "pool/a/b" → "pool/a"; false for a pool root. */
static bool parent_of(const char *name, char *out, size_t len)
{
    const char *slash = strrchr(name, '/');

    if (!slash)
        return false;
    snprintf(out, len, "%.*s", (int)(slash - name), name);
    return true;
}

/* The names being collected. */
struct name_list {
    char **v;
    size_t n;
};

/* Append a copy of s's name to the list arg. 0 or -ENOMEM. */
static int name_add(const struct ds_snap *s, void *arg)
{
    struct name_list *l = arg;
    char **grown = realloc(l->v, (l->n + 1) * sizeof(*grown));

    if (!grown)
        return -ENOMEM;
    l->v = grown;
    if (!(grown[l->n] = strdup(s->name)))
        return -ENOMEM;
    l->n++;
    return 0;
}

/* A volume's snapshot names (malloc'd array of malloc'd strings), in the
 * order they were taken. */
static int snapshot_names(int64_t dataset_id, char ***out, size_t *n)
{
    struct name_list l = {0};
    int rc = ds_snapshot_each_upto(dataset_id, INT64_MAX, name_add, &l);

    if (rc < 0) {
        for (size_t i = 0; i < l.n; i++)
            free(l.v[i]);
        free(l.v);
        l.v = NULL;
        l.n = 0;
    }
    *out = l.v;
    *n = l.n;
    return rc;
}

static void names_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* One dataset rename's state, shared by its steps. */
struct ds_rename {
    struct api_call *call;
    const char *old_name, *new_name;
    struct ds_row row;
    struct ds_pool pool;
    char **snaps; /* a volume's snapshot names (their files move too) */
    size_t nsnaps;
    struct ds_eff_change *changes; /* inherited sync/readonly the new parent changed */
    size_t nchanges;
    struct moves moves;
    char to[PATH_MAX]; /* the last rename's target (for "in the way") */
    bool committed;
};

/* Every refusal has zfs rename's shape: the call's error, returned. */
static int rename_fail(struct ds_rename *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rename_fail(struct ds_rename *r, int err, const char *fmt, ...)
{
    char msg[8192];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return api_error(r->call, err, "Failed to rename dataset: cannot rename '%s' to '%s': %s",
                     r->old_name, r->new_name, msg);
}

/* What zfs rename refuses from the names alone (before any lock). 0 or
 * the call's error. */
static int rename_dataset_refuse(struct api_call *call, const char *old_name, const char *new_name,
                                 bool recursive)
{
    char why[256];

    if (strchr(new_name, '@'))
        return api_error(call, EINVAL,
                         "Failed to rename dataset: cannot rename '%s' to '%s': a dataset cannot "
                         "be renamed to a snapshot",
                         old_name, new_name);
    if (recursive)
        return api_error(call, EINVAL,
                         "Failed to rename dataset: cannot rename '%s': recursive rename requires "
                         "a snapshot",
                         old_name);
    if (!strchr(old_name, '/'))
        return api_error(call, EINVAL,
                         "Failed to rename dataset: cannot rename '%s': a pool's root dataset "
                         "cannot be renamed",
                         old_name);
    if (name_check_dataset(new_name, false, why, sizeof(why)) < 0)
        return api_error(call, EINVAL,
                         "Failed to rename dataset: cannot rename '%s' to '%s': invalid name: %s",
                         old_name, new_name, why);
    return 0;
}

/* DB locked: the new name's side — same pool, not below the dataset
 * itself, free, under an existing parent that is not a volume. 0 or the
 * call's error. */
static int rename_dataset_check_target(struct ds_rename *r)
{
    char oldpool[DS_NAME_BUF], newpool[DS_NAME_BUF], parent[DS_NAME_BUF];
    size_t olen = strlen(r->old_name);
    struct ds_row prow;
    int rc;

    ds_pool_of(r->old_name, oldpool, sizeof(oldpool));
    ds_pool_of(r->new_name, newpool, sizeof(newpool));
    if (strcmp(oldpool, newpool) != 0)
        return rename_fail(r, EXDEV, "datasets must be within same pool");
    if (strncmp(r->new_name, r->old_name, olen) == 0 && r->new_name[olen] == '/')
        return rename_fail(r, EINVAL,
                           "New dataset name cannot be a descendant of current dataset name");
    rc = ds_dataset_get(r->new_name, &prow);
    if (rc == 0)
        return rename_fail(r, EEXIST, "dataset already exists");
    if (rc != -ENOENT)
        return rename_fail(r, -rc, "%s", strerror(-rc));
    if (!parent_of(r->new_name, parent, sizeof(parent)))
        return rename_fail(r, EINVAL, "must be POOL/NAME");
    rc = ds_dataset_get(parent, &prow);
    if (rc == -ENOENT)
        return rename_fail(r, ENOENT, "parent does not exist");
    if (rc < 0)
        return rename_fail(r, -rc, "%s", strerror(-rc));
    if (prow.type == DS_VOLUME)
        return rename_fail(r, ENOTDIR, "parent %s is a volume and cannot have children", parent);
    rc = ds_pool_get(oldpool, &r->pool);
    if (rc < 0)
        return rename_fail(r, -rc, "cannot read pool %s: %s", oldpool, strerror(-rc));
    return 0;
}

/* DB locked: the dataset, the target checks and a volume's snapshots.
 * 1 when the name does not change (as zfs rename: nothing to do), 0 to
 * go on, or the call's error. */
static int rename_dataset_load(struct ds_rename *r)
{
    int rc = ds_dataset_get(r->old_name, &r->row);

    if (rc == -ENOENT)
        return rename_fail(r, ENOENT, "dataset does not exist");
    if (rc < 0)
        return rename_fail(r, -rc, "%s", strerror(-rc));
    if (strcmp(r->old_name, r->new_name) == 0)
        return 1;
    rc = rename_dataset_check_target(r);
    if (rc < 0)
        return rc;
    if (r->row.type == DS_VOLUME && (rc = snapshot_names(r->row.id, &r->snaps, &r->nsnaps)) < 0)
        return rename_fail(r, -rc, "cannot list snapshots: %s", strerror(-rc));
    return 0;
}

/* Backends that keep volumes by name (RBD: "a%b%vol"): the image of every
 * volume now under new_name is renamed; snapshots go with their image.
 * Inside the transaction (the rows are renamed already). 0 or -errno. */
/* ds_dataset_each_stored_volume's callback: move the image of volume nv
 * (now under new_name) from its old name. */
static int rename_dataset_image(const char *nv, void *arg)
{
    struct ds_rename *r = arg;
    char ov[DS_NAME_BUF * 2];

    snprintf(ov, sizeof(ov), "%s%s", r->old_name, nv + strlen(r->new_name));
    snprintf(r->to, sizeof(r->to), "%s", nv);
    return moves_backend(&r->moves, &r->pool, NULL, ov, nv);
}

static int rename_dataset_images(struct ds_rename *r)
{
    return ds_dataset_each_stored_volume(r->new_name, rename_dataset_image, r);
}

/* File backends: the dataset's file or directory, and a volume's
 * snapshot files, are renamed. 0 or -errno. */
static int rename_dataset_files(struct ds_rename *r)
{
    char from[PATH_MAX];
    int rc = ds_path(&r->pool, r->old_name, NULL, from, sizeof(from));

    if (rc == 0)
        rc = ds_path(&r->pool, r->new_name, NULL, r->to, sizeof(r->to));
    if (rc == 0)
        rc = moves_do(&r->moves, from, r->to);
    for (size_t i = 0; rc == 0 && i < r->nsnaps; i++) {
        rc = ds_path(&r->pool, r->old_name, r->snaps[i], from, sizeof(from));
        if (rc == 0)
            rc = ds_path(&r->pool, r->new_name, r->snaps[i], r->to, sizeof(r->to));
        if (rc == 0)
            rc = moves_do(&r->moves, from, r->to);
    }
    return rc;
}

/* Inside the transaction: the dataset and everything below it (snapshot
 * rows follow through their dataset_id); a new parent: inherited
 * sync/readonly come from it now (ZFS); the front-ends' rows; storage
 * last, undone if anything fails. 0 or -errno. */
static int rename_dataset_apply(struct ds_rename *r)
{
    int rc = ds_dataset_rename_subtree(r->old_name, r->new_name);

    if (rc == 0)
        rc = ds_props_recompute(r->new_name, &r->changes, &r->nchanges);
    if (rc == 0)
        rc = ds_rename_event_update(r->old_name, r->new_name, true);
    if (rc < 0)
        return rc;
    if (ds_backend_of(&r->pool)->volume_rename)
        return rename_dataset_images(r);
    if (!r->row.memory)
        return rename_dataset_files(r);
    return 0;
}

/* DB locked: the one transaction. The open-volume cache is re-keyed
 * still under db_lock (an opener of the new name waits for this) and
 * before the commit, whose publishers reopen exports by their new names
 * and must find the open volumes; undone if the commit fails. 0 or the
 * call's error. */
static int rename_dataset_commit(struct ds_rename *r)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc < 0)
        return rename_fail(r, -rc, "%s", strerror(-rc));
    cfg_tx_changed(&tx, CFG_DATASET, r->row.id, CFG_UPDATED);
    rc = rename_dataset_apply(r);
    if (rc == 0) {
        ds_cache_rename(r->old_name, r->new_name, true);
        rc = cfg_tx_commit(&tx);
        if (rc < 0)
            ds_cache_rename(r->new_name, r->old_name, true);
    } else {
        cfg_tx_abort(&tx);
    }
    moves_end(&r->moves, rc < 0);
    if (rc == -EEXIST)
        return rename_fail(r, EEXIST, "a file named %s is in the way", r->to);
    if (rc < 0)
        return rename_fail(r, -rc, "%s", strerror(-rc));
    r->committed = true;
    return 0;
}

/* After the commit, still locked: the open volumes whose inherited values
 * the new parent changed get them. The front-ends notice on the next
 * request (SCSI: MODE PARAMETERS CHANGED, from the volume's own state). */
static void rename_dataset_changes(const struct ds_rename *r)
{
    for (size_t i = 0; i < r->nchanges; i++) {
        struct volume *v = ds_cache_peek(r->changes[i].name);

        if (!v)
            continue;
        if (r->changes[i].sync_changed)
            volume_set_sync(v, r->changes[i].sync);
        if (r->changes[i].readonly_changed)
            volume_set_readonly(v, r->changes[i].readonly);
        volume_unref(v);
    }
}

/*
 * Rename dataset old_name (no '@') to new_name. Locks: hooks, ds_ops and
 * db taken here. Errors are set on call (TrueNAS' CallError text: "Failed
 * to rename dataset: cannot rename 'a' to 'b': <why>").
 */
static int rename_dataset(struct api_call *call, const char *old_name, const char *new_name,
                          bool recursive)
{
    struct ds_rename r = {.call = call, .old_name = old_name, .new_name = new_name};
    int rc = rename_dataset_refuse(call, old_name, new_name, recursive);

    if (rc < 0)
        return rc;
    ds_rename_event_lock();
    ds_ops_lock();
    db_lock();
    rc = rename_dataset_load(&r);
    if (rc == 0)
        rc = rename_dataset_commit(&r);
    if (r.committed) {
        rename_dataset_changes(&r);
        log_info("datasets: renamed %s %s to %s (%zu snapshot(s) moved along; peer %s)",
                 r.row.type == DS_VOLUME ? "volume" : "filesystem", old_name, new_name, r.nsnaps,
                 api_call_peer(call));
    }
    db_unlock();
    ds_ops_unlock();
    ds_rename_event_done(r.committed);
    free(r.changes);
    names_free(r.snaps, r.nsnaps);
    return rc > 0 ? 0 : rc;
}

/* One snapshot a rename moves: its row, its dataset and files. */
struct snap_move {
    int64_t id;
    char *dataset;
};

/* Re-key the open snapshot volumes of list from @from to @to. DB locked. */
static void snaps_cache_rename(const struct snap_move *list, size_t n, const char *from,
                               const char *to)
{
    for (size_t i = 0; i < n; i++) {
        char o[DS_NAME_BUF * 2], nn[DS_NAME_BUF * 2];

        snprintf(o, sizeof(o), "%s@%s", list[i].dataset, from);
        snprintf(nn, sizeof(nn), "%s@%s", list[i].dataset, to);
        ds_cache_rename(o, nn, false);
    }
}

/* One snapshot rename's state, shared by its steps. */
struct snap_rename {
    struct api_call *call;
    const char *old_full, *oldsnap, *newsnap;
    bool recursive;
    char dataset[DS_NAME_BUF], newfull[DS_NAME_BUF * 2];
    struct ds_pool pool;
    struct snap_move *list; /* the snapshots that move */
    size_t n;
    struct moves moves;
    bool committed;
};

static int snap_rename_fail(struct snap_rename *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int snap_rename_fail(struct snap_rename *r, int err, const char *fmt, ...)
{
    char msg[8192];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return api_error(r->call, err, "Failed to rename snapshot: cannot rename '%s' to '%s': %s",
                     r->old_full, r->newfull, msg);
}

/* The names, before any lock: new_name may be "pool/vol@b", "@b" or "b"
 * and must stay on the same dataset. 0 or the call's error. */
static int snap_rename_names(struct snap_rename *r, const char *new_name)
{
    const char *at = strchr(r->old_full, '@'), *nat = strchr(new_name, '@');
    char why[256];

    snprintf(r->dataset, sizeof(r->dataset), "%.*s", (int)(at - r->old_full), r->old_full);
    r->oldsnap = at + 1;
    if (!nat)
        snprintf(r->newfull, sizeof(r->newfull), "%s@%s", r->dataset, new_name);
    else if (nat == new_name)
        snprintf(r->newfull, sizeof(r->newfull), "%s%s", r->dataset, new_name);
    else
        snprintf(r->newfull, sizeof(r->newfull), "%s", new_name);
    if (name_check_dataset(r->old_full, true, why, sizeof(why)) < 0)
        return api_error(r->call, EINVAL, "Failed to rename snapshot: %s: %s", r->old_full, why);
    if (name_check_dataset(r->newfull, true, why, sizeof(why)) < 0)
        return api_error(r->call, EINVAL, "Failed to rename snapshot: %s: %s", r->newfull, why);
    nat = strchr(r->newfull, '@');
    r->newsnap = nat + 1;
    if ((size_t)(nat - r->newfull) != strlen(r->dataset) ||
        strncmp(r->newfull, r->dataset, strlen(r->dataset)))
        return api_error(r->call, EINVAL,
                         "Failed to rename snapshot: cannot rename '%s' to '%s': snapshots must "
                         "be part of same dataset",
                         r->old_full, r->newfull);
    return 0;
}

/* DB locked: the snapshots to rename, the named one and with recursive
 * the one of the same name of every descendant. 0 or the call's error. */
/* ds_snapshot_each_named's callback: add s (its id and dataset) to the
 * list. 0 or -ENOMEM. */
static int snap_rename_add(const struct ds_snap *s, void *arg)
{
    struct snap_rename *r = arg;
    struct snap_move *grown = realloc(r->list, (r->n + 1) * sizeof(*r->list));

    if (!grown)
        return -ENOMEM;
    r->list = grown;
    r->list[r->n].id = s->id;
    r->list[r->n].dataset = strdup(s->dataset);
    if (!r->list[r->n].dataset)
        return -ENOMEM;
    r->n++;
    return 0;
}

static int snap_rename_list(struct snap_rename *r)
{
    int rc = ds_snapshot_each_named(r->dataset, r->oldsnap, r->recursive, snap_rename_add, r);

    if (rc == -ENOMEM)
        return snap_rename_fail(r, ENOMEM, "out of memory");
    if (rc < 0)
        return snap_rename_fail(r, -rc, "%s", strerror(-rc));
    return 0;
}

/* DB locked: the snapshot exists (on the dataset itself), no dataset
 * that moves one has the new name yet, the pool is there. 0 or the
 * call's error. */
static int snap_rename_check(struct snap_rename *r)
{
    char poolname[DS_NAME_BUF];
    struct ds_snap s;
    int rc;

    if (r->n == 0 || (!r->recursive && strcmp(r->list[0].dataset, r->dataset) != 0))
        return snap_rename_fail(r, ENOENT, "dataset does not exist");
    for (size_t i = 0; i < r->n; i++) {
        if (ds_snapshot_get(r->list[i].dataset, r->newsnap, &s) == 0) {
            if (strcmp(r->list[i].dataset, r->dataset) == 0)
                return snap_rename_fail(r, EEXIST, "dataset already exists");
            return snap_rename_fail(
                r, EEXIST, "a child dataset already has a snapshot with the new name (%s@%s)",
                r->list[i].dataset, r->newsnap);
        }
    }
    ds_pool_of(r->dataset, poolname, sizeof(poolname));
    rc = ds_pool_get(poolname, &r->pool);
    if (rc < 0)
        return snap_rename_fail(r, -rc, "cannot read pool %s: %s", poolname, strerror(-rc));
    return 0;
}

/* Inside the transaction: snapshot i's row, the front-ends' rows, and its
 * storage (through the backend, or its file). 0 or -errno. */
static int snap_rename_one(struct snap_rename *r, size_t i)
{
    const struct snap_move *m = &r->list[i];
    char o[DS_NAME_BUF * 2], nn[DS_NAME_BUF * 2], from[PATH_MAX], to[PATH_MAX];
    int rc = ds_snapshot_rename(m->id, r->newsnap);

    snprintf(o, sizeof(o), "%s@%s", m->dataset, r->oldsnap);
    snprintf(nn, sizeof(nn), "%s@%s", m->dataset, r->newsnap);
    if (rc == 0)
        rc = ds_rename_event_update(o, nn, false);
    if (rc == 0 && ds_backend_of(&r->pool)->snapshot_rename)
        return moves_backend(&r->moves, &r->pool, m->dataset, r->oldsnap, r->newsnap);
    if (rc == 0)
        rc = ds_path(&r->pool, m->dataset, r->oldsnap, from, sizeof(from));
    if (rc == 0)
        rc = ds_path(&r->pool, m->dataset, r->newsnap, to, sizeof(to));
    if (rc == 0)
        rc = moves_do(&r->moves, from, to);
    return rc;
}

/* DB locked: the one transaction; the cache follows before the commit
 * publishes (as a dataset rename's) and back if it fails. 0 or the
 * call's error. */
static int snap_rename_commit(struct snap_rename *r)
{
    struct cfg_tx tx;
    int rc = cfg_tx_begin(&tx);

    if (rc < 0)
        return snap_rename_fail(r, -rc, "%s", strerror(-rc));
    for (size_t i = 0; rc == 0 && i < r->n; i++) {
        cfg_tx_changed(&tx, CFG_SNAPSHOT, r->list[i].id, CFG_UPDATED);
        rc = snap_rename_one(r, i);
    }
    if (rc == 0) {
        snaps_cache_rename(r->list, r->n, r->oldsnap, r->newsnap);
        rc = cfg_tx_commit(&tx);
        if (rc < 0)
            snaps_cache_rename(r->list, r->n, r->newsnap, r->oldsnap);
    } else {
        cfg_tx_abort(&tx);
    }
    moves_end(&r->moves, rc < 0);
    if (rc < 0)
        return snap_rename_fail(r, -rc, "%s", strerror(-rc));
    r->committed = true;
    log_info("datasets: renamed snapshot %s to %s%s (%zu snapshot(s); peer %s)", r->old_full,
             r->newfull, r->recursive ? " recursively" : "", r->n, api_call_peer(r->call));
    return 0;
}

/* DB locked: a rename to the same name only checks that the snapshot
 * exists (as zfs rename); otherwise list, check, commit. */
static int snap_rename_locked(struct snap_rename *r)
{
    struct ds_snap s;
    int rc;

    if (strcmp(r->oldsnap, r->newsnap) == 0) {
        if (ds_snapshot_get(r->dataset, r->oldsnap, &s) < 0)
            return snap_rename_fail(r, ENOENT, "dataset does not exist");
        return 0;
    }
    rc = snap_rename_list(r);
    if (rc == 0)
        rc = snap_rename_check(r);
    if (rc == 0)
        rc = snap_rename_commit(r);
    return rc;
}

/*
 * Rename snapshot old_full ("pool/vol@a") to new_name ("pool/vol@b", or
 * "@b" / "b" for the same dataset). recursive: also the snapshot of the
 * same name of every descendant (ZFS -r).
 */
static int rename_snapshot(struct api_call *call, const char *old_full, const char *new_name,
                           bool recursive)
{
    struct snap_rename r = {.call = call, .old_full = old_full, .recursive = recursive};
    int rc = snap_rename_names(&r, new_name);

    if (rc < 0)
        return rc;
    ds_rename_event_lock();
    ds_ops_lock();
    db_lock();
    rc = snap_rename_locked(&r);
    db_unlock();
    ds_ops_unlock();
    ds_rename_event_done(r.committed);
    for (size_t i = 0; i < r.n; i++)
        free(r.list[i].dataset);
    free(r.list);
    return rc;
}

/* params[0]: the id (a string without NUL bytes); field errors on call. */
static const char *id_param(struct api_call *call, json_t *params)
{
    json_t *jid = api_param(params, 0);
    char field[96];

    snprintf(field, sizeof(field), "%s.id", api_call_method(call));
    if (!json_is_string(jid)) {
        api_verr(call, field, EINVAL, jid ? "Input should be a valid string" : "Field required");
        return NULL;
    }
    if (strlen(json_string_value(jid)) != json_string_length(jid) ||
        json_string_length(jid) > NAME_DATASET_MAX) {
        api_verr(call, field, EINVAL, "not a dataset name");
        return NULL;
    }
    return json_string_value(jid);
}

/* [id, {new_name, ...}]: the options validated against fields, then
 * decoded into *o. 0, or -1 with the field errors on call. */
static int options_param(struct api_call *call, json_t *params, const struct api_field *fields,
                         size_t nfields, struct rename_opts *o)
{
    json_t *opts = api_param(params, 1);
    char prefix[96];

    snprintf(prefix, sizeof(prefix), "%s.options", api_call_method(call));
    if (!opts) {
        char field[128];
        snprintf(field, sizeof(field), "%s.new_name", prefix);
        api_verr(call, field, EINVAL, "Field required");
        return -1;
    }
    if (api_validate_object(call, prefix, opts, fields, nfields, 0) < 0)
        return -1;
    memset(o, 0, sizeof(*o));
    return api_fields_decode(fields, nfields, opts, o); /* no codec allocates */
}

/* zfs.dataset.rename [id, {new_name, recursive?}]: datasets and snapshots
 * (Incus renames snapshots through it too). */
static int m_zfs_dataset_rename(struct api_call *call, json_t *params, json_t **result)
{
    struct rename_opts o;
    const char *id = id_param(call, params);
    int rc = options_param(call, params, zfs_rename_fields, ARRAY_SIZE(zfs_rename_fields), &o);

    if (!id || rc < 0)
        return api_invalid(call);
    if (strchr(id, '@'))
        rc = rename_snapshot(call, id, o.new_name, o.recursive);
    else
        rc = rename_dataset(call, id, o.new_name, o.recursive);
    if (rc == 0)
        *result = json_null();
    return rc;
}

/* pool.dataset.rename [id, {new_name, force?}]: datasets only. */
static int m_pool_dataset_rename(struct api_call *call, json_t *params, json_t **result)
{
    struct rename_opts o;
    const char *id = id_param(call, params);
    int rc = options_param(call, params, pool_rename_fields, ARRAY_SIZE(pool_rename_fields), &o);

    if (id && strchr(id, '@'))
        api_verr(call, "pool.dataset.rename.id", EINVAL,
                 "%s is a snapshot: rename it with pool.snapshot.rename", id);
    if (!id || rc < 0 || api_has_verrs(call))
        return api_invalid(call);
    rc = rename_dataset(call, id, o.new_name, false);
    if (rc == 0)
        *result = json_null();
    return rc;
}

/* zfs.snapshot.rename [id, new_name] (TrueNAS' backported form) or
 * [id, {new_name}]; pool.snapshot.rename [id, {new_name}]. */
static int m_snapshot_rename(struct api_call *call, json_t *params, json_t **result)
{
    const char *id, *new_name = NULL;
    json_t *arg1 = api_param(params, 1);
    struct rename_opts o;
    char field[96];
    int rc;

    id = id_param(call, params);
    if (json_is_string(arg1)) {
        snprintf(field, sizeof(field), "%s.new_name", api_call_method(call));
        if (strlen(json_string_value(arg1)) != json_string_length(arg1) ||
            json_string_length(arg1) == 0 || json_string_length(arg1) > NAME_DATASET_MAX)
            api_verr(call, field, EINVAL, "not a snapshot name");
        else
            new_name = json_string_value(arg1);
    } else if (options_param(call, params, snap_rename_fields, ARRAY_SIZE(snap_rename_fields),
                             &o) == 0) {
        new_name = o.new_name;
    }
    if (id && !strchr(id, '@')) {
        snprintf(field, sizeof(field), "%s.id", api_call_method(call));
        api_verr(call, field, EINVAL, "%s is not a snapshot (expected POOL/DATASET@SNAPSHOT)", id);
    }
    if (!id || !new_name || api_has_verrs(call))
        return api_invalid(call);
    rc = rename_snapshot(call, id, new_name, false);
    if (rc == 0)
        *result = json_null();
    return rc;
}

/*
 * The renames check their id and options in the handler (id_param,
 * options_param): both are reported together, and zfs.snapshot.rename's
 * second argument is a name or an object. The args give the arity and
 * the synopsis (API_ARG_SELF_CHECKED).
 */
static const struct api_arg zfs_rename_args[] = {
    {.name = "id", .type = API_T_ANY},
    API_ARG_OBJECT("options", zfs_rename_fields, API_ARG_SELF_CHECKED)};
static const struct api_arg pool_rename_args[] = {
    {.name = "id", .type = API_T_ANY},
    API_ARG_OBJECT("options", pool_rename_fields, API_ARG_SELF_CHECKED)};
static const struct api_arg pool_snapshot_rename_args[] = {
    {.name = "id", .type = API_T_ANY},
    API_ARG_OBJECT("options", snap_rename_fields, API_ARG_SELF_CHECKED)};
static const struct api_arg snapshot_rename_args[] = {
    {.name = "id", .type = API_T_ANY}, {.name = "new_name_or_options", .type = API_T_ANY}};

const struct api_method ds_rename_methods[] = {
    {"zfs.dataset.rename", NULL,
     "Rename a volume, a filesystem (with its descendants) or a snapshot (recursive: the same "
     "snapshot of every descendant); shares follow",
     m_zfs_dataset_rename, API_SHARE, API_ARGS(zfs_rename_args)},
    {"pool.dataset.rename", NULL,
     "Rename a volume or a filesystem (with its descendants); shares follow", m_pool_dataset_rename,
     API_SHARE, API_ARGS(pool_rename_args)},
    {"zfs.snapshot.rename", NULL,
     "Rename a snapshot within its dataset; shares of it follow (new_name_or_options: a name or "
     "{new_name})",
     m_snapshot_rename, API_SHARE, API_ARGS(snapshot_rename_args)},
    {"pool.snapshot.rename", NULL, "Rename a snapshot within its dataset; shares of it follow",
     m_snapshot_rename, API_SHARE, API_ARGS(pool_snapshot_rename_args)},
};
const size_t ds_rename_method_count = ARRAY_SIZE(ds_rename_methods);
