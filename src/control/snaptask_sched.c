/* Schedules and naming schemas of the snapshot tasks (snaptask.h). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/repl_select.h"
#include "control/snaptask.h"
#include "store/names.h"

/* One element of a cron field: "*", "N", "A-B", each with an optional
 * "/STEP". Sets bits lo..hi. 0 or -EINVAL. */
static int cron_elem(const char *e, int lo, int hi, uint64_t *bits)
{
    long a = lo, b = hi, step = 1;
    char *end;

    if (*e == '*') {
        end = (char *)e + 1;
    } else {
        a = strtol(e, &end, 10);
        b = a;
        if (end == e)
            return -EINVAL;
        if (*end == '-') {
            const char *s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s)
                return -EINVAL;
        }
    }
    if (*end == '/') {
        const char *s = end + 1;
        step = strtol(s, &end, 10);
        if (end == s || step < 1)
            return -EINVAL;
    }
    if (*end || a < lo || b > hi || a > b)
        return -EINVAL;
    if (step > 64)
        step = 64; /* the same values, and v += step cannot overflow */
    for (long v = a; v <= b; v += step)
        *bits |= 1ull << v;
    return 0;
}

/* A cron field: comma-separated elements. 0 or -EINVAL. */
static int cron_field(const char *spec, int lo, int hi, uint64_t *bits, bool *star)
{
    char buf[128], *rest = buf, *e;

    *bits = 0;
    if (!spec || !*spec || strlen(spec) >= sizeof(buf))
        return -EINVAL;
    snprintf(buf, sizeof(buf), "%s", spec);
    if (star)
        *star = strcmp(spec, "*") == 0;
    while ((e = strsep(&rest, ","))) /* an empty element ("1,,2") is an error */
        if (cron_elem(e, lo, hi, bits) < 0)
            return -EINVAL;
    return *bits ? 0 : -EINVAL;
}

/* "HH:MM" → minutes of the day. 0 or -EINVAL. */
static int hhmm(const char *s, int *out)
{
    int h, m;
    char tail;

    if (!s || sscanf(s, "%2d:%2d%c", &h, &m, &tail) != 2 || h < 0 || h > 23 || m < 0 || m > 59)
        return -EINVAL;
    *out = h * 60 + m;
    return 0;
}

int snaptask_sched_parse(const struct snaptask_cron *c, struct snaptask_sched *out,
                         const char **field, char *why, size_t len)
{
    const struct {
        const char *key, *value;
        int lo, hi;
    } f[] = {{"minute", c->minute, 0, 59},
             {"hour", c->hour, 0, 23},
             {"dom", c->dom, 1, 31},
             {"month", c->month, 1, 12},
             {"dow", c->dow, 0, 7}};
    uint64_t *bits[] = {&out->minute, &out->hour, &out->dom, &out->month, &out->dow};
    bool *stars[] = {NULL, NULL, &out->dom_star, NULL, &out->dow_star};

    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        if (cron_field(f[i].value, f[i].lo, f[i].hi, bits[i], stars[i]) < 0) {
            *field = f[i].key;
            snprintf(why, len,
                     "not a cron field: use *, N, A-B, */N, A-B/N or a comma list of them, "
                     "values %d to %d",
                     f[i].lo, f[i].hi);
            return -EINVAL;
        }
    }
    if (out->dow & (1ull << 7)) /* 7 is Sunday too */
        out->dow = (out->dow & ~(1ull << 7)) | 1ull;
    *field = hhmm(c->begin, &out->begin) < 0 ? "begin" : hhmm(c->end, &out->end) < 0 ? "end" : NULL;
    if (*field) {
        snprintf(why, len, "a time of day as HH:MM (00:00 to 23:59)");
        return -EINVAL;
    }
    return 0;
}

bool snaptask_sched_match(const struct snaptask_sched *s, const struct tm *tm)
{
    int now = tm->tm_hour * 60 + tm->tm_min;
    bool dom = s->dom & (1ull << tm->tm_mday), dow = s->dow & (1ull << tm->tm_wday);
    bool day = s->dom_star || s->dow_star ? dom && dow : dom || dow;
    /* begin after end: a window across midnight (as TrueNAS) */
    bool window =
        s->begin <= s->end ? now >= s->begin && now <= s->end : now >= s->begin || now <= s->end;

    return (s->minute & (1ull << tm->tm_min)) && (s->hour & (1ull << tm->tm_hour)) &&
           (s->month & (1ull << (tm->tm_mon + 1))) && day && window;
}

int snaptask_schema_check(const char *schema, char *why, size_t len)
{
    char name[NAME_DATASET_MAX + 1];
    struct tm tm;
    time_t now = time(NULL);

    /* TrueNAS's rules, as replication checks them: the same schemas
     * parse back (snaptask_schema_time) */
    if (repl_schema_check(schema, why, len) < 0)
        return -EINVAL;
    localtime_r(&now, &tm);
    if (strftime(name, sizeof(name), schema, &tm) == 0) {
        snprintf(why, len, "naming schema makes an empty or too long snapshot name");
        return -EINVAL;
    }
    return name_check_component(name, strlen(name), why, len) < 0 ? -EINVAL : 0;
}

int snaptask_schema_time(const char *schema, const char *name, int64_t *out)
{
    return repl_schema_parse(schema, name, out);
}

int64_t snaptask_naive_now(void)
{
    time_t now = time(NULL);
    struct tm tm;

    localtime_r(&now, &tm);
    return (int64_t)timegm(&tm);
}

int64_t snaptask_lifetime_s(int64_t value, const char *unit)
{
    static const struct {
        const char *unit;
        int64_t s;
    } u[] = {{"HOUR", 3600},
             {"DAY", 86400},
             {"WEEK", 7 * 86400},
             {"MONTH", 30 * 86400LL},
             {"YEAR", 365 * 86400LL}};

    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++)
        if (strcmp(unit, u[i].unit) == 0)
            return value * u[i].s;
    return value * 7 * 86400;
}
