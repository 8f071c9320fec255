/*
 * iSCSI shares: one target per volume with the volume on LUN 0, created or
 * deleted as ONE configuration transaction (share.iscsi.create,
 * share.iscsi.delete, share.iscsi.query), so that clients get atomicity
 * without undo lists. blockctl share iscsi create/delete/list uses them.
 *
 * Target names come from the prefix and the dataset path: lowercase;
 * ':' '.' '_' become '-'; '/' '@' become ':'; "PREFIX:" in front when a
 * prefix is given. A name longer than 64 characters is replaced by
 * "[PREFIX:]-:" + the first 32 characters of the lowercase base32 of
 * SHA-256(dataset) (what truenas_incus_ctl does, so names stay within
 * the 64-character extent/SCST limit). The extent gets the same name.
 *
 * Start-up: iscsi_share_init() before db_open() (methods only; no schema).
 */
#ifndef BLOCKD_ISCSI_ISCSI_SHARE_H
#define BLOCKD_ISCSI_ISCSI_SHARE_H

#include <stddef.h>

#define ISCSI_SHARE_NAME_MAX 64
#define ISCSI_SHARE_PREFIX_MAX 24

void iscsi_share_init(void);

/* The target name for dataset under prefix (NULL/"" for none) into out
 * (ISCSI_SHARE_NAME_MAX + 1 bytes). 0, or -EINVAL for a bad prefix. */
int iscsi_share_target_name(const char *prefix, const char *dataset, char *out, size_t len);

#endif
