/* iscsi.auth.create|update|delete|query: CHAP credentials grouped by tag.
 *
 * Secrets are stored sealed (config/pwenc.h: AES-256-GCM with a key kept
 * outside the DB), so the DB alone does not give them away; CHAP needs
 * the cleartext, so they cannot be hashed. Queries return them in clear,
 * as TrueNAS does for an administrator (its Secret fields are redacted
 * only for read-only roles, which blockd does not have): clients that
 * read a credential and write it back (the TrueNAS web UI's edit form,
 * Terraform-style drift checks) need them. They are never logged. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/db.h"
#include "config/pwenc.h"
#include "core/log.h"
#include "core/util.h"
#include "config/iscsi/config_crud.h"
#include "iscsi/iscsi_config.h"

#define AUTH_SELECT                                                                                \
    "SELECT id, tag, user, secret, peeruser, peersecret, discovery_auth FROM iscsi_auth"

/* A stored secret in clear, or JSON null (logged) when it cannot be
 * decrypted: the key file was lost or replaced, or the row was altered. */
static json_t *secret_value(sqlite3_stmt *st, int col, const char *what)
{
    char plain[PWENC_PLAIN_MAX];
    int rc = pwenc_open(icfg_col_text(st, col), plain, sizeof(plain));
    if (rc < 0) {
        log_error("iscsi config: the %s of authorized access %lld cannot be decrypted (%s); "
                  "set it again with iscsi.auth.update",
                  what, (long long)sqlite3_column_int64(st, 0), strerror(-rc));
        return json_null();
    }
    json_t *v = json_string(plain);
    explicit_bzero(plain, sizeof(plain));
    return v;
}

static json_t *auth_row(sqlite3_stmt *st)
{
    json_t *row =
        json_pack("{s:I, s:I, s:s, s:s, s:s}", "id", (json_int_t)sqlite3_column_int64(st, 0), "tag",
                  (json_int_t)sqlite3_column_int64(st, 1), "user", icfg_col_text(st, 2), "peeruser",
                  icfg_col_text(st, 4), "discovery_auth", icfg_col_text(st, 6));
    json_object_set_new(row, "secret", secret_value(st, 3, "secret"));
    json_object_set_new(row, "peersecret", secret_value(st, 5, "peer secret"));
    return row;
}

static const char *const auth_methods_enum[] = {"NONE", "CHAP", "CHAP_MUTUAL", NULL};
static const struct api_field auth_fields[] = {
    {.name = "tag", .type = API_T_INT, .flags = API_REQUIRED | API_RANGE, .min = 0, .max = 65535},
    {.name = "user", .type = API_T_STRING, .flags = API_REQUIRED | API_RANGE, .min = 1, .max = 255},
    {.name = "secret",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 12,
     .max = 16},
    {.name = "peeruser",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = 255,
     .def = "\"\""},
    {.name = "peersecret",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = 16,
     .def = "\"\""},
    {.name = "discovery_auth", .type = API_T_ENUM, .choices = auth_methods_enum, .def = "\"NONE\""},
};

static void secret_chars(struct api_call *call, const char *name, const char *s)
{
    char f[128];
    size_t n = strlen(s);
    if (n && (s[0] == ' ' || s[n - 1] == ' '))
        api_verr(call, icfg_field(call, name, f, sizeof(f)), EINVAL,
                 "Value error, may not begin or end with a space");
    if (strchr(s, '#'))
        api_verr(call, icfg_field(call, name, f, sizeof(f)), EINVAL,
                 "Value error, may not contain '#'");
}

/* Checks on the complete (merged) object; self_id 0 on create. */
static void auth_check(struct api_call *call, json_t *d, int64_t self_id)
{
    char f[128];
    const char *secret = json_string_value(json_object_get(d, "secret"));
    const char *peeruser = json_string_value(json_object_get(d, "peeruser"));
    const char *peersecret = json_string_value(json_object_get(d, "peersecret"));
    const char *disc = json_string_value(json_object_get(d, "discovery_auth"));
    if (!secret || !peersecret) {
        /* An update of a row whose stored secret cannot be decrypted. */
        api_verr(call, icfg_field(call, secret ? "peersecret" : "secret", f, sizeof(f)), EINVAL,
                 "The stored value cannot be decrypted (was pwenc.key replaced?); set it again");
        return;
    }
    secret_chars(call, "secret", secret);
    if (peeruser[0]) {
        size_t n = strlen(peersecret);
        if (n < 12 || n > 16)
            api_verr(call, icfg_field(call, "peersecret", f, sizeof(f)), EINVAL,
                     "The peer secret must be between 12 and 16 characters.");
        else if (strcmp(peersecret, secret) == 0)
            api_verr(call, icfg_field(call, "peersecret", f, sizeof(f)), EINVAL,
                     "The peer secret cannot be the same as user secret.");
        secret_chars(call, "peersecret", peersecret);
    } else if (peersecret[0]) {
        api_verr(call, icfg_field(call, "peersecret", f, sizeof(f)), EINVAL,
                 "The peer user is required if you set a peer secret.");
    }
    if (strcmp(disc, "CHAP_MUTUAL") == 0) {
        int64_t other;
        if (!peeruser[0])
            api_verr(call, icfg_field(call, "discovery_auth", f, sizeof(f)), EINVAL,
                     "Mutual CHAP discovery authentication requires a peer user.");
        if (icfg_int(&other,
                     "SELECT id FROM iscsi_auth WHERE discovery_auth = 'CHAP_MUTUAL' AND id != ?",
                     "i", self_id) == 0)
            api_verr(call, icfg_field(call, "discovery_auth", f, sizeof(f)), EINVAL,
                     "Only one mutual CHAP discovery credential may exist (auth %lld has it).",
                     (long long)other);
    }
}

static int auth_store(struct api_call *call, json_t *d, int64_t id, int64_t *out_id)
{
    const char *disc = json_string_value(json_object_get(d, "discovery_auth"));
    char secret[PWENC_SEALED_MAX], peersecret[PWENC_SEALED_MAX];
    int err = pwenc_seal(json_string_value(json_object_get(d, "secret")), secret, sizeof(secret));
    if (err == 0)
        err = pwenc_seal(json_string_value(json_object_get(d, "peersecret")), peersecret,
                         sizeof(peersecret));
    if (err < 0)
        return api_error(call, err, "cannot encrypt the CHAP secret");
    if (id == 0) {
        err = icfg_run("INSERT INTO iscsi_auth (tag, user, secret, peeruser, peersecret, "
                       "discovery_auth) VALUES (?, ?, ?, ?, ?, ?)",
                       "ittttt", (int64_t)json_integer_value(json_object_get(d, "tag")),
                       json_string_value(json_object_get(d, "user")), secret,
                       json_string_value(json_object_get(d, "peeruser")), peersecret, disc);
        *out_id = sqlite3_last_insert_rowid(db_handle());
    } else {
        err = icfg_run("UPDATE iscsi_auth SET tag = ?, user = ?, secret = ?, peeruser = ?, "
                       "peersecret = ?, discovery_auth = ? WHERE id = ?",
                       "ittttti", (int64_t)json_integer_value(json_object_get(d, "tag")),
                       json_string_value(json_object_get(d, "user")), secret,
                       json_string_value(json_object_get(d, "peeruser")), peersecret, disc, id);
        *out_id = id;
    }
    return err < 0 ? icfg_db_fail(call, err) : 0;
}

#define TARGETS_BY_TAG "SELECT DISTINCT target_id FROM iscsi_target_group WHERE auth_tag = ?"

static int auth_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    json_t *data;
    if (icfg_create_begin(&w, call, params, auth_fields, ARRAY_SIZE(auth_fields), &data) < 0)
        return -1;
    int rc = 0;
    auth_check(call, data, 0);
    int64_t id = 0;
    if (api_has_verrs(call))
        rc = api_invalid(call);
    else
        rc = auth_store(call, data, 0, &id);
    if (rc == 0) {
        icfg_changed_targets(&w, TARGETS_BY_TAG, json_integer_value(json_object_get(data, "tag")));
        cfg_tx_changed(&w.tx, CFG_ISCSI_AUTH, id, CFG_CREATED);
        *result = icfg_get_by_id(auth_row, AUTH_SELECT " WHERE id = ?", id);
    }
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int auth_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    json_t *data;
    if (icfg_update_begin(&w, call, params, auth_fields, ARRAY_SIZE(auth_fields), &id, &data) < 0)
        return -1;
    int rc = 0;
    json_t *old = icfg_get_by_id(auth_row, AUTH_SELECT " WHERE id = ?", id);
    if (!old) {
        json_decref(data);
        return icfg_write_end(
            &w, api_error(call, ENOENT, "Authorized access %lld does not exist", (long long)id));
    }
    int64_t old_tag = json_integer_value(json_object_get(old, "tag"));
    json_t *merged = json_deep_copy(old);
    json_object_update(merged, data);
    auth_check(call, merged, id);
    int64_t new_tag = json_integer_value(json_object_get(merged, "tag"));
    int64_t still, target;
    if (!api_has_verrs(call) && new_tag != old_tag &&
        icfg_int(&still, "SELECT COUNT(*) FROM iscsi_auth WHERE tag = ? AND id != ?", "ii", old_tag,
                 id) == 0 &&
        still == 0 && icfg_int(&target, TARGETS_BY_TAG " LIMIT 1", "i", old_tag) == 0) {
        char f[128];
        api_verr(call, icfg_field(call, "tag", f, sizeof(f)), EBUSY,
                 "Authorized access group %lld is used by target %lld", (long long)old_tag,
                 (long long)target);
    }
    if (api_has_verrs(call))
        rc = api_invalid(call);
    else {
        int64_t out;
        rc = auth_store(call, merged, id, &out);
    }
    if (rc == 0) {
        icfg_changed_targets(&w, TARGETS_BY_TAG, old_tag);
        icfg_changed_targets(&w, TARGETS_BY_TAG, new_tag);
        cfg_tx_changed(&w.tx, CFG_ISCSI_AUTH, id, CFG_UPDATED);
        *result = icfg_get_by_id(auth_row, AUTH_SELECT " WHERE id = ?", id);
    }
    json_decref(merged);
    json_decref(old);
    json_decref(data);
    return icfg_write_end(&w, rc);
}

static int auth_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    if (icfg_delete_begin(&w, call, params, &id) < 0)
        return -1;
    int rc = 0;
    int64_t tag, others, target;
    if (icfg_int(&tag, "SELECT tag FROM iscsi_auth WHERE id = ?", "i", id) < 0)
        return icfg_write_end(
            &w, api_error(call, ENOENT, "Authorized access %lld does not exist", (long long)id));
    if (icfg_int(&others, "SELECT COUNT(*) FROM iscsi_auth WHERE tag = ? AND id != ?", "ii", tag,
                 id) == 0 &&
        others == 0 && icfg_int(&target, TARGETS_BY_TAG " LIMIT 1", "i", tag) == 0) {
        rc = api_error(call, EBUSY,
                       "Authorized access group %lld is used by target %lld and this is its last "
                       "credential",
                       (long long)tag, (long long)target);
        return icfg_write_end(&w, rc);
    }
    int err = icfg_run("DELETE FROM iscsi_auth WHERE id = ?", "i", id);
    if (err < 0)
        rc = icfg_db_fail(call, err);
    else {
        icfg_changed_targets(&w, TARGETS_BY_TAG, tag);
        cfg_tx_changed(&w.tx, CFG_ISCSI_AUTH, id, CFG_DELETED);
        *result = json_true();
    }
    return icfg_write_end(&w, rc);
}

static int auth_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"tag", "tag"}, {"user", "user"}};
    return icfg_query_hinted(call, params, result, auth_row, AUTH_SELECT, hints, ARRAY_SIZE(hints));
}

static int auth_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, auth_query, "Authorized access");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(auth_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(auth_fields)};

const struct api_method icfg_auth_methods[] = {
    {"iscsi.auth.create", NULL,
     "Create a CHAP credential (secrets 12-16 characters, stored encrypted)", auth_create, 0,
     API_ARGS(create_args)},
    {"iscsi.auth.update", NULL, "Change a CHAP credential", auth_update, 0, API_ARGS(update_args)},
    {"iscsi.auth.delete", NULL, "Delete a CHAP credential", auth_delete, 0,
     API_ARGS(icfg_delete_args)},
    {"iscsi.auth.query", NULL,
     "List CHAP credentials (secrets included, as TrueNAS shows an administrator)", auth_query, 0,
     API_ARGS(icfg_query_args)},
    {"iscsi.auth.get_instance", NULL, "One authorized access by id", auth_query_instance, 0,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_auth_methods_count = ARRAY_SIZE(icfg_auth_methods);

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
