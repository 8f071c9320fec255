/*
 * poolfs: every file operation inside a pool goes through here.
 *
 * A pool is a directory ("root"). Datasets, snapshots, copy temporaries
 * and FILE extents are files below it. The API names them with strings
 * that a client controls (dataset names, extent paths), and other local
 * users may be able to write inside a pool directory, so a path built by
 * string concatenation ("<root>/<name>") must never be handed to open(2):
 * a symlink planted at any component would send the open (or a create, a
 * truncate, an unlink) outside the pool.
 *
 * The rules, applied by every function below:
 *   - the absolute path given must lie lexically inside a registered root
 *     (poolfs_root_add) — else -EXDEV;
 *   - the part below the root must be made of plain components: no "",
 *     ".", ".." — else -EINVAL;
 *   - it is resolved relative to an O_PATH descriptor of the root that is
 *     kept open, with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): no
 *     symlink anywhere (ELOOP) and no escape (EXDEV). On kernels without
 *     openat2 (ENOSYS, before 5.6) each component is opened with
 *     O_NOFOLLOW relative to the previous one, which refuses the same
 *     things (the fallback is tested: poolfs_force_fallback);
 *   - the root itself is opened (once, again if it was removed and made
 *     anew) from "/" with the same rule, so the stored pool path must be
 *     canonical.
 * Directory-changing calls (mkdir, unlink, rmdir, rename, link) resolve
 * the PARENT this way and then act with mkdirat/unlinkat/renameat2/linkat
 * on the last component, which is never followed.
 *
 * Return values: a descriptor / 0, or -errno (-EXDEV: outside every pool
 * or escaping it; -ELOOP: a symlink on the way; -EINVAL: "..", "." or an
 * empty component). Nothing here logs: callers log with the peer.
 *
 * Threads: every function is thread-safe (the root table has a rwlock;
 * the syscalls run under its read side, so a root is never closed while
 * in use). Blocking (filesystem calls): API/control threads and I/O pool
 * jobs, never a reactor.
 */
#ifndef BLOCKD_STORE_POOLFS_H
#define BLOCKD_STORE_POOLFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Up to this many roots (pools plus extra export roots). */
#define POOLFS_ROOTS_MAX 256

/* Register a root: an absolute, canonical directory path (no symlink
 * components, no trailing '/', not "/"). Opens it now (O_PATH); -ELOOP if
 * a component is a symlink, -ENOTDIR, -ENOENT, -ENOSPC when the table is
 * full. Registering a path again is a no-op (0). Roots must not nest
 * (-EEXIST if one contains the other). */
int poolfs_root_add(const char *root);
/* Forget a root (its descriptor is closed). */
void poolfs_root_remove(const char *root);
/* Forget every root (shutdown, tests). */
void poolfs_root_clear(void);
/* The registered root containing path (lexically), copied into buf: 0, or
 * -EXDEV if none. */
int poolfs_root_of(const char *path, char *buf, size_t len);

/* open(path, flags, mode) confined as described above. O_NOFOLLOW and
 * O_CLOEXEC are always added. Returns a descriptor or -errno. The path may
 * be the root itself (e.g. to fsync it). */
int poolfs_open(const char *path, int flags, mode_t mode);
/* Create a unique file from tmpl ("…XXXXXX", modified in place) with
 * O_RDWR | O_CREAT | O_EXCL | flags, mode 0600, like mkostemp. */
int poolfs_mkstemp(char *tmpl, int flags);
/* fstatat(AT_SYMLINK_NOFOLLOW) of path: a symlink is reported as one
 * (S_ISLNK), never followed. */
int poolfs_stat(const char *path, struct stat *st);
int poolfs_mkdir(const char *path, mode_t mode);
/* mkdir -p of the components of path below its root (mode 0755). */
int poolfs_mkdir_parents(const char *path);
int poolfs_unlink(const char *path);
int poolfs_rmdir(const char *path);
/* renameat2 within one root (-EXDEV across roots); flags: RENAME_NOREPLACE
 * etc. A filesystem without RENAME_NOREPLACE gives -EINVAL, as renameat2. */
int poolfs_rename(const char *from, const char *to, unsigned flags);
int poolfs_link(const char *from, const char *to);
/* truncate(path, size) without following a symlink. */
int poolfs_truncate(const char *path, uint64_t size);
/* fsync the directory that contains path. */
int poolfs_fsync_parent(const char *path);
/* Give the finished temporary file tmp its final name dst, never replacing
 * an existing dst (-EEXIST): renameat2(RENAME_NOREPLACE), or link + unlink
 * on a filesystem without it. The caller fsyncs the parent afterwards. */
int poolfs_publish(const char *tmp, const char *dst);

/*
 * The primitive, for a descriptor the caller holds: open rel (relative,
 * plain components; "" or "." is dirfd itself) beneath dirfd, refusing
 * symlinks and escapes. flags as openat; O_NOFOLLOW | O_CLOEXEC added.
 */
int poolfs_openat(int dirfd, const char *rel, int flags, mode_t mode);

/*
 * Whether path may become a pool root, given the daemon's state directory
 * (may be NULL) and the roots already registered: absolute; canonical
 * (realpath(path) equals path: no symlink component, no "." / ".." / "//",
 * no trailing '/'); an existing directory; on a disk-backed filesystem or
 * tmpfs (not procfs, sysfs, devpts, cgroup, debugfs, …); not a system
 * directory or inside one (/etc, /proc, /sys, /dev, /boot, /usr, /bin,
 * /sbin, /lib*, /run, /var/run, /root, /) and not the state directory
 * itself or a directory above it (which would hold the DB), nor
 * STATE/pools itself; STATE/pools/NAME is accepted even when the state
 * directory lies in a system directory. 0, or -EINVAL / -errno with the
 * reason in why.
 */
int poolfs_root_check(const char *path, const char *state_dir, char *why, size_t whylen);

/* mkdir -p of a root-to-be (mode 0755), every existing component reached
 * without symlinks from "/" (-ELOOP), so a symlink swapped in between
 * poolfs_root_check and this call is not followed. */
int poolfs_root_make(const char *root);

/* Tests: use the O_NOFOLLOW walk even where openat2 exists. */
void poolfs_force_fallback(bool on);

#endif
