/*
 * Text key=value segments (RFC 7143 §6) and the operational-key negotiation
 * engine. Keys are described by a table {name, type, min, max, our value};
 * one generic routine applies the rules (boolean AND/OR, numeric min/max,
 * declarative, list) and answers Reject for illegal values and NotUnderstood
 * for unknown keys. Pure: no I/O, no globals; used by login and Text.
 */
#ifndef BLOCKD_ISCSI_TEXT_H
#define BLOCKD_ISCSI_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ISCSI_KEY_NAME_MAX 63
#define ISCSI_VALUE_MAX 8192 /* RFC 7143 §6.1: values up to 8192 bytes */

/* Growable output text ("key=value\0" ...), capped at max bytes. */
struct iscsi_text_out {
    char *buf;
    size_t len, cap, max;
};
void iscsi_text_out_init(struct iscsi_text_out *o, size_t max);
void iscsi_text_out_free(struct iscsi_text_out *o);
/* Append key=value; -E2BIG past max, -ENOMEM. */
int iscsi_text_add(struct iscsi_text_out *o, const char *key, const char *value);
int iscsi_text_add_u32(struct iscsi_text_out *o, const char *key, uint32_t value);

/*
 * Walk the pairs of a text segment (len bytes, NUL separated; trailing NULs
 * allowed). fn is called with NUL-terminated key and value; the data is
 * copied so the input need not be terminated. A pair without '=', an empty
 * or too long key, a key with characters outside [A-Za-z0-9.-+@_] or a
 * value longer than ISCSI_VALUE_MAX returns -EINVAL; fn's negative return
 * stops the walk and is returned.
 */
typedef int (*iscsi_text_fn)(const char *key, const char *value, void *arg);
int iscsi_text_parse(const char *data, size_t len, iscsi_text_fn fn, void *arg);

/* The negotiated operational parameters of a session/connection. */
struct iscsi_params {
    bool header_digest; /* CRC32C */
    bool data_digest;
    uint32_t max_connections;
    bool initial_r2t;
    bool immediate_data;
    uint32_t max_send_dsl; /* the initiator's MaxRecvDataSegmentLength */
    uint32_t max_recv_dsl; /* ours (declared to the initiator) */
    uint32_t max_burst;
    uint32_t first_burst;
    uint32_t time2wait;
    uint32_t time2retain;
    uint32_t max_outstanding_r2t;
    bool data_pdu_in_order;
    bool data_seq_in_order;
    uint32_t error_recovery_level;
    bool ifmarker, ofmarker;
};
/* RFC 7143 defaults (our MaxRecvDataSegmentLength = 8192 until declared). */
void iscsi_params_default(struct iscsi_params *p);

/* Our side's offer for the keys (what the target supports/prefers). */
struct iscsi_target_limits {
    uint32_t max_recv_dsl; /* declared MaxRecvDataSegmentLength */
    uint32_t max_burst;
    uint32_t first_burst;
    uint32_t max_outstanding_r2t;
    bool allow_digests; /* accept CRC32C when offered */
};
void iscsi_target_limits_default(struct iscsi_target_limits *l);

/* Negotiation state of one login (or one Text exchange). */
struct iscsi_neg {
    struct iscsi_params params;
    struct iscsi_target_limits limits;
    uint64_t seen;   /* bit per table entry: offered once already */
    bool sent_mrdsl; /* our MaxRecvDataSegmentLength was declared */
};
void iscsi_neg_init(struct iscsi_neg *n, const struct iscsi_target_limits *limits);

/*
 * Handle one key offered by the initiator, appending the answer to out.
 * Returns:
 *   0        answered (a result, Reject, NotUnderstood, or nothing for a
 *            declarative key that needs no answer)
 *   1        a login/security key the caller handles (InitiatorName,
 *            TargetName, SessionType, InitiatorAlias, AuthMethod, CHAP_*,
 *            SendTargets)
 *   -EPROTO  the key was offered twice (the login must fail)
 *   -E2BIG / -ENOMEM  the answer did not fit
 */
int iscsi_neg_key(struct iscsi_neg *n, const char *key, const char *value,
                  struct iscsi_text_out *out);
/* Whether key is one of the keys RFC 7143 defines (the table). */
bool iscsi_key_known(const char *key);
/* Append NotUnderstood for key (unknown keys). */
int iscsi_neg_not_understood(struct iscsi_text_out *out, const char *key);
/* Declare our MaxRecvDataSegmentLength if not done yet in this login. */
int iscsi_neg_declare(struct iscsi_neg *n, struct iscsi_text_out *out);
/* Finish: apply the RFC constraint FirstBurstLength ≤ MaxBurstLength. */
void iscsi_neg_finish(struct iscsi_neg *n);

/* Strict number parsing as RFC 7143 §5.1 allows (decimal or 0x hex),
 * no sign, no trailing garbage. 0 or -EINVAL/-ERANGE. */
int iscsi_parse_u64(const char *s, uint64_t *out);

#endif
