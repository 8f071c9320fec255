#include "daemon/sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

bool sdnotify_enabled(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    return path && *path;
}

int sdnotify_send(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 0;
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    size_t len = strlen(path);
    if (len >= sizeof(sun.sun_path))
        return -ENAMETOOLONG;
    memcpy(sun.sun_path, path, len);
    if (sun.sun_path[0] == '@')
        sun.sun_path[0] = 0; /* abstract namespace */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sun,
               (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

uint64_t sdnotify_watchdog_usec(void)
{
    const char *usec = getenv("WATCHDOG_USEC");
    if (!usec || !*usec)
        return 0;
    /* WATCHDOG_PID names the process meant (a child inheriting the
     * environment must not take the pings over). */
    const char *pid = getenv("WATCHDOG_PID");
    char *end;
    if (pid && *pid) {
        errno = 0;
        unsigned long long p = strtoull(pid, &end, 10);
        if (errno || *end || p != (unsigned long long)getpid())
            return 0;
    }
    errno = 0;
    unsigned long long v = strtoull(usec, &end, 10);
    if (errno || *end || end == usec)
        return 0;
    return (uint64_t)v;
}
