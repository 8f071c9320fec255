/*
 * The NVMe/TCP target: what the rest of the daemon calls. The target
 * serves the subsystems of the published CONF_NVME part (nvme_view.h) on
 * the sockets nvme/config/ accepts: each port's listener hands its
 * connections here, and a connection becomes one queue (admin or I/O) of
 * a controller once it has sent ICReq and Fabrics Connect.
 */
#ifndef BLOCKD_NVME_TARGET_H
#define BLOCKD_NVME_TARGET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define NVME_SESSION_NQN 224 /* an NQN (223 bytes) and its NUL */

struct nvme_subsys;
struct volume;

/* Start/stop the target's own state (controller table, keep-alive timer).
 * nvme_target_init before the first publication, from the main thread;
 * nvme_target_stop closes every connection. 0 or -errno. */
int nvme_target_init(void);
void nvme_target_stop(void);
/* NVMe/TCP connections (queues, admin and I/O) in all; past it a new one
 * is refused at accept, logged. Default NVME_DEFAULT_MAX_CONNECTIONS. */
#define NVME_DEFAULT_MAX_CONNECTIONS 4096
void nvme_target_set_max_connections(unsigned n);
/* Graceful shutdown, before nvme/config/ withdraws the subsystems: refuse
 * new connections, stop reading commands, let every command already
 * running finish and its response be sent, waiting up to timeout_ms; then
 * close what is left. Returns the number of connections closed at the
 * deadline. Thread: the main thread at SIGTERM. */
unsigned nvme_target_drain(unsigned timeout_ms);

/* A listener_accept_fn (core/listener.h): arg is the nvmet.port id as
 * (void *)(intptr_t)id, or (void *)(intptr_t)0 for the discovery-only
 * listener. Runs on reactor 0; adopts fd onto a reactor. */
void nvme_target_accept(int fd, const struct sockaddr *peer, socklen_t peerlen,
                        const struct sockaddr *local, socklen_t locallen, void *arg);

/* From the CONF_NVME subscriber's conf_apply hooks (no DB lock held):
 * s left the configuration (its controllers are torn down, logged), or
 * was replaced by next (controllers adopt next; namespaces added, removed
 * or resized raise a Namespace Attribute Changed event; hosts no longer
 * allowed lose their controllers; ports no longer serving it close their
 * queues). next may be old itself: after a namespace's volume was resized,
 * nvme_target_subsys_changed(s, s) tells its controllers. */
void nvme_target_subsys_gone(struct nvme_subsys *s);
void nvme_target_subsys_changed(struct nvme_subsys *old, struct nvme_subsys *next);

/*
 * Asymmetric namespace access (docs/nvme.md "ANA"): who the paths are. The
 * target reports ANA for a subsystem whose `ana` is on (its own, or
 * nvmet.global's). Without a provider it is one path: one ANA group (1),
 * optimized. A gateway group (docs/ha.md) sets one: each member is an ANA
 * group (its id), a namespace is in the group of its volume's optimized
 * member, and the state through this member is optimized for its own
 * group, non-optimized for the others, inaccessible while it is fenced.
 * Every function is non-blocking and may run on a reactor.
 */
struct nvme_peer_port {
    unsigned member;  /* the member serving it (its id) */
    uint16_t index;   /* the port's index there (links are shared by index) */
    uint16_t portid;  /* its PORTID in the discovery log */
    char traddr[64];  /* without brackets */
    uint16_t trsvcid; /* TCP port */
    int adrfam;       /* 1 IPv4, 2 IPv6 */
};
struct nvme_path_ops {
    uint32_t max_groups; /* ANAGRPMAX and NANAGRPID */
    /* The ANA group of a namespace on vol: 1..max_groups. */
    uint32_t (*group)(struct volume *vol);
    /* The group this member serves as optimized. */
    uint32_t (*own_group)(void);
    /* Every path through this member is inaccessible (fenced). */
    bool (*inaccessible)(void);
    /* The discovery log's PORTID of this member's port index. */
    uint16_t (*port_id)(uint16_t index);
    /* The CNTLIDs this member gives (a host rejects two controllers of
     * one subsystem with the same CNTLID, on any path). */
    void (*cntlid_range)(uint16_t *lo, uint16_t *hi);
    /* A namespace serves vol / stops serving it (counted). */
    void (*volume_hold)(struct volume *vol);
    void (*volume_release)(struct volume *vol);
    /* The other live members' ports (up to max), for the discovery log. */
    size_t (*peer_ports)(struct nvme_peer_port *out, size_t max);
    /* A number that moves whenever group() may answer otherwise for some
     * volume (the membership changed); NULL: group() never changes. The
     * ANA watch recomputes its view only when this, inaccessible() or the
     * subsystem changed. */
    uint64_t (*generation)(void);
};
/* Install ops (static; NULL: the default). Start-up, before any Connect. */
void nvme_target_set_paths(const struct nvme_path_ops *ops);
/* A namespace of the configuration holds vol / lets it go: the path
 * provider's volume_hold / volume_release (nothing by default). Any
 * thread, non-blocking. */
void nvme_target_volume_hold(struct volume *vol);
void nvme_target_volume_release(struct volume *vol);
/* This member's published TCP ports as "INDEX=ADDR:SERVICE,..." (IPv6 in
 * brackets) into buf; the discovery-only listener is not one. Any thread. */
void nvme_target_ports_text(char *buf, size_t len);

/* Connections accepted and not freed yet (tests, fuzzing). Any thread. */
unsigned nvme_conn_live(void);
/* Forget every failed DH-HMAC-CHAP authentication and block (fuzzing,
 * which fails thousands). Any thread. */
void nvme_auth_limit_reset(void);

/* One controller (a session) for the metrics and the API: what a host
 * connected to, from where. */
struct nvme_session_info {
    char peer[80];
    char hostnqn[NVME_SESSION_NQN];
    char subnqn[NVME_SESSION_NQN];
    uint16_t cntlid;
    int64_t subsys_id;     /* nvmet.subsys row (0 for a discovery controller) */
    int64_t port_id;       /* nvmet.port row (0: the discovery-only listener) */
    bool discovery;        /* a discovery controller */
    uint64_t connected_at; /* time(NULL) */
};
/* The live controllers, in a new array (*out, free() it). Count or
 * -ENOMEM. Any thread. */
int nvme_sessions_list(struct nvme_session_info **out);

#endif
