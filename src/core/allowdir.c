/* Directories API calls may name host files in (see allowdir.h). */
#include "core/allowdir.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *dirs[ALLOWDIR_MAX];
static size_t ndirs;

int allowdir_add(const char *dir)
{
    char real[PATH_MAX];

    if (ndirs == ALLOWDIR_MAX)
        return -ENOSPC;
    if (!realpath(dir, real))
        return -errno;
    dirs[ndirs] = strdup(real);
    if (!dirs[ndirs])
        return -ENOMEM;
    ndirs++;
    return 0;
}

void allowdir_clear(void)
{
    for (size_t i = 0; i < ndirs; i++)
        free(dirs[i]);
    ndirs = 0;
}

static bool plain_components(const char *p)
{
    for (p++;;) {
        size_t n = strcspn(p, "/");

        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!p[n])
            return true;
        p += n + 1;
    }
}

void allowdir_list(char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < ndirs && off < len; i++) {
        int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", dirs[i]);

        if (n < 0)
            break;
        off += (size_t)n;
    }
}

int allowdir_canonical_parent(const char *path, char *dir, size_t len, char *why, size_t whylen)
{
    char real[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash == path ? 1 : (size_t)(slash - path);

    if (n >= len)
        return -ENAMETOOLONG;
    memcpy(dir, path, n);
    dir[n] = '\0';
    if (!realpath(dir, real)) {
        int e = errno;

        snprintf(why, whylen, "directory %s: %s", dir, strerror(e));
        return -e;
    }
    if (strcmp(real, dir) != 0) {
        snprintf(why, whylen, "directory %s is not canonical (it resolves to %s)", dir, real);
        return -EINVAL;
    }
    return 0;
}

int allowdir_check(const char *path, char *why, size_t whylen)
{
    char dir[PATH_MAX], list[1024];
    int rc;

    if (path[0] != '/' || strlen(path) >= PATH_MAX || !plain_components(path)) {
        snprintf(why, whylen, "%s: must be an absolute path without \".\", \"..\" or \"//\"", path);
        return -EINVAL;
    }
    rc = allowdir_canonical_parent(path, dir, sizeof(dir), why, whylen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < ndirs; i++) {
        size_t l = strlen(dirs[i]);

        if (strncmp(dirs[i], dir, l) == 0 && (dir[l] == '\0' || dir[l] == '/'))
            return 0;
    }
    allowdir_list(list, sizeof(list));
    snprintf(why, whylen,
             "%s is outside the directories the API may name files in (%s; add one with "
             "blockd --allow-dir DIR)",
             path, list);
    return -EINVAL;
}

bool allowdir_below(const char *path, const char *skip)
{
    for (size_t i = 0; i < ndirs; i++) {
        size_t l = strlen(dirs[i]);

        if (skip && strcmp(dirs[i], skip) == 0)
            continue;
        if (strncmp(dirs[i], path, l) == 0 && path[l] == '/' && path[l + 1])
            return true;
        if (l == 1 && path[0] == '/' && path[1]) /* --allow-dir / */
            return true;
    }
    return false;
}
