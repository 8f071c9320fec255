/* events.h: the subscriber table and delivery. */
#include <errno.h>

#include "control/events.h"
#include "core/log.h"

static struct event_subscriber subs[EVENTS_MAX];
static unsigned n_subs;

int events_subscribe(const struct event_subscriber *s)
{
    if (n_subs == EVENTS_MAX) {
        log_error("events: more than %d subscribers (%s)", EVENTS_MAX, s->name);
        return -ENOSPC;
    }
    subs[n_subs++] = *s;
    return 0;
}

int events_emit(const struct event *ev)
{
    for (unsigned i = 0; i < n_subs; i++) {
        if (!(subs[i].types & EV_BIT(ev->type)))
            continue;
        int rc = subs[i].fn(ev, subs[i].arg);
        if (rc < 0 && ev->type == EV_RENAME_UPDATE)
            return rc;
    }
    return 0;
}

uint32_t events_config_committed(const struct cfg_changes *changes, uint32_t kinds)
{
    struct event ev = {.type = EV_CONFIG_COMMITTED, .config = changes};
    uint32_t reached = 0;
    for (unsigned i = 0; i < n_subs; i++) {
        const struct event_subscriber *s = &subs[i];
        if (!(s->types & EV_BIT(EV_CONFIG_COMMITTED)) || !s->config_kinds)
            continue;
        if (!(s->config_kinds & kinds) && !changes->overflow)
            continue;
        s->fn(&ev, s->arg);
        reached |= 1u << i;
    }
    return reached;
}

void events_config_after(uint32_t reached)
{
    struct event ev = {.type = EV_CONFIG_AFTER};
    for (unsigned i = 0; i < n_subs; i++)
        if ((reached & (1u << i)) && (subs[i].types & EV_BIT(EV_CONFIG_AFTER)))
            subs[i].fn(&ev, subs[i].arg);
}
