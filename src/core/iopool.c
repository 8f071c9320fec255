#include "core/iopool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/bufpool.h"
#include "core/log.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct io_job *head, *tail;
static pthread_t *threads;
static unsigned nthreads;
static bool stopping;
static atomic_uint busy; /* jobs submitted and not yet finished */
static bool started;

static void job_complete(struct io_job *j)
{
    if (j->owner)
        reactor_post(j->owner, &j->done);
    else if (j->done.fn)
        j->done.fn(&j->done);
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!head && !stopping)
            pthread_cond_wait(&cond, &lock);
        struct io_job *j = head;
        if (!j) {
            pthread_mutex_unlock(&lock);
            bufpool_thread_release();
            return NULL;
        }
        head = j->next;
        if (!head)
            tail = NULL;
        pthread_mutex_unlock(&lock);
        j->next = NULL;
        j->run(j);
        job_complete(j);
        atomic_fetch_sub_explicit(&busy, 1, memory_order_relaxed);
    }
}

int iopool_start(unsigned n)
{
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = (unsigned)(c > 0 ? c : 1) * 4;
        if (n < 8)
            n = 8;
    }
    threads = calloc(n, sizeof(*threads));
    if (!threads)
        return -ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        int rc = pthread_create(&threads[i], NULL, worker, NULL);
        if (rc) {
            log_error("iopool: pthread_create: error %d", rc);
            return -rc;
        }
        char name[16];
        snprintf(name, sizeof(name), "io%u", i % 10000u);
        pthread_setname_np(threads[i], name);
        nthreads++;
    }
    started = true;
    return 0;
}

void iopool_stop(void)
{
    pthread_mutex_lock(&lock);
    stopping = true;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (unsigned i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);
    free(threads);
    threads = NULL;
    nthreads = 0;
    started = false;
    stopping = false;
}

void iopool_submit(struct io_job *j)
{
    if (!started) {
        /* Before start-up (tools, tests): run synchronously. */
        j->run(j);
        job_complete(j);
        return;
    }
    j->next = NULL;
    atomic_fetch_add_explicit(&busy, 1, memory_order_relaxed);
    pthread_mutex_lock(&lock);
    if (tail)
        tail->next = j;
    else
        head = j;
    tail = j;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&lock);
}

unsigned iopool_busy(void)
{
    return atomic_load_explicit(&busy, memory_order_relaxed);
}
