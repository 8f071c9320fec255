/* sharing.nfs.* / sharing.smb.*: refused on purpose (see sharing.h). */
#include "api/sharing.h"

#include <errno.h>

#include "api/api.h"
#include "api/validate.h"
#include "core/util.h"

static int sharing_query(struct api_call *call, json_t *params, json_t **result)
{
    /* Through the query engine, so that filters and options (count, get,
     * select) are validated and answered as for any other empty table. */
    json_t *rows = json_array();
    int rc = api_query(call, rows, params, result);
    json_decref(rows);
    return rc;
}

static int sharing_refused(struct api_call *call, json_t *params, json_t **result)
{
    return api_error(call, ENOTSUP,
                     "%s is not supported: blockd serves block volumes over iSCSI and NBD, not "
                     "file shares (NFS/SMB)",
                     api_call_method(call));
}

/* cls: what the method would need if it existed (a read-only key gets
 * EACCES for a change, as for any other change, and ENOTSUP for a read). */
#define REFUSED(name, cls)                                                                         \
    {                                                                                              \
        name, "[...]", "Not supported: blockd has no NFS/SMB file sharing.", sharing_refused, cls  \
    }

static const struct api_arg query_args[] = {API_ARG_QUERY};

/* The REFUSED methods keep a free-form "[...]" synopsis: they take
 * anything and refuse it, so there is nothing to describe or check. */
static const struct api_method sharing_methods[] = {
    {"sharing.nfs.query", NULL, "NFS shares: always [] (blockd serves block volumes only).",
     sharing_query, API_READ, API_ARGS(query_args)},
    {"sharing.smb.query", NULL, "SMB shares: always [] (blockd serves block volumes only).",
     sharing_query, API_READ, API_ARGS(query_args)},
    REFUSED("sharing.nfs.create", API_SHARE),
    REFUSED("sharing.nfs.update", API_SHARE),
    REFUSED("sharing.nfs.delete", API_SHARE),
    REFUSED("sharing.nfs.get_instance", API_READ),
    REFUSED("sharing.smb.create", API_SHARE),
    REFUSED("sharing.smb.update", API_SHARE),
    REFUSED("sharing.smb.delete", API_SHARE),
    REFUSED("sharing.smb.get_instance", API_READ),
    REFUSED("sharing.smb.getacl", API_READ),
    REFUSED("sharing.smb.setacl", API_SHARE),
    REFUSED("sharing.smb.presets", API_READ),
    REFUSED("sharing.smb.share_precheck", API_READ),
    REFUSED("nfs.config", API_READ),
    REFUSED("nfs.update", API_ADMIN),
    REFUSED("smb.config", API_READ),
    REFUSED("smb.update", API_ADMIN),
};

void api_sharing_init(void)
{
    api_register(sharing_methods, ARRAY_SIZE(sharing_methods));
}
