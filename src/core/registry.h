/*
 * A registry of live clients: the table the API lists, counts and closes
 * (NBD connections for nbd.global.sessions and export delete, iSCSI
 * sessions for iscsi.global.sessions, target delete, reinstatement and
 * shutdown). An intrusive doubly-linked list under one mutex, with a count
 * and an optional cap.
 *
 * Threads: a client lives on its reactor; it adds and removes its own
 * entry there. Any thread may walk the registry with the lock held, and
 * then only reads what the client fixed before it (or published under the
 * lock), reads atomics, or posts work to the owner reactor
 * (conn_close_async, reactor_post). The lock is a leaf: take no other lock
 * while holding it.
 */
#ifndef BLOCKD_CORE_REGISTRY_H
#define BLOCKD_CORE_REGISTRY_H

#include <pthread.h>

/* Embed one in the client's structure; reach the client with container_of. */
struct registry_entry {
    struct registry_entry *prev, *next;
};

struct registry {
    pthread_mutex_t lock;
    struct registry_entry *head; /* newest first */
    unsigned count;
    unsigned max; /* 0: no cap */
};

#define REGISTRY_INIT(max_)                                                                        \
    {                                                                                              \
        .lock = PTHREAD_MUTEX_INITIALIZER, .head = NULL, .count = 0, .max = (max_)                 \
    }

/* Add e (not listed yet) at the head. 0, or -ENOSPC at the cap (e stays
 * unlisted). Takes the lock. */
int registry_add(struct registry *r, struct registry_entry *e);
/* Remove e; nothing when it is not listed (so a client may call it on
 * every close path). Takes the lock. */
void registry_remove(struct registry *r, struct registry_entry *e);
/* Entries listed now. Takes the lock. */
unsigned registry_count(struct registry *r);

/* Walk the registry: registry_lock(r); REGISTRY_FOREACH(r, e) {...};
 * registry_unlock(r). The body must not add or remove entries. */
void registry_lock(struct registry *r);
void registry_unlock(struct registry *r);
#define REGISTRY_FOREACH(r, e) for (struct registry_entry *e = (r)->head; e; e = e->next)

#endif
