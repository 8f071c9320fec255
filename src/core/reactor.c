/*
 * Reactor threads. Cross-thread messages use a lock-free LIFO (atomic
 * exchange to take everything, reversed for FIFO order) plus an eventfd
 * written only when the queue goes from empty to non-empty, so a busy
 * reactor receives many completions for one wake-up syscall.
 */
#include "core/reactor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "core/bufpool.h"
#include "core/iopool.h"
#include "core/log.h"

#define MAX_EVENTS 256

struct reactor {
    unsigned index;
    int epfd;
    int wakefd;
    int timerfd;
    pthread_t thread;
    _Atomic(struct reactor_msg *) inbox;
    atomic_bool stop;
    struct reactor_handler wake_handler;
    struct reactor_handler timer_handler;
    /* Owned by the reactor thread only. */
    struct reactor_msg *deferred_head, *deferred_tail;
    struct reactor_timer **heap;
    size_t heap_len, heap_cap;
    uint64_t armed_deadline;
};

static struct reactor *reactors;
static unsigned reactor_n;
static atomic_uint next_pick;
static _Thread_local struct reactor *self_reactor;

uint64_t time_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void drain_inbox(struct reactor *r)
{
    struct reactor_msg *list;
    while ((list = atomic_exchange_explicit(&r->inbox, NULL, memory_order_acquire)) != NULL) {
        struct reactor_msg *fifo = NULL;
        while (list) {
            struct reactor_msg *n = list->next;
            list->next = fifo;
            fifo = list;
            list = n;
        }
        while (fifo) {
            struct reactor_msg *n = fifo->next;
            fifo->next = NULL;
            fifo->fn(fifo);
            fifo = n;
        }
    }
}

static void on_wake(struct reactor_handler *h, uint32_t events)
{
    struct reactor *r = (struct reactor *)((char *)h - offsetof(struct reactor, wake_handler));
    uint64_t v;
    ssize_t n = read(r->wakefd, &v, sizeof(v));
    (void)n;
    drain_inbox(r);
}

/* ---- timers: binary min-heap on deadline ---- */

static void heap_swap(struct reactor *r, size_t a, size_t b)
{
    struct reactor_timer *t = r->heap[a];
    r->heap[a] = r->heap[b];
    r->heap[b] = t;
    r->heap[a]->heap_index = a;
    r->heap[b]->heap_index = b;
}

static void heap_up(struct reactor *r, size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (r->heap[p]->deadline_ns <= r->heap[i]->deadline_ns)
            break;
        heap_swap(r, p, i);
        i = p;
    }
}

static void heap_down(struct reactor *r, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, s = i;
        if (l < r->heap_len && r->heap[l]->deadline_ns < r->heap[s]->deadline_ns)
            s = l;
        if (l + 1 < r->heap_len && r->heap[l + 1]->deadline_ns < r->heap[s]->deadline_ns)
            s = l + 1;
        if (s == i)
            break;
        heap_swap(r, s, i);
        i = s;
    }
}

static void heap_remove(struct reactor *r, size_t i)
{
    r->heap[i]->heap_index = SIZE_MAX;
    r->heap_len--;
    if (i != r->heap_len) {
        r->heap[i] = r->heap[r->heap_len];
        r->heap[i]->heap_index = i;
        heap_down(r, i);
        heap_up(r, i);
    }
}

static void timer_rearm(struct reactor *r)
{
    uint64_t want = r->heap_len ? r->heap[0]->deadline_ns : 0;
    if (want == r->armed_deadline)
        return;
    struct itimerspec its = {0};
    if (want) {
        its.it_value.tv_sec = (time_t)(want / 1000000000ull);
        its.it_value.tv_nsec = (long)(want % 1000000000ull);
    }
    timerfd_settime(r->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
    r->armed_deadline = want;
}

static void on_timer(struct reactor_handler *h, uint32_t events)
{
    struct reactor *r = (struct reactor *)((char *)h - offsetof(struct reactor, timer_handler));
    uint64_t v;
    ssize_t n = read(r->timerfd, &v, sizeof(v));
    (void)n;
    r->armed_deadline = 0;
    uint64_t now = time_now_ns();
    while (r->heap_len && r->heap[0]->deadline_ns <= now) {
        struct reactor_timer *t = r->heap[0];
        heap_remove(r, 0);
        t->fn(t);
    }
    timer_rearm(r);
}

void reactor_timer_init(struct reactor_timer *t, void (*fn)(struct reactor_timer *t))
{
    t->fn = fn;
    t->deadline_ns = 0;
    t->heap_index = SIZE_MAX;
}

bool reactor_timer_armed(const struct reactor_timer *t)
{
    return t->heap_index != SIZE_MAX;
}

void reactor_timer_start(struct reactor *r, struct reactor_timer *t, uint64_t delay_ns)
{
    if (reactor_timer_armed(t))
        heap_remove(r, t->heap_index);
    if (r->heap_len == r->heap_cap) {
        size_t cap = r->heap_cap ? r->heap_cap * 2 : 64;
        struct reactor_timer **h = realloc(r->heap, cap * sizeof(*h));
        if (!h) {
            /* Out of memory: fire late rather than never. */
            log_error("reactor %u: timer heap allocation failed", r->index);
            abort();
        }
        r->heap = h;
        r->heap_cap = cap;
    }
    t->deadline_ns = time_now_ns() + (delay_ns ? delay_ns : 1);
    t->heap_index = r->heap_len;
    r->heap[r->heap_len++] = t;
    heap_up(r, t->heap_index);
    timer_rearm(r);
}

void reactor_timer_cancel(struct reactor *r, struct reactor_timer *t)
{
    if (!reactor_timer_armed(t))
        return;
    heap_remove(r, t->heap_index);
    timer_rearm(r);
}

/* ---- loop ---- */

static void run_deferred(struct reactor *r)
{
    while (r->deferred_head) {
        struct reactor_msg *m = r->deferred_head;
        r->deferred_head = m->next;
        if (!r->deferred_head)
            r->deferred_tail = NULL;
        m->next = NULL;
        m->fn(m);
    }
}

/* See reactors_set_spin. Set before the reactors start, read-only after. */
static uint64_t spin_ns = 20000;

void reactors_set_spin(unsigned us)
{
    spin_ns = (uint64_t)us * 1000u;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *reactor_main(void *arg)
{
    struct reactor *r = arg;
    self_reactor = r;
    struct epoll_event events[MAX_EVENTS];
    uint64_t spin = spin_ns, idle_since = 0;
    bool active = false;
    while (!atomic_load(&r->stop)) {
        /* Poll without sleeping for a moment after an iteration that did
         * work: a client's next request usually follows within microseconds,
         * and waking a reactor asleep in epoll_wait costs the waker (the
         * client, on loopback) a cross-CPU wake-up: fio spent 15% of its CPU
         * there against blockd and 5% against nbdkit, whose threads are more
         * often awake. Not while I/O pool jobs are outstanding: those threads
         * need the CPU more (4K writes lost 20% with an unconditional spin). */
        int n;
        if (spin && active && iopool_busy() == 0) {
            n = epoll_wait(r->epfd, events, MAX_EVENTS, 0);
            if (n == 0) {
                uint64_t now = mono_ns();
                if (!idle_since)
                    idle_since = now;
                else if (now - idle_since > spin)
                    active = false;
                continue;
            }
        } else {
            n = epoll_wait(r->epfd, events, MAX_EVENTS, -1);
        }
        active = n > 0;
        idle_since = 0;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            log_error("reactor %u: epoll_wait: %s", r->index, strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            struct reactor_handler *h = events[i].data.ptr;
            h->on_event(h, events[i].events);
        }
        /* Deferred work (output flushes) may post to ourselves, and
         * messages may defer work: settle both before sleeping. */
        do {
            drain_inbox(r);
            run_deferred(r);
        } while (atomic_load_explicit(&r->inbox, memory_order_relaxed));
    }
    drain_inbox(r);
    run_deferred(r);
    bufpool_thread_release();
    return NULL;
}

int reactors_start(unsigned n)
{
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (unsigned)c : 1;
    }
    reactors = calloc(n, sizeof(*reactors));
    if (!reactors)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        struct reactor *r = &reactors[i];
        r->index = i;
        r->epfd = epoll_create1(EPOLL_CLOEXEC);
        r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        r->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (r->epfd < 0 || r->wakefd < 0 || r->timerfd < 0)
            return -errno;
        r->wake_handler.on_event = on_wake;
        r->timer_handler.on_event = on_timer;
        int rc = reactor_add(r, r->wakefd, EPOLLIN, &r->wake_handler);
        if (rc == 0)
            rc = reactor_add(r, r->timerfd, EPOLLIN, &r->timer_handler);
        if (rc)
            return rc;
    }
    reactor_n = n;
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&reactors[i].thread, NULL, reactor_main, &reactors[i]);
        if (rc)
            return -rc;
        /* Named so top -H, perf and the control bench can tell the data
         * path's CPU from the API's. */
        char name[16];
        snprintf(name, sizeof(name), "reactor%u", i % 1000u);
        pthread_setname_np(reactors[i].thread, name);
    }
    return 0;
}

static void reactor_wake(struct reactor *r)
{
    uint64_t one = 1;
    ssize_t n = write(r->wakefd, &one, sizeof(one));
    (void)n;
}

void reactors_stop(void)
{
    for (unsigned i = 0; i < reactor_n; i++) {
        atomic_store(&reactors[i].stop, true);
        reactor_wake(&reactors[i]);
    }
    for (unsigned i = 0; i < reactor_n; i++)
        pthread_join(reactors[i].thread, NULL);
    for (unsigned i = 0; i < reactor_n; i++) {
        close(reactors[i].epfd);
        close(reactors[i].wakefd);
        close(reactors[i].timerfd);
        free(reactors[i].heap);
    }
    free(reactors);
    reactors = NULL;
    reactor_n = 0;
}

unsigned reactors_count(void)
{
    return reactor_n;
}

struct reactor *reactor_get(unsigned index)
{
    return index < reactor_n ? &reactors[index] : NULL;
}

struct reactor *reactor_next(void)
{
    if (!reactor_n)
        return NULL;
    return &reactors[atomic_fetch_add(&next_pick, 1) % reactor_n];
}

struct reactor *reactor_self(void)
{
    return self_reactor;
}

unsigned reactor_index(const struct reactor *r)
{
    return r->index;
}

int reactor_add(struct reactor *r, int fd, uint32_t events, struct reactor_handler *h)
{
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

int reactor_modify(struct reactor *r, int fd, uint32_t events, struct reactor_handler *h)
{
    struct epoll_event ev = {.events = events, .data.ptr = h};
    return epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &ev) ? -errno : 0;
}

int reactor_remove(struct reactor *r, int fd)
{
    return epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL) ? -errno : 0;
}

void reactor_post(struct reactor *r, struct reactor_msg *m)
{
    struct reactor_msg *old = atomic_load_explicit(&r->inbox, memory_order_relaxed);
    do {
        m->next = old;
    } while (!atomic_compare_exchange_weak_explicit(&r->inbox, &old, m, memory_order_release,
                                                    memory_order_relaxed));
    /* Only the first message into an empty inbox needs a wake-up; and a
     * reactor posting to itself drains its inbox before sleeping anyway. */
    if (old == NULL && self_reactor != r)
        reactor_wake(r);
}

void reactor_defer(struct reactor *r, struct reactor_msg *m)
{
    m->next = NULL;
    if (r->deferred_tail)
        r->deferred_tail->next = m;
    else
        r->deferred_head = m;
    r->deferred_tail = m;
}
