/*
 * Private to the iSCSI runtime (src/iscsi/config_*.c): the target views
 * and the LU cache (config_views.c), used by the generation's iSCSI
 * subscriber (config_runtime.c). Functions marked "DB locked" run under
 * db_lock() (the commit's); the others without it.
 */
#ifndef BLOCKD_ISCSI_CONFIG_VIEWS_H
#define BLOCKD_ISCSI_CONFIG_VIEWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/iscsi_runtime.h"
#include "scsi/scsi.h"

struct volume;

/* Build the view of target id (IQN basename:name) with refs = 1: 0 with
 * *out, -ENOENT if the target no longer exists, or -errno. An extent
 * whose LU cannot be opened leaves its LUN out (logged). DB locked. */
int icfg_view_build(int64_t id, const char *basename, struct iscsi_target_view **out);
/* The CHAP credentials of auth tag (discovery: the rows with discovery
 * auth): a new array in *out (wipe and free), *n of them; *method (if not
 * NULL) the strongest method among them. Secrets that cannot be opened
 * are left out (logged). DB locked. 0 or -errno. */
int icfg_load_creds(int64_t tag, bool discovery, struct iscsi_chap_cred **out, size_t *n,
                    enum iscsi_auth_method *method);
/* Extent id changed: drop the cached LU of a rebuilt or deleted one (its
 * gen moved: sessions see a new device at the next build); queue its new
 * read-only flag and size for the running LU otherwise (sessions keep
 * their state). DB locked. */
void icfg_extent_changed(int64_t id);
/* Queue unit attention ua on every cached LU of vol; how many. DB locked. */
size_t icfg_volume_ua(const struct volume *vol, enum scsi_ua ua);
/* Run the queued live work on LUs. Without the DB lock (LU mutexes). */
void icfg_live_drain(void);
/* Drop every cached LU (the runtime stops). DB locked. */
void icfg_lu_cache_clear(void);

#endif
