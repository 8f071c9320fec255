/*
 * The NBD connection code (src/nbd/nbd_conn.c) over a socketpair, with real
 * reactors and the I/O pool, an export table published by hand (no config
 * DB) over a memory volume: handshake, options, transmission, out-of-order
 * completion, protocol violations.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/iopool.h"
#include "core/reactor.h"
#include "core/util.h"
#include "nbd/nbd_conn.h"
#include "nbd/nbd_export.h"
#include "nbd/nbd_proto.h"
#include "nbd/nbd_server.h"
#include "store/bdev.h"
#include "store/volume.h"

#define VOL_SIZE (8u << 20)

static struct volume *vol;

static struct nbd_export *export_new(const char *name, bool readonly)
{
    struct nbd_export *e = calloc(1, sizeof(*e));
    atomic_init(&e->refs, 1);
    e->name = strdup(name);
    e->description = strdup("unit");
    e->readonly = readonly;
    e->multi_conn = true;
    e->enabled = true;
    e->tls = NBD_TLS_ALLOW;
    volume_ref(vol);
    e->vol = vol;
    atomic_init(&e->maybe_sparse, true);
    return e;
}

static int setup(void **state)
{
    assert_int_equal(reactors_start(2), 0);
    assert_int_equal(iopool_start(4), 0);
    struct bdev *b;
    assert_int_equal(bdev_memory_open(VOL_SIZE, 0, &b), 0);
    assert_int_equal(volume_new("unit/mem", b, 4096, VOLUME_SYNC_STANDARD, false, &vol), 0);
    struct nbd_export_table *t = nbd_export_table_new(2);
    t->exports[t->count++] = export_new("rw", false);
    t->exports[t->count++] = export_new("ro", true);
    nbd_exports_publish(t);
    return 0;
}

static int teardown(void **state)
{
    nbd_exports_publish(nbd_export_table_new(0));
    reactors_stop();
    iopool_stop();
    volume_unref(vol);
    return 0;
}

/* ---- a tiny blocking client ---- */

static int client(void)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct timeval tv = {.tv_sec = 10};
    setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_un_like {
        sa_family_t f;
    } peer = {AF_UNIX};
    nbd_conn_accept(sv[1], (const struct sockaddr *)&peer, sizeof(peer));
    return sv[0];
}

static void sendall(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        b += w;
        n -= (size_t)w;
    }
}

static int recvn(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = recv(fd, b, n, 0);
        if (r <= 0)
            return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static bool closed_by_server(int fd)
{
    uint8_t b[256];
    for (;;) {
        ssize_t r = recv(fd, b, sizeof(b), 0);
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
            return true;
        if (r < 0)
            return false;
    }
}

static void hello(int fd)
{
    uint8_t h[18];
    assert_int_equal(recvn(fd, h, 18), 0);
    assert_true(be64_load(h) == NBD_MAGIC);
    assert_true(be64_load(h + 8) == NBD_IHAVEOPT);
    assert_int_equal(be16_load(h + 16), NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    uint8_t f[4];
    be32_store(f, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    sendall(fd, f, 4);
}

static void opt_send(int fd, uint32_t opt, const void *data, uint32_t len)
{
    uint8_t h[16];
    be64_store(h, NBD_IHAVEOPT);
    be32_store(h + 8, opt);
    be32_store(h + 12, len);
    sendall(fd, h, 16);
    if (len)
        sendall(fd, data, len);
}

/* Read option replies up to the final one; returns its type. *eflags gets
 * the transmission flags from NBD_INFO_EXPORT when seen. */
static uint32_t opt_final(int fd, uint16_t *eflags, uint64_t *size)
{
    for (;;) {
        uint8_t h[20], body[4200];
        assert_int_equal(recvn(fd, h, 20), 0);
        assert_true(be64_load(h) == NBD_REP_MAGIC);
        uint32_t type = be32_load(h + 12), len = be32_load(h + 16);
        assert_true(len <= sizeof(body));
        assert_int_equal(recvn(fd, body, len), 0);
        if (type == NBD_REP_INFO && be16_load(body) == NBD_INFO_EXPORT) {
            if (size)
                *size = be64_load(body + 2);
            if (eflags)
                *eflags = be16_load(body + 10);
        }
        if (type != NBD_REP_INFO && type != NBD_REP_SERVER && type != NBD_REP_META_CONTEXT)
            return type;
    }
}

static uint32_t go(int fd, const char *name, uint16_t *eflags)
{
    uint8_t b[64];
    uint32_t n = (uint32_t)strlen(name);
    be32_store(b, n);
    memcpy(b + 4, name, n);
    be16_store(b + 4 + n, 0);
    opt_send(fd, NBD_OPT_GO, b, 6 + n);
    return opt_final(fd, eflags, NULL);
}

static void request(int fd, uint16_t type, uint16_t flags, uint64_t cookie, uint64_t off,
                    uint32_t len)
{
    uint8_t b[28];
    be32_store(b, NBD_REQUEST_MAGIC);
    be16_store(b + 4, flags);
    be16_store(b + 6, type);
    be64_store(b + 8, cookie);
    be64_store(b + 16, off);
    be32_store(b + 24, len);
    sendall(fd, b, 28);
}

static uint32_t simple_reply(int fd, uint64_t *cookie)
{
    uint8_t b[16];
    assert_int_equal(recvn(fd, b, 16), 0);
    assert_int_equal(be32_load(b), NBD_SIMPLE_REPLY_MAGIC);
    *cookie = be64_load(b + 8);
    return be32_load(b + 4);
}

/* ---- tests ---- */

static void test_go_read_write(void **state)
{
    int fd = client();
    hello(fd);
    uint16_t ef = 0;
    assert_int_equal(go(fd, "rw", &ef), NBD_REP_ACK);
    assert_true(ef & NBD_FLAG_HAS_FLAGS);
    assert_false(ef & NBD_FLAG_READ_ONLY);
    assert_true(ef & NBD_FLAG_SEND_WRITE_ZEROES);
    assert_false(ef & NBD_FLAG_SEND_DF); /* no structured replies negotiated */

    uint8_t data[8192];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7);
    request(fd, NBD_CMD_WRITE, 0, 1, 4096, sizeof(data));
    sendall(fd, data, sizeof(data));
    uint64_t cookie;
    assert_int_equal(simple_reply(fd, &cookie), 0);
    assert_int_equal(cookie, 1);

    request(fd, NBD_CMD_READ, 0, 2, 4096, sizeof(data));
    assert_int_equal(simple_reply(fd, &cookie), 0);
    assert_int_equal(cookie, 2);
    uint8_t back[8192];
    assert_int_equal(recvn(fd, back, sizeof(back)), 0);
    assert_memory_equal(back, data, sizeof(data));

    /* errors: past the end, unknown command, flush */
    request(fd, NBD_CMD_READ, 0, 3, VOL_SIZE - 512, 4096);
    assert_int_equal(simple_reply(fd, &cookie), NBD_EINVAL);
    request(fd, 42, 0, 4, 0, 0);
    assert_int_equal(simple_reply(fd, &cookie), NBD_EINVAL);
    assert_int_equal(cookie, 4);
    request(fd, NBD_CMD_FLUSH, 0, 5, 0, 0);
    assert_int_equal(simple_reply(fd, &cookie), 0);
    request(fd, NBD_CMD_DISC, 0, 6, 0, 0);
    assert_true(closed_by_server(fd));
    close(fd);
}

static void test_pipeline(void **state)
{
    int fd = client();
    hello(fd);
    assert_int_equal(go(fd, "rw", NULL), NBD_REP_ACK);
    /* More requests than max_inflight, in one send. */
    enum { N = 500 };
    uint8_t *blob = calloc(N, 28);
    for (int i = 0; i < N; i++) {
        uint8_t *b = blob + 28 * i;
        be32_store(b, NBD_REQUEST_MAGIC);
        be16_store(b + 6, NBD_CMD_READ);
        be64_store(b + 8, 1000 + (uint64_t)i);
        be64_store(b + 16, (uint64_t)i * 4096 % VOL_SIZE);
        be32_store(b + 24, 512);
    }
    sendall(fd, blob, 28 * N);
    free(blob);
    bool seen[N] = {false};
    for (int i = 0; i < N; i++) {
        uint64_t cookie;
        uint8_t d[512];
        assert_int_equal(simple_reply(fd, &cookie), 0);
        assert_int_equal(recvn(fd, d, 512), 0);
        assert_true(cookie >= 1000 && cookie < 1000 + N);
        assert_false(seen[cookie - 1000]);
        seen[cookie - 1000] = true;
    }
    close(fd);
}

static void test_options(void **state)
{
    int fd = client();
    hello(fd);
    opt_send(fd, 99, "x", 1);
    assert_int_equal(opt_final(fd, NULL, NULL), NBD_REP_ERR_UNSUP);
    opt_send(fd, NBD_OPT_STARTTLS, NULL, 0); /* no credentials published */
    assert_int_equal(opt_final(fd, NULL, NULL), NBD_REP_ERR_UNSUP);
    opt_send(fd, NBD_OPT_LIST, NULL, 0);
    assert_int_equal(opt_final(fd, NULL, NULL), NBD_REP_ACK);
    assert_int_equal(go(fd, "missing", NULL), NBD_REP_ERR_UNKNOWN);
    opt_send(fd, NBD_OPT_INFO, "\0\0\0\x09zz", 6);
    assert_int_equal(opt_final(fd, NULL, NULL), NBD_REP_ERR_INVALID);
    opt_send(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
    assert_int_equal(opt_final(fd, NULL, NULL), NBD_REP_ACK);
    uint16_t ef = 0;
    assert_int_equal(go(fd, "ro", &ef), NBD_REP_ACK);
    assert_true(ef & NBD_FLAG_READ_ONLY);
    assert_true(ef & NBD_FLAG_SEND_DF);
    uint64_t cookie;
    request(fd, NBD_CMD_WRITE, 0, 7, 0, 512);
    sendall(fd, (uint8_t[512]){0}, 512);
    assert_int_equal(simple_reply(fd, &cookie), NBD_EPERM);
    assert_int_equal(cookie, 7);
    /* a structured read of a hole is one OFFSET_HOLE chunk */
    request(fd, NBD_CMD_READ, 0, 8, 1 << 20, 1 << 20);
    uint8_t h[32];
    assert_int_equal(recvn(fd, h, 20), 0);
    assert_int_equal(be32_load(h), NBD_STRUCTURED_REPLY_MAGIC);
    assert_int_equal(be16_load(h + 6), NBD_REPLY_TYPE_OFFSET_HOLE);
    assert_int_equal(be16_load(h + 4), NBD_REPLY_FLAG_DONE);
    assert_int_equal(be32_load(h + 16), 12);
    assert_int_equal(recvn(fd, h, 12), 0);
    assert_int_equal(be32_load(h + 8), 1 << 20);
    close(fd);
}

static void test_violations(void **state)
{
    /* bad option magic */
    int fd = client();
    hello(fd);
    sendall(fd, "IHAVEOPX\0\0\0\3\0\0\0\0", 16);
    assert_true(closed_by_server(fd));
    close(fd);
    /* unknown client flags */
    fd = client();
    uint8_t h[18];
    assert_int_equal(recvn(fd, h, 18), 0);
    sendall(fd, "\0\0\1\3", 4);
    assert_true(closed_by_server(fd));
    close(fd);
    /* bad request magic in transmission */
    fd = client();
    hello(fd);
    assert_int_equal(go(fd, "rw", NULL), NBD_REP_ACK);
    sendall(fd, "garbage-garbage-garbage-garb", 28);
    assert_true(closed_by_server(fd));
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_go_read_write),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_violations),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
