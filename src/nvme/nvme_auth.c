/*
 * In-band authentication of a queue (nvme_internal.h): DH-HMAC-CHAP over
 * the Fabrics Authentication Send/Receive commands (NVMe base
 * specification 2.0, 8.13). A queue of a controller whose host has a key
 * is answered with AUTHREQ.ATR at Connect and refuses every other command
 * (Authentication Required) until the host proved it holds the key:
 *
 *   host  Send AUTH_Negotiate      hash and DH group lists, no secure channel
 *   ctrl  Recv DH-HMAC-CHAP_Challenge  C1, seq S1, our DH value
 *   host  Send DH-HMAC-CHAP_Reply  R1, its DH value, and C2/S2 when it
 *                                   wants the controller to prove itself
 *   ctrl  Recv DH-HMAC-CHAP_Success1  (with R2 when asked)
 *   host  Send DH-HMAC-CHAP_Success2  (bidirectional only)
 *
 * A failure is a Failure1 the host reads (the reason code of the spec),
 * a log line naming the peer, the host NQN and the reason, and the queue
 * closed once that message left; a Failure2 from the host (our response
 * was wrong) closes it too. The handshake deadline covers an unfinished
 * authentication (nvme_conn.c). Owner reactor only; the controller's keys
 * are immutable once the admin queue's Connect made them.
 */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/iopool.h"
#include "core/log.h"
#include "core/ratelimit.h"
#include "nvme/nvme_dhchap.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_target.h"

/* Authentication Send/Receive fields (SQE offsets). */
#define AUTH_SPSP0 41
#define AUTH_SPSP1 42
#define AUTH_SECP 43
#define AUTH_LEN 44 /* TL (Send) or AL (Receive) */
#define AUTH_SECP_DHCHAP 0xe9
#define AUTH_MSG_MAX 4096 /* a Reply with an ffdhe8192 value is 1168 bytes */

/* Message types and identifiers. */
#define MSG_COMMON 0x00
#define MSG_DHCHAP 0x01
#define ID_NEGOTIATE 0x00
#define ID_CHALLENGE 0x01
#define ID_REPLY 0x02
#define ID_SUCCESS1 0x03
#define ID_SUCCESS2 0x04
#define ID_FAILURE2 0xf0
#define ID_FAILURE1 0xf1
#define MSG_HDR 16 /* Challenge, Reply, Success1, Success2 */
#define FAILURE_LEN 8
#define NEG_HDR 8
#define NEG_DESC 64
#define DHCHAP_AUTHID 0x01
#define IDLIST_DH 30 /* where the DH group identifiers start in the list */

/* Reason code explanations of a Failure1 (reason code 01h, "failed"). */
enum auth_reason {
    R_FAILED = 0x01,
    R_NOT_USABLE = 0x02,
    R_CONCAT_MISMATCH = 0x03,
    R_HASH_UNUSABLE = 0x04,
    R_DHGROUP_UNUSABLE = 0x05,
    R_INCORRECT_PAYLOAD = 0x06,
    R_INCORRECT_MESSAGE = 0x07,
};

struct nvme_auth_keys {
    int hash_id, dhgid;
    struct nvme_dhchap_key host; /* transformed with the host NQN */
    struct nvme_dhchap_key ctrl; /* with the subsystem NQN; len 0: none */
};

/* What the controller does next. */
enum auth_step { ST_NEGOTIATE, ST_CHALLENGE, ST_REPLY, ST_SUCCESS1, ST_SUCCESS2, ST_FAILURE1 };

struct nvme_auth {
    enum auth_step step;
    bool authenticated; /* the host's response was right (and ours, if asked) */
    bool bidi;          /* the host asked for our response */
    uint16_t tid;
    uint8_t reason;
    size_t hl;
    uint32_t s1, s2;
    uint8_t c1[NVME_DHCHAP_HASH_MAX], c2[NVME_DHCHAP_HASH_MAX];
    int dhgid;
    struct nvme_dh *dh;
    size_t skey_len;
    uint8_t skey[NVME_DHCHAP_DH_MAX];
    uint8_t pub[NVME_DHCHAP_DH_MAX]; /* our DH value */
    /* A modular exponentiation in the big groups costs tens of ms: it runs
     * on the I/O pool while the command waits (job_cmd set: no other
     * authentication command is taken meanwhile). */
    struct io_job job;
    struct nvme_cmd *job_cmd;
    int job_rc;
};

/* ---- keys ---- */

struct nvme_auth_keys *nvme_auth_keys_new(const struct nvme_host *h, const char *hostnqn,
                                          const char *subnqn, const char **why)
{
    struct nvme_auth_keys *k = calloc(1, sizeof(*k));
    if (!k) {
        *why = "out of memory";
        return NULL;
    }
    k->hash_id = h->dhchap_hash;
    k->dhgid = h->dhchap_dhgroup;
    if (!nvme_dhchap_hash_len(k->hash_id) || !nvme_dhchap_dh_known(k->dhgid))
        *why = "unknown hash or DH group";
    else if (nvme_dhchap_key_parse(h->dhchap_key, hostnqn, &k->host, why) == 0 &&
             (!h->dhchap_ctrl_key ||
              nvme_dhchap_key_parse(h->dhchap_ctrl_key, subnqn, &k->ctrl, why) == 0))
        return k;
    nvme_auth_keys_free(k);
    return NULL;
}

void nvme_auth_keys_free(struct nvme_auth_keys *k)
{
    if (!k)
        return;
    explicit_bzero(k, sizeof(*k));
    free(k);
}

/* ---- failed authentications ---- */

/* Wrong responses are throttled like failed CHAP logins (core/ratelimit.h,
 * a table of our own): 5 within 10 s block the host NQN, or the address
 * for that host NQN, for 30 s; while either is blocked every transaction
 * fails at AUTH_Negotiate, the right key too, so guesses teach nothing. */
static struct ratelimit auth_rl = RATELIMIT_INIT(5, 10000, 30000);

struct limit_keys {
    char host[RATELIMIT_KEY_MAX];
    char addr[128];
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* "h:<host NQN>" and "ip:<address> h:<hash of the host NQN>" (the peer's
 * name without its port). */
static void limit_keys(const struct nvme_queue *q, struct limit_keys *k)
{
    const char *peer = q->c->peer, *colon = strrchr(peer, ':');
    int alen = colon ? (int)(colon - peer) : (int)strlen(peer);
    snprintf(k->host, sizeof(k->host), "h:%s", q->ctrl->hostnqn);
    snprintf(k->addr, sizeof(k->addr), "ip:%.*s h:%016" PRIx64, alen, peer,
             fnv1a(q->ctrl->hostnqn));
}

/* Milliseconds the queue's host or address stays blocked (0: not). */
static uint64_t limit_blocked(const struct nvme_queue *q)
{
    struct limit_keys k;
    limit_keys(q, &k);
    uint64_t now = ratelimit_now_ms();
    uint64_t a = ratelimit_blocked_for(&auth_rl, k.addr, now);
    uint64_t h = ratelimit_blocked_for(&auth_rl, k.host, now);
    return a > h ? a : h;
}

static void limit_failed(const struct nvme_queue *q)
{
    struct limit_keys k;
    limit_keys(q, &k);
    uint64_t now = ratelimit_now_ms();
    bool a = ratelimit_failed(&auth_rl, k.addr, now);
    bool h = ratelimit_failed(&auth_rl, k.host, now);
    if (a || h)
        log_warn("%s: nvme: host %s: too many failed authentications, %s blocked for %u s",
                 q->c->peer, q->ctrl->hostnqn, h ? "host NQN" : "address",
                 (unsigned)(auth_rl.block_ms / 1000));
}

static void limit_succeeded(const struct nvme_queue *q)
{
    struct limit_keys k;
    limit_keys(q, &k);
    ratelimit_succeeded(&auth_rl, k.addr);
    ratelimit_succeeded(&auth_rl, k.host);
}

void nvme_auth_limit_reset(void)
{
    ratelimit_reset(&auth_rl);
}

/* ---- the queue's transaction ---- */

static void auth_free(struct nvme_auth *a)
{
    if (!a)
        return;
    nvme_dh_free(a->dh);
    explicit_bzero(a, sizeof(*a));
    free(a);
}

void nvme_auth_queue_free(struct nvme_queue *q)
{
    auth_free(q->auth);
    q->auth = NULL;
}

bool nvme_auth_unfinished(const struct nvme_queue *q)
{
    return q->auth_pending || (q->auth && !q->auth->authenticated);
}

bool nvme_auth_allows(const uint8_t *sqe)
{
    if (sqe[NVME_SQE_OPC] != NVME_FABRICS)
        return false;
    uint8_t t = sqe[NVME_FCTYPE_OFF];
    return t == NVME_FCT_CONNECT || t == NVME_FCT_AUTH_SEND || t == NVME_FCT_AUTH_RECV;
}

static void auth_log_fail(struct nvme_queue *q, const char *why)
{
    log_warn("%s: nvme: authentication of host %s (queue %u) failed: %s", q->c->peer,
             q->ctrl->hostnqn, q->qid, why);
}

/* The transaction failed: the next Receive returns a Failure1 with
 * reason; the queue takes no other command meanwhile. */
static void auth_fail(struct nvme_queue *q, uint8_t reason, const char *why)
{
    auth_log_fail(q, why);
    q->auth->step = ST_FAILURE1;
    q->auth->reason = reason;
    q->auth->authenticated = false;
    q->auth_pending = true;
}

/* The host proved itself (and we did, when asked): the queue is open. */
static void auth_success(struct nvme_queue *q)
{
    q->auth->authenticated = true;
    if (q->auth_pending)
        log_info("%s: nvme: host %s authenticated on queue %u (DH-HMAC-CHAP %s, %s%s)", q->c->peer,
                 q->ctrl->hostnqn, q->qid, nvme_dhchap_hash_name(q->ctrl->auth_keys->hash_id),
                 nvme_dhchap_dh_name(q->ctrl->auth_keys->dhgid),
                 q->auth->bidi ? ", bidirectional" : "");
    q->auth_pending = false;
    nvme_conn_authenticated(q);
}

/* AUTH_Negotiate: the protocol descriptors the host offers must hold
 * DH-HMAC-CHAP with the hash and the DH group configured for it. */
static void on_negotiate(struct nvme_queue *q, const uint8_t *d, uint32_t tl)
{
    const struct nvme_auth_keys *k = q->ctrl->auth_keys;
    struct nvme_auth *a = q->auth;
    uint8_t napd = d[7];
    uint64_t blocked = limit_blocked(q);
    if (blocked) {
        char why[96];
        snprintf(why, sizeof(why), "blocked for %" PRIu64 " s more after repeated failures",
                 (blocked + 999) / 1000);
        return auth_fail(q, R_FAILED, why);
    }
    if (d[6] != 0)
        return auth_fail(q, R_CONCAT_MISMATCH, "the host asks for a secure channel (SC_C)");
    if (napd == 0 || NEG_HDR + (size_t)napd * NEG_DESC > tl)
        return auth_fail(q, R_INCORRECT_PAYLOAD, "AUTH_Negotiate: bad protocol descriptor count");
    const uint8_t *p = NULL;
    for (unsigned i = 0; i < napd && !p; i++)
        if (d[NEG_HDR + i * NEG_DESC] == DHCHAP_AUTHID)
            p = d + NEG_HDR + i * NEG_DESC;
    if (!p)
        return auth_fail(q, R_NOT_USABLE, "the host does not offer DH-HMAC-CHAP");
    uint8_t halen = p[2], dhlen = p[3];
    if (halen > 30 || dhlen > 30)
        return auth_fail(q, R_INCORRECT_PAYLOAD, "AUTH_Negotiate: identifier lists too long");
    bool hash_ok = false, dh_ok = false;
    for (unsigned i = 0; i < halen; i++)
        hash_ok |= p[4 + i] == k->hash_id;
    for (unsigned i = 0; i < dhlen; i++)
        dh_ok |= p[4 + IDLIST_DH + i] == k->dhgid;
    if (!hash_ok)
        return auth_fail(q, R_HASH_UNUSABLE, "the host does not offer the configured hash");
    if (!dh_ok)
        return auth_fail(q, R_DHGROUP_UNUSABLE, "the host does not offer the configured DH group");
    a->hl = nvme_dhchap_hash_len(k->hash_id);
    a->dhgid = k->dhgid;
    a->step = ST_CHALLENGE;
}

/* A new transaction (the first, or a re-authentication). */
static int negotiate_start(struct nvme_queue *q, const uint8_t *d, uint32_t tl)
{
    bool was_open = !q->auth_pending; /* else the Connect's deadline runs */
    auth_free(q->auth);
    q->auth = calloc(1, sizeof(*q->auth));
    if (!q->auth)
        return -ENOMEM;
    q->auth->tid = le16_get(d + 4);
    if (was_open)
        nvme_conn_auth_deadline(q); /* a re-authentication has the same bound */
    on_negotiate(q, d, tl);
    return 0;
}

/* ---- the Diffie-Hellman steps, on the I/O pool ---- */

static void job_done(struct reactor_msg *m);

static void keygen_run(struct io_job *j)
{
    struct nvme_auth *a = container_of(j, struct nvme_auth, job);
    a->dh = nvme_dh_new(a->dhgid, a->pub);
    a->job_rc = a->dh ? 0 : -ENOMEM;
}

/* The host's DH value is in the Reply, in the waiting command's buffer. */
static void shared_run(struct io_job *j)
{
    struct nvme_auth *a = container_of(j, struct nvme_auth, job);
    const uint8_t *dhv = a->job_cmd->buf + MSG_HDR + 2 * a->hl;
    a->job_rc = nvme_dh_shared(a->dh, dhv, a->skey_len, a->skey);
}

/* Run fn on the pool; job_done continues cmd on its queue's reactor. The
 * command holds a reference on the connection, so q (and q->auth, freed
 * with the connection) outlive the job. */
static void job_start(struct nvme_cmd *cmd, void (*fn)(struct io_job *j))
{
    struct nvme_auth *a = cmd->q->auth;
    a->job_cmd = cmd;
    a->job.run = fn;
    a->job.done.fn = job_done;
    a->job.owner = cmd->q->c->reactor;
    iopool_submit(&a->job);
}

/* ---- Authentication Send ---- */

/* The challenge we send, augmented with the session key when a DH group
 * is in use (what both responses are computed over). */
static int chal_aug(const struct nvme_auth *a, int hash_id, const uint8_t *c, uint8_t *out)
{
    if (!a->dh) {
        memcpy(out, c, a->hl);
        return 0;
    }
    return nvme_dhchap_augment(hash_id, a->skey, a->skey_len, c, out);
}

/* Whether the host's response R1 is the one its key gives. */
static bool reply_verify(struct nvme_queue *q, const uint8_t *rval)
{
    const struct nvme_auth_keys *k = q->ctrl->auth_keys;
    struct nvme_auth *a = q->auth;
    uint8_t c[NVME_DHCHAP_HASH_MAX], want[NVME_DHCHAP_HASH_MAX];
    bool ok = chal_aug(a, k->hash_id, a->c1, c) == 0 &&
              nvme_dhchap_response(k->hash_id, &k->host, c, a->s1, a->tid, "HostHost",
                                   q->ctrl->hostnqn, q->ctrl->subnqn, want) == 0 &&
              gnutls_memcmp(want, rval, a->hl) == 0;
    explicit_bzero(want, sizeof(want));
    explicit_bzero(c, sizeof(c));
    return ok;
}

/* The Reply once the session key is known (lengths already checked). */
static void reply_finish(struct nvme_queue *q, const uint8_t *d)
{
    struct nvme_auth *a = q->auth;
    const uint8_t *rval = d + MSG_HDR, *c2 = rval + a->hl;
    if (!reply_verify(q, rval)) {
        limit_failed(q);
        return auth_fail(q, R_FAILED, "wrong response (the host's key differs from ours)");
    }
    limit_succeeded(q);
    a->s2 = le32_get(d + 12);
    /* A challenge with sequence number 0 asks for no controller response
     * (it only feeds a secure channel, which we do not offer). */
    a->bidi = (d[8] & 1) && a->s2 != 0;
    if (a->bidi && q->ctrl->auth_keys->ctrl.len == 0)
        return auth_fail(q, R_FAILED,
                         "the host asks the controller to authenticate and the host entry has no "
                         "dhchap_ctrl_key");
    if (a->bidi)
        memcpy(a->c2, c2, a->hl);
    a->step = ST_SUCCESS1;
    if (!a->bidi)
        auth_success(q);
}

/* DH-HMAC-CHAP_Reply: R1, C2 (CVALID), the host's DH value. Whether the
 * command waits for the session key (on the pool). */
static bool on_reply(struct nvme_cmd *cmd, uint32_t tl)
{
    struct nvme_queue *q = cmd->q;
    struct nvme_auth *a = q->auth;
    const uint8_t *d = cmd->buf;
    uint8_t hl = d[6];
    uint16_t dhvlen = le16_get(d + 10);
    size_t want_dh = a->dh ? nvme_dhchap_dh_len(a->dhgid) : 0;
    if (hl != a->hl || dhvlen != want_dh || tl < MSG_HDR + 2u * hl + dhvlen) {
        auth_fail(q, R_INCORRECT_PAYLOAD, "DH-HMAC-CHAP_Reply: bad lengths");
        return false;
    }
    if (!a->dh) {
        reply_finish(q, d);
        return false;
    }
    a->skey_len = dhvlen;
    job_start(cmd, shared_run);
    return true;
}

/* One message of an Authentication Send: whether the command waits for
 * the pool. */
static bool on_message(struct nvme_cmd *cmd, uint32_t tl)
{
    struct nvme_queue *q = cmd->q;
    const uint8_t *d = cmd->buf;
    uint8_t type = d[0], id = d[1];
    if (type == MSG_COMMON && id == ID_NEGOTIATE) {
        if (tl < NEG_HDR + NEG_DESC || negotiate_start(q, d, tl) < 0) {
            if (!q->auth && !(q->auth = calloc(1, sizeof(*q->auth))))
                return false; /* no memory: the deadline closes the queue */
            auth_fail(q, R_INCORRECT_PAYLOAD, "AUTH_Negotiate too short");
        }
        return false;
    }
    if (!q->auth && !(q->auth = calloc(1, sizeof(*q->auth))))
        return false;
    struct nvme_auth *a = q->auth;
    if (type == MSG_COMMON && id == ID_FAILURE2) {
        /* Logged here; the command completes and the queue closes. */
        auth_fail(q, R_FAILED,
                  d[7] == R_FAILED ? "the host refused the controller's response (Failure2): "
                                     "the controller key differs from the host's"
                                   : "the host ended the transaction (Failure2)");
        return false;
    }
    if (le16_get(d + 4) != a->tid)
        auth_fail(q, R_INCORRECT_PAYLOAD, "message of another transaction");
    else if (type == MSG_DHCHAP && id == ID_REPLY && a->step == ST_REPLY && tl >= MSG_HDR)
        return on_reply(cmd, tl);
    else if (type == MSG_DHCHAP && id == ID_SUCCESS2 && a->step == ST_SUCCESS2) {
        auth_success(q);
        nvme_auth_queue_free(q);
    } else
        auth_fail(q, R_INCORRECT_MESSAGE, "unexpected message");
    return false;
}

/* The fields both commands check: 0, or the status to complete with. */
static uint16_t auth_cmd_check(struct nvme_cmd *cmd, uint32_t *len)
{
    struct nvme_queue *q = cmd->q;
    if (q->state != QS_LIVE || (q->auth && q->auth->job_cmd))
        return NVME_SC_CMD_SEQ_ERROR; /* not connected, or one message at a time */
    if (!q->ctrl->auth_keys)
        return NVME_SC_CMD_SEQ_ERROR; /* no key: nothing to authenticate with */
    const uint8_t *sqe = cmd->sqe;
    *len = le32_get(sqe + AUTH_LEN);
    if (sqe[AUTH_SECP] != AUTH_SECP_DHCHAP || sqe[AUTH_SPSP0] != 0x01 || sqe[AUTH_SPSP1] != 0x01 ||
        *len == 0)
        return NVME_SC_INVALID_FIELD;
    return 0;
}

static void auth_done(struct nvme_cmd *cmd, uint16_t status)
{
    cmd->status = status;
    nvme_cmd_complete(cmd);
}

/* An Authentication Send is answered with success: what went wrong is in
 * the next Receive's Failure1. */
static void send_complete(struct nvme_cmd *cmd, uint32_t tl)
{
    struct nvme_queue *q = cmd->q;
    bool failure2 = tl >= FAILURE_LEN && cmd->buf[0] == MSG_COMMON && cmd->buf[1] == ID_FAILURE2;
    auth_done(cmd, NVME_SC_SUCCESS);
    if (failure2)
        conn_finish(q->c); /* the response leaves first */
}

void nvme_auth_send(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    uint32_t tl = 0;
    uint16_t st = auth_cmd_check(cmd, &tl);
    if (!st && tl > AUTH_MSG_MAX)
        st = NVME_SC_INVALID_FIELD;
    if (!st && cmd->data_len != tl)
        st = NVME_SC_SGL_INVALID_DATA;
    if (st)
        return auth_done(cmd, st);
    if (!cmd->data_ready)
        return nvme_cmd_request_data(cmd);
    if (tl < FAILURE_LEN) {
        if (q->auth || (q->auth = calloc(1, sizeof(*q->auth))))
            auth_fail(q, R_INCORRECT_PAYLOAD, "message shorter than its header");
    } else if (on_message(cmd, tl)) {
        return; /* job_done completes it */
    }
    send_complete(cmd, tl);
}

/* ---- Authentication Receive ---- */

static void msg_header(uint8_t *m, uint8_t type, uint8_t id, uint16_t tid)
{
    m[0] = type;
    m[1] = id;
    le16_put(m + 4, tid);
}

/* DH-HMAC-CHAP_Challenge: C1, S1, our DH value (made on the pool). Its
 * length, or 0. */
static size_t build_challenge(struct nvme_queue *q, uint8_t *m)
{
    const struct nvme_auth_keys *k = q->ctrl->auth_keys;
    struct nvme_auth *a = q->auth;
    size_t dhlen = nvme_dhchap_dh_len(a->dhgid);
    if (dhlen && !a->dh)
        return 0;
    do {
        if (nvme_dhchap_random(&a->s1, sizeof(a->s1)) < 0)
            return 0;
    } while (a->s1 == 0);
    if (nvme_dhchap_random(a->c1, a->hl) < 0)
        return 0;
    msg_header(m, MSG_DHCHAP, ID_CHALLENGE, a->tid);
    m[6] = (uint8_t)a->hl;
    m[8] = (uint8_t)k->hash_id;
    m[9] = (uint8_t)a->dhgid;
    le16_put(m + 10, (uint16_t)dhlen);
    le32_put(m + 12, a->s1);
    memcpy(m + MSG_HDR, a->c1, a->hl);
    memcpy(m + MSG_HDR + a->hl, a->pub, dhlen);
    return MSG_HDR + a->hl + dhlen;
}

/* DH-HMAC-CHAP_Success1, with our response R2 when the host asked. */
static size_t build_success1(struct nvme_queue *q, uint8_t *m)
{
    const struct nvme_auth_keys *k = q->ctrl->auth_keys;
    struct nvme_auth *a = q->auth;
    msg_header(m, MSG_DHCHAP, ID_SUCCESS1, a->tid);
    m[6] = (uint8_t)a->hl;
    if (!a->bidi)
        return MSG_HDR;
    uint8_t c[NVME_DHCHAP_HASH_MAX];
    int rc = chal_aug(a, k->hash_id, a->c2, c);
    if (rc == 0)
        rc = nvme_dhchap_response(k->hash_id, &k->ctrl, c, a->s2, a->tid, "Controller",
                                  q->ctrl->subnqn, q->ctrl->hostnqn, m + MSG_HDR);
    explicit_bzero(c, sizeof(c));
    if (rc < 0)
        return 0;
    m[8] = 1; /* RVALID */
    return MSG_HDR + a->hl;
}

static size_t build_failure1(struct nvme_queue *q, uint8_t *m)
{
    msg_header(m, MSG_COMMON, ID_FAILURE1, q->auth->tid);
    m[6] = 0x01; /* reason code: authentication failed */
    m[7] = q->auth->reason;
    return FAILURE_LEN;
}

/* The message the host fetches now into m (AUTH_MSG_MAX bytes, zeroed):
 * its length. *close: the queue closes once it left. */
static size_t recv_message(struct nvme_queue *q, uint8_t *m, bool *close)
{
    struct nvme_auth *a = q->auth;
    size_t n = 0;
    switch (a->step) {
    case ST_CHALLENGE:
        if ((n = build_challenge(q, m)) > 0)
            a->step = ST_REPLY;
        else
            auth_fail(q, R_FAILED, "no challenge (random bytes or DH failed)");
        break;
    case ST_SUCCESS1:
        if ((n = build_success1(q, m)) > 0)
            a->step = ST_SUCCESS2;
        else
            auth_fail(q, R_FAILED, "no controller response (HMAC failed)");
        break;
    case ST_FAILURE1:
        break;
    default:
        auth_fail(q, R_INCORRECT_MESSAGE, "Authentication Receive out of sequence");
        break;
    }
    if (a->step != ST_FAILURE1)
        return n;
    *close = true;
    memset(m, 0, n);
    return build_failure1(q, m);
}

/* What the Receive returns: AL bytes (within the host's buffer), the
 * message then zeros, as Linux's target does (a host may expect them all). */
static uint32_t recv_len(const struct nvme_cmd *cmd)
{
    return MIN(le32_get(cmd->sqe + AUTH_LEN), cmd->data_len);
}

static void recv_finish(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    uint32_t len = recv_len(cmd);
    memset(cmd->buf, 0, MAX(len, (uint32_t)AUTH_MSG_MAX));
    bool close = false;
    size_t n = recv_message(q, cmd->buf, &close);
    cmd->out_len = n ? len : 0;
    /* Unidirectional: done once the host has its Success1 (it sends no
     * Success2); bidirectional: Success2 ends it. */
    if (!close && q->auth->step == ST_SUCCESS2 && !q->auth->bidi)
        nvme_auth_queue_free(q);
    auth_done(cmd, NVME_SC_SUCCESS);
    if (close)
        conn_finish(q->c); /* the Failure1 leaves first */
}

void nvme_auth_recv(struct nvme_cmd *cmd)
{
    struct nvme_queue *q = cmd->q;
    uint32_t al = 0;
    uint16_t st = auth_cmd_check(cmd, &al);
    if (!st && !q->auth)
        st = NVME_SC_CMD_SEQ_ERROR; /* no AUTH_Negotiate yet */
    if (!st && nvme_cmd_buf(cmd, MAX(recv_len(cmd), (uint32_t)AUTH_MSG_MAX)) < 0)
        st = NVME_SC_INTERNAL;
    if (st)
        return auth_done(cmd, st);
    struct nvme_auth *a = q->auth;
    if (a->step == ST_CHALLENGE && a->dhgid != 0 && !a->dh)
        return job_start(cmd, keygen_run); /* our DH value first */
    recv_finish(cmd);
}

/* A Diffie-Hellman step finished: the waiting command goes on, on its
 * queue's reactor. */
static void job_done(struct reactor_msg *m)
{
    struct nvme_auth *a = container_of(m, struct nvme_auth, job.done);
    struct nvme_cmd *cmd = a->job_cmd;
    struct nvme_queue *q = cmd->q;
    a->job_cmd = NULL;
    if (q->c->closing)
        return nvme_cmd_complete(cmd); /* frees the slot */
    if (a->job.run == keygen_run)
        return recv_finish(cmd); /* a failed keygen fails in build_challenge */
    if (a->job_rc < 0)
        auth_fail(q, R_DHGROUP_UNUSABLE, "the host's DH value is out of range");
    else
        reply_finish(q, cmd->buf);
    send_complete(cmd, le32_get(cmd->sqe + AUTH_LEN));
}
