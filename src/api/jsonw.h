/*
 * JSON text for API responses.
 *
 * api_json_dumps writes what json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY)
 * writes, byte for byte, without printf for numbers.
 *
 * Saved texts: an object registered with api_json_memo_set is written from
 * the text saved when it was registered, without walking it. That is for
 * long-lived rows that many responses share (the row caches of the config
 * queries): a TrueNAS client lists every LUN mapping before each share it
 * creates, and walking a thousand cached rows is mostly cache misses. The
 * registry holds a reference, so a registered object cannot be freed and
 * its address reused while registered. A registered object must not change
 * until api_json_memo_clear; the row caches only ever replace rows.
 */
#ifndef BLOCKD_API_JSONW_H
#define BLOCKD_API_JSONW_H

#include <jansson.h>
#include <stddef.h>

/* Compact text of v, NUL-terminated, malloc'd; its length in *len when
 * len is not NULL. NULL when out of memory or v holds NaN, an infinity or
 * nesting deeper than 2048 (errno ENOMEM), or when the text would be longer
 * than the per-call memory budget (callmem_budget(); errno E2BIG). */
char *api_json_dumps(json_t *v, size_t *len);

/* Save obj's text now and use it whenever obj is written (takes a
 * reference). Registering a registered object again does nothing.
 * 0 or -ENOMEM / -EINVAL. */
int api_json_memo_set(json_t *obj);

/* Forget obj's saved text and drop the reference; no-op if unregistered. */
void api_json_memo_clear(json_t *obj);

/* Number of registered objects (tests). */
size_t api_json_memo_count(void);

#endif
