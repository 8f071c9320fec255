/*
 * One NBD connection, shared by the three files that serve it (private to
 * src/nbd):
 *
 *   nbd_conn.c          the connection's life: admission, the registry
 *                       (nbd.global.sessions, export delete), the input
 *                       loop that hands bytes to the phase the connection
 *                       is in, the switch from handshake to transmission,
 *                       the handshake deadline, close, shutdown drain.
 *   nbd_handshake.c     the fixed-newstyle handshake and option haggling
 *                       (nbd_handshake.h).
 *   nbd_transmission.c  requests, payloads, replies, flow control
 *                       (nbd_transmission.h).
 *
 * Threads: a struct nbd_conn is touched only on the reactor that owns its
 * struct conn, except the fields the registry exposes to API threads (see
 * nbd_sessions_list in nbd_conn.c): exp (set under the registry lock) and
 * the st_* counters (atomics).
 */
#ifndef BLOCKD_NBD_CONN_INTERNAL_H
#define BLOCKD_NBD_CONN_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/admit.h"
#include "core/conn.h"
#include "core/reactor.h"
#include "core/registry.h"
#include "nbd/nbd_export.h"
#include "nbd/nbd_proto.h"

/* Ignored payloads (an option too long to read, a refused WRITE) longer
 * than this close the connection instead of being skipped. */
#define NBD_SKIP_MAX (256u << 20)

enum nbd_state { ST_CLIENT_FLAGS, ST_OPTIONS, ST_TRANSMISSION };

struct nbd_req; /* nbd_transmission.c */

struct nbd_conn {
    struct conn *c;
    enum nbd_state state;
    /* negotiated in the handshake */
    bool no_zeroes;
    bool structured;
    bool meta_alloc;
    /* the qemu:dirty-bitmap context selected (its map), and a lookup of
     * them in progress for the option being answered (nbd_dirty.h) */
    struct nbd_dirty *dirty;
    struct nbd_dirty *dirty_lookup;
    unsigned dirty_waits; /* handshake deadlines extended for a lookup */
    bool tls;
    bool starttls_pending;
    unsigned options;
    struct nbd_settings *settings;
    struct nbd_export *exp; /* transmission: the export in use (ref) */
    struct volume *vol;
    int mslot; /* iostats slot of vol, -1 none */
    struct nbd_session_caps caps;
    /* transmission */
    bool disconnecting;
    bool paused;
    bool in_input;
    bool kick_posted;
    struct nbd_req *free_reqs;
    unsigned inflight;
    size_t held;
    struct nbd_req *rx_req; /* WRITE whose payload is arriving */
    uint32_t rx_got;
    uint64_t skip; /* bytes of input to discard (either phase) */
    /* A refused WRITE is answered only after its payload has been skipped:
     * clients (libnbd) match replies only to fully sent requests. */
    bool skip_reply;
    uint32_t skip_error;
    uint64_t skip_cookie;
    struct reactor_msg kick;
    /* Retries parsing while replies the client has not read pile up. */
    struct reactor_timer backlog_timer;
    /* in the registry of live connections (nbd_export_connections) */
    struct registry_entry reg;
    /* nbd.global.sessions: written by the reactor only (counter_add), read
     * by API threads under the registry's lock */
    uint64_t connected_at;
    _Atomic uint64_t st_requests, st_read, st_written;
    /* admission (pending until the handshake ends) and its deadline */
    struct admit_ticket ticket;
    struct reactor_timer handshake_timer;
    /* GO/INFO/EXPORT_NAME of an export whose pool is not reachable yet:
     * input paused, the option retried by this timer; since when (ns,
     * 0: not waiting) */
    struct reactor_timer unavail_timer;
    uint64_t unavail_since;
    /* shutdown: no new requests; close once replies are sent */
    bool draining;
    struct reactor_msg drain_msg;
};

/* The handshake is over: serve export e (a reference is taken) with the
 * transmission flags eflags. Publishes the negotiated state to the
 * registry, promotes the admission ticket, stops the handshake deadline.
 * Called by nbd_handshake.c on GO and EXPORT_NAME. Thread: owner reactor. */
void nbd_conn_enter_transmission(struct nbd_conn *nc, struct nbd_export *e, uint16_t eflags);
/* Stop reading input and process it again after ns (the option at the
 * head of the input is kept): an export becoming ready. Owner reactor. */
void nbd_conn_retry_input(struct nbd_conn *nc, uint64_t ns);

#endif
