/*
 * libFuzzer target for the SCSI command decoder and handlers: random CDBs
 * plus data-out go through scsi_cmd_execute against a small memory-backed
 * LU, from two I_T nexuses (so reservations and unit attentions get
 * exercised). Input layout:
 *   byte 0      : flags (bit 0: second nexus, bits 1-2: data-in size class,
 *                 bit 3: read-only LU)
 *   bytes 1..16 : the CDB
 *   rest        : data-out
 * Every command must complete exactly once with a sane status and sense
 * length and never write past the data-in buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "scsi/scsi.h"

static struct volume *vol;
static struct scsi_lu *lu;
static struct scsi_nexus nexus[2];
static int completions;

static size_t list_luns(const struct scsi_nexus *n, uint64_t *out, size_t max)
{
    if (max)
        out[0] = 0;
    return 1;
}

static int pr_save(void *arg, const void *blob, size_t len)
{
    return 0;
}

static void setup(void)
{
    struct bdev *b;
    log_set_level(LOG_ERROR);
    if (bdev_memory_open(1u << 20, 0, &b) < 0)
        abort();
    if (volume_new("fuzz/cdb", b, 512, VOLUME_SYNC_STANDARD, false, &vol) < 0)
        abort();
    struct scsi_lu_params p;
    memset(&p, 0, sizeof p);
    p.pr_store.save = pr_save;
    if (scsi_lu_new(vol, &p, &lu) < 0)
        abort();
    for (int i = 0; i < 2; i++) {
        struct scsi_nexus *n = &nexus[i];
        memset(n, 0, sizeof *n);
        snprintf(n->initiator_name, sizeof n->initiator_name, "iqn.fuzz:%c", "ab"[i]);
        snprintf(n->initiator_port, sizeof n->initiator_port, "iqn.fuzz:%c,i,0x%012x", "ab"[i],
                 i + 1);
        snprintf(n->target_name, sizeof n->target_name, "iqn.fuzz:t");
        snprintf(n->target_port, sizeof n->target_port, "iqn.fuzz:t,t,0x0001");
        n->rel_tgt_port_id = 1;
        n->tpg_id = 1;
        n->list_luns = list_luns;
        scsi_nexus_init(n);
    }
}

static void on_done(struct scsi_cmd *c)
{
    completions++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t caps[] = {0, 18, 512, 65536};
    if (!lu)
        setup();
    if (size < 1 + 6)
        return 0;
    uint8_t flags = data[0];
    struct scsi_cmd c;
    memset(&c, 0, sizeof c);
    size_t cdb_len = size - 1 < SCSI_CDB_MAX ? size - 1 : SCSI_CDB_MAX;
    memcpy(c.cdb, data + 1, cdb_len);
    c.cdb_len = SCSI_CDB_MAX;
    c.lu = lu;
    c.nexus = &nexus[flags & 1];
    c.data_out = data + 1 + cdb_len;
    c.data_out_len = (uint32_t)(size - 1 - cdb_len);
    uint32_t cap = caps[(flags >> 1) & 3];
    /* data-in lands in an exactly sized heap buffer so ASan catches overruns */
    uint8_t *in = cap ? malloc(cap) : NULL;
    c.data_in = in;
    c.data_in_cap = cap;
    c.done = on_done;
    scsi_lu_set_readonly(lu, flags & 8);

    int before = completions;
    scsi_cmd_execute(&c);
    if (completions != before + 1)
        abort(); /* no reactor here: every command completes inline */
    if (c.data_in_len > cap || c.sense_len > SCSI_SENSE_MAX)
        abort();
    if (c.status == SCSI_STATUS_CHECK_CONDITION && c.sense_len < 18)
        abort();
    /* exercise the transport helpers on the same bytes */
    (void)scsi_cdb_data_out_length(lu, c.cdb, SCSI_CDB_MAX);
    free(in);
    return 0;
}
