/*
 * Caps on what API clients can hold: event subscriptions per connection,
 * API keys, pools, datasets, snapshots per dataset, share objects of each
 * kind. Each has a default, a
 * blockd flag (limit_flag) and, when hit, an EDQUOT error naming the cap
 * and a log line naming the peer (by the code that counts; see
 * docs/security.md "Holdings").
 *
 * Values are set while flags are parsed (main thread, before anything
 * serves) and read from any thread.
 */
#ifndef BLOCKD_CORE_BOUNDS_H
#define BLOCKD_CORE_BOUNDS_H

enum limit_kind {
    LIMIT_SUBSCRIPTIONS, /* core.subscribe per connection */
    LIMIT_API_KEYS,      /* api_key.create, in all */
    LIMIT_POOLS,         /* pool.create, in all */
    LIMIT_DATASETS,      /* pool.dataset.create and clones, in all pools */
    LIMIT_SNAPSHOTS,     /* zfs.snapshot.create, per dataset */
    LIMIT_SHARE_OBJECTS, /* NBD exports, iSCSI portals, initiator groups, CHAP
                          * credentials, targets, extents, mappings, nvmet.*
                          * objects: each kind */
    LIMIT_COUNT
};

#define LIMIT_DEFAULT_SUBSCRIPTIONS 64
#define LIMIT_DEFAULT_API_KEYS 1000
#define LIMIT_DEFAULT_POOLS 64
#define LIMIT_DEFAULT_DATASETS 100000
#define LIMIT_DEFAULT_SNAPSHOTS 10000
#define LIMIT_DEFAULT_SHARE_OBJECTS 10000

/* The cap of kind k (at least 1). */
unsigned limit_get(enum limit_kind k);
/* Set it (flags; v ≥ 1). */
void limit_set(enum limit_kind k, unsigned v);
/* The blockd flag that sets it ("--max-snapshots"), and what it counts
 * ("snapshots per dataset"), for error messages and log lines. */
const char *limit_flag(enum limit_kind k);
const char *limit_what(enum limit_kind k);

#endif
