/*
 * The typed writes of the nvmet.* objects for a writer that is not an
 * nvmet.* call: the gateway group's configuration sync (gwsync/), which
 * applies the other members' rows. Each runs what the method's handler
 * runs after decoding (the body checked against the method's fields as the
 * dispatcher checks a call's, then the object's checks, a create's cap
 * --max-share-objects included, error wording and log lines), in one
 * configuration transaction (control/cfgtx.h: a savepoint of the calling
 * thread's open transaction, if any, else its own, published at commit).
 *
 * Errors go to call (api_call_internal_new: its method names the fields of
 * validation errors, "nvmet.subsys.create.name"; api_call_error tells the
 * failure). Every function returns 0, or -1 with the error set on call.
 * Threads: API/worker threads, as the methods.
 */
#ifndef BLOCKD_NVME_CONFIG_NVMET_WRITE_H
#define BLOCKD_NVME_CONFIG_NVMET_WRITE_H

#include <jansson.h>
#include <stdint.h>

#include "nvme/config/nvmet_store.h"

struct api_call;

enum nvmet_object {
    NVMET_OBJ_SUBSYS,
    NVMET_OBJ_NAMESPACE,
    NVMET_OBJ_HOST,
    NVMET_OBJ_HOST_SUBSYS,
    NVMET_OBJ_PORT_SUBSYS,
};

/*
 * As nvmet.<object>.create (id 0) or .update (id: body partial, over the
 * stored object): body is the create method's data. made (may be NULL)
 * holds server-made fields the group keeps equal on every member (a
 * subsystem's serial, a namespace's device_uuid and device_nguid): a
 * create stores them instead of new ones. *id_out (may be NULL) gets the
 * object's id.
 */
int nvmet_object_put(struct api_call *call, enum nvmet_object o, int64_t id, json_t *body,
                     json_t *made, int64_t *id_out);
/* As nvmet.<object>.delete [id, options] (options may be NULL). */
int nvmet_object_remove(struct api_call *call, enum nvmet_object o, int64_t id, json_t *options);
/* As nvmet.global.update {body} (partial). */
int nvmet_global_write(struct api_call *call, json_t *body);

#endif
