/*
 * Private to the iSCSI configuration (src/iscsi/config/): the SQLite
 * helpers of the stores, the write transaction, the typed writes
 * composite calls share, and the runtime publisher's interface.
 *
 * The objects are typed: each is a C struct whose SQL lives
 * in its store (<object>_store.h: functions that take and return the
 * struct, no JSON) and whose one decoder and one encoder live in its API
 * file (config_<object>.c). Every API write follows one shape: decode →
 * check invariants → one transaction (icfg_write_begin/…_end, on the one
 * transaction path control/cfgtx.h):
 *   cfg_tx_begin (db_lock, BEGIN IMMEDIATE) → check against the DB,
 *   write rows, allocate ids, record the changed objects (the targets
 *   whose published view changes: icfg_changed_target) → COMMIT →
 *   the configuration generation's publisher (control/confgen.h) asks the
 *   iSCSI subscriber (config_runtime.c) for the next iSCSI part: the
 *   changed targets' views rebuilt, the others shared; a deferred call's
 *   changes wait in the pending list iscsi_config_reload() publishes
 *   → db_unlock → conf_apply(old, new): closes, unit attentions,
 *   listeners → fdatasync.
 * Publication happens under the DB lock, so generations are published in
 * commit order. The configuration code never calls the runtime: it only records
 * what changed.
 */
#ifndef BLOCKD_ISCSI_CONFIG_INTERNAL_H
#define BLOCKD_ISCSI_CONFIG_INTERNAL_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/api.h"
#include "control/cfgtx.h"
#include "control/datasets.h"
#include "control/db.h"
#include "iscsi/config/auth_store.h"
#include "iscsi/config/extent_store.h"
#include "iscsi/config/global_store.h"
#include "iscsi/config/initiator_store.h"
#include "iscsi/config/iscsi_write.h"
#include "iscsi/config/portal_store.h"
#include "iscsi/config/target_store.h"
#include "iscsi/config/targetextent_store.h"
#include "api/validate.h"
#include "scsi/scsi.h"

struct iscsi_portals; /* iscsi/iscsi_runtime.h */

#define ICFG_DEFAULT_BASENAME "iqn.2026-11.org.blockd"
#define ICFG_DEFAULT_PORT 3260
#define ICFG_REL_TGT_ID_MAX 31999
#define ICFG_LUN_MAX 16382
#define ICFG_TARGET_NAME_MAX 120
#define ICFG_EXTENT_NAME_MAX 64

/* Targets whose runtime view must be rebuilt (the runtime's set, built
 * from a transaction's changes by its publisher). */
struct icfg_dirty {
    int64_t *ids;
    size_t n, cap;
    bool all;       /* every target (basename, portal renumbering) */
    bool discovery; /* discovery auth changed */
    bool portals;   /* portal listeners / listen_port changed */
};

void icfg_dirty_add(struct icfg_dirty *d, int64_t target_id);
void icfg_dirty_merge(struct icfg_dirty *into, const struct icfg_dirty *from);
void icfg_dirty_free(struct icfg_dirty *d);

/* ---- SQL helpers (caller holds db_lock) ----
 * Bind types as control/db.h db_bindv: 'i' int64, 't' text (NULL → SQL
 * NULL), 'n' NULL, 'b' bool(int). */
/* A cached statement (control/db.h db_stmt); give it back with
 * icfg_finalize(), never sqlite3_finalize(). */
int icfg_prepare(const char *sql, sqlite3_stmt **st);
void icfg_finalize(sqlite3_stmt *st);
/* Step a bound statement (sql names it in the log) once: 0 for a row or
 * done, else -errno (db_errno mapping; logged unless -EEXIST). */
int icfg_step(sqlite3_stmt *st, const char *sql);
/* Run a statement with no result rows. 0 or -errno (db_errno mapping). */
int icfg_run(const char *sql, const char *types, ...);
/* First column of the first row as an integer: 0, -ENOENT (no row or NULL), -errno. */
int icfg_int(int64_t *out, const char *sql, const char *types, ...);
/* Text column helper: "" for NULL. */
const char *icfg_col_text(sqlite3_stmt *st, int col);

/* ---- write transactions ---- */
struct icfg_write {
    struct api_call *call;
    /* The method whose rules are applied (names the fields of validation
     * errors, "<method>.<field>"): the call's, or the one a composite call
     * (share.iscsi.create) runs the typed functions of. */
    const char *method;
    struct cfg_tx tx;
    bool defer;           /* publish at service.reload (TrueNAS "defer") */
    json_t *unlink_after; /* files to remove once committed (array or NULL) */
};
/* cfg_tx_begin (joins the thread's open transaction, if any). Returns 0,
 * or -1 with an error set on call. */
int icfg_write_begin(struct icfg_write *w, struct api_call *call);
/* rc == 0: cfg_tx_commit (publishes, or defers); else roll back. Always
 * ends the transaction. Returns rc (or -1 if the commit failed, with an
 * error set). */
int icfg_write_end(struct icfg_write *w, int rc);
/* Record that target id's published view changes (CFG_ISCSI_TARGET). */
void icfg_changed_target(struct icfg_write *w, int64_t target_id);
/* Translate an -errno from a DB step into a call error; returns -1. */
int icfg_db_fail(struct api_call *call, int err);

/* ---- common parameter shapes ---- */
/* params[index] must be an integer id: 0 with *id, or -1 with a verr. */
int icfg_param_id(struct api_call *call, json_t *params, size_t index, int64_t *id);
/* Optional positional bool: 0 (absent/null → def), or -1 with a verr. */
int icfg_param_bool(struct api_call *call, json_t *params, size_t index, const char *name, bool def,
                    bool *out);
/* "<method>.<field>" into buf. */
const char *icfg_field(struct api_call *call, const char *field, char *buf, size_t len);
/* "<w->method>.<field>" into buf. */
const char *icfg_wfield(const struct icfg_write *w, const char *field, char *buf, size_t len);
/* Pop an optional "defer" boolean from a create/update body (already validated). */
bool icfg_pop_defer(json_t *data);
/* A query's index hint: a top-level [field, "=", v] or [field, "in",
 * [v…]] filter (string or integer values) narrows the list to the rows
 * whose store column matches (icfg_query_typed). */
struct icfg_hint {
    const char *field;
    const char *column;
};
/* Query rows with api_query semantics; steals rows. */
int icfg_query_rows(struct api_call *call, json_t *rows, json_t *params, json_t **result);
/* <ns>.get_instance [id, options?]: the query handler with
 * [[["id","=",id]], options + {"get": true}]; ENOENT when missing. */
int icfg_get_instance(struct api_call *call, json_t *params, json_t **result, api_handler_fn query,
                      const char *what);

/* ---- per-object helpers used across files ---- */
/* Delete the LUN mappings whose column ("id", "target_id" or
 * "extent_id") is value, recording their targets as changed. 0, or -1
 * with the error set on w->call. */
int icfg_targetextent_remove(struct icfg_write *w, const char *column, int64_t value);
/* A new object as its create method's defaults make it: the target,
 * extent and mapping ones are in iscsi_write.h. */
int icfg_portal_init(struct icfg_portal *p);
int icfg_initiator_init(struct icfg_initiator *g);

/*
 * The typed writes of the iSCSI objects, for their handlers and for
 * composite calls (share.iscsi.create/delete) that run several inside one
 * transaction: each checks its object's invariants (field errors named
 * after w->method), writes it (id 0: a new one, whose id is set) and
 * records the change in w. 0, or -1 with the error set on w->call.
 */
int icfg_target_save(struct icfg_write *w, struct icfg_target *t);
/* old: the stored extent on update (NULL on create). */
int icfg_extent_save(struct icfg_write *w, struct icfg_extent *e, const struct icfg_extent *old);
/* A null lunid becomes the lowest free one (te->lunid set). */
int icfg_targetextent_save(struct icfg_write *w, struct icfg_targetextent *te);
/* addresses: p's addresses were given (a comment alone publishes nothing). */
int icfg_portal_save(struct icfg_write *w, struct icfg_portal *p, bool addresses);
int icfg_initiator_save(struct icfg_write *w, struct icfg_initiator *g);
/* Delete target id inside w: the in-use rule (force), its mappings, with
 * delete_extents the extents they map, its groups and the row. */
int icfg_target_remove(struct icfg_write *w, int64_t id, bool force, bool delete_extents);

/* Refuse (EBUSY "Target <name> is in use") or close sessions (force) of a
 * target. Returns 0, or -1 with the error set on w->call. Must run inside
 * the write transaction, before the rows are deleted. */
int icfg_target_check_sessions(struct icfg_write *w, int64_t target_id, bool force);
/* Delete an extent row (after its mappings); remove unlinks FILE paths. */
int icfg_extent_delete_row(struct icfg_write *w, int64_t extent_id, bool remove, bool force);

struct iscsi_cidr;
/* "10.0.0.0/8", "fe80::/10" or a bare address: 0 or -EINVAL. */
int icfg_parse_cidr(const char *s, struct iscsi_cidr *out);

/* ---- method tables (one per file) ---- */
extern const struct api_method icfg_global_methods[];
extern const size_t icfg_global_methods_count;
extern const struct api_method icfg_portal_methods[];
extern const size_t icfg_portal_methods_count;
extern const struct api_method icfg_initiator_methods[];
extern const size_t icfg_initiator_methods_count;
extern const struct api_method icfg_auth_methods[];
extern const size_t icfg_auth_methods_count;
extern const struct api_method icfg_target_methods[];
extern const size_t icfg_target_methods_count;
extern const struct api_method icfg_extent_methods[];
extern const size_t icfg_extent_methods_count;
extern const struct api_method icfg_targetextent_methods[];
extern const size_t icfg_targetextent_methods_count;

/* ---- reads for the runtime (config_read.c): the rows the publisher
 * builds target views, LUs and listeners from, as structs. DB locked. ---- */
struct icfg_group_rec {
    uint16_t portal_tag;
    struct api_strv initiators; /* names; empty: everyone */
    char authmethod[16];
    int64_t auth_tag;
};
/* A target's portal groups in order: 0 or -errno; free with icfg_groups_free. */
int icfg_read_groups(int64_t target_id, struct icfg_group_rec **out, size_t *n);
void icfg_groups_free(struct icfg_group_rec *g, size_t n);
struct icfg_cred_rec {
    char *user, *secret, *peeruser, *peersecret; /* secrets sealed (control/pwenc.h) */
    bool mutual;
    int64_t id;
};
/* The credentials of auth tag (or, discovery, of every discovery auth):
 * 0 or -errno; free (zeroes the secrets) with icfg_creds_free. */
int icfg_read_creds(int64_t tag, bool discovery, struct icfg_cred_rec **out, size_t *n);
void icfg_creds_free(struct icfg_cred_rec *c, size_t n);
struct icfg_lun_rec {
    uint64_t lun;
    int64_t extent_id;
};
/* A target's LUNs on enabled extents, by LUN: 0 or -errno (free()). */
int icfg_read_luns(int64_t target_id, struct icfg_lun_rec **out, size_t *n);
/* An extent's gen, ro and filesize: 0, -ENOENT or -EIO. */
int icfg_read_extent_state(int64_t extent_id, int64_t *gen, bool *ro, uint64_t *size);
/* Add every target id to d. 0 or -EIO. */
int icfg_read_target_ids(struct icfg_dirty *d);
struct icfg_portal_ip_rec {
    char ip[46];  /* INET6_ADDRSTRLEN */
    uint16_t tag; /* 0 with distinct */
};
/* Every portal address with its tag (by tag), or distinct: each address
 * once. 0 or -errno (free()). */
int icfg_read_portal_ips(bool distinct, struct icfg_portal_ip_rec **out, size_t *n);
/* An extent's saved persistent reservations (a malloc'd copy, NULL if
 * none): 0 or -errno. */
int icfg_read_pr(int64_t extent_id, void **blob, size_t *len);
/* Save them in one transaction (no change recorded). Takes the DB lock:
 * any thread. 0 or -errno (logged). */
int icfg_write_pr(int64_t extent_id, const void *blob, size_t len);

/* ---- runtime (config_runtime.c) ---- */
/* Subscribe to the configuration generation (control/confgen.h, facet
 * CONF_ISCSI). Once, at startup (iscsi_config_init). */
void icfg_runtime_init(void);
/* The dataset events (control/events.h EV_DATASET) that concern the
 * running targets: a pool online (LUs that could not open), a rollback
 * (MEDIUM MAY HAVE CHANGED). Others are ignored. */
void icfg_runtime_dataset(enum datasets_event ev, const char *name, struct volume *v);

/* ---- portal listeners (config_listen.c) ---- */
/* The portals of the next generation (every portal IP, and the
 * --iscsi-listen address, at listen_port; the addresses SendTargets
 * reports): a new object with one reference in *out, NULL while the
 * runtime is stopped. DB locked. 0 or -errno. */
int icfg_portals_build(struct iscsi_portals **out);
void icfg_portals_unref(struct iscsi_portals *p);
/* Open, retag and close listeners to match p (NULL: none). Without the
 * DB lock (conf_apply calls it when the generation's portals change). */
void icfg_listen_apply(const struct iscsi_portals *p);
/* --iscsi-listen ADDR:PORT (NULL: none). At the first call of the process
 * PORT (":0": a free one) becomes iscsi.global.listen_port. DB locked.
 * 0 or -errno (logged). */
int icfg_listen_set_override(const char *addr_port);
/* The result of the last bind of the --iscsi-listen address: 0 or -errno. */
int icfg_listen_override_status(void);
/* Forget the override (the listeners close when the stopped runtime
 * publishes no portals). DB locked. */
void icfg_listen_stop(void);
/* Whether ip can be listened on at port (already ours, or a test bind
 * succeeds). 0, or -1 with a validation error on field ("Cannot listen on
 * ADDR: the address is already in use", errno EADDRINUSE ...). */
int icfg_listen_check(struct api_call *call, const char *field, const char *ip, int port);
/* icfg_listen_check for every portal IP and the --iscsi-listen address at
 * port (a listen_port change). DB locked. */
int icfg_listen_check_port(struct api_call *call, const char *field, int port);
void icfg_runtime_stop(void);
bool icfg_runtime_started(void);

/* ---- extents → LUs (config_lu.c) ---- */
struct scsi_lu;
/* Create the LU of an extent (read with icfg_extent_get). 0 or -errno (logged). */
int icfg_lu_from_extent(const struct icfg_extent *extent, struct scsi_lu **out);
void icfg_lu_unref(struct scsi_lu *lu);
void icfg_lu_ref(struct scsi_lu *lu);
/* "zvol/pool/vol[@snap]" → "pool/vol[@snap]" or NULL. */
const char *icfg_disk_dataset(const char *disk);

#endif
