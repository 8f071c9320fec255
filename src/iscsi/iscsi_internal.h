/*
 * Private structures of the iSCSI transport: connections, sessions, tasks.
 * Threads: an iscsi_conn and its session and tasks belong to the reactor
 * that owns the struct conn; only the session registry (iscsi_session.c)
 * is shared, under its own mutex.
 */
#ifndef BLOCKD_ISCSI_INTERNAL_H
#define BLOCKD_ISCSI_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/admit.h"
#include "core/conn.h"
#include "core/reactor.h"
#include "core/registry.h"
#include "iscsi/iscsi_chap.h"
#include "iscsi/iscsi_pdu.h"
#include "iscsi/iscsi_runtime.h"
#include "iscsi/iscsi_text.h"
#include "scsi/scsi.h"

#define ISCSI_MAX_R2T_SLOTS 16
#define ISCSI_MAX_TRANSFER (64u * 1024 * 1024) /* largest EDTL we buffer */
#define ISCSI_TEXT_MAX (1024 * 1024)           /* SendTargets answer cap */
#define ISCSI_TASK_HASH 256

struct iscsi_conn;
struct iscsi_session;
struct iscsi_tmf_wait;
struct iscsi_tmf_hold;

struct iscsi_r2t {
    bool active;
    uint32_t ttt;
    uint32_t offset, length; /* solicited range */
    uint32_t received;       /* bytes received in this sequence */
    uint32_t exp_data_sn;
    uint32_t r2t_sn;
};

struct iscsi_task {
    struct scsi_cmd cmd;
    struct iscsi_conn *ic;
    struct iscsi_task *next, *prev; /* conn's active list */
    struct iscsi_task *hash_next;   /* ITT hash chain */
    struct reactor_msg done_msg;    /* completion hop to the owner reactor */
    uint32_t itt;
    uint32_t cmdsn;
    uint8_t lun_field[8];
    uint64_t lun;
    uint32_t edtl;
    bool read, write;
    bool immediate;             /* I bit: not counted in the CmdSN window */
    bool executing;             /* handed to scsi/; done() pending */
    bool aborted;               /* drop the response */
    bool replied;               /* reply queued; freed by the output release */
    bool counted;               /* counted in the session's inflight */
    bool data_error;            /* bad DataSN seen: answer CHECK CONDITION, not execute */
    struct iscsi_tmf_hold *tmf; /* the TMFs waiting for this task to finish */
    /* data-out collection */
    uint8_t *data_out;
    uint32_t data_out_cap;
    uint32_t data_received; /* total bytes received */
    uint32_t unsol_len;     /* unsolicited Data-Out bytes still expected */
    uint32_t unsol_offset;  /* next offset of unsolicited data */
    uint32_t unsol_data_sn;
    uint32_t r2t_next; /* next offset to solicit */
    uint32_t r2t_sn;
    unsigned r2t_outstanding;
    struct iscsi_r2t r2t[ISCSI_MAX_R2T_SLOTS];
    /* data-in */
    uint8_t *data_in;
    uint32_t data_in_cap;
};

struct iscsi_session {
    struct registry_entry reg; /* in the session registry (iscsi_session.c) */
    struct iscsi_conn *ic;
    struct iscsi_session_info info; /* registry copy, fixed after login */
    struct iscsi_target_view *view; /* NULL for discovery */
    uint64_t view_gen;
    struct scsi_nexus nexus;
    uint32_t exp_cmd_sn;
    uint32_t depth;
    uint32_t inflight; /* non-immediate SCSI tasks received, not answered */
    bool closing;      /* registry: close requested */
    /* written by the connection's reactor (counter_add), read by the API */
    _Atomic uint64_t st_commands, st_read, st_written;
};

enum iscsi_conn_phase {
    ISCSI_PHASE_LOGIN,
    ISCSI_PHASE_FULL_FEATURE,
    ISCSI_PHASE_LOGOUT, /* logout received: no new commands */
    ISCSI_PHASE_CLOSED,
};

enum iscsi_chap_state { CHAP_NONE, CHAP_WAIT_A, CHAP_WAIT_R, CHAP_DONE };

struct iscsi_login {
    bool first_done;
    uint8_t isid[6];
    uint16_t tsih;
    uint16_t cid;
    uint32_t itt;
    uint32_t cmdsn;
    uint8_t stage; /* current stage */
    bool discovery;
    bool authenticated;
    bool auth_method_chosen;
    enum iscsi_auth_method method;
    struct iscsi_auth_policy policy; /* creds point into view or disc_policy */
    bool policy_owned;               /* discovery copy: clear at end */
    enum iscsi_chap_state chap;
    uint8_t chap_id;
    uint8_t chap_challenge[ISCSI_CHAP_CHALLENGE_LEN];
    int target_group;
    char initiator_name[ISCSI_NAME_MAX];
    char initiator_alias[ISCSI_ALIAS_MAX];
    char target_name[ISCSI_NAME_MAX];
    struct iscsi_target_view *view;
    struct iscsi_neg neg;
    /* C bit: accumulated text of a multi-PDU request */
    char *pending;
    size_t pending_len;
    /* keys seen this PDU that need joint handling */
    char chap_n[ISCSI_CHAP_MAX];
    char chap_r[ISCSI_CHAP_BINARY_MAX * 2 + 4];
    char chap_i[16];
    char chap_c[ISCSI_CHAP_BINARY_MAX * 2 + 4];
    char chap_a[64];
    char auth_method[256];
    bool have_session_type;
    uint16_t status; /* failure decided while parsing keys */
};

/* A TMF's response, sent once every task it waits for has finished. */
struct iscsi_tmf_wait {
    uint8_t bhs[ISCSI_BHS_LEN];
    unsigned remaining;
    bool close_after; /* TARGET COLD RESET */
};

/* One TMF waiting for one task: a task may be waited for by several (an
 * ABORT TASK repeated, then an ABORT TASK SET or a reset over it), and
 * each of their responses waits for it. */
struct iscsi_tmf_hold {
    struct iscsi_tmf_wait *w;
    struct iscsi_tmf_hold *next;
};

struct iscsi_conn {
    struct conn *c;
    enum iscsi_conn_phase phase;
    struct iscsi_session *sess;
    struct iscsi_login *login;
    struct iscsi_params params;
    uint16_t portal_tag;
    uint16_t cid;
    char local_addr[80];
    struct sockaddr_storage peer_sa;
    struct sockaddr_storage local_sa;
    uint32_t stat_sn;
    uint32_t ttt_next;
    struct iscsi_task *tasks; /* active list */
    struct iscsi_task *hash[ISCSI_TASK_HASH];
    unsigned ntasks;
    struct iscsi_task *free_tasks;
    unsigned nfree;
    /* Text continuation (SendTargets longer than one PDU) */
    struct iscsi_text_out text_pending;
    size_t text_sent;
    uint32_t text_ttt;
    uint32_t text_itt;
    /* logout waiting for tasks */
    bool logout_pending;
    unsigned logout_waits; /* shared-LU releases the logout response waits for */
    uint32_t logout_itt;
    /* NOP-In ping */
    struct reactor_timer nop_timer;
    uint64_t last_rx_ns;
    bool ping_outstanding;
    uint32_t ping_ttt;
    uint64_t ping_sent_ns;
    /* admission (pending until full feature phase) and the login deadline */
    struct admit_ticket ticket;
    uint64_t login_deadline_ns;
    /* shutdown: no new PDUs; close once executing tasks have replied */
    bool draining;
    struct reactor_msg drain_msg;
};

/* iscsi_server.c: the admission gate of iSCSI connections. */
extern struct admit_gate iscsi_gate;
/* iscsi_conn.c: start draining ic (posted by iscsi_sessions_drain_all). */
void iscsi_conn_drain_msg(struct reactor_msg *m);
/* iscsi_session.c: post a drain to every session's connection; the number
 * of sessions registered now. */
void iscsi_sessions_drain_all(void);
unsigned iscsi_sessions_count(void);

/* iscsi_conn.c */
int iscsi_conn_send_pdu(struct iscsi_conn *ic, const uint8_t *bhs, const void *data, uint32_t dsl);
int iscsi_conn_send_reject(struct iscsi_conn *ic, uint8_t reason, const uint8_t *bad_bhs);
void iscsi_conn_fill_sn(struct iscsi_conn *ic, uint8_t *bhs, bool advance_statsn);
int iscsi_conn_enter_full_feature(struct iscsi_conn *ic);
int iscsi_conn_handle_text(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *data,
                           uint32_t dsl);
uint32_t iscsi_conn_new_ttt(struct iscsi_conn *ic);

/* iscsi_login.c */
int iscsi_login_handle(struct iscsi_conn *ic, const uint8_t *bhs, const uint8_t *data,
                       uint32_t dsl);
void iscsi_login_free(struct iscsi_login *l);
/* Which group of v admits this initiator on this portal/address; -1 none. */
int iscsi_target_access(const struct iscsi_target_view *v, const char *initiator,
                        uint16_t portal_tag, const struct sockaddr *peer);
/* Append TargetName=/TargetAddress= pairs for SendTargets. */
int iscsi_send_targets(struct iscsi_conn *ic, const char *which, const char *initiator,
                       struct iscsi_text_out *out);

/* iscsi_session.c */
int iscsi_session_register(struct iscsi_session *s);
void iscsi_session_unregister(struct iscsi_session *s);
uint16_t iscsi_session_new_tsih(void);
/* Close older sessions of the same initiator name + ISID + target. */
void iscsi_session_reinstate(struct iscsi_session *s);
bool iscsi_session_tsih_exists(uint16_t tsih);
/* The view a normal session serves (NULL for discovery): re-fetched from
 * the published configuration when its generation has moved since the
 * last call, so a LUN added or removed is seen by the next command; the
 * old view is released. Thread: the session's reactor. */
const struct iscsi_target_view *iscsi_session_view(struct iscsi_session *s);

/* iscsi_server.c */
unsigned iscsi_server_queue_depth(void);
uint64_t iscsi_server_nop_interval_ns(void);
uint64_t iscsi_server_nop_timeout_ns(void);
extern const struct conn_ops iscsi_conn_ops;

#endif
