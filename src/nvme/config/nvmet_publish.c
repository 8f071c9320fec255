/*
 * The CONF_NVME subscriber: every committed change of the nvmet.* objects
 * (and pool-online, resize and start) builds a new struct nvme_conf from
 * the tables (nvme_view.h): the ports (enabled TCP ports, and the
 * discovery-only port at discovery_listen, id 0), and every subsystem with
 * its enabled namespaces (volumes opened), allowed hosts (keys in clear)
 * and serving ports.
 *
 * A subsystem equal to the one published before is the same object (a
 * reference, volumes included), so conf_apply reports only subsystems
 * that really changed (nvme_target_subsys_changed) or left
 * (nvme_target_subsys_gone): a change to one subsystem never disturbs the
 * controllers of another. An open volume is reused while its namespace
 * names the same device. A resized volume keeps its object but the
 * subsystems serving it are rebuilt, so that the target sees them change
 * and raises Namespace Attribute Changed.
 *
 * build runs under the DB lock, in commit order; the listeners follow the
 * part in the applied hook, without it (nvmet_listen.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/service.h"
#include "control/confgen.h"
#include "control/datasets.h"
#include "control/db.h"
#include "control/pwenc.h"
#include "core/log.h"
#include "core/util.h"
#include "nvme/config/nvme_config.h"
#include "nvme/config/nvmet_internal.h"
#include "nvme/nvme_target.h"
#include "nvme/nvme_view.h"
#include "store/bdev.h"
#include "store/volume.h"

static atomic_bool running;
/* The dataset whose volume was resized, for the next build (set and
 * read under the DB lock, which conf_republish takes). */
static char *resized;

bool nvmet_running(void)
{
    return atomic_load(&running);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* "0123abcd-..." → 16 bytes (zeros when it does not parse). */
static void uuid_bytes(const char *s, uint8_t out[16])
{
    memset(out, 0, 16);
    for (int i = 0, n = 0; s && s[i] && n < 32; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            continue;
        out[n / 2] = (uint8_t)(out[n / 2] | (n % 2 ? v : v << 4));
        n++;
    }
}

static const struct nvme_ns *prev_ns(const struct nvme_subsys *p, const char *path)
{
    for (size_t i = 0; p && i < p->nns; i++)
        if (strcmp(p->ns[i].device_path, path) == 0)
            return &p->ns[i];
    return NULL;
}

/* Open a FILE namespace's file (confined to the pools, store/poolfs.h). */
static int open_file(const char *path, bool ro, struct volume **out)
{
    struct bdev *b;
    char name[96];
    int rc = bdev_file_open_in_pool(path, ro, &b);
    if (rc < 0)
        return rc;
    snprintf(name, sizeof(name), "nvmet:%.80s", path);
    rc = volume_new(name, b, 512, VOLUME_SYNC_STANDARD, ro, out);
    if (rc < 0)
        bdev_close(b);
    return rc;
}

/* The namespace's volume: the previous one for the same device, or opened
 * now; NULL with a reason when it cannot be (logged once, here). */
static void ns_volume(struct nvme_ns *n, const struct nvme_ns *was, const char *subsys)
{
    char why[512];
    int rc;
    if (was && was->vol) {
        volume_ref(was->vol);
        n->vol = was->vol;
        n->readonly = was->readonly;
        return;
    }
    rc = n->dataset ? datasets_volume_open(n->dataset, &n->vol)
                    : open_file(n->device_path, false, &n->vol);
    if (rc == 0) {
        n->readonly = volume_readonly(n->vol) || (n->dataset && strchr(n->dataset, '@'));
        return;
    }
    n->vol = NULL;
    if (rc == -EHOSTUNREACH)
        snprintf(why, sizeof(why),
                 "namespace %u of '%.128s' is not ready: the pool of %.200s is not reachable yet "
                 "(connecting to its Ceph cluster); retry later",
                 n->nsid, subsys, n->device_path);
    else
        snprintf(why, sizeof(why), "namespace %u of '%.128s': cannot open %.200s: %s", n->nsid,
                 subsys, n->device_path, strerror(-rc));
    if (!was || !was->unavailable || strcmp(was->unavailable, why) != 0)
        log_warn("nvmet: %s", why);
    n->unavailable = strdup(why);
}

static int nsid_cmp(const void *a, const void *b)
{
    const struct nvme_ns *x = a, *y = b;
    return x->nsid < y->nsid ? -1 : x->nsid > y->nsid;
}

/* The enabled namespaces of s (rows of nvmet_namespace, all). */
static int fill_ns(struct nvme_subsys *s, json_t *nsrows, const struct nvme_subsys *prev)
{
    size_t i;
    json_t *r;
    s->ns = calloc(json_array_size(nsrows) + 1, sizeof(*s->ns));
    if (!s->ns)
        return -ENOMEM;
    json_array_foreach(nsrows, i, r)
    {
        if (nvj_int(r, "subsys_id") != s->id || !nvj_bool(r, "enabled"))
            continue;
        struct nvme_ns *n = &s->ns[s->nns++];
        n->nsid = (uint32_t)nvj_int(r, "nsid");
        n->id = nvj_int(r, "id");
        n->device_path = strdup(nvj_str(r, "device_path"));
        n->dataset = dup_or_null(nvmet_zvol_dataset(nvj_str(r, "device_path")));
        if (!n->device_path)
            return -ENOMEM;
        uuid_bytes(nvj_str(r, "device_uuid"), n->uuid);
        uuid_bytes(nvj_str(r, "device_nguid"), n->nguid);
        memcpy(n->eui64, n->nguid, sizeof(n->eui64));
        ns_volume(n, prev_ns(prev, n->device_path), s->name);
    }
    qsort(s->ns, s->nns, sizeof(*s->ns), nsid_cmp);
    return 0;
}

static int hash_code(const char *h)
{
    return !h ? 0 : strcmp(h, "SHA-512") == 0 ? 3 : strcmp(h, "SHA-384") == 0 ? 2 : 1;
}

static int dhgroup_code(const char *g)
{
    static const char *const names[] = {"2048-BIT", "3072-BIT", "4096-BIT", "6144-BIT", "8192-BIT"};
    for (int i = 0; g && i < 5; i++)
        if (strcmp(g, names[i]) == 0)
            return i + 1;
    return 0;
}

/* A sealed key in clear (a new string), NULL when unset or unreadable. */
static char *key_clear(json_t *host, const char *name)
{
    const char *s = nvj_str(host, name);
    char plain[PWENC_PLAIN_MAX];
    if (!s || pwenc_open(s, plain, sizeof(plain)) < 0)
        return NULL;
    char *v = strdup(plain);
    explicit_bzero(plain, sizeof(plain));
    return v;
}

/* The hosts allowed on s: links (host_id, subsys_id) to host rows. */
static int fill_hosts(struct nvme_subsys *s, json_t *links, json_t *hosts)
{
    size_t i, k;
    json_t *l, *h;
    s->hosts = calloc(json_array_size(links) + 1, sizeof(*s->hosts));
    if (!s->hosts)
        return -ENOMEM;
    json_array_foreach(links, i, l)
    {
        if (nvj_int(l, "subsys_id") != s->id)
            continue;
        json_array_foreach(hosts, k, h)
        {
            if (nvj_int(h, "id") != nvj_int(l, "host_id"))
                continue;
            struct nvme_host *e = &s->hosts[s->nhosts++];
            e->hostnqn = strdup(nvj_str(h, "hostnqn"));
            e->dhchap_key = key_clear(h, "dhchap_key");
            e->dhchap_ctrl_key = key_clear(h, "dhchap_ctrl_key");
            e->dhchap_hash = e->dhchap_key ? hash_code(nvj_str(h, "dhchap_hash")) : 0;
            e->dhchap_dhgroup = e->dhchap_key ? dhgroup_code(nvj_str(h, "dhchap_dhgroup")) : 0;
            if (!e->hostnqn)
                return -ENOMEM;
        }
    }
    return 0;
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The enabled ports serving s. */
static int fill_ports(struct nvme_subsys *s, json_t *links, const struct nvme_conf *c)
{
    size_t i;
    json_t *l;
    s->port_ids = calloc(json_array_size(links) + 1, sizeof(*s->port_ids));
    if (!s->port_ids)
        return -ENOMEM;
    json_array_foreach(links, i, l) if (nvj_int(l, "subsys_id") == s->id &&
                                        nvme_conf_find_port(c, nvj_int(l, "port_id")))
        s->port_ids[s->nports++] = nvj_int(l, "port_id");
    qsort(s->port_ids, s->nports, sizeof(*s->port_ids), id_cmp);
    return 0;
}

struct tables {
    json_t *subsys, *ns, *hosts, *hs, *ps, *ports;
    struct nvmet_global g;
};

static void tables_free(struct tables *t)
{
    json_decref(t->subsys);
    json_decref(t->ns);
    json_decref(t->hosts);
    json_decref(t->hs);
    json_decref(t->ps);
    json_decref(t->ports);
}

static int tables_load(struct tables *t)
{
    memset(t, 0, sizeof(*t));
    int rc = nvs_global_load(&t->g);
    if (rc == 0)
        rc = nvs_select(&nvs_subsys, NULL, &t->subsys, NULL);
    if (rc == 0)
        rc = nvs_select(&nvs_namespace, NULL, &t->ns, NULL);
    if (rc == 0)
        rc = nvs_select(&nvs_host, NULL, &t->hosts, NULL);
    if (rc == 0)
        rc = nvs_select(&nvs_host_subsys, NULL, &t->hs, NULL);
    if (rc == 0)
        rc = nvs_select(&nvs_port_subsys, NULL, &t->ps, NULL);
    if (rc == 0)
        rc = nvs_select(&nvs_port, "enabled = 1 AND addr_trtype = 'TCP'", &t->ports, NULL);
    if (rc < 0)
        tables_free(t);
    return rc;
}

static bool str_same(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool host_same(const struct nvme_host *a, const struct nvme_host *b)
{
    return str_same(a->hostnqn, b->hostnqn) && str_same(a->dhchap_key, b->dhchap_key) &&
           str_same(a->dhchap_ctrl_key, b->dhchap_ctrl_key) && a->dhchap_hash == b->dhchap_hash &&
           a->dhchap_dhgroup == b->dhchap_dhgroup;
}

static bool ns_same(const struct nvme_ns *a, const struct nvme_ns *b)
{
    return a->nsid == b->nsid && a->id == b->id && str_same(a->device_path, b->device_path) &&
           a->vol == b->vol && str_same(a->unavailable, b->unavailable) &&
           a->readonly == b->readonly && memcmp(a->uuid, b->uuid, 16) == 0 &&
           memcmp(a->nguid, b->nguid, 16) == 0;
}

/* Whether the target would see no difference between a and b. */
static bool subsys_same(const struct nvme_subsys *a, const struct nvme_subsys *b)
{
    if (!str_same(a->name, b->name) || !str_same(a->nqn, b->nqn) ||
        strcmp(a->serial, b->serial) != 0 || strcmp(a->model, b->model) != 0 ||
        a->ieee_oui != b->ieee_oui || a->qid_max != b->qid_max ||
        a->allow_any_host != b->allow_any_host || a->ana != b->ana || a->nhosts != b->nhosts ||
        a->nports != b->nports || a->nns != b->nns)
        return false;
    for (size_t i = 0; i < a->nhosts; i++)
        if (!host_same(&a->hosts[i], &b->hosts[i]))
            return false;
    for (size_t i = 0; i < a->nns; i++)
        if (!ns_same(&a->ns[i], &b->ns[i]))
            return false;
    return a->nports == 0 || memcmp(a->port_ids, b->port_ids, a->nports * sizeof(int64_t)) == 0;
}

static bool serves_dataset(const struct nvme_subsys *s, const char *ds)
{
    for (size_t i = 0; ds && i < s->nns; i++)
        if (s->ns[i].dataset && strcmp(s->ns[i].dataset, ds) == 0)
            return true;
    return false;
}

static const struct nvme_subsys *prev_subsys(const struct nvme_conf *prev, int64_t id)
{
    for (size_t i = 0; prev && i < prev->nsubsys; i++)
        if (prev->subsys[i]->id == id)
            return prev->subsys[i];
    return NULL;
}

static uint32_t oui_bits(const char *s)
{
    uint32_t v = 0;
    for (; s && *s; s++)
        if (*s != ':' && *s != '-')
            v = v << 4 | (uint32_t)(*s <= '9' ? *s - '0' : (*s | 0x20) - 'a' + 10);
    return v & 0xffffff;
}

/* Subsystem row r, reusing prev's object when nothing changed. */
static struct nvme_subsys *subsys_build(json_t *r, const struct tables *t,
                                        const struct nvme_conf *c, const struct nvme_conf *prev)
{
    struct nvme_subsys *s = nvme_subsys_new();
    const struct nvme_subsys *was = prev_subsys(prev, nvj_int(r, "id"));
    if (!s)
        return NULL;
    s->id = nvj_int(r, "id");
    s->name = strdup(nvj_str(r, "name"));
    s->nqn = strdup(nvj_str(r, "subnqn"));
    snprintf(s->serial, sizeof(s->serial), "%s", nvj_str(r, "serial"));
    snprintf(s->model, sizeof(s->model), "blockd");
    s->ieee_oui = oui_bits(nvj_str(r, "ieee_oui"));
    s->qid_max = (uint16_t)(nvj_int(r, "qid_max") ? nvj_int(r, "qid_max") : 128);
    s->allow_any_host = nvj_bool(r, "allow_any_host");
    s->ana = json_is_boolean(json_object_get(r, "ana")) ? nvj_bool(r, "ana") : t->g.ana;
    if (!s->name || !s->nqn || fill_ns(s, t->ns, was) < 0 || fill_hosts(s, t->hs, t->hosts) < 0 ||
        fill_ports(s, t->ps, c) < 0) {
        nvme_subsys_unref(s);
        return NULL;
    }
    if (was && subsys_same(s, was) && !serves_dataset(was, resized)) {
        nvme_subsys_unref(s);
        nvme_subsys_ref((struct nvme_subsys *)was);
        return (struct nvme_subsys *)was;
    }
    return s;
}

/* "ADDR:PORT" / "[ADDR]:PORT" / ":PORT" into p (traddr without brackets). */
static int port_parse(const char *l, struct nvme_port *p)
{
    const char *colon = strrchr(l, ':');
    if (!colon)
        return -EINVAL;
    size_t n = (size_t)(colon - l);
    if (n >= 2 && l[0] == '[' && l[n - 1] == ']') {
        l++;
        n -= 2;
    }
    if (n >= sizeof(p->traddr))
        return -EINVAL;
    memcpy(p->traddr, l, n);
    p->traddr[n] = 0;
    p->trsvcid = (uint16_t)strtoul(colon + 1, NULL, 10);
    p->adrfam = strchr(p->traddr, ':') ? 2 : 1;
    return 0;
}

/* The part's ports: the discovery port (id 0) first, then each enabled TCP port. */
static void ports_build(struct nvme_conf *c, const struct tables *t)
{
    size_t i, n = 0;
    json_t *r;
    if (*t->g.discovery_listen) {
        struct nvme_port *p = &c->ports[n];
        memset(p, 0, sizeof(*p));
        if (port_parse(t->g.discovery_listen, p) == 0) {
            p->discovery = true;
            n++;
        }
    }
    json_array_foreach(t->ports, i, r)
    {
        struct nvme_port *p = &c->ports[n++];
        p->id = nvj_int(r, "id");
        p->index = (uint16_t)nvj_int(r, "index");
        snprintf(p->traddr, sizeof(p->traddr), "%s", nvj_str(r, "addr_traddr"));
        p->trsvcid = (uint16_t)nvj_int(r, "addr_trsvcid");
        p->adrfam = strcmp(nvj_str(r, "addr_adrfam"), "IPV6") == 0 ? 2 : 1;
        p->inline_data_size =
            (uint32_t)(nvj_int(r, "inline_data_size") ? nvj_int(r, "inline_data_size") : 16384);
        p->max_queue_size =
            (uint32_t)(nvj_int(r, "max_queue_size") ? nvj_int(r, "max_queue_size") : 128);
    }
    c->nports = n;
}

/* The part from the tables, reusing prev's unchanged subsystems. DB locked. */
static int conf_build(const struct nvme_conf *prev, struct nvme_conf **out)
{
    struct tables t;
    int rc = tables_load(&t);
    if (rc < 0)
        return rc;
    struct nvme_conf *c = nvme_conf_new(json_array_size(t.subsys), json_array_size(t.ports) + 1);
    if (!c || !(c->basenqn = strdup(t.g.basenqn))) {
        nvme_conf_unref(c);
        tables_free(&t);
        return -ENOMEM;
    }
    ports_build(c, &t);
    size_t i, n = 0;
    json_t *r;
    json_array_foreach(t.subsys, i, r)
    {
        struct nvme_subsys *s = subsys_build(r, &t, c, prev);
        if (!s) {
            rc = -ENOMEM;
            break;
        }
        c->subsys[n++] = s;
    }
    c->nsubsys = n;
    tables_free(&t);
    if (rc < 0) {
        nvme_conf_unref(c);
        return rc;
    }
    nvme_conf_seal(c);
    *out = c;
    return 0;
}

static int conf_next(struct conf_part *prev, const struct cfg_changes *ch, struct conf_part **next)
{
    struct nvme_conf *c;
    if (ch->defer)
        return 0; /* published by service.reload */
    if (!atomic_load(&running)) {
        *next = NULL; /* stopped: serves nothing */
        return 0;
    }
    int rc = conf_build((const struct nvme_conf *)prev, &c);
    if (rc < 0) {
        log_error("nvmet: cannot publish the NVMe-oF configuration: %s", strerror(-rc));
        return rc;
    }
    *next = &c->part;
    return 0;
}

static void subsys_gone(void *old_obj)
{
    struct nvme_subsys *s = old_obj;
    log_info("nvmet: subsystem %s (%s) withdrawn", s->name, s->nqn);
    nvme_target_subsys_gone(s);
}

static void subsys_changed(void *old_obj, void *new_obj)
{
    nvme_target_subsys_changed(old_obj, new_obj);
}

static void part_applied(struct conf_part *old_part, struct conf_part *new_part)
{
    (void)old_part;
    (void)new_part;
    nvmet_listen_apply();
}

static const struct conf_subscriber subscriber = {
    .name = "nvmet",
    .kinds = CFG_NVME_KINDS,
    .build = conf_next,
    .gone = subsys_gone,
    .changed = subsys_changed,
    .applied = part_applied,
};

void nvmet_publish_init(void)
{
    conf_subscribe(CONF_NVME, &subscriber);
}

int nvmet_republish(const char *resized_dataset)
{
    db_lock();
    free(resized);
    resized = dup_or_null(resized_dataset);
    db_unlock();
    int rc = conf_republish(1u << CONF_NVME, &(struct cfg_changes){.overflow = true});
    db_lock();
    free(resized);
    resized = NULL;
    db_unlock();
    return rc;
}

static int config_start(void)
{
    int rc = nvs_global_ensure();
    if (rc < 0) {
        log_error("nvmet: cannot store the basenqn: %s", strerror(-rc));
        return rc;
    }
    atomic_store(&running, true);
    rc = nvmet_republish(NULL);
    if (rc < 0)
        atomic_store(&running, false);
    return rc;
}

static int svc_stop(void)
{
    nvme_config_stop();
    return 0;
}

/* TrueNAS's service name; service.stop withdraws every subsystem. */
static const struct service_ops svc_ops = {
    .start = config_start,
    .stop = svc_stop,
    .running = nvmet_running,
};

int nvme_config_start(void)
{
    static bool registered;
    if (!registered) {
        registered = true;
        service_register("nvmet", &svc_ops);
    }
    return config_start();
}

void nvme_config_stop(void)
{
    atomic_store(&running, false);
    /* an empty part: conf_apply withdraws every subsystem (subsys_gone)
     * and the applied hook closes the listeners */
    struct nvme_conf *c = nvme_conf_new(0, 0);
    if (c)
        conf_publish_part(CONF_NVME, &c->part);
    nvmet_listen_close_all();
}
