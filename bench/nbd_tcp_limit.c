/*
 * The loopback TCP ceiling for bench/nbd.sh: one connection over 127.0.0.1,
 * the sender writing 1 MiB buffers, the receiver reading into 1 MiB buffers
 * (the shape of an NBD 1 MiB sequential read without any server work).
 * Prints MiB/s. Usage: nbd_tcp_limit [SECONDS]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF (1 << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? strtod(argv[1], NULL) : 3.0;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) < 0) {
        perror("listen");
        return 1;
    }
    char *buf = malloc(BUF);
    if (!buf)
        return 1;
    memset(buf, 0x5a, BUF);
    pid_t pid = fork();
    if (pid == 0) { /* sender (the "server") */
        int s = accept(ls, NULL, NULL);
        int one = 1;
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        for (;;) {
            size_t off = 0;
            while (off < BUF) {
                ssize_t n = send(s, buf + off, BUF - off, MSG_NOSIGNAL);
                if (n <= 0)
                    _exit(0);
                off += (size_t)n;
            }
        }
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0) {
        perror("connect");
        return 1;
    }
    double t0 = now(), t;
    unsigned long long total = 0;
    while ((t = now()) - t0 < secs) {
        ssize_t n = recv(c, buf, BUF, MSG_WAITALL);
        if (n <= 0)
            break;
        total += (unsigned long long)n;
    }
    close(c);
    waitpid(pid, NULL, 0);
    printf("%.0f\n", (double)total / (1 << 20) / (t - t0));
    return 0;
}
