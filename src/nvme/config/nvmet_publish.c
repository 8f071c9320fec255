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
#include "nvme/nvme_resv.h"
#include "nvme/nvme_target.h"
#include "nvme/nvme_view.h"
#include "store/bdev.h"
#include "store/bdev_rbd.h"
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
        nvme_target_volume_hold(n->vol); /* released with n (nvme_subsys_unref) */
        return;
    }
    rc = n->dataset ? datasets_volume_open(n->dataset, &n->vol)
                    : open_file(n->device_path, false, &n->vol);
    if (rc == 0) {
        n->readonly = volume_readonly(n->vol) || (n->dataset && strchr(n->dataset, '@'));
        nvme_target_volume_hold(n->vol);
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

/* Everything a build reads, as stored. */
struct tables {
    struct nvmet_global g;
    struct nvmet_subsys *subsys;
    struct nvmet_namespace *ns;
    struct nvmet_host *hosts;
    struct nvmet_link *hs, *ps;
    struct nvmet_port *ports; /* enabled TCP ports */
    size_t nsubsys, nns, nhosts, nhs, nps, nports;
};

/* A FILE namespace grown by an update (nvmet_namespace.c grew the file):
 * the volume open on it learns its new size. True when it changed. */
static bool file_grown(const struct nvme_ns *n, const struct nvmet_namespace *r)
{
    if (r->device_type != NVMET_FILE || !n->vol || !r->filesize.set ||
        volume_size(n->vol) >= (uint64_t)r->filesize.v)
        return false;
    int rc = volume_size_changed(n->vol, (uint64_t)r->filesize.v);
    if (rc < 0)
        log_error("nvmet: %s: cannot take the new size %" PRId64 ": %s", n->device_path,
                  r->filesize.v, strerror(-rc));
    return rc > 0;
}

/* The enabled namespaces of s; *grown when a FILE namespace's volume grew
 * (the subsystem then changes, so the target tells its hosts). */
static int fill_ns(struct nvme_subsys *s, const struct tables *t, const struct nvme_subsys *prev,
                   bool *grown)
{
    s->ns = calloc(t->nns + 1, sizeof(*s->ns));
    if (!s->ns)
        return -ENOMEM;
    for (size_t i = 0; i < t->nns; i++) {
        const struct nvmet_namespace *r = &t->ns[i];
        if (r->subsys_id != s->id || !r->enabled)
            continue;
        struct nvme_ns *n = &s->ns[s->nns++];
        n->nsid = (uint32_t)r->nsid.v;
        n->id = r->id;
        n->device_path = strdup(r->device_path);
        n->dataset =
            r->device_type == NVMET_ZVOL ? dup_or_null(nvmet_zvol_dataset(r->device_path)) : NULL;
        if (!n->device_path)
            return -ENOMEM;
        uuid_bytes(r->device_uuid, n->uuid);
        uuid_bytes(r->device_nguid, n->nguid);
        memcpy(n->eui64, n->nguid, sizeof(n->eui64));
        ns_volume(n, prev_ns(prev, n->device_path), s->name);
        /* Reservations: in the database, or in the cluster for an RBD
         * volume (none while its pool is still connecting). */
        if (n->vol && !bdev_is_offline(volume_bdev(n->vol)))
            n->resv = nvme_resv_get_volume(n->id, n->vol);
        *grown |= file_grown(n, r);
    }
    if (s->nns > 1)
        qsort(s->ns, s->nns, sizeof(*s->ns), nsid_cmp);
    return 0;
}

/* A sealed key in clear (a new string), NULL when unset or unreadable. */
static char *key_clear(const char *sealed)
{
    char plain[PWENC_PLAIN_MAX];
    if (!sealed || pwenc_open(sealed, plain, sizeof(plain)) < 0)
        return NULL;
    char *v = strdup(plain);
    explicit_bzero(plain, sizeof(plain));
    return v;
}

static const struct nvmet_host *host_of(const struct tables *t, int64_t id)
{
    for (size_t i = 0; i < t->nhosts; i++)
        if (t->hosts[i].id == id)
            return &t->hosts[i];
    return NULL;
}

/* The hosts allowed on s (nvme_view.h: hash 1..3 = SHA-256..512, group
 * 1..5 = ffdhe2048..8192, 0 none). */
static int fill_hosts(struct nvme_subsys *s, const struct tables *t)
{
    s->hosts = calloc(t->nhs + 1, sizeof(*s->hosts));
    if (!s->hosts)
        return -ENOMEM;
    for (size_t i = 0; i < t->nhs; i++) {
        const struct nvmet_host *h = host_of(t, t->hs[i].other_id);
        if (t->hs[i].subsys_id != s->id || !h)
            continue;
        struct nvme_host *e = &s->hosts[s->nhosts++];
        e->hostnqn = strdup(h->hostnqn);
        e->dhchap_key = key_clear(h->dhchap_key);
        e->dhchap_ctrl_key = key_clear(h->dhchap_ctrl_key);
        e->dhchap_hash = e->dhchap_key ? h->dhchap_hash + 1 : 0;
        e->dhchap_dhgroup = e->dhchap_key ? h->dhchap_dhgroup + 1 : 0;
        if (!e->hostnqn)
            return -ENOMEM;
    }
    return 0;
}

static int id_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The enabled ports serving s. */
static int fill_ports(struct nvme_subsys *s, const struct tables *t, const struct nvme_conf *c)
{
    s->port_ids = calloc(t->nps + 1, sizeof(*s->port_ids));
    if (!s->port_ids)
        return -ENOMEM;
    for (size_t i = 0; i < t->nps; i++)
        if (t->ps[i].subsys_id == s->id && nvme_conf_find_port(c, t->ps[i].other_id))
            s->port_ids[s->nports++] = t->ps[i].other_id;
    qsort(s->port_ids, s->nports, sizeof(*s->port_ids), id_cmp);
    return 0;
}

static void tables_free(struct tables *t)
{
    nvs_free_all(&nvs_subsys, t->subsys, t->nsubsys);
    nvs_free_all(&nvs_namespace, t->ns, t->nns);
    nvs_free_all(&nvs_host, t->hosts, t->nhosts);
    nvs_free_all(&nvs_host_subsys, t->hs, t->nhs);
    nvs_free_all(&nvs_port_subsys, t->ps, t->nps);
    nvs_free_all(&nvs_port, t->ports, t->nports);
}

static int tables_load(struct tables *t)
{
    memset(t, 0, sizeof(*t));
    int rc = nvs_global_load(&t->g);
    if (rc == 0)
        rc = nvs_load(&nvs_subsys, NULL, (void **)&t->subsys, &t->nsubsys, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_namespace, NULL, (void **)&t->ns, &t->nns, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_host, NULL, (void **)&t->hosts, &t->nhosts, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_host_subsys, NULL, (void **)&t->hs, &t->nhs, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_port_subsys, NULL, (void **)&t->ps, &t->nps, NULL);
    if (rc == 0)
        rc = nvs_load(&nvs_port, "enabled = 1 AND addr_trtype = 'TCP'", (void **)&t->ports,
                      &t->nports, NULL);
    if (rc < 0)
        tables_free(t);
    return rc;
}

static bool host_same(const struct nvme_host *a, const struct nvme_host *b)
{
    return nvs_same(a->hostnqn, b->hostnqn) && nvs_same(a->dhchap_key, b->dhchap_key) &&
           nvs_same(a->dhchap_ctrl_key, b->dhchap_ctrl_key) && a->dhchap_hash == b->dhchap_hash &&
           a->dhchap_dhgroup == b->dhchap_dhgroup;
}

static bool ns_same(const struct nvme_ns *a, const struct nvme_ns *b)
{
    return a->nsid == b->nsid && a->id == b->id && nvs_same(a->device_path, b->device_path) &&
           a->vol == b->vol && nvs_same(a->unavailable, b->unavailable) &&
           a->readonly == b->readonly && memcmp(a->uuid, b->uuid, 16) == 0 &&
           memcmp(a->nguid, b->nguid, 16) == 0;
}

/* Whether the target would see no difference between a and b. */
static bool subsys_same(const struct nvme_subsys *a, const struct nvme_subsys *b)
{
    if (!nvs_same(a->name, b->name) || !nvs_same(a->nqn, b->nqn) ||
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

/* Subsystem r, reusing prev's object when nothing changed. */
static struct nvme_subsys *subsys_build(const struct nvmet_subsys *r, const struct tables *t,
                                        const struct nvme_conf *c, const struct nvme_conf *prev)
{
    struct nvme_subsys *s = nvme_subsys_new();
    const struct nvme_subsys *was = prev_subsys(prev, r->id);
    if (!s)
        return NULL;
    s->id = r->id;
    s->name = strdup(r->name);
    s->nqn = strdup(r->subnqn ? r->subnqn : "");
    snprintf(s->serial, sizeof(s->serial), "%s", r->serial ? r->serial : "");
    snprintf(s->model, sizeof(s->model), "blockd");
    s->ieee_oui = oui_bits(r->ieee_oui);
    s->qid_max = (uint16_t)(r->qid_max.set ? r->qid_max.v : 128);
    s->allow_any_host = r->allow_any_host;
    s->ana = r->ana >= 0 ? r->ana == 1 : t->g.ana;
    bool grown = false;
    if (!s->name || !s->nqn || fill_ns(s, t, was, &grown) < 0 || fill_hosts(s, t) < 0 ||
        fill_ports(s, t, c) < 0) {
        nvme_subsys_unref(s);
        return NULL;
    }
    if (was && !grown && subsys_same(s, was) && !serves_dataset(was, resized)) {
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

/* The part's ports: the discovery port (id 0) first, then each enabled TCP
 * port. The discovery listener opens only once some port serves: a blockd
 * that serves no NVMe keeps no port open for it (and daemons side by side
 * do not all try to bind 8009). */
static void ports_build(struct nvme_conf *c, const struct tables *t)
{
    size_t n = 0;
    if (*t->g.discovery_listen && t->nports > 0) {
        struct nvme_port *p = &c->ports[n];
        memset(p, 0, sizeof(*p));
        if (port_parse(t->g.discovery_listen, p) == 0) {
            p->discovery = true;
            n++;
        }
    }
    for (size_t i = 0; i < t->nports; i++) {
        const struct nvmet_port *r = &t->ports[i];
        struct nvme_port *p = &c->ports[n++];
        p->id = r->id;
        p->index = (uint16_t)r->index;
        snprintf(p->traddr, sizeof(p->traddr), "%s", r->addr_traddr);
        p->trsvcid = (uint16_t)r->addr_trsvcid;
        p->adrfam = nvs_same(r->addr_adrfam, "IPV6") ? 2 : 1;
        p->inline_data_size = (uint32_t)(r->inline_data_size.set ? r->inline_data_size.v : 16384);
        p->max_queue_size = (uint32_t)(r->max_queue_size.set ? r->max_queue_size.v : 128);
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
    struct nvme_conf *c = nvme_conf_new(t.nsubsys, t.nports + 1);
    if (!c || !(c->basenqn = strdup(t.g.basenqn))) {
        nvme_conf_unref(c);
        tables_free(&t);
        return -ENOMEM;
    }
    ports_build(c, &t);
    size_t n = 0;
    for (size_t i = 0; i < t.nsubsys; i++) {
        struct nvme_subsys *s = subsys_build(&t.subsys[i], &t, c, prev);
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

/* What the target serves of s, for the log lines of a publication. */
static void subsys_log(const char *what, const struct nvme_subsys *s)
{
    size_t unavailable = 0;
    for (size_t i = 0; i < s->nns; i++)
        unavailable += !s->ns[i].vol;
    log_info("nvmet: subsystem %s %s: %zu namespace(s)%s, %zu host(s)%s, %zu port(s)", s->name,
             what, s->nns, unavailable ? " (some unavailable)" : "", s->nhosts,
             s->allow_any_host ? " (any host allowed)" : "", s->nports);
}

static void subsys_changed(void *old_obj, void *new_obj)
{
    subsys_log("changed", new_obj);
    nvme_target_subsys_changed(old_obj, new_obj);
}

static void subsys_added(void *new_obj)
{
    subsys_log("published", new_obj);
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
    .added = subsys_added,
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
    nvmet_resv_prune();
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
