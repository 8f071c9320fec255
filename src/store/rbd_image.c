/* Synchronous librbd management calls (see rbd_image.h). */
#include "store/rbd_image.h"

#include <errno.h>
#include <rbd/features.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "store/rbd_pr.h"

/* What every image blockd creates gets: layering for clones, the
 * exclusive lock the object map needs, the object map and fast-diff for
 * cheap usage figures and block status, deep-flatten so that a flattened
 * clone's snapshots stop depending on the parent too. */
#define RBD_IMAGE_FEATURES                                                                         \
    (RBD_FEATURE_LAYERING | RBD_FEATURE_EXCLUSIVE_LOCK | RBD_FEATURE_OBJECT_MAP |                  \
     RBD_FEATURE_FAST_DIFF | RBD_FEATURE_DEEP_FLATTEN)

static int image_opts(rbd_image_options_t *opts, bool clone)
{
    int rc;

    rbd_image_options_create(opts);
    rc = rbd_image_options_set_uint64(*opts, RBD_IMAGE_OPTION_FORMAT, 2);
    if (rc == 0)
        rc = rbd_image_options_set_uint64(*opts, RBD_IMAGE_OPTION_FEATURES, RBD_IMAGE_FEATURES);
    /* Clone v2: no snapshot protection step, and the parent's snapshot
     * can be removed (it goes to the trash) while clones exist. */
    if (rc == 0 && clone)
        rc = rbd_image_options_set_uint64(*opts, RBD_IMAGE_OPTION_CLONE_FORMAT, 2);
    if (rc < 0)
        rbd_image_options_destroy(*opts);
    return rc;
}

int rbd_image_create(rados_ioctx_t io, const char *name, uint64_t size)
{
    rbd_image_options_t opts;
    int rc = image_opts(&opts, false);

    if (rc < 0)
        return rc;
    rc = rbd_create4(io, name, size, opts);
    rbd_image_options_destroy(opts);
    return rc;
}

int rbd_image_remove(rados_ioctx_t io, const char *name)
{
    char id[64] = "";
    rbd_image_t img;
    /* The id names the image's reservation object: read it while the
     * image exists. No id (an image broken half-way) removes no object. */
    if (rbd_open_read_only(io, name, &img, NULL) == 0) {
        if (rbd_get_id(img, id, sizeof id) < 0)
            id[0] = 0;
        rbd_close(img);
    }
    int rc = rbd_remove(io, name);
    for (int waited = 0; rc == -EBUSY && waited < RBD_IMAGE_REMOVE_WAIT_MS; waited += 100) {
        if (waited == 0)
            log_info("rbd: %s is still open elsewhere (watchers); waiting up to %d s for them "
                     "to close it",
                     name, RBD_IMAGE_REMOVE_WAIT_MS / 1000);
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
        rc = rbd_remove(io, name);
    }
    if (rc == 0 && id[0])
        rbd_image_forget(io, name, id, NULL);
    return rc;
}

/* The image's watchers but those of client `mine` (0: none is ours):
 * how many (of up to 16 listed) and the first other one into who. A
 * read-only handle registers no watch of its own. */
static int watchers_now(rados_ioctx_t io, const char *name, uint64_t mine, char *who, size_t wholen)
{
    rbd_image_watcher_t w[16];
    size_t n = 16, others = 0;
    rbd_image_t img;
    int rc = rbd_open_read_only(io, name, &img, NULL);

    if (rc < 0)
        return rc;
    rc = rbd_watchers_list(img, w, &n);
    rbd_close(img);
    if (rc == -ERANGE) /* more than 16: the count is in n, the list empty */
        return (int)n;
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (mine && (uint64_t)w[i].id == mine)
            continue;
        if (others++ == 0)
            snprintf(who, wholen, "client.%llu at %s", (unsigned long long)w[i].id,
                     w[i].addr ? w[i].addr : "?");
    }
    if (others) {
        size_t used = strnlen(who, wholen);
        snprintf(who + used, wholen - used, ", %zu watcher%s", others, others == 1 ? "" : "s");
    }
    rbd_watchers_list_cleanup(w, n);
    return (int)others;
}

int rbd_image_wait_unwatched(rados_ioctx_t io, const char *name, uint64_t mine, int wait_ms,
                             char *who, size_t wholen)
{
    struct timespec t0, now;
    int n = watchers_now(io, name, mine, who, wholen);

    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (n > 0)
        log_info("rbd: %s is still open elsewhere (%s); waiting up to %d s for it to be closed",
                 name, who, wait_ms / 1000);
    while (n > 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000L;
        if (ms >= wait_ms)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
        n = watchers_now(io, name, mine, who, wholen);
    }
    if (n > 0)
        return -EBUSY;
    return n < 0 ? n : 0;
}

void rbd_image_forget(rados_ioctx_t io, const char *name, const char *id, const char *snap)
{
    int rc = rbd_pr_remove(io, id, snap);
    if (rc < 0)
        log_warn("rbd: %s%s%s is removed but its reservation object (blockd.pr.%s%s%s) is not: "
                 "%s",
                 name, snap ? "@" : "", snap ? snap : "", id, snap ? "@" : "", snap ? snap : "",
                 strerror(-rc));
}

int rbd_image_rename(rados_ioctx_t io, const char *from, const char *to)
{
    return rbd_rename(io, from, to);
}

int rbd_image_exists(rados_ioctx_t io, const char *name)
{
    rbd_image_t img;
    int rc = rbd_open_read_only(io, name, &img, NULL);

    if (rc == -ENOENT)
        return 0;
    if (rc < 0)
        return rc;
    rbd_close(img);
    return 1;
}

int rbd_image_list(rados_ioctx_t io, char ***names, size_t *n)
{
    size_t max = 64;
    rbd_image_spec_t *specs = NULL;
    int rc;

    *names = NULL;
    *n = 0;
    for (;;) {
        rbd_image_spec_t *grown = realloc(specs, max * sizeof(*specs));
        if (!grown) {
            free(specs);
            return -ENOMEM;
        }
        specs = grown;
        rc = rbd_list2(io, specs, &max);
        if (rc != -ERANGE)
            break;
    }
    if (rc < 0) {
        free(specs);
        return rc;
    }
    *names = calloc(max ? max : 1, sizeof(**names));
    for (size_t i = 0; *names && i < max; i++) {
        (*names)[i] = strdup(specs[i].name);
        if (!(*names)[i]) {
            rbd_image_list_free(*names, i);
            *names = NULL;
        }
    }
    rbd_image_spec_list_cleanup(specs, max);
    free(specs);
    if (!*names)
        return -ENOMEM;
    *n = max;
    return 0;
}

void rbd_image_list_free(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

int rbd_image_open_mgmt(rados_ioctx_t io, const char *name, const char *snap, bool readonly,
                        rbd_image_t *out)
{
    if (readonly || snap)
        return rbd_open_read_only(io, name, out, snap);
    return rbd_open(io, name, out, NULL);
}

/* librbd calls a progress callback without checking it for NULL. */
static int no_progress(uint64_t done, uint64_t total, void *arg)
{
    (void)done;
    (void)total;
    (void)arg;
    return 0;
}

int rbd_image_resize(rbd_image_t img, uint64_t size)
{
    return rbd_resize2(img, size, true, no_progress, NULL);
}

int rbd_image_snap_create(rbd_image_t img, const char *snap)
{
    return rbd_snap_create(img, snap);
}

int rbd_image_snap_remove(rbd_image_t img, const char *snap)
{
    return rbd_snap_remove2(img, snap, 0, no_progress, NULL);
}

int rbd_image_snap_rename(rbd_image_t img, const char *from, const char *to)
{
    return rbd_snap_rename(img, from, to);
}

struct progress {
    rbd_image_progress_fn fn;
    void *arg;
};

static int progress_cb(uint64_t done, uint64_t total, void *p)
{
    struct progress *pr = p;

    if (pr->fn)
        pr->fn(done, total, pr->arg);
    return 0;
}

int rbd_image_snap_rollback(rbd_image_t img, const char *snap, rbd_image_progress_fn fn, void *arg)
{
    struct progress pr = {fn, arg};
    uint64_t size = 0;
    int rc = rbd_snap_rollback_with_progress(img, snap, progress_cb, &pr);

    if (rc == 0 && fn && rbd_get_size(img, &size) == 0)
        fn(size, size, arg);
    return rc;
}

int rbd_image_clone(rados_ioctx_t parent_io, const char *parent, const char *snap,
                    rados_ioctx_t child_io, const char *child)
{
    rbd_image_options_t opts;
    int rc = image_opts(&opts, true);

    if (rc < 0)
        return rc;
    rc = rbd_clone3(parent_io, parent, snap, child_io, child, opts);
    rbd_image_options_destroy(opts);
    return rc;
}

int rbd_image_flatten(rbd_image_t img, rbd_image_progress_fn fn, void *arg)
{
    struct progress pr = {fn, arg};

    return rbd_flatten_with_progress(img, progress_cb, &pr);
}

static int sum_cb(uint64_t off, size_t len, int exists, void *arg)
{
    (void)off;
    if (exists)
        *(uint64_t *)arg += len;
    return 0;
}

int rbd_image_usage(rbd_image_t img, uint64_t *used, uint64_t *referenced)
{
    uint64_t size, own = 0, all = 0;
    int rc = rbd_get_size(img, &size);

    if (rc < 0)
        return rc;
    /* whole_object: with fast-diff this reads the object map only, no
     * per-object listing; the figures are in whole objects, like the
     * space the OSDs give them. */
    if (used) {
        rc = rbd_diff_iterate2(img, NULL, 0, size, 0, 1, sum_cb, &own);
        if (rc < 0)
            return rc;
        *used = own;
    }
    if (referenced) {
        rc = rbd_diff_iterate2(img, NULL, 0, size, 1, 1, sum_cb, &all);
        if (rc < 0)
            return rc;
        *referenced = all;
    }
    return 0;
}
