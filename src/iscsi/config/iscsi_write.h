/*
 * The typed writes of iSCSI targets, extents and LUN mappings for a writer
 * that is not an iscsi.* call: the gateway group's configuration sync
 * (gwsync/), which applies the other members' rows. Each runs what the
 * method's handler runs after decoding (the same checks, a create's cap
 * --max-share-objects included, error wording and log lines), in one
 * configuration transaction (control/cfgtx.h: a savepoint of the calling
 * thread's open transaction, if any, else its own, published at commit).
 *
 * Errors go to call (api_call_internal_new: its method names the fields
 * of validation errors, "iscsi.target.create.name"; api_call_error tells
 * the failure). Every function returns 0, or -1 with the error set on
 * call. Threads: API/worker threads, as the methods.
 */
#ifndef BLOCKD_ISCSI_CONFIG_ISCSI_WRITE_H
#define BLOCKD_ISCSI_CONFIG_ISCSI_WRITE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/config/extent_store.h"
#include "iscsi/config/target_store.h"
#include "iscsi/config/targetextent_store.h"

struct api_call;

/*
 * A new object as its create method's defaults make it (the defaults of
 * its field table, so they are stated once): required fields are left
 * empty for the caller to set; clear it with its clear function. 0 or
 * -ENOMEM.
 */
int icfg_target_init(struct icfg_target *t);
int icfg_extent_init(struct icfg_extent *e);
int icfg_targetextent_init(struct icfg_targetextent *te);

/*
 * The object's one decoder behind the dispatcher's check: body (an object
 * in the shape of the create method's data) is checked against the
 * method's fields as the dispatcher checks a call's (partial: as an
 * update's, no field required), then its keys are decoded over *t / *e
 * (initialised, or read with icfg_*_get). 0 or -1 (error on call).
 */
int iscsi_target_decode(struct api_call *call, json_t *body, bool partial, struct icfg_target *t);
int iscsi_extent_decode(struct api_call *call, json_t *body, bool partial, struct icfg_extent *e);

/* Check and store the object (id 0: a new one, whose id is set), as
 * <object>.create / .update do after decoding. */
int iscsi_target_write(struct api_call *call, struct icfg_target *t);
int iscsi_extent_write(struct api_call *call, struct icfg_extent *e);
int iscsi_targetextent_write(struct api_call *call, struct icfg_targetextent *te);

/* As iscsi.target.delete [id, force, delete_extents], iscsi.extent.delete
 * [id, remove, force] and iscsi.targetextent.delete [id, force]. */
int iscsi_target_remove(struct api_call *call, int64_t id, bool force, bool delete_extents);
int iscsi_extent_remove(struct api_call *call, int64_t id, bool remove, bool force);
int iscsi_targetextent_remove(struct api_call *call, int64_t id, bool force);

#endif
