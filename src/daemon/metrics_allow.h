/*
 * Addresses allowed to read /metrics without an API key (--metrics-allow
 * CIDR[,CIDR]...): a Prometheus server on a management network usually
 * scrapes without credentials. Everyone else still needs a key.
 *
 * Set at start-up (flag parsing, one thread); matched from any API thread
 * afterwards (read-only then).
 */
#ifndef BLOCKD_DAEMON_METRICS_ALLOW_H
#define BLOCKD_DAEMON_METRICS_ALLOW_H

#include <stdbool.h>
#include <sys/socket.h>

#define METRICS_ALLOW_MAX 32

/*
 * Add a comma-separated list of networks: "10.0.0.0/8,192.0.2.7,::1/128,
 * fd00::/8" (an address without /N is that host). Returns 0, -EINVAL (not
 * an address, prefix too long, host bits set, empty item) or -ENOSPC (more
 * than METRICS_ALLOW_MAX in all); on error nothing of this list is added.
 */
int metrics_allow_add(const char *list);

/* Is the peer inside one of the networks? An IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d) matches as its IPv4 address. false for NULL. */
bool metrics_allow_match(const struct sockaddr *sa);

/* How many networks are configured (0: keys only). */
unsigned metrics_allow_count(void);

#endif
