/*
 * Flush benchmark: K threads, each looping "4 KiB write + flush" on one
 * file-backed volume, with group commit and with one fdatasync per flush
 * (volume_set_group_commit(false)), for K = 1, 4, 16. Every case runs
 * `reps` times (each run: `seconds` per mode, in interleaved slices); the
 * median flushes/s is reported, as a Markdown table.
 *
 * usage: flush DIR [seconds-per-run] [reps]
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "store/volume.h"

#define BLOCK 4096
#define SLOTS_PER_THREAD 64
#define SLICES 6 /* per mode and run */

struct bench {
    struct volume *v;
    atomic_bool stop;
    atomic_uint_fast64_t flushes;
    atomic_int errors;
};

struct worker {
    struct bench *b;
    unsigned id;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint8_t buf[BLOCK];
    memset(buf, (int)w->id + 1, sizeof(buf));
    uint64_t n = 0;
    while (!atomic_load_explicit(&w->b->stop, memory_order_relaxed)) {
        uint64_t slot = (uint64_t)w->id * SLOTS_PER_THREAD + n % SLOTS_PER_THREAD;
        buf[0] = (uint8_t)n;
        struct vreq r = {.op = VREQ_WRITE, .buf = buf, .length = BLOCK, .offset = slot * BLOCK};
        struct vreq f = {.op = VREQ_FLUSH};
        if (volume_submit_wait(w->b->v, &r) != 0 || volume_submit_wait(w->b->v, &f) != 0) {
            atomic_fetch_add(&w->b->errors, 1);
            break;
        }
        n++;
    }
    atomic_fetch_add(&w->b->flushes, n);
    return NULL;
}

struct result {
    uint64_t flushes;
    uint64_t syncs;
    double seconds;
};

/* One slice: k threads for `seconds` in one mode; adds to *out. */
static int run_slice(struct volume *v, unsigned k, bool group, double seconds, struct result *out)
{
    struct bench b = {.v = v};
    volume_set_group_commit(v, group);
    uint64_t syncs0 = volume_sync_calls(v);
    pthread_t th[64];
    struct worker w[64];
    uint64_t t0 = time_now_ns();
    for (unsigned i = 0; i < k; i++) {
        w[i] = (struct worker){.b = &b, .id = i};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0)
            return -EAGAIN;
    }
    usleep((useconds_t)(seconds * 1e6));
    atomic_store(&b.stop, true);
    for (unsigned i = 0; i < k; i++)
        pthread_join(th[i], NULL);
    if (atomic_load(&b.errors))
        return -EIO;
    out->seconds += (double)(time_now_ns() - t0) / 1e9;
    out->flushes += atomic_load(&b.flushes);
    out->syncs += volume_sync_calls(v) - syncs0;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [seconds-per-run] [reps]\n", argv[0]);
        return 2;
    }
    double seconds = argc > 2 ? strtod(argv[2], NULL) : 2.0;
    int reps = argc > 3 ? (int)strtol(argv[3], NULL, 10) : 3;
    if (seconds <= 0 || reps < 1 || reps > 15) {
        fprintf(stderr, "bad seconds or reps\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/flush-bench-%d.img", argv[1], (int)getpid());
    unlink(path);
    int rc = bdev_file_create(path, (uint64_t)64 * SLOTS_PER_THREAD * BLOCK, false);
    struct bdev *bd = NULL;
    if (rc == 0)
        rc = bdev_file_open(path, false, &bd);
    struct volume *v = NULL;
    if (rc == 0)
        rc = volume_new("bench/flush", bd, BLOCK, VOLUME_SYNC_STANDARD, false, &v);
    if (rc < 0) {
        fprintf(stderr, "cannot set up %s: %s\n", path, strerror(-rc));
        unlink(path);
        return 1;
    }
    /* Enough pool threads that per-flush fdatasyncs are not capped by the
     * pool when group commit is off. */
    if (iopool_start(40) < 0)
        return 1;

    /* FLUSH_THREADS="1,4,16" (the default) picks the thread counts. */
    unsigned ks[8] = {1, 4, 16}, nks = 3;
    const char *sel = getenv("FLUSH_THREADS");
    if (sel && *sel) {
        nks = 0;
        char *end;
        for (const char *p = sel; *p && nks < 8; p = *end ? end + 1 : end) {
            unsigned long k = strtoul(p, &end, 10);
            if (end == p || k < 1 || k > 64 || (*end && *end != ',')) {
                fprintf(stderr, "bad FLUSH_THREADS '%s' (1..64, comma separated)\n", sel);
                return 2;
            }
            ks[nks++] = (unsigned)k;
        }
    }
    printf("| threads | group commit flushes/s | fdatasync per flush flushes/s | ratio | "
           "syncs/flush (group) | fdatasync calls/s (group / per flush) |\n");
    printf("|---:|---:|---:|---:|---:|---:|\n");
    for (unsigned i = 0; i < nks; i++) {
        double g[15], s[15], spf[15];
        for (int r = 0; r < reps; r++) {
            /* A run interleaves short slices of the two modes, flipping the
             * order each time, so the disk's drift hits both alike. */
            struct result rg = {0}, rs = {0};
            for (int sl = 0; sl < SLICES; sl++) {
                bool group_first = ((r + sl) & 1) == 0;
                double t = seconds / SLICES;
                if ((rc = run_slice(v, ks[i], group_first, t, group_first ? &rg : &rs)) < 0 ||
                    (rc = run_slice(v, ks[i], !group_first, t, group_first ? &rs : &rg)) < 0) {
                    fprintf(stderr, "run failed: %s\n", strerror(-rc));
                    goto out;
                }
            }
            g[r] = (double)rg.flushes / rg.seconds;
            s[r] = (double)rs.flushes / rs.seconds;
            spf[r] = rg.flushes ? (double)rg.syncs / (double)rg.flushes : 0.0;
        }
        double mg = median(g, reps), ms = median(s, reps), mspf = median(spf, reps);
        printf("| %u | %.0f | %.0f | %.2f | %.3f | %.0f / %.0f |\n", ks[i], mg, ms,
               ms > 0 ? mg / ms : 0.0, mspf, mg * mspf, ms);
        fflush(stdout);
    }
    rc = 0;
out:
    iopool_stop();
    volume_unref(v);
    unlink(path);
    return rc < 0 ? 1 : 0;
}
