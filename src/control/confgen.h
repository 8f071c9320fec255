/*
 * The configuration generation: one publication mechanism for every
 * front-end (FreeBSD ctld's conf_apply is the model).
 *
 * A generation is an immutable, refcounted snapshot of what the
 * front-ends serve. It is made of one *part* per facet (CONF_ISCSI: the
 * target views, discovery credentials and portal addresses; CONF_NBD: the
 * export table; CONF_NVME: the NVMe-oF subsystems and ports), each an immutable, refcounted object
 * owned by the front-end that builds it. A new generation shares every part that did not change
 * with the previous one.
 *
 *   commit (control/cfgtx.h)
 *     └─ the one cfgtx publisher (here), under the DB lock:
 *          next = current with each facet whose kinds changed rebuilt by
 *                 its subscriber's build(prev part, change list)  O(change)
 *          swap current = next under conf's one lock; number++
 *     └─ its after hook, once the DB lock is released:
 *          conf_apply(old, new): the only place where the difference
 *          between two generations becomes work on the connections
 *
 * conf_apply(old, new) walks each facet whose part changed: the objects
 * of a part (struct conf_obj, sorted by id) are merged by id, and each
 * object that is gone, changed (another pointer) or new is handed to the
 * subscriber (gone: close its sessions/connections; changed: rename
 * closes, unit attentions), then the part as a whole (listeners).
 *
 * Readers (reactors at login/option time, SendTargets, a session whose
 * generation is stale) take a reference to a part under the lock, or read
 * conf_part_number(facet) — one atomic load — to learn whether their part
 * changed; nothing on the I/O path locks.
 *
 * Deferred changes (TrueNAS "defer"): a deferred commit's changes wait in
 * one pending change list; conf_reload() (service.reload) publishes them
 * as one generation. A deferred commit still calls build() with
 * changes->defer set, so that a facet can do what must happen at commit
 * (it returns its part unchanged).
 *
 * Locks: DB lock > conf lock (a leaf, held for a pointer swap or a
 * lookup). conf_apply runs with neither, one at a time, in publication
 * order.
 */
#ifndef BLOCKD_CONFIG_CONFGEN_H
#define BLOCKD_CONFIG_CONFGEN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/cfgtx.h"

enum conf_facet { CONF_ISCSI, CONF_NBD, CONF_NVME, CONF_FACETS };

/* The kinds whose commits build a new generation (a subscriber's kinds
 * must be among them). */
#define CONF_KINDS                                                                                 \
    (CFG_KIND_BIT(CFG_ISCSI_GLOBAL) | CFG_KIND_BIT(CFG_ISCSI_PORTAL) |                             \
     CFG_KIND_BIT(CFG_ISCSI_INITIATOR) | CFG_KIND_BIT(CFG_ISCSI_AUTH) |                            \
     CFG_KIND_BIT(CFG_ISCSI_TARGET) | CFG_KIND_BIT(CFG_ISCSI_EXTENT) |                             \
     CFG_KIND_BIT(CFG_ISCSI_TARGETEXTENT) | CFG_KIND_BIT(CFG_NBD_EXPORT) |                         \
     CFG_KIND_BIT(CFG_NBD_GLOBAL) | CFG_NVME_KINDS)

/* The nvmet.* objects (nvme/config/). */
#define CFG_NVME_KINDS                                                                             \
    (CFG_KIND_BIT(CFG_NVME_GLOBAL) | CFG_KIND_BIT(CFG_NVME_SUBSYS) |                               \
     CFG_KIND_BIT(CFG_NVME_NAMESPACE) | CFG_KIND_BIT(CFG_NVME_PORT) |                              \
     CFG_KIND_BIT(CFG_NVME_HOST) | CFG_KIND_BIT(CFG_NVME_HOST_SUBSYS) |                            \
     CFG_KIND_BIT(CFG_NVME_PORT_SUBSYS))

/* One served object of a part, for conf_apply's merge. */
struct conf_obj {
    int64_t id;
    void *obj;
};

/*
 * A facet's share of a generation. Embed it first in the front-end's own
 * struct; set refs to 1, destroy, and objs (sorted by id, no duplicate
 * ids; may be NULL with n_objs 0). Never modified once published.
 */
struct conf_part {
    atomic_int refs;
    void (*destroy)(struct conf_part *p);
    const struct conf_obj *objs;
    size_t n_objs;
};

static inline struct conf_part *conf_part_ref(struct conf_part *p)
{
    if (p)
        atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}
static inline void conf_part_unref(struct conf_part *p)
{
    if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1)
        p->destroy(p);
}

struct conf_gen {
    atomic_int refs;
    uint64_t number;                     /* 1, 2, ... in publication order */
    struct conf_part *part[CONF_FACETS]; /* NULL: the facet serves nothing */
};

/*
 * How a front-end subscribes. Every hook is optional.
 *
 * build: under the DB lock, in commit order. *next starts as prev (no
 *   reference); set it to a new part (a reference passed to the
 *   generation) or NULL to serve nothing; leave it to keep prev. 0 or
 *   -errno (the error of a part built in part: *next is published
 *   either way).
 * gone / changed / added: from conf_apply, without the DB lock, for each
 *   object of the part that left, was replaced or appeared.
 * applied: then, for the part as a whole (old or new may be NULL).
 * after: at the end of every publication's after hook (work build queued
 *   that is not a difference between generations, e.g. a live property
 *   of a running LU).
 */
struct conf_subscriber {
    const char *name;
    uint32_t kinds; /* CFG_KIND_BIT of the changes that rebuild this facet */
    int (*build)(struct conf_part *prev, const struct cfg_changes *changes,
                 struct conf_part **next);
    void (*gone)(void *old_obj);
    void (*changed)(void *old_obj, void *new_obj);
    void (*added)(void *new_obj);
    void (*applied)(struct conf_part *old_part, struct conf_part *new_part);
    void (*after)(void);
};

/* Subscribe facet f (s must outlive the process). Startup only, before
 * any transaction. 0, -EEXIST (taken) or -EINVAL (kinds outside
 * CONF_KINDS). */
int conf_subscribe(enum conf_facet f, const struct conf_subscriber *s);

/* The current generation, with a reference (never NULL). Any thread. */
struct conf_gen *conf_gen_current(void);
void conf_gen_unref(struct conf_gen *g);
/* The current part of facet f, with a reference, or NULL. Any thread. */
struct conf_part *conf_part_get(enum conf_facet f);
/* The current generation's number: one atomic load, no lock. */
uint64_t conf_gen_number(void);
/* A number that changes whenever facet f's part changes (one atomic
 * load, no lock): a session polls it per command. */
uint64_t conf_part_number(enum conf_facet f);

/*
 * Publish outside a commit: rebuild the facets in mask (1u << facet) from
 * changes (e.g. {.overflow = true}: everything) and swap the result in,
 * then run conf_apply unless the caller holds the DB lock (then the next
 * after hook runs it). Takes the DB lock. For start/stop, pools coming
 * online. 0 or the first build error.
 */
int conf_republish(unsigned mask, const struct cfg_changes *changes);
/* Swap part in as facet f's part (takes the reference) without a build,
 * and apply. Any non-reactor thread; tests and the daemon's stop. */
void conf_publish_part(enum conf_facet f, struct conf_part *part);
/* Run the conf_apply of every publication not applied yet (a caller that
 * published with the DB lock held calls it once the lock is released;
 * with the DB lock still held it does nothing). */
void conf_apply_pending(void);

/* Publish every deferred change as one generation (service.reload). 0 or
 * the first build error. Takes the DB lock. */
int conf_reload(void);
/* The pending (deferred) changes, valid while the caller holds the DB
 * lock (db_lock()); n 0 when nothing waits. */
struct cfg_changes conf_pending(void);
/* Forget the pending changes of these kinds (a stopped front-end rebuilds
 * everything when it starts). DB locked. */
void conf_pending_drop(uint32_t kinds);

#endif
