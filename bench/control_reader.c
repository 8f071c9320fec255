/*
 * bench/control.sh's disruption probe: QD reads of 4 KiB at random LBAs on
 * one iSCSI LUN (libiscsi, async), until SECONDS pass (or SIGTERM/SIGINT
 * when SECONDS is 0). Prints "iops=N max_gap_ms=G errors=E reads=R" where
 * max_gap_ms is the longest time between two consecutive completions: a
 * stall of the target shows there even when the average looks fine.
 *
 *   control_reader PORTAL IQN SECONDS QD [TRACE_FILE]
 *
 * With TRACE_FILE, the completions per 10 ms are written there at the
 * end, one line "T0 N0 N1 ..." where T0 is the CLOCK_MONOTONIC second of
 * the first bucket (Python's time.monotonic() reads the same clock), so a
 * caller can count the reads inside its own time windows.
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct state {
    struct iscsi_context *iscsi;
    uint64_t blocks;
    uint32_t blocksize;
    uint64_t reads, errors;
    int inflight;
    double last, max_gap, end;
    unsigned seed;
    double t0;         /* start of bucket 0 */
    uint32_t *buckets; /* completions per 10 ms, or NULL */
    size_t nbuckets;
};

#define BUCKET_S 0.01

static void submit(struct state *s);

static void read_done(struct iscsi_context *iscsi, int status, void *command_data, void *priv)
{
    struct state *s = priv;
    struct scsi_task *task = command_data;
    double t = now_s();
    if (s->last > 0 && t - s->last > s->max_gap)
        s->max_gap = t - s->last;
    s->last = t;
    s->inflight--;
    if (status == SCSI_STATUS_GOOD) {
        s->reads++;
        size_t b = (size_t)((t - s->t0) / BUCKET_S);
        if (s->buckets && b < s->nbuckets)
            s->buckets[b]++;
    } else
        s->errors++;
    if (task)
        scsi_free_scsi_task(task);
    if (!stop && (s->end == 0 || t < s->end))
        submit(s);
}

static void submit(struct state *s)
{
    uint32_t per = 4096 / s->blocksize;
    uint64_t lba = (uint64_t)rand_r(&s->seed) % (s->blocks - per);
    if (iscsi_read10_task(s->iscsi, 0, (uint32_t)lba, 4096, (int)s->blocksize, 0, 0, 0, 0, 0,
                          read_done, s) == NULL) {
        s->errors++;
        return;
    }
    s->inflight++;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: control_reader PORTAL IQN SECONDS QD [TRACE_FILE]\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    struct state s = {.seed = 1};
    s.iscsi = iscsi_create_context("iqn.2026-11.org.blockd.bench:reader");
    iscsi_set_targetname(s.iscsi, argv[2]);
    iscsi_set_session_type(s.iscsi, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(s.iscsi, ISCSI_HEADER_DIGEST_NONE);
    if (iscsi_full_connect_sync(s.iscsi, argv[1], 0) != 0) {
        fprintf(stderr, "control_reader: login to %s %s: %s\n", argv[1], argv[2],
                iscsi_get_error(s.iscsi));
        return 1;
    }
    struct scsi_task *cap = iscsi_readcapacity16_sync(s.iscsi, 0);
    struct scsi_readcapacity16 *rc16 = cap ? scsi_datain_unmarshall(cap) : NULL;
    if (!rc16) {
        fprintf(stderr, "control_reader: READ CAPACITY failed\n");
        return 1;
    }
    s.blocks = rc16->returned_lba + 1;
    s.blocksize = rc16->block_length;
    scsi_free_scsi_task(cap);
    double secs = atof(argv[3]);
    int qd = atoi(argv[4]);
    double start = now_s();
    s.end = secs > 0 ? start + secs : 0;
    s.t0 = start;
    if (argc == 6) {
        s.nbuckets = 3600 * 100; /* an hour */
        s.buckets = calloc(s.nbuckets, sizeof(*s.buckets));
        if (!s.buckets)
            return 1;
    }
    for (int i = 0; i < qd; i++)
        submit(&s);
    while (s.inflight > 0) {
        struct pollfd p = {.fd = iscsi_get_fd(s.iscsi),
                           .events = (short)iscsi_which_events(s.iscsi)};
        int n = poll(&p, 1, 10);
        if (n < 0 && !stop)
            break;
        if (iscsi_service(s.iscsi, n > 0 ? p.revents : 0) < 0) {
            fprintf(stderr, "control_reader: %s\n", iscsi_get_error(s.iscsi));
            return 1;
        }
    }
    double el = now_s() - start;
    printf("iops=%.0f max_gap_ms=%.2f errors=%llu reads=%llu seconds=%.2f\n", (double)s.reads / el,
           s.max_gap * 1000, (unsigned long long)s.errors, (unsigned long long)s.reads, el);
    if (s.buckets) {
        FILE *f = fopen(argv[5], "w");
        size_t used = (size_t)(el / BUCKET_S) + 1;
        if (!f) {
            perror(argv[5]);
            return 1;
        }
        fprintf(f, "%.6f", s.t0);
        for (size_t i = 0; i < used && i < s.nbuckets; i++)
            fprintf(f, " %u", s.buckets[i]);
        fprintf(f, "\n");
        fclose(f);
        free(s.buckets);
    }
    iscsi_logout_sync(s.iscsi);
    iscsi_destroy_context(s.iscsi);
    return s.errors ? 1 : 0;
}
