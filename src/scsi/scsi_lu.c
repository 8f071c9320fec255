/*
 * Logical units: lifecycle, per-I_T-nexus unit attention state, task
 * management effects, and the LBA range lock that makes COMPARE AND WRITE
 * atomic with respect to other writes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/iostats.h"
#include "core/log.h"
#include "core/util.h"
#include "scsi/scsi_internal.h"

enum { LOCK_NONE = 0, LOCK_WAITING = 1, LOCK_HELD = 2 };

static atomic_uint_fast64_t next_nexus_id = 1;

void scsi_nexus_init(struct scsi_nexus *n)
{
    n->id = atomic_fetch_add(&next_nexus_id, 1);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static int parse_naa(const char *s, uint8_t out[16], uint8_t *len)
{
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    size_t n = strlen(s);
    if (n != 16 && n != 32)
        return -EINVAL;
    if (hex_decode(s, n, out, 16) < 0)
        return -EINVAL;
    /* NAA 5 is 8 bytes, NAA 6 is 16; NAA 2/3 are 8 bytes as well. */
    unsigned naa = out[0] >> 4;
    if ((n == 32) != (naa == 6))
        return -EINVAL;
    *len = (uint8_t)(n / 2);
    return 0;
}

static void copy_str(char *dst, size_t cap, const char *src, const char *dflt)
{
    snprintf(dst, cap, "%s", (src && src[0]) ? src : dflt);
}

static bool printable(const char *s)
{
    for (; *s; s++)
        if (*s < 0x20 || *s > 0x7e)
            return false;
    return true;
}

int scsi_lu_new(struct volume *vol, const struct scsi_lu_params *p, struct scsi_lu **out)
{
    uint32_t bs = p->block_size ? p->block_size : volume_block_size(vol);
    if (bs != 512 && bs != 1024 && bs != 2048 && bs != 4096) {
        log_error("scsi: %s: block size %u not one of 512/1024/2048/4096", volume_name(vol), bs);
        return -EINVAL;
    }
    if (volume_size(vol) % bs) {
        log_error("scsi: %s: size %llu is not a multiple of the block size %u", volume_name(vol),
                  (unsigned long long)volume_size(vol), bs);
        return -EINVAL;
    }
    if (p->pblock_exp > 15 || !printable(p->serial) || !printable(p->vendor) ||
        !printable(p->product) || !printable(p->revision)) {
        log_error("scsi: %s: invalid LU properties", volume_name(vol));
        return -EINVAL;
    }
    struct scsi_lu *lu = calloc(1, sizeof *lu);
    if (!lu)
        return -ENOMEM;
    atomic_init(&lu->refs, 1);
    lu->vol = vol;
    lu->mslot = iostats_slot(volume_name(vol));
    iostats_bind(lu->mslot, IOSTATS_ISCSI);
    lu->block_size = bs;
    lu->block_shift = (unsigned)__builtin_ctz(bs);
    lu->pblock_exp = p->pblock_exp;
    lu->rotation_rate = p->rotation_rate;
    atomic_init(&lu->readonly, p->readonly);
    atomic_init(&lu->swp, false);
    lu->insecure_tpc = p->insecure_tpc;
    lu->offline = bdev_is_offline(volume_bdev(vol));
    char dflt_serial[17];
    snprintf(dflt_serial, sizeof dflt_serial, "%016llx",
             (unsigned long long)fnv1a(volume_name(vol)));
    copy_str(lu->serial, sizeof lu->serial, p->serial, dflt_serial);
    copy_str(lu->vendor, sizeof lu->vendor, p->vendor, "BLOCKD");
    copy_str(lu->product, sizeof lu->product, p->product, "iSCSI Disk");
    copy_str(lu->revision, sizeof lu->revision, p->revision, "0123");
    if (p->naa[0]) {
        if (parse_naa(p->naa, lu->naa, &lu->naa_len) < 0) {
            log_error("scsi: %s: bad NAA identifier '%s'", volume_name(vol), p->naa);
            free(lu);
            return -EINVAL;
        }
    } else {
        /* NAA 3 (locally assigned), 60 bits from the serial. */
        uint64_t h = fnv1a(lu->serial);
        h = (h & 0x0fffffffffffffffull) | 0x3000000000000000ull;
        be64_store(lu->naa, h);
        lu->naa_len = 8;
    }
    lu->pr_store = p->pr_store;
    pthread_mutex_init(&lu->mu, NULL);
    lu->size_gen_seen = volume_size_generation(vol);
    lu->wce_seen = scsi_lu_wce(lu);
    lu->wp_seen = scsi_lu_is_readonly(lu);
    /* Shared storage (RBD) keeps the reservations in the cluster, with the
     * image; the extent's saved blob is for local volumes only. */
    int rc = scsi_pr_shared_open(lu);
    if (rc == 0 && !lu->shared && p->pr_blob && p->pr_blob_len) {
        rc = scsi_pr_load(lu, p->pr_blob, p->pr_blob_len);
        if (rc < 0)
            log_error("scsi: %s: saved persistent reservations do not parse", volume_name(vol));
    }
    if (rc < 0) {
        pthread_mutex_destroy(&lu->mu);
        scsi_pr_state_free(&lu->pr);
        free(lu);
        return rc;
    }
    volume_ref(vol);
    *out = lu;
    return 0;
}

void scsi_lu_ref(struct scsi_lu *lu)
{
    atomic_fetch_add_explicit(&lu->refs, 1, memory_order_relaxed);
}

static void lu_free(struct scsi_lu *lu)
{
    /* First: the ALUA provider (gateway/) stops calling into the LU
     * (unit attentions, reservation resyncs) before any of it goes. */
    if (lu->alua && lu->alua->release)
        lu->alua->release(lu->alua_arg);
    scsi_pr_shared_close(lu);
    struct scsi_nexus_state *ns = lu->nexuses;
    while (ns) {
        struct scsi_nexus_state *next = ns->next;
        free(ns);
        ns = next;
    }
    scsi_pr_state_free(&lu->pr);
    pthread_mutex_destroy(&lu->mu);
    volume_unref(lu->vol);
    free(lu);
}

void scsi_lu_set_alua(struct scsi_lu *lu, const struct scsi_alua_ops *ops, void *arg)
{
    lu->alua = ops;
    lu->alua_arg = arg;
}

static void lu_free_run(struct io_job *j)
{
    (void)j;
}

/* After the job: the pool no longer touches it (as volume.c does). */
static void lu_free_done(struct reactor_msg *m)
{
    lu_free(container_of(m, struct scsi_lu, final_job.done));
}

void scsi_lu_unref(struct scsi_lu *lu)
{
    if (!lu || atomic_fetch_sub_explicit(&lu->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (lu->shared && reactor_self()) {
        /* Closing the shared store blocks (unwatch): not on a reactor. */
        lu->final_job = (struct io_job){.run = lu_free_run, .done.fn = lu_free_done};
        iopool_submit(&lu->final_job);
        return;
    }
    lu_free(lu);
}

struct volume *scsi_lu_volume(const struct scsi_lu *lu)
{
    return lu->vol;
}

uint32_t scsi_lu_block_size(const struct scsi_lu *lu)
{
    return lu->block_size;
}

uint64_t scsi_lu_blocks(const struct scsi_lu *lu)
{
    return volume_size(lu->vol) >> lu->block_shift;
}

bool scsi_lu_is_readonly(const struct scsi_lu *lu)
{
    return atomic_load(&lu->readonly) || volume_readonly(lu->vol);
}

bool scsi_lu_wce(const struct scsi_lu *lu)
{
    /* sync=always: every write is durable before status, no volatile cache */
    return volume_sync_mode(lu->vol) != VOLUME_SYNC_ALWAYS;
}

void scsi_lu_set_readonly(struct scsi_lu *lu, bool ro)
{
    atomic_store(&lu->readonly, ro);
}

/* ---- unit attentions ---- */

static const uint8_t ua_codes[SCSI_UA_COUNT][2] = {
    [SCSI_UA_POWER_ON] = {0x29, 0x00},
    [SCSI_UA_BUS_RESET] = {0x29, 0x02},
    [SCSI_UA_LU_RESET] = {0x29, 0x03},
    [SCSI_UA_NEXUS_LOSS] = {0x29, 0x07},
    [SCSI_UA_MODE_CHANGED] = {0x2a, 0x01},
    [SCSI_UA_RESERVATIONS_PREEMPTED] = {0x2a, 0x03},
    [SCSI_UA_RESERVATIONS_RELEASED] = {0x2a, 0x04},
    [SCSI_UA_REGISTRATIONS_PREEMPTED] = {0x2a, 0x05},
    [SCSI_UA_CAPACITY_CHANGED] = {0x2a, 0x09},
    [SCSI_UA_INQUIRY_CHANGED] = {0x3f, 0x03},
    [SCSI_UA_LUNS_CHANGED] = {0x3f, 0x0e},
    [SCSI_UA_MEDIUM_CHANGED] = {0x28, 0x00},
    [SCSI_UA_ALUA_CHANGED] = {0x2a, 0x06},
};

struct scsi_nexus_state *scsi_lu_nexus_locked(struct scsi_lu *lu, const struct scsi_nexus *n)
{
    for (struct scsi_nexus_state *ns = lu->nexuses; ns; ns = ns->next)
        if (ns->nexus_id == n->id)
            return ns;
    struct scsi_nexus_state *ns = calloc(1, sizeof *ns);
    if (!ns)
        return NULL;
    ns->nexus_id = n->id;
    ns->ua_pending = 1u << SCSI_UA_POWER_ON;
    ns->rel_tgt_port_id = n->rel_tgt_port_id;
    snprintf(ns->initiator_port, sizeof ns->initiator_port, "%s", n->initiator_port);
    ns->next = lu->nexuses;
    lu->nexuses = ns;
    return ns;
}

void scsi_lu_ua_all_locked(struct scsi_lu *lu, enum scsi_ua ua, uint64_t except)
{
    for (struct scsi_nexus_state *ns = lu->nexuses; ns; ns = ns->next)
        if (ns->nexus_id != except)
            ns->ua_pending |= 1u << ua;
}

void scsi_lu_ua_port_locked(struct scsi_lu *lu, const char *port, uint16_t rel, enum scsi_ua ua)
{
    for (struct scsi_nexus_state *ns = lu->nexuses; ns; ns = ns->next)
        if (strcmp(port, "*") == 0 ||
            ((rel == 0 || ns->rel_tgt_port_id == rel) && strcasecmp(ns->initiator_port, port) == 0))
            ns->ua_pending |= 1u << ua;
}

bool scsi_lu_ua_pop_locked(struct scsi_nexus_state *ns, struct scsi_cmd *c)
{
    for (unsigned i = 0; i < SCSI_UA_COUNT; i++) {
        if (!(ns->ua_pending & (1u << i)))
            continue;
        ns->ua_pending &= ~(1u << i);
        if (i == SCSI_UA_POWER_ON) /* a power-on subsumes the resets */
            ns->ua_pending &= ~((1u << SCSI_UA_BUS_RESET) | (1u << SCSI_UA_LU_RESET) |
                                (1u << SCSI_UA_NEXUS_LOSS));
        scsi_sense_fill(c, SK_UNIT_ATTENTION, ua_codes[i][0], ua_codes[i][1]);
        return true;
    }
    return false;
}

void scsi_lu_raise_ua(struct scsi_lu *lu, enum scsi_ua ua)
{
    if ((unsigned)ua >= SCSI_UA_COUNT)
        return;
    pthread_mutex_lock(&lu->mu);
    scsi_lu_ua_all_locked(lu, ua, 0);
    pthread_mutex_unlock(&lu->mu);
}

void scsi_lu_nexus_lost(struct scsi_lu *lu, const struct scsi_nexus *n)
{
    pthread_mutex_lock(&lu->mu);
    for (struct scsi_nexus_state **pp = &lu->nexuses; *pp; pp = &(*pp)->next) {
        if ((*pp)->nexus_id == n->id) {
            struct scsi_nexus_state *dead = *pp;
            *pp = dead->next;
            free(dead);
            break;
        }
    }
    pthread_mutex_unlock(&lu->mu);
    scsi_pr_res2_drop(lu, n);
}

static void lu_reset(struct scsi_lu *lu, enum scsi_ua ua)
{
    pthread_mutex_lock(&lu->mu);
    scsi_lu_ua_all_locked(lu, ua, 0);
    pthread_mutex_unlock(&lu->mu);
    scsi_pr_res2_drop(lu, NULL);
}

void scsi_lu_reset(struct scsi_lu *lu, const struct scsi_nexus *n)
{
    (void)n;
    lu_reset(lu, SCSI_UA_LU_RESET);
}

void scsi_lu_target_reset(struct scsi_lu *lu, const struct scsi_nexus *n)
{
    (void)n;
    lu_reset(lu, SCSI_UA_BUS_RESET);
}

void scsi_lu_abort_task_set(struct scsi_lu *lu, const struct scsi_nexus *n)
{
    /* TAS=0 and QErr=0 in the control mode page: aborting tasks changes no
     * LU state and raises no unit attention. */
    (void)lu;
    (void)n;
}

/* ---- LBA range lock ---- */

static bool conflicts(const struct scsi_cmd *x, uint64_t start, uint64_t end, bool excl)
{
    return x->priv.lock_start < end && start < x->priv.lock_end && (excl || x->priv.lock_excl);
}

bool scsi_range_lock(struct scsi_cmd *c, uint64_t lba, uint64_t nblocks, bool excl)
{
    if (c->priv.lock_state == LOCK_HELD)
        return true;
    struct scsi_lu *lu = c->lu;
    uint64_t start = lba, end = lba + (nblocks ? nblocks : 1);
    if (end < start)
        end = UINT64_MAX;
    c->priv.lock_start = start;
    c->priv.lock_end = end;
    c->priv.lock_excl = excl;

    pthread_mutex_lock(&lu->mu);
    bool blocked = false;
    for (struct scsi_cmd *x = lu->lock_active; x && !blocked; x = x->priv.lock_next)
        blocked = conflicts(x, start, end, excl);
    /* Overlapping waiters go first, so a stream of writes cannot starve a CAW. */
    for (struct scsi_cmd *x = lu->lock_wait_head; x && !blocked; x = x->priv.lock_next)
        blocked = conflicts(x, start, end, excl);
    if (!blocked) {
        c->priv.lock_prev = NULL;
        c->priv.lock_next = lu->lock_active;
        if (lu->lock_active)
            lu->lock_active->priv.lock_prev = c;
        lu->lock_active = c;
        c->priv.lock_state = LOCK_HELD;
    } else {
        c->priv.lock_next = NULL;
        if (lu->lock_wait_tail)
            lu->lock_wait_tail->priv.lock_next = c;
        else
            lu->lock_wait_head = c;
        lu->lock_wait_tail = c;
        c->priv.lock_state = LOCK_WAITING;
    }
    pthread_mutex_unlock(&lu->mu);
    return !blocked;
}

static void range_resume(struct reactor_msg *m)
{
    struct scsi_cmd *c = container_of(m, struct scsi_cmd, priv.msg);
    const struct scsi_op *op = c->priv.op;
    op->run(c);
}

void scsi_range_unlock(struct scsi_cmd *c)
{
    struct scsi_lu *lu = c->lu;
    struct scsi_cmd *granted = NULL;

    pthread_mutex_lock(&lu->mu);
    if (c->priv.lock_state == LOCK_HELD) {
        if (c->priv.lock_prev)
            c->priv.lock_prev->priv.lock_next = c->priv.lock_next;
        else
            lu->lock_active = c->priv.lock_next;
        if (c->priv.lock_next)
            c->priv.lock_next->priv.lock_prev = c->priv.lock_prev;
    }
    c->priv.lock_state = LOCK_NONE;

    struct scsi_cmd *prev = NULL, *w = lu->lock_wait_head;
    while (w) {
        struct scsi_cmd *next = w->priv.lock_next;
        bool blocked = false;
        for (struct scsi_cmd *x = lu->lock_active; x && !blocked; x = x->priv.lock_next)
            blocked = conflicts(x, w->priv.lock_start, w->priv.lock_end, w->priv.lock_excl);
        for (struct scsi_cmd *x = lu->lock_wait_head; x != w && !blocked; x = x->priv.lock_next)
            blocked = conflicts(x, w->priv.lock_start, w->priv.lock_end, w->priv.lock_excl);
        if (blocked) {
            prev = w;
            w = next;
            continue;
        }
        /* unlink from the wait list */
        if (prev)
            prev->priv.lock_next = next;
        else
            lu->lock_wait_head = next;
        if (lu->lock_wait_tail == w)
            lu->lock_wait_tail = prev;
        /* link into the active list */
        w->priv.lock_prev = NULL;
        w->priv.lock_next = lu->lock_active;
        if (lu->lock_active)
            lu->lock_active->priv.lock_prev = w;
        lu->lock_active = w;
        w->priv.lock_state = LOCK_HELD;
        w->priv.grant_next = granted;
        granted = w;
        w = next;
    }
    pthread_mutex_unlock(&lu->mu);

    while (granted) {
        struct scsi_cmd *g = granted;
        granted = g->priv.grant_next;
        g->priv.msg.fn = range_resume;
        if (g->owner)
            reactor_post(g->owner, &g->priv.msg);
        else
            range_resume(&g->priv.msg);
    }
}
