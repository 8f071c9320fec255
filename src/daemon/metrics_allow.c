/* Networks allowed to scrape /metrics without a key; see metrics_allow.h. */
#include "daemon/metrics_allow.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct net {
    int family;       /* AF_INET or AF_INET6 */
    uint8_t addr[16]; /* network address, 4 or 16 bytes used */
    unsigned prefix;  /* bits */
};

static struct net nets[METRICS_ALLOW_MAX];
static unsigned nnets;

static bool prefix_equal(const uint8_t *a, const uint8_t *b, unsigned bits)
{
    unsigned bytes = bits / 8, rest = bits % 8;
    if (memcmp(a, b, bytes) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[bytes] & mask) == (b[bytes] & mask);
}

static int parse_one(const char *s, size_t n, struct net *out)
{
    char buf[INET6_ADDRSTRLEN + 8];
    if (n == 0 || n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *slash = strchr(buf, '/');
    long prefix = -1;
    if (slash) {
        char *end;
        *slash = '\0';
        if (!slash[1] || slash[1] == '-' || slash[1] == '+')
            return -EINVAL;
        errno = 0;
        prefix = strtol(slash + 1, &end, 10);
        if (errno || *end || end == slash + 1)
            return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        if (prefix < 0)
            prefix = 32;
        if (prefix > 32)
            return -EINVAL;
    } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
        if (prefix < 0)
            prefix = 128;
        if (prefix > 128)
            return -EINVAL;
    } else {
        return -EINVAL;
    }
    out->prefix = (unsigned)prefix;
    /* Host bits set ("10.1.2.3/8") is most likely a typo for a host or a
     * different network: refuse rather than guess. */
    unsigned len = out->family == AF_INET ? 32 : 128;
    for (unsigned b = out->prefix; b < len; b++)
        if (out->addr[b / 8] & (0x80 >> (b % 8)))
            return -EINVAL;
    return 0;
}

int metrics_allow_add(const char *list)
{
    struct net add[METRICS_ALLOW_MAX];
    unsigned n = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (nnets + n >= METRICS_ALLOW_MAX)
            return -ENOSPC;
        int rc = parse_one(p, len, &add[n]);
        if (rc < 0)
            return rc;
        n++;
        if (!comma)
            break;
        p = comma + 1;
    }
    memcpy(&nets[nnets], add, n * sizeof(add[0]));
    nnets += n;
    return 0;
}

bool metrics_allow_match(const struct sockaddr *sa)
{
    if (!sa)
        return false;
    int family;
    const uint8_t *a;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (sa->sa_family == AF_INET) {
        family = AF_INET;
        a = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    } else if (sa->sa_family == AF_INET6) {
        a = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
        family = AF_INET6;
        if (memcmp(a, mapped, sizeof(mapped)) == 0) {
            family = AF_INET;
            a += 12;
        }
    } else {
        return false;
    }
    for (unsigned i = 0; i < nnets; i++)
        if (nets[i].family == family && prefix_equal(nets[i].addr, a, nets[i].prefix))
            return true;
    return false;
}

unsigned metrics_allow_count(void)
{
    return nnets;
}
