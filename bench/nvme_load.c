/*
 * An NVMe/TCP load generator for bench/nvme.sh, written from the NVMe over
 * Fabrics TCP transport binding and the NVMe base specification (not from
 * blockd's headers): ICReq/ICResp on every connection, a Fabrics Connect of
 * the admin queue, CC.EN through Property Set and a wait for CSTS.RDY,
 * Identify of the controller and of the namespace, Set Features Number of
 * Queues, then N I/O queues (one TCP connection and one thread each) that
 * keep QD Read or Write commands of BS bytes in flight for SECONDS, at random
 * aligned offsets or sequentially. Reads name a transport SGL data block and
 * complete on a CapsuleResp or on a C2HData PDU with SUCCESS set; writes go in
 * the capsule when they fit the controller's IOCCSZ, else through R2T and
 * H2CData. No digests, KATO 0 (the run is shorter than any keep-alive).
 *
 * usage: nvme_load [-q QUEUES] [-d QD] [-b BS] [-w read|write|randread|randwrite]
 *                  [-t SECONDS] [-n NSID] [-S] [-V FILE] ADDR PORT SUBNQN
 * -S: I/O queues connect with SQ flow control disabled (CATTR), so the
 *      target may complete a read with its last C2HData PDU (SUCCESS flag)
 *      instead of a CapsuleResp
 * -V FILE: compare every read with FILE (the volume's backing file) at the
 *      same offset: a check of the tool and the target, not for timed runs
 * prints: "rw=<mode> queues=<n> qd=<n> bs=<bytes> ops=<n> IOPS=<x> MiB/s=<y>
 *          lat_us=<mean> client_cpu_s=<utime+stime>"
 * Exits 1 on any failed command (a benchmark that hides errors measures
 * nothing).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* PDU types and flags (NVMe/TCP transport binding, common header) */
enum {
    ICREQ = 0,
    ICRESP = 1,
    H2C_TERM = 2,
    C2H_TERM = 3,
    CMD = 4,
    RSP = 5,
    H2C_DATA = 6,
    C2H_DATA = 7,
    R2T = 9
};
#define F_LAST 0x04
#define F_SUCCESS 0x08
#define CH_LEN 8
#define CMD_HLEN (CH_LEN + 64)
#define RSP_HLEN (CH_LEN + 16)
#define DATA_HLEN 24
#define RBUF (256 * 1024)
#define SBUF (256 * 1024)
#define ADMIN_CID 0

struct slot {
    unsigned char *buf;
    uint64_t lba;
    double started;
    int write;
};

struct queue {
    int fd;
    uint16_t qid, cntlid;
    uint32_t maxh2c, incap; /* H2CData limit; bytes of data a capsule may carry */
    unsigned char *rbuf, *sbuf;
    size_t roff, rlen, slen;
    int big;            /* the last payload was large: fetch the next header alone */
    struct slot *slots; /* by CID */
    unsigned nslots;
    /* load */
    struct job *job;
    uint64_t rng, next_lba, ops, inflight, issued;
    double t0;           /* when the queue started issuing (pacing, -r) */
    uint64_t by_success; /* completions carried by a C2HData PDU (SUCCESS) */
    double lat_sum;
    int failed;
    pthread_t th;
};

struct job {
    const char *addr, *port, *subnqn;
    unsigned queues, qd;
    uint32_t bs, lbs, nsid;
    uint64_t nlb; /* namespace size in logical blocks */
    int write, random, sqflow_off;
    int verify_fd; /* -V: the volume's backing file, reads compared with it */
    double seconds, deadline;
    double rate; /* -r: commands per second per queue, 0 unlimited */
    unsigned char hostid[16];
    char hostnqn[256];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    put16(p, (uint16_t)v), put16(p + 2, (uint16_t)(v >> 16));
}
static void put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v), put32(p + 4, (uint32_t)(v >> 32));
}
static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}
static uint32_t get32(const unsigned char *p)
{
    return get16(p) | (uint32_t)get16(p + 2) << 16;
}
static uint64_t get64(const unsigned char *p)
{
    return get32(p) | (uint64_t)get32(p + 4) << 32;
}

static int send_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -EIO;
        b += w, n -= (size_t)w;
    }
    return 0;
}

static int q_flush(struct queue *q)
{
    int rc = q->slen ? send_all(q->fd, q->sbuf, q->slen) : 0;
    q->slen = 0;
    return rc;
}

/* n bytes from the connection into dst (NULL: discard); large payloads go
 * straight from the socket into dst, small ones through the buffer */
static int q_read(struct queue *q, unsigned char *dst, size_t n)
{
    while (n) {
        if (q->roff < q->rlen) {
            size_t k = q->rlen - q->roff < n ? q->rlen - q->roff : n;
            if (dst)
                memcpy(dst, q->rbuf + q->roff, k), dst += k;
            q->roff += k, n -= k;
            continue;
        }
        /* about to block: whatever is queued for sending goes first */
        if (q_flush(q) < 0)
            return -EIO;
        ssize_t r;
        if (dst && n >= RBUF / 4) {
            /* the whole rest in place, to its last byte (a short tail read
             * through the buffer would drag the next payloads through it) */
            while (n && ((r = recv(q->fd, dst, n, 0)) > 0 || (r < 0 && errno == EINTR)))
                if (r > 0)
                    dst += r, n -= (size_t)r;
        } else {
            q->roff = q->rlen = 0;
            /* after a large payload the next is likely large too: take one
             * PDU header (every PDU a host gets here has 24 bytes), so its
             * data lands in place rather than through the buffer; small
             * PDUs are batched */
            r = recv(q->fd, q->rbuf, q->big ? DATA_HLEN : RBUF, 0);
            if (r > 0)
                q->rlen = (size_t)r;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -EIO;
    }
    return 0;
}

static unsigned char *q_reserve(struct queue *q, size_t n)
{
    if (q->slen + n > SBUF && q_flush(q) < 0)
        return NULL;
    unsigned char *p = q->sbuf + q->slen;
    memset(p, 0, n);
    q->slen += n;
    return p;
}

static int q_connect_tcp(struct queue *q, const struct job *j)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(j->addr, j->port, &hints, &ai) != 0)
        return -EINVAL;
    q->fd = socket(ai->ai_family, SOCK_STREAM, 0);
    int one = 1, rc = q->fd < 0 ? -errno : 0;
    if (!rc && connect(q->fd, ai->ai_addr, ai->ai_addrlen) < 0)
        rc = -errno;
    freeaddrinfo(ai);
    if (rc)
        return rc;
    setsockopt(q->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* ICReq: PFV 0, HPDA 0, no digests, MAXR2T 0 (one R2T per command) */
    unsigned char ic[128] = {ICREQ, 0, 128, 0};
    put32(ic + 4, 128);
    if (send_all(q->fd, ic, sizeof(ic)) < 0 || q_read(q, ic, sizeof(ic)) < 0)
        return -EIO;
    if (ic[0] != ICRESP || ic[2] != 128 || get16(ic + 8) != 0 || ic[11] != 0) {
        fprintf(stderr, "queue %u: bad ICResp (type %u PFV %u DGST %u)\n", q->qid, ic[0],
                get16(ic + 8), ic[11]);
        return -EPROTO;
    }
    q->maxh2c = get32(ic + 12);
    return 0;
}

/* Queue a command capsule; data != NULL and len <= incap: in-capsule data,
 * else a transport SGL data block of len bytes (C2HData or R2T) */
static int q_submit(struct queue *q, const unsigned char sqe[64], const void *data, uint32_t len)
{
    int incap = data && len <= q->incap;
    unsigned char *p = q_reserve(q, CMD_HLEN + (incap ? len : 0));
    if (!p)
        return -EIO;
    p[0] = CMD, p[2] = CMD_HLEN, p[3] = incap && len ? CMD_HLEN : 0;
    put32(p + 4, CMD_HLEN + (incap ? len : 0));
    memcpy(p + CH_LEN, sqe, 64);
    unsigned char *sgl = p + CH_LEN + 24;
    p[CH_LEN + 1] = 0x40; /* PSDT: SGLs */
    put64(sgl, 0);
    put32(sgl + 8, len);
    sgl[15] = incap ? 0x01 : 0x5A; /* data block, offset / transport-specific */
    if (incap && len)
        memcpy(p + CMD_HLEN, data, len);
    return 0;
}

/* R2T: send the requested range of the command's buffer in H2CData PDUs */
static int q_r2t(struct queue *q, const unsigned char *h)
{
    uint16_t cid = get16(h + 8), ttag = get16(h + 10);
    uint32_t off = get32(h + 12), left = get32(h + 16);
    if (cid >= q->nslots || q_flush(q) < 0)
        return -EPROTO;
    while (left) {
        uint32_t n = q->maxh2c && left > q->maxh2c ? q->maxh2c : left;
        unsigned char d[DATA_HLEN] = {H2C_DATA, n == left ? F_LAST : 0, DATA_HLEN, DATA_HLEN};
        put32(d + 4, DATA_HLEN + n);
        put16(d + 8, cid), put16(d + 10, ttag), put32(d + 12, off), put32(d + 16, n);
        struct iovec iov[2] = {{d, DATA_HLEN}, {q->slots[cid].buf + off, n}};
        size_t total = DATA_HLEN + n, done = 0;
        while (done < total) {
            ssize_t w = writev(q->fd, iov, 2);
            if (w <= 0)
                return -EIO;
            done += (size_t)w;
            for (int i = 0; i < 2; i++) {
                size_t k = (size_t)w < iov[i].iov_len ? (size_t)w : iov[i].iov_len;
                iov[i].iov_base = (char *)iov[i].iov_base + k, iov[i].iov_len -= k;
                w -= (ssize_t)k;
            }
        }
        off += n, left -= n;
    }
    return 0;
}

/* One PDU. Returns 1 when a command completed (*cid, *status and, for a
 * CapsuleResp, cqe filled), 0 when not, -errno on a broken connection. */
static int q_poll(struct queue *q, uint16_t *cid, uint16_t *status, unsigned char cqe[16])
{
    unsigned char h[RSP_HLEN];
    if (q_read(q, h, CH_LEN) < 0)
        return -EIO;
    uint32_t plen = get32(h + 4);
    if (h[2] < CH_LEN || h[2] > sizeof(h) || plen < h[2] ||
        q_read(q, h + CH_LEN, h[2] - CH_LEN) < 0)
        return -EPROTO;
    switch (h[0]) {
    case RSP:
        memcpy(cqe, h + CH_LEN, 16);
        *cid = get16(cqe + 12), *status = get16(cqe + 14) >> 1;
        return 1;
    case C2H_DATA: {
        uint16_t c = get16(h + 8);
        uint32_t off = get32(h + 12), len = get32(h + 16);
        if (c >= q->nslots || h[3] != DATA_HLEN || plen != DATA_HLEN + len)
            return -EPROTO;
        q->big = len >= RBUF / 4;
        if (q_read(q, q->slots[c].buf + off, len) < 0)
            return -EIO;
        if (!(h[1] & F_SUCCESS))
            return 0;
        /* SUCCESS (only with LAST_PDU): no CapsuleResp follows */
        memset(cqe, 0, 16);
        *cid = c, *status = 0;
        q->by_success++;
        return 1;
    }
    case R2T:
        return q_r2t(q, h) < 0 ? -EIO : 0;
    default:
        fprintf(stderr, "queue %u: PDU type %u (plen %u)\n", q->qid, h[0], plen);
        return -EPROTO;
    }
}

/* A command on a queue with nothing else in flight (setup) */
static int q_sync(struct queue *q, unsigned char sqe[64], void *data, uint32_t len, int out,
                  unsigned char cqe[16])
{
    uint16_t cid, st;
    int rc;
    put16(sqe + 2, ADMIN_CID);
    q->slots[ADMIN_CID].buf = data;
    if (q_submit(q, sqe, out ? data : NULL, len) < 0 || q_flush(q) < 0)
        return -EIO;
    while ((rc = q_poll(q, &cid, &st, cqe)) == 0)
        ;
    if (rc < 0)
        return rc;
    if (st) {
        fprintf(stderr, "queue %u: opcode %02x/%02x failed: SCT %u SC %02x\n", q->qid, sqe[0],
                sqe[4], (st >> 8) & 7, st & 0xff);
        return -EIO;
    }
    return 0;
}

static int fabrics_connect(struct queue *q, const struct job *j, uint16_t sqsize)
{
    unsigned char sqe[64] = {0x7f}, cqe[16], data[1024] = {0};
    sqe[4] = 0x01;               /* FCTYPE Connect */
    put16(sqe + 40, 0);          /* RECFMT */
    put16(sqe + 42, q->qid);     /* QID */
    put16(sqe + 44, sqsize - 1); /* SQSIZE, 0's based */
    put32(sqe + 48, 0);          /* KATO */
    if (q->qid && j->sqflow_off)
        sqe[46] = 0x04; /* CATTR: SQ flow control disabled (a read may end with SUCCESS) */
    memcpy(data, j->hostid, 16);
    put16(data + 16, q->qid ? q->cntlid : 0xffff);
    snprintf((char *)data + 256, 256, "%s", j->subnqn);
    snprintf((char *)data + 512, 256, "%s", j->hostnqn);
    /* the Connect data always goes in the capsule */
    uint32_t incap = q->incap;
    q->incap = sizeof(data);
    int rc = q_sync(q, sqe, data, sizeof(data), 1, cqe);
    q->incap = incap;
    if (rc == 0)
        q->cntlid = get16(cqe);
    return rc;
}

static int prop(struct queue *q, int set, uint32_t ofst, int size8, uint64_t *val)
{
    unsigned char sqe[64] = {0x7f}, cqe[16];
    sqe[4] = set ? 0x00 : 0x04; /* Property Set / Get */
    sqe[40] = size8 ? 1 : 0;
    put32(sqe + 44, ofst);
    if (set)
        put64(sqe + 48, *val);
    int rc = q_sync(q, sqe, NULL, 0, 0, cqe);
    if (!rc && !set)
        *val = size8 ? get64(cqe) : get32(cqe);
    return rc;
}

static int identify(struct queue *q, uint32_t nsid, uint32_t cns, unsigned char *out)
{
    unsigned char sqe[64] = {0x06}, cqe[16];
    put32(sqe + 4, nsid);
    put32(sqe + 40, cns);
    return q_sync(q, sqe, out, 4096, 0, cqe);
}

static int q_init(struct queue *q, struct job *j, uint16_t qid, unsigned nslots)
{
    q->qid = qid, q->job = j, q->nslots = nslots;
    q->rbuf = malloc(RBUF), q->sbuf = malloc(SBUF);
    q->slots = calloc(nslots, sizeof(*q->slots));
    q->rng = 0x9e3779b97f4a7c15ull ^ ((uint64_t)qid * 0xbf58476d1ce4e5b9ull);
    return q->rbuf && q->sbuf && q->slots ? 0 : -ENOMEM;
}

/* Admin queue: Connect, enable, Identify, number of queues */
static int admin_setup(struct queue *a, struct job *j)
{
    unsigned char id[4096];
    uint64_t v = 0;
    if (q_init(a, j, 0, 1) < 0 || q_connect_tcp(a, j) < 0 || fabrics_connect(a, j, 32) < 0)
        return -EIO;
    if (prop(a, 0, 0x00, 1, &v) < 0) /* CAP */
        return -EIO;
    double to = now_s() + ((v >> 24) & 0xff) * 0.5 + 1;
    v = 1 | 6u << 16 | 4u << 20; /* CC: EN, IOSQES 64 B, IOCQES 16 B, NVM, 4 KiB pages */
    if (prop(a, 1, 0x14, 0, &v) < 0)
        return -EIO;
    do { /* CSTS.RDY */
        if (prop(a, 0, 0x1c, 0, &v) < 0)
            return -EIO;
        if (!(v & 1))
            usleep(10000);
    } while (!(v & 1) && now_s() < to);
    if (!(v & 1)) {
        fprintf(stderr, "CSTS.RDY never came\n");
        return -ETIMEDOUT;
    }
    if (identify(a, 0, 1, id) < 0)
        return -EIO;
    uint32_t ioccsz = get32(id + 1792), mdts = id[77];
    if (identify(a, j->nsid, 0, id) < 0)
        return -EIO;
    j->nlb = get64(id);
    j->lbs = 1u << id[128 + 4 * (id[26] & 0xf) + 2];
    if (!j->nlb || (mdts && j->bs > 4096u << mdts) || j->bs % j->lbs || j->bs / j->lbs > j->nlb) {
        fprintf(stderr, "BS %u: the namespace has %llu blocks of %u B, MDTS %u\n", j->bs,
                (unsigned long long)j->nlb, j->lbs, mdts);
        return -EINVAL;
    }
    unsigned char sqe[64] = {0x09}, cqe[16]; /* Set Features: Number of Queues */
    put32(sqe + 40, 0x07);
    put32(sqe + 44, (j->queues - 1) | (j->queues - 1) << 16);
    if (q_sync(a, sqe, NULL, 0, 0, cqe) < 0)
        return -EIO;
    if ((get32(cqe) & 0xffff) + 1 < j->queues) {
        fprintf(stderr, "the controller allows %u I/O queues\n", (get32(cqe) & 0xffff) + 1);
        return -EINVAL;
    }
    a->incap = ioccsz > 4 ? ioccsz * 16 - 64 : 0; /* what I/O queues may carry */
    return 0;
}

static uint64_t rnd(struct queue *q)
{
    q->rng ^= q->rng << 13;
    q->rng ^= q->rng >> 7;
    q->rng ^= q->rng << 17;
    return q->rng;
}

static int issue(struct queue *q, uint16_t cid)
{
    struct job *j = q->job;
    uint32_t nblk = j->bs / j->lbs;
    uint64_t lba;
    if (j->random) {
        lba = (rnd(q) % (j->nlb / nblk)) * nblk;
    } else {
        if (q->next_lba + nblk > j->nlb)
            q->next_lba = 0;
        lba = q->next_lba;
        q->next_lba += nblk;
    }
    unsigned char sqe[64] = {j->write ? 0x01 : 0x02};
    put16(sqe + 2, cid);
    put32(sqe + 4, j->nsid);
    put64(sqe + 40, lba);
    put32(sqe + 48, nblk - 1);
    q->slots[cid].started = now_s();
    q->slots[cid].lba = lba;
    q->inflight++;
    q->issued++;
    return q_submit(q, sqe, j->write ? q->slots[cid].buf : NULL, j->bs);
}

/* -V: the data a read returned against the file behind the namespace */
static int verify(struct queue *q, uint16_t cid)
{
    struct job *j = q->job;
    unsigned char *want = malloc(j->bs);
    int rc = want && pread(j->verify_fd, want, j->bs, (off_t)(q->slots[cid].lba * j->lbs)) ==
                         (ssize_t)j->bs
                 ? memcmp(want, q->slots[cid].buf, j->bs)
                 : -1;
    free(want);
    if (rc)
        fprintf(stderr, "queue %u: LBA %llu: data differs from the file\n", q->qid,
                (unsigned long long)q->slots[cid].lba);
    return rc ? -EIO : 0;
}

/* -r: wait until the queue's next command is due (issued / rate seconds
 * after its start), so that both protocols can be compared at one rate. */
static void pace(struct queue *q)
{
    if (q->job->rate <= 0)
        return;
    double wait = q->t0 + (double)q->issued / q->job->rate - now_s();
    if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static void *io_thread(void *arg)
{
    struct queue *q = arg;
    struct job *j = q->job;
    unsigned char cqe[16];
    uint16_t cid, st;
    q->t0 = now_s();
    for (uint16_t c = 0; c < j->qd; c++)
        if (issue(q, c) < 0)
            q->failed = 1;
    while (q->inflight && !q->failed) {
        int rc = q_poll(q, &cid, &st, cqe);
        if (rc == 0)
            continue;
        if (rc < 0 || cid >= q->nslots || st) {
            fprintf(stderr, "queue %u: %s (status %04x)\n", q->qid,
                    rc < 0 ? "connection lost" : "command failed", rc < 0 ? 0 : st);
            q->failed = 1;
            break;
        }
        if (j->verify_fd >= 0 && !j->write && verify(q, cid) < 0) {
            q->failed = 1;
            break;
        }
        double t = now_s();
        q->inflight--, q->ops++;
        q->lat_sum += t - q->slots[cid].started;
        pace(q);
        if (now_s() < j->deadline && issue(q, cid) < 0)
            q->failed = 1;
    }
    return NULL;
}

static int io_queue_setup(struct queue *q, struct job *j, uint16_t qid, uint16_t cntlid,
                          uint32_t incap)
{
    if (q_init(q, j, qid, j->qd) < 0)
        return -ENOMEM;
    q->cntlid = cntlid;
    for (unsigned i = 0; i < j->qd; i++) {
        q->slots[i].buf = malloc(j->bs);
        if (!q->slots[i].buf)
            return -ENOMEM;
        memset(q->slots[i].buf, 0xa5 ^ (int)i, j->bs);
    }
    unsigned char *keep = q->slots[0].buf;
    q->slots[0].buf = NULL;
    q->incap = 0;
    int rc = q_connect_tcp(q, j) < 0 || fabrics_connect(q, j, (uint16_t)(j->qd + 1)) < 0;
    q->slots[0].buf = keep;
    q->incap = incap;
    return rc ? -EIO : 0;
}

static int parse_args(struct job *j, int argc, char **argv)
{
    const char *mode = "randread";
    int o;
    while ((o = getopt(argc, argv, "q:d:b:w:t:n:r:SV:")) != -1) {
        switch (o) {
        case 'q':
            j->queues = (unsigned)atoi(optarg);
            break;
        case 'd':
            j->qd = (unsigned)atoi(optarg);
            break;
        case 'b':
            j->bs = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'w':
            mode = optarg;
            break;
        case 't':
            j->seconds = strtod(optarg, NULL);
            break;
        case 'V':
            j->verify_fd = open(optarg, O_RDONLY);
            if (j->verify_fd < 0)
                return -errno;
            break;
        case 'S':
            j->sqflow_off = 1;
            break;
        case 'n':
            j->nsid = (uint32_t)strtoul(optarg, NULL, 0);
            break;
        case 'r':
            j->rate = strtod(optarg, NULL);
            break;
        default:
            return -EINVAL;
        }
    }
    if (argc - optind != 3 || !j->queues || j->queues > 64 || !j->qd || j->qd > 127 || !j->bs ||
        j->seconds <= 0)
        return -EINVAL;
    j->write = strstr(mode, "write") != NULL;
    j->random = strncmp(mode, "rand", 4) == 0;
    j->addr = argv[optind], j->port = argv[optind + 1], j->subnqn = argv[optind + 2];
    return 0;
}

int main(int argc, char **argv)
{
    struct job j = {.queues = 1, .qd = 32, .bs = 4096, .seconds = 5, .nsid = 1, .verify_fd = -1};
    if (parse_args(&j, argc, argv) < 0) {
        fprintf(stderr,
                "usage: %s [-q QUEUES] [-d QD] [-b BS] [-w read|write|randread|randwrite] "
                "[-t SECONDS] [-n NSID] [-r IOPS_PER_QUEUE] [-S] [-V FILE] ADDR PORT SUBNQN\n",
                argv[0]);
        return 2;
    }
    const char *mode =
        j.random ? (j.write ? "randwrite" : "randread") : (j.write ? "write" : "read");
    for (int i = 0; i < 16; i++)
        j.hostid[i] = (unsigned char)(0x40 + i * 7);
    snprintf(j.hostnqn, sizeof(j.hostnqn), "nqn.2014-08.org.nvmexpress:uuid:%s",
             "6e766d65-6c6f-6164-0000-62656e636801");
    struct queue admin = {0}, *qs = calloc(j.queues, sizeof(*qs));
    if (!qs || admin_setup(&admin, &j) < 0)
        return 1;
    for (unsigned i = 0; i < j.queues; i++)
        if (io_queue_setup(&qs[i], &j, (uint16_t)(i + 1), admin.cntlid, admin.incap) < 0)
            return 1;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double start = now_s();
    j.deadline = start + j.seconds;
    for (unsigned i = 0; i < j.queues; i++)
        if (pthread_create(&qs[i].th, NULL, io_thread, &qs[i]) != 0)
            return 1;
    uint64_t ops = 0, by_success = 0;
    double lat = 0;
    int failed = 0;
    for (unsigned i = 0; i < j.queues; i++) {
        pthread_join(qs[i].th, NULL);
        ops += qs[i].ops, lat += qs[i].lat_sum, failed |= qs[i].failed;
        by_success += qs[i].by_success;
    }
    double elapsed = now_s() - start;
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
                          r0.ru_stime.tv_sec) +
                 (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
                          r0.ru_stime.tv_usec) /
                     1e6;
    printf("rw=%s queues=%u qd=%u bs=%u sqflow=%s ops=%llu IOPS=%.0f MiB/s=%.1f lat_us=%.0f "
           "client_cpu_s=%.2f by_success=%llu\n",
           mode, j.queues, j.qd, j.bs, j.sqflow_off ? "off" : "on", (unsigned long long)ops,
           ops / elapsed, ops * (double)j.bs / elapsed / 1048576.0, ops ? lat / ops * 1e6 : 0.0,
           cpu, (unsigned long long)by_success);
    for (unsigned i = 0; i < j.queues; i++)
        close(qs[i].fd);
    close(admin.fd);
    return failed;
}
