/*
 * Shared by the SCSI unit tests: run one CDB through scsi_cmd_execute and
 * capture status, sense and data-in; and a small LU over a memory volume
 * (512-byte blocks, 4 MiB) with one I_T nexus.
 */
#ifndef BLOCKD_TEST_SCSI_HARNESS_H
#define BLOCKD_TEST_SCSI_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "scsi/scsi.h"

#define BS 512
#define VOL_SIZE (4u << 20) /* 8192 blocks of 512 */
#define BLOCKS (VOL_SIZE / BS)

struct result {
    uint8_t status;
    uint8_t key, asc, ascq;
    uint8_t sense[SCSI_SENSE_MAX];
    uint32_t len;
    uint32_t want;
    uint8_t data[16384];
};

/* Counts completions; every command the tests run must complete inline. */
extern volatile int harness_done_calls;
void harness_on_done(struct scsi_cmd *c);

/* Run one command (cdb_len bytes, padded to 16); cap = data-in buffer size,
 * at most sizeof r->data. Asserts that it completed. */
void harness_run(struct scsi_lu *lu, const struct scsi_nexus *n, const uint8_t *cdb, size_t cdb_len,
                 const void *out, uint32_t out_len, uint32_t cap, struct result *r);
void expect_sense(const struct result *r, uint8_t key, uint8_t asc, uint8_t ascq);

/* An LU (serial, fixed NAA, insecure_tpc as given) over a memory volume. */
struct lu_fixture {
    struct volume *vol;
    struct scsi_lu *lu;
    struct scsi_nexus a;
};

struct lu_fixture *lu_fixture_new(const char *vol_name, const char *serial, bool tpc);
void lu_fixture_free(struct lu_fixture *f);
/* A 16-byte CDB on nexus a. */
void lu_run(struct lu_fixture *f, const uint8_t cdb[16], const void *out, uint32_t out_len,
            uint32_t cap, struct result *r);
/* TEST UNIT READY until the power-on unit attention is gone. */
void lu_clear_ua(struct lu_fixture *f);
/* READ(16) / WRITE(16) of n blocks at lba; asserts GOOD. */
void lu_rw(struct lu_fixture *f, bool write, uint64_t lba, uint32_t n, uint8_t *buf);

#endif
