/*
 * The iSCSI configuration: the TrueNAS-shaped objects (global settings,
 * portals, initiator groups, CHAP credentials, targets, extents, target-
 * extent mappings) in the config DB, their iscsi.* JSON-RPC methods, and the
 * runtime views of targets the transport serves (iscsi_runtime.h).
 *
 * Start-up order in the daemon:
 *   iscsi_config_init();                 before db_open() (schema + methods)
 *   db_open(...); datasets_init(...) ...
 *   reactors_start(...); iscsi_server_start();
 *   iscsi_config_start(listen or NULL);  after the DB is open and datasets
 *                                        can open volumes
 *   ...
 *   iscsi_config_stop();                 before iscsi_server_stop()/db_close()
 */
#ifndef BLOCKD_ISCSI_ISCSI_CONFIG_H
#define BLOCKD_ISCSI_ISCSI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

/* Register the schema (db_register_schema) and the iscsi.* API methods, and
 * the datasets in-use check. Call once, before db_open(). */
void iscsi_config_init(void);

/*
 * Encrypt CHAP secrets that an older blockd stored in clear (control/pwenc.h;
 * pwenc_init must have run). Call from the main thread after db_open(),
 * before iscsi_config_start(). 0 or -errno (logged; never the secrets).
 */
int iscsi_config_seal_secrets(void);

/*
 * Build and publish every target's runtime view from the DB and open a
 * listener per portal address at iscsi.global.listen_port. listen_override
 * (blockd --iscsi-listen "ADDR:PORT", or NULL): at the first start of the
 * process PORT becomes listen_port, and ADDR is listened on too (portal
 * tag 0, every group, while no portal lists ADDR); an ADDR that cannot be
 * bound fails the start. 0 or -errno (logged). Call from the main thread
 * (or the API thread restarting the service) after db_open().
 */
int iscsi_config_start(const char *listen_override);

/* Withdraw every view (drop the LUs and volumes): the iSCSI part of the
 * configuration generation becomes empty, so conf_apply closes the
 * targets' sessions and the portal listeners this module opened. */
void iscsi_config_stop(void);

/*
 * Apply every deferred change (calls made with defer=true) as one
 * generation (conf_reload, control/confgen.h): for service.reload
 * ["iscsitarget"]. Thread-safe; takes the DB lock. Returns 0 or -errno.
 */
int iscsi_config_reload(void);

/* Number of targets whose change is committed but not yet applied (in
 * the generation's pending change list); (size_t)-1: every target. */
size_t iscsi_config_pending(void);

/*
 * For the datasets module's delete path and share.* helpers: true (and a
 * reason in why) when dataset name (or a child / snapshot of it) backs an
 * iSCSI extent, or when the database cannot tell (the reason says so).
 * Registered with datasets_register_in_use by init.
 */
bool iscsi_config_dataset_in_use(const char *name, char *why, size_t len);

#endif
