/*
 * The systemd watchdog, fed by the reactors: every period/4 a thread posts
 * a tick to each reactor and sends WATCHDOG=1 only when every reactor has
 * answered the previous tick. A reactor stuck in a handler (a deadlock, a
 * blocking call on its thread, an endless loop) stops the pings, and
 * systemd restarts the daemon after WatchdogSec.
 */
#ifndef BLOCKD_DAEMON_WATCHDOG_H
#define BLOCKD_DAEMON_WATCHDOG_H

/* Start the watchdog thread if systemd asked for one ($WATCHDOG_USEC);
 * otherwise do nothing. Call once, after reactors_start, from the main
 * thread. Returns 0 or -errno (thread creation). */
int watchdog_start(void);

/* Stop and join the thread (a no-op if it was not started). Call before
 * reactors_stop: ticks still queued on a reactor are static memory and
 * harmless when that reactor drains its inbox. */
void watchdog_stop(void);

#endif
