/*
 * Login phase (RFC 7143 §6): stages and transitions, operational key
 * negotiation (iscsi_text.c), security negotiation (AuthMethod None/CHAP,
 * mutual CHAP), target lookup and access control, and the switch to full
 * feature phase. Each Login Request gets one Login Response; a failure is
 * answered with its status class/detail and the connection is closed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/log.h"
#include "core/util.h"
#include "gateway/gateway.h"
#include "iscsi/iscsi_internal.h"

#define LOGIN_TEXT_MAX (64 * 1024) /* accumulated C-bit text */

void iscsi_login_free(struct iscsi_login *l)
{
    if (!l)
        return;
    if (l->view)
        iscsi_target_view_unref(l->view);
    if (l->policy_owned)
        iscsi_auth_policy_clear(&l->policy);
    free(l->pending);
    free(l);
}

static bool cidr_match(const struct iscsi_cidr *c, const struct sockaddr *sa)
{
    const uint8_t *addr;
    size_t alen;
    uint8_t mapped[16];
    if (sa->sa_family == AF_INET) {
        addr = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
        alen = 4;
    } else if (sa->sa_family == AF_INET6) {
        addr = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        alen = 16;
        /* An IPv4-mapped peer matches IPv4 networks. */
        static const uint8_t v4pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (c->family == AF_INET && memcmp(addr, v4pfx, 12) == 0) {
            memcpy(mapped, addr + 12, 4);
            addr = mapped;
            alen = 4;
        }
    } else {
        return false;
    }
    if ((c->family == AF_INET) != (alen == 4))
        return false;
    unsigned bits = c->prefix;
    if (bits > alen * 8)
        bits = (unsigned)alen * 8;
    size_t full = bits / 8;
    if (memcmp(addr, c->addr, full) != 0)
        return false;
    if (bits % 8) {
        uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));
        if ((addr[full] & mask) != (c->addr[full] & mask))
            return false;
    }
    return true;
}

/* The group's initiator list admits initiator (an empty list: everyone). */
static bool group_admits(const struct iscsi_target_group *g, const char *initiator)
{
    if (g->n_initiators == 0)
        return true;
    for (size_t i = 0; i < g->n_initiators; i++)
        if (strcasecmp(g->initiators[i], initiator) == 0)
            return true;
    return false;
}

int iscsi_target_access(const struct iscsi_target_view *v, const char *initiator,
                        uint16_t portal_tag, const struct sockaddr *peer)
{
    if (v->n_auth_networks && peer) {
        bool ok = false;
        for (size_t i = 0; i < v->n_auth_networks && !ok; i++)
            ok = cidr_match(&v->auth_networks[i], peer);
        if (!ok)
            return -1;
    }
    if (v->n_groups == 0)
        return 0;
    for (size_t g = 0; g < v->n_groups; g++) {
        const struct iscsi_target_group *grp = &v->groups[g];
        if (portal_tag != 0 && grp->portal_tag != portal_tag)
            continue;
        if (group_admits(grp, initiator))
            return (int)g;
    }
    return -1;
}

/* The portal group tag initiators see for a portal's tag: the tag itself,
 * or in a gateway group GATEWAY_TAG_BASE x the member's id + the
 * tag (below the base). Each member's tags are its own and the same after
 * a restart (its id is configured), so that two members never present one
 * SCSI target port: the port's name is "IQN,t,0xTPGT" (VPD 0x83), and
 * initiators tell paths apart by it (docs/ha.md). Access checks keep the
 * portal's own tag. */
static uint16_t member_tag(uint16_t portal_tag)
{
    if (!gateway_enabled())
        return portal_tag;
    return (uint16_t)(gateway_id() * GATEWAY_TAG_BASE + portal_tag % GATEWAY_TAG_BASE);
}

static uint16_t reported_tag(const struct iscsi_conn *ic)
{
    return member_tag(ic->portal_tag ? ic->portal_tag : 1);
}

/* TargetName and its TargetAddress keys: every listen address of every
 * portal group the initiator may use for the target ("ip:port,tag"; a
 * wildcard portal answers with the address this connection reached). A
 * target without groups is on every portal: the address reached, as is a
 * target whose groups have no address this initiator can use. */
static int add_target_entry(struct iscsi_conn *ic, const struct iscsi_target_view *v,
                            const char *initiator, struct iscsi_text_out *out)
{
    char addr[ISCSI_PORTAL_ADDR_MAX + 96];
    int rc = iscsi_text_add(out, "TargetName", v->iqn);
    int added = 0;
    for (size_t g = 0; rc == 0 && g < v->n_groups; g++) {
        const struct iscsi_target_group *grp = &v->groups[g];
        if (!group_admits(grp, initiator))
            continue;
        char addrs[16][ISCSI_PORTAL_ADDR_MAX];
        int n = iscsi_runtime_portal_addrs(grp->portal_tag, (const struct sockaddr *)&ic->local_sa,
                                           addrs, 16);
        for (int i = 0; rc == 0 && i < n; i++, added++) {
            snprintf(addr, sizeof(addr), "%.*s,%u", ISCSI_PORTAL_ADDR_MAX - 1, addrs[i],
                     member_tag(grp->portal_tag));
            rc = iscsi_text_add(out, "TargetAddress", addr);
        }
    }
    if (rc == 0 && added == 0) {
        snprintf(addr, sizeof(addr), "%s,%u", ic->local_addr, reported_tag(ic));
        rc = iscsi_text_add(out, "TargetAddress", addr);
    }
    return rc;
}

int iscsi_send_targets(struct iscsi_conn *ic, const char *which, const char *initiator,
                       struct iscsi_text_out *out)
{
    const struct sockaddr *peer = (const struct sockaddr *)&ic->peer_sa;
    bool discovery = ic->sess && ic->sess->info.discovery;
    if (which[0] == '\0') {
        /* The session's own target (normal sessions only). */
        if (!ic->sess || !ic->sess->view)
            return iscsi_text_add(out, "SendTargets", "Reject");
        return add_target_entry(ic, ic->sess->view, initiator, out);
    }
    if (strcmp(which, "All") == 0) {
        if (!discovery)
            return iscsi_text_add(out, "SendTargets", "Reject");
        struct iscsi_target_view **list = NULL;
        int n = iscsi_runtime_list_targets(&list);
        if (n < 0)
            return n;
        int rc = 0;
        for (int i = 0; i < n; i++) {
            if (rc == 0 && iscsi_target_access(list[i], initiator, ic->portal_tag, peer) >= 0)
                rc = add_target_entry(ic, list[i], initiator, out);
            iscsi_target_view_unref(list[i]);
        }
        free(list);
        return rc;
    }
    CLEANUP(iscsi_target_view_unref) struct iscsi_target_view *v = iscsi_runtime_find_target(which);
    if (v && iscsi_target_access(v, initiator, ic->portal_tag, peer) >= 0)
        return add_target_entry(ic, v, initiator, out);
    return 0;
}

/* ------------------------------------------------------------ responses */

static int send_login_response(struct iscsi_conn *ic, uint8_t flags, uint16_t status,
                               const struct iscsi_text_out *out)
{
    struct iscsi_login *l = ic->login;
    uint8_t bhs[ISCSI_BHS_LEN] = {0};
    bhs[0] = ISCSI_OP_LOGIN_RSP;
    bhs[1] = flags;
    bhs[2] = 0; /* Version-max */
    bhs[3] = 0; /* Version-active */
    memcpy(bhs + 8, l->isid, 6);
    be16_store(bhs + 14, l->tsih);
    be32_store(bhs + 16, l->itt);
    iscsi_conn_fill_sn(ic, bhs, true);
    bhs[36] = (uint8_t)(status >> 8);
    bhs[37] = (uint8_t)status;
    return iscsi_conn_send_pdu(ic, bhs, out ? out->buf : NULL, out ? (uint32_t)out->len : 0);
}

static int login_fail(struct iscsi_conn *ic, uint16_t status, const char *why)
{
    struct iscsi_login *l = ic->login;
    log_warn("%s: login of '%s' to '%s' failed (status 0x%04x): %s", ic->c->peer,
             l->initiator_name[0] ? l->initiator_name : "?",
             l->discovery ? "discovery" : (l->target_name[0] ? l->target_name : "?"), status, why);
    l->tsih = 0;
    send_login_response(ic, (uint8_t)(l->stage << 2), status, NULL);
    return -EPERM; /* closes the connection after the response is flushed */
}

/* ------------------------------------------------------------ key intake */

struct login_ctx {
    struct iscsi_conn *ic;
    struct iscsi_text_out *out;
    bool bad_value; /* a login key with an invalid value */
    const char *bad_why;
    uint16_t bad_status;
};

static int copy_value(char *dst, size_t cap, const char *value)
{
    size_t n = strlen(value);
    if (n >= cap)
        return -1;
    memcpy(dst, value, n + 1);
    return 0;
}

static void ctx_fail(struct login_ctx *x, uint16_t status, const char *why)
{
    if (!x->bad_value) {
        x->bad_value = true;
        x->bad_status = status;
        x->bad_why = why;
    }
}

static int login_key(const char *key, const char *value, void *arg)
{
    struct login_ctx *x = arg;
    struct iscsi_login *l = x->ic->login;
    int rc = iscsi_neg_key(&l->neg, key, value, x->out);
    if (rc == -EPROTO) {
        ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "a key was offered twice");
        return 0;
    }
    if (rc != 1)
        return rc;
    if (strcmp(key, "InitiatorName") == 0) {
        if (l->first_done && strcasecmp(value, l->initiator_name) != 0)
            ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "InitiatorName changed during login");
        else if (value[0] == '\0' ||
                 copy_value(l->initiator_name, sizeof(l->initiator_name), value))
            ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "invalid InitiatorName");
    } else if (strcmp(key, "InitiatorAlias") == 0) {
        copy_value(l->initiator_alias, sizeof(l->initiator_alias), value);
    } else if (strcmp(key, "TargetName") == 0) {
        if (l->first_done && strcasecmp(value, l->target_name) != 0)
            ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "TargetName changed during login");
        else if (copy_value(l->target_name, sizeof(l->target_name), value))
            ctx_fail(x, ISCSI_LOGIN_NOT_FOUND, "TargetName too long");
    } else if (strcmp(key, "SessionType") == 0) {
        if (strcmp(value, "Discovery") == 0) {
            if (l->first_done && !l->discovery)
                ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "SessionType changed during login");
            l->discovery = true;
        } else if (strcmp(value, "Normal") == 0) {
            if (l->first_done && l->discovery)
                ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "SessionType changed during login");
        } else {
            ctx_fail(x, ISCSI_LOGIN_SESSION_TYPE_UNSUPPORTED, "unknown SessionType");
        }
        l->have_session_type = true;
    } else if (strcmp(key, "AuthMethod") == 0) {
        if (copy_value(l->auth_method, sizeof(l->auth_method), value))
            ctx_fail(x, ISCSI_LOGIN_INITIATOR_ERROR, "AuthMethod too long");
    } else if (strcmp(key, "CHAP_A") == 0) {
        if (copy_value(l->chap_a, sizeof(l->chap_a), value))
            ctx_fail(x, ISCSI_LOGIN_AUTH_FAILED, "CHAP_A too long");
    } else if (strcmp(key, "CHAP_N") == 0) {
        if (copy_value(l->chap_n, sizeof(l->chap_n), value))
            ctx_fail(x, ISCSI_LOGIN_AUTH_FAILED, "CHAP_N too long");
    } else if (strcmp(key, "CHAP_R") == 0) {
        if (copy_value(l->chap_r, sizeof(l->chap_r), value))
            ctx_fail(x, ISCSI_LOGIN_AUTH_FAILED, "CHAP_R too long");
    } else if (strcmp(key, "CHAP_I") == 0) {
        if (copy_value(l->chap_i, sizeof(l->chap_i), value))
            ctx_fail(x, ISCSI_LOGIN_AUTH_FAILED, "CHAP_I too long");
    } else if (strcmp(key, "CHAP_C") == 0) {
        if (copy_value(l->chap_c, sizeof(l->chap_c), value))
            ctx_fail(x, ISCSI_LOGIN_AUTH_FAILED, "CHAP_C too long");
    } else if (strcmp(key, "SendTargets") == 0) {
        /* Only in full feature phase (RFC 7143 §13.3). */
        return iscsi_text_add(x->out, key, "Irrelevant");
    }
    return 0;
}

/* ------------------------------------------------------------- security */

static bool list_has(const char *list, const char *item)
{
    size_t il = strlen(item);
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == il && memcmp(p, item, il) == 0)
            return true;
        if (!comma)
            break;
        p = comma + 1;
    }
    return false;
}

/* Each step below returns 0, or a login status to fail with (why set). */

/* AuthMethod: the policy's method must be among those offered. */
static uint16_t sec_auth_method(struct iscsi_login *l, struct iscsi_text_out *out, const char **why)
{
    if (l->auth_method_chosen) {
        *why = "AuthMethod offered twice";
        return ISCSI_LOGIN_INITIATOR_ERROR;
    }
    const char *want = l->policy.method == ISCSI_AUTH_NONE ? "None" : "CHAP";
    if (!list_has(l->auth_method, want)) {
        iscsi_text_add(out, "AuthMethod", "Reject");
        *why = l->policy.method == ISCSI_AUTH_NONE ? "initiator does not offer AuthMethod=None"
                                                   : "CHAP required but not offered";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    iscsi_text_add(out, "AuthMethod", want);
    l->auth_method_chosen = true;
    l->method = l->policy.method;
    if (l->method == ISCSI_AUTH_NONE)
        l->authenticated = true;
    else
        l->chap = CHAP_WAIT_A;
    return 0;
}

/* CHAP_A: MD5 only; answer with our identifier and challenge. */
static uint16_t sec_chap_a(struct iscsi_login *l, struct iscsi_text_out *out, const char **why)
{
    if (l->chap != CHAP_WAIT_A) {
        *why = "CHAP_A out of sequence";
        return ISCSI_LOGIN_INITIATOR_ERROR;
    }
    if (!list_has(l->chap_a, "5")) {
        iscsi_text_add(out, "CHAP_A", "Reject");
        *why = "CHAP_A does not offer MD5 (5)";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    uint8_t id;
    if (iscsi_chap_random(&id, 1) < 0 ||
        iscsi_chap_random(l->chap_challenge, sizeof(l->chap_challenge)) < 0) {
        *why = "no random numbers";
        return ISCSI_LOGIN_TARGET_ERROR;
    }
    l->chap_id = id;
    char idv[8], chal[2 * ISCSI_CHAP_CHALLENGE_LEN + 3];
    snprintf(idv, sizeof(idv), "%u", id);
    iscsi_chap_encode_hex(l->chap_challenge, sizeof(l->chap_challenge), chal, sizeof(chal));
    iscsi_text_add(out, "CHAP_A", "5");
    iscsi_text_add(out, "CHAP_I", idv);
    iscsi_text_add(out, "CHAP_C", chal);
    l->chap = CHAP_WAIT_R;
    return 0;
}

/* CHAP_N/CHAP_R: the initiator's answer, throttled per name and address
 * (iscsi_chap.h). *credp is the user's credentials when it succeeds. */
static uint16_t sec_chap_check(struct iscsi_conn *ic, const struct iscsi_chap_cred **credp,
                               const char **why)
{
    struct iscsi_login *l = ic->login;
    if (l->chap != CHAP_WAIT_R || !l->chap_n[0] || !l->chap_r[0]) {
        *why = "CHAP_N/CHAP_R out of sequence";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    /* Throttled: not even checked, so that a guesser learns nothing;
     * "service unavailable" tells an honest initiator to retry later
     * rather than give up. */
    const char *blocked;
    const char *target = l->discovery ? "" : l->target_name;
    if (iscsi_chap_limit_check(l->initiator_name, target, &ic->peer_sa, &blocked)) {
        *why = strcmp(blocked, "address") == 0
                   ? "CHAP refused: too many failed logins from this address, retry later"
                   : "CHAP refused: too many failed logins for this initiator, retry later";
        return ISCSI_LOGIN_SERVICE_UNAVAILABLE;
    }
    const struct iscsi_chap_cred *cred = NULL;
    for (size_t i = 0; i < l->policy.n_creds; i++)
        if (strcmp(l->policy.creds[i].user, l->chap_n) == 0)
            cred = &l->policy.creds[i];
    uint8_t got[ISCSI_CHAP_BINARY_MAX];
    int glen = iscsi_chap_decode(l->chap_r, got, sizeof(got));
    uint8_t want[ISCSI_CHAP_DIGEST_LEN];
    if (!cred || glen != ISCSI_CHAP_DIGEST_LEN ||
        iscsi_chap_response(l->chap_id, cred->secret, l->chap_challenge, sizeof(l->chap_challenge),
                            want) < 0 ||
        !iscsi_chap_equal(got, want, ISCSI_CHAP_DIGEST_LEN)) {
        *why = cred ? "wrong CHAP response (secret mismatch)" : "unknown CHAP user";
        if (iscsi_chap_limit_failed(l->initiator_name, target, &ic->peer_sa))
            log_warn("%s: CHAP: initiator '%s' or its address blocked for %d s after %d "
                     "failed logins to %s",
                     ic->c->peer, l->initiator_name, ISCSI_CHAP_BLOCK_MS / 1000,
                     ISCSI_CHAP_FAIL_MAX, target[0] ? target : "discovery");
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    iscsi_chap_limit_succeeded(l->initiator_name, target, &ic->peer_sa);
    *credp = cred;
    return 0;
}

/* Mutual CHAP: answer the initiator's challenge with the peer secret. */
static uint16_t sec_chap_mutual(struct iscsi_login *l, const struct iscsi_chap_cred *cred,
                                struct iscsi_text_out *out, const char **why)
{
    uint64_t iid;
    uint8_t ichal[ISCSI_CHAP_BINARY_MAX];
    int clen = iscsi_chap_decode(l->chap_c, ichal, sizeof(ichal));
    if (!l->chap_i[0] || !l->chap_c[0] || iscsi_parse_u64(l->chap_i, &iid) < 0 || iid > 255 ||
        clen <= 0) {
        *why = "malformed CHAP_I/CHAP_C";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    if (!cred->peeruser[0] || !cred->peersecret[0]) {
        *why = "mutual CHAP requested but no peer secret is configured";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    /* Refuse a reflected challenge (RFC 7143 §12.1.3). */
    if ((size_t)clen == sizeof(l->chap_challenge) &&
        memcmp(ichal, l->chap_challenge, (size_t)clen) == 0) {
        *why = "initiator reflected our CHAP challenge";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    uint8_t rsp[ISCSI_CHAP_DIGEST_LEN];
    if (iscsi_chap_response((uint8_t)iid, cred->peersecret, ichal, (size_t)clen, rsp) < 0) {
        *why = "MD5 failed";
        return ISCSI_LOGIN_TARGET_ERROR;
    }
    char hex[2 * ISCSI_CHAP_DIGEST_LEN + 3];
    iscsi_chap_encode_hex(rsp, sizeof(rsp), hex, sizeof(hex));
    iscsi_text_add(out, "CHAP_N", cred->peeruser);
    iscsi_text_add(out, "CHAP_R", hex);
    return 0;
}

/* CHAP_N/CHAP_R (and CHAP_I/CHAP_C for mutual CHAP): authenticates. */
static uint16_t sec_chap_response(struct iscsi_conn *ic, struct iscsi_text_out *out,
                                  const char **why)
{
    struct iscsi_login *l = ic->login;
    const struct iscsi_chap_cred *cred = NULL;
    uint16_t st = sec_chap_check(ic, &cred, why);
    if (st)
        return st;
    bool mutual_req = l->chap_i[0] || l->chap_c[0];
    if (l->policy.method == ISCSI_AUTH_CHAP_MUTUAL && !mutual_req) {
        *why = "mutual CHAP required but the initiator sent no challenge";
        return ISCSI_LOGIN_AUTH_FAILED;
    }
    if (mutual_req && (st = sec_chap_mutual(l, cred, out, why)))
        return st;
    l->chap = CHAP_DONE;
    l->authenticated = true;
    log_info("%s: CHAP%s authentication of '%s' as '%s' succeeded", ic->c->peer,
             mutual_req ? " (mutual)" : "", l->initiator_name, l->chap_n);
    return 0;
}

/* The security stage's keys, in the order they arrive in one PDU. */
static uint16_t security_step(struct iscsi_conn *ic, struct iscsi_text_out *out, const char **why)
{
    struct iscsi_login *l = ic->login;
    uint16_t st = 0;
    if (l->auth_method[0] && (st = sec_auth_method(l, out, why)))
        return st;
    if (l->chap_a[0] && (st = sec_chap_a(l, out, why)))
        return st;
    if (l->chap_n[0] || l->chap_r[0])
        st = sec_chap_response(ic, out, why);
    return st;
}

/* ------------------------------------------------------------- session */

static size_t session_list_luns(const struct scsi_nexus *n, uint64_t *out, size_t max)
{
    struct iscsi_session *s = n->arg;
    const struct iscsi_target_view *v = iscsi_session_view(s);
    if (!v)
        return 0;
    for (size_t i = 0; i < v->n_luns && i < max; i++)
        out[i] = v->luns[i].lun;
    return v->n_luns;
}

static int session_create(struct iscsi_conn *ic)
{
    struct iscsi_login *l = ic->login;
    struct iscsi_session *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    s->ic = ic;
    struct iscsi_session_info *in = &s->info;
    snprintf(in->initiator, sizeof(in->initiator), "%s", l->initiator_name);
    snprintf(in->initiator_alias, sizeof(in->initiator_alias), "%s", l->initiator_alias);
    snprintf(in->initiator_addr, sizeof(in->initiator_addr), "%s", ic->c->peer);
    snprintf(in->target_addr, sizeof(in->target_addr), "%s", ic->local_addr);
    in->discovery = l->discovery;
    uint64_t isid = 0;
    for (int i = 0; i < 6; i++)
        isid = isid << 8 | l->isid[i];
    in->isid = isid;
    in->portal_tag = reported_tag(ic);
    const struct iscsi_params *p = &l->neg.params;
    in->header_digest = p->header_digest;
    in->data_digest = p->data_digest;
    in->immediate_data = p->immediate_data;
    in->initial_r2t = p->initial_r2t;
    in->max_recv_data_segment_length = p->max_send_dsl;
    in->max_xmit_data_segment_length = p->max_recv_dsl;
    in->max_burst_length = p->max_burst;
    in->first_burst_length = p->first_burst;
    in->max_outstanding_r2t = p->max_outstanding_r2t;
    in->connections = 1;
    in->connected_at = (uint64_t)time(NULL);
    if (!l->discovery) {
        s->view = l->view;
        l->view = NULL;
        s->view_gen = iscsi_runtime_generation();
        snprintf(in->target, sizeof(in->target), "%s", s->view->iqn);
        in->target_id = s->view->id;
        struct scsi_nexus *n = &s->nexus;
        snprintf(n->initiator_port, sizeof(n->initiator_port), "%s,i,0x%012llx", l->initiator_name,
                 (unsigned long long)isid);
        snprintf(n->initiator_name, sizeof(n->initiator_name), "%s", l->initiator_name);
        snprintf(n->target_port, sizeof(n->target_port), "%s,t,0x%04x", s->view->iqn,
                 reported_tag(ic));
        snprintf(n->target_name, sizeof(n->target_name), "%s", s->view->iqn);
        n->rel_tgt_port_id = s->view->rel_tgt_id ? s->view->rel_tgt_id : 1;
        n->tpg_id = 1;
        if (gateway_enabled()) {
            /* A gateway group: this member is one port group of every
             * target, the same numbers on every target (gateway.h). */
            n->rel_tgt_port_id = (uint16_t)gateway_id();
            n->tpg_id = (uint16_t)gateway_id();
        }
        n->list_luns = session_list_luns;
        n->arg = s;
        scsi_nexus_init(n);
    }
    s->exp_cmd_sn = l->cmdsn;
    s->depth = iscsi_server_queue_depth();
    in->tsih = iscsi_session_new_tsih();
    l->tsih = in->tsih;
    ic->sess = s;
    if (!l->discovery)
        iscsi_session_reinstate(s);
    return iscsi_session_register(s);
}

/* ------------------------------------------------------------- the PDU */

/*
 * A Login Request goes through the stages of login_stages[] in order. The
 * first stage that does not answer LOGIN_NEXT decides the outcome, and
 * login_finish() — the one exit — answers it: a reject (status
 * class/detail, then close), an empty response to a partial text (C bit),
 * or the negotiated keys with the stage transition the initiator asked for.
 */
enum login_verdict {
    LOGIN_NEXT,    /* go on with the next stage; after the last: respond */
    LOGIN_FAIL,    /* reject with status/why, then close */
    LOGIN_PARTIAL, /* C bit: text collected, answer with an empty response */
    LOGIN_DROP,    /* not a Login Request: close without an answer (err) */
};

/* One Login Request on its way through the stages. */
struct login_req {
    struct iscsi_conn *ic;
    struct iscsi_login *l;
    const uint8_t *bhs;
    const uint8_t *data; /* the text: this PDU's, or all that was collected */
    uint32_t dsl;
    bool first; /* the first request of the login (no text collected before) */
    bool transit, cont;
    uint8_t csg, nsg;
    bool go;                   /* the transition to nsg happens */
    struct iscsi_text_out out; /* keys to answer */
    uint16_t status;           /* LOGIN_FAIL */
    const char *why;           /* LOGIN_FAIL */
    int err;                   /* LOGIN_DROP */
};

static enum login_verdict login_reject(struct login_req *r, uint16_t status, const char *why)
{
    r->status = status;
    r->why = why;
    return LOGIN_FAIL;
}

/* The BHS: opcode, ISID/CID (fixed for the login), version, stages, T/C. */
static enum login_verdict stage_header(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    const uint8_t *bhs = r->bhs;
    if (iscsi_bhs_opcode(bhs) != ISCSI_OP_LOGIN_REQ) {
        log_warn("%s: %s before login completed", r->ic->c->peer,
                 iscsi_opcode_name(iscsi_bhs_opcode(bhs)));
        r->err = -EPROTO;
        return LOGIN_DROP;
    }
    if (r->first && !l->pending) {
        memcpy(l->isid, bhs + 8, 6);
        l->tsih = be16_load(bhs + 14);
        l->cid = be16_load(bhs + 20);
        l->stage = r->csg;
        r->ic->cid = l->cid;
        iscsi_neg_init(&l->neg, NULL);
    } else if (memcmp(l->isid, bhs + 8, 6) != 0 || be16_load(bhs + 20) != l->cid) {
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "ISID/CID changed during login");
    }
    l->itt = iscsi_bhs_itt(bhs);
    l->cmdsn = be32_load(bhs + 24);
    if (bhs[3] > 0 || bhs[2] < bhs[3])
        return login_reject(r, ISCSI_LOGIN_UNSUPPORTED_VERSION, "unsupported version");
    if (r->csg != l->stage || r->csg == 2 || r->csg == 3)
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "invalid current stage");
    if (r->transit && r->cont)
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "T and C bits both set");
    if (r->transit && (r->nsg == 2 || r->nsg <= r->csg))
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "invalid next stage");
    return LOGIN_NEXT;
}

/* Text spread over several PDUs (C bit): collect it, answer each part
 * empty, and go on with the whole text once the last part arrives. */
static enum login_verdict stage_continued_text(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    if (!r->cont && !l->pending)
        return LOGIN_NEXT;
    if (l->pending_len + r->dsl > LOGIN_TEXT_MAX)
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "login text too long");
    char *p = realloc(l->pending, l->pending_len + r->dsl + 1);
    if (!p)
        return login_reject(r, ISCSI_LOGIN_OUT_OF_RESOURCES, "out of memory");
    memcpy(p + l->pending_len, r->data, r->dsl);
    l->pending = p;
    l->pending_len += r->dsl;
    if (r->cont)
        return LOGIN_PARTIAL;
    r->data = (const uint8_t *)l->pending;
    r->dsl = (uint32_t)l->pending_len;
    return LOGIN_NEXT;
}

/* Every key of the text, through login_key (operational keys go to the
 * negotiation table, the rest are kept in the login for the stages below). */
static enum login_verdict stage_keys(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    l->auth_method[0] = l->chap_a[0] = l->chap_n[0] = l->chap_r[0] = '\0';
    l->chap_i[0] = l->chap_c[0] = '\0';
    struct login_ctx x = {r->ic, &r->out, false, NULL, 0};
    int rc = iscsi_text_parse((const char *)r->data, r->dsl, login_key, &x);
    free(l->pending);
    l->pending = NULL;
    l->pending_len = 0;
    r->data = NULL;
    if (rc == -EINVAL)
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "malformed login text");
    if (rc == -E2BIG)
        return login_reject(r, ISCSI_LOGIN_INITIATOR_ERROR, "login response too long");
    if (rc < 0)
        return login_reject(r, ISCSI_LOGIN_OUT_OF_RESOURCES, "out of memory");
    if (x.bad_value)
        return login_reject(r, x.bad_status, x.bad_why);
    return LOGIN_NEXT;
}

/* First request: who the initiator is, and a new session (no TSIH). */
static enum login_verdict stage_session(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    if (!r->first)
        return LOGIN_NEXT;
    l->first_done = true;
    if (!l->initiator_name[0])
        return login_reject(r, ISCSI_LOGIN_MISSING_PARAMETER, "no InitiatorName");
    if (l->tsih != 0) {
        /* Adding a connection to an existing session: MaxConnections=1. */
        return login_reject(r,
                            iscsi_session_tsih_exists(l->tsih) ? ISCSI_LOGIN_TOO_MANY_CONNECTIONS
                                                               : ISCSI_LOGIN_SESSION_DOES_NOT_EXIST,
                            "TSIH != 0 (one connection per session)");
    }
    return LOGIN_NEXT;
}

/* First request: the target and whether this initiator may use it, which
 * decides the authentication policy (discovery has its own). */
static enum login_verdict stage_target(struct login_req *r)
{
    struct iscsi_conn *ic = r->ic;
    struct iscsi_login *l = r->l;
    if (!r->first)
        return LOGIN_NEXT;
    if (l->discovery) {
        if (iscsi_runtime_discovery_auth(&l->policy) < 0)
            return login_reject(r, ISCSI_LOGIN_TARGET_ERROR, "discovery settings unavailable");
        l->policy_owned = true;
        return LOGIN_NEXT;
    }
    if (!l->target_name[0])
        return login_reject(r, ISCSI_LOGIN_MISSING_PARAMETER, "no TargetName");
    l->view = iscsi_runtime_find_target(l->target_name);
    if (!l->view)
        return login_reject(r, ISCSI_LOGIN_NOT_FOUND, "no such target");
    int g = iscsi_target_access(l->view, l->initiator_name, ic->portal_tag,
                                (const struct sockaddr *)&ic->peer_sa);
    if (g < 0)
        return login_reject(r, ISCSI_LOGIN_FORBIDDEN,
                            "initiator not allowed (groups/auth_networks)");
    l->target_group = g;
    if (l->view->n_groups)
        l->policy = l->view->groups[g].auth;
    else
        memset(&l->policy, 0, sizeof(l->policy));
    char tag[8];
    snprintf(tag, sizeof(tag), "%u", reported_tag(ic));
    iscsi_text_add(&r->out, "TargetPortalGroupTag", tag);
    if (l->view->alias[0])
        iscsi_text_add(&r->out, "TargetAlias", l->view->alias);
    return LOGIN_NEXT;
}

/* CSG 0: AuthMethod and CHAP (security_step). */
static enum login_verdict stage_security(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    if (r->csg != ISCSI_STAGE_SECURITY)
        return LOGIN_NEXT;
    const char *why = NULL;
    uint16_t status = security_step(r->ic, &r->out, &why);
    if (status)
        return login_reject(r, status, why);
    if (r->transit && !l->auth_method_chosen) {
        /* No AuthMethod offered: its default is None. */
        if (l->policy.method != ISCSI_AUTH_NONE)
            return login_reject(r, ISCSI_LOGIN_AUTH_FAILED, "authentication required");
        l->authenticated = true;
    }
    return LOGIN_NEXT;
}

/* CSG 1: the operational keys we declare (the initiator's were answered
 * by login_key). Reaching it without authentication is allowed only when
 * the policy asks for none. */
static enum login_verdict stage_operational(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    if (r->csg == ISCSI_STAGE_SECURITY)
        return LOGIN_NEXT;
    if (!l->authenticated) {
        if (l->policy.method != ISCSI_AUTH_NONE)
            return login_reject(r, ISCSI_LOGIN_AUTH_FAILED,
                                "security negotiation skipped but authentication required");
        l->authenticated = true;
    }
    if (iscsi_neg_declare(&l->neg, &r->out) < 0)
        return login_reject(r, ISCSI_LOGIN_TARGET_ERROR, "response too long");
    return LOGIN_NEXT;
}

/* T bit and authenticated: the transition happens; to full feature phase
 * it needs a session (registered before the response leaves). */
static enum login_verdict stage_full_feature(struct login_req *r)
{
    struct iscsi_login *l = r->l;
    r->go = r->transit && l->authenticated;
    if (!r->go || r->nsg != ISCSI_STAGE_FULL_FEATURE)
        return LOGIN_NEXT;
    iscsi_neg_finish(&l->neg);
    if (session_create(r->ic) < 0)
        return login_reject(r, ISCSI_LOGIN_OUT_OF_RESOURCES, "session registry full");
    return LOGIN_NEXT;
}

static const struct login_stage {
    const char *name; /* for the debug log */
    enum login_verdict (*run)(struct login_req *r);
} login_stages[] = {
    {"request header", stage_header},
    {"continued text", stage_continued_text},
    {"login keys", stage_keys},
    {"initiator and session", stage_session},
    {"target and access", stage_target},
    {"security negotiation", stage_security},
    {"operational negotiation", stage_operational},
    {"full feature transition", stage_full_feature},
};

/* The one exit: answer the request as the stages decided. Returns 0, or
 * <0 to close the connection (after a reject has been flushed). */
static int login_finish(struct login_req *r, enum login_verdict v)
{
    struct iscsi_conn *ic = r->ic;
    struct iscsi_login *l = r->l;
    switch (v) {
    case LOGIN_DROP:
        return r->err;
    case LOGIN_FAIL:
        return login_fail(ic, r->status, r->why);
    case LOGIN_PARTIAL:
        return send_login_response(ic, (uint8_t)(r->csg << 2), 0, NULL);
    case LOGIN_NEXT:
        break;
    }
    uint8_t rflags = (uint8_t)(r->csg << 2);
    if (r->go)
        rflags |= ISCSI_LOGIN_TRANSIT | r->nsg;
    int rc = send_login_response(ic, rflags, 0, &r->out);
    if (rc < 0 || !r->go)
        return rc < 0 ? rc : 0;
    l->stage = r->nsg;
    if (r->nsg != ISCSI_STAGE_FULL_FEATURE)
        return 0;
    ic->params = l->neg.params;
    log_info("%s: %s session of '%s'%s%s logged in (TSIH %u, digests %s/%s, "
             "MaxRecvDataSegmentLength %u/%u, MaxBurstLength %u, FirstBurstLength %u, "
             "ImmediateData %s, InitialR2T %s)",
             ic->c->peer, l->discovery ? "discovery" : "normal", l->initiator_name,
             l->discovery ? "" : " to ", l->discovery ? "" : ic->sess->info.target, l->tsih,
             ic->params.header_digest ? "CRC32C" : "None",
             ic->params.data_digest ? "CRC32C" : "None", ic->params.max_send_dsl,
             ic->params.max_recv_dsl, ic->params.max_burst, ic->params.first_burst,
             ic->params.immediate_data ? "Yes" : "No", ic->params.initial_r2t ? "Yes" : "No");
    iscsi_login_free(l);
    ic->login = NULL;
    return iscsi_conn_enter_full_feature(ic);
}

int iscsi_login_handle(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *data, uint32_t dsl)
{
    struct iscsi_login *l = ic->login;
    uint8_t flags = bhs[1];
    struct login_req r = {
        .ic = ic,
        .l = l,
        .bhs = bhs,
        .data = data,
        .dsl = dsl,
        .first = !l->first_done,
        .transit = flags & ISCSI_LOGIN_TRANSIT,
        .cont = flags & ISCSI_LOGIN_CONTINUE,
        .csg = ISCSI_LOGIN_CSG(flags),
        .nsg = ISCSI_LOGIN_NSG(flags),
    };
    iscsi_text_out_init(&r.out, ISCSI_LOGIN_DSL_MAX);
    enum login_verdict v = LOGIN_NEXT;
    for (size_t i = 0; i < ARRAY_SIZE(login_stages) && v == LOGIN_NEXT; i++) {
        v = login_stages[i].run(&r);
        if (v != LOGIN_NEXT)
            log_debug("%s: login request stopped at stage '%s' (%d)", ic->c->peer,
                      login_stages[i].name, (int)v);
    }
    int rc = login_finish(&r, v);
    iscsi_text_out_free(&r.out);
    return rc;
}
