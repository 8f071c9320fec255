/*
 * API call statistics by method (for the metrics endpoint): calls, failed
 * calls and the time spent in the handler. Thread-safe (one mutex; API
 * calls are not a hot path).
 */
#ifndef BLOCKD_API_APISTATS_H
#define BLOCKD_API_APISTATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"

struct apistats_row {
    const char *method; /* the registered name (lives as long as the process) */
    uint64_t calls;
    uint64_t errors;
    uint64_t sum_ns;
};

/* Count one call of m that took ns; failed: it returned an error. */
void apistats_record(const struct api_method *m, uint64_t ns, bool failed);
/* Snapshot of the methods called at least once: *out is malloc'd (caller
 * frees), returns the count or -ENOMEM. */
int apistats_snapshot(struct apistats_row **out);

#endif
