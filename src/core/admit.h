/*
 * Connection admission for one protocol (NBD, iSCSI, WebSocket API): a cap
 * on all its connections, a smaller cap on connections that have not yet
 * finished their handshake / login / authentication ("pending"), and a cap
 * on pending connections per remote address. Pending connections can never
 * take the room kept for established sessions (the pending cap is at most
 * three quarters of the total), so idle or slow peers cannot lock real
 * clients out; the handshake deadline (admit_handshake_timeout_ns) then
 * clears them. Unix-socket peers are counted but have no per-address cap.
 *
 * A full pending room does not refuse the newcomer: it evicts the oldest
 * pending connection of the address that holds the most pending ones (the
 * gate shuts that socket down; its owner sees end-of-file and closes it as
 * usual). A handful of addresses filling the room with idle sockets thus
 * only evict each other, while a real client, which has one connection in
 * its handshake, gets in and has the whole handshake deadline to finish.
 * Addresses are counted per IPv4 address and per IPv6 /64 prefix (a host
 * usually owns a whole /64), so one IPv6 host cannot pose as many.
 * The gate holds a duplicate of each pending connection's socket (one more
 * file descriptor while pending; blockd raises its descriptor limit to the
 * hard limit at start), closed when the connection is promoted, released
 * or evicted.
 *
 * Refusals and drops are logged with the peer, one line per event, at most
 * ADMIT_LOG_BURST lines per second per gate (then a count of the lines
 * suppressed). All functions are thread-safe.
 */
#ifndef BLOCKD_CORE_ADMIT_H
#define BLOCKD_CORE_ADMIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define ADMIT_DEFAULT_HANDSHAKE_S 10
#define ADMIT_DEFAULT_MAX_PENDING 128
#define ADMIT_DEFAULT_MAX_PENDING_PER_ADDR 16
#define ADMIT_LOG_BURST 10

struct admit_addr {
    uint8_t key[17]; /* family byte + IPv4 address or IPv6 /64 (IPv4-mapped folded) */
    unsigned pending;
};

/* One pending connection, oldest first in the gate's list. */
struct admit_pend {
    uint64_t id;
    uint8_t key[17];
    int fd; /* the gate's own dup of the socket (to shut it down); -1: none */
    char peer[64];
};

struct admit_gate {
    const char *name; /* "nbd", "iscsi", "api-ws": log prefix */
    pthread_mutex_t lock;
    unsigned max_total;
    unsigned total, pending;
    struct admit_addr *addrs; /* one entry per address with pending > 0 */
    unsigned naddrs, addrs_cap;
    struct admit_pend *pend; /* every pending connection, oldest first */
    unsigned npend, pend_cap;
    uint64_t next_id;
    uint64_t evictions; /* in all (tests, logs) */
    /* rate limit of the log lines */
    uint64_t log_window_ns;
    unsigned log_lines, log_suppressed;
};

/* Static initializer; max_total is the protocol's connection cap. */
#define ADMIT_GATE_INIT(gname, total)                                                              \
    {                                                                                              \
        .name = (gname), .lock = PTHREAD_MUTEX_INITIALIZER, .max_total = (total)                   \
    }

/* A connection's place in a gate; embedded in the connection's state. */
struct admit_ticket {
    struct admit_gate *gate;
    uint64_t id; /* its struct admit_pend while pending */
    uint8_t key[17];
    bool held;    /* counted in the gate */
    bool pending; /* counted as pending (and per address) */
    bool evicted; /* the gate evicted it: its counts are already gone */
};

/* Daemon-wide settings (blockd flags); call before the front-ends start.
 * 0 leaves a value unchanged. */
void admit_configure(unsigned handshake_s, unsigned max_pending, unsigned max_pending_per_addr);
/* The handshake / login / authentication deadline, in nanoseconds. */
uint64_t admit_handshake_timeout_ns(void);
unsigned admit_handshake_timeout_s(void);

/* Change a gate's total cap (e.g. nbd.global.update max_connections). */
void admit_set_max_total(struct admit_gate *g, unsigned max_total);

/* Admit a new connection on socket fd as pending. 0 (t filled in: release
 * it with admit_release, before closing fd), or -EBUSY after logging,
 * rate-limited, which cap refused peer (peer_name names it in the log
 * line). When the pending room is full an older pending connection may be
 * evicted instead (logged, naming it and the newcomer): the gate keeps a
 * duplicate of fd while the connection is pending and shuts the socket
 * down to evict it. fd -1: the connection cannot be evicted (tests). The
 * ticket may be copied (it is found by id). */
int admit_try(struct admit_gate *g, int fd, const struct sockaddr *peer, socklen_t peerlen,
              const char *peer_name, struct admit_ticket *t);
/* The connection finished its handshake / login / authentication: it no
 * longer counts as pending. Idempotent. */
void admit_promote(struct admit_ticket *t);
/* The connection is gone. Idempotent; a zeroed ticket is a no-op. */
void admit_release(struct admit_ticket *t);
/* True while t is still counted as pending: false once it was promoted,
 * released or evicted. */
bool admit_is_pending(struct admit_ticket *t);
/* Counts now (tests, logs). */
void admit_counts(struct admit_gate *g, unsigned *total, unsigned *pending);

/* Log a warning line about gate g, at most ADMIT_LOG_BURST per second. */
void admit_log(struct admit_gate *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
