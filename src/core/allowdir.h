/*
 * Host directories in which API calls may name files the daemon creates or
 * reads by path, other than pool files (store/poolfs.h): the NBD Unix
 * socket (nbd.global.update unix_socket) and the NBD TLS credential files
 * (tls_cert, tls_key, tls_ca, tls_psk_file).
 *
 * The state directory is always one (the daemon adds it at start-up); the
 * operator adds others with `blockd --allow-dir DIR` (repeatable). An API
 * client can therefore not make the daemon replace, create or read files
 * anywhere else on the host.
 *
 * Threads: allowdir_add only at start-up, before API threads run;
 * allowdir_check from any thread afterwards.
 */
#ifndef BLOCKD_CORE_ALLOWDIR_H
#define BLOCKD_CORE_ALLOWDIR_H

#include <stdbool.h>
#include <stddef.h>

#define ALLOWDIR_MAX 16

/* Add a directory (resolved with realpath now). 0, -errno, -ENOSPC. */
int allowdir_add(const char *dir);
/*
 * The directory part of path (absolute) into dir (len bytes), checked to
 * exist and to be canonical (realpath gives it back: no symlink on the
 * way). 0, -ENAMETOOLONG, or -errno / -EINVAL with the reason in why.
 */
int allowdir_canonical_parent(const char *path, char *dir, size_t len, char *why, size_t whylen);
/* Forget every directory (tests). */
void allowdir_clear(void);

/*
 * Whether path may be named: absolute, no "", "." or ".." component, and
 * its directory, which must exist and be canonical (realpath gives it back:
 * no symlink on the way), is an allowed directory or below one. The last
 * component is not looked at (the caller checks its type with lstat).
 * 0 or -EINVAL / -errno with the reason (naming the allowed directories)
 * in why.
 */
int allowdir_check(const char *path, char *why, size_t whylen);

/*
 * Whether path (absolute, canonical: the caller checks) lies strictly
 * below an allowed directory other than skip (NULL: none skipped), by
 * string comparison only. Pools use it: a pool directory may be below a
 * --allow-dir directory, while the state directory, which is always
 * allowed, holds pools only in its pools/ folder (the caller's rule).
 */
bool allowdir_below(const char *path, const char *skip);
/* The allowed directories, ", "-separated, into buf (for messages). */
void allowdir_list(char *buf, size_t len);

#endif
