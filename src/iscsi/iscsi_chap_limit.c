/* Throttling of failed CHAP logins (see iscsi_chap.h), on core/ratelimit. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "core/ratelimit.h"
#include "iscsi/iscsi_chap.h"

static struct ratelimit chap_rl =
    RATELIMIT_INIT(ISCSI_CHAP_FAIL_MAX, ISCSI_CHAP_FAIL_WINDOW_MS, ISCSI_CHAP_BLOCK_MS);

/* A login's two keys in the table: "t:<target> iqn:<name>" and
 * "t:<target> ip:<address>" (an IPv4-mapped IPv6 peer counts as its IPv4
 * address). The target is a 64-bit FNV-1a hash of its name, so that a key
 * never exceeds the table's key length (an IQN alone may take 223 bytes):
 * each target has its own secret, and a success on one must not reset the
 * count of guesses against another. */
struct chap_keys {
    char name[RATELIMIT_KEY_MAX];
    char addr[96];
};

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static void keys_of(const char *initiator, const char *target, const struct sockaddr_storage *ss,
                    struct chap_keys *k)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    uint64_t t = fnv1a(target ? target : "");
    snprintf(k->name, sizeof(k->name), "t:%016" PRIx64 " iqn:%s", t, initiator);
    if (ss->ss_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, ip, sizeof(ip));
    } else if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a))
            inet_ntop(AF_INET, &a->s6_addr[12], ip, sizeof(ip));
        else
            inet_ntop(AF_INET6, a, ip, sizeof(ip));
    }
    snprintf(k->addr, sizeof(k->addr), "t:%016" PRIx64 " ip:%s", t, ip);
}

uint64_t iscsi_chap_limit_check(const char *initiator, const char *target,
                                const struct sockaddr_storage *peer, const char **what)
{
    struct chap_keys k;
    keys_of(initiator, target, peer, &k);
    uint64_t now = ratelimit_now_ms();
    uint64_t a = ratelimit_blocked_for(&chap_rl, k.addr, now);
    uint64_t n = ratelimit_blocked_for(&chap_rl, k.name, now);
    *what = a >= n ? "address" : "initiator";
    return a > n ? a : n;
}

bool iscsi_chap_limit_failed(const char *initiator, const char *target,
                             const struct sockaddr_storage *peer)
{
    struct chap_keys k;
    keys_of(initiator, target, peer, &k);
    uint64_t now = ratelimit_now_ms();
    bool a = ratelimit_failed(&chap_rl, k.addr, now);
    bool n = ratelimit_failed(&chap_rl, k.name, now);
    return a || n;
}

void iscsi_chap_limit_succeeded(const char *initiator, const char *target,
                                const struct sockaddr_storage *peer)
{
    struct chap_keys k;
    keys_of(initiator, target, peer, &k);
    ratelimit_succeeded(&chap_rl, k.addr);
    ratelimit_succeeded(&chap_rl, k.name);
}

void iscsi_chap_limit_reset(void)
{
    ratelimit_reset(&chap_rl);
}
