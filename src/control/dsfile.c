/*
 * Which host files an export or an extent may name. A FILE extent: a file
 * inside a pool (resolved with poolfs, no symlinks), never a dataset's own
 * volume or snapshot file (those are shared by dataset name, so that a
 * snapshot stays read-only and a volume shares its one open handle). An
 * NBD path export: only a volume's file, served as that volume (files
 * blockd did not create are never exported).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "control/datasets.h"
#include "control/db.h"
#include "control/ds_internal.h"

/* The pool name whose root is root (DB locked). */
static int pool_name_of_root(const char *root, char *name, size_t len)
{
    struct ds_pool p;
    int rc = ds_pool_get_by_path(root, &p);

    if (rc == 0)
        snprintf(name, len, "%s", p.name);
    return rc;
}

int datasets_file_check(const char *path, bool may_create, char *why, size_t whylen)
{
    char root[PATH_MAX], pool[DS_NAME_BUF], dataset[DS_NAME_BUF + PATH_MAX];
    struct ds_row row;
    struct stat st;
    const char *rel, *base;
    int rc;

    if (path[0] != '/') {
        snprintf(why, whylen, "must be an absolute path");
        return -EINVAL;
    }
    if (poolfs_root_of(path, root, sizeof(root)) < 0) {
        snprintf(why, whylen,
                 "%s: the path must reside within a pool directory (see pool.query; host files "
                 "elsewhere are never exported)",
                 path);
        return -EINVAL;
    }
    rel = path + strlen(root);
    if (*rel != '/' || !rel[1]) {
        snprintf(why, whylen, "%s is a pool directory, not a file", path);
        return -EINVAL;
    }
    rel++;
    base = strrchr(path, '/') + 1;
    db_lock();
    rc = pool_name_of_root(root, pool, sizeof(pool));
    if (rc == 0) {
        snprintf(dataset, sizeof(dataset), "%s/%s", pool, rel);
        rc = strchr(base, '@') || ds_dataset_get(dataset, &row) == 0 ? -EBUSY : 0;
    } else {
        rc = 0; /* an extra root that is not a pool: no datasets in it */
    }
    db_unlock();
    if (rc < 0) {
        snprintf(why, whylen,
                 "%s is a blockd volume or snapshot: use a DISK extent (zvol/<pool>/<volume>) or "
                 "the NBD export's \"dataset\"",
                 path);
        return -EINVAL;
    }
    rc = poolfs_stat(path, &st);
    if (rc == -ENOENT && may_create) {
        /* Its directory must exist, reached without symlinks. */
        char dir[PATH_MAX];
        const char *slash = strrchr(path, '/');

        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
        rc = poolfs_stat(dir, &st);
        if (rc == 0 && !S_ISDIR(st.st_mode))
            rc = -ENOTDIR;
        if (rc == 0)
            st.st_mode = S_IFREG; /* a new regular file */
    }
    if (rc == -ELOOP || (rc == 0 && S_ISLNK(st.st_mode))) {
        snprintf(why, whylen, "%s: symbolic links are not followed inside a pool", path);
        return -EINVAL;
    }
    if (rc == -EINVAL) {
        snprintf(why, whylen, "%s: \".\", \"..\" and empty components are not allowed", path);
        return -EINVAL;
    }
    if (rc < 0) {
        snprintf(why, whylen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "You need to specify a filepath not a directory.");
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
        snprintf(why, whylen, "%s must be a regular file or a block device", path);
        return -EINVAL;
    }
    return 0;
}

int datasets_file_volume(const char *path, char *name, size_t len, char *why, size_t whylen)
{
    char root[PATH_MAX], pool[DS_NAME_BUF];
    struct ds_row row;
    int rc;

    if (path[0] != '/' || poolfs_root_of(path, root, sizeof(root)) < 0 ||
        path[strlen(root)] != '/' || !path[strlen(root) + 1]) {
        snprintf(why, whylen,
                 "%s: the path must be a volume's file inside a pool directory (see "
                 "pool.dataset.query; host files elsewhere are never exported)",
                 path);
        return -EINVAL;
    }
    db_lock();
    rc = pool_name_of_root(root, pool, sizeof(pool));
    if (rc == 0 && snprintf(name, len, "%s/%s", pool, path + strlen(root) + 1) >= (int)len)
        rc = -ENAMETOOLONG;
    if (rc == 0)
        rc = ds_dataset_get(name, &row);
    db_unlock();
    if (rc < 0 || row.type != DS_VOLUME) {
        /* A file that is no volume of blockd's was not made by it: another
         * local user, a restored backup or a client may have planted it. */
        snprintf(why, whylen,
                 "%s is not a blockd volume: only volumes blockd created are exported (create "
                 "one with pool.dataset.create, or name it as \"dataset\")",
                 path);
        return -EINVAL;
    }
    return 0;
}
