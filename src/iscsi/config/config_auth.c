/*
 * iscsi.auth.create|update|delete|query|get_instance: the API of struct
 * icfg_auth, CHAP credentials grouped by tag (auth_store.h holds their
 * SQL and seals the secrets: control/pwenc.h, AES-256-GCM with a key kept
 * outside the DB, so the DB alone does not give them away; CHAP needs
 * the cleartext, so they cannot be hashed). Queries return them in clear
 * to a caller who may change shares, as TrueNAS does: clients that read a
 * credential and write it back (the TrueNAS web UI's edit form,
 * Terraform-style drift checks) need them; a read-only key reads
 * "********" (api.c redacts every result for it). They are never logged. The
 * field table, the one decoder (auth_decode), the one encoder
 * (auth_encode), the invariants (auth_check) and handlers of one shape:
 * decode → check → one transaction → publish.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/db.h"
#include "iscsi/config/auth_store.h"
#include "iscsi/config/config_crud.h"
#include "core/util.h"

_Static_assert(sizeof(enum icfg_authmethod) == sizeof(int), "api_codec_enum writes an int");
static const struct api_field auth_fields[] = {
    {.name = "tag",
     .type = API_T_INT,
     .flags = API_REQUIRED | API_RANGE,
     .min = 0,
     .max = 65535,
     API_AT(struct icfg_auth, tag, api_codec_i64)},
    {.name = "user",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 1,
     .max = 255,
     API_AT(struct icfg_auth, user, api_codec_str)},
    {.name = "secret",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 12,
     .max = 16,
     API_AT(struct icfg_auth, secret, api_codec_secret)},
    {.name = "peeruser",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = 255,
     .def = "\"\"",
     API_AT(struct icfg_auth, peeruser, api_codec_str)},
    {.name = "peersecret",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = 16,
     .def = "\"\"",
     API_AT(struct icfg_auth, peersecret, api_codec_secret)},
    {.name = "discovery_auth",
     .type = API_T_ENUM,
     .choices = icfg_authmethod_names,
     .def = "\"NONE\"",
     API_AT(struct icfg_auth, discovery_auth, api_codec_enum)},
};

/* The one decoder and the one encoder: the field table. The row shows the
 * secrets in clear (null when they cannot be decrypted), as TrueNAS does
 * to an administrator. */
static int auth_decode(json_t *data, struct icfg_auth *a)
{
    return api_fields_decode(auth_fields, ARRAY_SIZE(auth_fields), data, a);
}

static json_t *auth_encode(const struct icfg_auth *a)
{
    return api_fields_row(a->id, auth_fields, ARRAY_SIZE(auth_fields), a);
}

static void secret_chars(struct icfg_write *w, const char *name, const char *s)
{
    struct api_call *call = w->call;
    char f[128];
    size_t n = strlen(s);
    if (n && (s[0] == ' ' || s[n - 1] == ' '))
        api_verr(call, icfg_wfield(w, name, f, sizeof(f)), EINVAL,
                 "Value error, may not begin or end with a space");
    if (strchr(s, '#'))
        api_verr(call, icfg_wfield(w, name, f, sizeof(f)), EINVAL,
                 "Value error, may not contain '#'");
}

/* The peer secret of a complete credential. */
static void auth_check_peer(struct icfg_write *w, const struct icfg_auth *a)
{
    char f[128];
    if (a->peeruser[0]) {
        size_t n = strlen(a->peersecret);
        if (n < 12 || n > 16)
            api_verr(w->call, icfg_wfield(w, "peersecret", f, sizeof(f)), EINVAL,
                     "The peer secret must be between 12 and 16 characters.");
        else if (strcmp(a->peersecret, a->secret) == 0)
            api_verr(w->call, icfg_wfield(w, "peersecret", f, sizeof(f)), EINVAL,
                     "The peer secret cannot be the same as user secret.");
        secret_chars(w, "peersecret", a->peersecret);
    } else if (a->peersecret[0]) {
        api_verr(w->call, icfg_wfield(w, "peersecret", f, sizeof(f)), EINVAL,
                 "The peer user is required if you set a peer secret.");
    }
}

/* The invariants of a complete credential (a->id 0 on create). */
static void auth_check(struct icfg_write *w, const struct icfg_auth *a)
{
    char f[128];
    int64_t other;
    if (!a->secret || !a->peersecret) {
        /* An update of a row whose stored secret cannot be decrypted. */
        api_verr(w->call, icfg_wfield(w, a->secret ? "peersecret" : "secret", f, sizeof(f)), EINVAL,
                 "The stored value cannot be decrypted (was pwenc.key replaced?); set it again");
        return;
    }
    secret_chars(w, "secret", a->secret);
    auth_check_peer(w, a);
    if (a->discovery_auth != ICFG_AUTH_CHAP_MUTUAL)
        return;
    if (!a->peeruser[0])
        api_verr(w->call, icfg_wfield(w, "discovery_auth", f, sizeof(f)), EINVAL,
                 "Mutual CHAP discovery authentication requires a peer user.");
    if (icfg_auth_find_mutual_discovery(a->id, &other) == 0)
        api_verr(w->call, icfg_wfield(w, "discovery_auth", f, sizeof(f)), EINVAL,
                 "Only one mutual CHAP discovery credential may exist (auth %lld has it).",
                 (long long)other);
}

/* The first target using tag when no credential but except_id has it
 * (removing or retagging except_id would leave those targets without
 * one): 0 with *target, or -ENOENT. */
static int tag_last_user(int64_t tag, int64_t except_id, int64_t *target)
{
    int64_t others, *targets = NULL;
    size_t n = 0;
    int rc = icfg_auth_tag_others(tag, except_id, &others);
    if (rc == 0 && others == 0)
        rc = icfg_auth_tag_targets(tag, &targets, &n);
    rc = rc == 0 && others == 0 && n > 0 ? 0 : -ENOENT;
    if (rc == 0)
        *target = targets[0];
    free(targets);
    return rc;
}

/* Record the targets whose groups name tag as changed. */
static void tag_changed(struct icfg_write *w, int64_t tag)
{
    int64_t *targets = NULL;
    size_t n = 0;
    if (icfg_auth_tag_targets(tag, &targets, &n) == 0)
        for (size_t i = 0; i < n; i++)
            icfg_changed_target(w, targets[i]);
    free(targets);
}

/* Check a (old_tag: its tag before, on update) and store it inside w,
 * recording the change. 0 or -1 (error set). */
static int auth_save(struct icfg_write *w, struct icfg_auth *a, int64_t old_tag)
{
    struct api_call *call = w->call;
    bool create = a->id == 0;
    int64_t target;
    auth_check(w, a);
    if (!create && !api_has_verrs(call) && a->tag != old_tag &&
        tag_last_user(old_tag, a->id, &target) == 0) {
        char f[128];
        api_verr(call, icfg_wfield(w, "tag", f, sizeof(f)), EBUSY,
                 "Authorized access group %lld is used by target %lld", (long long)old_tag,
                 (long long)target);
    }
    if (api_has_verrs(call))
        return api_invalid(call);
    struct icfg_auth_sealed sealed;
    int err = icfg_auth_seal(a, &sealed);
    if (err < 0)
        return api_error(call, err, "cannot encrypt the CHAP secret");
    err = create ? icfg_auth_insert(a, &sealed) : icfg_auth_update(a, &sealed);
    explicit_bzero(&sealed, sizeof(sealed));
    if (err < 0)
        return icfg_db_fail(call, err);
    if (!create)
        tag_changed(w, old_tag);
    tag_changed(w, a->tag);
    cfg_tx_changed(&w->tx, CFG_ISCSI_AUTH, a->id, create ? CFG_CREATED : CFG_UPDATED);
    return 0;
}

/* The stored credential id encoded as the call's result. 0 or -1. */
static int auth_result(struct api_call *call, int64_t id, json_t **result)
{
    struct icfg_auth a;
    int rc = icfg_auth_get(id, &a);
    if (rc == 0 && !(*result = auth_encode(&a)))
        rc = -ENOMEM;
    icfg_auth_clear(&a);
    return rc < 0 ? icfg_db_fail(call, rc) : 0;
}

static int auth_create(struct api_call *call, json_t *params, json_t **result)
{
    struct icfg_write w;
    struct icfg_auth a = {0};
    json_t *body;
    if (icfg_create_begin(&w, call, params, auth_fields, ARRAY_SIZE(auth_fields), &body) < 0)
        return -1;
    int rc = auth_decode(body, &a) < 0 ? api_error(call, ENOMEM, "out of memory")
                                       : auth_save(&w, &a, a.tag);
    if (rc == 0)
        rc = auth_result(call, a.id, result);
    icfg_auth_clear(&a);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int auth_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id;
    struct icfg_write w;
    struct icfg_auth a;
    json_t *body;
    if (icfg_update_begin(&w, call, params, auth_fields, ARRAY_SIZE(auth_fields), &id, &body) < 0)
        return -1;
    int rc = icfg_auth_get(id, &a);
    int64_t old_tag = a.tag;
    if (rc < 0)
        rc = icfg_missing(call, rc, "Authorized access", id);
    else if (auth_decode(body, &a) < 0)
        rc = api_error(call, ENOMEM, "out of memory");
    else if ((rc = auth_save(&w, &a, old_tag)) == 0)
        rc = auth_result(call, id, result);
    icfg_auth_clear(&a);
    json_decref(body);
    return icfg_write_end(&w, rc);
}

static int auth_delete(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id, target;
    struct icfg_write w;
    if (icfg_delete_begin(&w, call, params, &id) < 0)
        return -1;
    struct icfg_auth a;
    int rc = icfg_auth_get(id, &a);
    int64_t tag = a.tag;
    icfg_auth_clear(&a);
    if (rc < 0)
        rc = icfg_missing(call, rc, "Authorized access", id);
    else if (tag_last_user(tag, id, &target) == 0)
        rc = api_error(call, EBUSY,
                       "Authorized access group %lld is used by target %lld and this is its last "
                       "credential",
                       (long long)tag, (long long)target);
    else if ((rc = icfg_auth_delete(id)) < 0)
        rc = icfg_db_fail(call, rc);
    if (rc == 0) {
        tag_changed(&w, tag);
        cfg_tx_changed(&w.tx, CFG_ISCSI_AUTH, id, CFG_DELETED);
        *result = json_true();
    }
    return icfg_write_end(&w, rc);
}

static json_t *auth_encode_elem(const void *elem)
{
    return auth_encode(elem);
}

static int auth_query(struct api_call *call, json_t *params, json_t **result)
{
    static const struct icfg_hint hints[] = {{"id", "id"}, {"tag", "tag"}, {"user", "user"}};
    static const struct icfg_typed type = {&icfg_auth_table, auth_encode_elem};
    return icfg_query_typed(call, params, result, &type, hints, ARRAY_SIZE(hints));
}

static int auth_query_instance(struct api_call *call, json_t *params, json_t **result)
{
    return icfg_get_instance(call, params, result, auth_query, "Authorized access");
}

static const struct api_arg create_args[] = {ICFG_ARG_CREATE(auth_fields)};
static const struct api_arg update_args[] = {ICFG_ARGS_UPDATE(auth_fields)};

const struct api_method icfg_auth_methods[] = {
    {"iscsi.auth.create", NULL,
     "Create a CHAP credential (secrets 12-16 characters, stored encrypted)", auth_create,
     API_SHARE, API_ARGS(create_args)},
    {"iscsi.auth.update", NULL, "Change a CHAP credential", auth_update, API_SHARE,
     API_ARGS(update_args)},
    {"iscsi.auth.delete", NULL, "Delete a CHAP credential", auth_delete, API_SHARE,
     API_ARGS(icfg_delete_args)},
    {"iscsi.auth.query", NULL,
     "List CHAP credentials (secrets included, as TrueNAS shows an administrator)", auth_query,
     API_READ, API_ARGS(icfg_query_args)},
    {"iscsi.auth.get_instance", NULL, "One authorized access by id", auth_query_instance, API_READ,
     API_ARGS(icfg_get_instance_args)},
};
const size_t icfg_auth_methods_count = ARRAY_SIZE(icfg_auth_methods);
