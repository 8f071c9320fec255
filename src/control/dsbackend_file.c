/*
 * The file pool backend (dsbackend.h): a pool is a directory, a volume a
 * file "<pool dir>/<name below the pool>", a snapshot the file
 * "<volume>@<snap>", a FILESYSTEM a directory. Everything goes through
 * poolfs (confined to the pool root, no symlink followed).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "control/dsbackend.h"
#include "core/log.h"
#include "store/changes.h"
#include "store/copy.h"

bool ds_pool_is_rbd(const struct ds_pool *p)
{
    /* File pools have absolute paths; RBD pools "rbd:POOL[/NAMESPACE]". */
    return strncmp(p->path, "rbd:", 4) == 0;
}

const struct ds_backend *ds_backend_of(const struct ds_pool *p)
{
    return ds_pool_is_rbd(p) ? &ds_backend_rbd : &ds_backend_file;
}

static int file_volume_create(const struct ds_pool *p, const char *name, uint64_t size, bool sparse,
                              char *why, size_t whylen)
{
    char path[PATH_MAX];
    int rc = ds_path(p, name, NULL, path, sizeof(path));

    (void)why;
    (void)whylen;
    return rc < 0 ? rc : bdev_file_create_in_pool(path, size, !sparse);
}

static int file_filesystem_create(const struct ds_pool *p, const char *name)
{
    char path[PATH_MAX];
    int rc = ds_path(p, name, NULL, path, sizeof(path));

    if (rc < 0)
        return rc;
    rc = poolfs_mkdir(path, 0755);
    if (rc < 0 && rc != -EEXIST)
        log_error("datasets: mkdir %s: %s", path, strerror(-rc));
    return rc;
}

static int file_dataset_remove(const struct ds_pool *p, const char *name, bool is_volume)
{
    char path[PATH_MAX];
    int rc = ds_path(p, name, NULL, path, sizeof(path));

    if (rc < 0)
        return rc;
    return is_volume ? poolfs_unlink(path) : poolfs_rmdir(path);
}

static int file_snapshot_remove(const struct ds_pool *p, const char *name, const char *snap)
{
    char path[PATH_MAX];
    int rc = ds_path(p, name, snap, path, sizeof(path));

    if (rc == 0)
        store_changes_remove(path); /* its saved epoch (store/changes.h), if any */
    return rc < 0 ? rc : poolfs_unlink(path);
}

/* Grow a thick volume's allocation to cover [old, new). */
static int thick_extend(const char *path, uint64_t old, uint64_t new_size)
{
    int fd, rc = 0;

    if (new_size <= old)
        return 0;
    fd = poolfs_open(path, O_WRONLY, 0);
    if (fd < 0)
        return fd;
    if (fallocate(fd, 0, (off_t)old, (off_t)(new_size - old)) < 0)
        rc = -errno;
    else if (fdatasync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

static int resize_file(const char *path, uint64_t size)
{
    int fd, rc = 0;

    fd = poolfs_open(path, O_WRONLY, 0);
    if (fd < 0)
        return fd;
    if (ftruncate(fd, (off_t)size) < 0 || fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

static int file_volume_resize(const struct ds_pool *p, const char *name, struct volume *v,
                              uint64_t old_size, uint64_t new_size, bool sparse)
{
    char path[PATH_MAX];
    int rc = ds_path(p, name, NULL, path, sizeof(path));

    if (rc < 0)
        return rc;
    rc = v ? volume_resize(v, new_size) : resize_file(path, new_size);
    if (rc == 0 && !sparse)
        rc = thick_extend(path, old_size, new_size);
    return rc;
}

static int file_open(const struct ds_pool *p, const char *name, const char *snap, bool readonly,
                     struct bdev **out)
{
    char path[PATH_MAX];
    int rc = ds_path(p, name, snap, path, sizeof(path));

    return rc < 0 ? rc : bdev_file_open_in_pool(path, snap ? true : readonly, out);
}

static uint64_t file_used(const char *path)
{
    struct stat st;

    if (poolfs_stat(path, &st) < 0)
        return 0;
    return (uint64_t)st.st_blocks * 512;
}

static uint64_t file_snapshot_usage(const struct ds_pool *p, const char *name, const char *snap)
{
    char path[PATH_MAX];

    return ds_path(p, name, snap, path, sizeof(path)) == 0 ? file_used(path) : 0;
}

/* file_volume_usage's walk of the volume's snapshots. */
struct snap_usage {
    const struct ds_pool *p;
    const char *name;
    uint64_t sum;
};

static int snap_usage_add(const struct ds_snap *s, void *arg)
{
    struct snap_usage *u = arg;

    u->sum += file_snapshot_usage(u->p, u->name, s->name);
    return 0;
}

static void file_volume_usage(const struct ds_pool *p, const char *name, int64_t id,
                              struct volume *v, uint64_t *used, uint64_t *snapused)
{
    char path[PATH_MAX];
    struct snap_usage u = {.p = p, .name = name};

    (void)v;
    *used = ds_path(p, name, NULL, path, sizeof(path)) == 0 ? file_used(path) : 0;
    /* the snapshot files of the volume (what was summed before an error) */
    ds_snapshot_each_upto(id, INT64_MAX, snap_usage_add, &u);
    *snapused = u.sum;
}

static uint64_t file_available(const struct ds_pool *p)
{
    struct statvfs sv;

    if (statvfs(p->path, &sv) < 0)
        return 0;
    return (uint64_t)sv.f_bavail * sv.f_frsize;
}

static int file_snapshot_create(const struct ds_pool *p, const char *name, const char *snap,
                                struct volume *v, ds_progress_fn fn, void *arg,
                                struct store_snapshot_stats *stats)
{
    char vol_path[PATH_MAX], snap_path[PATH_MAX];

    if (ds_path(p, name, NULL, vol_path, sizeof(vol_path)) < 0 ||
        ds_path(p, name, snap, snap_path, sizeof(snap_path)) < 0)
        return -ENAMETOOLONG;
    return store_snapshot_volume(v, vol_path, snap_path, 0, 0, fn, arg, stats);
}

static int file_clone(const struct ds_pool *p, const char *name, const char *snap,
                      const struct ds_pool *dp, const char *dst, ds_progress_fn fn, void *arg,
                      bool *o1)
{
    char snap_path[PATH_MAX], dst_path[PATH_MAX], parent[PATH_MAX], *slash;
    int rc;

    if (ds_pool_is_rbd(dp))
        return -EXDEV;
    rc = ds_path(p, name, snap, snap_path, sizeof(snap_path));
    if (rc == 0)
        rc = ds_path(dp, dst, NULL, dst_path, sizeof(dst_path));
    if (rc < 0)
        return rc;
    /* The parent directories must exist for the copy; their dataset rows
     * are added with the clone's row. */
    snprintf(parent, sizeof(parent), "%s", dst_path);
    slash = strrchr(parent, '/');
    if (slash)
        *slash = '\0';
    rc = ds_mkdir_parents(parent);
    if (rc < 0)
        return rc;
    return store_clone_file(snap_path, dst_path, fn, arg, o1);
}

static int file_rollback(const struct ds_pool *p, const char *name, const char *snap,
                         struct volume *v, ds_progress_fn fn, void *arg, bool *o1)
{
    char vol_path[PATH_MAX], snap_path[PATH_MAX];

    if (ds_path(p, name, NULL, vol_path, sizeof(vol_path)) < 0 ||
        ds_path(p, name, snap, snap_path, sizeof(snap_path)) < 0)
        return -ENAMETOOLONG;
    return store_rollback_volume(v, vol_path, snap_path, 0, fn, arg, o1);
}

const struct ds_backend ds_backend_file = {
    .name = "file",
    .volume_create = file_volume_create,
    .filesystem_create = file_filesystem_create,
    .dataset_remove = file_dataset_remove,
    .snapshot_remove = file_snapshot_remove,
    .volume_resize = file_volume_resize,
    .open = file_open,
    .volume_usage = file_volume_usage,
    .snapshot_usage = file_snapshot_usage,
    .available = file_available,
    .locator = ds_path,
    .snapshot_create = file_snapshot_create,
    .clone = file_clone,
    .rollback = file_rollback,
};
