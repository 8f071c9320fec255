/* SQL helpers, the dirty set, write transactions and shared parameter checks
 * for the iSCSI configuration. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/jsonw.h"
#include "control/db.h"
#include "core/log.h"
#include "iscsi/config/config_crud.h"
#include "store/poolfs.h"

int icfg_prepare(const char *sql, sqlite3_stmt **st)
{
    /* Cached (db_stmt): the same few statements run for every change. */
    return db_stmt(sql, st) < 0 ? -EIO : 0;
}

void icfg_finalize(sqlite3_stmt *st)
{
    db_stmt_done(st);
}

/* Prepare sql and bind its arguments (types as db_bindv). Returns the
 * prepare error (no statement), else 0 or the bind error with *st to
 * finalize. */
static int prepare_bound(const char *sql, sqlite3_stmt **st, const char *types, va_list ap)
{
    int rc = icfg_prepare(sql, st);
    if (rc < 0) {
        *st = NULL;
        return rc;
    }
    return db_bindv(*st, types, ap);
}

int icfg_step(sqlite3_stmt *st, const char *sql)
{
    int s = sqlite3_step(st);
    if (s == SQLITE_DONE || s == SQLITE_ROW)
        return 0;
    int rc = -db_errno();
    if (rc == 0)
        rc = -EIO;
    if (rc != -EEXIST)
        log_error("iscsi config: %s: %s", sql, sqlite3_errmsg(db_handle()));
    return rc;
}

/* The first column of sql's first row, as an integer (-ENOENT: no row, or
 * NULL there). */
static int step_int(sqlite3_stmt *st, int64_t *out)
{
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *out = sqlite3_column_int64(st, 0);
    else if (s == SQLITE_ROW || s == SQLITE_DONE)
        return -ENOENT;
    else
        return -EIO;
    return 0;
}

/* icfg_run (out NULL) and icfg_int: prepare, bind, one step, finalize. */
static int run_bound(const char *sql, int64_t *out, const char *types, va_list ap)
{
    sqlite3_stmt *st = NULL;
    int rc = prepare_bound(sql, &st, types, ap);
    if (!st)
        return rc;
    if (rc == 0)
        rc = out ? step_int(st, out) : icfg_step(st, sql);
    icfg_finalize(st);
    return rc;
}

int icfg_run(const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = run_bound(sql, NULL, types, ap);
    va_end(ap);
    return rc;
}

int icfg_int(int64_t *out, const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = run_bound(sql, out, types, ap);
    va_end(ap);
    return rc;
}

const char *icfg_col_text(sqlite3_stmt *st, int col)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    return t ? (const char *)t : "";
}

/* First index in sorted rows whose "id" is >= id. */
static size_t rows_lower_bound(json_t *rows, int64_t id)
{
    size_t lo = 0, hi = json_array_size(rows);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (json_integer_value(json_object_get(json_array_get(rows, mid), "id")) < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* c->rows with the watched changes applied, as a new array; NULL on error.
 * The rows that entered go to added, those replaced or removed to dropped. */
static json_t *rows_refresh(struct icfg_rows_cache *c, const struct icfg_typed *type, json_t *added,
                            json_t *dropped)
{
    json_t *rows = json_copy(c->rows); /* shallow: the rows are shared */
    for (size_t i = 0; rows && i < c->watch.n; i++) {
        int64_t id = c->watch.ids[i];
        struct icfg_key key = {
            .column = "id", .values = &(struct icfg_key_value){.is_int = true, .i = id}, .n = 1};
        json_t *found = icfg_typed_rows(type, &key);
        if (!found) {
            json_decref(rows);
            return NULL;
        }
        json_t *row = json_array_get(found, 0);
        size_t at = rows_lower_bound(rows, id);
        json_t *old = at < json_array_size(rows) ? json_array_get(rows, at) : NULL;
        if (old && json_integer_value(json_object_get(old, "id")) != id)
            old = NULL;
        int rc = 0;
        if (old)
            rc = json_array_append(dropped, old);
        if (rc == 0 && row)
            rc = json_array_append(added, row);
        if (rc == 0 && row && old)
            rc = json_array_set(rows, at, row);
        else if (rc == 0 && row)
            rc = json_array_insert(rows, at, row);
        else if (rc == 0 && old)
            rc = json_array_remove(rows, at);
        json_decref(found);
        if (rc < 0) {
            json_decref(rows);
            return NULL;
        }
    }
    return rows;
}

/* Cached rows are written from saved texts (api/jsonw.h): each row is
 * serialized once, when it enters the cache, not in every response. A row
 * can be both added and dropped (an id changed twice): set first, then
 * clear, so that it ends up unregistered. */
static void rows_memo(json_t *added, json_t *dropped)
{
    size_t i;
    json_t *row;
    json_array_foreach(added, i, row)
    {
        if (api_json_memo_set(row) < 0)
            break; /* out of memory: the rest is walked when written */
    }
    json_array_foreach(dropped, i, row)
    {
        api_json_memo_clear(row);
    }
}

json_t *icfg_rows_cached(struct icfg_rows_cache *c, const struct icfg_typed *type)
{
    if (!c->registered) {
        db_watch_register(&c->watch);
        c->registered = true;
    }
    sqlite3 *db = db_handle();
    if (!db || !sqlite3_get_autocommit(db))
        return icfg_typed_rows(type, NULL); /* uncommitted rows: not for the cache */
    if (c->rows && !c->watch.overflow && c->watch.n == 0)
        return json_incref(c->rows); /* unchanged since the last call */
    json_t *rows = NULL;
    json_t *added = json_array(), *dropped = json_array();
    if (c->rows && !c->watch.overflow && added && dropped)
        rows = rows_refresh(c, type, added, dropped);
    if (rows) {
        rows_memo(added, dropped);
    } else {
        rows = icfg_typed_rows(type, NULL);
        if (rows) /* rebuilt: every old row leaves, every new one enters */
            rows_memo(rows, c->rows);
    }
    json_decref(added);
    json_decref(dropped);
    if (!rows)
        return NULL;
    json_decref(c->rows);
    c->rows = json_incref(rows);
    c->watch.n = 0;
    c->watch.overflow = false;
    return rows;
}

int icfg_db_fail(struct api_call *call, int err)
{
    if (err == -EEXIST)
        return api_error(call, EEXIST, "UNIQUE constraint failed");
    if (err == -EBUSY)
        return api_error(call, EBUSY, "configuration database is busy");
    return api_error(call, err < 0 ? -err : EIO, "configuration database error: %s",
                     strerror(err < 0 ? -err : EIO));
}

int icfg_write_begin(struct icfg_write *w, struct api_call *call)
{
    memset(w, 0, sizeof(*w));
    w->call = call;
    w->method = api_call_method(call);
    if (cfg_tx_begin(&w->tx) < 0)
        return api_error(call, EIO, "cannot start a configuration transaction");
    return 0;
}

void icfg_changed_target(struct icfg_write *w, int64_t target_id)
{
    cfg_tx_changed(&w->tx, CFG_ISCSI_TARGET, target_id, CFG_UPDATED);
}

/* Remove the files of deleted FILE extents once their deletion is durable
 * (a rolled-back or nested delete keeps its file). */
static void unlink_committed(struct icfg_write *w, bool durable)
{
    size_t i;
    json_t *path;
    json_array_foreach(w->unlink_after, i, path)
    {
        int urc = durable ? poolfs_unlink(json_string_value(path)) : 0;
        if (urc < 0 && urc != -ENOENT)
            log_warn("iscsi config: cannot remove extent file %s: %s", json_string_value(path),
                     strerror(-urc));
    }
    json_decref(w->unlink_after);
    w->unlink_after = NULL;
}

int icfg_write_end(struct icfg_write *w, int rc)
{
    bool outermost = w->tx.outer == NULL;
    if (rc == 0) {
        /* Committed without waiting for the disk: the fdatasync happens
         * after the DB lock is released, shared with the writers that
         * commit meanwhile, and before the caller answers (cfgtx.h). */
        w->tx.defer = w->defer;
        int c = cfg_tx_commit(&w->tx);
        if (c < 0 && !w->tx.committed) {
            db_lock();
            icfg_target_reset_hint(0); /* an allocated rel_tgt_id may be free again */
            db_unlock();
            rc = api_error(w->call, EIO, "cannot commit the configuration transaction");
        } else if (c < 0 && c != -EIO) {
            /* committed here, refused by the gateway group's store (cfgtx.h) */
            rc = api_error(w->call, -c, "%s", cfg_tx_after_message());
        } else if (c < 0) {
            rc = api_error(w->call, EIO,
                           "the configuration change was committed but could not be made durable "
                           "(fdatasync failed)");
        }
    } else {
        icfg_target_reset_hint(0); /* an allocated rel_tgt_id may be free again */
        cfg_tx_abort(&w->tx);
    }
    unlink_committed(w, rc == 0 && outermost);
    return rc;
}

const char *icfg_field(struct api_call *call, const char *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s.%s", api_call_method(call), field);
    return buf;
}

const char *icfg_wfield(const struct icfg_write *w, const char *field, char *buf, size_t len)
{
    snprintf(buf, len, "%s.%s", w->method, field);
    return buf;
}

int icfg_param_id(struct api_call *call, json_t *params, size_t index, int64_t *id)
{
    json_t *v = json_is_array(params) ? json_array_get(params, index) : NULL;
    char f[128];
    icfg_field(call, "id", f, sizeof(f));
    if (!v) {
        api_verr(call, f, EINVAL, "Field required");
        return -1;
    }
    if (!json_is_integer(v)) {
        api_verr(call, f, EINVAL, "Input should be a valid integer");
        return -1;
    }
    *id = json_integer_value(v);
    return 0;
}

int icfg_param_bool(struct api_call *call, json_t *params, size_t index, const char *name, bool def,
                    bool *out)
{
    json_t *v = json_is_array(params) ? json_array_get(params, index) : NULL;
    *out = def;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        char f[128];
        api_verr(call, icfg_field(call, name, f, sizeof(f)), EINVAL,
                 "Input should be a valid boolean");
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

bool icfg_pop_defer(json_t *data)
{
    json_t *d = json_object_get(data, "defer");
    bool v = json_is_true(d);
    json_object_del(data, "defer");
    return v;
}

int icfg_query_rows(struct api_call *call, json_t *rows, json_t *params, json_t **result)
{
    if (!rows)
        return api_error(call, EIO, "configuration database error");
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

int icfg_get_instance(struct api_call *call, json_t *params, json_t **result, api_handler_fn query,
                      const char *what)
{
    int64_t id;
    /* icfg_get_instance_args: checked by the dispatcher; this only decodes. */
    if (icfg_param_id(call, params, 0, &id) < 0)
        return api_invalid(call);
    json_t *opts = api_param(params, 1);
    json_t *o = opts ? json_deep_copy(opts) : json_object();
    json_object_set_new(o, "get", json_true());
    json_t *q = json_pack("[[[s, s, I]], o]", "id", "=", (json_int_t)id, o);
    if (!q)
        return api_error(call, ENOMEM, "out of memory");
    /* Count first so a missing id gets the TrueNAS wording. */
    json_t *count = NULL;
    json_t *cq = json_pack("[[[s, s, I]], {s:b}]", "id", "=", (json_int_t)id, "count", 1);
    int rc = cq ? query(call, cq, &count) : -1;
    json_decref(cq);
    if (rc == 0 && json_integer_value(count) == 0) {
        json_decref(count);
        json_decref(q);
        return api_error(call, ENOENT, "%s %lld does not exist", what, (long long)id);
    }
    json_decref(count);
    if (rc == 0)
        rc = query(call, q, result);
    json_decref(q);
    return rc;
}
