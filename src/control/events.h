/*
 * The change events: the one way a module learns that something changed
 * elsewhere in blockd and, for a rename, takes part in it. One typed event
 * per kind of change, one subscribe call, one table. The shared core
 * (control/) emits; the front-ends, the configuration generation
 * (confgen.c) and the gateway group's sync (gwsync/) subscribe, so the core
 * never calls them by name (docs/architecture.md, "Folders").
 *
 * Where each event is delivered, relative to the transaction and the DB
 * lock (control/cfgtx.h):
 *   EV_CONFIG_COMMITTED  a configuration transaction committed (the
 *       outermost cfg_tx_commit): right after COMMIT, under the DB lock,
 *       on the committing thread, in commit order. ev->config lists the
 *       changes; delivered only to subscribers whose config_kinds it
 *       touches (every one when it overflowed). Must not block on
 *       anything but the DB.
 *   EV_CONFIG_AFTER      the same transaction, once the DB lock is
 *       released (only to the subscribers EV_CONFIG_COMMITTED reached; not
 *       at all while the caller still holds the DB lock around the
 *       transaction: their queued work then waits for the next one). May
 *       take locks the DB lock must not be held under; may reject the
 *       commit with cfg_tx_after_fail (cfgtx.h).
 *   EV_DATASET           a dataset change the configuration rows do not
 *       carry (ev->dataset, enum datasets_event in datasets.h): after it
 *       is committed and applied to the open volume, no lock held
 *       (DATASETS_ROLLING_BACK: before the change, ds_ops_lock held).
 *   EV_RENAME_LOCK       a dataset rename or promote starts, before it
 *       takes ds_ops_lock or the DB lock: take the subscriber's own
 *       configuration lock, so that none of its rows changes until
 *       EV_RENAME_DONE.
 *   EV_RENAME_UPDATE     inside the rename's transaction (DB lock held):
 *       rewrite the rows that name ev->rename.old_name (with subtree: also
 *       "old/…" and "old@…"); return -errno to roll the rename back.
 *   EV_RENAME_DONE       after that transaction ended (ev->committed), no
 *       lock held but the subscriber's own: release it.
 * Subscribers are called in the order they subscribed, synchronously on
 * the emitting thread; only EV_RENAME_UPDATE's return value counts (the
 * first error stops the delivery).
 *
 * Subscribe at start-up, before any event (the table is not locked).
 */
#ifndef BLOCKD_CONTROL_EVENTS_H
#define BLOCKD_CONTROL_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "control/cfgtx.h"
#include "control/datasets.h"

enum event_type {
    EV_CONFIG_COMMITTED,
    EV_CONFIG_AFTER,
    EV_DATASET,
    EV_RENAME_LOCK,
    EV_RENAME_UPDATE,
    EV_RENAME_DONE,
    EV_TYPES
};
#define EV_BIT(t) (1u << (t))

struct event {
    enum event_type type;
    union {
        const struct cfg_changes *config; /* EV_CONFIG_COMMITTED */
        struct {
            enum datasets_event what;
            const char *name; /* "pool/vol", "pool/vol@snap", a pool */
            struct volume *v; /* the open volume (borrowed) or NULL */
        } dataset;            /* EV_DATASET */
        struct {
            const char *old_name, *new_name;
            bool subtree;
        } rename;       /* EV_RENAME_UPDATE */
        bool committed; /* EV_RENAME_DONE */
    };
};

typedef int (*event_fn)(const struct event *ev, void *arg);

struct event_subscriber {
    const char *name;      /* for the log */
    uint32_t types;        /* EV_BIT() of the events it gets */
    uint32_t config_kinds; /* CFG_KIND_BIT() that EV_CONFIG_* is for */
    event_fn fn;
    void *arg;
};

/* Copied. 0, or -ENOSPC past EVENTS_MAX subscribers (logged). */
#define EVENTS_MAX 16
int events_subscribe(const struct event_subscriber *s);

/* ---- for the emitters in control/ ---- */

/* Deliver ev (not EV_CONFIG_*) to its subscribers. 0, or the first
 * EV_RENAME_UPDATE error. */
int events_emit(const struct event *ev);
/* EV_CONFIG_COMMITTED for changes; returns the set of subscribers it
 * reached, for events_config_after. */
uint32_t events_config_committed(const struct cfg_changes *changes, uint32_t kinds);
void events_config_after(uint32_t reached);

#endif
