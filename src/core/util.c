#include "core/util.h"

#include <stdarg.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

int parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || !isdigit((unsigned char)*s))
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    unsigned shift = 0;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K':
            shift = 10;
            break;
        case 'M':
            shift = 20;
            break;
        case 'G':
            shift = 30;
            break;
        case 'T':
            shift = 40;
            break;
        case 'P':
            shift = 50;
            break;
        case 'B':
            shift = 0;
            end--;
            break;
        default:
            return -EINVAL;
        }
        end++;
        /* Accept "K", "KB", "KiB" (all binary). */
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
        if (*end)
            return -EINVAL;
    }
    if (shift && v > (UINT64_MAX >> shift))
        return -ERANGE;
    *out = (uint64_t)v << shift;
    return 0;
}

void format_size(uint64_t v, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    unsigned u = 0;
    double d = (double)v;
    while (d >= 1024.0 && u + 1 < ARRAY_SIZE(units)) {
        d /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)v);
    else
        snprintf(buf, len, "%.1f %s", d, units[u]);
}

int parse_host_port(const char *s, struct sockaddr_storage *out, socklen_t *len)
{
    char host[256];
    const char *colon;
    memset(out, 0, sizeof(*out));
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        size_t hl = (size_t)(close - s - 1);
        if (hl >= sizeof(host))
            return -EINVAL;
        memcpy(host, s + 1, hl);
        host[hl] = 0;
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        size_t hl = (size_t)(colon - s);
        if (hl >= sizeof(host))
            return -EINVAL;
        memcpy(host, s, hl);
        host[hl] = 0;
    }
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (errno || *end || colon[1] == 0 || port > 65535)
        return -EINVAL;
    struct sockaddr_in *sin = (struct sockaddr_in *)out;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)out;
    if (host[0] == 0 || strcmp(host, "*") == 0) {
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_ANY);
        sin->sin_port = htons((uint16_t)port);
        *len = sizeof(*sin);
    } else if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)port);
        *len = sizeof(*sin);
    } else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)port);
        *len = sizeof(*sin6);
    } else if (strcmp(host, "localhost") == 0) {
        sin->sin_family = AF_INET;
        sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sin->sin_port = htons((uint16_t)port);
        *len = sizeof(*sin);
    } else {
        return -EINVAL;
    }
    return 0;
}

void format_sockaddr(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen)
{
    char host[INET6_ADDRSTRLEN];
    if (!sa || len == 0) {
        snprintf(buf, buflen, "unknown");
    } else if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
        snprintf(buf, buflen, "%s:%u", host, ntohs(sin->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
        snprintf(buf, buflen, "[%s]:%u", host, ntohs(sin6->sin6_port));
    } else if (sa->sa_family == AF_UNIX) {
        snprintf(buf, buflen, "unix");
    } else {
        snprintf(buf, buflen, "family-%d", sa->sa_family);
    }
}

int hex_decode(const char *hex, size_t hexlen, uint8_t *out, size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i + 1 < hexlen; i += 2) {
        int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        if (n >= max)
            return -E2BIG;
        out[n++] = (uint8_t)(hi << 4 | lo);
    }
    return hexlen % 2 ? -EINVAL : (int)n;
}

int send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        /* A regular file never writes 0 of n > 0 bytes; do not spin if
         * something else does. */
        if (n == 0)
            return -EIO;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int thread_start_detached(void *(*fn)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return -rc;
}

void cleanup_close(int *fd)
{
    if (*fd >= 0)
        close(*fd);
}

void str_printf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (!buf || len == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}
