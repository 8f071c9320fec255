/* The client registry (registry.h). */
#include "core/registry.h"

#include <errno.h>
#include <stddef.h>

int registry_add(struct registry *r, struct registry_entry *e)
{
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    if (r->max && r->count >= r->max) {
        rc = -ENOSPC;
    } else {
        e->prev = NULL;
        e->next = r->head;
        if (r->head)
            r->head->prev = e;
        r->head = e;
        r->count++;
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void registry_remove(struct registry *r, struct registry_entry *e)
{
    pthread_mutex_lock(&r->lock);
    if (e->prev || r->head == e) {
        if (e->prev)
            e->prev->next = e->next;
        else
            r->head = e->next;
        if (e->next)
            e->next->prev = e->prev;
        e->next = e->prev = NULL;
        r->count--;
    }
    pthread_mutex_unlock(&r->lock);
}

unsigned registry_count(struct registry *r)
{
    pthread_mutex_lock(&r->lock);
    unsigned n = r->count;
    pthread_mutex_unlock(&r->lock);
    return n;
}

void registry_lock(struct registry *r)
{
    pthread_mutex_lock(&r->lock);
}

void registry_unlock(struct registry *r)
{
    pthread_mutex_unlock(&r->lock);
}
