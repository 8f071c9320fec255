/*
 * pool.snapshottask.* (TrueNAS's periodic snapshot tasks): a dataset's
 * volumes snapshotted on a cron-like schedule, named by a strftime naming
 * schema, and the snapshots that schema names removed once older than the
 * task's lifetime. Tasks live in the config DB (table snapshot_tasks); one
 * scheduler thread wakes at each minute boundary (local time, as TrueNAS
 * uses the system's time zone). See docs/api-datasets.md.
 */
#ifndef BLOCKD_CONTROL_SNAPTASK_H
#define BLOCKD_CONTROL_SNAPTASK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "api/fields.h"

struct api_call;

/* Register the schema and the pool.snapshottask.* methods. Start-up only,
 * after datasets_init(), before the DB opens. */
void snaptask_init(void);
/* Start the scheduler thread (expires old snapshots once, then runs the
 * tasks due at each minute) / stop it: prompt, waits for a snapshot in
 * progress. Start after the DB is open; stop before it closes. 0 or
 * -errno. */
int snaptask_start(void);
void snaptask_stop(void);

/* A task's schedule as given (TrueNAS's CronModel: strings; owned). */
struct snaptask_cron {
    char *minute, *hour, *dom, *month, *dow, *begin, *end;
};

/* A periodic snapshot task: a pool.snapshottask row without its state. */
struct snaptask {
    int64_t id;
    char *dataset;
    bool recursive;
    struct api_strv exclude; /* datasets (and their subtrees) left out */
    int64_t lifetime_value;
    int lifetime_unit; /* index in snaptask_units */
    bool enabled;
    char *naming_schema;
    struct snaptask_cron schedule;
    bool allow_empty;
};
extern const char *const snaptask_units[]; /* "HOUR" .. "YEAR", NULL */
void snaptask_clear(struct snaptask *t);

/* A parsed schedule: the allowed values of each cron field as bits, and
 * the begin/end window in minutes of the day. */
struct snaptask_sched {
    uint64_t minute, hour, dom, month, dow; /* dow: bit 0 Sunday .. 6 */
    bool dom_star, dow_star;
    int begin, end;
};

/* c (every field set) → *out. 0, or -EINVAL with *field the key at fault
 * and why. */
int snaptask_sched_parse(const struct snaptask_cron *c, struct snaptask_sched *out,
                         const char **field, char *why, size_t len);
/* Whether the local time tm falls on the schedule (cron's rule: when both
 * dom and dow are restricted, either matches). */
bool snaptask_sched_match(const struct snaptask_sched *s, const struct tm *tm);
/* A naming schema is usable: TrueNAS's rules (control/repl_select.h:
 * %Y %m %d %H %M, or %s alone) and it makes a valid snapshot name. 0 or
 * -EINVAL with why. */
int snaptask_schema_check(const char *schema, char *why, size_t len);
/* The time a snapshot name encodes under schema, as naive local seconds
 * (the fields through timegm), if the whole name parses with it; compare
 * with snaptask_naive_now(). 0 or -EINVAL. */
int snaptask_schema_time(const char *schema, const char *name, int64_t *out);
int64_t snaptask_naive_now(void);
/* Seconds of lifetime_value lifetime_unit (MONTH: 30 days, YEAR: 365). */
int64_t snaptask_lifetime_s(int64_t value, const char *unit);

/* Tasks (snaptask.c): every task, by id: a new array in *out (free with
 * snaptasks_free). DB lock taken inside. 0 or -errno. */
int snaptask_load_all(struct snaptask **out, size_t *n);
void snaptasks_free(struct snaptask *v, size_t n);
/* Record task id's state ({state, datetime, error}). Logged on failure. */
void snaptask_state_set(int64_t id, const char *state, const char *error);
/* Run task now: take its snapshots, named by strftime(naming_schema,
 * when) (NULL: the local time now), then expire old ones. 0, or -1 with
 * the error on call (state ERROR recorded). */
int snaptask_run_task(struct api_call *call, const struct snaptask *task, const struct tm *when);
/* Expire the snapshots of task older than its lifetime (each failure
 * logged, never fatal). */
void snaptask_expire(const struct snaptask *task);

#endif
