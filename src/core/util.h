/* Small helpers shared by every module. */
#ifndef BLOCKD_CORE_UTIL_H
#define BLOCKD_CORE_UTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>

/* snprintf into a reason or message buffer that may cut the text to len
 * (always terminated when len > 0; nothing written when buf is NULL or len
 * 0). The same as snprintf, but meant to cut: -Wformat-truncation does not
 * flag its callers. */
void str_printf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/*
 * Scope-bound cleanup (__attribute__((cleanup)), as nbdkit's cleanup.h):
 * a variable declared with one of these is released when it goes out of
 * scope, on every return path, so error paths need no free-and-return
 * chains. Ownership can still leave the scope: set the variable to NULL
 * (or -1 for a descriptor) after handing it on.
 *
 *   CLEANUP_FREE char *buf = malloc(n);
 *   CLEANUP_CLOSE int fd = open(path, O_RDONLY);
 *
 * A module's own release function gets a cleanup with
 * DEFINE_CLEANUP(type, fn) next to its declaration (called only for a
 * non-NULL pointer), used as CLEANUP(fn) type *x = ...;
 */
static inline void cleanup_free(void *p)
{
    free(*(void **)p);
}
void cleanup_close(int *fd); /* util.c: close(*fd) when *fd >= 0 */
#define CLEANUP_FREE __attribute__((cleanup(cleanup_free)))
#define CLEANUP_CLOSE __attribute__((cleanup(cleanup_close)))
#define DEFINE_CLEANUP(type, fn)                                                                   \
    static inline void cleanup_##fn(type **p)                                                      \
    {                                                                                              \
        if (*p)                                                                                    \
            fn(*p);                                                                                \
    }
#define CLEANUP(fn) __attribute__((cleanup(cleanup_##fn)))

/* "10G", "512", "4k", "1.5M"? no: integers with optional K/M/G/T/P suffix
 * (binary, case-insensitive, optional trailing "B"/"iB"). 0 or -EINVAL/-ERANGE. */
int parse_size(const char *s, uint64_t *out);
/* "1.0 GiB"-style human size into buf. */
void format_size(uint64_t v, char *buf, size_t len);

/* "ADDR:PORT", "[v6]:PORT" or ":PORT" → sockaddr. 0 or -EINVAL. */
int parse_host_port(const char *s, struct sockaddr_storage *out, socklen_t *len);
/* Printable "addr:port" of a socket address. */
void format_sockaddr(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen);

/* The value of one hexadecimal digit (either case), or -1. */
static inline int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decode hexlen hex digits (an even count; no prefix) into out, pair by
 * pair: a pair with a non-hex digit is -EINVAL, a pair past max bytes is
 * -E2BIG (whichever comes first). Returns the byte count. Pure. */
int hex_decode(const char *hex, size_t hexlen, uint8_t *out, size_t max);

/* Send all of buf on a socket, retrying on EINTR and short sends, without
 * SIGPIPE (MSG_NOSIGNAL: a peer that has gone is -EPIPE, not a signal).
 * Blocking sockets only. 0 or -errno. */
int send_all(int fd, const void *buf, size_t len);

/* pwrite all of buf at off, retrying on EINTR and short writes. 0 or
 * -errno (-EIO when the kernel writes nothing). */
int pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

/* Start fn(arg) on a new detached thread (it cleans up after itself; no
 * one joins it). 0 or -errno (pthread_create's error). */
int thread_start_detached(void *(*fn)(void *), void *arg);

/* Add to a statistics counter that one thread writes and others read:
 * a relaxed load and store, no locked read-modify-write. */
static inline void counter_add(_Atomic uint64_t *v, uint64_t n)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

/* Big-endian loads/stores for protocol headers. */
static inline uint16_t be16_load(const void *p)
{
    const uint8_t *b = p;
    return (uint16_t)((b[0] << 8) | b[1]);
}
static inline uint32_t be32_load(const void *p)
{
    const uint8_t *b = p;
    return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}
static inline uint64_t be64_load(const void *p)
{
    const uint8_t *b = p;
    return ((uint64_t)be32_load(b) << 32) | be32_load(b + 4);
}
static inline void be16_store(void *p, uint16_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)(v >> 8);
    b[1] = (uint8_t)v;
}
static inline void be32_store(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}
static inline void be64_store(void *p, uint64_t v)
{
    be32_store(p, (uint32_t)(v >> 32));
    be32_store((uint8_t *)p + 4, (uint32_t)v);
}

#endif
