/* Unit tests: a temporary database directory (testdb.h). */
#include "testdb.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

int testdb_make(struct testdb *t, const char *prefix, const char *file)
{
    int n = snprintf(t->dir, sizeof(t->dir), "%s.XXXXXX", prefix);

    if (n < 0 || (size_t)n >= sizeof(t->dir))
        return -ENAMETOOLONG;
    if (!mkdtemp(t->dir))
        return -errno;
    n = snprintf(t->path, sizeof(t->path), "%s/%s", t->dir, file);
    return n < 0 || (size_t)n >= sizeof(t->path) ? -ENAMETOOLONG : 0;
}

/* The walk's first failure (nftw has no user argument; main thread only). */
static int remove_errno;

/* nftw's step (FTW_DEPTH: a directory after what is in it). It goes on
 * past a failure, as rm -rf does, so that as much as can go goes. */
static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && !remove_errno)
        remove_errno = errno;
    return 0;
}

int testdb_remove(const struct testdb *t)
{
    remove_errno = 0;
    /* FTW_PHYS: a link is removed, not followed */
    if (nftw(t->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
        return -errno;
    return -remove_errno;
}
