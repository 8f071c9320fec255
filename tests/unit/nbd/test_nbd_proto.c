/* Unit tests for the pure NBD protocol code (src/nbd/nbd_proto.c) and the
 * PSK file parser (src/core/tls.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/tls.h"
#include "core/util.h"
#include "nbd/nbd_proto.h"

static const struct nbd_session_caps rw_caps = {
    .eflags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA | NBD_FLAG_SEND_TRIM |
              NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO | NBD_FLAG_SEND_DF |
              NBD_FLAG_SEND_CACHE,
    .structured = true,
    .meta_alloc = true,
    .size = 1 << 20,
    .max_length = 32 << 20,
};

static struct nbd_request req(uint16_t type, uint16_t flags, uint64_t off, uint32_t len)
{
    return (struct nbd_request){.type = type, .flags = flags, .offset = off, .length = len};
}

static void test_parse(void **state)
{
    uint8_t b[28];
    be32_store(b, NBD_REQUEST_MAGIC);
    be16_store(b + 4, NBD_CMD_FLAG_FUA);
    be16_store(b + 6, NBD_CMD_WRITE);
    be64_store(b + 8, 0x1122334455667788ull);
    be64_store(b + 16, 4096);
    be32_store(b + 24, 512);
    struct nbd_request r;
    assert_int_equal(nbd_request_parse(b, &r), 0);
    assert_int_equal(r.type, NBD_CMD_WRITE);
    assert_int_equal(r.flags, NBD_CMD_FLAG_FUA);
    assert_true(r.cookie == 0x1122334455667788ull);
    assert_int_equal(r.offset, 4096);
    assert_int_equal(r.length, 512);
    b[0] ^= 1;
    assert_int_equal(nbd_request_parse(b, &r), -EPROTO);
}

static void test_validate_ok(void **state)
{
    struct nbd_request r = req(NBD_CMD_READ, 0, 0, 4096);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), 0);
    r = req(NBD_CMD_READ, NBD_CMD_FLAG_DF, (1 << 20) - 1, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), 0);
    r = req(NBD_CMD_WRITE_ZEROES, NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
            0, 1 << 20);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), 0);
    r = req(NBD_CMD_FLUSH, 0, 0, 0);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), 0);
    r = req(NBD_CMD_BLOCK_STATUS, NBD_CMD_FLAG_REQ_ONE, 0, 1 << 20);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), 0);
    r = req(NBD_CMD_DISC, 0, 0, 0);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), 0);
}

static void test_validate_errors(void **state)
{
    const char *why = NULL;
    struct nbd_request r = req(99, 0, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, &why), NBD_EINVAL);
    assert_string_equal(why, "unknown command");
    /* unknown flag, and a known flag on the wrong command */
    r = req(NBD_CMD_READ, 1u << 9, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    r = req(NBD_CMD_READ, NBD_CMD_FLAG_FUA, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    r = req(NBD_CMD_WRITE, NBD_CMD_FLAG_REQ_ONE, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    /* read past the end → EINVAL, write past the end → ENOSPC */
    r = req(NBD_CMD_READ, 0, (1 << 20) - 1, 2);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    r = req(NBD_CMD_READ, 0, UINT64_MAX, 2);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    r = req(NBD_CMD_WRITE, 0, 1 << 20, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_ENOSPC);
    r = req(NBD_CMD_TRIM, 0, 1 << 20, 1);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    /* zero length, too long */
    r = req(NBD_CMD_READ, 0, 0, 0);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
    struct nbd_session_caps small = rw_caps;
    small.max_length = 4096;
    r = req(NBD_CMD_READ, 0, 0, 8192);
    assert_int_equal(nbd_request_validate(&r, &small, NULL), NBD_EINVAL);
    /* flush with a range */
    r = req(NBD_CMD_FLUSH, 0, 1, 0);
    assert_int_equal(nbd_request_validate(&r, &rw_caps, NULL), NBD_EINVAL);
}

static void test_validate_negotiation(void **state)
{
    struct nbd_session_caps ro = rw_caps;
    ro.eflags = NBD_FLAG_HAS_FLAGS | NBD_FLAG_READ_ONLY | NBD_FLAG_SEND_FLUSH;
    ro.structured = false;
    ro.meta_alloc = false;
    struct nbd_request r = req(NBD_CMD_WRITE, 0, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &ro, NULL), NBD_EPERM);
    r = req(NBD_CMD_TRIM, 0, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &ro, NULL), NBD_EPERM);
    r = req(NBD_CMD_WRITE_ZEROES, 0, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &ro, NULL), NBD_EPERM);
    /* DF needs structured replies; BLOCK_STATUS needs a meta context */
    r = req(NBD_CMD_READ, NBD_CMD_FLAG_DF, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &ro, NULL), NBD_EINVAL);
    r = req(NBD_CMD_BLOCK_STATUS, 0, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &ro, NULL), NBD_EINVAL);
    /* CACHE not advertised */
    r = req(NBD_CMD_CACHE, 0, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &ro, NULL), NBD_EINVAL);
    /* FUA not advertised */
    struct nbd_session_caps nofua = rw_caps;
    nofua.eflags &= (uint16_t)~NBD_FLAG_SEND_FUA;
    r = req(NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, 0, 1);
    assert_int_equal(nbd_request_validate(&r, &nofua, NULL), NBD_EINVAL);
}

static void test_errno_map(void **state)
{
    assert_int_equal(nbd_errno_to_wire(0), 0);
    assert_int_equal(nbd_errno_to_wire(-EPERM), NBD_EPERM);
    assert_int_equal(nbd_errno_to_wire(-EROFS), NBD_EPERM);
    assert_int_equal(nbd_errno_to_wire(-ENOSPC), NBD_ENOSPC);
    assert_int_equal(nbd_errno_to_wire(-EOPNOTSUPP), NBD_ENOTSUP);
    assert_int_equal(nbd_errno_to_wire(-EBADF), NBD_EIO);
}

static void test_reply_headers(void **state)
{
    uint8_t b[32];
    assert_int_equal(nbd_simple_reply(b, NBD_EIO, 7), 16);
    assert_int_equal(be32_load(b), NBD_SIMPLE_REPLY_MAGIC);
    assert_int_equal(be32_load(b + 4), NBD_EIO);
    assert_int_equal(be64_load(b + 8), 7);
    assert_int_equal(nbd_chunk_header(b, NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_OFFSET_HOLE, 9, 12),
                     20);
    assert_int_equal(be32_load(b), NBD_STRUCTURED_REPLY_MAGIC);
    assert_int_equal(be16_load(b + 4), NBD_REPLY_FLAG_DONE);
    assert_int_equal(be16_load(b + 6), NBD_REPLY_TYPE_OFFSET_HOLE);
    assert_int_equal(be32_load(b + 16), 12);
    assert_int_equal(nbd_opt_reply_header(b, NBD_OPT_GO, NBD_REP_ERR_TLS_REQD, 0), 20);
    assert_true(be64_load(b) == NBD_REP_MAGIC);
    assert_int_equal(be32_load(b + 12), NBD_REP_ERR_TLS_REQD);
}

static void test_opt_go(void **state)
{
    uint8_t b[64];
    be32_store(b, 3);
    memcpy(b + 4, "vm1", 3);
    be16_store(b + 7, 2);
    be16_store(b + 9, NBD_INFO_NAME);
    be16_store(b + 11, NBD_INFO_BLOCK_SIZE);
    struct nbd_opt_go go;
    assert_int_equal(nbd_opt_go_parse(b, 13, &go), 0);
    assert_int_equal(go.name_len, 3);
    assert_memory_equal(go.name, "vm1", 3);
    assert_int_equal(go.nreqs, 2);
    assert_int_equal(be16_load(go.reqs + 2), NBD_INFO_BLOCK_SIZE);
    /* lengths that disagree */
    assert_int_equal(nbd_opt_go_parse(b, 12, &go), -EINVAL);
    assert_int_equal(nbd_opt_go_parse(b, 14, &go), -EINVAL);
    assert_int_equal(nbd_opt_go_parse(b, 5, &go), -EINVAL);
    be32_store(b, 0xffffffffu);
    assert_int_equal(nbd_opt_go_parse(b, 13, &go), -EINVAL);
    /* empty name (default export), no requests */
    be32_store(b, 0);
    be16_store(b + 4, 0);
    assert_int_equal(nbd_opt_go_parse(b, 6, &go), 0);
    assert_int_equal(go.name_len, 0);
}

static size_t put_str(uint8_t *p, const char *s)
{
    be32_store(p, (uint32_t)strlen(s));
    memcpy(p + 4, s, strlen(s));
    return 4 + strlen(s);
}

static void test_opt_meta(void **state)
{
    uint8_t b[256];
    size_t n = put_str(b, "exp");
    be32_store(b + n, 2);
    n += 4;
    n += put_str(b + n, "qemu:dirty-bitmap:x");
    n += put_str(b + n, "base:allocation");
    struct nbd_opt_meta m;
    assert_int_equal(nbd_opt_meta_parse(b, (uint32_t)n, &m), 0);
    assert_int_equal(m.nqueries, 2);
    uint32_t pos = 0, ql;
    const char *q;
    assert_int_equal(nbd_opt_meta_next(&m, &pos, &q, &ql), 1);
    assert_false(nbd_meta_query_matches(q, ql, true));
    assert_int_equal(nbd_opt_meta_next(&m, &pos, &q, &ql), 1);
    assert_true(nbd_meta_query_matches(q, ql, false));
    assert_int_equal(nbd_opt_meta_next(&m, &pos, &q, &ql), 0);
    assert_true(nbd_meta_query_matches("base:", 5, true));
    assert_false(nbd_meta_query_matches("base:", 5, false));
    /* count says 3 but only 2 queries */
    be32_store(b + 7, 3);
    assert_int_equal(nbd_opt_meta_parse(b, (uint32_t)n, &m), -EINVAL);
    be32_store(b + 7, 2);
    /* truncated query */
    assert_int_equal(nbd_opt_meta_parse(b, (uint32_t)n - 1, &m), -EINVAL);
}

static void test_psk_line(void **state)
{
    const char *u;
    size_t ul, kl;
    unsigned char key[64];
    const char line[] = "alice:0123456789abcdefABCDEF\n";
    assert_int_equal(tls_psk_parse_line(line, strlen(line), &u, &ul, key, sizeof(key), &kl), 0);
    assert_int_equal(ul, 5);
    assert_memory_equal(u, "alice", 5);
    assert_int_equal(kl, 11);
    assert_int_equal(key[0], 0x01);
    assert_int_equal(key[10], 0xef);
    assert_int_equal(tls_psk_parse_line("# c\n", 4, &u, &ul, key, sizeof(key), &kl), 1);
    assert_int_equal(tls_psk_parse_line("\n", 1, &u, &ul, key, sizeof(key), &kl), 1);
    assert_int_equal(tls_psk_parse_line("bob:abc", 7, &u, &ul, key, sizeof(key), &kl), -EINVAL);
    assert_int_equal(tls_psk_parse_line("bob:zz", 6, &u, &ul, key, sizeof(key), &kl), -EINVAL);
    assert_int_equal(tls_psk_parse_line(":00", 3, &u, &ul, key, sizeof(key), &kl), -EINVAL);
    assert_int_equal(tls_psk_parse_line("nocolon", 7, &u, &ul, key, sizeof(key), &kl), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),           cmocka_unit_test(test_validate_ok),
        cmocka_unit_test(test_validate_errors), cmocka_unit_test(test_validate_negotiation),
        cmocka_unit_test(test_errno_map),       cmocka_unit_test(test_reply_headers),
        cmocka_unit_test(test_opt_go),          cmocka_unit_test(test_opt_meta),
        cmocka_unit_test(test_psk_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
