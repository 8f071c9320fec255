#include "daemon/watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/reactor.h"
#include "daemon/sdnotify.h"

/* --threads is at most 256; static slots so that a tick still queued on a
 * reactor at shutdown never points at freed memory. */
#define WATCHDOG_MAX_REACTORS 256

struct tick {
    struct reactor_msg msg;
    atomic_bool pending; /* posted, not yet run by the reactor */
};

static struct tick ticks[WATCHDOG_MAX_REACTORS];
static pthread_t thread;
static bool started;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool stopping;
static uint64_t period_usec;

static void tick_run(struct reactor_msg *m)
{
    struct tick *t = (struct tick *)m; /* msg is the first member */
    atomic_store(&t->pending, false);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    unsigned n = reactors_count();
    if (n > WATCHDOG_MAX_REACTORS)
        n = WATCHDOG_MAX_REACTORS;
    /* Ping four times a period: one late round does not cost a restart. */
    uint64_t interval_ns = period_usec * 1000u / 4;
    bool warned = false;
    pthread_mutex_lock(&lock);
    while (!stopping) {
        unsigned late = 0, first_late = 0;
        for (unsigned i = 0; i < n; i++)
            if (atomic_load(&ticks[i].pending) && late++ == 0)
                first_late = i;
        if (late == 0) {
            if (warned)
                log_info("watchdog: every reactor answers again");
            warned = false;
            sdnotify_send("WATCHDOG=1");
            for (unsigned i = 0; i < n; i++) {
                atomic_store(&ticks[i].pending, true);
                reactor_post(reactor_get(i), &ticks[i].msg);
            }
        } else if (!warned) {
            log_warn("watchdog: %u reactor(s) (first: %u) did not answer within %llu ms; "
                     "not pinging systemd",
                     late, first_late, (unsigned long long)(interval_ns / 1000000u));
            warned = true;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + interval_ns;
        ts.tv_sec += (time_t)(ns / 1000000000u);
        ts.tv_nsec = (long)(ns % 1000000000u);
        while (!stopping && pthread_cond_timedwait(&wake, &lock, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

int watchdog_start(void)
{
    period_usec = sdnotify_watchdog_usec();
    if (period_usec == 0)
        return 0;
    if (period_usec < 4000)
        period_usec = 4000; /* 1 ms between rounds at the least */
    for (unsigned i = 0; i < WATCHDOG_MAX_REACTORS; i++)
        ticks[i].msg.fn = tick_run;
    int rc = pthread_create(&thread, NULL, watchdog_main, NULL);
    if (rc != 0)
        return -rc;
    started = true;
    log_info("watchdog: pinging systemd every %llu ms while all %u reactors answer",
             (unsigned long long)(period_usec / 4000u), reactors_count());
    return 0;
}

void watchdog_stop(void)
{
    if (!started)
        return;
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    pthread_join(thread, NULL);
    started = false;
}
