/*
 * Namespaces follow their datasets (control/datasets.h, control/events.h), as iSCSI
 * extents do: deleting a volume a namespace serves is refused (EBUSY,
 * naming the namespace) unless forced, and a forced delete removes its
 * namespaces; a rename moves device_path along ("zvol/OLD..." becomes
 * "zvol/NEW...", the open volume is kept); a resize republishes the
 * subsystems serving the volume, so that the target tells their hosts
 * (Namespace Attribute Changed); a pool coming online opens the
 * namespaces that could not be opened before.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "control/cfgtx.h"
#include "control/confgen.h"
#include "control/datasets.h"
#include "control/db.h"
#include "control/events.h"
#include "core/log.h"
#include "nvme/config/nvmet_internal.h"

/* Namespaces of name itself, its children and snapshots ("zvol/" paths). */
#define SUBTREE                                                                                    \
    "device_path = 'zvol/' || ?1 OR substr(device_path, 1, length(?1) + 6) IN "                    \
    "('zvol/' || ?1 || '/', 'zvol/' || ?1 || '@')"

static bool dataset_in_use(const char *name, char *why, size_t len)
{
    void *rows;
    size_t n;
    if (nvs_load(&nvs_namespace, SUBTREE, &rows, &n, "t", name) < 0) {
        snprintf(why, len, "cannot read the NVMe-oF namespaces");
        return true;
    }
    if (n) {
        const struct nvmet_namespace *ns = rows;
        struct nvmet_subsys *sub = NULL;
        nvs_get(&nvs_subsys, ns->subsys_id, (void **)&sub);
        snprintf(why, len, "served over NVMe-oF as namespace %" PRId64 " of subsystem '%s'",
                 ns->nsid.v, sub ? sub->name : "?");
        nvs_free(&nvs_subsys, sub);
    }
    nvs_free_all(&nvs_namespace, rows, n);
    return n > 0;
}

static int rename_update(const char *old_name, const char *new_name, bool subtree)
{
    struct cfg_tx *tx = cfg_tx_current();
    int rc = db_run(subtree ? "UPDATE nvmet_namespace SET device_path = 'zvol/' || ?2 || "
                              "substr(device_path, length(?1) + 6) WHERE " SUBTREE
                            : "UPDATE nvmet_namespace SET device_path = 'zvol/' || ?2 "
                              "WHERE device_path = 'zvol/' || ?1",
                    "tt", old_name, new_name);
    if (rc == 0 && tx && sqlite3_changes(db_handle()) > 0) {
        cfg_tx_changed(tx, CFG_NVME_NAMESPACE, CFG_ID_ALL, CFG_UPDATED);
        log_info("nvmet: namespaces of %s follow it to %s", old_name, new_name);
    }
    return rc;
}

static void rename_applied(void)
{
    /* the rename committed under the DB lock: its conf_apply waited */
    conf_apply_pending();
}

/* A forced delete: the namespaces of the dataset go with it. */
static void namespaces_of_deleted(const char *name)
{
    struct cfg_tx tx;
    size_t n = 0;
    if (cfg_tx_begin(&tx) < 0) {
        log_error("nvmet: cannot remove the namespaces of deleted dataset %s", name);
        return;
    }
    int rc = nvs_delete(&nvs_namespace, &n, "device_path = 'zvol/' || ?1", "t", name);
    if (rc < 0 || n == 0) {
        cfg_tx_abort(&tx);
        if (rc < 0)
            log_error("nvmet: cannot remove the namespaces of deleted dataset %s: %s", name,
                      strerror(-rc));
        return;
    }
    rc = cfg_tx_commit(&tx);
    if (rc == 0)
        log_info("nvmet: dataset %s deleted: removed %zu namespace(s)", name, n);
}

/* The enabled namespace that exports device: an iSCSI extent of the same
 * device is refused while it does (datasets_reserving_export). A database
 * error counts as exported, with the reason. */
static bool namespace_exports(const char *device, char *why, size_t len)
{
    void *rows = NULL;
    size_t n = 0;
    int rc = nvs_load(&nvs_namespace, "device_path = ?1 AND enabled", &rows, &n, "t", device);
    if (rc < 0) {
        snprintf(why, len, "cannot read the NVMe-oF namespaces of %s: %s", device, strerror(-rc));
        return true;
    }
    if (n) {
        const struct nvmet_namespace *ns = rows;
        struct nvmet_subsys *sub = NULL;
        nvs_get(&nvs_subsys, ns->subsys_id, (void **)&sub);
        snprintf(why, len, "%s is exported over NVMe-oF by namespace %" PRId64 " of subsystem %s",
                 device, ns->nsid.v, sub ? sub->name : "?");
        nvs_free(&nvs_subsys, sub);
    }
    nvs_free_all(&nvs_namespace, rows, n);
    return n != 0;
}

static void dataset_event(enum datasets_event ev, const char *name)
{
    if (ev == DATASETS_DELETED) {
        namespaces_of_deleted(name);
    } else if ((ev == DATASETS_RESIZED || ev == DATASETS_ROLLED_BACK) && nvmet_running()) {
        int64_t n = 0;
        if (nvs_count(&nvs_namespace, "device_path = 'zvol/' || ?1", &n, "t", name) == 0 && n)
            nvmet_republish(name);
    } else if (ev == DATASETS_POOL_ONLINE && nvmet_running()) {
        nvmet_republish(NULL);
    }
}

static int on_event(const struct event *ev, void *arg)
{
    (void)arg;
    switch (ev->type) {
    case EV_DATASET:
        dataset_event(ev->dataset.what, ev->dataset.name);
        return 0;
    case EV_RENAME_UPDATE:
        return rename_update(ev->rename.old_name, ev->rename.new_name, ev->rename.subtree);
    case EV_RENAME_DONE:
        rename_applied();
        return 0;
    default:
        return 0;
    }
}

void nvmet_datasets_init(void)
{
    datasets_register_in_use(dataset_in_use);
    datasets_register_reserving_export("nvme", namespace_exports);
    events_subscribe(&(struct event_subscriber){
        .name = "nvmet",
        .types = EV_BIT(EV_DATASET) | EV_BIT(EV_RENAME_UPDATE) | EV_BIT(EV_RENAME_DONE),
        .fn = on_event,
    });
}
