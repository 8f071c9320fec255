/*
 * Reservations: SPC-2 RESERVE/RELEASE and SPC-4 persistent reservations
 * (PERSISTENT RESERVE IN/OUT, every service action and the six disk types),
 * the conflict rules applied before dispatch, and APTPL persistence through
 * the config layer's save callback.
 *
 * All state is under lu->mu. Registrations are keyed by I_T nexus identity
 * (initiator port name + relative target port id), not by session, so they
 * survive logout and (with APTPL) restarts.
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

static long reg_find(const struct scsi_lu *lu, const char *port, uint16_t rel)
{
    for (size_t i = 0; i < lu->nregs; i++)
        if (lu->regs[i].rel_tgt_port_id == rel && strcasecmp(lu->regs[i].initiator_port, port) == 0)
            return (long)i;
    return -1;
}

static long reg_of(const struct scsi_lu *lu, const struct scsi_nexus *n)
{
    return reg_find(lu, n->initiator_port, n->rel_tgt_port_id);
}

static bool is_holder(const struct scsi_lu *lu, const struct scsi_nexus *n)
{
    if (!lu->pr_held)
        return false;
    long i = reg_of(lu, n);
    if (i < 0)
        return false;
    return type_all_registrants(lu->pr_type) || (size_t)i == lu->pr_holder;
}

bool scsi_pr_conflict_locked(struct scsi_lu *lu, const struct scsi_nexus *n,
                             const struct scsi_op *op, const uint8_t *cdb)
{
    (void)cdb;
    if (lu->res2_held && lu->res2_nexus != n->id && !(op->flags & OPF_RES2_ALLOW))
        return true;
    if (!lu->pr_held || (op->flags & OPF_PR_ALLOW))
        return false;
    if (is_holder(lu, n))
        return false;
    bool registered = reg_of(lu, n) >= 0;
    bool read = op->flags & OPF_PR_READ;
    switch (lu->pr_type) {
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

/* ---- SPC-2 RESERVE / RELEASE ---- */

void scsi_run_reserve(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    pthread_mutex_lock(&lu->mu);
    if (lu->nregs || lu->pr_held || (lu->res2_held && c->nexus && lu->res2_nexus != c->nexus->id)) {
        c->status = SCSI_STATUS_RESERVATION_CONFLICT;
    } else {
        lu->res2_held = true;
        lu->res2_nexus = c->nexus ? c->nexus->id : 0;
    }
    pthread_mutex_unlock(&lu->mu);
    scsi_complete(c);
}

void scsi_run_release(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    pthread_mutex_lock(&lu->mu);
    if (lu->nregs || lu->pr_held)
        c->status = SCSI_STATUS_RESERVATION_CONFLICT;
    else if (lu->res2_held && lu->res2_nexus == (c->nexus ? c->nexus->id : 0))
        lu->res2_held = false;
    /* Releasing someone else's (or no) reservation is a no-op with GOOD. */
    pthread_mutex_unlock(&lu->mu);
    scsi_complete(c);
}

/* ---- persistence ---- */

struct pr_snapshot {
    struct scsi_pr_reg *regs;
    size_t nregs;
    uint32_t gen;
    bool aptpl, held;
    uint8_t type;
    size_t holder;
};

static int snapshot_take(const struct scsi_lu *lu, struct pr_snapshot *s)
{
    s->regs = NULL;
    if (lu->nregs) {
        s->regs = malloc(lu->nregs * sizeof *s->regs);
        if (!s->regs)
            return -ENOMEM;
        memcpy(s->regs, lu->regs, lu->nregs * sizeof *s->regs);
    }
    s->nregs = lu->nregs;
    s->gen = lu->pr_generation;
    s->aptpl = lu->pr_aptpl;
    s->held = lu->pr_held;
    s->type = lu->pr_type;
    s->holder = lu->pr_holder;
    return 0;
}

static void snapshot_restore(struct scsi_lu *lu, struct pr_snapshot *s)
{
    /* regs capacity is SCSI_PR_MAX_REGS, allocated once */
    if (s->nregs)
        memcpy(lu->regs, s->regs, s->nregs * sizeof *s->regs);
    lu->nregs = s->nregs;
    lu->pr_generation = s->gen;
    lu->pr_aptpl = s->aptpl;
    lu->pr_held = s->held;
    lu->pr_type = s->type;
    lu->pr_holder = s->holder;
    free(s->regs);
    s->regs = NULL;
}

/* Serialize: a small text format, one record per line. */
static char *pr_serialize(const struct scsi_lu *lu, size_t *len)
{
    size_t cap = 128 + lu->nregs * (SCSI_PORT_NAME_MAX + 48);
    char *b = malloc(cap);
    if (!b)
        return NULL;
    size_t off = 0;
    off += (size_t)snprintf(b + off, cap - off, "blockd-pr 1\ngen %" PRIu32 "\nres %d %u %zu\n",
                            lu->pr_generation, lu->pr_held ? 1 : 0, lu->pr_type, lu->pr_holder);
    for (size_t i = 0; i < lu->nregs && off < cap; i++)
        off += (size_t)snprintf(b + off, cap - off, "reg %016" PRIx64 " %u %s\n", lu->regs[i].key,
                                lu->regs[i].rel_tgt_port_id, lu->regs[i].initiator_port);
    *len = off < cap ? off : cap - 1;
    return b;
}

int scsi_pr_load(struct scsi_lu *lu, const void *blob, size_t len)
{
    char *text = malloc(len + 1);
    if (!text)
        return -ENOMEM;
    memcpy(text, blob, len);
    text[len] = 0;
    if (!lu->regs) {
        lu->regs = calloc(SCSI_PR_MAX_REGS, sizeof *lu->regs);
        if (!lu->regs) {
            free(text);
            return -ENOMEM;
        }
    }
    int rc = 0;
    bool header = false;
    char *next = text;
    while (next && *next) {
        char *line = next;
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = 0;
        if (!*line)
            continue;
        unsigned v, held, type, rel;
        size_t holder;
        uint32_t gen;
        uint64_t key;
        char port[SCSI_PORT_NAME_MAX];
        if (sscanf(line, "blockd-pr %u", &v) == 1) {
            header = v == 1;
        } else if (sscanf(line, "gen %" SCNu32, &gen) == 1) {
            lu->pr_generation = gen;
        } else if (sscanf(line, "res %u %u %zu", &held, &type, &holder) == 3) {
            lu->pr_held = held != 0;
            lu->pr_type = (uint8_t)type;
            lu->pr_holder = holder;
        } else if (sscanf(line, "reg %" SCNx64 " %u %255s", &key, &rel, port) == 3) {
            if (lu->nregs >= SCSI_PR_MAX_REGS || rel > 0xffff) {
                rc = -EINVAL;
                break;
            }
            struct scsi_pr_reg *r = &lu->regs[lu->nregs++];
            r->key = key;
            r->rel_tgt_port_id = (uint16_t)rel;
            snprintf(r->initiator_port, sizeof r->initiator_port, "%s", port);
        } else {
            rc = -EINVAL;
            break;
        }
    }
    free(text);
    if (rc == 0 && !header)
        rc = -EINVAL;
    if (rc == 0 && lu->pr_held &&
        (!type_valid(lu->pr_type) ||
         (!type_all_registrants(lu->pr_type) && lu->pr_holder >= lu->nregs) || lu->nregs == 0))
        rc = -EINVAL;
    if (rc < 0) {
        lu->nregs = 0;
        lu->pr_held = false;
        return rc;
    }
    lu->pr_aptpl = true; /* only APTPL state is ever saved */
    return 0;
}

/* After a change: persist when APTPL is (or was) on. Returns 0 or -errno. */
static int pr_persist(struct scsi_lu *lu, bool was_aptpl)
{
    if (!lu->pr_store.save || (!lu->pr_aptpl && !was_aptpl))
        return 0;
    if (!lu->pr_aptpl || lu->nregs == 0)
        return lu->pr_store.save(lu->pr_store.arg, NULL, 0);
    size_t len;
    char *b = pr_serialize(lu, &len);
    if (!b)
        return -ENOMEM;
    int rc = lu->pr_store.save(lu->pr_store.arg, b, len);
    free(b);
    return rc;
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

void scsi_run_pr_in(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
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
    pthread_mutex_lock(&lu->mu);
    be32_store(b, lu->pr_generation);
    switch (sa) {
    case 0x00: /* READ KEYS */
        for (size_t i = 0; i < lu->nregs; i++, off += 8)
            be64_store(b + off, lu->regs[i].key);
        be32_store(b + 4, (uint32_t)(off - 8));
        break;
    case 0x01: /* READ RESERVATION */
        if (lu->pr_held) {
            uint64_t key = type_all_registrants(lu->pr_type) ? 0 : lu->regs[lu->pr_holder].key;
            be64_store(b + 8, key);
            b[8 + 13] = lu->pr_type & 0x0f; /* scope 0: LU */
            off += 16;
        }
        be32_store(b + 4, (uint32_t)(off - 8));
        break;
    case 0x02: /* REPORT CAPABILITIES */
        memset(b, 0, 8);
        be16_store(b, 8);
        b[2] = 0x10 | (lu->pr_store.save ? 0x01 : 0); /* CRH, PTPL_C */
        b[3] = 0x80 | (lu->pr_aptpl ? 0x01 : 0);      /* TMV, PTPL_A */
        b[4] = 0x80 | 0x40 | 0x20 | 0x08 | 0x02;      /* WE_AR EA_RO WE_RO EA WE */
        b[5] = 0x01;                                  /* EA_AR */
        off = 8;
        break;
    case 0x03: /* READ FULL STATUS */
        for (size_t i = 0; i < lu->nregs; i++) {
            uint8_t *d = b + off;
            be64_store(d, lu->regs[i].key);
            bool holder = lu->pr_held && (type_all_registrants(lu->pr_type) || i == lu->pr_holder);
            d[12] = holder ? 0x01 : 0x00;
            d[13] = holder ? (lu->pr_type & 0x0f) : 0;
            be16_store(d + 18, lu->regs[i].rel_tgt_port_id);
            size_t tl = put_transport_id(d + 24, lu->regs[i].initiator_port);
            be32_store(d + 20, (uint32_t)tl);
            off += 24 + tl;
        }
        be32_store(b + 4, (uint32_t)(off - 8));
        break;
    default:
        pthread_mutex_unlock(&lu->mu);
        free(b);
        scsi_fail_cdb(c, 1, 4);
        scsi_complete(c);
        return;
    }
    pthread_mutex_unlock(&lu->mu);
    scsi_complete_data(c, b, (uint32_t)off, alloc);
    free(b);
}

/* ---- PERSISTENT RESERVE OUT ---- */

static void reg_remove(struct scsi_lu *lu, size_t i)
{
    if (lu->pr_held && !type_all_registrants(lu->pr_type)) {
        if (lu->pr_holder == i)
            lu->pr_held = false;
        else if (lu->pr_holder > i)
            lu->pr_holder--;
    }
    memmove(&lu->regs[i], &lu->regs[i + 1], (lu->nregs - i - 1) * sizeof *lu->regs);
    lu->nregs--;
    if (lu->nregs == 0)
        lu->pr_held = false;
}

static int reg_add(struct scsi_lu *lu, const char *port, uint16_t rel, uint64_t key)
{
    if (!lu->regs) {
        lu->regs = calloc(SCSI_PR_MAX_REGS, sizeof *lu->regs);
        if (!lu->regs)
            return -ENOMEM;
    }
    if (lu->nregs >= SCSI_PR_MAX_REGS)
        return -ENOSPC;
    struct scsi_pr_reg *r = &lu->regs[lu->nregs];
    r->key = key;
    r->rel_tgt_port_id = rel;
    snprintf(r->initiator_port, sizeof r->initiator_port, "%s", port);
    return (int)lu->nregs++;
}

/* Unit attention to every registrant except the nexus n. */
static void ua_registrants(struct scsi_lu *lu, const struct scsi_nexus *n, enum scsi_ua ua)
{
    for (size_t i = 0; i < lu->nregs; i++) {
        const struct scsi_pr_reg *r = &lu->regs[i];
        if (r->rel_tgt_port_id == n->rel_tgt_port_id &&
            strcasecmp(r->initiator_port, n->initiator_port) == 0)
            continue;
        scsi_lu_ua_port_locked(lu, r, ua);
    }
}

/* Outcome of a PR OUT service action. */
enum pr_result { PR_OK, PR_CONFLICT, PR_FAILED /* sense already set */ };

static enum pr_result pr_register(struct scsi_cmd *c, uint64_t key, uint64_t sark, bool ignore)
{
    struct scsi_lu *lu = c->lu;
    const struct scsi_nexus *n = c->nexus;
    long i = reg_of(lu, n);
    if (i < 0) {
        if (!ignore && key != 0)
            return PR_CONFLICT;
        if (sark == 0)
            return PR_OK;
        int rc = reg_add(lu, n->initiator_port, n->rel_tgt_port_id, sark);
        if (rc < 0) {
            /* INSUFFICIENT REGISTRATION RESOURCES */
            scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x55, 0x04);
            return PR_FAILED;
        }
    } else {
        if (!ignore && key != lu->regs[i].key)
            return PR_CONFLICT;
        if (sark == 0) {
            bool was_holder = is_holder(lu, n);
            uint8_t type = lu->pr_type;
            reg_remove(lu, (size_t)i);
            /* A released registrants-only reservation tells the others. */
            if (was_holder && !lu->pr_held && type_registrants(type))
                ua_registrants(lu, n, SCSI_UA_RESERVATIONS_RELEASED);
        } else {
            lu->regs[i].key = sark;
        }
    }
    lu->pr_generation++;
    return PR_OK;
}

static enum pr_result pr_reserve(struct scsi_cmd *c, uint64_t key, unsigned type)
{
    struct scsi_lu *lu = c->lu;
    long i = reg_of(lu, c->nexus);
    if (i < 0 || lu->regs[i].key != key)
        return PR_CONFLICT;
    if (lu->pr_held) {
        if (is_holder(lu, c->nexus) && lu->pr_type == type)
            return PR_OK;
        return PR_CONFLICT;
    }
    lu->pr_held = true;
    lu->pr_type = (uint8_t)type;
    lu->pr_holder = (size_t)i;
    return PR_OK;
}

static enum pr_result pr_release(struct scsi_cmd *c, uint64_t key, unsigned type)
{
    struct scsi_lu *lu = c->lu;
    long i = reg_of(lu, c->nexus);
    if (i < 0 || lu->regs[i].key != key)
        return PR_CONFLICT;
    if (!lu->pr_held || !is_holder(lu, c->nexus))
        return PR_OK;
    if (lu->pr_type != type) {
        scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x26, 0x04); /* INVALID RELEASE OF PR */
        return PR_FAILED;
    }
    lu->pr_held = false;
    if (type != PR_WE && type != PR_EA)
        ua_registrants(lu, c->nexus, SCSI_UA_RESERVATIONS_RELEASED);
    return PR_OK;
}

static enum pr_result pr_clear(struct scsi_cmd *c, uint64_t key)
{
    struct scsi_lu *lu = c->lu;
    long i = reg_of(lu, c->nexus);
    if (i < 0 || lu->regs[i].key != key)
        return PR_CONFLICT;
    ua_registrants(lu, c->nexus, SCSI_UA_RESERVATIONS_PREEMPTED);
    lu->nregs = 0;
    lu->pr_held = false;
    lu->pr_generation++;
    return PR_OK;
}

/* Remove every registration with key victim except the preempter's own;
 * returns how many were removed. */
static size_t remove_key(struct scsi_lu *lu, const struct scsi_nexus *self, uint64_t victim,
                         bool all_but_self)
{
    size_t removed = 0;
    for (size_t i = 0; i < lu->nregs;) {
        struct scsi_pr_reg *r = &lu->regs[i];
        bool mine = r->rel_tgt_port_id == self->rel_tgt_port_id &&
                    strcasecmp(r->initiator_port, self->initiator_port) == 0;
        if (!mine && (all_but_self || r->key == victim)) {
            scsi_lu_ua_port_locked(lu, r, SCSI_UA_REGISTRATIONS_PREEMPTED);
            reg_remove(lu, i);
            removed++;
            continue;
        }
        i++;
    }
    return removed;
}

static enum pr_result pr_preempt(struct scsi_cmd *c, uint64_t key, uint64_t sark, unsigned type,
                                 bool type_checked)
{
    struct scsi_lu *lu = c->lu;
    const struct scsi_nexus *n = c->nexus;
    long i = reg_of(lu, n);
    if (i < 0 || lu->regs[i].key != key)
        return PR_CONFLICT;
    if (lu->pr_held && type_all_registrants(lu->pr_type)) {
        if (sark == 0) {
            /* Preempt everybody: the preempter becomes the holder. */
            if (!type_checked) {
                scsi_fail_cdb(c, 2, 3);
                return PR_FAILED;
            }
            remove_key(lu, n, 0, true);
            i = reg_of(lu, n);
            lu->pr_held = true;
            lu->pr_type = (uint8_t)type;
            lu->pr_holder = (size_t)i;
        } else {
            remove_key(lu, n, sark, false);
        }
        lu->pr_generation++;
        return PR_OK;
    }
    if (lu->pr_held && lu->regs[lu->pr_holder].key == sark) {
        if (!type_checked) {
            scsi_fail_cdb(c, 2, 3);
            return PR_FAILED;
        }
        /* Preempt the holder: take over the reservation. */
        remove_key(lu, n, sark, false);
        i = reg_of(lu, n);
        lu->pr_held = true;
        lu->pr_type = (uint8_t)type;
        lu->pr_holder = (size_t)i;
        lu->pr_generation++;
        return PR_OK;
    }
    if (sark == 0) {
        scsi_fail_param(c, 8, -1);
        return PR_FAILED;
    }
    if (remove_key(lu, n, sark, false) == 0)
        return PR_CONFLICT;
    lu->pr_generation++;
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

static enum pr_result pr_register_move(struct scsi_cmd *c, uint32_t plen)
{
    struct scsi_lu *lu = c->lu;
    const struct scsi_nexus *n = c->nexus;
    const uint8_t *d = c->data_out;
    uint64_t key = be64_load(d), sark = be64_load(d + 8);
    bool unreg = d[17] & 0x02;
    uint16_t rel = be16_load(d + 18);
    uint32_t tidlen = be32_load(d + 20);
    char port[SCSI_PORT_NAME_MAX];

    long i = reg_of(lu, n);
    if (i < 0 || lu->regs[i].key != key)
        return PR_CONFLICT;
    if (!lu->pr_held || !is_holder(lu, n))
        return PR_CONFLICT;
    if (type_all_registrants(lu->pr_type)) {
        scsi_fail_cdb(c, 2, 3);
        return PR_FAILED;
    }
    if (tidlen + 24 > plen || !parse_transport_id(d + 24, tidlen, port, sizeof port)) {
        scsi_fail_param(c, 24, -1);
        return PR_FAILED;
    }
    if (sark == 0) {
        scsi_fail_param(c, 8, -1);
        return PR_FAILED;
    }
    if (strcasecmp(port, n->initiator_port) == 0 && rel == n->rel_tgt_port_id) {
        /* moving to oneself */
        scsi_fail_param(c, 24, -1);
        return PR_FAILED;
    }
    long j = reg_find(lu, port, rel);
    if (j < 0) {
        int rc = reg_add(lu, port, rel, sark);
        if (rc < 0) {
            scsi_sense_fill(c, SK_ILLEGAL_REQUEST, 0x55, 0x04);
            return PR_FAILED;
        }
        j = rc;
    } else {
        lu->regs[j].key = sark;
    }
    lu->pr_holder = (size_t)j;
    if (unreg) {
        i = reg_of(lu, n);
        reg_remove(lu, (size_t)i); /* not the holder any more: reservation stays */
    }
    lu->pr_generation++;
    return PR_OK;
}

void scsi_run_pr_out(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    uint8_t sa = c->cdb[1] & 0x1f;
    unsigned scope = c->cdb[2] >> 4, type = c->cdb[2] & 0x0f;
    uint32_t plen = be32_load(&c->cdb[5]);
    c->xfer_want = plen;

    if (!c->nexus) {
        scsi_fail_cdb(c, 0, -1);
        scsi_complete(c);
        return;
    }
    bool move = sa == 0x07;
    if ((!move && plen != 24) || (move && plen < 24) || c->data_out_len < plen) {
        scsi_fail_param_len(c);
        scsi_complete(c);
        return;
    }
    const uint8_t *d = c->data_out;
    uint64_t key = be64_load(d), sark = be64_load(d + 8);
    bool aptpl = move ? (d[17] & 0x01) : (d[20] & 0x01);
    if (!move && (d[20] & 0x08)) { /* SPEC_I_PT: not supported (SIP_C = 0) */
        scsi_fail_param(c, 20, 3);
        scsi_complete(c);
        return;
    }
    if (!move && (d[20] & 0x04)) { /* ALL_TG_PT: not supported (ATP_C = 0) */
        scsi_fail_param(c, 20, 2);
        scsi_complete(c);
        return;
    }
    if (aptpl && !lu->pr_store.save) {
        scsi_fail_param(c, move ? 17 : 20, 0);
        scsi_complete(c);
        return;
    }
    bool needs_type = sa == 0x01 || sa == 0x02 || sa == 0x04 || sa == 0x05 || sa == 0x07;
    if (needs_type && scope != 0) {
        scsi_fail_cdb(c, 2, 7);
        scsi_complete(c);
        return;
    }
    if ((sa == 0x01 || sa == 0x02) && !type_valid(type)) {
        scsi_fail_cdb(c, 2, 3);
        scsi_complete(c);
        return;
    }

    pthread_mutex_lock(&lu->mu);
    struct pr_snapshot snap;
    if (snapshot_take(lu, &snap) < 0) {
        pthread_mutex_unlock(&lu->mu);
        scsi_fail_errno(c, -ENOMEM, false);
        scsi_complete(c);
        return;
    }
    bool was_aptpl = lu->pr_aptpl;
    enum pr_result res;
    switch (sa) {
    case 0x00:
        res = pr_register(c, key, sark, false);
        break;
    case 0x06:
        res = pr_register(c, key, sark, true);
        break;
    case 0x01:
        res = pr_reserve(c, key, type);
        break;
    case 0x02:
        res = pr_release(c, key, type);
        break;
    case 0x03:
        res = pr_clear(c, key);
        break;
    case 0x04:
    case 0x05:
        res = pr_preempt(c, key, sark, type, type_valid(type));
        break;
    case 0x07:
        res = pr_register_move(c, plen);
        break;
    default:
        scsi_fail_cdb(c, 1, 4);
        res = PR_FAILED;
        break;
    }
    if (res == PR_OK) {
        /* APTPL is set by the service actions that carry registrations. */
        if (sa == 0x00 || sa == 0x06 || sa == 0x07)
            lu->pr_aptpl = aptpl && lu->nregs > 0;
        if (lu->nregs == 0)
            lu->pr_aptpl = false;
        int rc = pr_persist(lu, was_aptpl);
        if (rc < 0) {
            log_error("scsi: %s: saving persistent reservations failed: %d", volume_name(lu->vol),
                      rc);
            snapshot_restore(lu, &snap);
            scsi_sense_fill(c, SK_HARDWARE_ERROR, 0x44, 0x00);
            res = PR_FAILED;
        }
    }
    free(snap.regs);
    pthread_mutex_unlock(&lu->mu);
    if (res == PR_CONFLICT) {
        c->status = SCSI_STATUS_RESERVATION_CONFLICT;
        c->sense_len = 0;
    }
    scsi_complete(c);
}
