/* Schema, method registration, start/stop and the datasets in-use check of
 * the iSCSI configuration. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/datasets.h"
#include "control/events.h"
#include "control/db.h"
#include "core/log.h"
#include "iscsi/config/config_internal.h"
#include "iscsi/config/iscsi_config.h"
#include "iscsi/iscsi_runtime.h"

/* Ids use AUTOINCREMENT so a deleted object's id is never reused: clients
 * (democratic-csi) store ids in dataset properties. Cascades are done in
 * code, so the schema does not depend on PRAGMA foreign_keys. */
static const char schema[] =
    "CREATE TABLE IF NOT EXISTS iscsi_portal ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " tag INTEGER NOT NULL,"
    " comment TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS iscsi_portal_ip ("
    " portal_id INTEGER NOT NULL,"
    " ip TEXT NOT NULL UNIQUE);"
    "CREATE TABLE IF NOT EXISTS iscsi_initiator ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " initiators TEXT NOT NULL DEFAULT '[]',"
    " comment TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS iscsi_auth ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " tag INTEGER NOT NULL,"
    " user TEXT NOT NULL,"
    " secret TEXT NOT NULL,"
    " peeruser TEXT NOT NULL DEFAULT '',"
    " peersecret TEXT NOT NULL DEFAULT '',"
    " discovery_auth TEXT NOT NULL DEFAULT 'NONE');"
    "CREATE TABLE IF NOT EXISTS iscsi_target ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL UNIQUE,"
    " alias TEXT UNIQUE,"
    " mode TEXT NOT NULL DEFAULT 'ISCSI',"
    " auth_networks TEXT NOT NULL DEFAULT '[]',"
    " rel_tgt_id INTEGER NOT NULL UNIQUE);"
    "CREATE TABLE IF NOT EXISTS iscsi_target_group ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " target_id INTEGER NOT NULL,"
    " portal_id INTEGER NOT NULL,"
    " initiator_id INTEGER,"
    " authmethod TEXT NOT NULL DEFAULT 'NONE',"
    " auth_tag INTEGER);"
    "CREATE INDEX IF NOT EXISTS iscsi_target_group_target ON iscsi_target_group(target_id);"
    "CREATE TABLE IF NOT EXISTS iscsi_extent ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " name TEXT NOT NULL UNIQUE,"
    " type TEXT NOT NULL,"
    " disk TEXT,"
    " path TEXT,"
    " filesize INTEGER NOT NULL DEFAULT 0,"
    " serial TEXT NOT NULL UNIQUE,"
    " blocksize INTEGER NOT NULL DEFAULT 512,"
    " pblocksize INTEGER NOT NULL DEFAULT 0,"
    " avail_threshold INTEGER,"
    " comment TEXT NOT NULL DEFAULT '',"
    " naa TEXT NOT NULL UNIQUE,"
    " insecure_tpc INTEGER NOT NULL DEFAULT 1,"
    " xen INTEGER NOT NULL DEFAULT 0,"
    " rpm TEXT NOT NULL DEFAULT 'SSD',"
    " ro INTEGER NOT NULL DEFAULT 0,"
    " enabled INTEGER NOT NULL DEFAULT 1,"
    " vendor TEXT NOT NULL DEFAULT 'BLOCKD',"
    " gen INTEGER NOT NULL DEFAULT 0,"
    " pr_blob BLOB);"
    "CREATE INDEX IF NOT EXISTS iscsi_extent_disk ON iscsi_extent(disk);"
    "CREATE TABLE IF NOT EXISTS iscsi_targetextent ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " target_id INTEGER NOT NULL,"
    " extent_id INTEGER NOT NULL UNIQUE,"
    " lunid INTEGER NOT NULL,"
    " UNIQUE(target_id, lunid));";

/* Step st (prepared and bound) for the first extent using the dataset:
 * 1 and why filled (skip: bytes of the path column to leave out), 0 none,
 * or -errno. Gives st back. */
static int first_extent_user(sqlite3_stmt *st, size_t skip, char *why, size_t len)
{
    int rc = db_step_row(st);

    if (rc == 0 && why && len) {
        const char *path = icfg_col_text(st, 1);
        snprintf(why, len, "%s is used by iSCSI extent %s",
                 strlen(path) >= skip ? path + skip : path, icfg_col_text(st, 0));
    }
    icfg_finalize(st);
    return rc == 0 ? 1 : rc == -ENOENT ? 0 : rc;
}

/* The enabled extent that exports device ("zvol/POOL/VOL" or a file path):
 * an NVMe namespace of the same device is refused while it does, as SCSI
 * and NVMe reservations are separate states (datasets_reserving_export).
 * A database error counts as exported, with the reason. */
static bool extent_exports(const char *device, char *why, size_t len)
{
    sqlite3_stmt *st;
    db_lock();
    int rc = icfg_prepare("SELECT name, coalesce(disk, path) FROM iscsi_extent WHERE enabled AND "
                          "((type = 'DISK' AND disk = ?1) OR (type = 'FILE' AND path = ?1)) "
                          "ORDER BY id LIMIT 1",
                          &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, device, -1, SQLITE_STATIC);
        rc = db_step_row(st);
        if (rc == 0 && why && len)
            snprintf(why, len, "%s is exported over iSCSI by extent %s", icfg_col_text(st, 1),
                     icfg_col_text(st, 0));
        icfg_finalize(st);
    }
    db_unlock();
    if (rc < 0 && rc != -ENOENT && why && len)
        snprintf(why, len, "cannot read the iSCSI extents of %s: %s", device, strerror(-rc));
    return rc != -ENOENT;
}

/* A DISK extent on the dataset, its descendants or its snapshots, or a
 * FILE extent inside its directory (a FILESYSTEM or the pool root would
 * lose the file with it). A database error counts as used (with the
 * reason): deleting on a guess could pull a disk from under an extent. */
bool iscsi_config_dataset_in_use(const char *name, char *why, size_t len)
{
    char disk[600], child[600], snap[600], pool[256], rest[600];
    const char *slash;
    sqlite3_stmt *st;
    int rc;

    /* (strchr after these: with UBSan's nonnull check before it, GCC -O3
     * sees a path where name is NULL and warns on the formats.) */
    snprintf(disk, sizeof(disk), "zvol/%s", name);
    snprintf(child, sizeof(child), "zvol/%s/", name);
    snprintf(snap, sizeof(snap), "zvol/%s@", name);
    slash = strchr(name, '/');
    snprintf(pool, sizeof(pool), "%.*s", slash ? (int)(slash - name) : (int)strlen(name), name);
    snprintf(rest, sizeof(rest), "%s/", slash ? slash : "");
    db_lock();
    rc = icfg_prepare("SELECT name, disk FROM iscsi_extent WHERE type = 'DISK' AND (disk = ?1 "
                      "OR substr(disk, 1, length(?2)) = ?2 OR substr(disk, 1, length(?3)) = ?3) "
                      "ORDER BY id LIMIT 1",
                      &st);
    if (rc == 0) {
        sqlite3_bind_text(st, 1, disk, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, child, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, snap, -1, SQLITE_STATIC);
        rc = first_extent_user(st, strlen("zvol/"), why, len);
    }
    if (rc == 0 && !strchr(name, '@')) {
        rc = icfg_prepare("SELECT e.name, e.path FROM iscsi_extent e JOIN pools p ON p.name = ?1 "
                          "WHERE e.type = 'FILE' AND substr(e.path, 1, length(p.path || ?2)) = "
                          "p.path || ?2 ORDER BY e.id LIMIT 1",
                          &st);
        if (rc == 0) {
            sqlite3_bind_text(st, 1, pool, -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, rest, -1, SQLITE_STATIC);
            rc = first_extent_user(st, 0, why, len);
        }
    }
    db_unlock();
    if (rc < 0) {
        log_error("iscsi: reading the extents that use %s: %s", name, strerror(-rc));
        if (why && len)
            snprintf(why, len, "cannot tell whether an iSCSI extent uses %s: %s", name,
                     strerror(-rc));
    }
    return rc != 0;
}

/*
 * Rollback needs force while initiators are logged in to a target that
 * maps the volume (exactly it: a snapshot's extent is not affected).
 * Called by datasets with db_lock() held.
 */
static unsigned dataset_clients(const char *name, char *why, size_t len)
{
    char disk[600];
    snprintf(disk, sizeof(disk), "zvol/%s", name);
    unsigned total = 0;
    sqlite3_stmt *st;
    db_lock();
    if (icfg_prepare("SELECT t.name, e.name FROM iscsi_extent e JOIN iscsi_targetextent te ON "
                     "te.extent_id = e.id JOIN iscsi_target t ON t.id = te.target_id WHERE "
                     "e.type = 'DISK' AND e.disk = ?1 ORDER BY t.id",
                     &st) == 0) {
        sqlite3_bind_text(st, 1, disk, -1, SQLITE_STATIC);
        char *basename = icfg_global_basename();
        while (sqlite3_step(st) == SQLITE_ROW) {
            char iqn[600];
            snprintf(iqn, sizeof(iqn), "%s:%s", basename ? basename : "", icfg_col_text(st, 0));
            unsigned n = iscsi_sessions_count_target(iqn);
            if (n && !total && why && len)
                snprintf(why, len, "shared over iSCSI as extent %s of target %s with %u session%s",
                         icfg_col_text(st, 1), icfg_col_text(st, 0), n, n == 1 ? "" : "s");
            total += n;
        }
        free(basename);
        icfg_finalize(st);
    }
    db_unlock();
    return total;
}

/*
 * A rename moves extents along: DISK extents on the renamed dataset (with
 * subtree, also on its children and snapshots) get the new "zvol/<name>",
 * and FILE extents whose file was inside a renamed directory the new path.
 * The gen column is left alone, so the running LUs stay (their volumes
 * are the same open files) and sessions see nothing. Inside the rename's
 * transaction, db_lock() held.
 */
static int dataset_renamed(const char *old_name, const char *new_name, bool subtree)
{
    char od[600], nd[600];
    snprintf(od, sizeof(od), "zvol/%s", old_name);
    snprintf(nd, sizeof(nd), "zvol/%s", new_name);
    int rc = icfg_run(subtree ? "UPDATE iscsi_extent SET disk = ?2 || substr(disk, length(?1) + "
                                "1), path = CASE WHEN path = disk THEN ?2 || substr(disk, "
                                "length(?1) + 1) ELSE path END WHERE type = 'DISK' AND (disk = "
                                "?1 OR substr(disk, 1, length(?1) + 1) IN (?1 || '/', ?1 || '@'))"
                              : "UPDATE iscsi_extent SET disk = ?2, path = CASE WHEN path = disk "
                                "THEN ?2 ELSE path END WHERE type = 'DISK' AND disk = ?1",
                      "tt", od, nd);
    if (rc < 0 || !subtree)
        return rc;
    /* FILE extents below the renamed directory (a pool's path is fixed,
     * and a rename never leaves its pool) */
    const char *so = strchr(old_name, '/'), *sn = strchr(new_name, '/');
    if (!so || !sn)
        return 0;
    char pool[256];
    snprintf(pool, sizeof(pool), "%.*s", (int)(so - old_name), old_name);
    return icfg_run("UPDATE iscsi_extent SET path = (SELECT p.path FROM pools p WHERE p.name = ?1) "
                    "|| ?3 || substr(path, length((SELECT p.path FROM pools p WHERE p.name = ?1) "
                    "|| ?2) + 1) WHERE type = 'FILE' AND substr(path, 1, length((SELECT p.path "
                    "FROM pools p WHERE p.name = ?1) || ?2 || '/')) = (SELECT p.path FROM pools p "
                    "WHERE p.name = ?1) || ?2 || '/'",
                    "ttt", pool, so, sn);
}

/* The extents on a deleted dataset: DISK extents on it (or a child or
 * snapshot), and FILE extents whose file was inside its directory. A new
 * array in *out (caller frees). DB locked. 0 or -errno. */
static int deleted_extents(const char *name, int64_t **out, size_t *n)
{
    char disk[600], child[600], snap[600];
    snprintf(disk, sizeof(disk), "zvol/%s", name);
    snprintf(child, sizeof(child), "zvol/%s/", name);
    snprintf(snap, sizeof(snap), "zvol/%s@", name);
    const char *slash = strchr(name, '/');
    char pool[256], rest[600];
    snprintf(pool, sizeof(pool), "%.*s", slash ? (int)(slash - name) : (int)strlen(name), name);
    snprintf(rest, sizeof(rest), "%s/", slash ? slash : "");
    sqlite3_stmt *st;
    int rc = icfg_prepare(
        "SELECT id FROM iscsi_extent WHERE type = 'DISK' AND (disk = ?1 OR "
        "substr(disk, 1, length(?2)) = ?2 OR substr(disk, 1, length(?3)) = ?3) UNION "
        "SELECT e.id FROM iscsi_extent e JOIN pools p ON p.name = ?4 WHERE e.type = 'FILE' "
        "AND instr(?1, '@') = 0 AND substr(e.path, 1, length(p.path || ?5)) = p.path || ?5",
        &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, disk, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, child, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, snap, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, pool, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, rest, -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc)) {
        int64_t *e = realloc(*out, (*n + 1) * sizeof(*e));
        if (!e) {
            rc = -ENOMEM;
            break;
        }
        *out = e;
        (*out)[(*n)++] = sqlite3_column_int64(st, 0);
    }
    icfg_finalize(st);
    return rc;
}

/* Delete an extent and its mappings, recording the extent and the targets
 * it was mapped to as changed. DB locked, in tx. 0 or -errno. */
static int delete_extent(struct cfg_tx *tx, int64_t extent_id)
{
    sqlite3_stmt *st;
    int rc = icfg_prepare("SELECT target_id FROM iscsi_targetextent WHERE extent_id = ?", &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, extent_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        cfg_tx_changed(tx, CFG_ISCSI_TARGET, sqlite3_column_int64(st, 0), CFG_UPDATED);
    icfg_finalize(st);
    rc = rc == SQLITE_DONE ? 0 : -EIO;
    if (rc == 0)
        rc = icfg_run("DELETE FROM iscsi_targetextent WHERE extent_id = ?", "i", extent_id);
    if (rc == 0)
        rc = icfg_run("DELETE FROM iscsi_extent WHERE id = ?", "i", extent_id);
    if (rc == 0)
        cfg_tx_changed(tx, CFG_ISCSI_EXTENT, extent_id, CFG_DELETED);
    return rc;
}

/* Delete target id if no LUN is left on it. DB locked. 0 or -errno. */
static int delete_target_if_empty(int64_t id)
{
    int64_t left;
    if (icfg_int(&left, "SELECT COUNT(*) FROM iscsi_targetextent WHERE target_id = ?", "i", id) <
            0 ||
        left != 0)
        return 0;
    return icfg_target_delete(id);
}

/*
 * A dataset was deleted after all (pool.dataset.delete with force skips the
 * in-use check): its extents, their mappings and the targets left without
 * a LUN by that go too, as TrueNAS' attachment delegate does, so no extent
 * points at a volume that no longer exists. Sessions of removed targets are
 * closed; other affected targets get REPORTED LUNS DATA HAS CHANGED.
 */
static void dataset_deleted(const char *name)
{
    struct cfg_tx tx;
    if (cfg_tx_begin(&tx) < 0) {
        log_error("iscsi config: cannot remove the extents of deleted dataset %s", name);
        return;
    }
    int64_t *extents = NULL;
    size_t n = 0;
    int rc = deleted_extents(name, &extents, &n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = delete_extent(&tx, extents[i]);
    /* targets this left without any LUN */
    for (size_t i = 0; rc == 0 && i < tx.n; i++)
        if (tx.v[i].kind == CFG_ISCSI_TARGET)
            rc = delete_target_if_empty(tx.v[i].id);
    if (rc == 0) {
        rc = cfg_tx_commit(&tx);
    } else {
        icfg_target_reset_hint(0);
        cfg_tx_abort(&tx);
    }
    if (rc == 0 && n)
        log_info("iscsi config: dataset %s deleted: removed %zu extent(s)", name, n);
    else if (rc < 0)
        log_error("iscsi config: cannot remove the extents of deleted dataset %s", name);
    free(extents);
}

/* The iSCSI configuration's one subscriber (control/events.h): renames
 * rewrite extents inside the rename's transaction; a deleted dataset's
 * extents go; the running targets' events go to the runtime. */
static int on_event(const struct event *ev, void *arg)
{
    (void)arg;
    if (ev->type == EV_RENAME_UPDATE)
        return dataset_renamed(ev->rename.old_name, ev->rename.new_name, ev->rename.subtree);
    if (ev->dataset.what == DATASETS_DELETED)
        dataset_deleted(ev->dataset.name);
    else
        icfg_runtime_dataset(ev->dataset.what, ev->dataset.name, ev->dataset.v);
    return 0;
}

void iscsi_config_init(void)
{
    db_register_schema(schema);
    api_register(icfg_global_methods, icfg_global_methods_count);
    api_register(icfg_portal_methods, icfg_portal_methods_count);
    api_register(icfg_initiator_methods, icfg_initiator_methods_count);
    api_register(icfg_auth_methods, icfg_auth_methods_count);
    api_register(icfg_target_methods, icfg_target_methods_count);
    api_register(icfg_extent_methods, icfg_extent_methods_count);
    api_register(icfg_targetextent_methods, icfg_targetextent_methods_count);
    datasets_register_in_use(iscsi_config_dataset_in_use);
    datasets_register_reserving_export("iscsi", extent_exports);
    datasets_register_clients(dataset_clients);
    events_subscribe(&(struct event_subscriber){
        .name = "iscsi config",
        .types = EV_BIT(EV_RENAME_UPDATE) | EV_BIT(EV_DATASET),
        .fn = on_event,
    });
    /* the runtime side: publishes what every committed change did */
    icfg_runtime_init();
}
