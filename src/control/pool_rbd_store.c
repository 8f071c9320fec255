/* The stored settings of RBD pools (pool_rbd_store.h). */
#include "control/pool_rbd_store.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "control/db.h"
#include "control/pwenc.h"
#include "core/log.h"

static void copy_col(char *dst, size_t len, sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(dst, len, "%s", t ? (const char *)t : "");
}

/* The columns of SPEC_COLS, after the pool's id (and name). */
#define SPEC_COLS                                                                                  \
    "r.rbd_pool, r.namespace, r.conf, r.ceph_id, r.keyring, IFNULL(a.mon_host, ''),"               \
    " IFNULL(a.key, '') FROM pool_rbd r LEFT JOIN pool_rbd_auth a ON a.pool_id = r.pool_id"

/* The settings at st's columns first..first+6 (SPEC_COLS) into *out; the
 * key unsealed. */
static void spec_decode(sqlite3_stmt *st, int first, struct ds_rbd_spec *out)
{
    char sealed[PWENC_SEALED_MAX];

    copy_col(out->pool, sizeof(out->pool), st, first);
    copy_col(out->ns, sizeof(out->ns), st, first + 1);
    copy_col(out->conf, sizeof(out->conf), st, first + 2);
    copy_col(out->id, sizeof(out->id), st, first + 3);
    copy_col(out->keyring, sizeof(out->keyring), st, first + 4);
    copy_col(out->mon_host, sizeof(out->mon_host), st, first + 5);
    copy_col(sealed, sizeof(sealed), st, first + 6);
    out->key[0] = '\0';
    if (sealed[0] && pwenc_open(sealed, out->key, sizeof(out->key)) < 0)
        log_error("datasets: the cephx key of RBD pool %s cannot be decrypted (pwenc.key "
                  "replaced?): set it again",
                  out->pool);
}

int ds_rbd_spec_get(int64_t pool_id, struct ds_rbd_spec *out)
{
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT " SPEC_COLS " WHERE r.pool_id = ?", &st);

    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, pool_id);
    rc = db_step_row(st);
    if (rc == 0)
        spec_decode(st, 0, out);
    db_stmt_done(st);
    return rc;
}

int ds_rbd_spec_insert(int64_t pool_id, const struct ds_rbd_spec *s)
{
    char sealed[PWENC_SEALED_MAX];
    int rc = pwenc_seal(s->key, sealed, sizeof(sealed));

    if (rc == 0)
        rc = db_run("INSERT INTO pool_rbd (pool_id, rbd_pool, namespace, conf, ceph_id, keyring)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    "ittttt", pool_id, s->pool, s->ns, s->conf, s->id, s->keyring);
    if (rc == 0 && (s->mon_host[0] || s->key[0]))
        rc = db_run("INSERT INTO pool_rbd_auth (pool_id, mon_host, key) VALUES (?, ?, ?)", "itt",
                    pool_id, s->mon_host, sealed);
    return rc;
}

/* ds_rbd_spec_each's caller: its fn and arg. */
struct spec_walk {
    int (*fn)(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec, void *arg);
    void *arg;
};

static int spec_row(sqlite3_stmt *st, void *arg)
{
    const struct spec_walk *w = arg;
    struct ds_rbd_spec spec;

    spec_decode(st, 2, &spec);
    return w->fn(sqlite3_column_int64(st, 0), (const char *)sqlite3_column_text(st, 1), &spec,
                 w->arg);
}

int ds_rbd_spec_each(int (*fn)(int64_t pool_id, const char *name, const struct ds_rbd_spec *spec,
                               void *arg),
                     void *arg)
{
    struct spec_walk w = {.fn = fn, .arg = arg};
    sqlite3_stmt *st;
    int rc = db_stmt("SELECT p.id, p.name, " SPEC_COLS " JOIN pools p ON p.id = r.pool_id", &st);

    if (rc < 0)
        return rc;
    rc = db_stmt_each(st, spec_row, &w);
    db_stmt_done(st);
    return rc;
}
