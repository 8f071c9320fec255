/*
 * gw_probe: a libiscsi client for the gateway-group tests (t-gw-*.sh).
 *
 *   gw_probe ident URL            serial=, naa=, relport=, tpg= of the LU
 *                                 (VPD 0x80 and 0x83)
 *   gw_probe rtpg URL             one line per target port group:
 *                                 "tpg=N state=S relport=P" (REPORT TARGET
 *                                 PORT GROUPS, states as numbers)
 *   gw_probe write URL FIRST N SEED
 *                                 write N 4 KiB blocks from block FIRST, each
 *                                 WRITE(16) with FUA, a pattern from (SEED,
 *                                 block); prints "acked B" after each one the
 *                                 target acknowledged; stops at the first
 *                                 failure (exit 1)
 *   gw_probe verify URL FILE SEED read back every block FILE lists ("acked B"
 *                                 lines) and compare; prints "verified N"
 *                                 or the first mismatch (exit 1)
 *   gw_probe first-write URL B SEED SECONDS
 *                                 retry connect + one FUA write of block B
 *                                 until it succeeds; prints "ms=<elapsed>"
 *   gw_probe ready URL SECONDS    retry connect + TEST UNIT READY until it
 *                                 succeeds; prints "ms=<elapsed>", and the
 *                                 sense of each distinct refusal on stderr
 *
 * A unit attention or an ALUA transition (NOT READY 04/0A) is retried, as
 * an initiator does; anything else fails the command. The tests need a
 * real initiator's view, not a mock, and the kernel initiator needs root.
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLK 4096u

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct iscsi_context *connect_url(const char *url, int *lun, int quiet)
{
    struct iscsi_context *ctx = iscsi_create_context("iqn.2026-12.org.blockd:gw-probe");
    if (!ctx)
        return NULL;
    struct iscsi_url *u = iscsi_parse_full_url(ctx, url);
    if (!u) {
        fprintf(stderr, "gw_probe: bad URL %s: %s\n", url, iscsi_get_error(ctx));
        iscsi_destroy_context(ctx);
        return NULL;
    }
    iscsi_set_targetname(ctx, u->target);
    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
    iscsi_set_noautoreconnect(ctx, 1); /* a dead member is a failure, not a wait */
    iscsi_set_timeout(ctx, 20);
    *lun = u->lun;
    if (iscsi_full_connect_sync(ctx, u->portal, u->lun) != 0) {
        if (!quiet)
            fprintf(stderr, "gw_probe: login to %s: %s\n", url, iscsi_get_error(ctx));
        iscsi_destroy_url(u);
        iscsi_destroy_context(ctx);
        return NULL;
    }
    iscsi_destroy_url(u);
    return ctx;
}

/* 1: retry (unit attention, transition, busy); 0: done (good); -1: failed. */
static int verdict(struct scsi_task *t, const char *what)
{
    if (!t)
        return -1;
    if (t->status == SCSI_STATUS_GOOD)
        return 0;
    if (t->status == SCSI_STATUS_BUSY)
        return 1;
    if (t->status == SCSI_STATUS_CHECK_CONDITION) {
        if (t->sense.key == SCSI_SENSE_UNIT_ATTENTION)
            return 1;
        if (t->sense.key == SCSI_SENSE_NOT_READY && t->sense.ascq == 0x040a)
            return 1;
        fprintf(stderr, "gw_probe: %s: CHECK CONDITION key 0x%x asc/ascq 0x%04x\n", what,
                t->sense.key, t->sense.ascq);
        return -1;
    }
    fprintf(stderr, "gw_probe: %s: status 0x%x\n", what, t->status);
    return -1;
}

static void pattern(unsigned char *b, uint64_t seed, uint64_t blk)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (blk + 1) * 0xbf58476d1ce4e5b9ull;
    for (unsigned i = 0; i < BLK; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(b + i, &x, 8);
    }
    memcpy(b, &blk, 8); /* the block number first: a misplaced block shows */
}

static uint32_t block_size(struct iscsi_context *ctx, int lun)
{
    for (int i = 0; i < 20; i++) {
        struct scsi_task *t = iscsi_readcapacity16_sync(ctx, lun);
        int v = verdict(t, "READ CAPACITY(16)");
        if (v == 0) {
            struct scsi_readcapacity16 *rc = scsi_datain_unmarshall(t);
            uint32_t bs = rc ? rc->block_length : 0;
            scsi_free_scsi_task(t);
            return bs;
        }
        if (t)
            scsi_free_scsi_task(t);
        if (v < 0)
            return 0;
    }
    return 0;
}

static int write_block(struct iscsi_context *ctx, int lun, uint32_t bs, uint64_t blk, uint64_t seed)
{
    unsigned char b[BLK];
    pattern(b, seed, blk);
    for (int tries = 0; tries < 100; tries++) {
        struct scsi_task *t =
            iscsi_write16_sync(ctx, lun, blk * (BLK / bs), b, BLK, bs, 0, 0, 1, 0, 0);
        int v = verdict(t, "WRITE(16)");
        if (t)
            scsi_free_scsi_task(t);
        if (v <= 0)
            return v;
        usleep(50 * 1000);
    }
    return -1;
}

static int cmd_ident(struct iscsi_context *ctx, int lun)
{
    struct scsi_task *t = NULL;
    for (int i = 0; i < 10; i++) {
        t = iscsi_inquiry_sync(ctx, lun, 1, 0x80, 255);
        if (verdict(t, "INQUIRY 0x80") != 1)
            break;
        scsi_free_scsi_task(t);
        t = NULL;
    }
    if (!t || t->status != SCSI_STATUS_GOOD)
        return 1;
    struct scsi_inquiry_unit_serial_number *sn = scsi_datain_unmarshall(t);
    printf("serial=%s\n", sn ? sn->usn : "");
    scsi_free_scsi_task(t);
    t = iscsi_inquiry_sync(ctx, lun, 1, 0x83, 1024);
    if (verdict(t, "INQUIRY 0x83") != 0)
        return 1;
    const unsigned char *d = t->datain.data;
    int len = t->datain.size;
    for (int off = 4; off + 4 <= len;) {
        int type = d[off + 1] & 0x0f, assoc = (d[off + 1] >> 4) & 3, dl = d[off + 3];
        if (off + 4 + dl > len)
            break;
        const unsigned char *id = d + off + 4;
        if (type == 3 && assoc == 0) {
            printf("naa=");
            for (int i = 0; i < dl; i++)
                printf("%02x", id[i]);
            printf("\n");
        } else if (type == 4 && dl == 4) {
            printf("relport=%u\n", (unsigned)(id[2] << 8 | id[3]));
        } else if (type == 5 && dl == 4) {
            printf("tpg=%u\n", (unsigned)(id[2] << 8 | id[3]));
        }
        off += 4 + dl;
    }
    scsi_free_scsi_task(t);
    return 0;
}

static int cmd_rtpg(struct iscsi_context *ctx, int lun)
{
    unsigned char cdb[12] = {0xa3, 0x0a};
    uint32_t alloc = 1024;
    cdb[6] = (unsigned char)(alloc >> 24);
    cdb[7] = (unsigned char)(alloc >> 16);
    cdb[8] = (unsigned char)(alloc >> 8);
    cdb[9] = (unsigned char)alloc;
    for (int tries = 0; tries < 10; tries++) {
        struct scsi_task *t = scsi_create_task(12, cdb, SCSI_XFER_READ, (int)alloc);
        if (!t)
            return 1;
        if (iscsi_scsi_command_sync(ctx, lun, t, NULL) == NULL) {
            fprintf(stderr, "gw_probe: RTPG: %s\n", iscsi_get_error(ctx));
            scsi_free_scsi_task(t);
            return 1;
        }
        int v = verdict(t, "REPORT TARGET PORT GROUPS");
        if (v == 1) {
            scsi_free_scsi_task(t);
            continue;
        }
        if (v < 0) {
            scsi_free_scsi_task(t);
            return 1;
        }
        const unsigned char *d = t->datain.data;
        int len = t->datain.size;
        uint32_t total = len >= 4 ? (uint32_t)(d[0] << 24 | d[1] << 16 | d[2] << 8 | d[3]) : 0;
        for (uint32_t off = 4; off + 8 <= total + 4 && (int)off + 8 <= len;) {
            unsigned n = d[off + 7];
            printf("tpg=%u state=%u", (unsigned)(d[off + 2] << 8 | d[off + 3]), d[off] & 0x0f);
            for (unsigned i = 0; i < n && (int)(off + 8 + i * 4 + 4) <= len; i++)
                printf(" relport=%u",
                       (unsigned)(d[off + 8 + i * 4 + 2] << 8 | d[off + 8 + i * 4 + 3]));
            printf("\n");
            off += 8 + n * 4;
        }
        scsi_free_scsi_task(t);
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: gw_probe ident|rtpg|write|verify|first-write|ready URL ...\n");
        return 2;
    }
    const char *cmd = argv[1], *url = argv[2];
    int lun;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (strcmp(cmd, "first-write") == 0 && argc == 6) {
        uint64_t blk = strtoull(argv[3], NULL, 10), seed = strtoull(argv[4], NULL, 10);
        double t0 = now_s(), limit = atof(argv[5]);
        while (now_s() - t0 < limit) {
            struct iscsi_context *ctx = connect_url(url, &lun, 1);
            if (ctx) {
                uint32_t bs = block_size(ctx, lun);
                int rc = bs ? write_block(ctx, lun, bs, blk, seed) : -1;
                iscsi_logout_sync(ctx);
                iscsi_destroy_context(ctx);
                if (rc == 0) {
                    printf("ms=%.0f\n", (now_s() - t0) * 1000);
                    return 0;
                }
            }
            usleep(100 * 1000);
        }
        fprintf(stderr, "gw_probe: no successful write through %s in %s s\n", url, argv[5]);
        return 1;
    }
    if (strcmp(cmd, "ready") == 0 && argc == 4) {
        double t0 = now_s(), limit = atof(argv[3]);
        int last = -1;
        while (now_s() - t0 < limit) {
            /* libiscsi's login ends with a TEST UNIT READY too: its
             * first failure is printed (the sense), later ones not. */
            struct iscsi_context *ctx = connect_url(url, &lun, last == -3);
            int good = 0;
            if (!ctx && last != -3) {
                fprintf(stderr, "gw_probe: (login at %.0f ms)\n", (now_s() - t0) * 1000);
                last = -3;
            }
            for (int i = 0; ctx && i < 10; i++) {
                struct scsi_task *t = iscsi_testunitready_sync(ctx, lun);
                good = t && t->status == SCSI_STATUS_GOOD;
                int why = t && t->status == SCSI_STATUS_CHECK_CONDITION
                              ? (int)(t->sense.key << 16 | t->sense.ascq)
                              : (t ? (int)t->status : -2);
                int ua = t && t->status == SCSI_STATUS_CHECK_CONDITION &&
                         t->sense.key == SCSI_SENSE_UNIT_ATTENTION;
                if (t)
                    scsi_free_scsi_task(t);
                if (good || !ua) {
                    if (!good && why != last)
                        fprintf(stderr, "gw_probe: TEST UNIT READY at %.0f ms: %s 0x%06x\n",
                                (now_s() - t0) * 1000, why >= 0x10000 ? "sense" : "status", why);
                    last = why;
                    break;
                }
            }
            if (ctx) {
                iscsi_logout_sync(ctx);
                iscsi_destroy_context(ctx);
            }
            if (good) {
                printf("ms=%.0f\n", (now_s() - t0) * 1000);
                return 0;
            }
            usleep(100 * 1000);
        }
        fprintf(stderr, "gw_probe: %s not ready in %s s\n", url, argv[3]);
        return 1;
    }
    struct iscsi_context *ctx = connect_url(url, &lun, 0);
    if (!ctx)
        return 1;
    int rc = 2;
    if (strcmp(cmd, "ident") == 0) {
        rc = cmd_ident(ctx, lun);
    } else if (strcmp(cmd, "rtpg") == 0) {
        rc = cmd_rtpg(ctx, lun);
    } else if (strcmp(cmd, "write") == 0 && argc == 6) {
        uint64_t first = strtoull(argv[3], NULL, 10), n = strtoull(argv[4], NULL, 10);
        uint64_t seed = strtoull(argv[5], NULL, 10);
        uint32_t bs = block_size(ctx, lun);
        rc = bs ? 0 : 1;
        for (uint64_t b = first; rc == 0 && b < first + n; b++) {
            if (write_block(ctx, lun, bs, b, seed) != 0) {
                fprintf(stderr, "gw_probe: write of block %llu failed: %s\n", (unsigned long long)b,
                        iscsi_get_error(ctx));
                rc = 1;
            } else {
                printf("acked %llu\n", (unsigned long long)b);
            }
        }
    } else if (strcmp(cmd, "verify") == 0 && argc == 5) {
        FILE *f = fopen(argv[3], "r");
        uint64_t seed = strtoull(argv[4], NULL, 10), n = 0;
        uint32_t bs = block_size(ctx, lun);
        unsigned long long b;
        rc = f && bs ? 0 : 1;
        while (rc == 0 && fscanf(f, "acked %llu\n", &b) == 1) {
            unsigned char want[BLK];
            pattern(want, seed, b);
            struct scsi_task *t = NULL;
            int v = 1;
            for (int tries = 0; v == 1 && tries < 100; tries++) {
                if (t)
                    scsi_free_scsi_task(t);
                t = iscsi_read16_sync(ctx, lun, b * (BLK / bs), BLK, bs, 0, 0, 0, 0, 0);
                v = verdict(t, "READ(16)");
            }
            if (v != 0 || t->datain.size != (int)BLK || memcmp(t->datain.data, want, BLK)) {
                fprintf(stderr, "gw_probe: block %llu: %s\n", b,
                        v != 0 ? "read failed" : "the acknowledged data is not there");
                rc = 1;
            }
            if (t)
                scsi_free_scsi_task(t);
            n++;
        }
        if (f)
            fclose(f);
        if (rc == 0)
            printf("verified %llu\n", (unsigned long long)n);
    }
    iscsi_logout_sync(ctx);
    iscsi_destroy_context(ctx);
    return rc;
}
