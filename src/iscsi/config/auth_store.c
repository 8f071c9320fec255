/* The stored CHAP credentials (auth_store.h). */
#include "iscsi/config/auth_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/config_internal.h"
#include "core/log.h"
#include "iscsi/config/iscsi_config.h"

#define AUTH_SELECT                                                                                \
    "SELECT id, tag, user, secret, peeruser, peersecret, discovery_auth FROM iscsi_auth"

static void free_secret(char *s)
{
    if (s)
        explicit_bzero(s, strlen(s));
    free(s);
}

void icfg_auth_clear(struct icfg_auth *a)
{
    free(a->user);
    free(a->peeruser);
    free_secret(a->secret);
    free_secret(a->peersecret);
    memset(a, 0, sizeof(*a));
}

/* A stored secret in clear into *out, or NULL (logged) when it cannot be
 * decrypted: the key file was lost or replaced, or the row was altered.
 * 0 or -ENOMEM. */
static int secret_open(sqlite3_stmt *st, int col, const char *what, char **out)
{
    char plain[PWENC_PLAIN_MAX];
    const char *stored = (const char *)sqlite3_column_text(st, col);
    int rc = pwenc_open(stored ? stored : "", plain, sizeof(plain));
    if (rc < 0) {
        log_error("iscsi config: the %s of authorized access %lld cannot be decrypted (%s); "
                  "set it again with iscsi.auth.update",
                  what, (long long)sqlite3_column_int64(st, 0), strerror(-rc));
        *out = NULL;
        return 0;
    }
    *out = strdup(plain);
    explicit_bzero(plain, sizeof(plain));
    return *out ? 0 : -ENOMEM;
}

static int auth_decode_row(sqlite3_stmt *st, void *elem)
{
    struct icfg_auth *a = elem;
    a->id = sqlite3_column_int64(st, 0);
    a->tag = sqlite3_column_int64(st, 1);
    a->user = icfg_col_dup(st, 2, false);
    a->peeruser = icfg_col_dup(st, 4, false);
    a->discovery_auth = icfg_authmethod_parse((const char *)sqlite3_column_text(st, 6));
    if (!a->user || !a->peeruser)
        return -ENOMEM;
    int rc = secret_open(st, 3, "secret", &a->secret);
    return rc < 0 ? rc : secret_open(st, 5, "peer secret", &a->peersecret);
}

static void auth_clear_elem(void *elem)
{
    icfg_auth_clear(elem);
}

const struct icfg_table icfg_auth_table = {AUTH_SELECT, "ORDER BY id", sizeof(struct icfg_auth),
                                           auth_decode_row, auth_clear_elem};

int icfg_auth_get(int64_t id, struct icfg_auth *out)
{
    return icfg_table_get(&icfg_auth_table, id, out);
}

int icfg_auth_seal(const struct icfg_auth *a, struct icfg_auth_sealed *out)
{
    int rc = pwenc_seal(a->secret ? a->secret : "", out->secret, sizeof(out->secret));
    if (rc == 0)
        rc = pwenc_seal(a->peersecret ? a->peersecret : "", out->peersecret,
                        sizeof(out->peersecret));
    return rc;
}

int icfg_auth_insert(struct icfg_auth *a, const struct icfg_auth_sealed *sealed)
{
    int rc = icfg_run("INSERT INTO iscsi_auth (tag, user, secret, peeruser, peersecret, "
                      "discovery_auth) VALUES (?, ?, ?, ?, ?, ?)",
                      "ittttt", a->tag, a->user, sealed->secret, a->peeruser, sealed->peersecret,
                      icfg_authmethod_names[a->discovery_auth]);
    if (rc == 0)
        a->id = sqlite3_last_insert_rowid(db_handle());
    return rc;
}

int icfg_auth_update(const struct icfg_auth *a, const struct icfg_auth_sealed *sealed)
{
    return icfg_run("UPDATE iscsi_auth SET tag = ?, user = ?, secret = ?, peeruser = ?, "
                    "peersecret = ?, discovery_auth = ? WHERE id = ?",
                    "ittttti", a->tag, a->user, sealed->secret, a->peeruser, sealed->peersecret,
                    icfg_authmethod_names[a->discovery_auth], a->id);
}

int icfg_auth_delete(int64_t id)
{
    return icfg_run("DELETE FROM iscsi_auth WHERE id = ?", "i", id);
}

int icfg_auth_find_mutual_discovery(int64_t except_id, int64_t *id)
{
    return icfg_int(id,
                    "SELECT id FROM iscsi_auth WHERE discovery_auth = 'CHAP_MUTUAL' AND id != ?",
                    "i", except_id);
}

int icfg_auth_tag_others(int64_t tag, int64_t except_id, int64_t *count)
{
    return icfg_int(count, "SELECT COUNT(*) FROM iscsi_auth WHERE tag = ? AND id != ?", "ii", tag,
                    except_id);
}

int icfg_auth_tag_targets(int64_t tag, int64_t **targets, size_t *n)
{
    struct icfg_key key = {
        .column = "auth_tag", .values = &(struct icfg_key_value){.is_int = true, .i = tag}, .n = 1};
    void *v;
    int rc =
        icfg_list("SELECT target_id FROM iscsi_target_group", "GROUP BY target_id ORDER BY MIN(id)",
                  &key, sizeof(int64_t), icfg_decode_id, NULL, &v, n);
    *targets = v;
    return rc;
}

/* One credential whose secrets are still stored in clear. */
struct clear_row {
    int64_t id;
    char secret[PWENC_SEALED_MAX];
    char peersecret[PWENC_SEALED_MAX];
};

static bool needs_seal(const char *v)
{
    return v[0] && !pwenc_is_sealed(v);
}

int iscsi_config_seal_secrets(void)
{
    struct clear_row *rows = NULL;
    size_t n = 0;
    int rc = 0;
    db_lock();
    sqlite3_stmt *st = NULL;
    if (db_prepare("SELECT id, secret, peersecret FROM iscsi_auth ORDER BY id", &st) < 0) {
        db_unlock();
        return -EIO;
    }
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *s = icfg_col_text(st, 1), *p = icfg_col_text(st, 2);
        if (!needs_seal(s) && !needs_seal(p))
            continue;
        struct clear_row *grown = realloc(rows, (n + 1) * sizeof(*rows));
        if (!grown) {
            rc = -ENOMEM;
            break;
        }
        rows = grown;
        struct clear_row *r = &rows[n++];
        r->id = sqlite3_column_int64(st, 0);
        /* Sealed values are kept as they are; cleartext ones are sealed. */
        if (rc == 0)
            rc = needs_seal(s) ? pwenc_seal(s, r->secret, sizeof(r->secret))
                               : (snprintf(r->secret, sizeof(r->secret), "%s", s), 0);
        if (rc == 0)
            rc = needs_seal(p) ? pwenc_seal(p, r->peersecret, sizeof(r->peersecret))
                               : (snprintf(r->peersecret, sizeof(r->peersecret), "%s", p), 0);
        if (rc < 0)
            break;
    }
    sqlite3_finalize(st);
    if (rc == 0 && step != SQLITE_DONE && step != SQLITE_ROW)
        rc = -EIO;
    if (rc == 0 && n > 0) {
        /* secure_delete zeroes the space the cleartext rows leave behind;
         * the checkpoint then copies the new pages over the old ones in
         * the DB file and truncates the WAL, which held older copies. */
        bool began = false;
        struct cfg_tx tx;
        rc = db_exec("PRAGMA secure_delete=ON");
        if (rc == 0 && (rc = cfg_tx_begin(&tx)) == 0)
            began = true;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            rc = icfg_run("UPDATE iscsi_auth SET secret = ?, peersecret = ? WHERE id = ?", "tti",
                          rows[i].secret, rows[i].peersecret, rows[i].id);
            cfg_tx_changed(&tx, CFG_ISCSI_AUTH, rows[i].id, CFG_UPDATED);
        }
        if (began && rc == 0)
            rc = cfg_tx_commit(&tx);
        else if (began)
            cfg_tx_abort(&tx);
        if (rc == 0 && db_exec("PRAGMA wal_checkpoint(TRUNCATE)") < 0)
            log_warn("iscsi config: the WAL could not be truncated after sealing CHAP secrets");
        db_exec("PRAGMA secure_delete=OFF");
    }
    db_unlock();
    if (rows)
        explicit_bzero(rows, n * sizeof(*rows));
    free(rows);
    if (rc < 0)
        log_error("iscsi config: cannot encrypt the CHAP secrets stored in clear: %s",
                  strerror(-rc));
    else if (n)
        log_info("iscsi config: encrypted the CHAP secrets of %zu authorized access(es) stored "
                 "in clear by an older blockd",
                 n);
    return rc;
}
