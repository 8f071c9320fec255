/*
 * NVMe reservations, private to src/nvme: the state and the object that
 * nvme_resv.c (the rules, the local store) and nvme_resv_shared.c (the
 * state of a namespace over an RBD image, kept in the cluster) share.
 */
#ifndef BLOCKD_NVME_RESV_PRIV_H
#define BLOCKD_NVME_RESV_PRIV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/iopool.h"

struct nvme_cmd;
struct volume;

#define RESV_MAX_REGS 64u

struct resv_reg {
    uint8_t hostid[16];
    uint64_t key;
};

/* What is saved and what a command changes (copied whole). */
struct resv_state {
    uint32_t gen;
    uint8_t type; /* 1..6, 0: not held */
    bool ptpl;
    uint8_t holder[16]; /* the holder's host (types other than all registrants) */
    size_t nregs;
    struct resv_reg regs[RESV_MAX_REGS];
};

/* The arguments of a command. */
struct resv_args {
    uint8_t op; /* the opcode (Register, Acquire, Release), or RESV_OP_* */
    uint8_t hostid[16];
    uint8_t action; /* RREGA, RACQA, RRELA */
    bool iekey;
    uint8_t rtype;
    uint8_t cptpl;         /* Register; RESV_OP_PTPL: 3 on, 2 off */
    uint64_t crkey, nrkey; /* nrkey: NRKEY or PRKEY */
};
#define RESV_OP_PTPL 0xfe   /* Set Features Reservation Persistence */
#define RESV_OP_REPORT 0xff /* read only */

struct nvme_resv_shared;

struct nvme_resv {
    atomic_int refs;
    int64_t ns_id;
    atomic_bool held; /* s.type != 0: the I/O check's fast path */
    pthread_mutex_t mu;
    struct resv_state s;             /* under mu; for a shared one the cache of the cluster's */
    uint64_t seq;                    /* shared: the cluster's sequence number of s */
    struct nvme_resv_shared *shared; /* NULL: local (the store of nvme_resv.h) */
    struct io_job final_job;         /* frees a shared one off the reactors */
    struct nvme_resv *next;
};

/* nvme_resv.c */
/* Apply a's command to s: 0 or the NVMe status that refuses it. */
uint16_t resv_apply(struct resv_state *s, const struct resv_args *a);
/* The text form (malloc'd; with a "seq" line when seq != 0) and its parse
 * (*seq, may be NULL, gets the line's value or 0). */
char *resv_format(const struct resv_state *s, uint64_t seq);
int resv_parse(struct resv_state *s, const char *text, uint64_t *seq);
/* A host identifier as 32 hex digits (out: 33 bytes), and back (0 or
 * -EINVAL). */
void resv_hex_put(char *out, const uint8_t *id);
int resv_hex_get(const char *in, uint8_t *id);
/* Install s (from the cluster, sequence seq) in r's cache if newer (true;
 * old, may be NULL, gets what it replaced). */
bool resv_install(struct nvme_resv *r, const struct resv_state *s, uint64_t seq,
                  struct resv_state *old);
/* Fill the Reservation Report (EDS) of s into out (len bytes, zeroed). */
void resv_report_fill(const struct resv_state *s, uint8_t *out, size_t len);

/* nvme_resv_notice.c: what a change tells the other hosts. */
enum { RESV_NOTE_REG_PREEMPTED = 1, RESV_NOTE_RELEASED = 2, RESV_NOTE_PREEMPTED = 3 };
#define RESV_NOTES_MAX (2 * RESV_MAX_REGS)
struct resv_note {
    uint8_t hostid[16];
    uint8_t type; /* RESV_NOTE_* */
};
/* The notices of the change old -> new that a made (up to RESV_NOTES_MAX
 * in out): how many. */
size_t resv_notes(const struct resv_state *old, const struct resv_state *new,
                  const struct resv_args *a, struct resv_note *out);
/* Give each notice to the controllers of its host on this daemon that
 * serve r's namespace (a log entry, an event). No lock held. */
void resv_notify(const struct nvme_resv *r, const struct resv_note *notes, size_t n);

/* nvme_resv_shared.c */
/* Open the cluster's state of the RBD volume vol for r (control thread):
 * 0 or -errno (r keeps no reservations then). */
int resv_shared_open(struct nvme_resv *r, struct volume *vol);
/* Run a (a change, or a Report) on the cluster's state on the I/O pool,
 * then complete cmd on its reactor. */
void resv_shared_run(struct nvme_resv *r, struct nvme_cmd *cmd, const struct resv_args *a);
/* Close and free r (last reference; any thread: the close runs on the
 * pool). */
void resv_shared_free(struct nvme_resv *r);

#endif
