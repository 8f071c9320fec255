/*
 * The guest-flush pattern behind the "8x slower writes" report: a Windows
 * guest on NTFS writes small blocks (0.5-32 KiB) and follows each with
 * SYNCHRONIZE CACHE (or sets FUA). dd and fio's usual jobs do not issue
 * that. W writer threads, each with its own iSCSI session (libiscsi),
 * loop: WRITE(10) of bs bytes at a random aligned offset, then SYNCHRONIZE
 * CACHE(10) (or one WRITE(10) with FUA=1 with --fua), for a fixed time.
 *
 * usage: iscsi_flush [--fua] URL BLOCK_BYTES WRITERS SECONDS
 * prints: "bs=<bytes> writers=<n> mode=<flush|fua> ops=<n> MiB/s=<x> IOPS=<y>"
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct writer {
    pthread_t th;
    const char *url;
    uint32_t bs;
    double seconds;
    int fua;
    unsigned idx;
    uint64_t ops;
    int failed;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    char name[128];
    snprintf(name, sizeof(name), "iqn.2026-11.org.blockd.bench:flush-%u", w->idx);
    struct iscsi_context *ctx = iscsi_create_context(name);
    struct iscsi_url *u = ctx ? iscsi_parse_full_url(ctx, w->url) : NULL;
    if (!u) {
        fprintf(stderr, "bad URL %s: %s\n", w->url, ctx ? iscsi_get_error(ctx) : "no context");
        w->failed = 1;
        return NULL;
    }
    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
    if (iscsi_full_connect_sync(ctx, u->portal, u->lun) != 0) {
        fprintf(stderr, "login failed: %s\n", iscsi_get_error(ctx));
        w->failed = 1;
        return NULL;
    }
    struct scsi_task *t = iscsi_readcapacity10_sync(ctx, u->lun, 0, 0);
    if (!t || t->status != SCSI_STATUS_GOOD) {
        fprintf(stderr, "READ CAPACITY failed\n");
        w->failed = 1;
        return NULL;
    }
    struct scsi_readcapacity10 *rc = scsi_datain_unmarshall(t);
    uint32_t lbs = rc->block_size;
    uint64_t blocks = (uint64_t)rc->lba + 1;
    scsi_free_scsi_task(t);
    uint32_t nblk = (w->bs + lbs - 1) / lbs;
    uint32_t len = nblk * lbs;
    unsigned char *buf = malloc(len);
    memset(buf, 0x5a ^ (int)w->idx, len);
    unsigned seed = 12345u + w->idx;
    double end = now_s() + w->seconds;
    while (now_s() < end) {
        uint32_t lba = (uint32_t)(((uint64_t)rand_r(&seed) * 7919u) % (blocks - nblk));
        lba -= lba % nblk;
        t = iscsi_write10_sync(ctx, u->lun, lba, buf, len, lbs, 0, 0, w->fua, w->fua, 0);
        if (!t || t->status != SCSI_STATUS_GOOD) {
            fprintf(stderr, "WRITE failed: %s\n", iscsi_get_error(ctx));
            w->failed = 1;
            break;
        }
        scsi_free_scsi_task(t);
        if (!w->fua) {
            t = iscsi_synchronizecache10_sync(ctx, u->lun, 0, 0, 0, 0);
            if (!t || t->status != SCSI_STATUS_GOOD) {
                fprintf(stderr, "SYNCHRONIZE CACHE failed: %s\n", iscsi_get_error(ctx));
                w->failed = 1;
                break;
            }
            scsi_free_scsi_task(t);
        }
        w->ops++;
    }
    free(buf);
    iscsi_logout_sync(ctx);
    iscsi_destroy_url(u);
    iscsi_destroy_context(ctx);
    return NULL;
}

int main(int argc, char **argv)
{
    int fua = 0;
    if (argc > 1 && strcmp(argv[1], "--fua") == 0) {
        fua = 1;
        argv++;
        argc--;
    }
    if (argc != 5) {
        fprintf(stderr, "usage: iscsi_flush [--fua] URL BLOCK_BYTES WRITERS SECONDS\n");
        return 2;
    }
    uint32_t bs = (uint32_t)strtoul(argv[2], NULL, 10);
    unsigned n = (unsigned)strtoul(argv[3], NULL, 10);
    double secs = strtod(argv[4], NULL);
    if (bs == 0 || n == 0 || n > 256 || secs <= 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    struct writer *w = calloc(n, sizeof(*w));
    double t0 = now_s();
    for (unsigned i = 0; i < n; i++) {
        w[i] = (struct writer){.url = argv[1], .bs = bs, .seconds = secs, .fua = fua, .idx = i};
        pthread_create(&w[i].th, NULL, writer_main, &w[i]);
    }
    uint64_t ops = 0;
    int failed = 0;
    for (unsigned i = 0; i < n; i++) {
        pthread_join(w[i].th, NULL);
        ops += w[i].ops;
        failed |= w[i].failed;
    }
    double el = now_s() - t0;
    printf("bs=%u writers=%u mode=%s ops=%llu MiB/s=%.2f IOPS=%.0f\n", bs, n, fua ? "fua" : "flush",
           (unsigned long long)ops, (double)ops * bs / el / 1048576.0, (double)ops / el);
    free(w);
    return failed ? 1 : 0;
}
