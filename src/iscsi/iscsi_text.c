/* Text segments and the key negotiation table (RFC 7143 §6, §13). */
#include "iscsi/iscsi_text.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/iscsi_pdu.h"

void iscsi_text_out_init(struct iscsi_text_out *o, size_t max)
{
    o->buf = NULL;
    o->len = o->cap = 0;
    o->max = max;
}

void iscsi_text_out_free(struct iscsi_text_out *o)
{
    free(o->buf);
    o->buf = NULL;
    o->len = o->cap = 0;
}

int iscsi_text_add(struct iscsi_text_out *o, const char *key, const char *value)
{
    size_t kl = strlen(key), vl = strlen(value);
    size_t need = kl + 1 + vl + 1;
    if (o->len + need > o->max)
        return -E2BIG;
    if (o->len + need > o->cap) {
        size_t cap = o->cap ? o->cap : 512;
        while (cap < o->len + need)
            cap *= 2;
        char *b = realloc(o->buf, cap);
        if (!b)
            return -ENOMEM;
        o->buf = b;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, key, kl);
    o->buf[o->len + kl] = '=';
    memcpy(o->buf + o->len + kl + 1, value, vl);
    o->buf[o->len + kl + 1 + vl] = '\0';
    o->len += need;
    return 0;
}

int iscsi_text_add_u32(struct iscsi_text_out *o, const char *key, uint32_t value)
{
    char v[16];
    snprintf(v, sizeof(v), "%u", value);
    return iscsi_text_add(o, key, v);
}

static bool key_char_ok(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '-' || ch == '+' || ch == '@' || ch == '_';
}

int iscsi_text_parse(const char *data, size_t len, iscsi_text_fn fn, void *arg)
{
    if (len == 0)
        return 0;
    char *copy = malloc(len + 1);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, data, len);
    copy[len] = '\0';
    int rc = 0;
    size_t pos = 0;
    while (pos < len) {
        char *pair = copy + pos;
        size_t pl = strlen(pair);
        pos += pl + 1;
        if (pl == 0)
            continue; /* padding / trailing NULs */
        char *eq = memchr(pair, '=', pl);
        if (!eq || eq == pair || (size_t)(eq - pair) > ISCSI_KEY_NAME_MAX) {
            rc = -EINVAL;
            break;
        }
        *eq = '\0';
        bool ok = true;
        for (const char *k = pair; *k; k++)
            ok = ok && key_char_ok(*k);
        if (!ok || strlen(eq + 1) > ISCSI_VALUE_MAX) {
            rc = -EINVAL;
            break;
        }
        rc = fn(pair, eq + 1, arg);
        if (rc < 0)
            break;
        rc = 0;
    }
    free(copy);
    return rc;
}

int iscsi_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return -EINVAL;
    uint64_t v = 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        const char *p = s + 2;
        if (!*p || strlen(p) > 16)
            return -ERANGE;
        for (; *p; p++) {
            int d;
            if (*p >= '0' && *p <= '9')
                d = *p - '0';
            else if (*p >= 'a' && *p <= 'f')
                d = *p - 'a' + 10;
            else if (*p >= 'A' && *p <= 'F')
                d = *p - 'A' + 10;
            else
                return -EINVAL;
            v = v * 16 + (uint64_t)d;
        }
    } else {
        for (const char *p = s; *p; p++) {
            if (*p < '0' || *p > '9')
                return -EINVAL;
            uint64_t d = (uint64_t)(*p - '0');
            if (v > (UINT64_MAX - d) / 10)
                return -ERANGE;
            v = v * 10 + d;
        }
    }
    *out = v;
    return 0;
}

void iscsi_params_default(struct iscsi_params *p)
{
    memset(p, 0, sizeof(*p));
    p->max_connections = 1;
    p->initial_r2t = true;
    p->immediate_data = true;
    p->max_send_dsl = 8192;
    p->max_recv_dsl = 8192;
    p->max_burst = 262144;
    p->first_burst = 65536;
    p->time2wait = 2;
    p->time2retain = 20;
    p->max_outstanding_r2t = 1;
    p->data_pdu_in_order = true;
    p->data_seq_in_order = true;
    p->error_recovery_level = 0;
}

void iscsi_target_limits_default(struct iscsi_target_limits *l)
{
    l->max_recv_dsl = 262144;
    l->max_burst = 16776192; /* largest multiple of 512 below 2^24 */
    l->first_burst = 16776192;
    l->max_outstanding_r2t = 16;
    l->allow_digests = true;
}

void iscsi_neg_init(struct iscsi_neg *n, const struct iscsi_target_limits *limits)
{
    memset(n, 0, sizeof(*n));
    iscsi_params_default(&n->params);
    if (limits)
        n->limits = *limits;
    else
        iscsi_target_limits_default(&n->limits);
}

enum key_type {
    KEY_BOOL_AND,    /* result = offered AND ours */
    KEY_BOOL_OR,     /* result = offered OR ours */
    KEY_NUM_MIN,     /* result = min(offered, ours) */
    KEY_NUM_MAX,     /* result = max(offered, ours) */
    KEY_DECL_MRDSL,  /* declarative per direction */
    KEY_DIGEST,      /* list: CRC32C, None */
    KEY_LOGIN,       /* handled by login/text (names, session type, auth) */
    KEY_TARGET_ONLY, /* only a target may send it */
    KEY_MARKER_INT,  /* OFMarkInt/IFMarkInt: irrelevant since markers are No */
    KEY_DECL_IGNORE, /* declarative and informational (X- keys are separate) */
};

enum key_field {
    F_NONE,
    F_HDIGEST,
    F_DDIGEST,
    F_MAXCONN,
    F_INITIAL_R2T,
    F_IMMEDIATE,
    F_MAX_BURST,
    F_FIRST_BURST,
    F_T2W,
    F_T2R,
    F_MAX_R2T,
    F_PDU_ORDER,
    F_SEQ_ORDER,
    F_ERL,
    F_IFMARKER,
    F_OFMARKER,
    F_PROTO_LEVEL,
};

struct key_def {
    const char *name;
    enum key_type type;
    enum key_field field;
    uint32_t min, max;
    uint32_t ours; /* booleans: 0/1; numbers: our limit (0 = from limits) */
};

/* The operational keys (RFC 7143 §13, RFC 7144 iSCSIProtocolLevel). */
static const struct key_def key_table[] = {
    {"HeaderDigest", KEY_DIGEST, F_HDIGEST, 0, 0, 0},
    {"DataDigest", KEY_DIGEST, F_DDIGEST, 0, 0, 0},
    {"MaxConnections", KEY_NUM_MIN, F_MAXCONN, 1, 65535, 1},
    {"InitialR2T", KEY_BOOL_OR, F_INITIAL_R2T, 0, 1, 0},
    {"ImmediateData", KEY_BOOL_AND, F_IMMEDIATE, 0, 1, 1},
    {"MaxRecvDataSegmentLength", KEY_DECL_MRDSL, F_NONE, ISCSI_DSL_MIN, ISCSI_DSL_MAX, 0},
    {"MaxBurstLength", KEY_NUM_MIN, F_MAX_BURST, ISCSI_DSL_MIN, ISCSI_DSL_MAX, 0},
    {"FirstBurstLength", KEY_NUM_MIN, F_FIRST_BURST, ISCSI_DSL_MIN, ISCSI_DSL_MAX, 0},
    {"DefaultTime2Wait", KEY_NUM_MAX, F_T2W, 0, 3600, 0},
    {"DefaultTime2Retain", KEY_NUM_MIN, F_T2R, 0, 3600, 0},
    {"MaxOutstandingR2T", KEY_NUM_MIN, F_MAX_R2T, 1, 65535, 0},
    {"DataPDUInOrder", KEY_BOOL_OR, F_PDU_ORDER, 0, 1, 1},
    {"DataSequenceInOrder", KEY_BOOL_OR, F_SEQ_ORDER, 0, 1, 1},
    {"ErrorRecoveryLevel", KEY_NUM_MIN, F_ERL, 0, 2, 0},
    {"IFMarker", KEY_BOOL_AND, F_IFMARKER, 0, 1, 0},
    {"OFMarker", KEY_BOOL_AND, F_OFMARKER, 0, 1, 0},
    {"IFMarkInt", KEY_MARKER_INT, F_NONE, 1, 65535, 0},
    {"OFMarkInt", KEY_MARKER_INT, F_NONE, 1, 65535, 0},
    {"iSCSIProtocolLevel", KEY_NUM_MIN, F_PROTO_LEVEL, 0, 31, 1},
    {"InitiatorName", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"InitiatorAlias", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"TargetName", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"SessionType", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"AuthMethod", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"CHAP_A", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"CHAP_I", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"CHAP_C", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"CHAP_N", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"CHAP_R", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"SendTargets", KEY_LOGIN, F_NONE, 0, 0, 0},
    {"TargetAlias", KEY_TARGET_ONLY, F_NONE, 0, 0, 0},
    {"TargetAddress", KEY_TARGET_ONLY, F_NONE, 0, 0, 0},
    {"TargetPortalGroupTag", KEY_TARGET_ONLY, F_NONE, 0, 0, 0},
    {"TaskReporter", KEY_DECL_IGNORE, F_NONE, 0, 0, 0},
};

static uint32_t *num_field(struct iscsi_params *p, enum key_field f)
{
    switch (f) {
    case F_MAXCONN:
        return &p->max_connections;
    case F_MAX_BURST:
        return &p->max_burst;
    case F_FIRST_BURST:
        return &p->first_burst;
    case F_T2W:
        return &p->time2wait;
    case F_T2R:
        return &p->time2retain;
    case F_MAX_R2T:
        return &p->max_outstanding_r2t;
    case F_ERL:
        return &p->error_recovery_level;
    default:
        return NULL;
    }
}

static bool *bool_field(struct iscsi_params *p, enum key_field f)
{
    switch (f) {
    case F_HDIGEST:
        return &p->header_digest;
    case F_DDIGEST:
        return &p->data_digest;
    case F_INITIAL_R2T:
        return &p->initial_r2t;
    case F_IMMEDIATE:
        return &p->immediate_data;
    case F_PDU_ORDER:
        return &p->data_pdu_in_order;
    case F_SEQ_ORDER:
        return &p->data_seq_in_order;
    case F_IFMARKER:
        return &p->ifmarker;
    case F_OFMARKER:
        return &p->ofmarker;
    default:
        return NULL;
    }
}

static uint32_t our_number(const struct iscsi_neg *n, const struct key_def *k)
{
    switch (k->field) {
    case F_MAX_BURST:
        return n->limits.max_burst;
    case F_FIRST_BURST:
        return n->limits.first_burst;
    case F_MAX_R2T:
        return n->limits.max_outstanding_r2t;
    default:
        return k->ours;
    }
}

/* Digest list: pick the first value of the initiator's list we support. */
static int negotiate_digest(struct iscsi_neg *n, const struct key_def *k, const char *value,
                            struct iscsi_text_out *out)
{
    const char *p = value;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == 4 && memcmp(p, "None", 4) == 0) {
            *bool_field(&n->params, k->field) = false;
            return iscsi_text_add(out, k->name, "None");
        }
        if (l == 6 && memcmp(p, "CRC32C", 6) == 0 && n->limits.allow_digests) {
            *bool_field(&n->params, k->field) = true;
            return iscsi_text_add(out, k->name, "CRC32C");
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    return iscsi_text_add(out, k->name, "Reject");
}

int iscsi_neg_key(struct iscsi_neg *n, const char *key, const char *value,
                  struct iscsi_text_out *out)
{
    const struct key_def *k = NULL;
    size_t idx;
    for (idx = 0; idx < sizeof(key_table) / sizeof(key_table[0]); idx++) {
        if (strcmp(key_table[idx].name, key) == 0) {
            k = &key_table[idx];
            break;
        }
    }
    if (!k)
        return iscsi_neg_not_understood(out, key);
    if (k->type == KEY_LOGIN)
        return 1;
    if (n->seen & (1ull << idx))
        return -EPROTO;
    n->seen |= 1ull << idx;

    switch (k->type) {
    case KEY_DIGEST:
        return negotiate_digest(n, k, value, out);
    case KEY_BOOL_AND:
    case KEY_BOOL_OR: {
        bool offered;
        if (strcmp(value, "Yes") == 0)
            offered = true;
        else if (strcmp(value, "No") == 0)
            offered = false;
        else
            return iscsi_text_add(out, k->name, "Reject");
        bool result = k->type == KEY_BOOL_AND ? (offered && k->ours) : (offered || k->ours);
        *bool_field(&n->params, k->field) = result;
        return iscsi_text_add(out, k->name, result ? "Yes" : "No");
    }
    case KEY_NUM_MIN:
    case KEY_NUM_MAX: {
        uint64_t v;
        if (iscsi_parse_u64(value, &v) < 0 || v < k->min || v > k->max)
            return iscsi_text_add(out, k->name, "Reject");
        uint32_t ours = our_number(n, k);
        uint32_t result = k->type == KEY_NUM_MIN ? (v < ours ? (uint32_t)v : ours)
                                                 : (v > ours ? (uint32_t)v : ours);
        uint32_t *f = num_field(&n->params, k->field);
        if (f)
            *f = result;
        return iscsi_text_add_u32(out, k->name, result);
    }
    case KEY_DECL_MRDSL: {
        uint64_t v;
        if (iscsi_parse_u64(value, &v) < 0 || v < k->min || v > k->max) {
            /* One answer per key: Reject, and no declaration of ours in
             * this login (we then keep receiving at the 8192 default). */
            n->sent_mrdsl = true;
            return iscsi_text_add(out, k->name, "Reject");
        }
        n->params.max_send_dsl = (uint32_t)v;
        return iscsi_neg_declare(n, out);
    }
    case KEY_MARKER_INT:
        /* Markers are always No, so their intervals do not matter. */
        return iscsi_text_add(out, k->name, "Irrelevant");
    case KEY_TARGET_ONLY:
        return iscsi_text_add(out, k->name, "Reject");
    case KEY_DECL_IGNORE:
        return 0;
    case KEY_LOGIN:
        return 1;
    }
    return 0;
}

bool iscsi_key_known(const char *key)
{
    for (size_t i = 0; i < sizeof(key_table) / sizeof(key_table[0]); i++)
        if (strcmp(key_table[i].name, key) == 0)
            return true;
    return false;
}

int iscsi_neg_not_understood(struct iscsi_text_out *out, const char *key)
{
    return iscsi_text_add(out, key, "NotUnderstood");
}

int iscsi_neg_declare(struct iscsi_neg *n, struct iscsi_text_out *out)
{
    if (n->sent_mrdsl)
        return 0;
    int rc = iscsi_text_add_u32(out, "MaxRecvDataSegmentLength", n->limits.max_recv_dsl);
    if (rc == 0) {
        n->sent_mrdsl = true;
        n->params.max_recv_dsl = n->limits.max_recv_dsl;
    }
    return rc;
}

void iscsi_neg_finish(struct iscsi_neg *n)
{
    if (n->params.first_burst > n->params.max_burst)
        n->params.first_burst = n->params.max_burst;
}
