/* The stored snapshots (snapshot_store.h). */
#include "control/snapshot_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"

static void copy_text(char *dst, size_t len, const unsigned char *src)
{
    snprintf(dst, len, "%s", src ? (const char *)src : "");
}

static int snapshot_get_where(const char *where, const char *dataset, const char *snap, int64_t id,
                              struct ds_snap *out)
{
    char sql[256];
    sqlite3_stmt *st;
    int rc;

    snprintf(sql, sizeof(sql),
             "SELECT s.id, s.dataset_id, d.name, s.name, s.volsize, s.created"
             " FROM snapshots s JOIN datasets d ON d.id = s.dataset_id WHERE %s",
             where);
    rc = db_stmt(sql, &st);
    if (rc < 0)
        return rc;
    if (dataset) {
        sqlite3_bind_text(st, 1, dataset, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, snap, -1, SQLITE_STATIC);
    } else {
        sqlite3_bind_int64(st, 1, id);
    }
    rc = db_step_row(st);
    if (rc == 0) {
        memset(out, 0, sizeof(*out));
        out->id = sqlite3_column_int64(st, 0);
        out->dataset_id = sqlite3_column_int64(st, 1);
        copy_text(out->dataset, sizeof(out->dataset), sqlite3_column_text(st, 2));
        copy_text(out->name, sizeof(out->name), sqlite3_column_text(st, 3));
        out->volsize = (uint64_t)sqlite3_column_int64(st, 4);
        out->created = sqlite3_column_int64(st, 5);
    }
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_get(const char *dataset, const char *snap, struct ds_snap *out)
{
    return snapshot_get_where("d.name = ? AND s.name = ?", dataset, snap, 0, out);
}

int ds_snapshot_get_id(int64_t id, struct ds_snap *out)
{
    return snapshot_get_where("s.id = ?", NULL, NULL, id, out);
}

#define VIEW_SELECT                                                                                \
    "SELECT s.id, s.dataset_id, d.name, s.name, s.volsize, s.created, p.id, p.name, p.path, "      \
    "(SELECT group_concat(c.name, ',') FROM datasets c WHERE c.origin_id = s.id) FROM snapshots "  \
    "s JOIN datasets d ON d.id = s.dataset_id JOIN pools p ON p.id = d.pool_id"

/* The WHERE of keys: one term per key, no constant term in the OR (SQLite
 * then looks each one up by index); "0" for no key. A malloc'd text. */
static char *keys_where(const struct ds_snap_keys *keys)
{
    char *where = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&where, &len);
    int b = 1;

    if (!f)
        return NULL;
    fputs(" WHERE (", f);
    for (size_t k = 0; k < keys->n; k++, b++) {
        if (keys->v[k].snap) {
            fprintf(f, "%s(d.name = ?%d AND s.name = ?%d)", k ? " OR " : "", b, b + 1);
            b++;
        } else {
            fprintf(f, "%sd.name = ?%d", k ? " OR " : "", b);
        }
    }
    fputs(keys->n ? ")" : "0)", f);
    if (fclose(f) != 0) {
        free(where);
        return NULL;
    }
    return where;
}

static void keys_bind(sqlite3_stmt *st, const struct ds_snap_keys *keys)
{
    int b = 1;

    for (size_t k = 0; keys && k < keys->n; k++) {
        const struct ds_snap_key *key = &keys->v[k];

        sqlite3_bind_text(st, b++, key->dataset, key->dataset_len, SQLITE_STATIC);
        if (key->snap)
            sqlite3_bind_text(st, b++, key->snap, -1, SQLITE_STATIC);
    }
}

/* The row at st (VIEW_SELECT's columns) into *v. */
static void view_decode(sqlite3_stmt *st, struct ds_snap_view *v)
{
    const char *clones = (const char *)sqlite3_column_text(st, 9);

    memset(v, 0, sizeof(*v));
    v->snap.id = sqlite3_column_int64(st, 0);
    v->snap.dataset_id = sqlite3_column_int64(st, 1);
    copy_text(v->snap.dataset, sizeof(v->snap.dataset), sqlite3_column_text(st, 2));
    copy_text(v->snap.name, sizeof(v->snap.name), sqlite3_column_text(st, 3));
    v->snap.volsize = (uint64_t)sqlite3_column_int64(st, 4);
    v->snap.created = sqlite3_column_int64(st, 5);
    v->pool.id = sqlite3_column_int64(st, 6);
    copy_text(v->pool.name, sizeof(v->pool.name), sqlite3_column_text(st, 7));
    copy_text(v->pool.path, sizeof(v->pool.path), sqlite3_column_text(st, 8));
    v->clones = clones ? clones : "";
}

int ds_snapshot_each(const struct ds_snap_keys *keys,
                     int (*fn)(const struct ds_snap_view *v, void *arg), void *arg)
{
    char *where = keys ? keys_where(keys) : NULL, *sql = NULL;
    struct ds_snap_view *v = malloc(sizeof(*v));
    sqlite3_stmt *st = NULL;
    int rc = -ENOMEM;

    if (v && (!keys || where) &&
        asprintf(&sql, "%s%s ORDER BY d.name, s.id", VIEW_SELECT, where ? where : "") >= 0)
        rc = db_stmt(sql, &st);
    if (rc == 0)
        keys_bind(st, keys);
    while (st && db_stmt_next(st, &rc)) {
        view_decode(st, v);
        rc = fn(v, arg);
    }
    if (st)
        db_stmt_done(st);
    free(sql);
    free(where);
    free(v);
    return rc;
}

int ds_snapshot_each_newer(int64_t dataset_id, int64_t after_id,
                           int (*fn)(const struct ds_snap *s, const char *clone, void *arg),
                           void *arg)
{
    sqlite3_stmt *st;
    struct ds_snap s;
    int rc = db_stmt("SELECT s.id, s.name, (SELECT c.name FROM datasets c WHERE c.origin_id = s.id"
                     " LIMIT 1) FROM snapshots s WHERE s.dataset_id = ? AND s.id > ?"
                     " ORDER BY s.id",
                     &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, dataset_id);
    sqlite3_bind_int64(st, 2, after_id);
    while (db_stmt_next(st, &rc)) {
        memset(&s, 0, sizeof(s));
        s.id = sqlite3_column_int64(st, 0);
        s.dataset_id = dataset_id;
        copy_text(s.name, sizeof(s.name), sqlite3_column_text(st, 1));
        rc = fn(&s, (const char *)sqlite3_column_text(st, 2), arg);
    }
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_each_in_subtree(const char *name,
                                int (*fn)(const char *full, int64_t id, void *arg), void *arg)
{
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT d.name || '@' || s.name, s.id FROM snapshots s JOIN datasets d"
                     " ON d.id = s.dataset_id WHERE d.name = ?1 OR"
                     " substr(d.name, 1, length(?1) + 1) = ?1 || '/'",
                     &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc))
        rc = fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1), arg);
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_each_upto(int64_t dataset_id, int64_t upto_id,
                          int (*fn)(const struct ds_snap *s, void *arg), void *arg)
{
    sqlite3_stmt *st;
    struct ds_snap s;
    int rc = db_stmt("SELECT id, name, volsize, created FROM snapshots WHERE dataset_id = ? AND "
                     "id <= ? ORDER BY id",
                     &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, dataset_id);
    sqlite3_bind_int64(st, 2, upto_id);
    while (db_stmt_next(st, &rc)) {
        memset(&s, 0, sizeof(s));
        s.id = sqlite3_column_int64(st, 0);
        s.dataset_id = dataset_id;
        copy_text(s.name, sizeof(s.name), sqlite3_column_text(st, 1));
        s.volsize = (uint64_t)sqlite3_column_int64(st, 2);
        s.created = sqlite3_column_int64(st, 3);
        rc = fn(&s, arg);
    }
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_each_named(const char *dataset, const char *snap, bool recursive,
                           int (*fn)(const struct ds_snap *s, void *arg), void *arg)
{
    sqlite3_stmt *st;
    struct ds_snap s;
    int rc = db_stmt(recursive ? "SELECT s.id, d.name FROM snapshots s JOIN datasets d ON d.id ="
                                 " s.dataset_id WHERE s.name = ?2 AND (d.name = ?1 OR"
                                 " substr(d.name, 1, length(?1) + 1) = ?1 || '/') ORDER BY d.name"
                               : "SELECT s.id, d.name FROM snapshots s JOIN datasets d ON d.id ="
                                 " s.dataset_id WHERE s.name = ?2 AND d.name = ?1",
                     &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, dataset, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, snap, -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc)) {
        memset(&s, 0, sizeof(s));
        s.id = sqlite3_column_int64(st, 0);
        copy_text(s.dataset, sizeof(s.dataset), sqlite3_column_text(st, 1));
        copy_text(s.name, sizeof(s.name), (const unsigned char *)snap);
        rc = fn(&s, arg);
    }
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_first_clone(int64_t id, char *name, size_t len)
{
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT name FROM datasets WHERE origin_id = ? ORDER BY name LIMIT 1", &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    rc = db_step_row(st);
    if (rc == 0)
        copy_text(name, len, sqlite3_column_text(st, 0));
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_insert(struct ds_snap *s)
{
    int rc = db_run("INSERT INTO snapshots (dataset_id, name, volsize, created)"
                    " VALUES (?, ?, ?, CAST((julianday('now') - 2440587.5) * 86400000 AS"
                    " INTEGER))",
                    "iti", s->dataset_id, s->name, (int64_t)s->volsize);

    s->id = sqlite3_last_insert_rowid(db_handle());
    return rc;
}

int ds_snapshot_delete(int64_t id)
{
    /* ON DELETE CASCADE too; explicit, so it holds whatever the pragma */
    int rc = db_run("DELETE FROM snapshot_props WHERE snapshot_id = ?", "i", id);

    return rc < 0 ? rc : db_run("DELETE FROM snapshots WHERE id = ?", "i", id);
}

int ds_snapshot_prop_set(int64_t id, const char *name, const char *value)
{
    return db_run("INSERT OR REPLACE INTO snapshot_props (snapshot_id, name, value)"
                  " VALUES (?, ?, ?)",
                  "itt", id, name, value);
}

int ds_snapshot_prop_remove(int64_t id, const char *name)
{
    return db_run("DELETE FROM snapshot_props WHERE snapshot_id = ? AND name = ?", "it", id, name);
}

int ds_snapshot_prop_get(int64_t id, const char *name, char *value, size_t len)
{
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT value FROM snapshot_props WHERE snapshot_id = ? AND name = ?", &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
    rc = db_step_row(st);
    if (rc == 0)
        copy_text(value, len, sqlite3_column_text(st, 0));
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_props_each(int64_t id, int (*fn)(const char *name, const char *value, void *arg),
                           void *arg)
{
    sqlite3_stmt *st;
    int rc =
        db_stmt("SELECT name, value FROM snapshot_props WHERE snapshot_id = ? ORDER BY name", &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    while (db_stmt_next(st, &rc))
        rc = fn((const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1),
                arg);
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_each_deferred_free(int (*fn)(const struct ds_snap *s, void *arg), void *arg)
{
    sqlite3_stmt *st;
    struct ds_snap s;
    int rc = db_stmt("SELECT s.id, s.dataset_id, d.name, s.name FROM snapshots s JOIN datasets d"
                     " ON d.id = s.dataset_id JOIN snapshot_props p ON p.snapshot_id = s.id"
                     " AND p.name = '" DS_SNAP_DEFER_DESTROY "' AND p.value = 'on'"
                     " WHERE NOT EXISTS (SELECT 1 FROM datasets c WHERE c.origin_id = s.id)"
                     " AND NOT EXISTS (SELECT 1 FROM snapshot_props h WHERE h.snapshot_id = s.id"
                     " AND h.name = '" DS_SNAP_HOLD "')"
                     " ORDER BY s.id",
                     &st);

    if (rc < 0)
        return rc;
    while (db_stmt_next(st, &rc)) {
        memset(&s, 0, sizeof(s));
        s.id = sqlite3_column_int64(st, 0);
        s.dataset_id = sqlite3_column_int64(st, 1);
        copy_text(s.dataset, sizeof(s.dataset), sqlite3_column_text(st, 2));
        copy_text(s.name, sizeof(s.name), sqlite3_column_text(st, 3));
        rc = fn(&s, arg);
    }
    db_stmt_done(st);
    return rc;
}

int ds_snapshot_rename(int64_t id, const char *name)
{
    return db_run("UPDATE snapshots SET name = ?2 WHERE id = ?1", "it", id, name);
}

int ds_snapshot_set_created(int64_t dataset_id, const char *name, int64_t created)
{
    return db_run("UPDATE snapshots SET created = ? WHERE dataset_id = ? AND name = ?", "iit",
                  created, dataset_id, name);
}

int ds_snapshot_move(int64_t from, int64_t to, int64_t upto_id)
{
    return db_run("UPDATE snapshots SET dataset_id = ?1 WHERE dataset_id = ?2 AND id <= ?3", "iii",
                  to, from, upto_id);
}

int ds_snapshot_rollback_mark(int64_t dataset_id, int64_t snap_id)
{
    return db_run("UPDATE datasets SET rollback_pending = ?2 WHERE id = ?1", "ii", dataset_id,
                  snap_id);
}

int ds_snapshot_rollback_done(int64_t dataset_id, uint64_t volsize)
{
    return db_run("UPDATE datasets SET rollback_pending = NULL, volsize = ?2 WHERE id = ?1", "ii",
                  dataset_id, (int64_t)volsize);
}

int ds_snapshot_rollbacks_pending(int64_t *dataset_ids, int64_t *snap_ids, size_t max, size_t *n)
{
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT id, rollback_pending FROM datasets WHERE rollback_pending IS NOT NULL",
                     &st);

    *n = 0;
    if (rc < 0)
        return rc;
    while (*n < max && db_stmt_next(st, &rc)) {
        dataset_ids[*n] = sqlite3_column_int64(st, 0);
        snap_ids[*n] = sqlite3_column_int64(st, 1);
        (*n)++;
    }
    db_stmt_done(st);
    return rc;
}
