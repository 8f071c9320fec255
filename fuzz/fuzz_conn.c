/* See fuzz_conn.h. */
#include "fuzz_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

void fuzz_conn_talk(int fd, const uint8_t *data, size_t len)
{
    size_t off = 0;
    uint8_t sink[65536];
    int idle = 0;
    bool shut = false;

    fcntl(fd, F_SETFL, O_NONBLOCK);
    for (;;) {
        struct pollfd pfd = {fd, POLLIN | (off < len ? POLLOUT : 0), 0};
        int pr = poll(&pfd, 1, 20);
        if (pr == 0) {
            /* Nothing more to say and nothing coming back: hang up. */
            if (off >= len && ++idle > 3)
                break;
            continue;
        }
        idle = 0;
        if (pfd.revents & POLLOUT && off < len) {
            /* MSG_NOSIGNAL: a server that closed on bad input must not
             * kill the fuzzer with SIGPIPE. */
            ssize_t w = send(fd, data + off, len - off, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (w < 0 && errno != EAGAIN)
                off = len;
        }
        if (off >= len && !shut) {
            shutdown(fd, SHUT_WR);
            shut = true;
        }
        if (pfd.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = recv(fd, sink, sizeof(sink), 0);
            if (r == 0 || (r < 0 && errno != EAGAIN))
                break;
        }
    }
    close(fd);
}
