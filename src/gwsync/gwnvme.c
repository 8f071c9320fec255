/*
 * The gateway group's view of the NVMe/TCP paths (nvme_target.h, struct
 * nvme_path_ops; docs/ha.md "NVMe: ANA"): each member is an ANA group (its
 * id), a namespace on an RBD image is in the group of the image's
 * optimized member (gateway_volume_optimized, the ALUA ranking), a fenced
 * member's paths are inaccessible, and the discovery log lists the other
 * live members' ports, which each member publishes in its membership
 * record. Here because gateway/ sits below the front-ends and nvme/ knows
 * nothing of groups.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/gateway.h"
#include "gwsync/gwnvme.h"
#include "nvme/nvme_target.h"

static uint32_t path_group(struct volume *vol)
{
    return gateway_volume_optimized(vol);
}

static uint32_t path_own_group(void)
{
    return gateway_id();
}

static bool path_inaccessible(void)
{
    return gateway_fenced();
}

/* PORTIDs as the iSCSI portal group tags: distinct on every member. */
static uint16_t path_port_id(uint16_t index)
{
    return (uint16_t)(GATEWAY_TAG_BASE * gateway_id() + index % GATEWAY_TAG_BASE);
}

/* CNTLIDs: a share of 2040 per member (32 x 2040 < FFF0h), so that two
 * members never give one host two controllers with the same CNTLID. */
static void path_cntlid_range(uint16_t *lo, uint16_t *hi)
{
    unsigned id = gateway_id();
    *lo = (uint16_t)((id - 1) * 2040 + 1);
    *hi = (uint16_t)(id * 2040);
}

/* One "INDEX=ADDR:SERVICE" item of a member's record into p. */
static bool port_parse(const char *item, size_t len, struct nvme_peer_port *p)
{
    char buf[128];
    if (len >= sizeof(buf))
        return false;
    memcpy(buf, item, len);
    buf[len] = 0;
    char *eq = strchr(buf, '='), *colon = strrchr(buf, ':');
    if (!eq || !colon || colon < eq)
        return false;
    *colon = 0;
    char *addr = eq + 1;
    p->adrfam = 1;
    if (addr[0] == '[') {
        addr++;
        char *rb = strchr(addr, ']');
        if (!rb)
            return false;
        *rb = 0;
        p->adrfam = 2;
    }
    long idx = strtol(buf, NULL, 10), svc = strtol(colon + 1, NULL, 10);
    if (idx < 0 || idx > 65535 || svc <= 0 || svc > 65535)
        return false;
    p->index = (uint16_t)idx;
    p->trsvcid = (uint16_t)svc;
    snprintf(p->traddr, sizeof(p->traddr), "%s", addr);
    return true;
}

static size_t path_peer_ports(struct nvme_peer_port *out, size_t max)
{
    struct gateway_member m[GATEWAY_ID_MAX];
    size_t nm = gateway_members(m, GATEWAY_ID_MAX), n = 0;
    unsigned self = gateway_id();
    for (size_t i = 0; i < nm && i < GATEWAY_ID_MAX; i++) {
        if (m[i].id == self || m[i].state != GATEWAY_ONLINE || m[i].fenced)
            continue;
        for (const char *s = m[i].nvme_ports; *s && n < max;) {
            size_t len = strcspn(s, ",");
            struct nvme_peer_port p = {.member = m[i].id};
            if (port_parse(s, len, &p)) {
                p.portid = (uint16_t)(GATEWAY_TAG_BASE * m[i].id + p.index % GATEWAY_TAG_BASE);
                out[n++] = p;
            }
            s += len + (s[len] == ',');
        }
    }
    return n;
}

static const struct nvme_path_ops group_paths = {
    .max_groups = GATEWAY_ID_MAX,
    .group = path_group,
    .own_group = path_own_group,
    .inaccessible = path_inaccessible,
    .port_id = path_port_id,
    .cntlid_range = path_cntlid_range,
    .volume_hold = gateway_volume_hold,
    .volume_release = gateway_volume_release,
    .peer_ports = path_peer_ports,
    .generation = gateway_views_gen,
};

void gwnvme_start(void)
{
    if (gateway_enabled())
        nvme_target_set_paths(&group_paths);
}

void gwnvme_ports_update(void)
{
    char buf[GATEWAY_NVME_PORTS_MAX];
    nvme_target_ports_text(buf, sizeof(buf));
    gateway_set_nvme_ports(buf);
}
