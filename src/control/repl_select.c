/* Snapshot selection by naming schema or regex; see repl_select.h. */
#include "control/repl_select.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/query_regex.h"

static const char schema_chars[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz %_.:-";

static bool has_directive(const char *schema, char d)
{
    for (const char *p = schema; (p = strchr(p, '%')) != NULL; p += 2) {
        if (p[1] == d)
            return true;
        if (!p[1])
            break;
    }
    return false;
}

int repl_schema_check(const char *schema, char *why, size_t len)
{
    char bad[64];
    size_t nbad = 0;

    if (strstr(schema, "%%")) {
        snprintf(why, len, "%% is not an allowed character in ZFS snapshot name");
        return -EINVAL;
    }
    for (const char *p = schema; *p; p++)
        if (!strchr(schema_chars, *p) && nbad + 1 < sizeof(bad) && !memchr(bad, *p, nbad))
            bad[nbad++] = *p;
    if (nbad) {
        bad[nbad] = '\0';
        snprintf(why, len, "%s %s not %s in ZFS snapshot name", bad, nbad == 1 ? "is" : "are",
                 nbad == 1 ? "an allowed character" : "allowed characters");
        return -EINVAL;
    }
    for (const char *p = schema; (p = strchr(p, '%')) != NULL; p += 2) {
        if (!p[1] || !strchr("YmdHMSyzs", p[1])) {
            snprintf(why, len,
                     "%%%c is not supported in naming schemas by blockd (supported: %%Y %%m %%d "
                     "%%H %%M %%S %%y %%z %%s)",
                     p[1] ? p[1] : ' ');
            return -EINVAL;
        }
    }
    if (has_directive(schema, 's')) {
        for (const char *p = schema; (p = strchr(p, '%')) != NULL; p += 2)
            if (p[1] != 's') {
                snprintf(why, len, "No other placeholder can be used with %%s in naming schema");
                return -EINVAL;
            }
    } else {
        static const char need[] = "YmdHM";
        for (const char *d = need; *d; d++)
            if (!has_directive(schema, *d)) {
                snprintf(why, len, "%%%c must be present in snapshot naming schema", *d);
                return -EINVAL;
            }
    }
    if (has_directive(schema, 'z') && strchr(schema, ':')) {
        snprintf(why, len,
                 "%%z and `:` can't be present in snapshot naming schema at the same time. ZFS "
                 "snapshot names can't contain `+` so we use `:` instead.");
        return -EINVAL;
    }
    return 0;
}

/* Up to max digits (at least min); like Python's strptime patterns for
 * one- or two-digit fields, the longer reading is taken if it is in range. */
static int take_num(const char **s, int min_digits, int max_digits, int lo, int hi, int *out)
{
    const char *p = *s;
    int n = 0, v = 0;

    while (n < max_digits && isdigit((unsigned char)p[n]))
        n++;
    if (n < min_digits)
        return -EINVAL;
    for (; n >= min_digits; n--) {
        v = 0;
        for (int i = 0; i < n; i++)
            v = v * 10 + (p[i] - '0');
        if (v >= lo && v <= hi) {
            *s = p + n;
            *out = v;
            return 0;
        }
    }
    return -EINVAL;
}

/* The numeric directives as data: how many digits, which range (as
 * Python's strptime accepts them). */
struct schema_num {
    char directive;
    int min_digits, max_digits, lo, hi;
};
static const struct schema_num schema_nums[] = {
    {'Y', 4, 4, 0, 9999}, {'y', 2, 2, 0, 99}, {'m', 1, 2, 1, 12}, {'d', 1, 2, 1, 31},
    {'H', 1, 2, 0, 23},   {'M', 1, 2, 0, 59}, {'S', 1, 2, 0, 61},
};

/* Where a numeric directive's value goes in tm. */
static void schema_num_store(struct tm *tm, char directive, int v)
{
    switch (directive) {
    case 'Y':
        tm->tm_year = v - 1900;
        break;
    case 'y':
        tm->tm_year = v < 69 ? v + 100 : v;
        break;
    case 'm':
        tm->tm_mon = v - 1;
        break;
    case 'd':
        tm->tm_mday = v;
        break;
    case 'H':
        tm->tm_hour = v;
        break;
    case 'M':
        tm->tm_min = v;
        break;
    case 'S':
        tm->tm_sec = v;
        break;
    }
}

/* %z: [+-]HHMM (the '+' written as ':') or Z; the offset does not change
 * the naive time the snapshot is ordered by, so it is only consumed. */
static int schema_take_zone(const char **s)
{
    char sign = **s == ':' ? '+' : **s;
    int v;

    (*s)++;
    if (sign == 'Z')
        return 0;
    if (sign != '+' && sign != '-')
        return -EINVAL;
    if (take_num(s, 2, 2, 0, 99, &v) < 0 || take_num(s, 2, 2, 0, 59, &v) < 0)
        return -EINVAL;
    return 0;
}

/* %s: seconds since the epoch, as local time (Python's strptime). */
static int schema_take_epoch(const char **s, struct tm *tm)
{
    char *end;
    long long secs;
    time_t t;
    struct tm lt;

    if (!isdigit((unsigned char)**s))
        return -EINVAL;
    errno = 0;
    secs = strtoll(*s, &end, 10);
    if (errno)
        return -EINVAL;
    *s = end;
    t = (time_t)secs;
    if (!localtime_r(&t, &lt))
        return -EINVAL;
    *tm = lt;
    return 0;
}

/* One directive at *s into tm. 0 or -EINVAL. */
static int schema_take_directive(char directive, const char **s, struct tm *tm)
{
    int v;

    for (size_t i = 0; i < sizeof(schema_nums) / sizeof(schema_nums[0]); i++) {
        const struct schema_num *n = &schema_nums[i];
        if (n->directive != directive)
            continue;
        if (take_num(s, n->min_digits, n->max_digits, n->lo, n->hi, &v) < 0)
            return -EINVAL;
        schema_num_store(tm, directive, v);
        return 0;
    }
    if (directive == 'z')
        return schema_take_zone(s);
    if (directive == 's')
        return schema_take_epoch(s, tm);
    return -EINVAL;
}

/* The parsed fields as a time, refusing Feb 30 and the like (Python
 * refuses them, timegm would roll over). */
static int schema_time(const struct tm *tm, int64_t *when)
{
    struct tm check = *tm;
    time_t t = timegm(&check);

    if (check.tm_mday != tm->tm_mday || check.tm_mon != tm->tm_mon)
        return -EINVAL;
    *when = (int64_t)t;
    return 0;
}

int repl_schema_parse(const char *schema, const char *name, int64_t *when)
{
    struct tm tm = {.tm_mday = 1, .tm_year = 70};
    const char *s = name;
    bool has_z = has_directive(schema, 'z');

    for (const char *f = schema; *f; f++) {
        if (*f == '%') {
            f++;
            if (schema_take_directive(*f, &s, &tm) < 0)
                return -EINVAL;
            continue;
        }
        char c = *s;
        /* ZFS names cannot hold '+': TrueNAS writes ':' for it */
        if (has_z && c == ':')
            c = '+';
        if (c != *f)
            return -EINVAL;
        s++;
    }
    if (*s)
        return -EINVAL;
    return schema_time(&tm, when);
}

int repl_regex_compile(const char *regex, regex_t *out, char *why, size_t len)
{
    size_t n = strlen(regex) + 8;
    uint64_t cost;
    int rc;

    /* Bounded like query filters (api/query_regex.h): glibc expands
     * nested {m,n} by copying, e.g. (a{32767}){32767}. */
    char reason[160];
    if (query_regex_cost(regex, strlen(regex), &cost, reason, sizeof(reason)) < 0) {
        snprintf(why, len, "Invalid regex: %s", reason);
        return -EINVAL;
    }
    char *full = malloc(n);

    if (!full) {
        snprintf(why, len, "out of memory");
        return -ENOMEM;
    }
    snprintf(full, n, "^(%s)$", regex);
    rc = regcomp(out, full, REG_EXTENDED | REG_NOSUB);
    free(full);
    if (rc != 0) {
        char msg[128];
        regerror(rc, out, msg, sizeof(msg));
        snprintf(why, len, "Invalid regex: %s (blockd uses POSIX extended regular expressions)",
                 msg);
        return -EINVAL;
    }
    return 0;
}

bool repl_regex_match(const regex_t *re, const char *name)
{
    return regexec(re, name, 0, NULL, 0) == 0;
}
