/*
 * gateway/ internals shared by gateway.c (membership) and gateway_lu.c
 * (LU identity, lock ownership → ALUA). Not for other modules.
 */
#ifndef BLOCKD_GATEWAY_INTERNAL_H
#define BLOCKD_GATEWAY_INTERNAL_H

#include <pthread.h>
#include <rados/librados.h>
#include <stdbool.h>
#include <stddef.h>

#include "gateway/gateway.h"

/* Membership table and the addresses fenced by this member: under gw_mu,
 * never held across a cluster call. */
extern pthread_mutex_t gw_mu;

/* The member whose client address is addr (ONLINE or not), under gw_mu:
 * its id, or 0. *fenced: the address is blocklisted, or belonged to a
 * member that went OFFLINE or restarted (its locks may be broken). */
unsigned gw_member_of_addr_locked(const char *addr, bool *fenced);
/* The membership, sorted by id, under gw_mu (gateway_members without the
 * lock). */
size_t gw_members_locked(struct gateway_member *out, size_t max);

/* One pass over the attached LUs: read each image's lock owner, break the
 * lock of a fenced owner, update the ALUA view and raise 2A/06 where it
 * changed. Membership thread only (blocks on the cluster). */
void gw_lu_pass(void);
/* Drop every attached LU's volume reference (at stop). */
void gw_lu_shutdown(void);
/* This member rejoined with a new client (its images were reopened on
 * it): reload every attached LU's shared reservations on the new client
 * (in the background). Membership thread. */
void gw_lu_reconnected(void);

/* Monotonic milliseconds. */
uint64_t gw_now_ms(void);

#endif
