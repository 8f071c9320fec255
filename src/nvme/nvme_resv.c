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
#include "nvme/nvme_resv_priv.h"
#include "store/bdev_rbd.h"

/* feature(): the command completes elsewhere (not a status on the wire). */
#define NVME_SC_ASYNC 0xffff

enum rtype {
    RT_NONE = 0,
    RT_WE = 1,
    RT_EA = 2,
    RT_WE_RO = 3,
    RT_EA_RO = 4,
    RT_WE_AR = 5,
    RT_EA_AR = 6,
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct nvme_resv *registry;
static struct nvme_resv_store store;

void nvme_resv_set_store(const struct nvme_resv_store *st)
{
    store = *st;
}

/* ---- text form: "nvme-resv 1", then "gen", "ptpl", "type", "reg" lines ---- */

void resv_hex_put(char *out, const uint8_t *id)
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

int resv_hex_get(const char *in, uint8_t *id)
{
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(in + 2 * i, "%2x", &v) != 1)
            return -EINVAL;
        id[i] = (uint8_t)v;
    }
    return 0;
}

char *resv_format(const struct resv_state *s, uint64_t seq)
{
    size_t cap = 128 + s->nregs * 64;
    char *t = malloc(cap), hex[33];
    if (!t)
        return NULL;
    resv_hex_put(hex, s->holder);
    size_t n = (size_t)snprintf(t, cap, "nvme-resv 1\ngen %" PRIu32 "\nptpl %d\ntype %u %s\n",
                                s->gen, s->ptpl, s->type, hex);
    for (size_t i = 0; i < s->nregs; i++) {
        resv_hex_put(hex, s->regs[i].hostid);
        n += (size_t)snprintf(t + n, cap - n, "reg %s %016" PRIx64 "\n", hex, s->regs[i].key);
    }
    if (seq)
        snprintf(t + n, cap - n, "seq %" PRIu64 "\n", seq);
    return t;
}

static int parse_line(struct resv_state *s, const char *l, uint64_t *seq)
{
    char hex[33];
    unsigned a, b;
    uint64_t key;
    if (sscanf(l, "seq %" SCNu64, &key) == 1)
        *seq = key;
    else if (sscanf(l, "gen %u", &a) == 1)
        s->gen = a;
    else if (sscanf(l, "ptpl %u", &a) == 1)
        s->ptpl = a != 0;
    else if (sscanf(l, "type %u %32s", &b, hex) == 2 && b <= RT_EA_AR)
        return (s->type = (uint8_t)b), resv_hex_get(hex, s->holder);
    else if (sscanf(l, "reg %32s %" SCNx64, hex, &key) == 2 && s->nregs < RESV_MAX_REGS) {
        s->regs[s->nregs].key = key;
        return resv_hex_get(hex, s->regs[s->nregs++].hostid);
    } else if (strncmp(l, "nvme-resv 1", 11) != 0 && strncmp(l, "by ", 3) != 0)
        return -EINVAL; /* ("by": who changed it, in a notify: resv_by) */
    return 0;
}

int resv_parse(struct resv_state *s, const char *text, uint64_t *seq)
{
    uint64_t sq = 0;
    memset(s, 0, sizeof(*s));
    for (const char *l = text; *l;) {
        const char *nl = strchr(l, '\n');
        char line[128];
        size_t n = nl ? (size_t)(nl - l) : strlen(l);
        snprintf(line, sizeof(line), "%.*s", (int)MIN(n, sizeof(line) - 1), l);
        if (line[0] && parse_line(s, line, &sq) < 0)
            return -EINVAL;
        l += n + (nl ? 1 : 0);
    }
    if (s->type == RT_NONE)
        memset(s->holder, 0, sizeof(s->holder));
    if (seq)
        *seq = sq;
    return 0;
}

/* ---- the registry of objects ---- */

static void load(struct nvme_resv *r)
{
    char *text = NULL;
    if (!store.load || store.load(r->ns_id, &text) < 0 || !text)
        return;
    struct resv_state s;
    int rc = resv_parse(&s, text, NULL);
    free(text);
    if (rc < 0 || !s.ptpl) { /* a state is saved only while PTPL is on */
        log_warn("nvme: namespace %" PRId64 ": saved reservations %s: dropped", r->ns_id,
                 rc < 0 ? "unreadable" : "without PTPL");
        return;
    }
    r->s = s;
    atomic_store(&r->held, r->s.type != RT_NONE);
    log_info("nvme: namespace %" PRId64 ": %zu reservation registrant(s) restored, %s", r->ns_id,
             r->s.nregs, r->s.type ? "reserved" : "not reserved");
}

/* The object of ns_id in the registry with a new reference, or a new one
 * (loaded, or opened in the cluster for vol) put there. open_mu makes the
 * lookup and the open one step (two builds never open a namespace twice);
 * registry_mu, which a reactor may take in nvme_resv_unref, is never held
 * while the database or the cluster is asked. */
static struct nvme_resv *get(int64_t ns_id, struct volume *vol)
{
    static pthread_mutex_t open_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&open_mu);
    pthread_mutex_lock(&registry_mu);
    struct nvme_resv *r = registry;
    while (r && (r->ns_id != ns_id || !r->shared != !vol))
        r = r->next;
    if (r)
        atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&registry_mu);
    if (!r && (r = calloc(1, sizeof(*r))) != NULL) {
        atomic_init(&r->refs, 1);
        r->ns_id = ns_id;
        pthread_mutex_init(&r->mu, NULL);
        if (!vol) {
            load(r);
        } else if (resv_shared_open(r, vol) < 0) {
            pthread_mutex_destroy(&r->mu);
            free(r);
            r = NULL;
        }
        if (r) {
            pthread_mutex_lock(&registry_mu);
            r->next = registry;
            registry = r;
            pthread_mutex_unlock(&registry_mu);
        }
    }
    pthread_mutex_unlock(&open_mu);
    return r;
}

struct nvme_resv *nvme_resv_get(int64_t ns_id)
{
    return get(ns_id, NULL);
}

struct nvme_resv *nvme_resv_get_volume(int64_t ns_id, struct volume *vol)
{
    return get(ns_id, bdev_is_rbd(volume_bdev(vol)) ? vol : NULL);
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
    if (r->shared)
        return resv_shared_free(r);
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
    char *t = resv_format(s, 0);
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
    uint32_t gen = s->gen + 1;
    switch (a->action) {
    case 0: /* register */
        if (i >= 0 && s->regs[i].key != a->nrkey)
            return NVME_SC_RESV_CONFLICT;
        if (i >= 0) { /* the same key again: no new registration, CPTPL applies */
            gen = s->gen;
            break;
        }
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
    s->gen = gen;
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

uint16_t resv_apply(struct resv_state *s, const struct resv_args *a)
{
    switch (a->op) {
    case NVME_IO_RESV_REGISTER:
        return do_register(s, a);
    case NVME_IO_RESV_ACQUIRE:
        return do_acquire(s, a);
    case NVME_IO_RESV_RELEASE:
        return do_release(s, a);
    case RESV_OP_PTPL:
        s->ptpl = a->cptpl == 3;
        return 0;
    default:
        return 0;
    }
}

bool resv_install(struct nvme_resv *r, const struct resv_state *s, uint64_t seq,
                  struct resv_state *old)
{
    pthread_mutex_lock(&r->mu);
    bool newer = seq > r->seq;
    if (newer) {
        if (old)
            *old = r->s;
        r->s = *s;
        r->seq = seq;
        atomic_store_explicit(&r->held, s->type != RT_NONE, memory_order_release);
    }
    pthread_mutex_unlock(&r->mu);
    return newer;
}

void resv_report_fill(const struct resv_state *s, uint8_t *out, size_t len)
{
    uint8_t page[64 + 64 * RESV_MAX_REGS] = {0};
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
    memcpy(out, page, MIN(len, 64 + 64 * s->nregs));
}

/* ---- the commands ---- */

/* Decode a command: 0 or the status to fail with. */
static uint16_t decode(struct nvme_cmd *cmd, struct resv_args *a)
{
    uint8_t op = cmd->sqe[NVME_SQE_OPC];
    uint32_t c10 = le32_get(cmd->sqe + NVME_SQE_CDW10);
    uint32_t need = op == NVME_IO_RESV_RELEASE ? 8 : 16;
    memset(a, 0, sizeof(*a));
    a->op = op;
    memcpy(a->hostid, cmd->q->ctrl->hostid, 16);
    if (op == NVME_IO_RESV_REPORT) {
        uint64_t want = ((uint64_t)c10 + 1) * 4;
        a->op = RESV_OP_REPORT;
        if (!(le32_get(cmd->sqe + NVME_SQE_CDW11) & 1))
            return NVME_SC_HOST_ID_INCONSIST; /* fabrics host identifiers are 128-bit */
        if (want > NVME_MAX_XFER)
            return NVME_SC_INVALID_FIELD;
        if (nvme_cmd_buf(cmd, want) < 0)
            return NVME_SC_INTERNAL;
        memset(cmd->buf, 0, want);
        cmd->out_len = (uint32_t)want;
        return 0;
    }
    a->action = c10 & 7;
    a->iekey = c10 & (1u << 3);
    a->rtype = (uint8_t)(c10 >> 8);
    a->cptpl = (uint8_t)(c10 >> 30);
    if (cmd->data_len < need)
        return NVME_SC_SGL_INVALID_DATA;
    a->crkey = le64_get(cmd->buf);
    if (need == 16)
        a->nrkey = le64_get(cmd->buf + 8);
    if (op == NVME_IO_RESV_REGISTER && a->cptpl == 1)
        return NVME_SC_INVALID_FIELD;
    return 0;
}

/* A local object: apply, save, or roll back. */
static uint16_t local_run(struct nvme_cmd *cmd, struct nvme_resv *r, const struct resv_args *a)
{
    if (a->op == RESV_OP_REPORT) {
        pthread_mutex_lock(&r->mu);
        resv_report_fill(&r->s, cmd->buf, cmd->out_len);
        pthread_mutex_unlock(&r->mu);
        return 0;
    }
    struct resv_state *old = malloc(sizeof(*old));
    struct resv_note *notes = malloc(RESV_NOTES_MAX * sizeof(*notes));
    size_t nnotes = 0;
    if (!old || !notes) {
        free(old);
        free(notes);
        return NVME_SC_INTERNAL;
    }
    pthread_mutex_lock(&r->mu);
    *old = r->s;
    uint16_t st = resv_apply(&r->s, a);
    if (st == 0 && memcmp(old, &r->s, sizeof(*old)) != 0 && save(r, &r->s, old->ptpl) < 0) {
        log_error("nvme: namespace %" PRId64 ": cannot save its reservations", r->ns_id);
        st = NVME_SC_INTERNAL;
    }
    if (st)
        r->s = *old; /* a refused or unsaved change leaves nothing behind */
    else
        nnotes = resv_notes(old, &r->s, a, notes);
    atomic_store_explicit(&r->held, r->s.type != RT_NONE, memory_order_release);
    pthread_mutex_unlock(&r->mu);
    resv_notify(r, notes, nnotes);
    free(notes);
    free(old);
    return st;
}

/* Run a on r for cmd and complete it (now, or from the pool when shared). */
static void run(struct nvme_cmd *cmd, struct nvme_resv *r, const struct resv_args *a)
{
    if (r->shared)
        return resv_shared_run(r, cmd, a);
    cmd->status = local_run(cmd, r, a);
    nvme_cmd_complete(cmd);
}

void nvme_resv_exec(struct nvme_cmd *cmd, struct nvme_resv *r)
{
    if (cmd->sqe[NVME_SQE_OPC] != NVME_IO_RESV_REPORT && !cmd->data_ready)
        return nvme_cmd_request_data(cmd);
    struct resv_args a;
    cmd->status = decode(cmd, &a);
    if (cmd->status) {
        cmd->out_len = 0;
        return nvme_cmd_complete(cmd);
    }
    if (a.op != RESV_OP_REPORT)
        cmd->out_len = 0;
    run(cmd, r, &a);
}

uint8_t nvme_resv_rescap(const struct nvme_resv *r)
{
    /* PTPLS, the six types, IEKEY semantics of NVMe 1.3 and later */
    return r ? 0xff : 0;
}

static uint16_t feature(struct nvme_cmd *cmd, bool set)
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
    if ((le32_get(cmd->sqe + NVME_SQE_CDW10) & 0xff) == NVME_FEAT_RESV_MASK) {
        struct nvme_ctrl *ctrl = cmd->q->ctrl; /* one mask for every namespace */
        pthread_mutex_lock(&ctrl->lock);
        if (set)
            ctrl->resv_mask = (uint8_t)(c11 & 0xe); /* REGPRE, RESREL, RESPRE */
        cmd->result = ctrl->resv_mask;
        pthread_mutex_unlock(&ctrl->lock);
        return 0;
    }
    struct nvme_subsys *s = nvme_queue_subsys(cmd->q);
    const struct nvme_ns *ns = s ? nvme_subsys_ns(s, le32_get(cmd->sqe + NVME_SQE_NSID)) : NULL;
    if (!ns)
        return NVME_SC_INVALID_NS;
    if (!ns->resv)
        return NVME_SC_INVALID_FIELD;
    struct nvme_resv *r = ns->resv;
    if (set) {
        struct resv_args a = {.op = RESV_OP_PTPL, .cptpl = (c11 & 1) ? 3 : 2};
        cmd->result = c11 & 1;
        run(cmd, r, &a);
        return NVME_SC_ASYNC;
    }
    pthread_mutex_lock(&r->mu);
    cmd->result = r->s.ptpl;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

void nvme_resv_feature(struct nvme_cmd *cmd, bool set)
{
    uint16_t st = feature(cmd, set);
    if (st == NVME_SC_ASYNC)
        return;
    cmd->status = st;
    nvme_cmd_complete(cmd);
}
