/*
 * RBD data path benchmark: one reactor drives volume_submit on an RBD
 * image at a fixed queue depth (each completion submits the next request),
 * no front-end, to compare the two ways librbd completions come back to
 * the reactor (store/bdev_rbd_aio.c): librbd callbacks posting a reactor
 * message, or an eventfd (rbd_set_image_notification) the reactor drains
 * with rbd_poll_io_events. Cases: 4 KiB random read and write at QD1 and
 * QD32, 1 MiB sequential read and write at QD8. Every case runs `reps`
 * times per mode, the modes alternating; the median is reported with the
 * process's CPU time per request (reactor + librbd + messenger threads).
 * librbd options come from CEPH_ARGS (e.g. --rbd_cache=false).
 * BENCH_REACTORS=N (default 1) splits each case's queue depth over N
 * reactors (at least 1 request each), one volume shared, as with
 * connections on several reactors.
 *
 * usage: rbd_aio CEPH_CONF [seconds-per-run] [reps] [pool]
 * The image "blockd-bench-aio" (256 MiB) is created and filled if absent.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "core/util.h"
#include "store/bdev_rbd.h"
#include "store/volume.h"

#define IMAGE "blockd-bench-aio"
#define IMAGE_SIZE ((uint64_t)256 << 20)
#define MAX_QD 32

struct run {
    struct volume *v;
    struct reactor *owner;
    enum vreq_op op;
    uint32_t bs;
    unsigned qd;
    bool seq;
    uint64_t next_off, rng;
    atomic_bool stop;
    uint64_t ops; /* on the reactor only */
    int errors, first_error;
    unsigned running;
    struct vreq req[MAX_QD];
    char *buf[MAX_QD];
    sem_t done;
    struct reactor_msg start;
};

static uint64_t next_offset(struct run *r)
{
    uint64_t blocks = IMAGE_SIZE / r->bs;
    if (r->seq) {
        uint64_t off = r->next_off;
        r->next_off = (r->next_off + r->bs) % IMAGE_SIZE;
        return off;
    }
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return (r->rng % blocks) * r->bs;
}

static void run_submit(struct run *r, struct vreq *q)
{
    q->op = r->op;
    q->offset = next_offset(r);
    q->length = r->bs;
    volume_submit(r->v, q);
}

static void run_done(struct vreq *q)
{
    struct run *r = q->arg;
    if (q->result == 0)
        r->ops++;
    else if (r->errors++ == 0)
        r->first_error = q->result;
    if (q->result == 0 && !atomic_load_explicit(&r->stop, memory_order_relaxed)) {
        run_submit(r, q);
        return;
    }
    if (--r->running == 0)
        sem_post(&r->done);
}

static void run_start(struct reactor_msg *m)
{
    struct run *r = container_of(m, struct run, start);
    r->running = r->qd;
    for (unsigned i = 0; i < r->qd; i++) {
        r->req[i] = (struct vreq){.buf = r->buf[i], .owner = r->owner, .done = run_done, .arg = r};
        run_submit(r, &r->req[i]);
    }
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

struct result {
    double iops, cpu_us;
};

static int open_volume(struct rbd_cluster *c, const char *pool, const char *mode, struct volume **v)
{
    struct bdev *b;
    setenv("BLOCKD_RBD_COMPLETION", mode, 1);
    int rc = bdev_rbd_open(c, pool, NULL, IMAGE, NULL, false, &b);
    if (rc < 0)
        return rc;
    rc = volume_new("bench/rbd", b, 4096, VOLUME_SYNC_STANDARD, false, v);
    if (rc < 0)
        bdev_close(b);
    return rc;
}

static int one_run(struct rbd_cluster *c, const char *pool, const char *mode, enum vreq_op op,
                   uint32_t bs, unsigned qd, bool seq, unsigned seconds, struct result *res)
{
    unsigned nr = reactors_count();
    struct volume *v;
    struct run *runs[16];
    int rc = open_volume(c, pool, mode, &v);
    if (rc < 0)
        return rc;
    for (unsigned k = 0; k < nr; k++) {
        struct run *r = runs[k] = calloc(1, sizeof(*r));
        r->v = v;
        r->owner = reactor_get(k);
        r->op = op;
        r->bs = bs;
        r->qd = qd / nr ? qd / nr : 1;
        r->seq = seq;
        r->next_off = (uint64_t)k * (IMAGE_SIZE / nr);
        r->rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)time_now_ns() ^ k;
        sem_init(&r->done, 0, 0);
        for (unsigned i = 0; i < r->qd; i++) {
            r->buf[i] = aligned_alloc(4096, bs);
            memset(r->buf[i], (int)i + 1, bs);
        }
    }
    double cpu0 = cpu_seconds();
    uint64_t t0 = time_now_ns();
    for (unsigned k = 0; k < nr; k++) {
        runs[k]->start.fn = run_start;
        reactor_post(runs[k]->owner, &runs[k]->start);
    }
    usleep(seconds * 1000000u);
    for (unsigned k = 0; k < nr; k++)
        atomic_store(&runs[k]->stop, true);
    for (unsigned k = 0; k < nr; k++)
        sem_wait(&runs[k]->done);
    double secs = (double)(time_now_ns() - t0) / 1e9;
    double cpu = cpu_seconds() - cpu0;
    uint64_t ops = 0;
    for (unsigned k = 0; k < nr; k++) {
        struct run *r = runs[k];
        ops += r->ops;
        if (r->errors) {
            fprintf(stderr, "rbd_aio: %d errors, first %s\n", r->errors, strerror(-r->first_error));
            rc = r->first_error;
        }
        for (unsigned i = 0; i < r->qd; i++)
            free(r->buf[i]);
        free(r);
    }
    res->iops = (double)ops / secs;
    res->cpu_us = ops ? cpu * 1e6 / (double)ops : 0;
    volume_flush_wait(v);
    volume_unref(v);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Create and fill the image (reads of never-written objects are answered
 * by librbd without asking the OSD: not a measurement). */
static int prepare(struct rbd_cluster *c, const char *pool)
{
    rados_ioctx_t io;
    int order = 0, rc = rbd_cluster_ioctx(c, pool, NULL, &io);
    if (rc < 0)
        return rc;
    rc = rbd_create2(io, IMAGE, IMAGE_SIZE, 61, &order);
    rados_ioctx_destroy(io);
    if (rc == -EEXIST)
        return 0;
    if (rc < 0)
        return rc;
    fprintf(stderr, "rbd_aio: filling %s\n", IMAGE);
    struct volume *v;
    if ((rc = open_volume(c, pool, "callback", &v)) < 0)
        return rc;
    char *buf = malloc(4 << 20);
    memset(buf, 0x5a, 4 << 20);
    for (uint64_t off = 0; off < IMAGE_SIZE && rc == 0; off += 4 << 20) {
        struct vreq q = {.op = VREQ_WRITE, .buf = buf, .length = 4 << 20, .offset = off};
        rc = volume_submit_wait(v, &q);
    }
    if (rc == 0)
        rc = volume_flush_wait(v);
    volume_unref(v);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CEPH_CONF [seconds-per-run] [reps] [pool]\n", argv[0]);
        return 2;
    }
    unsigned seconds = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 5;
    unsigned reps = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 3;
    const char *pool = argc > 4 ? argv[4] : "rbd";
    if (!seconds || !reps || reps > 16)
        return 2;
    const char *nr_env = getenv("BENCH_REACTORS");
    unsigned nr = nr_env ? (unsigned)strtoul(nr_env, NULL, 10) : 1;
    if (nr < 1 || nr > 16)
        return 2;
    if (reactors_start(nr) || iopool_start(4))
        return 1;
    struct rbd_cluster_spec spec = {.conf = argv[1]};
    struct rbd_cluster *c;
    int rc = rbd_cluster_get(&spec, 20, &c);
    if (rc < 0 || (rc = prepare(c, pool)) < 0) {
        fprintf(stderr, "rbd_aio: %s\n", strerror(-rc));
        return 1;
    }
    static const struct {
        const char *name;
        enum vreq_op op;
        uint32_t bs;
        unsigned qd;
        bool seq;
    } cases[] = {
        {"4K randread QD1", VREQ_READ, 4096, 1, false},
        {"4K randread QD32", VREQ_READ, 4096, 32, false},
        {"4K randwrite QD1", VREQ_WRITE, 4096, 1, false},
        {"4K randwrite QD32", VREQ_WRITE, 4096, 32, false},
        {"1M seqread QD8", VREQ_READ, 1 << 20, 8, true},
        {"1M seqwrite QD8", VREQ_WRITE, 1 << 20, 8, true},
    };
    static const char *modes[] = {"callback", "eventfd"};
    const char *args = getenv("CEPH_ARGS");
    printf("CEPH_ARGS: %s; %u reactor(s); %u s per run, median of %u\n\n",
           args && args[0] ? args : "(none)", nr, seconds, reps);
    printf("| case | callback IOPS | callback MiB/s | callback CPU µs/IO | eventfd IOPS | "
           "eventfd MiB/s | eventfd CPU µs/IO |\n|---|---|---|---|---|---|---|\n");
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        double iops[2][16], cpu[2][16];
        for (unsigned i = 0; i < reps; i++) {
            for (unsigned m = 0; m < 2; m++) {
                unsigned mm = (i & 1) ? 1 - m : m; /* alternate which goes first */
                struct result res;
                rc = one_run(c, pool, modes[mm], cases[k].op, cases[k].bs, cases[k].qd,
                             cases[k].seq, seconds, &res);
                if (rc < 0) {
                    fprintf(stderr, "rbd_aio: %s: %s\n", cases[k].name, strerror(-rc));
                    return 1;
                }
                iops[mm][i] = res.iops;
                cpu[mm][i] = res.cpu_us;
            }
        }
        printf("| %s", cases[k].name);
        for (unsigned m = 0; m < 2; m++) {
            qsort(iops[m], reps, sizeof(double), cmp_double);
            qsort(cpu[m], reps, sizeof(double), cmp_double);
            double med = iops[m][reps / 2];
            printf(" | %.0f | %.1f | %.1f", med, med * cases[k].bs / 1048576.0, cpu[m][reps / 2]);
        }
        printf(" |\n");
        fflush(stdout);
    }
    rbd_cluster_put(c);
    reactors_stop();
    iopool_stop();
    return 0;
}
