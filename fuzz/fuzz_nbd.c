/*
 * libFuzzer target: the NBD server over a real connection. Each input is the
 * byte stream a client sends after the server's greeting, fed over a
 * socketpair to a connection on a real reactor (handshake, options,
 * transmission with every command, against two exports of one memory
 * volume, "rw" and "ro"). The first byte picks a preamble that the server
 * sees before the fuzzed bytes, so that mutations also start deep in the
 * protocol:
 *   0: none (the fuzzer writes the client flags and options itself)
 *   1: client flags + NBD_OPT_GO "rw"            (simple replies)
 *   2: flags + STRUCTURED_REPLY + SET_META_CONTEXT base:allocation + GO "rw"
 *   3: flags + STRUCTURED_REPLY + GO "ro"
 */
#include <stdatomic.h>
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
#include "core/util.h"
#include "nbd/nbd_conn.h"
#include "nbd/nbd_export.h"
#include "nbd/nbd_proto.h"
#include "nbd/nbd_server.h"
#include "store/bdev.h"
#include "store/volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct nbd_export *export_new(struct volume *v, const char *name, bool readonly)
{
    struct nbd_export *e = calloc(1, sizeof(*e));
    if (!e)
        abort();
    atomic_init(&e->refs, 1);
    e->name = strdup(name);
    e->description = strdup("fuzz");
    e->readonly = readonly;
    e->multi_conn = true;
    e->enabled = true;
    e->tls = NBD_TLS_ALLOW;
    volume_ref(v);
    e->vol = v;
    atomic_init(&e->maybe_sparse, true);
    return e;
}

static void setup(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    log_set_level(getenv("FUZZ_LOG") ? LOG_DEBUG : LOG_ERROR);
    if (reactors_start(1) < 0 || iopool_start(2) < 0)
        abort();
    struct bdev *b;
    struct volume *v;
    if (bdev_memory_open(1 << 20, 0, &b) < 0 ||
        volume_new("fuzz/mem", b, 512, VOLUME_SYNC_STANDARD, false, &v) < 0)
        abort();
    struct nbd_export_table *t = nbd_export_table_new(2);
    t->exports[t->count++] = export_new(v, "rw", false);
    t->exports[t->count++] = export_new(v, "ro", true);
    nbd_exports_publish(t);
    volume_unref(v); /* the exports hold it */
}

static size_t put_opt(uint8_t *out, uint32_t opt, const void *payload, uint32_t len)
{
    be64_store(out, NBD_IHAVEOPT);
    be32_store(out + 8, opt);
    be32_store(out + 12, len);
    if (len)
        memcpy(out + 16, payload, len);
    return 16 + len;
}

/* NBD_OPT_GO / SET_META_CONTEXT payloads: u32 name length, name, u16/u32 count, items. */
static size_t put_go(uint8_t *out, const char *name)
{
    uint8_t p[64];
    uint32_t nl = (uint32_t)strlen(name);
    be32_store(p, nl);
    memcpy(p + 4, name, nl);
    be16_store(p + 4 + nl, 0);
    return put_opt(out, NBD_OPT_GO, p, 4 + nl + 2);
}

static size_t put_meta(uint8_t *out, const char *name, const char *query)
{
    uint8_t p[128];
    uint32_t nl = (uint32_t)strlen(name), ql = (uint32_t)strlen(query);
    be32_store(p, nl);
    memcpy(p + 4, name, nl);
    be32_store(p + 4 + nl, 1);
    be32_store(p + 8 + nl, ql);
    memcpy(p + 12 + nl, query, ql);
    return put_opt(out, NBD_OPT_SET_META_CONTEXT, p, 12 + nl + ql);
}

static size_t preamble(uint8_t sel, uint8_t *out)
{
    size_t n = 0;
    if (sel == 0)
        return 0;
    be32_store(out, NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES);
    n = 4;
    if (sel >= 2)
        n += put_opt(out + n, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
    if (sel == 2)
        n += put_meta(out + n, "rw", "base:allocation");
    n += put_go(out + n, sel == 3 ? "ro" : "rw");
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1 || size > (1 << 20))
        return 0;
    uint8_t *buf = malloc(size + 512);
    if (!buf)
        return 0;
    size_t n = preamble(data[0] % 4, buf);
    memcpy(buf + n, data + 1, size - 1);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    struct {
        sa_family_t f;
    } peer = {AF_UNIX};
    nbd_conn_accept(sv[1], (const struct sockaddr *)&peer, sizeof(peer));
    fuzz_conn_talk(sv[0], buf, n + size - 1);
    free(buf);
    /* One input, one connection: the next starts from a clean slate. */
    while (nbd_conn_live() > 0)
        usleep(50);
    return 0;
}
