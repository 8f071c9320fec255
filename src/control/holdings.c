/* Counting holdings against their caps (see holdings.h). */
#include "control/holdings.h"

#include <errno.h>
#include <stdarg.h>

#include "api/api.h"
#include "control/db.h"
#include "core/log.h"

static int countv(int64_t *n, const char *sql, const char *types, va_list ap)
{
    sqlite3_stmt *st;
    int rc = db_stmt(sql, &st);
    if (rc < 0)
        return rc;
    rc = db_bindv(st, types, ap);
    if (rc == 0)
        rc = db_step_row(st);
    if (rc == 0)
        *n = sqlite3_column_int64(st, 0);
    db_stmt_done(st);
    return rc;
}

int holdings_count(int64_t *n, const char *sql, const char *types, ...)
{
    va_list ap;
    va_start(ap, types);
    int rc = countv(n, sql, types, ap);
    va_end(ap);
    return rc;
}

int holdings_check(struct api_call *call, enum limit_kind k, const char *scope, const char *sql,
                   const char *types, ...)
{
    int64_t n = 0;
    va_list ap;
    va_start(ap, types);
    int rc = countv(&n, sql, types, ap);
    va_end(ap);
    if (rc < 0) {
        if (call)
            api_error(call, -rc, "cannot count the %s", limit_what(k));
        return rc;
    }
    unsigned cap = limit_get(k);
    if (n < (int64_t)cap)
        return 0;
    log_warn("limits: %s: refused: %u %s is the limit (%s%s%s)",
             call ? api_call_peer(call) : "internal", cap, limit_what(k), limit_flag(k),
             scope ? "; " : "", scope ? scope : "");
    if (call)
        api_error(call, EDQUOT, "limit reached: at most %u %s (%s%s%s)", cap, limit_what(k),
                  limit_flag(k), scope ? "; " : "", scope ? scope : "");
    return -EDQUOT;
}
