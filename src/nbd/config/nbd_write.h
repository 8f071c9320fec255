/*
 * The typed writes of NBD exports for a writer that is not an nbd.export.*
 * call: the gateway group's configuration sync (gwsync/), which applies
 * the other members' exports. Each runs what the method's handler runs
 * after decoding (the same checks, a create's cap --max-share-objects
 * included, error wording and log lines), in one configuration
 * transaction (control/cfgtx.h) whose commit publishes the export table.
 *
 * Errors go to call (api_call_internal_new: its method names the fields of
 * validation errors, "nbd.export.create.name"; api_call_error tells the
 * failure). Each returns 0, or -1 with the error set on call. They take
 * the NBD configuration lock before the DB lock: call them with no DB lock
 * held. API/worker threads.
 */
#ifndef BLOCKD_NBD_CONFIG_NBD_WRITE_H
#define BLOCKD_NBD_CONFIG_NBD_WRITE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "nbd/config/nbdstore.h"

struct api_call;

/* body (an object in the shape of nbd.export.create's data) checked
 * against its fields as the dispatcher checks a call's, its defaults
 * applied and decoded into *r (zeroed first; clear it with
 * nbd_export_row_clear), with r->id = id (0: a new export). */
int nbd_export_decode(struct api_call *call, json_t *body, int64_t id, struct nbd_export_row *r);
/* Check, probe (the volume or file must open) and store r (r->id 0: a
 * new export, whose id is set), as nbd.export.create / update do. */
int nbd_export_save(struct api_call *call, struct nbd_export_row *r);
/* As nbd.export.delete [id, {force}]: refused (EBUSY) while clients are
 * connected unless force (then their connections are closed). */
int nbd_export_remove(struct api_call *call, int64_t id, bool force);

#endif
