/*
 * The NBD wire protocol (https://github.com/NetworkBlockDevice/nbd, doc/proto.md):
 * constants, and the pure parts of the server side — option and request
 * parsing, the one place that validates every request, and reply builders.
 * Nothing here does I/O or allocates; every function is thread-safe and is
 * unit-tested and fuzzed in isolation (tests/unit/nbd, fuzz/fuzz_nbd.c).
 */
#ifndef BLOCKD_NBD_PROTO_H
#define BLOCKD_NBD_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NBD_MAGIC 0x4e42444d41474943ULL     /* "NBDMAGIC" */
#define NBD_IHAVEOPT 0x49484156454f5054ULL  /* "IHAVEOPT" */
#define NBD_REP_MAGIC 0x0003e889045565a9ULL /* option reply */
#define NBD_REQUEST_MAGIC 0x25609513u
#define NBD_SIMPLE_REPLY_MAGIC 0x67446698u
#define NBD_STRUCTURED_REPLY_MAGIC 0x668e33efu

/* Handshake flags (server) and client flags. */
#define NBD_FLAG_FIXED_NEWSTYLE (1u << 0)
#define NBD_FLAG_NO_ZEROES (1u << 1)
#define NBD_FLAG_C_FIXED_NEWSTYLE NBD_FLAG_FIXED_NEWSTYLE
#define NBD_FLAG_C_NO_ZEROES NBD_FLAG_NO_ZEROES

/* Transmission flags. */
#define NBD_FLAG_HAS_FLAGS (1u << 0)
#define NBD_FLAG_READ_ONLY (1u << 1)
#define NBD_FLAG_SEND_FLUSH (1u << 2)
#define NBD_FLAG_SEND_FUA (1u << 3)
#define NBD_FLAG_ROTATIONAL (1u << 4)
#define NBD_FLAG_SEND_TRIM (1u << 5)
#define NBD_FLAG_SEND_WRITE_ZEROES (1u << 6)
#define NBD_FLAG_SEND_DF (1u << 7)
#define NBD_FLAG_CAN_MULTI_CONN (1u << 8)
#define NBD_FLAG_SEND_RESIZE (1u << 9)
#define NBD_FLAG_SEND_CACHE (1u << 10)
#define NBD_FLAG_SEND_FAST_ZERO (1u << 11)

/* Options. */
enum nbd_opt {
    NBD_OPT_EXPORT_NAME = 1,
    NBD_OPT_ABORT = 2,
    NBD_OPT_LIST = 3,
    NBD_OPT_STARTTLS = 5,
    NBD_OPT_INFO = 6,
    NBD_OPT_GO = 7,
    NBD_OPT_STRUCTURED_REPLY = 8,
    NBD_OPT_LIST_META_CONTEXT = 9,
    NBD_OPT_SET_META_CONTEXT = 10,
};

/* Option reply types. */
#define NBD_REP_ACK 1u
#define NBD_REP_SERVER 2u
#define NBD_REP_INFO 3u
#define NBD_REP_META_CONTEXT 4u
#define NBD_REP_FLAG_ERROR (1u << 31)
#define NBD_REP_ERR_UNSUP (NBD_REP_FLAG_ERROR | 1u)
#define NBD_REP_ERR_POLICY (NBD_REP_FLAG_ERROR | 2u)
#define NBD_REP_ERR_INVALID (NBD_REP_FLAG_ERROR | 3u)
#define NBD_REP_ERR_PLATFORM (NBD_REP_FLAG_ERROR | 4u)
#define NBD_REP_ERR_TLS_REQD (NBD_REP_FLAG_ERROR | 5u)
#define NBD_REP_ERR_UNKNOWN (NBD_REP_FLAG_ERROR | 6u)
#define NBD_REP_ERR_SHUTDOWN (NBD_REP_FLAG_ERROR | 7u)
#define NBD_REP_ERR_BLOCK_SIZE_REQD (NBD_REP_FLAG_ERROR | 8u)
#define NBD_REP_ERR_TOO_BIG (NBD_REP_FLAG_ERROR | 9u)

/* NBD_REP_INFO types. */
#define NBD_INFO_EXPORT 0u
#define NBD_INFO_NAME 1u
#define NBD_INFO_DESCRIPTION 2u
#define NBD_INFO_BLOCK_SIZE 3u

/* Commands and command flags. */
enum nbd_cmd {
    NBD_CMD_READ = 0,
    NBD_CMD_WRITE = 1,
    NBD_CMD_DISC = 2,
    NBD_CMD_FLUSH = 3,
    NBD_CMD_TRIM = 4,
    NBD_CMD_CACHE = 5,
    NBD_CMD_WRITE_ZEROES = 6,
    NBD_CMD_BLOCK_STATUS = 7,
};
#define NBD_CMD_FLAG_FUA (1u << 0)
#define NBD_CMD_FLAG_NO_HOLE (1u << 1)
#define NBD_CMD_FLAG_DF (1u << 2)
#define NBD_CMD_FLAG_REQ_ONE (1u << 3)
#define NBD_CMD_FLAG_FAST_ZERO (1u << 4)

/* Structured reply chunk types and flags. */
#define NBD_REPLY_FLAG_DONE (1u << 0)
#define NBD_REPLY_TYPE_NONE 0u
#define NBD_REPLY_TYPE_OFFSET_DATA 1u
#define NBD_REPLY_TYPE_OFFSET_HOLE 2u
#define NBD_REPLY_TYPE_BLOCK_STATUS 5u
#define NBD_REPLY_TYPE_ERROR 32769u
#define NBD_REPLY_TYPE_ERROR_OFFSET 32770u

/* Block status (base:allocation). */
#define NBD_STATE_HOLE (1u << 0)
#define NBD_STATE_ZERO (1u << 1)

/* NBD error numbers (wire values). */
#define NBD_EPERM 1u
#define NBD_EIO 5u
#define NBD_ENOMEM 12u
#define NBD_EINVAL 22u
#define NBD_ENOSPC 28u
#define NBD_EOVERFLOW 75u
#define NBD_ENOTSUP 95u
#define NBD_ESHUTDOWN 108u

#define NBD_META_BASE_ALLOCATION "base:allocation"
#define NBD_META_ID_BASE_ALLOCATION 1u

/* Wire sizes. */
#define NBD_OLD_HELLO_LEN 18u        /* NBDMAGIC + IHAVEOPT + u16 flags */
#define NBD_OPT_HEADER_LEN 16u       /* IHAVEOPT + u32 opt + u32 len */
#define NBD_OPT_REPLY_HEADER_LEN 20u /* magic + opt + type + len */
#define NBD_REQUEST_LEN 28u
#define NBD_SIMPLE_REPLY_LEN 16u
#define NBD_CHUNK_HEADER_LEN 20u
#define NBD_MAX_STRING 4096u /* names, descriptions, meta context queries */

/* One request header as read from the wire. */
struct nbd_request {
    uint16_t flags;
    uint16_t type;
    uint64_t cookie;
    uint64_t offset;
    uint32_t length;
};

/* What the connection negotiated, for validation. */
struct nbd_session_caps {
    uint16_t eflags;     /* transmission flags sent to the client */
    bool structured;     /* STRUCTURED_REPLY negotiated */
    bool meta_alloc;     /* base:allocation context selected */
    uint64_t size;       /* export size in bytes */
    uint32_t max_length; /* max READ/WRITE payload */
};

/* Parse a 28-byte request header. -EPROTO on bad magic. */
int nbd_request_parse(const uint8_t *buf, struct nbd_request *out);

/* Validate a request against the session. Returns 0, or a positive NBD
 * error (NBD_EINVAL, NBD_EPERM, NBD_ENOSPC, ...) to reply with; reason
 * (static string) says why, for the debug log. */
uint32_t nbd_request_validate(const struct nbd_request *req, const struct nbd_session_caps *s,
                              const char **reason);

/* Map -errno from the store to the NBD wire error. */
uint32_t nbd_errno_to_wire(int err);
const char *nbd_cmd_name(unsigned type);
const char *nbd_opt_name(uint32_t opt);

/* Header builders; each returns the number of bytes written into out. */
size_t nbd_simple_reply(uint8_t out[NBD_SIMPLE_REPLY_LEN], uint32_t error, uint64_t cookie);
size_t nbd_chunk_header(uint8_t out[NBD_CHUNK_HEADER_LEN], uint16_t flags, uint16_t type,
                        uint64_t cookie, uint32_t length);
size_t nbd_opt_reply_header(uint8_t out[NBD_OPT_REPLY_HEADER_LEN], uint32_t opt, uint32_t type,
                            uint32_t length);

/* A parsed INFO/GO option payload. name points into the input buffer. */
struct nbd_opt_go {
    const char *name; /* not NUL-terminated */
    uint32_t name_len;
    uint16_t nreqs;
    const uint8_t *reqs; /* nreqs × be16 */
};
/* 0 or -EINVAL (lengths inconsistent / too long). */
int nbd_opt_go_parse(const uint8_t *data, uint32_t len, struct nbd_opt_go *out);

/* A parsed LIST/SET_META_CONTEXT payload; queries are iterated with
 * nbd_opt_meta_next. */
struct nbd_opt_meta {
    const char *name;
    uint32_t name_len;
    uint32_t nqueries;
    const uint8_t *queries; /* the remaining bytes */
    uint32_t queries_len;
};
int nbd_opt_meta_parse(const uint8_t *data, uint32_t len, struct nbd_opt_meta *out);
/* Walk the queries: *pos starts at 0. Returns 1 with q/qlen set, 0 at end,
 * -EINVAL on malformed data. */
int nbd_opt_meta_next(const struct nbd_opt_meta *m, uint32_t *pos, const char **q, uint32_t *qlen);
/* Does query q select base:allocation? For LIST, "base:" matches too. */
bool nbd_meta_query_matches(const char *q, uint32_t qlen, bool listing);

#endif
