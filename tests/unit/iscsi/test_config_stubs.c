/* Stand-ins for the iSCSI transport's half of iscsi_runtime.h, so the
 * configuration can be tested without sockets: a settable session table
 * and a record of listener calls. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iscsi/iscsi_runtime.h"
#include "gateway/gateway.h"
#include "scsi/scsi.h"
#include "test_config_stubs.h"

struct stub_state stub;

int iscsi_sessions_list(struct iscsi_session_info **out)
{
    struct iscsi_session_info *s = calloc(stub.n_sessions ? stub.n_sessions : 1, sizeof(*s));
    if (!s)
        return -ENOMEM;
    for (size_t i = 0; i < stub.n_sessions; i++) {
        snprintf(s[i].initiator, sizeof(s[i].initiator), "iqn.2026-01.test:init%zu", i);
        snprintf(s[i].initiator_addr, sizeof(s[i].initiator_addr), "127.0.0.1:%zu", 40000 + i);
        snprintf(s[i].target, sizeof(s[i].target), "%.*s", (int)sizeof(s[i].target) - 1,
                 stub.sessions[i]);
        s[i].header_digest = true;
        s[i].max_burst_length = 262144;
        s[i].first_burst_length = 65536;
        s[i].immediate_data = true;
        s[i].max_recv_data_segment_length = 262144;
    }
    *out = s;
    return (int)stub.n_sessions;
}

unsigned iscsi_sessions_count_target(const char *iqn)
{
    unsigned n = 0;
    for (size_t i = 0; i < stub.n_sessions; i++)
        if (strcasecmp(stub.sessions[i], iqn) == 0)
            n++;
    return n;
}

unsigned iscsi_sessions_close_target(const char *iqn)
{
    unsigned n = 0;
    for (size_t i = 0; i < stub.n_sessions;) {
        if (strcasecmp(stub.sessions[i], iqn) == 0) {
            memmove(&stub.sessions[i], &stub.sessions[i + 1],
                    (stub.n_sessions - i - 1) * sizeof(stub.sessions[0]));
            stub.n_sessions--;
            n++;
        } else {
            i++;
        }
    }
    stub.closed += n;
    return n;
}

int iscsi_server_listen(const char *addr_port, uint16_t portal_tag)
{
    stub.listens++;
    snprintf(stub.last_listen, sizeof(stub.last_listen), "%s#%u", addr_port, portal_tag);
    return 0;
}

int iscsi_server_unlisten(const char *addr_port)
{
    stub.unlistens++;
    return 0;
}

int iscsi_server_retag(const char *addr_port, uint16_t portal_tag)
{
    snprintf(stub.last_listen, sizeof(stub.last_listen), "%s#%u", addr_port, portal_tag);
    return 0;
}

int iscsi_server_probe(const char *addr_port)
{
    /* "in use" on demand: the refusal path without sockets */
    return stub.probe_busy[0] && strstr(addr_port, stub.probe_busy) ? -EADDRINUSE : 0;
}

/* A counting stand-in for scsi/'s logical unit: the config's job is to
 * create one per enabled, mapped extent, share it between views, and drop
 * every reference it took. */
struct scsi_lu {
    int refs;
    struct volume *vol;
    struct scsi_lu_params params;
};

int scsi_lu_new(struct volume *vol, const struct scsi_lu_params *p, struct scsi_lu **out)
{
    if (p->block_size && volume_size(vol) % p->block_size != 0)
        return -EINVAL;
    struct scsi_lu *lu = calloc(1, sizeof(*lu));
    if (!lu)
        return -ENOMEM;
    lu->refs = 1;
    lu->vol = vol;
    lu->params = *p;
    lu->params.pr_blob = NULL;
    volume_ref(vol);
    stub.lus_live++;
    *out = lu;
    return 0;
}

void scsi_lu_ref(struct scsi_lu *lu)
{
    __atomic_add_fetch(&lu->refs, 1, __ATOMIC_RELAXED);
}

void scsi_lu_unref(struct scsi_lu *lu)
{
    if (__atomic_sub_fetch(&lu->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        volume_unref(lu->vol);
        free(lu);
        stub.lus_live--;
    }
}

void scsi_lu_raise_ua(struct scsi_lu *lu, enum scsi_ua ua)
{
    if (ua == SCSI_UA_LUNS_CHANGED)
        stub.luns_changed++;
}

const struct scsi_lu_params *stub_lu_params(const struct scsi_lu *lu)
{
    return &lu->params;
}

void scsi_lu_set_readonly(struct scsi_lu *lu, bool ro)
{
    lu->params.readonly = ro;
}

struct volume *scsi_lu_volume(const struct scsi_lu *lu)
{
    return lu->vol;
}

/* gateway/: no gateway group in these tests. */
void gateway_lu_params(struct volume *vol, struct scsi_lu_params *p)
{
    (void)vol, (void)p;
}

void gateway_lu_attach(struct scsi_lu *lu, struct volume *vol)
{
    (void)lu, (void)vol;
}
