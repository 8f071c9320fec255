/*
 * The iscsi.* configuration API through api_handle_text against a temp DB
 * (real control/, store/ and scsi/; the transport stubbed): validation with
 * field-named errors, id / rel_tgt_id / lunid allocation, uniqueness,
 * delete rules, hidden secrets, defer, persistence across a DB reopen, and
 * the runtime views the transport reads.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <sys/socket.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "api/api.h"
#include "control/datasets.h"
#include "control/db.h"
#include "iscsi/config/config_internal.h"
#include "control/pwenc.h"
#include "core/log.h"
#include "core/util.h"
#include "iscsi/config/iscsi_config.h"
#include "iscsi/iscsi_runtime.h"
#include "scsi/scsi.h"
#include "test_config_stubs.h"
#include "testdb.h"

#define ICFG_SEEN_MAX 2048

static struct testdb tdb; /* made by group_setup */
static char pooldir[400]; /* FILE extents must live inside a pool */

/* ---- helpers ---- */

static json_t *rpc(const char *method, const char *params_fmt, ...)
{
    char params[4096], req[8192];
    va_list ap;
    va_start(ap, params_fmt);
    vsnprintf(params, sizeof(params), params_fmt, ap);
    va_end(ap);
    snprintf(req, sizeof(req), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"%s\",\"params\":%s}",
             method, params);
    char *resp = api_handle_text(req, strlen(req), "test");
    assert_non_null(resp);
    json_t *j = json_loads(resp, 0, NULL);
    if (!j)
        fail_msg("bad response: %s", resp);
    free(resp);
    return j;
}

/* The result (new ref) of a call that must succeed. */
static json_t *ok(json_t *resp)
{
    json_t *err = json_object_get(resp, "error");
    if (err) {
        char *t = json_dumps(err, 0);
        fail_msg("unexpected error: %s", t);
    }
    json_t *r = json_incref(json_object_get(resp, "result"));
    json_decref(resp);
    return r;
}

/* A -32602 error whose data.extra names field with a message containing msg. */
static void verr(json_t *resp, const char *field, const char *msg)
{
    json_t *err = json_object_get(resp, "error");
    char *all = json_dumps(resp, 0);
    if (!err)
        fail_msg("expected a validation error on %s, got %s", field, all);
    if (json_integer_value(json_object_get(err, "code")) != -32602)
        fail_msg("expected -32602 for %s, got %s", field, all);
    json_t *extra = json_object_get(json_object_get(err, "data"), "extra");
    size_t i;
    json_t *e;
    bool found = false;
    json_array_foreach(extra, i, e)
    {
        const char *f = json_string_value(json_array_get(e, 0));
        const char *m = json_string_value(json_array_get(e, 1));
        if (f && m && strcmp(f, field) == 0 && strstr(m, msg))
            found = true;
    }
    if (!found)
        fail_msg("no error [%s, *%s*] in %s", field, msg, all);
    free(all);
    json_decref(resp);
}

/* A -32001 call error with errno and a message containing msg. */
static void callerr(json_t *resp, int errnum, const char *msg)
{
    json_t *err = json_object_get(resp, "error");
    char *all = json_dumps(resp, 0);
    if (!err || json_integer_value(json_object_get(err, "code")) != -32001)
        fail_msg("expected a call error, got %s", all);
    json_t *data = json_object_get(err, "data");
    if (json_integer_value(json_object_get(data, "error")) != errnum)
        fail_msg("expected errno %d, got %s", errnum, all);
    if (!strstr(json_string_value(json_object_get(err, "message")), msg))
        fail_msg("expected message *%s*, got %s", msg, all);
    free(all);
    json_decref(resp);
}

static json_int_t id_of(json_t *obj)
{
    json_int_t id = json_integer_value(json_object_get(obj, "id"));
    json_decref(obj);
    return id;
}

static json_int_t portal_new(const char *ip)
{
    return id_of(ok(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"%s\"}]}]", ip)));
}

static json_int_t target_new(const char *name)
{
    return id_of(ok(rpc("iscsi.target.create", "[{\"name\":\"%s\"}]", name)));
}

static json_int_t file_extent_new(const char *name)
{
    return id_of(ok(rpc("iscsi.extent.create",
                        "[{\"name\":\"%s\",\"type\":\"FILE\",\"path\":\"%s/%s.img\","
                        "\"filesize\":1048576}]",
                        name, pooldir, name)));
}

static struct iscsi_target_view *view(const char *name)
{
    char iqn[300];
    snprintf(iqn, sizeof(iqn), "iqn.2026-11.org.blockd:%s", name);
    return iscsi_runtime_find_target(iqn);
}

/* ---- fixtures ---- */

static int group_setup(void **state)
{
    if (testdb_make(&tdb, "/tmp/test-iscsi-config", "blockd.db") < 0)
        return -1;
    log_set_level(LOG_ERROR);
    datasets_init(tdb.dir);
    iscsi_config_init();
    if (pwenc_init(tdb.dir) < 0)
        return -1;
    if (db_open(tdb.path) < 0)
        return -1;
    if (datasets_ensure_default_pool("tank") < 0)
        return -1;
    json_t *pool = ok(rpc("pool.query", "[[[\"name\",\"=\",\"tank\"]],{\"get\":true}]"));
    snprintf(pooldir, sizeof(pooldir), "%s", json_string_value(json_object_get(pool, "path")));
    json_decref(pool);
    json_decref(ok(rpc("pool.dataset.create",
                       "[{\"name\":\"tank/v1\",\"type\":\"VOLUME\",\"volsize\":16777216}]")));
    json_decref(ok(rpc("pool.dataset.create",
                       "[{\"name\":\"tank/v2\",\"type\":\"VOLUME\",\"volsize\":16777216}]")));
    return iscsi_config_start(NULL);
}

static int group_teardown(void **state)
{
    iscsi_config_stop();
    datasets_flush_all();
    datasets_shutdown();
    db_close();
    return testdb_remove(&tdb) == 0 ? 0 : -1;
}

/* ---- global ---- */

static void test_global(void **state)
{
    json_t *g = ok(rpc("iscsi.global.config", "[]"));
    assert_string_equal(json_string_value(json_object_get(g, "basename")),
                        "iqn.2026-11.org.blockd");
    assert_int_equal(json_integer_value(json_object_get(g, "listen_port")), 3260);
    assert_int_equal(json_array_size(json_object_get(g, "isns_servers")), 0);
    json_decref(g);

    verr(rpc("iscsi.global.update", "[{\"basename\":\"IQN.Upper\"}]"),
         "iscsi.global.update.basename", "lower case");
    verr(rpc("iscsi.global.update", "[{\"listen_port\":80}]"), "iscsi.global.update.listen_port",
         "greater than or equal to 1025");
    verr(rpc("iscsi.global.update", "[{\"listen_port\":\"3260\"}]"),
         "iscsi.global.update.listen_port", "valid integer");
    verr(rpc("iscsi.global.update", "[{\"bogus\":1}]"), "iscsi.global.update.bogus",
         "Extra inputs are not permitted");

    g = ok(rpc("iscsi.global.update", "[{\"isns_servers\":[\"10.0.0.1:3205\"],"
                                      "\"listen_port\":3261}]"));
    assert_string_equal(json_string_value(json_array_get(json_object_get(g, "isns_servers"), 0)),
                        "10.0.0.1:3205");
    assert_int_equal(json_integer_value(json_object_get(g, "listen_port")), 3261);
    json_decref(g);
    json_decref(ok(rpc("iscsi.global.update", "[{\"listen_port\":3260}]")));
}

/* ---- portals ---- */

static void test_portal(void **state)
{
    verr(rpc("iscsi.portal.create", "[{}]"), "iscsi.portal.create.listen", "Field required");
    verr(rpc("iscsi.portal.create", "[{\"listen\":[]}]"), "iscsi.portal.create.listen",
         "at least 1");
    verr(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"bogus\"}]}]"),
         "iscsi.portal.create.listen.0.ip", "not an IP address");
    verr(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"127.0.0.1\",\"port\":5}]}]"),
         "iscsi.portal.create.listen.0.port", "Extra inputs");
    verr(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"127.0.0.1\"}],\"tag\":3}]"),
         "iscsi.portal.create.tag", "Extra inputs");

    json_t *choices = ok(rpc("iscsi.portal.listen_ip_choices", "[]"));
    assert_non_null(json_object_get(choices, "0.0.0.0"));
    assert_non_null(json_object_get(choices, "127.0.0.1"));
    json_decref(choices);

    unsigned listens = stub.listens;
    json_t *p = ok(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"127.0.0.1\"}],"
                                              "\"comment\":\"lo\"}]"));
    json_int_t p1 = json_integer_value(json_object_get(p, "id"));
    json_int_t tag1 = json_integer_value(json_object_get(p, "tag"));
    json_t *l0 = json_array_get(json_object_get(p, "listen"), 0);
    assert_string_equal(json_string_value(json_object_get(l0, "ip")), "127.0.0.1");
    assert_int_equal(json_integer_value(json_object_get(l0, "port")), 3260);
    json_decref(p);
    /* the portal is listened on at once (no --iscsi-listen in this test) */
    assert_int_equal(stub.listens, listens + 1);
    assert_non_null(strstr(stub.last_listen, "127.0.0.1:3260"));

    verr(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"127.0.0.1\"}]}]"),
         "iscsi.portal.create.listen.0.ip", "already belongs to portal");
    json_int_t p2 = portal_new("::1");
    json_int_t p3 = portal_new("0.0.0.0");
    /* TrueNAS renumbers tags 1..n on delete */
    json_decref(ok(rpc("iscsi.portal.delete", "[%lld]", (long long)p2)));
    json_t *q =
        ok(rpc("iscsi.portal.query", "[[[\"id\",\"=\",%lld]],{\"get\":true}]", (long long)p3));
    assert_int_equal(json_integer_value(json_object_get(q, "tag")), tag1 + 1);
    json_decref(q);
    callerr(rpc("iscsi.portal.delete", "[%lld]", (long long)p2), ENOENT, "does not exist");
    unsigned unlistens = stub.unlistens;
    json_decref(ok(rpc("iscsi.portal.delete", "[%lld]", (long long)p3)));
    assert_true(stub.unlistens > unlistens); /* its listener is closed at once */

    /* An address that cannot be bound is refused before anything is
     * written: a new portal, a new address of a portal, a port change. */
    snprintf(stub.probe_busy, sizeof(stub.probe_busy), "127.0.0.9:3260");
    json_t *before = ok(rpc("iscsi.portal.query", "[]"));
    listens = stub.listens;
    verr(rpc("iscsi.portal.create", "[{\"listen\":[{\"ip\":\"127.0.0.9\"}]}]"),
         "iscsi.portal.create.listen.0.ip", "Cannot listen on 127.0.0.9:3260");
    verr(rpc("iscsi.portal.update",
             "[%lld, {\"listen\":[{\"ip\":\"127.0.0.1\"},{\"ip\":\"127.0.0.9\"}]}]", (long long)p1),
         "iscsi.portal.update.listen.1.ip", "already in use");
    /* a comment change does not probe the addresses the portal has */
    snprintf(stub.probe_busy, sizeof(stub.probe_busy), "127.0.0.1:3260");
    json_decref(
        ok(rpc("iscsi.portal.update", "[%lld, {\"comment\":\"still lo\"}]", (long long)p1)));
    snprintf(stub.probe_busy, sizeof(stub.probe_busy), "127.0.0.1:3262");
    verr(rpc("iscsi.global.update", "[{\"listen_port\":3262}]"), "iscsi.global.update.listen_port",
         "Cannot listen on 127.0.0.1:3262");
    json_t *g = ok(rpc("iscsi.global.config", "[]"));
    assert_int_equal(json_integer_value(json_object_get(g, "listen_port")), 3260);
    json_decref(g);
    stub.probe_busy[0] = '\0';
    json_t *after = ok(rpc("iscsi.portal.query", "[]"));
    json_object_del(json_array_get(before, 0), "comment");
    json_object_del(json_array_get(after, 0), "comment");
    assert_true(json_equal(before, after));
    assert_int_equal(stub.listens, listens);
    json_decref(before);
    json_decref(after);
}

/* ---- initiators ---- */

static void test_initiator(void **state)
{
    verr(rpc("iscsi.initiator.create", "[{\"initiators\":\"iqn.x\"}]"),
         "iscsi.initiator.create.initiators", "valid list");
    verr(rpc("iscsi.initiator.create", "[{\"initiators\":[\"bad name\"]}]"),
         "iscsi.initiator.create.initiators.0", "spaces");
    json_t *i = ok(rpc("iscsi.initiator.create", "[{\"comment\":\"all\"}]"));
    assert_int_equal(json_array_size(json_object_get(i, "initiators")), 0);
    json_int_t all = id_of(i);
    i = ok(rpc("iscsi.initiator.update", "[%lld, {\"initiators\":[\"iqn.2026-01.test:a\"]}]",
               (long long)all));
    assert_string_equal(json_string_value(json_array_get(json_object_get(i, "initiators"), 0)),
                        "iqn.2026-01.test:a");
    assert_string_equal(json_string_value(json_object_get(i, "comment")), "all");
    json_decref(i);

    /* in use by a target → refused */
    json_int_t portal = portal_new("127.0.0.2");
    json_int_t t = id_of(ok(rpc("iscsi.target.create",
                                "[{\"name\":\"ini-user\",\"groups\":[{\"portal\":%lld,"
                                "\"initiator\":%lld}]}]",
                                (long long)portal, (long long)all)));
    struct iscsi_target_view *v = view("ini-user");
    assert_non_null(v);
    assert_int_equal(v->n_groups, 1);
    assert_int_equal(v->groups[0].n_initiators, 1);
    assert_string_equal(v->groups[0].initiators[0], "iqn.2026-01.test:a");
    iscsi_target_view_unref(v);
    callerr(rpc("iscsi.initiator.delete", "[%lld]", (long long)all), EBUSY, "used by target");
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)t)));
    json_decref(ok(rpc("iscsi.initiator.delete", "[%lld]", (long long)all)));
    json_decref(ok(rpc("iscsi.portal.delete", "[%lld]", (long long)portal)));
}

/* ---- CHAP ---- */

static void test_auth(void **state)
{
    verr(rpc("iscsi.auth.create", "[{\"tag\":1,\"user\":\"u\",\"secret\":\"short\"}]"),
         "iscsi.auth.create.secret", "at least 12");
    verr(rpc("iscsi.auth.create", "[{\"tag\":1,\"user\":\"u\",\"secret\":\"waytoolongsecret!!\"}]"),
         "iscsi.auth.create.secret", "at most 16");
    verr(rpc("iscsi.auth.create", "[{\"tag\":1,\"user\":\"u\",\"secret\":\"secret#secret\"}]"),
         "iscsi.auth.create.secret", "'#'");
    verr(rpc("iscsi.auth.create", "[{\"tag\":1,\"user\":\"u\"}]"), "iscsi.auth.create.secret",
         "Field required");
    verr(rpc("iscsi.auth.create", "[{\"tag\":\"1\",\"user\":\"u\",\"secret\":\"123456789012\"}]"),
         "iscsi.auth.create.tag", "valid integer");
    verr(rpc("iscsi.auth.create",
             "[{\"tag\":1,\"user\":\"u\",\"secret\":\"123456789012\",\"peeruser\":\"p\","
             "\"peersecret\":\"123456789012\"}]"),
         "iscsi.auth.create.peersecret", "cannot be the same");
    verr(rpc("iscsi.auth.create",
             "[{\"tag\":1,\"user\":\"u\",\"secret\":\"123456789012\",\"peeruser\":\"p\"}]"),
         "iscsi.auth.create.peersecret", "between 12 and 16");
    verr(rpc("iscsi.auth.create", "[{\"tag\":1,\"user\":\"u\",\"secret\":\"123456789012\","
                                  "\"discovery_auth\":\"CHAP_MUTUAL\"}]"),
         "iscsi.auth.create.discovery_auth", "peer user");
    verr(rpc("iscsi.auth.create", "[{\"tag\":1,\"user\":\"u\",\"secret\":\"123456789012\","
                                  "\"discovery_auth\":\"KERBEROS\"}]"),
         "iscsi.auth.create.discovery_auth", "'NONE', 'CHAP' or 'CHAP_MUTUAL'");

    json_t *a =
        ok(rpc("iscsi.auth.create", "[{\"tag\":7,\"user\":\"alice\",\"secret\":\"alicesecret1\","
                                    "\"peeruser\":\"tgt\",\"peersecret\":\"targetsecret\"}]"));
    /* returned in clear, as TrueNAS shows an administrator */
    assert_string_equal(json_string_value(json_object_get(a, "secret")), "alicesecret1");
    assert_string_equal(json_string_value(json_object_get(a, "peersecret")), "targetsecret");
    assert_string_equal(json_string_value(json_object_get(a, "peeruser")), "tgt");
    json_int_t aid = id_of(a);
    json_t *q = ok(rpc("iscsi.auth.query", "[[[\"user\",\"=\",\"alice\"]]]"));
    assert_string_equal(json_string_value(json_object_get(json_array_get(q, 0), "secret")),
                        "alicesecret1");
    json_decref(q);
    /* …but stored sealed: the DB alone does not give them away */
    db_lock();
    sqlite3_stmt *st;
    assert_int_equal(db_prepare("SELECT secret, peersecret FROM iscsi_auth WHERE id = ?", &st), 0);
    sqlite3_bind_int64(st, 1, aid);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_true(pwenc_is_sealed((const char *)sqlite3_column_text(st, 0)));
    assert_true(pwenc_is_sealed((const char *)sqlite3_column_text(st, 1)));
    assert_null(strstr((const char *)sqlite3_column_text(st, 0), "alicesecret1"));
    sqlite3_finalize(st);
    db_unlock();

    /* a target using tag 7 with mutual CHAP sees the credentials */
    json_int_t portal = portal_new("127.0.0.3");
    verr(rpc("iscsi.target.create",
             "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld,\"authmethod\":\"CHAP\"}]}]",
             (long long)portal),
         "iscsi.target.create.groups.0.auth", "required for CHAP");
    verr(rpc("iscsi.target.create",
             "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld,\"authmethod\":\"CHAP\","
             "\"auth\":99}]}]",
             (long long)portal),
         "iscsi.target.create.groups.0.auth", "does not exist");
    verr(rpc("iscsi.target.create",
             "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld},{\"portal\":%lld}]}]",
             (long long)portal, (long long)portal),
         "iscsi.target.create.groups.1.portal", "cannot be duplicated");
    verr(rpc("iscsi.target.create",
             "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld,\"initiator\":4242}]}]",
             (long long)portal),
         "iscsi.target.create.groups.0.initiator", "does not exist");
    json_int_t plain = id_of(ok(rpc("iscsi.auth.create", "[{\"tag\":9,\"user\":\"bob\","
                                                         "\"secret\":\"bobsecret123\"}]")));
    verr(rpc("iscsi.target.create",
             "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld,\"authmethod\":"
             "\"CHAP_MUTUAL\",\"auth\":9}]}]",
             (long long)portal),
         "iscsi.target.create.groups.0.auth", "does not support CHAP Mutual");
    verr(rpc("iscsi.target.create",
             "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld,\"authmethod\":\"PAP\"}]}]",
             (long long)portal),
         "iscsi.target.create.groups.0.authmethod", "Input should be");
    json_decref(ok(rpc("iscsi.auth.delete", "[%lld]", (long long)plain)));
    json_int_t t = id_of(ok(rpc("iscsi.target.create",
                                "[{\"name\":\"chap-t\",\"groups\":[{\"portal\":%lld,"
                                "\"authmethod\":\"CHAP_MUTUAL\",\"auth\":7}]}]",
                                (long long)portal)));
    struct iscsi_target_view *v = view("chap-t");
    assert_non_null(v);
    assert_int_equal(v->groups[0].auth.method, ISCSI_AUTH_CHAP_MUTUAL);
    assert_int_equal(v->groups[0].auth.n_creds, 1);
    assert_string_equal(v->groups[0].auth.creds[0].user, "alice");
    assert_string_equal(v->groups[0].auth.creds[0].secret, "alicesecret1");
    assert_string_equal(v->groups[0].auth.creds[0].peersecret, "targetsecret");
    iscsi_target_view_unref(v);

    /* a secret change is live for the target */
    json_decref(
        ok(rpc("iscsi.auth.update", "[%lld, {\"secret\":\"newsecret123\"}]", (long long)aid)));
    v = view("chap-t");
    assert_string_equal(v->groups[0].auth.creds[0].secret, "newsecret123");
    iscsi_target_view_unref(v);
    /* the last credential of a tag in use cannot go */
    callerr(rpc("iscsi.auth.delete", "[%lld]", (long long)aid), EBUSY, "used by target");
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)t)));
    json_decref(ok(rpc("iscsi.auth.delete", "[%lld]", (long long)aid)));

    /* discovery auth */
    struct iscsi_auth_policy pol;
    assert_int_equal(iscsi_runtime_discovery_auth(&pol), 0);
    assert_int_equal(pol.method, ISCSI_AUTH_NONE);
    iscsi_auth_policy_clear(&pol);
    json_int_t d = id_of(
        ok(rpc("iscsi.auth.create", "[{\"tag\":8,\"user\":\"disc\",\"secret\":\"discsecret12\","
                                    "\"discovery_auth\":\"CHAP\"}]")));
    assert_int_equal(iscsi_runtime_discovery_auth(&pol), 0);
    assert_int_equal(pol.method, ISCSI_AUTH_CHAP);
    assert_int_equal(pol.n_creds, 1);
    assert_string_equal(pol.creds[0].user, "disc");
    iscsi_auth_policy_clear(&pol);
    json_decref(ok(rpc("iscsi.auth.delete", "[%lld]", (long long)d)));
    assert_int_equal(iscsi_runtime_discovery_auth(&pol), 0);
    assert_int_equal(pol.method, ISCSI_AUTH_NONE);
    iscsi_auth_policy_clear(&pol);
    json_decref(ok(rpc("iscsi.portal.delete", "[%lld]", (long long)portal)));
}

/* ---- targets ---- */

static void test_target_validation(void **state)
{
    verr(rpc("iscsi.target.create", "[{}]"), "iscsi.target.create.name", "Field required");
    verr(rpc("iscsi.target.create", "[{\"name\":\"Upper\"}]"), "iscsi.target.create.name",
         "Lowercase alphanumeric");
    verr(rpc("iscsi.target.create", "[{\"name\":\"a b\"}]"), "iscsi.target.create.name",
         "Lowercase alphanumeric");
    char longname[130];
    memset(longname, 'a', 121);
    longname[121] = '\0';
    verr(rpc("iscsi.target.create", "[{\"name\":\"%s\"}]", longname), "iscsi.target.create.name",
         "at most 120");
    verr(rpc("iscsi.target.create", "[{\"name\":5}]"), "iscsi.target.create.name", "valid string");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"mode\":\"FC\"}]"),
         "iscsi.target.create.mode", "not supported");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"mode\":\"SAS\"}]"),
         "iscsi.target.create.mode", "Input should be");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"alias\":\"a\\\"b\"}]"),
         "iscsi.target.create.alias", "Double quotes");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"alias\":\"target\"}]"),
         "iscsi.target.create.alias", "reserved");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"id\":4}]"), "iscsi.target.create.id",
         "Extra inputs are not permitted");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"rel_tgt_id\":4}]"),
         "iscsi.target.create.rel_tgt_id", "Extra inputs are not permitted");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"auth_networks\":[\"10.0.0.0/33\"]}]"),
         "iscsi.target.create.auth_networks.0", "not a valid IP network");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"groups\":[{\"portal\":9999}]}]"),
         "iscsi.target.create.groups.0.portal", "does not exist");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"groups\":[{}]}]"),
         "iscsi.target.create.groups.0.portal", "Field required");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\",\"defer\":1}]"), "iscsi.target.create.defer",
         "valid boolean");
    verr(rpc("iscsi.target.create", "[{\"name\":\"x\"}, 1]"), "iscsi.target.create",
         "Too many arguments");
    verr(rpc("iscsi.target.delete", "[\"1\"]"), "iscsi.target.delete.id", "valid integer");
    verr(rpc("iscsi.target.delete", "[1, \"yes\"]"), "iscsi.target.delete.force", "valid boolean");
    verr(rpc("iscsi.target.delete", "[1, false, false, false, 5]"), "iscsi.target.delete",
         "Too many arguments");

    json_t *t = ok(rpc("iscsi.target.create", "[{\"name\":\"valid-1\",\"alias\":\"disk one\","
                                              "\"auth_networks\":[\"10.0.0.0/8\",\"fe80::1\"]}]"));
    assert_string_equal(json_string_value(json_object_get(t, "mode")), "ISCSI");
    assert_int_equal(json_array_size(json_object_get(t, "groups")), 0);
    json_int_t id = id_of(t);
    verr(rpc("iscsi.target.create", "[{\"name\":\"valid-1\"}]"), "iscsi.target.create.name",
         "already exists");
    verr(rpc("iscsi.target.create", "[{\"name\":\"valid-2\",\"alias\":\"disk one\"}]"),
         "iscsi.target.create.alias", "already exists");
    /* "" alias is stored as null, and several targets may have none */
    json_t *t2 = ok(rpc("iscsi.target.create", "[{\"name\":\"valid-2\",\"alias\":\"\"}]"));
    assert_true(json_is_null(json_object_get(t2, "alias")));
    json_int_t id2 = id_of(t2);
    json_int_t id3 = target_new("valid-3");
    /* update: partial, validated merged, own name allowed */
    t = ok(
        rpc("iscsi.target.update", "[%lld, {\"name\":\"valid-1\",\"alias\":null}]", (long long)id));
    assert_true(json_is_null(json_object_get(t, "alias")));
    json_decref(t);
    verr(rpc("iscsi.target.update", "[%lld, {\"name\":\"valid-2\"}]", (long long)id),
         "iscsi.target.update.name", "already exists");
    callerr(rpc("iscsi.target.update", "[999999, {\"alias\":\"z\"}]"), ENOENT, "does not exist");
    json_t *v = ok(rpc("iscsi.target.validate_name", "[\"valid-2\"]"));
    assert_true(json_is_string(v));
    json_decref(v);
    v = ok(rpc("iscsi.target.validate_name", "[\"valid-2\", %lld]", (long long)id2));
    assert_true(json_is_null(v));
    json_decref(v);

    struct iscsi_target_view *tv = view("valid-1");
    assert_non_null(tv);
    assert_int_equal(tv->n_auth_networks, 2);
    assert_int_equal(tv->auth_networks[0].family, AF_INET);
    assert_int_equal(tv->auth_networks[0].prefix, 8);
    assert_int_equal(tv->auth_networks[1].prefix, 128);
    iscsi_target_view_unref(tv);

    /* get_instance, as TrueNAS CRUD services have it */
    json_t *gi = ok(rpc("iscsi.target.get_instance", "[%lld]", (long long)id2));
    assert_string_equal(json_string_value(json_object_get(gi, "name")), "valid-2");
    json_decref(gi);
    callerr(rpc("iscsi.target.get_instance", "[999999]"), ENOENT, "Target 999999 does not exist");
    callerr(rpc("iscsi.extent.get_instance", "[999999]"), ENOENT, "does not exist");
    verr(rpc("iscsi.portal.get_instance", "[\"x\"]"), "iscsi.portal.get_instance.id",
         "valid integer");

    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id)));
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id2)));
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id3)));
}

static void test_target_rel_tgt_id(void **state)
{
    json_t *a = ok(rpc("iscsi.target.create", "[{\"name\":\"rel-a\"}]"));
    json_t *b = ok(rpc("iscsi.target.create", "[{\"name\":\"rel-b\"}]"));
    json_t *c = ok(rpc("iscsi.target.create", "[{\"name\":\"rel-c\"}]"));
    json_int_t ra = json_integer_value(json_object_get(a, "rel_tgt_id"));
    json_int_t rb = json_integer_value(json_object_get(b, "rel_tgt_id"));
    json_int_t rc = json_integer_value(json_object_get(c, "rel_tgt_id"));
    assert_true(ra >= 1 && rb == ra + 1 && rc == rb + 1);
    json_int_t idb = json_integer_value(json_object_get(b, "id"));
    json_int_t idc = json_integer_value(json_object_get(c, "id"));
    assert_true(idc > idb);
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)idb)));
    /* lowest free rel_tgt_id is reused; ids are not */
    json_t *d = ok(rpc("iscsi.target.create", "[{\"name\":\"rel-d\"}]"));
    assert_int_equal(json_integer_value(json_object_get(d, "rel_tgt_id")), rb);
    assert_true(json_integer_value(json_object_get(d, "id")) > idc);
    struct iscsi_target_view *v = view("rel-d");
    assert_non_null(v);
    assert_int_equal(v->rel_tgt_id, rb);
    iscsi_target_view_unref(v);
    json_t *all[] = {a, c, d};
    for (size_t i = 0; i < 3; i++)
        json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id_of(all[i]))));
    json_decref(b);
}

static void test_target_live_and_sessions(void **state)
{
    uint64_t gen = iscsi_runtime_generation();
    json_int_t t = target_new("live-1");
    assert_true(iscsi_runtime_generation() > gen);
    struct iscsi_target_view *v = view("live-1");
    assert_non_null(v);
    assert_string_equal(v->iqn, "iqn.2026-11.org.blockd:live-1");
    /* case-insensitive lookup */
    struct iscsi_target_view *v2 = iscsi_runtime_find_target("IQN.2026-11.ORG.BLOCKD:LIVE-1");
    assert_ptr_equal(v, v2);
    iscsi_target_view_unref(v2);
    struct iscsi_target_view **list;
    int n = iscsi_runtime_list_targets(&list);
    assert_true(n >= 1);
    bool found = false;
    for (int i = 0; i < n; i++) {
        if (list[i] == v)
            found = true;
        iscsi_target_view_unref(list[i]);
    }
    free(list);
    assert_true(found);

    /* an unrelated change leaves this view untouched (shared, O(changes)) */
    json_int_t other = target_new("live-2");
    struct iscsi_target_view *again = view("live-1");
    assert_ptr_equal(again, v);
    iscsi_target_view_unref(again);

    /* in use: refused with EBUSY "Target <name> is in use", then forced */
    snprintf(stub.sessions[0], sizeof(stub.sessions[0]), "iqn.2026-11.org.blockd:live-1");
    stub.n_sessions = 1;
    json_t *s = ok(rpc("iscsi.global.sessions", "[]"));
    assert_int_equal(json_array_size(s), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(s, 0), "target")),
                        "iqn.2026-11.org.blockd:live-1");
    assert_string_equal(json_string_value(json_object_get(json_array_get(s, 0), "header_digest")),
                        "CRC32C");
    json_decref(s);
    s = ok(rpc("iscsi.global.sessions", "[[[\"target\",\"=\",\"nope\"]]]"));
    assert_int_equal(json_array_size(s), 0);
    json_decref(s);
    callerr(rpc("iscsi.target.delete", "[%lld]", (long long)t), EBUSY, "Target live-1 is in use");
    struct iscsi_target_view *still = view("live-1");
    assert_non_null(still);
    iscsi_target_view_unref(still);
    unsigned closed = stub.closed;
    json_decref(ok(rpc("iscsi.target.delete", "[%lld, true]", (long long)t)));
    assert_int_equal(stub.closed, closed + 1);
    assert_int_equal(stub.n_sessions, 0);
    assert_null(view("live-1"));
    /* the caller's reference stays valid after withdrawal */
    assert_string_equal(v->iqn, "iqn.2026-11.org.blockd:live-1");
    iscsi_target_view_unref(v);

    /* basename change renames every IQN */
    json_decref(ok(rpc("iscsi.global.update", "[{\"basename\":\"iqn.2000-01.test\"}]")));
    assert_null(view("live-2"));
    v = iscsi_runtime_find_target("iqn.2000-01.test:live-2");
    assert_non_null(v);
    iscsi_target_view_unref(v);
    json_decref(ok(rpc("iscsi.global.update", "[{\"basename\":\"iqn.2026-11.org.blockd\"}]")));
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)other)));
}

/* ---- extents ---- */

static void test_extent(void **state)
{
    char adir[500];
    snprintf(adir, sizeof(adir), "%s/adir", pooldir);
    assert_int_equal(mkdir(adir, 0755), 0);
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\"}]"), "iscsi.extent.create.disk",
         "required for DISK");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"tank/v1\"}]"),
         "iscsi.extent.create.disk", "zvol/");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/nope\"}]"),
         "iscsi.extent.create.disk", "does not exist");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/v1@s1\"}]"),
         "iscsi.extent.create.ro", "Snapshot");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/v1\","
                                    "\"blocksize\":600}]"),
         "iscsi.extent.create.blocksize", "Input should be");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/v1\","
                                    "\"rpm\":\"3000\"}]"),
         "iscsi.extent.create.rpm", "Input should be");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/v1\","
                                    "\"naa\":\"0x1\"}]"),
         "iscsi.extent.create.naa", "Extra inputs");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/v1\","
                                    "\"vendor\":\"X\"}]"),
         "iscsi.extent.create.vendor", "Extra inputs");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"e\",\"disk\":\"zvol/tank/v1\","
                                    "\"ro\":\"yes\"}]"),
         "iscsi.extent.create.ro", "valid boolean");
    char longname[80];
    memset(longname, 'e', 65);
    longname[65] = '\0';
    verr(rpc("iscsi.extent.create", "[{\"name\":\"%s\",\"disk\":\"zvol/tank/v1\"}]", longname),
         "iscsi.extent.create.name", "at most 64");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"f\",\"type\":\"FILE\"}]"),
         "iscsi.extent.create.path", "required for FILE");
    verr(rpc("iscsi.extent.create",
             "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"%s/x.img\",\"filesize\":4096}]",
             tdb.dir),
         "iscsi.extent.create.path", "within a pool");
    verr(
        rpc("iscsi.extent.create", "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"/etc/passwd\"}]"),
        "iscsi.extent.create.path", "within a pool");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"%s/v1\"}]",
             pooldir),
         "iscsi.extent.create.path", "use a DISK extent");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"%s/v1@s\"}]",
             pooldir),
         "iscsi.extent.create.path", "use a DISK extent");
    verr(rpc("iscsi.extent.create", "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"%s/new.img\"}]",
             pooldir),
         "iscsi.extent.create.filesize", "does not exist");
    verr(rpc("iscsi.extent.create",
             "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"%s/adir\","
             "\"filesize\":1048576}]",
             pooldir),
         "iscsi.extent.create.path", "not a directory");
    verr(rpc("iscsi.extent.create",
             "[{\"name\":\"f\",\"type\":\"FILE\",\"path\":\"%s/x.img\","
             "\"filesize\":1000}]",
             pooldir),
         "iscsi.extent.create.filesize", "multiple of block size");

    json_t *e = ok(rpc("iscsi.extent.create", "[{\"name\":\"disk1\",\"disk\":\"zvol/tank/v1\"}]"));
    const char *serial = json_string_value(json_object_get(e, "serial"));
    const char *naa = json_string_value(json_object_get(e, "naa"));
    assert_int_equal(strlen(serial), 15);
    assert_int_equal(strspn(serial, "0123456789abcdef"), 15);
    assert_int_equal(strlen(naa), 34);
    assert_memory_equal(naa, "0x6589cfc000000", 15);
    assert_int_equal(strspn(naa + 2, "0123456789abcdef"), 32);
    assert_int_equal(json_integer_value(json_object_get(e, "blocksize")), 512);
    assert_string_equal(json_string_value(json_object_get(e, "rpm")), "SSD");
    assert_true(json_is_true(json_object_get(e, "enabled")));
    assert_true(json_is_true(json_object_get(e, "insecure_tpc")));
    assert_true(json_is_false(json_object_get(e, "ro")));
    assert_null(json_object_get(e, "gen"));
    char naa1[40];
    snprintf(naa1, sizeof(naa1), "%s", naa);
    json_int_t e1 = id_of(e);
    json_t *choices = ok(rpc("iscsi.extent.disk_choices", "[]"));
    assert_null(json_object_get(choices, "zvol/tank/v1")); /* used by disk1 now */
    assert_non_null(json_object_get(choices, "zvol/tank/v2"));
    json_decref(choices);
    verr(rpc("iscsi.extent.create", "[{\"name\":\"disk1\",\"disk\":\"zvol/tank/v2\"}]"),
         "iscsi.extent.create.name", "unique");

    /* FILE: created sparse when missing */
    char path[600];
    snprintf(path, sizeof(path), "%s/file1.img", pooldir);
    e = ok(rpc("iscsi.extent.create",
               "[{\"name\":\"file1\",\"type\":\"FILE\",\"path\":\"%s\","
               "\"filesize\":\"2097152\",\"blocksize\":4096,"
               "\"serial\":\"MYSERIAL1\"}]",
               path));
    assert_int_equal(json_integer_value(json_object_get(e, "filesize")), 2097152);
    assert_string_equal(json_string_value(json_object_get(e, "serial")), "MYSERIAL1");
    assert_string_not_equal(json_string_value(json_object_get(e, "naa")), naa1);
    json_int_t f1 = id_of(e);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 2097152);
    verr(rpc("iscsi.extent.create", "[{\"name\":\"x2\",\"disk\":\"zvol/tank/v2\","
                                    "\"serial\":\"MYSERIAL1\"}]"),
         "iscsi.extent.create.serial", "unique");
    verr(rpc("iscsi.extent.update", "[%lld, {\"filesize\":1048576}]", (long long)f1),
         "iscsi.extent.update.filesize", "increased");

    /* the dataset is now in use */
    char why[256];
    assert_true(iscsi_config_dataset_in_use("tank/v1", why, sizeof(why)));
    assert_non_null(strstr(why, "disk1"));
    assert_false(iscsi_config_dataset_in_use("tank/v2", why, sizeof(why)));
    callerr(rpc("pool.dataset.delete", "[\"tank/v1\"]"), EBUSY, "disk1");

    /* a filesystem holding a FILE extent's file is in use too */
    json_decref(ok(rpc("pool.dataset.create", "[{\"name\":\"tank/fs\",\"type\":\"FILESYSTEM\"}]")));
    json_int_t fsx = id_of(ok(rpc("iscsi.extent.create",
                                  "[{\"name\":\"fsfile\",\"type\":\"FILE\",\"path\":\"%s/fs/"
                                  "f.img\",\"filesize\":1048576}]",
                                  pooldir)));
    assert_true(iscsi_config_dataset_in_use("tank/fs", why, sizeof(why)));
    assert_non_null(strstr(why, "fsfile"));
    json_decref(ok(rpc("iscsi.extent.delete", "[%lld, true]", (long long)fsx)));
    assert_false(iscsi_config_dataset_in_use("tank/fs", why, sizeof(why)));
    json_decref(ok(rpc("pool.dataset.delete", "[\"tank/fs\"]")));

    /* delete with remove unlinks the file */
    json_decref(ok(rpc("iscsi.extent.delete", "[%lld, true]", (long long)f1)));
    assert_int_equal(stat(path, &sb), -1);
    json_decref(ok(rpc("iscsi.extent.delete", "[%lld]", (long long)e1)));
    assert_false(iscsi_config_dataset_in_use("tank/v1", why, sizeof(why)));
    callerr(rpc("iscsi.extent.delete", "[%lld]", (long long)e1), ENOENT, "does not exist");
}

/* ---- LUN mappings ---- */

static void test_targetextent(void **state)
{
    json_int_t t = target_new("lun-t");
    json_int_t t2 = target_new("lun-t2");
    json_int_t e0 =
        id_of(ok(rpc("iscsi.extent.create", "[{\"name\":\"lun-d\",\"disk\":\"zvol/tank/v2\"}]")));
    json_int_t e1 = file_extent_new("lun-f1");
    json_int_t e2 = file_extent_new("lun-f2");
    json_int_t e3 = file_extent_new("lun-f3");

    verr(rpc("iscsi.targetextent.create", "[{\"target\":%lld}]", (long long)t),
         "iscsi.targetextent.create.extent", "Field required");
    verr(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld,\"lunid\":16383}]",
             (long long)t, (long long)e0),
         "iscsi.targetextent.create.lunid", "less than or equal to 16382");
    verr(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld,\"lunid\":-1}]",
             (long long)t, (long long)e0),
         "iscsi.targetextent.create.lunid", "greater than or equal to 0");
    verr(rpc("iscsi.targetextent.create", "[{\"target\":999999,\"extent\":%lld}]", (long long)e0),
         "iscsi.targetextent.create.target", "does not exist");

    json_t *m0 = ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                        (long long)t, (long long)e0));
    assert_int_equal(json_integer_value(json_object_get(m0, "lunid")), 0);
    json_t *m2 =
        ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld,\"lunid\":2}]",
               (long long)t, (long long)e2));
    verr(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld,\"lunid\":2}]",
             (long long)t, (long long)e3),
         "iscsi.targetextent.create.lunid", "LUN ID is already being used for this target.");
    verr(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]", (long long)t2,
             (long long)e0),
         "iscsi.targetextent.create.extent", "Extent is already in use.");
    /* lowest free: 1 */
    json_t *m1 =
        ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld,\"lunid\":null}]",
               (long long)t, (long long)e1));
    assert_int_equal(json_integer_value(json_object_get(m1, "lunid")), 1);
    /* next free after 0,1,2: 3 */
    json_t *m3 = ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                        (long long)t, (long long)e3));
    assert_int_equal(json_integer_value(json_object_get(m3, "lunid")), 3);
    /* the same LUN id on another target is fine */
    json_int_t e4 = file_extent_new("lun-f4");
    json_t *m4 =
        ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld,\"lunid\":0}]",
               (long long)t2, (long long)e4));

    struct iscsi_target_view *v = view("lun-t");
    assert_non_null(v);
    assert_int_equal(v->n_luns, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(v->luns[i].lun, i);
        assert_non_null(v->luns[i].lu);
    }
    struct scsi_lu *lu0 = v->luns[0].lu;
    /* a mapping change rebuilds the view but keeps the unchanged LUs */
    json_decref(ok(rpc("iscsi.targetextent.delete", "[%lld]",
                       (long long)json_integer_value(json_object_get(m1, "id")))));
    struct iscsi_target_view *w = view("lun-t");
    assert_ptr_not_equal(w, v);
    assert_int_equal(w->n_luns, 3);
    assert_ptr_equal(w->luns[0].lu, lu0);
    assert_int_equal(w->luns[1].lun, 2);
    iscsi_target_view_unref(w);
    iscsi_target_view_unref(v);
    /* a disabled extent's LUN disappears */
    json_decref(ok(rpc("iscsi.extent.update", "[%lld, {\"enabled\":false}]", (long long)e2)));
    w = view("lun-t");
    assert_int_equal(w->n_luns, 2);
    iscsi_target_view_unref(w);

    /* update the mapping's LUN */
    json_t *u = ok(rpc("iscsi.targetextent.update", "[%lld, {\"lunid\":7}]",
                       (long long)json_integer_value(json_object_get(m3, "id"))));
    assert_int_equal(json_integer_value(json_object_get(u, "lunid")), 7);
    json_decref(u);

    /* mapping delete with sessions: EBUSY unless forced */
    snprintf(stub.sessions[0], sizeof(stub.sessions[0]), "iqn.2026-11.org.blockd:lun-t2");
    stub.n_sessions = 1;
    callerr(rpc("iscsi.targetextent.delete", "[%lld]",
                (long long)json_integer_value(json_object_get(m4, "id"))),
            EBUSY, "Target lun-t2 is in use");
    callerr(rpc("iscsi.extent.delete", "[%lld]", (long long)e4), EBUSY, "Target lun-t2 is in use");
    json_decref(ok(rpc("iscsi.targetextent.delete", "[%lld, true]",
                       (long long)json_integer_value(json_object_get(m4, "id")))));
    stub.n_sessions = 0;

    /* delete_extents removes the target's extents too */
    json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, true]", (long long)t)));
    json_t *q = ok(rpc("iscsi.extent.query", "[[[\"name\",\"^\",\"lun-\"]]]"));
    assert_int_equal(json_array_size(q), 2); /* lun-f1 (unmapped earlier) and lun-f4 */
    json_decref(q);
    q = ok(rpc("iscsi.targetextent.query", "[[[\"target\",\"=\",%lld]]]", (long long)t));
    assert_int_equal(json_array_size(q), 0);
    json_decref(q);
    json_decref(ok(rpc("iscsi.extent.delete", "[%lld, true]", (long long)e1)));
    json_decref(ok(rpc("iscsi.extent.delete", "[%lld, true]", (long long)e4)));
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)t2)));
    json_decref(m0);
    json_decref(m1);
    json_decref(m2);
    json_decref(m3);
    json_decref(m4);
}

/* ---- defer ---- */

static void test_defer(void **state)
{
    json_t *t = ok(rpc("iscsi.target.create", "[{\"name\":\"deferred\",\"defer\":true}]"));
    assert_null(json_object_get(t, "defer"));
    json_int_t id = id_of(t);
    /* committed (visible to queries) but not live */
    json_t *q = ok(rpc("iscsi.target.query", "[[[\"name\",\"=\",\"deferred\"]]]"));
    assert_int_equal(json_array_size(q), 1);
    json_decref(q);
    assert_null(view("deferred"));
    assert_int_equal(iscsi_config_pending(), 1);
    assert_int_equal(iscsi_config_reload(), 0);
    assert_int_equal(iscsi_config_pending(), 0);
    struct iscsi_target_view *v = view("deferred");
    assert_non_null(v);
    iscsi_target_view_unref(v);
    /* a deferred delete keeps serving until reload */
    json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, false, true]", (long long)id)));
    v = view("deferred");
    assert_non_null(v);
    iscsi_target_view_unref(v);
    assert_int_equal(iscsi_config_reload(), 0);
    assert_null(view("deferred"));

    /* a deferred delete, then the name reused at once: the new target wins */
    id = target_new("reused");
    v = view("reused");
    json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, false, true]", (long long)id)));
    json_int_t id2 = target_new("reused");
    struct iscsi_target_view *w = view("reused");
    assert_non_null(w);
    assert_int_equal(w->id, id2);
    iscsi_target_view_unref(w);
    assert_int_equal(iscsi_config_reload(), 0);
    w = view("reused");
    assert_non_null(w);
    assert_int_equal(w->id, id2);
    iscsi_target_view_unref(w);
    iscsi_target_view_unref(v);
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id2)));
}

/* ---- persistence ---- */

static void test_persistence(void **state)
{
    json_int_t portal = portal_new("127.0.0.4");
    json_int_t t = id_of(ok(rpc("iscsi.target.create",
                                "[{\"name\":\"persist\",\"alias\":\"p\",\"groups\":[{\"portal\":"
                                "%lld}]}]",
                                (long long)portal)));
    json_int_t e = file_extent_new("persist-f");
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)t, (long long)e)));
    json_int_t a = id_of(ok(rpc("iscsi.auth.create", "[{\"tag\":3,\"user\":\"u\","
                                                     "\"secret\":\"persistsecret\"}]")));
    json_t *before =
        ok(rpc("iscsi.extent.query", "[[[\"id\",\"=\",%lld]],{\"get\":true}]", (long long)e));

    iscsi_config_stop();
    assert_null(view("persist"));
    datasets_flush_all();
    db_close();
    assert_int_equal(db_open(tdb.path), 0);
    assert_int_equal(iscsi_config_start(NULL), 0);

    json_t *after =
        ok(rpc("iscsi.extent.query", "[[[\"id\",\"=\",%lld]],{\"get\":true}]", (long long)e));
    assert_true(json_equal(before, after));
    json_decref(before);
    json_decref(after);
    json_t *tq =
        ok(rpc("iscsi.target.query", "[[[\"id\",\"=\",%lld]],{\"get\":true}]", (long long)t));
    assert_string_equal(json_string_value(json_object_get(tq, "alias")), "p");
    assert_int_equal(json_integer_value(json_object_get(
                         json_array_get(json_object_get(tq, "groups"), 0), "portal")),
                     portal);
    json_decref(tq);
    struct iscsi_target_view *v = view("persist");
    assert_non_null(v);
    assert_int_equal(v->n_luns, 1);
    assert_int_equal(v->n_groups, 1);
    iscsi_target_view_unref(v);
    json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, true]", (long long)t)));
    json_decref(ok(rpc("iscsi.auth.delete", "[%lld]", (long long)a)));
    json_decref(ok(rpc("iscsi.portal.delete", "[%lld]", (long long)portal)));
}

/* ---- LUs: built from the extent, shared, live property changes ---- */

static void test_lu_live(void **state)
{
    json_int_t t = target_new("lu-live");
    json_int_t e = id_of(ok(rpc("iscsi.extent.create",
                                "[{\"name\":\"lu-d\",\"disk\":\"zvol/tank/v2\",\"rpm\":\"7200\","
                                "\"blocksize\":4096,\"serial\":\"LUSERIAL\"}]")));
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)t, (long long)e)));
    struct iscsi_target_view *v = view("lu-live");
    assert_int_equal(v->n_luns, 1);
    struct scsi_lu *lu = v->luns[0].lu;
    const struct scsi_lu_params *p = stub_lu_params(lu);
    assert_int_equal(p->block_size, 4096);
    assert_int_equal(p->pblock_exp, 2); /* 16K volblocksize */
    assert_int_equal(p->rotation_rate, 7200);
    assert_string_equal(p->serial, "LUSERIAL");
    assert_memory_equal(p->naa, "0x6589cfc000000", 15);
    assert_false(p->readonly);
    assert_true(p->insecure_tpc);
    assert_non_null(p->pr_store.save);
    iscsi_target_view_unref(v);

    /* ro and the comment change the running LU, not a new one */
    json_decref(
        ok(rpc("iscsi.extent.update", "[%lld, {\"ro\":true,\"comment\":\"c\"}]", (long long)e)));
    v = view("lu-live");
    assert_ptr_equal(v->luns[0].lu, lu);
    assert_true(stub_lu_params(lu)->readonly);
    iscsi_target_view_unref(v);
    /* a serial change is a new LU */
    json_decref(ok(rpc("iscsi.extent.update", "[%lld, {\"serial\":\"LUSERIAL2\"}]", (long long)e)));
    v = view("lu-live");
    assert_ptr_not_equal(v->luns[0].lu, lu);
    assert_string_equal(stub_lu_params(v->luns[0].lu)->serial, "LUSERIAL2");
    assert_true(stub_lu_params(v->luns[0].lu)->readonly);
    iscsi_target_view_unref(v);

    /* adding a LUN tells the target's existing LUs (REPORTED LUNS DATA HAS CHANGED) */
    unsigned ua = stub.luns_changed;
    json_int_t f = file_extent_new("lu-f");
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)t, (long long)f)));
    assert_true(stub.luns_changed >= ua + 1);
    /* another target's change raises nothing here */
    ua = stub.luns_changed;
    json_int_t other = target_new("lu-other");
    assert_int_equal(stub.luns_changed, ua);

    /* a FILE extent grown live */
    json_decref(ok(rpc("iscsi.extent.update", "[%lld, {\"filesize\":4194304}]", (long long)f)));
    v = view("lu-live");
    assert_int_equal(v->n_luns, 2);
    assert_int_equal(volume_size(scsi_lu_volume(v->luns[1].lu)), 4194304);
    iscsi_target_view_unref(v);

    json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, true]", (long long)t)));
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)other)));
}

/* The typed stores: what a store gives back is what the API
 * stored and answered with (the encoder's struct), a key narrows a list,
 * a new object has its create method's defaults, and string lists keep
 * their stored format. */
static void test_typed_store(void **state)
{
    json_int_t portal = portal_new("127.0.0.77");
    json_t *row = ok(rpc("iscsi.target.create",
                         "[{\"name\":\"typed-1\",\"alias\":\"typed one\",\"groups\":[{\"portal\":"
                         "%lld}],\"auth_networks\":[\"10.1.0.0/16\"]}]",
                         (long long)portal));
    json_int_t id = json_integer_value(json_object_get(row, "id"));
    json_int_t id2 = target_new("typed-2");
    struct icfg_target t;
    db_lock();
    assert_int_equal(icfg_target_get(id, &t), 0);
    assert_string_equal(t.name, "typed-1");
    assert_string_equal(t.alias, "typed one");
    assert_int_equal(t.mode, ICFG_MODE_ISCSI);
    assert_int_equal(t.n_groups, 1);
    assert_int_equal(t.groups[0].portal, portal);
    assert_false(t.groups[0].has_initiator);
    assert_false(t.groups[0].has_auth);
    assert_int_equal(t.groups[0].authmethod, ICFG_AUTH_NONE);
    assert_int_equal(t.auth_networks.n, 1);
    assert_string_equal(t.auth_networks.v[0], "10.1.0.0/16");
    assert_int_equal(t.rel_tgt_id, json_integer_value(json_object_get(row, "rel_tgt_id")));
    icfg_target_clear(&t);
    assert_int_equal(icfg_target_get(999999, &t), -ENOENT);
    const struct icfg_key_value names[] = {{.s = "typed-1"}, {.s = "typed-2"}};
    struct icfg_key key = {.column = "name", .values = names, .n = 2};
    void *list;
    size_t n;
    assert_int_equal(icfg_table_list(&icfg_target_table, &key, &list, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(((struct icfg_target *)list)[1].id, id2);
    icfg_table_free(&icfg_target_table, list, n);
    key.n = 1;
    assert_int_equal(icfg_table_list(&icfg_target_table, &key, &list, &n), 0);
    assert_int_equal(n, 1);
    icfg_table_free(&icfg_target_table, list, n);
    db_unlock();
    json_decref(row);

    /* create's defaults come from the field table */
    assert_int_equal(icfg_target_init(&t), 0);
    assert_null(t.name);
    assert_null(t.alias);
    assert_int_equal(t.n_groups, 0);
    icfg_target_clear(&t);
    struct icfg_extent e;
    assert_int_equal(icfg_extent_init(&e), 0);
    assert_int_equal(e.type, ICFG_EXTENT_DISK);
    assert_int_equal(e.blocksize, 512);
    assert_true(e.insecure_tpc && e.enabled && !e.ro);
    assert_string_equal(e.rpm, "SSD");
    icfg_extent_clear(&e);

    /* a list's text is the JSON array the tables always held */
    struct api_strv sv = {0};
    assert_int_equal(icfg_strv_from_text("[\"a\\\"b\", 5, \"c\"]", &sv), 0);
    assert_int_equal(sv.n, 2);
    char *text = icfg_strv_to_text(&sv);
    assert_string_equal(text, "[\"a\\\"b\",\"c\"]");
    free(text);
    assert_int_equal(icfg_strv_from_text("garbage", &sv), 0);
    assert_int_equal(sv.n, 0);
    api_strv_clear(&sv);
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id)));
    json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)id2)));
    json_decref(ok(rpc("iscsi.portal.delete", "[%lld]", (long long)portal)));
}

/* Every LU the configuration created is released when it stops. */
static void test_no_leaks(void **state)
{
    iscsi_config_stop();
    assert_int_equal(stub.lus_live, 0);
    assert_int_equal(iscsi_config_start(NULL), 0);
}

/* ---- concurrent writers: ids allocated inside the transaction ---- */

#define WRITERS 8
#define PER_WRITER 25

static void *writer_main(void *arg)
{
    long w = (long)arg;
    for (int i = 0; i < PER_WRITER; i++) {
        char req[256];
        snprintf(req, sizeof(req),
                 "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"iscsi.target.create\","
                 "\"params\":[{\"name\":\"conc-%ld-%d\"}]}",
                 w, i);
        char *resp = api_handle_text(req, strlen(req), "writer");
        if (!resp || strstr(resp, "\"error\"")) {
            fprintf(stderr, "writer %ld: %s\n", w, resp ? resp : "(null)");
            free(resp);
            return (void *)1;
        }
        free(resp);
    }
    return NULL;
}

static int readers_stop; /* __atomic */

/* A transport-like reader: SendTargets lists and logins while views are
 * being replaced; every reference taken is dropped. */
static void *reader_main(void *arg)
{
    unsigned long lookups = 0;
    while (!__atomic_load_n(&readers_stop, __ATOMIC_ACQUIRE)) {
        struct iscsi_target_view **list;
        int n = iscsi_runtime_list_targets(&list);
        for (int i = 0; i < n; i++) {
            struct iscsi_target_view *v = iscsi_runtime_find_target(list[i]->iqn);
            if (v) {
                lookups += v->n_luns + 1;
                iscsi_target_view_unref(v);
            }
            iscsi_target_view_unref(list[i]);
        }
        if (n >= 0)
            free(list);
    }
    return (void *)(uintptr_t)(lookups ? 0 : 0);
}

static void test_concurrent_creates(void **state)
{
    pthread_t th[WRITERS], rd[2];
    __atomic_store_n(&readers_stop, 0, __ATOMIC_RELEASE);
    for (long r = 0; r < 2; r++)
        assert_int_equal(pthread_create(&rd[r], NULL, reader_main, NULL), 0);
    for (long w = 0; w < WRITERS; w++)
        assert_int_equal(pthread_create(&th[w], NULL, writer_main, (void *)w), 0);
    for (int w = 0; w < WRITERS; w++) {
        void *ret;
        pthread_join(th[w], &ret);
        assert_null(ret);
    }
    json_t *q = ok(rpc("iscsi.target.query", "[[[\"name\",\"^\",\"conc-\"]]]"));
    assert_int_equal(json_array_size(q), WRITERS * PER_WRITER);
    /* distinct rel_tgt_ids, all published */
    char seen[ICFG_SEEN_MAX] = {0};
    size_t i;
    json_t *t;
    json_array_foreach(q, i, t)
    {
        json_int_t rel = json_integer_value(json_object_get(t, "rel_tgt_id"));
        assert_true(rel >= 1 && rel < ICFG_SEEN_MAX);
        assert_int_equal(seen[rel], 0);
        seen[rel] = 1;
        struct iscsi_target_view *v = view(json_string_value(json_object_get(t, "name")));
        assert_non_null(v);
        assert_int_equal(v->rel_tgt_id, rel);
        iscsi_target_view_unref(v);
    }
    /* deletes too run while the readers look */
    json_array_foreach(q, i, t)
    {
        json_decref(ok(rpc("iscsi.target.delete", "[%lld]",
                           (long long)json_integer_value(json_object_get(t, "id")))));
    }
    json_decref(q);
    __atomic_store_n(&readers_stop, 1, __ATOMIC_RELEASE);
    for (int r = 0; r < 2; r++)
        pthread_join(rd[r], NULL);
}

/* ---- a dataset deleted with force takes its extents along ---- */

static void test_dataset_force_delete(void **state)
{
    json_decref(ok(rpc("pool.dataset.create",
                       "[{\"name\":\"tank/gone\",\"type\":\"VOLUME\",\"volsize\":16777216}]")));
    json_int_t t = target_new("ds-gone");
    json_int_t keep = target_new("ds-keep");
    json_int_t e = id_of(
        ok(rpc("iscsi.extent.create", "[{\"name\":\"ds-gone\",\"disk\":\"zvol/tank/gone\"}]")));
    json_int_t e2 = id_of(
        ok(rpc("iscsi.extent.create", "[{\"name\":\"ds-gone2\",\"disk\":\"zvol/tank/gone\"}]")));
    json_int_t f = file_extent_new("ds-keep-f");
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)t, (long long)e)));
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)keep, (long long)e2)));
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)keep, (long long)f)));
    callerr(rpc("pool.dataset.delete", "[\"tank/gone\"]"), EBUSY, "ds-gone");
    json_decref(ok(rpc("pool.dataset.delete", "[\"tank/gone\", {\"force\":true}]")));
    /* the extents are gone, the target left empty too, the other keeps its file LUN */
    json_t *q = ok(rpc("iscsi.extent.query", "[[[\"name\",\"^\",\"ds-gone\"]]]"));
    assert_int_equal(json_array_size(q), 0);
    json_decref(q);
    assert_null(view("ds-gone"));
    q = ok(rpc("iscsi.target.query", "[[[\"id\",\"=\",%lld]]]", (long long)t));
    assert_int_equal(json_array_size(q), 0);
    json_decref(q);
    struct iscsi_target_view *v = view("ds-keep");
    assert_non_null(v);
    assert_int_equal(v->n_luns, 1);
    iscsi_target_view_unref(v);
    json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, true]", (long long)keep)));

    /* the same for a FILE extent inside a deleted filesystem */
    json_decref(
        ok(rpc("pool.dataset.create", "[{\"name\":\"tank/fs2\",\"type\":\"FILESYSTEM\"}]")));
    json_int_t ft = target_new("ds-file");
    json_int_t fe = id_of(ok(rpc("iscsi.extent.create",
                                 "[{\"name\":\"ds-file\",\"type\":\"FILE\",\"path\":\"%s/fs2/"
                                 "f.img\",\"filesize\":1048576}]",
                                 pooldir)));
    json_decref(ok(rpc("iscsi.targetextent.create", "[{\"target\":%lld,\"extent\":%lld}]",
                       (long long)ft, (long long)fe)));
    json_t *r = rpc("pool.dataset.delete", "[\"tank/fs2\", {\"force\":true, \"recursive\":true}]");
    if (!json_object_get(r, "error")) {
        assert_null(view("ds-file"));
        q = ok(rpc("iscsi.extent.query", "[[[\"id\",\"=\",%lld]]]", (long long)fe));
        assert_int_equal(json_array_size(q), 0);
        json_decref(q);
        json_decref(r);
    } else {
        /* datasets refuses to remove a directory with foreign files: fine */
        json_decref(r);
        json_decref(ok(rpc("iscsi.target.delete", "[%lld, false, true]", (long long)ft)));
    }
}

/* ---- queries narrowed in SQL still answer exactly like api_query ---- */

static void test_query_hints(void **state)
{
    json_int_t a = id_of(ok(rpc("iscsi.target.create", "[{\"name\":\"q-a\",\"alias\":\"qa\"}]")));
    json_int_t b = id_of(ok(rpc("iscsi.target.create", "[{\"name\":\"q-b\"}]")));
    json_int_t c = id_of(ok(rpc("iscsi.target.create", "[{\"name\":\"q-c\",\"alias\":\"qc\"}]")));
    struct {
        const char *params;
        size_t n;
    } cases[] = {
        {"[[[\"name\",\"=\",\"q-b\"]]]", 1},
        {"[[[\"name\",\"in\",[\"q-a\",\"q-c\",\"nope\"]]]]", 2},
        {"[[[\"alias\",\"in\",[\"qa\",\"qc\"]],[\"name\",\"=\",\"q-c\"]]]", 1},
        {"[[[\"alias\",\"=\",null],[\"name\",\"^\",\"q-\"]]]", 1},
        {"[[[\"name\",\"=\",5]]]", 0},
        {"[[[\"name\",\"=\",\"Q-B\"]]]", 0},
        {"[[[\"name\",\"C=\",\"Q-B\"]]]", 1},
        {"[[[\"OR\",[[\"name\",\"=\",\"q-a\"],[\"name\",\"=\",\"q-b\"]]]]]", 2},
    };
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        json_t *q = ok(rpc("iscsi.target.query", "%s", cases[i].params));
        size_t n = 0, k;
        json_t *row;
        json_array_foreach(q, k, row)
        {
            if (strncmp(json_string_value(json_object_get(row, "name")), "q-", 2) == 0)
                n++;
        }
        if (n != cases[i].n)
            fail_msg("%s: %zu rows, wanted %zu", cases[i].params, n, cases[i].n);
        json_decref(q);
    }
    json_t *q =
        ok(rpc("iscsi.target.query", "[[[\"id\",\"=\",%lld]],{\"get\":true}]", (long long)b));
    assert_string_equal(json_string_value(json_object_get(q, "name")), "q-b");
    json_decref(q);
    json_int_t ids[] = {a, b, c};
    for (size_t i = 0; i < 3; i++)
        json_decref(ok(rpc("iscsi.target.delete", "[%lld]", (long long)ids[i])));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_global),
        cmocka_unit_test(test_portal),
        cmocka_unit_test(test_initiator),
        cmocka_unit_test(test_auth),
        cmocka_unit_test(test_target_validation),
        cmocka_unit_test(test_target_rel_tgt_id),
        cmocka_unit_test(test_target_live_and_sessions),
        cmocka_unit_test(test_extent),
        cmocka_unit_test(test_targetextent),
        cmocka_unit_test(test_defer),
        cmocka_unit_test(test_persistence),
        cmocka_unit_test(test_lu_live),
        cmocka_unit_test(test_concurrent_creates),
        cmocka_unit_test(test_dataset_force_delete),
        cmocka_unit_test(test_query_hints),
        cmocka_unit_test(test_typed_store),
        cmocka_unit_test(test_no_leaks),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
