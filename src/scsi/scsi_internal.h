/*
 * Private to src/scsi: the LU layout, the opcode table entry and the helpers
 * the command families share. Not for transports (they use scsi.h).
 */
#ifndef BLOCKD_SCSI_INTERNAL_H
#define BLOCKD_SCSI_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/iopool.h"
#include "core/iostats.h"
#include "scsi/scsi.h"

/* Limits we advertise in the Block Limits VPD page and enforce. */
#define SCSI_MAX_XFER_BYTES (32u << 20) /* MAXIMUM TRANSFER LENGTH, in bytes */
#define SCSI_MAX_CAW_BLOCKS 255u        /* MAXIMUM COMPARE AND WRITE LENGTH */
#define SCSI_MAX_UNMAP_DESCS 256u       /* MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT */
#define SCSI_MAX_UNMAP_LBAS 0xFFFFFFFFu /* MAXIMUM UNMAP LBA COUNT */
#define SCSI_CHUNK_BYTES (1u << 20)     /* pattern/verify buffers */
#define SCSI_PR_MAX_REGS 64u            /* registrations per LU */

/* Sense keys. */
enum {
    SK_NO_SENSE = 0x0,
    SK_NOT_READY = 0x2,
    SK_MEDIUM_ERROR = 0x3,
    SK_HARDWARE_ERROR = 0x4,
    SK_ILLEGAL_REQUEST = 0x5,
    SK_UNIT_ATTENTION = 0x6,
    SK_DATA_PROTECT = 0x7,
    SK_ABORTED_COMMAND = 0xB,
    SK_MISCOMPARE = 0xE,
};

/* Opcode table flags. */
enum scsi_op_flags {
    OPF_NO_LU = 1u << 0,        /* runs without an LU (INQUIRY, REPORT LUNS, REQUEST SENSE) */
    OPF_UA_EXEMPT = 1u << 1,    /* does not report pending unit attentions */
    OPF_PR_ALLOW = 1u << 2,     /* allowed whatever the persistent reservation */
    OPF_PR_READ = 1u << 3,      /* a read: allowed under Write Exclusive */
    OPF_RES2_ALLOW = 1u << 4,   /* allowed from others under an SPC-2 reservation */
    OPF_WRITE = 1u << 5,        /* modifies the medium: refused when read-only */
    OPF_RANGE_LOCK = 1u << 6,   /* takes the LBA range lock (shared) */
    OPF_RANGE_EXCL = 1u << 7,   /* takes the LBA range lock (exclusive: COMPARE AND WRITE) */
    OPF_HAS_SA = 1u << 8,       /* service action in byte 1 bits 0-4 */
    OPF_NEEDS_TRIM = 1u << 9,   /* only offered when the volume can trim */
    OPF_NEEDS_TPC = 1u << 10,   /* only offered when the extent allows third-party copy */
    OPF_NEEDS_ERASE = 1u << 11, /* only offered when deallocation erases (scsi_sanitize.c) */
};

enum scsi_dir { DIR_NONE = 0, DIR_IN = 1, DIR_OUT = 2 };

struct scsi_op {
    uint8_t opcode;
    uint8_t sa;
    uint8_t cdb_len;
    uint8_t dir;
    uint16_t flags;
    uint8_t usage[16]; /* CDB usage data: bits an initiator may set (REPORT SUPPORTED OPCODES) */
    void (*run)(struct scsi_cmd *c);
    const char *name;
    uint16_t timeout_s; /* nominal command timeout for RCTD */
};

/* EXTENDED COPY (LID1) limits reported in OPERATING PARAMETERS. */
#define SCSI_XCOPY_MAX_CSCDS 8u
#define SCSI_XCOPY_MAX_SEGS 64u
#define SCSI_XCOPY_MAX_DESC_LIST (SCSI_XCOPY_MAX_CSCDS * 32u + SCSI_XCOPY_MAX_SEGS * 28u)
#define SCSI_XCOPY_MAX_SEG_BLOCKS 0xFFFFu /* the NUMBER OF BLOCKS field is 16 bits */
#define SCSI_XCOPY_RECS 8u                /* held copy results per LU */

/* One EXTENDED COPY with a held LIST IDENTIFIER (LIST ID USAGE 00b): running,
 * or finished and kept for RECEIVE COPY RESULTS (COPY STATUS). */
struct scsi_xcopy_rec {
    bool used;
    bool running;
    bool held; /* LIST ID USAGE 00b: results kept after completion */
    uint8_t list_id;
    uint64_t nexus_id;
    uint8_t status; /* COPY MANAGER STATUS when done: 0 = completed without errors */
    uint16_t segments;
    uint64_t blocks; /* transfer count, in blocks (units 0xf1 scaled by block size) */
    uint64_t seq;    /* age, for reuse of the oldest finished slot */
};

/* Per I_T nexus state kept by an LU. */
struct scsi_nexus_state {
    uint64_t nexus_id;
    uint32_t ua_pending; /* bit per enum scsi_ua */
    uint16_t rel_tgt_port_id;
    char initiator_port[SCSI_PORT_NAME_MAX];
    struct scsi_nexus_state *next;
};

/* One persistent reservation registration (I_T nexus + key). */
struct scsi_pr_reg {
    uint64_t key;
    /* 0: registered through every target port (ALL_TG_PT=1), so through
     * every member of a gateway group; real ids are 1..65535. */
    uint16_t rel_tgt_port_id;
    char initiator_port[SCSI_PORT_NAME_MAX];
};

/* The reservation state of an LU (scsi_pr.c): what is persisted with APTPL
 * and, for LUs over shared storage (RBD), what every daemon serving the LU
 * shares through the backend. Nexuses are named by identity (initiator
 * port + relative target port id), never by a daemon-local session id. */
struct scsi_pr_state {
    struct scsi_pr_reg *regs; /* SCSI_PR_MAX_REGS slots, or NULL while none */
    size_t nregs;
    uint32_t generation; /* PRgeneration */
    bool aptpl;
    bool held;
    uint8_t type;
    size_t holder; /* index into regs for non-all-registrants types */
    /* SPC-2 RESERVE/RELEASE */
    bool res2_held;
    uint16_t res2_rel;
    char res2_port[SCSI_PORT_NAME_MAX];
    /* Shared LU only: the control mode page's SWP. Software write protect
     * is a property of the LU, for every I_T nexus through every daemon
     * that serves it, so it lives with the shared state (same compare-and-
     * swap, same notify); lu->swp is its enforced copy. Never saved: it
     * reverts to 0 when the LU powers on. A local LU keeps lu->swp only. */
    bool swp;
    /* The backend's sequence number of this copy (0: local LU). */
    uint64_t seq;
};

/* A shared reservation store (scsi_pr_shared.c): every blocking call runs
 * on the I/O pool. */
struct scsi_pr_shared;

struct scsi_lu {
    atomic_int refs;
    struct volume *vol;
    int mslot; /* iostats slot of vol (metrics), -1 none */
    uint32_t block_size;
    unsigned block_shift;
    uint8_t pblock_exp;
    uint16_t rotation_rate;
    atomic_bool readonly;
    /* control mode page SWP, set by MODE SELECT (not saved); for a shared
     * LU a copy of pr.swp, written with it under mu */
    atomic_bool swp;
    bool insecure_tpc;
    /* Its volume is a stand-in whose storage cannot be reached yet (an RBD
     * pool still connecting: bdev_is_offline): media access answers
     * NOT READY, BECOMING READY until a new LU replaces this one. */
    bool offline;
    char serial[33];
    char vendor[9];
    char product[17];
    char revision[5];
    uint8_t naa[16];
    uint8_t naa_len;
    struct scsi_pr_store pr_store;
    const struct scsi_alua_ops *alua; /* NULL: one group, optimized */
    void *alua_arg;
    struct scsi_pr_shared *shared; /* NULL: local reservations (pr_store) */
    struct io_job final_job;       /* frees a shared LU off the reactors */

    pthread_mutex_t mu; /* everything below */
    struct scsi_nexus_state *nexuses;
    uint64_t size_gen_seen;
    /* mode data last reported (WCE from the sync property, WP): a change
     * raises MODE PARAMETERS CHANGED on the next command */
    bool wce_seen;
    bool wp_seen;
    /* SPC-2 and SPC-4 reservations: the enforced copy. For a shared LU it
     * is a cache of the backend's state, replaced whenever a daemon of the
     * group changes it (before that daemon's command completes). */
    struct scsi_pr_state pr;
    /* LBA range lock */
    struct scsi_cmd *lock_active;
    struct scsi_cmd *lock_wait_head;
    struct scsi_cmd *lock_wait_tail;
    /* EXTENDED COPY list identifiers (scsi_xcopy.c) */
    struct scsi_xcopy_rec xcopy[SCSI_XCOPY_RECS];
    uint64_t xcopy_seq;
};

/* ---- sense / completion (scsi_sense.c) ---- */
void scsi_sense_fill(struct scsi_cmd *c, uint8_t key, uint8_t asc, uint8_t ascq);
/* INVALID FIELD IN CDB with a field pointer (byte, bit; bit < 0: no bit pointer). */
void scsi_fail_cdb(struct scsi_cmd *c, unsigned byte, int bit);
/* INVALID FIELD IN PARAMETER LIST with a field pointer into the data-out. */
void scsi_fail_param(struct scsi_cmd *c, unsigned byte, int bit);
void scsi_fail_lba_range(struct scsi_cmd *c);
void scsi_fail_write_protect(struct scsi_cmd *c);
void scsi_fail_param_len(struct scsi_cmd *c);
void scsi_fail_miscompare(struct scsi_cmd *c, uint32_t offset);
/* The one errno → sense mapping. write selects the medium error ASC. */
void scsi_fail_errno(struct scsi_cmd *c, int err, bool write);
/* Finish the command: release the range lock, free tmp, call done(). */
void scsi_complete(struct scsi_cmd *c);
/* GOOD status with min(avail, alloc_len) bytes of src as data-in (clipped
 * to the transport's buffer; xfer_want says what the command wanted). */
void scsi_complete_data(struct scsi_cmd *c, const void *src, uint32_t avail, uint32_t alloc_len);

/* ---- opcode table (scsi_table.c) ---- */
const struct scsi_op *scsi_op_find(uint8_t opcode, uint8_t sa, bool *opcode_known);
const struct scsi_op *scsi_op_table(size_t *n);
bool scsi_op_supported(const struct scsi_op *op, const struct scsi_lu *lu);

/* ---- LU state (scsi_lu.c) ---- */
uint64_t scsi_lu_blocks(const struct scsi_lu *lu);
/* write-protected by configuration (extent ro / volume read-only) */
bool scsi_lu_is_readonly(const struct scsi_lu *lu);
bool scsi_lu_wce(const struct scsi_lu *lu);
/* mu held: the state of nexus n (created with POWER_ON pending when new). */
struct scsi_nexus_state *scsi_lu_nexus_locked(struct scsi_lu *lu, const struct scsi_nexus *n);
/* mu held: queue ua for every known nexus except `except` (0: none). */
void scsi_lu_ua_all_locked(struct scsi_lu *lu, enum scsi_ua ua, uint64_t except);
/* mu held: queue ua for the nexuses of an I_T nexus identity (rel 0: through
 * any target port; port "*": every nexus). */
void scsi_lu_ua_port_locked(struct scsi_lu *lu, const char *port, uint16_t rel, enum scsi_ua ua);
/* Pop the highest-priority pending UA into c's sense; false if none. mu held. */
bool scsi_lu_ua_pop_locked(struct scsi_nexus_state *ns, struct scsi_cmd *c);
/* Range lock: true when granted now; else c is queued and op->run is called
 * later on c->owner. */
bool scsi_range_lock(struct scsi_cmd *c, uint64_t lba, uint64_t nblocks, bool excl);
void scsi_range_unlock(struct scsi_cmd *c);

/* ---- async I/O helper (scsi_io.c) ---- */
/* Submit c->priv.vreq (filled by the caller except owner/done/arg); when it
 * completes, next(c) runs; next returns true after preparing another vreq
 * to submit, false when the command is finished (it completed c). Inline
 * completions loop here instead of recursing. */
void scsi_io_submit(struct scsi_cmd *c, bool (*next)(struct scsi_cmd *c));
void scsi_vreq_prep(struct scsi_cmd *c, enum vreq_op op, unsigned flags, uint64_t off, uint64_t len,
                    void *buf);

/* ---- command families ---- */
void scsi_run_tur(struct scsi_cmd *c);
void scsi_run_request_sense(struct scsi_cmd *c);
void scsi_run_inquiry(struct scsi_cmd *c);
void scsi_run_read_capacity10(struct scsi_cmd *c);
void scsi_run_read_capacity16(struct scsi_cmd *c);
void scsi_run_report_luns(struct scsi_cmd *c);
void scsi_run_report_tpg(struct scsi_cmd *c);
void scsi_run_rsoc(struct scsi_cmd *c);
void scsi_run_mode_sense(struct scsi_cmd *c);
void scsi_run_mode_select(struct scsi_cmd *c);
void scsi_run_start_stop(struct scsi_cmd *c);
void scsi_run_prevent_allow(struct scsi_cmd *c);
void scsi_run_read(struct scsi_cmd *c);
void scsi_run_write(struct scsi_cmd *c);
void scsi_run_write_verify(struct scsi_cmd *c);
void scsi_run_verify(struct scsi_cmd *c);
void scsi_run_write_same(struct scsi_cmd *c);
void scsi_run_unmap(struct scsi_cmd *c);
void scsi_run_caw(struct scsi_cmd *c);
void scsi_run_orwrite(struct scsi_cmd *c);
void scsi_run_read_defect_data(struct scsi_cmd *c);
void scsi_run_sync_cache(struct scsi_cmd *c);
void scsi_run_prefetch(struct scsi_cmd *c);
void scsi_run_get_lba_status(struct scsi_cmd *c);
void scsi_run_reserve(struct scsi_cmd *c);
void scsi_run_release(struct scsi_cmd *c);
void scsi_run_pr_in(struct scsi_cmd *c);
void scsi_run_pr_out(struct scsi_cmd *c);
void scsi_run_xcopy(struct scsi_cmd *c);
void scsi_run_receive_copy_results(struct scsi_cmd *c);
void scsi_run_sanitize(struct scsi_cmd *c);
/* SANITIZE BLOCK ERASE is honest on this LU: the volume deallocates and
 * deallocated blocks read as zeros. */
bool scsi_lu_can_block_erase(const struct scsi_lu *lu);

/* PR / SPC-2 reservation check before dispatch (mu held). true: conflict. */
bool scsi_pr_conflict_locked(struct scsi_lu *lu, const struct scsi_nexus *n,
                             const struct scsi_op *op, const uint8_t *cdb);
int scsi_pr_load(struct scsi_lu *lu, const void *blob, size_t len);
/* An SPC-2 reservation holder to release: I_T nexus identity; port "" is
 * whoever holds it (LU reset). */
struct scsi_pr_res2_who {
    uint16_t rel;
    char port[SCSI_PORT_NAME_MAX];
};
/* Release s's SPC-2 reservation if w holds it; true if it did. */
bool scsi_pr_res2_release(struct scsi_pr_state *s, const struct scsi_pr_res2_who *w);
/* Shared LU: stop enforcing w's SPC-2 reservation here at once, and
 * release it in the cluster (asynchronously; every later update of this
 * daemon includes it until it is committed). */
void scsi_pr_shared_drop_res2(struct scsi_lu *lu, const struct scsi_pr_res2_who *w);
/* Release the SPC-2 reservation if n (NULL: anybody) holds it: nexus loss,
 * LU reset. Takes lu->mu; for a shared LU the update is asynchronous. */
void scsi_pr_res2_drop(struct scsi_lu *lu, const struct scsi_nexus *n);
/* Free the reservation state's memory. */
void scsi_pr_state_free(struct scsi_pr_state *s);

/* ---- shared reservations (scsi_pr_shared.c) ---- */
/* A unit attention a reservation change queues for an I_T nexus identity:
 * applied by every daemon to its own sessions. */
struct scsi_pr_ua {
    uint8_t ua;  /* enum scsi_ua */
    bool except; /* for every nexus but (port, rel) instead of for it */
    uint16_t rel;
    char port[SCSI_PORT_NAME_MAX];
};
#define SCSI_PR_MAX_UAS (2u * SCSI_PR_MAX_REGS)

/* A change computed by a service action on a copy of the state. */
struct scsi_pr_change {
    struct scsi_pr_state s;
    struct scsi_pr_ua uas[SCSI_PR_MAX_UAS];
    size_t nuas;
};

/* What the shared path runs on a fresh copy of the state: PR_* of scsi_pr.c
 * (0 ok and write, 1 conflict, 2 failed with sense set, 3 ok, nothing to
 * write). c may be NULL (background updates). */
typedef int (*scsi_pr_action)(struct scsi_cmd *c, struct scsi_pr_change *ch, const void *arg);
enum { SCSI_PR_OK = 0, SCSI_PR_CONFLICT = 1, SCSI_PR_FAILED = 2, SCSI_PR_NOOP = 3 };

/* Open the shared store for lu's volume if its storage is shared (RBD) and
 * load the state; 0 (lu->shared stays NULL for local storage) or -errno.
 * Blocking: control thread (scsi_lu_new). */
int scsi_pr_shared_open(struct scsi_lu *lu);
/* Close (blocking; not on a reactor). */
void scsi_pr_shared_close(struct scsi_lu *lu);
/* Run action on the shared state (read, act, compare-and-swap, notify) on
 * the I/O pool, then complete c on its owner with status from the action.
 * c NULL: a background update (arg copied: arg_len bytes). */
void scsi_pr_shared_update(struct scsi_lu *lu, struct scsi_cmd *c, scsi_pr_action action,
                           const void *arg, size_t arg_len);
/* PERSISTENT RESERVE IN on the shared state, read fresh from the store. */
void scsi_pr_shared_read(struct scsi_cmd *c);

/* scsi_pr.c helpers used by the shared path. */
int scsi_pr_state_copy(struct scsi_pr_state *dst, const struct scsi_pr_state *src);
/* Text form of a state (malloc'd, NUL-terminated); with a change's UAs and
 * seq line for a notify payload when uas/seq given. */
char *scsi_pr_state_format(const struct scsi_pr_state *s, const struct scsi_pr_change *uas,
                           uint64_t seq, size_t *len);
/* Parse the text form (len 0: empty state); seq/uas filled when present. */
int scsi_pr_state_parse(const char *text, size_t len, struct scsi_pr_change *out, uint64_t *seq);
/* mu held: queue the change's UAs on lu's own nexuses. */
void scsi_pr_apply_uas_locked(struct scsi_lu *lu, const struct scsi_pr_change *ch);
/* Add a unit attention to a change: for the I_T nexus identity (port,
 * rel), or with except for every nexus but that one (MODE PARAMETERS
 * CHANGED for the others). Dropped beyond SCSI_PR_MAX_UAS. */
void scsi_pr_change_ua(struct scsi_pr_change *ch, const char *port, uint16_t rel, enum scsi_ua ua,
                       bool except);
/* Fill c's PR IN data from s and complete c. */
void scsi_pr_in_reply(struct scsi_cmd *c, const struct scsi_pr_state *s, bool ptpl_c);

/* CDB field decoding shared by the I/O commands: LBA and transfer length by
 * opcode. false for opcodes without them. */
bool scsi_cdb_lba_len(const uint8_t *cdb, uint64_t *lba, uint32_t *len);

static inline uint32_t scsi_alloc_len(const struct scsi_cmd *c, uint32_t want)
{
    return want < c->data_in_cap ? want : c->data_in_cap;
}

/* Metrics: the iostats operation of a CDB, or IOSTATS_NOP for commands
 * not counted (INQUIRY, TEST UNIT READY, ...). */
int scsi_iostats_op(const uint8_t *cdb);

#endif
