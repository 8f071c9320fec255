/* Snapshot/clone copies and rollback: sparse copy keeps content and the
 * hole map (data at odd offsets), every fallback path forced by flags,
 * progress, crash-safe naming, in-place rollback under an open volume,
 * and reflink on a real XFS image on a loop device when the machine allows
 * mounting one (else a skip that says why). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/iopool.h"
#include "store/copy.h"
#include "store/poolfs.h"
#include "store/volume.h"

#define SRC_SIZE (((uint64_t)10 << 20) + 123)

static char tmpdir[256];

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 2654435761u + seed) >> 9) | 1;
}

static void pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
    assert_int_equal(pwrite(fd, p, n, (off_t)off), (ssize_t)n);
}

/* Data at odd offsets with holes between; sizes not block multiples. */
static void make_source(const char *path, uint64_t size, uint32_t seed)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)size), 0);
    static uint8_t buf[400000];
    fill(buf, sizeof(buf), seed);
    pwrite_all(fd, buf, 5000, 0);
    pwrite_all(fd, buf + 1, 300000, (1 << 20) + 777);
    pwrite_all(fd, buf + 2, 2, (5 << 20) - 1);
    pwrite_all(fd, buf + 3, 100, size - 100);
    assert_int_equal(fsync(fd), 0);
    close(fd);
}

static void assert_same_content(const char *a, const char *b)
{
    int fa = open(a, O_RDONLY), fb = open(b, O_RDONLY);
    assert_true(fa >= 0 && fb >= 0);
    struct stat sa, sb;
    assert_int_equal(fstat(fa, &sa), 0);
    assert_int_equal(fstat(fb, &sb), 0);
    assert_int_equal(sa.st_size, sb.st_size);
    static uint8_t ba[1 << 20], bb[1 << 20];
    for (off_t off = 0; off < sa.st_size; off += sizeof(ba)) {
        ssize_t na = pread(fa, ba, sizeof(ba), off), nb = pread(fb, bb, sizeof(bb), off);
        assert_int_equal(na, nb);
        assert_memory_equal(ba, bb, (size_t)na);
    }
    close(fa);
    close(fb);
}

/* The SEEK_DATA/SEEK_HOLE map of a file as "D<start>-<end>;..." */
static void data_map(const char *path, char *out, size_t outlen)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    size_t used = 0;
    out[0] = '\0';
    off_t pos = 0;
    while (pos < st.st_size) {
        off_t d = lseek(fd, pos, SEEK_DATA);
        if (d < 0)
            break;
        off_t h = lseek(fd, d, SEEK_HOLE);
        used +=
            (size_t)snprintf(out + used, outlen - used, "D%lld-%lld;", (long long)d, (long long)h);
        assert_true(used < outlen);
        pos = h;
    }
    close(fd);
}

static void assert_same_map(const char *a, const char *b)
{
    char ma[4096], mb[4096];
    data_map(a, ma, sizeof(ma));
    data_map(b, mb, sizeof(mb));
    assert_string_equal(ma, mb);
}

static bool dir_has_temp(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp."))
            found = true;
    closedir(d);
    return found;
}

struct progress {
    uint64_t last, total;
    int calls;
    bool backwards;
};

static void on_progress(uint64_t done, uint64_t total, void *arg)
{
    struct progress *p = arg;
    if (done < p->last)
        p->backwards = true;
    p->last = done;
    p->total = total;
    p->calls++;
}

static void clone_case(const char *dir, unsigned flags, bool expect_reflink, const char *tag)
{
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/src-%s", dir, tag);
    snprintf(dst, sizeof(dst), "%s/dst-%s", dir, tag);
    make_source(src, SRC_SIZE, 17);
    struct progress p = {0};
    bool reflinked = !expect_reflink;
    assert_int_equal(store_clone_file_flags(src, dst, flags, on_progress, &p, &reflinked), 0);
    assert_int_equal(reflinked, expect_reflink);
    assert_same_content(src, dst);
    if (!expect_reflink)
        assert_same_map(src, dst);
    assert_true(p.calls >= 1);
    assert_false(p.backwards);
    assert_int_equal(p.last, SRC_SIZE);
    assert_int_equal(p.total, SRC_SIZE);
    struct stat st;
    assert_int_equal(stat(dst, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640); /* mode copied */
    /* Never replaces an existing file. */
    assert_int_equal(store_clone_file_flags(src, dst, flags, NULL, NULL, NULL), -EEXIST);
    assert_false(dir_has_temp(dir));
    unlink(src);
    unlink(dst);
}

static void test_sparse_copy_paths(void **state)
{
    /* /tmp here is ext4/tmpfs-like: no reflink, so even flags 0 copies. */
    clone_case(tmpdir, STORE_COPY_NO_REFLINK, false, "cfr");
    clone_case(tmpdir, STORE_COPY_NO_REFLINK | STORE_COPY_NO_COPY_RANGE, false, "rw");
}

static void test_copy_errors(void **state)
{
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/nosuch", tmpdir);
    snprintf(dst, sizeof(dst), "%s/out", tmpdir);
    assert_int_equal(store_clone_file(src, dst, NULL, NULL, NULL), -ENOENT);
    assert_int_equal(store_clone_file(tmpdir, dst, NULL, NULL, NULL), -EINVAL);
    snprintf(dst, sizeof(dst), "%s/no/dir/out", tmpdir);
    make_source(src, 8192, 1);
    assert_int_equal(store_clone_file(src, dst, NULL, NULL, NULL), -ENOENT);
    unlink(src);
    assert_false(dir_has_temp(tmpdir));
}

/* Roll back under an open volume: the same inode, new contents and size. */
static void rollback_case(const char *dir, unsigned flags, bool expect_reflink, const char *tag)
{
    char vol[512], snap[512];
    snprintf(vol, sizeof(vol), "%s/vol-%s", dir, tag);
    snprintf(snap, sizeof(snap), "%s/snap-%s", dir, tag);
    uint64_t snap_size = (uint64_t)6 << 20;
    make_source(snap, snap_size, 5);
    /* The volume: bigger, with data where the snapshot has holes. */
    make_source(vol, (uint64_t)8 << 20, 99);
    int fd = open(vol, O_RDWR);
    static uint8_t junk[1 << 20];
    fill(junk, sizeof(junk), 1234);
    pwrite_all(fd, junk, sizeof(junk), 2 << 20); /* a hole in snap */
    close(fd);
    struct stat before;
    assert_int_equal(stat(vol, &before), 0);

    struct bdev *b;
    struct volume *v;
    assert_int_equal(bdev_file_open(vol, false, &b), 0);
    assert_int_equal(volume_new("t/rb", b, 4096, VOLUME_SYNC_STANDARD, false, &v), 0);
    uint64_t gen = volume_size_generation(v);
    bool reflinked = !expect_reflink;
    struct progress p = {0};
    assert_int_equal(store_rollback_volume(v, vol, snap, flags, on_progress, &p, &reflinked), 0);
    assert_int_equal(reflinked, expect_reflink);
    assert_int_equal(volume_size(v), snap_size);
    assert_int_equal(volume_size_generation(v), gen + 1);
    assert_int_equal(p.last, snap_size);
    struct stat after;
    assert_int_equal(stat(vol, &after), 0);
    assert_int_equal(after.st_ino, before.st_ino);
    assert_same_content(vol, snap);
    if (!expect_reflink)
        assert_same_map(vol, snap);
    /* The open volume reads the snapshot's bytes. */
    static uint8_t got[1 << 20], want[1 << 20];
    int sfd = open(snap, O_RDONLY);
    for (uint64_t off = 0; off < snap_size; off += sizeof(got)) {
        struct vreq r = {.op = VREQ_READ, .buf = got, .length = sizeof(got), .offset = off};
        assert_int_equal(volume_submit_wait(v, &r), 0);
        assert_int_equal(pread(sfd, want, sizeof(want), (off_t)off), (ssize_t)sizeof(want));
        assert_memory_equal(got, want, sizeof(got));
    }
    close(sfd);
    /* And keeps working for writes. */
    struct vreq w = {.op = VREQ_WRITE, .buf = junk, .length = 4096, .offset = 0};
    assert_int_equal(volume_submit_wait(v, &w), 0);
    assert_int_equal(volume_flush_wait(v), 0);
    volume_unref(v);
    /* Not open: v = NULL works too (grow back to a bigger snapshot). */
    make_source(snap, (uint64_t)9 << 20, 6);
    assert_int_equal(store_rollback_volume(NULL, vol, snap, flags, NULL, NULL, NULL), 0);
    assert_same_content(vol, snap);
    unlink(vol);
    unlink(snap);
}

static void test_rollback(void **state)
{
    rollback_case(tmpdir, STORE_COPY_NO_REFLINK, false, "cfr");
    rollback_case(tmpdir, STORE_COPY_NO_REFLINK | STORE_COPY_NO_COPY_RANGE, false, "rw");
}

/* ---- XFS with reflink on a loop device ---- */

static char xfs_img[512], xfs_mnt[512], xfs_loop[64];
static char xfs_why[512];

static int run_cmd(const char *cmd)
{
    char full[1200];
    snprintf(full, sizeof(full), "%s >/dev/null 2>&1", cmd);
    return system(full);
}

static bool xfs_setup(void)
{
    if (geteuid() != 0) {
        snprintf(xfs_why, sizeof(xfs_why), "not root: cannot losetup/mount");
        return false;
    }
    if (run_cmd("command -v mkfs.xfs") != 0 || run_cmd("command -v losetup") != 0) {
        snprintf(xfs_why, sizeof(xfs_why), "mkfs.xfs (xfsprogs) or losetup missing");
        return false;
    }
    snprintf(xfs_img, sizeof(xfs_img), "%s/xfs.img", tmpdir);
    snprintf(xfs_mnt, sizeof(xfs_mnt), "%s/mnt", tmpdir);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "truncate -s 400M %s && mkfs.xfs -q -m reflink=1 %s", xfs_img,
             xfs_img);
    if (run_cmd(cmd) != 0) {
        snprintf(xfs_why, sizeof(xfs_why), "mkfs.xfs -m reflink=1 failed");
        return false;
    }
    snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", xfs_img);
    FILE *p = popen(cmd, "r");
    if (!p || !fgets(xfs_loop, sizeof(xfs_loop), p)) {
        if (p)
            pclose(p);
        xfs_loop[0] = '\0';
        snprintf(xfs_why, sizeof(xfs_why), "losetup failed (no loop devices in this container?)");
        return false;
    }
    pclose(p);
    xfs_loop[strcspn(xfs_loop, "\n")] = '\0';
    mkdir(xfs_mnt, 0700);
    snprintf(cmd, sizeof(cmd), "mount -t xfs %s %s", xfs_loop, xfs_mnt);
    if (run_cmd(cmd) != 0) {
        snprintf(xfs_why, sizeof(xfs_why), "mount of the XFS image failed (no permission?)");
        snprintf(cmd, sizeof(cmd), "losetup -d %s", xfs_loop);
        run_cmd(cmd);
        xfs_loop[0] = '\0';
        return false;
    }
    return true;
}

static void xfs_teardown(void)
{
    char cmd[1100];
    if (xfs_loop[0]) {
        snprintf(cmd, sizeof(cmd), "umount %s", xfs_mnt);
        run_cmd(cmd);
        snprintf(cmd, sizeof(cmd), "losetup -d %s", xfs_loop);
        run_cmd(cmd);
        xfs_loop[0] = '\0';
    }
    rmdir(xfs_mnt);
    unlink(xfs_img);
}

static void test_xfs_reflink(void **state)
{
    if (!xfs_setup()) {
        print_message("SKIP reflink on XFS: %s\n", xfs_why);
        skip();
    }
    store_copy_reset_probes();
    clone_case(xfs_mnt, 0, true, "reflink");
    /* The fallback forced on a reflink-capable filesystem still copies
     * (copy_file_range may share extents here; the rw path really copies). */
    clone_case(xfs_mnt, STORE_COPY_NO_REFLINK, false, "forced");
    clone_case(xfs_mnt, STORE_COPY_NO_REFLINK | STORE_COPY_NO_COPY_RANGE, false, "forced-rw");
    rollback_case(xfs_mnt, 0, true, "reflink");
    rollback_case(xfs_mnt, STORE_COPY_NO_REFLINK | STORE_COPY_NO_COPY_RANGE, false, "forced-rw");

    /* A reflinked clone shares blocks: writing to it leaves the source. */
    char src[600], dst[600];
    snprintf(src, sizeof(src), "%s/share-src", xfs_mnt);
    snprintf(dst, sizeof(dst), "%s/share-dst", xfs_mnt);
    make_source(src, SRC_SIZE, 3);
    bool reflinked = false;
    assert_int_equal(store_clone_file(src, dst, NULL, NULL, &reflinked), 0);
    assert_true(reflinked);
    int fd = open(dst, O_RDWR);
    pwrite_all(fd, "changed", 7, 10);
    close(fd);
    uint8_t a[16], b[16];
    fd = open(src, O_RDONLY);
    assert_int_equal(pread(fd, a, 16, 10), 16);
    close(fd);
    fd = open(dst, O_RDONLY);
    assert_int_equal(pread(fd, b, 16, 10), 16);
    close(fd);
    assert_memory_equal(b, "changed", 7);
    assert_memory_not_equal(a, b, 7);
    unlink(src);
    unlink(dst);
}

/* Runs even when an assertion failed mid-test: never leave a mount or a
 * loop device behind. */
static int xfs_teardown_fn(void **state)
{
    xfs_teardown();
    return 0;
}

/* On a filesystem without reflink, flags 0 falls back by itself and
 * remembers the answer. */
static void test_auto_fallback(void **state)
{
    store_copy_reset_probes();
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/auto-src", tmpdir);
    snprintf(dst, sizeof(dst), "%s/auto-dst", tmpdir);
    make_source(src, SRC_SIZE, 8);
    bool reflinked = true;
    assert_int_equal(store_clone_file(src, dst, NULL, NULL, &reflinked), 0);
    struct stat st;
    stat(tmpdir, &st);
    if (reflinked) {
        print_message("note: %s supports reflink\n", tmpdir);
    } else {
        assert_same_map(src, dst);
    }
    assert_same_content(src, dst);
    unlink(src);
    unlink(dst);
}

/* store_update_file: the result equals the source whatever the target
 * held, holes stay holes, and only differing blocks are written. */
static void test_update_compare_and_write(void **state)
{
    (void)state;
    char src[512], dst[512];
    snprintf(src, sizeof(src), "%s/upd-src", tmpdir);
    snprintf(dst, sizeof(dst), "%s/upd-dst", tmpdir);
    struct store_update_stats st;

    /* 1. empty, shorter target: a full send (everything written) */
    make_source(src, SRC_SIZE, 5);
    int fd = open(dst, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 4096), 0);
    close(fd);
    struct progress p = {0};
    assert_int_equal(store_update_file(src, dst, STORE_COPY_NO_REFLINK, on_progress, &p, &st), 0);
    assert_false(st.reflinked);
    assert_int_equal(st.size, SRC_SIZE);
    assert_true(st.written > 0 && st.written <= st.compared);
    assert_same_content(src, dst);
    assert_same_map(src, dst);
    assert_false(p.backwards);
    assert_int_equal(p.last, SRC_SIZE);

    /* 2. same again: nothing to write */
    assert_int_equal(store_update_file(src, dst, STORE_COPY_NO_REFLINK, NULL, NULL, &st), 0);
    assert_int_equal(st.written, 0);
    assert_int_equal(st.punched, 0);
    assert_true(st.compared > 0);

    /* 3. one changed block in the source, a stray write in the target
     *    where the source has a hole, and a longer target: exactly the
     *    changed 64 KiB block is written, the stray data punched */
    static uint8_t b[4096];
    memset(b, 0xAB, sizeof(b));
    fd = open(src, O_RDWR | O_CLOEXEC);
    pwrite_all(fd, b, sizeof(b), (1 << 20) + 800);
    close(fd);
    fd = open(dst, O_RDWR | O_CLOEXEC);
    pwrite_all(fd, b, sizeof(b), 3 << 20); /* a hole in src */
    assert_int_equal(ftruncate(fd, (off_t)SRC_SIZE + (1 << 20)), 0);
    close(fd);
    assert_int_equal(store_update_file(src, dst, STORE_COPY_NO_REFLINK, NULL, NULL, &st), 0);
    assert_int_equal(st.written, 64 << 10);
    assert_true(st.punched >= 4096);
    assert_same_content(src, dst);
    assert_same_map(src, dst);

    /* 4. errors */
    /* outside every pool root (store/poolfs.h): refused before any open */
    assert_int_equal(store_update_file("/nonexistent/x", dst, 0, NULL, NULL, NULL), -EXDEV);
    assert_int_equal(store_update_file(src, "/nonexistent/y", 0, NULL, NULL, NULL), -EXDEV);
    unlink(src);
    unlink(dst);
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/store-copy-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    /* store/copy.c works beneath registered pool roots only (poolfs). */
    char real[PATH_MAX];
    if (!realpath(tmpdir, real) || poolfs_root_add(real) < 0) {
        perror("poolfs_root_add");
        return 1;
    }
    if (strlen(real) >= sizeof(tmpdir))
        return 1;
    memcpy(tmpdir, real, strlen(real) + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_copy_paths),
        cmocka_unit_test(test_copy_errors),
        cmocka_unit_test(test_rollback),
        cmocka_unit_test(test_auto_fallback),
        cmocka_unit_test(test_update_compare_and_write),
        cmocka_unit_test_teardown(test_xfs_reflink, xfs_teardown_fn),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return rc;
}
