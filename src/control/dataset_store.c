/* The stored datasets (dataset_store.h). */
#include "control/dataset_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/db.h"
#include "control/ds_internal.h"
#include "control/dsprops.h"

static void copy_text(char *dst, size_t len, const unsigned char *src)
{
    snprintf(dst, len, "%s", src ? (const char *)src : "");
}

#define DS_COLUMNS                                                                                 \
    "id, name, pool_id, type, volsize, volblocksize, sparse, sync, readonly, backend, "            \
    "latency_us, IFNULL(origin_id, 0), comments, created"

static void ds_row_fill(sqlite3_stmt *st, struct ds_row *r)
{
    const char *s;

    memset(r, 0, sizeof(*r));
    r->id = sqlite3_column_int64(st, 0);
    copy_text(r->name, sizeof(r->name), sqlite3_column_text(st, 1));
    r->pool_id = sqlite3_column_int64(st, 2);
    s = (const char *)sqlite3_column_text(st, 3);
    r->type = s && strcmp(s, "VOLUME") == 0 ? DS_VOLUME : DS_FILESYSTEM;
    r->volsize = (uint64_t)sqlite3_column_int64(st, 4);
    r->volblocksize = (uint32_t)sqlite3_column_int64(st, 5);
    r->sparse = sqlite3_column_int(st, 6) != 0;
    s = (const char *)sqlite3_column_text(st, 7);
    if (!s || volume_sync_parse(s, &r->sync) < 0)
        r->sync = VOLUME_SYNC_STANDARD;
    r->readonly = sqlite3_column_int(st, 8) != 0;
    s = (const char *)sqlite3_column_text(st, 9);
    r->memory = s && strcmp(s, "memory") == 0;
    r->latency_us = (uint32_t)sqlite3_column_int64(st, 10);
    r->origin_id = sqlite3_column_int64(st, 11);
    copy_text(r->comments, sizeof(r->comments), sqlite3_column_text(st, 12));
    r->created = sqlite3_column_int64(st, 13);
}

static int ds_dataset_get_where(const char *where, const char *name, int64_t id, struct ds_row *out)
{
    char sql[256];
    sqlite3_stmt *st;
    int rc;

    snprintf(sql, sizeof(sql), "SELECT " DS_COLUMNS " FROM datasets WHERE %s", where);
    rc = db_stmt(sql, &st);
    if (rc < 0)
        return rc;
    if (name)
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    else
        sqlite3_bind_int64(st, 1, id);
    rc = db_step_row(st);
    if (rc == 0)
        ds_row_fill(st, out);
    db_stmt_done(st);
    return rc;
}

int ds_dataset_get(const char *name, struct ds_row *out)
{
    return ds_dataset_get_where("name = ?", name, 0, out);
}

int ds_dataset_get_id(int64_t id, struct ds_row *out)
{
    return ds_dataset_get_where("id = ?", NULL, id, out);
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ds_dataset_insert(struct ds_row *r)
{
    sqlite3_stmt *st;
    enum volume_sync psync;
    bool pro;
    int rc;

    rc = db_stmt("INSERT INTO datasets (name, pool_id, type, volsize, volblocksize, sparse,"
                 " sync, readonly, backend, latency_us, origin_id, comments, created)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 &st);
    if (rc < 0)
        return rc;
    if (!r->created)
        r->created = now_ms();
    sqlite3_bind_text(st, 1, r->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, r->pool_id);
    sqlite3_bind_text(st, 3, r->type == DS_VOLUME ? "VOLUME" : "FILESYSTEM", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)r->volsize);
    sqlite3_bind_int64(st, 5, r->volblocksize);
    sqlite3_bind_int(st, 6, r->sparse);
    sqlite3_bind_text(st, 7, volume_sync_name(r->sync), -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 8, r->readonly);
    sqlite3_bind_text(st, 9, r->memory ? "memory" : "file", -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 10, r->latency_us);
    if (r->origin_id)
        sqlite3_bind_int64(st, 11, r->origin_id);
    else
        sqlite3_bind_null(st, 11);
    sqlite3_bind_text(st, 12, r->comments, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 13, r->created);
    rc = db_step_done(st);
    db_stmt_done(st);
    if (rc < 0)
        return rc;
    r->id = sqlite3_last_insert_rowid(db_handle());
    /* sync and readonly the new dataset does not inherit are its own
     * (a clone keeps its origin's; ZFS would have it inherit) */
    ds_props_parent_effective(r->name, &psync, &pro);
    if (r->sync != psync) {
        char low[16];
        const char *up = volume_sync_name(r->sync);
        size_t i;

        for (i = 0; up[i] && i + 1 < sizeof(low); i++)
            low[i] = (char)(up[i] >= 'A' && up[i] <= 'Z' ? up[i] + 32 : up[i]);
        low[i] = '\0';
        rc = ds_prop_set(r->id, "sync", low);
    }
    if (rc == 0 && r->readonly != pro)
        rc = ds_prop_set(r->id, "readonly", r->readonly ? "on" : "off");
    return rc;
}

#define VIEW_SELECT                                                                                \
    "SELECT d.id, d.name, d.pool_id, d.type, d.volsize, d.volblocksize, d.sparse, d.sync,"         \
    " d.readonly, d.backend, d.latency_us, IFNULL(d.origin_id, 0), d.comments, d.created,"         \
    " p.name, p.path, (SELECT COUNT(*) FROM snapshots s WHERE s.dataset_id = d.id),"               \
    " IFNULL((SELECT od.name || '@' || os.name FROM snapshots os"                                  \
    "   JOIN datasets od ON od.id = os.dataset_id WHERE os.id = d.origin_id), '')"                 \
    " FROM datasets d JOIN pools p ON p.id = d.pool_id"

/* A dataset and its descendants: "X" and the range ("X/", "X0") ('0' is
 * the byte after '/'), so the name index is used, not a scan. */
#define SUBTREE_SQL "(d.name = ?%zu OR (d.name > ?%zu || '/' AND d.name < ?%zu || '0'))"

/* The WHERE of keys (malloc'd; "" for every dataset), or NULL. */
static char *keys_where(const struct ds_row_keys *keys)
{
    char *where = NULL;
    size_t len = 0;
    FILE *f;

    if (keys->kind == DS_KEYS_ALL)
        return strdup("");
    if (keys->kind == DS_KEYS_RANGE)
        /* The descendants of a name in the range are in it too. */
        return strdup(" WHERE (d.name >= ?1 AND d.name < ?2)");
    f = open_memstream(&where, &len);
    if (!f)
        return NULL;
    fputs(" WHERE ", f);
    if (keys->n == 0)
        fputs("0", f);
    for (size_t k = 1; k <= keys->n; k++)
        fprintf(f, "%s" SUBTREE_SQL, k > 1 ? " OR " : "", k, k, k);
    if (fclose(f) != 0) {
        free(where);
        return NULL;
    }
    return where;
}

static void keys_bind(sqlite3_stmt *st, const struct ds_row_keys *keys)
{
    if (keys->kind == DS_KEYS_RANGE) {
        sqlite3_bind_text(st, 1, keys->lo, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, keys->hi, -1, SQLITE_STATIC);
    } else if (keys->kind == DS_KEYS_SUBTREES) {
        for (size_t k = 0; k < keys->n; k++)
            sqlite3_bind_text(st, (int)k + 1, keys->names[k], -1, SQLITE_STATIC);
    }
}

/* The row at st (VIEW_SELECT's columns) into *v. */
static void view_decode(sqlite3_stmt *st, struct ds_row_view *v)
{
    memset(v, 0, sizeof(*v));
    ds_row_fill(st, &v->row);
    v->pool.id = v->row.pool_id;
    copy_text(v->pool.name, sizeof(v->pool.name), sqlite3_column_text(st, 14));
    copy_text(v->pool.path, sizeof(v->pool.path), sqlite3_column_text(st, 15));
    v->snapshot_count = sqlite3_column_int64(st, 16);
    v->origin = (const char *)sqlite3_column_text(st, 17);
    if (!v->origin)
        v->origin = "";
}

int ds_dataset_each(const struct ds_row_keys *keys,
                    int (*fn)(const struct ds_row_view *v, void *arg), void *arg)
{
    char *where = keys_where(keys), *sql = NULL;
    struct ds_row_view *v = malloc(sizeof(*v));
    sqlite3_stmt *st = NULL;
    int rc = -ENOMEM;

    /* Plain name order would put "a.b" between "a" and "a/c" ('.' < '/');
     * sorting with '/' as the lowest byte keeps descendants contiguous. */
    if (v && where &&
        asprintf(&sql, "%s%s ORDER BY replace(d.name, '/', char(1))", VIEW_SELECT, where) >= 0)
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

int ds_dataset_props_each(int64_t id, void (*fn)(const char *name, const char *value, void *arg),
                          void *arg)
{
    sqlite3_stmt *st;
    int rc =
        db_stmt("SELECT name, value FROM dataset_props WHERE dataset_id = ? ORDER BY name", &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, id);
    while (db_stmt_next(st, &rc))
        fn((const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1), arg);
    db_stmt_done(st);
    return rc;
}

int ds_dataset_update_size(int64_t id, uint64_t volsize, const char *comments)
{
    return db_run("UPDATE datasets SET volsize = ?, comments = ? WHERE id = ?", "iti",
                  (int64_t)volsize, comments, id);
}

int ds_dataset_set_volsize(int64_t id, uint64_t volsize)
{
    return db_run("UPDATE datasets SET volsize = ? WHERE id = ?", "ii", (int64_t)volsize, id);
}

int ds_dataset_set_origin(int64_t id, int64_t origin_id)
{
    /* origin 0: none (NULL) */
    return db_run("UPDATE datasets SET origin_id = NULLIF(?2, 0) WHERE id = ?1", "ii", id,
                  origin_id);
}

int ds_dataset_delete(int64_t id, bool with_snapshots)
{
    int rc = with_snapshots ? db_run("DELETE FROM snapshots WHERE dataset_id = ?", "i", id) : 0;

    if (rc == 0)
        rc = db_run("DELETE FROM dataset_props WHERE dataset_id = ?", "i", id);
    if (rc == 0)
        rc = db_run("DELETE FROM datasets WHERE id = ?", "i", id);
    return rc;
}

int ds_dataset_each_in_subtree(const char *name,
                               int (*fn)(const char *name, int64_t id, bool is_volume, void *arg),
                               void *arg)
{
    sqlite3_stmt *st;
    int rc;

    /* Descending on the '/'-lowest key: children before their parent. */
    rc = db_stmt("SELECT name, id, type FROM datasets WHERE name = ?1 OR"
                 " substr(name, 1, length(?1) + 1) = ?1 || '/'"
                 " ORDER BY replace(name, '/', char(1)) DESC",
                 &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc)) {
        const char *type = (const char *)sqlite3_column_text(st, 2);

        rc = fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1),
                type && strcmp(type, "VOLUME") == 0, arg);
    }
    db_stmt_done(st);
    return rc;
}

/* A walk's caller: its fn(name) and arg. */
struct name_walk {
    int (*fn)(const char *name, void *arg);
    void *arg;
};

static int name_row(sqlite3_stmt *st, void *arg)
{
    const struct name_walk *w = arg;

    return w->fn((const char *)sqlite3_column_text(st, 0), w->arg);
}

int ds_dataset_each_descendant(const char *name, int (*fn)(const char *name, void *arg), void *arg)
{
    struct name_walk w = {.fn = fn, .arg = arg};
    char lower[DS_NAME_BUF + 2], upper[DS_NAME_BUF + 2];
    sqlite3_stmt *st;
    int rc;

    /* "name/" < d < "name0" ('0' is the byte after '/'): the name index
     * is used, not a scan */
    snprintf(lower, sizeof(lower), "%s/", name);
    snprintf(upper, sizeof(upper), "%s0", name);
    rc = db_stmt("SELECT name FROM datasets WHERE name > ? AND name < ? ORDER BY name", &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, lower, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, upper, -1, SQLITE_STATIC);
    rc = db_stmt_each(st, name_row, &w);
    db_stmt_done(st);
    return rc;
}

int ds_dataset_rename_subtree(const char *old_name, const char *new_name)
{
    return db_run("UPDATE datasets SET name = ?2 || substr(name, length(?1) + 1)"
                  " WHERE name = ?1 OR substr(name, 1, length(?1) + 1) = ?1 || '/'",
                  "tt", old_name, new_name);
}

int ds_dataset_each_stored_volume(const char *name, int (*fn)(const char *name, void *arg),
                                  void *arg)
{
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT name FROM datasets WHERE (name = ?1 OR"
                     " substr(name, 1, length(?1) + 1) = ?1 || '/') AND type = 'VOLUME'"
                     " AND backend <> 'memory'",
                     &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc))
        rc = fn((const char *)sqlite3_column_text(st, 0), arg);
    db_stmt_done(st);
    return rc;
}

int ds_dataset_outside_clone(const char *name, char *clone, size_t clen, char *origin, size_t olen)
{
    sqlite3_stmt *st;
    int rc;

    rc = db_stmt("SELECT c.name, od.name || '@' || os.name FROM datasets c"
                 " JOIN snapshots os ON os.id = c.origin_id"
                 " JOIN datasets od ON od.id = os.dataset_id"
                 " WHERE (od.name = ?1 OR substr(od.name, 1, length(?1) + 1) = ?1 || '/')"
                 " AND NOT (c.name = ?1 OR substr(c.name, 1, length(?1) + 1) = ?1 || '/')"
                 " LIMIT 1",
                 &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    rc = db_step_row(st);
    if (rc == 0) {
        copy_text(clone, clen, sqlite3_column_text(st, 0));
        copy_text(origin, olen, sqlite3_column_text(st, 1));
        rc = 1;
    } else if (rc == -ENOENT) {
        rc = 0;
    }
    db_stmt_done(st);
    return rc;
}

int ds_prop_set(int64_t dataset_id, const char *name, const char *value)
{
    if (!value)
        return db_run("DELETE FROM dataset_props WHERE dataset_id = ? AND name = ?", "it",
                      dataset_id, name);
    return db_run("INSERT INTO dataset_props (dataset_id, name, value) VALUES (?, ?, ?)"
                  " ON CONFLICT (dataset_id, name) DO UPDATE SET value = excluded.value",
                  "itt", dataset_id, name, value);
}

int ds_clear_user_props(int64_t dataset_id)
{
    return db_run("DELETE FROM dataset_props WHERE dataset_id = ? AND instr(name, ':') > 0", "i",
                  dataset_id);
}

int ds_dataset_zfs_props_of(char names[][DS_NAME_BUF], size_t n,
                            void (*fn)(const char *dataset, const char *prop, const char *value,
                                       void *arg),
                            void *arg)
{
    char *sql = NULL;
    size_t len = 0;
    sqlite3_stmt *st;
    FILE *f;
    int rc;

    if (n == 0)
        return 0;
    f = open_memstream(&sql, &len);
    if (!f)
        return -ENOMEM;
    fputs("SELECT d.name, p.name, p.value FROM dataset_props p JOIN datasets d"
          " ON d.id = p.dataset_id WHERE instr(p.name, ':') = 0 AND d.name IN (",
          f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s?%zu", i ? ", " : "", i + 1);
    fputs(")", f);
    fclose(f);
    rc = sql ? db_stmt(sql, &st) : -ENOMEM;
    free(sql);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        sqlite3_bind_text(st, (int)i + 1, names[i], -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc))
        fn((const char *)sqlite3_column_text(st, 0), (const char *)sqlite3_column_text(st, 1),
           (const char *)sqlite3_column_text(st, 2), arg);
    db_stmt_done(st);
    return rc;
}

int ds_dataset_each_local_sync(const char *name,
                               int (*fn)(const struct ds_row *r, const char *local_sync,
                                         const char *local_readonly, void *arg),
                               void *arg)
{
    struct ds_row *r = malloc(sizeof(*r));
    sqlite3_stmt *st = NULL;
    int rc = r ? 0 : -ENOMEM;

    /* name order with '/' lowest: a parent comes right before its subtree */
    if (rc == 0)
        rc = db_stmt("SELECT d.id, d.name, d.type, d.sync, d.readonly,"
                     " (SELECT value FROM dataset_props WHERE dataset_id = d.id AND name = 'sync'),"
                     " (SELECT value FROM dataset_props WHERE dataset_id = d.id AND name = "
                     "'readonly') FROM datasets d WHERE d.name = ?1 OR (d.name > ?1 || '/' AND "
                     "d.name < ?1 || '0') ORDER BY replace(d.name, '/', char(1))",
                     &st);
    if (rc < 0) {
        free(r);
        return rc;
    }
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    while (db_stmt_next(st, &rc)) {
        const char *type = (const char *)sqlite3_column_text(st, 2);

        memset(r, 0, sizeof(*r));
        r->id = sqlite3_column_int64(st, 0);
        copy_text(r->name, sizeof(r->name), sqlite3_column_text(st, 1));
        r->type = type && strcmp(type, "VOLUME") == 0 ? DS_VOLUME : DS_FILESYSTEM;
        if (volume_sync_parse((const char *)sqlite3_column_text(st, 3), &r->sync) < 0)
            r->sync = VOLUME_SYNC_STANDARD;
        r->readonly = sqlite3_column_int(st, 4) != 0;
        rc = fn(r, (const char *)sqlite3_column_text(st, 5),
                (const char *)sqlite3_column_text(st, 6), arg);
    }
    db_stmt_done(st);
    free(r);
    return rc;
}

int ds_dataset_set_effective(int64_t id, enum volume_sync sync, bool readonly)
{
    return db_run("UPDATE datasets SET sync = ?, readonly = ? WHERE id = ?", "tbi",
                  volume_sync_name(sync), readonly, id);
}
