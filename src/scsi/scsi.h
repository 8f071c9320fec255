/*
 * scsi/: a transport-independent SCSI block target (SPC-4 / SBC-3 as
 * initiators use them). A transport (iSCSI) hands in a CDB, the LU it
 * addresses, the I_T nexus it arrived on and the data-out bytes; scsi/
 * returns status, sense and data-in through an asynchronous completion.
 * Nothing here knows about PDUs.
 *
 * Objects:
 *   struct scsi_lu     — a logical unit over a struct volume (refcounted;
 *                        created by the config side, shared by every session
 *                        of the target that maps it). Holds the per-LU state
 *                        that outlives sessions: persistent reservations,
 *                        SPC-2 reservation, unit attention queues per I_T
 *                        nexus, the LBA range lock for COMPARE AND WRITE.
 *   struct scsi_nexus  — one I_T nexus (an iSCSI session): initiator port
 *                        name, target port name and relative target port id.
 *                        Owned by the transport, embedded or allocated; must
 *                        outlive every command that points at it.
 *   struct scsi_cmd    — one command; owned by the transport (embed it in the
 *                        task), must stay valid until done() is called.
 *
 * Threads: every function is thread-safe. An LU is used from several
 * reactors at once; its shared state is under a per-LU mutex, never held
 * across I/O. A command's done() runs on cmd->owner's thread (via
 * reactor_post or inline when execution finishes there), or on any thread
 * when owner is NULL (tests, fuzzers).
 */
#ifndef BLOCKD_SCSI_SCSI_H
#define BLOCKD_SCSI_SCSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/reactor.h"
#include "store/volume.h"

#define SCSI_CDB_MAX 16
#define SCSI_SENSE_MAX 32      /* fixed-format sense; we produce 18 bytes */
#define SCSI_PORT_NAME_MAX 256 /* "iqn....,i,0x<isid>" incl. NUL (SPC-4 TransportID) */
#define SCSI_LUN_MAX 16383     /* LUN ids 0..16383 (flat space addressing) */

/* SAM status codes. */
enum scsi_status {
    SCSI_STATUS_GOOD = 0x00,
    SCSI_STATUS_CHECK_CONDITION = 0x02,
    SCSI_STATUS_CONDITION_MET = 0x04,
    SCSI_STATUS_BUSY = 0x08,
    SCSI_STATUS_RESERVATION_CONFLICT = 0x18,
    SCSI_STATUS_TASK_SET_FULL = 0x28,
    SCSI_STATUS_TASK_ABORTED = 0x40,
};

/* ------------------------------------------------------------------ */
/* Logical units                                                       */
/* ------------------------------------------------------------------ */

/*
 * Persistence of APTPL persistent reservations. scsi/ serializes its PR
 * state to an opaque, versioned byte blob; the config layer stores the blob
 * (e.g. a column of the extent row) and hands it back at scsi_lu_new().
 * save() is called on the thread executing the PERSISTENT RESERVE OUT (a
 * reactor) with the LU mutex held, so calls are ordered; it must not call
 * into scsi/ and should be quick (one small SQLite write). len == 0 means
 * "nothing to persist" (APTPL cleared or no registrations): delete the blob.
 * Return 0 or -errno; on failure the PR OUT command fails with a hardware
 * error sense and the in-memory state is rolled back.
 */
struct scsi_pr_store {
    int (*save)(void *arg, const void *blob, size_t len);
    void *arg;
};

/* Properties of a logical unit (an iscsi.extent). Copied by scsi_lu_new. */
struct scsi_lu_params {
    /* Logical block size presented to initiators: 512, 1024, 2048 or 4096;
     * 0 = the volume's block size. The volume size must be a multiple. */
    uint32_t block_size;
    /* Physical block = logical block << pblock_exp (READ CAPACITY 16). */
    uint8_t pblock_exp;
    /* Unit serial number (VPD 0x80), printable ASCII, ≤ 32 chars. */
    char serial[33];
    /* NAA identifier as hex, "0x" optional: 16 digits (NAA 5, 8 bytes) or
     * 32 digits (NAA 6, 16 bytes). "" → derived from the serial. */
    char naa[35];
    char vendor[9];   /* "" → "BLOCKD" */
    char product[17]; /* "" → "iSCSI Disk" */
    char revision[5]; /* "" → "0123" */
    /* Medium rotation rate (VPD 0xB1): 0 = not reported, 1 = non-rotating
     * (SSD), else RPM. */
    uint16_t rotation_rate;
    bool readonly; /* in addition to the volume's own read-only flag */
    /* Allow EXTENDED COPY (LID1) and RECEIVE COPY RESULTS (3PC=1) between
     * blocks of this LU; false: both are reported unsupported (3PC=0). */
    bool insecure_tpc;
    /* Saved PR state (from a previous save()); NULL/0 = none. */
    const void *pr_blob;
    size_t pr_blob_len;
    struct scsi_pr_store pr_store; /* save == NULL: APTPL not supported */
};

struct scsi_lu;

/*
 * Create an LU over vol (takes a volume reference of its own). Fails with
 * -EINVAL if the block size is not one of 512..4096 or does not divide the
 * volume size, or a PR blob does not parse. The LU starts with a POWER ON
 * unit attention pending for every I_T nexus that will address it.
 * Returns 0 with *out holding one reference, or -errno.
 */
int scsi_lu_new(struct volume *vol, const struct scsi_lu_params *p, struct scsi_lu **out);
void scsi_lu_ref(struct scsi_lu *lu);
/* Drops a reference; the last one frees the LU and its volume reference.
 * Commands in flight hold references, so this is safe at any time. */
void scsi_lu_unref(struct scsi_lu *lu);

struct volume *scsi_lu_volume(const struct scsi_lu *lu);
uint32_t scsi_lu_block_size(const struct scsi_lu *lu);

/* Live property change: read-only on/off. The next command of every nexus
 * sees MODE PARAMETERS CHANGED (the WP bit moved); the same happens by
 * itself when the volume's sync property flips WCE, or its read-only flag. */
void scsi_lu_set_readonly(struct scsi_lu *lu, bool ro);

/* Unit attention conditions the transport / control plane can raise. */
enum scsi_ua {
    SCSI_UA_POWER_ON = 0,            /* 29/00 POWER ON, RESET, OR BUS DEVICE RESET */
    SCSI_UA_BUS_RESET,               /* 29/02 (target warm reset) */
    SCSI_UA_LU_RESET,                /* 29/03 BUS DEVICE RESET FUNCTION OCCURRED */
    SCSI_UA_NEXUS_LOSS,              /* 29/07 I_T NEXUS LOSS OCCURRED */
    SCSI_UA_MODE_CHANGED,            /* 2A/01 MODE PARAMETERS CHANGED */
    SCSI_UA_RESERVATIONS_PREEMPTED,  /* 2A/03 */
    SCSI_UA_RESERVATIONS_RELEASED,   /* 2A/04 */
    SCSI_UA_REGISTRATIONS_PREEMPTED, /* 2A/05 */
    SCSI_UA_CAPACITY_CHANGED,        /* 2A/09 CAPACITY DATA HAS CHANGED */
    SCSI_UA_INQUIRY_CHANGED,         /* 3F/03 INQUIRY DATA HAS CHANGED */
    SCSI_UA_LUNS_CHANGED,            /* 3F/0E REPORTED LUNS DATA HAS CHANGED */
    /* 28/00 NOT READY TO READY CHANGE, MEDIUM MAY HAVE CHANGED: the
     * volume's contents were replaced under the LU (a snapshot rollback),
     * so an initiator drops what it cached of the medium. */
    SCSI_UA_MEDIUM_CHANGED,
    /* 2A/06 ASYMMETRIC ACCESS STATE CHANGED: the ALUA states an LU reports
     * (scsi_lu_set_alua) moved, e.g. another gateway now holds the lock. */
    SCSI_UA_ALUA_CHANGED,
    SCSI_UA_COUNT
};

/* Queue ua for every I_T nexus of lu seen so far (new ones start with
 * POWER_ON). A resize of the volume (CAPACITY_CHANGED) and a change of its
 * sync or read-only property (MODE_CHANGED) are noticed by scsi/ itself on
 * the next command; the control plane calls this for LUN map changes
 * (LUNS_CHANGED), for INQUIRY data changes (INQUIRY_CHANGED) and after a
 * rollback replaced the volume's contents (MEDIUM_CHANGED). */
void scsi_lu_raise_ua(struct scsi_lu *lu, enum scsi_ua ua);

/*
 * Implicit ALUA across several targets serving one LU (gateway/): the
 * provider reports every target port group with its state; REPORT TARGET
 * PORT GROUPS lists them in that order. Without a provider the LU has one
 * group, the nexus' own, active/optimized.
 *   report:  fill up to max descriptors, return how many there are. Called
 *            on the command's thread (a reactor): must not block.
 *   release: the LU is being freed (any thread, must not block).
 *   port_state: the state of port group tpg_id (the nexus' own) for this
 *            command; UNAVAILABLE fails every command but the ones SPC-4
 *            allows there with NOT READY 04/0C, TRANSITIONING with 04/0A
 *            (both make a multipath initiator retry on another path).
 *            Same thread rules as report; NULL: always accessible.
 */
enum scsi_alua_state {
    SCSI_ALUA_OPTIMIZED = 0x0,
    SCSI_ALUA_NON_OPTIMIZED = 0x1,
    SCSI_ALUA_STANDBY = 0x2,
    SCSI_ALUA_UNAVAILABLE = 0x3,
    SCSI_ALUA_TRANSITIONING = 0xf,
};
struct scsi_tpg_desc {
    uint16_t tpg_id;
    uint16_t rel_port_id; /* the group's one target port */
    uint8_t state;        /* enum scsi_alua_state */
};
struct scsi_alua_ops {
    size_t (*report)(void *arg, struct scsi_tpg_desc *out, size_t max);
    void (*release)(void *arg);
    uint8_t (*port_state)(void *arg, uint16_t tpg_id);
};
/* Set once, right after scsi_lu_new and before the LU is used. */
void scsi_lu_set_alua(struct scsi_lu *lu, const struct scsi_alua_ops *ops, void *arg);
/* The backend of lu reconnected to its cluster with a new client (a
 * fenced gateway member rejoining, docs/ha.md): if its reservations are
 * shared (an RBD image), watch their object again (on the new client)
 * and reload them, in the background on the I/O pool; until then the
 * next reservation command reloads first. Non-blocking, any thread but
 * a listener of the object's watch. */
void scsi_lu_shared_resync(struct scsi_lu *lu);

/* ------------------------------------------------------------------ */
/* I_T nexus                                                           */
/* ------------------------------------------------------------------ */

/*
 * One I_T nexus. The transport fills the names and calls scsi_nexus_init()
 * once (it assigns the unique id LUs key their per-nexus state on).
 *   initiator_port: SPC-4 iSCSI initiator port name,
 *                   "<InitiatorName>,i,0x<ISID as 12 hex digits>"
 *   initiator_name: "<InitiatorName>" (for PR TransportIDs, SPC-2 reserve)
 *   target_port:    "<TargetName>,t,0x<TPGT as 4 hex digits>"
 *   target_name:    "<TargetName>"
 *   rel_tgt_port_id: relative target port identifier (1..65535)
 *   tpg_id:         target port group (REPORT TARGET PORT GROUPS; 1 is fine)
 *   list_luns:      REPORT LUNS source: fills out[] with up to max LUN ids
 *                   of the target (sorted) and returns how many exist (may
 *                   be > max). Called on the command's thread.
 */
struct scsi_nexus {
    char initiator_port[SCSI_PORT_NAME_MAX];
    char initiator_name[SCSI_PORT_NAME_MAX];
    char target_port[SCSI_PORT_NAME_MAX];
    char target_name[SCSI_PORT_NAME_MAX];
    uint16_t rel_tgt_port_id;
    uint16_t tpg_id;
    size_t (*list_luns)(const struct scsi_nexus *n, uint64_t *out, size_t max);
    void *arg;   /* for list_luns */
    uint64_t id; /* private: set by scsi_nexus_init */
};

void scsi_nexus_init(struct scsi_nexus *n);

/*
 * The nexus is gone (logout, connection loss with the session ended).
 * Frees its per-LU state: pending unit attentions, an SPC-2 reservation it
 * held. Persistent reservations and registrations stay (SPC-4). Call for
 * every LU the session could address, after its last command completed.
 */
void scsi_lu_nexus_lost(struct scsi_lu *lu, const struct scsi_nexus *n);
/* A logout is ending nexus n: for an LU other daemons serve too (RBD), an
 * SPC-2 reservation n holds is released in the cluster now, so the
 * transport can answer the logout after it. false: nothing to release
 * (done not used); true: done->fn(done) runs on owner once released. */
bool scsi_lu_nexus_release_shared(struct scsi_lu *lu, const struct scsi_nexus *n,
                                  struct reactor *owner, struct reactor_msg *done);

/* ------------------------------------------------------------------ */
/* Task management (SAM-5 §7). The transport aborts/waits for its tasks;   */
/* these apply the LU-side effects.                                     */
/* ------------------------------------------------------------------ */

/* LOGICAL UNIT RESET received on nexus n: releases an SPC-2 reservation,
 * keeps persistent reservations (SPC-4 §5.12) and raises LU_RESET on every
 * nexus, the requester's included (SAM-5 §7.7). */
void scsi_lu_reset(struct scsi_lu *lu, const struct scsi_nexus *n);
/* After scsi_lu_reset, for an LU other daemons serve too (an RBD image; see
 * docs/ha.md): tell them, so that their sessions get the LU RESET unit
 * attention as well. Returns false when there is nobody to tell (done is
 * not used); else true, and done->fn(done) runs later on owner once every
 * daemon applied it (or did not answer within the notify timeout). */
bool scsi_lu_reset_shared(struct scsi_lu *lu, struct reactor *owner, struct reactor_msg *done);
/* TARGET WARM RESET: the same with BUS_RESET; call for each LU of the target. */
void scsi_lu_target_reset(struct scsi_lu *lu, const struct scsi_nexus *n);
/* ABORT TASK SET / CLEAR TASK SET on lu from n: no LU state changes beyond
 * what the transport does with its tasks (TAS=0, QErr=0); provided so a
 * transport does not need to know that. */
void scsi_lu_abort_task_set(struct scsi_lu *lu, const struct scsi_nexus *n);

/* ------------------------------------------------------------------ */
/* Commands                                                            */
/* ------------------------------------------------------------------ */

struct scsi_cmd;
typedef void (*scsi_cmd_done_fn)(struct scsi_cmd *c);

struct scsi_cmd {
    /* ---- in (filled by the transport) ---- */
    uint8_t cdb[SCSI_CDB_MAX];
    uint8_t cdb_len; /* bytes valid in cdb (iSCSI: 16) */
    uint64_t lun;    /* decoded LUN id (scsi_lun_decode) */
    /* The LU lun maps to, or NULL when the target maps nothing there: then
     * INQUIRY answers "peripheral qualifier 3", REPORT LUNS and REQUEST
     * SENSE work, anything else is LOGICAL UNIT NOT SUPPORTED. The caller
     * holds a reference for the duration of the command. */
    struct scsi_lu *lu;
    const struct scsi_nexus *nexus;
    /* Data-out: every byte the initiator sent (the transport collects
     * immediate, unsolicited and R2T data before execute). NULL/0 if none. */
    const uint8_t *data_out;
    uint32_t data_out_len;
    /* Data-in buffer of data_in_cap bytes (= the expected data transfer
     * length); scsi/ writes at most that much. NULL/0 for no data-in. */
    uint8_t *data_in;
    uint32_t data_in_cap;
    struct reactor *owner; /* done() runs here; NULL: any thread */
    scsi_cmd_done_fn done;
    void *arg; /* for the transport */

    /* ---- out (valid in done()) ---- */
    uint8_t status;                /* enum scsi_status */
    uint8_t sense_len;             /* 0 or 18 (with CHECK CONDITION) */
    uint8_t sense[SCSI_SENSE_MAX]; /* fixed format (0x70) */
    /* Bytes placed in data_in (≤ data_in_cap). */
    uint32_t data_in_len;
    /* Bytes the command itself wanted to move in its data direction (from
     * the CDB: transfer length × block size, or the allocation length
     * clipped to what exists). The transport compares it with the expected
     * transfer length for the iSCSI residual: want < expected → underflow
     * (residual = expected - want), want > expected → overflow. For
     * data-in commands the transport sends data_in_len bytes. */
    uint32_t xfer_want;

    /* ---- private to scsi/ ---- */
    struct {
        struct vreq vreq;
        struct reactor_msg msg;           /* resumes a command parked on the range lock */
        const void *op;                   /* opcode table entry */
        bool (*next)(struct scsi_cmd *c); /* continuation of a multi-step command */
        _Atomic int phase;                /* inline-completion trampoline state */
        uint64_t lba;
        uint32_t nblocks;
        uint32_t step;
        uint64_t pos;
        uint64_t end;
        uint8_t *tmp; /* bufpool buffer (VERIFY, CAW, WRITE SAME) */
        size_t tmp_len;
        struct scsi_cmd *lock_next; /* LBA range lock lists */
        struct scsi_cmd *lock_prev;
        struct scsi_cmd *grant_next;
        uint64_t lock_start, lock_end;
        uint8_t lock_state;
        bool lock_excl;
        uint64_t mt0; /* iostats_start time; 0: not counted */
    } priv;
};

/*
 * Execute c. Validates the CDB against the opcode table (unknown opcode,
 * reserved bits, LUN, unit attention, reservation conflict) and runs it.
 * done(c) is called exactly once — possibly before scsi_cmd_execute returns
 * (inline completion) — with status/sense/data filled. Commands cannot be
 * cancelled once started; a transport aborting a task waits for done() and
 * drops the response. Call on the thread that owns c (normally c->owner).
 */
void scsi_cmd_execute(struct scsi_cmd *c);

/*
 * The data-out byte count the CDB itself implies for lu (WRITE: blocks ×
 * block size; UNMAP/MODE SELECT/PR OUT: parameter list length; COMPARE
 * AND WRITE: 2 × blocks × size), 0 for commands without data-out, or -1
 * when it cannot be decoded (unknown opcode, short CDB). Lets a transport
 * size its buffer / detect overflow before data arrives; the transport's
 * expected length stays authoritative for what is transferred.
 */
int64_t scsi_cdb_data_out_length(const struct scsi_lu *lu, const uint8_t *cdb, size_t cdb_len);

/* Whether the CDB's opcode carries data-out (initiator → target). */
bool scsi_cdb_is_write(const uint8_t *cdb);

/* SAM-5 LUN encoding for the 8-byte LUN field: LUNs < 256 use peripheral
 * device addressing (00 LL), others flat space (40|hi lo). decode returns
 * UINT64_MAX for an address it does not understand. */
void scsi_lun_encode(uint64_t lun, uint8_t out[8]);
uint64_t scsi_lun_decode(const uint8_t in[8]);

/* Convenience for a transport that must answer by itself (e.g. a command
 * with a bad task attribute): fill c with CHECK CONDITION key/asc/ascq. */
void scsi_cmd_set_sense(struct scsi_cmd *c, uint8_t key, uint8_t asc, uint8_t ascq);

#endif
