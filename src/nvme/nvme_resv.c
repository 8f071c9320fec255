/*
 * NVMe reservations (nvme_resv.h): Reservation Register, Report, Acquire
 * and Release, the conflict check every I/O command passes, Get/Set
 * Features Reservation Persistence, and the saved text form.
 *
 * The rules follow the NVMe base specification's reservation section and
 * the NVM command set's table of command behaviour in the presence of a
 * reservation: Read and Compare are the read group; Write, Write Zeroes,
 * Dataset Management and Flush the write group. A command the rules
 * refuse gets Reservation Conflict; a Register, Acquire or Release whose
 * key does not match the host's registration (unless IEKEY) too.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "nvme/nvme_internal.h"
#include "nvme/nvme_resv.h"

#define RESV_MAX_REGS 64u

enum rtype {
    RT_NONE = 0,
    RT_WE = 1,
    RT_EA = 2,
    RT_WE_RO = 3,
    RT_EA_RO = 4,
    RT_WE_AR = 5,
    RT_EA_AR = 6,
};

struct resv_reg {
    uint8_t hostid[16];
    uint64_t key;
};

/* What is saved and what a command changes (copied whole for rollback). */
struct resv_state {
    uint32_t gen;
    uint8_t type; /* enum rtype; RT_NONE: not held */
    bool ptpl;
    uint8_t holder[16]; /* the holder's host (types other than all registrants) */
    size_t nregs;
    struct resv_reg regs[RESV_MAX_REGS];
};

struct nvme_resv {
    atomic_int refs;
    int64_t ns_id;
    atomic_bool held; /* s.type != RT_NONE: the I/O check's fast path */
    pthread_mutex_t mu;
    struct resv_state s; /* under mu */
    struct nvme_resv *next;
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct nvme_resv *registry;
static struct nvme_resv_store store;

void nvme_resv_set_store(const struct nvme_resv_store *st)
{
    store = *st;
}

/* ---- text form: "nvme-resv 1", then "gen", "ptpl", "type", "reg" lines ---- */

static void hex_put(char *out, const uint8_t *id)
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static int hex_get(const char *in, uint8_t *id)
{
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(in + 2 * i, "%2x", &v) != 1)
            return -EINVAL;
        id[i] = (uint8_t)v;
    }
    return 0;
}

static char *state_format(const struct resv_state *s)
{
    size_t cap = 128 + s->nregs * 64;
    char *t = malloc(cap), hex[33];
    if (!t)
        return NULL;
    hex_put(hex, s->holder);
    size_t n = (size_t)snprintf(t, cap, "nvme-resv 1\ngen %" PRIu32 "\nptpl %d\ntype %u %s\n",
                                s->gen, s->ptpl, s->type, hex);
    for (size_t i = 0; i < s->nregs; i++) {
        hex_put(hex, s->regs[i].hostid);
        n += (size_t)snprintf(t + n, cap - n, "reg %s %016" PRIx64 "\n", hex, s->regs[i].key);
    }
    return t;
}

static int parse_line(struct resv_state *s, const char *l)
{
    char hex[33];
    unsigned a, b;
    uint64_t key;
    if (sscanf(l, "gen %u", &a) == 1)
        s->gen = a;
    else if (sscanf(l, "ptpl %u", &a) == 1)
        s->ptpl = a != 0;
    else if (sscanf(l, "type %u %32s", &b, hex) == 2 && b <= RT_EA_AR)
        return (s->type = (uint8_t)b), hex_get(hex, s->holder);
    else if (sscanf(l, "reg %32s %" SCNx64, hex, &key) == 2 && s->nregs < RESV_MAX_REGS) {
        s->regs[s->nregs].key = key;
        return hex_get(hex, s->regs[s->nregs++].hostid);
    } else if (strncmp(l, "nvme-resv 1", 11) != 0)
        return -EINVAL;
    return 0;
}

static int state_parse(struct resv_state *s, const char *text)
{
    memset(s, 0, sizeof(*s));
    for (const char *l = text; *l;) {
        const char *nl = strchr(l, '\n');
        char line[128];
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        snprintf(line, sizeof(line), "%.*s", (int)MIN(n, sizeof(line) - 1), l);
        if (line[0] && parse_line(s, line) < 0)
            return -EINVAL;
        l += n + (nl ? 1 : 0);
    }
    if (s->type == RT_NONE)
        memset(s->holder, 0, sizeof(s->holder));
    return 0;
}

/* ---- the registry of objects ---- */

static void load(struct nvme_resv *r)
{
    char *text = NULL;
    if (!store.load || store.load(r->ns_id, &text) < 0 || !text)
        return;
    struct resv_state s;
    if (state_parse(&s, text) < 0 || !s.ptpl)
        log_warn("nvme: namespace %" PRId64 ": saved reservations unreadable, dropped", r->ns_id);
    else
        r->s = s;
    free(text);
    atomic_store(&r->held, r->s.type != RT_NONE);
    log_info("nvme: namespace %" PRId64 ": %zu reservation registrant(s) restored, %s", r->ns_id,
             r->s.nregs, r->s.type ? "reserved" : "not reserved");
}

struct nvme_resv *nvme_resv_get(int64_t ns_id)
{
    pthread_mutex_lock(&registry_mu);
    struct nvme_resv *r = registry;
    while (r && r->ns_id != ns_id)
        r = r->next;
    if (r) {
        atomic_fetch_add(&r->refs, 1);
    } else if ((r = calloc(1, sizeof(*r))) != NULL) {
        atomic_init(&r->refs, 1);
        r->ns_id = ns_id;
        pthread_mutex_init(&r->mu, NULL);
        load(r);
        r->next = registry;
        registry = r;
    }
    pthread_mutex_unlock(&registry_mu);
    return r;
}

void nvme_resv_unref(struct nvme_resv *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&registry_mu);
    if (atomic_fetch_sub(&r->refs, 1) != 1) {
        pthread_mutex_unlock(&registry_mu);
        return;
    }
    for (struct nvme_resv **pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void nvme_resv_forget(int64_t ns_id)
{
    if (store.save && store.save(ns_id, NULL) < 0)
        log_warn("nvme: namespace %" PRId64 ": cannot remove its saved reservations", ns_id);
}

/* Save s (mu held): the text while PTPL is on, nothing otherwise. */
static int save(struct nvme_resv *r, const struct resv_state *s, bool was_ptpl)
{
    if (!store.save || (!s->ptpl && !was_ptpl))
        return 0;
    if (!s->ptpl)
        return store.save(r->ns_id, NULL);
    char *t = state_format(s);
    if (!t)
        return -ENOMEM;
    int rc = store.save(r->ns_id, t);
    free(t);
    return rc;
}

/* ---- the rules ---- */

static bool all_registrants(uint8_t t)
{
    return t == RT_WE_AR || t == RT_EA_AR;
}

static long reg_find(const struct resv_state *s, const uint8_t *hostid)
{
    for (size_t i = 0; i < s->nregs; i++)
        if (memcmp(s->regs[i].hostid, hostid, 16) == 0)
            return (long)i;
    return -1;
}

static bool is_holder(const struct resv_state *s, const uint8_t *hostid)
{
    if (s->type == RT_NONE || reg_find(s, hostid) < 0)
        return false;
    return all_registrants(s->type) || memcmp(s->holder, hostid, 16) == 0;
}

static bool io_conflict(const struct resv_state *s, const uint8_t *hostid, bool write)
{
    if (s->type == RT_NONE || is_holder(s, hostid))
        return false;
    bool registered = reg_find(s, hostid) >= 0;
    switch (s->type) {
    case RT_WE:
        return write;
    case RT_EA:
        return true;
    case RT_WE_RO:
    case RT_WE_AR:
        return write && !registered;
    default: /* Exclusive Access, registrants only or all registrants */
        return !registered;
    }
}

uint16_t nvme_resv_check(struct nvme_resv *r, const uint8_t *hostid, bool write)
{
    if (!r || !atomic_load_explicit(&r->held, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&r->mu);
    bool conflict = io_conflict(&r->s, hostid, write);
    pthread_mutex_unlock(&r->mu);
    return conflict ? NVME_SC_RESV_CONFLICT : 0;
}

/* Remove registration i; the reservation goes with its holder (or with the
 * last registrant of an all-registrants type). */
static void reg_remove(struct resv_state *s, size_t i)
{
    bool was_holder = is_holder(s, s->regs[i].hostid) && !all_registrants(s->type);
    s->regs[i] = s->regs[--s->nregs];
    if (was_holder || (all_registrants(s->type) && s->nregs == 0)) {
        s->type = RT_NONE;
        memset(s->holder, 0, sizeof(s->holder));
    }
}

/* Remove every registration with key, but the host's own; how many. */
static unsigned remove_key(struct resv_state *s, uint64_t key, const uint8_t *self)
{
    unsigned n = 0;
    for (size_t i = s->nregs; i-- > 0;)
        if (s->regs[i].key == key && memcmp(s->regs[i].hostid, self, 16) != 0) {
            reg_remove(s, i);
            n++;
        }
    return n;
}

/* The arguments of a command. */
struct resv_args {
    const uint8_t *hostid;
    uint8_t action; /* RREGA, RACQA, RRELA */
    bool iekey;
    uint8_t rtype;
    uint8_t cptpl;
    uint64_t crkey, nrkey; /* nrkey: NRKEY or PRKEY */
};

/* The host's registration with a matching key, or -1 (a conflict). */
static long keyed(const struct resv_state *s, const struct resv_args *a)
{
    long i = reg_find(s, a->hostid);
    if (i < 0 || (!a->iekey && s->regs[i].key != a->crkey))
        return -1;
    return i;
}

static uint16_t do_register(struct resv_state *s, const struct resv_args *a)
{
    long i = reg_find(s, a->hostid);
    switch (a->action) {
    case 0: /* register */
        if (i >= 0)
            return s->regs[i].key == a->nrkey ? 0 : NVME_SC_RESV_CONFLICT;
        if (s->nregs == RESV_MAX_REGS)
            return NVME_SC_CAP_EXCEEDED;
        memcpy(s->regs[s->nregs].hostid, a->hostid, 16);
        s->regs[s->nregs++].key = a->nrkey;
        break;
    case 1: /* unregister */
        if ((i = keyed(s, a)) < 0)
            return NVME_SC_RESV_CONFLICT;
        reg_remove(s, (size_t)i);
        break;
    case 2: /* replace */
        if ((i = keyed(s, a)) < 0)
            return NVME_SC_RESV_CONFLICT;
        s->regs[i].key = a->nrkey;
        break;
    default:
        return NVME_SC_INVALID_FIELD;
    }
    s->gen++;
    if (a->cptpl >= 2)
        s->ptpl = a->cptpl == 3;
    return 0;
}

static void take(struct resv_state *s, const struct resv_args *a)
{
    s->type = a->rtype;
    memcpy(s->holder, a->hostid, 16);
}

static uint16_t do_preempt(struct resv_state *s, const struct resv_args *a)
{
    long holder = s->type == RT_NONE || all_registrants(s->type) ? -1 : reg_find(s, s->holder);
    if (s->type != RT_NONE && all_registrants(s->type) && a->nrkey == 0) {
        for (size_t i = s->nregs; i-- > 0;) /* every other registrant goes */
            if (memcmp(s->regs[i].hostid, a->hostid, 16) != 0)
                s->regs[i] = s->regs[--s->nregs];
        take(s, a);
    } else if (holder >= 0 && s->regs[holder].key == a->nrkey) {
        s->type = RT_NONE; /* removing the old holder must not end the new one */
        remove_key(s, a->nrkey, a->hostid);
        take(s, a);
    } else if (a->nrkey == 0 && s->type != RT_NONE) {
        return NVME_SC_INVALID_FIELD;
    } else if (remove_key(s, a->nrkey, a->hostid) == 0) {
        return NVME_SC_RESV_CONFLICT;
    }
    s->gen++;
    return 0;
}

static uint16_t do_acquire(struct resv_state *s, const struct resv_args *a)
{
    if (a->rtype < RT_WE || a->rtype > RT_EA_AR || a->action > 2)
        return NVME_SC_INVALID_FIELD;
    if (keyed(s, a) < 0)
        return NVME_SC_RESV_CONFLICT;
    if (a->action != 0)
        return do_preempt(s, a); /* preempt and abort: nothing runs long enough to abort */
    if (s->type == RT_NONE) {
        take(s, a);
        return 0;
    }
    return is_holder(s, a->hostid) && s->type == a->rtype ? 0 : NVME_SC_RESV_CONFLICT;
}

static uint16_t do_release(struct resv_state *s, const struct resv_args *a)
{
    if (a->action > 1)
        return NVME_SC_INVALID_FIELD;
    if (keyed(s, a) < 0)
        return NVME_SC_RESV_CONFLICT;
    if (a->action == 1) { /* clear */
        s->nregs = 0;
        s->type = RT_NONE;
        memset(s->holder, 0, sizeof(s->holder));
        s->gen++;
        return 0;
    }
    if (s->type == RT_NONE || !is_holder(s, a->hostid))
        return 0; /* nothing this host holds: no effect */
    if (s->type != a->rtype)
        return NVME_SC_INVALID_FIELD;
    s->type = RT_NONE;
    memset(s->holder, 0, sizeof(s->holder));
    return 0;
}

/* ---- the commands ---- */

static uint16_t report(struct nvme_cmd *cmd, struct nvme_resv *r, uint32_t c10, uint32_t c11)
{
    uint64_t want = ((uint64_t)c10 + 1) * 4;
    if (!(c11 & 1))
        return NVME_SC_HOST_ID_INCONSIST; /* fabrics host identifiers are 128-bit */
    if (want > NVME_MAX_XFER)
        return NVME_SC_INVALID_FIELD;
    if (nvme_cmd_buf(cmd, want) < 0)
        return NVME_SC_INTERNAL;
    uint8_t *p = cmd->buf;
    memset(p, 0, want);
    uint8_t page[64 + 64 * RESV_MAX_REGS] = {0};
    pthread_mutex_lock(&r->mu);
    const struct resv_state *s = &r->s;
    le32_put(page, s->gen);
    page[4] = s->type;
    le16_put(page + 5, (uint16_t)s->nregs);
    page[9] = s->ptpl;
    for (size_t i = 0; i < s->nregs; i++) {
        uint8_t *e = page + 64 + 64 * i;
        le16_put(e, 0xffff); /* CNTLID: the dynamic controller model */
        e[2] = is_holder(s, s->regs[i].hostid);
        le64_put(e + 8, s->regs[i].key);
        memcpy(e + 16, s->regs[i].hostid, 16);
    }
    size_t len = 64 + 64 * s->nregs;
    pthread_mutex_unlock(&r->mu);
    memcpy(p, page, MIN(len, (size_t)want));
    cmd->out_len = (uint32_t)want;
    return 0;
}

/* Decode a Register, Acquire or Release: 0 or the status to fail with. */
static uint16_t decode(struct nvme_cmd *cmd, struct resv_args *a)
{
    uint32_t c10 = le32_get(cmd->sqe + NVME_SQE_CDW10);
    uint32_t need = cmd->sqe[NVME_SQE_OPC] == NVME_IO_RESV_RELEASE ? 8 : 16;
    memset(a, 0, sizeof(*a));
    a->hostid = cmd->q->ctrl->hostid;
    a->action = c10 & 7;
    a->iekey = c10 & (1u << 3);
    a->rtype = (uint8_t)(c10 >> 8);
    a->cptpl = (uint8_t)(c10 >> 30);
    if (cmd->data_len < need)
        return NVME_SC_SGL_INVALID_DATA;
    a->crkey = le64_get(cmd->buf);
    if (need == 16)
        a->nrkey = le64_get(cmd->buf + 8);
    if (cmd->sqe[NVME_SQE_OPC] == NVME_IO_RESV_REGISTER && a->cptpl == 1)
        return NVME_SC_INVALID_FIELD;
    return 0;
}

static uint16_t change(struct nvme_cmd *cmd, struct nvme_resv *r)
{
    struct resv_args a;
    uint16_t st = decode(cmd, &a);
    if (st)
        return st;
    pthread_mutex_lock(&r->mu);
    struct resv_state *old = malloc(sizeof(*old));
    if (!old) {
        pthread_mutex_unlock(&r->mu);
        return NVME_SC_INTERNAL;
    }
    *old = r->s;
    switch (cmd->sqe[NVME_SQE_OPC]) {
    case NVME_IO_RESV_REGISTER:
        st = do_register(&r->s, &a);
        break;
    case NVME_IO_RESV_ACQUIRE:
        st = do_acquire(&r->s, &a);
        break;
    default:
        st = do_release(&r->s, &a);
    }
    if (st == 0 && memcmp(old, &r->s, sizeof(*old)) != 0 && save(r, &r->s, old->ptpl) < 0) {
        log_error("nvme: namespace %" PRId64 ": cannot save its reservations", r->ns_id);
        st = NVME_SC_INTERNAL;
    }
    if (st)
        r->s = *old; /* a refused or unsaved change leaves nothing behind */
    atomic_store_explicit(&r->held, r->s.type != RT_NONE, memory_order_release);
    pthread_mutex_unlock(&r->mu);
    free(old);
    return st;
}

void nvme_resv_exec(struct nvme_cmd *cmd, struct nvme_resv *r)
{
    uint8_t op = cmd->sqe[NVME_SQE_OPC];
    if (op == NVME_IO_RESV_REPORT) {
        cmd->status = report(cmd, r, le32_get(cmd->sqe + NVME_SQE_CDW10),
                             le32_get(cmd->sqe + NVME_SQE_CDW11));
    } else {
        if (!cmd->data_ready)
            return nvme_cmd_request_data(cmd);
        cmd->status = change(cmd, r);
        cmd->out_len = 0;
    }
    if (cmd->status)
        log_debug("%s: nvme: reservation command 0x%02x refused: status 0x%x", cmd->q->c->peer, op,
                  cmd->status);
    nvme_cmd_complete(cmd);
}

uint8_t nvme_resv_rescap(const struct nvme_resv *r)
{
    /* PTPLS, the six types, IEKEY semantics of NVMe 1.3 and later */
    return r ? 0xff : 0;
}

static int set_ptpl(struct nvme_resv *r, bool on)
{
    pthread_mutex_lock(&r->mu);
    bool was = r->s.ptpl;
    r->s.ptpl = on;
    int rc = was == on ? 0 : save(r, &r->s, was);
    if (rc < 0)
        r->s.ptpl = was;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

uint16_t nvme_resv_feature(struct nvme_cmd *cmd, bool set)
{
    uint32_t c11 = le32_get(cmd->sqe + NVME_SQE_CDW11);
    if ((le32_get(cmd->sqe + NVME_SQE_CDW10) & 0xff) == NVME_FEAT_HOST_ID) {
        if (!(c11 & 1)) /* EXHID: a fabric's identifiers are 128-bit */
            return NVME_SC_INVALID_FIELD;
        if (nvme_cmd_buf(cmd, 16) < 0)
            return NVME_SC_INTERNAL;
        memcpy(cmd->buf, cmd->q->ctrl->hostid, 16);
        cmd->out_len = 16;
        return 0;
    }
    struct nvme_subsys *s = nvme_queue_subsys(cmd->q);
    const struct nvme_ns *ns = s ? nvme_subsys_ns(s, le32_get(cmd->sqe + NVME_SQE_NSID)) : NULL;
    if (!ns)
        return NVME_SC_INVALID_NS;
    if (!ns->resv)
        return NVME_SC_INVALID_FIELD;
    struct nvme_resv *r = ns->resv;
    if (set && set_ptpl(r, c11 & 1) < 0)
        return NVME_SC_INTERNAL;
    pthread_mutex_lock(&r->mu);
    cmd->result = r->s.ptpl;
    pthread_mutex_unlock(&r->mu);
    return 0;
}
