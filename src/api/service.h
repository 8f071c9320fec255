/*
 * Services (TrueNAS service.* methods) for the front-ends: "iscsitarget"
 * and "nbd". Each module registers its operations once at start-up; the
 * API then offers service.query, service.started, service.start,
 * service.stop, service.restart, service.reload and service.update
 * ({enable}) over them.
 *
 *   static const struct service_ops nbd_service = {
 *       .start = nbd_service_start,    // open listeners (0 or -errno, logged)
 *       .stop = nbd_service_stop,      // close listeners and sessions
 *       .reload = NULL,                // NULL: reload = nothing to do
 *       .running = nbd_service_running,
 *   };
 *   service_register("nbd", &nbd_service);   // after service_init()
 *
 * Operations run on an API thread, one at a time per daemon (a lock
 * serializes them), and may block. `enable` is stored in the config DB
 * (settings "service.<name>.enable", default true): blockd calls
 * service_apply_enabled() after start-up to stop the services disabled.
 */
#ifndef BLOCKD_API_SERVICE_H
#define BLOCKD_API_SERVICE_H

#include <stdbool.h>

struct service_ops {
    int (*start)(void);    /* required; 0 or -errno */
    int (*stop)(void);     /* required; 0 or -errno */
    int (*reload)(void);   /* optional: apply pending configuration */
    bool (*running)(void); /* required */
};

#define SERVICE_MAX 8

/* Register the service.* methods. Start-up only, before db_open(). */
void service_init(void);
/* Add a service (ops must outlive the process). Start-up only. 0, -EEXIST, -ENOSPC. */
int service_register(const char *name, const struct service_ops *ops);
/* Stop the services whose stored enable is false (after db_open and the
 * modules started). */
void service_apply_enabled(void);

#endif
