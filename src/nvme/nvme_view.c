/*
 * The CONF_NVME part: allocation, references and lookups (nvme_view.h).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nvme/nvme_resv.h"
#include "nvme/nvme_view.h"
#include "nvme/nvme_target.h"
#include "store/volume.h"

struct nvme_subsys *nvme_subsys_new(void)
{
    static atomic_uint_fast64_t builds;
    struct nvme_subsys *s = calloc(1, sizeof(*s));
    if (s) {
        atomic_init(&s->refs, 1);
        s->build = atomic_fetch_add_explicit(&builds, 1, memory_order_relaxed) + 1;
    }
    return s;
}

void nvme_subsys_ref(struct nvme_subsys *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

static void host_clear(struct nvme_host *h)
{
    free(h->hostnqn);
    /* Secrets: wipe before free, like every other key in the daemon. */
    if (h->dhchap_key) {
        explicit_bzero(h->dhchap_key, strlen(h->dhchap_key));
        free(h->dhchap_key);
    }
    if (h->dhchap_ctrl_key) {
        explicit_bzero(h->dhchap_ctrl_key, strlen(h->dhchap_ctrl_key));
        free(h->dhchap_ctrl_key);
    }
}

void nvme_subsys_unref(struct nvme_subsys *s)
{
    if (!s || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (size_t i = 0; i < s->nns; i++) {
        struct nvme_ns *n = &s->ns[i];
        if (n->vol) {
            nvme_target_volume_release(n->vol);
            volume_unref(n->vol);
        }
        nvme_resv_unref(n->resv);
        free(n->device_path);
        free(n->dataset);
        free(n->unavailable);
    }
    for (size_t i = 0; i < s->nhosts; i++)
        host_clear(&s->hosts[i]);
    free(s->ns);
    free(s->hosts);
    free(s->port_ids);
    free(s->name);
    free(s->nqn);
    free(s);
}

static void conf_destroy(struct conf_part *p)
{
    struct nvme_conf *c = (struct nvme_conf *)p;
    for (size_t i = 0; i < c->nsubsys; i++)
        nvme_subsys_unref(c->subsys[i]);
    free(c->basenqn);
    free(c);
}

struct nvme_conf *nvme_conf_new(size_t nsubsys, size_t nports)
{
    /* One block: the struct, the subsystem pointers, the index, the ports. */
    size_t at_subsys = sizeof(struct nvme_conf);
    size_t at_objs = at_subsys + nsubsys * sizeof(struct nvme_subsys *);
    at_objs = (at_objs + _Alignof(struct conf_obj) - 1) / _Alignof(struct conf_obj) *
              _Alignof(struct conf_obj);
    size_t at_ports = at_objs + nsubsys * sizeof(struct conf_obj);
    at_ports = (at_ports + _Alignof(struct nvme_port) - 1) / _Alignof(struct nvme_port) *
               _Alignof(struct nvme_port);
    struct nvme_conf *c = calloc(1, at_ports + nports * sizeof(struct nvme_port));
    if (!c)
        return NULL;
    atomic_init(&c->part.refs, 1);
    c->part.destroy = conf_destroy;
    c->subsys = (struct nvme_subsys **)((char *)c + at_subsys);
    c->objs = (struct conf_obj *)((char *)c + at_objs);
    c->ports = (struct nvme_port *)((char *)c + at_ports);
    c->nsubsys = nsubsys;
    c->nports = nports;
    return c;
}

static int obj_cmp(const void *a, const void *b)
{
    const struct conf_obj *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

void nvme_conf_seal(struct nvme_conf *c)
{
    for (size_t i = 0; i < c->nsubsys; i++)
        c->objs[i] = (struct conf_obj){.id = c->subsys[i]->id, .obj = c->subsys[i]};
    qsort(c->objs, c->nsubsys, sizeof(*c->objs), obj_cmp);
    c->part.objs = c->objs;
    c->part.n_objs = c->nsubsys;
}

struct nvme_conf *nvme_conf_current(void)
{
    struct conf_part *p = conf_part_get(CONF_NVME);
    if (p)
        return (struct nvme_conf *)p;
    struct nvme_conf *c = nvme_conf_new(0, 0);
    if (!c)
        abort(); /* as nbd_exports_current: no memory for an empty part */
    return c;
}

void nvme_conf_unref(struct nvme_conf *c)
{
    if (c)
        conf_part_unref(&c->part);
}

struct nvme_subsys *nvme_conf_find_nqn(const struct nvme_conf *c, const char *nqn)
{
    for (size_t i = 0; i < c->nsubsys; i++)
        if (strcmp(c->subsys[i]->nqn, nqn) == 0)
            return c->subsys[i];
    return NULL;
}

const struct nvme_port *nvme_conf_find_port(const struct nvme_conf *c, int64_t port_id)
{
    for (size_t i = 0; i < c->nports; i++)
        if (c->ports[i].id == port_id)
            return &c->ports[i];
    return NULL;
}

bool nvme_subsys_on_port(const struct nvme_subsys *s, int64_t port_id)
{
    for (size_t i = 0; i < s->nports; i++)
        if (s->port_ids[i] == port_id)
            return true;
    return false;
}

const struct nvme_host *nvme_subsys_host(const struct nvme_subsys *s, const char *hostnqn)
{
    for (size_t i = 0; i < s->nhosts; i++)
        if (strcmp(s->hosts[i].hostnqn, hostnqn) == 0)
            return &s->hosts[i];
    return NULL;
}

const struct nvme_ns *nvme_subsys_ns(const struct nvme_subsys *s, uint32_t nsid)
{
    size_t lo = 0, hi = s->nns;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ns[mid].nsid == nsid)
            return &s->ns[mid];
        if (s->ns[mid].nsid < nsid)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}
