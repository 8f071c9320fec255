/* Dataset name rules: "pool/child[/child…][@snap]". */
#ifndef BLOCKD_STORE_NAMES_H
#define BLOCKD_STORE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* Whole dataset name (with any @snap), in bytes. */
#define NAME_DATASET_MAX 1024

/* Components are [A-Za-z0-9_.:-]+, not "." or "..", ≤255 bytes; no empty
 * components, no leading '/', no NUL; at least two components (pool/name);
 * at most NAME_DATASET_MAX bytes. allow_snapshot: allow one "@snap" suffix
 * (a component itself). 0 or -EINVAL with a human reason in why (always
 * NUL-terminated when whylen > 0; why may be NULL). Pure; any thread. */
int name_check_dataset(const char *name, bool allow_snapshot, char *why, size_t whylen);
int name_check_component(const char *c, size_t len, char *why, size_t whylen);
/* Pool names: one component. */
int name_check_pool(const char *name, char *why, size_t whylen);

#endif
