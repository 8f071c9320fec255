/*
 * The NVMe-oF target's configuration: the nvmet.* objects (TrueNAS 25.10
 * shapes: global, subsys, namespace, port, host, host_subsys,
 * port_subsys), share.nvme.*, the CONF_NVME part the target serves
 * (nvme_view.h) and the ports' listeners, whose accepted sockets go to
 * nvme_target_accept (nvme_target.h).
 *
 * Start-up: nvme_config_init() before db_open (schema, methods, dataset
 * hooks, the CONF_NVME subscriber); nvme_config_start() once the DB is
 * open and the target initialised: makes the basenqn on the first start,
 * publishes the part and opens the listeners (one per enabled port, and
 * the discovery listener). nvme_config_stop() withdraws every subsystem
 * and closes the listeners. Main thread (or service.* API threads).
 */
#ifndef BLOCKD_NVME_CONFIG_NVME_CONFIG_H
#define BLOCKD_NVME_CONFIG_NVME_CONFIG_H

void nvme_config_init(void);
/* 0 or -errno (logged). */
int nvme_config_start(void);
void nvme_config_stop(void);

#endif
