/*
 * Secrets out of what others may read: job arguments and results, as
 * core.get_jobs and job events show them to every caller allowed to read
 * jobs.
 *
 * A value is a secret when its object key is one of the secret field
 * names (API keys, passwords, CHAP secret/peersecret, cephx keys, TLS
 * PSKs: redact.c has the list) or when it is a positional parameter a
 * method declares secret (auth.login's password, auth.login_with_api_key's
 * key), also inside a core.bulk's calls. Secrets become "********", as
 * TrueNAS shows them.
 *
 * Pure functions; any thread.
 */
#ifndef BLOCKD_API_REDACT_H
#define BLOCKD_API_REDACT_H

#include <jansson.h>
#include <stdbool.h>

#define REDACTED "********"

/* Whether an object key names a secret ("password", "secret", "key", …). */
bool redact_field_is_secret(const char *name);

/* A copy of v (any JSON; NULL: NULL) with every secret field replaced,
 * at any depth. A new reference, or NULL when out of memory. */
json_t *redact_value(const json_t *v);

/* A copy of method's params (a JSON array) with secret fields and its
 * secret positional parameters replaced; for core.bulk, also those of
 * every call it carries. A new reference, or NULL when out of memory. */
json_t *redact_params(const char *method, const json_t *params);

#endif
