/* poolfs: confined opens beneath a pool root (openat2 and the O_NOFOLLOW
 * walk), the directory-changing calls, and which paths may become pools. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/poolfs.h"

struct fx {
    char top[PATH_MAX];          /* realpath of a mkdtemp dir */
    char root[PATH_MAX + 16];    /* top/pool: the registered root */
    char outside[PATH_MAX + 16]; /* top/outside: a directory that is not a pool */
};

static char *join(const struct fx *f, const char *rel)
{
    static char buf[4][PATH_MAX + 64];
    static int i;
    char *b = buf[i++ % 4];
    snprintf(b, PATH_MAX + 64, "%s/%s", f->top, rel);
    return b;
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    char tmpl[] = "/tmp/poolfs.XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    assert_non_null(realpath(tmpl, f->top));
    snprintf(f->root, sizeof(f->root), "%s/pool", f->top);
    snprintf(f->outside, sizeof(f->outside), "%s/outside", f->top);
    assert_int_equal(mkdir(f->root, 0755), 0);
    assert_int_equal(mkdir(f->outside, 0755), 0);
    assert_int_equal(poolfs_root_add(f->root), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    char cmd[PATH_MAX + 16];
    poolfs_root_clear();
    poolfs_force_fallback(false);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->top);
    assert_int_equal(system(cmd), 0);
    free(f);
    return 0;
}

/* The checks that must hold with either resolver. */
static void confined_cases(struct fx *f)
{
    int fd;
    struct stat st;

    /* A plain file and a nested directory work. */
    fd = poolfs_open(join(f, "pool/a"), O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    close(fd);
    assert_int_equal(poolfs_mkdir_parents(join(f, "pool/d1/d2")), 0);
    fd = poolfs_open(join(f, "pool/d1/d2/f"), O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(poolfs_stat(join(f, "pool/d1/d2/f"), &st), 0);
    assert_true(S_ISREG(st.st_mode));

    /* A symlink as last component, pointing outside: refused, nothing
     * created outside. */
    assert_int_equal(symlink(join(f, "outside/target"), join(f, "pool/evil")), 0);
    assert_int_equal(poolfs_open(join(f, "pool/evil"), O_RDWR | O_CREAT, 0600), -ELOOP);
    assert_int_equal(access(join(f, "outside/target"), F_OK), -1);
    /* stat reports the link itself. */
    assert_int_equal(poolfs_stat(join(f, "pool/evil"), &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    /* A symlinked directory in the middle: refused for open, mkdir,
     * unlink, rename. */
    assert_int_equal(symlink(f->outside, join(f, "pool/dirlink")), 0);
    assert_int_equal(poolfs_open(join(f, "pool/dirlink/x"), O_RDWR | O_CREAT, 0600), -ELOOP);
    assert_int_equal(poolfs_mkdir(join(f, "pool/dirlink/sub"), 0755), -ELOOP);
    assert_int_equal(poolfs_mkdir_parents(join(f, "pool/dirlink/sub/sub2")), -ELOOP);
    fd = open(join(f, "outside/victim"), O_RDWR | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(poolfs_unlink(join(f, "pool/dirlink/victim")), -ELOOP);
    assert_int_equal(access(join(f, "outside/victim"), F_OK), 0);
    assert_int_equal(poolfs_rename(join(f, "pool/a"), join(f, "pool/dirlink/a"), 0), -ELOOP);
    assert_int_equal(poolfs_truncate(join(f, "pool/dirlink/victim"), 1 << 20), -ELOOP);
    assert_int_equal(poolfs_truncate(join(f, "pool/evil"), 1 << 20), -ELOOP);
    assert_int_equal(access(join(f, "outside/x"), F_OK), -1);
    assert_int_equal(access(join(f, "outside/sub"), F_OK), -1);
    /* Lexical escapes. */
    assert_int_equal(poolfs_open(join(f, "pool/../outside/victim"), O_RDONLY, 0), -EINVAL);
    assert_int_equal(poolfs_open(join(f, "pool/./a"), O_RDONLY, 0), -EINVAL);
    assert_int_equal(poolfs_open(join(f, "pool//a"), O_RDONLY, 0), -EINVAL);
    /* Outside every root, and a prefix that is not a path component. */
    assert_int_equal(poolfs_open(join(f, "outside/victim"), O_RDONLY, 0), -EXDEV);
    assert_int_equal(poolfs_open(join(f, "poolx"), O_RDONLY, 0), -EXDEV);
    assert_int_equal(poolfs_open("/etc/passwd", O_RDONLY, 0), -EXDEV);
    /* The root itself may be opened, but has no parent inside the pool. */
    fd = poolfs_open(f->root, O_RDONLY | O_DIRECTORY, 0);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(poolfs_unlink(f->root), -EINVAL);
    assert_int_equal(poolfs_rmdir(f->root), -EINVAL);

    /* Rename, link, mkstemp, unlink, rmdir inside the pool. */
    char tmpl[PATH_MAX + 64];
    snprintf(tmpl, sizeof(tmpl), "%s/.a.tmp.XXXXXX", f->root);
    fd = poolfs_mkstemp(tmpl, 0);
    assert_true(fd >= 0);
    close(fd);
    assert_null(strstr(tmpl, "XXXXXX"));
    assert_int_equal(poolfs_rename(tmpl, join(f, "pool/a"), RENAME_NOREPLACE), -EEXIST);
    assert_int_equal(poolfs_rename(tmpl, join(f, "pool/b"), RENAME_NOREPLACE), 0);
    assert_int_equal(poolfs_link(join(f, "pool/b"), join(f, "pool/c")), 0);
    assert_int_equal(poolfs_truncate(join(f, "pool/c"), 8192), 0);
    assert_int_equal(poolfs_stat(join(f, "pool/b"), &st), 0);
    assert_int_equal(st.st_size, 8192);
    assert_int_equal(poolfs_fsync_parent(join(f, "pool/b")), 0);
    assert_int_equal(poolfs_unlink(join(f, "pool/b")), 0);
    assert_int_equal(poolfs_unlink(join(f, "pool/c")), 0);
    assert_int_equal(poolfs_unlink(join(f, "pool/d1/d2/f")), 0);
    assert_int_equal(poolfs_rmdir(join(f, "pool/d1/d2")), 0);
    /* Across roots: EXDEV. */
    assert_int_equal(poolfs_rename(join(f, "pool/a"), join(f, "outside/a"), 0), -EXDEV);
}

static void test_openat2(void **state)
{
    poolfs_force_fallback(false);
    confined_cases(*state);
}

static void test_fallback(void **state)
{
    poolfs_force_fallback(true);
    confined_cases(*state);
}

/* The root is opened without symlinks, and reopened if it is replaced. */
static void test_roots(void **state)
{
    struct fx *f = *state;
    int fd;

    assert_int_equal(poolfs_root_add(f->root), 0); /* again: fine */
    assert_int_equal(mkdir(join(f, "pool/inner"), 0755), 0);
    assert_int_equal(poolfs_root_add(join(f, "pool/inner")), -EEXIST); /* nested */
    assert_int_equal(poolfs_root_add(f->top), -EEXIST);                /* contains */
    assert_int_equal(symlink(f->outside, join(f, "link")), 0);
    assert_int_equal(poolfs_root_add(join(f, "link")), -ELOOP);
    assert_int_equal(poolfs_root_add("relative/x"), -EINVAL);
    assert_int_equal(poolfs_root_add("/"), -EINVAL);

    /* Replace the pool directory: the next call uses the new one. */
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(mkdir(f->root, 0755), 0);
    fd = poolfs_open(join(f, "pool/new"), O_RDWR | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(access(join(f, "pool/new"), F_OK), 0);
    /* Replaced by a symlink: refused. */
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->root);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(symlink(f->outside, f->root), 0);
    assert_int_equal(poolfs_open(join(f, "pool/new2"), O_RDWR | O_CREAT, 0600), -ELOOP);
    assert_int_equal(access(join(f, "outside/new2"), F_OK), -1);
    poolfs_root_remove(f->root);
    assert_int_equal(poolfs_open(join(f, "pool/new2"), O_RDONLY, 0), -EXDEV);
}

static void expect_root_bad(const char *path, const char *state_dir, int err, const char *part)
{
    char why[PATH_MAX + 256] = "";
    int rc = poolfs_root_check(path, state_dir, why, sizeof(why));
    if (rc != err)
        fail_msg("%s: rc %d, expected %d (%s)", path, rc, err, why);
    if (!strstr(why, part))
        fail_msg("%s: reason '%s' lacks '%s'", path, why, part);
}

static void test_root_check(void **state)
{
    struct fx *f = *state;
    char why[PATH_MAX + 256];

    expect_root_bad("relative/pool", NULL, -EINVAL, "absolute");
    expect_root_bad("/", NULL, -EINVAL, "canonical");
    expect_root_bad("/tmp/../etc", NULL, -EINVAL, "canonical");
    expect_root_bad("/tmp//x", NULL, -EINVAL, "canonical");
    expect_root_bad("/tmp/x/", NULL, -EINVAL, "canonical");
    expect_root_bad("/etc", NULL, -EINVAL, "system directory /etc");
    expect_root_bad("/etc/blockd/pool", NULL, -EINVAL, "system directory /etc");
    expect_root_bad("/proc/self", NULL, -EINVAL, "system directory /proc");
    expect_root_bad("/sys/kernel", NULL, -EINVAL, "system directory /sys");
    expect_root_bad("/dev/shm/p", NULL, -EINVAL, "system directory /dev");
    expect_root_bad("/usr/local/p", NULL, -EINVAL, "system directory /usr");
    expect_root_bad("/lib64", NULL, -EINVAL, "system directory");
    /* A symlink, at the end or in the middle (existing or not below it). */
    assert_int_equal(symlink(f->outside, join(f, "link")), 0);
    expect_root_bad(join(f, "link"), NULL, -ELOOP, "symbolic link");
    expect_root_bad(join(f, "link/new/deeper"), NULL, -ELOOP, "symbolic link");
    /* A file. */
    int fd = open(join(f, "outside/file"), O_RDWR | O_CREAT, 0600);
    close(fd);
    expect_root_bad(join(f, "outside/file"), NULL, -ENOTDIR, "not a directory");
    /* The state directory: itself, above it, inside it except pools/NAME. */
    assert_int_equal(mkdir(join(f, "state"), 0700), 0);
    const char *st = join(f, "state");
    char stbuf[PATH_MAX];
    snprintf(stbuf, sizeof(stbuf), "%s", st);
    expect_root_bad(stbuf, stbuf, -EINVAL, "contains the daemon's state directory");
    expect_root_bad(f->top, stbuf, -EINVAL, "contains the daemon's state directory");
    expect_root_bad(join(f, "state/pools"), stbuf, -EINVAL, "holds the default pools");
    assert_int_equal(poolfs_root_check(join(f, "state/pools/p1"), stbuf, why, sizeof(why)), 0);
    /* Fine: an existing directory, and a new one under a real directory. */
    assert_int_equal(poolfs_root_check(f->outside, stbuf, why, sizeof(why)), 0);
    assert_int_equal(poolfs_root_check(join(f, "new/a/b"), stbuf, why, sizeof(why)), 0);
    assert_int_equal(poolfs_root_make(join(f, "new/a/b")), 0);
    struct stat sb;
    assert_int_equal(stat(join(f, "new/a/b"), &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    /* root_make does not follow a symlink swapped in after the check. */
    assert_int_equal(poolfs_root_make(join(f, "link/made")), -ELOOP);
    assert_int_equal(access(join(f, "outside/made"), F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_openat2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_root_check, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
