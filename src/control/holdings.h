/*
 * Counting what API clients hold against the caps of core/bounds.h
 * (pools, datasets, snapshots per dataset, API keys).
 *
 * Callers hold the DB lock (db_lock, or inside a cfg_tx), and the lock
 * that serializes the creates being capped (ds_ops_lock for datasets), so
 * that two creates cannot both pass the count.
 */
#ifndef BLOCKD_CONFIG_HOLDINGS_H
#define BLOCKD_CONFIG_HOLDINGS_H

#include <stdint.h>

#include "core/bounds.h"

struct api_call;

/* *n = the single integer sql (e.g. a COUNT(*)) yields, its parameters
 * bound from the arguments as db_run's types say. 0 or -errno. */
int holdings_count(int64_t *n, const char *sql, const char *types, ...);

/* The cap of kind k for one more object counted by sql (as
 * holdings_count): 0 while the count is below it, else -EDQUOT after a
 * log line naming call's peer and scope (a pool or dataset name; NULL:
 * none) and with call's error set (EDQUOT, the cap and its flag); another
 * failure's -errno (error set too). call may be NULL (internal callers):
 * then only the log line. */
int holdings_check(struct api_call *call, enum limit_kind k, const char *scope, const char *sql,
                   const char *types, ...);

#endif
