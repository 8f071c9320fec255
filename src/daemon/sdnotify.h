/*
 * The systemd notification protocol (sd_notify(3)) without libsystemd: one
 * datagram to $NOTIFY_SOCKET per call. Under a plain shell (no
 * NOTIFY_SOCKET) every call does nothing.
 */
#ifndef BLOCKD_DAEMON_SDNOTIFY_H
#define BLOCKD_DAEMON_SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* Send msg ("READY=1", "WATCHDOG=1", "STATUS=…\nREADY=1"). Any thread;
 * synchronous, never blocks (a full socket buffer drops the datagram).
 * Returns 0 (also when there is no NOTIFY_SOCKET) or -errno. */
int sdnotify_send(const char *msg);

/* Is the service manager listening (NOTIFY_SOCKET set)? */
bool sdnotify_enabled(void);

/* The watchdog period systemd asked for ($WATCHDOG_USEC, for this pid per
 * $WATCHDOG_PID when set), in microseconds; 0 when the watchdog is off. */
uint64_t sdnotify_watchdog_usec(void);

#endif
