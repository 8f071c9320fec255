/*
 * The API's own stored objects: API keys, local accounts and the services'
 * enable settings, as C structs behind a table of functions.
 *
 * api/ (auth.c, account.c, service.c) calls these; control/apistore.c
 * implements them with SQL on the one transaction path (control/cfgtx.h)
 * and installs the table at startup (apistore_init(), before db_open). So
 * api/ never includes control/: the libraries' dependencies run one way,
 * config -> api, and each links without relying on link order.
 *
 * Every function takes the DB lock itself (never held on return), returns
 * 0 or -errno unless said otherwise, and may be called from any API or
 * worker thread. Before a table is installed every call fails with
 * -ENOSYS (logged once).
 */
#ifndef BLOCKD_API_STORE_H
#define BLOCKD_API_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define API_KEY_NAME_MAX 200
#define API_KEY_HASH_LEN 64 /* SHA-256 in hex */
#define API_USER_NAME_MAX 64

/* An API key as stored (never the key; the hash only where asked for). */
struct api_key_rec {
    int64_t id;
    char name[API_KEY_NAME_MAX + 1];
    char username[API_USER_NAME_MAX + 1];
    int64_t created_at; /* ms since the epoch */
    bool has_expiry;
    int64_t expires_at; /* ms since the epoch, when has_expiry */
    unsigned roles;     /* enum api_role bits (api/api.h); keys from before roles: FULL */
};

/* A local account as stored (never the hash). */
struct api_account_rec {
    int64_t id;
    char username[API_USER_NAME_MAX + 1];
    int64_t pwgen;                           /* bumped by each password change */
    int64_t created_at, password_changed_at; /* ms since the epoch */
};

/* Computes the stored hash of a new key once its id is known (the key
 * embeds the id). Fills hash (API_KEY_HASH_LEN + 1 bytes). 0 or -errno. */
typedef int (*api_key_hash_fn)(int64_t id, char *hash, void *arg);

struct api_store_ops {
    /* Every key ordered by id (id == 0) or only key id: a new array in
     * *out (free()), *n entries. */
    int (*key_list)(int64_t id, struct api_key_rec **out, size_t *n);
    /* Insert r in one transaction that also stores make_hash's hash; the
     * new id and created_at (now) are set in *r. -EEXIST when the name is
     * taken (nothing stored). */
    int (*key_create)(struct api_key_rec *r, api_key_hash_fn make_hash, void *arg);
    /* Replace key id's name (when name is not NULL) and roles (when not
     * 0) in one transaction; -ENOENT when there is no such key, -EEXIST
     * when the name is taken. */
    int (*key_update)(int64_t id, const char *name, unsigned roles);
    /* Delete key id in one transaction; *existed whether it was there. */
    int (*key_delete)(int64_t id, bool *existed);
    /* The key whose stored hash is hash: 1 with *out and its stored hash in
     * stored (API_KEY_HASH_LEN + 1 bytes), 0 when there is none, -errno. */
    int (*key_by_hash)(const char *hash, struct api_key_rec *out, char *stored);
    /* Whether key id still exists (false on error). */
    bool (*key_exists)(int64_t id);

    /* The account username: 1 with *out and its password hash in hash
     * (len bytes), 0 when there is none, -errno. */
    int (*account_get)(const char *username, struct api_account_rec *out, char *hash, size_t len);
    /* Whether account id exists with password generation pwgen. */
    bool (*account_current)(int64_t id, int64_t pwgen);
    /* Every account ordered by id: a new array in *out (free()). */
    int (*account_list)(struct api_account_rec **out, size_t *n);
    /* Create username with hash, or replace its hash (pwgen bumped), at
     * time now (ms), in one transaction: *id and *created say which. */
    int (*account_set_hash)(const char *username, const char *hash, int64_t now, int64_t *id,
                            bool *created);
    /* Delete account username in one transaction; *existed as above. */
    int (*account_delete)(const char *username, bool *existed);

    /* Service name's stored enable flag: 1 on, 0 off, -ENOENT never
     * stored, -errno. */
    int (*service_enable_get)(const char *name);
    /* Store service name's enable flag (service id, for the change record)
     * in one transaction. */
    int (*service_enable_put)(const char *name, int64_t id, bool on);
};

/* Install the table (ops must outlive the process). Startup only. */
void api_store_set(const struct api_store_ops *ops);
/* The installed table, or a table whose every function fails -ENOSYS. */
const struct api_store_ops *api_store(void);

#endif
