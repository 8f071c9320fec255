/*
 * The gateway group's shared configuration store (docs/ha.md
 * "Shared configuration").
 *
 * Contract:
 *   - Only with --gateway-group: otherwise nothing here runs (the
 *     publisher returns at once) and every share stays in the local DB.
 *   - Group-owned rows: iSCSI extents of type DISK on a volume of an RBD
 *     pool ("zvol/<rbd pool>/<volume>", no snapshot), the LUN mappings of
 *     such extents, the targets that map at least one such extent, and NBD
 *     exports of such volumes. Everything else (file pools, portals,
 *     initiator groups, auth, a target's portal groups, global settings)
 *     is the member's own.
 *   - The group's rows live in one RADOS object, "blockd.config.<group>"
 *     in --gateway-pool: an omap key per row ("target/<name>",
 *     "extent/<name>", "lun/<target>/<lunid>", "nbd/<name>") whose value is
 *     the row as JSON, naming the other rows by name, never by local id.
 *   - A local API change of a group-owned row is written to the object
 *     before the API call returns (the commit's after hook): one RADOS write
 *     op asserting (omap compare) that every key it changes still holds
 *     the value this member last saw, then a notify. A create whose name
 *     another member took meanwhile fails with EEXIST and this member takes
 *     the other's row; an update or delete that raced wins (last writer).
 *   - Every member watches the object; on a notify, at start, after a watch
 *     error and every GWCONFIG_POLL_MS it reads the object and applies what
 *     changed since it last looked (a three-way diff against the last
 *     synchronised state, kept in the local DB so that a restarted member
 *     catches up, deletions included) through the same API methods a
 *     client calls, marked so that they are not written back. A volume the
 *     share names that is missing here is adopted (pool.dataset.create
 *     adopt) when this member has the RBD pool under the same name.
 *
 * Threads: gwconfig_init/start/stop on the main thread; the publisher on
 * whichever thread commits; one store thread applies remote changes.
 */
#ifndef BLOCKD_GATEWAY_GWCONFIG_H
#define BLOCKD_GATEWAY_GWCONFIG_H

#include <stdbool.h>

#define GWCONFIG_POLL_MS 2000   /* reread without a notify (a lost one) */
#define GWCONFIG_NOTIFY_MS 1000 /* a change waits this long for the acks */

/* Register the configuration publisher (control/cfgtx.h). Start-up, before
 * the DB opens (modules_init). */
void gwconfig_init(void);
/* After gateway_start and the front-ends' configuration: load the last
 * synchronised state, watch the object and start the store thread (which
 * catches up at once). 0 when the group is off; -errno (logged) when the
 * object cannot be made or watched. */
int gwconfig_start(void);
/* Stop the thread and the watch. Main thread, before gateway_stop, after
 * the API stopped. */
void gwconfig_stop(void);
/* The gateway replaced its cluster connection (this member was fenced
 * and rejoins, docs/ha.md): the store thread takes a new I/O context on
 * the group's pool (gw_pool_ioctx), watches the object again, rereads
 * it, and then calls gw_config_reconnected. Non-blocking (membership
 * thread). false: the store is not running (nothing to move). */
bool gwconfig_reconnect(void);

#endif
