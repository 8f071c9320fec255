/*
 * NBD exports and global settings: the JSON-RPC methods
 * (nbd.export.create|update|delete|query, nbd.global.config|update), the
 * JSON ↔ struct nbd_export_row decoding (the rows and their SQL are
 * nbd/config/nbdstore.c's), the subscriber of facet CONF_NBD of the
 * configuration generation (control/confgen.h) that builds the immutable
 * export table the server reads, and the settings the server reads.
 *
 * Every change is applied as a difference: the new table reuses unchanged
 * export objects and already-open volumes, so publishing is cheap and
 * connections to other exports are untouched. Handlers run on API worker
 * threads; cfg_lock serializes them (and is held while their commit
 * publishes).
 */
#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api/fields.h"
#include "api/api.h"
#include "api/validate.h"
#include "control/cfgtx.h"
#include "control/confgen.h"
#include "control/datasets.h"
#include "control/db.h"
#include "control/events.h"
#include "control/holdings.h"
#include "nbd/config/nbd_write.h"
#include "nbd/config/nbdstore.h"
#include "core/allowdir.h"
#include "core/log.h"
#include "core/reactor.h"
#include "core/tls.h"
#include "core/util.h"
#include "nbd/nbd.h"
#include "nbd/nbd_conn.h"
#include "nbd/nbd_export.h"
#include "nbd/nbd_proto.h"
#include "nbd/nbd_server.h"
#include "store/bdev.h"
#include "store/names.h"

static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *listen_override;
static bool server_running;

static const char *const tls_names[] = {"off", "allow", "require", NULL};

static enum nbd_tls_mode tls_parse(const char *s)
{
    for (int i = 0; tls_names[i]; i++)
        if (s && strcmp(s, tls_names[i]) == 0)
            return (enum nbd_tls_mode)i;
    return NBD_TLS_ALLOW;
}

/* ---- rows (nbd/config/nbdstore.h) ---- */

static enum nbd_tls_mode row_tls(const struct nbd_export_row *r)
{
    return tls_parse(r->tls);
}

static bool row_readonly(const struct nbd_export_row *r)
{
    return r->readonly || (r->dataset && strchr(r->dataset, '@'));
}

static bool streq(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* ---- volumes ---- */

/* A "path" export serves the volume whose file it names (datasets.h
 * datasets_file_volume: never a file blockd did not create); checked
 * again here, so an export an older version recorded for another file is
 * not served (its open fails with the reason logged). */
static int open_source(const char *dataset, const char *path, bool readonly, struct volume **out)
{
    char name[PATH_MAX], why[PATH_MAX + 256];
    int rc;

    (void)readonly; /* the export's flag makes it read-only */
    if (dataset && *dataset)
        return datasets_volume_open(dataset, out);
    rc = datasets_file_volume(path, name, sizeof(name), why, sizeof(why));
    if (rc < 0) {
        log_error("nbd: export of %s disabled: %s", path, why);
        return rc;
    }
    return datasets_volume_open(name, out);
}

/* Does the volume have any hole? Reads only look for holes when it may. */
static bool volume_maybe_sparse(struct volume *v)
{
    if (!(volume_caps(v) & BDEV_CAN_EXTENTS) || volume_size(v) == 0)
        return false;
    struct extent ext[2];
    struct vreq r = {.op = VREQ_EXTENTS,
                     .offset = 0,
                     .length = volume_size(v),
                     .extents = ext,
                     .extents_max = 2};
    if (volume_submit_wait(v, &r) < 0)
        return true;
    return !(r.extents_count >= 1 && ext[0].type == EXTENT_DATA && ext[0].offset == 0 &&
             ext[0].length >= volume_size(v));
}

static struct nbd_export *export_find_by_name(struct nbd_export_table *t, const char *name)
{
    for (size_t i = 0; t && i < t->count; i++)
        if (strcmp(t->exports[i]->name, name) == 0)
            return t->exports[i];
    return NULL;
}

static struct nbd_export *export_from_row(const struct nbd_export_row *r, struct nbd_export *prev)
{
    struct nbd_export *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    atomic_init(&e->refs, 1);
    e->id = r->id;
    e->name = strdup(r->name ? r->name : "");
    e->description = strdup(r->description ? r->description : "");
    e->dataset = r->dataset ? strdup(r->dataset) : NULL;
    e->path = r->path ? strdup(r->path) : NULL;
    e->readonly = row_readonly(r);
    e->multi_conn = r->multi_conn;
    e->enabled = r->enabled;
    e->tls = row_tls(r);
    bool same_source = prev && prev->vol && streq(prev->dataset, r->dataset) &&
                       streq(prev->path, r->path) && (r->dataset || prev->readonly == e->readonly);
    if (same_source) {
        volume_ref(prev->vol);
        e->vol = prev->vol;
        atomic_init(&e->maybe_sparse, atomic_load(&prev->maybe_sparse));
    } else {
        int rc = open_source(r->dataset, r->path, e->readonly, &e->vol);
        if (rc == -EHOSTUNREACH && r->dataset) {
            /* An RBD pool still connecting (the reload at
             * DATASETS_POOL_ONLINE opens it): the export stays listed. */
            log_info("nbd: export '%s': the pool of %s is not reachable yet", e->name, r->dataset);
            e->vol = NULL;
            char why[512];
            snprintf(why, sizeof(why),
                     "export '%.128s' is not ready: the pool of %.256s is not reachable yet "
                     "(connecting to its Ceph cluster); retry later",
                     e->name, r->dataset);
            e->unavailable = strdup(why);
        } else if (rc < 0) {
            log_warn("nbd: export '%s': cannot open %s: %s", e->name,
                     r->dataset ? r->dataset : r->path, strerror(-rc));
            e->vol = NULL;
        } else {
            atomic_init(&e->maybe_sparse, volume_maybe_sparse(e->vol));
        }
    }
    return e;
}

static bool export_same(const struct nbd_export *e, const struct nbd_export_row *r)
{
    return e->id == r->id && streq(e->name, r->name) && streq(e->dataset, r->dataset) &&
           streq(e->path, r->path) && e->readonly == row_readonly(r) &&
           streq(e->description, r->description) && e->multi_conn == r->multi_conn &&
           e->enabled == r->enabled && e->tls == row_tls(r) && e->vol;
}

/* The table of the exports stored now, reusing old's unchanged exports
 * and open volumes: a new table in *out (DB and cfg_lock held). */
static int exports_build(struct nbd_export_table *old, struct nbd_export_table **out)
{
    struct nbd_export_row *rows;
    size_t n;
    int rc = nbd_export_rows_load(&rows, &n);
    if (rc < 0)
        return rc;
    struct nbd_export_table *t = nbd_export_table_new(n);
    if (!t) {
        nbd_export_rows_free(rows, n);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        struct nbd_export *prev = export_find_by_name(old, rows[i].name);
        struct nbd_export *e;
        if (prev && export_same(prev, &rows[i])) {
            nbd_export_ref(prev);
            e = prev;
        } else {
            e = export_from_row(&rows[i], prev);
            if (!e) {
                rc = -ENOMEM;
                break;
            }
        }
        t->exports[t->count++] = e;
    }
    nbd_export_rows_free(rows, n);
    if (rc < 0) {
        nbd_export_table_unref(t);
        return rc;
    }
    nbd_export_table_seal(t);
    *out = t;
    return 0;
}

/* Rebuild the table from the DB and publish it as a new generation
 * (cfg_lock held). */
static int exports_reload(void)
{
    return conf_republish(1u << CONF_NBD, &(struct cfg_changes){.overflow = true});
}

/* ---- nbd.export.* ---- */

#define AT(member, codec) API_AT(struct nbd_export_row, member, codec)
/* One table validates, decodes and encodes an export (api/fields.h); the
 * row shows readonly and tls as they are served (a snapshot is always
 * read-only), and what only the server knows (connections, size). */
static const struct api_field export_fields[] = {
    {.name = "name",
     .type = API_T_STRING,
     .flags = API_REQUIRED | API_RANGE,
     .min = 0,
     .max = NBD_MAX_STRING,
     AT(name, api_codec_str)},
    {.name = "dataset",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 1024,
     .def = "null",
     AT(dataset, api_codec_str_null)},
    {.name = "path",
     .type = API_T_STRING,
     .flags = API_NULLABLE | API_RANGE,
     .min = 1,
     .max = 4096,
     .def = "null",
     AT(path, api_codec_str_null)},
    {.name = "readonly", .type = API_T_BOOL, .def = "false", AT(readonly, api_codec_bool)},
    {.name = "description",
     .type = API_T_STRING,
     .flags = API_RANGE,
     .min = 0,
     .max = NBD_MAX_STRING - 8,
     .def = "\"\"",
     AT(description, api_codec_str)},
    {.name = "multi_conn", .type = API_T_BOOL, .def = "true", AT(multi_conn, api_codec_bool)},
    {.name = "tls",
     .type = API_T_ENUM,
     .choices = tls_names,
     .def = "\"allow\"",
     AT(tls, api_codec_str)},
    {.name = "enabled", .type = API_T_BOOL, .def = "true", AT(enabled, api_codec_bool)},
};
#undef AT

static json_t *export_json(const struct nbd_export_row *r)
{
    struct nbd_export_table *t = nbd_exports_current();
    struct nbd_export *e = export_find_by_name(t, r->name);
    json_t *o = api_fields_row(r->id, export_fields, ARRAY_SIZE(export_fields), r);
    if (o && (json_object_set_new(o, "readonly", json_boolean(row_readonly(r))) < 0 ||
              json_object_set_new(o, "tls", json_string(tls_names[row_tls(r)])) < 0 ||
              json_object_set_new(o, "connections",
                                  json_integer((json_int_t)nbd_export_connections(r->name))) < 0 ||
              json_object_set_new(o, "size",
                                  e && e->vol ? json_integer((json_int_t)volume_size(e->vol))
                                              : json_null()) < 0)) {
        json_decref(o);
        o = NULL;
    }
    nbd_export_table_unref(t);
    return o;
}

static const char *jstr(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(json_t *o, const char *k)
{
    return json_is_true(json_object_get(o, k));
}

/* Semantic checks shared by create and update; r is complete. */
static void export_check(struct api_call *call, const char *method, const struct nbd_export_row *r)
{
    const char *ds = r->dataset, *path = r->path;
    char field[96], why[160];
    if (!ds == !path) {
        snprintf(field, sizeof(field), "%s.dataset", method);
        api_verr(call, field, EINVAL, "exactly one of dataset and path must be given");
        return;
    }
    if (ds && name_check_dataset(ds, true, why, sizeof(why)) < 0) {
        snprintf(field, sizeof(field), "%s.dataset", method);
        api_verr(call, field, EINVAL, "%s", why);
    }
    if (path) {
        char pwhy[PATH_MAX + 256];
        snprintf(field, sizeof(field), "%s.path", method);
        char vol[PATH_MAX];
        int rc = datasets_file_volume(path, vol, sizeof(vol), pwhy, sizeof(pwhy));
        if (rc < 0) {
            api_verr(call, field, -rc, "%s", pwhy);
            log_warn("nbd: %s refused path %s (peer %s): %s", method, path, api_call_peer(call),
                     pwhy);
        }
    }
}

/* Open the source once to check it really exists (datasets and files). */
static int export_probe(struct api_call *call, const struct nbd_export_row *r)
{
    struct volume *v;
    int rc = open_source(r->dataset, r->path, r->readonly, &v);
    if (rc < 0)
        return api_error(call, -rc, "cannot open %s: %s", r->dataset ? r->dataset : r->path,
                         strerror(-rc));
    volume_unref(v);
    return 0;
}

/* The export of a checked, complete create/update body (JSON → struct);
 * clear it with nbd_export_row_clear. 0 or -ENOMEM. */
static int export_decode(json_t *data, int64_t id, struct nbd_export_row *r)
{
    memset(r, 0, sizeof(*r));
    r->id = id;
    if (api_fields_decode(export_fields, ARRAY_SIZE(export_fields), data, r) < 0)
        return -ENOMEM;
    if (!r->description)
        r->description = strdup("");
    if (!r->tls)
        r->tls = strdup("allow");
    return r->name && r->description && r->tls ? 0 : -ENOMEM;
}

static int export_result(struct api_call *call, int64_t id, json_t **result)
{
    struct nbd_export_row r;
    int rc = nbd_export_row_get(id, &r);
    if (rc < 0)
        return api_error(call, -rc, "export %" PRId64 ": %s", id, strerror(-rc));
    *result = export_json(&r);
    nbd_export_row_clear(&r);
    return 0;
}

/* Check, probe and store r (id 0: a new export, whose id is set); its
 * commit publishes the new export table (exports_next). cfg_lock held. */
static int export_save(struct api_call *call, struct nbd_export_row *r)
{
    const char *method = api_call_method(call);
    export_check(call, method, r);
    if (api_has_verrs(call))
        return api_invalid(call);
    if (!r->id) {
        /* cfg_lock serializes the creates: the count and the insert agree */
        db_lock();
        int capped = holdings_check(call, LIMIT_SHARE_OBJECTS, method,
                                    "SELECT COUNT(*) FROM nbd_export", "");
        db_unlock();
        if (capped < 0)
            return -1;
    }
    int rc = export_probe(call, r);
    if (rc < 0)
        return rc;
    int64_t id = r->id;
    int w = nbd_export_row_store(r, &id);
    if (w == -EEXIST) {
        char field[64];
        snprintf(field, sizeof(field), "%s.name", method);
        api_verr(call, field, EEXIST, "an export named '%s' exists", r->name);
        return api_invalid(call);
    }
    if (w < 0)
        return api_error(call, -w, "cannot store the export: %s", strerror(-w));
    r->id = id;
    return 0;
}

int nbd_export_decode(struct api_call *call, json_t *body, int64_t id, struct nbd_export_row *r)
{
    memset(r, 0, sizeof(*r));
    if (api_validate_object(call, api_call_method(call), body, export_fields,
                            ARRAY_SIZE(export_fields), 0) < 0)
        return api_invalid(call);
    json_t *data = json_deep_copy(body);
    int rc = data ? api_apply_defaults(data, export_fields, ARRAY_SIZE(export_fields)) : -ENOMEM;
    if (rc == 0)
        rc = export_decode(data, id, r);
    json_decref(data);
    return rc < 0 ? api_error(call, -rc, "cannot decode the export: %s", strerror(-rc)) : 0;
}

int nbd_export_save(struct api_call *call, struct nbd_export_row *r)
{
    pthread_mutex_lock(&cfg_lock);
    int rc = export_save(call, r);
    pthread_mutex_unlock(&cfg_lock);
    return rc;
}

static int m_export_create(struct api_call *call, json_t *params, json_t **result)
{
    json_t *in = api_param(params, 0); /* checked against export_fields by the dispatcher */
    json_t *data = json_deep_copy(in);
    struct nbd_export_row r = {0};
    int rc = data ? api_apply_defaults(data, export_fields, ARRAY_SIZE(export_fields)) : -ENOMEM;
    if (rc == 0)
        rc = export_decode(data, 0, &r);
    json_decref(data);
    if (rc < 0) {
        nbd_export_row_clear(&r);
        return api_error(call, ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&cfg_lock);
    rc = export_save(call, &r);
    if (rc == 0)
        rc = export_result(call, r.id, result);
    pthread_mutex_unlock(&cfg_lock);
    nbd_export_row_clear(&r);
    return rc;
}

/* The id argument (api_arg check): its error names the method, as before. */
static int export_id_check(struct api_call *call, json_t *v)
{
    if (!json_is_integer(v)) {
        api_verr(call, api_call_method(call), EINVAL, "the first parameter must be an export id");
        return -1;
    }
    return 0;
}

/* Take cfg_lock and read export id into r (row_clear it): 0 with the lock
 * held, or the ENOENT error with it released. */
static int export_lock_row(struct api_call *call, int64_t id, struct nbd_export_row *r)
{
    pthread_mutex_lock(&cfg_lock);
    if (nbd_export_row_get(id, r) < 0) {
        pthread_mutex_unlock(&cfg_lock);
        return api_error(call, ENOENT, "export %" PRId64 " does not exist", id);
    }
    return 0;
}

/* Replace *dst with a copy of the string value of key in (when given:
 * null clears it). 0 or -ENOMEM. */
static int update_str(json_t *in, const char *key, char **dst)
{
    json_t *v = json_object_get(in, key);
    if (!v)
        return 0;
    char *c = json_is_string(v) ? strdup(json_string_value(v)) : NULL;
    if (json_is_string(v) && !c)
        return -ENOMEM;
    free(*dst);
    *dst = c;
    return 0;
}

/* The keys of a partial update body (checked by the dispatcher) over r. */
static int export_decode_update(json_t *in, struct nbd_export_row *r)
{
    int rc = update_str(in, "name", &r->name);
    if (rc == 0)
        rc = update_str(in, "dataset", &r->dataset);
    if (rc == 0)
        rc = update_str(in, "path", &r->path);
    if (rc == 0)
        rc = update_str(in, "description", &r->description);
    if (rc == 0)
        rc = update_str(in, "tls", &r->tls);
    /* Switching between dataset and path: the one given replaces the other. */
    if (json_is_string(json_object_get(in, "dataset"))) {
        free(r->path);
        r->path = NULL;
    }
    if (json_is_string(json_object_get(in, "path"))) {
        free(r->dataset);
        r->dataset = NULL;
    }
    if (json_object_get(in, "readonly"))
        r->readonly = jbool(in, "readonly");
    if (json_object_get(in, "multi_conn"))
        r->multi_conn = jbool(in, "multi_conn");
    if (json_object_get(in, "enabled"))
        r->enabled = jbool(in, "enabled");
    return rc;
}

static int m_export_update(struct api_call *call, json_t *params, json_t **result)
{
    int64_t id = json_integer_value(api_param(params, 0));
    struct nbd_export_row r;
    if (export_lock_row(call, id, &r) < 0)
        return -1;
    int rc = export_decode_update(api_param(params, 1), &r) < 0
                 ? api_error(call, ENOMEM, "out of memory")
                 : export_save(call, &r);
    if (rc == 0)
        rc = export_result(call, id, result);
    pthread_mutex_unlock(&cfg_lock);
    nbd_export_row_clear(&r);
    return rc;
}

static const struct api_field del_fields[] = {
    {.name = "force", .type = API_T_BOOL, .def = "false"},
};

int nbd_export_remove(struct api_call *call, int64_t id, bool force)
{
    struct nbd_export_row r;
    if (export_lock_row(call, id, &r) < 0)
        return -1;
    int rc = 0;
    unsigned n = nbd_export_connections(r.name);
    if (n && !force) {
        rc = api_error(call, EBUSY, "export '%s' has %u open connection%s (use force)", r.name, n,
                       n == 1 ? "" : "s");
    } else if (nbd_export_row_delete(id) < 0) {
        rc = api_error(call, EIO, "cannot delete the export");
    } else {
        /* the commit published the table without it; conf_apply closed
         * its connections (export_gone) */
        log_info("nbd: export '%s' deleted%s", r.name, n ? " (connections closed)" : "");
    }
    nbd_export_row_clear(&r);
    pthread_mutex_unlock(&cfg_lock);
    return rc;
}

static int m_export_delete(struct api_call *call, json_t *params, json_t **result)
{
    json_t *opts = api_param(params, 1);
    int rc = nbd_export_remove(call, json_integer_value(api_param(params, 0)),
                               opts && jbool(opts, "force"));
    if (rc == 0)
        *result = json_true();
    return rc;
}

static int m_export_query(struct api_call *call, json_t *params, json_t **result)
{
    struct nbd_export_row *rows;
    size_t n;
    int rc = nbd_export_rows_load(&rows, &n);
    if (rc < 0)
        return api_error(call, EIO, "cannot read exports");
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, export_json(&rows[i]));
    nbd_export_rows_free(rows, n);
    rc = api_query(call, arr, params, result);
    json_decref(arr);
    return rc;
}

/* ---- nbd.global.sessions ---- */

static json_t *session_json(const struct nbd_session_info *s)
{
    return json_pack(
        "{s:s, s:s, s:s, s:b, s:b, s:b, s:b, s:b, s:I, s:I, s:I, s:I, s:I}", "peer", s->peer,
        "export", s->export, "state", s->transmission ? "transmission" : "handshake", "tls", s->tls,
        "structured_replies", s->structured, "base_allocation", s->base_allocation, "readonly",
        s->readonly, "multi_conn", s->multi_conn, "size", (json_int_t)s->size, "connected_at",
        (json_int_t)s->connected_at, "requests", (json_int_t)s->requests, "bytes_read",
        (json_int_t)s->bytes_read, "bytes_written", (json_int_t)s->bytes_written);
}

static int m_global_sessions(struct api_call *call, json_t *params, json_t **result)
{
    struct nbd_session_info *list = NULL;
    int n = nbd_sessions_list(&list);
    if (n < 0)
        return api_error(call, -n, "cannot list NBD connections");
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, session_json(&list[i]));
    free(list);
    int rc = api_query(call, arr, params, result);
    json_decref(arr);
    return rc;
}

/* ---- nbd.global.* ---- */

static const struct api_field global_fields[] = {
    {.name = "listen", .type = API_T_STRING, .flags = API_RANGE, .min = 0, .max = 256},
    {.name = "unix_socket", .type = API_T_STRING, .flags = API_RANGE, .min = 0, .max = 107},
    {.name = "tls_cert", .type = API_T_STRING, .flags = API_RANGE, .min = 0, .max = 4096},
    {.name = "tls_key", .type = API_T_STRING, .flags = API_RANGE, .min = 0, .max = 4096},
    {.name = "tls_ca", .type = API_T_STRING, .flags = API_RANGE, .min = 0, .max = 4096},
    {.name = "tls_verify_peer", .type = API_T_BOOL},
    {.name = "tls_psk_file", .type = API_T_STRING, .flags = API_RANGE, .min = 0, .max = 4096},
    {.name = "max_connections", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = 65536},
    {.name = "max_request_size",
     .type = API_T_INT,
     .flags = API_RANGE,
     .min = 4096,
     .max = 128 << 20},
    {.name = "max_inflight", .type = API_T_INT, .flags = API_RANGE, .min = 1, .max = 4096},
};

static void global_defaults(struct nbd_global *g)
{
    memset(g, 0, sizeof(*g));
    snprintf(g->listen, sizeof(g->listen), "%s", NBD_DEFAULT_LISTEN);
    g->tls_verify_peer = true;
    g->max_connections = NBD_DEFAULT_MAX_CONNECTIONS;
    g->max_request_size = NBD_DEFAULT_MAX_REQUEST;
    g->max_inflight = NBD_DEFAULT_MAX_INFLIGHT;
}

/* The stored settings over the defaults. 0 or -errno. */
static int global_load(struct nbd_global *g)
{
    global_defaults(g);
    return nbd_global_load(g);
}

/* The TrueNAS-shaped row of g (id 1: a singleton). */
static json_t *global_encode(const struct nbd_global *g)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < nbd_global_nfields; i++) {
        const struct nbd_global_field *f = &nbd_global_fields[i];
        const char *at = (const char *)g + f->off;
        json_t *v = f->type == NBD_GLOBAL_STR ? json_string(at)
                    : f->type == NBD_GLOBAL_BOOL
                        ? json_boolean(*(const bool *)(const void *)at)
                        : json_integer(*(const uint32_t *)(const void *)at);
        json_object_set_new(o, f->name, v);
    }
    if (o)
        json_object_set_new(o, "id", json_integer(1));
    return o;
}

/* The fields of in (checked by global_fields) over g. */
static void global_decode(json_t *in, struct nbd_global *g)
{
    for (size_t i = 0; i < nbd_global_nfields; i++) {
        const struct nbd_global_field *f = &nbd_global_fields[i];
        json_t *v = json_object_get(in, f->name);
        char *at = (char *)g + f->off;
        if (!v)
            continue;
        if (f->type == NBD_GLOBAL_STR && json_is_string(v) && json_string_length(v) < f->size)
            memcpy(at, json_string_value(v), json_string_length(v) + 1);
        else if (f->type == NBD_GLOBAL_BOOL && json_is_boolean(v))
            *(bool *)(void *)at = json_is_true(v);
        else if (f->type == NBD_GLOBAL_U32 && json_is_integer(v))
            *(uint32_t *)(void *)at = (uint32_t)json_integer_value(v);
    }
}

/* Build and publish settings from g. Loads TLS credentials (logged). */
static int settings_apply(const struct nbd_global *g, char *err, size_t errlen)
{
    struct nbd_settings *s = calloc(1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    atomic_init(&s->refs, 1);
    s->max_request = g->max_request_size;
    s->max_inflight = g->max_inflight;
    s->max_connections = g->max_connections;
    struct tls_config tc = {
        .cert_file = g->tls_cert,
        .key_file = g->tls_key,
        .ca_file = g->tls_ca,
        .verify_peer = g->tls_verify_peer,
        .psk_file = g->tls_psk_file,
    };
    int rc = tls_creds_new(&tc, &s->tls);
    if (rc == -ENOENT) {
        s->tls = NULL;
    } else if (rc < 0) {
        snprintf(err, errlen, "TLS credentials could not be loaded (see the log)");
        free(s);
        return rc;
    }
    nbd_settings_publish(s);
    return 0;
}

static int listen_apply(const struct nbd_global *g)
{
    const char *tcp = listen_override ? listen_override : g->listen;
    const char *unix_sock = g->unix_socket;
    char why[PATH_MAX + 256];
    /* A path stored by an older version is checked again at start-up. */
    if (*unix_sock && allowdir_check(unix_sock, why, sizeof(why)) < 0) {
        log_error("nbd: not listening on unix socket %s: %s", unix_sock, why);
        unix_sock = NULL;
    }
    return nbd_listen_apply(tcp, unix_sock);
}

/*
 * Host paths in nbd.global.update: the Unix socket's directory and the TLS
 * files must be in an allowed directory (core/allowdir.h: the state
 * directory or a --allow-dir); a TLS file must be a regular file, not a
 * symlink; the socket path must be free or hold a socket (a stale one is
 * replaced when the listener opens, a live one or anything else is
 * refused there).
 */
static void global_paths_check(struct api_call *call, json_t *in)
{
    static const char *const files[] = {"unix_socket", "tls_cert", "tls_key", "tls_ca",
                                        "tls_psk_file"};
    char field[64], why[PATH_MAX + 256];
    for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
        const char *p = jstr(in, files[i]);
        if (!p || !*p)
            continue;
        snprintf(field, sizeof(field), "nbd.global.update.%s", files[i]);
        int rc = allowdir_check(p, why, sizeof(why));
        struct stat st;
        if (rc == 0 && lstat(p, &st) == 0) {
            if (i == 0 && !S_ISSOCK(st.st_mode)) {
                snprintf(why, sizeof(why), "%s exists and is not a socket: not replacing it", p);
                rc = -EEXIST;
            } else if (i > 0 && !S_ISREG(st.st_mode)) {
                snprintf(why, sizeof(why), "%s is not a regular file (symlinks are not followed)",
                         p);
                rc = -EINVAL;
            }
        } else if (rc == 0 && i > 0) {
            snprintf(why, sizeof(why), "%s: %s", p, strerror(errno));
            rc = -errno;
        }
        if (rc < 0) {
            api_verr(call, field, -rc, "%s", why);
            log_warn("nbd: nbd.global.update refused %s %s (peer %s): %s", files[i], p,
                     api_call_peer(call), why);
        }
    }
}

static int m_global_config(struct api_call *call, json_t *params, json_t **result)
{
    (void)params;
    struct nbd_global g;
    int rc = global_load(&g);
    if (rc < 0)
        return api_error(call, -rc, "cannot read the NBD settings");
    *result = global_encode(&g);
    /* What is in force now (--nbd-listen overrides the stored address). */
    json_object_set_new(*result, "listen_active",
                        json_string(listen_override ? listen_override : g.listen));
    json_object_set_new(*result, "port_active", json_integer(nbd_listen_port()));
    return 0;
}

/* Apply g live (settings, then listeners; old back when listening fails).
 * 0 or the call's error. */
static int global_apply(struct api_call *call, const struct nbd_global *old,
                        const struct nbd_global *g)
{
    char err[160] = "";
    int rc = settings_apply(g, err, sizeof(err));
    if (rc < 0)
        return api_error(call, -rc, "%s", err);
    rc = listen_apply(g);
    if (rc < 0) {
        settings_apply(old, err, sizeof(err));
        listen_apply(old);
        return api_error(call, -rc, "cannot listen: %s", strerror(-rc));
    }
    return 0;
}

/* nbd.global.update: decode over the stored settings -> apply live ->
 * store (one transaction). */
static int m_global_update(struct api_call *call, json_t *params, json_t **result)
{
    json_t *in = api_param(params, 0);
    const char *l = jstr(in, "listen");
    if (l && *l) {
        struct sockaddr_storage ss;
        socklen_t sl;
        if (parse_host_port(l, &ss, &sl) < 0)
            api_verr(call, "nbd.global.update.listen", EINVAL, "expected ADDR:PORT");
    }
    global_paths_check(call, in);
    if (api_has_verrs(call))
        return api_invalid(call);
    CLEANUP_FREE struct nbd_global *old = malloc(sizeof(*old));
    CLEANUP_FREE struct nbd_global *g = malloc(sizeof(*g));
    if (!old || !g)
        return api_error(call, ENOMEM, "out of memory");
    pthread_mutex_lock(&cfg_lock);
    int rc = global_load(old);
    if (rc < 0)
        rc = api_error(call, -rc, "cannot read the NBD settings");
    *g = *old;
    global_decode(in, g);
    if (rc == 0 && server_running)
        rc = global_apply(call, old, g);
    if (rc == 0 && (rc = nbd_global_store(g)) < 0)
        rc = api_error(call, -rc, "cannot store the settings");
    pthread_mutex_unlock(&cfg_lock);
    if (rc == 0)
        *result = global_encode(g);
    return rc;
}

static const struct api_arg create_args[] = {API_ARG_OBJECT("data", export_fields, 0)};
static const struct api_arg update_args[] = {
    {.name = "id", .type = API_T_INT, .check = export_id_check},
    API_ARG_OBJECT("data", export_fields, API_PARTIAL)};
static const struct api_arg delete_args[] = {
    {.name = "id", .type = API_T_INT, .check = export_id_check},
    API_ARG_OBJECT("options", del_fields, API_ARG_OPTIONAL)};
static const struct api_arg query_args[] = {API_ARG_QUERY};
static const struct api_arg global_update_args[] = {
    API_ARG_OBJECT("data", global_fields, API_PARTIAL)};

static const struct api_method nbd_methods[] = {
    {"nbd.export.create", NULL, "Create an NBD export of a volume, snapshot or raw file",
     m_export_create, API_SHARE, API_ARGS(create_args)},
    {"nbd.export.update", NULL, "Change an NBD export (live)", m_export_update, API_SHARE,
     API_ARGS(update_args)},
    {"nbd.export.delete", NULL, "Delete an NBD export (EBUSY with open connections unless force)",
     m_export_delete, API_SHARE, API_ARGS(delete_args)},
    {"nbd.export.query", NULL, "List NBD exports", m_export_query, API_READ, API_ARGS(query_args)},
    {"nbd.global.sessions", NULL,
     "Open NBD connections: peer, export, negotiated options, bytes moved", m_global_sessions,
     API_READ, API_ARGS(query_args)},
    {"nbd.global.config", NULL, "NBD server settings", m_global_config, API_READ},
    {"nbd.global.update", NULL, "Change NBD server settings (live)", m_global_update, API_ADMIN,
     API_ARGS(global_update_args)},
};

/* datasets: refuse deleting a dataset (or a parent) that an export uses. */
static bool dataset_in_use(const char *name, char *why, size_t len)
{
    struct nbd_export_table *t = nbd_exports_current();
    size_t nl = strlen(name);
    bool used = false;
    for (size_t i = 0; i < t->count && !used; i++) {
        const char *ds = t->exports[i]->dataset;
        if (ds && strncmp(ds, name, nl) == 0 && (ds[nl] == 0 || ds[nl] == '/' || ds[nl] == '@')) {
            snprintf(why, len, "exported over NBD as '%s'", t->exports[i]->name);
            used = true;
        }
    }
    nbd_export_table_unref(t);
    return used;
}

/* datasets: clients connected to exports of exactly this volume (a
 * rollback needs force then). No config lock taken. */
static unsigned dataset_clients(const char *name, char *why, size_t len)
{
    struct nbd_export_table *t = nbd_exports_current();
    unsigned total = 0;
    for (size_t i = 0; i < t->count; i++) {
        const struct nbd_export *e = t->exports[i];
        if (!e->dataset || strcmp(e->dataset, name) != 0)
            continue;
        unsigned n = nbd_export_connections(e->name);
        if (n && !total)
            snprintf(why, len, "exported over NBD as '%s' with %u connected client%s", e->name, n,
                     n == 1 ? "" : "s");
        total += n;
    }
    nbd_export_table_unref(t);
    return total;
}

/*
 * datasets: a dataset or snapshot was deleted after all (pool.dataset.delete
 * with force skips the in-use check): its exports go too, as its iSCSI
 * extents do (iscsi/config_main.c), so that no export names a volume that
 * no longer exists; the commit publishes the table without them and their
 * connections are closed (export_gone).
 */
static void exports_of_deleted(const char *name)
{
    size_t n = 0;

    pthread_mutex_lock(&cfg_lock);
    int rc = nbd_export_rows_delete_dataset(name, &n);
    pthread_mutex_unlock(&cfg_lock);
    if (rc < 0)
        log_error("nbd: cannot remove the exports of deleted dataset %s: %s", name, strerror(-rc));
    else if (n)
        log_info("nbd: dataset %s deleted: removed %zu export(s) and closed their connections",
                 name, n);
}

/*
 * datasets: a rollback of name is about to replace its contents. NBD has
 * no way to tell a client that the disk changed under it, so (as when a
 * zvol is rolled back under qemu-nbd) the clients of its exports are
 * disconnected first — the rollback only gets here with none, or with
 * force — and we wait (bounded) until their connections are gone, so that
 * no write of theirs lands after the rollback. Exports of snapshots are
 * not affected. After the rollback the volume may have holes again.
 */
#define ROLLBACK_DRAIN_MS 5000

/*
 * datasets: name's volume was resized. NBD has no in-band resize notice
 * (nor does the protocol let a server change a connection's size): an open
 * connection keeps the size it negotiated, so the client's view and the
 * server's checks agree. A grown volume's new space is seen by new
 * connections; after a shrink, an old connection's requests past the new
 * end fail with EINVAL (the volume's own bounds). Logged, so that an
 * operator knows which clients must reconnect.
 */
static void exports_resized(const char *name, struct volume *v)
{
    if (!name) /* every resize names its dataset; -O3 cannot tell */
        return;
    struct nbd_export_table *t = nbd_exports_current();
    for (size_t i = 0; i < t->count; i++) {
        struct nbd_export *e = t->exports[i];
        if (!e->dataset || strcmp(e->dataset, name) != 0)
            continue;
        unsigned n = nbd_export_connections(e->name);
        if (n)
            log_info("nbd: export '%s': %s resized to %llu bytes; %u open connection(s) keep "
                     "the size they negotiated until they reconnect",
                     e->name, name, v ? (unsigned long long)volume_size(v) : 0ULL, n);
    }
    nbd_export_table_unref(t);
}

static void dataset_event(enum datasets_event ev, const char *name, struct volume *v)
{
    if (ev == DATASETS_POOL_ONLINE) {
        /* Exports whose volume did not open (e->vol NULL) are not "the
         * same" as their row: the reload opens them; the others are kept
         * with their connections. */
        pthread_mutex_lock(&cfg_lock);
        int rc = server_running ? exports_reload() : 0;
        pthread_mutex_unlock(&cfg_lock);
        if (rc < 0)
            log_error("nbd: cannot republish the exports after pool %s came online: %s", name,
                      strerror(-rc));
        return;
    }
    if (ev == DATASETS_DELETED) {
        exports_of_deleted(name);
        return;
    }
    if (ev == DATASETS_RESIZED) {
        exports_resized(name, v);
        return;
    }
    if (ev != DATASETS_ROLLING_BACK && ev != DATASETS_ROLLED_BACK)
        return;
    struct nbd_export_table *t = nbd_exports_current();
    for (size_t i = 0; i < t->count; i++) {
        struct nbd_export *e = t->exports[i];
        if (!e->dataset || strcmp(e->dataset, name) != 0)
            continue;
        if (ev == DATASETS_ROLLED_BACK) {
            atomic_store(&e->maybe_sparse, true);
            continue;
        }
        unsigned n = nbd_export_connections(e->name);
        if (!n)
            continue;
        nbd_export_close_connections(e->name);
        int waited = 0;
        while (nbd_export_connections(e->name) && waited < ROLLBACK_DRAIN_MS) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            waited++;
        }
        if (nbd_export_connections(e->name))
            log_warn("nbd: export '%s': %u connection(s) still open %d ms after the disconnect "
                     "for the rollback of %s",
                     e->name, nbd_export_connections(e->name), ROLLBACK_DRAIN_MS, name);
        log_info("nbd: export '%s': %u client(s) disconnected for the rollback of %s", e->name, n,
                 name);
    }
    nbd_export_table_unref(t);
}

/* datasets: a rename of a dataset (with its subtree) or of a snapshot
 * moves the exports along. cfg_lock is held from lock() to applied(), so
 * no nbd.export.* change runs in between; update() runs inside the
 * rename's transaction (control/cfgtx.h) and records the change, whose
 * commit publishes the new table (exports_next). */
static void rename_lock(void)
{
    pthread_mutex_lock(&cfg_lock);
}

static int rename_update(const char *old_name, const char *new_name, bool subtree)
{
    return nbd_export_rows_rename(old_name, new_name, subtree);
}

static void rename_applied(bool committed)
{
    pthread_mutex_unlock(&cfg_lock);
    /* The rename committed with the DB lock held, so its generation's
     * conf_apply waited: run it now, and let the old table (and the
     * volumes it holds) go at once, as before generations. */
    conf_apply_pending();
}

/*
 * build (control/confgen.h): a committed change of nbd_export rows becomes
 * a new export table, built from the DB reusing unchanged exports and
 * open volumes. Under the DB lock; the writer holds cfg_lock (every NBD
 * writer, the rename events, start and pool-online do), which
 * server_running needs.
 */
static int exports_next(struct conf_part *prev, const struct cfg_changes *ch,
                        struct conf_part **next)
{
    if (ch->defer)
        return 0; /* published by service.reload */
    bool rename_only = !ch->overflow;
    for (size_t i = 0; i < ch->n; i++)
        if (ch->v[i].kind == CFG_NBD_EXPORT && ch->v[i].id != CFG_ID_ALL)
            rename_only = false;
    /* A rename republishes only while serving (the new table reuses the
     * open volumes, which the cache holds under their new names). */
    if (rename_only && !server_running)
        return 0;
    struct nbd_export_table *t;
    int rc = exports_build((struct nbd_export_table *)prev, &t);
    if (rc < 0) {
        log_error("nbd: cannot republish the exports%s: %s", rename_only ? " after a rename" : "",
                  strerror(-rc));
        return rc;
    }
    *next = &t->part;
    return 0;
}

/* conf_apply: an export that left the table (deleted, or every export
 * when the server stops) loses its connections. */
static void export_gone(void *old_obj)
{
    nbd_export_close_connections(((struct nbd_export *)old_obj)->name);
}

static const struct conf_subscriber subscriber = {
    .name = "nbd",
    .kinds = CFG_KIND_BIT(CFG_NBD_EXPORT),
    .build = exports_next,
    .gone = export_gone,
};

/* The NBD configuration's one subscriber (control/events.h). */
static int on_event(const struct event *ev, void *arg)
{
    (void)arg;
    switch (ev->type) {
    case EV_DATASET:
        dataset_event(ev->dataset.what, ev->dataset.name, ev->dataset.v);
        return 0;
    case EV_RENAME_LOCK:
        rename_lock();
        return 0;
    case EV_RENAME_UPDATE:
        return rename_update(ev->rename.old_name, ev->rename.new_name, ev->rename.subtree);
    case EV_RENAME_DONE:
        rename_applied(ev->committed);
        return 0;
    default:
        return 0;
    }
}

void nbd_init(void)
{
    nbdstore_init();
    api_register(nbd_methods, ARRAY_SIZE(nbd_methods));
    datasets_register_in_use(dataset_in_use);
    datasets_register_clients(dataset_clients);
    events_subscribe(&(struct event_subscriber){
        .name = "nbd",
        .types = EV_BIT(EV_DATASET) | EV_BIT(EV_RENAME_LOCK) | EV_BIT(EV_RENAME_UPDATE) |
                 EV_BIT(EV_RENAME_DONE),
        .fn = on_event,
    });
    conf_subscribe(CONF_NBD, &subscriber);
}

int nbd_server_start(const char *listen_arg)
{
    pthread_mutex_lock(&cfg_lock);
    free(listen_override);
    listen_override = listen_arg ? strdup(listen_arg) : NULL;
    CLEANUP_FREE struct nbd_global *g = malloc(sizeof(*g));
    int rc = g ? global_load(g) : -ENOMEM;
    if (rc < 0) {
        pthread_mutex_unlock(&cfg_lock);
        log_error("nbd: cannot read the NBD settings: %s", strerror(-rc));
        return rc;
    }
    char err[160];
    rc = settings_apply(g, err, sizeof(err));
    if (rc < 0) {
        /* Serve without TLS rather than not at all; STARTTLS gets ERR_UNSUP. */
        log_error("nbd: %s; TLS disabled", err);
        g->tls_cert[0] = g->tls_key[0] = g->tls_psk_file[0] = '\0';
        settings_apply(g, err, sizeof(err));
    }
    rc = exports_reload();
    if (rc == 0)
        rc = listen_apply(g);
    if (rc == 0)
        server_running = true;
    pthread_mutex_unlock(&cfg_lock);
    return rc;
}

unsigned nbd_server_drain(unsigned timeout_ms)
{
    pthread_mutex_lock(&cfg_lock);
    server_running = false; /* nbd.global.update must not reopen them */
    nbd_listen_close();
    pthread_mutex_unlock(&cfg_lock);
    nbd_conn_drain_all();
    uint64_t end = time_now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (nbd_conn_live() > 0 && time_now_ns() < end)
        usleep(5000);
    unsigned left = nbd_conn_live();
    if (left) {
        log_warn("nbd: %u connections still busy after %u ms of shutdown, closing them", left,
                 timeout_ms);
        nbd_conn_close_all();
    }
    return left;
}

void nbd_server_stop(void)
{
    pthread_mutex_lock(&cfg_lock);
    server_running = false;
    nbd_listen_close();
    /* conf_apply closes the connections of every export (export_gone) */
    struct nbd_export_table *t = nbd_export_table_new(0);
    if (t)
        nbd_exports_publish(t);
    pthread_mutex_unlock(&cfg_lock);
}
