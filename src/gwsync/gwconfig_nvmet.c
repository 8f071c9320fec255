/*
 * The group's nvmet.* rows (gwconfig_internal.h lists their keys and
 * values): read through the nvmet store, applied through the typed writes
 * the nvmet.* handlers run after decoding (nvme/config/nvmet_write.h).
 * Rows name each other by name (a subsystem's name, a host's NQN, a
 * port's index), never by local id. Ports themselves are each member's
 * own (an address of its host, like an iSCSI portal): a subsystem's link
 * to port index N is the group's, served by every member through its own
 * port N.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/log.h"
#include "gwsync/gwconfig_internal.h"
#include "nvme/config/nvmet_store.h"
#include "nvme/config/nvmet_write.h"

/* Every nvmet table, loaded (DB lock taken by each load). */
struct nv_all {
    struct nvmet_subsys *sub;
    size_t nsub;
    struct nvmet_namespace *ns;
    size_t nns;
    struct nvmet_host *host;
    size_t nhost;
    struct nvmet_port *port;
    size_t nport;
    struct nvmet_link *hs, *ps;
    size_t nhs, nps;
};

static void nv_free(struct nv_all *a)
{
    nvs_free_all(&nvs_subsys, a->sub, a->nsub);
    nvs_free_all(&nvs_namespace, a->ns, a->nns);
    nvs_free_all(&nvs_host, a->host, a->nhost);
    nvs_free_all(&nvs_port, a->port, a->nport);
    nvs_free_all(&nvs_host_subsys, a->hs, a->nhs);
    nvs_free_all(&nvs_port_subsys, a->ps, a->nps);
    memset(a, 0, sizeof(*a));
}

static int nv_load(struct nv_all *a)
{
    memset(a, 0, sizeof(*a));
    void *v[6] = {0};
    int rc = nvs_load(&nvs_subsys, NULL, &v[0], &a->nsub, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_namespace, NULL, &v[1], &a->nns, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_host, NULL, &v[2], &a->nhost, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_port, NULL, &v[3], &a->nport, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_host_subsys, NULL, &v[4], &a->nhs, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_port_subsys, NULL, &v[5], &a->nps, NULL);
    a->sub = v[0], a->ns = v[1], a->host = v[2], a->port = v[3], a->hs = v[4], a->ps = v[5];
    if (rc < 0)
        nv_free(a);
    return rc;
}

static const struct nvmet_subsys *sub_by_id(const struct nv_all *a, int64_t id)
{
    for (size_t i = 0; i < a->nsub; i++)
        if (a->sub[i].id == id)
            return &a->sub[i];
    return NULL;
}

static const struct nvmet_subsys *sub_by_name(const struct nv_all *a, const char *name)
{
    for (size_t i = 0; name && i < a->nsub; i++)
        if (a->sub[i].name && strcmp(a->sub[i].name, name) == 0)
            return &a->sub[i];
    return NULL;
}

static const struct nvmet_host *host_by_id(const struct nv_all *a, int64_t id)
{
    for (size_t i = 0; i < a->nhost; i++)
        if (a->host[i].id == id)
            return &a->host[i];
    return NULL;
}

static const struct nvmet_host *host_by_nqn(const struct nv_all *a, const char *nqn)
{
    for (size_t i = 0; nqn && i < a->nhost; i++)
        if (a->host[i].hostnqn && strcmp(a->host[i].hostnqn, nqn) == 0)
            return &a->host[i];
    return NULL;
}

static const struct nvmet_port *port_by(const struct nv_all *a, int64_t id, int64_t index)
{
    for (size_t i = 0; i < a->nport; i++)
        if (id ? a->port[i].id == id : a->port[i].index == index)
            return &a->port[i];
    return NULL;
}

/* "zvol/POOL/VOL" → "POOL/VOL" (a ZVOL namespace's dataset), else NULL. */
static const char *ns_dataset(const struct nvmet_namespace *ns)
{
    const char *p = ns->device_path;
    if (ns->device_type != NVMET_ZVOL || !p || strncmp(p, "zvol/", 5) != 0 || !p[5])
        return NULL;
    return p + 5;
}

/* ---- the values (the group's wire format: do not change them) ---- */

static json_t *opt_int(struct nvs_opt o)
{
    return o.set ? json_integer(o.v) : json_null();
}

static json_t *opt_bool(int v)
{
    return v < 0 ? json_null() : json_boolean(v);
}

static json_t *subsys_value(const struct nvmet_subsys *s)
{
    return json_pack("{s:s, s:s?, s:s?, s:b, s:o, s:o, s:s?, s:o}", "name", s->name, "subnqn",
                     s->subnqn, "serial", s->serial, "allow_any_host", s->allow_any_host,
                     "pi_enable", opt_bool(s->pi_enable), "qid_max", opt_int(s->qid_max),
                     "ieee_oui", s->ieee_oui, "ana", opt_bool(s->ana));
}

static json_t *ns_value(const char *subsys, const struct nvmet_namespace *ns)
{
    return json_pack("{s:s, s:I, s:s, s:s, s:b, s:s?, s:s?}", "subsys", subsys, "nsid",
                     (json_int_t)ns->nsid.v, "device_type", "ZVOL", "device_path", ns->device_path,
                     "enabled", ns->enabled, "device_uuid", ns->device_uuid, "device_nguid",
                     ns->device_nguid);
}

/* nvmet/subsys/, nvmet/ns/: a subsystem is the group's when one of its
 * namespaces is on a group volume; marks them in grp[]. */
static void view_ns(const struct nv_all *a, json_t *view, bool *grp,
                    bool (*group_ds)(const void *, const char *), const void *ctx)
{
    for (size_t i = 0; i < a->nns; i++) {
        const struct nvmet_namespace *ns = &a->ns[i];
        const char *ds = ns_dataset(ns);
        const struct nvmet_subsys *s = sub_by_id(a, ns->subsys_id);
        if (!ds || !s || !s->name || !ns->nsid.set || !group_ds(ctx, ds))
            continue;
        char key[300];
        snprintf(key, sizeof(key), "nvmet/ns/%.200s/%" PRId64, s->name, ns->nsid.v);
        json_object_set_new(view, key, ns_value(s->name, ns));
        grp[s - a->sub] = true;
    }
    for (size_t i = 0; i < a->nsub; i++) {
        if (!grp[i])
            continue;
        char key[300];
        snprintf(key, sizeof(key), "nvmet/subsys/%.200s", a->sub[i].name);
        json_object_set_new(view, key, subsys_value(&a->sub[i]));
    }
}

/* nvmet/host/, nvmet/hostsubsys/, nvmet/portsubsys/ of group subsystems. */
static void view_links(const struct nv_all *a, json_t *view, const bool *grp)
{
    char key[512];
    for (size_t i = 0; i < a->nhs; i++) {
        const struct nvmet_subsys *s = sub_by_id(a, a->hs[i].subsys_id);
        const struct nvmet_host *h = host_by_id(a, a->hs[i].other_id);
        if (!s || !h || !h->hostnqn || !grp[s - a->sub])
            continue;
        snprintf(key, sizeof(key), "nvmet/host/%.230s", h->hostnqn);
        json_object_set_new(view, key, json_pack("{s:s}", "hostnqn", h->hostnqn));
        snprintf(key, sizeof(key), "nvmet/hostsubsys/%.200s/%.230s", s->name, h->hostnqn);
        json_object_set_new(view, key,
                            json_pack("{s:s, s:s}", "subsys", s->name, "host", h->hostnqn));
    }
    for (size_t i = 0; i < a->nps; i++) {
        const struct nvmet_subsys *s = sub_by_id(a, a->ps[i].subsys_id);
        const struct nvmet_port *p = port_by(a, a->ps[i].other_id, 0);
        if (!s || !p || !grp[s - a->sub])
            continue;
        snprintf(key, sizeof(key), "nvmet/portsubsys/%.200s/%" PRId64, s->name, p->index);
        json_object_set_new(
            view, key,
            json_pack("{s:s, s:I}", "subsys", s->name, "port_index", (json_int_t)p->index));
    }
}

int gwc_nvmet_view(json_t *view, bool (*group_ds)(const void *, const char *), const void *ctx)
{
    struct nv_all a;
    struct nvmet_global g;
    int rc = nvs_global_load(&g);
    if (rc < 0)
        return rc;
    json_object_set_new(view, "nvmet/global",
                        json_pack("{s:s, s:b, s:b}", "basenqn", g.basenqn, "ana", g.ana,
                                  "xport_referral", g.xport_referral));
    if ((rc = nv_load(&a)) < 0)
        return rc;
    bool *grp = calloc(a.nsub ? a.nsub : 1, sizeof(*grp));
    if (grp) {
        view_ns(&a, view, grp, group_ds, ctx);
        view_links(&a, view, grp);
    }
    free(grp);
    nv_free(&a);
    return grp ? 0 : -ENOMEM;
}

const char *gwc_nvmet_volume(const char *key, const json_t *want)
{
    if (strncmp(key, "nvmet/ns/", 9) != 0)
        return NULL;
    const char *p = json_string_value(json_object_get(want, "device_path"));
    return p && strncmp(p, "zvol/", 5) == 0 && p[5] ? p + 5 : NULL;
}

bool gwc_nvmet_uses(const char *ds)
{
    struct nvmet_namespace *ns;
    size_t n;
    if (nvs_load(&nvs_namespace, NULL, (void **)&ns, &n, NULL) < 0)
        return true; /* on a DB error: keep it */
    bool used = false;
    for (size_t i = 0; i < n && !used; i++) {
        const char *d = ns_dataset(&ns[i]);
        used = d && strcmp(d, ds) == 0;
    }
    nvs_free_all(&nvs_namespace, ns, n);
    return used;
}

int gwc_nvmet_phase(const char *key, bool deleting)
{
    bool leaf = strncmp(key, "nvmet/ns/", 9) == 0 || strncmp(key, "nvmet/hostsubsys/", 17) == 0 ||
                strncmp(key, "nvmet/portsubsys/", 17) == 0;
    if (deleting)
        return leaf ? 0 : 3;
    return leaf ? 2 : 1;
}

/* ---- applying ---- */

/* want without the server-made fields (they are not a create's input). */
static json_t *body_of(const json_t *want, const char *const *drop)
{
    json_t *b = json_deep_copy(want);
    for (size_t i = 0; b && drop[i]; i++)
        json_object_del(b, drop[i]);
    return b;
}

static int apply_global(json_t *want, json_t *have, char *why, size_t len)
{
    if (!want || (have && json_equal(have, want)))
        return 0; /* the settings are never withdrawn */
    struct api_call *c = gwc_call_new("nvmet.global.update");
    return gwc_call_done(c, c ? nvmet_global_write(c, want) : -1, why, len);
}

static int apply_subsys(const struct nv_all *a, const char *name, json_t *want, json_t *have,
                        char *why, size_t len)
{
    const struct nvmet_subsys *s = sub_by_name(a, name);
    struct api_call *c;
    if (!want) {
        if (!s)
            return 0;
        c = gwc_call_new("nvmet.subsys.delete");
        json_t *opt = json_pack("{s:b}", "force", 1);
        int rc = gwc_call_done(c, c ? nvmet_object_remove(c, NVMET_OBJ_SUBSYS, s->id, opt) : -1,
                               why, len);
        json_decref(opt);
        return rc;
    }
    if (s && have && json_equal(have, want))
        return 0;
    static const char *const drop[] = {"serial", NULL};
    json_t *body = body_of(want, drop);
    c = gwc_call_new(s ? "nvmet.subsys.update" : "nvmet.subsys.create");
    int rc = gwc_call_done(
        c, c && body ? nvmet_object_put(c, NVMET_OBJ_SUBSYS, s ? s->id : 0, body, want, NULL) : -1,
        why, len);
    json_decref(body);
    return rc;
}

/* nvmet/ns/<subsys>/<nsid> */
static int apply_ns(const struct nv_all *a, const char *key, json_t *want, json_t *have, char *why,
                    size_t len)
{
    const char *sname = key + 9, *slash = strrchr(key, '/');
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(slash - sname), sname);
    int64_t nsid = strtoll(slash + 1, NULL, 10);
    const struct nvmet_subsys *s = sub_by_name(a, name);
    const struct nvmet_namespace *ns = NULL;
    for (size_t i = 0; s && i < a->nns; i++)
        if (a->ns[i].subsys_id == s->id && a->ns[i].nsid.set && a->ns[i].nsid.v == nsid)
            ns = &a->ns[i];
    struct api_call *c;
    if (!want) {
        if (!ns)
            return 0;
        c = gwc_call_new("nvmet.namespace.delete");
        return gwc_call_done(c, c ? nvmet_object_remove(c, NVMET_OBJ_NAMESPACE, ns->id, NULL) : -1,
                             why, len);
    }
    if (!s) {
        snprintf(why, len, "subsystem %s is not here (yet)", name);
        return -ENOENT;
    }
    if (ns && have && json_equal(have, want))
        return 0;
    static const char *const drop[] = {"subsys", "device_uuid", "device_nguid", NULL};
    json_t *body = body_of(want, drop);
    if (body)
        json_object_set_new(body, "subsys_id", json_integer(s->id));
    c = gwc_call_new(ns ? "nvmet.namespace.update" : "nvmet.namespace.create");
    int rc = gwc_call_done(
        c,
        c && body ? nvmet_object_put(c, NVMET_OBJ_NAMESPACE, ns ? ns->id : 0, body, want, NULL)
                  : -1,
        why, len);
    json_decref(body);
    return rc;
}

static int apply_host(const struct nv_all *a, const char *nqn, json_t *want, char *why, size_t len)
{
    const struct nvmet_host *h = host_by_nqn(a, nqn);
    struct api_call *c;
    if (!want) {
        bool linked = false;
        for (size_t i = 0; h && i < a->nhs; i++)
            linked |= a->hs[i].other_id == h->id;
        if (!h || linked)
            return 0; /* still allowed on a subsystem of this member's: it stays */
        c = gwc_call_new("nvmet.host.delete");
        return gwc_call_done(c, c ? nvmet_object_remove(c, NVMET_OBJ_HOST, h->id, NULL) : -1, why,
                             len);
    }
    if (h)
        return 0; /* its keys are this member's own: nothing else to change */
    c = gwc_call_new("nvmet.host.create");
    return gwc_call_done(c, c ? nvmet_object_put(c, NVMET_OBJ_HOST, 0, want, NULL, NULL) : -1, why,
                         len);
}

/* nvmet/hostsubsys/<subsys>/<hostnqn>, nvmet/portsubsys/<subsys>/<index>:
 * the other side's local id, or 0 (why set). */
static int64_t link_other(const struct nv_all *a, bool port, const char *ref, char *why, size_t len)
{
    if (port) {
        const struct nvmet_port *p = port_by(a, 0, strtoll(ref, NULL, 10));
        if (!p)
            snprintf(why, len, "this member has no NVMe port with index %s", ref);
        return p ? p->id : 0;
    }
    const struct nvmet_host *h = host_by_nqn(a, ref);
    if (!h)
        snprintf(why, len, "host %s is not here (yet)", ref);
    return h ? h->id : 0;
}

static int apply_link(const struct nv_all *a, const char *key, json_t *want, char *why, size_t len)
{
    bool port = strncmp(key, "nvmet/portsubsys/", 17) == 0;
    const char *rest = key + 17, *slash = strchr(rest, '/');
    if (!slash)
        return -EINVAL;
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(slash - rest), rest);
    const struct nvmet_subsys *s = sub_by_name(a, name);
    int64_t other = link_other(a, port, slash + 1, why, len);
    const struct nvmet_link *links = port ? a->ps : a->hs, *l = NULL;
    for (size_t i = 0; s && other && i < (port ? a->nps : a->nhs); i++)
        if (links[i].subsys_id == s->id && links[i].other_id == other)
            l = &links[i];
    enum nvmet_object o = port ? NVMET_OBJ_PORT_SUBSYS : NVMET_OBJ_HOST_SUBSYS;
    struct api_call *c;
    if (!want) {
        if (!l)
            return 0;
        c = gwc_call_new(port ? "nvmet.port_subsys.delete" : "nvmet.host_subsys.delete");
        return gwc_call_done(c, c ? nvmet_object_remove(c, o, l->id, NULL) : -1, why, len);
    }
    if (l)
        return 0;
    if (!s || !other) {
        if (!s)
            snprintf(why, len, "subsystem %s is not here (yet)", name);
        return -ENOENT;
    }
    json_t *body = json_pack("{s:I, s:I}", port ? "port_id" : "host_id", (json_int_t)other,
                             "subsys_id", (json_int_t)s->id);
    c = gwc_call_new(port ? "nvmet.port_subsys.create" : "nvmet.host_subsys.create");
    int rc =
        gwc_call_done(c, c && body ? nvmet_object_put(c, o, 0, body, NULL, NULL) : -1, why, len);
    json_decref(body);
    return rc;
}

int gwc_nvmet_apply(const char *key, json_t *want, json_t *have, char *why, size_t len)
{
    if (strcmp(key, "nvmet/global") == 0)
        return apply_global(want, have, why, len);
    struct nv_all a;
    int rc = nv_load(&a);
    if (rc < 0) {
        snprintf(why, len, "cannot read the nvmet tables: %s", strerror(-rc));
        return rc;
    }
    if (strncmp(key, "nvmet/subsys/", 13) == 0)
        rc = apply_subsys(&a, key + 13, want, have, why, len);
    else if (strncmp(key, "nvmet/ns/", 9) == 0 && strrchr(key, '/') > key + 9)
        rc = apply_ns(&a, key, want, have, why, len);
    else if (strncmp(key, "nvmet/host/", 11) == 0)
        rc = apply_host(&a, key + 11, want, why, len);
    else if (strncmp(key, "nvmet/hostsubsys/", 17) == 0 ||
             strncmp(key, "nvmet/portsubsys/", 17) == 0)
        rc = apply_link(&a, key, want, why, len);
    else {
        snprintf(why, len, "unknown key (a newer blockd's?): ignored");
        rc = -ENOTSUP;
    }
    nv_free(&a);
    return rc;
}
