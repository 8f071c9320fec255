/* The stored pools (pool_store.h). */
#include "control/pool_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "control/pool_rbd_store.h"

#define POOL_SELECT "SELECT id, name, path, created FROM pools"

static void copy_text(char *dst, size_t len, const unsigned char *src)
{
    snprintf(dst, len, "%s", src ? (const char *)src : "");
}

/* The row at st (POOL_SELECT's columns) into *out. */
static void pool_decode_row(sqlite3_stmt *st, struct ds_pool *out)
{
    memset(out, 0, sizeof(*out));
    out->id = sqlite3_column_int64(st, 0);
    copy_text(out->name, sizeof(out->name), sqlite3_column_text(st, 1));
    copy_text(out->path, sizeof(out->path), sqlite3_column_text(st, 2));
    out->created = sqlite3_column_int64(st, 3);
}

/* The one pool whose column (a literal: "name" or "path") is value. */
static int pool_get_where(const char *sql, const char *value, struct ds_pool *out)
{
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_text(st, 1, value, -1, SQLITE_STATIC);
    rc = db_step_row(st);
    if (rc == 0)
        pool_decode_row(st, out);
    db_stmt_done(st);
    return rc;
}

int ds_pool_get(const char *name, struct ds_pool *out)
{
    return pool_get_where(POOL_SELECT " WHERE name = ?", name, out);
}

int ds_pool_get_by_path(const char *path, struct ds_pool *out)
{
    return pool_get_where(POOL_SELECT " WHERE path = ?", path, out);
}

/* The pools of sql (POOL_SELECT's columns, no parameters): a new array. */
static int pool_list_sql(const char *sql, struct ds_pool **out, size_t *n)
{
    struct ds_pool *v = NULL;
    size_t cnt = 0;
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);

    *out = NULL;
    *n = 0;
    if (rc < 0)
        return rc;
    while (db_stmt_next(st, &rc)) {
        struct ds_pool *nv = realloc(v, (cnt + 1) * sizeof(*nv));
        if (!nv) {
            rc = -ENOMEM;
            break;
        }
        v = nv;
        pool_decode_row(st, &v[cnt++]);
    }
    db_stmt_done(st);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n = cnt;
    return 0;
}

int ds_pool_list(bool by_name, struct ds_pool **out, size_t *n)
{
    return pool_list_sql(by_name ? POOL_SELECT " ORDER BY name" : POOL_SELECT " ORDER BY id", out,
                         n);
}

int ds_pool_get_rbd(const char *name, struct ds_pool *out, struct ds_rbd_spec *spec)
{
    int rc = ds_pool_get(name, out);

    return rc < 0 ? rc : ds_rbd_spec_get(out->id, spec);
}

int ds_pool_insert(struct ds_pool *p)
{
    sqlite3_stmt *st;
    int rc = db_run("INSERT INTO pools (name, path, created) VALUES (?, ?,"
                    " CAST(strftime('%s','now') AS INTEGER) * 1000)",
                    "tt", p->name, p->path);

    if (rc < 0)
        return rc;
    p->id = sqlite3_last_insert_rowid(db_handle());
    rc = db_stmt("SELECT created FROM pools WHERE id = ?", &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, p->id);
    rc = db_step_row(st);
    if (rc == 0)
        p->created = sqlite3_column_int64(st, 0);
    db_stmt_done(st);
    return rc;
}
