/*
 * The gateway group's NVMe/TCP paths (gwnvme.c): ANA groups and states
 * from the membership, and the members' ports in each other's discovery
 * log (docs/ha.md "NVMe: ANA").
 *
 * gwnvme_start: install the group's path view in the NVMe target when the
 * group is on (nothing otherwise). Main thread, after gateway_start,
 * before the target serves.
 * gwnvme_ports_update: put this member's NVMe ports (as published) in its
 * membership record (the next heartbeat writes them). Any thread,
 * non-blocking; the configuration store calls it every round.
 */
#ifndef BLOCKD_GWSYNC_GWNVME_H
#define BLOCKD_GWSYNC_GWNVME_H

void gwnvme_start(void);
void gwnvme_ports_update(void);

#endif
