/*
 * The Identify data structures (NVMe 2.0 base 5.17.2, NVM command set
 * 4.1.5): controller, namespace, active namespace list, namespace
 * identification descriptors. Each fills a zeroed 4096-byte page. What a
 * controller advertises is derived from the queue's port and the volume
 * (block size, size, read-only, trim), never fixed per front-end.
 */
#include <string.h>

#include "nvme/nvme_internal.h"

#define ID_LEN 4096

/* ASCII, space padded, not NUL-terminated. */
static void ascii_field(uint8_t *dst, const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    memcpy(dst, s, len);
    memset(dst + len, ' ', n - len);
}

static void nqn_copy(uint8_t *dst, const char *s)
{
    size_t len = strnlen(s, 255);
    memcpy(dst, s, len);
}

static uint32_t max_nsid(const struct nvme_subsys *s)
{
    uint32_t m = 1024; /* room to add namespaces without a new NN */
    for (size_t i = 0; s && i < s->nns; i++)
        if (s->ns[i].nsid > m)
            m = s->ns[i].nsid;
    return m;
}

void nvme_identify_ctrl(const struct nvme_queue *q, const struct nvme_subsys *s, uint8_t *out)
{
    const struct nvme_ctrl *ctrl = q->ctrl;
    memset(out, 0, ID_LEN);
    ascii_field(out + 4, s ? s->serial : "blockd-discovery", 20);
    ascii_field(out + 24, s ? s->model : "blockd discovery controller", 40);
    ascii_field(out + 64, BLOCKD_VERSION, 8);
    out[72] = 6; /* RAB */
    uint32_t oui = s ? s->ieee_oui : 0;
    out[73] = (uint8_t)oui;
    out[74] = (uint8_t)(oui >> 8);
    out[75] = (uint8_t)(oui >> 16);
    out[76] = s ? 0x3 : 0; /* CMIC: several ports, several controllers */
    out[77] = NVME_MDTS;
    le16_put(out + 78, ctrl->cntlid);
    le32_put(out + 80, 0x00020000); /* VER 2.0 */
    /* OAES: namespace attribute notices, or discovery log changes. */
    le32_put(out + 92, s ? 1u << 8 : 1u << 31);
    /* CTRATT: 128-bit Host Identifiers (a host reads reservation reports
     * in the extended form: Linux asks for it when this bit is set). */
    le32_put(out + 96, 1u << 0);
    out[111] = s ? 1 : 2;    /* CNTRLTYPE: I/O, discovery */
    out[258] = 3;            /* ACL: 4 aborts (0-based) */
    out[259] = NVME_AERL;    /* AERL (0-based) */
    out[261] = 1u << 2;      /* LPA: extended data for Get Log Page */
    le16_put(out + 320, 10); /* KAS: 100 ms units */
    out[512] = 0x66;         /* SQES */
    out[513] = 0x44;         /* CQES */
    /* MAXCMD; a discovery controller's, like its MQES (nvme_fabrics.c), is
     * the largest queue size: its admin queue stays bounded by Connect. */
    le16_put(out + 514, s ? ctrl->io_qsize : NVME_QSIZE_MAX);
    le32_put(out + 516, s ? max_nsid(s) : 0); /* NN */
    /* ONCS: Compare, Dataset Management, Write Zeroes, Reservations (each
     * namespace's RESCAP says whether it has them). */
    le16_put(out + 520, s ? (1u << 0) | (1u << 2) | (1u << 3) | (1u << 5) : 0);
    out[525] = s ? 1 : 0; /* VWC present: Flush is meaningful */
    /* SGLS: SGLs supported (no alignment rule), offset addresses for
     * in-capsule data. */
    le32_put(out + 536, (1u << 0) | (1u << 20));
    nqn_copy(out + 768, s ? s->nqn : NVME_DISC_NQN);
    uint32_t inl = s ? ctrl->inline_size : 0;
    le32_put(out + 1792, (NVME_SQE_LEN + inl) / 16); /* IOCCSZ */
    le32_put(out + 1796, NVME_CQE_LEN / 16);         /* IORCSZ */
    le16_put(out + 1800, 0);                         /* ICDOFF */
    out[1802] = 0;                                   /* FCATT: dynamic model */
    out[1803] = 1;                                   /* MSDBD */
    nvme_ana_identify_ctrl(s, out);
}

static uint8_t log2_u32(uint32_t v)
{
    uint8_t n = 0;
    while (v > 1) {
        v >>= 1;
        n++;
    }
    return n;
}

void nvme_identify_ns(const struct nvme_ns *ns, uint8_t *out)
{
    memset(out, 0, ID_LEN);
    if (!ns || !ns->vol)
        return; /* allocated but not active: all zeroes */
    struct volume *v = ns->vol;
    uint32_t bs = nvme_lba_size(v);
    uint64_t nblocks = volume_size(v) / bs;
    uint16_t per_block = (uint16_t)(volume_block_size(v) / bs - 1); /* 0-based */
    le64_put(out + 0, nblocks);                                     /* NSZE */
    le64_put(out + 8, nblocks);                                     /* NCAP */
    le64_put(out + 16, nblocks);                                    /* NUSE */
    out[24] = 1u << 4;                    /* NSFEAT: OPTPERF, the fields below */
    le16_put(out + 64, per_block);        /* NPWG: the volume's block size */
    le16_put(out + 66, per_block);        /* NPWA */
    le16_put(out + 68, per_block);        /* NPDG */
    le16_put(out + 70, per_block);        /* NPDA */
    le16_put(out + 72, per_block);        /* NOWS */
    out[25] = 0;                          /* NLBAF: one format */
    out[26] = 0;                          /* FLBAS */
    out[30] = 1;                          /* NMIC: may be shared by controllers */
    out[31] = nvme_resv_rescap(ns->resv); /* RESCAP */
    /* DLFEAT: Write Zeroes may deallocate; what a deallocated block reads
     * is not promised (it depends on the backend). */
    out[33] = 1u << 3;
    if (ns->readonly || volume_readonly(v))
        out[99] = 1; /* NSATTR: write protected */
    memcpy(out + 104, ns->nguid, 16);
    memcpy(out + 120, ns->eui64, 8);
    out[128 + 2] = log2_u32(bs); /* LBAF0: LBADS */
}

void nvme_identify_ns_indep(const struct nvme_ns *ns, uint8_t *out)
{
    memset(out, 0, ID_LEN);
    out[0] = ns->vol ? 1u << 4 : 0; /* NSFEAT: OPTPERF */
    out[1] = 1;                     /* NMIC: shared */
    if (ns->vol && (ns->readonly || volume_readonly(ns->vol)))
        out[8] = 1;            /* NSATTR: write protected */
    out[14] = ns->vol ? 1 : 0; /* NSTAT: ready */
}

void nvme_identify_ns_descs(const struct nvme_ns *ns, uint8_t *out)
{
    memset(out, 0, ID_LEN);
    uint8_t *p = out;
    p[0] = 1; /* EUI64 */
    p[1] = 8;
    memcpy(p + 4, ns->eui64, 8);
    p += 12;
    p[0] = 2; /* NGUID */
    p[1] = 16;
    memcpy(p + 4, ns->nguid, 16);
    p += 20;
    p[0] = 3; /* UUID */
    p[1] = 16;
    memcpy(p + 4, ns->uuid, 16);
    p += 20;
    p[0] = 4; /* CSI: the NVM command set */
    p[1] = 1;
}

void nvme_identify_ns_list(const struct nvme_subsys *s, uint32_t after, uint8_t *out)
{
    memset(out, 0, ID_LEN);
    size_t n = 0;
    for (size_t i = 0; s && i < s->nns && n < ID_LEN / 4; i++)
        if (s->ns[i].nsid > after && s->ns[i].vol)
            le32_put(out + 4 * n++, s->ns[i].nsid);
}
