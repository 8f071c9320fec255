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
    le16_put(e + 4, nvme_ana_port_id(p->index));
    le16_put(e + 6, 0xffff);           /* CNTLID: dynamic */
    le16_put(e + 8, NVME_ADMIN_QSIZE); /* ASQSZ */
    char svc[33];
    snprintf(svc, sizeof(svc), "%u", p->trsvcid);
    memcpy(e + 32, svc, strlen(svc));
    /* SUBNQN at 256, TRADDR at 512 (NVMe Base 2.0, Discovery Log Page Entry) */
    memcpy(e + 256, s->nqn, strnlen(s->nqn, 255));
    memcpy(e + 512, p->traddr, strnlen(p->traddr, sizeof(p->traddr)));
    e[768] = 0; /* TSAS: no security */
}

/* The entries of s: its ports here, then the ports of the same index of
 * the other members of a gateway group (which serve it through the same
 * shared links). Into page (NULL: only counted); how many. */
static size_t subsys_entries(const struct nvme_conf *conf, const struct nvme_subsys *s,
                             const struct nvme_peer_port *peers, size_t npeers, uint8_t *page)
{
    size_t k = 0;
    for (size_t j = 0; j < s->nports; j++) {
        const struct nvme_port *p = nvme_conf_find_port(conf, s->port_ids[j]);
        if (!p || p->discovery)
            continue;
        if (page)
            entry_fill(page + DISC_ENTRY * k, p, s);
        k++;
        for (size_t i = 0; i < npeers; i++) {
            if (peers[i].index != p->index)
                continue;
            if (page) {
                struct nvme_port q = *p;
                q.adrfam = peers[i].adrfam;
                q.trsvcid = peers[i].trsvcid;
                snprintf(q.traddr, sizeof(q.traddr), "%s", peers[i].traddr);
                entry_fill(page + DISC_ENTRY * k, &q, s);
                le16_put(page + DISC_ENTRY * k + 4, peers[i].portid);
            }
            k++;
        }
    }
    return k;
}

#define PEERS_MAX 256

int nvme_discovery_log(const char *hostnqn, uint8_t **out, size_t *len)
{
    struct nvme_conf *conf = nvme_conf_current();
    struct nvme_peer_port *peers = calloc(PEERS_MAX, sizeof(*peers));
    size_t npeers = peers ? nvme_ana_peer_ports(peers, PEERS_MAX) : 0;
    size_t n = 0;
    for (size_t i = 0; i < conf->nsubsys; i++)
        if (host_sees(conf->subsys[i], hostnqn))
            n += subsys_entries(conf, conf->subsys[i], peers, npeers, NULL);
    uint8_t *page = calloc(1, DISC_HDR + n * DISC_ENTRY);
    if (!page) {
        free(peers);
        nvme_conf_unref(conf);
        return -ENOMEM;
    }
    /* GENCTR: moves with the configuration and with the other members' ports */
    le64_put(page, conf_part_number(CONF_NVME) + nvme_ana_peers_gen());
    le64_put(page + 8, n); /* NUMREC */
    size_t k = 0;
    for (size_t i = 0; i < conf->nsubsys; i++)
        if (host_sees(conf->subsys[i], hostnqn))
            k += subsys_entries(conf, conf->subsys[i], peers, npeers,
                                page + DISC_HDR + DISC_ENTRY * k);
    free(peers);
    nvme_conf_unref(conf);
    *out = page;
    *len = DISC_HDR + n * DISC_ENTRY;
    return 0;
}
