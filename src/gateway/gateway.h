/*
 * gateway/: several blockd daemons ("members" of a gateway group) serving
 * the same RBD images to initiators over several paths
 * (docs/ha.md).
 *
 * Contract:
 *   - Off by default. --gateway-group NAME turns it on; the member is
 *     --gateway-name (default: the host name) with --gateway-id N (1..
 *     GATEWAY_ID_MAX), which is also its SCSI target port group id and
 *     relative target port id on every target.
 *   - Membership lives in the Ceph cluster, not in the local DB: one RADOS
 *     object per group ("blockd.gateway.<group>" in --gateway-pool, default
 *     "rbd") whose omap holds one key per member id with {name, id,
 *     portals, client address, heartbeat counter, wall time}. Every member
 *     rewrites its key each GATEWAY_HEARTBEAT_MS and watches the object;
 *     a join or a leave notifies the watchers, so the others reread at once.
 *   - A member is ONLINE while its heartbeat counter keeps changing, as
 *     seen by this member's own monotonic clock (clock skew between hosts
 *     does not matter), and OFFLINE when it has not changed for
 *     --gateway-heartbeat-timeout seconds (default 3).
 *   - gateway_start refuses (-EADDRINUSE, logged) an id another live member
 *     holds: the daemon does not start.
 *   - Fencing: when a member goes OFFLINE, every survivor blocklists its
 *     client address in the cluster (it can never write again, even if it
 *     was only cut off), and breaks the exclusive locks it held on the
 *     images this member serves, so that I/O resumes here.
 *   - Rejoining: a member that finds itself blocklisted fails its I/O
 *     with a retriable error, retires that client, connects a new one
 *     (backoff 1-30 s), reopens every RBD image it serves under the same
 *     bdevs and volumes, moves its reservation objects, pools and the
 *     configuration store to the new client, and registers again: no
 *     restart.
 *   - LUs on RBD images (gateway_lu_params / gateway_lu_attach): the same
 *     SCSI identity on every member (serial and NAA from the image), and
 *     implicit ALUA: one live member per image is active/optimized (the
 *     first in a ranking of the members hashed from the image id, so the
 *     same on every member, spread over the members, and moved only when
 *     membership changes), the other live members active/non-optimized,
 *     dead ones unavailable; a change raises ASYMMETRIC ACCESS STATE
 *     CHANGED.
 *
 * Threads: gateway_configure_* run on the main thread while parsing flags;
 * gateway_start/stop on the main thread; the membership thread does every
 * cluster call. gateway_id, gateway_enabled, gateway_members and the scsi
 * callbacks are thread-safe and never block on the cluster (reactors call
 * them).
 */
#ifndef BLOCKD_GATEWAY_GATEWAY_H
#define BLOCKD_GATEWAY_GATEWAY_H

#include <rados/librados.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scsi/scsi.h"
#include "store/volume.h"

#define GATEWAY_ID_MAX 32 /* members per group (and RTPG descriptors) */
/* The iSCSI portal group tags a member reports: GATEWAY_TAG_BASE x its id
 * + the portal's tag (below the base), so that each member presents its
 * own SCSI target ports (docs/ha.md "Identity"). */
#define GATEWAY_TAG_BASE 1000
_Static_assert((GATEWAY_ID_MAX + 1) * GATEWAY_TAG_BASE - 1 <= 65535,
               "portal group tags are 16 bits");
#define GATEWAY_NAME_MAX 63
#define GATEWAY_NVME_PORTS_MAX 512 /* a member's NVMe ports, as text */
#define GATEWAY_HEARTBEAT_MS 1000
#define GATEWAY_TIMEOUT_DEFAULT_S 3

/* Flag handlers. Each returns 0, or -EINVAL (the caller prints the usage
 * line). name/group: 1..63 of [A-Za-z0-9._-]; id 1..GATEWAY_ID_MAX;
 * timeout 2..60 s. Strings are copied. */
int gateway_configure_group(const char *group);
int gateway_configure_name(const char *name);
int gateway_configure_id(const char *id);
int gateway_configure_timeout(const char *seconds);
/* Where the membership object lives: ceph.conf, client id, RADOS pool
 * ("" keeps librados' default / "admin" / "rbd"). */
int gateway_configure_ceph(const char *conf, const char *id, const char *pool);

/* Connect to the cluster, check the id is free, register (portals: the
 * member's iSCSI portal "ADDR:PORT", may be NULL) and start the membership
 * thread. 0 when the group is off (nothing to do). Blocking, main thread,
 * before the front-ends publish anything. -errno logged: -EINVAL (a
 * --gateway-* flag without --gateway-group, or no --gateway-id),
 * -EADDRINUSE (the id belongs to another live member), cluster errors. */
int gateway_start(const char *portals);
/* Deregister (the others see the leave at once), stop the thread, drop
 * the connection. Main thread, after the front-ends stopped. */
void gateway_stop(void);

bool gateway_enabled(void);
/* True while this member is fenced: it found itself blocklisted (its
 * heartbeat or a request failed with EBLOCKLISTED) and has not rejoined
 * yet with a new client (docs/ha.md "Rejoining after fencing"), or may be
 * fenced without knowing yet: its own heartbeat has not reached the
 * cluster for the heartbeat timeout. Its LUs answer 02/04/0C meanwhile.
 * Lock-free (reactors call it per command). */
bool gateway_fenced(void);
/* This member's id (its TPG and relative target port id); 0 if disabled. */
unsigned gateway_id(void);

enum gateway_member_state { GATEWAY_ONLINE, GATEWAY_OFFLINE };

struct gateway_member {
    unsigned id;
    char name[GATEWAY_NAME_MAX + 1];
    char portals[128];
    char addr[128]; /* librados client address (lock owners, blocklist) */
    /* its NVMe/TCP ports: "INDEX=ADDRESS:SERVICE" (IPv6 in brackets),
     * comma-separated (gateway_set_nvme_ports) */
    char nvme_ports[GATEWAY_NVME_PORTS_MAX];
    enum gateway_member_state state;
    bool fenced;        /* blocklisted by this member after it went OFFLINE */
    int64_t last_seen;  /* unix seconds of its last heartbeat, as it wrote it */
    uint64_t heartbeat; /* its counter */
};

/* A copy of the membership, sorted by id: up to max entries, returns how
 * many members there are. Thread-safe, non-blocking. */
size_t gateway_members(struct gateway_member *out, size_t max);

/*
 * iSCSI config hooks for an LU over vol (config side, API/control threads).
 * Both do nothing unless the group is on and vol is an RBD image.
 * gateway_lu_params: replace p's serial and NAA with ones derived from the
 * image (its id, its pool and the cluster fsid), the same on every member.
 * Blocking (asks librbd for the image id), never on a reactor.
 * gateway_lu_attach: give lu the group's ALUA view (scsi_lu_set_alua): it
 * takes a volume reference, released when the LU is freed.
 */
void gateway_lu_params(struct volume *vol, struct scsi_lu_params *p);
void gateway_lu_attach(struct scsi_lu *lu, struct volume *vol);

/* The NVMe/TCP ports this member serves (the format of
 * gateway_member.nvme_ports), in its record from the next heartbeat on,
 * so that the others list them in their discovery log pages. Copied.
 * Any thread, non-blocking. */
void gateway_set_nvme_ports(const char *ports);

/*
 * The optimized member of the RBD image under vol (the same ranking as
 * the ALUA view of its LU: the live member ranked first for the image),
 * its id; 0 when the group is off, vol is not an RBD image, or no member
 * is live. Reads the image id from librbd's open handle (memory only)
 * and the membership under its mutex: non-blocking, any thread.
 */
unsigned gateway_volume_optimized(struct volume *vol);
/* A number that moves whenever gateway_volume_optimized may answer
 * otherwise for some volume: the membership's members or their states
 * changed (checked at each membership round). Any thread. */
uint64_t gateway_views_gen(void);
/*
 * A front-end without LUs (NVMe/TCP namespaces) serves vol: the
 * membership thread watches its image's exclusive lock as it does an
 * LU's, and breaks a fenced member's lock, so that writes here go on
 * within a round of the fencing (docs/ha.md "Failure cases"). Counted:
 * one release per hold. Both do nothing unless the group is on and vol
 * is an RBD image; non-blocking, any thread (release may run on a
 * reactor, when the last holder lets go).
 */
void gateway_volume_hold(struct volume *vol);
void gateway_volume_release(struct volume *vol);

/* API methods (gateway.query): registered by modules_init. */
void gateway_api_init(void);

/*
 * For the group's configuration store (src/gwsync/gwconfig.c), which sits
 * above the front-ends: gateway/ never calls it directly (iscsi/ includes
 * this header), it calls the hook the store registers.
 *
 * gateway_set_reconnect_hook: fn is called on the membership thread when
 * the gateway replaced its cluster connection (a fenced member rejoining);
 * it returns true when the store moves to the new connection, and then
 * calls gw_config_reconnected once it has. Without a hook the gateway
 * moves on alone. Start-up (modules_init), before gateway_start.
 */
void gateway_set_reconnect_hook(bool (*fn)(void));
/* The configuration store moved its I/O context to the gateway's current
 * connection (after its reconnect hook returned true): the retired
 * connections kept for its old one can go. Its store thread. */
void gw_config_reconnected(void);
/* A new I/O context on the membership pool (--gateway-pool; the caller
 * destroys it with rados_ioctx_destroy) and the group's name (static).
 * 0, -ENOTCONN when the group is off, or -errno. Between gateway_start
 * and gateway_stop. */
int gw_pool_ioctx(rados_ioctx_t *out, const char **group);

#endif
