/*
 * NVMe reservations of a namespace (NVMe 2.0 base 8.1.22, NVM command set
 * 3.2.4): registrants are hosts, named by their Host Identifier (the
 * 128-bit HOSTID of Connect), not by controller, so every controller of a
 * host shares its registration, which outlives the host's connections.
 *
 * One struct nvme_resv per namespace row (nvmet.namespace id), shared by
 * every published generation that carries the namespace: nvme/config takes
 * it with nvme_resv_get when it builds the namespace (struct nvme_ns.resv)
 * and nvme_subsys_unref drops it. The state is saved through the store
 * that nvme/config registers (a row of the configuration database) while
 * the namespace's Persist Through Power Loss state is on, and loaded when
 * the object is made, so a restart (kill -9 too) keeps it.
 *
 * A namespace over an RBD volume keeps its state in the cluster instead
 * (nvme_resv_shared.c), shared by every daemon serving the image. A device
 * is exported over iSCSI or NVMe-oF, never both (their reservation states
 * are separate; docs/nvme.md).
 *
 * Threads: nvme_resv_get/unref on control threads; the rest on reactors.
 * A command's check and every reservation command take the object's
 * mutex; saves run under it (one small SQLite write, as SCSI's APTPL).
 */
#ifndef BLOCKD_NVME_RESV_H
#define BLOCKD_NVME_RESV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct nvme_resv;

/* Where the state is kept. load: the saved text of namespace ns_id into
 * *text (malloc'd, NUL-terminated; NULL when none), 0 or -errno. save:
 * replace it (text NULL: delete), 0 or -errno; called with the object's
 * mutex held on a reactor: quick, no call back into nvme/. */
struct nvme_resv_store {
    int (*load)(int64_t ns_id, char **text);
    int (*save)(int64_t ns_id, const char *text);
};
/* Register the store (start-up, before any nvme_resv_get). */
void nvme_resv_set_store(const struct nvme_resv_store *store);

/* The reservations of namespace row ns_id (a new reference; made and
 * loaded on first use). NULL without memory. Control thread. */
struct nvme_resv *nvme_resv_get(int64_t ns_id);
/* The same for a namespace over vol: an RBD volume's state is kept in the
 * cluster next to the image (store/rbd_pr.h, an object of NVMe's own), so
 * every daemon serving the image enforces it; NULL when that object
 * cannot be opened (logged: the namespace has no reservations then). */
struct volume;
struct nvme_resv *nvme_resv_get_volume(int64_t ns_id, struct volume *vol);
void nvme_resv_unref(struct nvme_resv *r);

/* The namespace row is gone: forget its saved state (if its object is
 * still referenced, the state in memory stays until the last reference). */
void nvme_resv_forget(int64_t ns_id);

#endif
