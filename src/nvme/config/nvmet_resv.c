/*
 * Where NVMe reservations are kept (nvme_resv.h's store): the nvmet_resv
 * table, one row per namespace whose Persist Through Power Loss state is
 * on, next to the nvmet.* configuration but not part of it (no cfg_tx: a
 * reservation change is not a configuration change and publishes
 * nothing). Each save is one autocommit statement, durable when it
 * returns (control/db.h), so the command that made it is acknowledged
 * only after it survives a crash.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "core/log.h"
#include "nvme/config/nvmet_internal.h"
#include "nvme/nvme_resv.h"

static int resv_load(int64_t ns_id, char **text)
{
    sqlite3_stmt *st;
    *text = NULL;
    db_lock();
    int rc = db_stmt("SELECT state FROM nvmet_resv WHERE ns_id = ?1", &st);
    if (rc == 0) {
        sqlite3_bind_int64(st, 1, ns_id);
        rc = db_step_row(st);
        if (rc == 0) {
            const unsigned char *t = sqlite3_column_text(st, 0);
            *text = strdup(t ? (const char *)t : "");
            rc = *text ? 0 : -ENOMEM;
        } else if (rc == -ENOENT) {
            rc = 0;
        }
        db_stmt_done(st);
    }
    db_unlock();
    if (rc < 0)
        log_error("nvmet: cannot read the reservations of namespace %" PRId64 ": %s", ns_id,
                  strerror(-rc));
    return rc;
}

static int resv_save(int64_t ns_id, const char *text)
{
    db_lock();
    int rc = text ? db_run("INSERT OR REPLACE INTO nvmet_resv (ns_id, state) VALUES (?1, ?2)", "it",
                           ns_id, text)
                  : db_run("DELETE FROM nvmet_resv WHERE ns_id = ?1", "i", ns_id);
    db_unlock();
    if (rc < 0)
        log_error("nvmet: cannot save the reservations of namespace %" PRId64 ": %s", ns_id,
                  strerror(-rc));
    return rc;
}

void nvmet_resv_prune(void)
{
    db_lock();
    int rc =
        db_run("DELETE FROM nvmet_resv WHERE ns_id NOT IN (SELECT id FROM nvmet_namespace)", "");
    db_unlock();
    if (rc < 0)
        log_warn("nvmet: cannot remove the reservations of deleted namespaces: %s", strerror(-rc));
}

void nvmet_resv_init(void)
{
    nvme_resv_set_store(&(struct nvme_resv_store){.load = resv_load, .save = resv_save});
}
