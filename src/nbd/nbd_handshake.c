/*
 * The NBD fixed-newstyle handshake and option haggling (nbd_handshake.h).
 * Exports are looked up in the published table (nbd_export.h) once per
 * option; what the client may see and use follows from the export, the
 * volume's capabilities and this connection's TLS state.
 */
#include "nbd/nbd_handshake.h"

#include <errno.h>
#include <string.h>

#include "core/log.h"
#include "core/reactor.h"
#include "core/tls.h"
#include "core/util.h"
#include "nbd/nbd_dirty.h"
#include "nbd/nbd_server.h"

#define NBD_OPT_MAX_LEN (64u * 1024) /* longer options get ERR_TOO_BIG */
#define NBD_MAX_OPTIONS 4096         /* options per connection before we give up */
/* GO/INFO/EXPORT_NAME of an export whose RBD pool is not reachable yet
 * (nbd_export.unavailable) waits this long for it (under the default 10 s
 * handshake deadline), rechecking every NBD_UNAVAIL_RETRY_NS; then the
 * client gets the reason. */
#define NBD_UNAVAIL_WAIT_NS (5000ull * 1000000ull)
#define NBD_UNAVAIL_RETRY_NS (200ull * 1000000ull)
/* How often a SET/LIST_META_CONTEXT waiting for its dirty-bitmap lookup
 * (nbd_dirty.h) looks again. */
#define NBD_DIRTY_RETRY_NS (5ull * 1000000ull)

static void send_opt_reply(struct nbd_conn *nc, uint32_t opt, uint32_t type, const void *data,
                           uint32_t len)
{
    uint8_t b[NBD_OPT_REPLY_HEADER_LEN + 8 + NBD_MAX_STRING + 8];
    if (len > sizeof(b) - NBD_OPT_REPLY_HEADER_LEN)
        len = (uint32_t)(sizeof(b) - NBD_OPT_REPLY_HEADER_LEN);
    nbd_opt_reply_header(b, opt, type, len);
    if (len)
        memcpy(b + NBD_OPT_REPLY_HEADER_LEN, data, len);
    conn_send_copy(nc->c, b, NBD_OPT_REPLY_HEADER_LEN + len);
}

static uint16_t export_eflags(struct nbd_conn *nc, const struct nbd_export *e)
{
    unsigned caps = volume_caps(e->vol);
    bool ro = e->readonly || volume_readonly(e->vol);
    uint16_t f = NBD_FLAG_HAS_FLAGS;
    if (ro)
        f |= NBD_FLAG_READ_ONLY;
    if (caps & BDEV_CAN_FLUSH) {
        f |= NBD_FLAG_SEND_FLUSH;
        if (!ro)
            f |= NBD_FLAG_SEND_FUA;
    }
    if (caps & BDEV_ROTATIONAL)
        f |= NBD_FLAG_ROTATIONAL;
    if (!ro) {
        if (caps & BDEV_CAN_TRIM)
            f |= NBD_FLAG_SEND_TRIM;
        f |= NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    }
    if (nc->structured)
        f |= NBD_FLAG_SEND_DF;
    if (e->multi_conn && (caps & BDEV_CAN_MULTI_CONN))
        f |= NBD_FLAG_CAN_MULTI_CONN;
    if (caps & BDEV_CAN_CACHE)
        f |= NBD_FLAG_SEND_CACHE;
    return f;
}

/* NBD_REP_ERR_* for an export this connection may not use, or 0. */
static uint32_t export_refusal(struct nbd_conn *nc, const struct nbd_export *e)
{
    if (!e || !e->enabled)
        return NBD_REP_ERR_UNKNOWN;
    if (e->tls == NBD_TLS_REQUIRE && !nc->tls)
        return NBD_REP_ERR_TLS_REQD;
    if (e->tls == NBD_TLS_OFF && nc->tls)
        return NBD_REP_ERR_POLICY;
    if (!e->vol)
        return NBD_REP_ERR_UNKNOWN;
    return 0;
}

/* Listed, but its pool is not reachable yet: it may become ready. */
static bool export_unavailable(const struct nbd_export *e, uint32_t why)
{
    return why == NBD_REP_ERR_UNKNOWN && e && e->enabled && !e->vol && e->unavailable;
}

/* An option naming an unavailable export: -EAGAIN while the client may
 * still wait (the option is processed again later), else 0 once the
 * reason is logged and, for INFO/GO, sent (NBD_REP_ERR_UNKNOWN, "the
 * requested export is not available", with the reason as its message). */
static int unavailable_wait(struct nbd_conn *nc, uint32_t opt, const struct nbd_export *e)
{
    uint64_t now = time_now_ns();
    if (!nc->unavail_since)
        nc->unavail_since = now;
    if (now - nc->unavail_since < NBD_UNAVAIL_WAIT_NS)
        return -EAGAIN;
    /* unavail_since stays: the connection's next options do not wait
     * again (the handshake deadline would end it first) */
    log_info("%s: nbd: %s refused after %llu s: %s", nc->c->peer, nbd_opt_name(opt),
             (unsigned long long)(NBD_UNAVAIL_WAIT_NS / 1000000000ull), e->unavailable);
    if (opt != NBD_OPT_EXPORT_NAME)
        send_opt_reply(nc, opt, NBD_REP_ERR_UNKNOWN, e->unavailable,
                       (uint32_t)strlen(e->unavailable));
    return 0;
}

static int opt_export_name(struct nbd_conn *nc, const uint8_t *data, uint32_t len)
{
    struct conn *c = nc->c;
    CLEANUP(nbd_export_table_unref) struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e =
        len <= NBD_MAX_STRING ? nbd_export_table_find(t, (const char *)data, len) : NULL;
    uint32_t why = export_refusal(nc, e);
    if (export_unavailable(e, why) && unavailable_wait(nc, NBD_OPT_EXPORT_NAME, e) == -EAGAIN)
        return -EAGAIN;
    nc->unavail_since = 0;
    if (why) {
        log_info("%s: nbd: EXPORT_NAME '%.*s' refused (%s), closing", c->peer, (int)MIN(len, 256u),
                 (const char *)data,
                 why == NBD_REP_ERR_TLS_REQD ? "TLS required" : "no such export");
        return -ENOENT;
    }
    nbd_conn_enter_transmission(nc, e, export_eflags(nc, e));
    uint8_t b[8 + 2 + 124] = {0};
    be64_store(b, nc->caps.size);
    be16_store(b + 8, nc->caps.eflags);
    conn_send_copy(c, b, nc->no_zeroes ? 10 : sizeof(b));
    return 0;
}

static void opt_list(struct nbd_conn *nc, uint32_t opt, uint32_t len)
{
    if (len != 0) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        return;
    }
    struct nbd_export_table *t = nbd_exports_current();
    uint8_t b[4 + 2 * NBD_MAX_STRING];
    for (size_t i = 0; i < t->count; i++) {
        struct nbd_export *e = t->exports[i];
        /* Exports this session may not open (e.g. TLS required) are not
         * even named to it; one becoming ready is. */
        uint32_t why = export_refusal(nc, e);
        if (why && !export_unavailable(e, why))
            continue;
        size_t nl = MIN(strlen(e->name), (size_t)NBD_MAX_STRING);
        size_t dl = MIN(strlen(e->description), (size_t)NBD_MAX_STRING - 8);
        be32_store(b, (uint32_t)nl);
        memcpy(b + 4, e->name, nl);
        memcpy(b + 4 + nl, e->description, dl);
        send_opt_reply(nc, opt, NBD_REP_SERVER, b, (uint32_t)(4 + nl + dl));
    }
    nbd_export_table_unref(t);
    send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
}

static void send_info(struct nbd_conn *nc, uint32_t opt, uint16_t type, const void *data,
                      size_t len)
{
    uint8_t b[2 + NBD_MAX_STRING];
    len = MIN(len, (size_t)NBD_MAX_STRING);
    be16_store(b, type);
    memcpy(b + 2, data, len);
    send_opt_reply(nc, opt, NBD_REP_INFO, b, (uint32_t)(2 + len));
}

/* INFO or GO: 0, or -EAGAIN to process it again later (an export
 * becoming ready). */
static int opt_info_go(struct nbd_conn *nc, uint32_t opt, const uint8_t *data, uint32_t len)
{
    struct nbd_opt_go go;
    if (nbd_opt_go_parse(data, len, &go) < 0) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        return 0;
    }
    CLEANUP(nbd_export_table_unref) struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e = nbd_export_table_find(t, go.name, go.name_len);
    uint32_t why = export_refusal(nc, e);
    if (export_unavailable(e, why))
        return unavailable_wait(nc, opt, e);
    nc->unavail_since = 0;
    if (why) {
        log_debug("%s: nbd: %s '%.*s' refused (0x%x)", nc->c->peer, nbd_opt_name(opt),
                  (int)go.name_len, go.name, why);
        send_opt_reply(nc, opt, why, NULL, 0);
        return 0;
    }
    uint8_t b[12];
    be64_store(b, volume_size(e->vol));
    be16_store(b + 8, export_eflags(nc, e));
    send_info(nc, opt, NBD_INFO_EXPORT, b, 10);
    for (unsigned i = 0; i < go.nreqs; i++) {
        uint16_t type = be16_load(go.reqs + 2 * i);
        if (type == NBD_INFO_NAME)
            send_info(nc, opt, NBD_INFO_NAME, e->name, strlen(e->name));
        else if (type == NBD_INFO_DESCRIPTION && e->description[0])
            send_info(nc, opt, NBD_INFO_DESCRIPTION, e->description, strlen(e->description));
    }
    uint8_t bs[12];
    uint32_t pref = MAX(4096u, volume_block_size(e->vol));
    be32_store(bs, 1);
    be32_store(bs + 4, pref);
    be32_store(bs + 8, nc->settings->max_request);
    send_info(nc, opt, NBD_INFO_BLOCK_SIZE, bs, 12);
    send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
    if (opt == NBD_OPT_GO)
        nbd_conn_enter_transmission(nc, e, export_eflags(nc, e));
    return 0;
}

/* The dirty-bitmap side of a LIST/SET_META_CONTEXT: does it need the
 * export's bases (or a map) looked up? want: the base a SET names. */
static bool meta_dirty_wanted(const struct nbd_opt_meta *m, bool listing, const char **want,
                              uint32_t *want_len)
{
    static const char prefix[] = NBD_META_DIRTY_PREFIX;
    const uint32_t plen = sizeof(prefix) - 1;
    uint32_t pos = 0, qlen;
    const char *q;
    bool wanted = listing && m->nqueries == 0;

    *want = "";
    *want_len = 0;
    while (nbd_opt_meta_next(m, &pos, &q, &qlen) == 1) {
        if (listing) {
            wanted |= nbd_dirty_query_lists(q, qlen, "");
        } else if (qlen > plen && memcmp(q, prefix, plen) == 0 && !*want_len) {
            *want = q + plen;
            *want_len = qlen - plen;
            wanted = true;
        }
    }
    return wanted;
}

/* Before a LIST/SET_META_CONTEXT is answered: start looking up the
 * dirty-bitmap contexts of export e (an I/O pool job: the database and
 * the walk block), and -EAGAIN until it is done. 0: nothing to look up,
 * or the lookup is done (its result in nc->dirty_lookup). */
static int meta_dirty_prepare(struct nbd_conn *nc, const struct nbd_export *e,
                              const struct nbd_opt_meta *m, bool listing)
{
    const char *want;
    uint32_t want_len;

    if (nc->dirty_lookup)
        return nbd_dirty_done(nc->dirty_lookup) ? 0 : -EAGAIN;
    if (!e->dataset || !meta_dirty_wanted(m, listing, &want, &want_len))
        return 0;
    nc->dirty_lookup = nbd_dirty_start(e->dataset, want, want_len);
    return nc->dirty_lookup ? -EAGAIN : 0;
}

static void send_meta_context(struct nbd_conn *nc, uint32_t opt, uint32_t id, const char *prefix,
                              const char *name)
{
    uint8_t b[4 + NBD_MAX_STRING];
    size_t pl = strlen(prefix), nl = MIN(strlen(name), NBD_MAX_STRING - pl);
    be32_store(b, id);
    memcpy(b + 4, prefix, pl);
    memcpy(b + 4 + pl, name, nl);
    send_opt_reply(nc, opt, NBD_REP_META_CONTEXT, b, (uint32_t)(4 + pl + nl));
}

/* The dirty-bitmap contexts of a LIST (every base a query asks for) or a
 * SET (the one it named, if it is a base: its map becomes the
 * connection's). */
static void meta_dirty_reply(struct nbd_conn *nc, uint32_t opt, const struct nbd_opt_meta *m,
                             bool listing)
{
    struct nbd_dirty *d = nc->dirty_lookup;
    nc->dirty_lookup = NULL;
    if (!listing) {
        nbd_dirty_put(nc->dirty);
        nc->dirty = NULL;
    }
    if (!d)
        return;
    for (size_t i = 0; listing && i < nbd_dirty_base_count(d); i++) {
        const char *name = nbd_dirty_base(d, i), *q;
        uint32_t pos = 0, qlen;
        bool asked = m->nqueries == 0;
        while (!asked && nbd_opt_meta_next(m, &pos, &q, &qlen) == 1)
            asked = nbd_dirty_query_lists(q, qlen, name);
        if (asked)
            send_meta_context(nc, opt, NBD_META_ID_DIRTY, NBD_META_DIRTY_PREFIX, name);
    }
    if (!listing && nbd_dirty_have_map(d)) {
        send_meta_context(nc, opt, NBD_META_ID_DIRTY, NBD_META_DIRTY_PREFIX, nbd_dirty_want(d));
        nc->dirty = d;
        return;
    }
    nbd_dirty_put(d);
}

/* LIST/SET_META_CONTEXT: 0, or -EAGAIN to process it again later (an
 * export becoming ready: clients set the context before GO; the
 * dirty-bitmap lookup). */
static int opt_meta(struct nbd_conn *nc, uint32_t opt, const uint8_t *data, uint32_t len)
{
    bool listing = opt == NBD_OPT_LIST_META_CONTEXT;
    struct nbd_opt_meta m;
    if ((!listing && !nc->structured) || nbd_opt_meta_parse(data, len, &m) < 0) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
        return 0;
    }
    struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e = nbd_export_table_find(t, m.name, m.name_len);
    uint32_t why = export_refusal(nc, e);
    bool unavailable = export_unavailable(e, why);
    int wait = unavailable ? unavailable_wait(nc, opt, e) : 0;
    if (wait == 0 && !why)
        wait = meta_dirty_prepare(nc, e, &m, listing);
    nbd_export_table_unref(t);
    if (wait == -EAGAIN)
        return -EAGAIN;
    if (why) {
        if (!unavailable)
            send_opt_reply(nc, opt, why, NULL, 0); /* else sent with its reason */
        return 0;
    }
    bool match = listing && m.nqueries == 0;
    uint32_t pos = 0, qlen;
    const char *q;
    while (!match && nbd_opt_meta_next(&m, &pos, &q, &qlen) == 1)
        match = nbd_meta_query_matches(q, qlen, listing);
    if (match)
        send_meta_context(nc, opt, NBD_META_ID_BASE_ALLOCATION, NBD_META_BASE_ALLOCATION, "");
    if (!listing)
        nc->meta_alloc = match;
    meta_dirty_reply(nc, opt, &m, listing);
    send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
    return 0;
}

/* One option. 0 progress, 1 need more input, <0 close. */
static void opt_starttls(struct nbd_conn *nc, uint32_t opt, uint32_t len)
{
    if (len != 0 || nc->tls) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
    } else if (!nc->settings->tls) {
        send_opt_reply(nc, opt, NBD_REP_ERR_UNSUP, NULL, 0);
    } else {
        send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
        nc->starttls_pending = true;
    }
}

static void opt_structured(struct nbd_conn *nc, uint32_t opt, uint32_t len)
{
    if (len != 0 || nc->structured) {
        send_opt_reply(nc, opt, NBD_REP_ERR_INVALID, NULL, 0);
    } else {
        nc->structured = true;
        send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
    }
}

/* One option whose data (len bytes) is all in the input buffer: its reply
 * is queued. Returns 0, or -errno to close (ABORT, a refused export). */
static int opt_dispatch(struct nbd_conn *nc, uint32_t opt, const uint8_t *data, uint32_t len)
{
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        return opt_export_name(nc, data, len);
    case NBD_OPT_ABORT:
        send_opt_reply(nc, opt, NBD_REP_ACK, NULL, 0);
        return -ECONNABORTED;
    case NBD_OPT_LIST:
        opt_list(nc, opt, len);
        return 0;
    case NBD_OPT_STARTTLS:
        opt_starttls(nc, opt, len);
        return 0;
    case NBD_OPT_INFO:
    case NBD_OPT_GO:
        return opt_info_go(nc, opt, data, len);
    case NBD_OPT_STRUCTURED_REPLY:
        opt_structured(nc, opt, len);
        return 0;
    case NBD_OPT_LIST_META_CONTEXT:
    case NBD_OPT_SET_META_CONTEXT:
        return opt_meta(nc, opt, data, len);
    default:
        send_opt_reply(nc, opt, NBD_REP_ERR_UNSUP, NULL, 0);
        return 0;
    }
}

/* STARTTLS was acknowledged: send the reply in clear, then start TLS.
 * Returns 1 (negotiation goes on under TLS) or -errno to close. */
static int starttls_now(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    nc->starttls_pending = false;
    if (conn_input_len(c) != 0) {
        log_warn("%s: nbd: data after STARTTLS before the TLS handshake, closing", c->peer);
        return -EPROTO;
    }
    if (conn_flush_now(c) < 0) {
        log_warn("%s: nbd: could not send the STARTTLS reply, closing", c->peer);
        return -EIO;
    }
    int rc = tls_conn_start(c, nc->settings->tls);
    if (rc < 0)
        return rc;
    nc->tls = true;
    /* Negotiation starts over under TLS (the spec forbids carrying
     * anything across). */
    nc->structured = false;
    nc->meta_alloc = false;
    nbd_dirty_put(nc->dirty);
    nc->dirty = NULL;
    return 1;
}

int nbd_handshake_option(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    size_t avail = conn_input_len(c);
    if (avail < NBD_OPT_HEADER_LEN)
        return 1;
    const uint8_t *p = conn_input(c);
    if (be64_load(p) != NBD_IHAVEOPT) {
        log_warn("%s: nbd: bad option magic, closing", c->peer);
        return -EPROTO;
    }
    uint32_t opt = be32_load(p + 8), len = be32_load(p + 12);
    if (++nc->options > NBD_MAX_OPTIONS) {
        log_warn("%s: nbd: more than %u options, closing", c->peer, NBD_MAX_OPTIONS);
        return -EPROTO;
    }
    if (len > NBD_OPT_MAX_LEN) {
        if (opt == NBD_OPT_EXPORT_NAME || len > NBD_SKIP_MAX) {
            log_warn("%s: nbd: option %s with %u bytes of data, closing", c->peer,
                     nbd_opt_name(opt), len);
            return -EPROTO;
        }
        conn_consume(c, NBD_OPT_HEADER_LEN);
        nc->skip = len;
        send_opt_reply(nc, opt, NBD_REP_ERR_TOO_BIG, NULL, 0);
        return 0;
    }
    if (avail < NBD_OPT_HEADER_LEN + len) {
        if (conn_input_reserve(c, NBD_OPT_HEADER_LEN + len) < 0)
            return -ENOMEM;
        return 1;
    }
    log_debug("%s: nbd: option %s (%u bytes)", c->peer, nbd_opt_name(opt), len);
    int rc = opt_dispatch(nc, opt, p + NBD_OPT_HEADER_LEN, len);
    if (rc == -EAGAIN) {
        /* kept in the input: the same option again after a pause */
        nc->options--;
        nbd_conn_retry_input(nc, nc->dirty_lookup ? NBD_DIRTY_RETRY_NS : NBD_UNAVAIL_RETRY_NS);
        return 1;
    }
    conn_consume(c, NBD_OPT_HEADER_LEN + len);
    if (rc < 0)
        return rc;
    return nc->starttls_pending ? starttls_now(nc) : 0;
}

int nbd_handshake_client_flags(struct nbd_conn *nc)
{
    struct conn *c = nc->c;
    if (conn_input_len(c) < 4)
        return 1;
    uint32_t f = be32_load(conn_input(c));
    conn_consume(c, 4);
    if (f & ~(uint32_t)(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)) {
        log_warn("%s: nbd: unknown client flags 0x%x, closing", c->peer, f);
        return -EPROTO;
    }
    if (!(f & NBD_FLAG_C_FIXED_NEWSTYLE)) {
        log_warn("%s: nbd: client does not support fixed newstyle, closing", c->peer);
        return -EPROTO;
    }
    nc->no_zeroes = f & NBD_FLAG_C_NO_ZEROES;
    nc->state = ST_OPTIONS;
    return 0;
}

int nbd_handshake_hello(struct nbd_conn *nc)
{
    uint8_t hello[NBD_OLD_HELLO_LEN];
    be64_store(hello, NBD_MAGIC);
    be64_store(hello + 8, NBD_IHAVEOPT);
    be16_store(hello + 16, NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
    return conn_send_copy(nc->c, hello, sizeof(hello));
}
