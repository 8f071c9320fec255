/* The installed table of the API's stored objects (store.h). */
#include "api/store.h"

#include <errno.h>
#include <stdatomic.h>

#include "core/log.h"

static const struct api_store_ops *installed;

void api_store_set(const struct api_store_ops *ops)
{
    installed = ops;
}

/* ---- the table before one is installed: every call fails ---- */

static void missing(void)
{
    static atomic_bool logged;
    if (!atomic_exchange(&logged, true))
        log_error("api: no store for keys, accounts and services (apistore_init not called)");
}

static int none_key_list(int64_t id, struct api_key_rec **out, size_t *n)
{
    missing();
    *out = NULL;
    *n = 0;
    return -ENOSYS;
}
static int none_key_create(struct api_key_rec *r, api_key_hash_fn make_hash, void *arg)
{
    missing();
    return -ENOSYS;
}
static int none_key_update(int64_t id, const char *name, unsigned roles)
{
    missing();
    return -ENOSYS;
}
static int none_key_delete(int64_t id, bool *existed)
{
    missing();
    *existed = false;
    return -ENOSYS;
}
static int none_key_by_hash(const char *hash, struct api_key_rec *out, char *stored)
{
    missing();
    return -ENOSYS;
}
static bool none_key_exists(int64_t id)
{
    missing();
    return false;
}
static int none_account_get(const char *username, struct api_account_rec *out, char *hash,
                            size_t len)
{
    missing();
    return -ENOSYS;
}
static bool none_account_current(int64_t id, int64_t pwgen)
{
    missing();
    return false;
}
static int none_account_list(struct api_account_rec **out, size_t *n)
{
    missing();
    *out = NULL;
    *n = 0;
    return -ENOSYS;
}
static int none_account_set_hash(const char *username, const char *hash, int64_t now, int64_t *id,
                                 bool *created)
{
    missing();
    return -ENOSYS;
}
static int none_account_delete(const char *username, bool *existed)
{
    missing();
    *existed = false;
    return -ENOSYS;
}
static int none_service_enable_get(const char *name)
{
    return -ENOENT; /* never stored: services default to enabled */
}
static int none_service_enable_put(const char *name, int64_t id, bool on)
{
    missing();
    return -ENOSYS;
}

static const struct api_store_ops none = {
    .key_list = none_key_list,
    .key_create = none_key_create,
    .key_update = none_key_update,
    .key_delete = none_key_delete,
    .key_by_hash = none_key_by_hash,
    .key_exists = none_key_exists,
    .account_get = none_account_get,
    .account_current = none_account_current,
    .account_list = none_account_list,
    .account_set_hash = none_account_set_hash,
    .account_delete = none_account_delete,
    .service_enable_get = none_service_enable_get,
    .service_enable_put = none_service_enable_put,
};

const struct api_store_ops *api_store(void)
{
    return installed ? installed : &none;
}
