/* Caps on what API clients can hold (see limits.h). */
#include "core/bounds.h"

static const struct {
    const char *flag, *what;
    unsigned def;
} info[LIMIT_COUNT] = {
    [LIMIT_SUBSCRIPTIONS] = {"--max-subscriptions", "event subscriptions per connection",
                             LIMIT_DEFAULT_SUBSCRIPTIONS},
    [LIMIT_API_KEYS] = {"--max-api-keys", "API keys", LIMIT_DEFAULT_API_KEYS},
    [LIMIT_POOLS] = {"--max-pools", "pools", LIMIT_DEFAULT_POOLS},
    [LIMIT_DATASETS] = {"--max-datasets", "datasets", LIMIT_DEFAULT_DATASETS},
    [LIMIT_SNAPSHOTS] = {"--max-snapshots", "snapshots per dataset", LIMIT_DEFAULT_SNAPSHOTS},
    [LIMIT_SHARE_OBJECTS] = {"--max-share-objects", "share objects of one kind",
                             LIMIT_DEFAULT_SHARE_OBJECTS},
};

static unsigned values[LIMIT_COUNT]; /* 0: the default */

unsigned limit_get(enum limit_kind k)
{
    unsigned v = __atomic_load_n(&values[k], __ATOMIC_RELAXED);
    return v ? v : info[k].def;
}

void limit_set(enum limit_kind k, unsigned v)
{
    __atomic_store_n(&values[k], v, __ATOMIC_RELAXED);
}

const char *limit_flag(enum limit_kind k)
{
    return info[k].flag;
}

const char *limit_what(enum limit_kind k)
{
    return info[k].what;
}
