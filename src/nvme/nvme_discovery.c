/*
 * The discovery log page (NVMe-oF 1.1, 5.3): for every subsystem the
 * connecting host may use, one entry per port that serves it. Its
 * generation counter is the CONF_NVME part's number, which moves with
 * every configuration change that touches the nvmet.* objects.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvme/nvme_internal.h"

#define DISC_HDR 1024
#define DISC_ENTRY 1024

static bool host_sees(const struct nvme_subsys *s, const char *hostnqn)
{
    return s->allow_any_host || nvme_subsys_host(s, hostnqn) != NULL;
}

static void entry_fill(uint8_t *e, const struct nvme_port *p, const struct nvme_subsys *s)
{
    e[0] = 3;                  /* TRTYPE: TCP */
    e[1] = (uint8_t)p->adrfam; /* ADRFAM: 1 IPv4, 2 IPv6 */
    e[2] = 2;                  /* SUBTYPE: NVM subsystem */
    e[3] = 2;                  /* TREQ: secure channel not required */
    le16_put(e + 4, p->index);
    le16_put(e + 6, 0xffff);           /* CNTLID: dynamic */
    le16_put(e + 8, NVME_ADMIN_QSIZE); /* ASQSZ */
    char svc[33];
    snprintf(svc, sizeof(svc), "%u", p->trsvcid);
    memcpy(e + 32, svc, strlen(svc));
    memcpy(e + 256, p->traddr, strnlen(p->traddr, sizeof(p->traddr)));
    memcpy(e + 512, s->nqn, strnlen(s->nqn, 255));
    e[768] = 0; /* TSAS: no security */
}

int nvme_discovery_log(const char *hostnqn, uint8_t **out, size_t *len)
{
    struct nvme_conf *conf = nvme_conf_current();
    size_t n = 0;
    for (size_t i = 0; i < conf->nsubsys; i++) {
        const struct nvme_subsys *s = conf->subsys[i];
        for (size_t j = 0; host_sees(s, hostnqn) && j < s->nports; j++) {
            const struct nvme_port *p = nvme_conf_find_port(conf, s->port_ids[j]);
            n += p && !p->discovery;
        }
    }
    uint8_t *page = calloc(1, DISC_HDR + n * DISC_ENTRY);
    if (!page) {
        nvme_conf_unref(conf);
        return -ENOMEM;
    }
    le64_put(page, conf_part_number(CONF_NVME)); /* GENCTR */
    le64_put(page + 8, n);                       /* NUMREC */
    size_t k = 0;
    for (size_t i = 0; i < conf->nsubsys; i++) {
        const struct nvme_subsys *s = conf->subsys[i];
        for (size_t j = 0; host_sees(s, hostnqn) && j < s->nports; j++) {
            const struct nvme_port *p = nvme_conf_find_port(conf, s->port_ids[j]);
            if (p && !p->discovery)
                entry_fill(page + DISC_HDR + DISC_ENTRY * k++, p, s);
        }
    }
    nvme_conf_unref(conf);
    *out = page;
    *len = DISC_HDR + n * DISC_ENTRY;
    return 0;
}
