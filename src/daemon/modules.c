/* See modules.h. */
#include "daemon/modules.h"

#include <string.h>

#include "api/auth.h"
#include "api/jobs.h"
#include "api/service.h"
#include "api/system.h"
#include "api/sharing.h"
#include "control/apistore.h"
#include "control/datasets.h"
#include "control/db.h"
#include "control/pwenc.h"
#include "control/replication.h"
#include "control/snaptask.h"
#include "core/log.h"
#include "daemon/metrics.h"
#include "gateway/gateway.h"
#include "gwsync/gwconfig.h"
#include "iscsi/config/iscsi_config.h"
#include "iscsi/config/iscsi_share.h"
#include "nbd/nbd.h"
#include "nvme/config/nvme_config.h"

int modules_init(const char *state_dir, const char *db_path)
{
    int rc;

    /* Modules register their schema and API methods before the DB opens. */
    datasets_init(state_dir);
    nbd_init();          /* schema + nbd.* methods */
    iscsi_config_init(); /* schema + iscsi.* methods */
    nvme_config_init();  /* schema + nvmet.*, share.nvme.* methods */
    apistore_init();     /* api_key and account tables (api/store.h) */
    api_auth_init();     /* api_key.*, auth.*, account.* */
    jobs_init();         /* core.get_jobs/job_wait/bulk/subscribe */
    replication_init();  /* replication.run_onetime (a job; calls the dataset methods) */
    snaptask_init();     /* pool.snapshottask.* (the scheduler starts in start_all) */
    service_init();      /* service.* */
    iscsi_share_init();  /* share.iscsi.* */
    api_sharing_init();  /* sharing.nfs/smb.* refused with ENOTSUP */
    system_init();       /* system.info/version: blockd and its TrueNAS API level */
    metrics_init();      /* /metrics and /ui on the API listener, core.metrics */
    gateway_api_init();  /* gateway.query */
    gwconfig_init();     /* the group's shares: a configuration publisher */

    /* The key that seals CHAP secrets, kept outside the DB. */
    if ((rc = pwenc_init(state_dir)) < 0)
        return rc;
    if ((rc = db_open(db_path)) < 0) {
        log_error("cannot open configuration database %s: %s", db_path, strerror(-rc));
        return rc;
    }
    /* Seal CHAP secrets an older blockd stored in clear; on failure (logged)
     * they keep working as they are. */
    (void)iscsi_config_seal_secrets();
    if ((rc = datasets_ensure_default_pool("demo")) < 0) {
        log_error("cannot create the default pool: %s", strerror(-rc));
        return rc;
    }
    return 0;
}
