/*
 * The NVMe/TCP target's state, private to src/nvme (the engine files):
 *
 *   nvme_conn.c      a connection (one queue): accept, admission, command
 *                    slots and the payload bound, close, shutdown drain.
 *   nvme_reader.c    the PDU reader: ICReq, headers, digests, in-capsule
 *                    and H2CData payloads, SGLs, dispatch.
 *   nvme_send.c      C2HData, responses, R2T, terminate requests.
 *   nvme_ctrl.c      controllers: the CNTLID table, keep-alive,
 *                    asynchronous events, teardown, subsystem changes,
 *                    the sessions list.
 *   nvme_fabrics.c   Fabrics commands: Connect, Property Get/Set,
 *                    Disconnect.
 *   nvme_admin.c     admin commands (Identify, Get Log Page, features...).
 *   nvme_identify.c  the Identify data structures.
 *   nvme_io.c        NVM command set I/O commands over the volume.
 *   nvme_resv.c      reservations (nvme_resv.h): the commands, the check.
 *   nvme_resv_shared.c  the reservations of an RBD namespace, in the cluster.
 *   nvme_resv_notice.c  reservation notifications (log page 80h, events).
 *   nvme_discovery.c the discovery log page.
 *   nvme_auth.c      in-band authentication (DH-HMAC-CHAP) of a queue;
 *                    its computations in nvme_dhchap.{h,c}.
 *
 * Threads: a struct nvme_queue lives on its connection's reactor. A struct
 * nvme_ctrl is shared by its queues (several reactors): its mutable fields
 * are under ctrl->lock, except subsys_gen and last_seen_ns (atomics).
 */
#ifndef BLOCKD_NVME_INTERNAL_H
#define BLOCKD_NVME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/admit.h"
#include "core/conn.h"
#include "core/reactor.h"
#include "core/registry.h"
#include "nvme/nvme_proto.h"
#include "nvme/nvme_target.h"
#include "nvme/nvme_view.h"
#include "store/volume.h"

/* Limits the target advertises and enforces. */
#define NVME_MDTS 8                        /* 2^8 pages of 4 KiB: 1 MiB */
#define NVME_MAX_XFER (4096u << NVME_MDTS) /* bytes per command */
#define NVME_MAXH2CDATA (128u * 1024)      /* per H2CData PDU (ICResp) */
#define NVME_C2H_CHUNK NVME_MAX_XFER       /* per C2HData PDU we send: one per read */
#define NVME_ADMIN_QSIZE 32                /* admin queue entries */
#define NVME_DEFAULT_QSIZE 128             /* I/O queue entries, port unset */
#define NVME_QSIZE_MAX 1024                /* MQES + 1, and a port's cap */
#define NVME_ADMIN_INLINE 8192             /* in-capsule data on the admin queue */
#define NVME_DEFAULT_INLINE 16384          /* an I/O queue's, port unset */
#define NVME_INLINE_MAX (NVME_MAX_XFER)    /* a port's cap */
#define NVME_AERL 3                        /* 0-based: 4 events held */
#define NVME_HELD_MAX (64u << 20)          /* payload bytes a queue holds */
#define NVME_HELD_BUDGET (512u << 20)      /* payload bytes of every queue together */
#define NVME_CHANGED_NS_MAX 1024           /* entries of log page 04h */
#define NVME_CNTLID_MAX 0xffef             /* 0xfff0.. are reserved */
#define NVME_DISC_KATO_MS 120000           /* a discovery controller connected with KATO 0 */

struct nvme_queue;
struct nvme_auth;      /* a queue's authentication transaction (nvme_auth.c) */
struct nvme_auth_keys; /* a controller's DH-HMAC-CHAP keys (nvme_auth.c) */

struct nvme_ns_size {
    uint32_t nsid;
    uint64_t bytes;
};

/* One controller: created by an admin queue's Connect (dynamic model). */
struct nvme_ctrl {
    pthread_mutex_t lock;
    atomic_int refs;
    uint16_t cntlid;
    bool discovery;
    struct nvme_subsys *subsys; /* ref; NULL for a discovery controller */
    int64_t subsys_id;          /* its nvmet.subsys row (0: discovery) */
    atomic_uint subsys_gen;     /* moves when subsys is replaced */
    char hostnqn[NVME_NQN_MAX + 1];
    char subnqn[NVME_NQN_MAX + 1];
    uint8_t hostid[16];
    char peer[80];
    int64_t port_id;
    uint32_t inline_size; /* I/O queues' in-capsule data (IOCCSZ) */
    uint16_t io_qsize;    /* the port's max_queue_size */
    uint16_t nr_io_queues;
    uint32_t cc, csts;
    uint32_t kato_ms;
    uint32_t aec;
    struct nvme_auth_keys *auth_keys; /* NULL: the host has no key, no authentication */
    _Atomic uint64_t last_seen_ns;
    struct nvme_queue *admin; /* weak: cleared by the queue at close */
    struct nvme_queue **ioq;  /* [nr_io_queues + 1], weak */
    /* asynchronous events: AER commands held (their CIDs) and events to send */
    uint16_t aer_cids[NVME_AERL + 1];
    unsigned naer;
    uint32_t aen_pending[4];
    unsigned naen;
    /* the namespaces' sizes as last seen, to tell a resize from no change */
    struct nvme_ns_size *sizes;
    size_t nsizes;
    uint32_t changed_ns[NVME_CHANGED_NS_MAX];
    unsigned nchanged;
    bool changed_overflow;
    /* ANA (nvme_ana.c): the state as last seen by a log page read or
     * the watch, its change count, and what the watch last told the host */
    uint64_t ana_sig, ana_chgcnt, ana_aen_sig;
    uint64_t ana_inputs; /* the watch's last inputs (ana_inputs()): unchanged, no recompute */
    struct reactor_msg aen_msg; /* delivers events on the admin queue's reactor */
    struct conn *aen_conn;      /* ref while aen_msg is posted */
    bool dead;
    uint64_t connected_at;
    struct registry_entry reg;
    /* reservation notifications (nvme_resv_notice.c), under lock: the log
     * (NULL until the first), the notices the host masked (feature 82h) */
    struct nvme_resv_log *resv_log;
    uint8_t resv_mask;
};

enum nvme_qstate { QS_IC, QS_CONNECT, QS_LIVE };
enum nvme_rx { RX_HEADER, RX_PAD, RX_DATA, RX_DDGST, RX_TERM };

/* CMD_WAIT_R2T: its R2T waits until the queue holds fewer payload bytes. */
enum nvme_cmd_state { CMD_FREE, CMD_RX, CMD_WAIT_R2T, CMD_WAIT_DATA, CMD_EXEC, CMD_SEND };

/* One command slot of a queue. */
struct nvme_cmd {
    struct nvme_queue *q;
    uint16_t tag; /* index in q->slots: the R2T's TTAG */
    enum nvme_cmd_state state;
    uint8_t sqe[NVME_SQE_LEN];
    uint16_t cid;
    uint8_t sgl_type;
    uint32_t data_len; /* the SGL's length */
    uint32_t got;      /* host data received so far */
    bool data_ready;   /* host data all here (in-capsule or H2CData) */
    bool ddgst_bad;    /* a data digest failed: Transient Transport Error */
    uint8_t *buf;
    size_t buf_size;
    uint32_t out_len; /* controller-to-host data in buf */
    uint16_t status;
    uint64_t result;
    unsigned pending;   /* sends before the slot is free */
    struct volume *vol; /* ref while I/O runs */
    struct vreq vr;
    uint32_t dsm_next, dsm_count; /* DSM deallocate: ranges */
    uint32_t lba_shift;
    bool aer;                  /* an Asynchronous Event Request held by the controller */
    int mslot;                 /* iostats slot of the namespace's volume, -1 none */
    uint64_t mt0;              /* iostats_start time; 0: not counted */
    struct nvme_cmd *r2t_next; /* CMD_WAIT_R2T: the queue's FIFO */
};

/* One connection: one queue of a controller once connected. */
struct nvme_queue {
    struct conn *c;
    enum nvme_qstate state;
    int64_t port_id;
    struct nvme_port port; /* as it was at accept (defaults for port 0) */
    bool port_known;
    struct nvme_ctrl *ctrl; /* ref once connected */
    uint16_t qid;
    uint16_t sqsize; /* entries */
    uint16_t sqhd;
    bool sqflow_off;
    bool hdgst, ddgst;
    uint8_t hpda;
    /* reader */
    enum nvme_rx rx;
    struct nvme_tcp_ch ch;
    struct nvme_cmd *rx_cmd;
    uint8_t *rx_dst;
    uint32_t rx_left;
    uint32_t rx_pad;
    uint32_t rx_crc;
    /* command slots */
    struct nvme_cmd *slots;
    unsigned nslots;
    uint16_t *free_tags; /* a stack of free slots */
    unsigned nfree;
    unsigned inflight;
    size_t held;
    bool held_paused;
    bool held_logged;
    struct nvme_cmd *r2t_head, *r2t_tail; /* R2Ts deferred by the payload bound */
    struct nvme_subsys *subsys;           /* this queue's snapshot of ctrl->subsys (ref) */
    unsigned subsys_gen;
    int *mslots; /* iostats slot of each of subsys->ns[] (-1: none) */
    struct admit_ticket ticket;
    struct reactor_timer hs_timer;
    struct reactor_timer ka_timer;   /* admin queue: keep-alive */
    struct reactor_timer disc_timer; /* discovery controller: watches the configuration */
    uint64_t disc_gen;               /* the CONF_NVME part number it last saw */
    struct reactor_timer ana_timer;  /* admin queue: ANA change events (nvme_ana.c) */
    bool ana_watching;
    struct reactor_msg resume_msg;
    bool resume_posted;
    struct registry_entry reg; /* every connection, for nvme_target_stop */
    bool draining;             /* shutdown: no new commands; close when idle */
    struct reactor_msg drain_msg;
    bool auth_pending;      /* connected, not authenticated yet: only auth commands */
    struct nvme_auth *auth; /* the transaction under way, or NULL */
};

static inline uint32_t nvme_hd_len(const struct nvme_queue *q)
{
    return q->hdgst ? NVME_TCP_DIGEST_LEN : 0;
}

/* ---- nvme_conn.c ---- */
/* A free command slot (a connection reference with it), or NULL. */
struct nvme_cmd *nvme_slot_get(struct nvme_queue *q);
/* Release a slot: its buffer, volume and connection references. */
void nvme_slot_free(struct nvme_cmd *cmd);
/* A send of the command's data was written: the last one frees the slot. */
void nvme_cmd_release(void *arg);
/* Whether q may take need more payload bytes: within its own bound and
 * the budget of every queue together. A queue that holds nothing always
 * may (one command at a time still moves). Owner reactor. */
bool nvme_held_room(const struct nvme_queue *q, size_t need);
/* Allocate cmd->buf of at least size bytes (counted in q->held). 0/-ENOMEM. */
int nvme_cmd_buf(struct nvme_cmd *cmd, size_t size);
/* ---- nvme_reader.c ---- */
/* conn_ops.on_input of a queue. */
int nvme_conn_input(struct conn *c);

/* ---- nvme_send.c ---- */
/* Send the R2Ts deferred by the payload bound that fit now. */
void nvme_r2t_flush(struct nvme_queue *q);
/* The command is done: cmd->status/result, and cmd->out_len bytes of
 * cmd->buf for the host. Sends C2HData and the response; frees the slot. */
void nvme_cmd_complete(struct nvme_cmd *cmd);
/* The command needs its host data (transport SGL): sends an R2T; the
 * command is dispatched again once all of it arrived. */
void nvme_cmd_request_data(struct nvme_cmd *cmd);
/* Run a command (all its data here or none needed). */
void nvme_cmd_dispatch(struct nvme_cmd *cmd);
/* Protocol error: C2HTermReq with fes/fei and the offending header, log
 * naming the peer, close. Returns -EPROTO for the reader. */
int nvme_conn_fatal(struct nvme_queue *q, int fes, uint32_t fei, const uint8_t *hdr, size_t hlen,
                    const char *why);
/* A Connect succeeded on q: it is live (admission promoted, deadline off;
 * with q->auth_pending set, both wait for nvme_conn_authenticated and the
 * deadline starts again, for the authentication). */
void nvme_conn_connected(struct nvme_queue *q);
/* The queue authenticated: admission promoted, deadline off. */
void nvme_conn_authenticated(struct nvme_queue *q);
/* A re-authentication started on a live queue: the handshake deadline
 * bounds it too. */
void nvme_conn_auth_deadline(struct nvme_queue *q);
/* Close every connection and refuse new ones (nvme_target_stop), or
 * accept them again (nvme_target_init). Any thread. */
void nvme_conn_close_all(void);
void nvme_conn_reopen(void);
/* The subsystem this queue serves now (refreshed from ctrl), or NULL. */
struct nvme_subsys *nvme_queue_subsys(struct nvme_queue *q);

/* ---- nvme_fabrics.c ---- */
/* Fabrics commands (Connect, Property Get/Set, Disconnect). */
void nvme_fabrics_exec(struct nvme_cmd *cmd);

/* ---- nvme_auth.c ---- */
/* The keys of host h for a controller of hostnqn on subnqn (the secrets
 * checked and transformed), or NULL with *why (a static reason). */
struct nvme_auth_keys *nvme_auth_keys_new(const struct nvme_host *h, const char *hostnqn,
                                          const char *subnqn, const char **why);
/* Wipe and free (NULL is fine). */
void nvme_auth_keys_free(struct nvme_auth_keys *k);
/* Whether the command may run on a queue that has not authenticated
 * (Connect, Authentication Send and Receive). */
bool nvme_auth_allows(const uint8_t *sqe);
/* Whether q waits for an authentication to end (the deadline's check). */
bool nvme_auth_unfinished(const struct nvme_queue *q);
/* Fabrics Authentication Send / Receive on q (its controller has keys). */
void nvme_auth_send(struct nvme_cmd *cmd);
void nvme_auth_recv(struct nvme_cmd *cmd);
/* Free the queue's transaction (when the connection is freed: no
 * command, hence no job of the I/O pool, holds it any more). */
void nvme_auth_queue_free(struct nvme_queue *q);

/* ---- nvme_ctrl.c ---- */
/* Every live I/O controller, each with a reference (*n of them; free the
 * array, unref each). */
struct nvme_ctrl **nvme_ctrl_all(size_t *n);
/* Queue asynchronous event ev for ctrl's host (ctrl->lock held). */
void nvme_ctrl_aen_locked(struct nvme_ctrl *ctrl, uint32_t ev);
void nvme_ctrl_ref(struct nvme_ctrl *ctrl);
void nvme_ctrl_unref(struct nvme_ctrl *ctrl);
/* A queue closes: detach it; the admin queue takes the controller down. */
void nvme_ctrl_queue_closed(struct nvme_queue *q);
/* Tear the controller down (close its queues), logged with why. */
void nvme_ctrl_teardown(struct nvme_ctrl *ctrl, const char *why);
/* Asynchronous Event Request: hold it (or complete it with a pending event). */
void nvme_ctrl_aer(struct nvme_cmd *cmd);
/* Keep-alive: the host spoke. */
void nvme_ctrl_seen(struct nvme_ctrl *ctrl);
/* Start the admin queue's keep-alive timer (owner reactor). */
void nvme_ctrl_ka_start(struct nvme_queue *q);
/* Give a new controller its CNTLID and list it. 0 or -ENOSPC/-ENOMEM. */
int nvme_ctrl_register(struct nvme_ctrl *ctrl);
/* The live controller cntlid (a reference), or NULL. */
struct nvme_ctrl *nvme_ctrl_find(uint16_t cntlid);
/* The sizes of s's namespaces (a new array, *n entries; NULL when none or
 * without memory). */
struct nvme_ns_size *nvme_ns_sizes(const struct nvme_subsys *s, size_t *n);
/* A discovery controller's admin queue: raise Discovery Log Page Change
 * events (when the host enabled them) as the configuration moves. */
void nvme_ctrl_disc_watch_start(struct nvme_queue *q);
/* Queue asynchronous event ev for the host (delivered on the admin
 * queue's reactor). Takes ctrl->lock. */
void nvme_ctrl_aen(struct nvme_ctrl *ctrl, uint32_t ev);
/* Log page 04h: copy and clear (4096 bytes into buf). */
void nvme_ctrl_changed_ns(struct nvme_ctrl *ctrl, uint8_t *buf);

/* ---- nvme_admin.c ---- */
void nvme_admin_exec(struct nvme_cmd *cmd);

/* ---- nvme_identify.c ---- */
void nvme_identify_ctrl(const struct nvme_queue *q, const struct nvme_subsys *s, uint8_t *out);
void nvme_identify_ns(const struct nvme_ns *ns, uint8_t *out);
void nvme_identify_ns_descs(const struct nvme_ns *ns, uint8_t *out);
/* CNS 08h: the I/O command set independent namespace structure. */
void nvme_identify_ns_indep(const struct nvme_ns *ns, uint8_t *out);
/* Active namespace list after nsid (up to 1024 entries). */
void nvme_identify_ns_list(const struct nvme_subsys *s, uint32_t after, uint8_t *out);

/* The namespace's LBA size: the volume's block size up to 4 KiB (hosts
 * take no larger logical blocks); a larger volume block size becomes the
 * preferred write granularity (Identify Namespace NPWG/NOWS). */
static inline uint32_t nvme_lba_size(struct volume *v)
{
    uint32_t bs = volume_block_size(v);
    return bs > 4096 ? 4096 : bs;
}

/* ---- nvme_io.c ---- */
void nvme_io_exec(struct nvme_cmd *cmd);
/* Count a finished I/O command in the volume's metrics (cmd->mt0 set). */
void nvme_io_stats_done(struct nvme_cmd *cmd);

/* ---- nvme_ana.c ---- (asymmetric namespace access, nvme_target.h) */
/* Whether s reports ANA (its `ana`, or nvmet.global's). */
static inline bool nvme_ana_on(const struct nvme_subsys *s)
{
    return s && s->ana;
}
/* The ANA group of ns (1..nvme_ana_max_groups()). */
uint32_t nvme_ana_group(const struct nvme_ns *ns);
/* Identify Controller's ANA fields for s (CMIC, OAES, ANATT, ANACAP,
 * ANAGRPMAX, NANAGRPID); nothing when s does not report ANA. */
void nvme_ana_identify_ctrl(const struct nvme_subsys *s, uint8_t *out);
/* Log page 0Ch for ctrl (rgo: groups only, no NSIDs): a new buffer. 0 or
 * a status. */
uint16_t nvme_ana_log(struct nvme_ctrl *ctrl, bool rgo, uint8_t **page, size_t *len);
/* The status an I/O command gets on this path before it runs: 0, or ANA
 * Inaccessible (this member is fenced). */
uint16_t nvme_ana_io_status(const struct nvme_subsys *s);
/* The host enabled ANA change notices: watch the state on the admin
 * queue q (its reactor) and raise the event when it changes. */
void nvme_ana_watch_start(struct nvme_queue *q);
/* The discovery log's view of the paths: this member's PORTID for a
 * port index and the other members' ports (nvme_target_set_paths). */
uint16_t nvme_ana_port_id(uint16_t index);
/* The CNTLIDs this target gives: 1..NVME_CNTLID_MAX, or a gateway
 * member's share of them. */
void nvme_ana_cntlid_range(uint16_t *lo, uint16_t *hi);
size_t nvme_ana_peer_ports(struct nvme_peer_port *out, size_t max);
/* A number that moves when the other members' ports change (0 outside a
 * group): added to the discovery log's GENCTR. Any thread. */
uint64_t nvme_ana_peers_gen(void);

/* ---- nvme_resv.c (the object: nvme_resv.h) ---- */
struct nvme_resv;
/* 0, or Reservation Conflict when the reservation refuses an I/O command
 * (write: of the write group) from host hostid. r NULL: no reservations. */
uint16_t nvme_resv_check(struct nvme_resv *r, const uint8_t *hostid, bool write);
/* Reservation Register, Report, Acquire or Release on r: completes cmd
 * (asks for its host data first). */
void nvme_resv_exec(struct nvme_cmd *cmd, struct nvme_resv *r);
/* Identify Namespace RESCAP (r NULL: 0). */
uint8_t nvme_resv_rescap(const struct nvme_resv *r);
/* Get Features Host Identifier, Get/Set Features Reservation Persistence
 * (set: Set Features): completes cmd (a shared namespace's Set from the
 * I/O pool). */
void nvme_resv_feature(struct nvme_cmd *cmd, bool set);

/* ---- nvme_resv_notice.c ---- */
/* Log page 80h: the oldest reservation notification of ctrl into page
 * (64 bytes, zeroed: an empty one when none is left). */
void nvme_resv_log_page(struct nvme_ctrl *ctrl, uint8_t *page);

/* ---- nvme_discovery.c ---- */
/* Build the discovery log page for hostnqn into a new buffer (*len bytes). */
int nvme_discovery_log(const char *hostnqn, uint8_t **out, size_t *len);

#endif
