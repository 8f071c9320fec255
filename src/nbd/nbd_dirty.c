/* qemu:dirty-bitmap meta contexts from changed blocks; see nbd_dirty.h. */
#include "nbd/nbd_dirty.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/snapdiff.h"
#include "core/iopool.h"
#include "core/log.h"
#include "core/util.h"

#define BASES_MAX 64

struct dirty_range {
    uint64_t offset, length;
};

struct nbd_dirty {
    atomic_int refs;
    atomic_bool done;
    struct io_job job;
    /* in */
    char dataset[2 * DS_NAME_BUF];
    char want[DS_NAME_BUF];
    /* out, written by the job before done */
    int rc;
    char bases[BASES_MAX][DS_NAME_BUF];
    size_t nbases;
    bool have;
    struct dirty_range *r;
    size_t n, cap;
    uint64_t size; /* the map covers [0, size) */
};

static int base_add(const char *snap, void *arg)
{
    struct nbd_dirty *d = arg;
    if (d->nbases < BASES_MAX)
        snprintf(d->bases[d->nbases++], DS_NAME_BUF, "%s", snap);
    return 0;
}

static int range_add(uint64_t offset, uint64_t length, void *arg)
{
    struct nbd_dirty *d = arg;
    if (d->n == NBD_DIRTY_RANGES_MAX) {
        /* bounded memory: cover the new range by growing the last one */
        d->r[d->n - 1].length = offset + length - d->r[d->n - 1].offset;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        struct dirty_range *r = realloc(d->r, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        d->r = r;
        d->cap = cap;
    }
    d->r[d->n++] = (struct dirty_range){offset, length};
    return 0;
}

/* The map from base want to the export's dataset. */
static int map_make(struct nbd_dirty *d)
{
    char base[3 * DS_NAME_BUF], why[640];
    const char *field;
    struct ds_diff diff;
    size_t vlen = strcspn(d->dataset, "@");

    snprintf(base, sizeof(base), "%.*s@%s", (int)vlen, d->dataset, d->want);
    int rc = ds_diff_open(base, d->dataset, &diff, &field, why, sizeof(why));
    if (rc == 0) {
        d->size = diff.size;
        rc = ds_diff_changed(&diff, 0, diff.size, range_add, d);
    } else {
        log_info("nbd: dirty bitmap %s of %s: %s", d->want, d->dataset, why);
    }
    ds_diff_close(&diff);
    return rc;
}

static void dirty_run(struct io_job *j)
{
    struct nbd_dirty *d = container_of(j, struct nbd_dirty, job);
    d->rc = ds_diff_bases(d->dataset, base_add, d);
    bool is_base = false;
    for (size_t i = 0; d->want[0] && i < d->nbases; i++)
        is_base |= strcmp(d->bases[i], d->want) == 0;
    if (d->rc == 0 && is_base) {
        d->rc = map_make(d);
        d->have = d->rc == 0;
    }
    if (d->rc < 0)
        log_warn("nbd: changed blocks of %s from %s: %s", d->dataset, d->want, strerror(-d->rc));
}

/* The pool's last touch of the job (iopool.h): only now may it go. */
static void dirty_job_done(struct reactor_msg *m)
{
    struct nbd_dirty *d = container_of(m, struct nbd_dirty, job.done);
    atomic_store_explicit(&d->done, true, memory_order_release);
    nbd_dirty_put(d);
}

struct nbd_dirty *nbd_dirty_start(const char *dataset, const char *want, size_t want_len)
{
    struct nbd_dirty *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    atomic_init(&d->refs, 2); /* the caller's and the job's */
    snprintf(d->dataset, sizeof(d->dataset), "%s", dataset);
    if (want_len < sizeof(d->want) && !memchr(want, '\0', want_len)) {
        memcpy(d->want, want, want_len);
        d->want[want_len] = '\0';
    }
    d->job.run = dirty_run;
    d->job.owner = NULL;
    d->job.done.fn = dirty_job_done;
    iopool_submit(&d->job);
    return d;
}

bool nbd_dirty_done(const struct nbd_dirty *d)
{
    return atomic_load_explicit(&d->done, memory_order_acquire);
}

void nbd_dirty_put(struct nbd_dirty *d)
{
    if (!d || atomic_fetch_sub(&d->refs, 1) != 1)
        return;
    free(d->r);
    free(d);
}

int nbd_dirty_result(const struct nbd_dirty *d)
{
    return d->rc;
}

size_t nbd_dirty_base_count(const struct nbd_dirty *d)
{
    return d->nbases;
}

const char *nbd_dirty_base(const struct nbd_dirty *d, size_t i)
{
    return d->bases[i];
}

bool nbd_dirty_have_map(const struct nbd_dirty *d)
{
    return d->have;
}

const char *nbd_dirty_want(const struct nbd_dirty *d)
{
    return d->want;
}

/* The first range ending after pos. */
static size_t range_find(const struct nbd_dirty *d, uint64_t pos)
{
    size_t lo = 0, hi = d->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->r[mid].offset + d->r[mid].length <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

uint32_t nbd_dirty_describe(const struct nbd_dirty *d, uint64_t offset, uint32_t length,
                            uint32_t max, uint8_t *out)
{
    uint64_t pos = offset, end = offset + length;
    uint32_t nd = 0, last = UINT32_MAX;
    size_t i = range_find(d, pos);

    while (pos < end) {
        uint64_t next;
        uint32_t flags = NBD_STATE_DIRTY;
        if (pos >= d->size) {
            next = end;
        } else if (i < d->n && d->r[i].offset <= pos) {
            next = d->r[i].offset + d->r[i].length;
            i++;
        } else {
            next = i < d->n ? d->r[i].offset : d->size;
            flags = 0;
        }
        next = MIN(next, end);
        if (nd && flags == last) {
            be32_store(out + 8 * (nd - 1), be32_load(out + 8 * (nd - 1)) + (uint32_t)(next - pos));
        } else {
            if (nd == max)
                break;
            be32_store(out + 8 * nd, (uint32_t)(next - pos));
            be32_store(out + 8 * nd + 4, flags);
            nd++;
            last = flags;
        }
        pos = next;
    }
    return nd;
}

bool nbd_dirty_query_lists(const char *q, uint32_t qlen, const char *name)
{
    static const char prefix[] = NBD_META_DIRTY_PREFIX;
    size_t plen = sizeof(prefix) - 1, nlen = strlen(name);

    if (qlen == 0 || (qlen == 5 && memcmp(q, "qemu:", 5) == 0))
        return true;
    if (qlen < plen || memcmp(q, prefix, plen) != 0)
        return false;
    return qlen == plen || (qlen - plen == nlen && memcmp(q + plen, name, nlen) == 0);
}
