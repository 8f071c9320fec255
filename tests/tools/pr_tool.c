/*
 * A small libiscsi client for the reservation tests (t-gw-pr.sh) and the
 * shared software write protect (t-gw-conformance.sh): one
 * session as initiator INITIATOR, then each OP in order, one output line
 * per OP. There is no kernel initiator in the test environment, so
 * sg_persist cannot be used.
 *
 * usage: pr_tool URL INITIATOR OP...
 *   register:KEY[:aptpl][:all]  REGISTER AND IGNORE EXISTING KEY (sark KEY)
 *   unregister:KEY              REGISTER with key KEY, sark 0
 *   reserve:KEY:TYPE            PR OUT RESERVE (TYPE 1,3,5,6,7,8)
 *   release:KEY:TYPE            PR OUT RELEASE
 *   preempt:KEY:VICTIM:TYPE     PR OUT PREEMPT
 *   clear:KEY                   PR OUT CLEAR
 *   readkeys                    -> "keys gen=G k1 k2 ..." (hex keys, sorted as returned)
 *   readres                     -> "res gen=G key=K type=T" or "res gen=G none"
 *   reserve6 / release6         SPC-2 RESERVE(6) / RELEASE(6)
 *   write:LBA / read:LBA        one 512-byte block
 *   swp:0|1                     MODE SENSE(6) of the control page, then
 *                               MODE SELECT(6) of it with SWP cleared/set
 *   tur                         TEST UNIT READY (shows a pending unit
 *                               attention as CHECK 6/ASC/ASCQ)
 *   signal:FILE / wait:FILE     create FILE / wait (up to 60 s) until FILE
 *                               exists: lets a test act while this session
 *                               stays logged in
 *   hold:FILE                   like wait, sending nothing meanwhile (so a
 *                               unit attention stays pending for the next
 *                               OP to see)
 * PR_TOOL_ISID=N in the environment fixes the session's ISID (an initiator
 * port seen through two daemons is then the same port).
 * For commands without data the line is the status: GOOD, CONFLICT or
 * CHECK <key>/<asc>/<ascq>. Exit 0 when every OP got an answer (whatever
 * its status); 2 on a transport failure.
 */
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct iscsi_context *ctx;
static int lun;

static const char *status_str(struct scsi_task *t, char *buf, size_t len)
{
    if (!t)
        return "ERROR";
    if (t->status == SCSI_STATUS_GOOD)
        return "GOOD";
    if (t->status == SCSI_STATUS_RESERVATION_CONFLICT)
        return "CONFLICT";
    if (t->status == SCSI_STATUS_BUSY)
        return "BUSY";
    if (t->status == SCSI_STATUS_CHECK_CONDITION) {
        snprintf(buf, len, "CHECK %x/%02x/%02x", t->sense.key, (t->sense.ascq >> 8) & 0xff,
                 t->sense.ascq & 0xff);
        return buf;
    }
    snprintf(buf, len, "STATUS 0x%x", t->status);
    return buf;
}

static uint64_t num(const char *s)
{
    return strtoull(s, NULL, 0);
}

/* Split "a:b:c" into at most 5 fields (modifies s). */
static int split(char *s, char **f)
{
    int n = 0;
    for (char *p = s; p && n < 5; n++) {
        f[n] = p;
        p = strchr(p, ':');
        if (p)
            *p++ = 0;
    }
    return n;
}

static struct scsi_task *prout(int sa, int type, uint64_t key, uint64_t sark, int aptpl, int all)
{
    struct scsi_persistent_reserve_out_basic b = {
        .reservation_key = key,
        .service_action_reservation_key = sark,
        .aptpl = (uint8_t)aptpl,
        .all_tg_pt = (uint8_t)all,
    };
    return iscsi_persistent_reserve_out_sync(ctx, lun, sa, 0, type, &b);
}

static int run(char *op)
{
    char *f[5] = {0};
    char sbuf[64];
    int n = split(op, f);
    struct scsi_task *t = NULL;
    if (strcmp(f[0], "register") == 0 && n >= 2) {
        int aptpl = 0, all = 0;
        for (int i = 2; i < n; i++) {
            aptpl |= strcmp(f[i], "aptpl") == 0;
            all |= strcmp(f[i], "all") == 0;
        }
        t = prout(SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0, 0, num(f[1]), aptpl,
                  all);
    } else if (strcmp(f[0], "unregister") == 0 && n == 2) {
        t = prout(SCSI_PERSISTENT_RESERVE_REGISTER, 0, num(f[1]), 0, 0, 0);
    } else if (strcmp(f[0], "reserve") == 0 && n == 3) {
        t = prout(SCSI_PERSISTENT_RESERVE_RESERVE, (int)num(f[2]), num(f[1]), 0, 0, 0);
    } else if (strcmp(f[0], "release") == 0 && n == 3) {
        t = prout(SCSI_PERSISTENT_RESERVE_RELEASE, (int)num(f[2]), num(f[1]), 0, 0, 0);
    } else if (strcmp(f[0], "preempt") == 0 && n == 4) {
        t = prout(SCSI_PERSISTENT_RESERVE_PREEMPT, (int)num(f[3]), num(f[1]), num(f[2]), 0, 0);
    } else if (strcmp(f[0], "clear") == 0 && n == 2) {
        t = prout(SCSI_PERSISTENT_RESERVE_CLEAR, 0, num(f[1]), 0, 0, 0);
    } else if (strcmp(f[0], "reserve6") == 0) {
        t = iscsi_reserve6_sync(ctx, lun);
    } else if (strcmp(f[0], "release6") == 0) {
        t = iscsi_release6_sync(ctx, lun);
    } else if (strcmp(f[0], "write") == 0 && n == 2) {
        unsigned char buf[512];
        memset(buf, 0xa5, sizeof buf);
        t = iscsi_write16_sync(ctx, lun, num(f[1]), buf, sizeof buf, 512, 0, 0, 0, 0, 0);
    } else if (strcmp(f[0], "read") == 0 && n == 2) {
        t = iscsi_read16_sync(ctx, lun, num(f[1]), 512, 512, 0, 0, 0, 0, 0);
    } else if (strcmp(f[0], "tur") == 0) {
        t = iscsi_testunitready_sync(ctx, lun);
    } else if (strcmp(f[0], "swp") == 0 && n == 2) {
        t = iscsi_modesense6_sync(ctx, lun, 1, SCSI_MODESENSE_PC_CURRENT, SCSI_MODEPAGE_CONTROL, 0,
                                  255);
        if (t && t->status == SCSI_STATUS_GOOD) {
            struct scsi_mode_sense *ms = scsi_datain_unmarshall(t);
            struct scsi_mode_page *mp =
                ms ? scsi_modesense_get_page(ms, SCSI_MODEPAGE_CONTROL, 0) : NULL;
            if (!mp) {
                printf("ERROR no control page\n");
                scsi_free_scsi_task(t);
                return 2;
            }
            mp->ps = 0; /* reserved in MODE SELECT */
            mp->control.swp = (int)num(f[1]) != 0;
            struct scsi_task *sel = iscsi_modeselect6_sync(ctx, lun, 1, 0, mp);
            scsi_free_scsi_task(t); /* mp lives in t's memory */
            t = sel;
        }
    } else if (strcmp(f[0], "readkeys") == 0 || strcmp(f[0], "readres") == 0) {
        int keys = f[0][4] == 'k';
        t = iscsi_persistent_reserve_in_sync(ctx, lun,
                                             keys ? SCSI_PERSISTENT_RESERVE_READ_KEYS
                                                  : SCSI_PERSISTENT_RESERVE_READ_RESERVATION,
                                             16384);
        if (t && t->status == SCSI_STATUS_GOOD) {
            void *d = scsi_datain_unmarshall(t);
            if (!d) {
                printf("ERROR unmarshall\n");
                scsi_free_scsi_task(t);
                return 2;
            }
            if (keys) {
                struct scsi_persistent_reserve_in_read_keys *k = d;
                printf("keys gen=%" PRIu32, k->prgeneration);
                for (int i = 0; i < k->num_keys; i++)
                    printf(" %" PRIx64, k->keys[i]);
                printf("\n");
            } else {
                struct scsi_persistent_reserve_in_read_reservation *r = d;
                if (r->reserved)
                    printf("res gen=%" PRIu32 " key=%" PRIx64 " type=%u\n", r->prgeneration,
                           r->reservation_key, r->pr_type);
                else
                    printf("res gen=%" PRIu32 " none\n", r->prgeneration);
            }
            scsi_free_scsi_task(t);
            return 0;
        }
    } else if (strcmp(f[0], "signal") == 0 && n == 2) {
        FILE *fp = fopen(f[1], "w");
        if (fp)
            fclose(fp);
        printf("%s\n", fp ? "SIGNALLED" : "ERROR signal");
        return fp ? 0 : 2;
    } else if ((strcmp(f[0], "wait") == 0 || strcmp(f[0], "hold") == 0) && n == 2) {
        for (int i = 0; i < 600; i++) {
            if (access(f[1], F_OK) == 0) {
                printf("WAITED\n");
                return 0;
            }
            /* keep the session alive meanwhile */
            struct scsi_task *nop = f[0][0] == 'w' ? iscsi_testunitready_sync(ctx, lun) : NULL;
            if (nop)
                scsi_free_scsi_task(nop);
            usleep(100000);
        }
        printf("ERROR wait\n");
        return 2;
    } else {
        fprintf(stderr, "pr_tool: unknown op '%s'\n", f[0]);
        return 2;
    }
    if (!t) {
        printf("ERROR %s\n", iscsi_get_error(ctx));
        return 2;
    }
    printf("%s\n", status_str(t, sbuf, sizeof sbuf));
    scsi_free_scsi_task(t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: pr_tool URL INITIATOR OP...\n");
        return 2;
    }
    ctx = iscsi_create_context(argv[2]);
    struct iscsi_url *url = ctx ? iscsi_parse_full_url(ctx, argv[1]) : NULL;
    if (!url) {
        fprintf(stderr, "pr_tool: bad URL %s\n", argv[1]);
        return 2;
    }
    const char *isid = getenv("PR_TOOL_ISID");
    if (isid && *isid)
        iscsi_set_isid_random(ctx, (uint32_t)strtoul(isid, NULL, 0), 0);
    iscsi_set_targetname(ctx, url->target);
    iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
    lun = url->lun;
    if (iscsi_full_connect_sync(ctx, url->portal, url->lun) != 0) {
        fprintf(stderr, "pr_tool: login to %s failed: %s\n", argv[1], iscsi_get_error(ctx));
        return 2;
    }
    /* Swallow the unit attentions of a new nexus (POWER ON, ...). */
    for (int i = 0; i < 8; i++) {
        struct scsi_task *t = iscsi_testunitready_sync(ctx, lun);
        int good = t && t->status == SCSI_STATUS_GOOD;
        if (t)
            scsi_free_scsi_task(t);
        if (good)
            break;
    }
    int rc = 0;
    for (int i = 3; i < argc && rc == 0; i++)
        rc = run(argv[i]);
    iscsi_logout_sync(ctx);
    iscsi_destroy_url(url);
    iscsi_destroy_context(ctx);
    return rc;
}
