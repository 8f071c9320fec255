/*
 * Shared by the iSCSI fuzz targets: a stand-in for the configuration side
 * of iscsi_runtime.h (one target "iqn.2026-11.org.blockd:fuzz" with one
 * 1 MiB in-memory LUN, open to everyone, and optional CHAP), and a driver
 * that feeds bytes to a real iSCSI connection over a socketpair, on real
 * reactors, and waits until the connection has been freed.
 */
#include <errno.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_conn.h"

#include "core/conn.h"
#include "core/iopool.h"
#include "core/log.h"
#include "core/reactor.h"
#include "gateway/gateway.h"
#include "iscsi/iscsi_internal.h"
#include "scsi/scsi.h"
#include "store/bdev.h"
#include "store/volume.h"

#define FUZZ_IQN "iqn.2026-11.org.blockd:fuzz"

static struct iscsi_target_view fuzz_view;
static struct iscsi_target_lun fuzz_lun;
static struct iscsi_target_group fuzz_group;
static struct iscsi_chap_cred fuzz_cred = {"user", "secretsecret1", "tgt", "tgtsecret123"};

static void view_destroy(struct iscsi_target_view *v)
{
    (void)v; /* static */
}

struct iscsi_target_view *iscsi_runtime_find_target(const char *iqn)
{
    if (strcasecmp(iqn, FUZZ_IQN) != 0)
        return NULL;
    iscsi_target_view_ref(&fuzz_view);
    return &fuzz_view;
}

int iscsi_runtime_list_targets(struct iscsi_target_view ***out)
{
    struct iscsi_target_view **a = malloc(sizeof(*a));
    if (!a)
        return -ENOMEM;
    iscsi_target_view_ref(&fuzz_view);
    a[0] = &fuzz_view;
    *out = a;
    return 1;
}

int iscsi_runtime_discovery_auth(struct iscsi_auth_policy *out)
{
    memset(out, 0, sizeof(*out));
    return 0;
}

void iscsi_auth_policy_clear(struct iscsi_auth_policy *p)
{
    memset(p, 0, sizeof(*p));
}

/* The stand-in target has no portal group: SendTargets answers with the
 * connection's own address. */
int iscsi_runtime_portal_addrs(uint16_t tag, const struct sockaddr *local,
                               char (*out)[ISCSI_PORTAL_ADDR_MAX], int max)
{
    (void)tag;
    (void)local;
    (void)out;
    (void)max;
    return 0;
}

uint64_t iscsi_runtime_generation(void)
{
    return 1;
}

/* No gateway group: the login takes the target's own port ids. */
bool gateway_enabled(void)
{
    return false;
}

unsigned gateway_id(void)
{
    return 0;
}

int iscsi_conn_init(struct conn *c, uint16_t portal_tag, const struct sockaddr *local,
                    socklen_t locallen);

/* Set up reactors, the I/O pool and the LU once. chap: require CHAP. */
static void fuzz_iscsi_setup(bool chap)
{
    static bool done;
    if (done)
        return;
    done = true;
    log_set_level(getenv("FUZZ_LOG") ? LOG_DEBUG : LOG_ERROR);
    reactors_start(getenv("FUZZ_REACTORS") ? (unsigned)strtoul(getenv("FUZZ_REACTORS"), NULL, 10)
                                           : 1);
    iopool_start(2);
    struct bdev *b;
    struct volume *v;
    struct scsi_lu *lu;
    struct scsi_lu_params p = {0};
    uint64_t lu_size =
        getenv("FUZZ_LU_MB") ? strtoull(getenv("FUZZ_LU_MB"), NULL, 10) << 20 : 1 << 20;
    if (bdev_memory_open(lu_size, 0, &b) < 0 ||
        volume_new("fuzz", b, 512, VOLUME_SYNC_STANDARD, false, &v) < 0 ||
        scsi_lu_new(v, &p, &lu) < 0)
        abort();
    fuzz_lun.lun = 0;
    fuzz_lun.lu = lu;
    fuzz_view.refs = 1;
    fuzz_view.destroy = view_destroy;
    fuzz_view.id = 1;
    snprintf(fuzz_view.iqn, sizeof(fuzz_view.iqn), "%s", FUZZ_IQN);
    fuzz_view.rel_tgt_id = 1;
    fuzz_view.luns = &fuzz_lun;
    fuzz_view.n_luns = 1;
    if (chap) {
        fuzz_group.auth.method = ISCSI_AUTH_CHAP;
        fuzz_group.auth.creds = &fuzz_cred;
        fuzz_group.auth.n_creds = 1;
        fuzz_view.groups = &fuzz_group;
        fuzz_view.n_groups = 1;
    }
}

static sem_t freed_sem;
static bool sem_ready;

static int (*real_on_input)(struct conn *);
static void (*real_on_close)(struct conn *);
static void (*real_on_free)(struct conn *);

static void wrapped_free(struct conn *c)
{
    real_on_free(c);
    sem_post(&freed_sem);
}

static struct conn_ops wrapped_ops;

static int init_cb(struct conn *c, void *arg)
{
    (void)arg;
    return iscsi_conn_init(c, 0, NULL, 0);
}

/* Feed data to a fresh connection, read everything it answers until it
 * closes (or we close our side), and wait for the connection to be freed. */
static void fuzz_iscsi_feed(const uint8_t *data, size_t len)
{
    if (!sem_ready) {
        sem_init(&freed_sem, 0, 0);
        real_on_input = iscsi_conn_ops.on_input;
        real_on_close = iscsi_conn_ops.on_close;
        real_on_free = iscsi_conn_ops.on_free;
        wrapped_ops.on_input = real_on_input;
        wrapped_ops.on_close = real_on_close;
        wrapped_ops.on_free = wrapped_free;
        sem_ready = true;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        abort();
    struct sockaddr_un_fake {
        sa_family_t f;
    } peer = {AF_UNIX};
    if (conn_adopt(reactor_get(0), sv[1], (const struct sockaddr *)&peer, sizeof(peer),
                   &wrapped_ops, init_cb, NULL) < 0)
        abort();
    fuzz_conn_talk(sv[0], data, len);
    sem_wait(&freed_sem);
}

/* ---- PDU builders for the fuzzers' preambles ---- */

static size_t fuzz_put_pdu(uint8_t *out, const uint8_t bhs[48], const void *data, uint32_t dsl)
{
    memcpy(out, bhs, 48);
    iscsi_bhs_set_dsl(out, dsl);
    if (dsl)
        memcpy(out + 48, data, dsl);
    uint32_t pad = iscsi_pad4(dsl);
    memset(out + 48 + dsl, 0, pad);
    return 48 + dsl + pad;
}

/* A Login Request that goes straight to full feature phase. */
static size_t fuzz_login_pdu(uint8_t *out, const char *text, size_t tlen, uint8_t flags)
{
    uint8_t bhs[48] = {0};
    bhs[0] = ISCSI_OP_LOGIN_REQ | ISCSI_BHS_IMMEDIATE;
    bhs[1] = flags;
    bhs[8] = 0x40; /* ISID type: random */
    bhs[13] = 1;
    be32_store(bhs + 16, 0x1000);
    be32_store(bhs + 24, 1);
    return fuzz_put_pdu(out, bhs, text, (uint32_t)tlen);
}

static const char fuzz_login_text[] = "InitiatorName=iqn.2026-11.org.fuzz:init\0"
                                      "SessionType=Normal\0"
                                      "TargetName=" FUZZ_IQN "\0"
                                      "AuthMethod=None\0"
                                      "MaxRecvDataSegmentLength=8192\0"
                                      "ImmediateData=Yes\0"
                                      "InitialR2T=No\0"
                                      "MaxBurstLength=65536\0"
                                      "FirstBurstLength=16384\0"
                                      "MaxOutstandingR2T=2\0";
