/*
 * Statement helpers over the cached statements (db.h): bind by a type
 * string, run a statement that returns no rows, step to the one row of a
 * lookup, walk rows. The stores in control/ repeated these steps around
 * each statement; here they are written once.
 */
#include "control/db.h"

#include <errno.h>
#include <stdarg.h>

int db_bindv(sqlite3_stmt *st, const char *types, va_list ap)
{
    int idx = 1;
    for (const char *t = types; *t; t++, idx++) {
        int rc;
        switch (*t) {
        case 'i':
            rc = sqlite3_bind_int64(st, idx, va_arg(ap, int64_t));
            break;
        case 'b':
            rc = sqlite3_bind_int(st, idx, va_arg(ap, int) ? 1 : 0);
            break;
        case 't': {
            const char *s = va_arg(ap, const char *);
            rc = s ? sqlite3_bind_text(st, idx, s, -1, SQLITE_TRANSIENT)
                   : sqlite3_bind_null(st, idx);
            break;
        }
        case 'n':
            rc = sqlite3_bind_null(st, idx);
            break;
        default:
            return -EINVAL;
        }
        if (rc != SQLITE_OK)
            return -EIO;
    }
    return 0;
}

int db_runv(const char *sql, const char *types, va_list ap)
{
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);

    if (rc < 0)
        return rc;
    rc = db_bindv(st, types, ap);
    if (rc == 0)
        rc = db_step_done(st);
    db_stmt_done(st);
    return rc;
}

int db_run(const char *sql, const char *types, ...)
{
    va_list ap;

    va_start(ap, types);
    int rc = db_runv(sql, types, ap);
    va_end(ap);
    return rc;
}

int db_step_row(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);

    if (rc == SQLITE_ROW)
        return 0;
    return rc == SQLITE_DONE ? -ENOENT : -db_errno();
}

bool db_stmt_next(sqlite3_stmt *st, int *rc)
{
    int step;

    if (*rc != 0)
        return false;
    step = sqlite3_step(st);
    if (step == SQLITE_ROW)
        return true;
    if (step != SQLITE_DONE)
        *rc = -db_errno();
    return false;
}

int db_stmt_each(sqlite3_stmt *st, int (*row)(sqlite3_stmt *st, void *arg), void *arg)
{
    int rc = 0;

    while (db_stmt_next(st, &rc))
        rc = row(st, arg);
    return rc;
}
