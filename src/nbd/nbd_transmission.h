/*
 * The NBD transmission phase (nbd_transmission.c): requests parsed from
 * the input, validated in one place (nbd_request_validate), submitted to
 * the volume (store/volume.h), and answered as each completes (simple or
 * structured replies, out of order).
 *
 * Contract: request slots come from a per-connection free list and payload
 * buffers from core/bufpool, so the steady state allocates nothing per
 * request. A connection holds at most max_inflight requests and
 * NBD_HELD_MAX payload bytes, and all connections together at most the
 * payload budget (nbd_set_payload_budget); past a bound, or while the
 * client leaves too many replies unread, the connection pauses its input
 * and resumes from a completion or a retry timer. Completions run on the
 * owner reactor (vreq.owner). Thread: the owner reactor only, except
 * nbd_set_payload_budget / nbd_payload_held.
 */
#ifndef BLOCKD_NBD_TRANSMISSION_H
#define BLOCKD_NBD_TRANSMISSION_H

#include "nbd/nbd_conn_internal.h"

/* Prepare nc's transmission state (timers) at accept, before it is
 * adopted by a reactor. */
void nbd_transmission_init(struct nbd_conn *nc);
/* Read one request from the input and submit it (a WRITE first collects
 * its payload). 0 progress, 1 need more input or paused, -ECONNRESET
 * after DISC with nothing in flight (orderly), other <0 close. */
int nbd_transmission_request(struct nbd_conn *nc);
/* Go on collecting the payload of nc->rx_req; submits the WRITE once it is
 * all there. 0 done, 1 need more input, <0 close. */
int nbd_transmission_payload(struct nbd_conn *nc);
/* The payload of a refused WRITE has been skipped: send its error reply. */
void nbd_transmission_skipped(struct nbd_conn *nc);
/* Shutdown: close gracefully (after the replies are sent) once no request
 * started by the client is left. nc->draining is set. */
void nbd_transmission_drain_check(struct nbd_conn *nc);
/* The connection is closing: stop its retry timer, drop a WRITE whose
 * payload was still arriving. Requests in flight finish on their own. */
void nbd_transmission_close(struct nbd_conn *nc);
/* The connection is being freed (nothing in flight): free its slots. */
void nbd_transmission_free(struct nbd_conn *nc);

#endif
