/* Controls for the transport stubs used by the iscsi-config unit tests. */
#ifndef TEST_CONFIG_STUBS_H
#define TEST_CONFIG_STUBS_H

#include <stddef.h>

struct stub_state {
    char sessions[8][256]; /* target IQN of each logged-in session */
    size_t n_sessions;
    unsigned closed;
    unsigned listens, unlistens;
    char last_listen[128];
    char probe_busy[64];   /* iscsi_server_probe of an address containing this: -EADDRINUSE */
    int lus_live;          /* stub LUs not yet freed */
    unsigned luns_changed; /* REPORTED LUNS DATA HAS CHANGED raised */
};
extern struct stub_state stub;

struct scsi_lu;
struct scsi_lu_params;
const struct scsi_lu_params *stub_lu_params(const struct scsi_lu *lu);

#endif
