/*
 * system.* (TrueNAS): which server and which API level a client talks to.
 * blockd answers as itself (product "blockd") with the TrueNAS API level
 * it follows (system.version_short: "25.10.0").
 */
#ifndef BLOCKD_API_SYSTEM_H
#define BLOCKD_API_SYSTEM_H

/* Register system.info, system.version, system.version_short,
 * system.product_type, system.ready, system.state. Start-up only. */
void system_init(void);

#endif
