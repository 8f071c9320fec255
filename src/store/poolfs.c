/* Confined file operations inside pool directories (see poolfs.h). */
#include "store/poolfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

struct root {
    char *path;
    size_t len;
    int fd; /* O_PATH | O_DIRECTORY */
};

static pthread_rwlock_t roots_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct root roots[POOLFS_ROOTS_MAX];
static size_t nroots;

/* -1 unknown, 0 no openat2 (ENOSYS), 1 available. */
static atomic_int have_openat2 = -1;
static atomic_bool force_fallback;

void poolfs_force_fallback(bool on)
{
    atomic_store(&force_fallback, on);
}

/* Every component of rel is a plain name. "" is allowed (the dir itself). */
static int rel_check(const char *rel)
{
    const char *p = rel;

    if (!*rel)
        return 0;
    for (;;) {
        size_t n = strcspn(p, "/");

        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return -EINVAL;
        if (n > NAME_MAX)
            return -ENAMETOOLONG;
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

static int sys_openat2(int dirfd, const char *rel, int flags, mode_t mode)
{
    struct open_how how = {
        .flags = (uint64_t)flags,
        .mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    };
    long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));

    return fd < 0 ? -errno : (int)fd;
}

/* Kernels before 5.6: walk the components with O_NOFOLLOW. An
 * intermediate symlink opened O_PATH|O_NOFOLLOW|O_DIRECTORY fails ENOTDIR;
 * say ELOOP as openat2 would, after checking that it is one. */
static int walk_openat(int dirfd, const char *rel, int flags, mode_t mode)
{
    char comp[NAME_MAX + 1];
    const char *p = rel;
    int cur = dirfd;

    for (;;) {
        size_t n = strcspn(p, "/");
        bool last = p[n] == '\0';
        int fd;

        memcpy(comp, p, n);
        comp[n] = '\0';
        if (last) {
            fd = openat(cur, comp, flags, mode);
            if (fd < 0)
                fd = -errno;
        } else {
            fd = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) {
                struct stat st;

                fd = -errno;
                if (fd == -ENOTDIR && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISLNK(st.st_mode))
                    fd = -ELOOP;
            }
        }
        if (cur != dirfd)
            close(cur);
        if (fd < 0 || last)
            return fd;
        cur = fd;
        p += n + 1;
    }
}

static int resolve(int dirfd, const char *rel, int flags, mode_t mode)
{
    if (!atomic_load(&force_fallback) && atomic_load(&have_openat2) != 0) {
        int rc = sys_openat2(dirfd, rel, flags, mode);

        if (rc != -ENOSYS) {
            atomic_store(&have_openat2, 1);
            return rc;
        }
        atomic_store(&have_openat2, 0);
    }
    return walk_openat(dirfd, rel, flags, mode);
}

/* O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR: whether the last
 * component of rel is a symlink (then the answer is ELOOP). */
static bool last_is_symlink(int dirfd, const char *rel)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(rel, '/');
    struct stat st;
    int dfd = dirfd;
    bool link;

    if (slash) {
        size_t n = (size_t)(slash - rel);

        if (n >= sizeof(dir))
            return false;
        memcpy(dir, rel, n);
        dir[n] = '\0';
        dfd = resolve(dirfd, dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
        if (dfd < 0)
            return false;
    }
    link =
        fstatat(dfd, slash ? slash + 1 : rel, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
    if (dfd != dirfd)
        close(dfd);
    return link;
}

int poolfs_openat(int dirfd, const char *rel, int flags, mode_t mode)
{
    int rc = rel_check(rel);

    if (rc < 0)
        return rc;
    if (!*rel)
        rel = ".";
    flags |= O_NOFOLLOW | O_CLOEXEC;
    rc = resolve(dirfd, rel, flags, mode);
    if (rc == -ENOTDIR && (flags & O_DIRECTORY) && last_is_symlink(dirfd, rel))
        rc = -ELOOP;
    return rc;
}

/* ---- the root table ---- */

static bool path_under(const char *root, size_t len, const char *path)
{
    return strncmp(root, path, len) == 0 && (path[len] == '/' || path[len] == '\0');
}

static int open_root(const char *root)
{
    int slash = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int fd;

    if (slash < 0)
        return -errno;
    fd = poolfs_openat(slash, root + 1, O_PATH | O_DIRECTORY, 0);
    close(slash);
    return fd;
}

int poolfs_root_add(const char *root)
{
    size_t len = strlen(root);
    int fd, rc = 0;

    if (root[0] != '/' || len < 2 || root[len - 1] == '/' || len >= PATH_MAX)
        return -EINVAL;
    fd = open_root(root);
    if (fd < 0)
        return fd;
    pthread_rwlock_wrlock(&roots_lock);
    for (size_t i = 0; i < nroots; i++) {
        if (roots[i].len == len && strcmp(roots[i].path, root) == 0) {
            close(roots[i].fd); /* re-registration refreshes the descriptor */
            roots[i].fd = fd;
            goto out;
        }
        if (path_under(roots[i].path, roots[i].len, root) || path_under(root, len, roots[i].path)) {
            rc = -EEXIST;
            goto out;
        }
    }
    if (nroots == POOLFS_ROOTS_MAX) {
        rc = -ENOSPC;
        goto out;
    }
    roots[nroots].path = strdup(root);
    if (!roots[nroots].path) {
        rc = -ENOMEM;
        goto out;
    }
    roots[nroots].len = len;
    roots[nroots].fd = fd;
    nroots++;
    fd = -1;
out:
    pthread_rwlock_unlock(&roots_lock);
    if (rc < 0 && fd >= 0)
        close(fd);
    return rc;
}

void poolfs_root_remove(const char *root)
{
    pthread_rwlock_wrlock(&roots_lock);
    for (size_t i = 0; i < nroots; i++) {
        if (strcmp(roots[i].path, root) == 0) {
            close(roots[i].fd);
            free(roots[i].path);
            roots[i] = roots[--nroots];
            break;
        }
    }
    pthread_rwlock_unlock(&roots_lock);
}

void poolfs_root_clear(void)
{
    pthread_rwlock_wrlock(&roots_lock);
    for (size_t i = 0; i < nroots; i++) {
        close(roots[i].fd);
        free(roots[i].path);
    }
    nroots = 0;
    pthread_rwlock_unlock(&roots_lock);
}

/* Caller holds the read lock. */
static struct root *root_find(const char *path)
{
    for (size_t i = 0; i < nroots; i++)
        if (path_under(roots[i].path, roots[i].len, path))
            return &roots[i];
    return NULL;
}

int poolfs_root_of(const char *path, char *buf, size_t len)
{
    struct root *r;
    int rc = -EXDEV;

    pthread_rwlock_rdlock(&roots_lock);
    r = root_find(path);
    if (r)
        rc = snprintf(buf, len, "%s", r->path) < (int)len ? 0 : -ENAMETOOLONG;
    pthread_rwlock_unlock(&roots_lock);
    return rc;
}

/*
 * Find path's root and hold the read lock (released with root_put). If the
 * root directory was removed since it was opened (nlink 0: e.g. deleted
 * and made anew by an operator), reopen it first under the write lock.
 * *rel points into path: the part below the root ("" for the root).
 */
static int root_get(const char *path, int *fd, const char **rel)
{
    struct root *r;
    struct stat st;

    pthread_rwlock_rdlock(&roots_lock);
    r = root_find(path);
    if (!r) {
        pthread_rwlock_unlock(&roots_lock);
        return -EXDEV;
    }
    if (fstat(r->fd, &st) == 0 && st.st_nlink > 0)
        goto found;
    pthread_rwlock_unlock(&roots_lock);
    pthread_rwlock_wrlock(&roots_lock);
    r = root_find(path);
    if (r && (fstat(r->fd, &st) < 0 || st.st_nlink == 0)) {
        int nfd = open_root(r->path);

        if (nfd < 0) {
            /* Gone, or replaced by a symlink: unusable until it is back. */
            pthread_rwlock_unlock(&roots_lock);
            return nfd;
        }
        close(r->fd);
        r->fd = nfd;
    }
    pthread_rwlock_unlock(&roots_lock);
    pthread_rwlock_rdlock(&roots_lock);
    r = root_find(path);
    if (!r) {
        pthread_rwlock_unlock(&roots_lock);
        return -EXDEV;
    }
found:
    *fd = r->fd;
    *rel = path + r->len + (path[r->len] == '/');
    return 0;
}

static void root_put(void)
{
    pthread_rwlock_unlock(&roots_lock);
}

int poolfs_open(const char *path, int flags, mode_t mode)
{
    const char *rel;
    int rootfd, rc = root_get(path, &rootfd, &rel);

    if (rc < 0)
        return rc;
    rc = poolfs_openat(rootfd, rel, flags, mode);
    root_put();
    return rc;
}

/*
 * Open the parent directory of path (confined) and point *base at the last
 * component. The root itself has no parent inside the pool: -EINVAL.
 * Holds nothing on return (the parent descriptor keeps the directory).
 */
static int parent_open(const char *path, const char **base)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n;
    int rc;

    if (!slash || !slash[1])
        return -EINVAL;
    n = (size_t)(slash - path);
    if (n >= sizeof(dir))
        return -ENAMETOOLONG;
    memcpy(dir, path, n);
    dir[n] = '\0';
    *base = slash + 1;
    rc = rel_check(*base);
    if (rc < 0)
        return rc;
    /* The last component must itself be below the root: a path equal to
     * the root has its parent outside every pool. */
    {
        const char *rel;
        int rootfd;

        rc = root_get(path, &rootfd, &rel);
        if (rc < 0)
            return rc;
        root_put();
        if (!*rel)
            return -EINVAL;
    }
    return poolfs_open(dir, O_PATH | O_DIRECTORY, 0);
}

int poolfs_mkstemp(char *tmpl, int flags)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t len = strlen(tmpl);
    char *x;

    if (len < 6 || strcmp(tmpl + len - 6, "XXXXXX") != 0)
        return -EINVAL;
    x = tmpl + len - 6;
    for (int attempt = 0; attempt < 100; attempt++) {
        unsigned char rnd[6];
        int fd;

        if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
            return -EIO;
        for (int i = 0; i < 6; i++)
            x[i] = chars[rnd[i] % (sizeof(chars) - 1)];
        fd = poolfs_open(tmpl, O_RDWR | O_CREAT | O_EXCL | flags, 0600);
        if (fd != -EEXIST)
            return fd;
    }
    return -EEXIST;
}

int poolfs_stat(const char *path, struct stat *st)
{
    const char *rel;
    int rootfd, rc = root_get(path, &rootfd, &rel);

    if (rc < 0)
        return rc;
    root_put();
    if (!*rel) {
        int fd = poolfs_open(path, O_PATH | O_DIRECTORY, 0);

        if (fd < 0)
            return fd;
        rc = fstat(fd, st) < 0 ? -errno : 0;
        close(fd);
        return rc;
    }
    {
        const char *base;
        int dfd = parent_open(path, &base);

        if (dfd < 0)
            return dfd;
        rc = fstatat(dfd, base, st, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
        close(dfd);
    }
    return rc;
}

int poolfs_mkdir(const char *path, mode_t mode)
{
    const char *base;
    int dfd = parent_open(path, &base), rc;

    if (dfd < 0)
        return dfd;
    rc = mkdirat(dfd, base, mode) < 0 ? -errno : 0;
    close(dfd);
    return rc;
}

int poolfs_mkdir_parents(const char *path)
{
    char buf[PATH_MAX], root[PATH_MAX];
    size_t len = strlen(path);
    int rc;

    if (len >= sizeof(buf))
        return -ENAMETOOLONG;
    rc = poolfs_root_of(path, root, sizeof(root));
    if (rc < 0)
        return rc;
    memcpy(buf, path, len + 1);
    for (char *p = buf + strlen(root) + 1; p < buf + len; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        rc = poolfs_mkdir(buf, 0755);
        *p = '/';
        if (rc < 0 && rc != -EEXIST)
            return rc;
    }
    if (len > strlen(root)) {
        rc = poolfs_mkdir(buf, 0755);
        if (rc < 0 && rc != -EEXIST)
            return rc;
    }
    /* Existing components may be anything: make sure the result is a
     * directory reached without symlinks. */
    rc = poolfs_open(path, O_PATH | O_DIRECTORY, 0);
    if (rc < 0)
        return rc;
    close(rc);
    return 0;
}

static int unlink_flags(const char *path, int flags)
{
    const char *base;
    int dfd = parent_open(path, &base), rc;

    if (dfd < 0)
        return dfd;
    rc = unlinkat(dfd, base, flags) < 0 ? -errno : 0;
    close(dfd);
    return rc;
}

int poolfs_unlink(const char *path)
{
    return unlink_flags(path, 0);
}

int poolfs_rmdir(const char *path)
{
    return unlink_flags(path, AT_REMOVEDIR);
}

static int same_root(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    int rc = poolfs_root_of(a, ra, sizeof(ra));

    if (rc == 0)
        rc = poolfs_root_of(b, rb, sizeof(rb));
    if (rc == 0 && strcmp(ra, rb) != 0)
        rc = -EXDEV;
    return rc;
}

/* For an operation on two names in one pool (rename, link): both parent
 * directories, opened without following symlinks. 0 or -errno (nothing
 * left open). */
static int parents_open(const char *from, const char *to, int *fdir, const char **fbase, int *tdir,
                        const char **tbase)
{
    int rc = same_root(from, to);

    if (rc < 0)
        return rc;
    *fdir = parent_open(from, fbase);
    if (*fdir < 0)
        return *fdir;
    *tdir = parent_open(to, tbase);
    if (*tdir < 0) {
        close(*fdir);
        return *tdir;
    }
    return 0;
}

int poolfs_rename(const char *from, const char *to, unsigned flags)
{
    const char *fbase, *tbase;
    int fdir, tdir, rc = parents_open(from, to, &fdir, &fbase, &tdir, &tbase);

    if (rc < 0)
        return rc;
    rc = renameat2(fdir, fbase, tdir, tbase, flags) < 0 ? -errno : 0;
    close(tdir);
    close(fdir);
    return rc;
}

int poolfs_link(const char *from, const char *to)
{
    const char *fbase, *tbase;
    int fdir, tdir, rc = parents_open(from, to, &fdir, &fbase, &tdir, &tbase);

    if (rc < 0)
        return rc;
    /* linkat without AT_SYMLINK_FOLLOW links a symlink itself, never its
     * target. */
    rc = linkat(fdir, fbase, tdir, tbase, 0) < 0 ? -errno : 0;
    close(tdir);
    close(fdir);
    return rc;
}

int poolfs_truncate(const char *path, uint64_t size)
{
    int fd, rc;

    if (size > (uint64_t)INT64_MAX)
        return -EFBIG;
    fd = poolfs_open(path, O_WRONLY, 0);
    if (fd < 0)
        return fd;
    rc = ftruncate(fd, (off_t)size) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int poolfs_fsync_parent(const char *path)
{
    const char *base;
    int dfd = parent_open(path, &base), fd, rc;

    if (dfd < 0)
        return dfd;
    /* O_PATH descriptors cannot be fsynced: reopen the directory. */
    fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    rc = fd < 0 ? -errno : (fsync(fd) < 0 ? -errno : 0);
    if (fd >= 0)
        close(fd);
    close(dfd);
    return rc;
}

int poolfs_root_make(const char *root)
{
    char buf[PATH_MAX];
    size_t len = strlen(root);
    int slash, rc = 0;

    if (root[0] != '/' || len < 2 || len >= sizeof(buf))
        return -EINVAL;
    slash = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (slash < 0)
        return -errno;
    memcpy(buf, root, len + 1);
    /* Each "/a/b/c" prefix: open its parent below "/" without symlinks,
     * mkdirat the last component there. */
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char save = *p;
        char *base = strrchr(buf, '/');
        int dfd;

        *p = '\0';
        base = strrchr(buf, '/');
        *base = '\0';
        dfd = poolfs_openat(slash, buf + 1, O_PATH | O_DIRECTORY, 0);
        *base = '/';
        if (dfd < 0) {
            rc = dfd;
            break;
        }
        rc = mkdirat(dfd, base + 1, 0755) < 0 && errno != EEXIST ? -errno : 0;
        close(dfd);
        *p = save;
        if (rc < 0 || save == '\0')
            break;
    }
    if (rc == 0) {
        int fd = poolfs_openat(slash, root + 1, O_PATH | O_DIRECTORY, 0);

        rc = fd < 0 ? fd : 0;
        if (fd >= 0)
            close(fd);
    }
    close(slash);
    return rc;
}

/* ---- which directories may become pools ---- */

static const char *const system_dirs[] = {
    "/etc",  "/proc",         "/sys",   "/dev",   "/boot",    "/usr",         "/bin",
    "/sbin", "/lib",          "/lib32", "/lib64", "/libx32",  "/run",         "/var/run",
    "/root", "/var/lib/dpkg", "/snap",  "/efi",   "/var/log", "/var/lib/apt",
};

/* Pseudo filesystems: their "files" are kernel objects, not storage. */
static const long bad_fs_magic[] = {
    PROC_SUPER_MAGIC,
    SYSFS_MAGIC,
    DEVPTS_SUPER_MAGIC,
    CGROUP_SUPER_MAGIC,
    CGROUP2_SUPER_MAGIC,
    DEBUGFS_MAGIC,
    SECURITYFS_MAGIC,
    TRACEFS_MAGIC,
    BPF_FS_MAGIC,
    PSTOREFS_MAGIC,
    EFIVARFS_MAGIC,
    BINFMTFS_MAGIC,
    HUGETLBFS_MAGIC,
    NSFS_MAGIC,
    SELINUX_MAGIC,
    SMACK_MAGIC,
    0x62656570 /* configfs */,
    0x65735543 /* fusectl */,
    0x19800202 /* mqueue */,
    ANON_INODE_FS_MAGIC,
    SOCKFS_MAGIC,
    PIPEFS_MAGIC,
};

static bool lexically_canonical(const char *p)
{
    size_t len = strlen(p);

    if (p[0] != '/' || len < 2 || p[len - 1] == '/')
        return false;
    return rel_check(p + 1) == 0;
}

/* A pool path is absolute, not too long and lexically canonical, so that
 * the checks below compare strings that mean one directory. */
static int root_check_syntax(const char *path, size_t len, char *why, size_t whylen)
{
    if (path[0] != '/') {
        snprintf(why, whylen, "%s: a pool path must be absolute", path);
        return -EINVAL;
    }
    if (len >= PATH_MAX) {
        snprintf(why, whylen, "pool path too long");
        return -ENAMETOOLONG;
    }
    if (!lexically_canonical(path)) {
        snprintf(why, whylen,
                 "%s: a pool path must be canonical (not \"/\", no \".\", \"..\", \"//\" or "
                 "trailing \"/\")",
                 path);
        return -EINVAL;
    }
    return 0;
}

/* A pool may not contain the daemon's state directory, nor be STATE/pools
 * itself. *in_state_pools: path lies below STATE/pools (a default pool). */
static int root_check_state_dir(const char *path, size_t len, const char *state_dir,
                                bool *in_state_pools, char *why, size_t whylen)
{
    char state[PATH_MAX], pools[PATH_MAX + 8];

    *in_state_pools = false;
    if (!state_dir || !realpath(state_dir, state))
        return 0;
    snprintf(pools, sizeof(pools), "%s/pools", state);
    if (path_under(path, len, state)) {
        snprintf(why, whylen, "%s contains the daemon's state directory %s", path, state);
        return -EINVAL;
    }
    *in_state_pools = path_under(pools, strlen(pools), path) && strcmp(path, pools) != 0;
    /* A pool elsewhere inside the state directory cannot reach the
     * DB (its files resolve beneath it); STATE/pools itself would
     * hold the other pools. */
    if (strcmp(path, pools) == 0) {
        snprintf(why, whylen, "%s holds the default pools: use %s/NAME", path, pools);
        return -EINVAL;
    }
    return 0;
}

static int root_check_system_dirs(const char *path, char *why, size_t whylen)
{
    for (size_t i = 0; i < sizeof(system_dirs) / sizeof(system_dirs[0]); i++) {
        if (path_under(system_dirs[i], strlen(system_dirs[i]), path)) {
            snprintf(why, whylen, "%s is inside the system directory %s", path, system_dirs[i]);
            return -EINVAL;
        }
    }
    return 0;
}

/* Cut probe back to its deepest existing ancestor (itself when it exists),
 * which must be a directory and not a symbolic link. */
static int root_existing_ancestor(char *probe, char *why, size_t whylen)
{
    for (;;) {
        struct stat st;

        if (lstat(probe, &st) == 0) {
            if (S_ISLNK(st.st_mode)) {
                snprintf(why, whylen, "%s is a symbolic link", probe);
                return -ELOOP;
            }
            if (!S_ISDIR(st.st_mode)) {
                snprintf(why, whylen, "%s is not a directory", probe);
                return -ENOTDIR;
            }
            return 0;
        }
        if (errno != ENOENT) {
            int e = errno;

            snprintf(why, whylen, "%s: %s", probe, strerror(e));
            return -e;
        }
        char *slash = strrchr(probe, '/');
        if (slash == probe)
            slash[1] = '\0';
        else
            *slash = '\0';
    }
}

/* The ancestor was reached without symlinks (realpath gives the same
 * string back) and lies on a filesystem that stores files. */
static int root_check_ancestor(const char *probe, char *why, size_t whylen)
{
    char real[PATH_MAX];
    struct statfs sf;

    if (!realpath(probe, real)) {
        int e = errno;

        snprintf(why, whylen, "%s: %s", probe, strerror(e));
        return -e;
    }
    if (strcmp(real, probe) != 0) {
        snprintf(why, whylen, "%s is not canonical: it resolves to %s (symbolic links are refused)",
                 probe, real);
        return -ELOOP;
    }
    if (statfs(probe, &sf) < 0) {
        int e = errno;

        snprintf(why, whylen, "statfs %s: %s", probe, strerror(e));
        return -e;
    }
    for (size_t i = 0; i < sizeof(bad_fs_magic) / sizeof(bad_fs_magic[0]); i++) {
        if ((long)sf.f_type == bad_fs_magic[i]) {
            snprintf(why, whylen, "%s is on a pseudo filesystem (type 0x%lx), not storage", probe,
                     (unsigned long)sf.f_type);
            return -EINVAL;
        }
    }
    return 0;
}

int poolfs_root_check(const char *path, const char *state_dir, char *why, size_t whylen)
{
    char probe[PATH_MAX];
    size_t len = strlen(path);
    bool in_state_pools = false;

    int rc = root_check_syntax(path, len, why, whylen);
    if (rc == 0)
        rc = root_check_state_dir(path, len, state_dir, &in_state_pools, why, whylen);
    /* STATE/pools/NAME is where the operator put the state directory (a
     * start-up choice), so it is not refused for lying in a system one. */
    if (rc == 0 && !in_state_pools)
        rc = root_check_system_dirs(path, why, whylen);
    if (rc < 0)
        return rc;
    /* The deepest existing ancestor (the path itself when it exists) must
     * be reached without symlinks. */
    memcpy(probe, path, len + 1);
    rc = root_existing_ancestor(probe, why, whylen);
    return rc < 0 ? rc : root_check_ancestor(probe, why, whylen);
}

int poolfs_publish(const char *tmp, const char *dst)
{
    int rc = poolfs_rename(tmp, dst, RENAME_NOREPLACE);
    if (rc == -EINVAL) { /* no RENAME_NOREPLACE here: link() refuses to replace */
        rc = poolfs_link(tmp, dst);
        if (rc == 0)
            poolfs_unlink(tmp);
    }
    return rc;
}
