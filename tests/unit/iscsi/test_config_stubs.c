/* Stand-ins for the iSCSI transport's half of iscsi_runtime.h, so the
 * configuration can be tested without sockets: a settable session table
 * and a record of listener calls. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iscsi/iscsi_runtime.h"
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
        snprintf(s[i].target, sizeof(s[i].target), "%s", stub.sessions[i]);
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
