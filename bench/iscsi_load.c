/*
 * An iSCSI load generator for side-by-side runs (bench/rbd.sh): one
 * libiscsi session keeps QD READ(16) or WRITE(16) commands of BS bytes in
 * flight for SECONDS, at random aligned offsets or sequentially, like fio's
 * randread/randwrite/read/write. libiscsi's own iscsi-perf only reads; fio
 * has no libiscsi engine in Debian.
 *
 * usage: iscsi_load URL read|write|randread|randwrite BS QD SECONDS
 * prints: "rw=<mode> bs=<bytes> qd=<n> ops=<n> IOPS=<x> MiB/s=<y> lat_us=<mean>"
 * (+ " unit_attentions=<n>" when some were retried)
 * Exits 1 on any failed command (a benchmark that hides errors measures
 * nothing).
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct slot {
    struct load *ld;
    unsigned char *buf;
    double started;
};

struct load {
    struct iscsi_context *ctx;
    int lun;
    int write, random;
    uint32_t bs, block;
    uint64_t blocks, next_lba;
    double deadline;
    double rate, t0; /* RATE: commands per second, 0 unlimited; the start */
    uint64_t ops, inflight, issued;
    double lat_sum;
    int failed;
    uint64_t unit_attentions; /* retried, not counted */
    uint64_t rng;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(struct load *ld)
{
    /* xorshift64: cheap, and the same sequence on every run */
    ld->rng ^= ld->rng << 13;
    ld->rng ^= ld->rng >> 7;
    ld->rng ^= ld->rng << 17;
    return ld->rng;
}

static void issue(struct slot *s);

static void done(struct iscsi_context *ctx, int status, void *data, void *arg)
{
    struct slot *s = arg;
    struct load *ld = s->ld;
    struct scsi_task *task = data;

    ld->inflight--;
    if (status == SCSI_STATUS_CHECK_CONDITION && task->sense.key == SCSI_SENSE_UNIT_ATTENTION) {
        /* e.g. ASYMMETRIC ACCESS STATE CHANGED (a gateway group's lock
         * moved, bench/gateways.sh): an initiator retries; so do we, by
         * issuing the next command (not counted as an op) */
        ld->unit_attentions++;
    } else if (status != SCSI_STATUS_GOOD) {
        fprintf(stderr, "command failed: %s\n", iscsi_get_error(ctx));
        ld->failed = 1;
    } else {
        ld->ops++;
        ld->lat_sum += now_s() - s->started;
    }
    scsi_free_scsi_task(task);
    if (ld->rate > 0) {
        /* RATE: wait until the next command is due (both protocols compared at one rate) */
        double wait = ld->t0 + (double)ld->issued / ld->rate - now_s();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    if (!ld->failed && now_s() < ld->deadline)
        issue(s);
}

static void issue(struct slot *s)
{
    struct load *ld = s->ld;
    uint32_t nblk = ld->bs / ld->block;
    uint64_t span = ld->blocks - nblk + 1, lba;
    struct scsi_task *t;

    if (ld->random) {
        lba = (rnd(ld) % (span / nblk)) * nblk;
    } else {
        if (ld->next_lba + nblk > ld->blocks)
            ld->next_lba = 0;
        lba = ld->next_lba;
        ld->next_lba += nblk;
    }
    s->started = now_s();
    if (ld->write)
        t = iscsi_write16_task(ld->ctx, ld->lun, lba, s->buf, ld->bs, ld->block, 0, 0, 0, 0, 0,
                               done, s);
    else
        t = iscsi_read16_task(ld->ctx, ld->lun, lba, ld->bs, ld->block, 0, 0, 0, 0, 0, done, s);
    if (!t) {
        fprintf(stderr, "cannot queue a command: %s\n", iscsi_get_error(ld->ctx));
        ld->failed = 1;
        return;
    }
    ld->inflight++;
    ld->issued++;
}

int main(int argc, char **argv)
{
    struct load ld = {.rng = 0x9e3779b97f4a7c15ull};
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s URL read|write|randread|randwrite BS QD SECONDS [RATE]\n",
                argv[0]);
        return 2;
    }
    const char *url = argv[1], *mode = argv[2];
    ld.write = strstr(mode, "write") != NULL;
    ld.random = strncmp(mode, "rand", 4) == 0;
    ld.bs = (uint32_t)strtoul(argv[3], NULL, 10);
    unsigned qd = (unsigned)strtoul(argv[4], NULL, 10);
    double seconds = strtod(argv[5], NULL);
    ld.rate = argc == 7 ? strtod(argv[6], NULL) : 0;
    if (!ld.bs || !qd || qd > 1024 || seconds <= 0) {
        fprintf(stderr, "bad BS, QD or SECONDS\n");
        return 2;
    }

    ld.ctx = iscsi_create_context("iqn.2026-12.org.blockd.bench:load");
    struct iscsi_url *u = ld.ctx ? iscsi_parse_full_url(ld.ctx, url) : NULL;
    if (!u) {
        fprintf(stderr, "bad URL %s\n", url);
        return 1;
    }
    iscsi_set_session_type(ld.ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(ld.ctx, ISCSI_HEADER_DIGEST_NONE);
    if (iscsi_full_connect_sync(ld.ctx, u->portal, u->lun) != 0) {
        fprintf(stderr, "login failed: %s\n", iscsi_get_error(ld.ctx));
        return 1;
    }
    ld.lun = u->lun;
    struct scsi_task *t = iscsi_readcapacity16_sync(ld.ctx, ld.lun);
    struct scsi_readcapacity16 *rc16 = t ? scsi_datain_unmarshall(t) : NULL;
    if (!rc16) {
        fprintf(stderr, "READ CAPACITY(16) failed\n");
        return 1;
    }
    ld.block = rc16->block_length;
    ld.blocks = rc16->returned_lba + 1;
    scsi_free_scsi_task(t);
    if (ld.bs % ld.block || (uint64_t)ld.bs / ld.block > ld.blocks) {
        fprintf(stderr, "BS must be a multiple of the %u-byte block, within the LUN\n", ld.block);
        return 1;
    }

    struct slot *slots = calloc(qd, sizeof(*slots));
    if (!slots)
        return 1;
    for (unsigned i = 0; i < qd; i++) {
        slots[i].ld = &ld;
        slots[i].buf = malloc(ld.bs);
        if (!slots[i].buf)
            return 1;
        memset(slots[i].buf, 0xa5 ^ (int)i, ld.bs);
    }
    double start = now_s();
    ld.deadline = start + seconds;
    ld.t0 = start;
    for (unsigned i = 0; i < qd && !ld.failed; i++)
        issue(&slots[i]);
    while (ld.inflight > 0) {
        struct pollfd pfd = {.fd = iscsi_get_fd(ld.ctx), .events = iscsi_which_events(ld.ctx)};
        if (poll(&pfd, 1, 1000) < 0)
            break;
        if (iscsi_service(ld.ctx, pfd.revents) < 0) {
            fprintf(stderr, "iscsi_service: %s\n", iscsi_get_error(ld.ctx));
            ld.failed = 1;
            break;
        }
    }
    double elapsed = now_s() - start;
    printf("rw=%s bs=%u qd=%u ops=%llu IOPS=%.0f MiB/s=%.1f lat_us=%.0f", mode, ld.bs, qd,
           (unsigned long long)ld.ops, ld.ops / elapsed,
           ld.ops * (double)ld.bs / elapsed / 1048576.0, ld.ops ? ld.lat_sum / ld.ops * 1e6 : 0.0);
    if (ld.unit_attentions)
        printf(" unit_attentions=%llu", (unsigned long long)ld.unit_attentions);
    printf("\n");
    iscsi_logout_sync(ld.ctx);
    iscsi_destroy_context(ld.ctx);
    return ld.failed;
}
