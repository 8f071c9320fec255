/*
 * Reservations: SPC-2 RESERVE/RELEASE and SPC-4 persistent reservations
 * (PERSISTENT RESERVE IN/OUT, every service action and the six disk types),
 * the conflict rules applied before dispatch, and where the state lives:
 *   - local LUs (file volumes): lu->pr under lu->mu; APTPL state is saved
 *     through the config layer's save callback (pr_store);
 *   - shared LUs (RBD volumes, scsi_pr_shared.c): the state lives in the
 *     cluster; a service action runs on a fresh copy on the I/O pool and is
 *     committed with a compare-and-swap, and lu->pr is the cache every
 *     command's conflict check reads.
 * Both run the same service actions below on a struct scsi_pr_change (a
 * copy of the state plus the unit attentions the action queues), so the
 * rules exist once.
 *
 * Registrations are keyed by I_T nexus identity (initiator port name +
 * relative target port id, 0 = every target port), not by session, so they
 * survive logout, restarts (APTPL) and are meaningful on every daemon.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"

enum pr_type {
    PR_WE = 1,
    PR_EA = 3,
    PR_WE_RO = 5,
    PR_EA_RO = 6,
    PR_WE_AR = 7,
    PR_EA_AR = 8,
};

enum pr_result {
    PR_OK = SCSI_PR_OK,
    PR_CONFLICT = SCSI_PR_CONFLICT,
    PR_FAILED = SCSI_PR_FAILED, /* sense already set */
    PR_NOOP = SCSI_PR_NOOP,
};

static bool type_valid(unsigned t)
{
    return t == PR_WE || t == PR_EA || t == PR_WE_RO || t == PR_EA_RO || t == PR_WE_AR ||
           t == PR_EA_AR;
}

/* Registrants-only and all-registrants types: every registrant acts as a holder
 * for access purposes; for AR types every registrant *is* a holder. */
static bool type_all_registrants(unsigned t)
{
    return t == PR_WE_AR || t == PR_EA_AR;
}

static bool type_registrants(unsigned t)
{
    return t == PR_WE_RO || t == PR_EA_RO || type_all_registrants(t);
}

/* Does registration r stand for the I_T nexus (port, rel)? */
static bool reg_matches(const struct scsi_pr_reg *r, const char *port, uint16_t rel)
{
    return (r->rel_tgt_port_id == 0 || r->rel_tgt_port_id == rel) &&
           strcasecmp(r->initiator_port, port) == 0;
}

static long reg_find(const struct scsi_pr_state *s, const char *port, uint16_t rel)
{
    for (size_t i = 0; i < s->nregs; i++)
        if (reg_matches(&s->regs[i], port, rel))
            return (long)i;
    return -1;
}

static long reg_of(const struct scsi_pr_state *s, const struct scsi_nexus *n)
{
    return reg_find(s, n->initiator_port, n->rel_tgt_port_id);
}

static bool is_holder(const struct scsi_pr_state *s, const struct scsi_nexus *n)
{
    if (!s->held)
        return false;
    long i = reg_of(s, n);
    if (i < 0)
        return false;
    return type_all_registrants(s->type) || (size_t)i == s->holder;
}

static bool res2_mine(const struct scsi_pr_state *s, const struct scsi_nexus *n)
{
    return n && s->res2_rel == n->rel_tgt_port_id &&
           strcasecmp(s->res2_port, n->initiator_port) == 0;
}

bool scsi_pr_conflict_locked(struct scsi_lu *lu, const struct scsi_nexus *n,
                             const struct scsi_op *op, const uint8_t *cdb)
{
    (void)cdb;
    const struct scsi_pr_state *s = &lu->pr;
    if (s->res2_held && !res2_mine(s, n) && !(op->flags & OPF_RES2_ALLOW))
        return true;
    if (!s->held || (op->flags & OPF_PR_ALLOW))
        return false;
    if (is_holder(s, n))
        return false;
    bool registered = reg_of(s, n) >= 0;
    bool read = op->flags & OPF_PR_READ;
    switch (s->type) {
    case PR_WE:
        return !read;
    case PR_EA:
        return true;
    case PR_WE_RO:
    case PR_WE_AR:
        return !registered && !read;
    case PR_EA_RO:
    case PR_EA_AR:
        return !registered;
    default:
        return true;
    }
}

/* ---- state copies ---- */

void scsi_pr_state_free(struct scsi_pr_state *s)
{
    free(s->regs);
    s->regs = NULL;
    s->nregs = 0;
}

static int regs_alloc(struct scsi_pr_state *s)
{
    if (!s->regs) {
        s->regs = calloc(SCSI_PR_MAX_REGS, sizeof *s->regs);
        if (!s->regs)
            return -ENOMEM;
    }
    return 0;
}

int scsi_pr_state_copy(struct scsi_pr_state *dst, const struct scsi_pr_state *src)
{
    struct scsi_pr_reg *regs = NULL;
    if (src->nregs) {
        regs = calloc(SCSI_PR_MAX_REGS, sizeof *regs);
        if (!regs)
            return -ENOMEM;
        memcpy(regs, src->regs, src->nregs * sizeof *regs);
    }
    *dst = *src;
    dst->regs = regs;
    return 0;
}

/* ---- unit attentions of a change ---- */

void scsi_pr_change_ua(struct scsi_pr_change *ch, const char *port, uint16_t rel, enum scsi_ua ua,
                       bool except)
{
    if (ch->nuas >= SCSI_PR_MAX_UAS)
        return;
    struct scsi_pr_ua *u = &ch->uas[ch->nuas++];
    u->ua = (uint8_t)ua;
    u->except = except;
    u->rel = rel;
    snprintf(u->port, sizeof u->port, "%s", port);
}

static void ch_ua(struct scsi_pr_change *ch, const char *port, uint16_t rel, enum scsi_ua ua)
{
    scsi_pr_change_ua(ch, port, rel, ua, false);
}

void scsi_pr_apply_uas_locked(struct scsi_lu *lu, const struct scsi_pr_change *ch)
{
    for (size_t i = 0; i < ch->nuas; i++) {
        const struct scsi_pr_ua *u = &ch->uas[i];
        if (!u->except) {
            scsi_lu_ua_port_locked(lu, u->port, u->rel, u->ua);
            continue;
        }
        for (struct scsi_nexus_state *ns = lu->nexuses; ns; ns = ns->next)
            if (ns->rel_tgt_port_id != u->rel || strcasecmp(ns->initiator_port, u->port) != 0)
                ns->ua_pending |= 1u << u->ua;
    }
}

/* ---- text form ---- */

char *scsi_pr_state_format(const struct scsi_pr_state *s, const struct scsi_pr_change *uas,
                           uint64_t seq, size_t *len)
{
    size_t nu = uas ? uas->nuas : 0;
    size_t cap = 256 + (s->nregs + nu + 1) * (SCSI_PORT_NAME_MAX + 48);
    char *b = malloc(cap);
    if (!b)
        return NULL;
    size_t off = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(b + off, cap - off, __VA_ARGS__);                                        \
        if (n_ > 0 && (size_t)n_ < cap - off)                                                      \
            off += (size_t)n_;                                                                     \
    } while (0)
    PUT("blockd-pr 1\n");
    if (uas)
        PUT("seq %" PRIu64 "\n", seq);
    PUT("gen %" PRIu32 "\nres %d %u %zu\naptpl %d\n", s->generation, s->held ? 1 : 0, s->type,
        s->holder, s->aptpl ? 1 : 0);
    if (s->res2_held)
        PUT("res2 %u %s\n", s->res2_rel, s->res2_port);
    if (s->swp)
        PUT("swp 1\n");
    for (size_t i = 0; i < s->nregs; i++)
        PUT("reg %016" PRIx64 " %u %s\n", s->regs[i].key, s->regs[i].rel_tgt_port_id,
            s->regs[i].initiator_port);
    for (size_t i = 0; i < nu; i++)
        PUT("%s %u %u %s\n", uas->uas[i].except ? "uax" : "ua", uas->uas[i].ua, uas->uas[i].rel,
            uas->uas[i].port);
#undef PUT
    *len = off;
    return b;
}

int scsi_pr_state_parse(const char *blob, size_t len, struct scsi_pr_change *out, uint64_t *seq)
{
    memset(&out->s, 0, sizeof out->s);
    out->nuas = 0;
    if (len == 0)
        return 0; /* a new, empty object */
    char *text = malloc(len + 1);
    if (!text)
        return -ENOMEM;
    memcpy(text, blob, len);
    text[len] = 0;
    struct scsi_pr_state *s = &out->s;
    s->aptpl = true; /* APTPL blobs of local LUs have no aptpl line */
    int rc = regs_alloc(s);
    bool header = false;
    char *next = text;
    while (rc == 0 && next && *next) {
        char *line = next;
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = 0;
        if (!*line)
            continue;
        unsigned v, held, type, rel, ua;
        size_t holder;
        uint32_t gen;
        uint64_t key, sq;
        char port[SCSI_PORT_NAME_MAX];
        if (sscanf(line, "blockd-pr %u", &v) == 1) {
            header = v == 1;
        } else if (sscanf(line, "seq %" SCNu64, &sq) == 1) {
            if (seq)
                *seq = sq;
        } else if (sscanf(line, "gen %" SCNu32, &gen) == 1) {
            s->generation = gen;
        } else if (sscanf(line, "res %u %u %zu", &held, &type, &holder) == 3) {
            s->held = held != 0;
            s->type = (uint8_t)type;
            s->holder = holder;
        } else if (sscanf(line, "aptpl %u", &v) == 1) {
            s->aptpl = v != 0;
        } else if (sscanf(line, "res2 %u %255s", &rel, port) == 2 && rel <= 0xffff) {
            s->res2_held = true;
            s->res2_rel = (uint16_t)rel;
            snprintf(s->res2_port, sizeof s->res2_port, "%s", port);
        } else if (sscanf(line, "reg %" SCNx64 " %u %255s", &key, &rel, port) == 3) {
            if (s->nregs >= SCSI_PR_MAX_REGS || rel > 0xffff) {
                rc = -EINVAL;
                break;
            }
            struct scsi_pr_reg *r = &s->regs[s->nregs++];
            r->key = key;
            r->rel_tgt_port_id = (uint16_t)rel;
            snprintf(r->initiator_port, sizeof r->initiator_port, "%s", port);
        } else if (sscanf(line, "swp %u", &v) == 1) {
            s->swp = v != 0;
        } else if (sscanf(line, "ua %u %u %255s", &ua, &rel, port) == 3 && ua < SCSI_UA_COUNT &&
                   rel <= 0xffff) {
            ch_ua(out, port, (uint16_t)rel, (enum scsi_ua)ua);
        } else if (sscanf(line, "uax %u %u %255s", &ua, &rel, port) == 3 && ua < SCSI_UA_COUNT &&
                   rel <= 0xffff) {
            scsi_pr_change_ua(out, port, (uint16_t)rel, (enum scsi_ua)ua, true);
        } else {
            rc = -EINVAL;
        }
    }
    free(text);
    if (rc == 0 && !header)
        rc = -EINVAL;
    if (rc == 0 && s->held &&
        (!type_valid(s->type) || (!type_all_registrants(s->type) && s->holder >= s->nregs) ||
         s->nregs == 0))
        rc = -EINVAL;
    if (rc < 0)
        scsi_pr_state_free(s);
    return rc;
}

int scsi_pr_load(struct scsi_lu *lu, const void *blob, size_t len)
{
    struct scsi_pr_change *ch = calloc(1, sizeof *ch);
    if (!ch)
        return -ENOMEM;
    int rc = scsi_pr_state_parse(blob, len, ch, NULL);
    if (rc == 0) {
        ch->s.aptpl = true; /* only APTPL state is ever saved */
        ch->s.res2_held = false;
        ch->s.swp = false;
        scsi_pr_state_free(&lu->pr);
        lu->pr = ch->s;
    }
    free(ch);
    return rc;
}

/* After a change of a local LU: persist when APTPL is (or was) on. */
static int pr_persist(struct scsi_lu *lu, const struct scsi_pr_state *s, bool was_aptpl)
{
    if (!lu->pr_store.save || (!s->aptpl && !was_aptpl))
        return 0;
    if (!s->aptpl || s->nregs == 0)
        return lu->pr_store.save(lu->pr_store.arg, NULL, 0);
    struct scsi_pr_state saved = *s;
    saved.res2_held = false; /* SPC-2 reservations never persist */
    saved.swp = false;       /* nor mode parameters (SP is not supported) */
    size_t len;
    char *b = scsi_pr_state_format(&saved, NULL, 0, &len);
    if (!b)
        return -ENOMEM;
    int rc = lu->pr_store.save(lu->pr_store.arg, b, len);
    free(b);
    return rc;
}

/*
 * Run action for c: on the shared store (asynchronously, scsi_pr_shared.c)
 * or on lu->pr under the mutex. Completes c either way.
 */
static void pr_execute(struct scsi_cmd *c, scsi_pr_action action, const void *arg, size_t arg_len)
{
    struct scsi_lu *lu = c->lu;
    if (lu->shared) {
        scsi_pr_shared_update(lu, c, action, arg, arg_len);
        return;
    }
    struct scsi_pr_change *ch = malloc(sizeof *ch);
    if (!ch) {
        scsi_fail_errno(c, -ENOMEM, false);
        scsi_complete(c);
        return;
    }
    ch->nuas = 0;
    pthread_mutex_lock(&lu->mu);
    int res = scsi_pr_state_copy(&ch->s, &lu->pr);
    if (res < 0) {
        scsi_fail_errno(c, res, false);
        res = PR_FAILED;
    } else {
        res = action(c, ch, arg);
    }
    if (res == PR_OK) {
        int rc = pr_persist(lu, &ch->s, lu->pr.aptpl);
        if (rc < 0) {
            log_error("scsi: %s: saving persistent reservations failed: %d", volume_name(lu->vol),
                      rc);
            scsi_sense_fill(c, SK_HARDWARE_ERROR, 0x44, 0x00);
            res = PR_FAILED;
        }
    }
    if (res == PR_OK) {
        struct scsi_pr_state old = lu->pr;
        lu->pr = ch->s;
        ch->s = old;
        scsi_pr_apply_uas_locked(lu, ch);
    }
    pthread_mutex_unlock(&lu->mu);
    scsi_pr_state_free(&ch->s);
    free(ch);
    if (res == PR_CONFLICT) {
        c->status = SCSI_STATUS_RESERVATION_CONFLICT;
        c->sense_len = 0;
    }
    scsi_complete(c);
}

/* ---- SPC-2 RESERVE / RELEASE ---- */

static int act_reserve(struct scsi_cmd *c, struct scsi_pr_change *ch, const void *arg)
{
    (void)arg;
    struct scsi_pr_state *s = &ch->s;
    const struct scsi_nexus *n = c->nexus;
    if (s->nregs || s->held || (s->res2_held && !res2_mine(s, n)))
        return PR_CONFLICT;
    if (s->res2_held)
        return PR_NOOP;
    s->res2_held = true;
    s->res2_rel = n ? n->rel_tgt_port_id : 0;
    snprintf(s->res2_port, sizeof s->res2_port, "%s", n ? n->initiator_port : "");
    return PR_OK;
}

static int act_release(struct scsi_cmd *c, struct scsi_pr_change *ch, const void *arg)
{
    (void)arg;
    struct scsi_pr_state *s = &ch->s;
    if (s->nregs || s->held)
        return PR_CONFLICT;
    /* Releasing someone else's (or no) reservation is a no-op with GOOD. */
    if (!s->res2_held || !res2_mine(s, c->nexus))
        return PR_NOOP;
    s->res2_held = false;
    return PR_OK;
}

void scsi_run_reserve(struct scsi_cmd *c)
{
    pr_execute(c, act_reserve, NULL, 0);
}

void scsi_run_release(struct scsi_cmd *c)
{
    pr_execute(c, act_release, NULL, 0);
}

bool scsi_pr_res2_release(struct scsi_pr_state *s, const struct scsi_pr_res2_who *w)
{
    if (!s->res2_held)
        return false;
    if (w->port[0] && (s->res2_rel != w->rel || strcasecmp(s->res2_port, w->port) != 0))
        return false;
    s->res2_held = false;
    return true;
}

void scsi_pr_res2_drop(struct scsi_lu *lu, const struct scsi_nexus *n)
{
    struct scsi_pr_res2_who w = {.rel = n ? n->rel_tgt_port_id : 0};
    snprintf(w.port, sizeof w.port, "%s", n ? n->initiator_port : "");
    pthread_mutex_lock(&lu->mu);
    /* A shared LU's cache has every reservation made through this daemon
     * (installed before the RESERVE completed): nothing there, nothing to
     * release in the cluster either. */
    bool held = lu->pr.res2_held && (!n || res2_mine(&lu->pr, n));
    if (held && !lu->shared)
        scsi_pr_res2_release(&lu->pr, &w);
    pthread_mutex_unlock(&lu->mu);
    if (held && lu->shared)
        scsi_pr_shared_drop_res2(lu, &w);
}

/* ---- PERSISTENT RESERVE IN ---- */

static size_t put_transport_id(uint8_t *p, const char *port)
{
    /* iSCSI TransportID, format 01b: "name,i,0x<isid>" NUL-terminated,
     * padded to a multiple of 4 (SPC-4 §7.6.4.6). */
    size_t l = strnlen(port, SCSI_PORT_NAME_MAX - 1);
    size_t padded = (l + 1 + 3) & ~(size_t)3;
    if (padded < 20)
        padded = 20;
    memset(p, 0, 4 + padded);
    p[0] = 0x40 | 0x05;
    be16_store(p + 2, (uint16_t)padded);
    memcpy(p + 4, port, l);
    return 4 + padded;
}

void scsi_pr_in_reply(struct scsi_cmd *c, const struct scsi_pr_state *s, bool ptpl_c)
{
    uint8_t sa = c->cdb[1] & 0x1f;
    uint32_t alloc = be16_load(&c->cdb[7]);
    size_t cap = 8 + SCSI_PR_MAX_REGS * (24 + 4 + SCSI_PORT_NAME_MAX + 4);
    uint8_t *b = calloc(1, cap);
    size_t off = 8;
    if (!b) {
        scsi_fail_errno(c, -ENOMEM, false);
        scsi_complete(c);
        return;
    }
    be32_store(b, s->generation);
    switch (sa) {
    case 0x00: /* READ KEYS */
        for (size_t i = 0; i < s->nregs; i++, off += 8)
            be64_store(b + off, s->regs[i].key);
        be32_store(b + 4, (uint32_t)(off - 8));
        break;
    case 0x01: /* READ RESERVATION */
        if (s->held) {
            uint64_t key = type_all_registrants(s->type) ? 0 : s->regs[s->holder].key;
            be64_store(b + 8, key);
            b[8 + 13] = s->type & 0x0f; /* scope 0: LU */
            off += 16;
        }
        be32_store(b + 4, (uint32_t)(off - 8));
        break;
    case 0x02: /* REPORT CAPABILITIES */
        memset(b, 0, 8);
        be16_store(b, 8);
        b[2] = 0x10 | 0x04 | (ptpl_c ? 0x01 : 0); /* CRH, ATP_C, PTPL_C */
        b[3] = 0x80 | (s->aptpl ? 0x01 : 0);      /* TMV, PTPL_A */
        b[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02;  /* WE_AR EA_RO WE_RO EA WE */
        b[5] = 0x01;                              /* EA_AR */
        off = 8;
        break;
    case 0x03: /* READ FULL STATUS */
        for (size_t i = 0; i < s->nregs; i++) {
            uint8_t *d = b + off;
            be64_store(d, s->regs[i].key);
            bool holder = s->held && (type_all_registrants(s->type) || i == s->holder);
            d[12] = (s->regs[i].rel_tgt_port_id == 0 ? 0x02 : 0) | (holder ? 0x01 : 0x00);
            d[13] = holder ? (s->type & 0x0f) : 0;
            be16_store(d + 18, s->regs[i].rel_tgt_port_id);
            size_t tl = put_transport_id(d + 24, s->regs[i].initiator_port);
            be32_store(d + 20, (uint32_t)tl);
            off += 24 + tl;
        }
        be32_store(b + 4, (uint32_t)(off - 8));
        break;
    default:
        free(b);
        scsi_fail_cdb(c, 1, 4);
        scsi_complete(c);
        return;
    }
    scsi_complete_data(c, b, (uint32_t)off, alloc);
    free(b);
}

void scsi_run_pr_in(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    if ((c->cdb[1] & 0x1f) > 0x03) {
        scsi_fail_cdb(c, 1, 4);
        scsi_complete(c);
        return;
    }
    if (lu->shared) {
        scsi_pr_shared_read(c);
        return;
    }
    struct scsi_pr_state copy;
    pthread_mutex_lock(&lu->mu);
    int rc = scsi_pr_state_copy(&copy, &lu->pr);
    pthread_mutex_unlock(&lu->mu);
    if (rc < 0) {
        scsi_fail_errno(c, rc, false);
        scsi_complete(c);
        return;
    }
    scsi_pr_in_reply(c, &copy, lu->pr_store.save != NULL);
    scsi_pr_state_free(&copy);
}

/* ---- PERSISTENT RESERVE OUT ---- */

/* The decoded parameter list and CDB fields of a PR OUT. */
struct prout_args {
    uint8_t sa;
    unsigned type;
    uint64_t key, sark;
    bool aptpl, all_tg_pt;
    uint32_t plen;
};

static void reg_remove(struct scsi_pr_state *s, size_t i)
{
    if (s->held && !type_all_registrants(s->type)) {
        if (s->holder == i)
            s->held = false;
        else if (s->holder > i)
            s->holder--;
    }
    memmove(&s->regs[i], &s->regs[i + 1], (s->nregs - i - 1) * sizeof *s->regs);
    s->nregs--;
    if (s->nregs == 0)
        s->held = false;
}

static int reg_add(struct scsi_pr_state *s, const char *port, uint16_t rel, uint64_t key)
{
    if (regs_alloc(s) < 0)
        return -ENOMEM;
    if (s->nregs >= SCSI_PR_MAX_REGS)
        return -ENOSPC;
    struct scsi_pr_reg *r = &s->regs[s->nregs];
    r->key = key;
    r->rel_tgt_port_id = rel;
    snprintf(r->initiator_port, sizeof r->initiator_port, "%s", port);
    return (int)s->nregs++;
}

/* Is registration r the one of nexus n itself? */
static bool reg_is(const struct scsi_pr_reg *r, const struct scsi_nexus *n)
{
    return reg_matches(r, n->initiator_port, n->rel_tgt_port_id);
}

/* Unit attention to every registrant except the nexus n. */
static void ua_registrants(struct scsi_pr_change *ch, const struct scsi_nexus *n, enum scsi_ua ua)
{
    for (size_t i = 0; i < ch->s.nregs; i++) {
        const struct scsi_pr_reg *r = &ch->s.regs[i];
        if (!reg_is(r, n))
            ch_ua(ch, r->initiator_port, r->rel_tgt_port_id, ua);
    }
}

static int pr_register(struct scsi_cmd *c, struct scsi_pr_change *ch, const struct prout_args *a,
                       bool ignore)
{
    struct scsi_pr_state *s = &ch->s;
    const struct scsi_nexus *n = c->nexus;
    long i = reg_of(s, n);
    if (i < 0) {
        if (!ignore && a->key != 0)
            return PR_CONFLICT;
        if (a->sark == 0)
            return PR_NOOP;
        int rc = reg_add(s, n->initiator_port, a->all_tg_pt ? 0 : n->rel_tgt_port_id, a->sark);
        if (rc < 0) {
            /* INSUFFICIENT REGISTRATION RESOURCES */
            scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x55, 0x04);
            return PR_FAILED;
        }
    } else {
        if (!ignore && a->key != s->regs[i].key)
            return PR_CONFLICT;
        if (a->sark == 0) {
            bool was_holder = is_holder(s, n);
            uint8_t type = s->type;
            reg_remove(s, (size_t)i);
            /* A released registrants-only reservation tells the others. */
            if (was_holder && !s->held && type_registrants(type))
                ua_registrants(ch, n, SCSI_UA_RESERVATIONS_RELEASED);
        } else {
            s->regs[i].key = a->sark;
        }
    }
    s->generation++;
    return PR_OK;
}

static int pr_reserve(struct scsi_cmd *c, struct scsi_pr_change *ch, const struct prout_args *a)
{
    struct scsi_pr_state *s = &ch->s;
    long i = reg_of(s, c->nexus);
    if (i < 0 || s->regs[i].key != a->key)
        return PR_CONFLICT;
    if (s->held) {
        if (is_holder(s, c->nexus) && s->type == a->type)
            return PR_NOOP;
        return PR_CONFLICT;
    }
    s->held = true;
    s->type = (uint8_t)a->type;
    s->holder = (size_t)i;
    return PR_OK;
}

static int pr_release(struct scsi_cmd *c, struct scsi_pr_change *ch, const struct prout_args *a)
{
    struct scsi_pr_state *s = &ch->s;
    long i = reg_of(s, c->nexus);
    if (i < 0 || s->regs[i].key != a->key)
        return PR_CONFLICT;
    if (!s->held || !is_holder(s, c->nexus))
        return PR_NOOP;
    if (s->type != a->type) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x04); /* INVALID RELEASE OF PR */
        return PR_FAILED;
    }
    s->held = false;
    if (a->type != PR_WE && a->type != PR_EA)
        ua_registrants(ch, c->nexus, SCSI_UA_RESERVATIONS_RELEASED);
    return PR_OK;
}

static int pr_clear(struct scsi_cmd *c, struct scsi_pr_change *ch, const struct prout_args *a)
{
    struct scsi_pr_state *s = &ch->s;
    long i = reg_of(s, c->nexus);
    if (i < 0 || s->regs[i].key != a->key)
        return PR_CONFLICT;
    ua_registrants(ch, c->nexus, SCSI_UA_RESERVATIONS_PREEMPTED);
    s->nregs = 0;
    s->held = false;
    s->generation++;
    return PR_OK;
}

/* Remove every registration with key victim (or all but the preempter's
 * own); returns how many were removed. */
static size_t remove_key(struct scsi_pr_change *ch, const struct scsi_nexus *self, uint64_t victim,
                         bool all_but_self)
{
    struct scsi_pr_state *s = &ch->s;
    size_t removed = 0;
    for (size_t i = 0; i < s->nregs;) {
        struct scsi_pr_reg *r = &s->regs[i];
        if (!reg_is(r, self) && (all_but_self || r->key == victim)) {
            ch_ua(ch, r->initiator_port, r->rel_tgt_port_id, SCSI_UA_REGISTRATIONS_PREEMPTED);
            reg_remove(s, i);
            removed++;
            continue;
        }
        i++;
    }
    return removed;
}

static int pr_preempt(struct scsi_cmd *c, struct scsi_pr_change *ch, const struct prout_args *a)
{
    struct scsi_pr_state *s = &ch->s;
    const struct scsi_nexus *n = c->nexus;
    bool type_checked = type_valid(a->type);
    long i = reg_of(s, n);
    if (i < 0 || s->regs[i].key != a->key)
        return PR_CONFLICT;
    if (s->held && type_all_registrants(s->type)) {
        if (a->sark == 0) {
            /* Preempt everybody: the preempter becomes the holder. */
            if (!type_checked) {
                scsi_fail_cdb(c, 2, 3);
                return PR_FAILED;
            }
            remove_key(ch, n, 0, true);
            i = reg_of(s, n);
            s->held = true;
            s->type = (uint8_t)a->type;
            s->holder = (size_t)i;
        } else {
            remove_key(ch, n, a->sark, false);
        }
        s->generation++;
        return PR_OK;
    }
    if (s->held && s->regs[s->holder].key == a->sark) {
        if (!type_checked) {
            scsi_fail_cdb(c, 2, 3);
            return PR_FAILED;
        }
        /* Preempt the holder: take over the reservation. */
        remove_key(ch, n, a->sark, false);
        i = reg_of(s, n);
        s->held = true;
        s->type = (uint8_t)a->type;
        s->holder = (size_t)i;
        s->generation++;
        return PR_OK;
    }
    if (a->sark == 0) {
        scsi_fail_param(c, 8, -1);
        return PR_FAILED;
    }
    if (remove_key(ch, n, a->sark, false) == 0)
        return PR_CONFLICT;
    s->generation++;
    return PR_OK;
}

/* Parse an iSCSI TransportID into "name" or "name,i,0x<isid>". */
static bool parse_transport_id(const uint8_t *p, size_t avail, char *out, size_t cap)
{
    if (avail < 4 || (p[0] & 0x0f) != 0x05)
        return false;
    size_t len = be16_load(p + 2);
    if (len + 4 > avail || len == 0 || len >= cap)
        return false;
    memcpy(out, p + 4, len);
    out[len] = 0;
    return strlen(out) > 0;
}

static int pr_register_move(struct scsi_cmd *c, struct scsi_pr_change *ch,
                            const struct prout_args *a)
{
    struct scsi_pr_state *s = &ch->s;
    const struct scsi_nexus *n = c->nexus;
    const uint8_t *d = c->data_out;
    bool unreg = d[17] & 0x02;
    uint16_t rel = be16_load(d + 18);
    uint32_t tidlen = be32_load(d + 20);
    char port[SCSI_PORT_NAME_MAX];

    long i = reg_of(s, n);
    if (i < 0 || s->regs[i].key != a->key)
        return PR_CONFLICT;
    if (!s->held || !is_holder(s, n))
        return PR_CONFLICT;
    if (type_all_registrants(s->type)) {
        scsi_fail_cdb(c, 2, 3);
        return PR_FAILED;
    }
    if (tidlen + 24 > a->plen || !parse_transport_id(d + 24, tidlen, port, sizeof port)) {
        scsi_fail_param(c, 24, -1);
        return PR_FAILED;
    }
    if (a->sark == 0) {
        scsi_fail_param(c, 8, -1);
        return PR_FAILED;
    }
    if (strcasecmp(port, n->initiator_port) == 0 && rel == n->rel_tgt_port_id) {
        /* moving to oneself */
        scsi_fail_param(c, 24, -1);
        return PR_FAILED;
    }
    long j = reg_find(s, port, rel);
    if (j < 0) {
        int rc = reg_add(s, port, rel, a->sark);
        if (rc < 0) {
            scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x55, 0x04);
            return PR_FAILED;
        }
        j = rc;
    } else {
        s->regs[j].key = a->sark;
    }
    s->holder = (size_t)j;
    if (unreg) {
        i = reg_of(s, n);
        reg_remove(s, (size_t)i); /* not the holder any more: reservation stays */
    }
    s->generation++;
    return PR_OK;
}

static int act_prout(struct scsi_cmd *c, struct scsi_pr_change *ch, const void *arg)
{
    const struct prout_args *a = arg;
    int res;
    switch (a->sa) {
    case 0x00:
        res = pr_register(c, ch, a, false);
        break;
    case 0x06:
        res = pr_register(c, ch, a, true);
        break;
    case 0x01:
        res = pr_reserve(c, ch, a);
        break;
    case 0x02:
        res = pr_release(c, ch, a);
        break;
    case 0x03:
        res = pr_clear(c, ch, a);
        break;
    case 0x04:
    case 0x05:
        res = pr_preempt(c, ch, a);
        break;
    case 0x07:
        res = pr_register_move(c, ch, a);
        break;
    default:
        scsi_fail_cdb(c, 1, 4);
        return PR_FAILED;
    }
    if (res == PR_OK || res == PR_NOOP) {
        struct scsi_pr_state *s = &ch->s;
        bool was = s->aptpl;
        /* APTPL is set by the service actions that carry registrations. */
        if (a->sa == 0x00 || a->sa == 0x06 || a->sa == 0x07)
            s->aptpl = a->aptpl && s->nregs > 0;
        if (s->nregs == 0)
            s->aptpl = false;
        if (res == PR_NOOP && was != s->aptpl)
            res = PR_OK;
    }
    return res;
}

void scsi_run_pr_out(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    struct prout_args a = {.sa = c->cdb[1] & 0x1f, .type = c->cdb[2] & 0x0f};
    unsigned scope = c->cdb[2] >> 4;
    a.plen = be32_load(&c->cdb[5]);
    c->xfer_want = a.plen;

    if (!c->nexus) {
        scsi_fail_cdb(c, 0, -1);
        scsi_complete(c);
        return;
    }
    bool move = a.sa == 0x07;
    if ((!move && a.plen != 24) || (move && a.plen < 24) || c->data_out_len < a.plen) {
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    const uint8_t *d = c->data_out;
    a.key = be64_load(d);
    a.sark = be64_load(d + 8);
    a.aptpl = move ? (d[17] & 0x01) : (d[20] & 0x01);
    if (!move && (d[20] & 0x08)) { /* SPEC_I_PT: not supported (SIP_C = 0) */
        scsi_fail_param(c, 20, 3);
        scsi_complete(c);
        return;
    }
    /* ALL_TG_PT: meaningful for REGISTER and REGISTER AND IGNORE only. */
    a.all_tg_pt = !move && (d[20] & 0x04) && (a.sa == 0x00 || a.sa == 0x06);
    if (a.aptpl && !lu->pr_store.save && !lu->shared) {
        scsi_fail_param(c, move ? 17 : 20, 0);
        scsi_complete(c);
        return;
    }
    bool needs_type = a.sa == 0x01 || a.sa == 0x02 || a.sa == 0x04 || a.sa == 0x05 || a.sa == 0x07;
    if (needs_type && scope != 0) {
        scsi_fail_cdb(c, 2, 7);
        scsi_complete(c);
        return;
    }
    if ((a.sa == 0x01 || a.sa == 0x02) && !type_valid(a.type)) {
        scsi_fail_cdb(c, 2, 3);
        scsi_complete(c);
        return;
    }
    if (a.sa > 0x07) {
        scsi_fail_cdb(c, 1, 4);
        scsi_complete(c);
        return;
    }
    pr_execute(c, act_prout, &a, sizeof a);
}
