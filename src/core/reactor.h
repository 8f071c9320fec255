/*
 * Reactors: one epoll loop per thread. Every connection is owned by exactly
 * one reactor and only ever touched on that reactor's thread; other threads
 * talk to it by posting messages (reactor_post). A reactor never blocks:
 * blocking calls go to the I/O pool (iopool.h), whose completions come back
 * here as posted messages.
 */
#ifndef BLOCKD_CORE_REACTOR_H
#define BLOCKD_CORE_REACTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct reactor;

/* Embedded in the object that owns an fd; on_event runs on the reactor thread. */
struct reactor_handler {
    void (*on_event)(struct reactor_handler *h, uint32_t events);
};

/* A unit of work to run on a given reactor's thread. Embedded by the caller,
 * who owns its memory; it must stay valid until fn has been called. */
struct reactor_msg {
    void (*fn)(struct reactor_msg *m);
    struct reactor_msg *next;
};

/* A one-shot timer on a reactor. Start/cancel only on that reactor's thread. */
struct reactor_timer {
    void (*fn)(struct reactor_timer *t);
    uint64_t deadline_ns;
    size_t heap_index; /* private; SIZE_MAX when not armed */
};

/* After a loop iteration that handled events, keep polling (epoll_wait
 * without sleeping) for up to us microseconds before sleeping, unless I/O
 * pool jobs are outstanding. 0: always sleep. Default 20. Call before
 * reactors_start. */
void reactors_set_spin(unsigned us);
/* Start n reactor threads (n = 0: one per online CPU). Call once. */
int reactors_start(unsigned n);
/* Ask every reactor to stop after its current iteration and join them. */
void reactors_stop(void);
unsigned reactors_count(void);
struct reactor *reactor_get(unsigned index);
/* Round-robin choice for a new connection. Thread-safe. */
struct reactor *reactor_next(void);
/* The reactor whose thread is calling, or NULL on a non-reactor thread. */
struct reactor *reactor_self(void);
unsigned reactor_index(const struct reactor *r);

/* epoll registration; thread-safe (epoll_ctl is), but the handler's events are
 * delivered only on r's thread. events are EPOLLIN/EPOLLOUT/... (level-triggered
 * unless EPOLLET is given). Return 0 or -errno. */
int reactor_add(struct reactor *r, int fd, uint32_t events, struct reactor_handler *h);
int reactor_modify(struct reactor *r, int fd, uint32_t events, struct reactor_handler *h);
int reactor_remove(struct reactor *r, int fd);

/* Run m->fn on r's thread, soon. Thread-safe, never blocks, never fails. */
void reactor_post(struct reactor *r, struct reactor_msg *m);
/* Run m->fn on r's thread at the end of the current loop iteration (after all
 * ready events are handled) — the place to flush batched output. Must be
 * called on r's thread. A message may be deferred only once at a time. */
void reactor_defer(struct reactor *r, struct reactor_msg *m);

void reactor_timer_init(struct reactor_timer *t, void (*fn)(struct reactor_timer *t));
void reactor_timer_start(struct reactor *r, struct reactor_timer *t, uint64_t delay_ns);
void reactor_timer_cancel(struct reactor *r, struct reactor_timer *t);
bool reactor_timer_armed(const struct reactor_timer *t);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t time_now_ns(void);

#endif
