/* Core: reactor messages and timers, I/O pool completions, connection
 * echo through a real listener and sockets, size parsing, buffer pool. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/admit.h"
#include "core/iostats.h"
#include "core/bufpool.h"
#include "core/conn.h"
#include "core/iopool.h"
#include "core/listener.h"
#include "core/reactor.h"
#include "core/registry.h"
#include "core/util.h"

static sem_t done_sem;

struct count_msg {
    struct reactor_msg msg;
    struct reactor *expect;
    atomic_int *counter;
    bool on_right_thread;
};

static void count_fn(struct reactor_msg *m)
{
    struct count_msg *cm = (struct count_msg *)m;
    cm->on_right_thread = reactor_self() == cm->expect;
    if (atomic_fetch_add(cm->counter, 1) + 1 == 1000)
        sem_post(&done_sem);
}

static void test_post_runs_on_owner(void **state)
{
    static struct count_msg msgs[1000];
    atomic_int counter = 0;
    struct reactor *r = reactor_get(1);
    for (int i = 0; i < 1000; i++) {
        msgs[i].msg.fn = count_fn;
        msgs[i].expect = r;
        msgs[i].counter = &counter;
        reactor_post(r, &msgs[i].msg);
    }
    sem_wait(&done_sem);
    assert_int_equal(atomic_load(&counter), 1000);
    for (int i = 0; i < 1000; i++)
        assert_true(msgs[i].on_right_thread);
}

struct timer_test {
    struct reactor_msg start;
    struct reactor_timer t[3];
    uint64_t fired_at[3];
    int order[3];
    int n;
    uint64_t started;
};

static struct timer_test *timer_cur;

static void timer_fired(struct reactor_timer *t)
{
    struct timer_test *cur = timer_cur;
    int idx = (int)(t - cur->t);
    cur->fired_at[idx] = time_now_ns();
    cur->order[cur->n++] = idx;
    if (cur->n == 2)
        sem_post(&done_sem);
}

static void timer_start_fn(struct reactor_msg *m)
{
    struct timer_test *tt = (struct timer_test *)m;
    struct reactor *r = reactor_self();
    tt->started = time_now_ns();
    for (int i = 0; i < 3; i++)
        reactor_timer_init(&tt->t[i], timer_fired);
    reactor_timer_start(r, &tt->t[0], 30 * 1000000ull);
    reactor_timer_start(r, &tt->t[1], 10 * 1000000ull);
    reactor_timer_start(r, &tt->t[2], 20 * 1000000ull);
    reactor_timer_cancel(r, &tt->t[2]);
}

static void test_timers_fire_in_order(void **state)
{
    static struct timer_test tt;
    timer_cur = &tt;
    tt.start.fn = timer_start_fn;
    reactor_post(reactor_get(0), &tt.start);
    sem_wait(&done_sem);
    usleep(30000); /* the cancelled one must not fire */
    assert_int_equal(tt.n, 2);
    assert_int_equal(tt.order[0], 1);
    assert_int_equal(tt.order[1], 0);
    assert_true(tt.fired_at[1] - tt.started >= 10 * 1000000ull);
    assert_true(tt.fired_at[0] - tt.started >= 30 * 1000000ull);
}

struct job_test {
    struct io_job job;
    pthread_t ran_on;
    bool done_on_owner;
};

static void job_run(struct io_job *j)
{
    ((struct job_test *)j)->ran_on = pthread_self();
}

static void job_done(struct reactor_msg *m)
{
    struct job_test *jt = (struct job_test *)((char *)m - offsetof(struct io_job, done));
    jt->done_on_owner = reactor_self() == reactor_get(0);
    sem_post(&done_sem);
}

static void test_iopool_completes_on_owner(void **state)
{
    struct job_test jt = {.job.run = job_run, .job.done.fn = job_done, .job.owner = reactor_get(0)};
    iopool_submit(&jt.job);
    sem_wait(&done_sem);
    assert_true(jt.done_on_owner);
    assert_false(pthread_equal(jt.ran_on, pthread_self()));
}

/* Echo protocol: sends back every byte it receives. */
static int echo_input(struct conn *c)
{
    size_t n = conn_input_len(c);
    int rc = conn_send_copy(c, conn_input(c), n);
    conn_consume(c, n);
    return rc;
}
static atomic_int echo_closed;
static void echo_close(struct conn *c)
{
    atomic_fetch_add(&echo_closed, 1);
}
static const struct conn_ops echo_ops = {.on_input = echo_input, .on_close = echo_close};

static void echo_accept(int fd, const struct sockaddr *peer, socklen_t plen,
                        const struct sockaddr *local, socklen_t llen, void *arg)
{
    conn_adopt(reactor_next(), fd, peer, plen, &echo_ops, NULL, NULL);
}

static void test_conn_echo(void **state)
{
    struct listener *l;
    assert_int_equal(listener_open_tcp("127.0.0.1:0", echo_accept, NULL, &l), 0);
    int port = listener_port(l);
    assert_true(port > 0);
    enum { NCLIENT = 8, LEN = 300000 };
    int fds[NCLIENT];
    for (int i = 0; i < NCLIENT; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        assert_int_equal(connect(fds[i], (struct sockaddr *)&sin, sizeof(sin)), 0);
    }
    uint8_t *out = malloc(LEN), *in = malloc(LEN);
    for (int i = 0; i < NCLIENT; i++) {
        for (int k = 0; k < LEN; k++)
            out[k] = (uint8_t)(k * 7 + i);
        /* Write in pieces while reading, so neither side's buffers fill. */
        size_t sent = 0, got = 0;
        while (got < LEN) {
            if (sent < LEN) {
                ssize_t w = write(fds[i], out + sent, MIN((size_t)65536, LEN - sent));
                assert_true(w > 0);
                sent += (size_t)w;
            }
            ssize_t r = read(fds[i], in + got, LEN - got);
            assert_true(r > 0);
            got += (size_t)r;
        }
        assert_memory_equal(in, out, LEN);
    }
    for (int i = 0; i < NCLIENT; i++)
        close(fds[i]);
    for (int i = 0; i < 200 && atomic_load(&echo_closed) < NCLIENT; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&echo_closed), NCLIENT);
    for (int i = 0; i < 200 && conn_live_count() > 0; i++)
        usleep(10000);
    assert_int_equal(conn_live_count(), 0);
    listener_close(l);
    free(out);
    free(in);
}

static void test_parse_size(void **state)
{
    uint64_t v;
    assert_int_equal(parse_size("512", &v), 0);
    assert_int_equal(v, 512);
    assert_int_equal(parse_size("4k", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(parse_size("1G", &v), 0);
    assert_int_equal(v, 1ull << 30);
    assert_int_equal(parse_size("2TiB", &v), 0);
    assert_int_equal(v, 2ull << 40);
    assert_int_equal(parse_size("16MB", &v), 0);
    assert_int_equal(v, 16ull << 20);
    assert_int_equal(parse_size("", &v), -EINVAL);
    assert_int_equal(parse_size("-1", &v), -EINVAL);
    assert_int_equal(parse_size("1X", &v), -EINVAL);
    assert_int_equal(parse_size("1.5G", &v), -EINVAL);
    assert_int_equal(parse_size("99999999999999999999", &v), -ERANGE);
    assert_int_equal(parse_size("20000000P", &v), -ERANGE);
}

static void test_host_port(void **state)
{
    struct sockaddr_storage ss;
    socklen_t len;
    char buf[80];
    assert_int_equal(parse_host_port("127.0.0.1:10809", &ss, &len), 0);
    format_sockaddr((struct sockaddr *)&ss, len, buf, sizeof(buf));
    assert_string_equal(buf, "127.0.0.1:10809");
    assert_int_equal(parse_host_port("[::1]:3260", &ss, &len), 0);
    format_sockaddr((struct sockaddr *)&ss, len, buf, sizeof(buf));
    assert_string_equal(buf, "[::1]:3260");
    assert_int_equal(parse_host_port(":3260", &ss, &len), 0);
    assert_int_equal(parse_host_port("host", &ss, &len), -EINVAL);
    assert_int_equal(parse_host_port("1.2.3.4:99999", &ss, &len), -EINVAL);
    assert_int_equal(parse_host_port("1.2.3.4:", &ss, &len), -EINVAL);
}

static void test_bufpool(void **state)
{
    void *a = bufpool_get(4096);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 4096, 0);
    memset(a, 1, 4096);
    bufpool_put(a, 4096);
    void *b = bufpool_get(3000);
    assert_ptr_equal(a, b); /* reused from this thread's cache */
    bufpool_put(b, 3000);
    void *big = bufpool_get(100u << 20);
    assert_non_null(big);
    memset(big, 0, 100u << 20);
    bufpool_put(big, 100u << 20);
    bufpool_thread_release();
}

/* ---- iostats: per-reactor counters summed on read ---- */

struct io_msg {
    struct reactor_msg msg;
    int slot;
};

static void io_count_fn(struct reactor_msg *m)
{
    struct io_msg *im = (struct io_msg *)m;
    for (int i = 0; i < 100; i++) {
        uint64_t t0 = iostats_start(im->slot, IOSTATS_NBD);
        iostats_done(im->slot, IOSTATS_NBD, IOSTATS_WRITE, 4096, i == 0, t0);
    }
    uint64_t t0 = iostats_start(im->slot, IOSTATS_NBD); /* left in flight */
    (void)t0;
    sem_post(&done_sem);
}

static void test_iostats(void **state)
{
    assert_int_equal(iostats_bucket(0), 0);
    assert_int_equal(iostats_bucket(16000), 0);
    assert_int_equal(iostats_bucket(16001), 1);
    assert_int_equal(iostats_bucket(32000), 1);
    assert_int_equal(iostats_bucket(32001), 2);
    assert_int_equal(iostats_bucket(8388608000ull), 19);
    assert_int_equal(iostats_bucket(8388608001ull), 20);
    assert_int_equal(iostats_bucket(10000000000ull), 20);
    assert_int_equal(iostats_bucket(10000000001ull), 21);
    assert_true(iostats_bucket_le(0) == 16e-6);
    assert_true(iostats_bucket_le(20) == 10.0);

    int a = iostats_slot("p/a"), b = iostats_slot("p/b");
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(iostats_slot("p/a"), a);
    assert_string_equal(iostats_name((size_t)b), "p/b");
    assert_false(iostats_bound((size_t)a, IOSTATS_NBD));
    iostats_bind(a, IOSTATS_NBD);
    assert_true(iostats_bound((size_t)a, IOSTATS_NBD));
    assert_false(iostats_bound((size_t)a, IOSTATS_ISCSI));
    /* Off a reactor: not counted. */
    assert_int_equal(iostats_start(a, IOSTATS_NBD), 0);

    static struct io_msg m[2];
    for (int r = 0; r < 2; r++) {
        m[r].msg.fn = io_count_fn;
        m[r].slot = a;
        reactor_post(reactor_get((unsigned)r), &m[r].msg);
    }
    sem_wait(&done_sem);
    sem_wait(&done_sem);
    struct iostats_totals t;
    iostats_read((size_t)a, IOSTATS_NBD, &t);
    assert_int_equal(t.ops[IOSTATS_WRITE], 200);
    assert_int_equal(t.bytes[IOSTATS_WRITE], 200 * 4096);
    assert_int_equal(t.errors[IOSTATS_WRITE], 2);
    assert_int_equal(t.started, 202);
    uint64_t n = 0;
    for (int k = 0; k < IOSTATS_NBUCKETS; k++)
        n += t.buckets[IOSTATS_WRITE][k];
    assert_int_equal(n, 200);
    iostats_read((size_t)b, IOSTATS_NBD, &t);
    assert_int_equal(t.ops[IOSTATS_WRITE], 0);
}

static struct sockaddr_in addr4(const char *ip, int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

/* Pending connections: per-address cap, pending cap at most 3/4 of the
 * total, promotion frees pending room, release frees all. */
static void test_admit(void **state)
{
    static struct admit_gate g = ADMIT_GATE_INIT("test", 8);
    admit_configure(0, 100, 2);
    struct admit_ticket t[8];
    struct sockaddr_in a = addr4("10.0.0.1", 1), b = addr4("10.0.0.2", 1);
    const struct sockaddr *sa = (const struct sockaddr *)&a, *sb = (const struct sockaddr *)&b;
    assert_int_equal(admit_try(&g, -1, sa, sizeof(a), "a", &t[0]), 0);
    assert_int_equal(admit_try(&g, -1, sa, sizeof(a), "a", &t[1]), 0);
    /* a third from the same address: per-address cap */
    assert_int_equal(admit_try(&g, -1, sa, sizeof(a), "a", &t[2]), -EBUSY);
    admit_promote(&t[0]);
    assert_int_equal(admit_try(&g, -1, sa, sizeof(a), "a", &t[2]), 0);
    /* pending cap: 8 - 8/4 = 6 (the configured 100 is larger) */
    char ip[32];
    struct sockaddr_in o[4];
    for (int i = 0; i < 4; i++) {
        snprintf(ip, sizeof(ip), "10.0.1.%d", i);
        o[i] = addr4(ip, 1);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(
            admit_try(&g, -1, (const struct sockaddr *)&o[i], sizeof(o[i]), "o", &t[3 + i]), 0);
    unsigned total, pending;
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 7);
    assert_int_equal(pending, 6);
    /* pending room is full, though the total has room left */
    assert_int_equal(admit_try(&g, -1, sb, sizeof(b), "b", &t[7]), -EBUSY);
    /* established sessions may fill the rest of the total */
    for (int i = 1; i < 7; i++)
        admit_promote(&t[i]);
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 7);
    assert_int_equal(pending, 0);
    assert_int_equal(admit_try(&g, -1, sb, sizeof(b), "b", &t[7]), 0);
    struct admit_ticket x;
    assert_int_equal(admit_try(&g, -1, sb, sizeof(b), "b", &x), -EBUSY); /* total 8 */
    for (int i = 0; i < 8; i++) {
        admit_release(&t[i]);
        admit_release(&t[i]); /* idempotent */
    }
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 0);
    assert_int_equal(pending, 0);
    assert_int_equal(g.naddrs, 0);
    admit_configure(0, ADMIT_DEFAULT_MAX_PENDING, ADMIT_DEFAULT_MAX_PENDING_PER_ADDR);
}

static struct sockaddr_in6 addr6(const char *ip)
{
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(1)};
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

/* A full pending room evicts the oldest pending connection of the address
 * holding the most (its socket is shut down), instead of refusing the
 * newcomer; an evicted ticket's promote and release change no count; IPv6
 * addresses count per /64. */
static void test_admit_evict(void **state)
{
    static struct admit_gate g = ADMIT_GATE_INIT("test-evict", 8);
    admit_configure(0, 100, 4);
    int sp[6][2];
    struct admit_ticket t[6], c, v6[5];
    struct sockaddr_in a = addr4("10.0.0.1", 1), b = addr4("10.0.0.2", 1), n = addr4("10.0.0.3", 1);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sp[i]), 0);
        const struct sockaddr_in *p = i < 4 ? &a : &b;
        assert_int_equal(
            admit_try(&g, sp[i][0], (const struct sockaddr *)p, sizeof(*p), "p", &t[i]), 0);
    }
    /* pending room (6) is full: the newcomer evicts a's oldest */
    assert_int_equal(admit_try(&g, -1, (const struct sockaddr *)&n, sizeof(n), "n", &c), 0);
    assert_false(admit_is_pending(&t[0]));
    assert_true(admit_is_pending(&t[1]));
    char byte;
    assert_int_equal(recv(sp[0][1], &byte, 1, MSG_DONTWAIT), 0); /* shut down */
    assert_int_equal(recv(sp[1][1], &byte, 1, MSG_DONTWAIT), -1);
    unsigned total, pending;
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 6);
    assert_int_equal(pending, 6);
    assert_int_equal(g.evictions, 1);
    admit_promote(&t[0]); /* the owner raced the eviction: no count moves */
    admit_release(&t[0]);
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 6);
    assert_int_equal(pending, 6);
    for (int i = 1; i < 6; i++)
        admit_release(&t[i]);
    admit_release(&c);
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 0);
    assert_int_equal(pending, 0);
    /* one /64: four addresses fill its per-address cap */
    char ip[64];
    struct sockaddr_in6 s6[5];
    for (int i = 0; i < 5; i++) {
        snprintf(ip, sizeof(ip), "2001:db8:1:2::%x", i + 1);
        s6[i] = addr6(ip);
        assert_int_equal(
            admit_try(&g, -1, (const struct sockaddr *)&s6[i], sizeof(s6[i]), "v6", &v6[i]),
            i < 4 ? 0 : -EBUSY);
    }
    for (int i = 0; i < 5; i++)
        admit_release(&v6[i]);
    for (int i = 0; i < 6; i++) {
        close(sp[i][0]);
        close(sp[i][1]);
    }
    admit_counts(&g, &total, &pending);
    assert_int_equal(total, 0);
    assert_int_equal(g.npend, 0);
    admit_configure(0, ADMIT_DEFAULT_MAX_PENDING, ADMIT_DEFAULT_MAX_PENDING_PER_ADDR);
}

static void test_hex_decode(void **state)
{
    (void)state;
    uint8_t b[4];
    assert_int_equal(hex_value('7'), 7);
    assert_int_equal(hex_value('c'), 12);
    assert_int_equal(hex_value('F'), 15);
    assert_int_equal(hex_value('g'), -1);
    assert_int_equal(hex_decode("00aBff", 6, b, sizeof(b)), 3);
    assert_memory_equal(b, "\x00\xab\xff", 3);
    assert_int_equal(hex_decode("", 0, b, sizeof(b)), 0);
    assert_int_equal(hex_decode("abc", 3, b, sizeof(b)), -EINVAL);
    assert_int_equal(hex_decode("a-", 2, b, sizeof(b)), -EINVAL);
    /* pair by pair: a bad digit before the overflow is -EINVAL, after it -E2BIG */
    assert_int_equal(hex_decode("01zz02", 6, b, 1), -EINVAL);
    assert_int_equal(hex_decode("0102zz", 6, b, 1), -E2BIG);
    assert_int_equal(hex_decode("0102", 4, b, 1), -E2BIG);
}

static void test_write_helpers(void **state)
{
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(send_all(sv[0], "hello", 5), 0);
    char got[8] = {0};
    assert_int_equal(read(sv[1], got, sizeof(got)), 5);
    assert_string_equal(got, "hello");
    close(sv[1]);
    assert_int_equal(send_all(sv[0], "x", 1), -EPIPE); /* no SIGPIPE */
    close(sv[0]);
    char path[] = "/tmp/blockd-test-pwrite-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    assert_int_equal(pwrite_all(fd, "abcd", 4, 4096), 0);
    assert_int_equal(pread(fd, got, 4, 4096), 4);
    assert_memory_equal(got, "abcd", 4);
    close(fd);
    assert_int_equal(pwrite_all(-1, "a", 1, 0), -EBADF);
}

struct reg_item {
    int id;
    struct registry_entry e;
};

static void test_registry(void **state)
{
    (void)state;
    struct registry r = REGISTRY_INIT(2);
    struct reg_item a = {.id = 1}, b = {.id = 2}, c = {.id = 3};
    assert_int_equal(registry_add(&r, &a.e), 0);
    assert_int_equal(registry_add(&r, &b.e), 0);
    assert_int_equal(registry_add(&r, &c.e), -ENOSPC); /* the cap */
    assert_int_equal(registry_count(&r), 2);
    registry_remove(&r, &c.e); /* never listed: nothing */
    assert_int_equal(registry_count(&r), 2);
    int order[2], n = 0;
    registry_lock(&r);
    REGISTRY_FOREACH (&r, e)
        order[n++] = container_of(e, struct reg_item, e)->id;
    registry_unlock(&r);
    assert_int_equal(n, 2);
    assert_int_equal(order[0], 2); /* newest first */
    assert_int_equal(order[1], 1);
    registry_remove(&r, &b.e);
    registry_remove(&r, &b.e); /* twice: nothing */
    assert_int_equal(registry_count(&r), 1);
    assert_int_equal(registry_add(&r, &c.e), 0);
    registry_remove(&r, &a.e);
    registry_remove(&r, &c.e);
    assert_int_equal(registry_count(&r), 0);
    assert_null(r.head);
}

static int setup(void **state)
{
    sem_init(&done_sem, 0, 0);
    if (reactors_start(2) || iopool_start(4))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    reactors_stop();
    iopool_stop();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_post_runs_on_owner),
        cmocka_unit_test(test_timers_fire_in_order),
        cmocka_unit_test(test_iopool_completes_on_owner),
        cmocka_unit_test(test_conn_echo),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_host_port),
        cmocka_unit_test(test_bufpool),
        cmocka_unit_test(test_iostats),
        cmocka_unit_test(test_admit),
        cmocka_unit_test(test_admit_evict),
        cmocka_unit_test(test_hex_decode),
        cmocka_unit_test(test_write_helpers),
        cmocka_unit_test(test_registry),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
