/*
 * libFuzzer target: the NVMe/TCP target over a real connection. Each input
 * is the byte stream a host sends, fed over a socketpair to a connection on
 * a real reactor, against one subsystem (any host) with a namespace on a
 * memory volume, published as the CONF_NVME part. The first byte picks a
 * preamble the target sees before the fuzzed bytes, so that mutations also
 * start deep in the protocol:
 *   0: none (the fuzzer writes the ICReq itself)
 *   1: ICReq (no digests)
 *   2: ICReq (header and data digests)
 *   3: ICReq + admin Connect + Property Set CC.EN (admin commands follow)
 *   4: ICReq + Connect to the discovery controller
 *   5: ICReq + I/O queue Connect (qid 1) to a controller that setup made
 *      and keeps (I/O commands follow)
 *   6: ICReq + admin Connect to a second subsystem whose host has a
 *      DH-HMAC-CHAP key (SHA-256, null group): Authentication Send/Receive
 *      follow
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_conn.h"

#include "core/iopool.h"
#include "core/log.h"
#include "core/reactor.h"
#include "nvme/nvme_proto.h"
#include "nvme/nvme_resv.h"
#include "nvme/nvme_target.h"
#include "nvme/nvme_view.h"
#include "store/bdev.h"
#include "store/volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SUBNQN "nqn.2026-01.org.blockd:fuzz"
#define AUTH_SUBNQN "nqn.2026-01.org.blockd:fuzzauth"
#define FUZZ_HOSTNQN "nqn.2026-01.org.blockd:fuzzhost"

static size_t put_icreq(uint8_t *out, bool digests);
static size_t put_connect(uint8_t *out, const char *subnqn, uint16_t qid, uint16_t cntlid);
static size_t put_enable(uint8_t *out);
static int admin_fd = -1; /* the kept controller's admin queue (CNTLID 1) */

/* Connect the controller the I/O-queue inputs join, once. */
static void admin_setup(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct {
        sa_family_t f;
    } peer = {AF_UNIX};
    nvme_target_accept(sv[1], (const struct sockaddr *)&peer, sizeof(peer), NULL, 0,
                       (void *)(intptr_t)1);
    uint8_t buf[2048];
    size_t n = put_icreq(buf, false);
    n += put_connect(buf + n, SUBNQN, 0, 0xffff);
    n += put_enable(buf + n);
    if (write(sv[0], buf, n) != (ssize_t)n)
        abort();
    /* ICResp (128) + two responses (24 each) */
    size_t got = 0;
    while (got < 128 + 24 + 24) {
        ssize_t r = read(sv[0], buf, sizeof(buf));
        if (r <= 0)
            abort();
        got += (size_t)r;
    }
    admin_fd = sv[0];
}

/* A subsystem for the fuzz host only, with a key: its queues must
 * authenticate. */
static struct nvme_subsys *auth_subsys(void)
{
    struct nvme_subsys *s = nvme_subsys_new();
    s->id = 2;
    s->name = strdup("fuzzauth");
    s->nqn = strdup(AUTH_SUBNQN);
    s->qid_max = 1;
    s->nports = 1;
    s->port_ids = calloc(1, sizeof(int64_t));
    s->port_ids[0] = 1;
    s->nhosts = 1;
    s->hosts = calloc(1, sizeof(*s->hosts));
    s->hosts[0].hostnqn = strdup(FUZZ_HOSTNQN);
    s->hosts[0].dhchap_key = strdup("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:");
    s->hosts[0].dhchap_hash = 1;
    s->hosts[0].dhchap_dhgroup = 0; /* null: no pool job, so a pipelined Reply is read at once */
    return s;
}

static void setup(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    log_set_level(getenv("FUZZ_LOG") ? LOG_DEBUG : LOG_ERROR);
    if (reactors_start(1) < 0 || iopool_start(2) < 0 || nvme_target_init() < 0)
        abort();
    struct bdev *b;
    struct volume *v;
    if (bdev_memory_open(1 << 20, 0, &b) < 0 ||
        volume_new("fuzz/mem", b, 512, VOLUME_SYNC_STANDARD, false, &v) < 0)
        abort();
    struct nvme_subsys *s = nvme_subsys_new();
    s->id = 1;
    s->name = strdup("fuzz");
    s->nqn = strdup(SUBNQN);
    s->qid_max = 2;
    s->allow_any_host = true;
    s->nports = 1;
    s->port_ids = calloc(1, sizeof(int64_t));
    s->port_ids[0] = 1;
    s->nns = 1;
    s->ns = calloc(1, sizeof(*s->ns));
    s->ns[0].nsid = 1;
    s->ns[0].vol = v;                 /* the subsystem's reference */
    s->ns[0].resv = nvme_resv_get(1); /* reservations in memory (no store) */
    struct nvme_conf *c = nvme_conf_new(2, 1);
    c->subsys[0] = s;
    c->subsys[1] = auth_subsys();
    c->ports[0] = (struct nvme_port){.id = 1,
                                     .index = 1,
                                     .traddr = "127.0.0.1",
                                     .trsvcid = 4420,
                                     .adrfam = 1,
                                     .inline_data_size = 16384,
                                     .max_queue_size = 64};
    nvme_conf_seal(c);
    conf_publish_part(CONF_NVME, &c->part);
    admin_setup();
}

static size_t put_icreq(uint8_t *out, bool digests)
{
    memset(out, 0, NVME_TCP_IC_LEN);
    nvme_tcp_ch_build(out, NVME_TCP_ICREQ, 0, NVME_TCP_IC_LEN, 0, NVME_TCP_IC_LEN);
    out[11] = digests ? NVME_TCP_HDGST_ENABLE | NVME_TCP_DDGST_ENABLE : 0;
    return NVME_TCP_IC_LEN;
}

static size_t put_connect(uint8_t *out, const char *subnqn, uint16_t qid, uint16_t cntlid)
{
    size_t plen = NVME_TCP_CMD_HLEN + NVME_CONNECT_DATA_LEN;
    memset(out, 0, plen);
    nvme_tcp_ch_build(out, NVME_TCP_CMD, 0, NVME_TCP_CMD_HLEN, NVME_TCP_CMD_HLEN, (uint32_t)plen);
    uint8_t *sqe = out + NVME_TCP_CH_LEN, *d = out + NVME_TCP_CMD_HLEN;
    sqe[0] = NVME_FABRICS;
    sqe[1] = 0x40;
    le16_put(sqe + 2, 1);
    sqe[NVME_FCTYPE_OFF] = NVME_FCT_CONNECT;
    le32_put(sqe + NVME_SQE_DPTR + 8, NVME_CONNECT_DATA_LEN);
    sqe[NVME_SQE_DPTR + 15] = NVME_SGL_DATA_OFFSET;
    le16_put(sqe + NVME_CONNECT_QID, qid);
    le16_put(sqe + NVME_CONNECT_SQSIZE, 31);
    le16_put(d + NVME_CONNECT_CNTLID, cntlid);
    memcpy(d + NVME_CONNECT_SUBNQN, subnqn, strlen(subnqn));
    memcpy(d + NVME_CONNECT_HOSTNQN, FUZZ_HOSTNQN, strlen(FUZZ_HOSTNQN));
    return plen;
}

static size_t put_enable(uint8_t *out)
{
    memset(out, 0, NVME_TCP_CMD_HLEN);
    nvme_tcp_ch_build(out, NVME_TCP_CMD, 0, NVME_TCP_CMD_HLEN, 0, NVME_TCP_CMD_HLEN);
    uint8_t *sqe = out + NVME_TCP_CH_LEN;
    sqe[0] = NVME_FABRICS;
    le16_put(sqe + 2, 2);
    sqe[NVME_FCTYPE_OFF] = NVME_FCT_PROP_SET;
    le32_put(sqe + NVME_PROP_OFFSET, NVME_REG_CC);
    le64_put(sqe + NVME_PROP_VALUE, (6u << 16) | (4u << 20) | NVME_CC_EN);
    return NVME_TCP_CMD_HLEN;
}

static size_t preamble(uint8_t sel, uint8_t *out)
{
    if (sel == 0)
        return 0;
    size_t n = put_icreq(out, sel == 2);
    if (sel == 3) {
        n += put_connect(out + n, SUBNQN, 0, 0xffff);
        n += put_enable(out + n);
    } else if (sel == 4) {
        n += put_connect(out + n, NVME_DISC_NQN, 0, 0xffff);
    } else if (sel == 5) {
        n += put_connect(out + n, SUBNQN, 1, 1);
    } else if (sel == 6) {
        n += put_connect(out + n, AUTH_SUBNQN, 0, 0xffff);
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1 || size > (1 << 20))
        return 0;
    uint8_t *buf = malloc(size + 2048);
    if (!buf)
        return 0;
    nvme_auth_limit_reset(); /* wrong responses by the thousand: never blocked */
    size_t n = preamble(data[0] % 7, buf);
    memcpy(buf + n, data + 1, size - 1);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct {
        sa_family_t f;
    } peer = {AF_UNIX};
    nvme_target_accept(sv[1], (const struct sockaddr *)&peer, sizeof(peer), NULL, 0,
                       (void *)(intptr_t)1);
    fuzz_conn_talk(sv[0], buf, n + size - 1);
    free(buf);
    /* One input, one connection: the next starts from a clean slate (but
     * for the kept admin queue). */
    while (nvme_conn_live() > 1)
        usleep(50);
    return 0;
}
