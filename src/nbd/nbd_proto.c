/* Pure NBD protocol helpers: parsing, validation, reply headers. */
#include "nbd/nbd_proto.h"

#include <errno.h>
#include <string.h>

#include "core/util.h"

int nbd_request_parse(const uint8_t *buf, struct nbd_request *out)
{
    if (be32_load(buf) != NBD_REQUEST_MAGIC)
        return -EPROTO;
    out->flags = be16_load(buf + 4);
    out->type = be16_load(buf + 6);
    out->cookie = be64_load(buf + 8);
    out->offset = be64_load(buf + 16);
    out->length = be32_load(buf + 24);
    return 0;
}

/* Per command: flags it may carry, and whether it must be advertised. */
struct nbd_cmd_rule {
    uint16_t allowed_flags;
    uint16_t needs_eflag; /* 0: always available */
    bool writes;          /* refused with EPERM on a read-only export */
    bool ranged;          /* offset/length name a range of the export */
    bool payload_limit;   /* length bounded by max_length */
};

static const struct nbd_cmd_rule cmd_rules[] = {
    [NBD_CMD_READ] = {NBD_CMD_FLAG_DF, 0, false, true, true},
    [NBD_CMD_WRITE] = {NBD_CMD_FLAG_FUA, 0, true, true, true},
    [NBD_CMD_DISC] = {0, 0, false, false, false},
    [NBD_CMD_FLUSH] = {0, NBD_FLAG_SEND_FLUSH, false, false, false},
    [NBD_CMD_TRIM] = {NBD_CMD_FLAG_FUA, NBD_FLAG_SEND_TRIM, true, true, false},
    [NBD_CMD_CACHE] = {0, NBD_FLAG_SEND_CACHE, false, true, false},
    [NBD_CMD_WRITE_ZEROES] = {NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE | NBD_CMD_FLAG_FAST_ZERO,
                              NBD_FLAG_SEND_WRITE_ZEROES, true, true, false},
    [NBD_CMD_BLOCK_STATUS] = {NBD_CMD_FLAG_REQ_ONE, 0, false, true, false},
};

uint32_t nbd_request_validate(const struct nbd_request *req, const struct nbd_session_caps *s,
                              const char **reason)
{
    const char *dummy;
    if (!reason)
        reason = &dummy;
    if (req->type >= ARRAY_SIZE(cmd_rules)) {
        *reason = "unknown command";
        return NBD_EINVAL;
    }
    const struct nbd_cmd_rule *rule = &cmd_rules[req->type];
    if (req->flags & ~rule->allowed_flags) {
        *reason = "flag not valid for this command";
        return NBD_EINVAL;
    }
    if ((req->flags & NBD_CMD_FLAG_FUA) && !(s->eflags & NBD_FLAG_SEND_FUA)) {
        *reason = "FUA not negotiated";
        return NBD_EINVAL;
    }
    if ((req->flags & NBD_CMD_FLAG_FAST_ZERO) && !(s->eflags & NBD_FLAG_SEND_FAST_ZERO)) {
        *reason = "FAST_ZERO not negotiated";
        return NBD_EINVAL;
    }
    if ((req->flags & NBD_CMD_FLAG_DF) && !s->structured) {
        *reason = "DF without structured replies";
        return NBD_EINVAL;
    }
    if (rule->writes && (s->eflags & NBD_FLAG_READ_ONLY)) {
        *reason = "export is read-only";
        return NBD_EPERM;
    }
    if (rule->needs_eflag && !(s->eflags & rule->needs_eflag)) {
        *reason = "command not advertised";
        return NBD_EINVAL;
    }
    if (req->type == NBD_CMD_BLOCK_STATUS && !s->meta_alloc) {
        *reason = "no meta context negotiated";
        return NBD_EINVAL;
    }
    if (req->type == NBD_CMD_FLUSH && (req->offset || req->length)) {
        *reason = "flush with offset or length";
        return NBD_EINVAL;
    }
    if (!rule->ranged)
        return 0;
    if (req->length == 0) {
        *reason = "zero length";
        return NBD_EINVAL;
    }
    if (rule->payload_limit && req->length > s->max_length) {
        *reason = "request larger than the maximum";
        return NBD_EINVAL;
    }
    if (req->offset > s->size || req->length > s->size - req->offset) {
        *reason = "range past the end of the export";
        return (req->type == NBD_CMD_WRITE || req->type == NBD_CMD_WRITE_ZEROES) ? NBD_ENOSPC
                                                                                 : NBD_EINVAL;
    }
    return 0;
}

uint32_t nbd_errno_to_wire(int err)
{
    if (err < 0)
        err = -err;
    switch (err) {
    case 0:
        return 0;
    case EPERM:
    case EROFS:
    case EACCES:
        return NBD_EPERM;
    case ENOMEM:
        return NBD_ENOMEM;
    case EINVAL:
    case ERANGE:
        return NBD_EINVAL;
    case ENOSPC:
    case EFBIG:
    case EDQUOT:
        return NBD_ENOSPC;
    case EOVERFLOW:
        return NBD_EOVERFLOW;
    case ENOTSUP:
#if EOPNOTSUPP != ENOTSUP
    case EOPNOTSUPP:
#endif
        return NBD_ENOTSUP;
    case ESHUTDOWN:
        return NBD_ESHUTDOWN;
    default:
        return NBD_EIO;
    }
}

const char *nbd_cmd_name(unsigned type)
{
    static const char *const names[] = {"READ", "WRITE", "DISC",         "FLUSH",
                                        "TRIM", "CACHE", "WRITE_ZEROES", "BLOCK_STATUS"};
    return type < ARRAY_SIZE(names) ? names[type] : "UNKNOWN";
}

const char *nbd_opt_name(uint32_t opt)
{
    switch (opt) {
    case NBD_OPT_EXPORT_NAME:
        return "EXPORT_NAME";
    case NBD_OPT_ABORT:
        return "ABORT";
    case NBD_OPT_LIST:
        return "LIST";
    case NBD_OPT_STARTTLS:
        return "STARTTLS";
    case NBD_OPT_INFO:
        return "INFO";
    case NBD_OPT_GO:
        return "GO";
    case NBD_OPT_STRUCTURED_REPLY:
        return "STRUCTURED_REPLY";
    case NBD_OPT_LIST_META_CONTEXT:
        return "LIST_META_CONTEXT";
    case NBD_OPT_SET_META_CONTEXT:
        return "SET_META_CONTEXT";
    default:
        return "UNKNOWN";
    }
}

size_t nbd_simple_reply(uint8_t out[NBD_SIMPLE_REPLY_LEN], uint32_t error, uint64_t cookie)
{
    be32_store(out, NBD_SIMPLE_REPLY_MAGIC);
    be32_store(out + 4, error);
    be64_store(out + 8, cookie);
    return NBD_SIMPLE_REPLY_LEN;
}

size_t nbd_chunk_header(uint8_t out[NBD_CHUNK_HEADER_LEN], uint16_t flags, uint16_t type,
                        uint64_t cookie, uint32_t length)
{
    be32_store(out, NBD_STRUCTURED_REPLY_MAGIC);
    be16_store(out + 4, flags);
    be16_store(out + 6, type);
    be64_store(out + 8, cookie);
    be32_store(out + 16, length);
    return NBD_CHUNK_HEADER_LEN;
}

size_t nbd_opt_reply_header(uint8_t out[NBD_OPT_REPLY_HEADER_LEN], uint32_t opt, uint32_t type,
                            uint32_t length)
{
    be64_store(out, NBD_REP_MAGIC);
    be32_store(out + 8, opt);
    be32_store(out + 12, type);
    be32_store(out + 16, length);
    return NBD_OPT_REPLY_HEADER_LEN;
}

int nbd_opt_go_parse(const uint8_t *data, uint32_t len, struct nbd_opt_go *out)
{
    if (len < 6)
        return -EINVAL;
    uint32_t nlen = be32_load(data);
    if (nlen > NBD_MAX_STRING || nlen > len - 6)
        return -EINVAL;
    uint16_t nreqs = be16_load(data + 4 + nlen);
    if ((uint64_t)len != 6ull + nlen + 2ull * nreqs)
        return -EINVAL;
    out->name = (const char *)data + 4;
    out->name_len = nlen;
    out->nreqs = nreqs;
    out->reqs = data + 6 + nlen;
    return 0;
}

int nbd_opt_meta_parse(const uint8_t *data, uint32_t len, struct nbd_opt_meta *out)
{
    if (len < 8)
        return -EINVAL;
    uint32_t nlen = be32_load(data);
    if (nlen > NBD_MAX_STRING || nlen > len - 8)
        return -EINVAL;
    out->name = (const char *)data + 4;
    out->name_len = nlen;
    out->nqueries = be32_load(data + 4 + nlen);
    out->queries = data + 8 + nlen;
    out->queries_len = len - 8 - nlen;
    /* Check the whole query list up front so a bad one fails the option
     * before any reply is sent. */
    uint32_t pos = 0, n = 0, qlen;
    const char *q;
    int rc;
    while ((rc = nbd_opt_meta_next(out, &pos, &q, &qlen)) == 1)
        n++;
    if (rc < 0 || pos != out->queries_len || n != out->nqueries)
        return -EINVAL;
    return 0;
}

int nbd_opt_meta_next(const struct nbd_opt_meta *m, uint32_t *pos, const char **q, uint32_t *qlen)
{
    if (*pos == m->queries_len)
        return 0;
    if (m->queries_len - *pos < 4)
        return -EINVAL;
    uint32_t l = be32_load(m->queries + *pos);
    if (l > NBD_MAX_STRING || l > m->queries_len - *pos - 4)
        return -EINVAL;
    *q = (const char *)m->queries + *pos + 4;
    *qlen = l;
    *pos += 4 + l;
    return 1;
}

bool nbd_meta_query_matches(const char *q, uint32_t qlen, bool listing)
{
    static const char full[] = NBD_META_BASE_ALLOCATION;
    if (qlen == sizeof(full) - 1 && memcmp(q, full, qlen) == 0)
        return true;
    return listing && qlen == 5 && memcmp(q, "base:", 5) == 0;
}
