/*
 * Metrics and the status page on the API (WebSocket) listener.
 *
 * GET /metrics: Prometheus text format (version 0.0.4), readable with an
 * API key ("Authorization: Bearer <key>"; 401 without a valid one). GET /ui:
 * the status page (src/daemon/ui.html, embedded at build time), which logs
 * in with an API key over the WebSocket and polls core.metrics.
 * Every metric is listed in docs/metrics.md.
 *
 * metrics_init(): registers the HTTP routes and the core.metrics method;
 * call at start-up before db_open() and api_ws_start(). Rendering runs on
 * the requesting API thread; it reads the per-reactor I/O counters
 * (core/iostats.h) without stopping any reactor.
 */
#ifndef BLOCKD_DAEMON_METRICS_H
#define BLOCKD_DAEMON_METRICS_H

#include <stddef.h>

void metrics_init(void);

/* The Prometheus text (malloc'd, NUL-terminated; *len its length), or
 * NULL when out of memory. Blocking (DB lock for the pool list). */
char *metrics_render(size_t *len);

#endif
