/* The change log of a file volume without reflink; see changes.h. */
#include "store/changes.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "store/poolfs.h"

#define G STORE_CHANGES_GRANULE
#define MAGIC "BLKDCHG1"

/* Who a snapshot file is: a file renamed onto it, rewritten or replaced
 * is someone else. */
struct file_id {
    uint64_t dev, ino, size;
    int64_t mtime_sec, mtime_nsec;
};

/* One epoch's bits. start: the snapshot it started from, if trusted. */
struct epoch {
    _Atomic uint64_t *words;
    atomic_bool trusted;
    struct file_id start;
};

struct store_changes {
    uint64_t nbits, nwords;
    struct epoch e[2];
    /* bit 0: the current epoch's index; bit 1: the other one is marked
     * too (a snapshot is being taken) */
    atomic_uint state;
    /* Bumped by every invalidation: an epoch that saw one is not trusted,
     * even if a snapshot ends it. broken: a write went past the size the
     * log was made for (a grow): no epoch is trusted again. */
    atomic_uint invalidations;
    unsigned begin_invalidations; /* at store_changes_begin (lock) */
    atomic_bool broken;
    pthread_mutex_t lock; /* begin, end, reading for a diff */
};

/* The saved form: this header, then nwords little-endian words. */
struct saved {
    char magic[8];
    uint32_t granule, trusted;
    uint64_t nbits;
    struct file_id start, self;
};

bool store_changes_enabled(void)
{
    static int enabled = -1;
    if (enabled < 0) {
        const char *e = getenv("BLOCKD_CHANGE_LOG");
        enabled = !(e && strcmp(e, "0") == 0);
    }
    return enabled;
}

int store_changes_new(uint64_t size, struct store_changes **out)
{
    struct store_changes *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->nbits = (size + G - 1) / G;
    c->nwords = (c->nbits + 63) / 64;
    for (int i = 0; i < 2; i++) {
        c->e[i].words = calloc(c->nwords ? c->nwords : 1, sizeof(uint64_t));
        if (!c->e[i].words) {
            store_changes_free(c);
            return -ENOMEM;
        }
    }
    pthread_mutex_init(&c->lock, NULL);
    *out = c;
    return 0;
}

void store_changes_free(struct store_changes *c)
{
    if (!c)
        return;
    free(c->e[0].words);
    free(c->e[1].words);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void mark_epoch(struct store_changes *c, struct epoch *e, uint64_t first, uint64_t last)
{
    if (last >= c->nbits) {
        /* past the size the log was made for (a resize it was not told
         * of): this epoch cannot say what changed there */
        atomic_store_explicit(&e->trusted, false, memory_order_relaxed);
        atomic_store(&c->broken, true);
        if (first >= c->nbits)
            return;
        last = c->nbits - 1;
    }
    for (uint64_t i = first; i <= last; i++) {
        _Atomic uint64_t *w = &e->words[i >> 6];
        uint64_t bit = 1ull << (i & 63);
        if (!(atomic_load_explicit(w, memory_order_relaxed) & bit))
            atomic_fetch_or_explicit(w, bit, memory_order_relaxed);
    }
}

void store_changes_mark(struct store_changes *c, uint64_t off, uint64_t len)
{
    if (len == 0)
        return;
    uint64_t first = off / G, last = (off + len - 1) / G;
    unsigned st = atomic_load_explicit(&c->state, memory_order_acquire);
    mark_epoch(c, &c->e[st & 1], first, last);
    if (st & 2)
        mark_epoch(c, &c->e[!(st & 1)], first, last);
}

void store_changes_invalidate(struct store_changes *c)
{
    atomic_fetch_add(&c->invalidations, 1);
    atomic_store(&c->e[0].trusted, false);
    atomic_store(&c->e[1].trusted, false);
}

void store_changes_begin(struct store_changes *c)
{
    pthread_mutex_lock(&c->lock);
    unsigned next = !(atomic_load(&c->state) & 1);
    for (uint64_t i = 0; i < c->nwords; i++)
        atomic_store_explicit(&c->e[next].words[i], 0, memory_order_relaxed);
    atomic_store(&c->e[next].trusted, false); /* until the snapshot is in place */
    c->begin_invalidations = atomic_load(&c->invalidations);
    atomic_store_explicit(&c->state, next | 2, memory_order_release);
    pthread_mutex_unlock(&c->lock);
}

/* "<dir>/.<file>.changes" for snapshot file path. */
static int saved_path(const char *snap, char *buf, size_t len)
{
    const char *slash = strrchr(snap, '/');
    int dl = slash ? (int)(slash - snap) + 1 : 0;
    int n = snprintf(buf, len, "%.*s.%s.changes", dl, snap, snap + dl);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int file_id_of(const char *path, struct file_id *id)
{
    struct stat st;
    int rc = poolfs_stat(path, &st);
    if (rc < 0)
        return rc;
    *id = (struct file_id){.dev = (uint64_t)st.st_dev,
                           .ino = (uint64_t)st.st_ino,
                           .size = (uint64_t)st.st_size,
                           .mtime_sec = (int64_t)st.st_mtim.tv_sec,
                           .mtime_nsec = (int64_t)st.st_mtim.tv_nsec};
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Save epoch e as the one that ends at snapshot self (path snap). */
static int epoch_save(struct store_changes *c, struct epoch *e, const char *snap,
                      const struct file_id *self)
{
    char path[PATH_MAX];
    struct saved h = {.granule = (uint32_t)G, .nbits = c->nbits, .start = e->start, .self = *self};
    int rc = saved_path(snap, path, sizeof(path));
    if (rc < 0)
        return rc;
    memcpy(h.magic, MAGIC, sizeof(h.magic));
    h.trusted = atomic_load(&e->trusted);
    int fd = poolfs_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return fd;
    rc = write_all(fd, &h, sizeof(h));
    for (uint64_t i = 0; rc == 0 && i < c->nwords; i += 512) {
        uint64_t buf[512], n = MIN(512, c->nwords - i);
        for (uint64_t j = 0; j < n; j++)
            buf[j] = atomic_load_explicit(&e->words[i + j], memory_order_relaxed);
        rc = write_all(fd, buf, n * sizeof(uint64_t));
    }
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

int store_changes_end(struct store_changes *c, const char *snap_path)
{
    struct file_id self = {0};
    int rc = 0;

    pthread_mutex_lock(&c->lock);
    unsigned cur = atomic_load(&c->state) & 1;
    struct epoch *ended = &c->e[!cur], *next = &c->e[cur];
    if (snap_path) {
        rc = file_id_of(snap_path, &self);
        if (rc == 0)
            rc = epoch_save(c, ended, snap_path, &self);
        if (rc < 0)
            log_warn("store: saving the change log of %s: %s (diffs from it will compare "
                     "contents)",
                     snap_path, strerror(-rc));
        /* the next epoch has every write since begin, unless the volume
         * changed behind the log meanwhile */
        next->start = self;
        atomic_store(&next->trusted, rc == 0 && !atomic_load(&c->broken) &&
                                         atomic_load(&c->invalidations) == c->begin_invalidations);
    } else {
        /* no snapshot: one epoch again, from where the ended one began */
        for (uint64_t i = 0; i < c->nwords; i++)
            atomic_fetch_or_explicit(&next->words[i],
                                     atomic_load_explicit(&ended->words[i], memory_order_relaxed),
                                     memory_order_relaxed);
        next->start = ended->start;
        atomic_store(&next->trusted, atomic_load(&ended->trusted) &&
                                         atomic_load(&c->invalidations) == c->begin_invalidations);
    }
    atomic_store_explicit(&c->state, cur, memory_order_release);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void store_changes_remove(const char *snap_path)
{
    char path[PATH_MAX];
    if (saved_path(snap_path, path, sizeof(path)) == 0)
        poolfs_unlink(path);
}

/* ---- diff ---- */

/* The accumulated bits of a diff. */
struct acc {
    uint64_t *words;
    uint64_t nbits;
};

static int acc_grow(struct acc *a, uint64_t nbits)
{
    if (nbits <= a->nbits)
        return 0;
    uint64_t old = (a->nbits + 63) / 64, nw = (nbits + 63) / 64;
    uint64_t *w = realloc(a->words, (nw ? nw : 1) * sizeof(uint64_t));
    if (!w)
        return -ENOMEM;
    memset(w + old, 0, (nw - old) * sizeof(uint64_t));
    a->words = w;
    a->nbits = nbits;
    return 0;
}

static bool same_file(const struct file_id *a, const struct file_id *b)
{
    return memcmp(a, b, sizeof(*a)) == 0;
}

/* OR the saved epoch of snapshot snap into a; it must have started at
 * prev and still be snap's. -ESTALE when not trusted. */
static int acc_saved(struct acc *a, const char *prev, const char *snap)
{
    char path[PATH_MAX];
    struct file_id pid, sid;
    struct saved h;
    int rc = saved_path(snap, path, sizeof(path));

    if (rc < 0 || file_id_of(prev, &pid) < 0 || file_id_of(snap, &sid) < 0)
        return -ESTALE;
    int fd = poolfs_open(path, O_RDONLY, 0);
    if (fd < 0)
        return -ESTALE;
    rc = read(fd, &h, sizeof(h)) == (ssize_t)sizeof(h) ? 0 : -ESTALE;
    if (rc == 0 && (memcmp(h.magic, MAGIC, 8) != 0 || h.granule != G || !h.trusted ||
                    !same_file(&h.start, &pid) || !same_file(&h.self, &sid)))
        rc = -ESTALE;
    if (rc == 0)
        rc = acc_grow(a, h.nbits);
    uint64_t nw = (h.nbits + 63) / 64;
    for (uint64_t i = 0; rc == 0 && i < nw; i += 512) {
        uint64_t buf[512], n = MIN(512, nw - i);
        if (read(fd, buf, n * sizeof(uint64_t)) != (ssize_t)(n * sizeof(uint64_t)))
            rc = -ESTALE;
        for (uint64_t j = 0; rc == 0 && j < n; j++)
            a->words[i + j] |= buf[j];
    }
    close(fd);
    return rc;
}

/* OR the live volume's current epoch (and, while a snapshot is being
 * taken, the one it ends), which must have started at snapshot last. */
static int acc_live(struct acc *a, struct store_changes *c, const char *last)
{
    struct file_id id;
    if (file_id_of(last, &id) < 0)
        return -ESTALE;
    pthread_mutex_lock(&c->lock);
    unsigned st = atomic_load(&c->state);
    /* the oldest epoch still being recorded says where it all started */
    struct epoch *first = (st & 2) ? &c->e[!(st & 1)] : &c->e[st & 1];
    int rc = atomic_load(&first->trusted) && same_file(&first->start, &id) ? 0 : -ESTALE;
    if (rc == 0)
        rc = acc_grow(a, c->nbits);
    for (int k = 0; rc == 0 && k < 2; k++) {
        if (k == 1 && !(st & 2))
            break;
        struct epoch *e = k == 0 ? &c->e[st & 1] : first;
        for (uint64_t i = 0; i < c->nwords; i++)
            a->words[i] |= atomic_load_explicit(&e->words[i], memory_order_relaxed);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

struct emit_state {
    store_range_fn fn;
    void *arg;
    uint64_t off, len; /* pending range */
};

static int emit_range(struct emit_state *s, uint64_t off, uint64_t len)
{
    if (len == 0)
        return 0;
    if (s->len && s->off + s->len >= off) {
        s->len = MAX(s->off + s->len, off + len) - s->off;
        return 0;
    }
    int rc = s->len ? s->fn(s->off, s->len, s->arg) : 0;
    s->off = off;
    s->len = len;
    return rc;
}

/* The set bits of a within [off, end) (end ≤ the target's size), then
 * everything in [common, end) (past the base's end). */
static int acc_emit(const struct acc *a, uint64_t off, uint64_t end, uint64_t common,
                    store_range_fn fn, void *arg)
{
    struct emit_state s = {.fn = fn, .arg = arg};
    int rc = 0;
    /* granules past the epochs' bits cannot have been written unseen:
     * such a write made its epoch untrusted */
    uint64_t stop = MIN((MIN(end, common) + G - 1) / G, a->nbits);
    for (uint64_t i = off / G; rc == 0 && i < stop; i++) {
        if (!a->words[i >> 6]) {
            i |= 63; /* a word without a bit: the next one */
            continue;
        }
        if (a->words[i >> 6] & (1ull << (i & 63)))
            rc = emit_range(&s, MAX(i * G, off), MIN((i + 1) * G, end) - MAX(i * G, off));
    }
    if (rc == 0 && end > MAX(off, common))
        rc = emit_range(&s, MAX(off, common), end - MAX(off, common));
    if (rc == 0 && s.len)
        rc = fn(s.off, s.len, arg);
    return rc;
}

int store_changes_diff(const char *const *snaps, size_t n, struct store_changes *live,
                       uint64_t target_size, uint64_t offset, uint64_t length, store_range_fn fn,
                       void *arg)
{
    struct acc a = {0};
    struct file_id base;
    int rc = n >= 1 && file_id_of(snaps[0], &base) == 0 ? 0 : -ESTALE;

    /* n == 1 without live: base is the target, nothing differs */
    for (size_t i = 1; rc == 0 && i < n; i++)
        rc = acc_saved(&a, snaps[i - 1], snaps[i]);
    if (rc == 0 && live)
        rc = acc_live(&a, live, snaps[n - 1]);
    if (rc == 0) {
        uint64_t end = offset + length < offset ? target_size : MIN(offset + length, target_size);
        rc = offset < end ? acc_emit(&a, offset, end, MIN(base.size, end), fn, arg) : 0;
    }
    free(a.words);
    return rc;
}
