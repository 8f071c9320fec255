/*
 * What the iSCSI runtime publisher reads from the configuration (see
 * config_internal.h "reads for the runtime"): every SQL statement the
 * runtime needs lives here, behind functions that return C structs, so
 * that src/iscsi/ holds no SQL. DB locked by the caller.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control/cfgtx.h"
#include "control/db.h"
#include "iscsi/config/config_internal.h"
#include "core/log.h"

static char *col_dup(sqlite3_stmt *st, int col)
{
    return strdup(icfg_col_text(st, col));
}

/* Grow *arr (of elem bytes) to hold n + 1 elements; the new one zeroed. */
static void *grow(void *arr, size_t n, size_t elem)
{
    char *p = realloc(arr, (n + 1) * elem);
    if (p)
        memset(p + n * elem, 0, elem);
    return p;
}

int icfg_read_groups(int64_t target_id, struct icfg_group_rec **out, size_t *n)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    int rc = icfg_prepare("SELECT p.tag, i.initiators, g.authmethod, g.auth_tag FROM "
                          "iscsi_target_group g JOIN iscsi_portal p ON p.id = g.portal_id LEFT "
                          "JOIN iscsi_initiator i ON i.id = g.initiator_id WHERE g.target_id = ? "
                          "ORDER BY g.id",
                          &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, target_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct icfg_group_rec *g = grow(*out, *n, sizeof(*g));
        if (!g)
            break;
        *out = g;
        g = &g[(*n)++];
        g->portal_tag = (uint16_t)sqlite3_column_int(st, 0);
        if (icfg_strv_from_text((const char *)sqlite3_column_text(st, 1), &g->initiators) < 0)
            break;
        snprintf(g->authmethod, sizeof(g->authmethod), "%s", icfg_col_text(st, 2));
        g->auth_tag = sqlite3_column_int64(st, 3);
    }
    icfg_finalize(st);
    if (rc != SQLITE_DONE) {
        icfg_groups_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -EIO;
    }
    return 0;
}

void icfg_groups_free(struct icfg_group_rec *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        api_strv_clear(&g[i].initiators);
    free(g);
}

int icfg_read_creds(int64_t tag, bool discovery, struct icfg_cred_rec **out, size_t *n)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    int rc =
        icfg_prepare(discovery ? "SELECT user, secret, peeruser, peersecret, discovery_auth, "
                                 "id FROM iscsi_auth WHERE discovery_auth != 'NONE' ORDER BY id"
                               : "SELECT user, secret, peeruser, peersecret, discovery_auth, "
                                 "id FROM iscsi_auth WHERE tag = ? ORDER BY id",
                     &st);
    if (rc < 0)
        return rc;
    if (!discovery)
        sqlite3_bind_int64(st, 1, tag);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct icfg_cred_rec *c = grow(*out, *n, sizeof(*c));
        if (!c)
            break;
        *out = c;
        c = &c[(*n)++];
        c->user = col_dup(st, 0);
        c->secret = col_dup(st, 1);
        c->peeruser = col_dup(st, 2);
        c->peersecret = col_dup(st, 3);
        c->mutual = strcmp(icfg_col_text(st, 4), "CHAP_MUTUAL") == 0;
        c->id = sqlite3_column_int64(st, 5);
        if (!c->user || !c->secret || !c->peeruser || !c->peersecret)
            break;
    }
    icfg_finalize(st);
    if (rc != SQLITE_DONE) {
        icfg_creds_free(*out, *n);
        *out = NULL;
        *n = 0;
        return -EIO;
    }
    return 0;
}

static void free_secret(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

void icfg_creds_free(struct icfg_cred_rec *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(c[i].user);
        free(c[i].peeruser);
        free_secret(c[i].secret);
        free_secret(c[i].peersecret);
    }
    free(c);
}

int icfg_read_luns(int64_t target_id, struct icfg_lun_rec **out, size_t *n)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    int rc = icfg_prepare("SELECT te.lunid, te.extent_id FROM iscsi_targetextent te JOIN "
                          "iscsi_extent e ON e.id = te.extent_id WHERE te.target_id = ? AND "
                          "e.enabled = 1 ORDER BY te.lunid",
                          &st);
    if (rc < 0)
        return rc;
    sqlite3_bind_int64(st, 1, target_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct icfg_lun_rec *l = grow(*out, *n, sizeof(*l));
        if (!l)
            break;
        *out = l;
        l[*n].lun = (uint64_t)sqlite3_column_int64(st, 0);
        l[(*n)++].extent_id = sqlite3_column_int64(st, 1);
    }
    icfg_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        *n = 0;
        return -EIO;
    }
    return 0;
}

int icfg_read_extent_state(int64_t extent_id, int64_t *gen, bool *ro, uint64_t *size)
{
    sqlite3_stmt *st;
    if (icfg_prepare("SELECT gen, ro, filesize FROM iscsi_extent WHERE id = ?", &st) < 0)
        return -EIO;
    sqlite3_bind_int64(st, 1, extent_id);
    int rc = -ENOENT;
    if (sqlite3_step(st) == SQLITE_ROW) {
        *gen = sqlite3_column_int64(st, 0);
        *ro = sqlite3_column_int(st, 1) != 0;
        *size = (uint64_t)sqlite3_column_int64(st, 2);
        rc = 0;
    }
    icfg_finalize(st);
    return rc;
}

int icfg_read_target_ids(struct icfg_dirty *d)
{
    sqlite3_stmt *st;
    int rc = icfg_prepare("SELECT id FROM iscsi_target ORDER BY id", &st);
    if (rc < 0)
        return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        icfg_dirty_add(d, sqlite3_column_int64(st, 0));
    icfg_finalize(st);
    return rc == SQLITE_DONE ? 0 : -EIO;
}

int icfg_read_portal_ips(bool distinct, struct icfg_portal_ip_rec **out, size_t *n)
{
    sqlite3_stmt *st;
    *out = NULL;
    *n = 0;
    if (icfg_prepare(distinct ? "SELECT DISTINCT ip, 0 FROM iscsi_portal_ip"
                              : "SELECT i.ip, p.tag FROM iscsi_portal_ip i JOIN iscsi_portal p ON "
                                "p.id = i.portal_id ORDER BY p.tag, i.rowid",
                     &st) < 0)
        return -EIO;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        struct icfg_portal_ip_rec *p = grow(*out, *n, sizeof(*p));
        if (!p)
            break;
        *out = p;
        snprintf(p[*n].ip, sizeof(p[*n].ip), "%s", icfg_col_text(st, 0));
        p[(*n)++].tag = (uint16_t)sqlite3_column_int(st, 1);
    }
    icfg_finalize(st);
    if (rc != SQLITE_DONE) {
        free(*out);
        *out = NULL;
        *n = 0;
        return -EIO;
    }
    return 0;
}

int icfg_read_pr(int64_t extent_id, void **blob, size_t *len)
{
    sqlite3_stmt *st;
    *blob = NULL;
    *len = 0;
    if (icfg_prepare("SELECT pr_blob FROM iscsi_extent WHERE id = ?", &st) < 0)
        return -EIO;
    sqlite3_bind_int64(st, 1, extent_id);
    int rc = 0;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_BLOB) {
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        *blob = malloc(n ? n : 1);
        if (*blob) {
            memcpy(*blob, sqlite3_column_blob(st, 0), n);
            *len = n;
        } else {
            rc = -ENOMEM;
        }
    }
    icfg_finalize(st);
    return rc;
}

int icfg_write_pr(int64_t extent_id, const void *blob, size_t len)
{
    struct cfg_tx tx;
    /* Runtime state, not configuration: recorded as no change, so no
     * publisher runs (it would take LU mutexes: the caller holds one). */
    if (cfg_tx_begin(&tx) < 0)
        return -EIO;
    sqlite3_stmt *st;
    int rc = icfg_prepare("UPDATE iscsi_extent SET pr_blob = ? WHERE id = ?", &st);
    if (rc == 0) {
        if (len)
            sqlite3_bind_blob(st, 1, blob, (int)len, SQLITE_TRANSIENT);
        else
            sqlite3_bind_null(st, 1);
        sqlite3_bind_int64(st, 2, extent_id);
        if (sqlite3_step(st) != SQLITE_DONE) {
            log_error("iscsi config: cannot save reservations of extent %lld: %s",
                      (long long)extent_id, sqlite3_errmsg(db_handle()));
            rc = -EIO;
        }
        icfg_finalize(st);
    }
    if (rc < 0) {
        cfg_tx_abort(&tx);
        return rc;
    }
    return cfg_tx_commit(&tx);
}
