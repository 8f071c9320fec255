/* The configuration generation: build, swap, conf_apply (confgen.h). */
#include "control/confgen.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "control/db.h"
#include "control/events.h"
#include "core/log.h"

/* Written at startup only (before any transaction), read afterwards. */
static const struct conf_subscriber *subs[CONF_FACETS];
static bool registered;

/* ---- the current generation (gen_lock: a leaf) ---- */
static pthread_mutex_t gen_lock = PTHREAD_MUTEX_INITIALIZER;
static struct conf_gen *current;
static _Atomic uint64_t current_number;
/* Bumped when facet f's part changes: a reader of one facet is not made
 * to look again by another facet's publications. */
static _Atomic uint64_t part_number[CONF_FACETS];

/* ---- publications not applied yet (queue_lock), applied one at a time
 * in publication order (apply_lock) ---- */
struct apply_item {
    struct conf_gen *old, *new; /* references */
};
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct apply_item *queue;
static size_t queue_n, queue_cap;
static pthread_mutex_t apply_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- deferred changes (DB lock) ---- */
static struct cfg_change *pending;
static size_t pending_n, pending_cap;
static bool pending_overflow;

static struct conf_gen *gen_new(void)
{
    struct conf_gen *g = calloc(1, sizeof(*g));
    if (g)
        atomic_init(&g->refs, 1);
    return g;
}

void conf_gen_unref(struct conf_gen *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    for (size_t f = 0; f < CONF_FACETS; f++)
        conf_part_unref(g->part[f]);
    free(g);
}

/* The current generation (gen_lock held); an empty one before the first
 * publication. NULL only when out of memory. */
static struct conf_gen *current_locked(void)
{
    if (!current)
        current = gen_new();
    return current;
}

struct conf_gen *conf_gen_current(void)
{
    pthread_mutex_lock(&gen_lock);
    struct conf_gen *g = current_locked();
    if (g)
        atomic_fetch_add(&g->refs, 1);
    pthread_mutex_unlock(&gen_lock);
    if (!g)
        abort(); /* no memory for an empty generation at startup */
    return g;
}

struct conf_part *conf_part_get(enum conf_facet f)
{
    pthread_mutex_lock(&gen_lock);
    struct conf_part *p = current ? conf_part_ref(current->part[f]) : NULL;
    pthread_mutex_unlock(&gen_lock);
    return p;
}

uint64_t conf_gen_number(void)
{
    return atomic_load_explicit(&current_number, memory_order_acquire);
}

uint64_t conf_part_number(enum conf_facet f)
{
    return atomic_load_explicit(&part_number[f], memory_order_acquire);
}

/* ---- conf_apply ---- */

/* Merge the objects of two parts by id: what left, what was replaced,
 * what appeared. */
static void diff_objs(const struct conf_subscriber *s, const struct conf_part *op,
                      const struct conf_part *np)
{
    const struct conf_obj *a = op ? op->objs : NULL, *b = np ? np->objs : NULL;
    size_t na = op ? op->n_objs : 0, nb = np ? np->n_objs : 0, i = 0, k = 0;
    while (i < na || k < nb) {
        if (k == nb || (i < na && a[i].id < b[k].id)) {
            if (s->gone)
                s->gone(a[i].obj);
            i++;
        } else if (i == na || b[k].id < a[i].id) {
            if (s->added)
                s->added(b[k].obj);
            k++;
        } else {
            if (a[i].obj != b[k].obj && s->changed)
                s->changed(a[i].obj, b[k].obj);
            i++;
            k++;
        }
    }
}

/*
 * The one place where the difference between two generations becomes work
 * on the connections: for each facet whose part changed, each object gone,
 * replaced or new, then the part as a whole (listeners). Without the DB
 * lock, one at a time (apply_lock).
 */
static void conf_apply(const struct conf_gen *old, const struct conf_gen *new)
{
    for (size_t f = 0; f < CONF_FACETS; f++) {
        const struct conf_subscriber *s = subs[f];
        if (!s || old->part[f] == new->part[f])
            continue;
        diff_objs(s, old->part[f], new->part[f]);
        if (s->applied)
            s->applied(old->part[f], new->part[f]);
    }
}

void conf_apply_pending(void)
{
    /* Under the DB lock the hooks could invert lock order (an LU's mutex
     * is taken before the DB lock by PR saves): a later call runs them. */
    if (db_lock_depth() > 0)
        return;
    pthread_mutex_lock(&apply_lock);
    bool boosted = false;
    for (;;) {
        pthread_mutex_lock(&queue_lock);
        struct apply_item it = {0};
        if (queue_n > 0) {
            it = queue[0];
            memmove(&queue[0], &queue[1], (queue_n - 1) * sizeof(*queue));
            queue_n--;
        }
        pthread_mutex_unlock(&queue_lock);
        if (!it.new)
            break;
        /* Session teardown and LU mutexes are the reactors' too: normal
         * priority while we hold them (API threads run at background). */
        if (!boosted)
            api_thread_boost();
        boosted = true;
        conf_apply(it.old, it.new);
        conf_gen_unref(it.old);
        conf_gen_unref(it.new);
    }
    if (boosted)
        api_thread_unboost();
    for (size_t f = 0; f < CONF_FACETS; f++)
        if (subs[f] && subs[f]->after)
            subs[f]->after();
    pthread_mutex_unlock(&apply_lock);
}

static void queue_push(struct conf_gen *old, struct conf_gen *new)
{
    pthread_mutex_lock(&queue_lock);
    if (queue_n == queue_cap) {
        size_t cap = queue_cap ? queue_cap * 2 : 8;
        struct apply_item *q = realloc(queue, cap * sizeof(*q));
        if (!q) {
            pthread_mutex_unlock(&queue_lock);
            /* The generation is published; only its side effects are lost. */
            log_error("confgen: out of memory: generation %llu published without its "
                      "disconnects and unit attentions",
                      (unsigned long long)new->number);
            conf_gen_unref(old);
            conf_gen_unref(new);
            return;
        }
        queue = q;
        queue_cap = cap;
    }
    queue[queue_n++] = (struct apply_item){.old = old, .new = new};
    pthread_mutex_unlock(&queue_lock);
}

/* ---- publication ---- */

/* Make g (a new generation with its parts set) current and queue its
 * conf_apply. Takes g's reference. */
static void gen_swap(struct conf_gen *g)
{
    api_thread_boost(); /* reactors take gen_lock: see conf_apply_pending */
    pthread_mutex_lock(&gen_lock);
    struct conf_gen *old = current_locked();
    g->number = old ? old->number + 1 : 1;
    current = g;
    for (size_t f = 0; f < CONF_FACETS; f++)
        if (!old || old->part[f] != g->part[f])
            atomic_fetch_add_explicit(&part_number[f], 1, memory_order_release);
    atomic_store_explicit(&current_number, g->number, memory_order_release);
    pthread_mutex_unlock(&gen_lock);
    api_thread_unboost();
    atomic_fetch_add(&g->refs, 1); /* the queue's */
    if (old)
        queue_push(old, g);
    else
        conf_gen_unref(g);
}

/* Build and publish the next generation: the facets in mask rebuilt from
 * changes (DB lock held, so builds run in commit order). 0 or the first
 * build error. */
static int gen_publish(unsigned mask, const struct cfg_changes *changes)
{
    struct conf_gen *cur = conf_gen_current();
    struct conf_part *next[CONF_FACETS];
    bool differs = false;
    int rc = 0;
    for (size_t f = 0; f < CONF_FACETS; f++) {
        next[f] = cur->part[f];
        if (!subs[f] || !subs[f]->build || !(mask & (1u << f)))
            continue;
        int err = subs[f]->build(cur->part[f], changes, &next[f]);
        if (err < 0) {
            log_error("confgen: building the %s configuration: %s", subs[f]->name, strerror(-err));
            rc = rc ? rc : err;
        }
        differs |= next[f] != cur->part[f];
    }
    struct conf_gen *g = differs ? gen_new() : NULL;
    for (size_t f = 0; g && f < CONF_FACETS; f++)
        g->part[f] = next[f] == cur->part[f] ? conf_part_ref(next[f]) : next[f];
    if (differs && !g) {
        log_error("confgen: out of memory: the configuration change is not published");
        for (size_t f = 0; f < CONF_FACETS; f++)
            if (next[f] != cur->part[f])
                conf_part_unref(next[f]);
        rc = -ENOMEM;
    }
    conf_gen_unref(cur);
    if (g)
        gen_swap(g);
    return rc;
}

/* The facets a change list rebuilds. */
static unsigned facets_of(const struct cfg_changes *changes)
{
    uint32_t kinds = 0;
    for (size_t i = 0; i < changes->n; i++)
        kinds |= CFG_KIND_BIT(changes->v[i].kind);
    unsigned mask = 0;
    for (size_t f = 0; f < CONF_FACETS; f++)
        if (subs[f] && (changes->overflow || (subs[f]->kinds & kinds)))
            mask |= 1u << f;
    return mask;
}

static void pending_push(const struct cfg_change *c)
{
    if (pending_n == pending_cap) {
        size_t cap = pending_cap ? pending_cap * 2 : 16;
        struct cfg_change *v = realloc(pending, cap * sizeof(*v));
        if (!v) {
            pending_overflow = true; /* the reload rebuilds everything */
            return;
        }
        pending = v;
        pending_cap = cap;
    }
    pending[pending_n++] = *c;
}

/* A change published now supersedes the same object's deferred one. */
static void pending_supersede(const struct cfg_changes *changes)
{
    size_t kept = 0;
    for (size_t i = 0; i < pending_n; i++) {
        bool same = false;
        for (size_t k = 0; k < changes->n && !same; k++)
            same = changes->v[k].kind == pending[i].kind && changes->v[k].id == pending[i].id;
        if (!same)
            pending[kept++] = pending[i];
    }
    pending_n = kept;
}

/* The cfgtx publisher: under the DB lock, right after COMMIT. */
static void on_commit(const struct cfg_changes *changes, void *arg)
{
    (void)arg;
    unsigned mask = facets_of(changes);
    if (!mask)
        return;
    if (changes->defer) {
        for (size_t i = 0; i < changes->n; i++)
            pending_push(&changes->v[i]);
        pending_overflow |= changes->overflow;
    } else {
        pending_supersede(changes);
    }
    /* Deferred too: the builds do what must happen at commit. */
    gen_publish(mask, changes);
}

static void on_after(void *arg)
{
    (void)arg;
    conf_apply_pending();
}

/* The generation follows the configuration's transactions (events.h). */
static int on_event(const struct event *ev, void *arg)
{
    if (ev->type == EV_CONFIG_COMMITTED)
        on_commit(ev->config, arg);
    else
        on_after(arg);
    return 0;
}

int conf_subscribe(enum conf_facet f, const struct conf_subscriber *s)
{
    if (subs[f]) {
        log_error("confgen: facet %d has a subscriber already (%s)", (int)f, subs[f]->name);
        return -EEXIST;
    }
    if (s->kinds & ~(uint32_t)CONF_KINDS) {
        log_error("confgen: %s subscribes to kinds outside CONF_KINDS", s->name);
        return -EINVAL;
    }
    if (!registered) {
        int rc = events_subscribe(&(struct event_subscriber){
            .name = "confgen",
            .types = EV_BIT(EV_CONFIG_COMMITTED) | EV_BIT(EV_CONFIG_AFTER),
            .config_kinds = CONF_KINDS,
            .fn = on_event,
        });
        if (rc < 0)
            return rc;
        registered = true;
    }
    subs[f] = s;
    return 0;
}

int conf_republish(unsigned mask, const struct cfg_changes *changes)
{
    db_lock();
    int rc = gen_publish(mask, changes);
    db_unlock();
    conf_apply_pending();
    return rc;
}

void conf_publish_part(enum conf_facet f, struct conf_part *part)
{
    db_lock(); /* publications are ordered by the DB lock */
    struct conf_gen *cur = conf_gen_current();
    struct conf_gen *g = gen_new();
    if (!g) {
        log_error("confgen: out of memory: a %d part is not published", (int)f);
        conf_part_unref(part);
    } else {
        for (size_t i = 0; i < CONF_FACETS; i++)
            g->part[i] = i == (size_t)f ? part : conf_part_ref(cur->part[i]);
    }
    conf_gen_unref(cur);
    if (g)
        gen_swap(g);
    db_unlock();
    conf_apply_pending();
}

int conf_reload(void)
{
    db_lock();
    struct cfg_changes ch = {.v = pending, .n = pending_n, .overflow = pending_overflow};
    pending = NULL;
    pending_n = pending_cap = 0;
    pending_overflow = false;
    unsigned mask = facets_of(&ch);
    int rc = mask ? gen_publish(mask, &ch) : 0;
    free((void *)ch.v);
    db_unlock();
    conf_apply_pending();
    return rc;
}

struct cfg_changes conf_pending(void)
{
    return (struct cfg_changes){.v = pending, .n = pending_n, .overflow = pending_overflow};
}

void conf_pending_drop(uint32_t kinds)
{
    size_t kept = 0;
    for (size_t i = 0; i < pending_n; i++)
        if (!(kinds & CFG_KIND_BIT(pending[i].kind)))
            pending[kept++] = pending[i];
    pending_n = kept;
}
