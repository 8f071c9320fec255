/*
 * nvmet_harness: the NVMe/TCP target engine (src/nvme) alone, for the
 * test initiator (tests/integration/nvmetcp.py) before and beside the
 * nvmet.* API: it publishes a CONF_NVME part of its own over memory
 * volumes, listens on 127.0.0.1 (an I/O port, id 1, and a discovery-only
 * listener, id 0) and prints "io PORT" and "disc PORT". SIGUSR1 adds a
 * namespace to the first subsystem (nvme_target_subsys_changed: an
 * asynchronous event); SIGHUP grows its nsid 1 by 1 MiB (the same);
 * SIGUSR2 removes the second subsystem; SIGTERM stops.
 *
 * Subsystems: nqn.2026-01.org.blockd:any (any host; nsid 1: 64 MiB of 512
 * B blocks, nsid 2: 16 MiB of 4 KiB blocks), nqn.2026-01.org.blockd:only
 * (host nqn.2026-01.org.blockd:host-ok only; nsid 1 read-only).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/iopool.h"
#include "core/listener.h"
#include "core/log.h"
#include "core/reactor.h"
#include "nvme/nvme_resv.h"
#include "nvme/nvme_target.h"
#include "nvme/nvme_view.h"
#include "store/bdev.h"
#include "store/volume.h"

static struct volume *mkvol(const char *name, uint64_t size, uint32_t bs, bool ro)
{
    struct bdev *b;
    struct volume *v;
    if (bdev_memory_open(size, 0, &b) < 0 ||
        volume_new(name, b, bs, VOLUME_SYNC_STANDARD, ro, &v) < 0) {
        fprintf(stderr, "cannot make volume %s\n", name);
        exit(1);
    }
    return v;
}

static void ns_set(struct nvme_ns *n, uint32_t nsid, struct volume *v, bool ro)
{
    n->nsid = nsid;
    n->id = nsid;
    n->vol = v;
    n->readonly = ro;
    for (int i = 0; i < 16; i++) {
        n->nguid[i] = (uint8_t)(0x10 * nsid + i);
        n->uuid[i] = (uint8_t)(0xa0 + i + nsid);
    }
    memcpy(n->eui64, n->nguid, 8);
}

static struct volume *vol1, *vol2, *vol3, *vol4;

static struct nvme_subsys *subsys_any(bool third)
{
    struct nvme_subsys *s = nvme_subsys_new();
    s->id = 1;
    s->name = strdup("any");
    s->nqn = strdup("nqn.2026-01.org.blockd:any");
    snprintf(s->serial, sizeof(s->serial), "blockd0001");
    snprintf(s->model, sizeof(s->model), "blockd test");
    s->ieee_oui = 0x123456;
    s->qid_max = 4;
    s->allow_any_host = true;
    s->ana = true; /* one ANA group, optimized (no gateway group) */
    s->nports = 1;
    s->port_ids = calloc(1, sizeof(int64_t));
    s->port_ids[0] = 1;
    s->nns = third ? 3 : 2;
    s->ns = calloc(s->nns, sizeof(*s->ns));
    volume_ref(vol1);
    ns_set(&s->ns[0], 1, vol1, false);
    volume_ref(vol2);
    ns_set(&s->ns[1], 2, vol2, false);
    s->ns[1].resv = nvme_resv_get(2); /* in memory only: no store here */
    if (third) {
        volume_ref(vol4);
        ns_set(&s->ns[2], 3, vol4, false);
    }
    return s;
}

static struct nvme_subsys *subsys_only(void)
{
    struct nvme_subsys *s = nvme_subsys_new();
    s->id = 2;
    s->name = strdup("only");
    s->nqn = strdup("nqn.2026-01.org.blockd:only");
    snprintf(s->serial, sizeof(s->serial), "blockd0002");
    snprintf(s->model, sizeof(s->model), "blockd test");
    s->qid_max = 2;
    s->nhosts = 1;
    s->hosts = calloc(1, sizeof(*s->hosts));
    s->hosts[0].hostnqn = strdup("nqn.2026-01.org.blockd:host-ok");
    s->nports = 1;
    s->port_ids = calloc(1, sizeof(int64_t));
    s->port_ids[0] = 1;
    s->nns = 1;
    s->ns = calloc(1, sizeof(*s->ns));
    volume_ref(vol3);
    ns_set(&s->ns[0], 1, vol3, true);
    return s;
}

static struct nvme_subsys *cur_any, *cur_only;
static int io_port;

static void publish(void)
{
    size_t n = cur_only ? 2 : 1;
    struct nvme_conf *c = nvme_conf_new(n, 1);
    c->basenqn = strdup("nqn.2026-01.org.blockd");
    c->subsys[0] = cur_any;
    nvme_subsys_ref(cur_any);
    if (cur_only) {
        c->subsys[1] = cur_only;
        nvme_subsys_ref(cur_only);
    }
    struct nvme_port *p = &c->ports[0];
    p->id = 1;
    p->index = 1;
    snprintf(p->traddr, sizeof(p->traddr), "127.0.0.1");
    p->trsvcid = (uint16_t)io_port;
    p->adrfam = 1;
    p->inline_data_size = 16384;
    p->max_queue_size = 128;
    nvme_conf_seal(c);
    conf_publish_part(CONF_NVME, &c->part);
}

int main(void)
{
    log_set_level(LOG_DEBUG);
    /* Blocked before any thread starts, so that only signalfd sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    if (reactors_start(2) < 0 || iopool_start(4) < 0 || nvme_target_init() < 0)
        return 1;
    vol1 = mkvol("test/ns1", 64u << 20, 512, false);
    vol2 = mkvol("test/ns2", 16u << 20, 4096, false);
    vol3 = mkvol("test/ro", 8u << 20, 512, false);
    vol4 = mkvol("test/ns3", 4u << 20, 512, false);
    struct listener *lio, *ldisc;
    if (listener_open_tcp("127.0.0.1:0", nvme_target_accept, (void *)(intptr_t)1, &lio) < 0 ||
        listener_open_tcp("127.0.0.1:0", nvme_target_accept, (void *)(intptr_t)0, &ldisc) < 0)
        return 1;
    io_port = listener_port(lio);
    cur_any = subsys_any(false);
    cur_only = subsys_only();
    publish();
    printf("io %d\ndisc %d\n", io_port, listener_port(ldisc));
    fflush(stdout);
    int sfd = signalfd(-1, &set, 0);
    for (;;) {
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof(si)) != sizeof(si))
            continue;
        if (si.ssi_signo == SIGUSR1) {
            struct nvme_subsys *old = cur_any;
            cur_any = subsys_any(true);
            publish();
            nvme_target_subsys_changed(old, cur_any);
            nvme_subsys_unref(old);
        } else if (si.ssi_signo == SIGHUP) {
            /* nsid 1 of the first subsystem grows by 1 MiB */
            if (volume_resize(vol1, volume_size(vol1) + (1u << 20)) == 0)
                nvme_target_subsys_changed(cur_any, cur_any);
        } else if (si.ssi_signo == SIGUSR2 && cur_only) {
            struct nvme_subsys *old = cur_only;
            cur_only = NULL;
            publish();
            nvme_target_subsys_gone(old);
            nvme_subsys_unref(old);
        } else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            break;
        }
    }
    listener_close(lio);
    listener_close(ldisc);
    nvme_target_stop();
    return 0;
}
