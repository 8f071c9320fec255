/*
 * gwsync/gwconfig*.c internals: the local side of the shared
 * configuration (gwconfig_rows.c: which rows are the group's, their
 * values, applying a remote value through the typed writes) used by the
 * store side (gwconfig.c). Not for other modules.
 */
#ifndef BLOCKD_GATEWAY_GWCONFIG_INTERNAL_H
#define BLOCKD_GATEWAY_GWCONFIG_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Every group-owned row of the local DB: a new object key → value (an
 * object), or NULL (logged). Takes the DB lock (recursive: fine inside a
 * publisher). The group's rows are those of the volumes ("pool/vol", no
 * snapshot) of the RBD pools; their keys and values are the group's wire
 * format (members of different versions compare gwc_dump of them), so
 * they must not change:
 *   extent/<name>  a DISK extent whose disk is "zvol/<group volume>":
 *       {name: str, type: "DISK", disk: str, serial: str, blocksize: int,
 *        pblocksize: bool, avail_threshold: int|null, comment: str,
 *        insecure_tpc: bool, xen: bool, rpm: str, ro: bool, enabled: bool}
 *   lun/<target name>/<lunid>  a LUN mapping of a group extent:
 *       {target: str (its name), extent: str (its name), lunid: int}
 *   target/<name>  a target with at least one such LUN:
 *       {name: str, alias: str|null, mode: str, auth_networks: [str]}
 *   nbd/<name>  an NBD export of a group volume (not a path export):
 *       {name: str, dataset: str, readonly: bool, description: str,
 *        multi_conn: bool, tls: str, enabled: bool}
 *   nvmet/global  always: {basenqn: str, ana: bool, xport_referral: bool}
 *   nvmet/ns/<subsys name>/<nsid>  a ZVOL namespace on a group volume:
 *       {subsys: str, nsid: int, device_type: "ZVOL", device_path: str,
 *        enabled: bool, device_uuid: str, device_nguid: str}
 *   nvmet/subsys/<name>  a subsystem with at least one such namespace:
 *       {name: str, subnqn: str, serial: str, allow_any_host: bool,
 *        pi_enable: bool|null, qid_max: int|null, ieee_oui: str|null,
 *        ana: bool|null}
 *   nvmet/host/<hostnqn>  a host allowed on such a subsystem (its
 *       DH-HMAC-CHAP keys stay the member's own): {hostnqn: str}
 *   nvmet/hostsubsys/<subsys>/<hostnqn>: {subsys: str, host: str}
 *   nvmet/portsubsys/<subsys>/<port index>  (ports are the member's own):
 *       {subsys: str, port_index: int}
 * A key is cut at 127 bytes (extent/) or 199 bytes (the others), as it
 * always was.
 */
json_t *gwc_local_view(void);

/* The stored form of a value: compact JSON with sorted keys (malloc'd). */
char *gwc_dump(const json_t *value);

/* Make sure the volume an extent or NBD value names exists here, adopting
 * its RBD image when it does not (datasets_adopt_volume). No DB lock
 * held. 0 (there already, or nothing to adopt), 1 (adopted now), or
 * -errno with a reason in why. */
int gwc_ensure_volume(const char *key, const json_t *want, char *why, size_t len);
/* The volume ("pool/vol") an extent or NBD value names, or NULL
 * (borrowed from want). */
const char *gwc_value_volume(const char *key, const json_t *want);
/* The local id of dataset ds, 0 when there is none. Takes the DB lock. */
int64_t gwc_dataset_id(const char *ds);
/* Whether a local iSCSI extent or NBD export names volume ds (true on a
 * DB error). Takes the DB lock. */
bool gwc_volume_shared_here(const char *ds);

/*
 * Apply one remote row to the local configuration through the typed
 * writes the methods' handlers run after decoding (iscsi_write.h,
 * nbd_write.h), one transaction per row: want NULL withdraws it. local is the current local view
 * (gwc_local_view) to skip what already matches. iSCSI keys run inside
 * the caller's open cfg_tx (DB lock held); "nbd/" keys must run with no
 * DB lock held (the NBD writes take their own lock first). 0, or -errno
 * with a reason in why.
 */
int gwc_apply(const char *key, json_t *want, json_t *local, char *why, size_t len);

/* Which phase applies key (remote deletes of LUNs and exports first, then
 * targets and extents, then LUNs and exports, then deletes of targets and
 * extents): 0..3. */
int gwc_phase(const char *key, bool deleting);
static inline bool gwc_is_nbd(const char *key)
{
    return key[0] == 'n' && key[1] == 'b'; /* "nbd/", not "nvmet/" */
}

/* The call a typed write reports to (blockd applying its group's
 * configuration, the internal identity "gateway"; method names the fields
 * of its errors), NULL without memory; and the outcome of the typed write
 * that returned rc on it (freed here): 0, or -errno with why. */
struct api_call;
struct api_call *gwc_call_new(const char *method);
int gwc_call_done(struct api_call *call, int rc, char *why, size_t len);

/*
 * The nvmet.* rows (gwconfig_nvmet.c). gwc_nvmet_view adds the group's to
 * view (group_ds(ctx, ds): whether dataset ds is the group's); DB lock
 * taken by the loads. gwc_nvmet_volume: the volume an nvmet/ns/ value
 * names, or NULL. gwc_nvmet_uses: whether a namespace here names volume ds
 * (true on a DB error). gwc_nvmet_phase and gwc_nvmet_apply: gwc_phase and
 * gwc_apply for "nvmet/" keys (iSCSI-like: inside the caller's cfg_tx).
 */
int gwc_nvmet_view(json_t *view, bool (*group_ds)(const void *, const char *), const void *ctx);
const char *gwc_nvmet_volume(const char *key, const json_t *want);
bool gwc_nvmet_uses(const char *ds);
int gwc_nvmet_phase(const char *key, bool deleting);
int gwc_nvmet_apply(const char *key, json_t *want, json_t *have, char *why, size_t len);

#endif
