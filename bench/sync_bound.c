/*
 * The disk's own limit for the "W writers, each writing a block and then
 * flushing" pattern of bench/nbd.sh and bench/iscsi.sh: W threads on FILE,
 * no network, no server, each looping "pwrite 4 KiB at a random offset,
 * then make it durable", in three ways:
 *   parallel: each thread calls fdatasync itself (what nbdkit and tgtd do);
 *   group:    one fdatasync at a time covers every write done before it
 *             started (group commit, what blockd does);
 *   direct:   O_DIRECT writes, each thread calls fdatasync itself.
 * Prints one line per way and then "best <flushes/s>": no server can
 * acknowledge more durable write+flush pairs per second on this disk than
 * the best of these, since it has to do at least this work.
 *
 * usage: sync_bound FILE [writers] [seconds]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096

enum way { WAY_PARALLEL, WAY_GROUP, WAY_DIRECT };

struct run {
    int fd;
    enum way way;
    uint64_t blocks;
    atomic_bool stop;
    atomic_uint_fast64_t done;
    atomic_int failed;
    /* group commit */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t written, synced;
    bool syncing;
};

/* Durable once a sync that started after our write returns. */
static int group_flush(struct run *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t mine = ++r->written;
    int rc = 0;
    while (r->synced < mine && rc == 0) {
        if (r->syncing) {
            pthread_cond_wait(&r->cond, &r->lock);
            continue;
        }
        r->syncing = true;
        uint64_t covers = r->written;
        pthread_mutex_unlock(&r->lock);
        rc = fdatasync(r->fd);
        pthread_mutex_lock(&r->lock);
        r->syncing = false;
        if (rc == 0 && covers > r->synced)
            r->synced = covers;
        pthread_cond_broadcast(&r->cond);
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

struct writer {
    struct run *r;
    unsigned seed;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    struct run *r = w->r;
    void *buf;
    if (posix_memalign(&buf, BLOCK, BLOCK) != 0) {
        atomic_store(&r->failed, ENOMEM);
        return NULL;
    }
    memset(buf, (int)w->seed, BLOCK);
    while (!atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        off_t off = (off_t)((uint64_t)rand_r(&w->seed) % r->blocks) * BLOCK;
        int rc = pwrite(r->fd, buf, BLOCK, off) == BLOCK ? 0 : -1;
        if (rc == 0)
            rc = r->way == WAY_GROUP ? group_flush(r) : fdatasync(r->fd);
        if (rc != 0) {
            atomic_store(&r->failed, errno ? errno : EIO);
            break;
        }
        atomic_fetch_add_explicit(&r->done, 1, memory_order_relaxed);
    }
    free(buf);
    return NULL;
}

static double measure(const char *path, enum way way, unsigned writers, unsigned seconds)
{
    struct run r = {.way = way};
    r.fd = open(path, O_RDWR | O_CLOEXEC | (way == WAY_DIRECT ? O_DIRECT : 0));
    if (r.fd < 0) {
        fprintf(stderr, "sync_bound: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    off_t size = lseek(r.fd, 0, SEEK_END);
    if (size < BLOCK) {
        fprintf(stderr, "sync_bound: %s is smaller than one block\n", path);
        exit(1);
    }
    r.blocks = (uint64_t)size / BLOCK;
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.cond, NULL);
    pthread_t t[64];
    struct writer w[64];
    for (unsigned i = 0; i < writers; i++) {
        w[i] = (struct writer){.r = &r, .seed = i + 1};
        if (pthread_create(&t[i], NULL, writer_main, &w[i]) != 0) {
            fprintf(stderr, "sync_bound: cannot start a thread\n");
            exit(1);
        }
    }
    sleep(seconds);
    atomic_store(&r.stop, true);
    for (unsigned i = 0; i < writers; i++)
        pthread_join(t[i], NULL);
    close(r.fd);
    if (atomic_load(&r.failed)) {
        fprintf(stderr, "sync_bound: %s: %s\n", path, strerror(atomic_load(&r.failed)));
        exit(1);
    }
    return (double)atomic_load(&r.done) / seconds;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE [writers] [seconds]\n", argv[0]);
        return 2;
    }
    unsigned writers = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 8;
    unsigned seconds = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 2;
    if (writers < 1 || writers > 64 || seconds < 1) {
        fprintf(stderr, "sync_bound: 1..64 writers, >= 1 second\n");
        return 2;
    }
    static const char *const names[] = {"parallel", "group", "direct"};
    double best = 0;
    for (int way = WAY_PARALLEL; way <= WAY_DIRECT; way++) {
        double v = measure(argv[1], (enum way)way, writers, seconds);
        printf("%s %.0f\n", names[way], v);
        if (v > best)
            best = v;
    }
    printf("best %.0f\n", best);
    return 0;
}
