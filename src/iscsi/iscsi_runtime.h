/*
 * The contract between the iSCSI transport (src/iscsi/ — PDUs, login,
 * sessions) and the iSCSI configuration (src/iscsi/config/ and its
 * runtime publisher src/iscsi/config_*.c — targets, portals, initiator
 * groups, CHAP, extents, LUN maps).
 *
 * Direction 1, config → transport: the iSCSI part of the configuration
 * generation (control/confgen.h): struct iscsi_conf below, immutable and
 * refcounted, holding immutable, refcounted *views* of each target, the
 * discovery credentials and the portal addresses. The config side builds
 * it (config_runtime.c) and publishes it as a generation; the transport
 * reads it (iscsi_confview.c): at login (TargetName), for SendTargets,
 * and whenever iscsi_runtime_generation() changes a session re-fetches
 * its view (a LUN added/removed is seen by the next command).
 *
 * Direction 2, transport → config: the session registry (who is logged in to
 * what, with which negotiated parameters) for iscsi.global.sessions and for
 * target delete (refuse while sessions exist / close them with force), and
 * the listening sockets for portals. Implemented by the transport
 * (iscsi_server.c, iscsi_session.c).
 *
 * Threads: every function here is thread-safe unless stated otherwise.
 */
#ifndef BLOCKD_ISCSI_RUNTIME_H
#define BLOCKD_ISCSI_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "control/confgen.h"
#include "core/util.h"

struct scsi_lu; /* scsi/scsi.h */

#define ISCSI_NAME_MAX 224 /* RFC 7143 §4.2.7.1: 223 bytes + NUL */
#define ISCSI_ALIAS_MAX 256
#define ISCSI_CHAP_MAX 256 /* user / secret buffers incl. NUL */

enum iscsi_auth_method {
    ISCSI_AUTH_NONE = 0,
    ISCSI_AUTH_CHAP = 1,
    ISCSI_AUTH_CHAP_MUTUAL = 2,
};

/* One CHAP credential (an iscsi.auth row). peeruser/peersecret are the
 * target's own name/secret for mutual CHAP ("" when not set). */
struct iscsi_chap_cred {
    char user[ISCSI_CHAP_MAX];
    char secret[ISCSI_CHAP_MAX];
    char peeruser[ISCSI_CHAP_MAX];
    char peersecret[ISCSI_CHAP_MAX];
};

/* How a login must authenticate: a method and the credentials of the auth
 * tag (several iscsi.auth rows may share a tag; any of them is accepted, the
 * initiator picks by CHAP_N = user). */
struct iscsi_auth_policy {
    enum iscsi_auth_method method;
    const struct iscsi_chap_cred *creds; /* n_creds entries, owned by the view */
    size_t n_creds;
};

/* One entry of a target's `groups`. */
struct iscsi_target_group {
    uint16_t portal_tag; /* the portal's tag; a connection on portal tag 0
                            (--iscsi-listen) matches every group */
    /* Initiator IQNs allowed; n_initiators == 0 means every initiator. */
    const char *const *initiators;
    size_t n_initiators;
    struct iscsi_auth_policy auth;
};

/* An auth_networks entry: family AF_INET/AF_INET6, address bytes (4 or 16),
 * prefix length. */
struct iscsi_cidr {
    int family;
    uint8_t addr[16];
    uint8_t prefix;
};

struct iscsi_target_lun {
    uint64_t lun;       /* 0..16382 */
    struct scsi_lu *lu; /* held by the view (config takes and drops the ref) */
};

/*
 * An immutable snapshot of one target. Created by config with refs = 1 and
 * destroy set; anyone holding a pointer holds a reference
 * (iscsi_target_view_ref/unref). destroy() runs on whichever thread drops
 * the last reference, so it must not block for long.
 */
struct iscsi_target_view {
    int refs; /* atomic; use the helpers below */
    void (*destroy)(struct iscsi_target_view *v);
    uint64_t id;                 /* iscsi.target id */
    char iqn[ISCSI_NAME_MAX];    /* basename:name, lower case */
    char alias[ISCSI_ALIAS_MAX]; /* "" when none */
    uint16_t rel_tgt_id;         /* relative target port id for VPD 0x83 */
    /* Sorted by lun, no duplicates. */
    const struct iscsi_target_lun *luns;
    size_t n_luns;
    /* n_groups == 0: every initiator on every portal, no authentication. */
    const struct iscsi_target_group *groups;
    size_t n_groups;
    /* n_auth_networks == 0: every address. */
    const struct iscsi_cidr *auth_networks;
    size_t n_auth_networks;
};

static inline void iscsi_target_view_ref(struct iscsi_target_view *v)
{
    __atomic_add_fetch(&v->refs, 1, __ATOMIC_RELAXED);
}
static inline void iscsi_target_view_unref(struct iscsi_target_view *v)
{
    if (v && __atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) == 0)
        v->destroy(v);
}
/* CLEANUP(iscsi_target_view_unref) struct iscsi_target_view *v = ... (core/util.h) */
DEFINE_CLEANUP(struct iscsi_target_view, iscsi_target_view_unref)

/* ---- the iSCSI part of a configuration generation ---- */

/* Discovery-session authentication (iscsi.auth rows with discovery_auth
 * CHAP/CHAP_MUTUAL); shared by generations until it changes. */
struct iscsi_disc_auth {
    atomic_int refs;
    enum iscsi_auth_method method;
    size_t n_creds;
    struct iscsi_chap_cred creds[];
};

/* A portal address SendTargets reports (a wildcard is replaced by the
 * address the initiator reached). */
struct iscsi_portal_addr {
    uint16_t tag;
    int family;
    bool wildcard;
    char ip[INET6_ADDRSTRLEN];
    int port;
};

/* A socket the portals want open ("ip:port" / "[ip6]:port"). */
struct iscsi_listen_addr {
    char addr[80];
    uint16_t tag;
    bool override; /* the --iscsi-listen address */
};

/* The portals of a generation: what SendTargets reports and which sockets
 * listen (config_listen.c opens and closes them when this changes). */
struct iscsi_portals {
    atomic_int refs;
    struct iscsi_portal_addr *addrs;
    size_t n_addrs;
    struct iscsi_listen_addr *listen;
    size_t n_listen;
};

/* The iSCSI part (CONF_ISCSI). Built by config_runtime.c, never modified
 * once published; part.objs is byid. */
struct iscsi_conf {
    struct conf_part part;
    struct conf_obj *byid;            /* (target id, view), sorted by id */
    struct iscsi_target_view **byiqn; /* the same views by IQN, case-insensitive */
    size_t n;
    struct iscsi_disc_auth *disc;  /* NULL: discovery is open */
    struct iscsi_portals *portals; /* NULL: no portal */
};

/* The first index of c->byiqn whose IQN is not below iqn (compared
 * case-insensitively); c->n if none. Any thread (c is immutable). */
size_t iscsi_conf_lower_bound(const struct iscsi_conf *c, const char *iqn);

/* ---- implemented by the transport, from the current generation (iscsi_confview.c) ---- */

/* The published view of target iqn (compared case-insensitively), with a
 * reference the caller drops; NULL when no such target exists. */
struct iscsi_target_view *iscsi_runtime_find_target(const char *iqn);

/* Every published target, for SendTargets. *out is a malloc'd array of
 * referenced views (the transport filters by initiator/portal/network);
 * the caller unrefs each and frees the array. Returns the count or -errno. */
int iscsi_runtime_list_targets(struct iscsi_target_view ***out);

/* Discovery-session authentication (iscsi.auth rows with discovery_auth
 * CHAP/CHAP_MUTUAL). Fills *out with a copy the caller releases with
 * iscsi_auth_policy_clear(); method NONE and no creds when discovery is open.
 * Returns 0 or -errno. */
int iscsi_runtime_discovery_auth(struct iscsi_auth_policy *out);
/* Frees what iscsi_runtime_discovery_auth put in *p (creds array). */
void iscsi_auth_policy_clear(struct iscsi_auth_policy *p);

/* Changes whenever a generation with a new iSCSI part is published
 * (conf_part_number(CONF_ISCSI): one atomic load). */
uint64_t iscsi_runtime_generation(void);

/* ---- implemented by the transport ---- */

/* Negotiated state of one logged-in session (a copy; for iscsi.global.sessions). */
struct iscsi_session_info {
    char initiator[ISCSI_NAME_MAX]; /* InitiatorName */
    char initiator_alias[ISCSI_ALIAS_MAX];
    char initiator_addr[80];     /* "addr:port" */
    char target[ISCSI_NAME_MAX]; /* "" for discovery sessions */
    char target_addr[80];        /* local "addr:port" */
    uint64_t target_id;          /* iscsi_target_view.id, 0 for discovery */
    uint64_t isid;               /* 48 bits */
    uint16_t tsih;
    uint16_t portal_tag;
    bool discovery;
    bool header_digest; /* CRC32C */
    bool data_digest;
    bool immediate_data;
    bool initial_r2t;
    uint32_t max_recv_data_segment_length; /* the initiator's (what we send) */
    uint32_t max_xmit_data_segment_length; /* ours (what it sends) */
    uint32_t max_burst_length;
    uint32_t first_burst_length;
    uint32_t max_outstanding_r2t;
    uint32_t connections;
    uint64_t connected_at;  /* Unix seconds, at login */
    uint64_t commands;      /* SCSI commands answered */
    uint64_t bytes_read;    /* Data-In bytes sent */
    uint64_t bytes_written; /* bytes of writes that completed GOOD */
};

/* Snapshot of every full-feature session. *out is malloc'd (caller frees);
 * returns the count or -errno. */
int iscsi_sessions_list(struct iscsi_session_info **out);
/* Number of normal sessions logged in to target iqn. */
unsigned iscsi_sessions_count_target(const char *iqn);
/* Close every session of target iqn (asynchronously: the connections close
 * on their reactors shortly after). Returns how many were asked to close. */
unsigned iscsi_sessions_close_target(const char *iqn);

/* iSCSI connections in all (any phase), default 1024; logins in progress
 * are further capped by core/admit.h. Call before the server starts. */
void iscsi_server_set_max_connections(unsigned n);

/* Queue depth (CmdSN window) for new sessions: 1..4096, default 128. */
void iscsi_server_set_queue_depth(unsigned depth);
/* NOP-In ping: an idle full-feature connection (no PDU for interval_s) gets
 * a NOP-In; no answer within timeout_s closes it. A login that does not
 * progress for timeout_s is dropped too. 0 keeps the current value
 * (defaults 30 s / 30 s). */
void iscsi_server_set_nop(unsigned interval_s, unsigned timeout_s);

/* Listening. iscsi_server_start() reads the transport's environment
 * settings; it opens no socket. iscsi_server_listen/unlisten open/close one
 * portal address ("ip:port", "[ip6]:port") with its tag (0: the
 * --iscsi-listen address while no portal lists it, which matches every
 * group); the config side drives these from iscsi.portal,
 * iscsi.global.listen_port and --iscsi-listen (config_listen.c). Sockets
 * use SO_REUSEPORT so that a wildcard portal and address portals on one
 * port coexist (a connection goes to the most specific). Call after
 * reactors_start(); from a non-reactor thread (they may wait for accept
 * callbacks to finish). Return 0 or -errno (logged, as is every bind and
 * unbind). Listening twice on one address is -EEXIST. */
int iscsi_server_start(void);
int iscsi_server_listen(const char *addr_port, uint16_t portal_tag);
int iscsi_server_unlisten(const char *addr_port);
/* Change the portal group tag of an open listener in place (no unbind:
 * connections arriving from now on get the new tag; established ones keep
 * theirs). 0 or -ENOENT. Any non-reactor thread. */
int iscsi_server_retag(const char *addr_port, uint16_t portal_tag);
/* Whether iscsi_server_listen(addr_port) would succeed now: 0 if this
 * server already listens there or a test bind succeeds, else the bind's
 * -errno (-EADDRINUSE, -EADDRNOTAVAIL, ...). Nothing is logged and nothing
 * stays bound. Any thread; does not block. */
int iscsi_server_probe(const char *addr_port);

/* Published portal addresses (the generation's, for SendTargets). Writes the
 * listen addresses of portal group `tag` into out[0..max) as "ip:port" or
 * "[ip6]:port"; a wildcard address (0.0.0.0, ::) is replaced by local's
 * address when the family matches and left out otherwise. Returns the
 * count (0: no such portal). Any thread (takes the generation's lock briefly). */
#define ISCSI_PORTAL_ADDR_MAX 64
int iscsi_runtime_portal_addrs(uint16_t tag, const struct sockaddr *local,
                               char (*out)[ISCSI_PORTAL_ADDR_MAX], int max);
/* Close every listener and every session. */
void iscsi_server_stop(void);
/* Graceful shutdown, before iscsi_server_stop(): refuse new connections;
 * every session stops reading PDUs, lets the commands it is executing
 * complete and sends their responses, then closes; waits up to timeout_ms,
 * then closes what is left. Returns how many sessions had to be closed at
 * the deadline. Thread: control (the main thread at SIGTERM). */
unsigned iscsi_server_drain(unsigned timeout_ms);

#endif
