/* Extents → SCSI logical units: open the backing volume (a blockd dataset
 * for DISK, a file for FILE) and describe the LU from the extent's fields.
 * Persistent-reservation state (APTPL) is kept in the extent row. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "control/datasets.h"
#include "control/db.h"
#include "core/log.h"
#include "iscsi/config/config_internal.h"
#include "gateway/gateway.h"
#include "scsi/scsi.h"
#include "store/bdev.h"

const char *icfg_disk_dataset(const char *disk)
{
    if (!disk || strncmp(disk, "zvol/", 5) != 0 || !disk[5])
        return NULL;
    return disk + 5;
}

void icfg_lu_ref(struct scsi_lu *lu)
{
    scsi_lu_ref(lu);
}

void icfg_lu_unref(struct scsi_lu *lu)
{
    if (lu)
        scsi_lu_unref(lu);
}

/* scsi/ calls this on a reactor with the LU mutex held: one small write.
 * (The config writer never takes an LU mutex while holding the DB lock;
 * see config_runtime.c.) */
static int pr_save(void *arg, const void *blob, size_t len)
{
    return icfg_write_pr((int64_t)(intptr_t)arg, blob, len);
}

static int open_volume(const struct icfg_extent *e, struct volume **out)
{
    if (e->type == ICFG_EXTENT_DISK) {
        const char *ds = icfg_disk_dataset(e->disk);
        if (!ds)
            return -EINVAL;
        int rc = datasets_volume_open(ds, out);
        if (rc == -EHOSTUNREACH && datasets_volume_offline(ds, out) == 0) {
            /* Its RBD pool is still connecting (or its cluster does not
             * answer): the LU exists and answers BECOMING READY until the
             * pool comes online (DATASETS_POOL_ONLINE rebuilds it). */
            log_info("iscsi config: extent %s: the pool of volume %s is not reachable yet: its LU "
                     "is becoming ready",
                     e->name, ds);
            return 0;
        }
        if (rc < 0)
            log_warn("iscsi config: extent %s: cannot open volume %s: %s", e->name, ds,
                     strerror(-rc));
        return rc;
    }
    struct bdev *b;
    int rc = bdev_file_open_in_pool(e->path, e->ro, &b); /* confined: store/poolfs.h */
    if (rc < 0) {
        log_warn("iscsi config: extent %s: cannot open %s: %s", e->name, e->path, strerror(-rc));
        return rc;
    }
    char vname[96];
    snprintf(vname, sizeof(vname), "extent:%s", e->name);
    rc = volume_new(vname, b, (uint32_t)e->blocksize, VOLUME_SYNC_STANDARD, e->ro, out);
    if (rc < 0)
        log_warn("iscsi config: extent %s: cannot use %s: %s", e->name, e->path, strerror(-rc));
    return rc;
}

/* The SCSI rotation rate of an extent's rpm ("SSD": 1, "UNKNOWN": 0). */
static uint16_t rotation_rate(const char *rpm)
{
    if (strcmp(rpm, "SSD") == 0)
        return 1;
    unsigned v = 0;
    for (const char *c = rpm; *c >= '0' && *c <= '9'; c++)
        v = v * 10 + (unsigned)(*c - '0');
    return (uint16_t)v;
}

int icfg_lu_from_extent(const struct icfg_extent *e, struct scsi_lu **out)
{
    struct volume *vol;
    int rc = open_volume(e, &vol);
    if (rc < 0)
        return rc;
    int64_t id = e->id;
    struct scsi_lu_params p;
    memset(&p, 0, sizeof(p));
    p.block_size = (uint32_t)e->blocksize;
    /* pblocksize=true hides the physical block size (TrueNAS:
     * lb_per_pb_exp 0); otherwise report the volume's block size. */
    if (!e->pblocksize) {
        uint32_t vbs = volume_block_size(vol);
        while (p.block_size && (p.block_size << (p.pblock_exp + 1)) <= vbs && p.pblock_exp < 15)
            p.pblock_exp++;
    }
    snprintf(p.serial, sizeof(p.serial), "%s", e->serial);
    snprintf(p.naa, sizeof(p.naa), "%s", e->naa);
    snprintf(p.vendor, sizeof(p.vendor), "%s", e->vendor);
    p.rotation_rate = rotation_rate(e->rpm);
    p.readonly = e->ro;
    p.insecure_tpc = e->insecure_tpc;
    p.pr_store.save = pr_save;
    p.pr_store.arg = (void *)(intptr_t)id;

    /* Saved reservations (the DB lock is held by the caller). */
    void *pr = NULL;
    size_t pr_len = 0;
    if (icfg_read_pr(id, &pr, &pr_len) == 0 && pr) {
        p.pr_blob = pr;
        p.pr_blob_len = pr_len;
    }
    gateway_lu_params(vol, &p); /* a gateway group: identity from the RBD image */
    rc = scsi_lu_new(vol, &p, out);
    if (rc == 0)
        gateway_lu_attach(*out, vol); /* a gateway group: ALUA from the image lock */
    free(pr);
    volume_unref(vol);
    if (rc < 0)
        log_warn("iscsi config: extent %s: cannot create LU: %s", e->name, strerror(-rc));
    return rc;
}
